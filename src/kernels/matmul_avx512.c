/* matmul_avx512.c: AVX-512 row kernels. Float types run 16 wide with masked tails; the int8
 * types use kq512.inc (vpdpbusd on zmm, two blocks per instruction), chosen only when the CPU
 * reports avx512vnni. Compiled for the target here only; matmul.c dispatches at run time. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#endif
#include "kernels/kernels_impl.h"
#include <immintrin.h>

static inline __attribute__((always_inline)) __m512 ld_f32(const uint8_t *p, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, p);
}
static inline __attribute__((always_inline)) __m512 ld_f16(const uint8_t *p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
static inline __attribute__((always_inline)) __m512 ld_bf16(const uint8_t *p, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

#define FROW(name, esz, LD)                                                                    \
    static inline __attribute__((always_inline)) void name##_row(                              \
        const uint8_t *w, const float *const *x, int k, float *Y, int ldy, const int tn) {     \
        __m512 acc[2][VQ_TILE];                                                                \
        for (int a = 0; a < 2; a++)                                                            \
            for (int t = 0; t < tn; t++) acc[a][t] = _mm512_setzero_ps();                      \
        int i = 0;                                                                             \
        for (; i + 32 <= k; i += 32) {                                                         \
            __m512 w0 = LD(w + (size_t)i * esz, 0xFFFF), w1 = LD(w + (size_t)(i + 16) * esz, 0xFFFF); \
            for (int t = 0; t < tn; t++) {                                                     \
                acc[0][t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + i), acc[0][t]);         \
                acc[1][t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[t] + i + 16), acc[1][t]);    \
            }                                                                                  \
        }                                                                                      \
        for (; i < k; i += 16) {                                                               \
            __mmask16 m = k - i >= 16 ? 0xFFFF : (__mmask16)((1u << (k - i)) - 1);            \
            __m512 w0 = LD(w + (size_t)i * esz, m);                                            \
            for (int t = 0; t < tn; t++)                                                       \
                acc[0][t] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, x[t] + i), acc[0][t]); \
        }                                                                                      \
        for (int t = 0; t < tn; t++)                                                           \
            Y[(size_t)t * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0][t], acc[1][t]));   \
    }                                                                                          \
    void vq_rows_##name##_avx512(const uint8_t *W, size_t ws, int nrows, const void *xa,       \
                                 size_t xs, int nt, int k, float *Y, int ldy) {                \
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
FROW(f32, 4, ld_f32)
FROW(f16, 2, ld_f16)
FROW(bf16, 2, ld_bf16)

#include "kq512.inc"
#include "tqw512.inc"
/* the K-quants on 256-bit vectors with vpdpbusd (AVX512-VL + VNNI) */
#define KSUF(n) n##_avx512vnni
#define DOT_SC(u, s, sc16, sc32) ((void)(sc16), _mm256_mullo_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s), sc32))
#include "kquants256.inc"
#undef DOT_SC
#undef KSUF
#include "kquants512.inc"

/* fwht: strides 1..8 inside one 16-float register, larger strides as whole-vector butterflies */
void vq_fwht_avx512(float *x, int n) {
    const __m512i p1 = _mm512_set_epi32(14, 15, 12, 13, 10, 11, 8, 9, 6, 7, 4, 5, 2, 3, 0, 1);
    const __m512i p2 = _mm512_set_epi32(13, 12, 15, 14, 9, 8, 11, 10, 5, 4, 7, 6, 1, 0, 3, 2);
    const __m512i p4 = _mm512_set_epi32(11, 10, 9, 8, 15, 14, 13, 12, 3, 2, 1, 0, 7, 6, 5, 4);
    const __m512i p8 = _mm512_set_epi32(7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8);
    for (int i = 0; i < n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i), sw;
        /* lanes with the stride bit set take (partner - self), the others (self + partner) */
        sw = _mm512_permutexvar_ps(p1, v);
        v = _mm512_mask_sub_ps(_mm512_add_ps(v, sw), 0xAAAA, sw, v);
        sw = _mm512_permutexvar_ps(p2, v);
        v = _mm512_mask_sub_ps(_mm512_add_ps(v, sw), 0xCCCC, sw, v);
        sw = _mm512_permutexvar_ps(p4, v);
        v = _mm512_mask_sub_ps(_mm512_add_ps(v, sw), 0xF0F0, sw, v);
        sw = _mm512_permutexvar_ps(p8, v);
        v = _mm512_mask_sub_ps(_mm512_add_ps(v, sw), 0xFF00, sw, v);
        _mm512_storeu_ps(x + i, v);
    }
    for (int h = 16; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j += 16) {
                __m512 a = _mm512_loadu_ps(x + j), b = _mm512_loadu_ps(x + j + h);
                _mm512_storeu_ps(x + j, _mm512_add_ps(a, b));
                _mm512_storeu_ps(x + j + h, _mm512_sub_ps(a, b));
            }
}

/* Activation quantization, bit-identical to vq_q8act_quantize: same amax, same d and 1/d,
 * same clamp (NaN -> -127), and cvtps2dq under the default round-half-even mode equals the
 * scalar 1.5*2^23 trick for |v| <= 127. */
void vq_q8act_quantize_avx512(const float *x, int cols, void *base) {
    int nb = cols / VQ_QK;
    int8_t *qs = base;
    float *ds = (float *)((uint8_t *)base + (size_t)nb * VQ_QK);
    int32_t *isum = (int32_t *)(ds + 2 * nb);
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    for (int b = 0; b < nb; b++) {
        __m512 a = _mm512_loadu_ps(x + b * VQ_QK), c = _mm512_loadu_ps(x + b * VQ_QK + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
        if (_mm512_cmp_ps_mask(a, c, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) |
            _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q))
            amax = __builtin_nanf("");
        float db = amax / 127.0f, id = db > 0.0f ? 1.0f / db : 0.0f;
        __m512 vid = _mm512_set1_ps(id);
        /* max(v, -127) returns -127 for NaN v, as the scalar clamp does */
        __m512i ia = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(a, vid), lo), hi));
        __m512i ic = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(c, vid), lo), hi));
        _mm_storeu_si128((__m128i *)(qs + b * VQ_QK), _mm512_cvtsepi32_epi8(ia));
        _mm_storeu_si128((__m128i *)(qs + b * VQ_QK + 16), _mm512_cvtsepi32_epi8(ic));
        int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(ia, ic));
        ds[2 * b] = db;
        ds[2 * b + 1] = db * (float)sum;
        isum[b] = sum;
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
