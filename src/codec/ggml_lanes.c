/* ggml_lanes.c: the lanes layout of q8_0 and q4_0 keys, and the register-resident value loop.
 *
 * Keys. A block holds 16 rows. For each group g of 32 coordinates (d/32 groups, in order):
 *   - 16 fp16 scales, row r's at bytes 2r..2r+1 (row r's llama.cpp block g's scale);
 *   - the code bytes of the 16 rows' blocks g, interleaved: byte j of row r's block (after its
 *     scale) at j*16 + r. q8_0: byte j is coordinate 32g+j's int8 code (32 x 16 bytes); q4_0:
 *     byte j holds coordinate 32g+j (low nibble) and 32g+16+j (high nibble), as in ggml (16 x 16).
 *   So a group is 16 x 34 (q8_0) or 16 x 18 (q4_0) bytes, exactly the 16 rows' blocks: the same
 *   8.5 / 4.5 bits per element, the same bytes, in another order (vq_ggl_put_row / get_row).
 * Scoring reads one coordinate's 16 codes with one load, converts them to floats and adds
 * q[i] * code into 16 per-row sums with one FMA per query; at the end of a group the 16 sums are
 * scaled by the 16 scales (one FMA) into the row scores. No horizontal sum, no per-row call, codes
 * read contiguously. AVX2 holds the 16 rows as two halves of 8 lanes (ymm), up to 3 queries a
 * pass, q4_0's codes taken as 0..15 with the -8 taken off once a group through the query's group
 * sum. AVX-512 holds them in one zmm (lanes = rows), up to 4 queries a pass with two sums per
 * query and group (even / odd coordinates, low / high nibbles: twice as many FMA chains, half as
 * long); a q4_0 code becomes its value -8..7 by one vpermps on a 16-entry table (the permute reads
 * only the index's low 4 bits, so no mask, conversion or offset).
 *
 * Values keep the one-row layout (each row its d/32 llama.cpp blocks): what the sum needs is not a
 * new order but accumulators that stay in registers. The loop takes 64 rows at a time (they stay
 * in L1) and holds a few queries' sums over a few groups of 32 coordinates in registers across
 * the 64 rows, storing them once. AVX2: up to 3 queries x 1 group (q8_0: 12 ymm) or x half a
 * group (q4_0: 6 ymm, two passes, so that its sums do not spill), the m weights x the group's
 * scale computed for the chunk's rows 8 at a time before the row loop, which then only
 * broadcasts them from memory (on AVX2 the broadcasts are loads, so this costs fewer arithmetic
 * uops than scaling the codes, and the FMA and int->float ports are the limit); q4_0's codes
 * taken as 0..15, the -8 taken off once through the sum of those products. AVX-512: up to 4
 * queries x 2 groups (16 zmm), the group's scale put on the codes (q4_0: on the table before the
 * permutes) so each row's weights are broadcast once per row, not weight x scale once per query
 * and group. It serves both key layouts' values (layout only changes keys). On AVX-512 it
 * replaced the older row loop of codec_ggml.h (one query per pass, each row re-read per query):
 * with that loop and the AVX2 keys a decode step ran at only 1.1-1.4x f16 there, now 2.3-3.0x
 * (docs/experiments/2026-12-02-lanes-q8_0-q4_0.md, "AVX-512 variants").
 *
 * Every variant is tested on every ISA the CPU has: test_codec_ggml calls these loops directly
 * with each ISA; test_codecs_attention and test_kv_codecs run once per VQ_CODEC_ISA. */
#include <immintrin.h>
#include <string.h>
#include "codec/ggml_lanes.h"

#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define T_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INL inline __attribute__((always_inline))
#define QM 3        /* queries per pass (AVX2: 16 ymm registers) */
#define QM5 4       /* queries per pass (AVX-512: 32 zmm registers) */
#define VCH 64      /* value rows per chunk */

static size_t gbytes(vq_ggl_kind k) { return (size_t)VQ_GGL_ROWS * vq_ggl_bb(k); }

void vq_ggl_put_row(vq_ggl_kind k, int d, const uint8_t *row, int r, uint8_t *block) {
    const size_t bb = vq_ggl_bb(k), nc = bb - 2;
    for (int g = 0; g < d / 32; g++) {
        uint8_t *grp = block + (size_t)g * gbytes(k);
        const uint8_t *src = row + (size_t)g * bb;
        memcpy(grp + 2 * r, src, 2);
        for (size_t j = 0; j < nc; j++) grp[32 + j * VQ_GGL_ROWS + r] = src[2 + j];
    }
}

void vq_ggl_get_row(vq_ggl_kind k, int d, const uint8_t *block, int r, uint8_t *row) {
    const size_t bb = vq_ggl_bb(k), nc = bb - 2;
    for (int g = 0; g < d / 32; g++) {
        const uint8_t *grp = block + (size_t)g * gbytes(k);
        uint8_t *dst = row + (size_t)g * bb;
        memcpy(dst, grp + 2 * r, 2);
        for (size_t j = 0; j < nc; j++) dst[2 + j] = grp[32 + j * VQ_GGL_ROWS + r];
    }
}

void vq_ggl_prep_sums(int d, float *qs) {
    for (int g = 0; g < d / 32; g++) {
        float s = 0;
        for (int i = 0; i < 32; i++) s += qs[32 * g + i];
        qs[d + g] = s;
    }
}

/* ---------------- scalar references, straight from the lanes bytes ---------------- */
static float lscale(const uint8_t *grp, int r) {
    vq_f16 h;
    memcpy(&h, grp + 2 * r, 2);
    return vq_f16_to_f32(h);
}
/* code of row r, coordinate i (0..31) of a group, as the integer llama.cpp decodes */
static int lcode(vq_ggl_kind k, const uint8_t *grp, int r, int i) {
    const uint8_t *c = grp + 32;
    if (k == VQ_GGL_Q8) return (int8_t)c[i * VQ_GGL_ROWS + r];
    const uint8_t b = c[(i & 15) * VQ_GGL_ROWS + r];
    return (i < 16 ? (b & 15) : (b >> 4)) - 8;
}

static void score_scalar(vq_ggl_kind k, int d, int nq, const void *const *qs, const uint8_t *blocks,
                         int n_blocks, float *scores) {
    const int nb = d / 32, n_rows = n_blocks * VQ_GGL_ROWS;
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * nb * gbytes(k);
        for (int r = 0; r < VQ_GGL_ROWS; r++)
            for (int j = 0; j < nq; j++) {
                const float *q = qs[j];
                float s = 0;
                for (int g = 0; g < nb; g++) {
                    const uint8_t *grp = blk + (size_t)g * gbytes(k);
                    const float sc = lscale(grp, r);
                    for (int i = 0; i < 32; i++) s += q[32 * g + i] * (sc * (float)lcode(k, grp, r, i));
                }
                scores[(size_t)j * n_rows + b * VQ_GGL_ROWS + r] = s;
            }
    }
}

void vq_ggl_accumulate(vq_ggl_kind k, int d, int nq, const float *w, const uint8_t *blocks,
                       int n_blocks, float *const *acc) {
    const int nb = d / 32, n_rows = n_blocks * VQ_GGL_ROWS;
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * nb * gbytes(k);
        for (int r = 0; r < VQ_GGL_ROWS; r++)
            for (int j = 0; j < nq; j++) {
                const float wj = w[(size_t)j * n_rows + b * VQ_GGL_ROWS + r];
                if (wj == 0.0f) continue;
                for (int g = 0; g < nb; g++) {
                    const uint8_t *grp = blk + (size_t)g * gbytes(k);
                    const float sc = lscale(grp, r);
                    for (int i = 0; i < 32; i++) acc[j][32 * g + i] += wj * (sc * (float)lcode(k, grp, r, i));
                }
            }
    }
}

/* ---------------- AVX2 keys ---------------- */
T_AVX2 static INL __m256 i8x8(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* m queries (a constant after inlining) over n_blocks lanes blocks */
T_AVX2 static INL void score_256_m(vq_ggl_kind k, const int m, int d, const float *const *q,
                                   const uint8_t *blocks, int n_blocks, float *scores, size_t stride) {
    const int nb = d / 32;
    const size_t gb = gbytes(k), bb = (size_t)nb * gb;
    const __m256i m15 = _mm256_set1_epi32(15);
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * bb;
        __m256 t[QM][2];
#pragma GCC unroll 3
        for (int j = 0; j < m; j++) t[j][0] = t[j][1] = _mm256_setzero_ps();
        for (int g = 0; g < nb; g++) {
            const uint8_t *grp = blk + (size_t)g * gb, *c = grp + 32;
            for (size_t o = 0; o < gb; o += 64) _mm_prefetch((const char *)(grp + 2 * bb + o), _MM_HINT_T0);
            __m256 a[QM][2];
#pragma GCC unroll 3
            for (int j = 0; j < m; j++) a[j][0] = a[j][1] = _mm256_setzero_ps();
            if (k == VQ_GGL_Q8) {
#pragma GCC unroll 4
                for (int i = 0; i < 32; i++) {
                    const __m256 lo = i8x8(c + i * 16), hi = i8x8(c + i * 16 + 8);
#pragma GCC unroll 3
                    for (int j = 0; j < m; j++) {
                        const __m256 qb = _mm256_broadcast_ss(q[j] + 32 * g + i);
                        a[j][0] = _mm256_fmadd_ps(lo, qb, a[j][0]);
                        a[j][1] = _mm256_fmadd_ps(hi, qb, a[j][1]);
                    }
                }
            } else {   /* codes 0..15 here; the -8 comes off with the query's group sum */
#pragma GCC unroll 2
                for (int p = 0; p < 16; p++) {
                    const __m256i r0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(c + p * 16)));
                    const __m256i r1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(c + p * 16 + 8)));
                    const __m256 l0 = _mm256_cvtepi32_ps(_mm256_and_si256(r0, m15));
                    const __m256 l1 = _mm256_cvtepi32_ps(_mm256_and_si256(r1, m15));
                    const __m256 h0 = _mm256_cvtepi32_ps(_mm256_srli_epi32(r0, 4));
                    const __m256 h1 = _mm256_cvtepi32_ps(_mm256_srli_epi32(r1, 4));
#pragma GCC unroll 3
                    for (int j = 0; j < m; j++) {
                        const __m256 qa = _mm256_broadcast_ss(q[j] + 32 * g + p);
                        const __m256 qb = _mm256_broadcast_ss(q[j] + 32 * g + 16 + p);
                        a[j][0] = _mm256_fmadd_ps(l0, qa, a[j][0]);
                        a[j][1] = _mm256_fmadd_ps(l1, qa, a[j][1]);
                        a[j][0] = _mm256_fmadd_ps(h0, qb, a[j][0]);
                        a[j][1] = _mm256_fmadd_ps(h1, qb, a[j][1]);
                    }
                }
#pragma GCC unroll 3
                for (int j = 0; j < m; j++) {
                    const __m256 off = _mm256_set1_ps(-8.0f * q[j][d + g]);
                    a[j][0] = _mm256_add_ps(a[j][0], off);
                    a[j][1] = _mm256_add_ps(a[j][1], off);
                }
            }
            const __m256 s0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)grp));
            const __m256 s1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(grp + 16)));
#pragma GCC unroll 3
            for (int j = 0; j < m; j++) {
                t[j][0] = _mm256_fmadd_ps(a[j][0], s0, t[j][0]);
                t[j][1] = _mm256_fmadd_ps(a[j][1], s1, t[j][1]);
            }
        }
#pragma GCC unroll 3
        for (int j = 0; j < m; j++) {
            _mm256_storeu_ps(scores + (size_t)j * stride + (size_t)b * VQ_GGL_ROWS, t[j][0]);
            _mm256_storeu_ps(scores + (size_t)j * stride + (size_t)b * VQ_GGL_ROWS + 8, t[j][1]);
        }
    }
}

#define SCORE_KIND(K)                                                                           \
    T_AVX2 static void score_256_##K(int d, int nq, const float *const *q, const uint8_t *blocks, \
                                     int n_blocks, float *scores) {                             \
        const size_t stride = (size_t)n_blocks * VQ_GGL_ROWS;                                   \
        for (int j0 = 0; j0 < nq; j0 += QM) {                                                   \
            float *s = scores + (size_t)j0 * stride;                                            \
            switch (VQ_MIN(QM, nq - j0)) {                                                      \
            case 1: score_256_m(K, 1, d, q + j0, blocks, n_blocks, s, stride); break;           \
            case 2: score_256_m(K, 2, d, q + j0, blocks, n_blocks, s, stride); break;           \
            default: score_256_m(K, 3, d, q + j0, blocks, n_blocks, s, stride); break;          \
            }                                                                                   \
        }                                                                                       \
    }
SCORE_KIND(VQ_GGL_Q8)
SCORE_KIND(VQ_GGL_Q4)

/* ---------------- AVX-512 keys: the 16 rows of a block are one zmm ---------------- */
/* q4_0 codes 0..15 -> their values -8..7: vpermps reads only the low 4 bits of each index, so a
 * permute on this table is the mask, the conversion and the -8 in one instruction */
T_AVX512 static INL __m512 q4tab_512(void) {
    return _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
}

/* m queries (a constant after inlining) over n_blocks lanes blocks; two sums per query and group
 * (even / odd coordinates for q8_0, low / high nibbles for q4_0) so that the FMA chains are twice
 * as many and half as long */
T_AVX512 static INL void score_512_m(vq_ggl_kind k, const int m, int d, const float *const *q,
                                     const uint8_t *blocks, int n_blocks, float *scores, size_t stride) {
    const int nb = d / 32;
    const size_t gb = gbytes(k), bb = (size_t)nb * gb;
    const __m512 tab = q4tab_512();
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * bb;
        __m512 t[QM5];
#pragma GCC unroll 4
        for (int j = 0; j < m; j++) t[j] = _mm512_setzero_ps();
        for (int g = 0; g < nb; g++) {
            const uint8_t *grp = blk + (size_t)g * gb, *c = grp + 32;
            for (size_t o = 0; o < gb; o += 64) _mm_prefetch((const char *)(grp + 2 * bb + o), _MM_HINT_T0);
            const float *qg[QM5];
            __m512 a0[QM5], a1[QM5];
#pragma GCC unroll 4
            for (int j = 0; j < m; j++) {
                qg[j] = q[j] + 32 * g;
                a0[j] = a1[j] = _mm512_setzero_ps();
            }
            if (k == VQ_GGL_Q8) {
#pragma GCC unroll 4
                for (int i = 0; i < 32; i += 2) {
                    const __m512 v0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(c + i * 16))));
                    const __m512 v1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(c + i * 16 + 16))));
#pragma GCC unroll 4
                    for (int j = 0; j < m; j++) {
                        a0[j] = _mm512_fmadd_ps(v0, _mm512_set1_ps(qg[j][i]), a0[j]);
                        a1[j] = _mm512_fmadd_ps(v1, _mm512_set1_ps(qg[j][i + 1]), a1[j]);
                    }
                }
            } else {   /* byte p of a row: coordinate p (low nibble) and 16 + p (high nibble) */
#pragma GCC unroll 4
                for (int p = 0; p < 16; p++) {
                    const __m512i raw = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c + p * 16)));
                    const __m512 lo = _mm512_permutexvar_ps(raw, tab);
                    const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(raw, 4), tab);
#pragma GCC unroll 4
                    for (int j = 0; j < m; j++) {
                        a0[j] = _mm512_fmadd_ps(lo, _mm512_set1_ps(qg[j][p]), a0[j]);
                        a1[j] = _mm512_fmadd_ps(hi, _mm512_set1_ps(qg[j][16 + p]), a1[j]);
                    }
                }
            }
            const __m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)grp));
#pragma GCC unroll 4
            for (int j = 0; j < m; j++) t[j] = _mm512_fmadd_ps(_mm512_add_ps(a0[j], a1[j]), s, t[j]);
        }
#pragma GCC unroll 4
        for (int j = 0; j < m; j++) _mm512_storeu_ps(scores + (size_t)j * stride + (size_t)b * VQ_GGL_ROWS, t[j]);
    }
}

#define SCORE_KIND_512(K)                                                                        \
    T_AVX512 static void score_512_##K(int d, int nq, const float *const *q, const uint8_t *blocks, \
                                       int n_blocks, float *scores) {                            \
        const size_t stride = (size_t)n_blocks * VQ_GGL_ROWS;                                    \
        for (int j0 = 0; j0 < nq; j0 += QM5) {                                                   \
            float *s = scores + (size_t)j0 * stride;                                             \
            switch (VQ_MIN(QM5, nq - j0)) {                                                      \
            case 1: score_512_m(K, 1, d, q + j0, blocks, n_blocks, s, stride); break;            \
            case 2: score_512_m(K, 2, d, q + j0, blocks, n_blocks, s, stride); break;            \
            case 3: score_512_m(K, 3, d, q + j0, blocks, n_blocks, s, stride); break;            \
            default: score_512_m(K, 4, d, q + j0, blocks, n_blocks, s, stride); break;           \
            }                                                                                    \
        }                                                                                        \
    }
SCORE_KIND_512(VQ_GGL_Q8)
SCORE_KIND_512(VQ_GGL_Q4)

void vq_ggl_score(vq_ggl_kind k, vq_isa isa, int d, int nq, const void *const *qs,
                  const uint8_t *blocks, int n_blocks, float *scores) {
    if (isa >= VQ_ISA_AVX512) {
        if (k == VQ_GGL_Q8) score_512_VQ_GGL_Q8(d, nq, (const float *const *)qs, blocks, n_blocks, scores);
        else score_512_VQ_GGL_Q4(d, nq, (const float *const *)qs, blocks, n_blocks, scores);
    } else if (isa >= VQ_ISA_AVX2) {
        if (k == VQ_GGL_Q8) score_256_VQ_GGL_Q8(d, nq, (const float *const *)qs, blocks, n_blocks, scores);
        else score_256_VQ_GGL_Q4(d, nq, (const float *const *)qs, blocks, n_blocks, scores);
    } else {
        score_scalar(k, d, nq, qs, blocks, n_blocks, scores);
    }
}

/* ---------------- AVX2 values (one-row layout) ---------------- */
/* m queries x coordinates 32g..32g+31 over rows r0..r1. Each row's fp16 scale goes on its m
 * weights once, 8 rows a vector, before the row loop, so in the row loop a row's weights are
 * broadcasts from memory (loads: no multiply, no shuffle). q8_0 holds the group's 4m sums
 * (12 ymm + 3 weights + 1 code at m = 3: no spill). q4_0 needs more registers for the nibbles,
 * so it takes the group in two halves of 16 coordinates (bytes 0..7: coordinates 0..7, 16..23;
 * bytes 8..15: 8..15, 24..31), 2m sums a pass, rather than spill sums to the stack on every
 * row; its codes are taken as 0..15 and the -8 comes off once, through the sum of the weights x
 * scales. */
T_AVX2 static INL void acc_256_m(vq_ggl_kind k, const int m, int d, const float *w, size_t wstride,
                                 const uint8_t *rows, int r0, int r1, float *const *acc, int g,
                                 int pf) {
    const size_t bb = vq_ggl_bb(k), rb = (size_t)(d / 32) * bb;
    const int n = r1 - r0;
    const uint8_t *b0 = rows + (size_t)r0 * rb + (size_t)g * bb;   /* row r0's block g */
    const uint8_t *nx = pf ? rows + (size_t)(r0 + VCH) * rb : rows;   /* the next chunk (prefetch) */
    uint16_t hs[VCH];
    float ws[QM][VCH];   /* ws[j][i]: row r0 + i's weight for query j times its scale in group g */
    float wsum[QM];      /* sum over i of ws[j][i] (q4_0's -8; q8_0 leaves it unused) */
    for (int i = 0; i < n; i++) memcpy(hs + i, b0 + (size_t)i * rb, 2);
    __m256 vs[QM];
#pragma GCC unroll 3
    for (int j = 0; j < m; j++) vs[j] = _mm256_setzero_ps();
    int i8 = 0;
    for (; i8 + 8 <= n; i8 += 8) {
        const __m256 s = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(hs + i8)));
#pragma GCC unroll 3
        for (int j = 0; j < m; j++) {
            const __m256 p = _mm256_mul_ps(s, _mm256_loadu_ps(w + (size_t)j * wstride + r0 + i8));
            _mm256_storeu_ps(ws[j] + i8, p);
            if (k == VQ_GGL_Q4) vs[j] = _mm256_add_ps(vs[j], p);
        }
    }
#pragma GCC unroll 3
    for (int j = 0; j < m; j++) {
        float t[8];
        _mm256_storeu_ps(t, vs[j]);
        wsum[j] = ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
    }
    for (; i8 < n; i8++) {
        const float s = _cvtsh_ss(hs[i8]);
#pragma GCC unroll 3
        for (int j = 0; j < m; j++) {
            ws[j][i8] = w[(size_t)j * wstride + r0 + i8] * s;
            if (k == VQ_GGL_Q4) wsum[j] += ws[j][i8];
        }
    }
    if (k == VQ_GGL_Q8) {
        __m256 a[QM][4];
#pragma GCC unroll 3
        for (int j = 0; j < m; j++)
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) a[j][q] = _mm256_loadu_ps(acc[j] + 32 * g + 8 * q);
        const uint8_t *blk = b0 + 2;
        for (int i = 0; i < n; i++, blk += rb) {
            if (pf)   /* first pass over a chunk: fetch the next chunk's rows, row by row */
                for (size_t o = 0; o < rb; o += 64) _mm_prefetch((const char *)(nx + (size_t)i * rb + o), _MM_HINT_T0);
            __m256 vw[QM];
#pragma GCC unroll 3
            for (int j = 0; j < m; j++) vw[j] = _mm256_broadcast_ss(ws[j] + i);
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                const __m256 c = i8x8(blk + 8 * q);
#pragma GCC unroll 3
                for (int j = 0; j < m; j++) a[j][q] = _mm256_fmadd_ps(c, vw[j], a[j][q]);
            }
        }
#pragma GCC unroll 3
        for (int j = 0; j < m; j++)
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) _mm256_storeu_ps(acc[j] + 32 * g + 8 * q, a[j][q]);
        return;
    }
    const __m256i m15 = _mm256_set1_epi32(15);
#pragma GCC unroll 1
    for (int hf = 0; hf < 2; hf++) {   /* sums a[j][0]: coordinates 8hf.., a[j][1]: 16 + 8hf.. */
        float *o0[QM], *o1[QM];
        __m256 a[QM][2];
#pragma GCC unroll 3
        for (int j = 0; j < m; j++) {
            o0[j] = acc[j] + 32 * g + 8 * hf;
            o1[j] = o0[j] + 16;
            a[j][0] = _mm256_loadu_ps(o0[j]);
            a[j][1] = _mm256_loadu_ps(o1[j]);
        }
        const uint8_t *blk = b0 + 2 + 8 * hf;
        const int p = pf && hf == 0;
        for (int i = 0; i < n; i++, blk += rb) {
            if (p)   /* first pass over a chunk: fetch the next chunk's rows, row by row */
                for (size_t o = 0; o < rb; o += 64) _mm_prefetch((const char *)(nx + (size_t)i * rb + o), _MM_HINT_T0);
            const __m256i raw = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)blk));
            const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(raw, m15));
            const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(raw, 4));
#pragma GCC unroll 3
            for (int j = 0; j < m; j++) {
                const __m256 vw = _mm256_broadcast_ss(ws[j] + i);
                a[j][0] = _mm256_fmadd_ps(lo, vw, a[j][0]);
                a[j][1] = _mm256_fmadd_ps(hi, vw, a[j][1]);
            }
        }
#pragma GCC unroll 3
        for (int j = 0; j < m; j++) {
            const __m256 off = _mm256_set1_ps(-8.0f * wsum[j]);
            _mm256_storeu_ps(o0[j], _mm256_add_ps(a[j][0], off));
            _mm256_storeu_ps(o1[j], _mm256_add_ps(a[j][1], off));
        }
    }
}

#define ACC_KIND(K)                                                                              \
    T_AVX2 static void acc_256_##K(int d, int nq, const float *w, const uint8_t *rows, int n_rows, \
                                   float *const *acc) {                                          \
        for (int r0 = 0; r0 < n_rows; r0 += VCH) {                                               \
            const int r1 = VQ_MIN(n_rows, r0 + VCH), pfl = r1 + VCH <= n_rows;                   \
            for (int g = 0; g < d / 32; g++)                                                     \
                for (int j0 = 0; j0 < nq; j0 += QM) {                                            \
                    const float *wj = w + (size_t)j0 * n_rows;                                   \
                    const int pf = pfl && g == 0 && j0 == 0;                                     \
                    switch (VQ_MIN(QM, nq - j0)) {                                               \
                    case 1: acc_256_m(K, 1, d, wj, n_rows, rows, r0, r1, acc + j0, g, pf); break; \
                    case 2: acc_256_m(K, 2, d, wj, n_rows, rows, r0, r1, acc + j0, g, pf); break; \
                    default: acc_256_m(K, 3, d, wj, n_rows, rows, r0, r1, acc + j0, g, pf); break; \
                    }                                                                            \
                }                                                                                \
        }                                                                                        \
    }
ACC_KIND(VQ_GGL_Q8)
ACC_KIND(VQ_GGL_Q4)

/* ---------------- AVX-512 values (one-row layout) ---------------- */
/* m queries x ng (1 or 2) groups of 32 coordinates from group g, 2 ng m registers, over rows
 * r0..r1: two groups per pass halve the passes over a chunk (and the accumulator loads and
 * stores), which 32 registers allow */
T_AVX512 static INL void acc_512_m(vq_ggl_kind k, const int m, int d, const float *w, size_t wstride,
                                   const uint8_t *rows, int r0, int r1, float *const *acc, int g,
                                   const int ng, int pf) {
    const size_t bb = vq_ggl_bb(k), rb = (size_t)(d / 32) * bb;
    const __m512 tab = q4tab_512();
    __m512 a[QM5][4];
#pragma GCC unroll 4
    for (int j = 0; j < m; j++)
#pragma GCC unroll 4
        for (int q = 0; q < 2 * ng; q++) a[j][q] = _mm512_loadu_ps(acc[j] + 32 * g + 16 * q);
    for (int r = r0; r < r1; r++) {
        const uint8_t *row = rows + (size_t)r * rb;
        if (pf)   /* first pass over a chunk: fetch the next chunk's rows */
            for (size_t o = 0; o < rb; o += 64) _mm_prefetch((const char *)(row + VCH * rb + o), _MM_HINT_T0);
        __m512 vw[QM5];   /* the row's weights; the scale goes on the codes (once, not once a query) */
#pragma GCC unroll 4
        for (int j = 0; j < m; j++) vw[j] = _mm512_set1_ps(w[(size_t)j * wstride + r]);
#pragma GCC unroll 2
        for (int gg = 0; gg < ng; gg++) {
            const uint8_t *blk = row + (size_t)(g + gg) * bb;
            uint16_t h;
            memcpy(&h, blk, 2);
            const __m512 s = _mm512_set1_ps(_cvtsh_ss(h));
            __m512 c0, c1;
            if (k == VQ_GGL_Q8) {
                c0 = _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)))));
                c1 = _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 18)))));
            } else {   /* byte j: coordinate j (low nibble), 16 + j (high); the table scaled once */
                const __m512i raw = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)));
                const __m512 ts = _mm512_mul_ps(tab, s);
                c0 = _mm512_permutexvar_ps(raw, ts);
                c1 = _mm512_permutexvar_ps(_mm512_srli_epi32(raw, 4), ts);
            }
#pragma GCC unroll 4
            for (int j = 0; j < m; j++) {
                a[j][2 * gg] = _mm512_fmadd_ps(c0, vw[j], a[j][2 * gg]);
                a[j][2 * gg + 1] = _mm512_fmadd_ps(c1, vw[j], a[j][2 * gg + 1]);
            }
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < m; j++)
#pragma GCC unroll 4
        for (int q = 0; q < 2 * ng; q++) _mm512_storeu_ps(acc[j] + 32 * g + 16 * q, a[j][q]);
}

#define ACC_M_512(K, M)                                                                         \
    do {                                                                                        \
        if (ng == 2) acc_512_m(K, M, d, wj, n_rows, rows, r0, r1, acc + j0, g, 2, pf);          \
        else acc_512_m(K, M, d, wj, n_rows, rows, r0, r1, acc + j0, g, 1, pf);                  \
    } while (0)
#define ACC_KIND_512(K)                                                                          \
    T_AVX512 static void acc_512_##K(int d, int nq, const float *w, const uint8_t *rows, int n_rows, \
                                     float *const *acc) {                                        \
        const int nb = d / 32;                                                                   \
        for (int r0 = 0; r0 < n_rows; r0 += VCH) {                                               \
            const int r1 = VQ_MIN(n_rows, r0 + VCH), pfl = r1 + VCH <= n_rows;                   \
            for (int g = 0; g < nb; g += 2) {                                                    \
                const int ng = VQ_MIN(2, nb - g);                                                \
                for (int j0 = 0; j0 < nq; j0 += QM5) {                                           \
                    const float *wj = w + (size_t)j0 * n_rows;                                   \
                    const int pf = pfl && g == 0 && j0 == 0;                                     \
                    switch (VQ_MIN(QM5, nq - j0)) {                                              \
                    case 1: ACC_M_512(K, 1); break;                                              \
                    case 2: ACC_M_512(K, 2); break;                                              \
                    case 3: ACC_M_512(K, 3); break;                                              \
                    default: ACC_M_512(K, 4); break;                                             \
                    }                                                                            \
                }                                                                                \
            }                                                                                    \
        }                                                                                        \
    }
ACC_KIND_512(VQ_GGL_Q8)
ACC_KIND_512(VQ_GGL_Q4)

int vq_ggl_acc_rows(vq_ggl_kind k, vq_isa isa, int d, int nq, const float *w, const uint8_t *rows,
                    int n_rows, float *const *acc) {
    if (isa < VQ_ISA_AVX2) return 0;
    if (isa >= VQ_ISA_AVX512) {
        if (k == VQ_GGL_Q8) acc_512_VQ_GGL_Q8(d, nq, w, rows, n_rows, acc);
        else acc_512_VQ_GGL_Q4(d, nq, w, rows, n_rows, acc);
        return 1;
    }
    if (k == VQ_GGL_Q8) acc_256_VQ_GGL_Q8(d, nq, w, rows, n_rows, acc);
    else acc_256_VQ_GGL_Q4(d, nq, w, rows, n_rows, acc);
    return 1;
}
