/* codec_qjl.c: the `qjl` KV codec (1-bit Quantized JL sketch, arXiv 2406.03482) and the sketch and
 * sign-bit kernels declared in qjl.h. A row is stored as sign(S x) (m bits) plus |x|; a key's score is the
 * paper's unbiased asymmetric estimate, a value decodes to the unbiased reconstruction |x| sqrt(pi/2)/m S^T s. */
#include "codec/qjl.h"
#include "codec/codec.h"
#include "codec/codec_vec.h"
#include "codec/rotation.h"
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ sketch */
vq_status vq_qjl_init(vq_qjl *q, int d, int m, uint64_t seed, vq_err *err) {
    memset(q, 0, sizeof *q);
    if (d <= 0 || d > 65536)
        return vq_err_set(err, VQ_ERR_ARG, "qjl: dimension d=%d out of range 1..65536", d);
    if (m <= 0 || m % 8 != 0 || m > 65536)
        return vq_err_set(err, VQ_ERR_ARG, "qjl: sketch rows m=%d must be a positive multiple of 8, <= 65536", m);
    q->S = vq_aligned_alloc((size_t)m * (size_t)d * sizeof(float));
    if (!q->S) return vq_err_set(err, VQ_ERR_NOMEM, "qjl: cannot allocate the %dx%d sketch matrix", m, d);
    q->d = d;
    q->m = m;
    vq_rng r;
    vq_rng_seed(&r, seed);
    for (size_t i = 0; i < (size_t)m * (size_t)d; i++) q->S[i] = (float)vq_gauss_portable(&r);
    return VQ_OK;
}

void vq_qjl_free(vq_qjl *q) {
    if (!q) return;
    vq_aligned_free(q->S);
    q->S = NULL;
}

void vq_qjl_project(const vq_qjl *q, const float *x, float *y) {
    for (int j = 0; j < q->m; j++) y[j] = vq_cvec_dot(q->S + (size_t)j * q->d, x, q->d);
}

void vq_qjl_signs(const vq_qjl *q, const float *x, uint8_t *bits) {
    memset(bits, 0, (size_t)q->m / 8);
    for (int i = 0; i < q->d; i++)
        if (!isfinite(x[i])) return;
    for (int j = 0; j < q->m; j++)
        if (vq_cvec_dot(q->S + (size_t)j * q->d, x, q->d) >= 0.0f) bits[j >> 3] |= (uint8_t)(1u << (j & 7));
}

void vq_qjl_backproject(const vq_qjl *q, const float *a, float *out) {
    for (int i = 0; i < q->d; i++) out[i] = 0.0f;
    for (int j = 0; j < q->m; j++) vq_cvec_axpy(out, a[j], q->S + (size_t)j * q->d, q->d);
}

/* ------------------------------------------------------------------ sign-bit kernels */
/* scalar reference: branch-free (random sign bits would mispredict every other branch) */
static float ms_scalar(const float *y, const uint8_t *bits, int n) {
    float s = 0.0f;
    for (int j = 0; j < n; j++) {
        union { float f; uint32_t u; } v = {y[j]};
        v.u &= 0u - (uint32_t)((bits[j >> 3] >> (j & 7)) & 1);
        s += v.f;
    }
    return s;
}

static void sa_scalar(float *acc, float w, const uint8_t *bits, int n) {
    uint32_t wu;
    memcpy(&wu, &w, 4);
    for (int j = 0; j < n; j++) {
        uint32_t t = wu ^ ((uint32_t)(~(bits[j >> 3] >> (j & 7)) & 1) << 31);   /* bit 0 -> -w */
        float f;
        memcpy(&f, &t, 4);
        acc[j] += f;
    }
}

/* AVX2: broadcast one byte, test its 8 bits against 1,2,..,128 to get 8 lane masks */
__attribute__((target("avx2,fma"))) static float ms_avx2(const float *y, const uint8_t *bits, int n) {
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256i b0 = _mm256_set1_epi32(bits[j >> 3]), b1 = _mm256_set1_epi32(bits[(j >> 3) + 1]);
        __m256 m0 = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(b0, sel), sel));
        __m256 m1 = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(b1, sel), sel));
        a0 = _mm256_add_ps(a0, _mm256_and_ps(m0, _mm256_loadu_ps(y + j)));
        a1 = _mm256_add_ps(a1, _mm256_and_ps(m1, _mm256_loadu_ps(y + j + 8)));
    }
    for (; j < n; j += 8) {
        __m256i b0 = _mm256_set1_epi32(bits[j >> 3]);
        __m256 m0 = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(b0, sel), sel));
        a0 = _mm256_add_ps(a0, _mm256_and_ps(m0, _mm256_loadu_ps(y + j)));
    }
    a0 = _mm256_add_ps(a0, a1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

__attribute__((target("avx2,fma"))) static void sa_avx2(float *acc, float w, const uint8_t *bits, int n) {
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256 pw = _mm256_set1_ps(w), nw = _mm256_set1_ps(-w);
    for (int j = 0; j < n; j += 8) {
        __m256i b = _mm256_set1_epi32(bits[j >> 3]);
        __m256 m = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(b, sel), sel));
        _mm256_storeu_ps(acc + j, _mm256_add_ps(_mm256_loadu_ps(acc + j), _mm256_blendv_ps(nw, pw, m)));
    }
}

/* AVX-512: 16 sign bits are directly a lane mask */
__attribute__((target("avx512f,avx512bw"))) static float ms_avx512(const float *y, const uint8_t *bits,
                                                                   int n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int j = 0;
    for (; j + 32 <= n; j += 32) {
        uint16_t k0, k1;
        memcpy(&k0, bits + (j >> 3), 2);
        memcpy(&k1, bits + (j >> 3) + 2, 2);
        a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps((__mmask16)k0, y + j));
        a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps((__mmask16)k1, y + j + 16));
    }
    for (; j + 16 <= n; j += 16) {
        uint16_t k0;
        memcpy(&k0, bits + (j >> 3), 2);
        a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps((__mmask16)k0, y + j));
    }
    if (j < n) /* n % 16 == 8: one byte left */
        a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps((__mmask16)bits[j >> 3], y + j));
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

__attribute__((target("avx512f,avx512bw"))) static void sa_avx512(float *acc, float w, const uint8_t *bits,
                                                                  int n) {
    const __m512 pw = _mm512_set1_ps(w), nw = _mm512_set1_ps(-w);
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        uint16_t k;
        memcpy(&k, bits + (j >> 3), 2);
        __m512 t = _mm512_mask_blend_ps((__mmask16)k, nw, pw);
        _mm512_storeu_ps(acc + j, _mm512_add_ps(_mm512_loadu_ps(acc + j), t));
    }
    if (j < n) {
        __mmask16 live = 0xff;
        __m512 t = _mm512_mask_blend_ps((__mmask16)bits[j >> 3], nw, pw);
        __m512 a = _mm512_maskz_loadu_ps(live, acc + j);
        _mm512_mask_storeu_ps(acc + j, live, _mm512_add_ps(a, t));
    }
}

vq_masked_sum_fn vq_masked_sum_for(vq_isa isa) {
    vq_isa best = vq_cpu_best_isa();
    if (isa > best) isa = best;
    if (isa == VQ_ISA_AVX512) return ms_avx512;
    if (isa == VQ_ISA_AVX2) return ms_avx2;
    return ms_scalar;
}

vq_signed_add_fn vq_signed_add_for(vq_isa isa) {
    vq_isa best = vq_cpu_best_isa();
    if (isa > best) isa = best;
    if (isa == VQ_ISA_AVX512) return sa_avx512;
    if (isa == VQ_ISA_AVX2) return sa_avx2;
    return sa_scalar;
}

/* vq_cvec_isa: the CPU's best, capped by VQ_CODEC_ISA=scalar|avx2|avx512 (how tests run each path) */
vq_masked_sum_fn vq_masked_sum_best(void) { return vq_masked_sum_for(vq_cvec_isa()); }
vq_signed_add_fn vq_signed_add_best(void) { return vq_signed_add_for(vq_cvec_isa()); }

/* ------------------------------------------------------------------ the codec row */
/* Block: [m/8 bytes: sign bits][scale: |x| as fp16 (default) or fp32]. */
typedef struct qjl_impl {
    vq_qjl sk;
    int scale_f32;
    size_t sign_bytes;
    vq_masked_sum_fn ms;
    vq_signed_add_fn sa;
} qjl_impl;

extern const vq_codec vq_codec_qjl;

static void put_scale(uint8_t *p, int f32, double v) {
    if (f32) {
        float f = (float)v;
        memcpy(p, &f, 4);
    } else {
        if (v > 65504.0) v = 65504.0;   /* fp16 saturates instead of becoming inf; scale=f32 keeps it */
        vq_f16 h = vq_f32_to_f16((float)v);
        memcpy(p, &h, 2);
    }
}

static float get_scale(const uint8_t *p, int f32) {
    if (f32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    vq_f16 h;
    memcpy(&h, p, 2);
    return vq_f16_to_f32(h);
}

static vq_status qjl_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                          uint64_t seed, vq_err *err) {
    const vq_codec *c = &vq_codec_qjl;
    if (d <= 0 || d > 4096)
        return vq_err_set(err, VQ_ERR_ARG, "codec qjl: row dimension d=%d out of range 1..4096", d);
    vq_status s = vq_codec_params_check(c, p, np, "bits,m,scale", err);
    if (s) return s;
    int bits = 2, m = 0;
    if ((s = vq_codec_param_int(c, p, np, "bits", 1, 16, 2, &bits, err))) return s;
    if ((s = vq_codec_param_int(c, p, np, "m", 8, 16 * d, 0, &m, err))) return s;
    if (m == 0) m = ((bits * d + 7) / 8) * 8;   /* bits per coordinate -> sketch rows */
    if (m % 8)
        return vq_err_set(err, VQ_ERR_ARG, "codec qjl: m=%d must be a multiple of 8 (%s)", m, c->params_help);
    int f32 = 0;
    const char *sc = vq_codec_param_get(p, np, "scale");
    if (sc && !strcmp(sc, "f32")) f32 = 1;
    else if (sc && strcmp(sc, "f16"))
        return vq_err_set(err, VQ_ERR_ARG, "codec qjl: scale=%s must be f16 or f32", sc);
    qjl_impl *im = calloc(1, sizeof *im);
    if (!im) return vq_err_set(err, VQ_ERR_NOMEM, "codec qjl: out of memory");
    st->impl = im;   /* fini frees it even when init fails below */
    if ((s = vq_qjl_init(&im->sk, d, m, seed, err))) return s;
    im->scale_f32 = f32;
    im->sign_bytes = (size_t)m / 8;
    im->ms = vq_masked_sum_best();
    im->sa = vq_signed_add_best();
    st->d = d;
    st->side = side;
    st->rows_per_block = 1;
    st->block_bytes = im->sign_bytes + (f32 ? 4 : 2);
    st->qstate_bytes = ((size_t)m + 1) * sizeof(float);   /* S q, then sum_j (S q)_j */
    st->acc_floats = m;                                    /* V sums live in the sketch domain */
    st->state_bytes = sizeof *im + (size_t)m * (size_t)d * sizeof(float);   /* the sketch S */
    snprintf(st->params, sizeof st->params, "m=%d,scale=%s", m, f32 ? "f32" : "f16");
    return VQ_OK;
}

static void qjl_fini(vq_codec_state *st) {
    qjl_impl *im = st->impl;
    if (im) {
        vq_qjl_free(&im->sk);
        free(im);
    }
    st->impl = NULL;
}

static void qjl_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    const qjl_impl *im = st->impl;
    double n2 = 0.0;
    for (int i = 0; i < st->d; i++) n2 += (double)x[i] * x[i];
    double nrm = sqrt(n2);
    if (!isfinite(nrm)) {   /* NaN/inf row: zero bits, NaN scale, so every use of it shows NaN */
        memset(block, 0, im->sign_bytes);
        put_scale(block + im->sign_bytes, im->scale_f32, NAN);
        return;
    }
    /* signs of S x equal those of S (x/|x|); the unit vector keeps huge inputs from overflowing */
    float u[4096];
    memset(u, 0, (size_t)st->d * sizeof(float));
    double inv = nrm > 0.0 ? 1.0 / nrm : 0.0;
    for (int i = 0; i < st->d; i++) u[i] = (float)(x[i] * inv);
    vq_qjl_signs(&im->sk, u, block);
    put_scale(block + im->sign_bytes, im->scale_f32, nrm);
}

static void qjl_decode(const vq_codec_state *st, const uint8_t *block, float *x) {
    const qjl_impl *im = st->impl;
    int m = im->sk.m;
    float sbuf[2048];
    float *s = m <= 2048 ? sbuf : malloc((size_t)m * sizeof(float));
    if (!s) {
        for (int i = 0; i < st->d; i++) x[i] = NAN;
        return;
    }
    float c = get_scale(block + im->sign_bytes, im->scale_f32) * VQ_QJL_SQRT_PI_2 / (float)m;
    for (int j = 0; j < m; j++) s[j] = ((block[j >> 3] >> (j & 7)) & 1) ? c : -c;
    vq_qjl_backproject(&im->sk, s, x);
    if (s != sbuf) free(s);
}

static void qjl_prep_query(const vq_codec_state *st, const float *q, void *qstate) {
    const qjl_impl *im = st->impl;
    float *y = qstate;
    vq_qjl_project(&im->sk, q, y);
    float t = 0.0f;
    for (int j = 0; j < im->sk.m; j++) t += y[j];
    y[im->sk.m] = t;
}

static void qjl_score(const vq_codec_state *st, int n_q, const void *const *qstates, const uint8_t *blocks,
                      int n_blocks, float *scores) {
    const qjl_impl *im = st->impl;
    const int m = im->sk.m;
    const float c = VQ_QJL_SQRT_PI_2 / (float)m;
    for (int r = 0; r < n_blocks; r++) {
        const uint8_t *b = blocks + (size_t)r * st->block_bytes;
        float nc = get_scale(b + im->sign_bytes, im->scale_f32) * c;
        for (int j = 0; j < n_q; j++) {
            const float *y = qstates[j];
            scores[(size_t)j * n_blocks + r] = nc * vq_sign_dot(im->ms, y, y[m], b, m);
        }
    }
}

static void qjl_accumulate(const vq_codec_state *st, int n_q, const float *w, const uint8_t *blocks,
                           int n_blocks, float *const *acc) {
    const qjl_impl *im = st->impl;
    const int m = im->sk.m;
    for (int r = 0; r < n_blocks; r++) {
        const uint8_t *b = blocks + (size_t)r * st->block_bytes;
        float nrm = get_scale(b + im->sign_bytes, im->scale_f32);
        for (int j = 0; j < n_q; j++) {
            float wj = w[(size_t)j * n_blocks + r];
            if (wj != 0.0f) im->sa(acc[j], wj * nrm, b, m);
        }
    }
}

static void qjl_finish(const vq_codec_state *st, const float *acc, float *out) {
    const qjl_impl *im = st->impl;
    vq_qjl_backproject(&im->sk, acc, out);
    const float c = VQ_QJL_SQRT_PI_2 / (float)im->sk.m;
    for (int i = 0; i < st->d; i++) out[i] *= c;
}

const vq_codec vq_codec_qjl = {
    .name = "qjl",
    .params_help = "bits=1..16 sketch bits per coordinate (default 2: m = bits*d rounded up to 8), "
                   "m=8..16d sketch rows, multiple of 8 (overrides bits), scale=f16|f32 norm storage (default f16)",
    .init = qjl_init,
    .fini = qjl_fini,
    .encode = qjl_encode,
    .decode = qjl_decode,
    .prep_query = qjl_prep_query,
    .score = qjl_score,
    .accumulate = qjl_accumulate,
    .finish = qjl_finish,
};
