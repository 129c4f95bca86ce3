/* qjl.h: the 1-bit Quantized Johnson-Lindenstrauss sketch (Zandieh et al., arXiv 2406.03482) and the
 * sign-bit kernels it shares with rabitq and turboquant_prod: a seeded Gaussian matrix S (m x d),
 * sign(S x) packed one bit per row, and the asymmetric estimate <q, x> ~ |x| sqrt(pi/2)/m sum_j s_j (S q)_j.
 * Bit layout everywhere: bit j of a sketch lives in byte j>>3 at bit j&7 (LSB first); bit = 1 means s_j = +1. */
#ifndef VQ_QJL_H
#define VQ_QJL_H
#include "core/core.h"

typedef struct vq_qjl {
    int d, m;          /* input dimension, sketch rows (m % 8 == 0) */
    float *S;          /* m x d row-major, i.i.d. N(0,1) from vq_rng seeded with seed */
} vq_qjl;

#define VQ_QJL_SQRT_PI_2 1.2533141373155002512f   /* sqrt(pi/2) = 1 / E|N(0,1)| */

/* Draw S (m x d) from seed. m must be a positive multiple of 8. */
vq_status vq_qjl_init(vq_qjl *q, int d, int m, uint64_t seed, vq_err *err);
void      vq_qjl_free(vq_qjl *q);

/* y[0..m) = S x */
void vq_qjl_project(const vq_qjl *q, const float *x, float *y);
/* bits[0..m/8) = packed sign(S x) (sign(0) = +1). Non-finite x gives all-zero bits (no UB). */
void vq_qjl_signs(const vq_qjl *q, const float *x, uint8_t *bits);
/* out[0..d) = S^T a  for a in R^m (the back-projection used to decode and to finish V sums) */
void vq_qjl_backproject(const vq_qjl *q, const float *a, float *out);

/* ---- sign-bit kernels (dispatched once to AVX-512 / AVX2 / scalar) ---- */
/* sum of y_j over j in [0, n) whose bit is set; n % 8 == 0 */
typedef float (*vq_masked_sum_fn)(const float *y, const uint8_t *bits, int n);
/* acc_j += bit_j ? w : -w  for j in [0, n); n % 8 == 0 */
typedef void (*vq_signed_add_fn)(float *acc, float w, const uint8_t *bits, int n);

vq_masked_sum_fn vq_masked_sum_for(vq_isa isa);   /* a kernel this CPU can run for isa <= best */
vq_signed_add_fn vq_signed_add_for(vq_isa isa);
vq_masked_sum_fn vq_masked_sum_best(void);          /* = vq_masked_sum_for(vq_cvec_isa()): honours VQ_CODEC_ISA */
vq_signed_add_fn vq_signed_add_best(void);

/* sum_j s_j y_j with s_j = +-1 from bits, given T = sum_j y_j:  2 * masked_sum - T */
static inline float vq_sign_dot(vq_masked_sum_fn ms, const float *y, float total, const uint8_t *bits,
                                int n) {
    return 2.0f * ms(y, bits, n) - total;
}
#endif
