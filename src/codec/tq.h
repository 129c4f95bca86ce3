/* tq.h: what the three TurboQuant codec rows (turboquant_mse / _prod / _rvq) share: the private
 * state (rotation, Lloyd-Max codebooks, QJL sketch), the row norm in fp16 or f32, parameter
 * parsing, and the "expand" kernel that turns packed b-bit codes into centroid floats in registers
 * (scalar, AVX2, AVX-512), which is how score/accumulate read codes without decoding rows. */
#ifndef VQ_TQ_H
#define VQ_TQ_H
#include "codec/codec.h"
#include "codec/lloydmax.h"
#include "codec/rotation.h"

#define VQ_TQ_MAX_D 4096
#define VQ_TQ_SQRT_PI_2 1.2533141373155002512   /* √(π/2) = 1 / E|N(0,1)| */

enum { VQ_TQ_MSE = 0, VQ_TQ_PROD = 1, VQ_TQ_RVQ = 2 };
enum { VQ_TQ_SCALE_ROW = 0, VQ_TQ_SCALE_FIXED = 1 };   /* rvq stage-2 scale */

typedef struct vq_tq {
    int kind, d, bits;        /* bits = the user's "bits" (per coordinate, per stage for rvq) */
    int b1;                   /* bits of the Lloyd-Max stage on the rotated unit vector (0: none) */
    int norm32;               /* row norm stored as f32 (else fp16, saturating at 65504) */
    vq_isa isa;               /* expand kernel variant, chosen once in init */
    int lanes;                /* turboquant_mse: the lanes layout (tq_lanes.c: 2-4 bits, d % 32 == 0) */
    int side;                 /* VQ_SIDE_K / VQ_SIDE_V, as init was given it */
    vq_rotation *rot;
    /* codebooks are the process's shared copies (vq_lloydmax_shared), not the state's: a state is a
     * few hundred bytes, not 6.5 KiB (SmolLM2: 60 states per cache, 0.13 bits per element at ctx 2048) */
    const vq_codebook *cb1;   /* sphere law, dimension d, b1 bits (NULL when b1 == 0) */
    const float *cent1;       /* cb1's centroids, padded with 0 to 256 (SIMD table loads) */
    /* prod: QJL sketch of the residual, in the rotated domain */
    int m;
    float *S;                 /* m x d, i.i.d. N(0,1) */
    /* rvq: stage-2 codebook on the residual e = y - c1 */
    int scale_mode, law2;
    const vq_codebook *cb2;   /* unit-variance law (Laplace by default): shared, or cb2_own */
    vq_codebook *cb2_own;     /* the residual law's codebook (built from cb1, not shared), or NULL */
    const float *cent2;       /* cb2's centroids (prod: the sign table), padded with 0 to 256 */
    float fixed_scale;        /* √(per-coordinate stage-1 MSE) for scale=fixed */
    /* block layout (bytes from the block start) */
    size_t off_codes1, off_codes2, off_signs, hdr_bytes;
} vq_tq;

/* Parse the shared keys (bits, norm) plus the kind's own; build rotation and codebook; fill the
 * common parts of st. The kind-specific file completes layout and sizes. */
vq_status vq_tq_init_common(vq_codec_state *st, vq_tq **out, int kind, int d,
                            const vq_codec_param *p, int np, uint64_t seed, int bits_lo,
                            int bits_def,
                            const char *allowed, vq_err *err);
void vq_tq_fini(vq_codec_state *st);
extern const float vq_tq_zero_table[256];

/* row norm header: ‖x‖ at block + 0 (2 or 4 bytes) */
float vq_tq_put_norm(const vq_tq *t, double nrm, uint8_t *block);   /* returns the stored value */
float vq_tq_get_norm(const vq_tq *t, const uint8_t *block);
/* small fp16 scalar (prod ‖r‖, rvq scale) at p: stored and returned value */
float vq_tq_put_h(float v, uint8_t *p);
float vq_tq_get_h(const uint8_t *p);

/* ‖x‖ (in double) and y = Π(x/‖x‖); zero or non-finite norm gives y = 0 */
double vq_tq_rotate_unit(const vq_tq *t, const float *x, float *y);

/* out[j] (=, or += when add) scale * cent[code_j] for j < d, codes packed `bits` wide (1..8).
 * cent has 256 entries (zero padded). The _isa form pins a variant (tests). */
void vq_tq_expand(const vq_tq *t, const uint8_t *codes, int bits, const float *cent, float scale,
                  int add, float *out);
void vq_tq_expand_isa(vq_isa isa, const uint8_t *codes, int bits, const float *cent, int d,
                      float scale, int add, float *out);

/* res[j] = q_j · (cent1[c1_i] + s2·cent2[c2_i])_i for j < nq, over n codes of `bits` each (c2 may
 * be NULL: then only cent1). One pass over the codes for all queries; SIMD when n % 8 == 0. */
void vq_tq_dot_codes(vq_isa isa, const uint8_t *c1, int bits, const float *cent1,
                     const uint8_t *c2, float s2, const float *cent2, int n,
                     const float *const *q, int nq, float *res);

/* Tests: pin the kernel variant of a configured state (call before any concurrent use). */
void vq_tq_force_isa(vq_codec_state *st, vq_isa isa);
#endif
