/* attn_host.cu: the host side of vq_cuda.h: the split plan, the launches (split kernel of the
 * format's code type, then the combine kernel) and the runtime helpers for C callers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cuda/attn_kernel.cuh"
#include "backend/cuda/attn_tc.cuh"

extern "C" {
vq_status vq_err_set(vq_err *err, vq_status code, const char *fmt, ...);
}

namespace {
int sm_count() {
    static int n = 0;
    if (!n) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            n = 132;
    }
    return n;
}
int gpad(int g) { return g <= 1 ? 1 : g <= 2 ? 2 : g <= 4 ? 4 : 8; }
vq_status cuerr(vq_err *err, cudaError_t e, const char *what) {
    return vq_err_set(err, VQ_ERR_IO, "cuda: %s: %s", what, cudaGetErrorString(e));
}
}  // namespace

extern "C" int vq_cuda_attn_tc(const vq_cuda_kv_format *f) {
    /* opt-in until the kernel has run on a GPU (docs/cuda.md): VQ_CUDA_ATTN=tc */
    if (f->f32_only) return 0;
    const char *e = getenv("VQ_CUDA_ATTN");
    if (!e || strcmp(e, "tc")) return 0;
    return f->type == VQ_CUDA_KV_Q8_0 || f->type == VQ_CUDA_KV_Q4_0 || (f->type == VQ_CUDA_KV_TQ4 && !f->norm32);
}

extern "C" vq_cuda_plan vq_cuda_attn_plan(const vq_cuda_kv_format *f, int n_seqs, int max_coded) {
    vq_cuda_plan pl;
    /* about one wave of blocks at 4 per multiprocessor; VQ_CUDA_BLOCKS_PER_SM overrides (tuning) */
    int per_sm = 4;
    const char *e = getenv("VQ_CUDA_BLOCKS_PER_SM");
    if (e && atoi(e) > 0) per_sm = atoi(e);
    const long target = (long)sm_count() * per_sm;
    const long units = (long)(n_seqs > 0 ? n_seqs : 1) * f->n_kv_heads;
    const long per_unit = (target + units - 1) / units;
    long chunk = ((long)max_coded + per_unit - 1) / per_unit;
    chunk = (chunk + vqc::TT - 1) / vqc::TT * vqc::TT;   /* whole tiles of either kernel (TT = 2 TILE) */
    if (chunk < 4 * vqc::TILE) chunk = 4 * vqc::TILE;
    pl.chunk = (int)chunk;
    pl.n_splits = max_coded > 0 ? (int)((max_coded + chunk - 1) / chunk) : 1;
    const int G = gpad(f->n_heads / f->n_kv_heads);
    pl.workspace_bytes = (size_t)(n_seqs > 0 ? n_seqs : 1) * f->n_kv_heads * (size_t)(pl.n_splits + 1) * G *
                         (size_t)(f->head_dim + 2) * sizeof(float);
    return pl;
}

extern "C" vq_status vq_cuda_attn_decode(const vq_cuda_kv_format *f, const vq_cuda_seq *seqs, int n_seqs,
                                         int max_coded, const float *q, float *out, void *workspace,
                                         size_t workspace_bytes, void *stream, vq_err *err) {
    if (n_seqs <= 0) return VQ_OK;
    if (n_seqs > 65535 || f->n_heads > 65535)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: %d sequences x %d heads: at most 65535 of each", n_seqs, f->n_heads);
    if (f->head_dim != 64 && f->head_dim != 128)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: head_dim %d has no kernel (64 or 128)", f->head_dim);
    const int g = f->n_kv_heads > 0 ? f->n_heads / f->n_kv_heads : 0;
    if (g < 1 || g > VQ_CUDA_MAX_G || g * f->n_kv_heads != f->n_heads)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: %d query heads over %d KV heads", f->n_heads, f->n_kv_heads);
    const vq_cuda_plan pl = vq_cuda_attn_plan(f, n_seqs, max_coded);
    if (workspace_bytes < pl.workspace_bytes)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: workspace of %zu bytes, the plan needs %zu", workspace_bytes,
                          pl.workspace_bytes);
    const int G = gpad(g);
    vqc::Params p;
    memset(&p, 0, sizeof p);
    p.f = *f;
    p.seqs = seqs;
    p.q = q;
    p.out = out;
    p.n_seqs = n_seqs;
    p.chunk = pl.chunk;
    p.n_splits = pl.n_splits;
    p.qscale = (float)(1.4426950408889634 / sqrt((double)f->head_dim));
    p.ml = (float *)workspace;
    p.acc = p.ml + (size_t)n_seqs * f->n_kv_heads * (size_t)(pl.n_splits + 1) * G * 2;
    cudaStream_t st = (cudaStream_t)stream;
    const dim3 grid(pl.n_splits + 1, f->n_kv_heads, n_seqs);
    cudaError_t e;
    if (vq_cuda_attn_tc(f)) {   /* coded splits on the tensor cores, then split 0 (fp16 rows) on the float32 kernel */
        const dim3 tgrid(pl.n_splits, f->n_kv_heads, n_seqs), fgrid(1, f->n_kv_heads, n_seqs);
        e = f->type == VQ_CUDA_KV_Q8_0   ? vqc::launch_tc_q8(f->head_dim, G, p, tgrid, st)
            : f->type == VQ_CUDA_KV_Q4_0 ? vqc::launch_tc_q4(f->head_dim, G, p, tgrid, st)
                                         : vqc::launch_tc_tq4(f->head_dim, G, p, tgrid, st);
        if (e != cudaSuccess) return cuerr(err, e, "attention split kernel launch (tensor cores)");
        e = f->type == VQ_CUDA_KV_Q8_0   ? vqc::launch_split_q8(f->head_dim, G, p, fgrid, st)
            : f->type == VQ_CUDA_KV_Q4_0 ? vqc::launch_split_q4(f->head_dim, G, p, fgrid, st)
                                         : vqc::launch_split_tq4(f->head_dim, G, p, fgrid, st);
    } else switch (f->type) {
    case VQ_CUDA_KV_F16: e = vqc::launch_split_f16(f->head_dim, G, p, grid, st); break;
    case VQ_CUDA_KV_Q8_0: e = vqc::launch_split_q8(f->head_dim, G, p, grid, st); break;
    case VQ_CUDA_KV_Q4_0: e = vqc::launch_split_q4(f->head_dim, G, p, grid, st); break;
    case VQ_CUDA_KV_TQ4: e = vqc::launch_split_tq4(f->head_dim, G, p, grid, st); break;
    default: return vq_err_set(err, VQ_ERR_ARG, "cuda: unknown code type %d", f->type);
    }
    if (e != cudaSuccess) return cuerr(err, e, "attention split kernel launch");
    /* combine: one block per (sequence, query head); the splits' weights in dynamic shared memory */
    const dim3 cgrid(n_seqs, f->n_heads);
    const size_t csm = (size_t)pl.n_splits * sizeof(float);
    if (csm > 48 * 1024)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: %d splits: at most %d (context %d)", pl.n_splits, 12288, max_coded);
    if (f->head_dim == 64) {
        switch (G) {
        case 1: vqc::attn_combine<64, 1><<<cgrid, vqc::NT, csm, st>>>(p); break;
        case 2: vqc::attn_combine<64, 2><<<cgrid, vqc::NT, csm, st>>>(p); break;
        case 4: vqc::attn_combine<64, 4><<<cgrid, vqc::NT, csm, st>>>(p); break;
        default: vqc::attn_combine<64, 8><<<cgrid, vqc::NT, csm, st>>>(p); break;
        }
    } else {
        switch (G) {
        case 1: vqc::attn_combine<128, 1><<<cgrid, vqc::NT, csm, st>>>(p); break;
        case 2: vqc::attn_combine<128, 2><<<cgrid, vqc::NT, csm, st>>>(p); break;
        case 4: vqc::attn_combine<128, 4><<<cgrid, vqc::NT, csm, st>>>(p); break;
        default: vqc::attn_combine<128, 8><<<cgrid, vqc::NT, csm, st>>>(p); break;
        }
    }
    e = cudaGetLastError();
    if (e != cudaSuccess) return cuerr(err, e, "attention combine kernel launch");
    return VQ_OK;
}

extern "C" int vq_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}
extern "C" vq_status vq_cuda_device_name(char *buf, size_t n, vq_err *err) {
    int dev = 0;
    cudaDeviceProp pr;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&pr, dev);
    if (e != cudaSuccess) return cuerr(err, e, "device properties");
    snprintf(buf, n, "%s (sm_%d%d, %d SMs, %.0f MiB, L2 %d KiB)", pr.name, pr.major, pr.minor, pr.multiProcessorCount,
             pr.totalGlobalMem / 1048576.0, pr.l2CacheSize / 1024);
    return VQ_OK;
}
extern "C" vq_status vq_cuda_malloc(void **p, size_t bytes, vq_err *err) {
    cudaError_t e = cudaMalloc(p, bytes);
    return e == cudaSuccess ? VQ_OK : cuerr(err, e, "cudaMalloc");
}
extern "C" void vq_cuda_free(void *p) {
    if (p) cudaFree(p);
}
extern "C" vq_status vq_cuda_memcpy_h2d(void *dst, const void *src, size_t bytes, vq_err *err) {
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? VQ_OK : cuerr(err, e, "copy to the device");
}
extern "C" vq_status vq_cuda_memcpy_d2h(void *dst, const void *src, size_t bytes, vq_err *err) {
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? VQ_OK : cuerr(err, e, "copy from the device");
}
extern "C" vq_status vq_cuda_memset(void *dst, int byte, size_t bytes, vq_err *err) {
    cudaError_t e = cudaMemset(dst, byte, bytes);
    return e == cudaSuccess ? VQ_OK : cuerr(err, e, "cudaMemset");
}
extern "C" vq_status vq_cuda_sync(vq_err *err) {
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? VQ_OK : cuerr(err, e, "kernel run");
}
