/* codec_vec.c: float/fp16 dot and axpy for the codecs' hot loops: scalar reference plus AVX2
 * (FMA, F16C) and AVX-512 variants compiled with target attributes, chosen once per process. */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
#include "codec/codec_vec.h"

vq_isa vq_cvec_isa(void) {
    static int cached = -1;   /* benign: every thread computes the same value */
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        v = (int)vq_cpu_best_isa();
        /* VQ_CODEC_ISA=scalar|avx2|avx512 caps the variant (tests run every path this way) */
        const char *e = getenv("VQ_CODEC_ISA");
        int want = !e ? v : !strcmp(e, "scalar") ? 0 : !strcmp(e, "avx2") ? 1 : !strcmp(e, "avx512") ? 2 : v;
        v = VQ_MIN(v, want);
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return (vq_isa)v;
}

/* ---- scalar reference ---- */
static float dot_scalar(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
static float dot_f16_scalar(const float *a, const vq_f16 *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * vq_f16_to_f32(b[i]);
    return s;
}
static void axpy_scalar(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}
static void axpy_f16_scalar(float *y, float a, const vq_f16 *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * vq_f16_to_f32(x[i]);
}

/* ---- AVX2 ---- */
#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
T_AVX2 static float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
T_AVX2 static float dot_avx2(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}
T_AVX2 static float dot_f16_avx2(const float *a, const vq_f16 *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));
        __m256 b1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + 8)));
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), b0, s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), b1, s1);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))), s0);
    float s = hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * vq_f16_to_f32(b[i]);
    return s;
}
T_AVX2 static void axpy_avx2(float *y, float a, const float *x, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}
T_AVX2 static void axpy_f16_avx2(float *y, float a, const vq_f16 *x, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 vx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, vx, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) y[i] += a * vq_f16_to_f32(x[i]);
}

/* ---- AVX-512 ---- */
#define T_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
T_AVX512 static float dot_avx512(const float *a, const float *b, int n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}
T_AVX512 static float dot_f16_avx512(const float *a, const vq_f16 *b, int n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 b0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i)));
        __m512 b1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i + 16)));
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), b0, s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), b1, s1);
    }
    for (; i + 16 <= n; i += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i),
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i))), s0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 bv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, b + i));
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), bv, s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}
T_AVX512 static void axpy_avx512(float *y, float a, const float *x, int n) {
    __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i),
                                                        _mm512_maskz_loadu_ps(m, y + i)));
    }
}
T_AVX512 static void axpy_f16_avx512(float *y, float a, const vq_f16 *x, int n) {
    __m512 va = _mm512_set1_ps(a);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 vx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, vx, _mm512_loadu_ps(y + i)));
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 vx = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, vx, _mm512_maskz_loadu_ps(m, y + i)));
    }
}

/* ---- dispatch ---- */
float vq_cvec_dot_isa(vq_isa isa, const float *a, const float *b, int n) {
    if (isa == VQ_ISA_AVX512) return dot_avx512(a, b, n);
    if (isa == VQ_ISA_AVX2) return dot_avx2(a, b, n);
    return dot_scalar(a, b, n);
}
float vq_cvec_dot_f16_isa(vq_isa isa, const float *a, const vq_f16 *b, int n) {
    if (isa == VQ_ISA_AVX512) return dot_f16_avx512(a, b, n);
    if (isa == VQ_ISA_AVX2) return dot_f16_avx2(a, b, n);
    return dot_f16_scalar(a, b, n);
}
void vq_cvec_axpy_isa(vq_isa isa, float *y, float a, const float *x, int n) {
    if (isa == VQ_ISA_AVX512) axpy_avx512(y, a, x, n);
    else if (isa == VQ_ISA_AVX2) axpy_avx2(y, a, x, n);
    else axpy_scalar(y, a, x, n);
}
void vq_cvec_axpy_f16_isa(vq_isa isa, float *y, float a, const vq_f16 *x, int n) {
    if (isa == VQ_ISA_AVX512) axpy_f16_avx512(y, a, x, n);
    else if (isa == VQ_ISA_AVX2) axpy_f16_avx2(y, a, x, n);
    else axpy_f16_scalar(y, a, x, n);
}
