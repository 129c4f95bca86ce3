/* q4x16_avx512.c: the q4_0x16 row kernel (repack.c has the layout) on 512-bit vectors with
 * AVX-512 VNNI. Per block of a 16-row group: four 64-byte loads give, after a mask and a shift,
 * 8 code vectors (lane r: four unsigned nibbles of row r), each multiplied by one broadcast
 * 4-byte group of a token's activations (vpdpbusd); the 16 rows' fp16 scales convert in one
 * instruction; no horizontal sums. The arithmetic is Q4_0's scalar kernel's, lane by lane:
 *   sumi = sum(q*x) - 8*sum(x) (exact integers), y += (d*dx) * (float)sumi (a multiply then an
 *   add, no contraction), blocks in order
 * so the outputs are vq_rows_q4_0_scalar's bits on the same matrix (tests/kernels/test_repack.c).
 * Compiled for that target here only; matmul.c picks it only when the CPU reports avx512vnni. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))), apply_to = function)
#pragma clang fp contract(off)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#pragma GCC optimize("fp-contract=off")
#endif
#include "kernels/kernels_impl.h"
#include <immintrin.h>
#include <string.h>

#define QINL static inline __attribute__((always_inline))
#define Q4X16_TILE 4   /* tokens per pass over a group's weights */
#define Q4X16_GB (VQ_Q4X16_ROWS * 18)   /* bytes of one block of one group */
/* No software prefetch (unlike the row kernels, vq_prefetch_row): a group is one sequential
 * stream the hardware prefetcher follows, and prefetching 4 KiB ahead made these kernels 10-35 %
 * slower per matrix (8192x3072, 1 thread, 2026-12-08 log). */

QINL int32_t x4(const int8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }

QINL void q4x16_group(const uint8_t *g, int nb, const int8_t *const *xq, const float *const *xds,
                      const int32_t *const *xis, float *Y, int ldy, const int tn) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 acc[Q4X16_TILE];
    for (int t = 0; t < tn; t++) acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++, g += Q4X16_GB) {
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        __m512i lo[4], hi[4];
        for (int c = 0; c < 4; c++) {
            __m512i v = _mm512_loadu_si512((const void *)(g + 32 + 64 * c));
            lo[c] = _mm512_and_si512(v, m4);
            hi[c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        for (int t = 0; t < tn; t++) {
            const int8_t *xp = xq[t] + (size_t)b * VQ_QK;
            /* the sum starts at -8*sum(x): lane r ends at sum((q-8)*x), the scalar's integer */
            __m512i s0 = _mm512_set1_epi32(-8 * xis[t][b]), s1 = _mm512_setzero_si512();
            s0 = _mm512_dpbusd_epi32(s0, lo[0], _mm512_set1_epi32(x4(xp + 0)));
            s1 = _mm512_dpbusd_epi32(s1, hi[0], _mm512_set1_epi32(x4(xp + 16)));
            s0 = _mm512_dpbusd_epi32(s0, lo[1], _mm512_set1_epi32(x4(xp + 4)));
            s1 = _mm512_dpbusd_epi32(s1, hi[1], _mm512_set1_epi32(x4(xp + 20)));
            s0 = _mm512_dpbusd_epi32(s0, lo[2], _mm512_set1_epi32(x4(xp + 8)));
            s1 = _mm512_dpbusd_epi32(s1, hi[2], _mm512_set1_epi32(x4(xp + 24)));
            s0 = _mm512_dpbusd_epi32(s0, lo[3], _mm512_set1_epi32(x4(xp + 12)));
            s1 = _mm512_dpbusd_epi32(s1, hi[3], _mm512_set1_epi32(x4(xp + 28)));
            __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(xds[t][2 * b]));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(sc, _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1))));
        }
    }
    for (int t = 0; t < tn; t++) _mm512_storeu_ps(Y + (size_t)t * ldy, acc[t]);
}

void vq_rows_q4_0x16_avx512vnni(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                                int nt, int nb, float *Y, int ldy) {
    for (int t0 = 0; t0 < nt; t0 += Q4X16_TILE) {
        const int8_t *xq[Q4X16_TILE]; const float *xds[Q4X16_TILE]; const int32_t *xis[Q4X16_TILE];
        const int tn = VQ_MIN(Q4X16_TILE, nt - t0);
        for (int t = 0; t < tn; t++) {
            const void *xb = (const uint8_t *)xa + (size_t)(t0 + t) * xs;
            xq[t] = xb; xds[t] = vq_q8act_ds(xb, nb); xis[t] = vq_q8act_isum(xb, nb);
        }
        for (int r = 0; r < nrows; r += VQ_Q4X16_ROWS) {
            const uint8_t *g = W + (size_t)r * ws;
            float *y = Y + (size_t)t0 * ldy + r;
            switch (tn) {
            case 1: q4x16_group(g, nb, xq, xds, xis, y, ldy, 1); break;
            case 2: q4x16_group(g, nb, xq, xds, xis, y, ldy, 2); break;
            case 3: q4x16_group(g, nb, xq, xds, xis, y, ldy, 3); break;
            default: q4x16_group(g, nb, xq, xds, xis, y, ldy, 4); break;
            }
        }
    }
}

/* q4_Kx16: per 32-column sub-block the same 8 products, then Q4_K's scalar steps lane by lane:
 *   s1 = sc*sum(q*x), s2 = m*sum(x) (exact integers; the scale and min are those of both
 *   16-halves), y += (d*dx) * (float)s1, y += (-dmin*dx) * (float)s2 */
#define K16_SB (VQ_Q4X16_ROWS * 148)
QINL void q4kx16_group(const uint8_t *g, int nb, const int8_t *const *xq, const float *const *xds,
                       const int32_t *const *xis, float *Y, int ldy, const int tn) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    __m512 acc[Q4X16_TILE];
    for (int t = 0; t < tn; t++) acc[t] = _mm512_setzero_ps();
    for (int sb = 0; sb < nb / 8; sb++, g += K16_SB) {
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        const __m512 dm = _mm512_xor_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 32))), sign);
        for (int a = 0; a < 8; a++) {
            const uint8_t *q = g + 64 + 8 * 32 + 256 * a;
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(g + 64 + 32 * a)));
            const __m512i mn = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(g + 64 + 32 * a + 16)));
            __m512i lo[4], hi[4];
            for (int c = 0; c < 4; c++) {
                __m512i v = _mm512_loadu_si512((const void *)(q + 64 * c));
                lo[c] = _mm512_and_si512(v, m4);
                hi[c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            }
            const int ab = sb * 8 + a;
            for (int t = 0; t < tn; t++) {
                const int8_t *xp = xq[t] + (size_t)ab * VQ_QK;
                __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
                s0 = _mm512_dpbusd_epi32(s0, lo[0], _mm512_set1_epi32(x4(xp + 0)));
                s1 = _mm512_dpbusd_epi32(s1, hi[0], _mm512_set1_epi32(x4(xp + 16)));
                s0 = _mm512_dpbusd_epi32(s0, lo[1], _mm512_set1_epi32(x4(xp + 4)));
                s1 = _mm512_dpbusd_epi32(s1, hi[1], _mm512_set1_epi32(x4(xp + 20)));
                s0 = _mm512_dpbusd_epi32(s0, lo[2], _mm512_set1_epi32(x4(xp + 8)));
                s1 = _mm512_dpbusd_epi32(s1, hi[2], _mm512_set1_epi32(x4(xp + 24)));
                s0 = _mm512_dpbusd_epi32(s0, lo[3], _mm512_set1_epi32(x4(xp + 12)));
                s1 = _mm512_dpbusd_epi32(s1, hi[3], _mm512_set1_epi32(x4(xp + 28)));
                const __m512i i1 = _mm512_mullo_epi32(sc, _mm512_add_epi32(s0, s1));
                const __m512i i2 = _mm512_mullo_epi32(mn, _mm512_set1_epi32(xis[t][ab]));
                const __m512 dx = _mm512_set1_ps(xds[t][2 * ab]);
                acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(i1)));
                acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_mul_ps(dm, dx), _mm512_cvtepi32_ps(i2)));
            }
        }
    }
    for (int t = 0; t < tn; t++) _mm512_storeu_ps(Y + (size_t)t * ldy, acc[t]);
}

void vq_rows_q4_kx16_avx512vnni(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                                int nt, int nb, float *Y, int ldy) {
    for (int t0 = 0; t0 < nt; t0 += Q4X16_TILE) {
        const int8_t *xq[Q4X16_TILE]; const float *xds[Q4X16_TILE]; const int32_t *xis[Q4X16_TILE];
        const int tn = VQ_MIN(Q4X16_TILE, nt - t0);
        for (int t = 0; t < tn; t++) {
            const void *xb = (const uint8_t *)xa + (size_t)(t0 + t) * xs;
            xq[t] = xb; xds[t] = vq_q8act_ds(xb, nb); xis[t] = vq_q8act_isum(xb, nb);
        }
        for (int r = 0; r < nrows; r += VQ_Q4X16_ROWS) {
            const uint8_t *g = W + (size_t)r * ws;
            float *y = Y + (size_t)t0 * ldy + r;
            switch (tn) {
            case 1: q4kx16_group(g, nb, xq, xds, xis, y, ldy, 1); break;
            case 2: q4kx16_group(g, nb, xq, xds, xis, y, ldy, 2); break;
            case 3: q4kx16_group(g, nb, xq, xds, xis, y, ldy, 3); break;
            default: q4kx16_group(g, nb, xq, xds, xis, y, ldy, 4); break;
            }
        }
    }
}

/* q6_Kx16: per sub-block 8 code vectors of 6-bit unsigned codes (nibble | top bits << 4), each
 * half's sum started at -32*sum(x over that half) so lane r holds sum((q-32)*x) exactly, then
 * Q6_K's scalar steps: s1 = sc0*sum_lo + sc1*sum_hi, y += (d*dx) * (float)s1 */
#define Q6_SB (VQ_Q4X16_ROWS * 210)
QINL void q6kx16_group(const uint8_t *g, int nb, const int8_t *const *xq, const float *const *xds,
                       const int32_t *const *xis, const int32_t *const *xh0, float *Y, int ldy,
                       const int tn) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    __m512 acc[Q4X16_TILE];
    for (int t = 0; t < tn; t++) acc[t] = _mm512_setzero_ps();
    for (int sb = 0; sb < nb / 8; sb++, g += Q6_SB) {
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        for (int a = 0; a < 8; a++) {
            const uint8_t *q = g + 32 + 8 * 32 + 384 * a;
            const __m512i sc0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(g + 32 + 32 * a)));
            const __m512i sc1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(g + 32 + 32 * a + 16)));
            const __m512i h0 = _mm512_loadu_si512((const void *)(q + 256));
            const __m512i h1 = _mm512_loadu_si512((const void *)(q + 320));
            __m512i lo[4], hi[4];
            for (int c = 0; c < 4; c++) {
                __m512i v = _mm512_loadu_si512((const void *)(q + 64 * c));
                /* top bits of field c moved to bits 4-5 */
                __m512i t0 = c == 0 ? _mm512_slli_epi16(h0, 4) : c == 1 ? _mm512_slli_epi16(h0, 2)
                           : c == 2 ? h0 : _mm512_srli_epi16(h0, 2);
                __m512i t1 = c == 0 ? _mm512_slli_epi16(h1, 4) : c == 1 ? _mm512_slli_epi16(h1, 2)
                           : c == 2 ? h1 : _mm512_srli_epi16(h1, 2);
                lo[c] = _mm512_ternarylogic_epi32(_mm512_and_si512(v, m4), t0, m30, 0xF8);   /* a | (b & c) */
                hi[c] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), t1, m30, 0xF8);
            }
            const int ab = sb * 8 + a;
            for (int t = 0; t < tn; t++) {
                const int8_t *xp = xq[t] + (size_t)ab * VQ_QK;
                const int32_t x0 = xh0[t][ab], x1 = xis[t][ab] - x0;
                __m512i s0 = _mm512_set1_epi32(-32 * x0), s1 = _mm512_set1_epi32(-32 * x1);
                s0 = _mm512_dpbusd_epi32(s0, lo[0], _mm512_set1_epi32(x4(xp + 0)));
                s1 = _mm512_dpbusd_epi32(s1, hi[0], _mm512_set1_epi32(x4(xp + 16)));
                s0 = _mm512_dpbusd_epi32(s0, lo[1], _mm512_set1_epi32(x4(xp + 4)));
                s1 = _mm512_dpbusd_epi32(s1, hi[1], _mm512_set1_epi32(x4(xp + 20)));
                s0 = _mm512_dpbusd_epi32(s0, lo[2], _mm512_set1_epi32(x4(xp + 8)));
                s1 = _mm512_dpbusd_epi32(s1, hi[2], _mm512_set1_epi32(x4(xp + 24)));
                s0 = _mm512_dpbusd_epi32(s0, lo[3], _mm512_set1_epi32(x4(xp + 12)));
                s1 = _mm512_dpbusd_epi32(s1, hi[3], _mm512_set1_epi32(x4(xp + 28)));
                const __m512i i1 = _mm512_add_epi32(_mm512_mullo_epi32(sc0, s0), _mm512_mullo_epi32(sc1, s1));
                const __m512 dx = _mm512_set1_ps(xds[t][2 * ab]);
                acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(i1)));
            }
        }
    }
    for (int t = 0; t < tn; t++) _mm512_storeu_ps(Y + (size_t)t * ldy, acc[t]);
}

void vq_rows_q6_kx16_avx512vnni(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                                int nt, int nb, float *Y, int ldy) {
    int32_t hbuf[Q4X16_TILE][512];   /* sum(x) of each block's first half; nb <= 512 here, else scalar */
    if (nb > 512) { vq_rows_q6_kx16_scalar(W, ws, nrows, xa, xs, nt, nb, Y, ldy); return; }
    for (int t0 = 0; t0 < nt; t0 += Q4X16_TILE) {
        const int8_t *xq[Q4X16_TILE]; const float *xds[Q4X16_TILE];
        const int32_t *xis[Q4X16_TILE], *xh0[Q4X16_TILE];
        const int tn = VQ_MIN(Q4X16_TILE, nt - t0);
        for (int t = 0; t < tn; t++) {
            const void *xb = (const uint8_t *)xa + (size_t)(t0 + t) * xs;
            xq[t] = xb; xds[t] = vq_q8act_ds(xb, nb); xis[t] = vq_q8act_isum(xb, nb);
            for (int b = 0; b < nb; b++) {
                int sx = 0;
                for (int j = 0; j < 16; j++) sx += xq[t][b * VQ_QK + j];
                hbuf[t][b] = sx;
            }
            xh0[t] = hbuf[t];
        }
        for (int r = 0; r < nrows; r += VQ_Q4X16_ROWS) {
            const uint8_t *g = W + (size_t)r * ws;
            float *y = Y + (size_t)t0 * ldy + r;
            switch (tn) {
            case 1: q6kx16_group(g, nb, xq, xds, xis, xh0, y, ldy, 1); break;
            case 2: q6kx16_group(g, nb, xq, xds, xis, xh0, y, ldy, 2); break;
            case 3: q6kx16_group(g, nb, xq, xds, xis, xh0, y, ldy, 3); break;
            default: q6kx16_group(g, nb, xq, xds, xis, xh0, y, ldy, 4); break;
            }
        }
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
