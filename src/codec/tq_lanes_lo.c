/* tq_lanes_lo.c: the lanes layout of turboquant_mse at 2 and 3 bits (d a multiple of 32), the
 * 4-bit layout of tq_lanes.c carried to codes that do not fill a nibble. Same bytes per row as
 * the packed layout (norm + d·bits/8), no padding; the bits are placed so that a code reaches the
 * low bits of a 32-bit lane with one shift and becomes its centroid with one vpermps:
 *  - keys, 16 rows per block (16 norms first, as at 4 bits), then per group g of 32 coordinates
 *    `bits` words of 16 dwords (64 bytes each), dword r of a word = row r (lanes = rows).
 *    2 bits: word w holds coordinates 32g+16w+s at bits 2s (s < 16). 3 bits: word w < 3 holds
 *    coordinates 32g+10w+s at bits 3s (s < 10); coordinate 32g+30 has its low 2 bits at bits
 *    30..31 of word 0 and its high bit at bit 30 of word 2, 32g+31 likewise in word 1 and bit 31
 *    of word 2. One 64-byte load serves 16 (2 bits) or 10 (3 bits) coordinates of 16 rows, each
 *    coordinate one immediate shift + one permute + one FMA per query.
 *  - values, 1 row per block (norm, then codes), per group of 32 coordinates 8 bytes (2 bits:
 *    byte k = code[8s+k] << 2s for s < 4) or 12 bytes (3 bits: a 96-bit little-endian string,
 *    code 8s+k at bit 12k+3s): lane k of an 8-lane register gets coordinates k, 8+k, 16+k, 24+k,
 *    so a zero-extending load (2 bits) or a byte shuffle and a variable shift (3 bits) then four
 *    shift + permute steps give the group's 32 centroids.
 * The permute reads only the low 3 (AVX2) or 4 (AVX-512) bits of an index; the bits above a code
 * are the next code's, so the table is the codebook repeated to 8 or 16 entries and no mask is
 * needed. AVX2 needs an 8-entry table, one ymm: exact for 3 bits, and 2 bits repeats it twice. */
#include <immintrin.h>
#include <string.h>
#include "codec/tq_lanes.h"
#include "codec/codec_vec.h"

#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define T_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INL inline __attribute__((always_inline))
#define WB 64   /* bytes of a key word: 16 rows x 4 */

static size_t nbytes(const vq_tq *t) { return t->norm32 ? 4 : 2; }
static size_t hdr(const vq_tq *t, int side) { return nbytes(t) * (side == VQ_SIDE_K ? VQ_TQL_ROWS : 1); }

/* ---------------- where a code lies (reference for every loop below) ---------------- */
static unsigned bget(const uint8_t *p, size_t bit, int n) {
    unsigned v = 0;
    for (int k = 0; k < n; k++, bit++) v |= (unsigned)((p[bit >> 3] >> (bit & 7)) & 1) << k;
    return v;
}
static void bor(uint8_t *p, size_t bit, int n, unsigned v) {
    for (int k = 0; k < n; k++, bit++) p[bit >> 3] |= (uint8_t)(((v >> k) & 1) << (bit & 7));
}

/* bit offsets (from the codes' start) and widths of the pieces of code i of row r, low bits first */
static int place(int bits, int side, int r, int i, size_t at[2], int n[2]) {
    const size_t g = (size_t)(i / 32);
    const int k = i % 32;
    if (side == VQ_SIDE_V) {
        at[0] = bits == 2 ? 8 * (g * 8 + (size_t)(k & 7)) + 2 * (size_t)(k >> 3)
                          : g * 96 + 12 * (size_t)(k & 7) + 3 * (size_t)(k >> 3);
        n[0] = bits;
        return 1;
    }
    const size_t word = 8 * WB, base = 8 * (g * (size_t)bits * WB + 4 * (size_t)r);
    if (bits == 1) { at[0] = base + (size_t)k; n[0] = 1; return 1; }
    if (bits == 2) { at[0] = base + (size_t)(k >> 4) * word + 2 * (size_t)(k & 15); n[0] = 2; return 1; }
    if (k < 30) { at[0] = base + (size_t)(k / 10) * word + 3 * (size_t)(k % 10); n[0] = 3; return 1; }
    at[0] = base + (size_t)(k - 30) * word + 30;
    n[0] = 2;
    at[1] = base + 2 * word + (size_t)k;   /* bit 30 or 31 of word 2 */
    n[1] = 1;
    return 2;
}

static unsigned code_get(int bits, int side, const uint8_t *codes, int r, int i) {
    size_t at[2];
    int n[2];
    int np = place(bits, side, r, i, at, n);
    unsigned v = bget(codes, at[0], n[0]);
    if (np == 2) v |= bget(codes, at[1], n[1]) << n[0];
    return v;
}

/* key blocks of other codecs (tq_split's subsets): one code of row r, codes zeroed before the first */
void vq_tqll_key_set(int bits, uint8_t *codes, int r, int i, unsigned v) {
    size_t at[2];
    int n[2];
    int np = place(bits, VQ_SIDE_K, r, i, at, n);
    bor(codes, at[0], n[0], v);
    if (np == 2) bor(codes, at[1], n[1], v >> n[0]);
}
unsigned vq_tqll_key_get(int bits, const uint8_t *codes, int r, int i) {
    return code_get(bits, VQ_SIDE_K, codes, r, i);
}

/* ---------------- encode / decode ---------------- */
void vq_tqll_encode(const vq_tq *t, int side, const float *x, uint8_t *block) {
    const int d = t->d, nr = side == VQ_SIDE_K ? VQ_TQL_ROWS : 1;
    uint8_t *codes = block + hdr(t, side);
    memset(codes, 0, (size_t)nr * d * t->bits / 8);
    float y[VQ_TQ_MAX_D];
    uint8_t idx[VQ_TQ_MAX_D];
    for (int r = 0; r < nr; r++) {
        double nrm = vq_tq_rotate_unit(t, x + (size_t)r * d, y);
        vq_tq_put_norm(t, nrm, block + r * nbytes(t));
        vq_lloydmax_quantize(t->cb1, y, 1.0f, d, idx);
        for (int i = 0; i < d; i++) {
            size_t at[2];
            int n[2];
            int np = place(t->bits, side, r, i, at, n);
            bor(codes, at[0], n[0], idx[i]);
            if (np == 2) bor(codes, at[1], n[1], (unsigned)idx[i] >> n[0]);
        }
    }
}

void vq_tqll_decode(const vq_tq *t, int side, const uint8_t *block, float *x) {
    const int d = t->d, nr = side == VQ_SIDE_K ? VQ_TQL_ROWS : 1;
    const uint8_t *codes = block + hdr(t, side);
    for (int r = 0; r < nr; r++) {
        float nrm = vq_tq_get_norm(t, block + r * nbytes(t)), *xr = x + (size_t)r * d;
        for (int i = 0; i < d; i++) xr[i] = nrm * t->cent1[code_get(t->bits, side, codes, r, i)];
        vq_rotation_apply_inverse(t->rot, xr, xr);
    }
}

/* ---------------- scalar (either side's layout) ---------------- */
static void score_scalar(const vq_tq *t, int side, int nq, const float *const *q,
                         const uint8_t *blocks, int n_blocks, size_t bb, float *scores) {
    const int d = t->d, rpb = side == VQ_SIDE_K ? VQ_TQL_ROWS : 1, n_rows = n_blocks * rpb;
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * bb, *codes = blk + hdr(t, side);
        for (int r = 0; r < rpb; r++) {
            float nrm = vq_tq_get_norm(t, blk + r * nbytes(t));
            for (int j = 0; j < nq; j++) {
                float s = 0;
                for (int i = 0; i < d; i++) s += q[j][i] * t->cent1[code_get(t->bits, side, codes, r, i)];
                scores[(size_t)j * n_rows + b * rpb + r] = nrm * s;
            }
        }
    }
}

static void acc_scalar(const vq_tq *t, int side, int nq, const float *w, const uint8_t *blocks,
                       int n_blocks, size_t bb, float *const *acc) {
    const int d = t->d, rpb = side == VQ_SIDE_K ? VQ_TQL_ROWS : 1, n_rows = n_blocks * rpb;
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * bb, *codes = blk + hdr(t, side);
        for (int r = 0; r < rpb; r++) {
            float nrm = vq_tq_get_norm(t, blk + r * nbytes(t));
            for (int j = 0; j < nq; j++) {
                float wj = w[(size_t)j * n_rows + b * rpb + r] * nrm;
                if (wj == 0.0f) continue;
                for (int i = 0; i < d; i++) acc[j][i] += wj * t->cent1[code_get(t->bits, side, codes, r, i)];
            }
        }
    }
}

/* the codebook repeated to n entries (the permute's index bits above a code are garbage) */
static void ptab(const vq_tq *t, int n, float *tb) {
    for (int i = 0; i < n; i++) tb[i] = t->cent1[i % (1 << t->bits)];
}

/* a value row's norm without a call: a call per row would make the compiler spill every
 * accumulator around it (all vector registers are caller-saved); fp16 -> f32 is exact either way */
T_AVX2 static INL float vnorm_256(const vq_tq *t, const uint8_t *blk) {
    if (t->norm32) { float f; memcpy(&f, blk, 4); return f; }
    uint16_t hb;
    memcpy(&hb, blk, 2);
    return _cvtsh_ss(hb);
}
T_AVX512 static INL float vnorm_512(const vq_tq *t, const uint8_t *blk) {
    if (t->norm32) { float f; memcpy(&f, blk, 4); return f; }
    uint16_t hb;
    memcpy(&hb, blk, 2);
    return _cvtsh_ss(hb);
}

/* a score dispatch's cases: m queries (1..4) x bits (1..3) -> F(t, bits, m, ...) with both constant */
#define SCORE_CASES(F, M)                                                      \
    case 4 * M + 1: F(t, 1, M, qj, blocks, n_blocks, bb, s, stride); break;   \
    case 4 * M + 2: F(t, 2, M, qj, blocks, n_blocks, bb, s, stride); break;   \
    case 4 * M + 3: F(t, 3, M, qj, blocks, n_blocks, bb, s, stride); break;

/* ---------------- AVX-512 ---------------- */
/* one coordinate (code at bit sh of every lane of x) into the m queries' sums */
#define K512(X, SH, I, A)                                                                  \
    do {                                                                                   \
        __m512 v_ = _mm512_permutexvar_ps(_mm512_srli_epi32((X), (SH)), tab);               \
        _Pragma("GCC unroll 4")                                                            \
        for (int j = 0; j < m; j++) A[j] = _mm512_fmadd_ps(v_, _mm512_set1_ps(q[j][I]), A[j]); \
    } while (0)

T_AVX512 static INL void score_512_m(const vq_tq *t, const int bits, const int m,
                                     const float *const *q, const uint8_t *blocks, int n_blocks,
                                     size_t bb, float *scores, size_t stride) {
    float tb[16];
    ptab(t, 16, tb);
    const __m512 tab = _mm512_loadu_ps(tb);
    const __m512i four = _mm512_set1_epi32(4);
    const int ng = t->d / 32, tail = bits == 2 && t->d % 32;   /* 2 bits: a last group of 16 */
    const size_t h = hdr(t, VQ_SIDE_K), gb = (size_t)bits * WB;
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * bb, *c = blk + h;
        for (size_t o = 0; o < bb; o += 64) _mm_prefetch((const char *)(blk + 2 * bb + o), _MM_HINT_T0);
        __m512 a0[4], a1[4];
#pragma GCC unroll 4
        for (int j = 0; j < m; j++) a0[j] = a1[j] = _mm512_setzero_ps();
        if (tail) {
            const __m512i x0 = _mm512_loadu_si512(c + (size_t)ng * gb);
#pragma GCC unroll 8
            for (int s = 0; s < 8; s++) {
                K512(x0, 4 * s, 32 * ng + 2 * s, a0);
                K512(x0, 4 * s + 2, 32 * ng + 2 * s + 1, a1);
            }
        }
        for (int g = 0; g < ng; g++) {
            const uint8_t *cg = c + (size_t)g * gb;
            const int i0 = 32 * g;
            if (bits == 1) {
                const __m512i x0 = _mm512_loadu_si512(cg);
#pragma GCC unroll 16
                for (int s = 0; s < 16; s++) {
                    K512(x0, 2 * s, i0 + 2 * s, a0);
                    K512(x0, 2 * s + 1, i0 + 2 * s + 1, a1);
                }
            } else if (bits == 2) {
                const __m512i x0 = _mm512_loadu_si512(cg), x1 = _mm512_loadu_si512(cg + WB);
#pragma GCC unroll 16
                for (int s = 0; s < 16; s++) {
                    K512(x0, 2 * s, i0 + s, a0);
                    K512(x1, 2 * s, i0 + 16 + s, a1);
                }
            } else {
                const __m512i x0 = _mm512_loadu_si512(cg), x1 = _mm512_loadu_si512(cg + WB);
                const __m512i x2 = _mm512_loadu_si512(cg + 2 * WB);
#pragma GCC unroll 10
                for (int s = 0; s < 10; s++) {
                    K512(x0, 3 * s, i0 + s, a0);
                    K512(x1, 3 * s, i0 + 10 + s, a1);
                    K512(x2, 3 * s, i0 + 20 + s, a0);
                }
                const __m512i t30 = _mm512_or_si512(_mm512_srli_epi32(x0, 30),
                                                    _mm512_and_si512(_mm512_srli_epi32(x2, 28), four));
                const __m512i t31 = _mm512_or_si512(_mm512_srli_epi32(x1, 30),
                                                    _mm512_and_si512(_mm512_srli_epi32(x2, 29), four));
                K512(t30, 0, i0 + 30, a1);
                K512(t31, 0, i0 + 31, a0);
            }
        }
        const __m512 nrm = t->norm32 ? _mm512_loadu_ps(blk)
                                     : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
#pragma GCC unroll 4
        for (int j = 0; j < m; j++)
            _mm512_storeu_ps(scores + (size_t)j * stride + (size_t)b * VQ_TQL_ROWS,
                             _mm512_mul_ps(_mm512_add_ps(a0[j], a1[j]), nrm));
    }
}

T_AVX512 static void score_512(const vq_tq *t, int nq, const float *const *q, const uint8_t *blocks,
                               int n_blocks, size_t bb, float *scores) {
    const size_t stride = (size_t)n_blocks * VQ_TQL_ROWS;
    for (int j0 = 0; j0 < nq; j0 += 4) {
        float *s = scores + (size_t)j0 * stride;
        const float *const *qj = q + j0;
        switch (VQ_MIN(4, nq - j0) * 4 + t->bits) {
        SCORE_CASES(score_512_m, 1) SCORE_CASES(score_512_m, 2) SCORE_CASES(score_512_m, 3)
        SCORE_CASES(score_512_m, 4)
        default: break;   /* unreachable: bits 1..3 */
        }
    }
}

/* values: m queries x ng (1 or 2) groups of 32 coordinates. One zmm holds lane k of group g0 in
 * lane k and of group g0+1 in lane 8+k, so after shift s its 16 centroids are coordinates 8s..8s+7
 * of both groups; the two halves go to their groups' sums at the store. */
T_AVX512 static INL void acc_512_m(const vq_tq *t, const int bits, const int m, const float *w,
                                   size_t wstride, const uint8_t *blocks, int n_rows, size_t bb,
                                   float *const *acc, int g0, int ng) {
    float tb[16];
    ptab(t, 16, tb);
    const __m512 tab = _mm512_loadu_ps(tb);
    const size_t h = hdr(t, VQ_SIDE_V), gbytes = (size_t)bits * 4;
    const __mmask64 lm = ((__mmask64)1 << (gbytes * (size_t)ng)) - 1;   /* never reads past the row */
    /* 3 bits: dword lane k' takes the two 16-bit words holding bits 96(k'/8) + 12(k'%8) on */
    int16_t wi[32];
    int32_t sh[16];
    for (int k = 0; k < 16; k++) {
        int bit = 96 * (k / 8) + 12 * (k % 8);
        wi[2 * k] = (int16_t)(bit / 16);
        wi[2 * k + 1] = (int16_t)(bit / 16 + 1);
        sh[k] = bit % 16;
    }
    const __m512i widx = _mm512_loadu_si512(wi), shv = _mm512_loadu_si512(sh);
    __m512 a[4][4];
#pragma GCC unroll 4
    for (int j = 0; j < m; j++)
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) a[j][s] = _mm512_setzero_ps();
    for (int r = 0; r < n_rows; r++) {
        const uint8_t *blk = blocks + (size_t)r * bb, *c = blk + h + (size_t)g0 * gbytes;
        _mm_prefetch((const char *)(blk + 16 * bb), _MM_HINT_T0);
        float nrm = vnorm_512(t, blk);
        __m512 vw[4];
#pragma GCC unroll 4
        for (int j = 0; j < m; j++) vw[j] = _mm512_set1_ps(w[(size_t)j * wstride + r] * nrm);
        __m512i x;
        if (bits == 2) x = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8((__mmask16)lm, c));
        else x = _mm512_srlv_epi32(_mm512_permutexvar_epi16(widx, _mm512_maskz_loadu_epi8(lm, c)), shv);
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) {
            __m512 v = _mm512_permutexvar_ps(_mm512_srli_epi32(x, bits * s), tab);
#pragma GCC unroll 4
            for (int j = 0; j < m; j++) a[j][s] = _mm512_fmadd_ps(v, vw[j], a[j][s]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < m; j++)
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) {
            float *o = acc[j] + (size_t)g0 * 32 + (size_t)s * 8;
            _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), _mm512_castps512_ps256(a[j][s])));
            if (ng == 2) {
                __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[j][s]), 1));
                _mm256_storeu_ps(o + 32, _mm256_add_ps(_mm256_loadu_ps(o + 32), hi));
            }
        }
}

T_AVX512 static void acc_512(const vq_tq *t, int nq, const float *w, const uint8_t *blocks,
                             int n_rows, size_t bb, float *const *acc) {
    const int groups = t->d / 32, two = t->bits == 2;
    for (int g0 = 0; g0 < groups; g0 += 2) {
        const int ng = VQ_MIN(2, groups - g0);
        for (int j0 = 0; j0 < nq; j0 += 4) {
            const float *wj = w + (size_t)j0 * n_rows;
            float *const *aj = acc + j0;
            switch (VQ_MIN(4, nq - j0) * 2 + two) {
            case 2: acc_512_m(t, 3, 1, wj, n_rows, blocks, n_rows, bb, aj, g0, ng); break;
            case 3: acc_512_m(t, 2, 1, wj, n_rows, blocks, n_rows, bb, aj, g0, ng); break;
            case 4: acc_512_m(t, 3, 2, wj, n_rows, blocks, n_rows, bb, aj, g0, ng); break;
            case 5: acc_512_m(t, 2, 2, wj, n_rows, blocks, n_rows, bb, aj, g0, ng); break;
            case 6: acc_512_m(t, 3, 3, wj, n_rows, blocks, n_rows, bb, aj, g0, ng); break;
            case 7: acc_512_m(t, 2, 3, wj, n_rows, blocks, n_rows, bb, aj, g0, ng); break;
            case 8: acc_512_m(t, 3, 4, wj, n_rows, blocks, n_rows, bb, aj, g0, ng); break;
            default: acc_512_m(t, 2, 4, wj, n_rows, blocks, n_rows, bb, aj, g0, ng); break;
            }
        }
    }
}

/* ---------------- AVX2: 8 lanes, the 8-entry table in one ymm ---------------- */
#define K256(X, SH, I, A)                                                                  \
    do {                                                                                   \
        __m256 v_ = _mm256_permutevar8x32_ps(tab, _mm256_srli_epi32((X), (SH)));            \
        _Pragma("GCC unroll 4")                                                            \
        for (int j = 0; j < m; j++) A[j] = _mm256_fmadd_ps(v_, _mm256_set1_ps(q[j][I]), A[j]); \
    } while (0)

T_AVX2 static INL void score_256_m(const vq_tq *t, const int bits, const int m,
                                   const float *const *q, const uint8_t *blocks, int n_blocks,
                                   size_t bb, float *scores, size_t stride) {
    float tb[8];
    ptab(t, 8, tb);
    const __m256 tab = _mm256_loadu_ps(tb);
    const __m256i four = _mm256_set1_epi32(4);
    const int ng = t->d / 32, tail = bits == 2 && t->d % 32;   /* 2 bits: a last group of 16 */
    const size_t h = hdr(t, VQ_SIDE_K), gb = (size_t)bits * WB;
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * bb, *c = blk + h;
        for (size_t o = 0; o < bb; o += 64) _mm_prefetch((const char *)(blk + 2 * bb + o), _MM_HINT_T0);
        for (int half = 0; half < 2; half++) {   /* rows 0..7, then 8..15 */
            __m256 a0[4], a1[4];
#pragma GCC unroll 4
            for (int j = 0; j < m; j++) a0[j] = a1[j] = _mm256_setzero_ps();
            if (tail) {
                const __m256i x0 = _mm256_loadu_si256((const __m256i *)(c + (size_t)ng * gb + 32 * half));
#pragma GCC unroll 8
                for (int s = 0; s < 8; s++) {
                    K256(x0, 4 * s, 32 * ng + 2 * s, a0);
                    K256(x0, 4 * s + 2, 32 * ng + 2 * s + 1, a1);
                }
            }
            for (int g = 0; g < ng; g++) {
                const uint8_t *cg = c + (size_t)g * gb + 32 * half;
                const int i0 = 32 * g;
                const __m256i x0 = _mm256_loadu_si256((const __m256i *)cg);
                if (bits == 1) {
#pragma GCC unroll 16
                    for (int s = 0; s < 16; s++) {
                        K256(x0, 2 * s, i0 + 2 * s, a0);
                        K256(x0, 2 * s + 1, i0 + 2 * s + 1, a1);
                    }
                    continue;
                }
                const __m256i x1 = _mm256_loadu_si256((const __m256i *)(cg + WB));
                if (bits == 2) {
#pragma GCC unroll 16
                    for (int s = 0; s < 16; s++) {
                        K256(x0, 2 * s, i0 + s, a0);
                        K256(x1, 2 * s, i0 + 16 + s, a1);
                    }
                } else {
                    const __m256i x2 = _mm256_loadu_si256((const __m256i *)(cg + 2 * WB));
#pragma GCC unroll 10
                    for (int s = 0; s < 10; s++) {
                        K256(x0, 3 * s, i0 + s, a0);
                        K256(x1, 3 * s, i0 + 10 + s, a1);
                        K256(x2, 3 * s, i0 + 20 + s, a0);
                    }
                    const __m256i t30 = _mm256_or_si256(_mm256_srli_epi32(x0, 30),
                                                        _mm256_and_si256(_mm256_srli_epi32(x2, 28), four));
                    const __m256i t31 = _mm256_or_si256(_mm256_srli_epi32(x1, 30),
                                                        _mm256_and_si256(_mm256_srli_epi32(x2, 29), four));
                    K256(t30, 0, i0 + 30, a1);
                    K256(t31, 0, i0 + 31, a0);
                }
            }
            float nr[8];
            for (int r = 0; r < 8; r++) nr[r] = vq_tq_get_norm(t, blk + (size_t)(8 * half + r) * nbytes(t));
            const __m256 nrm = _mm256_loadu_ps(nr);
#pragma GCC unroll 4
            for (int j = 0; j < m; j++)
                _mm256_storeu_ps(scores + (size_t)j * stride + (size_t)b * VQ_TQL_ROWS + 8 * half,
                                 _mm256_mul_ps(_mm256_add_ps(a0[j], a1[j]), nrm));
        }
    }
}

T_AVX2 static void score_256(const vq_tq *t, int nq, const float *const *q, const uint8_t *blocks,
                             int n_blocks, size_t bb, float *scores) {
    const size_t stride = (size_t)n_blocks * VQ_TQL_ROWS;
    for (int j0 = 0; j0 < nq; j0 += 4) {
        float *s = scores + (size_t)j0 * stride;
        const float *const *qj = q + j0;
        switch (VQ_MIN(4, nq - j0) * 4 + t->bits) {
        SCORE_CASES(score_256_m, 1) SCORE_CASES(score_256_m, 2) SCORE_CASES(score_256_m, 3)
        SCORE_CASES(score_256_m, 4)
        default: break;   /* unreachable: bits 1..3 */
        }
    }
}

/* values: one group of 32 coordinates, up to 3 queries (12 sums) a pass over every row */
T_AVX2 static INL void acc_256_m(const vq_tq *t, const int bits, const int m, const float *w,
                                 size_t wstride, const uint8_t *blocks, int n_rows, size_t bb,
                                 float *const *acc, int g) {
    float tb[8];
    ptab(t, 8, tb);
    const __m256 tab = _mm256_loadu_ps(tb);
    const size_t h = hdr(t, VQ_SIDE_V), gbytes = (size_t)bits * 4;
    /* 3 bits: lane k (of 4 per 128-bit half, both halves holding the group's 16 first bytes)
     * takes bytes 12k/8 and the next, shifted by 12k % 8 */
    int8_t shuf[32];
    int32_t sh[8];
    for (int k = 0; k < 8; k++) {
        int byte = 12 * k / 8;
        shuf[4 * k] = (int8_t)byte;
        shuf[4 * k + 1] = (int8_t)(byte + 1);
        shuf[4 * k + 2] = shuf[4 * k + 3] = (int8_t)0x80;
        sh[k] = 12 * k % 8;
    }
    const __m256i shv = _mm256_loadu_si256((const __m256i *)shuf), shc = _mm256_loadu_si256((const __m256i *)sh);
    __m256 a[3][4];
#pragma GCC unroll 3
    for (int j = 0; j < m; j++)
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) a[j][s] = _mm256_setzero_ps();
    for (int r = 0; r < n_rows; r++) {
        const uint8_t *blk = blocks + (size_t)r * bb, *c = blk + h + (size_t)g * gbytes;
        _mm_prefetch((const char *)(blk + 16 * bb), _MM_HINT_T0);
        float nrm = vnorm_256(t, blk);
        __m256 vw[3];
#pragma GCC unroll 3
        for (int j = 0; j < m; j++) vw[j] = _mm256_set1_ps(w[(size_t)j * wstride + r] * nrm);
        __m256i x;
        if (bits == 2) x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)c));
        else {
            uint8_t tmp[16];
            const uint8_t *src = c;
            if (r == n_rows - 1) {   /* a 16-byte load reads 4 bytes on: the next row's, but not past the last */
                memcpy(tmp, c, 12);
                memset(tmp + 12, 0, 4);
                src = tmp;
            }
            __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)src));
            x = _mm256_srlv_epi32(_mm256_shuffle_epi8(raw, shv), shc);
        }
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) {
            __m256 v = _mm256_permutevar8x32_ps(tab, _mm256_srli_epi32(x, bits * s));
#pragma GCC unroll 3
            for (int j = 0; j < m; j++) a[j][s] = _mm256_fmadd_ps(v, vw[j], a[j][s]);
        }
    }
#pragma GCC unroll 3
    for (int j = 0; j < m; j++)
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) {
            float *o = acc[j] + (size_t)g * 32 + (size_t)s * 8;
            _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), a[j][s]));
        }
}

T_AVX2 static void acc_256(const vq_tq *t, int nq, const float *w, const uint8_t *blocks, int n_rows,
                           size_t bb, float *const *acc) {
    const int two = t->bits == 2;
    for (int g = 0; g < t->d / 32; g++)
        for (int j0 = 0; j0 < nq; j0 += 3) {
            const float *wj = w + (size_t)j0 * n_rows;
            float *const *aj = acc + j0;
            switch (VQ_MIN(3, nq - j0) * 2 + two) {
            case 2: acc_256_m(t, 3, 1, wj, n_rows, blocks, n_rows, bb, aj, g); break;
            case 3: acc_256_m(t, 2, 1, wj, n_rows, blocks, n_rows, bb, aj, g); break;
            case 4: acc_256_m(t, 3, 2, wj, n_rows, blocks, n_rows, bb, aj, g); break;
            case 5: acc_256_m(t, 2, 2, wj, n_rows, blocks, n_rows, bb, aj, g); break;
            case 6: acc_256_m(t, 3, 3, wj, n_rows, blocks, n_rows, bb, aj, g); break;
            default: acc_256_m(t, 2, 3, wj, n_rows, blocks, n_rows, bb, aj, g); break;
            }
        }
}

/* ---------------- dispatch (keys scored, values summed; the other way round: scalar) ---------------- */
void vq_tqll_score(const vq_tq *t, int side, int nq, const float *const *q, const uint8_t *blocks,
                   int n_blocks, size_t bb, float *scores) {
    if (side == VQ_SIDE_K && t->isa == VQ_ISA_AVX512) score_512(t, nq, q, blocks, n_blocks, bb, scores);
    else if (side == VQ_SIDE_K && t->isa == VQ_ISA_AVX2) score_256(t, nq, q, blocks, n_blocks, bb, scores);
    else score_scalar(t, side, nq, q, blocks, n_blocks, bb, scores);
}

void vq_tqll_accumulate(const vq_tq *t, int side, int nq, const float *w, const uint8_t *blocks,
                        int n_blocks, size_t bb, float *const *acc) {
    if (side == VQ_SIDE_V && t->isa == VQ_ISA_AVX512) acc_512(t, nq, w, blocks, n_blocks, bb, acc);
    else if (side == VQ_SIDE_V && t->isa == VQ_ISA_AVX2) acc_256(t, nq, w, blocks, n_blocks, bb, acc);
    else acc_scalar(t, side, nq, w, blocks, n_blocks, bb, acc);
}
