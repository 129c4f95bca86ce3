/* kv_encode.cu: K/V rows encoded on the device (vq_cuda.h vq_cuda_kv_encode; the steps and why
 * their bytes are the CPU codec's: kv_encode.cuh). One block of 128 threads per KV head; the rows
 * one after another, each through shared memory: load (coordinate per thread), the TQ4 norm (one
 * thread, index order), the input step, the butterflies, the scale, the groups' scales (a thread
 * per group of 32, index order), the code bytes (a thread per byte). Not fast: it runs once per
 * 16 decoded tokens per layer and side. */
#include <cuda_runtime.h>
#include "backend/cuda/kv_encode.cuh"

extern "C" {
vq_status vq_err_set(vq_err *err, vq_status code, const char *fmt, ...);
}

namespace {
__global__ void __launch_bounds__(128) kv_encode_kernel(const vq_cuda_enc e, int H, int rows, const uint16_t *win,
                                                        int n_win, const float *src, uint8_t *dst,
                                                        size_t head_stride) {
    __shared__ float x[VQ_CUDA_MAX_D], y[VQ_CUDA_MAX_D], gid[VQ_CUDA_MAX_D / 32];
    __shared__ double s_nrm;
    const int h = blockIdx.x, i = threadIdx.x, d = e.d;
    uint8_t *base = dst + (size_t)h * head_stride;
    for (int t = 0; t < rows; t++) {
        uint8_t *out = e.lanes ? base : base + (size_t)t * e.block_bytes;
        const int r = e.lanes ? t : 0;
        if (i < d) x[i] = vqe::in_value(win, n_win, src, H, h, d, t, i);
        __syncthreads();
        if (e.type == VQ_CUDA_KV_TQ4 && i == 0) s_nrm = vqe::tq_norm(x, d);
        __syncthreads();
        const double nrm = e.type == VQ_CUDA_KV_TQ4 ? s_nrm : 0.0;
        const int deg = e.type == VQ_CUDA_KV_TQ4 && vqe::tq_degenerate(nrm);
        const double inv = e.type == VQ_CUDA_KV_TQ4 && !deg ? vqe::ddiv(1.0, nrm) : 0.0;
        if (i < d) y[i] = vqe::step_in(&e, x, i, inv, deg);
        __syncthreads();
        if (e.rotate) {
            for (int st = 1; st < d; st *= 2) {
                if (i < d / 2) vqe::step_fwht(y, i, st);
                __syncthreads();
            }
            if (e.type != VQ_CUDA_KV_TQ4 && i < d) y[i] = vqe::step_scale(&e, y[i]);
            __syncthreads();
        }
        if (e.type == VQ_CUDA_KV_TQ4) {
            if (i == 0) vqe::tq_put_norm(&e, nrm, r, out);
        } else if (i < d / 32) {
            gid[i] = vqe::step_group(&e, y, i, r, out);
        }
        __syncthreads();
        if (i < vqe::code_bytes(&e)) vqe::step_code(&e, y, gid, i, r, out);
        __syncthreads();
    }
}
}  // namespace

extern "C" vq_status vq_cuda_kv_encode(const vq_cuda_enc *e, int n_kv_heads, int rows, const void *win, int n_win,
                                       const float *src, void *dst, size_t head_stride, void *stream, vq_err *err) {
    if (!e || e->d < 32 || e->d > VQ_CUDA_MAX_D || e->d % 32 || (e->lanes && rows != 16) || rows < 1 ||
        n_win < 0 || n_win > rows || n_kv_heads < 1)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: kv_encode: %d rows (%d from the window), head_dim %d", rows, n_win,
                          e ? e->d : 0);
    kv_encode_kernel<<<n_kv_heads, 128, 0, (cudaStream_t)stream>>>(*e, n_kv_heads, rows, (const uint16_t *)win, n_win,
                                                                   src, (uint8_t *)dst, head_stride);
    cudaError_t c = cudaGetLastError();
    return c == cudaSuccess ? VQ_OK
                            : vq_err_set(err, VQ_ERR_IO, "cuda: kv_encode: %s", cudaGetErrorString(c));
}
