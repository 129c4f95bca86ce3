/* codec_vec.h: small vector kernels the codec rows share (float and fp16 dot products and
 * axpy), each with a scalar reference and AVX2 / AVX-512 variants. The _isa forms let tests pin a
 * variant; the plain forms use the best one this CPU supports (detected once). */
#ifndef VQ_CODEC_VEC_H
#define VQ_CODEC_VEC_H
#include "core/core.h"

vq_isa vq_cvec_isa(void);   /* best ISA, detected once */

float vq_cvec_dot_isa(vq_isa isa, const float *a, const float *b, int n);
float vq_cvec_dot_f16_isa(vq_isa isa, const float *a, const vq_f16 *b, int n);
void  vq_cvec_axpy_isa(vq_isa isa, float *y, float a, const float *x, int n);
void  vq_cvec_axpy_f16_isa(vq_isa isa, float *y, float a, const vq_f16 *x, int n);

static inline float vq_cvec_dot(const float *a, const float *b, int n) {
    return vq_cvec_dot_isa(vq_cvec_isa(), a, b, n);
}
static inline float vq_cvec_dot_f16(const float *a, const vq_f16 *b, int n) {
    return vq_cvec_dot_f16_isa(vq_cvec_isa(), a, b, n);
}
static inline void vq_cvec_axpy(float *y, float a, const float *x, int n) {
    vq_cvec_axpy_isa(vq_cvec_isa(), y, a, x, n);
}
static inline void vq_cvec_axpy_f16(float *y, float a, const vq_f16 *x, int n) {
    vq_cvec_axpy_f16_isa(vq_cvec_isa(), y, a, x, n);
}

/* 16 vectors -> one vector whose lane i is the horizontal sum of v[i] (AVX-512 only; callers
 * compile with a target that includes avx512f). A transpose-add tree: 15 adds + 30 shuffles for
 * 16 sums instead of 16 separate reductions. */
#ifdef VQ_CODEC_VEC_AVX512_HSUM
static inline __attribute__((always_inline, target("avx512f"))) __m512 vq_hsum16x16_512(const __m512 *v) {
    __m512 t[8], u[4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0xEE));
    __m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
    __m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xDD));
}
#endif
#endif
