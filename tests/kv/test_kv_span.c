/* test_kv_span.c: sliding-window layers (vq_kv_dims.span, Gemma 3's local attention). A query at
 * position p in a layer with span W sees exactly the rows with p - W < pos <= p: for every codec,
 * the codes' attention equals float64 attention over the decoded rows (vq_kv_read) that fall in
 * the window, to 1e-5; a layer with span 0 in the same cache still sees every earlier row; the
 * reference switch (vq_kv_set_ref_attend) masks alike; a negative span is refused. Chunks of
 * queries span page boundaries, so whole pages below the window are skipped and partial ones
 * masked. */
#include "../vq_test.h"
#include "kv/kv.h"
#include "kv_ref.h"

static void run(vq_rng *rng, const char *spec, int NH, int H, int d, int span0) {
    const int n = 700, n_q = 24, w = H * d, qw = NH * d;
    int span[2] = { span0, 0 };
    vq_kv_dims dims = {.n_layers = 2, .n_heads = NH, .n_kv_heads = H, .head_dim = d, .max_ctx = n, .span = span};
    vq_err err;
    vq_kv *kv = vq_kv_create_str(spec, &dims, vq_rng_u64(rng), &err);
    CHECKF(kv != NULL, "%s: %s", spec, err.msg);
    if (!kv) return;
    vq_kv_set_ring(kv, 0);   /* queries below go back to early positions: every row must stay (test_kv_ring) */
    span[0] = -5;   /* the cache copied the spans at create */
    float *k = malloc(sizeof(float) * n * w), *v = malloc(sizeof(float) * n * w), *q = malloc(sizeof(float) * n_q * qw);
    float *kd = malloc(sizeof(float) * n * w), *vd = malloc(sizeof(float) * n * w), *o = malloc(sizeof(float) * n_q * qw);
    double *r = malloc(sizeof(double) * n_q * qw);
    int32_t *pos = malloc(sizeof(int32_t) * n);
    int qp[24];
    for (int l = 0; l < 2; l++) {
        fill_uniform(rng, k, (size_t)n * w, 1);
        fill_uniform(rng, v, (size_t)n * w, 1);
        for (int at = 0; at < n;) {   /* chunks of 1..97 rows */
            int c = 1 + (int)(vq_rng_u64(rng) % 97);
            c = c < n - at ? c : n - at;
            CHECK(vq_kv_append(kv, l, at, c, k + (size_t)at * w, v + (size_t)at * w, &err) == VQ_OK);
            at += c;
        }
    }
    for (int i = 0; i < n_q; i++) qp[i] = i < 12 ? 250 + 31 * i : n - 24 + i;   /* early, mid, last rows */
    fill_uniform(rng, q, (size_t)n_q * qw, 2);
    for (int l = 0; l < 2; l++) {
        const int sp = l == 0 ? span0 : 0;
        int rows = vq_kv_rows(kv, l);
        CHECK(vq_kv_read(kv, l, kd, vd, pos, &err) == VQ_OK);
        windowed_ref(rows, kd, vd, pos, H, NH, d, n_q, qp, q, sp, r);
        CHECK(vq_kv_attend(kv, l, n_q, qp, q, o, &err) == VQ_OK);
        double e = rel_err(n_q, NH, d, o, r);
        CHECKF(e < 1e-5, "'%s' NH%d H%d d%d layer %d span %d: rel err %.3g", spec, NH, H, d, l, sp, e);
        vq_kv_set_ref_attend(kv, 1);
        CHECK(vq_kv_attend(kv, l, n_q, qp, q, o, &err) == VQ_OK);
        vq_kv_set_ref_attend(kv, 0);
        e = rel_err(n_q, NH, d, o, r);
        CHECKF(e < 1e-5, "'%s' reference path, layer %d span %d: rel err %.3g", spec, l, sp, e);
        if (l == 0 && sp > 0) {   /* the window changes the answer: unbounded attention differs */
            windowed_ref(rows, kd, vd, pos, H, NH, d, n_q, qp, q, 0, r);
            CHECKF(rel_err(n_q, NH, d, o, r) > 1e-3, "'%s': span %d made no difference", spec, sp);
        }
    }
    vq_kv_destroy(kv);
    free(k); free(v); free(q); free(kd); free(vd); free(o); free(r); free(pos);
}

int main(void) {
    vq_rng rng;
    vq_rng_seed(&rng, vq_t_seed(0x5a11d));
    const char *specs[] = { "f32", "f16", "q8_0", "q4_0:rotate=1;window=8", "turboquant_mse:k=4,v=4",
                            "kivi:residual=16", "f16;page=64", "turboquant_mse:k=3,v=3;sink=4" };
    for (size_t i = 0; i < VQ_ARRAY_LEN(specs); i++) {
        run(&rng, specs[i], 4, 1, 256, 512);   /* Gemma 3 270M: 4 query heads, 1 KV head, 256 wide */
        run(&rng, specs[i], 9, 3, 64, 37);
    }
    int bad[2] = { -1, 0 };
    vq_kv_dims dims = {.n_layers = 2, .n_heads = 4, .n_kv_heads = 1, .head_dim = 64, .max_ctx = 64, .span = bad};
    vq_err err;
    vq_kv *kv = vq_kv_create_str("f16", &dims, 1, &err);
    CHECKF(kv == NULL && strstr(err.msg, "span"), "negative span accepted: %s", kv ? "(made)" : err.msg);
    vq_kv_destroy(kv);
    return vq_t_done();
}
