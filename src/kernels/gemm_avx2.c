/* gemm_avx2.c: the prefill GEMM kernels (gemm.h, body in gemm.inc) on 256-bit vectors with AVX2:
 * a panel is 8 rows, a group of 4 columns of it one ymm; maddubs (u8 codes x s8 activations,
 * pairs in int16: codes <= 63 here, so |pair| <= 2*63*127, no saturation) then madd by ones.
 * Q8_0 has none here (w+128 would saturate the pairs): its row kernel runs. The K-quants' bits
 * equal the AVX-512 GEMM's and the scalar kernel's (gemm.h), as tests/kernels requires. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif
#include "kernels/gemm.h"
#include <immintrin.h>
#include <string.h>

#define GSUF(n) n##_y
#define GP 8
typedef __m256i GVI;
typedef __m256 GVF;
#define G_ZEROF() _mm256_setzero_ps()
#define G_ZEROI() _mm256_setzero_si256()
#define G_SET1I(v) _mm256_set1_epi32(v)
#define G_SET1F(v) _mm256_set1_ps(v)
#define G_LOADI(p) _mm256_load_si256((const __m256i *)(const void *)(p))
#define G_LOADF(p) _mm256_load_ps(p)
#define G_DP(acc, w, x4) _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, _mm256_set1_epi32(x4)), _mm256_set1_epi16(1)))
#define G_CVT(a) _mm256_cvtepi32_ps(a)
#define G_MUL(a, b) _mm256_mul_ps(a, b)
#define G_ADD(a, b) _mm256_add_ps(a, b)
static inline __attribute__((always_inline)) void g_store(float *p, int nr, __m256 v) {
    if (nr == GP) { _mm256_storeu_ps(p, v); return; }
    _Alignas(32) float tmp[GP];
    _mm256_store_ps(tmp, v);
    memcpy(p, tmp, sizeof(float) * (size_t)nr);
}
#define G_STORE(p, nr, v) g_store(p, nr, v)
#include "gemm.inc"

void vq_gemm_q4_0_avx2(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                       int nt, int nb, float *Y, int ldy) {
    gemm_y(G_Q4_0, W, ws, nrows, xa, xs, nt, nb, Y, ldy, vq_rows_q4_0_avx2);
}
void vq_gemm_q4_k_avx2(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                       int nt, int nb, float *Y, int ldy) {
    gemm_y(G_Q4_K, W, ws, nrows, xa, xs, nt, nb, Y, ldy, vq_rows_q4_k_scalar);
}
void vq_gemm_q6_k_avx2(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                       int nt, int nb, float *Y, int ldy) {
    gemm_y(G_Q6_K, W, ws, nrows, xa, xs, nt, nb, Y, ldy, vq_rows_q6_k_scalar);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
