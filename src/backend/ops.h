/* ops.h: the backend contract of the forward pass (docs/architecture.md "Backends", docs/cuda.md).
 * forward.c (model layer) is the one description of the model; every number it computes goes
 * through a row of this table, so a device is a row, not a copy of the pass:
 *   - "cpu" (src/model/ops_cpu.c): the kernels of kernels.h on host memory, the store a vq_kv;
 *     the same calls forward.c made before the table existed, so the same bits;
 *   - "cuda" (src/backend/cuda/cuda_row.cu, built only with VQ_CUDA): the kernels of vq_cuda.h on
 *     device memory, the store a device cache in the CPU cache's code layouts; a model reaches it
 *     through the device row vq_device_cuda (below, "devices").
 * Plain C, no device type: a row's context and store are opaque pointers.
 *
 * Memory. Activations are buffers the row allocates (alloc); `host` says whether the pass may
 * read them itself (the CPU row) or must fetch them (download). Weights, norms, biases and rope
 * tables are passed as the model's own pointers (into the mapped file, or the model's tables): a
 * device row maps each to the copy it made once when the model was bound to it, so the model
 * never learns where its weights live.
 * Attention goes through the store (kv_append, kv_attend): the pass never reads K/V memory.
 * Every op may be asynchronous on a device; errors of a run show at the next download.
 * A row may refuse an op's arguments (VQ_ERR_ARG naming what it lacks): a weight type, a batch
 * of more than one token, a codec. */
#ifndef VQ_BACKEND_OPS_H
#define VQ_BACKEND_OPS_H
#include <stddef.h>
#include <stdint.h>
#include "veloxquant.h"   /* vq_status, vq_err */

typedef struct vq_ops_mm {   /* one product Y = X W^T of a batch (vq_matmul_job's meaning) */
    float *Y;                /* n x rows */
    const void *W;           /* the model's pointer: rows x cols in `type` */
    uint32_t type;           /* vq_ggml_type */
    int rows;
} vq_ops_mm;

typedef struct vq_ops vq_ops;
struct vq_ops {
    const char *name;
    int host;                /* 1: the row's buffers are host memory the caller may read */
    int max_batch;           /* most tokens one op takes (0: any) */
    void *(*alloc)(void *ctx, size_t bytes);               /* NULL: out of memory */
    void  (*free)(void *ctx, void *buf);
    vq_status (*download)(void *ctx, void *dst, const void *buf, size_t bytes, vq_err *err);
    /* 1 when matmul reads (type, cols) */
    int (*matmul_supported)(void *ctx, uint32_t type, int cols);
    /* every job's Y = X W^T for the same X (n x cols) */
    vq_status (*matmul)(void *ctx, const vq_ops_mm *jobs, int njobs, const float *X, int n, int cols,
                        vq_err *err);
    /* out (dim floats) = row `row` of W (rows x dim in `type`) times scale */
    vq_status (*embed)(void *ctx, float *out, const void *W, uint32_t type, int dim, int row, float scale,
                       vq_err *err);
    /* n rows of dim: out = w * x / rms(x) (out may be x) */
    vq_status (*rmsnorm)(void *ctx, float *out, const float *x, const float *w, int n, int dim, float eps,
                         vq_err *err);
    /* n tokens of n_heads x head_dim, token t at position pos[t] (host): vq_rope's meaning */
    vq_status (*rope)(void *ctx, float *x, int n, const int *pos, int n_heads, int head_dim, int rot_dim,
                      const float *inv_freq, float mscale, int neox, vq_err *err);
    /* y[t][i] += b[i] for n rows of dim; b is the model's (a bias) */
    vq_status (*add_bias)(void *ctx, float *y, const float *b, int n, int dim, vq_err *err);
    vq_status (*add)(void *ctx, float *y, const float *x, size_t count, vq_err *err);    /* y += x */
    vq_status (*scale)(void *ctx, float *x, float a, size_t count, vq_err *err);         /* x *= a */
    /* gate = silu(gate) * up, or gelu_tanh(gate) * up */
    vq_status (*glu)(void *ctx, float *gate, const float *up, size_t count, int gelu, vq_err *err);
    vq_status (*softcap)(void *ctx, float *x, float cap, size_t count, vq_err *err);  /* cap tanh(x / cap) */
    /* the store: n rows of K and V (n x n_kv_heads*head_dim, after RoPE) at positions pos0..;
     * attention of n query rows, query t at position pos[t] (host) */
    vq_status (*kv_append)(void *ctx, void *store, int layer, int pos0, int n, const float *k, const float *v,
                           vq_err *err);
    vq_status (*kv_attend)(void *ctx, void *store, int layer, int n, const int *pos, const float *q, float *out,
                           vq_err *err);
};

/* ---- devices (device.c): the rows a model can be bound to ----
 * A device row turns "cuda:N" into a context for its ops row: the model's buffers copied to the
 * device once (mirror: vq_model_tensors hands each over), and it makes the KV stores sessions keep
 * there. The CPU is no device row: a model without one runs on vq_ops_cpu with a vq_kv cache.
 * A row whose backend this build lacks keeps its name and says why (ops NULL, `why` set), so a
 * request for it is refused by name instead of running elsewhere. Plain C, no device type. */
/* One layer of a device store as host arrays (the fields of kv.h's vq_kv_plain): positions
 * 0..n_coded-1 as codes (KV head h's K blocks at k + h * k_head, in row order; V likewise), then
 * n_win fp16 rows (n_win x n_kv_heads x head_dim) */
typedef struct vq_store_rows {
    int n_coded, n_win;
    uint8_t *k, *v;
    size_t k_head, v_head;
    uint16_t *win_k, *win_v;
} vq_store_rows;
struct vq_codec_state;

typedef struct vq_device {
    const char *name;                 /* "cuda" */
    const vq_ops *ops;                /* NULL: not built in (why) */
    const char *why;                  /* why this build lacks it (NULL when built) */
    const char *store_spec;           /* a KV spec every store of the row holds (f16; codes: store_check) */
    /* devices present; 0 with why (a message) when none is usable */
    int    (*count)(char *why, size_t cap);
    void  *(*open)(int index, vq_err *err);                         /* ops's context on device index */
    vq_status (*mirror)(void *ctx, const void *host, size_t bytes, vq_err *err);
    size_t (*bytes)(const void *ctx);                               /* device bytes mirrored */
    void   (*describe)(void *ctx, char *buf, size_t cap);           /* the device's name */
    void   (*close)(void *ctx);
    /* a store of max_ctx positions for every layer (span: per layer attention span, 0 all;
     * softcap: attention soft-capping, 0 none; st: per layer its K and V codec states, st[2 l + side],
     * the CPU cache's own (same seed, so the same rotations: the store writes their bytes), or NULL:
     * f16 rows everywhere); refuses what it cannot hold (VQ_ERR_UNSUPPORTED) */
    void  *(*store_create)(void *ctx, int n_layers, int n_heads, int n_kv_heads, int head_dim, int max_ctx,
                           const int *span, float softcap, const struct vq_codec_state *const *st, vq_err *err);
    void   (*store_free)(void *store);
    int    (*store_truncate)(void *store, int n);                   /* keep positions < n; rows kept */
    size_t (*store_bytes)(const void *store);
    int    store_bits;                                              /* bits per K/V element of f16 rows */
    /* 0, or VQ_ERR_UNSUPPORTED naming why a store cannot hold codes of these states (no device needed) */
    vq_status (*store_check)(const struct vq_codec_state *k, const struct vq_codec_state *v, int n_heads,
                             int n_kv_heads, vq_err *err);
    /* a layer's rows as host arrays (the state file's door, session/state.c): counts, then copies
     * both ways (put: into an empty layer) */
    int    (*store_rows)(const void *store, int layer, int *n_win);
    vq_status (*store_get)(void *store, int layer, vq_store_rows *r, vq_err *err);
    vq_status (*store_put)(void *store, int layer, const vq_store_rows *r, vq_err *err);
} vq_device;

/* "cpu" or "none" (or NULL, ""): *dev = NULL (the CPU row); "cuda", "cuda:N", "CUDA<N>" (llama.cpp's
 * names): the row and the index, built or not, nothing probed. VQ_ERR_ARG for a name no row has. */
vq_status vq_device_parse(const char *text, const vq_device **dev, int *index, vq_err *err);
/* vq_device_parse, then VQ_ERR_UNSUPPORTED for a row this build lacks, or no usable device of it on
 * this machine, and VQ_ERR_ARG for an index past the devices present (the message says which). */
vq_status vq_device_find(const char *text, const vq_device **dev, int *index, vq_err *err);
#endif
