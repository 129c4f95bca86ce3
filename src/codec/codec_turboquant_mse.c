/* codec_turboquant_mse.c: TurboQuant-MSE (Zandieh et al., arXiv 2504.19874). A row x is stored as
 * ‖x‖ and the b-bit Lloyd-Max codes of y = Π(x/‖x‖) for the law of a rotated unit vector's
 * coordinate; x̂ = ‖x‖·Πᵀc[idx]. Attention never rebuilds x̂: q·x̂ = ‖x‖·(Πq)·c[idx], and values
 * are summed as Σ w‖v‖c[idx] in the rotated domain, rotated back once per head in finish.
 * Block: [‖x‖: fp16 (or f32 with norm=f32)] [d codes, b bits each, packed (bitpack.h)].
 * At 2, 3 and 4 bits with d % 32 == 0 (head_dim 32/64/128...) the lanes layout of tq_lanes.c /
 * tq_lanes_lo.c is used instead (same codes and bytes per row; keys in blocks of 16 rows):
 * attention is several times faster there. layout=packed forces the general layout (tests,
 * comparisons, and the state files of earlier builds at 2 and 3 bits). */
#include <stdio.h>
#include <string.h>
#include "codec/tq.h"
#include "codec/bitpack.h"
#include "codec/codec_vec.h"
#include "codec/tq_lanes.h"

static vq_status mse_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                          uint64_t seed, vq_err *err) {
    vq_tq *t;
    vq_status s = vq_tq_init_common(st, &t, VQ_TQ_MSE, d, p, np, seed, 1, 4, "bits,norm,layout", err);
    if (s) return s;
    const char *lay = vq_codec_param_get(p, np, "layout");
    if (lay && strcmp(lay, "auto") && strcmp(lay, "packed") && strcmp(lay, "lanes"))
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: layout=%s is not auto, lanes or packed (%s)",
                          st->codec->name, lay, st->codec->params_help);
    if (lay && !strcmp(lay, "lanes") && !vq_tql_supported(t->bits, d))
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: layout=lanes needs bits=2, 3 or 4 and head_dim "
                          "a multiple of 32 (got bits=%d, d=%d)", st->codec->name, t->bits, d);
    t->side = side;
    t->lanes = vq_tql_supported(t->bits, d) && !(lay && !strcmp(lay, "packed"));
    if (t->lanes) {
        st->rows_per_block = side == VQ_SIDE_K ? VQ_TQL_ROWS : 1;
        st->block_bytes = vq_tql_block_bytes(t, side);
        st->qstate_bytes = sizeof(float) * (size_t)d;
        st->acc_floats = d;
        snprintf(st->params, sizeof st->params, "bits=%d,norm=%s,layout=lanes", t->bits,
                 t->norm32 ? "f32" : "f16");
        return VQ_OK;
    }
    t->off_codes1 = t->hdr_bytes;
    st->block_bytes = t->hdr_bytes + vq_bitpack_bytes(t->bits, (size_t)d);
    st->qstate_bytes = sizeof(float) * (size_t)d;
    st->acc_floats = d;
    snprintf(st->params, sizeof st->params, "bits=%d,norm=%s,layout=packed", t->bits,
             t->norm32 ? "f32" : "f16");
    return VQ_OK;
}

static void mse_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    const vq_tq *t = st->impl;
    if (t->lanes) { vq_tql_encode(t, t->side, x, block); return; }
    float y[VQ_TQ_MAX_D];
    uint8_t idx[VQ_TQ_MAX_D];
    double nrm = vq_tq_rotate_unit(t, x, y);
    vq_tq_put_norm(t, nrm, block);
    vq_lloydmax_quantize(t->cb1, y, 1.0f, t->d, idx);
    vq_bitpack_pack(t->bits, idx, (size_t)t->d, block + t->off_codes1);
}

static void mse_decode(const vq_codec_state *st, const uint8_t *block, float *x) {
    const vq_tq *t = st->impl;
    if (t->lanes) { vq_tql_decode(t, t->side, block, x); return; }
    vq_tq_expand(t, block + t->off_codes1, t->bits, t->cent1, vq_tq_get_norm(t, block), 0, x);
    vq_rotation_apply_inverse(t->rot, x, x);
}

static void mse_prep(const vq_codec_state *st, const float *q, void *qs) {
    const vq_tq *t = st->impl;
    vq_rotation_apply(t->rot, q, (float *)qs);
}

static void mse_score(const vq_codec_state *st, int n_q, const void *const *qs,
                      const uint8_t *blocks, int n_blocks, float *scores) {
    const vq_tq *t = st->impl;
    if (t->lanes) {
        vq_tql_score(t, t->side, n_q, (const float *const *)qs, blocks, n_blocks, st->block_bytes, scores);
        return;
    }
    float res[64];
    for (int r = 0; r < n_blocks; r++) {
        const uint8_t *b = blocks + (size_t)r * st->block_bytes;
        float nrm = vq_tq_get_norm(t, b);
        for (int j0 = 0; j0 < n_q; j0 += 64) {   /* one pass over the codes per 64 queries */
            int m = VQ_MIN(64, n_q - j0);
            vq_tq_dot_codes(t->isa, b + t->off_codes1, t->bits, t->cent1, NULL, 0.0f, t->cent1,
                            t->d, (const float *const *)(qs + j0), m, res);
            for (int j = 0; j < m; j++) scores[(size_t)(j0 + j) * n_blocks + r] = nrm * res[j];
        }
    }
}

static void mse_accumulate(const vq_codec_state *st, int n_q, const float *w,
                           const uint8_t *blocks, int n_blocks, float *const *acc) {
    const vq_tq *t = st->impl;
    if (t->lanes) { vq_tql_accumulate(t, t->side, n_q, w, blocks, n_blocks, st->block_bytes, acc); return; }
    const vq_isa isa = t->isa;
    float c[VQ_TQ_MAX_D] __attribute__((aligned(64)));
    for (int r = 0; r < n_blocks; r++) {
        int any = 0;
        for (int j = 0; j < n_q; j++) any |= w[(size_t)j * n_blocks + r] != 0.0f;
        if (!any) continue;
        const uint8_t *b = blocks + (size_t)r * st->block_bytes;
        float nrm = vq_tq_get_norm(t, b);
        vq_tq_expand(t, b + t->off_codes1, t->bits, t->cent1, 1.0f, 0, c);
        for (int j = 0; j < n_q; j++) {
            float wj = w[(size_t)j * n_blocks + r];
            if (wj != 0.0f) vq_cvec_axpy_isa(isa, acc[j], wj * nrm, c, t->d);
        }
    }
}

static void mse_finish(const vq_codec_state *st, const float *acc, float *out) {
    const vq_tq *t = st->impl;
    vq_rotation_apply_inverse(t->rot, acc, out);
}

const vq_codec vq_codec_turboquant_mse = {
    .name = "turboquant_mse",
    .params_help = "bits=1..8 (default 4), norm=f16|f32 (default f16; f16 saturates at 65504), "
                   "layout=auto|lanes|packed (default auto: lanes at 2, 3 and 4 bits with head_dim "
                   "% 32 == 0)",
    .init = mse_init, .fini = vq_tq_fini, .encode = mse_encode, .decode = mse_decode,
    .prep_query = mse_prep, .score = mse_score, .accumulate = mse_accumulate, .finish = mse_finish,
};
