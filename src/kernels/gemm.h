/* gemm.h: the prefill GEMM kernels (many tokens against one weight matrix), internal to the
 * kernels layer. A GEMM kernel has a row kernel's signature (vq_rows_fn) and computes exactly
 * what the type's scalar row kernel computes, bit for bit: every (row, token) output is the
 * scalar kernel's float recurrence over the blocks, in the same order, with the same integer
 * block sums. Only the schedule differs: a panel of 16 rows is decoded once into an interleaved
 * scratch (for each 4 columns, 16 rows x 4 bytes = one 512-bit vector) and every token streams
 * through it, 16 rows' partial dots per vpdpbusd with the 4 activation bytes broadcast; no
 * horizontal sums, no per-tile re-decode. Used by matmul.c for calls of at least
 * VQ_GEMM_MIN_TOKENS tokens (docs/weights-kquants.md, "Prefill"). */
#ifndef VQ_GEMM_H
#define VQ_GEMM_H
#include "kernels/kernels_impl.h"

#define VQ_GEMM_MIN_TOKENS 8

/* the GEMM kernel for (type, isa), or NULL where there is none (the row kernel runs) */
vq_rows_fn vq_gemm_pick(uint32_t type, vq_isa isa);

void vq_gemm_q4_0_avx512vnni(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_gemm_q8_0_avx512vnni(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_gemm_q4_k_avx512vnni(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_gemm_q6_k_avx512vnni(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_gemm_q4_0_avx2(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_gemm_q4_k_avx2(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_gemm_q6_k_avx2(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
#endif
