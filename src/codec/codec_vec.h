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
#endif
