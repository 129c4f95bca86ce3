/* attn_kernel.cuh: decode attention on KV codes, one template for every code type (KT), head
 * dimension (D) and query heads per KV head (G, padded to 1, 2, 4 or 8). Included by one .cu file
 * per code type (attn_f16.cu, ...), which instantiate it; attn_host.cu plans, launches and
 * combines. docs/cuda.md has the design; in short:
 *
 * Grid (n_splits + 1, n_kv_heads, n_seqs). Block x == 0 takes the sequence's full-precision rows
 * (sinks, window, the partial block: fp16, unrotated); block x == i > 0 takes coded rows
 * [(i-1) chunk, i chunk). Each block holds the G query heads of its KV head (GQA: the codes are
 * read once for all of them) and streams tiles of 64 rows (4 key blocks of 16) into shared memory
 * with cp.async, STAGES deep, then per tile:
 *   scores: warp w scores key block w for the G queries; a lane holds 4 rows and D/8 of the
 *     coordinates (its q values stay in registers), decodes its codes in registers (nibble ->
 *     centroid through a 16-entry shared table, or code -> float by the 2^23 magic, no I2F),
 *     and the partial sums of the 8 lanes sharing rows are reduced by halving exchanges;
 *   softmax: online (running max m, sum l, rescale alpha), base 2 (q carries log2(e)/sqrt(d));
 *   values: thread (coordinate slice of 8, row group) accumulates p·v for the G queries in
 *     registers across the whole chunk; the row groups are summed once at the end.
 * Partials (m, l, acc[G][D]) go to the workspace; the combine kernel merges the splits, rotates
 * the coded part back (values in a rotated domain), and merges the fp rows. All arithmetic is
 * float32 (fp16 and codes are exact in it); exp2f is the accurate one (no fast math). */
#pragma once
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include "backend/cuda/vq_cuda.h"

namespace vqc {

constexpr int NT = 128;     /* threads per block */
constexpr int TILE = 64;    /* rows per tile: 4 key blocks of 16 */

struct Params {
    vq_cuda_kv_format f;
    const vq_cuda_seq *seqs;
    const float *q;
    float *out;
    float *ml;              /* [seq][kv head][split][G][2]: m (log2 units), l */
    float *acc;             /* [seq][kv head][split][G][D] */
    int n_seqs, chunk, n_splits;
    float qscale;           /* log2(e) / sqrt(D) */
};

template <int KT, int D> struct Lay {
    static constexpr int NG = D / 32;
    static constexpr int KBLK = KT == VQ_CUDA_KV_F16 ? 16 * 2 * D
                              : KT == VQ_CUDA_KV_Q8_0 ? 16 * NG * 34
                              : KT == VQ_CUDA_KV_Q4_0 ? 16 * NG * 18
                              : 16 * 4 + 16 * D / 2;                 /* TQ4, f32 norms: the larger */
    static constexpr int VROW = KT == VQ_CUDA_KV_F16 ? 2 * D
                              : KT == VQ_CUDA_KV_Q8_0 ? NG * 34
                              : KT == VQ_CUDA_KV_Q4_0 ? NG * 18
                              : 4 + D / 2;
    static constexpr int KT_BYTES = (4 * KBLK + 15) / 16 * 16;
    static constexpr int VT_BYTES = (TILE * VROW + 15) / 16 * 16;
    static constexpr int STAGE = KT_BYTES + VT_BYTES;
    static constexpr int STAGES = KT == VQ_CUDA_KV_F16 ? 2 : KT == VQ_CUDA_KV_Q8_0 ? 3 : 4;
    static constexpr int FP_BYTES = 2 * TILE * 2 * D;                /* one tile of fp16 rows, K and V */
};
template <int KT, int D, int G> constexpr int smem_bytes() {
    constexpr int a = Lay<KT, D>::STAGES * Lay<KT, D>::STAGE, b = Lay<KT, D>::FP_BYTES;
    constexpr int c = (NT / (D / 8)) * G * D * 4;                    /* the row groups' sums */
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ float h2f(const uint8_t *p) { return __half2float(*(const __half *)p); }
/* 4 bytes at a 2-byte aligned address */
__device__ __forceinline__ uint32_t ld32_a2(const uint8_t *p) {
    const uint16_t *h = (const uint16_t *)p;
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}
/* byte b of w (0..255) as a float, through the 2^23 magic (no int -> float conversion) */
__device__ __forceinline__ float magic_byte(uint32_t w, int b) {
    return __int_as_float((int)__byte_perm(w, 0x4B000000u, 0x7440 + b));
}
/* 16-entry float table in shared memory, indexed by a byte holding idx * 4 */
__device__ __forceinline__ float tab4(const float *tab, uint32_t w4, int b) {
    return *(const float *)((const char *)tab + __byte_perm(w4, 0u, 0x4440 + b));
}

/* One halving step of the lanes' partial-sum reduction: N values -> N/2 (or a plain exchange) */
template <int N, int MASK>
__device__ __forceinline__ void rs_level(float *v, int lane, int &off, bool &writer) {
    const bool up = (lane & MASK) != 0;
    if constexpr (N >= 2) {
        constexpr int H = N / 2;
#pragma unroll
        for (int i = 0; i < H; i++) {
            const float send = up ? v[i] : v[i + H], keep = up ? v[i + H] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, MASK);
        }
        if (up) off += H;
    } else {
        v[0] += __shfl_xor_sync(0xffffffffu, v[0], MASK);
        if (up) writer = false;
    }
}
template <int NV, int M0, int M1, int M2>
__device__ __forceinline__ void reduce8(float (&v)[NV], int lane, int &off, bool &writer) {
    off = 0;
    writer = true;
    rs_level<NV, M0>(v, lane, off, writer);
    rs_level<(NV >= 2 ? NV / 2 : 1), M1>(v, lane, off, writer);
    rs_level<(NV >= 4 ? NV / 4 : 1), M2>(v, lane, off, writer);
}
__host__ __device__ constexpr int imax(int a, int b) { return a > b ? a : b; }

/* q registers of a lane: the D/8 coordinates it scores, QB queries of one pass */
template <int KT, int D>
__device__ __forceinline__ int kcoord(int lane, int n) {
    if constexpr (KT == VQ_CUDA_KV_F16) {
        const int cs = lane & 7, k = n / 8, e = n % 8;
        return 8 * cs + 64 * k + e;
    } else if constexpr (KT == VQ_CUDA_KV_TQ4) {
        const int cs = lane >> 2, u = n / 2, e = n % 2;
        return 2 * (cs + 8 * u) + e;
    } else if constexpr (KT == VQ_CUDA_KV_Q4_0) {
        const int cs = lane >> 2, u = n / 2, e = n % 2, g = u / 2, t = u % 2;
        return 32 * g + cs + 8 * t + 16 * e;
    } else {
        const int cs = lane >> 2, g = n / 4, t = n % 4;
        return 32 * g + cs + 8 * t;
    }
}

/* Partial scores of the warp's key block (16 rows at blk): v[b * QB + j] = q_j . k_(4 rq + b) over
 * this lane's coordinates; rq = lane & 3 (lanes layout) or lane >> 3 (f16 rows) */
template <int KT, int D, int QB>
__device__ __forceinline__ void kpart(const uint8_t *blk, int lane, const float (&qr)[QB][D / 8],
                                      float (&v)[4 * QB], int nb, const float *cent) {
#pragma unroll
    for (int i = 0; i < 4 * QB; i++) v[i] = 0.0f;
    if constexpr (KT == VQ_CUDA_KV_F16) {
        const int rq = lane >> 3, cs = lane & 7;
#pragma unroll
        for (int k = 0; k < D / 64; k++)
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const uint4 x = *(const uint4 *)(blk + (size_t)(4 * rq + b) * 2 * D + (8 * cs + 64 * k) * 2);
                const uint32_t xw[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                for (int e2 = 0; e2 < 4; e2++) {
                    const float2 f = __half22float2(*(const __half2 *)&xw[e2]);
#pragma unroll
                    for (int j = 0; j < QB; j++)
                        v[b * QB + j] = fmaf(qr[j][8 * k + 2 * e2], f.x, fmaf(qr[j][8 * k + 2 * e2 + 1], f.y, v[b * QB + j]));
                }
            }
    } else if constexpr (KT == VQ_CUDA_KV_TQ4) {
        const int rq = lane & 3, cs = lane >> 2;
        const uint8_t *codes = blk + 16 * nb;
#pragma unroll
        for (int u = 0; u < D / 16; u++) {
            const uint32_t w = *(const uint32_t *)(codes + (cs + 8 * u) * 16 + 4 * rq);
            const uint32_t lo4 = (w << 2) & 0x3C3C3C3Cu, hi4 = (w >> 2) & 0x3C3C3C3Cu;
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const float c0 = tab4(cent, lo4, b), c1 = tab4(cent, hi4, b);
#pragma unroll
                for (int j = 0; j < QB; j++)
                    v[b * QB + j] = fmaf(qr[j][2 * u], c0, fmaf(qr[j][2 * u + 1], c1, v[b * QB + j]));
            }
        }
    } else if constexpr (KT == VQ_CUDA_KV_Q4_0) {
        const int rq = lane & 3, cs = lane >> 2;
#pragma unroll
        for (int g = 0; g < D / 32; g++) {
            const uint8_t *grp = blk + g * 288;
            float part[4 * QB];
#pragma unroll
            for (int i = 0; i < 4 * QB; i++) part[i] = 0.0f;
#pragma unroll
            for (int t = 0; t < 2; t++) {
                const int u = 2 * g + t;
                const uint32_t w = *(const uint32_t *)(grp + 32 + (cs + 8 * t) * 16 + 4 * rq);
                const uint32_t lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
#pragma unroll
                for (int b = 0; b < 4; b++) {
                    const float c0 = magic_byte(lo, b) - 8388616.0f, c1 = magic_byte(hi, b) - 8388616.0f;
#pragma unroll
                    for (int j = 0; j < QB; j++)
                        part[b * QB + j] = fmaf(qr[j][2 * u], c0, fmaf(qr[j][2 * u + 1], c1, part[b * QB + j]));
                }
            }
            const uint2 sc = *(const uint2 *)(grp + 8 * rq);
            const float2 s01 = __half22float2(*(const __half2 *)&sc.x), s23 = __half22float2(*(const __half2 *)&sc.y);
            const float s[4] = {s01.x, s01.y, s23.x, s23.y};
#pragma unroll
            for (int b = 0; b < 4; b++)
#pragma unroll
                for (int j = 0; j < QB; j++) v[b * QB + j] = fmaf(s[b], part[b * QB + j], v[b * QB + j]);
        }
    } else {   /* q8_0 */
        const int rq = lane & 3, cs = lane >> 2;
#pragma unroll
        for (int g = 0; g < D / 32; g++) {
            const uint8_t *grp = blk + g * 544;
            float part[4 * QB];
#pragma unroll
            for (int i = 0; i < 4 * QB; i++) part[i] = 0.0f;
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const int u = 4 * g + t;
                const uint32_t w = *(const uint32_t *)(grp + 32 + (cs + 8 * t) * 16 + 4 * rq) ^ 0x80808080u;
#pragma unroll
                for (int b = 0; b < 4; b++) {
                    const float c = magic_byte(w, b) - 8388736.0f;
#pragma unroll
                    for (int j = 0; j < QB; j++) part[b * QB + j] = fmaf(qr[j][u], c, part[b * QB + j]);
                }
            }
            const uint2 sc = *(const uint2 *)(grp + 8 * rq);
            const float2 s01 = __half22float2(*(const __half2 *)&sc.x), s23 = __half22float2(*(const __half2 *)&sc.y);
            const float s[4] = {s01.x, s01.y, s23.x, s23.y};
#pragma unroll
            for (int b = 0; b < 4; b++)
#pragma unroll
                for (int j = 0; j < QB; j++) v[b * QB + j] = fmaf(s[b], part[b * QB + j], v[b * QB + j]);
        }
    }
}

/* The 8 values of row r that thread slice cs accumulates (and the row's scale, else 1) */
template <int KT, int D>
__device__ __forceinline__ float vrow(const uint8_t *row, int cs, int nb, const float *cent, float (&x)[8]) {
    if constexpr (KT == VQ_CUDA_KV_F16) {
        const uint4 u = *(const uint4 *)(row + 16 * cs);
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 f = __half22float2(*(const __half2 *)&w[i]);
            x[2 * i] = f.x;
            x[2 * i + 1] = f.y;
        }
        return 1.0f;
    } else if constexpr (KT == VQ_CUDA_KV_TQ4) {
        const int g = cs >> 2, k0 = 4 * (cs & 3);
        const uint32_t w = ld32_a2(row + nb + 16 * g + k0);
        const uint32_t lo4 = (w << 2) & 0x3C3C3C3Cu, hi4 = (w >> 2) & 0x3C3C3C3Cu;
#pragma unroll
        for (int b = 0; b < 4; b++) {
            x[b] = tab4(cent, lo4, b);
            x[4 + b] = tab4(cent, hi4, b);
        }
        return 1.0f;   /* the norm is in the weight (softmax phase) */
    } else if constexpr (KT == VQ_CUDA_KV_Q4_0) {
        const int g = cs >> 2, k0 = 4 * (cs & 3);
        const uint8_t *blk = row + 18 * g;
        const uint32_t w = ld32_a2(blk + 2 + k0);
        const uint32_t lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
#pragma unroll
        for (int b = 0; b < 4; b++) {
            x[b] = magic_byte(lo, b) - 8388616.0f;
            x[4 + b] = magic_byte(hi, b) - 8388616.0f;
        }
        return h2f(blk);
    } else {
        const int g = cs >> 2, k0 = 8 * (cs & 3);
        const uint8_t *blk = row + 34 * g;
        const uint32_t w0 = ld32_a2(blk + 2 + k0) ^ 0x80808080u, w1 = ld32_a2(blk + 6 + k0) ^ 0x80808080u;
#pragma unroll
        for (int b = 0; b < 4; b++) {
            x[b] = magic_byte(w0, b) - 8388736.0f;
            x[4 + b] = magic_byte(w1, b) - 8388736.0f;
        }
        return h2f(blk);
    }
}
/* output coordinate of a thread's accumulator e */
template <int KT, int D>
__device__ __forceinline__ int vcoord(int cs, int e) {
    if constexpr (KT == VQ_CUDA_KV_F16) return 8 * cs + e;
    else if constexpr (KT == VQ_CUDA_KV_Q8_0) return 32 * (cs >> 2) + 8 * (cs & 3) + e;
    else return 32 * (cs >> 2) + 4 * (cs & 3) + (e < 4 ? e : 12 + e);
}

struct Smem {
    float *qs;        /* [G][D] */
    float *S;         /* [G][TILE] */
    float *P;         /* [TILE][G] */
    float *m, *l, *a; /* [G] */
    const float *cent, *centv;
};

/* One tile: rows t0 .. t0 + 63 at kt (keys) / vt (values) in shared memory, nrows of them loaded.
 * valid(i): row t0 + i takes part. The block's running state is in sm; acc is this thread's. */
template <int KT, int D, int QB>
__device__ __forceinline__ void load_q(const float *qs, int lane, int ps, float (&qr)[QB][D / 8]) {
#pragma unroll
    for (int j = 0; j < QB; j++)
#pragma unroll
        for (int n = 0; n < D / 8; n++) qr[j][n] = qs[(ps * QB + j) * D + kcoord<KT, D>(lane, n)];
}

/* q0: the first pass's q registers, loaded once per block (the only pass when G <= 4) */
template <int KT, int D, int G, class Valid>
__device__ __forceinline__ void tile(const uint8_t *kt, const uint8_t *vt, int nrows, int kblk, int vrb,
                                     int nb, const Smem &sm, float (&acc)[G][8],
                                     const float (&q0)[G < 4 ? G : 4][D / 8], Valid valid) {
    constexpr int QB = G < 4 ? G : 4, NPASS = G / QB, NV = 4 * QB;
    constexpr bool F16 = KT == VQ_CUDA_KV_F16;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* ---- scores: warp w, key block w ---- */
    const int rq = F16 ? lane >> 3 : lane & 3;
    if (16 * warp < nrows) {
        const uint8_t *blk = kt + (size_t)warp * kblk;
#pragma unroll
        for (int ps = 0; ps < NPASS; ps++) {
            float v[NV];
            if (ps == 0) {
                kpart<KT, D, QB>(blk, lane, q0, v, nb, sm.cent);
            } else {
                float qr[QB][D / 8];
                load_q<KT, D, QB>(sm.qs, lane, ps, qr);
                kpart<KT, D, QB>(blk, lane, qr, v, nb, sm.cent);
            }
            int off;
            bool writer;
            if constexpr (F16) reduce8<NV, 4, 2, 1>(v, lane, off, writer);
            else reduce8<NV, 16, 8, 4>(v, lane, off, writer);
            if (writer) {
#pragma unroll
                for (int i = 0; i < imax(NV / 8, 1); i++) {
                    const int idx = off + i, b = idx / QB, j = ps * QB + idx % QB, r = 4 * rq + b;
                    float s = v[i];
                    if constexpr (KT == VQ_CUDA_KV_TQ4)
                        s *= nb == 4 ? *(const float *)(blk + 4 * r) : h2f(blk + 2 * r);
                    const int row = 16 * warp + r;
                    sm.S[j * TILE + row] = row < nrows && valid(row) ? s : -INFINITY;
                }
            }
        }
    } else {
        for (int i = lane; i < 16 * G; i += 32) sm.S[(i / 16) * TILE + 16 * warp + i % 16] = -INFINITY;
    }
    __syncthreads();
    /* ---- online softmax: warp w, queries w, w + 4 ---- */
    for (int j = warp; j < G; j += NT / 32) {
        const float s0 = sm.S[j * TILE + lane], s1 = sm.S[j * TILE + lane + 32];
        float mx = fmaxf(s0, s1);
#pragma unroll
        for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float m_old = sm.m[j], m_new = fmaxf(m_old, mx);
        float p0 = 0.0f, p1 = 0.0f, alpha = 1.0f;
        if (m_new != -INFINITY) {
            p0 = exp2f(s0 - m_new);
            p1 = exp2f(s1 - m_new);
            alpha = exp2f(m_old - m_new);
        }
        float sum = p0 + p1;
#pragma unroll
        for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if constexpr (KT == VQ_CUDA_KV_TQ4) {   /* value rows' norms go into the weights */
            if (lane < nrows) p0 *= nb == 4 ? *(const float *)(vt + (size_t)lane * vrb) : h2f(vt + (size_t)lane * vrb);
            if (lane + 32 < nrows) p1 *= nb == 4 ? *(const float *)(vt + (size_t)(lane + 32) * vrb) : h2f(vt + (size_t)(lane + 32) * vrb);
        }
        sm.P[lane * G + j] = p0;
        sm.P[(lane + 32) * G + j] = p1;
        __syncwarp();
        if (lane == 0) {
            sm.l[j] = sm.l[j] * alpha + sum;
            sm.m[j] = m_new;
            sm.a[j] = alpha;
        }
    }
    __syncthreads();
    /* ---- values: thread (slice cs of 8 coordinates, row group rg) ---- */
    constexpr int NCS = D / 8, NRG = NT / NCS;
    const int cs = tid % NCS, rg = tid / NCS;
#pragma unroll
    for (int j = 0; j < G; j++) {
        const float al = sm.a[j];
#pragma unroll
        for (int e = 0; e < 8; e++) acc[j][e] *= al;
    }
    for (int r = rg; r < nrows; r += NRG) {
        float x[8];
        const float sc = vrow<KT, D>(vt + (size_t)r * vrb, cs, nb, sm.centv, x);
        float w[G];
        if constexpr (G % 4 == 0) {
#pragma unroll
            for (int j = 0; j < G; j += 4) {
                const float4 w4 = *(const float4 *)(sm.P + r * G + j);
                w[j] = w4.x; w[j + 1] = w4.y; w[j + 2] = w4.z; w[j + 3] = w4.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < G; j++) w[j] = sm.P[r * G + j];
        }
#pragma unroll
        for (int j = 0; j < G; j++) {
            const float wj = w[j] * sc;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[j][e] = fmaf(wj, x[e], acc[j][e]);
        }
    }
}

template <int KT, int D, int G>
__device__ __forceinline__ void finish(uint8_t *dyn, const Smem &sm, float (&acc)[G][8], float *ml, float *acc_out) {
    constexpr int NCS = D / 8;
    const int tid = threadIdx.x, cs = tid % NCS, rg = tid / NCS;
    cp_wait<0>();
    __syncthreads();
    float *red = (float *)dyn;
#pragma unroll
    for (int j = 0; j < G; j++)
#pragma unroll
        for (int e = 0; e < 8; e++) red[(rg * G + j) * D + vcoord<KT, D>(cs, e)] = acc[j][e];
    __syncthreads();
    constexpr int NRG = NT / NCS;
    for (int i = tid; i < G * D; i += NT) {
        float s = 0.0f;
#pragma unroll
        for (int r = 0; r < NRG; r++) s += red[r * G * D + i];
        acc_out[i] = s;
    }
    if (tid < G) {
        ml[2 * tid] = sm.m[tid];
        ml[2 * tid + 1] = sm.l[tid];
    }
}

template <int KT, int D, int G>
__global__ void __launch_bounds__(NT, G >= 8 ? 2 : 3) attn_split(const __grid_constant__ Params p) {
    using L = Lay<KT, D>;
    extern __shared__ __align__(16) uint8_t dyn[];
    __shared__ __align__(16) float qs[G * D];
    __shared__ float S[G * TILE];
    __shared__ __align__(16) float P[TILE * G];
    __shared__ float m_s[G], l_s[G], a_s[G], cent_s[16], centv_s[16];
    const int split = blockIdx.x, h = blockIdx.y, s = blockIdx.z, tid = threadIdx.x;
    const vq_cuda_seq sq = p.seqs[s];
    const int Hkv = p.f.n_kv_heads, g = p.f.n_heads / Hkv;
    const size_t pidx = ((size_t)s * Hkv + h) * (size_t)(p.n_splits + 1) + split;
    float *ml = p.ml + pidx * G * 2, *acc_out = p.acc + pidx * G * D;
    const bool fp = split == 0;
    /* rows of this block: coded [a, b) or fp [0, n_fp) */
    int a = 0, b = 0;
    if (fp) {
        b = sq.fp_k ? sq.n_fp : 0;
    } else {
        const int c0 = (split - 1) * p.chunk;
        const int hi = min(sq.n_coded, sq.q_pos - sq.pos0 + 1);
        const int lo = sq.span > 0 ? sq.q_pos - sq.span + 1 - sq.pos0 : 0;
        a = max(c0, lo);
        b = min(c0 + p.chunk, hi);
    }
    if (a >= b) {
        if (tid < G) { ml[2 * tid] = -INFINITY; ml[2 * tid + 1] = 0.0f; }
        return;
    }
    const bool rotq = !fp && p.f.rot_k;
    for (int i = tid; i < G * D; i += NT) {
        const int j = i / D, c = i % D;
        float v = j < g ? p.q[((size_t)s * p.f.n_heads + (size_t)h * g + j) * D + c] * p.qscale : 0.0f;
        if (rotq) v *= p.f.rk[c];
        qs[i] = v;
    }
    if (tid < 16) { cent_s[tid] = p.f.cent_k[tid]; centv_s[tid] = p.f.cent_v[tid]; }
    if (tid < G) { m_s[tid] = -INFINITY; l_s[tid] = 0.0f; a_s[tid] = 1.0f; }
    __syncthreads();
    if (rotq) {   /* the query into the keys' codec domain: H (rk ⊙ q), natural order */
        for (int len = 1; len < D; len <<= 1) {
            for (int i = tid; i < G * D / 2; i += NT) {
                const int j = i / (D / 2), k = i % (D / 2), i0 = (k / len) * 2 * len + k % len;
                const float x = qs[j * D + i0], y = qs[j * D + i0 + len];
                qs[j * D + i0] = x + y;
                qs[j * D + i0 + len] = x - y;
            }
            __syncthreads();
        }
    }
    const Smem sm = {qs, S, P, m_s, l_s, a_s, cent_s, centv_s};
    float acc[G][8];
#pragma unroll
    for (int j = 0; j < G; j++)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[j][e] = 0.0f;
    const int H = Hkv;
    if (fp) {   /* fp16 rows: sinks, window, partial block; single-buffered, positions explicit */
        const int q_pos = sq.q_pos, span = sq.span;
        const uint8_t *fk = (const uint8_t *)sq.fp_k, *fv = (const uint8_t *)sq.fp_v;
        const int32_t *fpos = sq.fp_pos;
        constexpr int CPR = 2 * D / 16;
        float q0[G < 4 ? G : 4][D / 8];
        load_q<VQ_CUDA_KV_F16, D, (G < 4 ? G : 4)>(qs, tid & 31, 0, q0);
        uint8_t *kt = dyn, *vt = dyn + TILE * 2 * D;
        for (int t0 = 0; t0 < b; t0 += TILE) {
            const int n = min(TILE, b - t0);
            for (int i = tid; i < n * CPR; i += NT) {
                const int r = i / CPR, c = i % CPR;
                const size_t src = ((size_t)(t0 + r) * H + h) * 2 * D + 16 * c;
                cp_async16(kt + r * 2 * D + 16 * c, fk + src);
                cp_async16(vt + r * 2 * D + 16 * c, fv + src);
            }
            cp_commit();
            cp_wait<0>();
            __syncthreads();
            tile<VQ_CUDA_KV_F16, D, G>(kt, vt, n, 16 * 2 * D, 2 * D, 0, sm, acc, q0, [&](int i) {
                const int pos = fpos[t0 + i];
                return pos <= q_pos && (span <= 0 || pos > q_pos - span);
            });
            __syncthreads();
        }
        finish<VQ_CUDA_KV_F16, D, G>(dyn, sm, acc, ml, acc_out);
        return;
    }
    if constexpr (true) {
        const int kblk = (int)p.f.k_block_bytes, vrb = (int)p.f.v_row_bytes;
        const int nb = KT == VQ_CUDA_KV_TQ4 ? (p.f.norm32 ? 4 : 2) : 0;
        constexpr bool F16 = KT == VQ_CUDA_KV_F16;
        const uint8_t *kb = (const uint8_t *)sq.k + (size_t)h * sq.k_head_stride;
        const uint8_t *vb = (const uint8_t *)sq.v + (size_t)h * sq.v_head_stride;
        const int c0 = (split - 1) * p.chunk;
        const int t_first = c0 + (a - c0) / TILE * TILE;
        const int b_load = F16 ? b : (b + 15) / 16 * 16;
        const int n_tiles = (b - t_first + TILE - 1) / TILE;
        float q0[G < 4 ? G : 4][D / 8];
        load_q<KT, D, (G < 4 ? G : 4)>(qs, tid & 31, 0, q0);
        auto load = [&](int stage, int t0) {
            uint8_t *kt = dyn + (size_t)stage * L::STAGE, *vt = kt + L::KT_BYTES;
            const int n = min(TILE, b_load - t0);
            const int kbytes = F16 ? n * 2 * D : (n / 16) * kblk, vbytes = n * vrb;
            const uint8_t *ks = kb + (F16 ? (size_t)t0 * 2 * D : (size_t)(t0 / 16) * kblk);
            const uint8_t *vs = vb + (size_t)t0 * vrb;
            for (int i = tid; i < kbytes / 16; i += NT) cp_async16(kt + 16 * i, ks + 16 * i);
            for (int i = tid; i < vbytes / 16; i += NT) cp_async16(vt + 16 * i, vs + 16 * i);
        };
#pragma unroll
        for (int i = 0; i < L::STAGES - 1; i++) {
            if (i < n_tiles) load(i, t_first + i * TILE);
            cp_commit();
        }
        for (int it = 0; it < n_tiles; it++) {
            cp_wait<L::STAGES - 2>();
            __syncthreads();
            const int nx = it + L::STAGES - 1;
            if (nx < n_tiles) load(nx % L::STAGES, t_first + nx * TILE);
            cp_commit();
            const int t0 = t_first + it * TILE;
            const uint8_t *kt = dyn + (size_t)(it % L::STAGES) * L::STAGE, *vt = kt + L::KT_BYTES;
            const int n = min(TILE, b_load - t0);
            tile<KT, D, G>(kt, vt, n, F16 ? 16 * 2 * D : kblk, vrb, nb, sm, acc, q0,
                           [&](int i) { return t0 + i >= a && t0 + i < b; });
        }
        finish<KT, D, G>(dyn, sm, acc, ml, acc_out);
    }
}

/* Merge the splits of one (sequence, query head): block (s, head). The splits' maxima and sums
 * are read by all threads at once (one split each) and reduced; the weights go to shared memory;
 * then each thread sums one coordinate over the splits with 4 loads in flight. The coded part is
 * rotated back (values in a rotated domain), then merged with the fp split 0. Dynamic shared
 * memory: n_splits floats. */
__device__ __forceinline__ float block_reduce(float v, bool is_max, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    __syncthreads();   /* red is reused between calls */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = red[0];
#pragma unroll
    for (int w = 1; w < NT / 32; w++) v = is_max ? fmaxf(v, red[w]) : v + red[w];
    return v;
}

template <int D, int G>
__global__ void __launch_bounds__(NT, 4) attn_combine(const __grid_constant__ Params p) {
    extern __shared__ float wsp[];   /* [n_splits]: weight of coded split sp + 1 */
    __shared__ float buf[D], red[NT / 32];
    const int s = blockIdx.x, qh = blockIdx.y, tid = threadIdx.x;
    const int Hkv = p.f.n_kv_heads, g = p.f.n_heads / Hkv, NS = p.n_splits;
    const int h = qh / g, j = qh % g;
    const size_t p0 = ((size_t)s * Hkv + h) * (size_t)(NS + 1);
    const float *ml = p.ml, *acc = p.acc;
    float M = -INFINITY;
    for (int sp = tid; sp < NS; sp += NT) M = fmaxf(M, ml[((p0 + 1 + sp) * G + j) * 2]);
    M = block_reduce(M, true, red);
    float L = 0.0f;
    for (int sp = tid; sp < NS; sp += NT) {
        const float m = ml[((p0 + 1 + sp) * G + j) * 2];
        const float w = m == -INFINITY ? 0.0f : exp2f(m - M);
        wsp[sp] = w;
        if (w > 0.0f) L = fmaf(w, ml[((p0 + 1 + sp) * G + j) * 2 + 1], L);
    }
    L = block_reduce(L, false, red);   /* its barriers also publish wsp */
    float a = 0.0f;
    if (tid < D && M != -INFINITY) {
        const float *ap = acc + ((p0 + 1) * G + j) * D + tid;
        const size_t st = (size_t)G * D;
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        int sp = 0;
        for (; sp + 4 <= NS; sp += 4) {
            const float w0 = wsp[sp], w1 = wsp[sp + 1], w2 = wsp[sp + 2], w3 = wsp[sp + 3];
            const float x0 = w0 > 0.0f ? ap[(size_t)sp * st] : 0.0f, x1 = w1 > 0.0f ? ap[(size_t)(sp + 1) * st] : 0.0f;
            const float x2 = w2 > 0.0f ? ap[(size_t)(sp + 2) * st] : 0.0f, x3 = w3 > 0.0f ? ap[(size_t)(sp + 3) * st] : 0.0f;
            a0 = fmaf(w0, x0, a0);
            a1 = fmaf(w1, x1, a1);
            a2 = fmaf(w2, x2, a2);
            a3 = fmaf(w3, x3, a3);
        }
        for (; sp < NS; sp++)
            if (wsp[sp] > 0.0f) a0 = fmaf(wsp[sp], ap[(size_t)sp * st], a0);
        a = (a0 + a1) + (a2 + a3);
    }
    if (p.f.rot_v) {   /* back from the values' codec domain: rv ⊙ (H a) */
        if (tid < D) buf[tid] = a;
        __syncthreads();
        for (int len = 1; len < D; len <<= 1) {
            if (tid < D / 2) {
                const int i0 = (tid / len) * 2 * len + tid % len;
                const float x = buf[i0], y = buf[i0 + len];
                buf[i0] = x + y;
                buf[i0 + len] = x - y;
            }
            __syncthreads();
        }
        if (tid < D) a = p.f.rv[tid] * buf[tid];
    }
    const float m0 = ml[(p0 * G + j) * 2];
    const float Mx = fmaxf(M, m0);
    const float wc = M == -INFINITY ? 0.0f : exp2f(M - Mx), w0 = m0 == -INFINITY ? 0.0f : exp2f(m0 - Mx);
    const float den = wc * L + (w0 > 0.0f ? w0 * ml[(p0 * G + j) * 2 + 1] : 0.0f);
    if (tid < D) {
        float num = wc * a;
        if (w0 > 0.0f) num = fmaf(w0, acc[(p0 * G + j) * D + tid], num);
        p.out[((size_t)s * p.f.n_heads + qh) * D + tid] = den > 0.0f ? num / den : 0.0f;
    }
}

/* per type .cu: launch the split kernel for (D, G) */
cudaError_t launch_split(int type, int D, int G, const Params &p, dim3 grid, cudaStream_t st);
cudaError_t launch_split_f16(int D, int G, const Params &p, dim3 grid, cudaStream_t st);
cudaError_t launch_split_q8(int D, int G, const Params &p, dim3 grid, cudaStream_t st);
cudaError_t launch_split_q4(int D, int G, const Params &p, dim3 grid, cudaStream_t st);
cudaError_t launch_split_tq4(int D, int G, const Params &p, dim3 grid, cudaStream_t st);
/* the tensor-core split kernel (attn_tc.cuh): coded splits only, grid.x = n_splits */
cudaError_t launch_tc_q8(int D, int G, const Params &p, dim3 grid, cudaStream_t st);
cudaError_t launch_tc_q4(int D, int G, const Params &p, dim3 grid, cudaStream_t st);
cudaError_t launch_tc_tq4(int D, int G, const Params &p, dim3 grid, cudaStream_t st);

template <int KT, int D, int G>
cudaError_t launch_one(const Params &p, dim3 grid, cudaStream_t st) {
    constexpr int sm = smem_bytes<KT, D, G>();
    /* the attribute is the device's: set once per instantiation and device (bit d of devs; a
     * device past 63 sets it every launch). Benign race: every writer sets the same value. */
    static unsigned long long devs = 0;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) dev = 64;
    const unsigned long long bit = dev < 64 ? 1ull << dev : 0;
    if (!(devs & bit) || !bit) {
        cudaError_t e = cudaFuncSetAttribute(attn_split<KT, D, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, sm);
        if (e != cudaSuccess) return e;
        devs |= bit;
    }
    attn_split<KT, D, G><<<grid, NT, sm, st>>>(p);
    return cudaGetLastError();
}
template <int KT>
cudaError_t launch_type(int D, int G, const Params &p, dim3 grid, cudaStream_t st) {
    if (D == 64) {
        switch (G) { case 1: return launch_one<KT, 64, 1>(p, grid, st); case 2: return launch_one<KT, 64, 2>(p, grid, st);
                     case 4: return launch_one<KT, 64, 4>(p, grid, st); default: return launch_one<KT, 64, 8>(p, grid, st); }
    }
    switch (G) { case 1: return launch_one<KT, 128, 1>(p, grid, st); case 2: return launch_one<KT, 128, 2>(p, grid, st);
                 case 4: return launch_one<KT, 128, 4>(p, grid, st); default: return launch_one<KT, 128, 8>(p, grid, st); }
}

}  // namespace vqc
