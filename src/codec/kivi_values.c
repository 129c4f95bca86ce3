/* kivi_values.c: KIVI's per-token values (one row per block: fp16 (scale, min) per group of G
 * channels, then the codes in 16-byte chunks), summed into the accumulators from the codes:
 * the AVX-512 per-row loop and the loops that fold the scale into the weights (AVX-512, AVX2).
 * The scalar loop and the dispatch are codec_kivi.c's (kivi_accumulate). */
#include <stdint.h>
#include "codec/kivi.h"

/* the dwords (fp16 scale, fp16 min) at p, p + bb, ... of n consecutive value blocks (bb bytes
 * apart; p points at one group's pair in the first), n <= 8 / 16, lanes past n zero. Full chunks are put together in registers (scalar loads and
 * inserts): written to a stack array and read back as one vector they stalled on store
 * forwarding, once per group and chunk (perf: the multiply after it was the loop's top line) */
static inline uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
T2 static inline __m256i hdr8(const uint8_t *p, size_t bb, int n) {
    if (n == 8)
        return _mm256_setr_epi32((int)ld32(p), (int)ld32(p + bb), (int)ld32(p + 2 * bb), (int)ld32(p + 3 * bb),
                                 (int)ld32(p + 4 * bb), (int)ld32(p + 5 * bb), (int)ld32(p + 6 * bb), (int)ld32(p + 7 * bb));
    uint32_t v[8] = {0};
    for (int r = 0; r < n; r++) v[r] = ld32(p + (size_t)r * bb);
    return _mm256_loadu_si256((const __m256i *)v);
}
T5 static inline __m512i hdr16(const uint8_t *p, size_t bb, int n) {
    if (n == 16)
        return _mm512_inserti64x4(_mm512_castsi256_si512(hdr8(p, bb, 8)), hdr8(p + 8 * bb, bb, 8), 1);
    uint32_t v[16] = {0};
    for (int r = 0; r < n; r++) v[r] = ld32(p + (size_t)r * bb);
    return _mm512_loadu_si512((const void *)v);
}

/* ---- values: per row, expand each 16-lane vector of codes (one group's scale and min) in
 * registers and add w * v to every query's accumulator ---- */
T5 void vq_kivi_vacc_row512(const kivi *k, const uint8_t *B, int n_q, const float *w, size_t wstride,
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
/* AVX-512 values, d % 64 == 0, the scale folded into the weights: with v_c = m_g + s_g code_c
 * (g = c / G), sum_r w_r v_rc = sum_r (w_r s_rg) code_rc + sum_r w_r m_rg. For each 16-row chunk
 * the (scale, min) pairs of the rows are read once (one dword per row and group), ws = w * s is
 * stored for the row loop and the min term summed in vectors; the row loop then only expands the
 * codes (shift, one vpermps on the table i & (2^b - 1)) and does one FMA per query and 16
 * channels with the broadcast ws: no per-row fp16 conversion, no value FMA. A row of weight 0
 * contributes nothing (masked, so a non-finite pair is never multiplied by 0). Up to 4 queries x
 * 64 channels (16 zmm) stay in registers across the rows; the min terms are added at the end. */
T5 static inline __attribute__((always_inline)) void vfold64_m(const kivi *k, const int m, const int b,
                                                              const uint8_t *blocks, size_t bb,
                                                              const float *w, int n_rows,
                                                              float *const *acc, int c0) {
    const int per = 8 / b, E = 16 * per, G = k->G;
    const __m512 tab = _mm512_cvtepi32_ps(_mm512_and_si512(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32((1 << b) - 1)));
    const int g0 = c0 / G, ng = (c0 + 63) / G - g0 + 1;   /* groups met by channels c0..c0+63 */
    int gt[4];
    for (int t = 0; t < 4; t++) gt[t] = (c0 + 16 * t) / G - g0;
    __m512 a[4][4], mt[4][4];
    float ws[4][4][16];
#pragma GCC unroll 4
    for (int j = 0; j < m; j++)
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) a[j][t] = _mm512_loadu_ps(acc[j] + c0 + 16 * t);
    for (int j = 0; j < m; j++)
        for (int g = 0; g < ng; g++) mt[j][g] = _mm512_setzero_ps();
    for (int r0 = 0; r0 < n_rows; r0 += 16) {
        const int nr = VQ_MIN(16, n_rows - r0);
        const __mmask16 live = (__mmask16)((1u << nr) - 1);
        const uint8_t *base = blocks + (size_t)r0 * bb;
        if (c0 == 0 && r0 + 48 <= n_rows)   /* first pass: the rows 32 ahead (their headers are the first touch) */
            for (size_t o = 0; o < 16 * bb; o += 64) _mm_prefetch((const char *)(base + 32 * bb + o), _MM_HINT_T0);
        __m512 wv[4];
        __mmask16 nz[4];
#pragma GCC unroll 4
        for (int j = 0; j < m; j++) {
            wv[j] = _mm512_maskz_loadu_ps(live, w + (size_t)j * n_rows + r0);
            nz[j] = _mm512_cmp_ps_mask(wv[j], _mm512_setzero_ps(), _CMP_NEQ_UQ);
        }
        for (int g = 0; g < ng; g++) {   /* the rows' fp16 (scale, min) of group g0 + g: one dword each */
            const __m512i sm = hdr16(base + 4 * (g0 + g), bb, nr);   /* a zmm gather is slower (Zen 4) */
            const __m512 sc = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(sm));
            const __m512 mn = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(sm, 16)));
#pragma GCC unroll 4
            for (int j = 0; j < m; j++) {
                _mm512_storeu_ps(ws[j][g], _mm512_maskz_mul_ps(nz[j], wv[j], sc));
                mt[j][g] = _mm512_mask3_fmadd_ps(wv[j], mn, mt[j][g], nz[j]);
            }
        }
        for (int r = 0; r < nr; r++) {
            const uint8_t *codes = base + (size_t)r * bb + k->hdr;
            __m512 c[4];
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                const int cc = c0 + 16 * t, ch = cc / E, sh = b * ((cc % E) / 16);
                const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(codes + 16 * ch)));
                c[t] = _mm512_permutexvar_ps(_mm512_srli_epi32(x, sh), tab);
            }
#pragma GCC unroll 4
            for (int j = 0; j < m; j++)
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++)
                    a[j][t] = _mm512_fmadd_ps(_mm512_set1_ps(ws[j][gt[t]][r]), c[t], a[j][t]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < m; j++) {
        float mg[4];
        for (int g = 0; g < ng; g++) mg[g] = _mm512_reduce_add_ps(mt[j][g]);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            _mm512_storeu_ps(acc[j] + c0 + 16 * t, _mm512_add_ps(a[j][t], _mm512_set1_ps(mg[gt[t]])));
    }
}
#define VF64(M)                                                                         \
    do {                                                                                \
        if (k->bits == 2) vfold64_m(k, M, 2, blocks, bb, wj, n_rows, aj, c0);           \
        else vfold64_m(k, M, 4, blocks, bb, wj, n_rows, aj, c0);                        \
    } while (0)
T5 void vq_kivi_vfold64_512(const kivi *k, const uint8_t *blocks, size_t bb, int n_q, const float *w,
                           int n_rows, float *const *acc) {
    for (int j0 = 0; j0 < n_q; j0 += 4) {
        const float *wj = w + (size_t)j0 * n_rows;
        float *const *aj = acc + j0;
        for (int c0 = 0; c0 < k->d; c0 += 64) switch (VQ_MIN(4, n_q - j0)) {
            case 1: VF64(1); break;
            case 2: VF64(2); break;
            case 3: VF64(3); break;
            default: VF64(4); break;
            }
    }
}
#undef VF64

/* AVX2 values, the same fold as vfold64_m: up to 3 queries x 32 channels (12 ymm) in registers
 * across the rows, 8-row chunks: the rows' (scale, min) dwords put together in a ymm (hdr8),
 * split and converted 8 at a time; the row loop expands one 8-channel code vector at a time
 * (shift, mask, int->float) and does one FMA per query with the broadcast w*s: with all four
 * expanded first, the 12 sums did not fit the 16 ymm and were spilled on every row */
T2 static inline __attribute__((always_inline)) void vfold32_m(const kivi *k, const int m, const int b,
                                                              const uint8_t *blocks, size_t bb,
                                                              const float *w, int n_rows,
                                                              float *const *acc, int c0) {
    const int per = 8 / b, E = 16 * per, G = k->G;
    const __m256i mk = _mm256_set1_epi32((1 << b) - 1);
    const int g0 = c0 / G, ng = (c0 + 31) / G - g0 + 1;   /* 1 or 2 (G >= 16) */
    int gt[4], off[4], sh[4];
    for (int u = 0; u < 4; u++) {
        const int cc = c0 + 8 * u, e = cc % E;
        gt[u] = cc / G - g0;
        off[u] = 16 * (cc / E) + e % 16;
        sh[u] = b * (e / 16);
    }
    __m256 a[3][4], mt[3][2];
    float ws[3][2][8];
#pragma GCC unroll 3
    for (int j = 0; j < m; j++)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) a[j][u] = _mm256_loadu_ps(acc[j] + c0 + 8 * u);
    for (int j = 0; j < m; j++) mt[j][0] = mt[j][1] = _mm256_setzero_ps();
    for (int r0 = 0; r0 < n_rows; r0 += 8) {
        const int nr = VQ_MIN(8, n_rows - r0);
        const uint8_t *base = blocks + (size_t)r0 * bb;
        if (c0 == 0 && r0 + 40 <= n_rows)   /* as vfold64_m: the rows 32 ahead, on the first pass */
            for (size_t o = 0; o < 8 * bb; o += 64) _mm_prefetch((const char *)(base + 32 * bb + o), _MM_HINT_T0);
        float wr[3][8];
        for (int j = 0; j < m; j++)
            for (int r = 0; r < 8; r++) wr[j][r] = r < nr ? w[(size_t)j * n_rows + r0 + r] : 0.0f;
        for (int g = 0; g < ng; g++) {
            const __m256i sm = hdr8(base + 4 * (g0 + g), bb, nr);
            const __m256i lo = _mm256_and_si256(sm, _mm256_set1_epi32(0xFFFF)), hi = _mm256_srli_epi32(sm, 16);
            const __m256 sc = _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1)));
            const __m256 mn = _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1)));
#pragma GCC unroll 3
            for (int j = 0; j < m; j++) {   /* rows of weight 0 are masked out (no 0 x inf) */
                const __m256 wv = _mm256_loadu_ps(wr[j]);
                const __m256 nz = _mm256_cmp_ps(wv, _mm256_setzero_ps(), _CMP_NEQ_UQ);
                _mm256_storeu_ps(ws[j][g], _mm256_and_ps(nz, _mm256_mul_ps(wv, sc)));
                mt[j][g] = _mm256_add_ps(mt[j][g], _mm256_and_ps(nz, _mm256_mul_ps(wv, mn)));
            }
        }
        for (int r = 0; r < nr; r++) {
            const uint8_t *codes = base + (size_t)r * bb + k->hdr;
            /* one 8-channel code vector live at a time: with the 12 sums, 16 ymm hold it all
             * (expanding the 4 first spilled the sums to the stack on every row) */
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(codes + off[u])));
                const __m256 c = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(x, _mm_cvtsi32_si128(sh[u])), mk));
#pragma GCC unroll 3
                for (int j = 0; j < m; j++)
                    a[j][u] = _mm256_fmadd_ps(_mm256_broadcast_ss(&ws[j][gt[u]][r]), c, a[j][u]);
            }
        }
    }
#pragma GCC unroll 3
    for (int j = 0; j < m; j++) {
        float mg[2];
        for (int g = 0; g < ng; g++) {
            float t[8];
            _mm256_storeu_ps(t, mt[j][g]);
            mg[g] = ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
        }
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            _mm256_storeu_ps(acc[j] + c0 + 8 * u, _mm256_add_ps(a[j][u], _mm256_set1_ps(mg[gt[u]])));
    }
}
#define VF32(M)                                                                         \
    do {                                                                                \
        if (k->bits == 2) vfold32_m(k, M, 2, blocks, bb, wj, n_rows, aj, c0);           \
        else vfold32_m(k, M, 4, blocks, bb, wj, n_rows, aj, c0);                        \
    } while (0)
T2 void vq_kivi_vfold32_256(const kivi *k, const uint8_t *blocks, size_t bb, int n_q, const float *w,
                           int n_rows, float *const *acc) {
    for (int j0 = 0; j0 < n_q; j0 += 3) {
        const float *wj = w + (size_t)j0 * n_rows;
        float *const *aj = acc + j0;
        for (int c0 = 0; c0 < k->d; c0 += 32) switch (VQ_MIN(3, n_q - j0)) {
            case 1: VF32(1); break;
            case 2: VF32(2); break;
            default: VF32(3); break;
            }
    }
}
#undef VF32
