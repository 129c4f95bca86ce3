/* codec_lowrank.c: Palu-style per-head low rank (Chang et al., arXiv 2407.21118): each row x of a
 * KV head is stored as r coefficients c = P x on the calibration's top-r axes of that head's
 * keys (or values), P the r x d matrix of those axes, and read back as x̂ = Dᵀ ĉ
 * (docs/calibration-format.md, version 4, made by `veloxquant calibrate`; not centred, as Palu's
 * SVD, so a zero row stays zero and the codes are a linear image of the row). Values: the
 * principal axes of E[v vᵀ], D = P (an orthogonal projection). Keys: the axes weighted by the
 * group's queries (S = (M_q + εI)^½: P rows S p_j, D rows S⁻¹ p_j, p_j the eigenvectors of
 * S E[k kᵀ] S): the rank-r code of least expected squared score error; an oblique projection.
 * Keys are the cache's keys, after RoPE (the cache never sees pre-RoPE keys):
 * docs/codecs-lowrank.md measures what that costs.
 * Coefficients stored as fp16 (bits=16), or quantized (bits=8|4) symmetric round-to-nearest in
 * groups of 32 with an fp16 scale each, after a random orthogonal map of the r-space (rot=1,
 * Palu's Walsh-Hadamard on the latent: the leading coefficients carry most of the energy, and a
 * shared scale would zero the rest); the map is folded into P at init, so P stays orthonormal rows.
 * Block (one row): bits 16: r fp16; bits 8: ceil(r/32) fp16 scales, r int8; bits 4: the scales,
 * ceil(r/2) bytes of 4-bit codes (element i in byte i/2, low nibble first, offset 8).
 * Attention on the codes: score = (D q)·ĉ (D q once per query in prep_query); values are summed
 * as Σ w ĉ in the r-space and mapped back once per head in finish (Dᵀ Σ w ĉ). One state per KV
 * head (per_head = 1); its r·d floats (2 r·d for keys: P and D) are counted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codec/codec.h"
#include "codec/calib.h"
#include "codec/rotation.h"

#define LR_G 32   /* coefficients per scale (bits 8, 4) */

typedef struct lr {
    int d, r, bits, ng;
    float *P;    /* [r][d]: coding rows (turned by the random map when rot=1) */
    float *D;    /* [r][d]: reading rows (== P for values) */
} lr;

static float ld16(const uint8_t *p) { vq_f16 h; memcpy(&h, p, 2); return vq_f16_to_f32(h); }
static void st16(uint8_t *p, float x) { vq_f16 h = vq_f32_to_f16(x); memcpy(p, &h, 2); }

static void lr_fini(vq_codec_state *st) {
    lr *t = st->impl;
    if (!t) return;
    if (t->D != t->P) free(t->D);
    free(t->P);
    free(t);
    st->impl = NULL;
}

static vq_status lr_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                         uint64_t seed, vq_err *err) {
    const vq_codec *c = st->codec;
    vq_status s = vq_codec_params_check(c, p, np, "rk,rv,bits,rot", err);
    if (s) return s;
    if (d < 2 || d > VQ_CALIB_MAX_DIM)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: head_dim %d not supported (2..%d)", c->name, d, VQ_CALIB_MAX_DIM);
    int r, bits, rot;
    if ((s = vq_codec_param_int(c, p, np, side == VQ_SIDE_K ? "rk" : "rv", 1, d, d / 2, &r, err))) return s;
    /* the other side's rank is checked too, so a spec's bad rv= is refused by the K probe as well */
    int r2;
    if ((s = vq_codec_param_int(c, p, np, side == VQ_SIDE_K ? "rv" : "rk", 1, d, d / 2, &r2, err))) return s;
    if ((s = vq_codec_param_int(c, p, np, "bits", 4, 16, 16, &bits, err))) return s;
    if (bits != 4 && bits != 8 && bits != 16)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: bits=%d is not 16, 8 or 4 (%s)", c->name, bits, c->params_help);
    if ((s = vq_codec_param_int(c, p, np, "rot", 0, 1, bits < 16, &rot, err))) return s;
    const vq_calib *cal = st->ctx.calib;
    if (!cal)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s needs a calibration with low-rank bases: add calib=FILE "
                          "to the KV spec (a file of `veloxquant calibrate`), e.g. \"lowrank:rk=32,rv=32;"
                          "calib=model.vqc\"", c->name);
    const char *cp = st->ctx.calib_path ? st->ctx.calib_path : "(calibration)";
    if (!cal->has_lowrank || !cal->k_basis || !cal->k_dec || !cal->v_basis)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: calibration '%.200s' (model '%s') has no low-rank "
                          "projections (a version 3 file, made before they existed): rerun `veloxquant "
                          "calibrate` to write a version 4 file", c->name, cp, cal->model);
    if (cal->head_dim != d)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: calibration '%.200s' has projections of head_dim %d "
                          "(model '%s'), this cache %d", c->name, cp, cal->head_dim, cal->model, d);
    const int layer = st->ctx.n_layers ? st->ctx.layer : 0, head = st->ctx.n_layers ? st->ctx.head : 0;
    if (layer < 0 || layer >= cal->n_layers || head < 0 || head >= cal->n_kv_heads)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: calibration '%.200s' has projections for %d layers x "
                          "%d KV heads, asked for layer %d head %d", c->name, cp, cal->n_layers,
                          cal->n_kv_heads, layer, head);
    lr *t = calloc(1, sizeof *t);
    if (!t) return vq_err_set(err, VQ_ERR_NOMEM, "codec %s: out of memory", c->name);
    st->impl = t;
    t->d = d;
    t->r = r;
    t->bits = bits;
    t->ng = (r + LR_G - 1) / LR_G;
    t->P = malloc(sizeof(float) * (size_t)r * d);
    t->D = side == VQ_SIDE_K ? malloc(sizeof(float) * (size_t)r * d) : t->P;
    if (!t->P || !t->D) return vq_err_set(err, VQ_ERR_NOMEM, "codec %s: out of memory", c->name);
    const size_t kh = (size_t)layer * cal->n_kv_heads + head;
    const float *B = (side == VQ_SIDE_K ? cal->k_basis : cal->v_basis) + kh * (size_t)d * d;
    const float *Bd = side == VQ_SIDE_K ? cal->k_dec + kh * (size_t)d * d : B;
    memcpy(t->P, B, sizeof(float) * (size_t)r * d);
    if (t->D != t->P) memcpy(t->D, Bd, sizeof(float) * (size_t)r * d);
    if (rot && r > 1) {   /* P <- R P, D <- R D: R a random orthogonal r x r map (Hadamard when r = 2^k) */
        vq_rotation *R = vq_rotation_create(r, seed, err);
        float *M = R ? malloc(sizeof(float) * (size_t)r * r) : NULL;
        double *col = M ? malloc(sizeof(double) * (size_t)r) : NULL;
        if (!col) { vq_rotation_free(R); free(M); return R ? vq_err_set(err, VQ_ERR_NOMEM, "codec %s: out of memory", c->name) : err->code; }
        vq_rotation_matrix(R, M);
        for (int w = 0; w < (t->D != t->P ? 2 : 1); w++) {
            const float *src = w ? Bd : B;
            float *dst = w ? t->D : t->P;
            for (int k = 0; k < d; k++) {
                for (int i = 0; i < r; i++) {
                    double a = 0;
                    for (int j = 0; j < r; j++) a += (double)M[(size_t)i * r + j] * src[(size_t)j * d + k];
                    col[i] = a;
                }
                for (int i = 0; i < r; i++) dst[(size_t)i * d + k] = (float)col[i];
            }
        }
        free(col);
        free(M);
        vq_rotation_free(R);
    }
    st->d = d;
    st->rows_per_block = 1;
    st->block_bytes = bits == 16 ? 2 * (size_t)r : 2 * (size_t)t->ng + (bits == 8 ? (size_t)r : (size_t)(r + 1) / 2);
    st->qstate_bytes = sizeof(float) * (size_t)r;
    st->acc_floats = r;
    st->state_bytes = sizeof *t + sizeof(float) * (size_t)r * d * (t->D != t->P ? 2 : 1);
    snprintf(st->params, sizeof st->params, "rk=%d,rv=%d,bits=%d,rot=%d", side == VQ_SIDE_K ? r : r2,
             side == VQ_SIDE_K ? r2 : r, bits, rot);
    return VQ_OK;
}

/* the r coefficients of one block, dequantized */
static void coefs(const lr *t, const uint8_t *b, float *c) {
    const int r = t->r;
    if (t->bits == 16) {
        for (int i = 0; i < r; i++) c[i] = ld16(b + 2 * i);
        return;
    }
    const uint8_t *q = b + 2 * t->ng;
    for (int g = 0; g < t->ng; g++) {
        const float s = ld16(b + 2 * g);
        const int e = VQ_MIN(r, (g + 1) * LR_G);
        if (t->bits == 8)
            for (int i = g * LR_G; i < e; i++) c[i] = s * (float)(int8_t)q[i];
        else
            for (int i = g * LR_G; i < e; i++) c[i] = s * (float)((int)((q[i / 2] >> (4 * (i & 1))) & 15) - 8);
    }
}

static void lr_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    const lr *t = st->impl;
    const int d = t->d, r = t->r;
    float c[VQ_CALIB_MAX_DIM];
    for (int i = 0; i < r; i++) {
        double a = 0;
        const float *pi = t->P + (size_t)i * d;
        for (int k = 0; k < d; k++) a += (double)pi[k] * x[k];
        c[i] = (float)fmax(-65504.0, fmin(65504.0, a));
    }
    if (t->bits == 16) {
        for (int i = 0; i < r; i++) st16(block + 2 * i, c[i]);
        return;
    }
    const int qmax = t->bits == 8 ? 127 : 7;
    uint8_t *q = block + 2 * t->ng;
    memset(q, 0, st->block_bytes - 2 * (size_t)t->ng);
    for (int g = 0; g < t->ng; g++) {
        const int e = VQ_MIN(r, (g + 1) * LR_G);
        float amax = 0;
        for (int i = g * LR_G; i < e; i++) amax = fmaxf(amax, fabsf(c[i]));
        st16(block + 2 * g, amax / (float)qmax);
        const float s = vq_f16_to_f32(vq_f32_to_f16(amax / (float)qmax));   /* the scale as stored */
        const float inv = s > 0 ? 1.0f / s : 0.0f;
        for (int i = g * LR_G; i < e; i++) {
            int v = (int)lrintf(c[i] * inv);
            v = VQ_MAX(-qmax, VQ_MIN(qmax, v));
            if (t->bits == 8) q[i] = (uint8_t)(int8_t)v;
            else q[i / 2] |= (uint8_t)((v + 8) << (4 * (i & 1)));
        }
    }
}

static void lr_finish(const vq_codec_state *st, const float *acc, float *out) {
    const lr *t = st->impl;
    const int d = t->d, r = t->r;
    memset(out, 0, sizeof(float) * (size_t)d);
    for (int i = 0; i < r; i++) {
        const float a = acc[i];
        const float *pi = t->D + (size_t)i * d;
        for (int k = 0; k < d; k++) out[k] += a * pi[k];
    }
}

static void lr_decode(const vq_codec_state *st, const uint8_t *block, float *x) {
    const lr *t = st->impl;
    float acc[VQ_CALIB_MAX_DIM];
    coefs(t, block, acc);
    lr_finish(st, acc, x);
}

static void lr_prep(const vq_codec_state *st, const float *q, void *qs) {
    const lr *t = st->impl;
    const int d = t->d, r = t->r;
    float *o = qs;
    for (int i = 0; i < r; i++) {
        float a = 0;
        const float *pi = t->D + (size_t)i * d;
        for (int k = 0; k < d; k++) a += pi[k] * q[k];
        o[i] = a;
    }
}

static void lr_score(const vq_codec_state *st, int n_q, const void *const *qs, const uint8_t *blocks,
                     int n_blocks, float *scores) {
    const lr *t = st->impl;
    const int r = t->r;
    float c[VQ_CALIB_MAX_DIM];
    for (int b = 0; b < n_blocks; b++) {
        coefs(t, blocks + (size_t)b * st->block_bytes, c);
        for (int j = 0; j < n_q; j++) {
            const float *o = qs[j];
            float a = 0;
            for (int i = 0; i < r; i++) a += o[i] * c[i];
            scores[(size_t)j * n_blocks + b] = a;
        }
    }
}

static void lr_accumulate(const vq_codec_state *st, int n_q, const float *w, const uint8_t *blocks,
                          int n_blocks, float *const *acc) {
    const lr *t = st->impl;
    const int r = t->r;
    float c[VQ_CALIB_MAX_DIM];
    for (int b = 0; b < n_blocks; b++) {
        int any = 0;
        for (int j = 0; j < n_q; j++) any |= w[(size_t)j * n_blocks + b] != 0.0f;
        if (!any) continue;
        coefs(t, blocks + (size_t)b * st->block_bytes, c);
        for (int j = 0; j < n_q; j++) {
            const float wj = w[(size_t)j * n_blocks + b];
            if (wj == 0.0f) continue;
            float *a = acc[j];
            for (int i = 0; i < r; i++) a[i] += wj * c[i];
        }
    }
}

const vq_codec vq_codec_lowrank = {
    .name = "lowrank",
    .params_help = "rk=1..d key rank (d/2), rv=1..d value rank (d/2), bits=16|8|4 coefficient bits (16), "
                   "rot=0|1 random orthogonal map of the coefficients before quantizing (1 when bits < 16); "
                   "needs calib=FILE of version 4 (`veloxquant calibrate`)",
    .per_head = 1, .needs_calib = 1,
    .init = lr_init, .fini = lr_fini, .encode = lr_encode, .decode = lr_decode,
    .prep_query = lr_prep, .score = lr_score, .accumulate = lr_accumulate, .finish = lr_finish,
};
