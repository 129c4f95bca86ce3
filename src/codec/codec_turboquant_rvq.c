/* codec_turboquant_rvq.c: two-stage residual scalar quantization in the rotated domain (the
 * "turboquant_rvq" of the original VeloxQuant). Stage 1: b-bit Lloyd-Max codes of y = Π(x/‖x‖)
 * (rotated-unit-vector law, as turboquant_mse). Stage 2: b-bit codes of e = y − c₁ with a
 * unit-variance codebook scaled by s. Codebook law2: exact (default: Lloyd-Max for the true law
 * of the stage-1 error), gauss, or laplace (what the original system used; measured worst).
 * Scale: fixed (default) s = √(stage-1 MSE per coordinate), no bytes; or row: s = ‖e‖/√d as fp16.
 * x̂ = ‖x‖ Πᵀ(c₁[i₁] + s·c₂[i₂]). Block: [‖x‖] [s fp16 if scale=row] [d×b bits] [d×b bits].
 * Note: it spends 2b bits per coordinate; turboquant_mse with 2b bits is better (docs). */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include "codec/tq.h"
#include "codec/bitpack.h"
#include "codec/codec_vec.h"

/* Defaults from measurement (docs/codecs-turboquant.md, d=128, 2+2 bits, E‖u−û‖²): laplace
 * 0.0246 (row) / 0.0253 (fixed), gauss 0.0198 / 0.0199, exact 0.0188 / 0.0189. The exact law of
 * the stage-1 error wins, and a stored per-row scale gains < 1% for 2 bytes a row: exact, fixed. */
#define LAW2_DEFAULT VQ_LAW_RESIDUAL
#define SCALE_DEFAULT VQ_TQ_SCALE_FIXED

static vq_status rvq_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                          uint64_t seed, vq_err *err) {
    vq_tq *t;
    vq_status s = vq_tq_init_common(st, &t, VQ_TQ_RVQ, d, p, np, seed, 1, 2, "bits,norm,scale,law2",
                                    err);
    if (s) return s;
    const char *sv = vq_codec_param_get(p, np, "scale"), *lv = vq_codec_param_get(p, np, "law2");
    if (sv && strcmp(sv, "row") && strcmp(sv, "fixed"))
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: scale=%s is not row or fixed (%s)",
                          st->codec->name, sv, st->codec->params_help);
    if (lv && strcmp(lv, "laplace") && strcmp(lv, "gauss") && strcmp(lv, "exact"))
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: law2=%s is not laplace, gauss or exact (%s)",
                          st->codec->name, lv, st->codec->params_help);
    t->scale_mode = !sv ? SCALE_DEFAULT : !strcmp(sv, "fixed") ? VQ_TQ_SCALE_FIXED : VQ_TQ_SCALE_ROW;
    t->law2 = !lv ? LAW2_DEFAULT : !strcmp(lv, "gauss") ? VQ_LAW_GAUSS
            : !strcmp(lv, "exact") ? VQ_LAW_RESIDUAL : VQ_LAW_LAPLACE;
    if (t->law2 == VQ_LAW_RESIDUAL) {   /* built from this stage 1: the state's own (2 KiB, counted) */
        if (!(t->cb2_own = malloc(sizeof *t->cb2_own)))
            return vq_err_set(err, VQ_ERR_NOMEM, "codec %s: out of memory", st->codec->name);
        if ((s = vq_lloydmax_build_residual(t->cb2_own, t->cb1, t->bits, err))) return s;
        t->cb2 = t->cb2_own;
        st->state_bytes += sizeof *t->cb2_own;
    } else if (!(t->cb2 = vq_lloydmax_shared((vq_law)t->law2, 0, t->bits, err)))
        return err ? err->code : VQ_ERR_NOMEM;
    t->cent2 = t->cb2->c;
    t->fixed_scale = (float)sqrt(t->cb1->mse);
    t->off_codes1 = t->hdr_bytes + (t->scale_mode == VQ_TQ_SCALE_ROW ? 2 : 0);
    t->off_codes2 = t->off_codes1 + vq_bitpack_bytes(t->bits, (size_t)d);
    st->block_bytes = t->off_codes2 + vq_bitpack_bytes(t->bits, (size_t)d);
    st->qstate_bytes = sizeof(float) * (size_t)d;
    st->acc_floats = d;
    snprintf(st->params, sizeof st->params, "bits=%d,norm=%s,scale=%s,law2=%s", t->bits,
             t->norm32 ? "f32" : "f16", t->scale_mode == VQ_TQ_SCALE_ROW ? "row" : "fixed",
             t->law2 == VQ_LAW_RESIDUAL ? "exact" : vq_law_name((vq_law)t->law2));
    return VQ_OK;
}

static float rvq_scale(const vq_tq *t, const uint8_t *block) {
    return t->scale_mode == VQ_TQ_SCALE_ROW ? vq_tq_get_h(block + t->hdr_bytes) : t->fixed_scale;
}

static void rvq_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    const vq_tq *t = st->impl;
    const int d = t->d;
    float y[VQ_TQ_MAX_D], c[VQ_TQ_MAX_D];
    uint8_t idx[VQ_TQ_MAX_D];
    double nrm = vq_tq_rotate_unit(t, x, y);
    vq_tq_put_norm(t, nrm, block);
    vq_lloydmax_quantize(t->cb1, y, 1.0f, d, idx);
    vq_bitpack_pack(t->bits, idx, (size_t)d, block + t->off_codes1);
    vq_tq_expand(t, block + t->off_codes1, t->bits, t->cent1, 1.0f, 0, c);
    double en = 0;
    for (int i = 0; i < d; i++) { y[i] -= c[i]; en += (double)y[i] * y[i]; }
    float s = t->fixed_scale;
    if (t->scale_mode == VQ_TQ_SCALE_ROW)   /* quantize with the scale decode will read back */
        s = vq_tq_put_h((float)sqrt(en / d), block + t->hdr_bytes);
    vq_lloydmax_quantize(t->cb2, y, s > 0 ? 1.0f / s : 0.0f, d, idx);
    vq_bitpack_pack(t->bits, idx, (size_t)d, block + t->off_codes2);
}

/* c = c₁[i₁] + s·c₂[i₂] (rotated unit-vector domain) */
static void rvq_expand(const vq_tq *t, const uint8_t *b, float *c) {
    vq_tq_expand(t, b + t->off_codes1, t->bits, t->cent1, 1.0f, 0, c);
    vq_tq_expand(t, b + t->off_codes2, t->bits, t->cent2, rvq_scale(t, b), 1, c);
}

static void rvq_decode(const vq_codec_state *st, const uint8_t *block, float *x) {
    const vq_tq *t = st->impl;
    rvq_expand(t, block, x);
    float nrm = vq_tq_get_norm(t, block);
    for (int i = 0; i < t->d; i++) x[i] *= nrm;
    vq_rotation_apply_inverse(t->rot, x, x);
}

static void rvq_prep(const vq_codec_state *st, const float *q, void *qs) {
    const vq_tq *t = st->impl;
    vq_rotation_apply(t->rot, q, (float *)qs);
}

static void rvq_score(const vq_codec_state *st, int n_q, const void *const *qs,
                      const uint8_t *blocks, int n_blocks, float *scores) {
    const vq_tq *t = st->impl;
    float res[64];
    for (int r = 0; r < n_blocks; r++) {
        const uint8_t *b = blocks + (size_t)r * st->block_bytes;
        float nrm = vq_tq_get_norm(t, b), s2 = rvq_scale(t, b);
        for (int j0 = 0; j0 < n_q; j0 += 64) {
            int m = VQ_MIN(64, n_q - j0);
            vq_tq_dot_codes(t->isa, b + t->off_codes1, t->bits, t->cent1, b + t->off_codes2, s2,
                            t->cent2, t->d, (const float *const *)(qs + j0), m, res);
            for (int j = 0; j < m; j++) scores[(size_t)(j0 + j) * n_blocks + r] = nrm * res[j];
        }
    }
}

static void rvq_accumulate(const vq_codec_state *st, int n_q, const float *w,
                           const uint8_t *blocks, int n_blocks, float *const *acc) {
    const vq_tq *t = st->impl;
    float c[VQ_TQ_MAX_D] __attribute__((aligned(64)));
    for (int r = 0; r < n_blocks; r++) {
        int any = 0;
        for (int j = 0; j < n_q; j++) any |= w[(size_t)j * n_blocks + r] != 0.0f;
        if (!any) continue;
        const uint8_t *b = blocks + (size_t)r * st->block_bytes;
        float nrm = vq_tq_get_norm(t, b);
        rvq_expand(t, b, c);
        for (int j = 0; j < n_q; j++) {
            float wj = w[(size_t)j * n_blocks + r];
            if (wj != 0.0f) vq_cvec_axpy_isa(t->isa, acc[j], wj * nrm, c, t->d);
        }
    }
}

static void rvq_finish(const vq_codec_state *st, const float *acc, float *out) {
    const vq_tq *t = st->impl;
    vq_rotation_apply_inverse(t->rot, acc, out);
}

const vq_codec vq_codec_turboquant_rvq = {
    .name = "turboquant_rvq",
    .params_help = "bits=1..8 per stage (default 2), law2=exact|gauss|laplace (default exact), "
                   "scale=fixed|row (default fixed), norm=f16|f32 (default f16)",
    .init = rvq_init, .fini = vq_tq_fini, .encode = rvq_encode, .decode = rvq_decode,
    .prep_query = rvq_prep, .score = rvq_score, .accumulate = rvq_accumulate,
    .finish = rvq_finish,
};
