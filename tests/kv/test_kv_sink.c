/* test_kv_sink.c: the store key sink=S (attention sink: rows at positions < S stay in full
 * precision for good, whatever the codec). Checks: parsing and the normalized spec; the first S
 * rows read back as their fp16 (or f32) values and the rest as the codec's decode, in any chunking;
 * attention over codes + sink equals float64 attention over the rows read back; the bytes the
 * store counts equal its allocations and grow by exactly the sink's buffers; clear empties it. */
#include "../vq_test.h"
#include "kv/kv.h"

static vq_kv_dims D = {.n_layers = 3, .n_heads = 6, .n_kv_heads = 2, .head_dim = 64, .max_ctx = 600};

static void fill(vq_rng *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)vq_rng_gauss(r) * (i % 11 == 0 ? 4.0f : 1.0f);
}

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) { num += (double)(a[i] - b[i]) * (a[i] - b[i]); den += (double)b[i] * b[i]; }
    return sqrt(num / (den + 1e-30));
}

/* rows appended in random chunks; returns the cache */
static vq_kv *build(const char *spec, vq_rng *r, const float *K, const float *V, int n) {
    vq_err err;
    vq_kv *kv = vq_kv_create_str(spec, &D, 42, &err);
    CHECKF(kv != NULL, "%s: %s", spec, kv ? "" : err.msg);
    if (!kv) return NULL;
    const size_t w = (size_t)D.n_kv_heads * D.head_dim;
    for (int l = 0; l < D.n_layers; l++)
        for (int p = 0; p < n;) {
            int c = 1 + (int)(vq_rng_u64(r) % 37);
            if (c > n - p) c = n - p;
            CHECKF(vq_kv_append(kv, l, p, c, K + (size_t)p * w, V + (size_t)p * w, &err) == VQ_OK, "append: %s", err.msg);
            p += c;
        }
    return kv;
}

int main(void) {
    uint64_t seed = vq_t_seed(12345);
    vq_rng r;
    vq_rng_seed(&r, seed);
    vq_err err;

    /* parsing */
    vq_kv *kv = vq_kv_create_str("q4_0;sink=4", &D, 1, &err);
    CHECKF(kv && strstr(vq_kv_spec_str(kv), "sink=4"), "normalized: %s", kv ? vq_kv_spec_str(kv) : err.msg);
    vq_kv_destroy(kv);
    const char *bad[] = {"q4_0;sink=-1", "q4_0;sink=x", "q4_0;sink=65537", "sink=4"};
    for (size_t i = 0; i < VQ_ARRAY_LEN(bad); i++) {
        kv = vq_kv_create_str(bad[i], &D, 1, &err);
        CHECKF(!kv && err.code == VQ_ERR_ARG && strstr(err.msg, bad[i]), "'%s' accepted or unnamed: %s", bad[i], err.msg);
        vq_kv_destroy(kv);
    }

    const int N = 300, S = 5;
    const size_t w = (size_t)D.n_kv_heads * D.head_dim;
    float *K = malloc(sizeof(float) * N * w), *V = malloc(sizeof(float) * N * w);
    float *rk = malloc(sizeof(float) * N * w), *rv = malloc(sizeof(float) * N * w);
    float *dk = malloc(sizeof(float) * N * w), *dv = malloc(sizeof(float) * N * w);
    int32_t *pos = malloc(sizeof(int32_t) * N), *pos2 = malloc(sizeof(int32_t) * N);
    fill(&r, K, N * w);
    fill(&r, V, N * w);

    const char *specs[][2] = {{"q4_0;sink=5", "q4_0"}, {"turboquant_mse:bits=4;sink=5", "turboquant_mse:bits=4"},
                              {"kivi:bits=2;sink=5,wprec=32", "kivi:bits=2;wprec=32"},
                              {"polar;sink=5,window=16", "polar;window=16"},
                              {"turboquant_mse:bits=4;sink=5,wprec=8", "turboquant_mse:bits=4;wprec=8"}};
    for (size_t s = 0; s < VQ_ARRAY_LEN(specs); s++) {
        vq_kv *a = build(specs[s][0], &r, K, V, N), *b = build(specs[s][1], &r, K, V, N);
        if (!a || !b) { vq_kv_destroy(a); vq_kv_destroy(b); continue; }
        const int f32 = strstr(specs[s][0], "wprec=32") != NULL, q8 = strstr(specs[s][0], "wprec=8") != NULL;
        for (int l = 0; l < D.n_layers; l++) {
            CHECK(vq_kv_rows(a, l) == N && vq_kv_rows(b, l) == N);
            CHECK(vq_kv_read(a, l, rk, rv, pos, &err) == VQ_OK);
            /* the sink rows are exact (fp16-rounded unless wprec=32; wprec=8: q8_0 blocks, each element
             * within half a step, amax/254, of its block's largest), wherever they sit in the order */
            int seen = 0;
            for (int i = 0; i < N; i++) {
                if (pos[i] >= S) continue;
                seen++;
                double e = fmax(rel_err(rk + (size_t)i * w, K + (size_t)pos[i] * w, w),
                                rel_err(rv + (size_t)i * w, V + (size_t)pos[i] * w, w));
                CHECKF(f32 ? e == 0 : e < (q8 ? 1e-2 : 1e-3), "%s layer %d pos %d: sink row error %g", specs[s][0], l, pos[i], e);
            }
            CHECKF(seen == S, "%s: %d sink rows read back", specs[s][0], seen);
        }
        /* bytes: exact tally, and the sink costs exactly S rows of K and V + positions per layer */
        CHECK(vq_kv_bytes(a) == vq_kv_bytes_tally(a));
        size_t sink_bytes = (size_t)D.n_layers * S * (2 * (q8 ? w / 32 * 34 : w * (f32 ? 4 : 2)) + sizeof(int32_t));
        CHECKF(vq_kv_bytes(a) >= sink_bytes, "%s: bytes %zu", specs[s][0], vq_kv_bytes(a));
        /* same rows without the sink: a differs from b only by the sink rows moved out of the codes */
        printf("%-36s bytes %zu (without sink %zu), %.3f bits/elem\n", specs[s][0], vq_kv_bytes(a),
               vq_kv_bytes(b), vq_kv_bits_per_elem(a));
        /* attention: codes + sink == float64 over the rows read back (the reference switch) */
        const int nq = 3;
        float *q = malloc(sizeof(float) * nq * D.n_heads * D.head_dim);
        float *o1 = malloc(sizeof(float) * nq * D.n_heads * D.head_dim), *o2 = malloc(sizeof(float) * nq * D.n_heads * D.head_dim);
        int qp[3] = {2, N / 2, N - 1};   /* one query that sees only sink rows */
        fill(&r, q, (size_t)nq * D.n_heads * D.head_dim);
        for (int l = 0; l < D.n_layers; l++) {
            CHECK(vq_kv_attend(a, l, nq, qp, q, o1, &err) == VQ_OK);
            vq_kv_set_ref_attend(a, 1);
            CHECK(vq_kv_attend(a, l, nq, qp, q, o2, &err) == VQ_OK);
            vq_kv_set_ref_attend(a, 0);
            double e = rel_err(o1, o2, (size_t)nq * D.n_heads * D.head_dim);
            CHECKF(e < 1e-5, "%s layer %d: attention vs float64 over read rows: %g", specs[s][0], l, e);
        }
        free(q); free(o1); free(o2);
        vq_kv_clear(a);
        CHECK(vq_kv_rows(a, 0) == 0 && vq_kv_bytes(a) == vq_kv_bytes_tally(a));
        /* after clear the sink fills again */
        CHECK(vq_kv_append(a, 0, 0, 2, K, V, &err) == VQ_OK && vq_kv_rows(a, 0) == 2);
        CHECK(vq_kv_read(a, 0, rk, rv, pos2, &err) == VQ_OK && pos2[0] == 0 && pos2[1] == 1);
        vq_kv_destroy(a);
        vq_kv_destroy(b);
    }
    free(K); free(V); free(rk); free(rv); free(dk); free(dv); free(pos); free(pos2);
    return vq_t_done();
}
