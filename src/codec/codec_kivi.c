/* codec_kivi.c: KIVI (Liu et al., arXiv 2402.02750): keys quantized per channel over a group of
 * G tokens (a block holds G rows: rows_per_block = G), values per token in groups of G channels;
 * min/max asymmetric with fp16 scale and min, 2 or 4 bits; the newest `residual` rows stay in the
 * store's fp16 window. Codes are packed in 16-byte chunks: byte j of a chunk holds elements
 * j, j+16, j+32, ... at shifts 0, b, 2b, ... so one 16-byte load expands to 16-lane vectors. */
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codec/codec.h"
#define VQ_CODEC_VEC_AVX512_HSUM
#include "codec/codec_vec.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
#define T5 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

typedef struct kivi {
    int bits, G, d;
    int row_bytes;   /* packed codes of one row: d * bits / 8 */
    int hdr;         /* bytes before the codes: K: 4*d (per-channel scale, min); V: 4*d/G */
    int lanes;       /* keys in the lanes layout (layout=lanes, the default): see kcode_off */
} kivi;

static vq_status kivi_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                           uint64_t seed, vq_err *err) {
    const vq_codec *c = st->codec;
    int bits = 2, G = 32, R = 128;
    vq_status s = vq_codec_params_check(c, p, np, "bits,group,residual,layout", err);
    if (!s) s = vq_codec_param_int(c, p, np, "bits", 2, 4, 2, &bits, err);
    if (!s && bits == 3)
        s = vq_err_set(err, VQ_ERR_ARG, "codec kivi: bits=3 not supported (2 or 4; %s)", c->params_help);
    if (!s) s = vq_codec_param_int(c, p, np, "group", 1, 4096, 32, &G, err);
    if (!s) s = vq_codec_param_int(c, p, np, "residual", 0, 1048576, 128, &R, err);
    if (s) return s;
    const char *lay = vq_codec_param_get(p, np, "layout");
    if (lay && strcmp(lay, "lanes") && strcmp(lay, "rows"))
        return vq_err_set(err, VQ_ERR_ARG, "codec kivi: layout=%s is not lanes or rows (%s)", lay,
                          c->params_help);
    const int lanes = !lay || !strcmp(lay, "lanes");
    const int chunk = 16 * 8 / bits;   /* elements per 16-byte chunk */
    if (d > 4096)
        return vq_err_set(err, VQ_ERR_ARG, "codec kivi: head_dim %d above 4096", d);
    if (d % chunk)
        return vq_err_set(err, VQ_ERR_ARG, "codec kivi: head_dim %d must be a multiple of %d for "
                          "bits=%d", d, chunk, bits);
    if (side == VQ_SIDE_V && (d % G || G % 16))
        return vq_err_set(err, VQ_ERR_ARG, "codec kivi: value groups of group=%d channels must "
                          "divide head_dim %d and be a multiple of 16", G, d);
    kivi *k = calloc(1, sizeof *k);
    if (!k) return vq_err_set(err, VQ_ERR_NOMEM, "codec kivi: out of memory");
    k->bits = bits; k->G = G; k->d = d; k->lanes = lanes;
    k->row_bytes = d * bits / 8;
    k->hdr = side == VQ_SIDE_K ? 4 * d : 4 * (d / G);
    st->impl = k;
    st->side = side;
    st->state_bytes = sizeof *k;
    st->d = d;
    st->rows_per_block = side == VQ_SIDE_K ? G : 1;
    st->block_bytes = (size_t)k->hdr + (size_t)st->rows_per_block * k->row_bytes;
    st->qstate_bytes = (size_t)d * sizeof(float);
    st->acc_floats = d;
    st->fp_window = R;
    snprintf(st->params, sizeof st->params, "bits=%d,group=%d,residual=%d,layout=%s", bits, G, R,
             lanes ? "lanes" : "rows");
    return VQ_OK;
}
static void kivi_fini(vq_codec_state *st) { free(st->impl); st->impl = NULL; }

/* ---- packing ---- */
static inline int code_get(const uint8_t *row, int b, int i) {
    const int per = 8 / b, E = 16 * per;
    const int ch = i / E, r = i % E;
    return (row[ch * 16 + r % 16] >> (b * (r / 16))) & ((1 << b) - 1);
}
static inline void code_put(uint8_t *row, int b, int i, int v) {
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
static inline size_t kcode_off(const kivi *k, int t, int c, int *shift) {
    const int per = 8 / k->bits, ncg = k->d / per, T = t / 16, full = k->G / 16;
    const int w = T < full ? 16 : k->G % 16;
    *shift = k->bits * (c % per);
    return (size_t)T * 16 * ncg + (size_t)(c / per) * w + (size_t)(t % 16);
}
static inline int kcode_get(const kivi *k, const uint8_t *codes, int t, int c) {
    int sh;
    size_t o = kcode_off(k, t, c, &sh);
    return (codes[o] >> sh) & ((1 << k->bits) - 1);
}
static inline void kcode_put(const kivi *k, uint8_t *codes, int t, int c, int v) {
    int sh;
    size_t o = kcode_off(k, t, c, &sh);
    codes[o] |= (uint8_t)(v << sh);
}
static inline float h2f(const uint8_t *p) { vq_f16 h; memcpy(&h, p, 2); return vq_f16_to_f32(h); }
T2 static inline float h2f_hw(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return _cvtsh_ss(h); }
static inline void f2h(uint8_t *p, float f) { vq_f16 h = vq_f32_to_f16(f); memcpy(p, &h, 2); }

/* min/max over n values at stride; stores fp16 scale and min; returns them rounded */
static void minmax(const float *x, int n, int stride, int bits, uint8_t *hs, uint8_t *hm,
                   float *sc, float *mn) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) { float v = x[(size_t)i * stride]; lo = fminf(lo, v); hi = fmaxf(hi, v); }
    f2h(hs, (hi - lo) / (float)((1 << bits) - 1));
    f2h(hm, lo);
    *sc = h2f(hs);
    *mn = h2f(hm);
}
static inline int qcode(float x, float sc, float mn, int bits) {
    if (!(sc > 0)) return 0;
    float c = roundf((x - mn) / sc);
    return (int)fminf((float)((1 << bits) - 1), fmaxf(0.0f, c));
}

static void kivi_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    const kivi *k = st->impl;
    const int d = k->d, b = k->bits;
    memset(block, 0, st->block_bytes);
    if (st->side == VQ_SIDE_K) {   /* per channel over G rows: header = scale[d], min[d] */
        uint8_t *codes = block + k->hdr;
        for (int c = 0; c < d; c++) {
            float sc, mn;
            minmax(x + c, k->G, d, b, block + 2 * c, block + 2 * d + 2 * c, &sc, &mn);
            for (int r = 0; r < k->G; r++) {
                const int q = qcode(x[(size_t)r * d + c], sc, mn, b);
                if (k->lanes) kcode_put(k, codes, r, c, q);
                else code_put(codes + (size_t)r * k->row_bytes, b, c, q);
            }
        }
    } else {                       /* per token, groups of G channels: header = (scale, min)[d/G] */
        for (int g = 0; g < d / k->G; g++) {
            float sc, mn;
            minmax(x + g * k->G, k->G, 1, b, block + 4 * g, block + 4 * g + 2, &sc, &mn);
            for (int c = g * k->G; c < (g + 1) * k->G; c++)
                code_put(block + k->hdr, b, c, qcode(x[c], sc, mn, b));
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

/* ---- lanes keys: one block's G scores for one query from the folded query qs (qs = q*scale)
 * and qm = q.min; SIMD lanes run across 16 tokens of a tile, sums stay in registers ---- */
static void klanes_scalar(const kivi *k, const float *qs, float qm, const uint8_t *codes, float *out) {
    const int b = k->bits, per = 8 / b, ncg = k->d / per, m = (1 << b) - 1;
    for (int T = 0; T * 16 < k->G; T++) {
        const int w = VQ_MIN(16, k->G - 16 * T);
        const uint8_t *p = codes + (size_t)T * 16 * ncg;
        float a[16] = {0};
        for (int cg = 0; cg < ncg; cg++, p += w)
            for (int kk = 0; kk < per; kk++) {
                const float qv = qs[cg * per + kk];
                for (int j = 0; j < w; j++) a[j] += qv * (float)((p[j] >> (b * kk)) & m);
            }
        for (int j = 0; j < w; j++) out[16 * T + j] = qm + a[j];
    }
}
/* AVX-512: the codes become floats by one vpermps on the table i & (2^b - 1), i = 0..15 (the
 * permute reads only the index's low 4 bits, so no mask or conversion); two tiles per pass, two
 * sums per tile (even / odd channels of a group) */
T5 static inline void klanes_512_b(const float *qs, __m512 vqm, const uint8_t *codes, int ntile,
                                   int ncg, int b, float *out) {
    const int per = 8 / b;
    const __m512 tab = _mm512_cvtepi32_ps(_mm512_and_si512(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32((1 << b) - 1)));
    int T = 0;
    for (; T + 2 <= ntile; T += 2) {
        const uint8_t *p0 = codes + (size_t)T * 16 * ncg, *p1 = p0 + 16 * ncg;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, c0 = a0, c1 = a0;
        for (int cg = 0; cg < ncg; cg++) {
            const __m512i x0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p0 + 16 * cg)));
            const __m512i x1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p1 + 16 * cg)));
            const float *q = qs + cg * per;
            for (int kk = 0; kk < per; kk += 2) {
                const __m512 qa = _mm512_set1_ps(q[kk]), qb = _mm512_set1_ps(q[kk + 1]);
                a0 = _mm512_fmadd_ps(qa, _mm512_permutexvar_ps(_mm512_srli_epi32(x0, b * kk), tab), a0);
                a1 = _mm512_fmadd_ps(qa, _mm512_permutexvar_ps(_mm512_srli_epi32(x1, b * kk), tab), a1);
                c0 = _mm512_fmadd_ps(qb, _mm512_permutexvar_ps(_mm512_srli_epi32(x0, b * (kk + 1)), tab), c0);
                c1 = _mm512_fmadd_ps(qb, _mm512_permutexvar_ps(_mm512_srli_epi32(x1, b * (kk + 1)), tab), c1);
            }
        }
        _mm512_storeu_ps(out + 16 * T, _mm512_add_ps(_mm512_add_ps(a0, c0), vqm));
        _mm512_storeu_ps(out + 16 * T + 16, _mm512_add_ps(_mm512_add_ps(a1, c1), vqm));
    }
    for (; T < ntile; T++) {
        const uint8_t *p0 = codes + (size_t)T * 16 * ncg;
        __m512 a0 = _mm512_setzero_ps(), c0 = a0;
        for (int cg = 0; cg < ncg; cg++) {
            const __m512i x0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p0 + 16 * cg)));
            const float *q = qs + cg * per;
            for (int kk = 0; kk < per; kk += 2) {
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(q[kk]), _mm512_permutexvar_ps(_mm512_srli_epi32(x0, b * kk), tab), a0);
                c0 = _mm512_fmadd_ps(_mm512_set1_ps(q[kk + 1]), _mm512_permutexvar_ps(_mm512_srli_epi32(x0, b * (kk + 1)), tab), c0);
            }
        }
        _mm512_storeu_ps(out + 16 * T, _mm512_add_ps(_mm512_add_ps(a0, c0), vqm));
    }
}
T5 static void klanes_512(const kivi *k, const float *qs, float qm, const uint8_t *codes, float *out) {
    const __m512 vqm = _mm512_set1_ps(qm);
    const int ntile = k->G / 16;
    if (k->bits == 2) klanes_512_b(qs, vqm, codes, ntile, k->d / 4, 2, out);   /* constant b: */
    else klanes_512_b(qs, vqm, codes, ntile, k->d / 2, 4, out);                /* immediate shifts */
}
/* AVX2: a tile's 16 tokens as two ymm halves (bytes 0-7, 8-15), codes masked and converted */
T2 static inline void klanes_256_b(const float *qs, float qm, const uint8_t *codes, int ntile,
                                   int ncg, int b, float *out) {
    const int per = 8 / b;
    const __m256i m = _mm256_set1_epi32((1 << b) - 1);
    const __m256 vqm = _mm256_set1_ps(qm);
    for (int T = 0; T < ntile; T++) {
        const uint8_t *p0 = codes + (size_t)T * 16 * ncg;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, c0 = a0, c1 = a0;
        for (int cg = 0; cg < ncg; cg++) {
            const __m256i x0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p0 + 16 * cg)));
            const __m256i x1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p0 + 16 * cg + 8)));
            const float *q = qs + cg * per;
            for (int kk = 0; kk < per; kk += 2) {
                const __m256 qa = _mm256_set1_ps(q[kk]), qb = _mm256_set1_ps(q[kk + 1]);
                a0 = _mm256_fmadd_ps(qa, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(x0, b * kk), m)), a0);
                a1 = _mm256_fmadd_ps(qa, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(x1, b * kk), m)), a1);
                c0 = _mm256_fmadd_ps(qb, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(x0, b * (kk + 1)), m)), c0);
                c1 = _mm256_fmadd_ps(qb, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(x1, b * (kk + 1)), m)), c1);
            }
        }
        _mm256_storeu_ps(out + 16 * T, _mm256_add_ps(_mm256_add_ps(a0, c0), vqm));
        _mm256_storeu_ps(out + 16 * T + 8, _mm256_add_ps(_mm256_add_ps(a1, c1), vqm));
    }
}
T2 static void klanes_256(const kivi *k, const float *qs, float qm, const uint8_t *codes, float *out) {
    if (k->bits == 2) klanes_256_b(qs, qm, codes, k->G / 16, k->d / 4, 2, out);
    else klanes_256_b(qs, qm, codes, k->G / 16, k->d / 2, 4, out);
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
    const vq_isa isa = vq_cvec_isa();
    float qs[4096];   /* the query folded with one block's scales (d <= 4096, checked at init) */
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
            if (k->lanes) {
                if (isa == VQ_ISA_AVX512) klanes_512(k, qs, qm, B + k->hdr, out);
                else if (isa == VQ_ISA_AVX2) klanes_256(k, qs, qm, B + k->hdr, out);
                if (isa == VQ_ISA_SCALAR) klanes_scalar(k, qs, qm, B + k->hdr, out);
                else klanes_tail(k, qs, qm, B + k->hdr, out);
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
    }
}

/* ---- values: per row, expand each 16-lane vector of codes (one group's scale and min) in
 * registers and add w * v to every query's accumulator ---- */
T5 static void vacc_512(const kivi *k, const uint8_t *B, int n_q, const float *w, size_t wstride,
                        float *const *acc) {
    const int b = k->bits, per = 8 / b, E = 16 * per, d = k->d;
    const __m512i m = _mm512_set1_epi32((1 << b) - 1);
    for (int ch = 0; ch < d / E; ch++) {
        __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(B + k->hdr + 16 * ch)));
        for (int t = 0; t < per; t++) {
            const int c0 = ch * E + 16 * t, g = c0 / k->G;
            __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(x, b * t), m)),
                                       _mm512_set1_ps(h2f_hw(B + 4 * g)), _mm512_set1_ps(h2f_hw(B + 4 * g + 2)));
            for (int j = 0; j < n_q; j++) {
                const float wj = w[(size_t)j * wstride];
                if (wj == 0.0f) continue;
                _mm512_storeu_ps(acc[j] + c0, _mm512_fmadd_ps(_mm512_set1_ps(wj), v, _mm512_loadu_ps(acc[j] + c0)));
            }
        }
    }
}
T2 static void vacc_256(const kivi *k, const uint8_t *B, int n_q, const float *w, size_t wstride,
                        float *const *acc) {
    const int b = k->bits, per = 8 / b, E = 16 * per, d = k->d;
    const __m256i m = _mm256_set1_epi32((1 << b) - 1);
    for (int ch = 0; ch < d / E; ch++)
        for (int hlf = 0; hlf < 2; hlf++) {
            __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(B + k->hdr + 16 * ch + 8 * hlf)));
            for (int t = 0; t < per; t++) {
                const int c0 = ch * E + 16 * t + 8 * hlf, g = c0 / k->G;
                __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(x, b * t), m)),
                                           _mm256_set1_ps(h2f_hw(B + 4 * g)), _mm256_set1_ps(h2f_hw(B + 4 * g + 2)));
                for (int j = 0; j < n_q; j++) {
                    const float wj = w[(size_t)j * wstride];
                    if (wj == 0.0f) continue;
                    _mm256_storeu_ps(acc[j] + c0, _mm256_fmadd_ps(_mm256_set1_ps(wj), v, _mm256_loadu_ps(acc[j] + c0)));
                }
            }
        }
}
/* AVX-512 values, d % 64 == 0: for up to 4 queries at once, 64 output lanes per query stay in
 * registers across all rows; each row's 64 values are expanded once and used by the 4 queries */
T5 static void vacc64_512(const kivi *k, const uint8_t *blocks, size_t bb, int n_q, const float *w,
                          int n_rows, float *const *acc) {
    const int b = k->bits, per = 8 / b, E = 16 * per;
    const __m512i m = _mm512_set1_epi32((1 << b) - 1);
    for (int j0 = 0; j0 < n_q; j0 += 4) {
        const int nj = VQ_MIN(4, n_q - j0);
        for (int c0 = 0; c0 < k->d; c0 += 64) {
            __m512 a[4][4];
            int chs[4], shs[4], gs[4];
            for (int t = 0; t < 4; t++) {
                const int c = c0 + 16 * t;
                chs[t] = c / E; shs[t] = b * ((c % E) / 16); gs[t] = c / k->G;
            }
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++)
                    a[j][t] = j < nj ? _mm512_loadu_ps(acc[j0 + j] + c0 + 16 * t) : _mm512_setzero_ps();
            for (int r = 0; r < n_rows; r++) {
                float wr[4];
                int any = 0;
                for (int j = 0; j < 4; j++) {
                    wr[j] = j < nj ? w[(size_t)(j0 + j) * n_rows + r] : 0.0f;
                    any |= wr[j] != 0.0f;
                }
                if (!any) continue;
                const uint8_t *B = blocks + (size_t)r * bb;
                __m512 v[4];
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++) {
                    const int ch = chs[t], sh = shs[t], g = gs[t];
                    __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(B + k->hdr + 16 * ch)));
                    v[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(x, sh), m)),
                                           _mm512_set1_ps(h2f_hw(B + 4 * g)), _mm512_set1_ps(h2f_hw(B + 4 * g + 2)));
                }
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    const __m512 vw = _mm512_set1_ps(wr[j]);
#pragma GCC unroll 4
                    for (int t = 0; t < 4; t++) a[j][t] = _mm512_fmadd_ps(vw, v[t], a[j][t]);
                }
            }
            for (int j = 0; j < nj; j++)
                for (int t = 0; t < 4; t++) _mm512_storeu_ps(acc[j0 + j] + c0 + 16 * t, a[j][t]);
        }
    }
}

static void kivi_accumulate(const vq_codec_state *st, int n_q, const float *w,
                            const uint8_t *blocks, int n_blocks, float *const *acc) {
    const kivi *k = st->impl;
    const int d = k->d, rpb = st->rows_per_block, n_rows = n_blocks * rpb;
    const vq_isa isa = vq_cvec_isa();
    if (st->side == VQ_SIDE_V && isa == VQ_ISA_AVX512 && d % 64 == 0) {
        vacc64_512(k, blocks, st->block_bytes, n_q, w, n_rows, acc);
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
                vacc_512(k, B, n_q, w + row, (size_t)n_rows, acc);
            } else if (st->side == VQ_SIDE_V && isa == VQ_ISA_AVX2) {
                vacc_256(k, B, n_q, w + row, (size_t)n_rows, acc);
            } else {
                for (int c = 0; c < d; c++) {
                    const float v = kval(k, st->side, B, r, c);
                    for (int j = 0; j < n_q; j++) acc[j][c] += w[(size_t)j * n_rows + row] * v;
                }
            }
        }
    }
}

const vq_codec vq_codec_kivi = {
    .name = "kivi",
    .params_help = "bits=2|4 (default 2), group=G tokens per key group / channels per value group "
                   "(default 32), residual=R fp16 recent rows (default 128), layout=lanes|rows (default lanes: "
                   "key codes token-interleaved per channel group); head_dim multiple of "
                   "64 (bits=2) or 32 (bits=4)",
    .init = kivi_init, .fini = kivi_fini, .encode = kivi_encode, .decode = kivi_decode,
    .prep_query = kivi_prep, .score = kivi_score, .accumulate = kivi_accumulate,
    .finish = kivi_finish,
};
