/* ops.h: the backend contract of the forward pass (docs/architecture.md "Backends", docs/cuda.md).
 * forward.c (model layer) is the one description of the model; every number it computes goes
 * through a row of this table, so a device is a row, not a copy of the pass:
 *   - "cpu" (src/model/ops_cpu.c): the kernels of kernels.h on host memory, the store a vq_kv;
 *     the same calls forward.c made before the table existed, so the same bits;
 *   - "cuda" (src/backend/cuda/cuda_row.c, built only with VQ_CUDA): the kernels of vq_cuda.h on
 *     device memory, the store a device cache in the CPU cache's code layouts.
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
#endif
