/* cuda_row.cu: the CUDA row of the backend contract (backend/ops.h; vq_cuda.h, "the CUDA row"):
 * each op of the forward pass as a launch of ops.cu's kernels on device buffers, the model's
 * pointers mapped to their mirrored copies, and the row's KV store (f16 rows in device memory,
 * attention by the decode kernels of attn_host.cu). Host code only. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <cuda_runtime.h>
#include "backend/ops.h"
#include "backend/cuda/vq_cuda.h"

extern "C" {
vq_status vq_err_set(vq_err *err, vq_status code, const char *fmt, ...);
}

struct vq_cuda_row {
    struct range { const uint8_t *host; size_t bytes; void *dev; } *r;   /* sorted by host */
    int n, cap;
    size_t bytes;
    int device;                 /* the CUDA device index every op and allocation runs on */
};

struct vq_cuda_kvs {
    int device;
    int n_layers, n_heads, n_kv_heads, head_dim, max_ctx;
    int *span, *rows;
    void **k, **v;              /* per layer: n_kv_heads x max_ctx x head_dim fp16 */
    size_t head_stride, bytes;
    vq_cuda_kv_format fmt;
    vq_cuda_seq *dseq;          /* device: one sequence descriptor */
    void *ws;
    size_t ws_bytes;
};

namespace {
vq_status cuerr(vq_err *err, cudaError_t e, const char *what) {
    return vq_err_set(err, VQ_ERR_IO, "cuda: %s: %s", what, cudaGetErrorString(e));
}

/* every op runs on the row's device: the calling thread's current device is set when it differs
 * (a program may drive rows on several devices, or threads that never chose one) */
cudaError_t on_device(int device) {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == device) return cudaSuccess;
    return cudaSetDevice(device);
}
#define ON_DEVICE(ctx)                                                                                   \
    do {                                                                                                 \
        cudaError_t e_ = on_device(((const vq_cuda_row *)(ctx))->device);                                \
        if (e_ != cudaSuccess) return cuerr(err, e_, "selecting the device");                            \
    } while (0)

/* the device copy of a model pointer (NULL: never mirrored) */
const void *dev_of(const vq_cuda_row *r, const void *host) {
    const uint8_t *p = (const uint8_t *)host;
    int lo = 0, hi = r->n - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        const vq_cuda_row::range &g = r->r[mid];
        if (p < g.host) hi = mid - 1;
        else if (p >= g.host + g.bytes) lo = mid + 1;
        else return (const uint8_t *)g.dev + (p - g.host);
    }
    return NULL;
}

#define DEV(ptr, what)                                                                                   \
    ON_DEVICE(ctx);                                                                                      \
    const void *ptr##_d = dev_of((const vq_cuda_row *)ctx, ptr);                                         \
    if (!ptr##_d) return vq_err_set(err, VQ_ERR_STATE, "backend cuda: %s was not mirrored to the device", what)

void *row_alloc(void *ctx, size_t bytes) {
    void *p = NULL;
    if (on_device(((const vq_cuda_row *)ctx)->device) != cudaSuccess) return NULL;
    return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}
void row_free(void *ctx, void *buf) {
    if (buf && on_device(((const vq_cuda_row *)ctx)->device) == cudaSuccess) cudaFree(buf);
}
vq_status row_download(void *ctx, void *dst, const void *buf, size_t bytes, vq_err *err) {
    ON_DEVICE(ctx);
    cudaError_t e = cudaMemcpy(dst, buf, bytes, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? VQ_OK : cuerr(err, e, "download");
}
int row_supported(void *, uint32_t type, int cols) { return vq_cuda_matvec_supported(type, cols); }

vq_status one_token(int n, vq_err *err) {
    return n == 1 ? VQ_OK
                  : vq_err_set(err, VQ_ERR_ARG, "backend cuda: %d tokens in one call: the row decodes one at a time", n);
}

vq_status row_matmul(void *ctx, const vq_ops_mm *jobs, int njobs, const float *X, int n, int cols, vq_err *err) {
    vq_status s = one_token(n, err);
    for (int j = 0; !s && j < njobs; j++) {
        const void *W = jobs[j].W;
        DEV(W, "a weight matrix");
        s = vq_cuda_matvec(jobs[j].type, W_d, jobs[j].rows, cols, X, jobs[j].Y, NULL, err);
    }
    return s;
}

vq_status row_embed(void *ctx, float *out, const void *W, uint32_t type, int dim, int row, float scale, vq_err *err) {
    DEV(W, "token_embd");
    vq_status s = vq_cuda_get_row(type, W_d, dim, row, out, NULL, err);
    if (!s && scale != 1.0f) s = vq_cuda_scale(out, scale, dim, NULL, err);
    return s;
}

vq_status row_rmsnorm(void *ctx, float *out, const float *x, const float *w, int n, int dim, float eps, vq_err *err) {
    DEV(w, "a norm");
    return vq_cuda_rmsnorm(out, x, (const float *)w_d, n, dim, eps, NULL, err);
}

vq_status row_rope(void *ctx, float *x, int n, const int *pos, int n_heads, int head_dim, int rot_dim,
                   const float *inv_freq, float mscale, int neox, vq_err *err) {
    DEV(inv_freq, "a rope table");
    vq_status s = VQ_OK;
    for (int t = 0; !s && t < n; t++)
        s = vq_cuda_rope(x + (size_t)t * n_heads * head_dim, n_heads, head_dim, rot_dim, pos[t],
                         (const float *)inv_freq_d, mscale, neox, NULL, err);
    return s;
}

vq_status row_add_bias(void *ctx, float *y, const float *b, int n, int dim, vq_err *err) {
    DEV(b, "a bias");
    vq_status s = VQ_OK;
    for (int t = 0; !s && t < n; t++) s = vq_cuda_add(y + (size_t)t * dim, (const float *)b_d, dim, NULL, err);
    return s;
}

vq_status row_add(void *ctx, float *y, const float *x, size_t count, vq_err *err) {
    ON_DEVICE(ctx);
    return vq_cuda_add(y, x, (int)count, NULL, err);
}
vq_status row_scale(void *ctx, float *x, float a, size_t count, vq_err *err) {
    ON_DEVICE(ctx);
    return vq_cuda_scale(x, a, (int)count, NULL, err);
}
vq_status row_glu(void *ctx, float *gate, const float *up, size_t count, int gelu, vq_err *err) {
    ON_DEVICE(ctx);
    return vq_cuda_glu(gate, up, (int)count, gelu, NULL, err);
}
vq_status row_softcap(void *ctx, float *x, float cap, size_t count, vq_err *err) {
    ON_DEVICE(ctx);
    return vq_cuda_softcap(x, cap, (int)count, NULL, err);
}

vq_status row_kv_append(void *ctx, void *store, int layer, int pos0, int n, const float *k, const float *v,
                        vq_err *err) {
    vq_cuda_kvs *s = (vq_cuda_kvs *)store;
    if (!s) return vq_err_set(err, VQ_ERR_ARG, "backend cuda: no store (a vq_cuda_kvs)");
    if (layer < 0 || layer >= s->n_layers) return vq_err_set(err, VQ_ERR_ARG, "backend cuda: layer %d", layer);
    if (pos0 != s->rows[layer])
        return vq_err_set(err, VQ_ERR_ARG, "backend cuda: layer %d holds %d rows, an append at position %d "
                          "(the store takes positions in order)", layer, s->rows[layer], pos0);
    if (pos0 + n > s->max_ctx)
        return vq_err_set(err, VQ_ERR_RANGE, "backend cuda: %d rows past the store's %d", pos0 + n, s->max_ctx);
    ON_DEVICE(ctx);
    const size_t kvd = (size_t)s->n_kv_heads * s->head_dim;
    for (int t = 0; t < n; t++) {
        vq_status st = vq_cuda_kv_put_f16(s->k[layer], s->head_stride, s->n_kv_heads, s->head_dim, pos0 + t,
                                          k + t * kvd, NULL, err);
        if (!st) st = vq_cuda_kv_put_f16(s->v[layer], s->head_stride, s->n_kv_heads, s->head_dim, pos0 + t,
                                         v + t * kvd, NULL, err);
        if (st) return st;
    }
    s->rows[layer] = pos0 + n;
    return VQ_OK;
}

vq_status row_kv_attend(void *ctx, void *store, int layer, int n, const int *pos, const float *q, float *out,
                        vq_err *err) {
    vq_cuda_kvs *s = (vq_cuda_kvs *)store;
    vq_status st = one_token(n, err);
    if (st) return st;
    if (!s || layer < 0 || layer >= s->n_layers) return vq_err_set(err, VQ_ERR_ARG, "backend cuda: layer %d", layer);
    ON_DEVICE(ctx);
    vq_cuda_seq seq;
    memset(&seq, 0, sizeof seq);
    seq.k = s->k[layer];
    seq.v = s->v[layer];
    seq.k_head_stride = seq.v_head_stride = (int64_t)s->head_stride;
    seq.n_coded = s->rows[layer];
    seq.pos0 = 0;
    seq.q_pos = pos[0];
    seq.span = s->span[layer];
    /* the descriptor travels in stream order before the launch that reads it */
    cudaError_t e = cudaMemcpy(s->dseq, &seq, sizeof seq, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return cuerr(err, e, "sequence descriptor");
    return vq_cuda_attn_decode(&s->fmt, s->dseq, 1, seq.n_coded, q, out, s->ws, s->ws_bytes, NULL, err);
}
}  // namespace

extern "C" const vq_ops vq_ops_cuda = {
    "cuda", 0, 1, row_alloc, row_free, row_download, row_supported, row_matmul, row_embed, row_rmsnorm,
    row_rope, row_add_bias, row_add, row_scale, row_glu, row_softcap, row_kv_append, row_kv_attend,
};

extern "C" vq_cuda_row *vq_cuda_row_create_on(int device, vq_err *err) {
    const int n = vq_cuda_device_count();
    if (device < 0 || device >= n) {
        vq_err_set(err, VQ_ERR_IO, n ? "backend cuda: no CUDA device %d (%d present)" : "backend cuda: no CUDA device",
                   device, n);
        return NULL;
    }
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) { cuerr(err, e, "selecting the device"); return NULL; }
    vq_cuda_row *r = (vq_cuda_row *)calloc(1, sizeof *r);
    if (!r) vq_err_set(err, VQ_ERR_NOMEM, "out of memory");
    else r->device = device;
    return r;
}
extern "C" vq_cuda_row *vq_cuda_row_create(vq_err *err) { return vq_cuda_row_create_on(0, err); }

extern "C" vq_status vq_cuda_row_mirror(vq_cuda_row *r, const void *host, size_t bytes, vq_err *err) {
    const uint8_t *p = (const uint8_t *)host;
    if (!p || !bytes) return VQ_OK;
    if (dev_of(r, p) && dev_of(r, p + bytes - 1)) return VQ_OK;   /* already there (a shared rope table) */
    for (int i = 0; i < r->n; i++)
        if (p < r->r[i].host + r->r[i].bytes && r->r[i].host < p + bytes)
            return vq_err_set(err, VQ_ERR_ARG, "backend cuda: buffers overlap without one containing the other");
    if (r->n == r->cap) {
        const int cap = r->cap ? 2 * r->cap : 64;
        void *nr = realloc(r->r, (size_t)cap * sizeof *r->r);
        if (!nr) return vq_err_set(err, VQ_ERR_NOMEM, "out of memory");
        r->r = (vq_cuda_row::range *)nr;
        r->cap = cap;
    }
    void *d = NULL;
    cudaError_t e = on_device(r->device);
    if (e == cudaSuccess) e = cudaMalloc(&d, bytes);
    if (e == cudaSuccess) e = cudaMemcpy(d, p, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        cudaFree(d);
        return cuerr(err, e, "mirroring a weight");
    }
    int at = r->n;
    while (at > 0 && r->r[at - 1].host > p) { r->r[at] = r->r[at - 1]; at--; }
    r->r[at].host = p;
    r->r[at].bytes = bytes;
    r->r[at].dev = d;
    r->n++;
    r->bytes += bytes;
    return VQ_OK;
}

extern "C" size_t vq_cuda_row_bytes(const vq_cuda_row *r) { return r ? r->bytes : 0; }

extern "C" void vq_cuda_row_destroy(vq_cuda_row *r) {
    if (!r) return;
    (void)on_device(r->device);
    for (int i = 0; i < r->n; i++) cudaFree(r->r[i].dev);
    free(r->r);
    free(r);
}

extern "C" vq_cuda_kvs *vq_cuda_kvs_create(int n_layers, int n_heads, int n_kv_heads, int head_dim, int max_ctx,
                                           const int *span, float softcap, vq_err *err) {
    if (head_dim != 64 && head_dim != 128) {
        vq_err_set(err, VQ_ERR_ARG, "backend cuda: head_dim %d has no attention kernel (64 or 128)", head_dim);
        return NULL;
    }
    if (n_kv_heads < 1 || n_heads % n_kv_heads || n_heads / n_kv_heads > VQ_CUDA_MAX_G) {
        vq_err_set(err, VQ_ERR_ARG, "backend cuda: %d query heads over %d KV heads: the kernels take 1 to %d per KV head",
                   n_heads, n_kv_heads, VQ_CUDA_MAX_G);
        return NULL;
    }
    if (softcap != 0.0f) {
        vq_err_set(err, VQ_ERR_ARG, "backend cuda: attention soft-capping has no kernel");
        return NULL;
    }
    if (n_layers < 1 || max_ctx < 1) {
        vq_err_set(err, VQ_ERR_ARG, "backend cuda: %d layers, %d rows", n_layers, max_ctx);
        return NULL;
    }
    vq_cuda_kvs *s = (vq_cuda_kvs *)calloc(1, sizeof *s);
    if (!s) { vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); return NULL; }
    if (cudaGetDevice(&s->device) != cudaSuccess) s->device = 0;   /* the caller's current device */
    s->n_layers = n_layers; s->n_heads = n_heads; s->n_kv_heads = n_kv_heads; s->head_dim = head_dim;
    s->max_ctx = max_ctx;
    s->span = (int *)calloc((size_t)n_layers, sizeof(int));
    s->rows = (int *)calloc((size_t)n_layers, sizeof(int));
    s->k = (void **)calloc((size_t)n_layers, sizeof(void *));
    s->v = (void **)calloc((size_t)n_layers, sizeof(void *));
    if (!s->span || !s->rows || !s->k || !s->v) {
        vq_cuda_kvs_destroy(s);
        vq_err_set(err, VQ_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (span) memcpy(s->span, span, (size_t)n_layers * sizeof(int));
    s->head_stride = (size_t)max_ctx * head_dim * 2;
    vq_cuda_kv_format *f = &s->fmt;
    f->type = VQ_CUDA_KV_F16;
    f->head_dim = head_dim;
    f->n_heads = n_heads;
    f->n_kv_heads = n_kv_heads;
    for (int i = 0; i < head_dim; i++) f->rk[i] = f->rv[i] = 1.0f;
    f->k_block_bytes = f->v_row_bytes = (size_t)head_dim * 2;
    /* the workspace of the largest split the plan makes (it never splits into more parts) */
    s->ws_bytes = vq_cuda_attn_plan(f, 1, 1 << 28).workspace_bytes;
    cudaError_t e = cudaMalloc((void **)&s->dseq, sizeof(vq_cuda_seq));
    if (e == cudaSuccess) e = cudaMalloc(&s->ws, s->ws_bytes);
    for (int l = 0; e == cudaSuccess && l < n_layers; l++) {
        e = cudaMalloc(&s->k[l], s->head_stride * n_kv_heads);
        if (e == cudaSuccess) e = cudaMalloc(&s->v[l], s->head_stride * n_kv_heads);
        s->bytes += 2 * s->head_stride * n_kv_heads;
    }
    if (e != cudaSuccess) {
        vq_cuda_kvs_destroy(s);
        cuerr(err, e, "the KV store");
        return NULL;
    }
    return s;
}

extern "C" void vq_cuda_kvs_destroy(vq_cuda_kvs *s) {
    if (!s) return;
    (void)on_device(s->device);
    for (int l = 0; l < s->n_layers; l++) {
        if (s->k) cudaFree(s->k[l]);
        if (s->v) cudaFree(s->v[l]);
    }
    cudaFree(s->dseq);
    cudaFree(s->ws);
    free(s->span); free(s->rows); free(s->k); free(s->v);
    free(s);
}

extern "C" void vq_cuda_kvs_clear(vq_cuda_kvs *s) {
    if (s) memset(s->rows, 0, (size_t)s->n_layers * sizeof(int));
}

extern "C" int vq_cuda_kvs_truncate(vq_cuda_kvs *s, int n) {
    if (!s) return 0;
    if (n < 0) n = 0;
    for (int l = 0; l < s->n_layers; l++)
        if (s->rows[l] > n) s->rows[l] = n;   /* f16 rows stand alone: nothing to recompute */
    return n;
}

extern "C" size_t vq_cuda_kvs_bytes(const vq_cuda_kvs *s) { return s ? s->bytes : 0; }


/* ---- the CUDA device row (backend/ops.h "devices") ---- */
namespace {
int dev_count(char *why, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (why) snprintf(why, cap, "cudaGetDeviceCount: %s (no NVIDIA GPU or driver on this machine?)",
                          cudaGetErrorString(e));
        return 0;
    }
    if (n == 0 && why) snprintf(why, cap, "the CUDA driver reports no device");
    return n;
}
void *dev_open(int index, vq_err *err) { return vq_cuda_row_create_on(index, err); }
vq_status dev_mirror(void *ctx, const void *host, size_t bytes, vq_err *err) {
    return vq_cuda_row_mirror((vq_cuda_row *)ctx, host, bytes, err);
}
size_t dev_bytes(const void *ctx) { return vq_cuda_row_bytes((const vq_cuda_row *)ctx); }
void dev_describe(void *ctx, char *buf, size_t cap) {
    cudaDeviceProp pr;
    const int d = ((const vq_cuda_row *)ctx)->device;
    if (cudaGetDeviceProperties(&pr, d) != cudaSuccess) { snprintf(buf, cap, "cuda:%d", d); return; }
    snprintf(buf, cap, "cuda:%d, %s (sm_%d%d, %d SMs, %.0f MiB)", d, pr.name, pr.major, pr.minor,
             pr.multiProcessorCount, pr.totalGlobalMem / 1048576.0);
}
void dev_close(void *ctx) { vq_cuda_row_destroy((vq_cuda_row *)ctx); }
void *dev_store_create(void *ctx, int n_layers, int n_heads, int n_kv_heads, int head_dim, int max_ctx,
                       const int *span, float softcap, vq_err *err) {
    cudaError_t e = on_device(((const vq_cuda_row *)ctx)->device);
    if (e != cudaSuccess) { cuerr(err, e, "selecting the device"); return NULL; }
    vq_cuda_kvs *s = vq_cuda_kvs_create(n_layers, n_heads, n_kv_heads, head_dim, max_ctx, span, softcap, err);
    if (!s && err && err->code == VQ_ERR_ARG) err->code = VQ_ERR_UNSUPPORTED;   /* the model is fine; the store lacks it */
    return s;
}
void dev_store_free(void *store) { vq_cuda_kvs_destroy((vq_cuda_kvs *)store); }
int dev_store_truncate(void *store, int n) { return vq_cuda_kvs_truncate((vq_cuda_kvs *)store, n); }
size_t dev_store_bytes(const void *store) { return vq_cuda_kvs_bytes((const vq_cuda_kvs *)store); }
}  // namespace

extern "C" const vq_device vq_device_cuda = {
    "cuda", &vq_ops_cuda, NULL, "f16", dev_count, dev_open, dev_mirror, dev_bytes, dev_describe, dev_close,
    dev_store_create, dev_store_free, dev_store_truncate, dev_store_bytes, 16,
};
