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

/* ---- Q5_0/Q5_1/IQ4_NL (32 per block) and the K-quants (256 per super-block) ----
 * Layouts as ggml stores them; the meaning of each field is spelled out in the decoders
 * (wtypes_k.c) and docs/weights-kquants.md. */
typedef struct { vq_f16 d; uint8_t qh[4]; uint8_t qs[VQ_QK / 2]; } vq_block_q5_0;     /* d*(q-16) */
typedef struct { vq_f16 d, m; uint8_t qh[4]; uint8_t qs[VQ_QK / 2]; } vq_block_q5_1;  /* d*q + m */
typedef struct { vq_f16 d; uint8_t qs[VQ_QK / 2]; } vq_block_iq4_nl;                  /* d*kv[q] */
#define VQ_QKK 256
typedef struct { uint8_t scales[16]; uint8_t qs[64]; vq_f16 d, dmin; } vq_block_q2_k;
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; vq_f16 d; } vq_block_q3_k;
typedef struct { vq_f16 d, dmin; uint8_t scales[12]; uint8_t qs[128]; } vq_block_q4_k;
typedef struct { vq_f16 d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } vq_block_q5_k;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; vq_f16 d; } vq_block_q6_k;
typedef struct { vq_f16 d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; } vq_block_iq4_xs;
_Static_assert(sizeof(vq_block_q5_0) == 22, "q5_0 block must be 22 bytes (ggml layout)");
_Static_assert(sizeof(vq_block_q5_1) == 24, "q5_1 block must be 24 bytes (ggml layout)");
_Static_assert(sizeof(vq_block_iq4_nl) == 18, "iq4_nl block must be 18 bytes (ggml layout)");
_Static_assert(sizeof(vq_block_q2_k) == 84, "q2_K block must be 84 bytes (ggml layout)");
_Static_assert(sizeof(vq_block_q3_k) == 110, "q3_K block must be 110 bytes (ggml layout)");
_Static_assert(sizeof(vq_block_q4_k) == 144, "q4_K block must be 144 bytes (ggml layout)");
_Static_assert(sizeof(vq_block_q5_k) == 176, "q5_K block must be 176 bytes (ggml layout)");
_Static_assert(sizeof(vq_block_q6_k) == 210, "q6_K block must be 210 bytes (ggml layout)");
_Static_assert(sizeof(vq_block_iq4_xs) == 136, "iq4_xs block must be 136 bytes (ggml layout)");

/* the 16 non-uniform levels of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl) */
extern const int8_t vq_iq4_levels[16];

/* ---- TurboQuant weight types (VeloxQuant's own; docs/weights-tqw.md) ----
 * A block is 64 weights rotated by VQ_TQW_R = H·D/8 (D: fixed random signs, H: the 64-point
 * Walsh-Hadamard matrix; orthogonal), then coded per 32-element group g (rotated elements 32g..)
 * as y = d[g] * L[code] with L the type's int8 Lloyd-Max levels and d[g] an fp16 scale.
 * tqw4: byte j of qs holds group 0's element j (low nibble) and group 1's element j (high).
 * tqw2: byte j of qs holds element j + 16s of the block at bits 2s (s = 0..3).
 * tqw3: the two low bits as tqw2 in ql; bit i of the little-endian 64-bit qh is element i's
 *       third bit. */
#define VQ_TQW_BLOCK 64
typedef struct { vq_f16 d[2]; uint8_t qs[32]; } vq_block_tqw4;
typedef struct { vq_f16 d[2]; uint8_t ql[16]; uint8_t qh[8]; } vq_block_tqw3;
typedef struct { vq_f16 d[2]; uint8_t qs[16]; } vq_block_tqw2;
_Static_assert(sizeof(vq_block_tqw4) == 36, "tqw4 block must be 36 bytes");
_Static_assert(sizeof(vq_block_tqw3) == 28, "tqw3 block must be 28 bytes");
_Static_assert(sizeof(vq_block_tqw2) == 20, "tqw2 block must be 20 bytes");
/* the levels, padded to 16 entries (pshufb tables): Lloyd-Max centroids of N(0, 1) at 16, 8, 4
 * levels, scaled so the outermost is 127 and rounded (see wtypes_tqw.c) */
extern const int8_t vq_tqw4_levels[16], vq_tqw3_levels[16], vq_tqw2_levels[16];
extern const uint64_t vq_tqw_signs;   /* bit i set: element i of a block is negated before H */
/* x <- R x on every 64-block of x (n a multiple of 64): the activations' side of the product */
void vq_tqw_rotate(float *x, int64_t n);
/* the int8 levels of group g (0, 1) of one block of type VQ_TYPE_TQWb */
void vq_tqw_group_codes(uint32_t type, const void *blk, int g, int8_t q[32]);
void vq_tqw4_to_float(const void *src, float *dst, int64_t n);
void vq_tqw3_to_float(const void *src, float *dst, int64_t n);
void vq_tqw2_to_float(const void *src, float *dst, int64_t n);
void vq_tqw4_from_float(const float *src, void *dst, int64_t n);
void vq_tqw3_from_float(const float *src, void *dst, int64_t n);
void vq_tqw2_from_float(const float *src, void *dst, int64_t n);

/* A block of any of these types decoded to integers: element i is
 *   x_i = (d * sc[i/16]) * q[i]  (+ (dm * m[i/16]) when has_min)
 * with every integer exact. The scalar row kernels and to_float both go through it, so the
 * product's definition and the dequantization share one reading of the bits. n = 32 or 256. */
typedef struct vq_kdec {
    float d, dm;              /* dm: the signed multiplier of the mins (-dmin; Q5_1: +m) */
    int has_min;
    int8_t q[VQ_QKK];
    int16_t sc[VQ_QKK / 16];
    int16_t m[VQ_QKK / 16];
} vq_kdec;
typedef void (*vq_kdec_fn)(const void *blk, vq_kdec *out);
void vq_kdec_q5_0(const void *blk, vq_kdec *o);
void vq_kdec_q5_1(const void *blk, vq_kdec *o);
void vq_kdec_iq4_nl(const void *blk, vq_kdec *o);
void vq_kdec_q2_k(const void *blk, vq_kdec *o);
void vq_kdec_q3_k(const void *blk, vq_kdec *o);
void vq_kdec_q4_k(const void *blk, vq_kdec *o);
void vq_kdec_q5_k(const void *blk, vq_kdec *o);
void vq_kdec_q6_k(const void *blk, vq_kdec *o);
void vq_kdec_iq4_xs(const void *blk, vq_kdec *o);

/* Q4_K / Q5_K: 8 six-bit scales and 8 six-bit mins packed in 12 bytes */
static inline void vq_k4_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) { *sc = s[j] & 63; *m = s[j + 4] & 63; }
    else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}
/* Q3_K: 16 six-bit scales (stored +32) in 12 bytes: low nibbles in bytes 0-7, high pairs in 8-11 */
static inline int vq_q3k_scale(const uint8_t *s, int j) {
    int lo = (s[j & 7] >> (4 * (j >> 3))) & 15, hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
}
/* IQ4_XS: 8 six-bit scales (stored +32): low nibbles in scales_l, high pairs in scales_h */
static inline int vq_iq4xs_scale(const vq_block_iq4_xs *b, int j) {
    int lo = (b->scales_l[j >> 1] >> (4 * (j & 1))) & 15, hi = (b->scales_h >> (2 * j)) & 3;
    return (lo | (hi << 4)) - 32;
}

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
    vq_rows_fn vnni;          /* AVX-512 with VNNI (vpdpbusd): preferred to rows[2] when present */
    int rotate_block;         /* > 0: the weights are stored rotated by vq_tqw_rotate on blocks
                               * of this size; the activations are rotated alike before they are
                               * quantized (w·x = Rw·Rx), so the kernel never undoes R */
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
/* q4_0x16 (repack.c, kernels.h): nrows and the first row of a call are multiples of
 * VQ_Q4X16_ROWS */
void vq_rows_q4_0x16_scalar(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q4_kx16_scalar(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q4_kx16_avx512vnni(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q6_kx16_scalar(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q6_kx16_avx512vnni(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q4_0x16_avx512vnni(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q4_0_scalar(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q4_1_scalar(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
/* matmul_kquants.c: scalar references of the types read through vq_kdec */
#define VQ_DECL_ROWS(name, isa) \
    void vq_rows_##name##_##isa(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
#define VQ_DECL_KROWS(isa) VQ_DECL_ROWS(q5_0, isa) VQ_DECL_ROWS(q5_1, isa) VQ_DECL_ROWS(iq4_nl, isa) \
    VQ_DECL_ROWS(q2_k, isa) VQ_DECL_ROWS(q3_k, isa) VQ_DECL_ROWS(q4_k, isa) VQ_DECL_ROWS(q5_k, isa) \
    VQ_DECL_ROWS(q6_k, isa) VQ_DECL_ROWS(iq4_xs, isa)
VQ_DECL_KROWS(scalar)
VQ_DECL_KROWS(avx2)
VQ_DECL_KROWS(avx512vnni)
#define VQ_DECL_TROWS(isa) VQ_DECL_ROWS(tqw4, isa) VQ_DECL_ROWS(tqw3, isa) VQ_DECL_ROWS(tqw2, isa)
VQ_DECL_TROWS(scalar)
VQ_DECL_TROWS(avx2)
VQ_DECL_TROWS(avx512vnni)

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
/* Q4_K and Q6_K on 512-bit vectors (kquants512.inc), bit-identical to the 256-bit kernels */
void vq_rows_q4_k_avx512z(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q6_k_avx512z(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q8_0_avx512vnni(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q4_0_avx512vnni(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
void vq_rows_q4_1_avx512vnni(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);

/* fwht inner passes (len >= 16 handled by SIMD; caller does the small strides) */
void vq_fwht_avx2(float *x, int n);
void vq_fwht_avx512(float *x, int n);
#endif
