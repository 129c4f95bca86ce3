/* matmul_avx2.c: AVX2+FMA+F16C row kernels. Compiled for that target here only, so the library
 * builds without -march flags and matmul.c calls these only when the CPU has AVX2.
 * Float types: 8-wide FMA (F16 through F16C); int8 types: kq256.inc (and tqw256.inc for the
 * tqw types) with maddubs+madd. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif
#include "kernels/kernels_impl.h"
#include <immintrin.h>

static inline __attribute__((always_inline)) __m256 ld_f32(const uint8_t *p) {
    return _mm256_loadu_ps((const float *)p);
}
static inline __attribute__((always_inline)) __m256 ld_f16(const uint8_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline __attribute__((always_inline)) __m256 ld_bf16(const uint8_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static float sc_f32(const uint8_t *p, int i) { float f; __builtin_memcpy(&f, p + 4 * i, 4); return f; }
static float sc_f16(const uint8_t *p, int i) { vq_f16 h; __builtin_memcpy(&h, p + 2 * i, 2); return vq_f16_to_f32(h); }
static float sc_bf16(const uint8_t *p, int i) { vq_bf16 h; __builtin_memcpy(&h, p + 2 * i, 2); return vq_bf16_to_f32(h); }

static inline __attribute__((always_inline)) float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* one weight row (esz bytes per element, LD converts 8 of them) against tn float rows */
#define FROW(name, esz, LD, SC)                                                                \
    static inline __attribute__((always_inline)) void name##_row(                              \
        const uint8_t *w, const float *const *x, int k, float *Y, int ldy, const int tn) {     \
        __m256 acc[2][VQ_TILE];                                                                \
        for (int a = 0; a < 2; a++)                                                            \
            for (int t = 0; t < tn; t++) acc[a][t] = _mm256_setzero_ps();                      \
        int i = 0;                                                                             \
        for (; i + 16 <= k; i += 16) {                                                         \
            __m256 w0 = LD(w + (size_t)i * esz), w1 = LD(w + (size_t)(i + 8) * esz);           \
            for (int t = 0; t < tn; t++) {                                                     \
                acc[0][t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), acc[0][t]);         \
                acc[1][t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[t] + i + 8), acc[1][t]);     \
            }                                                                                  \
        }                                                                                      \
        for (int t = 0; t < tn; t++) {                                                         \
            float s = hsum8(_mm256_add_ps(acc[0][t], acc[1][t]));                              \
            for (int j = i; j < k; j++) s += SC(w, j) * x[t][j];                               \
            Y[(size_t)t * ldy] = s;                                                            \
        }                                                                                      \
    }                                                                                          \
    void vq_rows_##name##_avx2(const uint8_t *W, size_t ws, int nrows, const void *xa,         \
                               size_t xs, int nt, int k, float *Y, int ldy) {                  \
        for (int t0 = 0; t0 < nt; t0 += VQ_TILE) {                                             \
            const float *x[VQ_TILE];                                                           \
            int tn = VQ_MIN(VQ_TILE, nt - t0);                                                 \
            for (int t = 0; t < tn; t++) x[t] = (const float *)((const uint8_t *)xa + (size_t)(t0 + t) * xs); \
            float *yt = Y + (size_t)t0 * ldy;                                                  \
            for (int r = 0; r < nrows; r++) {                                                  \
                const uint8_t *w = W + (size_t)r * ws;                                         \
                if (t0 == 0) vq_prefetch_row(W, ws, r, nrows);                                 \
                switch (tn) {                                                                  \
                case 1: name##_row(w, x, k, yt + r, ldy, 1); break;                            \
                case 2: name##_row(w, x, k, yt + r, ldy, 2); break;                            \
                case 3: name##_row(w, x, k, yt + r, ldy, 3); break;                            \
                default: name##_row(w, x, k, yt + r, ldy, 4); break;                           \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }
FROW(f32, 4, ld_f32, sc_f32)
FROW(f16, 2, ld_f16, sc_f16)
FROW(bf16, 2, ld_bf16, sc_bf16)

static inline __attribute__((always_inline)) __m256i dot_us_avx2(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
#define KSUF(n) n##_avx2
#define DOT_US(u, s) dot_us_avx2(u, s)
#include "kq256.inc"
#include "tqw256.inc"
#define DOT_SC(u, s, sc16, sc32) ((void)(sc32), _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc16))
#include "kquants256.inc"
#undef DOT_SC
#undef KSUF
#undef DOT_US

/* fwht: butterflies of stride >= 8 on 8-wide vectors; the strides 1, 2, 4 in-register */
void vq_fwht_avx2(float *x, int n) {
    for (int i = 0; i < n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        /* stride 1: (a+b, a-b) on adjacent pairs */
        __m256 sw = _mm256_permute_ps(v, 0xB1);
        v = _mm256_blend_ps(_mm256_add_ps(v, sw), _mm256_sub_ps(sw, v), 0xAA);
        /* stride 2 */
        sw = _mm256_permute_ps(v, 0x4E);
        v = _mm256_blend_ps(_mm256_add_ps(v, sw), _mm256_sub_ps(sw, v), 0xCC);
        /* stride 4 */
        sw = _mm256_permute2f128_ps(v, v, 0x01);
        v = _mm256_blend_ps(_mm256_add_ps(v, sw), _mm256_sub_ps(sw, v), 0xF0);
        _mm256_storeu_ps(x + i, v);
    }
    for (int h = 8; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j += 8) {
                __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
                _mm256_storeu_ps(x + j, _mm256_add_ps(a, b));
                _mm256_storeu_ps(x + j + h, _mm256_sub_ps(a, b));
            }
}

/* Activation quantization, bit-identical to vq_q8act_quantize (see matmul_avx512.c). */
void vq_q8act_quantize_avx2(const float *x, int cols, void *base) {
    int nb = cols / VQ_QK;
    int8_t *qs = base;
    float *ds = (float *)((uint8_t *)base + (size_t)nb * VQ_QK);
    int32_t *isum = (int32_t *)(ds + 2 * nb);
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int b = 0; b < nb; b++) {
        __m256 v[4];
        __m256 m = _mm256_setzero_ps(), un = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + b * VQ_QK + 8 * k);
            m = _mm256_max_ps(m, _mm256_and_ps(v[k], absm));
            un = _mm256_or_ps(un, _mm256_cmp_ps(v[k], v[k], _CMP_UNORD_Q));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        if (_mm256_movemask_ps(un)) amax = __builtin_nanf("");
        float db = amax / 127.0f, id = db > 0.0f ? 1.0f / db : 0.0f;
        __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[k], vid), lo), hi));
        __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        /* pack 32 int32 -> 32 int8 in order: packs interleave 128-bit lanes, a permute undoes it */
        __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
        __m256i p8 = _mm256_packs_epi16(p16a, p16b);
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(qs + b * VQ_QK), p8);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
        int sum = _mm_cvtsi128_si32(s4);
        ds[2 * b] = db;
        ds[2 * b + 1] = db * (float)sum;
        isum[b] = sum;
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
