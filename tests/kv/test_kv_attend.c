/* test_kv_attend.c: the f32/f16 caches end to end: random rows appended in random chunks with
 * position gaps, random queries; attention must equal a float64 naive reference over what the
 * cache holds (for f32: exactly the input) to 1e-5 relative, for many GQA shapes, windows, pages. */
#include "../vq_test.h"
#include "kv/kv.h"
#include "kv_ref.h"
#include <omp.h>

/* attends on different layers from several threads at once give the same bits as one at a
 * time, and the store's own threading does not change the bits either */
static void test_concurrency(vq_rng *rng) {
    const char *specs[] = {"q4_0:rotate=1;window=8", "kivi:residual=16", "f16"};
    for (size_t si = 0; si < VQ_ARRAY_LEN(specs); si++) {
        vq_kv_dims dims = {.n_layers = 6, .n_heads = 9, .n_kv_heads = 3, .head_dim = 64, .max_ctx = 700};
        vq_err err;
        vq_kv *kv = vq_kv_create_str(specs[si], &dims, vq_rng_u64(rng), &err);
        CHECKF(kv != NULL, "%s: %s", specs[si], err.msg);
        if (!kv) continue;
        const int w = 3 * 64, n = 600, nq = 40, qw = 9 * 64;
        float *k = malloc(sizeof(float) * n * w), *v = malloc(sizeof(float) * n * w);
        float *q = malloc(sizeof(float) * nq * qw);
        float *o1 = malloc(sizeof(float) * 6 * nq * qw), *o2 = malloc(sizeof(float) * 6 * nq * qw);
        float *o3 = malloc(sizeof(float) * 6 * nq * qw);
        int qp[40];
        for (int i = 0; i < nq; i++) qp[i] = 560 + i;
        fill_uniform(rng, q, (size_t)nq * qw, 1);
        for (int l = 0; l < 6; l++) {
            fill_uniform(rng, k, (size_t)n * w, 1);
            fill_uniform(rng, v, (size_t)n * w, 1);
            CHECK(vq_kv_append(kv, l, 0, n, k, v, &err) == VQ_OK);
        }
        int nt = omp_get_max_threads();
        omp_set_num_threads(1);
        for (int l = 0; l < 6; l++) vq_kv_attend(kv, l, nq, qp, q, o1 + (size_t)l * nq * qw, &err);
        omp_set_num_threads(nt > 1 ? nt : 2);
        for (int l = 0; l < 6; l++) vq_kv_attend(kv, l, nq, qp, q, o2 + (size_t)l * nq * qw, &err);
        int bad = 0;
#pragma omp parallel for num_threads(3) reduction(+ : bad)
        for (int l = 0; l < 6; l++) {
            vq_err e2;
            bad += vq_kv_attend(kv, l, nq, qp, q, o3 + (size_t)l * nq * qw, &e2) != VQ_OK;
        }
        omp_set_num_threads(nt);
        CHECK(bad == 0);
        CHECKF(memcmp(o1, o2, sizeof(float) * 6 * nq * qw) == 0, "%s: threads change the result", specs[si]);
        CHECKF(memcmp(o1, o3, sizeof(float) * 6 * nq * qw) == 0, "%s: concurrent attends differ", specs[si]);
        vq_kv_destroy(kv);
        free(k); free(v); free(q); free(o1); free(o2); free(o3);
    }
}

static void run_case(vq_rng *rng, const char *spec, int L, int NH, int H, int d, int rows_target,
                     int n_q) {
    vq_kv_dims dims = {.n_layers = L, .n_heads = NH, .n_kv_heads = H, .head_dim = d,
                       .max_ctx = rows_target + 8};
    vq_err err;
    vq_kv *kv = vq_kv_create_str(spec, &dims, vq_rng_u64(rng), &err);
    CHECKF(kv != NULL, "create %s: %s", spec, err.msg);
    if (!kv) return;
    const int w = H * d;
    float *K = malloc(sizeof(float) * (size_t)rows_target * w);
    float *V = malloc(sizeof(float) * (size_t)rows_target * w);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)rows_target);
    for (int l = 0; l < L; l++) {
        fill_uniform(rng, K, (size_t)rows_target * w, 2.0f);
        fill_uniform(rng, V, (size_t)rows_target * w, 1.0f);
        int r = 0, p = (int)(vq_rng_u64(rng) % 5);
        while (r < rows_target) {
            int n = 1 + (int)(vq_rng_u64(rng) % (vq_rng_u64(rng) % 2 ? 7 : 90));
            n = VQ_MIN(n, rows_target - r);
            vq_status st = vq_kv_append(kv, l, p, n, K + (size_t)r * w, V + (size_t)r * w, &err);
            CHECKF(st == VQ_OK, "append %s: %s", spec, err.msg);
            for (int i = 0; i < n; i++) pos[r + i] = p + i;
            r += n;
            p += n + (vq_rng_u64(rng) % 4 == 0 ? (int)(vq_rng_u64(rng) % 6) : 0);  /* gaps */
        }
        CHECK(vq_kv_rows(kv, l) == rows_target);
        /* what the cache holds, in storage order; f32 must hold the input exactly */
        float *Kr = malloc(sizeof(float) * (size_t)rows_target * w);
        float *Vr = malloc(sizeof(float) * (size_t)rows_target * w);
        int32_t *pr = malloc(sizeof(int32_t) * (size_t)rows_target);
        CHECK(vq_kv_read(kv, l, Kr, Vr, pr, &err) == VQ_OK);
        CHECK(memcmp(pr, pos, sizeof(int32_t) * (size_t)rows_target) == 0);
        if (strncmp(spec, "f32", 3) == 0 && !strstr(spec, "wprec=16") && !strstr(spec, "window")) {
            CHECK(memcmp(Kr, K, sizeof(float) * (size_t)rows_target * w) == 0);
            CHECK(memcmp(Vr, V, sizeof(float) * (size_t)rows_target * w) == 0);
        }
        /* queries: positions anywhere from before the first row to past the last */
        float *Q = malloc(sizeof(float) * (size_t)n_q * NH * d);
        float *O = malloc(sizeof(float) * (size_t)n_q * NH * d);
        double *R = malloc(sizeof(double) * (size_t)n_q * NH * d);
        int *qp = malloc(sizeof(int) * (size_t)n_q);
        fill_uniform(rng, Q, (size_t)n_q * NH * d, 2.0f);
        for (int i = 0; i < n_q; i++)
            qp[i] = i == 0 ? pos[rows_target - 1] : (int)(vq_rng_u64(rng) % (pos[rows_target - 1] + 3)) - 1;
        CHECK(vq_kv_attend(kv, l, n_q, qp, Q, O, &err) == VQ_OK);
        ref_attention(rows_target, Kr, Vr, pr, H, NH, d, n_q, qp, Q, R);
        double e = rel_err(n_q, NH, d, O, R);
        CHECKF(e < 1e-5, "%s L%d NH%d H%d d%d rows%d nq%d: rel err %.3g", spec, l, NH, H, d,
               rows_target, n_q, e);
        /* against the raw input too: f16 storage is within fp16 rounding */
        ref_attention(rows_target, K, V, pos, H, NH, d, n_q, qp, Q, R);
        double e2 = rel_err(n_q, NH, d, O, R);
        CHECKF(e2 < 1e-2, "%s vs input: rel err %.3g", spec, e2);
        free(Q); free(O); free(R); free(qp); free(Kr); free(Vr); free(pr);
    }
    CHECKF(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv), "%s: bytes %zu vs tally %zu", spec,
           vq_kv_bytes(kv), vq_kv_bytes_tally(kv));
    vq_kv_destroy(kv);
    free(K); free(V); free(pos);
}

int main(void) {
    uint64_t seed = test_seed();
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    const char *specs[] = {"f32", "f16", "f32:window=5,wprec=32", "f16:window=40",
                           "f32:page=16", "f16:window=300,page=32", "k=f32;v=f16", "k=f16;v=f32;window=3"};
    const int shapes[][3] = {{1, 1, 64}, {4, 2, 64}, {9, 3, 64}, {8, 1, 48}, {6, 2, 128}, {2, 2, 5}};
    for (size_t s = 0; s < VQ_ARRAY_LEN(specs); s++)
        for (size_t g = 0; g < VQ_ARRAY_LEN(shapes); g++) {
            int rows = 1 + (int)(vq_rng_u64(&rng) % 700);
            int nq = 1 + (int)(vq_rng_u64(&rng) % 40);
            run_case(&rng, specs[s], 2, shapes[g][0], shapes[g][1], shapes[g][2], rows, nq);
        }
    test_concurrency(&rng);
    return vq_t_done();
}
