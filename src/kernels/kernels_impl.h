/* kernels_impl.h: what the kernel files share but nobody else sees: ggml's block layouts, the
 * layout of activations quantized to 8 bits, and the per-ISA row-kernel tables that
 * matmul.c dispatches to. */
#ifndef VQ_KERNELS_IMPL_H
#define VQ_KERNELS_IMPL_H
#include "kernels/kernels.h"

/* ---- weight blocks, byte for byte as ggml stores them ---- */
#define VQ_QK 32
typedef struct { vq_f16 d; int8_t qs[VQ_QK]; } vq_block_q8_0;            /* x = d*q */
typedef struct { vq_f16 d; uint8_t qs[VQ_QK / 2]; } vq_block_q4_0;       /* x = d*(q-8) */
typedef struct { vq_f16 d, m; uint8_t qs[VQ_QK / 2]; } vq_block_q4_1;    /* x = d*q + m */
_Static_assert(sizeof(vq_block_q8_0) == 34, "q8_0 block must be 34 bytes (ggml layout)");
_Static_assert(sizeof(vq_block_q4_0) == 18, "q4_0 block must be 18 bytes (ggml layout)");
_Static_assert(sizeof(vq_block_q4_1) == 20, "q4_1 block must be 20 bytes (ggml layout)");
/* q4 nibble order: byte j holds element j in its low nibble and element j+16 in its high one */

/* ---- activations quantized to 8 bits, one token row of nb blocks at base ----
 * [qs: nb*32 int8][ds: nb pairs {d, s} of float][isum: nb int32], padded to 64 bytes.
 * Per block: d = max|x|/127, qs = round(x/d), isum = sum(qs), s = d*isum (ggml's q8_1 sum),
 * so that sum_i (w_i*x_i) over a q4_1 block = dw*d*sum(nib*qs) + m*s. {d, s} are interleaved
 * so one 128-bit load gives two blocks' pairs, matching q4_1's {d, m} order. */
static inline size_t vq_q8act_stride(int nb) { return ((size_t)nb * 44 + 63) & ~(size_t)63; }
static inline const float *vq_q8act_ds(const void *base, int nb) {
    return (const float *)((const uint8_t *)base + (size_t)nb * VQ_QK);
}
static inline const int32_t *vq_q8act_isum(const void *base, int nb) {
    return (const int32_t *)(vq_q8act_ds(base, nb) + 2 * nb);
}
/* quantize one row of cols floats (cols % 32 == 0); identical for every ISA */
void vq_q8act_quantize(const float *x, int cols, void *base);
void vq_q8act_quantize_avx2(const float *x, int cols, void *base);     /* same bits, faster */
void vq_q8act_quantize_avx512(const float *x, int cols, void *base);

/* ---- row kernels ----
 * Y[t*ldy + r] = dot(W row r, activation t) for r < nrows, t < nt.
 * W rows are wstride bytes apart. For quantized types xa is a q8act buffer (rows xstride bytes
 * apart) and k is the number of blocks; for float types xa holds floats and k is cols. */
typedef void (*vq_rows_fn)(const uint8_t *W, size_t wstride, int nrows, const void *xa,
                           size_t xstride, int nt, int k, float *Y, int ldy);
typedef struct vq_kern_row {
    uint32_t type;
    int quantized;            /* 1: activations quantized to q8act first */
    vq_rows_fn rows[3];       /* per vq_isa; NULL where that ISA has no kernel of its own */
} vq_kern_row;

#define VQ_TILE 4             /* tokens per pass over a weight row */

/* Software prefetch VQ_PF_BYTES ahead of the row being read (not past end): the hardware
 * prefetchers alone leave a single-token pass well below memory bandwidth (measured: the
 * SmolLM2 decode-step matmuls ran about 2x faster on 2 threads with it). Row kernels call this
 * once per row on their first token tile; later tiles find the chunk in cache. */
#ifndef VQ_PF_BYTES
#define VQ_PF_BYTES 4096
#endif
static inline __attribute__((always_inline)) void vq_prefetch_row(const uint8_t *W, size_t ws,
                                                                  int r, int nrows) {
    size_t at = (size_t)r * ws + VQ_PF_BYTES, end = (size_t)nrows * ws;
    for (size_t o = 0; o < ws && at + o < end; o += 64) __builtin_prefetch(W + at + o, 0, 3);
}

void vq_rows_f32_scalar(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_f16_scalar(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_bf16_scalar(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q8_0_scalar(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q4_0_scalar(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q4_1_scalar(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);

void vq_rows_f32_avx2(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_f16_avx2(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_bf16_avx2(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q8_0_avx2(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q4_0_avx2(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q4_1_avx2(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);

void vq_rows_f32_avx512(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_f16_avx512(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_bf16_avx512(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
/* the int8 AVX-512 kernels need VNNI (vpdpbusd); without it the AVX2 ones run */
void vq_rows_q8_0_avx512vnni(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q4_0_avx512vnni(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q4_1_avx512vnni(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);

/* fwht inner passes (len >= 16 handled by SIMD; caller does the small strides) */
void vq_fwht_avx2(float *x, int n);
void vq_fwht_avx512(float *x, int n);
#endif
