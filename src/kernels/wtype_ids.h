/* wtype_ids.h: tensor element types, numbered as ggml (and so GGUF files) number them.
 * The kernels' weight-type table is keyed by these ids; the GGUF reader keeps its own layout
 * table by the same numbers, so neither layer includes the other's header. */
#ifndef VQ_WTYPE_IDS_H
#define VQ_WTYPE_IDS_H

typedef enum vq_ggml_type {
    VQ_TYPE_F32 = 0, VQ_TYPE_F16 = 1, VQ_TYPE_Q4_0 = 2, VQ_TYPE_Q4_1 = 3,
    VQ_TYPE_Q5_0 = 6, VQ_TYPE_Q5_1 = 7, VQ_TYPE_Q8_0 = 8,
    VQ_TYPE_Q2_K = 10, VQ_TYPE_Q3_K = 11, VQ_TYPE_Q4_K = 12, VQ_TYPE_Q5_K = 13,
    VQ_TYPE_Q6_K = 14, VQ_TYPE_Q8_K = 15,
    VQ_TYPE_IQ4_NL = 20, VQ_TYPE_IQ4_XS = 23,
    VQ_TYPE_BF16 = 30,
    /* VeloxQuant's own weight types (docs/weights-tqw.md): TurboQuant-style rotated Lloyd-Max
     * codes. Numbered above ggml's range so they can never be mistaken for a ggml type; they
     * exist only in memory (quantized from float by vq_wtype.from_float) and never appear in a
     * GGUF file. */
    VQ_TYPE_TQW4 = 0x10004, VQ_TYPE_TQW3 = 0x10003, VQ_TYPE_TQW2 = 0x10002,
    /* Q4_0 rows interleaved 16 at a time for the AVX-512 decode kernel (kernels/repack.c): made
     * at load from a Q4_0 matrix (opt-in), in memory only; no to_float (rows are not contiguous) */
    VQ_TYPE_Q4_0X16 = 0x10010, VQ_TYPE_Q4_KX16 = 0x10011, VQ_TYPE_Q6_KX16 = 0x10012,
} vq_ggml_type;
#endif
