/* vecinfer.h: the VecInfer codec's training (k-means of its product codebooks, run by
 * `veloxquant calibrate` through the lab door) and the test hook that pins a kernel ISA.
 * codec_vecinfer.c has the codec row; docs/codecs-vecinfer.md the method and the bytes. */
#ifndef VQ_VECINFER_H
#define VQ_VECINFER_H
#include "core/core.h"
#include "codec/codec.h"

#define VQ_VI_CB 16        /* codebook entries (4-bit codes; = VQ_CALIB_VI_CB) */
#define VQ_VI_ROWS 16      /* rows per block (lanes = rows) */
#define VQ_VI_MAX_D 256    /* head_dim bound */
#define VQ_VI_ITERS 20     /* Lloyd iterations of the k-means */

/* Train one (layer, KV head): k, v = n rows of d floats (after RoPE, as the cache gets them).
 * smooth[d] = λ_i = (max_r |k_ri|)^alpha (the paper: alpha 1; the seeds' MLX port: 0.5; floored
 * at 1e-6 of the largest, and at 1e-30); the keys are
 * coded as Π(k / λ) with Π = vq_rotation_create(d, rot_seed); cb_k = d / sub_k codebooks of
 * VQ_VI_CB entries of sub_k floats ([m][c][t]), k-means (k-means++ seeding from seed, then
 * VQ_VI_ITERS Lloyd steps) of those sub-vectors; cb_v the same of the raw values, or with vnorm of
 * the values scaled to unit norm (rows of norm 0 left out). d % 16 == 0,
 * d <= VQ_VI_MAX_D, n >= 1. VQ_ERR_ARG / VQ_ERR_NOMEM with a message. */
vq_status vq_vi_train_head(const float *k, const float *v, int n, int d, int sub_k, int sub_v,
                           double alpha, int vnorm, uint64_t rot_seed, uint64_t seed, float *smooth, float *cb_k,
                           float *cb_v, vq_err *err);

/* Tests: run the kernels of state st on isa (capped at what the CPU has). */
void vq_vi_force_isa(vq_codec_state *st, vq_isa isa);
#endif
