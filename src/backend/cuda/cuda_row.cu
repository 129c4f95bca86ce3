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

/* The store: per layer either f16 rows (every row, [n_kv_heads][max_ctx][head_dim]) or codes in
 * the CPU codec's bytes (keys 16-row lanes blocks, values one row per block, per KV head one
 * array for max_ctx rows) plus the partial block's rows in fp16 ([16][n_kv_heads][head_dim]: the
 * CPU store's window with window=0), encoded on the device (kv_encode.cu) when the 16th arrives. */
struct vq_cuda_kvl {
    vq_cuda_kv_format fmt;
    vq_cuda_enc enc[2];         /* coded layers: K and V encoders */
    int coded;                  /* 0: f16 rows */
    void *k, *v;                /* device */
    size_t k_head, v_head;      /* bytes between two KV heads' arrays */
    void *win_k, *win_v;        /* coded: 16 x n_kv_heads x head_dim fp16 */
    int32_t *win_pos;           /* device: 16 positions */
    int n_coded, n_win;         /* f16 layers: n_coded = rows */
};
struct vq_cuda_kvs {
    int device;
    int n_layers, n_heads, n_kv_heads, head_dim, max_ctx;
    int *span;
    vq_cuda_kvl *L;
    size_t bytes;
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

/* row t (n_kv_heads x head_dim f32, device) as fp16 into the window row `slot` */
vq_status win_put(vq_cuda_kvs *s, vq_cuda_kvl *L, int slot, int pos, const float *k, const float *v, vq_err *err) {
    const size_t rb = (size_t)s->n_kv_heads * s->head_dim * 2, hb = (size_t)s->head_dim * 2;
    vq_status st = vq_cuda_kv_put_f16((uint8_t *)L->win_k + slot * rb, hb, s->n_kv_heads, s->head_dim, 0, k, NULL, err);
    if (!st) st = vq_cuda_kv_put_f16((uint8_t *)L->win_v + slot * rb, hb, s->n_kv_heads, s->head_dim, 0, v, NULL, err);
    if (st) return st;
    const int32_t p = pos;
    cudaError_t e = cudaMemcpy(L->win_pos + slot, &p, 4, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? VQ_OK : cuerr(err, e, "window position");
}

vq_status row_kv_append(void *ctx, void *store, int layer, int pos0, int n, const float *k, const float *v,
                        vq_err *err) {
    vq_cuda_kvs *s = (vq_cuda_kvs *)store;
    if (!s) return vq_err_set(err, VQ_ERR_ARG, "backend cuda: no store (a vq_cuda_kvs)");
    if (layer < 0 || layer >= s->n_layers) return vq_err_set(err, VQ_ERR_ARG, "backend cuda: layer %d", layer);
    vq_cuda_kvl *L = &s->L[layer];
    const int rows = L->n_coded + L->n_win;
    if (pos0 != rows)
        return vq_err_set(err, VQ_ERR_ARG, "backend cuda: layer %d holds %d rows, an append at position %d "
                          "(the store takes positions in order)", layer, rows, pos0);
    if (pos0 + n > s->max_ctx)
        return vq_err_set(err, VQ_ERR_RANGE, "backend cuda: %d rows past the store's %d", pos0 + n, s->max_ctx);
    ON_DEVICE(ctx);
    const size_t kvd = (size_t)s->n_kv_heads * s->head_dim;
    for (int t = 0; t < n; t++) {
        const float *kt = k + t * kvd, *vt = v + t * kvd;
        vq_status st;
        if (!L->coded) {
            st = vq_cuda_kv_put_f16(L->k, L->k_head, s->n_kv_heads, s->head_dim, pos0 + t, kt, NULL, err);
            if (!st) st = vq_cuda_kv_put_f16(L->v, L->v_head, s->n_kv_heads, s->head_dim, pos0 + t, vt, NULL, err);
            if (st) return st;
            L->n_coded++;
            continue;
        }
        if (L->n_win < 15) {   /* the partial block waits in fp16, as in the CPU store's window */
            st = win_put(s, L, L->n_win, pos0 + t, kt, vt, err);
            if (st) return st;
            L->n_win++;
            continue;
        }
        /* the 16th row: 15 from the window (fp16), this one as given (f32), as the CPU store encodes */
        st = vq_cuda_kv_encode(&L->enc[0], s->n_kv_heads, 16, L->win_k, 15, kt,
                               (uint8_t *)L->k + (size_t)(L->n_coded / 16) * L->enc[0].block_bytes, L->k_head, NULL, err);
        if (!st) st = vq_cuda_kv_encode(&L->enc[1], s->n_kv_heads, 16, L->win_v, 15, vt,
                                        (uint8_t *)L->v + (size_t)L->n_coded * L->enc[1].block_bytes, L->v_head, NULL, err);
        if (st) return st;
        L->n_coded += 16;
        L->n_win = 0;
    }
    return VQ_OK;
}

vq_status row_kv_attend(void *ctx, void *store, int layer, int n, const int *pos, const float *q, float *out,
                        vq_err *err) {
    vq_cuda_kvs *s = (vq_cuda_kvs *)store;
    vq_status st = one_token(n, err);
    if (st) return st;
    if (!s || layer < 0 || layer >= s->n_layers) return vq_err_set(err, VQ_ERR_ARG, "backend cuda: layer %d", layer);
    ON_DEVICE(ctx);
    const vq_cuda_kvl *L = &s->L[layer];
    vq_cuda_seq seq;
    memset(&seq, 0, sizeof seq);
    seq.k = L->k;
    seq.v = L->v;
    seq.k_head_stride = (int64_t)L->k_head;
    seq.v_head_stride = (int64_t)L->v_head;
    seq.n_coded = L->n_coded;
    seq.pos0 = 0;
    if (L->n_win) {
        seq.fp_k = L->win_k;
        seq.fp_v = L->win_v;
        seq.fp_pos = L->win_pos;
        seq.n_fp = L->n_win;
    }
    seq.q_pos = pos[0];
    seq.span = s->span[layer];
    /* the descriptor travels in stream order before the launch that reads it */
    cudaError_t e = cudaMemcpy(s->dseq, &seq, sizeof seq, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return cuerr(err, e, "sequence descriptor");
    return vq_cuda_attn_decode(&L->fmt, s->dseq, 1, seq.n_coded, q, out, s->ws, s->ws_bytes, NULL, err);
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

namespace {
size_t align16(size_t n) { return (n + 15) / 16 * 16; }
/* a layer's arrays: per KV head k_head / v_head bytes of codes (f16: rows), and for a coded
 * layer the 16-row fp16 block of each side plus its positions (win) */
void layer_geom(int coded, size_t kbb, size_t vrb, int head_dim, int n_kv_heads, int max_ctx, size_t *k_head,
                size_t *v_head, size_t *win) {
    if (!coded) {
        *k_head = *v_head = (size_t)max_ctx * head_dim * 2;
        *win = 0;
    } else {
        *k_head = align16((size_t)(max_ctx / 16) * kbb);
        *v_head = align16((size_t)(max_ctx / 16 * 16) * vrb);
        *win = 2 * (size_t)16 * n_kv_heads * head_dim * 2 + 16 * sizeof(int32_t);
    }
}
}

extern "C" size_t vq_cuda_kvs_layer_bytes(const struct vq_codec_state *k, const struct vq_codec_state *v, int n_heads,
                                          int n_kv_heads, int head_dim, int max_ctx) {
    vq_cuda_kv_format f;
    memset(&f, 0, sizeof f);
    const int coded = k && v && !vq_cuda_kv_format_init(&f, k, v, n_heads, n_kv_heads, NULL) && f.type != VQ_CUDA_KV_F16;
    size_t kh, vh, win;
    layer_geom(coded, f.k_block_bytes, f.v_row_bytes, head_dim, n_kv_heads, max_ctx, &kh, &vh, &win);
    return (kh + vh) * n_kv_heads + win;
}

extern "C" vq_status vq_cuda_kvs_check(const struct vq_codec_state *k, const struct vq_codec_state *v, int n_heads,
                                       int n_kv_heads, vq_err *err) {
    vq_cuda_kv_format f;
    vq_status st = vq_cuda_kv_format_init(&f, k, v, n_heads, n_kv_heads, err);
    if (!st && f.type != VQ_CUDA_KV_F16) {
        vq_cuda_enc e;
        st = vq_cuda_enc_init(&e, k, err);
        if (!st) st = vq_cuda_enc_init(&e, v, err);
    }
    return st;
}

extern "C" vq_cuda_kvs *vq_cuda_kvs_create(int n_layers, int n_heads, int n_kv_heads, int head_dim, int max_ctx,
                                           const int *span, float softcap, const struct vq_codec_state *const *states,
                                           vq_err *err) {
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
    s->L = (vq_cuda_kvl *)calloc((size_t)n_layers, sizeof(vq_cuda_kvl));
    if (!s->span || !s->L) {
        vq_cuda_kvs_destroy(s);
        vq_err_set(err, VQ_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (span) memcpy(s->span, span, (size_t)n_layers * sizeof(int));
    cudaError_t e = cudaSuccess;
    for (int l = 0; l < n_layers; l++) {
        vq_cuda_kvl *L = &s->L[l];
        vq_cuda_kv_format *f = &L->fmt;
        if (states && vq_cuda_kvs_check(states[2 * l], states[2 * l + 1], n_heads, n_kv_heads, err)) {
            vq_cuda_kvs_destroy(s);
            return NULL;
        }
        if (states) vq_cuda_kv_format_init(f, states[2 * l], states[2 * l + 1], n_heads, n_kv_heads, err);
        if (!states || f->type == VQ_CUDA_KV_F16) {
            memset(f, 0, sizeof *f);
            f->type = VQ_CUDA_KV_F16;
            f->head_dim = head_dim;
            f->n_heads = n_heads;
            f->n_kv_heads = n_kv_heads;
            for (int i = 0; i < head_dim; i++) f->rk[i] = f->rv[i] = 1.0f;
            f->k_block_bytes = f->v_row_bytes = (size_t)head_dim * 2;
        } else {
            L->coded = 1;
            vq_cuda_enc_init(&L->enc[0], states[2 * l], err);
            vq_cuda_enc_init(&L->enc[1], states[2 * l + 1], err);
        }
        size_t win = 0;
        layer_geom(L->coded, f->k_block_bytes, f->v_row_bytes, head_dim, n_kv_heads, max_ctx, &L->k_head, &L->v_head, &win);
        /* the workspace of the largest split the plan makes (it never splits into more parts) */
        const size_t ws = vq_cuda_attn_plan(f, 1, 1 << 28).workspace_bytes;
        if (ws > s->ws_bytes) s->ws_bytes = ws;
        if (e == cudaSuccess && L->k_head) e = cudaMalloc(&L->k, L->k_head * n_kv_heads);
        if (e == cudaSuccess && L->v_head) e = cudaMalloc(&L->v, L->v_head * n_kv_heads);
        s->bytes += (L->k_head + L->v_head) * n_kv_heads + win;   /* = vq_cuda_kvs_layer_bytes */
        if (L->coded) {
            const size_t wb = (size_t)16 * n_kv_heads * head_dim * 2;
            if (e == cudaSuccess) e = cudaMalloc(&L->win_k, wb);
            if (e == cudaSuccess) e = cudaMalloc(&L->win_v, wb);
            if (e == cudaSuccess) e = cudaMalloc((void **)&L->win_pos, 16 * sizeof(int32_t));
        }
    }
    if (e == cudaSuccess) e = cudaMalloc((void **)&s->dseq, sizeof(vq_cuda_seq));
    if (e == cudaSuccess) e = cudaMalloc(&s->ws, s->ws_bytes);
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
    for (int l = 0; s->L && l < s->n_layers; l++) {
        cudaFree(s->L[l].k);
        cudaFree(s->L[l].v);
        cudaFree(s->L[l].win_k);
        cudaFree(s->L[l].win_v);
        cudaFree(s->L[l].win_pos);
    }
    cudaFree(s->dseq);
    cudaFree(s->ws);
    free(s->span); free(s->L);
    free(s);
}

extern "C" void vq_cuda_kvs_clear(vq_cuda_kvs *s) {
    for (int l = 0; s && l < s->n_layers; l++) s->L[l].n_coded = s->L[l].n_win = 0;
}

/* keep positions < n: f16 rows stand alone; a coded layer keeps its whole blocks below n and,
 * when n cuts no block, the window rows below n (the CPU store keeps a coded block whole or not
 * at all, vq_kv_truncate: the session runs again what was dropped) */
extern "C" int vq_cuda_kvs_truncate(vq_cuda_kvs *s, int n) {
    if (!s) return 0;
    if (n < 0) n = 0;
    int kept = n;
    for (int l = 0; l < s->n_layers; l++) {
        vq_cuda_kvl *L = &s->L[l];
        if (!L->coded) { if (L->n_coded > n) L->n_coded = n; continue; }
        if (n < L->n_coded) { L->n_coded = n / 16 * 16; L->n_win = 0; }
        else if (n < L->n_coded + L->n_win) L->n_win = n - L->n_coded;
        if (L->n_coded + L->n_win < kept) kept = L->n_coded + L->n_win;
    }
    return kept;
}

extern "C" size_t vq_cuda_kvs_bytes(const vq_cuda_kvs *s) { return s ? s->bytes : 0; }

extern "C" int vq_cuda_kvs_rows(const vq_cuda_kvs *s, int layer, int *n_win) {
    *n_win = s->L[layer].n_win;
    return s->L[layer].n_coded;
}

/* the layer's bytes <-> host arrays (vq_store_rows, backend/ops.h) */
extern "C" vq_status vq_cuda_kvs_get(vq_cuda_kvs *s, int layer, vq_store_rows *r, vq_err *err) {
    const vq_cuda_kvl *L = &s->L[layer];
    cudaError_t e = on_device(s->device);
    if (r->n_coded != L->n_coded || r->n_win != L->n_win)
        return vq_err_set(err, VQ_ERR_ARG, "backend cuda: layer %d holds %d + %d rows", layer, L->n_coded, L->n_win);
    const size_t nk = L->coded ? (size_t)(L->n_coded / 16) * L->fmt.k_block_bytes : (size_t)L->n_coded * L->fmt.k_block_bytes;
    const size_t nv = (size_t)L->n_coded * L->fmt.v_row_bytes, wb = (size_t)L->n_win * s->n_kv_heads * s->head_dim * 2;
    for (int h = 0; e == cudaSuccess && h < s->n_kv_heads; h++) {
        e = cudaMemcpy(r->k + h * r->k_head, (const uint8_t *)L->k + h * L->k_head, nk, cudaMemcpyDeviceToHost);
        if (e == cudaSuccess) e = cudaMemcpy(r->v + h * r->v_head, (const uint8_t *)L->v + h * L->v_head, nv, cudaMemcpyDeviceToHost);
    }
    if (e == cudaSuccess && wb) e = cudaMemcpy(r->win_k, L->win_k, wb, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess && wb) e = cudaMemcpy(r->win_v, L->win_v, wb, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? VQ_OK : cuerr(err, e, "reading the store");
}

extern "C" vq_status vq_cuda_kvs_put(vq_cuda_kvs *s, int layer, const vq_store_rows *r, vq_err *err) {
    vq_cuda_kvl *L = &s->L[layer];
    if (L->n_coded || L->n_win) return vq_err_set(err, VQ_ERR_STATE, "backend cuda: layer %d is not empty", layer);
    if (r->n_coded < 0 || r->n_win < 0 || r->n_coded + r->n_win > s->max_ctx || (L->coded && (r->n_coded % 16 || r->n_win > 15)) ||
        (!L->coded && r->n_win))
        return vq_err_set(err, VQ_ERR_ARG, "backend cuda: layer %d cannot take %d coded and %d window rows", layer,
                          r->n_coded, r->n_win);
    cudaError_t e = on_device(s->device);
    const size_t nk = L->coded ? (size_t)(r->n_coded / 16) * L->fmt.k_block_bytes : (size_t)r->n_coded * L->fmt.k_block_bytes;
    const size_t nv = (size_t)r->n_coded * L->fmt.v_row_bytes, wb = (size_t)r->n_win * s->n_kv_heads * s->head_dim * 2;
    for (int h = 0; e == cudaSuccess && h < s->n_kv_heads; h++) {
        e = cudaMemcpy((uint8_t *)L->k + h * L->k_head, r->k + h * r->k_head, nk, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) e = cudaMemcpy((uint8_t *)L->v + h * L->v_head, r->v + h * r->v_head, nv, cudaMemcpyHostToDevice);
    }
    if (e == cudaSuccess && wb) e = cudaMemcpy(L->win_k, r->win_k, wb, cudaMemcpyHostToDevice);
    if (e == cudaSuccess && wb) e = cudaMemcpy(L->win_v, r->win_v, wb, cudaMemcpyHostToDevice);
    int32_t pos[16];
    for (int i = 0; i < r->n_win; i++) pos[i] = r->n_coded + i;
    if (e == cudaSuccess && r->n_win) e = cudaMemcpy(L->win_pos, pos, (size_t)r->n_win * 4, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return cuerr(err, e, "writing the store");
    L->n_coded = r->n_coded;
    L->n_win = r->n_win;
    return VQ_OK;
}


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
                       const int *span, float softcap, const struct vq_codec_state *const *st, vq_err *err) {
    cudaError_t e = on_device(((const vq_cuda_row *)ctx)->device);
    if (e != cudaSuccess) { cuerr(err, e, "selecting the device"); return NULL; }
    vq_cuda_kvs *s = vq_cuda_kvs_create(n_layers, n_heads, n_kv_heads, head_dim, max_ctx, span, softcap, st, err);
    if (!s && err && err->code == VQ_ERR_ARG) err->code = VQ_ERR_UNSUPPORTED;   /* the model is fine; the store lacks it */
    return s;
}
void dev_store_free(void *store) { vq_cuda_kvs_destroy((vq_cuda_kvs *)store); }
int dev_store_truncate(void *store, int n) { return vq_cuda_kvs_truncate((vq_cuda_kvs *)store, n); }
size_t dev_store_bytes(const void *store) { return vq_cuda_kvs_bytes((const vq_cuda_kvs *)store); }
vq_status dev_store_check(const struct vq_codec_state *k, const struct vq_codec_state *v, int n_heads, int n_kv_heads,
                          vq_err *err) {
    vq_status st = vq_cuda_kvs_check(k, v, n_heads, n_kv_heads, err);
    if (st && err) err->code = VQ_ERR_UNSUPPORTED;
    return st ? VQ_ERR_UNSUPPORTED : VQ_OK;
}
int dev_store_rows(const void *store, int layer, int *n_win) {
    return vq_cuda_kvs_rows((const vq_cuda_kvs *)store, layer, n_win);
}
vq_status dev_store_get(void *store, int layer, vq_store_rows *r, vq_err *err) {
    return vq_cuda_kvs_get((vq_cuda_kvs *)store, layer, r, err);
}
vq_status dev_store_put(void *store, int layer, const vq_store_rows *r, vq_err *err) {
    return vq_cuda_kvs_put((vq_cuda_kvs *)store, layer, r, err);
}
}  // namespace

extern "C" const vq_device vq_device_cuda = {
    "cuda", &vq_ops_cuda, NULL, "f16", dev_count, dev_open, dev_mirror, dev_bytes, dev_describe, dev_close,
    dev_store_create, dev_store_free, dev_store_truncate, dev_store_bytes, 16, dev_store_check, dev_store_rows,
    dev_store_get, dev_store_put,
};
