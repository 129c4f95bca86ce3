/* ops.cu: the CUDA row of the forward-pass ops (vq_cuda.h, "forward-pass ops"; docs/cuda.md):
 * matvec straight from the GGUF blocks (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K), the
 * embedding row, RMSNorm, RoPE from the layer's inverse-frequency table, SwiGLU / GeGLU, add,
 * scale and argmax. Decode (one token): every op works on one row of activations, float32.
 *
 * Matvec: one warp per output row, 4 rows per block of 128 threads. A row is cut into units of
 * 32 weights (a Q8_0/Q4_0/Q4_1 block, an eighth of a K super-block, 32 dense values); lane l
 * takes units l, l+32, ...: the warp reads 32 consecutive units at a time (coalesced), each lane
 * dots its unit with 32 activations from global memory (L1-cached), and the warp's partial sums
 * are halved five times through shuffles. Quantized blocks are read with 16-bit loads (their
 * sizes keep only 2-byte alignment); each unit sums q*x first and applies its scale (and min)
 * once: y += d * sum(q x) - m * sum(x). */
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "backend/cuda/vq_cuda.h"
#include "backend/cuda/wdecode.cuh"

extern "C" {
vq_status vq_err_set(vq_err *err, vq_status code, const char *fmt, ...);
}

namespace {
using namespace vqw;

vq_status cuerr(vq_err *err, cudaError_t e, const char *what) {
    return vq_err_set(err, VQ_ERR_IO, "cuda: %s: %s", what, cudaGetErrorString(e));
}
vq_status launched(vq_err *err, const char *what) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? VQ_OK : cuerr(err, e, what);
}

__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

template <int T>
__global__ void __launch_bounds__(128) matvec_blocks(const uint8_t *__restrict__ W, size_t row_bytes, int rows,
                                                     int cols, const float *__restrict__ x, float *__restrict__ y) {
    const int lane = threadIdx.x & 31, r = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (r >= rows) return;
    const uint8_t *row = W + (size_t)r * row_bytes;
    const int units = cols / 32;
    float s = 0.0f;
    for (int u = lane; u < units; u += 32)
        s += unit<T>::dot(row + (size_t)(u / unit<T>::per_block) * unit<T>::bytes, u % unit<T>::per_block, x + 32 * u);
    s = warp_sum(s);
    if (lane == 0) y[r] = s;
}

template <int T> __device__ __forceinline__ float dense(const void *W, size_t i) {
    if (T == T_F32) return ((const float *)W)[i];
    if (T == T_F16) return __half2float(((const __half *)W)[i]);
    return __bfloat162float(((const __nv_bfloat16 *)W)[i]);
}

/* F32 / F16 / BF16: lane l takes 8 consecutive values at 8l, 8l + 256, ... with 16-byte loads
 * when every row is 16-byte aligned (vec), else single values */
template <int T>
__global__ void __launch_bounds__(128) matvec_dense(const void *__restrict__ W, int rows, int cols, int vec,
                                                    const float *__restrict__ x, float *__restrict__ y) {
    const int lane = threadIdx.x & 31, r = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (r >= rows) return;
    const size_t base = (size_t)r * cols;
    float s = 0.0f;
    if (vec && T != T_F32) {
        const uint4 *row = (const uint4 *)((const uint16_t *)W + base);
        for (int c = lane * 8; c < cols; c += 256) {
            uint4 v = row[c / 8];
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float a, b;
                if (T == T_F16) {
                    a = __half2float(__ushort_as_half((unsigned short)(w[k] & 0xffff)));
                    b = __half2float(__ushort_as_half((unsigned short)(w[k] >> 16)));
                } else {
                    a = __uint_as_float(w[k] << 16);
                    b = __uint_as_float(w[k] & 0xffff0000u);
                }
                s += a * x[c + 2 * k] + b * x[c + 2 * k + 1];
            }
        }
    } else {
        for (int c = lane; c < cols; c += 32) s += dense<T>(W, base + c) * x[c];
    }
    s = warp_sum(s);
    if (lane == 0) y[r] = s;
}

template <int T>
__global__ void get_row_blocks(const uint8_t *__restrict__ W, size_t row_bytes, int cols, int row,
                               float *__restrict__ out) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const uint8_t *b = W + (size_t)row * row_bytes + (size_t)(c / (32 * unit<T>::per_block)) * unit<T>::bytes;
    out[c] = elem<T>(b, (c / 32) % unit<T>::per_block, c % 32);
}

template <int T>
__global__ void get_row_dense(const void *__restrict__ W, int cols, int row, float *__restrict__ out) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < cols) out[c] = dense<T>(W, (size_t)row * cols + c);
}

/* RMSNorm, one block of 256 threads per row: out = w * (x / sqrt(mean(x^2) + eps)), the CPU
 * kernel's order of operations (kernels/ops.c) */
__global__ void __launch_bounds__(256) rmsnorm_k(float *out, const float *x, const float *__restrict__ w, int dim,
                                                 float eps) {   /* out may be x (no __restrict__) */
    __shared__ float part[8];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *o = out + (size_t)blockIdx.x * dim;
    float s = 0.0f;
    for (int i = threadIdx.x; i < dim; i += 256) s += xr[i] * xr[i];
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) ss += part[k];
    ss /= (float)dim;
    ss += eps;
    ss = 1.0f / sqrtf(ss);
    for (int i = threadIdx.x; i < dim; i += 256) o[i] = w[i] * (ss * xr[i]);
}

/* RoPE: one thread per (head, pair); the CPU kernel's angles (float(pos) * inv_freq[k]) */
__global__ void rope_k(float *__restrict__ x, int n_heads, int head_dim, int half, int pos,
                       const float *__restrict__ inv_freq, float mscale, int neox) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_heads * half) return;
    const int h = i / half, k = i % half;
    const float val = (float)pos * inv_freq[k];
    /* the angle reduced to [-pi, pi] in double (exact enough: |val| < 2^24 gives an error below
     * 2^-28), rounded to float, then the fast sine and cosine, whose absolute error on [-pi, pi]
     * is at most 2^-21.41 and 2^-21.19 (CUDA C++ Programming Guide, intrinsic functions).
     * cosf/sinf would carry a slow path for huge arguments that needs local memory. */
    const double twopi = 6.283185307179586;
    const float r = (float)((double)val - rint((double)val * (1.0 / twopi)) * twopi);
    float cs = __cosf(r), sn = __sinf(r);
    if (mscale != 1.0f) { cs *= mscale; sn *= mscale; }
    float *v = x + (size_t)h * head_dim;
    const int a = neox ? k : 2 * k, b = neox ? k + half : a + 1;
    const float v0 = v[a], v1 = v[b];
    v[a] = v0 * cs - v1 * sn;
    v[b] = v0 * sn + v1 * cs;
}

__global__ void glu_k(float *__restrict__ gate, const float *__restrict__ up, int n, int gelu) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = gate[i];
    if (gelu) {
        const float c = 0.7978845608028654f;   /* sqrt(2 / pi) */
        gate[i] = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * up[i];
    } else {
        float v = x;
        v *= 1.0f / (1.0f + expf(-v));
        gate[i] = v * up[i];
    }
}

__global__ void add_k(float *__restrict__ y, const float *__restrict__ x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
__global__ void scale_k(float *__restrict__ y, float a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= a;
}

__global__ void softcap_k(float *__restrict__ y, float cap, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = cap * tanhf(y[i] / cap);
}

/* one row of K or V (n_kv_heads x head_dim floats) into an f16 store, head h at dst + h * stride */
__global__ void kv_put_f16_k(uint8_t *__restrict__ dst, size_t stride, int head_dim, int n_kv_heads, int row,
                             const float *__restrict__ src) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_kv_heads * head_dim) return;
    const int h = i / head_dim, c = i % head_dim;
    ((__half *)(dst + (size_t)h * stride))[(size_t)row * head_dim + c] = __float2half_rn(src[i]);
}

/* argmax, one block of 1024 threads: the largest value, the smallest index among equals (the
 * CPU sampler's greedy choice); NaN never wins */
__global__ void __launch_bounds__(1024) argmax_k(const float *__restrict__ x, int n, int *__restrict__ out) {
    __shared__ float bv[32];
    __shared__ int bi[32];
    float v = -INFINITY;
    int idx = n;
    for (int i = threadIdx.x; i < n; i += 1024)
        if (x[i] > v || (idx == n && x[i] == v)) { v = x[i]; idx = i; }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
        if (v2 > v || (v2 == v && i2 < idx)) { v = v2; idx = i2; }
    }
    if ((threadIdx.x & 31) == 0) { bv[threadIdx.x >> 5] = v; bi[threadIdx.x >> 5] = idx; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < 32; k++)
            if (bv[k] > v || (bv[k] == v && bi[k] < idx)) { v = bv[k]; idx = bi[k]; }
        *out = idx < n ? idx : 0;
    }
}

int blocks_of(long n, int per) { return (int)((n + per - 1) / per); }

/* the weight types a kernel reads: block elements and bytes */
struct wtype_info { uint32_t type; int block, bytes; };
const wtype_info WT[] = {
    {T_F32, 1, 4}, {T_F16, 1, 2}, {T_BF16, 1, 2}, {T_Q8_0, 32, 34}, {T_Q4_0, 32, 18},
    {T_Q4_1, 32, 20}, {T_Q4_K, 256, 144}, {T_Q6_K, 256, 210},
};
const wtype_info *wt_find(uint32_t type) {
    for (const wtype_info &w : WT)
        if (w.type == type) return &w;
    return nullptr;
}
}  // namespace

extern "C" int vq_cuda_matvec_supported(uint32_t type, int cols) {
    const wtype_info *w = wt_find(type);
    if (!w || cols <= 0) return 0;
    return w->block == 1 || cols % w->block == 0;
}

extern "C" size_t vq_cuda_weight_bytes(uint32_t type, int64_t rows, int64_t cols) {
    const wtype_info *w = wt_find(type);
    if (!w || cols <= 0 || rows < 0 || cols % w->block) return 0;
    return (size_t)rows * (size_t)(cols / w->block) * (size_t)w->bytes;
}

extern "C" vq_status vq_cuda_matvec(uint32_t type, const void *W, int rows, int cols, const float *x, float *y,
                                    void *stream, vq_err *err) {
    if (!vq_cuda_matvec_supported(type, cols) || rows <= 0)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: no matvec kernel for weight type %u with %d x %d", type, rows, cols);
    cudaStream_t st = (cudaStream_t)stream;
    const int grid = blocks_of(rows, 4);
    const size_t rb = vq_cuda_weight_bytes(type, 1, cols);
    const uint8_t *w8 = (const uint8_t *)W;
    const int vec = cols % 8 == 0 && ((uintptr_t)W & 15) == 0;
    switch (type) {
    case T_F32: matvec_dense<T_F32><<<grid, 128, 0, st>>>(W, rows, cols, 0, x, y); break;
    case T_F16: matvec_dense<T_F16><<<grid, 128, 0, st>>>(W, rows, cols, vec, x, y); break;
    case T_BF16: matvec_dense<T_BF16><<<grid, 128, 0, st>>>(W, rows, cols, vec, x, y); break;
    case T_Q8_0: matvec_blocks<T_Q8_0><<<grid, 128, 0, st>>>(w8, rb, rows, cols, x, y); break;
    case T_Q4_0: matvec_blocks<T_Q4_0><<<grid, 128, 0, st>>>(w8, rb, rows, cols, x, y); break;
    case T_Q4_1: matvec_blocks<T_Q4_1><<<grid, 128, 0, st>>>(w8, rb, rows, cols, x, y); break;
    case T_Q4_K: matvec_blocks<T_Q4_K><<<grid, 128, 0, st>>>(w8, rb, rows, cols, x, y); break;
    case T_Q6_K: matvec_blocks<T_Q6_K><<<grid, 128, 0, st>>>(w8, rb, rows, cols, x, y); break;
    }
    return launched(err, "matvec");
}

extern "C" vq_status vq_cuda_get_row(uint32_t type, const void *W, int cols, int row, float *out, void *stream,
                                     vq_err *err) {
    if (!vq_cuda_matvec_supported(type, cols) || row < 0)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: no row kernel for weight type %u with %d columns", type, cols);
    cudaStream_t st = (cudaStream_t)stream;
    const int grid = blocks_of(cols, 256);
    const size_t rb = vq_cuda_weight_bytes(type, 1, cols);
    const uint8_t *w8 = (const uint8_t *)W;
    switch (type) {
    case T_F32: get_row_dense<T_F32><<<grid, 256, 0, st>>>(W, cols, row, out); break;
    case T_F16: get_row_dense<T_F16><<<grid, 256, 0, st>>>(W, cols, row, out); break;
    case T_BF16: get_row_dense<T_BF16><<<grid, 256, 0, st>>>(W, cols, row, out); break;
    case T_Q8_0: get_row_blocks<T_Q8_0><<<grid, 256, 0, st>>>(w8, rb, cols, row, out); break;
    case T_Q4_0: get_row_blocks<T_Q4_0><<<grid, 256, 0, st>>>(w8, rb, cols, row, out); break;
    case T_Q4_1: get_row_blocks<T_Q4_1><<<grid, 256, 0, st>>>(w8, rb, cols, row, out); break;
    case T_Q4_K: get_row_blocks<T_Q4_K><<<grid, 256, 0, st>>>(w8, rb, cols, row, out); break;
    case T_Q6_K: get_row_blocks<T_Q6_K><<<grid, 256, 0, st>>>(w8, rb, cols, row, out); break;
    }
    return launched(err, "get_row");
}

extern "C" vq_status vq_cuda_rmsnorm(float *out, const float *x, const float *w, int n_rows, int dim, float eps,
                                     void *stream, vq_err *err) {
    if (n_rows <= 0 || dim <= 0) return vq_err_set(err, VQ_ERR_ARG, "cuda: rmsnorm of %d rows of %d", n_rows, dim);
    rmsnorm_k<<<n_rows, 256, 0, (cudaStream_t)stream>>>(out, x, w, dim, eps);
    return launched(err, "rmsnorm");
}

extern "C" vq_status vq_cuda_rope(float *x, int n_heads, int head_dim, int rot_dim, int pos, const float *inv_freq,
                                  float mscale, int neox, void *stream, vq_err *err) {
    if (rot_dim > head_dim) rot_dim = head_dim;
    rot_dim &= ~1;
    const int half = rot_dim / 2;
    if (n_heads <= 0 || half <= 0) return VQ_OK;
    rope_k<<<blocks_of((long)n_heads * half, 128), 128, 0, (cudaStream_t)stream>>>(x, n_heads, head_dim, half, pos,
                                                                                  inv_freq, mscale, neox);
    return launched(err, "rope");
}

extern "C" vq_status vq_cuda_glu(float *gate, const float *up, int n, int gelu, void *stream, vq_err *err) {
    if (n <= 0) return VQ_OK;
    glu_k<<<blocks_of(n, 256), 256, 0, (cudaStream_t)stream>>>(gate, up, n, gelu);
    return launched(err, "glu");
}

extern "C" vq_status vq_cuda_add(float *y, const float *x, int n, void *stream, vq_err *err) {
    if (n <= 0) return VQ_OK;
    add_k<<<blocks_of(n, 256), 256, 0, (cudaStream_t)stream>>>(y, x, n);
    return launched(err, "add");
}

extern "C" vq_status vq_cuda_scale(float *y, float a, int n, void *stream, vq_err *err) {
    if (n <= 0) return VQ_OK;
    scale_k<<<blocks_of(n, 256), 256, 0, (cudaStream_t)stream>>>(y, a, n);
    return launched(err, "scale");
}

extern "C" vq_status vq_cuda_argmax(const float *x, int n, int *out, void *stream, vq_err *err) {
    if (n <= 0) return vq_err_set(err, VQ_ERR_ARG, "cuda: argmax of %d values", n);
    argmax_k<<<1, 1024, 0, (cudaStream_t)stream>>>(x, n, out);
    return launched(err, "argmax");
}

extern "C" vq_status vq_cuda_softcap(float *y, float cap, int n, void *stream, vq_err *err) {
    if (n <= 0) return VQ_OK;
    softcap_k<<<blocks_of(n, 256), 256, 0, (cudaStream_t)stream>>>(y, cap, n);
    return launched(err, "softcap");
}

extern "C" vq_status vq_cuda_kv_put_f16(void *dst, size_t head_stride, int n_kv_heads, int head_dim, int row,
                                        const float *src, void *stream, vq_err *err) {
    const int n = n_kv_heads * head_dim;
    if (n <= 0 || row < 0) return vq_err_set(err, VQ_ERR_ARG, "cuda: f16 row %d of %d x %d", row, n_kv_heads, head_dim);
    kv_put_f16_k<<<blocks_of(n, 256), 256, 0, (cudaStream_t)stream>>>((uint8_t *)dst, head_stride, head_dim,
                                                                       n_kv_heads, row, src);
    return launched(err, "kv_put_f16");
}
