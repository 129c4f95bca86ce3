/* gemm_avx512.c: the prefill GEMM kernels (gemm.h, body in gemm.inc) on 512-bit vectors with
 * AVX-512 VNNI: a panel is 16 rows, a group of 4 columns of it one zmm, one vpdpbusd per token
 * and group. Compiled for that target here only; vq_gemm_pick returns these only when the CPU
 * reports avx512vnni. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#endif
#include "kernels/gemm.h"
#include <immintrin.h>
#include <string.h>

#define GSUF(n) n##_z
#define GP 16
typedef __m512i GVI;
typedef __m512 GVF;
#define G_ZEROF() _mm512_setzero_ps()
#define G_ZEROI() _mm512_setzero_si512()
#define G_SET1I(v) _mm512_set1_epi32(v)
#define G_SET1F(v) _mm512_set1_ps(v)
#define G_LOADI(p) _mm512_load_si512((const void *)(p))
#define G_LOADF(p) _mm512_load_ps(p)
#define G_DP(acc, w, x4) _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(x4))
#define G_CVT(a) _mm512_cvtepi32_ps(a)
#define G_MUL(a, b) _mm512_mul_ps(a, b)
#define G_ADD(a, b) _mm512_add_ps(a, b)
#define G_STORE(p, nr, v) _mm512_mask_storeu_ps(p, (__mmask16)((1u << (nr)) - 1), v)
static int decode_full_z(const int kind, const uint8_t *W, size_t ws, int nb, uint8_t *code, void *meta);
#define G_DECODE_FULL(kind, W, ws, nb, code, meta) decode_full_z(kind, W, ws, nb, code, meta)
#include "gemm.inc"

/* A full panel's scratch by gathers straight from the 16 rows (the bytes decode_panel writes):
 * code vector g of block b is one 16-lane dword gather at byte offset r*ws + (the dword's place
 * in the block), then the nibble / bit-field shifts. Returns 0 where it does not apply (row
 * offsets past int32, or a kind it does not know): the scalar decode runs. */
static int decode_full_z(const int kind, const uint8_t *W, size_t ws, int nb, uint8_t *code, void *meta_) {
    if ((size_t)GP * ws > 0x7fffffffu) return 0;
    int32_t *meta = meta_;
    const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)ws));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    #define GATH(off) _mm512_i32gather_epi32(_mm512_add_epi32(rows, _mm512_set1_epi32((int)(off))), (const void *)W, 1)
    #define STC(b, g, v) _mm512_store_si512((void *)(code + (size_t)(b) * GCODE + (g) * 64), v)
    #define STM(b, i, v) _mm512_store_si512((void *)(meta + (size_t)(b) * GMETA + (i) * GP), v)
    #define I2F(v) _mm512_castps_si512(_mm512_cvtepi32_ps(v))
    #define HALF2F(v) _mm512_castps_si512(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)))
    if (kind == G_Q4_0 || kind == G_Q8_0) {
        const int bb = kind == G_Q4_0 ? 18 : 34;
        for (int b = 0; b < nb; b++) {
            const int o = b * bb;
            if (kind == G_Q4_0) {
                for (int g = 0; g < 4; g++) {
                    __m512i v = GATH(o + 2 + 4 * g);
                    STC(b, g, _mm512_and_si512(v, m4));
                    STC(b, g + 4, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
                }
            } else {
                for (int g = 0; g < 8; g++) STC(b, g, _mm512_xor_si512(GATH(o + 2 + 4 * g), _mm512_set1_epi8((char)0x80)));
            }
            STM(b, 0, HALF2F(GATH(o)));
            STM(b, 1, _mm512_setzero_si512()); STM(b, 2, _mm512_setzero_si512()); STM(b, 3, _mm512_setzero_si512());
        }
        return 1;
    }
    if (kind == G_Q4_K) {
        for (int s = 0; s < nb / 8; s++) {
            const int o = s * 144;
            __m512i dd = GATH(o);   /* {d, dmin} */
            __m512i d = HALF2F(dd);
            __m512i dm = _mm512_castps_si512(_mm512_sub_ps(_mm512_setzero_ps(),
                             _mm512_castsi512_ps(HALF2F(_mm512_srli_epi32(dd, 16)))));
            /* scales: bytes 0-3 (a), 4-7 (bw), 8-11 (c) of the 12 (zq4k_scales' packing) */
            __m512i a = GATH(o + 4), bw = GATH(o + 8), c = GATH(o + 12);
            for (int j = 0; j < 8; j++) {
                __m512i sc, mn;
                if (j < 4) {
                    sc = _mm512_and_si512(_mm512_srli_epi32(a, 8 * j), _mm512_set1_epi32(63));
                    mn = _mm512_and_si512(_mm512_srli_epi32(bw, 8 * j), _mm512_set1_epi32(63));
                } else {
                    const int k = 8 * (j - 4);
                    __m512i ck = _mm512_srli_epi32(c, k);
                    sc = _mm512_or_si512(_mm512_and_si512(ck, _mm512_set1_epi32(15)),
                                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a, k + 6), _mm512_set1_epi32(3)), 4));
                    mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(ck, 4), _mm512_set1_epi32(15)),
                                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(bw, k + 6), _mm512_set1_epi32(3)), 4));
                }
                const int b = 8 * s + j;
                STM(b, 0, d); STM(b, 1, dm); STM(b, 2, I2F(sc)); STM(b, 3, I2F(mn));
                for (int g = 0; g < 8; g++) {
                    __m512i v = GATH(o + 16 + 32 * (j / 2) + 4 * g);
                    STC(b, g, _mm512_and_si512(j & 1 ? _mm512_srli_epi16(v, 4) : v, m4));
                }
            }
        }
        return 1;
    }
    if (kind == G_Q6_K) {
        for (int s = 0; s < nb / 8; s++) {
            const int o = s * 210;   /* ql 0..127, qh 128..191, scales 192..207, d 208 */
            __m512i d = HALF2F(GATH(o + 208));
            __m512i sc4[4];
            for (int i = 0; i < 4; i++) sc4[i] = GATH(o + 192 + 4 * i);
            for (int a = 0; a < 8; a++) {
                const int b = 8 * s + a, h = a / 4, q = a % 4;
                /* the signed scales 2a, 2a+1: bytes (2a)%4 and (2a+1)%4 of dword a/2 */
                __m512i w = sc4[a / 2];
                __m512i s0 = _mm512_srai_epi32(_mm512_slli_epi32(w, 24 - 8 * ((2 * a) % 4)), 24);
                __m512i s1 = _mm512_srai_epi32(_mm512_slli_epi32(w, 24 - 8 * ((2 * a + 1) % 4)), 24);
                STM(b, 0, d); STM(b, 1, _mm512_setzero_si512()); STM(b, 2, I2F(s0)); STM(b, 3, I2F(s1));
                for (int g = 0; g < 8; g++) {
                    __m512i l = GATH(o + 64 * h + 32 * (q & 1) + 4 * g);
                    __m512i hb = GATH(o + 128 + 32 * h + 4 * g);
                    l = _mm512_and_si512(q & 2 ? _mm512_srli_epi16(l, 4) : l, m4);
                    hb = _mm512_and_si512(_mm512_srli_epi16(hb, 2 * q), _mm512_set1_epi8(3));
                    STC(b, g, _mm512_or_si512(l, _mm512_slli_epi16(hb, 4)));
                }
            }
        }
        return 1;
    }
    #undef GATH
    #undef STC
    #undef STM
    #undef HALF2F
    #undef I2F
    return 0;
}

void vq_gemm_q4_0_avx512vnni(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                             int nt, int nb, float *Y, int ldy) {
    gemm_z(G_Q4_0, W, ws, nrows, xa, xs, nt, nb, Y, ldy, vq_rows_q4_0_avx512vnni);
}
void vq_gemm_q8_0_avx512vnni(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                             int nt, int nb, float *Y, int ldy) {
    gemm_z(G_Q8_0, W, ws, nrows, xa, xs, nt, nb, Y, ldy, vq_rows_q8_0_avx512vnni);
}
void vq_gemm_q4_k_avx512vnni(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                             int nt, int nb, float *Y, int ldy) {
    gemm_z(G_Q4_K, W, ws, nrows, xa, xs, nt, nb, Y, ldy, vq_rows_q4_k_scalar);
}
void vq_gemm_q6_k_avx512vnni(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                             int nt, int nb, float *Y, int ldy) {
    gemm_z(G_Q6_K, W, ws, nrows, xa, xs, nt, nb, Y, ldy, vq_rows_q6_k_scalar);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif
