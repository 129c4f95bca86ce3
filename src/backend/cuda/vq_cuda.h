/* vq_cuda.h: the CUDA backend's contract with the C side (no CUDA type appears here, so the CPU
 * code and its compilers never see one). Built only with VQ_CUDA on (docs/cuda.md): the kernels
 * (attn_*.cu, ops.cu) and this header's host functions (attn_host.cu, cuda_row.cu) are one object
 * of the backend layer (vq_cuda_lib.o, in libveloxquant), beside the C part (cuda_kv.c: a cache's
 * codec states described for the kernels). The device row vq_device_cuda (cuda_row.cu) is how the
 * library reaches them (backend/ops.h "devices").
 *
 * What exists: decode attention (one query token per sequence) straight from the KV cache's code
 * bytes, GQA (n_heads query heads over n_kv_heads), split over the context flash-decoding style,
 * batched over sequences of different lengths. Codes: f16, q8_0 and q4_0 (keys in the lanes
 * layout, values one row per block, optional Walsh-Hadamard rotation) and turboquant_mse at 4
 * bits (lanes layout), the same codec on both sides, head_dim 64 or 128, query heads per KV head
 * 1 to 8.
 *
 * Device layout of one sequence (for now a contiguous array per sequence, not pages): for KV head
 * h, its key blocks (n_coded / rows_per_block of them, the codec's block bytes, in row order) at
 * k + h * k_head_stride and its value blocks (n_coded rows) at v + h * v_head_stride; the bytes of
 * every block are exactly the CPU cache's. Coded row i has position pos0 + i. Rows kept in full
 * precision by the CPU cache (sink=S rows, the window=R rows and the partial block the codec has
 * not taken yet) are fp16 rows [n_fp][n_kv_heads][head_dim] at fp_k / fp_v with positions fp_pos.
 * A query at position q_pos sees rows with position <= q_pos and, when span > 0 (a sliding-window
 * layer), > q_pos - span. Pointers k, v, fp_k, fp_v and the strides must be 16-byte aligned. */
#ifndef VQ_CUDA_H
#define VQ_CUDA_H
#include <stddef.h>
#include <stdint.h>
#include "veloxquant.h"   /* vq_status, vq_err */
#ifdef __cplusplus
extern "C" {
#endif

#define VQ_CUDA_MAX_D 128
#define VQ_CUDA_MAX_G 8

typedef enum vq_cuda_kv_type {
    VQ_CUDA_KV_F16 = 1, VQ_CUDA_KV_Q8_0 = 2, VQ_CUDA_KV_Q4_0 = 3, VQ_CUDA_KV_TQ4 = 4,
} vq_cuda_kv_type;

/* What the kernels need to read one layer's codes (plain values: passed to the kernel by value). */
typedef struct vq_cuda_kv_format {
    int type;                       /* vq_cuda_kv_type, both sides */
    int head_dim, n_heads, n_kv_heads;
    int norm32;                     /* TQ4: f32 row norms */
    int rot_k, rot_v;               /* the side's codes are in a rotated domain (codec_dev.h) */
    float rk[VQ_CUDA_MAX_D];        /* keys: codec domain y = H (rk ⊙ x) */
    float rv[VQ_CUDA_MAX_D];        /* values: x = rv ⊙ (H y) */
    float cent_k[16], cent_v[16];   /* TQ4 centroids */
    size_t k_block_bytes;           /* one key block (16 rows, or 1 row for f16) */
    size_t v_row_bytes;             /* one value row */
    int f32_only;                   /* 1: the float32 kernels even where a tensor-core one exists
                                       (vq_cuda_attn_tc); init sets 0; the tensor cores need VQ_CUDA_ATTN=tc too */
} vq_cuda_kv_format;

/* From a layer's codec states (the K side's and the V side's; either may serve every KV head).
 * VQ_ERR_ARG naming what no kernel reads (another codec, head_dim, GQA group, mixed codecs). */
struct vq_codec_state;
vq_status vq_cuda_kv_format_init(vq_cuda_kv_format *f, const struct vq_codec_state *k,
                                 const struct vq_codec_state *v, int n_heads, int n_kv_heads,
                                 vq_err *err);
/* Bytes of n rows of one KV head, keys and values (n a multiple of the key block's rows). */
size_t vq_cuda_kv_bytes(const vq_cuda_kv_format *f, int64_t n);

/* ---- encoding K/V rows on the device (kv_encode.cu, kv_encode.cuh) ----
 * What one side's encoder needs to write the CPU codec's bytes bit for bit (docs/cuda.md "Codes
 * written on the GPU"): q8_0 / q4_0 (optionally rotated: y = scale * H (sgn ⊙ x), sgn = ±1) and
 * turboquant_mse at 4 bits (norm in double, y = H (sgn ⊙ x/‖x‖) with sgn = ±1/sqrt(d), index by
 * the Lloyd-Max boundaries), keys in 16-row lanes blocks, values one row per block. */
typedef struct vq_cuda_enc {
    int type;                       /* VQ_CUDA_KV_Q8_0, _Q4_0, _TQ4 */
    int d;
    int lanes;                      /* 1: 16-row lanes blocks (keys); 0: one row per block */
    int rotate;                     /* q8_0/q4_0: rotate=1; TQ4: always 1 */
    int norm32;                     /* TQ4: f32 norms */
    float scale;                    /* q8_0/q4_0 rotated: the codec's 1/sqrtf(d) */
    size_t block_bytes;             /* one block (16 rows for lanes) */
    float sgn[VQ_CUDA_MAX_D];       /* the rotation's factors */
    float bound[16];                /* TQ4: boundaries b[0..14], b[15] = +inf */
} vq_cuda_enc;
/* From a codec state (the codec layer's description, codec_dev.h); VQ_ERR_ARG naming what no
 * encoder writes (f16 rows need none: vq_cuda_kv_put_f16). */
vq_status vq_cuda_enc_init(vq_cuda_enc *e, const struct vq_codec_state *st, vq_err *err);
/* Encode rpb rows (16 for lanes keys, any count for one-row values: rows) of each of n_kv_heads
 * heads: row t < n_win comes from the fp16 rows win (row t of head h at win + (t * n_kv_heads + h)
 * * d halves: the CPU store's window ring, linearized), row t >= n_win from the f32 rows src
 * (row t - n_win, head h at src + ((t - n_win) * n_kv_heads + h) * d). Head h's output starts at
 * dst + h * head_stride (lanes: one block; values: `rows` consecutive row blocks). Device
 * pointers; asynchronous on stream. */
vq_status vq_cuda_kv_encode(const vq_cuda_enc *e, int n_kv_heads, int rows, const void *win, int n_win,
                            const float *src, void *dst, size_t head_stride, void *stream, vq_err *err);

typedef struct vq_cuda_seq {        /* one sequence's rows; an array of them lives on the device */
    const void *k, *v;              /* device: coded rows (see above) */
    int64_t k_head_stride, v_head_stride;   /* bytes between two KV heads' blocks */
    int n_coded;                    /* coded rows (a multiple of 16 for lanes keys) */
    int pos0;                       /* position of coded row 0 */
    const void *fp_k, *fp_v;        /* device: n_fp x n_kv_heads x head_dim fp16, or NULL */
    const int32_t *fp_pos;          /* device: their positions */
    int n_fp;
    int q_pos;                      /* the query's position */
    int span;                       /* attention span (0: unbounded) */
    int pad_;
} vq_cuda_seq;

/* How a call splits the context: chunk rows per block of work, splits per (sequence, KV head)
 * (plus one for the fp rows). The test derives its error bound from it. */
typedef struct vq_cuda_plan { int chunk, n_splits; size_t workspace_bytes; } vq_cuda_plan;
vq_cuda_plan vq_cuda_attn_plan(const vq_cuda_kv_format *f, int n_seqs, int max_coded);

/* 1 when vq_cuda_attn_decode runs f's coded rows on the tensor cores (fp16 operands, fp32 sums:
 * q8_0, q4_0, and turboquant_mse 4-bit with fp16 norms), 0 when on the float32 kernels. Opt-in
 * while the tensor-core kernel has not run on a GPU: only with the environment's VQ_CUDA_ATTN=tc
 * and f->f32_only 0 (the test and the benchmark set it to run both paths). The test derives its
 * bound from it. */
int vq_cuda_attn_tc(const vq_cuda_kv_format *f);

/* out[s][head][d] = softmax(q·k / sqrt(d)) v over the rows sequence s sees, for n_seqs sequences
 * (seqs: device array). q, out: device, n_seqs x n_heads x head_dim f32; q after RoPE. max_coded:
 * the largest n_coded (sizes the split); workspace: device, plan.workspace_bytes. stream: a
 * cudaStream_t or NULL. Asynchronous; errors of the launch are returned, errors of the run show
 * at the next synchronisation. A sequence that sees no row gets zeros. */
vq_status vq_cuda_attn_decode(const vq_cuda_kv_format *f, const vq_cuda_seq *seqs, int n_seqs,
                              int max_coded, const float *q, float *out, void *workspace,
                              size_t workspace_bytes, void *stream, vq_err *err);

/* ---- forward-pass ops (ops.cu): the CUDA row of the backend contract (docs/cuda.md) ----
 * Decode: one token's activations, float32, device pointers, asynchronous on `stream` (a
 * cudaStream_t or NULL); launch errors are returned, run errors show at the next sync. Each op
 * computes what the CPU kernel of the same name in kernels/kernels.h computes, with float32
 * rounding in another order (the test derives the bound).
 * Weights stay in the GGUF file's block bytes, uploaded as they are: W is rows x cols in
 * `type` (ggml numbering: F32 0, F16 1, BF16 30, Q8_0 8, Q4_0 2, Q4_1 3, Q4_K 12, Q6_K 14),
 * rows contiguous, every row starting at an even byte offset. */
int       vq_cuda_matvec_supported(uint32_t type, int cols);   /* 1: a kernel reads (type, cols) */
size_t    vq_cuda_weight_bytes(uint32_t type, int64_t rows, int64_t cols);   /* 0: unsupported */
/* y[r] = sum_c W[r, c] x[c], r < rows */
vq_status vq_cuda_matvec(uint32_t type, const void *W, int rows, int cols, const float *x, float *y,
                         void *stream, vq_err *err);
/* out[c] = W[row, c] (the embedding lookup) */
vq_status vq_cuda_get_row(uint32_t type, const void *W, int cols, int row, float *out, void *stream,
                          vq_err *err);
/* per row of dim values: out = w * (x / sqrt(mean(x^2) + eps)); out may be x */
vq_status vq_cuda_rmsnorm(float *out, const float *x, const float *w, int n_rows, int dim, float eps,
                          void *stream, vq_err *err);
/* vq_rope's meaning: n_heads heads of head_dim, the first rot_dim dims turned at position pos by
 * pos * inv_freq[i] (device, rot_dim/2 values: base, rope_freqs and scaling folded in at load),
 * cos/sin times mscale; neox: pairs (i, i + rot_dim/2), else (2i, 2i+1) */
vq_status vq_cuda_rope(float *x, int n_heads, int head_dim, int rot_dim, int pos, const float *inv_freq,
                       float mscale, int neox, void *stream, vq_err *err);
/* gate = silu(gate) * up (gelu 0), or gelu_tanh(gate) * up (gelu 1) */
vq_status vq_cuda_glu(float *gate, const float *up, int n, int gelu, void *stream, vq_err *err);
vq_status vq_cuda_add(float *y, const float *x, int n, void *stream, vq_err *err);     /* y += x */
vq_status vq_cuda_scale(float *y, float a, int n, void *stream, vq_err *err);          /* y *= a */
vq_status vq_cuda_softcap(float *y, float cap, int n, void *stream, vq_err *err);      /* cap tanh(y / cap) */
/* one row (n_kv_heads x head_dim floats, device) as fp16, rounded to nearest even (the CPU f16
 * codec's bytes), at row `row` of each head's array: head h at dst + h * head_stride bytes */
vq_status vq_cuda_kv_put_f16(void *dst, size_t head_stride, int n_kv_heads, int head_dim, int row,
                             const float *src, void *stream, vq_err *err);
/* *out (device int) = the index of the largest x (the smallest such index; greedy sampling) */
vq_status vq_cuda_argmax(const float *x, int n, int *out, void *stream, vq_err *err);

/* ---- the CUDA row of the backend contract (cuda_row.cu; backend/ops.h) ----
 * vq_ops_cuda's context is a vq_cuda_row: the device copies of the model's buffers (mirrored
 * once each, as they are, from the mapped file: vq_model_tensors hands them over) and its
 * pointer map. Decode only: one token per forward call (max_batch 1). Its store is a
 * vq_cuda_kvs: per layer and KV head, f16 rows [max_ctx][head_dim] for K and for V (the CPU f16
 * codec's bytes), attention by vq_cuda_attn_decode; positions appended in order from 0.
 * Refusals (VQ_ERR_ARG, at create): head_dim other than 64/128, more than 8 query heads per KV
 * head, attention soft-capping; (at vq_fwd_create_ops): a matrix whose type has no matvec. */
struct vq_ops;
extern const struct vq_ops vq_ops_cuda;
typedef struct vq_cuda_row vq_cuda_row;
vq_cuda_row *vq_cuda_row_create(vq_err *err);                 /* on device 0 */
vq_cuda_row *vq_cuda_row_create_on(int device, vq_err *err);  /* every op and copy on that device */
/* a buffer of the model the pass reads: copied to the device once (fits vq_model_tensor_fn when
 * wrapped); a pointer inside it then maps to the copy */
vq_status vq_cuda_row_mirror(vq_cuda_row *r, const void *host, size_t bytes, vq_err *err);
size_t    vq_cuda_row_bytes(const vq_cuda_row *r);   /* device bytes of the mirrored buffers */
void      vq_cuda_row_destroy(vq_cuda_row *r);
typedef struct vq_cuda_kvs vq_cuda_kvs;
/* span: per layer attention span (0: all), copied; NULL: all unbounded. states: per layer the K
 * and V codec states (states[2 l + side]: the CPU cache's, so the rotations are its own), or
 * NULL: f16 rows everywhere. A coded layer keeps its codes in the CPU codec's bytes (keys in
 * 16-row lanes blocks, values a row per block, one array per KV head for max_ctx rows) and the
 * partial block's rows in fp16, encoded on the device (vq_cuda_kv_encode) when its 16th row
 * comes: rows 0..14 from fp16, the 16th as given, as the CPU store encodes its window=0 cache.
 * On the calling thread's current device (the device row sets it to the row's). */
vq_cuda_kvs *vq_cuda_kvs_create(int n_layers, int n_heads, int n_kv_heads, int head_dim, int max_ctx,
                                const int *span, float softcap, const struct vq_codec_state *const *states,
                                vq_err *err);
/* 0, or VQ_ERR_ARG naming why no store holds these states (no device needed) */
vq_status vq_cuda_kvs_check(const struct vq_codec_state *k, const struct vq_codec_state *v, int n_heads,
                            int n_kv_heads, vq_err *err);
/* bytes vq_cuda_kvs_create allocates for one layer of these states (NULL: f16 rows) and max_ctx
 * rows, computed without a device (vq_cuda_kvs_bytes is their sum over the layers; the attention
 * workspace and the sequence descriptor, the store's scratch, are not counted) */
size_t vq_cuda_kvs_layer_bytes(const struct vq_codec_state *k, const struct vq_codec_state *v, int n_heads,
                               int n_kv_heads, int head_dim, int max_ctx);
void   vq_cuda_kvs_destroy(vq_cuda_kvs *s);
void   vq_cuda_kvs_clear(vq_cuda_kvs *s);
int    vq_cuda_kvs_truncate(vq_cuda_kvs *s, int n);   /* keep positions < n; returns rows kept */
/* a layer's rows (n_coded, n_win) and their bytes <-> host arrays (backend/ops.h vq_store_rows) */
int    vq_cuda_kvs_rows(const vq_cuda_kvs *s, int layer, int *n_win);
struct vq_store_rows;
vq_status vq_cuda_kvs_get(vq_cuda_kvs *s, int layer, struct vq_store_rows *r, vq_err *err);
vq_status vq_cuda_kvs_put(vq_cuda_kvs *s, int layer, const struct vq_store_rows *r, vq_err *err);
size_t vq_cuda_kvs_bytes(const vq_cuda_kvs *s);

/* Runtime helpers for C callers (tests, tools): device count (0 when there is no device or no
 * driver), allocation, copies, synchronisation; errors carry CUDA's message. */
int       vq_cuda_device_count(void);
vq_status vq_cuda_device_name(char *buf, size_t n, vq_err *err);
vq_status vq_cuda_malloc(void **p, size_t bytes, vq_err *err);
void      vq_cuda_free(void *p);
vq_status vq_cuda_memcpy_h2d(void *dst, const void *src, size_t bytes, vq_err *err);
vq_status vq_cuda_memcpy_d2h(void *dst, const void *src, size_t bytes, vq_err *err);
vq_status vq_cuda_memset(void *dst, int byte, size_t bytes, vq_err *err);
vq_status vq_cuda_sync(vq_err *err);
#ifdef __cplusplus
}
#endif
#endif
