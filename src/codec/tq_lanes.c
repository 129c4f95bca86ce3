/* tq_lanes.c: the "lanes" layout of turboquant_mse at 4 bits (d a multiple of 32), laid out so
 * that attention never shuffles bits or reduces across a register:
 *  - keys, 16 rows per block, codes interleaved by coordinate: for coordinate pair p, 16 bytes,
 *    byte r = code[r][2p] | code[r][2p+1] << 4. One byte load -> 16 lanes = 16 rows; the 16-entry
 *    codebook sits in one register and a permute turns 16 codes into 16 centroids; every query
 *    accumulates q'[i]·c into its 16 row scores with one FMA. No horizontal sum, no per-row call.
 *  - values, 1 row per block, codes grouped by 32 coordinates: byte k of group g =
 *    code[32g+k] | code[32g+16+k] << 4, so one 16-byte load gives coordinates 32g..32g+31 as two
 *    permutes; weighted rows are summed into accumulators that stay in registers for a whole run.
 * Both loops prefetch a little ahead (2 key blocks, 16 value rows): without it the value loop
 * stalled on every row's first load and ran at half the speed (docs/bench-kernels.md).
 * Norms: a block starts with its rows' norms (16 for keys, 1 for values), fp16 or f32. */
#include <immintrin.h>
#include <string.h>
#include "codec/tq_lanes.h"
#include "codec/codec_vec.h"

#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define T_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INL inline __attribute__((always_inline))

int vq_tql_supported(int bits, int d) {
    return bits >= 2 && bits <= 4 && d % 32 == 0 && d <= VQ_TQ_MAX_D;
}

/* the key layout alone (tq_split's subsets): 4 bits at any even n, 2 bits at n % 16 == 0 (a last
 * group of 16 fills one word), 1 and 3 bits at n % 32 == 0; the score kernels serve them all */
int vq_tql_key_supported(int bits, int n) {
    if (n <= 0 || n > VQ_TQ_MAX_D) return 0;
    switch (bits) {
    case 4: return n % 2 == 0;
    case 2: return n % 16 == 0;
    case 1: case 3: return n % 32 == 0;
    default: return 0;
    }
}
void vq_tql_key_set(int bits, uint8_t *codes, int r, int i, unsigned v) {
    if (bits == 4) codes[(size_t)(i / 2) * 16 + r] |= (uint8_t)(v << (4 * (i & 1)));
    else vq_tqll_key_set(bits, codes, r, i, v);
}
unsigned vq_tql_key_get(int bits, const uint8_t *codes, int r, int i) {
    return bits == 4 ? (codes[(size_t)(i / 2) * 16 + r] >> (4 * (i & 1))) & 15u : vq_tqll_key_get(bits, codes, r, i);
}

/* the packed layout's bytes per row at every width: norm + d * bits / 8 (d % 32 == 0: whole bytes) */
size_t vq_tql_block_bytes(const vq_tq *t, int side) {
    size_t nb = t->norm32 ? 4 : 2, cb = (size_t)t->d * (size_t)t->bits / 8;
    return side == VQ_SIDE_K ? VQ_TQL_ROWS * (nb + cb) : nb + cb;
}

static size_t hdr(const vq_tq *t, int side) { return (t->norm32 ? 4 : 2) * (side == VQ_SIDE_K ? VQ_TQL_ROWS : 1); }

static uint8_t kcode(const uint8_t *codes, int r, int i) {
    return (uint8_t)((codes[(size_t)(i / 2) * 16 + r] >> (4 * (i & 1))) & 15);
}
static uint8_t vcode(const uint8_t *codes, int i) {
    int g = i / 32, k = i % 32;
    return (uint8_t)((codes[(size_t)g * 16 + (k & 15)] >> (4 * (k >> 4))) & 15);
}

/* ---------------- encode / decode ---------------- */
void vq_tql_encode(const vq_tq *t, int side, const float *x, uint8_t *block) {
    if (t->bits != 4) { vq_tqll_encode(t, side, x, block); return; }
    const int d = t->d, nr = side == VQ_SIDE_K ? VQ_TQL_ROWS : 1;
    const size_t nb = t->norm32 ? 4 : 2;
    uint8_t *codes = block + hdr(t, side);
    memset(codes, 0, (size_t)nr * d / 2);
    float y[VQ_TQ_MAX_D];
    uint8_t idx[VQ_TQ_MAX_D];
    for (int r = 0; r < nr; r++) {
        double nrm = vq_tq_rotate_unit(t, x + (size_t)r * d, y);
        vq_tq_put_norm(t, nrm, block + r * nb);
        vq_lloydmax_quantize(t->cb1, y, 1.0f, d, idx);
        for (int i = 0; i < d; i++) {
            if (side == VQ_SIDE_K) codes[(size_t)(i / 2) * 16 + r] |= (uint8_t)(idx[i] << (4 * (i & 1)));
            else {
                int g = i / 32, k = i % 32;
                codes[(size_t)g * 16 + (k & 15)] |= (uint8_t)(idx[i] << (4 * (k >> 4)));
            }
        }
    }
}

void vq_tql_decode(const vq_tq *t, int side, const uint8_t *block, float *x) {
    if (t->bits != 4) { vq_tqll_decode(t, side, block, x); return; }
    const int d = t->d, nr = side == VQ_SIDE_K ? VQ_TQL_ROWS : 1;
    const size_t nb = t->norm32 ? 4 : 2;
    const uint8_t *codes = block + hdr(t, side);
    for (int r = 0; r < nr; r++) {
        float nrm = vq_tq_get_norm(t, block + r * nb), *xr = x + (size_t)r * d;
        for (int i = 0; i < d; i++)
            xr[i] = nrm * t->cent1[side == VQ_SIDE_K ? kcode(codes, r, i) : vcode(codes, i)];
        vq_rotation_apply_inverse(t->rot, xr, xr);
    }
}

/* ---------------- scalar references (either side's layout) ---------------- */
static uint8_t code_at(int side, const uint8_t *codes, int r, int i) {
    return side == VQ_SIDE_K ? kcode(codes, r, i) : vcode(codes, i);
}

static void score_scalar(const vq_tq *t, int side, int nq, const float *const *q,
                         const uint8_t *blocks, int n_blocks, size_t bb, float *scores) {
    const int d = t->d, rpb = side == VQ_SIDE_K ? VQ_TQL_ROWS : 1, n_rows = n_blocks * rpb;
    const size_t nb = t->norm32 ? 4 : 2;
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * bb, *codes = blk + hdr(t, side);
        for (int r = 0; r < rpb; r++) {
            float nrm = vq_tq_get_norm(t, blk + r * nb);
            for (int j = 0; j < nq; j++) {
                float s = 0;
                for (int i = 0; i < d; i++) s += q[j][i] * t->cent1[code_at(side, codes, r, i)];
                scores[(size_t)j * n_rows + b * rpb + r] = nrm * s;
            }
        }
    }
}

static void acc_scalar(const vq_tq *t, int side, int nq, const float *w, const uint8_t *blocks,
                       int n_blocks, size_t bb, float *const *acc) {
    const int d = t->d, rpb = side == VQ_SIDE_K ? VQ_TQL_ROWS : 1, n_rows = n_blocks * rpb;
    const size_t nb = t->norm32 ? 4 : 2;
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * bb, *codes = blk + hdr(t, side);
        for (int r = 0; r < rpb; r++) {
            float nrm = vq_tq_get_norm(t, blk + r * nb);
            for (int j = 0; j < nq; j++) {
                float wj = w[(size_t)j * n_rows + b * rpb + r] * nrm;
                if (wj == 0.0f) continue;
                for (int i = 0; i < d; i++) acc[j][i] += wj * t->cent1[code_at(side, codes, r, i)];
            }
        }
    }
}

/* ---------------- AVX-512 ---------------- */
T_AVX512 static INL __m512 norms16_512(const vq_tq *t, const uint8_t *blk) {
    return t->norm32 ? _mm512_loadu_ps(blk) : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
}

/* m queries (constant after inlining) over n_blocks blocks of 16 rows; even and odd coordinates
 * feed separate accumulators so the FMA chains are twice as many and half as long */
T_AVX512 static INL void score_512_m(const vq_tq *t, const int m, const float *const *q,
                                     const uint8_t *blocks, int n_blocks, size_t bb, float *scores,
                                     size_t stride) {
    const __m512 tab = _mm512_loadu_ps(t->cent1);
    const int np = t->d / 2;
    const size_t h = hdr(t, VQ_SIDE_K);
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * bb, *c = blk + h;
        for (size_t o = 0; o < bb; o += 64) _mm_prefetch((const char *)(blk + 2 * bb + o), _MM_HINT_T0);
        __m512 a0[4], a1[4];
#pragma GCC unroll 4
        for (int j = 0; j < m; j++) a0[j] = a1[j] = _mm512_setzero_ps();
        for (int p = 0; p < np; p++) {
            __m512i raw = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c + (size_t)p * 16)));
            __m512 v0 = _mm512_permutexvar_ps(raw, tab);
            __m512 v1 = _mm512_permutexvar_ps(_mm512_srli_epi32(raw, 4), tab);
#pragma GCC unroll 4
            for (int j = 0; j < m; j++) {
                a0[j] = _mm512_fmadd_ps(v0, _mm512_set1_ps(q[j][2 * p]), a0[j]);
                a1[j] = _mm512_fmadd_ps(v1, _mm512_set1_ps(q[j][2 * p + 1]), a1[j]);
            }
        }
        __m512 nrm = norms16_512(t, blk);
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
        switch (VQ_MIN(4, nq - j0)) {
        case 1: score_512_m(t, 1, q + j0, blocks, n_blocks, bb, s, stride); break;
        case 2: score_512_m(t, 2, q + j0, blocks, n_blocks, bb, s, stride); break;
        case 3: score_512_m(t, 3, q + j0, blocks, n_blocks, bb, s, stride); break;
        default: score_512_m(t, 4, q + j0, blocks, n_blocks, bb, s, stride); break;
        }
    }
}

/* m queries x 64 coordinates (2 groups of 32) held in registers over every row; g0: first group */
T_AVX512 static INL void acc_512_m(const vq_tq *t, const int m, const float *w, size_t wstride,
                                   const uint8_t *blocks, int n_rows, size_t bb, float *const *acc,
                                   int g0, const int ng) {
    const __m512 tab = _mm512_loadu_ps(t->cent1);
    const size_t h = hdr(t, VQ_SIDE_V);
    __m512 a[4][4];
#pragma GCC unroll 4
    for (int j = 0; j < m; j++)
#pragma GCC unroll 4
        for (int k = 0; k < 2 * ng; k++) a[j][k] = _mm512_setzero_ps();
    for (int r = 0; r < n_rows; r++) {
        const uint8_t *blk = blocks + (size_t)r * bb, *c = blk + h + (size_t)g0 * 16;
        _mm_prefetch((const char *)(blk + 16 * bb), _MM_HINT_T0);   /* rows are ~34-66 B: stay ahead */
        float nrm;
        if (t->norm32) memcpy(&nrm, blk, 4);
        else { uint16_t hb; memcpy(&hb, blk, 2); nrm = _cvtsh_ss(hb); }
        __m512 vw[4];
#pragma GCC unroll 4
        for (int j = 0; j < m; j++) vw[j] = _mm512_set1_ps(w[(size_t)j * wstride + r] * nrm);
#pragma GCC unroll 4
        for (int g = 0; g < ng; g++) {
            __m512i raw = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(c + (size_t)g * 16)));
            __m512 v0 = _mm512_permutexvar_ps(raw, tab);
            __m512 v1 = _mm512_permutexvar_ps(_mm512_srli_epi32(raw, 4), tab);
#pragma GCC unroll 4
            for (int j = 0; j < m; j++) {
                a[j][2 * g] = _mm512_fmadd_ps(v0, vw[j], a[j][2 * g]);
                a[j][2 * g + 1] = _mm512_fmadd_ps(v1, vw[j], a[j][2 * g + 1]);
            }
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < m; j++)
#pragma GCC unroll 4
        for (int k = 0; k < 2 * ng; k++) {
            float *o = acc[j] + (size_t)g0 * 32 + (size_t)k * 16;
            _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), a[j][k]));
        }
}

#define ACC_NG(M)                                                                          \
    do {                                                                                   \
        if (ng == 2) acc_512_m(t, M, w + (size_t)j0 * n_rows, n_rows, blocks, n_rows, bb,  \
                               acc + j0, g0, 2);                                           \
        else acc_512_m(t, M, w + (size_t)j0 * n_rows, n_rows, blocks, n_rows, bb,          \
                       acc + j0, g0, 1);                                                   \
    } while (0)

T_AVX512 static void acc_512(const vq_tq *t, int nq, const float *w, const uint8_t *blocks,
                             int n_rows, size_t bb, float *const *acc) {
    const int groups = t->d / 32;
    for (int g0 = 0; g0 < groups; g0 += 2) {
        const int ng = VQ_MIN(2, groups - g0);
        for (int j0 = 0; j0 < nq; j0 += 4) {
            switch (VQ_MIN(4, nq - j0)) {
            case 1: ACC_NG(1); break;
            case 2: ACC_NG(2); break;
            case 3: ACC_NG(3); break;
            default: ACC_NG(4); break;
            }
        }
    }
}

/* ---------------- AVX2: 8 lanes, the 16-entry table as two permutes and a blend ---------------- */
T_AVX2 static INL __m256 look16_256(__m256i idx, __m256 tlo, __m256 thi) {
    __m256 lo = _mm256_permutevar8x32_ps(tlo, idx), hi = _mm256_permutevar8x32_ps(thi, idx);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

T_AVX2 static INL void score_256_m(const vq_tq *t, const int m, const float *const *q,
                                   const uint8_t *blocks, int n_blocks, size_t bb, float *scores,
                                   size_t stride) {
    const __m256 tlo = _mm256_loadu_ps(t->cent1), thi = _mm256_loadu_ps(t->cent1 + 8);
    const __m256i m15 = _mm256_set1_epi32(15);
    const int np = t->d / 2;
    const size_t h = hdr(t, VQ_SIDE_K);
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *blk = blocks + (size_t)b * bb, *c = blk + h;
        for (size_t o = 0; o < bb; o += 64) _mm_prefetch((const char *)(blk + 2 * bb + o), _MM_HINT_T0);
        for (int half = 0; half < 2; half++) {   /* rows 0..7, then 8..15 */
            __m256 a0[4], a1[4];
#pragma GCC unroll 4
            for (int j = 0; j < m; j++) a0[j] = a1[j] = _mm256_setzero_ps();
            for (int p = 0; p < np; p++) {
                __m256i raw = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(c + (size_t)p * 16 + 8 * half)));
                __m256 v0 = look16_256(_mm256_and_si256(raw, m15), tlo, thi);
                __m256 v1 = look16_256(_mm256_srli_epi32(raw, 4), tlo, thi);
    #pragma GCC unroll 4
                for (int j = 0; j < m; j++) {
                    a0[j] = _mm256_fmadd_ps(v0, _mm256_set1_ps(q[j][2 * p]), a0[j]);
                    a1[j] = _mm256_fmadd_ps(v1, _mm256_set1_ps(q[j][2 * p + 1]), a1[j]);
                }
            }
            float nr[8];
            for (int r = 0; r < 8; r++) nr[r] = vq_tq_get_norm(t, blk + (size_t)(8 * half + r) * (t->norm32 ? 4 : 2));
            __m256 nrm = _mm256_loadu_ps(nr);
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
        switch (VQ_MIN(4, nq - j0)) {
        case 1: score_256_m(t, 1, q + j0, blocks, n_blocks, bb, s, stride); break;
        case 2: score_256_m(t, 2, q + j0, blocks, n_blocks, bb, s, stride); break;
        case 3: score_256_m(t, 3, q + j0, blocks, n_blocks, bb, s, stride); break;
        default: score_256_m(t, 4, q + j0, blocks, n_blocks, bb, s, stride); break;
        }
    }
}

/* values: one group of 32 coordinates (4 registers per query) at a time over every row */
T_AVX2 static INL void acc_256_m(const vq_tq *t, const int m, const float *w, size_t wstride,
                                 const uint8_t *blocks, int n_rows, size_t bb, float *const *acc, int g) {
    const __m256 tlo = _mm256_loadu_ps(t->cent1), thi = _mm256_loadu_ps(t->cent1 + 8);
    const __m256i m15 = _mm256_set1_epi32(15);
    const size_t h = hdr(t, VQ_SIDE_V);
    __m256 a[4][4];
#pragma GCC unroll 4
    for (int j = 0; j < m; j++)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) a[j][k] = _mm256_setzero_ps();
    for (int r = 0; r < n_rows; r++) {
        const uint8_t *blk = blocks + (size_t)r * bb, *c = blk + h + (size_t)g * 16;
        _mm_prefetch((const char *)(blk + 16 * bb), _MM_HINT_T0);
        float nrm = vq_tq_get_norm(t, blk);
        __m256 vw[4];
#pragma GCC unroll 4
        for (int j = 0; j < m; j++) vw[j] = _mm256_set1_ps(w[(size_t)j * wstride + r] * nrm);
#pragma GCC unroll 4
        for (int half = 0; half < 2; half++) {   /* bytes 0..7: coords 0..7 and 16..23; 8..15: 8..15, 24..31 */
            __m256i raw = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(c + 8 * half)));
            __m256 v0 = look16_256(_mm256_and_si256(raw, m15), tlo, thi);
            __m256 v1 = look16_256(_mm256_srli_epi32(raw, 4), tlo, thi);
#pragma GCC unroll 4
            for (int j = 0; j < m; j++) {
                a[j][half] = _mm256_fmadd_ps(v0, vw[j], a[j][half]);
                a[j][2 + half] = _mm256_fmadd_ps(v1, vw[j], a[j][2 + half]);
            }
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < m; j++)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            float *o = acc[j] + (size_t)g * 32 + (size_t)k * 8;
            _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), a[j][k]));
        }
}

T_AVX2 static void acc_256(const vq_tq *t, int nq, const float *w, const uint8_t *blocks, int n_rows,
                           size_t bb, float *const *acc) {
    for (int g = 0; g < t->d / 32; g++)
        for (int j0 = 0; j0 < nq; j0 += 4) {
            const float *wj = w + (size_t)j0 * n_rows;
            switch (VQ_MIN(4, nq - j0)) {
            case 1: acc_256_m(t, 1, wj, n_rows, blocks, n_rows, bb, acc + j0, g); break;
            case 2: acc_256_m(t, 2, wj, n_rows, blocks, n_rows, bb, acc + j0, g); break;
            case 3: acc_256_m(t, 3, wj, n_rows, blocks, n_rows, bb, acc + j0, g); break;
            default: acc_256_m(t, 4, wj, n_rows, blocks, n_rows, bb, acc + j0, g); break;
            }
        }
}

/* ---------------- dispatch ----------------
 * The store scores keys and accumulates values; the contract also allows the other way round
 * (tests do it), which the scalar code serves. */
void vq_tql_score(const vq_tq *t, int side, int nq, const float *const *q, const uint8_t *blocks,
                  int n_blocks, size_t bb, float *scores) {
    if (t->bits != 4) vq_tqll_score(t, side, nq, q, blocks, n_blocks, bb, scores);
    else if (side == VQ_SIDE_K && t->isa == VQ_ISA_AVX512) score_512(t, nq, q, blocks, n_blocks, bb, scores);
    else if (side == VQ_SIDE_K && t->isa == VQ_ISA_AVX2) score_256(t, nq, q, blocks, n_blocks, bb, scores);
    else score_scalar(t, side, nq, q, blocks, n_blocks, bb, scores);
}

void vq_tql_accumulate(const vq_tq *t, int side, int nq, const float *w, const uint8_t *blocks,
                       int n_blocks, size_t bb, float *const *acc) {
    if (t->bits != 4) vq_tqll_accumulate(t, side, nq, w, blocks, n_blocks, bb, acc);
    else if (side == VQ_SIDE_V && t->isa == VQ_ISA_AVX512) acc_512(t, nq, w, blocks, n_blocks, bb, acc);
    else if (side == VQ_SIDE_V && t->isa == VQ_ISA_AVX2) acc_256(t, nq, w, blocks, n_blocks, bb, acc);
    else acc_scalar(t, side, nq, w, blocks, n_blocks, bb, acc);
}
