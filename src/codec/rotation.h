/* rotation.h: seeded random orthogonal maps of R^d used by the rotation codecs (TurboQuant, QJL,
 * RaBitQ, PolarQuant). Power-of-two d: randomized Hadamard y = H·D·x/√d (O(d log d)); any other d:
 * a dense Haar-random orthogonal matrix from Householder QR of a Gaussian matrix (O(d²) per row).
 * The matrix bits depend only on (d, seed, kind): the Gaussian draws below use only integer RNG
 * output and IEEE +,-,*,/,sqrt, never libm, so every machine builds the same rotation. */
#ifndef VQ_ROTATION_H
#define VQ_ROTATION_H
#include "core/core.h"

#define VQ_ROT_MAX_DENSE_D 1024   /* dense rotations are O(d²) memory; larger d must be 2^k */

typedef enum vq_rot_kind {
    VQ_ROT_AUTO = 0,       /* Hadamard when d is a power of two, dense otherwise */
    VQ_ROT_HADAMARD = 1,   /* d must be a power of two */
    VQ_ROT_DENSE = 2,      /* d <= VQ_ROT_MAX_DENSE_D */
} vq_rot_kind;

typedef struct vq_rotation vq_rotation;   /* immutable after create: share across threads */

/* d >= 1. NULL with err set (VQ_ERR_ARG naming d and kind, or VQ_ERR_NOMEM) on failure. */
vq_rotation *vq_rotation_create(int d, uint64_t seed, vq_err *err);
vq_rotation *vq_rotation_create_kind(int d, uint64_t seed, vq_rot_kind kind, vq_err *err);
void vq_rotation_free(vq_rotation *r);                       /* NULL is fine */

int         vq_rotation_dim(const vq_rotation *r);
vq_rot_kind vq_rotation_kind(const vq_rotation *r);          /* HADAMARD or DENSE, never AUTO */

/* y = Π x and x = Πᵀ y. d floats each; in place (x == y) is allowed. No allocation. */
void vq_rotation_apply(const vq_rotation *r, const float *x, float *y);
void vq_rotation_apply_inverse(const vq_rotation *r, const float *y, float *x);

/* Hadamard rotations: the d per-coordinate factors s (±1/√d) with Π x = H (s ⊙ x), H the
 * unnormalised Walsh-Hadamard matrix in natural (Sylvester) order; NULL for a dense rotation.
 * For backends that apply the rotation themselves (codec_dev.h). */
const float *vq_rotation_signs(const vq_rotation *r);

/* The matrix Π itself (d*d floats, row-major: y_i = Σ_j P[i*d+j] x_j), for tests and tools. */
void vq_rotation_matrix(const vq_rotation *r, float *P);

/* A standard normal draw that is bit-identical on every machine (Marsaglia polar method with a
 * portable log). For seeded sketch matrices (QJL, TurboQuant-prod) as well as rotations. */
double vq_gauss_portable(vq_rng *rng);
#endif
