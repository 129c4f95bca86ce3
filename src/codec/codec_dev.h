/* codec_dev.h: what a codec state's bytes are, for a backend that reads them itself (the CUDA
 * backend, src/backend/cuda/). The codec table stays the one description of the codes; a device
 * kernel reads the SAME bytes the CPU cache holds, and this says how: which layout, which
 * rotation, which codebook. Only the row kinds a device kernel implements are described; any
 * other state (another codec, a dense rotation, packed TurboQuant, ...) is refused with a message
 * naming what is missing.
 *
 * Rotation: the codec domain of a rotated state is y = H (r ⊙ x), r_i = rot_sign[i] * rot_scale,
 * H the unnormalised Walsh-Hadamard matrix in natural (Sylvester) order, d a power of two; its
 * inverse is x = r ⊙ (H y) (r_i² = 1/d). Queries are scored in that domain, value sums are
 * rotated back once. */
#ifndef VQ_CODEC_DEV_H
#define VQ_CODEC_DEV_H
#include "codec/codec.h"

typedef enum vq_codec_dev_kind {
    VQ_CODEC_DEV_F16 = 1,      /* d halves per row, one row per block */
    VQ_CODEC_DEV_Q8_0 = 2,     /* llama.cpp q8_0 blocks (fp16 scale, 32 int8) */
    VQ_CODEC_DEV_Q4_0 = 3,     /* llama.cpp q4_0 blocks (fp16 scale, 16 bytes of nibbles) */
    VQ_CODEC_DEV_TQ_MSE4 = 4,  /* turboquant_mse, 4 bits, lanes layout (tq_lanes.c) */
} vq_codec_dev_kind;

typedef struct vq_codec_dev {
    int kind;                  /* vq_codec_dev_kind */
    int d;
    int lanes;                 /* 1: blocks of 16 rows interleaved by coordinate (ggml_lanes.c,
                                  tq_lanes.c: keys); 0: one row per block */
    int rows_per_block;
    size_t block_bytes;
    int norm32;                /* TQ: row norms stored as f32 (else fp16) */
    const float *rot_sign;     /* d factors, or NULL: no rotation (owned by the state) */
    float rot_scale;
    const float *cent;         /* TQ: the 16 centroids (owned by the process's codebook), or NULL */
    /* what an encoder needs to write the codec's bytes bit for bit (vq_cuda_enc): q8_0/q4_0 rotate
     * as y = enc_scale * H (rot_sign ⊙ x) with rot_sign = ±1 and enc_scale the codec's own float
     * 1/sqrtf(d) (rot_scale above is 1/sqrt(d) rounded once from double: not always the same
     * float); TurboQuant's rot_sign already holds ±1/sqrt(d) (enc_scale 1), and its index is the
     * count of Lloyd-Max boundaries below y (bound: the 15 boundaries, ascending) */
    float enc_scale;
    const float *bound;
} vq_codec_dev;

/* Describe st; VQ_ERR_ARG with a message when no device kernel reads its bytes. */
vq_status vq_codec_dev_info(const vq_codec_state *st, vq_codec_dev *out, vq_err *err);
#endif
