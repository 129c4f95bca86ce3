/* ggml_lanes.h: the "lanes" key layout of q8_0 and q4_0 (ggml_lanes.c says why and how): 16 key
 * rows per block, the rows' llama.cpp blocks (fp16 scale + 32 codes per 32 coordinates)
 * rearranged by coordinate so that one load gives 16 rows' codes of one coordinate; the bytes are
 * those of the 16 rows' q8_0 / q4_0 blocks, only in another order. Also the values' loop over
 * the unchanged one-row layout with accumulators held in registers. Used by codec_q8_0.c and
 * codec_q4_0.c (layout=lanes, their default). */
#ifndef VQ_GGML_LANES_H
#define VQ_GGML_LANES_H
#include "core/core.h"

#define VQ_GGL_ROWS 16   /* key rows per block */

typedef enum vq_ggl_kind { VQ_GGL_Q8 = 8, VQ_GGL_Q4 = 4 } vq_ggl_kind;

/* bytes of one llama.cpp block (32 coordinates of one row): 34 (q8_0) or 18 (q4_0) */
static inline size_t vq_ggl_bb(vq_ggl_kind k) { return k == VQ_GGL_Q8 ? 34 : 18; }
/* bytes of one lanes key block: 16 rows x d/32 llama.cpp blocks, every byte of them */
static inline size_t vq_ggl_block_bytes(vq_ggl_kind k, int d) {
    return (size_t)VQ_GGL_ROWS * (size_t)(d / 32) * vq_ggl_bb(k);
}

/* row = one row's d/32 llama.cpp blocks (the one-row layout) <-> row r (0..15) of a lanes block */
void vq_ggl_put_row(vq_ggl_kind k, int d, const uint8_t *row, int r, uint8_t *block);
void vq_ggl_get_row(vq_ggl_kind k, int d, const uint8_t *block, int r, uint8_t *row);

/* q4_0 keys: a query state is d floats and then d/32 sums, qs[d + g] = sum of qs[32g..32g+31],
 * which prep_sums fills (scoring takes the codes 0..15 and subtracts 8 x the sum once a group) */
void vq_ggl_prep_sums(int d, float *qs);
/* keys in lanes blocks: scores[j * 16 n_blocks + r] = q_j . k_hat_r (q_j in the codec's domain) */
void vq_ggl_score(vq_ggl_kind k, vq_isa isa, int d, int nq, const void *const *qs,
                  const uint8_t *blocks, int n_blocks, float *scores);
/* lanes blocks summed (the contract's other direction; scalar: tests use it, the store does not) */
void vq_ggl_accumulate(vq_ggl_kind k, int d, int nq, const float *w, const uint8_t *blocks,
                       int n_blocks, float *const *acc);
/* values in the one-row layout (rows of d/32 llama.cpp blocks): acc[j] += sum_r w[j n + r] v_hat_r,
 * AVX2 or AVX-512 with the accumulators in registers; 0 when isa has no such loop (scalar: the
 * caller's own loop runs) */
int vq_ggl_acc_rows(vq_ggl_kind k, vq_isa isa, int d, int nq, const float *w, const uint8_t *rows,
                    int n_rows, float *const *acc);
#endif
