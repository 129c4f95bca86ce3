/* lloydmax.h: Lloyd-Max (MSE-optimal) scalar codebooks for a known law, computed at start-up by
 * numerical integration, plus the quantizer "index = number of midpoint boundaries exceeded".
 * Laws: the coordinate of a uniformly random unit vector in R^d (what a rotated unit vector looks
 * like: f(t) ∝ (1−t²)^((d−3)/2) on [−1, 1], variance 1/d), N(0, 1), and a unit-variance Laplacian.
 * A codebook is a plain value; the process keeps the first build of each (law, d, bits), which
 * vq_lloydmax_build copies and vq_lloydmax_shared hands out by pointer. */
#ifndef VQ_LLOYDMAX_H
#define VQ_LLOYDMAX_H
#include "core/core.h"

typedef enum vq_law {
    VQ_LAW_SPHERE = 0,    /* coordinate of a random unit vector in R^d (needs d >= 3) */
    VQ_LAW_GAUSS = 1,     /* N(0, 1) */
    VQ_LAW_LAPLACE = 2,   /* Laplace(0, 1/√2): variance 1 */
    VQ_LAW_RESIDUAL = 3,  /* e = X − c[Q(X)] for X of a stage-1 SPHERE codebook, in units of its
                           * std √(stage-1 mse): variance 1 (build with _build_residual) */
} vq_law;

#define VQ_LM_MAX_BITS 8

typedef struct vq_codebook {
    vq_law law;
    int d;                /* SPHERE only (0 otherwise) */
    int bits, n;          /* n = 2^bits levels */
    float c[1 << VQ_LM_MAX_BITS];   /* centroids, ascending, in the law's own units */
    float b[1 << VQ_LM_MAX_BITS];   /* b[i] = (c[i] + c[i+1]) / 2 for i < n-1; b[n-1] = +inf */
    double mse;           /* E[(X − c[Q(X)])²] per coordinate, in the law's units */
    double var;           /* variance of the law (1/d for SPHERE, 1 otherwise) */
    int iters;            /* Lloyd iterations used */
} vq_codebook;

/* bits in 1..8. VQ_ERR_ARG (naming law, d, bits) on bad arguments, VQ_ERR_NOMEM. ~1-10 ms the
 * first time for a (law, d, bits); then a copy of that first build (thread-safe). */
vq_status vq_lloydmax_build(vq_codebook *cb, vq_law law, int d, int bits, vq_err *err);
/* The process's one copy of the (law, d, bits) codebook, built on first use: immutable, valid for
 * the life of the process, shared by every codec state that asks (a state then holds a pointer,
 * not a 2 KiB copy). NULL with err on bad arguments or no memory. */
const vq_codebook *vq_lloydmax_shared(vq_law law, int d, int bits, vq_err *err);
/* The exact law of the stage-1 quantization error, for a second (residual) stage. */
vq_status vq_lloydmax_build_residual(vq_codebook *cb, const vq_codebook *stage1, int bits,
                                     vq_err *err);
const char *vq_law_name(vq_law law);

/* Nearest centroid index: branchless binary search over the midpoints (ties go low, NaN -> 0). */
static inline int vq_lloydmax_index(const vq_codebook *cb, float x) {
    int i = 0;
    for (int s = cb->n >> 1; s; s >>= 1) i += (x > cb->b[i + s - 1]) ? s : 0;
    return i;
}

/* idx[j] = index of x[j] * inv_scale, for j < n. */
void vq_lloydmax_quantize(const vq_codebook *cb, const float *x, float inv_scale, int n,
                          uint8_t *idx);
#endif
