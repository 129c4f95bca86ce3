/* vecinfer.h: the VecInfer codec's training (k-means of its product codebooks, run by
 * `veloxquant calibrate` through the lab door) and the test hook that pins a kernel ISA.
 * codec_vecinfer.c has the codec row; docs/codecs-vecinfer.md the method and the bytes. */
#ifndef VQ_VECINFER_H
#define VQ_VECINFER_H
#include "core/core.h"
#include "codec/codec.h"
#include "codec/calib.h"

#define VQ_VI_CB 16        /* codebook entries (4-bit codes; = VQ_CALIB_VI_CB) */
#define VQ_VI_ROWS 16      /* rows per block (lanes = rows) */
#define VQ_VI_MAX_D 256    /* head_dim bound */
#define VQ_VI_ITERS 20     /* Lloyd iterations of the k-means */

/* vq_vi_train_head (the training of the calibration file's VecInfer section) is declared in
 * calib.h, which the session layer's lab door may include. */

/* Tests: run the kernels of state st on isa (capped at what the CPU has). */
void vq_vi_force_isa(vq_codec_state *st, vq_isa isa);
#endif
