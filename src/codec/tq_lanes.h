/* tq_lanes.h: turboquant_mse's fast layout at 2, 3 and 4 bits (d % 32 == 0): keys 16 rows per
 * block with codes interleaved by coordinate (lanes = rows), values one row per block with codes
 * grouped by 32 coordinates (lanes = coordinates). tq_lanes.c (4 bits) and tq_lanes_lo.c (2 and
 * 3 bits) say why; codec_turboquant_mse.c uses it through the vq_tql_ functions. */
#ifndef VQ_TQ_LANES_H
#define VQ_TQ_LANES_H
#include "codec/tq.h"

#define VQ_TQL_ROWS 16   /* key rows per block */

int    vq_tql_supported(int bits, int d);
size_t vq_tql_block_bytes(const vq_tq *t, int side);
void   vq_tql_encode(const vq_tq *t, int side, const float *x, uint8_t *block);
void   vq_tql_decode(const vq_tq *t, int side, const uint8_t *block, float *x);
/* scores[j * n_rows + r] = q_j . k_hat_r (q_j rotated); SIMD for the key side's blocks */
void   vq_tql_score(const vq_tq *t, int side, int nq, const float *const *q, const uint8_t *blocks,
                    int n_blocks, size_t bb, float *scores);
/* acc[j][i] += sum_r w[j * n_rows + r] * ‖v_r‖ c[code_ri] (rotated domain); SIMD for values */
void   vq_tql_accumulate(const vq_tq *t, int side, int nq, const float *w, const uint8_t *blocks,
                         int n_blocks, size_t bb, float *const *acc);
/* The key layout for another codec's subsets (tq_split): 1 to 4 bits (vq_tql_key_supported says
 * which n); codes = the codes after the 16 norms, zeroed before the first set. vq_tql_score reads
 * such blocks given a vq_tq with d, bits, norm32, isa and cent1 set. */
int      vq_tql_key_supported(int bits, int n);
void     vq_tql_key_set(int bits, uint8_t *codes, int r, int i, unsigned v);
unsigned vq_tql_key_get(int bits, const uint8_t *codes, int r, int i);
/* 2 and 3 bits (tq_lanes_lo.c); the vq_tql_ functions pass such states on to these */
void   vq_tqll_encode(const vq_tq *t, int side, const float *x, uint8_t *block);
void   vq_tqll_decode(const vq_tq *t, int side, const uint8_t *block, float *x);
void   vq_tqll_score(const vq_tq *t, int side, int nq, const float *const *q, const uint8_t *blocks,
                     int n_blocks, size_t bb, float *scores);
void   vq_tqll_accumulate(const vq_tq *t, int side, int nq, const float *w, const uint8_t *blocks,
                          int n_blocks, size_t bb, float *const *acc);
void     vq_tqll_key_set(int bits, uint8_t *codes, int r, int i, unsigned v);   /* 1 to 3 bits */
unsigned vq_tqll_key_get(int bits, const uint8_t *codes, int r, int i);
#endif
