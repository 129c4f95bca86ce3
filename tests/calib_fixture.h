/* calib_fixture.h: synthetic calibrations for tests of codecs and policies that need one
 * (tq_split, qfilters): random statistics and unit filters for given dims, a few pairs given much
 * more energy (as real models have), in memory or written to a file. Deterministic from the
 * caller's rng. */
#ifndef VQ_CALIB_FIXTURE_H
#define VQ_CALIB_FIXTURE_H
#include "codec/calib.h"
#include "core/core.h"

static inline void vq_t_calib_make(vq_calib *c, int L, int NH, int H, int d, vq_rng *rng) {
    memset(c, 0, sizeof *c);
    snprintf(c->model, sizeof c->model, "synthetic-%dx%dx%dx%d", L, NH, H, d);
    c->n_layers = L; c->n_heads = NH; c->n_kv_heads = H; c->head_dim = d; c->rope_dim = d;
    c->config_hash = vq_calib_config_hash(c->model);
    c->n_tokens = 1000;
    c->has_lowrank = 1;
    if (vq_calib_alloc(c, NULL)) { fprintf(stderr, "calib fixture: alloc failed\n"); exit(1); }
    size_t kv = (size_t)L * H, q = (size_t)L * NH;
    for (size_t i = 0; i < kv * (size_t)(d / 2); i++) {
        double u = vq_rng_uniform(rng);
        c->pair_energy[i] = (float)(u < 0.2 ? 100.0 * u : u);
    }
    for (size_t i = 0; i < kv * (size_t)d; i++) {
        c->k_mean[i] = (float)vq_rng_uniform(rng) - 0.5f;
        c->k_sq[i] = (float)vq_rng_uniform(rng) + 0.25f;
        c->v_sq[i] = (float)vq_rng_uniform(rng) + 0.25f;
    }
    for (size_t i = 0; i < q * (size_t)d; i++) {
        c->q_mean[i] = (float)vq_rng_uniform(rng) - 0.5f;
        c->q_sq[i] = (float)vq_rng_uniform(rng) + 0.25f;
    }
    for (int l = 0; l < L; l++) c->attn_cos[l] = (float)(0.5 + 0.5 * vq_rng_uniform(rng));   /* in 0.5..1 */
    for (size_t f = 0; f < kv; f++) {   /* Q-Filters: random unit vectors */
        double n2 = 0;
        float *x = c->q_filter + f * (size_t)d;
        for (int i = 0; i < d; i++) { x[i] = (float)vq_rng_gauss(rng); n2 += (double)x[i] * x[i]; }
        for (int i = 0; i < d; i++) x[i] = (float)(x[i] / sqrt(n2));
    }
    /* a VecInfer section (sub-vectors of 2, random λ and codebooks) where the codec can serve d; its
     * own rng, so the caller's draws after this call do not change */
    if (d % 16 == 0 && d <= 256) {
        vq_rng r2;
        vq_rng_seed(&r2, 0x7ec1ull + (uint64_t)(L * 1000003 + NH * 1009 + H * 101 + d));
        if (vq_calib_vi_alloc(c, 2, 2, 99, NULL)) { fprintf(stderr, "calib fixture: vi alloc failed\n"); exit(1); }
        for (size_t i = 0; i < kv * (size_t)d; i++) c->vi_smooth[i] = (float)(0.5 + 2.5 * vq_rng_uniform(&r2));
        for (size_t i = 0; i < kv * (size_t)d * VQ_CALIB_VI_CB; i++) {
            c->vi_cb_k[i] = (float)(0.4 * vq_rng_gauss(&r2));
            c->vi_cb_v[i] = (float)(0.6 * vq_rng_gauss(&r2));
        }
        for (size_t g = 0; g < kv * (size_t)d / 2; g++)   /* entry 0: the zero vector (sub 2) */
            c->vi_cb_k[g * VQ_CALIB_VI_CB * 2] = c->vi_cb_k[g * VQ_CALIB_VI_CB * 2 + 1] =
                c->vi_cb_v[g * VQ_CALIB_VI_CB * 2] = c->vi_cb_v[g * VQ_CALIB_VI_CB * 2 + 1] = 0.0f;
    }
    for (size_t f = 0; f < kv; f++)   /* low-rank bases (version 4): random orthonormal rows */
        for (int side = 0; side < 2; side++) {
            float *B = (side ? c->v_basis : c->k_basis) + f * (size_t)d * d;
            float *e = (side ? c->v_eig : c->k_eig) + f * (size_t)d;
            for (int j = 0; j < d; j++) {
                float *b = B + (size_t)j * d;
                for (int i = 0; i < d; i++) b[i] = (float)vq_rng_gauss(rng);
                for (int k = 0; k < j; k++) {   /* Gram-Schmidt, twice for float accuracy */
                    for (int rep = 0; rep < 2; rep++) {
                        double dot = 0;
                        for (int i = 0; i < d; i++) dot += (double)b[i] * B[(size_t)k * d + i];
                        for (int i = 0; i < d; i++) b[i] -= (float)(dot * B[(size_t)k * d + i]);
                    }
                }
                double n2 = 0;
                for (int i = 0; i < d; i++) n2 += (double)b[i] * b[i];
                for (int i = 0; i < d; i++) b[i] = (float)(b[i] / sqrt(n2));
                e[j] = (float)(4.0 / (1.0 + j));   /* descending */
            }
            if (!side) memcpy(c->k_dec + f * (size_t)d * d, B, sizeof(float) * (size_t)d * d);   /* orthonormal */
        }
}

static inline void vq_t_calib_file(const char *path, int L, int NH, int H, int d, vq_rng *rng) {
    vq_calib c;
    vq_err err;
    vq_t_calib_make(&c, L, NH, H, d, rng);
    if (vq_calib_write(&c, path, &err)) { fprintf(stderr, "calib fixture: %s\n", err.msg); exit(1); }
    vq_calib_free(&c);
}
#endif
