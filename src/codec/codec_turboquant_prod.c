/* codec_turboquant_prod.c: TurboQuant-prod (arXiv 2504.19874, Alg. 2): a (b−1)-bit TurboQuant-MSE
 * stage on y = Π(x/‖x‖), then a 1-bit QJL sketch (arXiv 2406.03482) of the residual r = y − c:
 * signs z = sign(S r) with S ∈ R^{m×d} i.i.d. N(0,1) (m = d by default) and ‖r‖. Estimator:
 *   q·x ≈ ‖x‖ (Πq·c + ‖r‖·√(π/2)/m · Σ_i z_i (SΠq)_i),  unbiased over S.
 * The sketch acts in the rotated domain (SΠ is again i.i.d. Gaussian, so the law is the paper's).
 * decode returns exactly the vector whose dot product is that estimator:
 *   x̂ = ‖x‖ Πᵀ(c + ‖r‖√(π/2)/m · Sᵀz).
 * Block: [‖x‖ fp16|f32] [‖r‖ fp16] [d codes of b−1 bits] [m sign bits], all packed (bitpack.h).
 * The sketch here is local (a few lines); it can later be shared with the `qjl` row (qjl.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codec/tq.h"
#include "codec/bitpack.h"
#include "codec/codec_vec.h"

static const float sign_table[256] = { -1.0f, 1.0f };   /* the residual signs' "codebook", 0-padded */

static vq_status prod_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                           uint64_t seed, vq_err *err) {
    vq_tq *t;
    vq_status s = vq_tq_init_common(st, &t, VQ_TQ_PROD, d, p, np, seed, 1, 4, "bits,norm,m", err);
    if (s) return s;
    if ((s = vq_codec_param_int(st->codec, p, np, "m", 1, VQ_TQ_MAX_D, d, &t->m, err))) return s;
    t->S = malloc(sizeof(float) * (size_t)t->m * d);
    if (!t->S) return vq_err_set(err, VQ_ERR_NOMEM, "codec %s: out of memory (m=%d, d=%d)",
                                 st->codec->name, t->m, d);
    vq_rng rng;
    vq_rng_seed(&rng, seed ^ 0x9e3779b97f4a7c15ull);   /* independent of the rotation's stream */
    for (size_t i = 0; i < (size_t)t->m * d; i++) t->S[i] = (float)vq_gauss_portable(&rng);
    t->cent2 = sign_table;                             /* sign "codebook": bit 0 -> -1, 1 -> +1 */
    t->off_codes1 = t->hdr_bytes + 2;
    t->off_signs = t->off_codes1 + (t->b1 ? vq_bitpack_bytes(t->b1, (size_t)d) : 0);
    st->block_bytes = t->off_signs + vq_bitpack_bytes(1, (size_t)t->m);
    st->qstate_bytes = sizeof(float) * ((size_t)d + t->m);
    st->acc_floats = d + t->m;
    st->state_bytes += sizeof(float) * (size_t)t->m * d;
    snprintf(st->params, sizeof st->params, "bits=%d,norm=%s,m=%d", t->bits,
             t->norm32 ? "f32" : "f16", t->m);
    return VQ_OK;
}

/* ‖r‖·√(π/2)/m: the factor in front of the sign sum */
static inline float qjl_gain(const vq_tq *t, float rnorm) {
    return (float)(rnorm * VQ_TQ_SQRT_PI_2 / t->m);
}

static void prod_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    const vq_tq *t = st->impl;
    const int d = t->d;
    float y[VQ_TQ_MAX_D], c[VQ_TQ_MAX_D];
    uint8_t idx[VQ_TQ_MAX_D];
    double nrm = vq_tq_rotate_unit(t, x, y);
    vq_tq_put_norm(t, nrm, block);
    if (t->b1) {
        vq_lloydmax_quantize(t->cb1, y, 1.0f, d, idx);
        vq_bitpack_pack(t->b1, idx, (size_t)d, block + t->off_codes1);
        vq_tq_expand(t, block + t->off_codes1, t->b1, t->cent1, 1.0f, 0, c);
        for (int i = 0; i < d; i++) y[i] -= c[i];      /* y is now the residual r */
    }
    double rn = 0;
    for (int i = 0; i < d; i++) rn += (double)y[i] * y[i];
    vq_tq_put_h((float)sqrt(rn), block + t->hdr_bytes);
    for (int i = 0; i < t->m; i++)                     /* sign(0) = +1; NaN -> 0 (no UB) */
        idx[i] = vq_cvec_dot_isa(t->isa, t->S + (size_t)i * d, y, d) >= 0.0f;
    vq_bitpack_pack(1, idx, (size_t)t->m, block + t->off_signs);
}

/* y[0..d) = c + gain·Sᵀz, the rotated-domain reconstruction of the unit vector */
static void prod_rotated(const vq_tq *t, const uint8_t *block, float *y) {
    float z[VQ_TQ_MAX_D];
    if (t->b1) vq_tq_expand(t, block + t->off_codes1, t->b1, t->cent1, 1.0f, 0, y);
    else memset(y, 0, sizeof(float) * (size_t)t->d);
    float g = qjl_gain(t, vq_tq_get_h(block + t->hdr_bytes));
    vq_tq_expand_isa(t->isa, block + t->off_signs, 1, t->cent2, t->m, g, 0, z);
    for (int i = 0; i < t->m; i++) vq_cvec_axpy_isa(t->isa, y, z[i], t->S + (size_t)i * t->d, t->d);
}

static void prod_decode(const vq_codec_state *st, const uint8_t *block, float *x) {
    const vq_tq *t = st->impl;
    prod_rotated(t, block, x);
    float nrm = vq_tq_get_norm(t, block);
    for (int i = 0; i < t->d; i++) x[i] *= nrm;
    vq_rotation_apply_inverse(t->rot, x, x);
}

static void prod_prep(const vq_codec_state *st, const float *q, void *qs) {
    const vq_tq *t = st->impl;
    float *qr = qs, *sq = qr + t->d;                  /* [Πq (d)] [SΠq (m)] */
    vq_rotation_apply(t->rot, q, qr);
    for (int i = 0; i < t->m; i++) sq[i] = vq_cvec_dot_isa(t->isa, t->S + (size_t)i * t->d, qr, t->d);
}

static void prod_score(const vq_codec_state *st, int n_q, const void *const *qs,
                       const uint8_t *blocks, int n_blocks, float *scores) {
    const vq_tq *t = st->impl;
    const float *qr[64], *sq[64];
    float ra[64], rb[64];
    for (int j0 = 0; j0 < n_q; j0 += 64) {          /* [Πq (d)] [SΠq (m)] per query */
        int m = VQ_MIN(64, n_q - j0);
        for (int j = 0; j < m; j++) { qr[j] = qs[j0 + j]; sq[j] = qr[j] + t->d; }
        for (int r = 0; r < n_blocks; r++) {
            const uint8_t *b = blocks + (size_t)r * st->block_bytes;
            float nrm = vq_tq_get_norm(t, b), g = qjl_gain(t, vq_tq_get_h(b + t->hdr_bytes));
            if (t->b1)
                vq_tq_dot_codes(t->isa, b + t->off_codes1, t->b1, t->cent1, NULL, 0.0f, t->cent1,
                                t->d, qr, m, ra);
            vq_tq_dot_codes(t->isa, b + t->off_signs, 1, t->cent2, NULL, 0.0f, t->cent2, t->m, sq,
                            m, rb);
            for (int j = 0; j < m; j++)
                scores[(size_t)(j0 + j) * n_blocks + r] = nrm * ((t->b1 ? ra[j] : 0.0f) + g * rb[j]);
        }
    }
}

static void prod_accumulate(const vq_codec_state *st, int n_q, const float *w,
                            const uint8_t *blocks, int n_blocks, float *const *acc) {
    const vq_tq *t = st->impl;
    const int d = t->d, m = t->m;
    float c[VQ_TQ_MAX_D] __attribute__((aligned(64))), z[VQ_TQ_MAX_D] __attribute__((aligned(64)));
    for (int r = 0; r < n_blocks; r++) {
        int any = 0;
        for (int j = 0; j < n_q; j++) any |= w[(size_t)j * n_blocks + r] != 0.0f;
        if (!any) continue;
        const uint8_t *b = blocks + (size_t)r * st->block_bytes;
        float nrm = vq_tq_get_norm(t, b), g = qjl_gain(t, vq_tq_get_h(b + t->hdr_bytes));
        if (t->b1) vq_tq_expand(t, b + t->off_codes1, t->b1, t->cent1, 1.0f, 0, c);
        vq_tq_expand_isa(t->isa, b + t->off_signs, 1, t->cent2, m, 1.0f, 0, z);
        for (int j = 0; j < n_q; j++) {
            float wj = w[(size_t)j * n_blocks + r] * nrm;
            if (wj == 0.0f) continue;
            if (t->b1) vq_cvec_axpy_isa(t->isa, acc[j], wj, c, d);
            vq_cvec_axpy_isa(t->isa, acc[j] + d, wj * g, z, m);   /* sketch domain */
        }
    }
}

static void prod_finish(const vq_codec_state *st, const float *acc, float *out) {
    const vq_tq *t = st->impl;
    memcpy(out, acc, sizeof(float) * (size_t)t->d);
    for (int i = 0; i < t->m; i++)
        if (acc[t->d + i] != 0.0f)
            vq_cvec_axpy_isa(t->isa, out, acc[t->d + i], t->S + (size_t)i * t->d, t->d);
    vq_rotation_apply_inverse(t->rot, out, out);
}

const vq_codec vq_codec_turboquant_prod = {
    .name = "turboquant_prod",
    .params_help = "bits=1..8 (default 4: 3-bit MSE stage + 1-bit QJL; bits=1: QJL only), "
                   "m=1..4096 sketch rows (default d), norm=f16|f32 (default f16)",
    .init = prod_init, .fini = vq_tq_fini, .encode = prod_encode, .decode = prod_decode,
    .prep_query = prod_prep, .score = prod_score, .accumulate = prod_accumulate,
    .finish = prod_finish,
};
