/* tq_common.c: shared machinery of the TurboQuant rows: init (params, rotation, codebook), the
 * row-norm header, and the expand kernel (packed codes -> scale·centroid floats). Expand reads 8
 * codes (= `bits` bytes) at a time: AVX2 looks centroids up with in-register permutes for
 * b <= 4 (one 8-entry table, or two plus a blend), a gather above; AVX-512 does 16 per step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include "codec/tq.h"
#include "codec/bitpack.h"
#include "codec/codec_vec.h"

/* ---------------- expand ---------------- */
static void expand_scalar(const uint8_t *codes, int bits, const float *cent, int d, float scale,
                          int add, float *out) {
    const uint64_t mask = (1u << bits) - 1u;
    int g = d / 8, j = 0;
    for (int i = 0; i < g; i++) {
        uint64_t w = 0;
        for (int k = 0; k < bits; k++) w |= (uint64_t)codes[i * bits + k] << (8 * k);
        for (int k = 0; k < 8; k++, j++) {
            float v = scale * cent[(w >> (k * bits)) & mask];
            out[j] = add ? out[j] + v : v;
        }
    }
    for (; j < d; j++) {
        float v = scale * cent[vq_bitpack_get(bits, codes, (size_t)j)];
        out[j] = add ? out[j] + v : v;
    }
}

#define T_AVX2 __attribute__((target("avx2,fma")))
#define T_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

/* 8 codes (bits bytes at p, held in the low bytes of w) -> 8 centroid floats */
T_AVX2 static inline __attribute__((always_inline)) __m256
group8_avx2(uint64_t w, const int bits, __m256 tlo, __m256 thi, const float *cent) {
    const __m256i sh = _mm256_setr_epi32(0, bits, 2 * bits, 3 * bits, 0, bits, 2 * bits, 3 * bits);
    const __m256i mask = _mm256_set1_epi32((1 << bits) - 1);
    __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi32((int)(uint32_t)w)),
                                        _mm_set1_epi32((int)(uint32_t)(w >> (4 * bits))), 1);
    __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(v, sh), mask);
    if (bits <= 3) return _mm256_permutevar8x32_ps(tlo, idx);
    if (bits == 4) {
        __m256 a = _mm256_permutevar8x32_ps(tlo, idx), b = _mm256_permutevar8x32_ps(thi, idx);
        return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    }
    return _mm256_i32gather_ps(cent, idx, 4);
}

/* Groups whose 8-byte load stays inside the nbytes of packed codes (then exact-size loads). */
static inline int safe_groups(int d, int bits, int group_bytes) {
    size_t nbytes = ((size_t)d * bits + 7) / 8;
    return nbytes >= 8 ? (int)((nbytes - 8) / (size_t)group_bytes) + 1 : 0;
}

T_AVX2 static inline __attribute__((always_inline)) void
expand_avx2_b(const uint8_t *codes, const int bits, const float *cent, int d, float scale,
              int add, float *out) {
    const __m256 tlo = _mm256_loadu_ps(cent), thi = _mm256_loadu_ps(cent + 8);
    const __m256 vs = _mm256_set1_ps(scale);
    int g = d / 8, gs = VQ_MIN(g, safe_groups(d, bits, bits));
    for (int i = 0; i < g; i++) {
        uint64_t w = 0;
        if (i < gs) memcpy(&w, codes + (size_t)i * bits, 8);
        else memcpy(&w, codes + (size_t)i * bits, (size_t)bits);
        __m256 c = _mm256_mul_ps(group8_avx2(w, bits, tlo, thi, cent), vs);
        if (add) c = _mm256_add_ps(c, _mm256_loadu_ps(out + 8 * i));
        _mm256_storeu_ps(out + 8 * i, c);
    }
    if (d % 8) {
        int j0 = 8 * g;
        expand_scalar(codes + (size_t)g * bits, bits, cent, d - j0, scale, add, out + j0);
    }
}

T_AVX2 static void expand_avx2(const uint8_t *codes, int bits, const float *cent, int d,
                               float scale, int add, float *out) {
    switch (bits) {   /* constant widths so the loads and shifts specialise */
    case 1: expand_avx2_b(codes, 1, cent, d, scale, add, out); break;
    case 2: expand_avx2_b(codes, 2, cent, d, scale, add, out); break;
    case 3: expand_avx2_b(codes, 3, cent, d, scale, add, out); break;
    case 4: expand_avx2_b(codes, 4, cent, d, scale, add, out); break;
    case 5: expand_avx2_b(codes, 5, cent, d, scale, add, out); break;
    case 6: expand_avx2_b(codes, 6, cent, d, scale, add, out); break;
    case 7: expand_avx2_b(codes, 7, cent, d, scale, add, out); break;
    default: expand_avx2_b(codes, 8, cent, d, scale, add, out); break;
    }
}

/* 16 codes (2*bits <= 8 bytes in w) -> 16 centroid floats, for bits <= 4 (16-entry table) */
T_AVX512 static inline __attribute__((always_inline)) __m512
group16_avx512(uint64_t w, const int bits, __m512 tab) {
    const __m512i sh = _mm512_setr_epi32(0, bits, 2 * bits, 3 * bits, 0, bits, 2 * bits, 3 * bits,
                                         0, bits, 2 * bits, 3 * bits, 0, bits, 2 * bits, 3 * bits);
    const __m512i mask = _mm512_set1_epi32((1 << bits) - 1);
    const __m512i quarter = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    /* quarter k of the lanes gets the 32 bits starting at code 4k */
    __m128i q = _mm_setr_epi32((int)(uint32_t)w, (int)(uint32_t)(w >> (4 * bits)),
                               (int)(uint32_t)(w >> (8 * bits)), (int)(uint32_t)(w >> (12 * bits)));
    __m512i v = _mm512_permutexvar_epi32(quarter, _mm512_castsi128_si512(q));
    __m512i idx = _mm512_and_si512(_mm512_srlv_epi32(v, sh), mask);
    return _mm512_permutexvar_ps(idx, tab);
}

T_AVX512 static inline __attribute__((always_inline)) void
expand_avx512_b(const uint8_t *codes, const int bits, const float *cent, int d, float scale,
                int add, float *out) {
    const __m512 tab = _mm512_loadu_ps(cent);
    const __m512 vs = _mm512_set1_ps(scale);
    int g = d / 16, gs = VQ_MIN(g, safe_groups(d, bits, 2 * bits));
    for (int i = 0; i < g; i++) {   /* 16 codes = 2*bits <= 8 bytes */
        uint64_t w = 0;
        if (i < gs) memcpy(&w, codes + (size_t)i * 2 * bits, 8);
        else memcpy(&w, codes + (size_t)i * 2 * bits, (size_t)(2 * bits));
        __m512 c = _mm512_mul_ps(group16_avx512(w, bits, tab), vs);
        if (add) c = _mm512_add_ps(c, _mm512_loadu_ps(out + 16 * i));
        _mm512_storeu_ps(out + 16 * i, c);
    }
    if (d % 16) {
        int j0 = 16 * g;
        expand_avx2_b(codes + (size_t)g * 2 * bits, bits, cent, d - j0, scale, add, out + j0);
    }
}

T_AVX512 static void expand_avx512(const uint8_t *codes, int bits, const float *cent, int d,
                                   float scale, int add, float *out) {
    switch (bits) {
    case 1: expand_avx512_b(codes, 1, cent, d, scale, add, out); break;
    case 2: expand_avx512_b(codes, 2, cent, d, scale, add, out); break;
    case 3: expand_avx512_b(codes, 3, cent, d, scale, add, out); break;
    case 4: expand_avx512_b(codes, 4, cent, d, scale, add, out); break;
    default: expand_avx2(codes, bits, cent, d, scale, add, out); break;   /* gathers either way */
    }
}

void vq_tq_expand_isa(vq_isa isa, const uint8_t *codes, int bits, const float *cent, int d,
                      float scale, int add, float *out) {
    if (bits < 1 || bits > 8 || d <= 0) return;
    if (isa > vq_cpu_best_isa()) isa = vq_cpu_best_isa();
    if (isa == VQ_ISA_AVX512) expand_avx512(codes, bits, cent, d, scale, add, out);
    else if (isa == VQ_ISA_AVX2) expand_avx2(codes, bits, cent, d, scale, add, out);
    else expand_scalar(codes, bits, cent, d, scale, add, out);
}

void vq_tq_expand(const vq_tq *t, const uint8_t *codes, int bits, const float *cent, float scale,
                  int add, float *out) {
    if (t->isa == VQ_ISA_AVX512) expand_avx512(codes, bits, cent, t->d, scale, add, out);
    else if (t->isa == VQ_ISA_AVX2) expand_avx2(codes, bits, cent, t->d, scale, add, out);
    else expand_scalar(codes, bits, cent, t->d, scale, add, out);
}

/* ---------------- fused dot: codes -> q_j . (cent1[c1] + s2 cent2[c2]) ---------------- */
/* One pass over the codes of a row serves every query of the GQA group: each group of 8 (16)
 * codes becomes centroid floats in a register and is multiplied into one accumulator per query. */
#define TQ_MAXQ 4   /* queries per pass: accumulators stay in registers */

static void dotc_scalar(const uint8_t *c1, int b1, const float *cent1, const uint8_t *c2,
                        float s2, const float *cent2, int n, const float *const *q, int nq,
                        float *res) {
    float c[VQ_TQ_MAX_D];
    expand_scalar(c1, b1, cent1, n, 1.0f, 0, c);
    if (c2) expand_scalar(c2, b1, cent2, n, s2, 1, c);
    for (int j = 0; j < nq; j++) {
        float a = 0;
        for (int i = 0; i < n; i++) a += q[j][i] * c[i];
        res[j] = a;
    }
}

T_AVX2 static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

T_AVX2 static inline __attribute__((always_inline)) void
dotc_avx2_b(const uint8_t *c1, const int b, const float *cent1, const uint8_t *c2, float s2,
            const float *cent2, int n, const float *const *q, const int nq, float *res) {
    const __m256 t1l = _mm256_loadu_ps(cent1), t1h = _mm256_loadu_ps(cent1 + 8);
    const __m256 t2l = _mm256_loadu_ps(cent2), t2h = _mm256_loadu_ps(cent2 + 8);
    const __m256 vs2 = _mm256_set1_ps(s2);
    __m256 acc[TQ_MAXQ];
    for (int j = 0; j < nq; j++) acc[j] = _mm256_setzero_ps();
    int g = n / 8, gs = VQ_MIN(g, safe_groups(n, b, b));
    for (int i = 0; i < g; i++) {
        uint64_t w = 0, w2 = 0;
        if (i < gs) memcpy(&w, c1 + (size_t)i * b, 8);
        else memcpy(&w, c1 + (size_t)i * b, (size_t)b);
        __m256 c = group8_avx2(w, b, t1l, t1h, cent1);
        if (c2) {
            if (i < gs) memcpy(&w2, c2 + (size_t)i * b, 8);
            else memcpy(&w2, c2 + (size_t)i * b, (size_t)b);
            c = _mm256_fmadd_ps(group8_avx2(w2, b, t2l, t2h, cent2), vs2, c);
        }
        for (int j = 0; j < nq; j++) acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q[j] + 8 * i), c, acc[j]);
    }
    for (int j = 0; j < nq; j++) res[j] = hsum8(acc[j]);
}

#define DOTC_NQ(F, B) switch (nq) { \
    case 1: F(c1, B, cent1, c2, s2, cent2, n, q, 1, res); break; \
    case 2: F(c1, B, cent1, c2, s2, cent2, n, q, 2, res); break; \
    case 3: F(c1, B, cent1, c2, s2, cent2, n, q, 3, res); break; \
    default: F(c1, B, cent1, c2, s2, cent2, n, q, 4, res); break; }

T_AVX2 static void dotc_avx2(const uint8_t *c1, int b, const float *cent1, const uint8_t *c2,
                             float s2, const float *cent2, int n, const float *const *q, int nq,
                             float *res) {
    switch (b) {   /* constant width and query count: everything specialises */
    case 1: DOTC_NQ(dotc_avx2_b, 1) break;
    case 2: DOTC_NQ(dotc_avx2_b, 2) break;
    case 3: DOTC_NQ(dotc_avx2_b, 3) break;
    case 4: DOTC_NQ(dotc_avx2_b, 4) break;
    case 5: DOTC_NQ(dotc_avx2_b, 5) break;
    case 6: DOTC_NQ(dotc_avx2_b, 6) break;
    case 7: DOTC_NQ(dotc_avx2_b, 7) break;
    default: DOTC_NQ(dotc_avx2_b, 8) break;
    }
}

T_AVX512 static inline __attribute__((always_inline)) void
dotc_avx512_b(const uint8_t *c1, const int b, const float *cent1, const uint8_t *c2, float s2,
              const float *cent2, int n, const float *const *q, const int nq, float *res) {
    const __m512 t1 = _mm512_loadu_ps(cent1), t2 = _mm512_loadu_ps(cent2);
    const __m512 vs2 = _mm512_set1_ps(s2);
    __m512 acc[TQ_MAXQ];
    for (int j = 0; j < nq; j++) acc[j] = _mm512_setzero_ps();
    int g = n / 16, gs = VQ_MIN(g, safe_groups(n, b, 2 * b));
    for (int i = 0; i < g; i++) {
        uint64_t w = 0, w2 = 0;
        if (i < gs) memcpy(&w, c1 + (size_t)i * 2 * b, 8);
        else memcpy(&w, c1 + (size_t)i * 2 * b, (size_t)(2 * b));
        __m512 c = group16_avx512(w, b, t1);
        if (c2) {
            if (i < gs) memcpy(&w2, c2 + (size_t)i * 2 * b, 8);
            else memcpy(&w2, c2 + (size_t)i * 2 * b, (size_t)(2 * b));
            c = _mm512_fmadd_ps(group16_avx512(w2, b, t2), vs2, c);
        }
        for (int j = 0; j < nq; j++) acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(q[j] + 16 * i), c, acc[j]);
    }
    for (int j = 0; j < nq; j++) res[j] = _mm512_reduce_add_ps(acc[j]);
}

T_AVX512 static void dotc_avx512(const uint8_t *c1, int b, const float *cent1, const uint8_t *c2,
                                 float s2, const float *cent2, int n, const float *const *q,
                                 int nq, float *res) {
    switch (b) {
    case 1: DOTC_NQ(dotc_avx512_b, 1) break;
    case 2: DOTC_NQ(dotc_avx512_b, 2) break;
    case 3: DOTC_NQ(dotc_avx512_b, 3) break;
    default: DOTC_NQ(dotc_avx512_b, 4) break;
    }
}

void vq_tq_dot_codes(vq_isa isa, const uint8_t *c1, int bits, const float *cent1,
                     const uint8_t *c2, float s2, const float *cent2, int n,
                     const float *const *q, int nq, float *res) {
    for (int j0 = 0; j0 < nq; j0 += TQ_MAXQ) {
        int m = VQ_MIN(TQ_MAXQ, nq - j0);
        if (isa == VQ_ISA_AVX512 && bits <= 4 && n % 16 == 0)
            dotc_avx512(c1, bits, cent1, c2, s2, cent2, n, q + j0, m, res + j0);
        else if (isa >= VQ_ISA_AVX2 && n % 8 == 0)
            dotc_avx2(c1, bits, cent1, c2, s2, cent2, n, q + j0, m, res + j0);
        else
            dotc_scalar(c1, bits, cent1, c2, s2, cent2, n, q + j0, m, res + j0);
    }
}

/* ---------------- norms and small scalars ---------------- */
float vq_tq_put_h(float v, uint8_t *p) {
    if (v > 65504.0f) v = 65504.0f;          /* saturate rather than store inf */
    if (v < -65504.0f) v = -65504.0f;
    vq_f16 h = vq_f32_to_f16(v);
    memcpy(p, &h, 2);
    return vq_f16_to_f32(h);
}
float vq_tq_get_h(const uint8_t *p) {
    vq_f16 h;
    memcpy(&h, p, 2);
    return vq_f16_to_f32(h);
}
float vq_tq_put_norm(const vq_tq *t, double nrm, uint8_t *block) {
    if (t->norm32) { float f = (float)nrm; memcpy(block, &f, 4); return f; }
    return vq_tq_put_h((float)nrm, block);
}
float vq_tq_get_norm(const vq_tq *t, const uint8_t *block) {
    if (t->norm32) { float f; memcpy(&f, block, 4); return f; }
    return vq_tq_get_h(block);
}

double vq_tq_rotate_unit(const vq_tq *t, const float *x, float *y) {
    double s = 0;
    for (int i = 0; i < t->d; i++) s += (double)x[i] * x[i];
    double nrm = sqrt(s);
    if (!(nrm > 0) || !isfinite(nrm)) {       /* zero row (or garbage): direction 0 */
        memset(y, 0, sizeof(float) * (size_t)t->d);
        return nrm;
    }
    double inv = 1.0 / nrm;
    for (int i = 0; i < t->d; i++) y[i] = (float)(x[i] * inv);
    vq_rotation_apply(t->rot, y, y);
    return nrm;
}

/* ---------------- init / fini ---------------- */
vq_status vq_tq_init_common(vq_codec_state *st, vq_tq **out, int kind, int d,
                            const vq_codec_param *p, int np, uint64_t seed, int bits_lo,
                            int bits_def,
                            const char *allowed, vq_err *err) {
    const vq_codec *c = st->codec;
    *out = NULL;
    vq_status s = vq_codec_params_check(c, p, np, allowed, err);
    if (s) return s;
    if (d < 3 || d > VQ_TQ_MAX_D || (d > VQ_ROT_MAX_DENSE_D && (d & (d - 1))))
        return vq_err_set(err, VQ_ERR_ARG,
                          "codec %s: head dimension d=%d not supported (3..%d; above %d only powers "
                          "of two)", c->name, d, VQ_TQ_MAX_D, VQ_ROT_MAX_DENSE_D);
    vq_tq *t = calloc(1, sizeof *t);
    if (!t) return vq_err_set(err, VQ_ERR_NOMEM, "codec %s: out of memory", c->name);
    st->impl = t;
    *out = t;
    t->kind = kind;
    t->d = d;
    if ((s = vq_codec_param_int(c, p, np, "bits", bits_lo, 8, bits_def, &t->bits, err))) return s;
    const char *nv = vq_codec_param_get(p, np, "norm");
    if (nv && strcmp(nv, "f16") != 0 && strcmp(nv, "f32") != 0)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: norm=%s is not f16 or f32 (%s)", c->name, nv,
                          c->params_help);
    t->norm32 = nv && strcmp(nv, "f32") == 0;
    t->b1 = kind == VQ_TQ_PROD ? t->bits - 1 : t->bits;
    t->isa = vq_cvec_isa();   /* best the CPU has, capped by VQ_CODEC_ISA (tests) */
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    uint64_t rot_seed = vq_rng_u64(&rng);
    t->rot = vq_rotation_create(d, rot_seed, err);
    if (!t->rot) return err ? err->code : VQ_ERR_ARG;
    t->cent1 = t->cent2 = vq_tq_zero_table;
    if (t->b1 > 0) {
        if (!(t->cb1 = vq_lloydmax_shared(VQ_LAW_SPHERE, d, t->b1, err))) return err ? err->code : VQ_ERR_NOMEM;
        t->cent1 = t->cb1->c;
    }
    st->d = d;
    st->rows_per_block = 1;
    st->fp_window = 0;
    st->state_bytes = sizeof(vq_tq) + (vq_rotation_kind(t->rot) == VQ_ROT_DENSE
                                           ? 2 * sizeof(float) * (size_t)d * d
                                           : sizeof(float) * (size_t)d);
    t->hdr_bytes = t->norm32 ? 4 : 2;
    return VQ_OK;
}

const float vq_tq_zero_table[256];   /* a codebook-less side's table: 0 everywhere */

void vq_tq_fini(vq_codec_state *st) {
    vq_tq *t = st->impl;
    if (!t) return;
    vq_rotation_free(t->rot);
    free(t->S);
    free(t->cb2_own);
    free(t);
    st->impl = NULL;
}

void vq_tq_force_isa(vq_codec_state *st, vq_isa isa) {
    vq_tq *t = st->impl;
    if (!t) return;
    if (isa > vq_cpu_best_isa()) isa = vq_cpu_best_isa();
    t->isa = isa;
}
