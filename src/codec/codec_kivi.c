/* codec_kivi.c: KIVI (Liu et al., arXiv 2402.02750), and KVQuant-style keys (the kvquant row at
 * the end: the same codes plus a fixed count of exact sparse outliers per key block). Keys are
 * quantized per channel over a group of G tokens (a block holds G rows: rows_per_block = G),
 * values per token in groups of G channels; min/max asymmetric with fp16 scale and min, 2 or 4
 * bits (keys also 3: a 2-bit and a 1-bit plane); the newest `residual` rows stay in the store's
 * fp16 window. Value codes are packed in 16-byte chunks: byte j of a chunk holds elements j, j+16,
 * j+32, ... at shifts 0, b, 2b, ... so one 16-byte load expands to 16-lane vectors; key codes are
 * in the lanes layout (kcode_off_b) unless layout=rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "codec/kivi.h"
#include "codec/calib.h"
#define VQ_CODEC_VEC_AVX512_HSUM
#include "codec/codec_vec.h"

/* the kivi and kvquant rows share this: kvq = 1 adds outliers= (sparse exact key elements) and
 * qweight=, and makes residual default to 0 (KVQuant keeps no recent window; the store's sink=S
 * keeps the first rows exact) */
static vq_status init_common(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                             int kvq, vq_err *err) {
    const vq_codec *c = st->codec;
    const char *nm = c->name;
    int bits = 2, G = 32, R = kvq ? 0 : 128;
    vq_status s = vq_codec_params_check(c, p, np, kvq ? "bits,group,residual,layout,outliers,qweight"
                                                      : "bits,group,residual,layout", err);
    if (!s) s = vq_codec_param_int(c, p, np, "bits", 2, 4, 2, &bits, err);
    if (!s) s = vq_codec_param_int(c, p, np, "group", 1, 4096, 32, &G, err);
    if (!s) s = vq_codec_param_int(c, p, np, "residual", 0, 1048576, R, &R, err);
    int qw = 0;
    if (!s && kvq) s = vq_codec_param_int(c, p, np, "qweight", 0, 1, 0, &qw, err);
    if (s) return s;
    const char *lay = vq_codec_param_get(p, np, "layout");
    if (lay && strcmp(lay, "lanes") && strcmp(lay, "rows"))
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: layout=%s is not lanes or rows (%s)", nm, lay,
                          c->params_help);
    const int lanes = !lay || !strcmp(lay, "lanes");
    if (bits == 3 && side == VQ_SIDE_V)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: bits=3 is for keys only (values: 2 or 4; e.g. "
                          "k=3,v=4, or v=turboquant_mse:bits=3 for 3-bit values; %s)", nm, c->params_help);
    if (bits == 3 && !lanes)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: bits=3 keys need layout=lanes (layout=rows packs "
                          "2 or 4 bits; %s)", nm, c->params_help);
    double frac = 0;
    char ftxt[32] = "";
    const char *fv = vq_codec_param_get(p, np, "outliers");
    if (kvq) {
        if (fv) {
            char *end;
            frac = strtod(fv, &end);
            if (end == fv || *end || !(frac >= 0.0 && frac <= 0.125))
                return vq_err_set(err, VQ_ERR_ARG, "codec %s: outliers=%s is not a fraction in [0, 0.125] "
                                  "(%s)", nm, fv, c->params_help);
        } else {
            frac = 0.01;
        }
        /* the canonical text, and the count from it, so a normalized spec gives the same count */
        snprintf(ftxt, sizeof ftxt, "%g", frac);
        frac = strtod(ftxt, NULL);
    }
    const int chunk = 16 * 8 / (bits == 3 ? 2 : bits);   /* elements per 16-byte chunk */
    if (d > 4096)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: head_dim %d above 4096", nm, d);
    if (d % chunk)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: head_dim %d must be a multiple of %d for "
                          "bits=%d", nm, d, chunk, bits);
    if (side == VQ_SIDE_V && (d % G || G % 16))
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: value groups of group=%d channels must "
                          "divide head_dim %d and be a multiple of 16", nm, G, d);
    /* outliers per key block: a fixed count (the store needs fixed block bytes) */
    const int n_out = side == VQ_SIDE_K && frac > 0 ? (int)ceil(frac * G * d - 1e-9) : 0;
    if (n_out > 0 && (G < 2 || G > 256 || G * d > VQ_KIVI_OUT_MAX))
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: outliers=%s needs 2 <= group <= 256 and "
                          "group x head_dim <= %d (group=%d, head_dim %d)", nm, ftxt, VQ_KIVI_OUT_MAX, G, d);
    /* qweight=1: the outlier choice weighs channel c's range by the query energy that reads it,
     * w_c = sum over the KV head's GQA group of E[q_g,c^2] (calibration), so the expected score
     * error sum_c E[q_c^2] (step_c)^2 is what falls */
    const vq_calib *cal = st->ctx.calib;
    const char *cp = st->ctx.calib_path ? st->ctx.calib_path : "(calibration)";
    const int layer = st->ctx.n_layers ? st->ctx.layer : 0, head = st->ctx.n_layers ? st->ctx.head : 0;
    if (qw && !cal)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: qweight=1 needs a calibration: add calib=FILE to "
                          "the KV spec (a file of `veloxquant calibrate`)", nm);
    if (qw && cal->head_dim != d)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: calibration '%.200s' has head_dim %d (model '%s'), "
                          "this cache %d", nm, cp, cal->head_dim, cal->model, d);
    if (qw && (layer < 0 || layer >= cal->n_layers || head < 0 || head >= cal->n_kv_heads))
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: calibration '%.200s' has %d layers x %d KV heads, "
                          "asked for layer %d head %d", nm, cp, cal->n_layers, cal->n_kv_heads, layer, head);
    kivi *k = calloc(1, sizeof *k);
    if (!k) return vq_err_set(err, VQ_ERR_NOMEM, "codec %s: out of memory", nm);
    st->impl = k;
    if (qw && n_out > 0) {
        k->w = malloc(sizeof(float) * (size_t)d);
        if (!k->w) return vq_err_set(err, VQ_ERR_NOMEM, "codec %s: out of memory", nm);
        const int gs = cal->n_heads / cal->n_kv_heads;
        double sum = 0, e[4096];
        for (int ch = 0; ch < d; ch++) {
            e[ch] = 0;
            for (int g = 0; g < gs; g++)
                e[ch] += cal->q_sq[((size_t)layer * cal->n_heads + (size_t)head * gs + g) * d + ch];
            sum += e[ch];
        }
        for (int ch = 0; ch < d; ch++)   /* mean 1 (all 1 when the queries are all 0) */
            k->w[ch] = sum > 0 ? (float)(e[ch] * d / sum) : 1.0f;
    }
    k->bits = bits; k->G = G; k->d = d; k->lanes = lanes;
    k->row_bytes = d * bits / 8;
    k->hdr = side == VQ_SIDE_K ? 4 * d : 4 * (d / G);
    k->n_out = n_out;
    k->plane1 = (size_t)G * d / 4;   /* bits=3: after the 2-bit plane */
    k->dshift = -1;
    for (int t = 0; t < 13; t++)
        if (d == 1 << t) k->dshift = t;
    st->side = side;
    st->state_bytes = sizeof *k + (k->w ? sizeof(float) * (size_t)d : 0);
    st->d = d;
    st->rows_per_block = side == VQ_SIDE_K ? G : 1;
    k->sp_off = (size_t)k->hdr + (size_t)st->rows_per_block * d * bits / 8;
    st->block_bytes = k->sp_off + 4 * (size_t)n_out;
    st->qstate_bytes = (size_t)d * sizeof(float);
    st->acc_floats = d;
    st->fp_window = R;
    if (kvq)
        snprintf(st->params, sizeof st->params, "bits=%d,group=%d,residual=%d,layout=%s,outliers=%s,qweight=%d",
                 bits, G, R, lanes ? "lanes" : "rows", ftxt, qw);
    else
        snprintf(st->params, sizeof st->params, "bits=%d,group=%d,residual=%d,layout=%s", bits, G, R,
                 lanes ? "lanes" : "rows");
    return VQ_OK;
}
static vq_status kivi_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                           uint64_t seed, vq_err *err) {
    (void)seed;
    return init_common(st, d, side, p, np, 0, err);
}
static vq_status kvquant_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                              uint64_t seed, vq_err *err) {
    (void)seed;
    return init_common(st, d, side, p, np, 1, err);
}
static void kivi_fini(vq_codec_state *st) {
    kivi *k = st->impl;
    if (k) free(k->w);
    free(k);
    st->impl = NULL;
}

/* ---- packing ---- */
static inline int code_get(const uint8_t *row, int b, int i) {
    const int per = 8 / b, E = 16 * per;
    const int ch = i / E, r = i % E;
    return (row[ch * 16 + r % 16] >> (b * (r / 16))) & ((1 << b) - 1);
}
static inline __attribute__((always_inline)) void code_put(uint8_t *row, int b, int i, int v) {
    const int per = 8 / b, E = 16 * per;
    const int ch = i / E, r = i % E;
    row[ch * 16 + r % 16] |= (uint8_t)(v << (b * (r / 16)));
}
/* Lanes layout of a key block's codes (after the same header: fp16 scale[d], fp16 min[d]). The G
 * tokens are cut into tiles of 16 (the last one shorter, w = G % 16 tokens, when 16 does not
 * divide G); the channels into groups of per = 8/bits. Tile T holds, for each channel group cg in
 * order, w bytes: byte j = token 16T+j's codes of channels per*cg .. per*cg+per-1 at shifts 0, b,
 * 2b, ... So one 16-byte load gives 16 tokens (SIMD lanes) of per channels; the bytes are the
 * row layout's G*d*b/8, reordered. */
static inline __attribute__((always_inline)) size_t kcode_off_b(const kivi *k, const int b, int t, int c,
                                                                int *shift) {
    const int per = 8 / b, ncg = k->d / per, T = t / 16, full = k->G / 16;
    const int w = T < full ? 16 : k->G % 16;
    *shift = b * (c % per);
    return (size_t)T * 16 * ncg + (size_t)(c / per) * w + (size_t)(t % 16);
}
/* bits=3 keys: two planes in this layout, the low 2 bits of every code (G*d/4 bytes) and then
 * the high bit (G*d/8 bytes, at plane1): a code is lo | hi << 2 */
static inline int kcode_get(const kivi *k, const uint8_t *codes, int t, int c) {
    int sh;
    if (k->bits == 3) {
        const size_t o2 = kcode_off_b(k, 2, t, c, &sh);
        const int lo = (codes[o2] >> sh) & 3;
        const size_t o1 = kcode_off_b(k, 1, t, c, &sh);
        return lo | ((codes[k->plane1 + o1] >> sh) & 1) << 2;
    }
    const size_t o = kcode_off_b(k, k->bits, t, c, &sh);
    return (codes[o] >> sh) & ((1 << k->bits) - 1);
}

/* min/max over n values at stride; stores fp16 scale and min; returns them rounded. The
 * comparisons are fminf / fmaxf's (a NaN operand gives the other one) without the libm calls. */
static inline float fmin_nan(float a, float v) { return (v < a || a != a) ? v : a; }
static inline float fmax_nan(float a, float v) { return (v > a || a != a) ? v : a; }
static void range_put(float lo, float hi, int bits, uint8_t *hs, uint8_t *hm, float *sc, float *mn) {
    f2h(hs, (hi - lo) / (float)((1 << bits) - 1));
    f2h(hm, lo);
    *sc = h2f(hs);
    *mn = h2f(hm);
}
static void minmax(const float *x, int n, int stride, int bits, uint8_t *hs, uint8_t *hm,
                   float *sc, float *mn) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) { float v = x[(size_t)i * stride]; lo = fmin_nan(lo, v); hi = fmax_nan(hi, v); }
    range_put(lo, hi, bits, hs, hm, sc, mn);
}
/* the code of x: roundf((x - mn) / sc) clamped to [0, 2^bits - 1], a NaN to 0, computed without
 * libm: c <= 0 (or NaN) gives 0 and c >= top gives top, as the clamp of roundf(c) does; between,
 * c - floor(c) is exact, so "round half away from zero" is floor + (frac >= 0.5) */
static inline __attribute__((always_inline)) int qcode(float x, float sc, float mn, const int bits) {
    if (!(sc > 0)) return 0;
    const float c = (x - mn) / sc, top = (float)((1 << bits) - 1);
    if (!(c > 0.0f)) return 0;
    if (c >= top) return (1 << bits) - 1;
    const int r = (int)c;
    return r + (c - (float)r >= 0.5f);
}

/* bits a constant (2, 3 or 4) after inlining, so the packing's divisions are shifts. Keys of
 * kvquant (n_out > 0): the block's outliers (vq_kivi_outliers) are left out of their channel's
 * min/max, get code 0 and are stored exact after the codes (u16 index r*d+c ascending, then their
 * fp16 values); so an outlier decodes to its fp16 value and scores as q_c*min_c (code 0) plus the
 * sparse correction q_c*(value - min_c). */
static inline __attribute__((always_inline)) void encode_b(const kivi *k, int side, const int b,
                                                           const float *x, uint8_t *block) {
    const int d = k->d;
    if (side == VQ_SIDE_K) {   /* per channel over G rows: header = scale[d], min[d] */
        uint8_t *codes = block + k->hdr;
        float lo[4096], hi[4096];
        uint8_t mark[VQ_KIVI_OUT_MAX];
        uint16_t idx[VQ_KIVI_OUT_MAX / 8];   /* n_out <= G*d/8 (outliers <= 0.125) */
        if (k->n_out) vq_kivi_outliers(k, x, lo, hi, mark, idx);
        for (int c = 0; c < d; c++) {
            float sc, mn;
            if (k->n_out) range_put(lo[c], hi[c], b, block + 2 * c, block + 2 * d + 2 * c, &sc, &mn);
            else minmax(x + c, k->G, d, b, block + 2 * c, block + 2 * d + 2 * c, &sc, &mn);
            if (b == 3) {
                for (int r = 0; r < k->G; r++) {
                    if (k->n_out && mark[(size_t)r * d + c]) continue;
                    const int q = qcode(x[(size_t)r * d + c], sc, mn, 3);
                    int sh;
                    size_t o = kcode_off_b(k, 2, r, c, &sh);
                    codes[o] |= (uint8_t)((q & 3) << sh);
                    o = kcode_off_b(k, 1, r, c, &sh);
                    codes[k->plane1 + o] |= (uint8_t)((q >> 2) << sh);
                }
            } else if (k->lanes) {
                for (int r = 0; r < k->G; r++) {
                    if (k->n_out && mark[(size_t)r * d + c]) continue;
                    int sh;
                    const size_t o = kcode_off_b(k, b, r, c, &sh);
                    codes[o] |= (uint8_t)(qcode(x[(size_t)r * d + c], sc, mn, b) << sh);
                }
            } else {
                for (int r = 0; r < k->G; r++)
                    if (!(k->n_out && mark[(size_t)r * d + c]))
                        code_put(codes + (size_t)r * k->row_bytes, b, c, qcode(x[(size_t)r * d + c], sc, mn, b));
            }
        }
        uint8_t *sp = block + k->sp_off;
        for (int e = 0; e < k->n_out; e++) {
            memcpy(sp + 2 * e, &idx[e], 2);
            f2h(sp + 2 * (size_t)k->n_out + 2 * e, x[idx[e]]);
        }
    } else {                   /* per token, groups of G channels: header = (scale, min)[d/G] */
        for (int g = 0; g < d / k->G; g++) {
            float sc, mn;
            minmax(x + g * k->G, k->G, 1, b, block + 4 * g, block + 4 * g + 2, &sc, &mn);
            for (int c = g * k->G; c < (g + 1) * k->G; c++)
                code_put(block + k->hdr, b, c, qcode(x[c], sc, mn, b));
        }
    }
}
static void kivi_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    const kivi *k = st->impl;
    memset(block, 0, st->block_bytes);
    if (k->bits == 2) encode_b(k, st->side, 2, x, block);
    else if (k->bits == 3) encode_b(k, st->side, 3, x, block);
    else encode_b(k, st->side, 4, x, block);
}
/* the sparse entry e of a key block: its index r*d+c, and value - min_c (what it adds to the score
 * of a query q as q_c * (value - min_c), its code being 0) */
static inline void sp_get(const kivi *k, const uint8_t *B, int e, int *r, int *c, float *val, float *dv) {
    uint16_t id;
    memcpy(&id, B + k->sp_off + 2 * (size_t)e, 2);
    *r = id / k->d;
    *c = id % k->d;
    *val = h2f(B + k->sp_off + 2 * (size_t)k->n_out + 2 * (size_t)e);
    *dv = *val - h2f(B + 2 * (size_t)k->d + 2 * (size_t)*c);
}
/* the scores of one key block's rows (query j's at s0 + j*stride): the sparse entries' terms */
static void sp_score(const kivi *k, const uint8_t *B, int n_q, const void *const *qst, float *s0,
                     size_t stride) {
    for (int e = 0; e < k->n_out; e++) {
        int r, c;
        float val, dv;
        sp_get(k, B, e, &r, &c, &val, &dv);
        for (int j = 0; j < n_q; j++) s0[(size_t)j * stride + r] += ((const float *)qst[j])[c] * dv;
    }
}
/* the same with F16C conversions, 8 values at a time, and a shift for the row when d is a power
 * of two (the SIMD paths: the scalar one above would cost about as much as the block's codes) */
T2 static void sp_score_hw(const kivi *k, const uint8_t *B, int n_q, const void *const *qst, float *s0,
                           size_t stride) {
    const int n = k->n_out, d = k->d, sh = k->dshift;
    const uint8_t *ix = B + k->sp_off, *hv = ix + 2 * (size_t)n;
    for (int e0 = 0; e0 < n; e0 += 8) {
        const int m = VQ_MIN(8, n - e0);
        uint16_t id[8] = {0}, vh[8] = {0}, mh[8] = {0};
        memcpy(id, ix + 2 * (size_t)e0, 2 * (size_t)m);
        memcpy(vh, hv + 2 * (size_t)e0, 2 * (size_t)m);
        int rr[8], cc[8];
        for (int e = 0; e < m; e++) {
            rr[e] = sh >= 0 ? id[e] >> sh : id[e] / d;
            cc[e] = sh >= 0 ? id[e] & (d - 1) : id[e] % d;
            memcpy(&mh[e], B + 2 * (size_t)d + 2 * (size_t)cc[e], 2);
        }
        float dv[8];
        _mm256_storeu_ps(dv, _mm256_sub_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)vh)),
                                           _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)mh))));
        for (int j = 0; j < n_q; j++) {
            const float *q = qst[j];
            float *o = s0 + (size_t)j * stride;
            for (int e = 0; e < m; e++) o[rr[e]] += q[cc[e]] * dv[e];
        }
    }
}
/* AVX-512, d a power of two: 16 sparse entries at a time, their channels' mins and the queries'
 * elements gathered, the products formed in one zmm per query; only the adds into the rows'
 * scores stay scalar (two entries may share a row) */
T5 static void sp_score_512(const kivi *k, const uint8_t *B, int n_q, const void *const *qst, float *s0,
                            size_t stride) {
    const int n = k->n_out, d = k->d, sh = k->dshift;
    const uint8_t *ix = B + k->sp_off, *hv = ix + 2 * (size_t)n, *mins = B + 2 * (size_t)d;
    for (int e0 = 0; e0 < n; e0 += 16) {
        const int m = VQ_MIN(16, n - e0);
        const __mmask16 live = (__mmask16)((1u << m) - 1);
        const __m512i id = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(live, ix + 2 * (size_t)e0));
        const __m512i cc = _mm512_and_si512(id, _mm512_set1_epi32(d - 1));
        /* the 4 bytes at mins + 2c: c's fp16 min in the low half (the block goes on after the
         * mins, so the high half is never past its end) */
        const __m512i mh = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, cc, mins, 2);
        const __m512 dv = _mm512_sub_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(live, hv + 2 * (size_t)e0)),
                                        _mm512_cvtph_ps(_mm512_cvtepi32_epi16(mh)));
        int rr[16];
        _mm512_storeu_si512((void *)rr, _mm512_srli_epi32(id, (unsigned)sh));
        for (int j = 0; j < n_q; j++) {
            const float *q = qst[j];
            float p[16], *o = s0 + (size_t)j * stride;
            _mm512_storeu_ps(p, _mm512_mul_ps(_mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, cc, q, 4), dv));
            for (int e = 0; e < m; e++) o[rr[e]] += p[e];
        }
    }
}
/* element (r, c) of a block, decoded */
static inline float kval(const kivi *k, int side, const uint8_t *block, int r, int c) {
    if (side == VQ_SIDE_K) {
        const int q = k->lanes ? kcode_get(k, block + k->hdr, r, c)
                               : code_get(block + k->hdr + (size_t)r * k->row_bytes, k->bits, c);
        return h2f(block + 2 * k->d + 2 * c) + h2f(block + 2 * c) * (float)q;
    }
    int g = c / k->G;
    return h2f(block + 4 * g + 2) + h2f(block + 4 * g) * (float)code_get(block + k->hdr, k->bits, c);
}
static void kivi_decode(const vq_codec_state *st, const uint8_t *block, float *x) {
    const kivi *k = st->impl;
    for (int r = 0; r < st->rows_per_block; r++)
        for (int c = 0; c < k->d; c++) x[(size_t)r * k->d + c] = kval(k, st->side, block, r, c);
    for (int e = 0; e < k->n_out; e++) {
        int r, c;
        float val, dv;
        sp_get(k, block, e, &r, &c, &val, &dv);
        x[(size_t)r * k->d + c] = val;
    }
}
static void kivi_prep(const vq_codec_state *st, const float *q, void *qs) {
    memcpy(qs, q, (size_t)st->d * sizeof(float));
}
static void kivi_finish(const vq_codec_state *st, const float *acc, float *out) {
    memcpy(out, acc, (size_t)st->d * sizeof(float));
}

/* ---- keys: per block and query, fold scale and min into the query (qs = q*scale,
 * qm = q.min), then each row costs one dot of qs with its codes ---- */
static float dot_codes_scalar(const float *qs, const uint8_t *row, int d, int b) {
    float s = 0;
    for (int c = 0; c < d; c++) s += qs[c] * (float)code_get(row, b, c);
    return s;
}
T5 static float dot_codes_512(const float *qs, const uint8_t *row, int d, int b) {
    const int per = 8 / b, E = 16 * per;
    const __m512i m = _mm512_set1_epi32((1 << b) - 1);
    __m512 a = _mm512_setzero_ps();
    for (int ch = 0; ch < d / E; ch++) {
        __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + 16 * ch)));
        for (int t = 0; t < per; t++) {
            __m512 c = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(x, b * t), m));
            a = _mm512_fmadd_ps(_mm512_loadu_ps(qs + ch * E + 16 * t), c, a);
        }
    }
    return _mm512_reduce_add_ps(a);
}
T2 static float dot_codes_256(const float *qs, const uint8_t *row, int d, int b) {
    const int per = 8 / b, E = 16 * per;
    const __m256i m = _mm256_set1_epi32((1 << b) - 1);
    __m256 a = _mm256_setzero_ps();
    for (int ch = 0; ch < d / E; ch++)
        for (int hlf = 0; hlf < 2; hlf++) {
            __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + 16 * ch + 8 * hlf)));
            for (int t = 0; t < per; t++) {
                __m256 c = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(x, b * t), m));
                a = _mm256_fmadd_ps(_mm256_loadu_ps(qs + ch * E + 16 * t + 8 * hlf), c, a);
            }
        }
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* qs[c] = q[c] * scale[c]; returns q . min (header: fp16 scale[d], fp16 min[d]) */
static float fold_scalar(const float *q, const uint8_t *B, int d, float *qs) {
    float qm = 0;
    for (int c = 0; c < d; c++) {
        qs[c] = q[c] * h2f(B + 2 * c);
        qm += q[c] * h2f(B + 2 * d + 2 * c);
    }
    return qm;
}
T2 static float fold_f16c(const float *q, const uint8_t *B, int d, float *qs) {
    __m256 m = _mm256_setzero_ps();
    for (int c = 0; c < d; c += 8) {   /* d is a multiple of 32 */
        __m256 vq = _mm256_loadu_ps(q + c);
        __m256 sc = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(B + 2 * c)));
        __m256 mn = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(B + 2 * d + 2 * c)));
        _mm256_storeu_ps(qs + c, _mm256_mul_ps(vq, sc));
        m = _mm256_fmadd_ps(vq, mn, m);
    }
    float t[8];
    _mm256_storeu_ps(t, m);
    return ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
}

/* AVX-512 keys, 16 rows of a block per call: a[r] collects row r's products, one transpose-add
 * reduction gives the 16 dot products */
T5 static void dot16_codes_512(const float *qs, const uint8_t *rows, int row_bytes, int d, int b,
                               float *out) {
    const int per = 8 / b, E = 16 * per;
    const __m512i m = _mm512_set1_epi32((1 << b) - 1);
    __m512 a[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) a[r] = _mm512_setzero_ps();
    for (int ch = 0; ch < d / E; ch++)
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++) {
            __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rows + (size_t)r * row_bytes + 16 * ch)));
            for (int t = 0; t < per; t++)
                a[r] = _mm512_fmadd_ps(_mm512_loadu_ps(qs + ch * E + 16 * t),
                                       _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(x, b * t), m)), a[r]);
        }
    _mm512_storeu_ps(out, vq_hsum16x16_512(a));
}

/* ---- lanes keys: one block's G scores from the folded query qs (qs = q*scale) and qm = q.min
 * (scalar: one query a call; SIMD: up to 4 / 3 queries a pass); SIMD lanes run across the 16
 * tokens of a tile, sums stay in registers ---- */
static void klanes_scalar(const kivi *k, int b, const float *qs, float qm, const uint8_t *codes, float *out) {
    const int per = 8 / b, ncg = k->d / per, m = (1 << b) - 1;
    for (int T = 0; T * 16 < k->G; T++) {
        const int w = VQ_MIN(16, k->G - 16 * T);
        const uint8_t *p = codes + (size_t)T * 16 * ncg;
        float a[16] = {0};
        for (int cg = 0; cg < ncg; cg++, p += w)
            for (int kk = 0; kk < per; kk++) {
                const float qv = qs[cg * per + kk];
                for (int j = 0; j < w; j++) a[j] += qv * (float)((p[j] >> (b * kk)) & m);
            }
        for (int j = 0; j < w; j++) out[16 * T + j] = b == 1 ? out[16 * T + j] + a[j] : qm + a[j];
    }
}
/* AVX-512, m queries (a constant after inlining, <= 4) in one pass over a block: each code
 * vector is expanded once and used by every query, one tile (16 tokens, lanes = tokens) at a
 * time with two sums per query (even / odd channels); qs[j] are the folded queries, qm[j] their
 * q.min. A code becomes a float by one vpermps on the table i & (2^b - 1), i = 0..15 (the
 * permute reads only the index's low 4 bits, so after the shift no mask or conversion). The GQA
 * group's queries share the block: the expansion is not repeated per query. */
T5 static inline __attribute__((always_inline)) void klanes_512_m(const int m, const float *const *qs, const float *qm,
                                   const uint8_t *codes, int ntile, int ncg, const int b,
                                   float *const *out) {
    const int per = 8 / b;
    const __m512 tab = _mm512_cvtepi32_ps(_mm512_and_si512(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32((1 << b) - 1)));
    for (int T = 0; T < ntile; T++) {
        const uint8_t *p0 = codes + (size_t)T * 16 * ncg;
        __m512 a[4][2];
#pragma GCC unroll 4
        for (int j = 0; j < m; j++) a[j][0] = a[j][1] = _mm512_setzero_ps();
        for (int cg = 0; cg < ncg; cg++) {
            const __m512i x0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p0 + 16 * cg)));
#pragma GCC unroll 8
            for (int kk = 0; kk < per; kk++) {
                const __m512 c = _mm512_permutexvar_ps(_mm512_srli_epi32(x0, b * kk), tab);
#pragma GCC unroll 4
                for (int j = 0; j < m; j++)
                    a[j][kk & 1] = _mm512_fmadd_ps(_mm512_set1_ps(qs[j][cg * per + kk]), c, a[j][kk & 1]);
            }
        }
#pragma GCC unroll 4
        for (int j = 0; j < m; j++)
            _mm512_storeu_ps(out[j] + 16 * T, _mm512_add_ps(_mm512_add_ps(a[j][0], a[j][1]), _mm512_set1_ps(qm[j])));
    }
}
#define KL512_M(M)                                                                              \
    do {                                                                                        \
        if (b == 2) klanes_512_m(M, qs, qm, codes, k->G / 16, k->d / 4, 2, out);                \
        else klanes_512_m(M, qs, qm, codes, k->G / 16, k->d / 2, 4, out);                       \
    } while (0)
/* b: 2 or 4 (3-bit keys: klanes3_512_q) */
T5 static void klanes_512_q(const kivi *k, int b, int m, const float *const *qs, const float *qm,
                            const uint8_t *codes, float *const *out) {
    switch (m) {
    case 1: KL512_M(1); break;
    case 2: KL512_M(2); break;
    case 3: KL512_M(3); break;
    default: KL512_M(4); break;
    }
}
#undef KL512_M
/* AVX-512, 3-bit keys (the 2-bit plane lo and the 1-bit plane hi, layouts of kcode_off_b), m
 * queries: one pass over both planes per tile. A channel's code lo | hi << 2 is put together in
 * the integer lanes (one vpternlogd: bits 0-1 from the shifted 2-bit byte, bit 2 from the 1-bit
 * byte shifted to it) and becomes a float by one vpermps on the table i & 7; so a channel costs
 * one expansion and m FMAs, not two of each (the planes summed apart, the high one with weight 4) */
T5 static inline __attribute__((always_inline)) void klanes3_512_m(const int m, const float *const *qs,
                                                                  const float *qm, const uint8_t *lo,
                                                                  const uint8_t *hi, int ntile, int d,
                                                                  float *const *out) {
    const __m512 tab = _mm512_cvtepi32_ps(_mm512_and_si512(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(7)));
    const __m512i three = _mm512_set1_epi32(3);
    for (int T = 0; T < ntile; T++) {
        const uint8_t *pl = lo + (size_t)T * 16 * (d / 4), *ph = hi + (size_t)T * 16 * (d / 8);
        __m512 a[4][2];
#pragma GCC unroll 4
        for (int j = 0; j < m; j++) a[j][0] = a[j][1] = _mm512_setzero_ps();
        for (int g = 0; g < d / 8; g++) {   /* 8 channels: one 1-bit group, two 2-bit groups */
            const __m512i h = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(ph + 16 * g)));
            const __m512i l0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(pl + 32 * g)));
            const __m512i l1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(pl + 32 * g + 16)));
#pragma GCC unroll 8
            for (int kk = 0; kk < 8; kk++) {
                const __m512i l = _mm512_srli_epi32(kk < 4 ? l0 : l1, 2 * (kk & 3));
                const __m512i hb = kk <= 2 ? _mm512_slli_epi32(h, 2 - kk) : _mm512_srli_epi32(h, kk - 2);
                /* (l & 3) | (hb & ~3): imm 0xE4 with A = l, B = hb, C = 3 */
                const __m512 c = _mm512_permutexvar_ps(_mm512_ternarylogic_epi32(l, hb, three, 0xE4), tab);
#pragma GCC unroll 4
                for (int j = 0; j < m; j++)
                    a[j][kk & 1] = _mm512_fmadd_ps(_mm512_set1_ps(qs[j][8 * g + kk]), c, a[j][kk & 1]);
            }
        }
#pragma GCC unroll 4
        for (int j = 0; j < m; j++)
            _mm512_storeu_ps(out[j] + 16 * T, _mm512_add_ps(_mm512_add_ps(a[j][0], a[j][1]), _mm512_set1_ps(qm[j])));
    }
}
T5 static void klanes3_512_q(const kivi *k, int m, const float *const *qs, const float *qm,
                             const uint8_t *codes, float *const *out) {
    const uint8_t *hi = codes + k->plane1;
    switch (m) {
    case 1: klanes3_512_m(1, qs, qm, codes, hi, k->G / 16, k->d, out); break;
    case 2: klanes3_512_m(2, qs, qm, codes, hi, k->G / 16, k->d, out); break;
    case 3: klanes3_512_m(3, qs, qm, codes, hi, k->G / 16, k->d, out); break;
    default: klanes3_512_m(4, qs, qm, codes, hi, k->G / 16, k->d, out); break;
    }
}
/* AVX2, m queries (<= 3) in one pass over a block, as klanes_512_m: a tile's two halves' codes
 * are expanded once per channel and used by every query (one sum per query and half) */
T2 static inline __attribute__((always_inline)) void klanes_256_m(const int m, const float *const *qs,
                                                                 const float *qm, const uint8_t *codes,
                                                                 int ntile, int ncg, const int b,
                                                                 float *const *out) {
    const int per = 8 / b;
    const __m256i mk = _mm256_set1_epi32((1 << b) - 1);
    for (int T = 0; T < ntile; T++) {
        const uint8_t *p0 = codes + (size_t)T * 16 * ncg;
        __m256 a[3][2];
#pragma GCC unroll 3
        for (int j = 0; j < m; j++) a[j][0] = a[j][1] = _mm256_setzero_ps();
        for (int cg = 0; cg < ncg; cg++) {
            const __m256i x0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p0 + 16 * cg)));
            const __m256i x1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p0 + 16 * cg + 8)));
#pragma GCC unroll 8
            for (int kk = 0; kk < per; kk++) {
                const __m256 c0 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(x0, b * kk), mk));
                const __m256 c1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(x1, b * kk), mk));
#pragma GCC unroll 3
                for (int j = 0; j < m; j++) {
                    const __m256 qv = _mm256_broadcast_ss(qs[j] + cg * per + kk);
                    a[j][0] = _mm256_fmadd_ps(qv, c0, a[j][0]);
                    a[j][1] = _mm256_fmadd_ps(qv, c1, a[j][1]);
                }
            }
        }
#pragma GCC unroll 3
        for (int j = 0; j < m; j++) {
            const __m256 vqm = _mm256_set1_ps(qm[j]);
            _mm256_storeu_ps(out[j] + 16 * T, _mm256_add_ps(a[j][0], vqm));
            _mm256_storeu_ps(out[j] + 16 * T + 8, _mm256_add_ps(a[j][1], vqm));
        }
    }
}
#define KL256_M(M)                                                                              \
    do {                                                                                        \
        if (b == 2) klanes_256_m(M, qs, qm, codes, k->G / 16, k->d / 4, 2, out);                \
        else klanes_256_m(M, qs, qm, codes, k->G / 16, k->d / 2, 4, out);                       \
    } while (0)
T2 static void klanes_256_q(const kivi *k, int b, int m, const float *const *qs, const float *qm,
                            const uint8_t *codes, float *const *out) {
    switch (m) {
    case 1: KL256_M(1); break;
    case 2: KL256_M(2); break;
    default: KL256_M(3); break;
    }
}
#undef KL256_M
/* AVX2, 3-bit keys in one pass over both planes (as klanes3_512_m): a channel's code is put
 * together in the integer lanes, (lo >> 2kk & 3) | (hi shifted so bit kk lands on bit 2, & 4),
 * then converted once and used by the m queries */
T2 static inline __attribute__((always_inline)) void klanes3_256_m(const int m, const float *const *qs,
                                                                  const float *qm, const uint8_t *lo,
                                                                  const uint8_t *hi, int ntile, int d,
                                                                  float *const *out) {
    const __m256i three = _mm256_set1_epi32(3), four = _mm256_set1_epi32(4);
    for (int T = 0; T < ntile; T++) {
        const uint8_t *pl = lo + (size_t)T * 16 * (d / 4), *ph = hi + (size_t)T * 16 * (d / 8);
        __m256 a[3][2];
#pragma GCC unroll 3
        for (int j = 0; j < m; j++) a[j][0] = a[j][1] = _mm256_setzero_ps();
        for (int g = 0; g < d / 8; g++) {
            __m256i h[2], l[2][2];
            for (int s = 0; s < 2; s++) {   /* s: tokens 0-7 and 8-15 of the tile */
                h[s] = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ph + 16 * g + 8 * s)));
                l[0][s] = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(pl + 32 * g + 8 * s)));
                l[1][s] = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(pl + 32 * g + 16 + 8 * s)));
            }
#pragma GCC unroll 8
            for (int kk = 0; kk < 8; kk++) {
                __m256 c[2];
                for (int s = 0; s < 2; s++) {
                    const __m256i lv = _mm256_and_si256(_mm256_srli_epi32(l[kk >> 2][s], 2 * (kk & 3)), three);
                    const __m256i hb = kk <= 2 ? _mm256_slli_epi32(h[s], 2 - kk) : _mm256_srli_epi32(h[s], kk - 2);
                    c[s] = _mm256_cvtepi32_ps(_mm256_or_si256(lv, _mm256_and_si256(hb, four)));
                }
#pragma GCC unroll 3
                for (int j = 0; j < m; j++) {
                    const __m256 qv = _mm256_broadcast_ss(qs[j] + 8 * g + kk);
                    a[j][0] = _mm256_fmadd_ps(qv, c[0], a[j][0]);
                    a[j][1] = _mm256_fmadd_ps(qv, c[1], a[j][1]);
                }
            }
        }
#pragma GCC unroll 3
        for (int j = 0; j < m; j++) {
            const __m256 vqm = _mm256_set1_ps(qm[j]);
            _mm256_storeu_ps(out[j] + 16 * T, _mm256_add_ps(a[j][0], vqm));
            _mm256_storeu_ps(out[j] + 16 * T + 8, _mm256_add_ps(a[j][1], vqm));
        }
    }
}
T2 static void klanes3_256_q(const kivi *k, int m, const float *const *qs, const float *qm,
                             const uint8_t *codes, float *const *out) {
    const uint8_t *hi = codes + k->plane1;
    switch (m) {
    case 1: klanes3_256_m(1, qs, qm, codes, hi, k->G / 16, k->d, out); break;
    case 2: klanes3_256_m(2, qs, qm, codes, hi, k->G / 16, k->d, out); break;
    default: klanes3_256_m(3, qs, qm, codes, hi, k->G / 16, k->d, out); break;
    }
}
/* the last tile of a block when 16 does not divide G (w < 16 tokens): scalar */
static void klanes_tail(const kivi *k, const float *qs, float qm, const uint8_t *codes, float *out) {
    for (int t = k->G / 16 * 16; t < k->G; t++) {
        float a = 0;
        for (int c = 0; c < k->d; c++) a += qs[c] * (float)kcode_get(k, codes, t, c);
        out[t] = qm + a;
    }
}

static void kivi_score(const vq_codec_state *st, int n_q, const void *const *qst,
                       const uint8_t *blocks, int n_blocks, float *scores) {
    const kivi *k = st->impl;
    const int d = k->d, b = k->bits, rpb = st->rows_per_block, n_rows = n_blocks * rpb;
    const int bp = b == 3 ? 2 : b;   /* scalar 3-bit keys: the 2-bit plane, then the high plane (b = 1) */
    const vq_isa isa = vq_cvec_isa();
    float qs[4096];   /* folded queries, d floats each (d <= 4096, checked at init) */
    if (st->side == VQ_SIDE_K && k->lanes && isa >= VQ_ISA_AVX2) {
        /* several queries per pass over a block (the GQA group shares the code expansion):
         * 4 with AVX-512, 3 with AVX2 (16 ymm), fewer when their folds do not fit in qs */
        const int mq = VQ_MIN(isa == VQ_ISA_AVX512 ? 4 : 3, 4096 / d), pf = b == 3 || k->n_out;
        const float *qp[4];
        float qm[4];
        for (int j = 0; j < mq; j++) qp[j] = qs + (size_t)j * d;
        for (int blk = 0; blk < n_blocks; blk++) {
            const uint8_t *B = blocks + (size_t)blk * st->block_bytes;
            /* 3-bit keys and kvquant's: two blocks ahead (as tq_lanes.c): their header, planes and
             * outliers are read out of address order, which the hardware prefetcher follows poorly
             * (kivi:k=3,v=4 at 16k rows: -9 %; 2- and 4-bit kivi keys gain nothing) */
            if (pf && blk + 2 < n_blocks)
                for (size_t o = 0; o < st->block_bytes; o += 64) _mm_prefetch((const char *)(B + 2 * st->block_bytes + o), _MM_HINT_T0);
            for (int j0 = 0; j0 < n_q; j0 += mq) {
                const int m = VQ_MIN(mq, n_q - j0);
                float *out[4];
                for (int j = 0; j < m; j++) {
                    qm[j] = fold_f16c(qst[j0 + j], B, d, qs + (size_t)j * d);
                    out[j] = scores + (size_t)(j0 + j) * n_rows + (size_t)blk * rpb;
                }
                if (b == 3) {   /* both planes in one pass (full tiles; the tail below) */
                    if (isa == VQ_ISA_AVX512) klanes3_512_q(k, m, qp, qm, B + k->hdr, out);
                    else klanes3_256_q(k, m, qp, qm, B + k->hdr, out);
                } else if (isa == VQ_ISA_AVX512) {
                    klanes_512_q(k, bp, m, qp, qm, B + k->hdr, out);
                } else {
                    klanes_256_q(k, bp, m, qp, qm, B + k->hdr, out);
                }
                for (int j = 0; j < m; j++) klanes_tail(k, qp[j], qm[j], B + k->hdr, out[j]);
            }
            if (k->n_out) {
                if (isa == VQ_ISA_AVX512 && k->dshift >= 0) sp_score_512(k, B, n_q, qst, scores + (size_t)blk * rpb, (size_t)n_rows);
                else sp_score_hw(k, B, n_q, qst, scores + (size_t)blk * rpb, (size_t)n_rows);
            }
        }
        return;
    }
    for (int blk = 0; blk < n_blocks; blk++) {
        const uint8_t *B = blocks + (size_t)blk * st->block_bytes;
        for (int j = 0; j < n_q; j++) {
            const float *q = qst[j];
            float *out = scores + (size_t)j * n_rows + (size_t)blk * rpb;
            if (st->side != VQ_SIDE_K) {   /* value-layout block used for scoring: reference path */
                float s = 0;
                for (int c = 0; c < d; c++) s += q[c] * kval(k, st->side, B, 0, c);
                out[0] = s;
                continue;
            }
            float qm = isa == VQ_ISA_SCALAR ? fold_scalar(q, B, d, qs) : fold_f16c(q, B, d, qs);
            if (k->lanes) {   /* scalar here: the SIMD lanes path returned above */
                klanes_scalar(k, bp, qs, qm, B + k->hdr, out);
                if (b == 3) {
                    for (int c = 0; c < d; c++) qs[c] *= 4.0f;
                    klanes_scalar(k, 1, qs, qm, B + k->hdr + k->plane1, out);
                }
                continue;
            }
            int r0 = 0;
            if (isa == VQ_ISA_AVX512)
                for (; r0 + 16 <= rpb; r0 += 16) {
                    dot16_codes_512(qs, B + k->hdr + (size_t)r0 * k->row_bytes, k->row_bytes, d, b, out + r0);
                    for (int r = r0; r < r0 + 16; r++) out[r] += qm;
                }
            for (int r = r0; r < rpb; r++) {
                const uint8_t *row = B + k->hdr + (size_t)r * k->row_bytes;
                float s = isa == VQ_ISA_AVX512 ? dot_codes_512(qs, row, d, b)
                        : isa == VQ_ISA_AVX2   ? dot_codes_256(qs, row, d, b)
                                               : dot_codes_scalar(qs, row, d, b);
                out[r] = qm + s;
            }
        }
        if (k->n_out) {
            if (isa >= VQ_ISA_AVX2) sp_score_hw(k, B, n_q, qst, scores + (size_t)blk * rpb, (size_t)n_rows);
            else sp_score(k, B, n_q, qst, scores + (size_t)blk * rpb, (size_t)n_rows);
        }
    }
}

static void kivi_accumulate(const vq_codec_state *st, int n_q, const float *w,
                            const uint8_t *blocks, int n_blocks, float *const *acc) {
    const kivi *k = st->impl;
    const int d = k->d, rpb = st->rows_per_block, n_rows = n_blocks * rpb;
    const vq_isa isa = vq_cvec_isa();
    if (st->side == VQ_SIDE_V && isa == VQ_ISA_AVX512 && d % 64 == 0) {
        vq_kivi_vfold64_512(k, blocks, st->block_bytes, n_q, w, n_rows, acc);
        return;
    }
    if (st->side == VQ_SIDE_V && isa == VQ_ISA_AVX2) {   /* d % 32 == 0 always (init) */
        vq_kivi_vfold32_256(k, blocks, st->block_bytes, n_q, w, n_rows, acc);
        return;
    }
    for (int blk = 0; blk < n_blocks; blk++) {
        const uint8_t *B = blocks + (size_t)blk * st->block_bytes;
        for (int r = 0; r < rpb; r++) {
            const int row = blk * rpb + r;
            int any = 0;
            for (int j = 0; j < n_q; j++) any |= w[(size_t)j * n_rows + row] != 0.0f;
            if (!any) continue;
            if (st->side == VQ_SIDE_V && isa == VQ_ISA_AVX512) {
                vq_kivi_vacc_row512(k, B, n_q, w + row, (size_t)n_rows, acc);
            } else {
                for (int c = 0; c < d; c++) {
                    const float v = kval(k, st->side, B, r, c);
                    for (int j = 0; j < n_q; j++) acc[j][c] += w[(size_t)j * n_rows + row] * v;
                }
            }
        }
        for (int e = 0; e < k->n_out; e++) {   /* kvquant keys: an outlier's code is 0 */
            int r, c;
            float val, dv;
            sp_get(k, B, e, &r, &c, &val, &dv);
            for (int j = 0; j < n_q; j++) acc[j][c] += w[(size_t)j * n_rows + blk * rpb + r] * dv;
        }
    }
}

const vq_codec vq_codec_kivi = {
    .name = "kivi",
    .params_help = "bits=2|4 (default 2; keys also 3, k=3), group=G tokens per key group / channels per value group "
                   "(default 32), residual=R fp16 recent rows (default 128), layout=lanes|rows (default lanes: "
                   "key codes token-interleaved per channel group); head_dim multiple of "
                   "64 (bits=2, 3) or 32 (bits=4)",
    .init = kivi_init, .fini = kivi_fini, .encode = kivi_encode, .decode = kivi_decode,
    .prep_query = kivi_prep, .score = kivi_score, .accumulate = kivi_accumulate,
    .finish = kivi_finish,
};

/* KVQuant-style keys (Hooper et al., arXiv 2401.18079): kivi's per-channel keys with a fixed count
 * of exact sparse outliers per block (kivi_outliers.c); values are kivi's. Keys are stored after
 * RoPE (KVQuant quantizes them before it): see docs/lowbit-keys.md. */
const vq_codec vq_codec_kvquant = {
    .name = "kvquant",
    .params_help = "bits=2|4 (default 2; keys also 3, k=3), outliers=F fraction of each key block's "
                   "elements kept exact as (u16 index, fp16 value), 0..0.125 (default 0.01; "
                   "ceil(F*G*head_dim) a block), group=G tokens per key group / channels per value "
                   "group (default 32), residual=R fp16 recent rows (default 0), layout=lanes|rows "
                   "(default lanes), qweight=0|1 (default 0; 1: outliers chosen by range weighted "
                   "with the calibration's query energy per channel, needs calib=FILE); head_dim "
                   "multiple of 64 (bits=2, 3) or 32 (bits=4)",
    .per_head = 1,   /* qweight: each KV head its own channel weights */
    .init = kvquant_init, .fini = kivi_fini, .encode = kivi_encode, .decode = kivi_decode,
    .prep_query = kivi_prep, .score = kivi_score, .accumulate = kivi_accumulate,
    .finish = kivi_finish,
};
