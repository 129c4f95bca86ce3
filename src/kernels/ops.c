/* ops.c: the element-wise and small kernels of the forward pass: rmsnorm, softmax, SwiGLU,
 * dot/axpy, rotary embedding and the fast Walsh-Hadamard transform. rmsnorm, softmax, swiglu
 * and rope keep llama2.c's exact float arithmetic (no FMA contraction) so the stories260K
 * reference output is reproduced byte for byte. */
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif
#include "kernels/kernels_impl.h"
#include <math.h>
#include <immintrin.h>

void vq_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    float ss = 0.0f;
    for (int j = 0; j < n; j++) ss += x[j] * x[j];
    ss /= (float)n;
    ss += eps;
    ss = 1.0f / sqrtf(ss);
    for (int j = 0; j < n; j++) out[j] = w[j] * (ss * x[j]);
}

void vq_softmax(float *x, int n) {
    if (n <= 0) return;
    float mx = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    for (int i = 0; i < n; i++) x[i] /= sum;
}

void vq_swiglu(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        float v = gate[i];
        v *= 1.0f / (1.0f + expf(-v));
        gate[i] = v * up[i];
    }
}

void vq_geglu(float *gate, const float *up, int n) {
    const float c = 0.7978845608028654f;   /* sqrt(2 / pi) */
    for (int i = 0; i < n; i++) {
        float x = gate[i];
        gate[i] = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * up[i];
    }
}

__attribute__((target("avx512f,fma"))) static float dot_avx512(const float *a, const float *b, int n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    if (i + 16 <= n) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        i += 16;
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}
__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    s0 = _mm256_add_ps(s0, s1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    float r = _mm_cvtss_f32(s);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}
static float dot_scalar(const float *a, const float *b, int n) {
    float s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
    float r = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

float vq_dot_f32(const float *a, const float *b, int n) {
    switch (vq_kernels_isa()) {
    case VQ_ISA_AVX512: return dot_avx512(a, b, n);
    case VQ_ISA_AVX2: return dot_avx2(a, b, n);
    default: return dot_scalar(a, b, n);
    }
}

void vq_axpy_f32(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* llama2.c's arithmetic: freq = 1/base^(i/rot) for the even index i, angle = pos*freq in float.
 * The frequencies are computed once at load (vq_rope_freqs); the angles depend only on the pair,
 * so they are computed once per call and applied to every head. */
void vq_rope_freqs(float *inv_freq, int rot_dim, float base) {
    for (int k = 0; k < rot_dim / 2; k++) inv_freq[k] = 1.0f / powf(base, (float)(2 * k) / (float)rot_dim);
}

void vq_rope(float *x, int n_heads, int head_dim, int rot_dim, int pos, const float *inv_freq, float mscale,
             int neox) {
    if (rot_dim > head_dim) rot_dim = head_dim;
    rot_dim &= ~1;
    int half = rot_dim / 2;
    float cs[512], sn[512];                 /* head_dim <= 1024 covers every model we know */
    for (int c0 = 0; c0 < half; c0 += 512) {
        int cn = VQ_MIN(512, half - c0);
        for (int k = 0; k < cn; k++) {
            float val = (float)pos * inv_freq[c0 + k];
            cs[k] = cosf(val);
            sn[k] = sinf(val);
        }
        if (mscale != 1.0f)
            for (int k = 0; k < cn; k++) { cs[k] *= mscale; sn[k] *= mscale; }
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * head_dim;
            for (int k = 0; k < cn; k++) {
                int a = neox ? c0 + k : 2 * (c0 + k), b = neox ? c0 + k + half : a + 1;
                float v0 = v[a], v1 = v[b];
                v[a] = v0 * cs[k] - v1 * sn[k];
                v[b] = v0 * sn[k] + v1 * cs[k];
            }
        }
    }
}

/* Unnormalized FWHT, stages of stride 1, 2, 4, ... in that order on every path, so the SIMD
 * versions give the same bits as this loop. */
void vq_fwht(float *x, int n) {
    if (n < 2 || (n & (n - 1))) return;
    vq_isa isa = vq_kernels_isa();
    if (isa == VQ_ISA_AVX512 && n >= 16) { vq_fwht_avx512(x, n); return; }
    if (isa >= VQ_ISA_AVX2 && n >= 16) { vq_fwht_avx2(x, n); return; }
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}
