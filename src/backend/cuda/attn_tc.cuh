/* attn_tc.cuh: the tensor-core split kernel for coded rows (q8_0, q4_0 and turboquant_mse 4-bit
 * with fp16 norms), opt-in with VQ_CUDA_ATTN=tc until it has run on a GPU (vq_cuda_attn_tc; the
 * float32 kernel of attn_kernel.cuh is the default). Same grid,
 * plan, workspace and combine as the float32 kernel; only the coded splits run here (the fp16
 * rows of split 0 keep the float32 kernel). docs/cuda.md has the design; in short:
 *
 * Block = 4 warps, tiles of 128 rows (8 key blocks + 128 value rows) streamed into shared memory
 * by cp.async, 3 stages. Warp w owns rows 32w .. 32w + 31 of every tile (key blocks 2w, 2w + 1)
 * and keeps its own online softmax (m, l) and output accumulators over the whole chunk (flash
 * decoding inside the block); the 4 warps merge once at the end.
 *   scores: S^T = Q K^T with mma.sync m16n8k16 (fp16 in, fp32 accumulate): M = the G <= 8 query
 *     heads of the KV head (padded to 16 with zeros), N = 8 key rows, K = 16 coordinates. The
 *     query fragment (fp16) is built once per block. Lane (g, t) reads one 32-bit word of the lanes
 *     layout: 4 rows (n-tiles 0..3) x one code byte (2 coordinates) and turns each byte into the
 *     half2 of its B fragment: q4_0 by the 0x6400 magic (prmt, lop3, hfma2: exact) times the row's
 *     scale (hmul2), TQ4 through a 256-entry table byte -> (cent[lo], cent[hi]) in shared memory
 *     (8 copies: lane & 7 picks one, to spread banks); TQ4's row norm multiplies the fp32 score.
 *   softmax: lane (g, t) holds the scores of query g for rows 8t .. 8t + 7 of the warp's 32, in
 *     fp32, base 2; max over the 4 lanes of a query by 2 shuffles, l kept per lane until the end.
 *   values: O^T = V^T P^T: M = 16 coordinates, N = the queries, K = 16 rows. P (times the row
 *     norm for TQ4) is rounded to fp16 into the B fragment straight from the score registers
 *     (the C layout of the scores is the B layout of P^T: no shuffles). V^T's A fragment pairs two
 *     rows at one coordinate: q4_0 through prmt + magic + the scale (hmul2), TQ4 through a 256-entry
 *     table (lo nibble of row a | lo nibble of row b << 4) -> (cent[a], cent[b]).
 * Arithmetic: q, key and value elements (centroids, q4_0 value x scale) and the weights p are fp16
 * (rounded to nearest), every product exact and every sum fp32 (tensor cores: the sum inside an
 * mma truncates); tests/cuda/test_cuda_attn.c derives the bound from that. */
#pragma once
#include "backend/cuda/attn_kernel.cuh"

namespace vqc {

constexpr int TT = 128;   /* rows per tile of the tensor-core kernel (32 per warp) */

template <int KT, int D> struct TLay {
    static constexpr int KBLK = Lay<KT, D>::KBLK;   /* q4_0 exact; TQ4: f32-norm size (the larger) */
    static constexpr int VROW = Lay<KT, D>::VROW;
    static constexpr int KT_BYTES = (8 * KBLK + 15) / 16 * 16;
    static constexpr int VT_BYTES = (TT * VROW + 15) / 16 * 16;
    static constexpr int STAGE = KT_BYTES + VT_BYTES;
    static constexpr int STAGES = KT == VQ_CUDA_KV_Q8_0 ? 2 : 3;   /* q8_0: 34 KB a stage */
    static constexpr int RED = 4 * 8 * D * 4 + 2 * 4 * 8 * 4;   /* warp merge: o[4][8][D], m/l[4][8] */
    static constexpr int LUT = KT == VQ_CUDA_KV_TQ4 ? 2 * 256 * 8 * 4 : 0;   /* after the stages */
    static constexpr int SMEM = (STAGES * STAGE > RED ? STAGES * STAGE : RED) + LUT;
};

#define VQ_HD __host__ __device__ __forceinline__
/* Fragments are 32-bit words holding two fp16 (low half: the lower index). The helpers below run
 * on the device (the kernel) and on the host (tests/cuda/test_cuda_tcfrag.cu checks the fragment
 * builders against the codecs' decode without a GPU). */
__device__ __forceinline__ uint32_t h2u(__half2 h) { return *reinterpret_cast<uint32_t *>(&h); }
__device__ __forceinline__ __half2 u2h(uint32_t u) { return *reinterpret_cast<__half2 *>(&u); }
VQ_HD float hlo(uint32_t u) { return __half2float(__ushort_as_half((unsigned short)(u & 0xFFFFu))); }
VQ_HD float hhi(uint32_t u) { return __half2float(__ushort_as_half((unsigned short)(u >> 16))); }
VQ_HD uint32_t pack_h2(float lo, float hi) {
    return (uint32_t)__half_as_ushort(__float2half_rn(lo)) | ((uint32_t)__half_as_ushort(__float2half_rn(hi)) << 16);
}
/* a * b (+ c), element-wise, rounded once to fp16 (the products here are exact in float) */
VQ_HD uint32_t hmul2u(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return h2u(__hmul2(u2h(a), u2h(b)));
#else
    return pack_h2(hlo(a) * hlo(b), hhi(a) * hhi(b));
#endif
}
VQ_HD uint32_t hfma2u(uint32_t a, uint32_t b, uint32_t c) {
#ifdef __CUDA_ARCH__
    return h2u(__hfma2(u2h(a), u2h(b), u2h(c)));
#else
    return pack_h2((float)((double)hlo(a) * hlo(b) + hlo(c)), (float)((double)hhi(a) * hhi(b) + hhi(c)));
#endif
}
VQ_HD uint32_t bperm(uint32_t x, uint32_t y, uint32_t s) {   /* __byte_perm (selector bit 3 never set here) */
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    const uint64_t v = ((uint64_t)y << 32) | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFFu) << (8 * i);
    return r;
#endif
}
VQ_HD uint32_t lop_andor(uint32_t a, uint32_t b, uint32_t c) { return (a & b) | c; }   /* one LOP3 */
VQ_HD uint32_t ld32a2(const uint8_t *p) {   /* 4 bytes at a 2-byte aligned address */
    const uint16_t *h = (const uint16_t *)p;
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}
VQ_HD uint32_t hdup(uint16_t h) { return (uint32_t)h | ((uint32_t)h << 16); }
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
/* table entry of byte j of x: byte offset (x_j << 5) | k4 into a [256][8] u32 table */
template <int J>
VQ_HD uint32_t lut(const uint32_t *tab, uint32_t x, uint32_t k4) {
    const uint32_t off = J == 0 ? lop_andor(x << 5, 0x1FE0u, k4) : lop_andor(x >> (8 * J - 5), 0x1FE0u, k4);
    return *(const uint32_t *)((const char *)tab + off);
}
/* q4_0 byte j of w -> half2 (lo - 8, hi - 8), exact */
template <int J>
VQ_HD uint32_t q4_byte(uint32_t w) {
    const uint32_t t = bperm(w, 0u, 0x4040u | J | (J << 8));
    return hfma2u(lop_andor(t, 0x00F0000Fu, 0x64006400u), 0x2C003C00u /* (1, 1/16) */, 0xD480E408u /* (-1032, -72) */);
}
/* q8_0: byte j of wa and of wb (int8) -> (a_j, b_j), exact */
template <int J>
VQ_HD uint32_t q8_pair(uint32_t wa, uint32_t wb) {
    const uint32_t t = bperm(wa, wb, J | ((4 + J) << 8));
    return hfma2u((t & 0x00FF00FFu) ^ 0x64806480u, 0x3C003C00u /* 1 */, 0xE480E480u /* -1152 */);
}
/* q4_0: byte j of wa and of wb -> (lo_a - 8, lo_b - 8) and (hi_a - 8, hi_b - 8), exact */
template <int J>
VQ_HD void q4_pair(uint32_t wa, uint32_t wb, uint32_t &lo, uint32_t &hi) {
    const uint32_t t = bperm(wa, wb, J | ((4 + J) << 8));
    lo = hfma2u(lop_andor(t, 0x000F000Fu, 0x64006400u), 0x3C003C00u, 0xE408E408u /* -1032 */);
    hi = hfma2u(lop_andor(t, 0x00F000F0u, 0x64006400u), 0x2C002C00u /* 1/16 */, 0xD480D480u /* -72 */);
}

/* The coordinates lane g's value fragments cover: x = 0 .. D/8 - 1 */
template <int KT, int D>
VQ_HD int tc_vcoord(int g, int x) {
    if constexpr (KT == VQ_CUDA_KV_Q8_0) {   /* words g + 16 wq + 8 h of 4 coordinates each */
        const int wi = g + 16 * (x >> 3) + 8 * ((x >> 2) & 1);
        return 4 * wi + (x & 3);
    } else {
        const int wi = g + 8 * (x >> 3), jj = x & 7;
        return 32 * (wi >> 2) + 4 * (wi & 3) + (jj & 3) + 16 * (jj >> 2);
    }
}
/* The coordinates of query fragment register (k-step s, half e: 0 -> k 2t, 2t+1; 1 -> 2t+8, 2t+9), element h */
template <int KT>
VQ_HD int tc_qcoord(int s, int t, int e, int h) {
    if constexpr (KT != VQ_CUDA_KV_Q4_0) return 16 * s + 2 * t + 8 * e + h;   /* TQ4 and q8_0: natural order */
    else return 32 * (s >> 1) + 8 * (s & 1) + t + 4 * e + 16 * h;   /* q4_0: byte (lo, hi) = (c, c + 16) */
}

/* Key B fragments of k-step k for lane (g, t), the warp's two key blocks at kw2 (kblk bytes each):
 * ba[j] (k 2t, 2t+1) and bb[j] (k 2t+8, 2t+9) of n-tile j = row 4 (g & 3) + j of block g >> 2.
 * q4_0 / q8_0: code x the row's scale, rounded to fp16; TQ4: centroids (the norm is applied to
 * the fp32 score). */
template <int KT, int D>
VQ_HD void tc_kfrag(const uint8_t *kw2, int kblk, int g, int t, int k, const uint32_t *lutk, uint32_t k4,
                    uint32_t (&ba)[4], uint32_t (&bb)[4]) {
    const uint8_t *kw = kw2 + (size_t)(g >> 2) * kblk + 4 * (g & 3);   /* the lane's quad of rows */
    if constexpr (KT == VQ_CUDA_KV_TQ4) {
        const uint32_t wa = *(const uint32_t *)(kw + 32 + (8 * k + t) * 16);
        const uint32_t wb = *(const uint32_t *)(kw + 32 + (8 * k + t + 4) * 16);
        ba[0] = lut<0>(lutk, wa, k4); ba[1] = lut<1>(lutk, wa, k4); ba[2] = lut<2>(lutk, wa, k4); ba[3] = lut<3>(lutk, wa, k4);
        bb[0] = lut<0>(lutk, wb, k4); bb[1] = lut<1>(lutk, wb, k4); bb[2] = lut<2>(lutk, wb, k4); bb[3] = lut<3>(lutk, wb, k4);
    } else {
        constexpr int GB = KT == VQ_CUDA_KV_Q8_0 ? 544 : 288;   /* 32 coordinates x 16 rows */
        const int gi = k >> 1, k2 = k & 1;
        const uint8_t *grp = kw + gi * GB;
        const uint16_t *sc = (const uint16_t *)(grp + 4 * (g & 3));   /* scales of rows 4 (g & 3) + j */
        uint32_t ra[4], rb[4];
        if constexpr (KT == VQ_CUDA_KV_Q8_0) {
            const uint8_t *col = grp + 32 + (16 * k2 + 2 * t) * 16;   /* columns 16 k2 + 2t, +1, +8, +9 */
            const uint32_t w0 = *(const uint32_t *)col, w1 = *(const uint32_t *)(col + 16);
            const uint32_t w2 = *(const uint32_t *)(col + 128), w3 = *(const uint32_t *)(col + 144);
            ra[0] = q8_pair<0>(w0, w1); ra[1] = q8_pair<1>(w0, w1); ra[2] = q8_pair<2>(w0, w1); ra[3] = q8_pair<3>(w0, w1);
            rb[0] = q8_pair<0>(w2, w3); rb[1] = q8_pair<1>(w2, w3); rb[2] = q8_pair<2>(w2, w3); rb[3] = q8_pair<3>(w2, w3);
        } else {
            const uint32_t wa = *(const uint32_t *)(grp + 32 + (8 * k2 + t) * 16);
            const uint32_t wb = *(const uint32_t *)(grp + 32 + (8 * k2 + t + 4) * 16);
            ra[0] = q4_byte<0>(wa); ra[1] = q4_byte<1>(wa); ra[2] = q4_byte<2>(wa); ra[3] = q4_byte<3>(wa);
            rb[0] = q4_byte<0>(wb); rb[1] = q4_byte<1>(wb); rb[2] = q4_byte<2>(wb); rb[3] = q4_byte<3>(wb);
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t s2 = hdup(sc[j]);
            ba[j] = hmul2u(ra[j], s2);
            bb[j] = hmul2u(rb[j], s2);
        }
    }
}

/* Value A fragments (V^T) of lane g for the row pairs (i, i + 4), i = 2 mi and 2 mi + 1, of the
 * lane's 8 rows at vr (vrb bytes apart), coordinates x = 8 wq .. 8 wq + 7 (tc_vcoord):
 * va[pr][x - 8 wq] = half2 (row i, row i + 4). q4_0 / q8_0 multiply by the row's scale in fp16;
 * a row whose bit in ok is 0 gets scale 0 (its bytes may be stale). TQ4: centroids. */
template <int KT, int D>
VQ_HD void tc_vfrag(const uint8_t *vr, int vrb, int g, int mi, int wq, unsigned ok, const uint32_t *lutv, uint32_t k4,
                    uint32_t (&va)[2][8]) {
#pragma unroll
    for (int pr = 0; pr < 2; pr++) {
        const int i = 2 * mi + pr;
        const uint8_t *ra = vr + (size_t)i * vrb, *rb = vr + (size_t)(i + 4) * vrb;
        const bool oka = (ok >> i) & 1u, okb = (ok >> (i + 4)) & 1u;
        if constexpr (KT == VQ_CUDA_KV_TQ4) {
            const int wi = g + 8 * wq;
            const uint32_t wa = ld32a2(ra + 2 + 4 * wi), wb = ld32a2(rb + 2 + 4 * wi);
            const uint32_t il = lop_andor(wa, 0x0F0F0F0Fu, (wb << 4) & 0xF0F0F0F0u);
            const uint32_t ih = lop_andor(wb, 0xF0F0F0F0u, (wa >> 4) & 0x0F0F0F0Fu);
            va[pr][0] = lut<0>(lutv, il, k4); va[pr][1] = lut<1>(lutv, il, k4);
            va[pr][2] = lut<2>(lutv, il, k4); va[pr][3] = lut<3>(lutv, il, k4);
            va[pr][4] = lut<0>(lutv, ih, k4); va[pr][5] = lut<1>(lutv, ih, k4);
            va[pr][6] = lut<2>(lutv, ih, k4); va[pr][7] = lut<3>(lutv, ih, k4);
        } else if constexpr (KT == VQ_CUDA_KV_Q8_0) {
            const int wi = g + 16 * wq, gi = wi >> 3, off = 34 * gi + 2 + 4 * (wi & 7);   /* words wi, wi + 8: groups gi, gi + 1 */
            const uint32_t wa0 = ld32a2(ra + off), wb0 = ld32a2(rb + off), wa1 = ld32a2(ra + off + 34), wb1 = ld32a2(rb + off + 34);
            const uint32_t sa0 = oka ? *(const uint16_t *)(ra + 34 * gi) : 0u, sb0 = okb ? *(const uint16_t *)(rb + 34 * gi) : 0u;
            const uint32_t sa1 = oka ? *(const uint16_t *)(ra + 34 * gi + 34) : 0u, sb1 = okb ? *(const uint16_t *)(rb + 34 * gi + 34) : 0u;
            const uint32_t s0 = sa0 | (sb0 << 16), s1 = sa1 | (sb1 << 16);
            va[pr][0] = hmul2u(q8_pair<0>(wa0, wb0), s0); va[pr][1] = hmul2u(q8_pair<1>(wa0, wb0), s0);
            va[pr][2] = hmul2u(q8_pair<2>(wa0, wb0), s0); va[pr][3] = hmul2u(q8_pair<3>(wa0, wb0), s0);
            va[pr][4] = hmul2u(q8_pair<0>(wa1, wb1), s1); va[pr][5] = hmul2u(q8_pair<1>(wa1, wb1), s1);
            va[pr][6] = hmul2u(q8_pair<2>(wa1, wb1), s1); va[pr][7] = hmul2u(q8_pair<3>(wa1, wb1), s1);
        } else {
            const int wi = g + 8 * wq, gi = wi >> 2, off = 18 * gi + 2 + 4 * (wi & 3);
            const uint32_t wa = ld32a2(ra + off), wb = ld32a2(rb + off);
            const uint32_t sa = oka ? *(const uint16_t *)(ra + 18 * gi) : 0u, sb = okb ? *(const uint16_t *)(rb + 18 * gi) : 0u;
            const uint32_t s2 = sa | (sb << 16);
            uint32_t lw[4], hw[4];
            q4_pair<0>(wa, wb, lw[0], hw[0]);
            q4_pair<1>(wa, wb, lw[1], hw[1]);
            q4_pair<2>(wa, wb, lw[2], hw[2]);
            q4_pair<3>(wa, wb, lw[3], hw[3]);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                va[pr][j] = hmul2u(lw[j], s2);
                va[pr][4 + j] = hmul2u(hw[j], s2);
            }
        }
    }
}

template <int KT, int D>
__global__ void __launch_bounds__(NT, 3) attn_split_tc(const __grid_constant__ Params p, int Gp) {
    using L = TLay<KT, D>;
    constexpr bool TQ = KT == VQ_CUDA_KV_TQ4;
    constexpr int NS = D / 16;
    extern __shared__ __align__(16) uint8_t dyn[];
    __shared__ __align__(16) float qs[8 * D];
    const int split = blockIdx.x + 1, h = blockIdx.y, s = blockIdx.z, tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const vq_cuda_seq sq = p.seqs[s];
    const int Hkv = p.f.n_kv_heads, gq = p.f.n_heads / Hkv;
    const size_t pidx = ((size_t)s * Hkv + h) * (size_t)(p.n_splits + 1) + split;
    float *ml = p.ml + pidx * Gp * 2, *acc_out = p.acc + pidx * Gp * D;
    const int c0 = (split - 1) * p.chunk;
    const int hi = min(sq.n_coded, sq.q_pos - sq.pos0 + 1);
    const int lo = sq.span > 0 ? sq.q_pos - sq.span + 1 - sq.pos0 : 0;
    const int a = max(c0, lo), b = min(c0 + p.chunk, hi);
    if (a >= b) {
        if (tid < Gp) { ml[2 * tid] = -INFINITY; ml[2 * tid + 1] = 0.0f; }
        return;
    }
    for (int i = tid; i < 8 * D; i += NT) {
        const int j = i / D, c = i % D;
        float v = j < gq ? p.q[((size_t)s * p.f.n_heads + (size_t)h * gq + j) * D + c] * p.qscale : 0.0f;
        if (p.f.rot_k) v *= p.f.rk[c];
        qs[i] = v;
    }
    uint32_t *lutk = (uint32_t *)(dyn + L::SMEM - L::LUT), *lutv = lutk + 256 * 8;
    (void)lutk;
    (void)lutv;
    if constexpr (TQ) {
        for (int i = tid; i < 256 * 8; i += NT) {
            const int e = i >> 3;
            lutk[i] = pack_h2(p.f.cent_k[e & 15], p.f.cent_k[e >> 4]);
            lutv[i] = pack_h2(p.f.cent_v[e & 15], p.f.cent_v[e >> 4]);
        }
    }
    __syncthreads();
    if (p.f.rot_k) {   /* the query into the keys' codec domain: H (rk ⊙ q) */
        for (int len = 1; len < D; len <<= 1) {
            for (int i = tid; i < gq * D / 2; i += NT) {
                const int j = i / (D / 2), k = i % (D / 2), i0 = (k / len) * 2 * len + k % len;
                const float x = qs[j * D + i0], y = qs[j * D + i0 + len];
                qs[j * D + i0] = x + y;
                qs[j * D + i0 + len] = x - y;
            }
            __syncthreads();
        }
    }
    /* the query fragment (rows g < 8; rows g + 8 are zero), fp16 */
    uint32_t aq[NS][2];
#pragma unroll
    for (int k = 0; k < NS; k++)
#pragma unroll
        for (int e = 0; e < 2; e++)
            aq[k][e] = pack_h2(qs[g * D + tc_qcoord<KT>(k, t, e, 0)], qs[g * D + tc_qcoord<KT>(k, t, e, 1)]);
    const int kblk = (int)p.f.k_block_bytes, vrb = (int)p.f.v_row_bytes;
    const uint8_t *kb = (const uint8_t *)sq.k + (size_t)h * sq.k_head_stride;
    const uint8_t *vb = (const uint8_t *)sq.v + (size_t)h * sq.v_head_stride;
    const int t_first = c0 + (a - c0) / TT * TT;
    const int b_load = (b + 15) / 16 * 16;
    const int n_tiles = (b - t_first + TT - 1) / TT;
    auto load = [&](int stage, int t0) {
        uint8_t *kt = dyn + (size_t)stage * L::STAGE, *vt = kt + L::KT_BYTES;
        const int n = min(TT, b_load - t0);
        const int kbytes = (n / 16) * kblk, vbytes = n * vrb;
        const uint8_t *ks = kb + (size_t)(t0 / 16) * kblk, *vs = vb + (size_t)t0 * vrb;
        for (int i = tid; i < kbytes / 16; i += NT) cp_async16(kt + 16 * i, ks + 16 * i);
        for (int i = tid; i < vbytes / 16; i += NT) cp_async16(vt + 16 * i, vs + 16 * i);
    };
#pragma unroll
    for (int i = 0; i < L::STAGES - 1; i++) {
        if (i < n_tiles) load(i, t_first + i * TT);
        cp_commit();
    }
    float o[NS][4];
#pragma unroll
    for (int m = 0; m < NS; m++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[m][e] = 0.0f;
    float m_run = -INFINITY, l_run = 0.0f;
    const uint32_t k4 = 4u * (lane & 7);
    for (int it = 0; it < n_tiles; it++) {
        cp_wait<L::STAGES - 2>();
        __syncthreads();
        const int nx = it + L::STAGES - 1;
        if (nx < n_tiles) load(nx % L::STAGES, t_first + nx * TT);
        cp_commit();
        const int t0 = t_first + it * TT;
        const uint8_t *kt = dyn + (size_t)(it % L::STAGES) * L::STAGE, *vt = kt + L::KT_BYTES;
        if (t0 + 32 * warp >= b) continue;   /* nothing of this warp's 32 rows is seen */
        /* ---- scores: sc[j][0..1] = S[query g][row 8t + 4e + j] (log2 units) ---- */
        float sc[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) sc[j][e] = 0.0f;
        const uint8_t *kw2 = kt + (size_t)(2 * warp) * kblk;   /* the warp's two key blocks */
#pragma unroll
        for (int k = 0; k < NS; k++) {
            uint32_t ba[4], bb[4];
            tc_kfrag<KT, D>(kw2, kblk, g, t, k, lutk, k4, ba, bb);
#pragma unroll
            for (int j = 0; j < 4; j++) mma16816(sc[j], aq[k][0], 0u, aq[k][1], 0u, ba[j], bb[j]);
        }
        float rs[8];   /* the score rows' factor: TQ4's norm, else 1 (scales are in the key fragments) */
        if constexpr (TQ) {
            const uint8_t *kr = kw2 + (size_t)(t >> 1) * kblk;   /* block of the lane's score rows 8t .. 8t + 7 */
            const uint4 nv = *(const uint4 *)(kr + 16 * (t & 1));
            const uint32_t nw[4] = {nv.x, nv.y, nv.z, nv.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                rs[2 * i] = hlo(nw[i]);
                rs[2 * i + 1] = hhi(nw[i]);
            }
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) rs[i] = 1.0f;
        }
        /* ---- online softmax over rows 8t + i, i = 4e + j ---- */
        const int r0 = t0 + 32 * warp + 8 * t;
        float sv[8], mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const bool ok = r0 + i >= a && r0 + i < b;
            sv[i] = ok ? sc[i & 3][i >> 2] * rs[i] : -INFINITY;
            mx = fmaxf(mx, sv[i]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run, mx);
        float alpha = 1.0f, pw[8], psum = 0.0f;
        if (m_new == -INFINITY) {
#pragma unroll
            for (int i = 0; i < 8; i++) pw[i] = 0.0f;
        } else {
            alpha = exp2f(m_run - m_new);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                pw[i] = exp2f(sv[i] - m_new);
                psum += pw[i];
            }
        }
        l_run = fmaf(l_run, alpha, psum);
        m_run = m_new;
        /* value rows of this lane: tile rows 32 warp + 8t + i */
        const uint8_t *vr = vt + (size_t)(32 * warp + 8 * t) * vrb;
        if constexpr (TQ) {
#pragma unroll
            for (int i = 0; i < 8; i++)
                if (pw[i] != 0.0f) pw[i] *= h2f(vr + (size_t)i * vrb);   /* the row's norm (fp16) */
        }
        /* B fragments of P^T: (rows 8t + i, 8t + i + 4) */
        uint32_t pb[4];
#pragma unroll
        for (int i = 0; i < 4; i++) pb[i] = pack_h2(pw[i], pw[i + 4]);
        /* rescale the accumulators: queries 2t, 2t + 1 live in lanes 8t, 8t + 4 */
        const float al0 = __shfl_sync(0xffffffffu, alpha, 8 * t), al1 = __shfl_sync(0xffffffffu, alpha, 8 * t + 4);
        if (__any_sync(0xffffffffu, al0 != 1.0f || al1 != 1.0f)) {
#pragma unroll
            for (int m = 0; m < NS; m++) {
                o[m][0] *= al0; o[m][1] *= al1; o[m][2] *= al0; o[m][3] *= al1;
            }
        }
        /* ---- values: O^T += V^T P^T, row pairs (i, i + 4), i = 0..3; MMA 0: i = 0, 1; MMA 1: i = 2, 3 ---- */
        unsigned ok = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) ok |= (r0 + i >= a && r0 + i < b ? 1u : 0u) << i;
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
#pragma unroll
            for (int wq = 0; wq < D / 64; wq++) {
                uint32_t va[2][8];
                tc_vfrag<KT, D>(vr, vrb, g, mi, wq, ok, lutv, k4, va);
#pragma unroll
                for (int mm = 0; mm < 4; mm++)
                    mma16816(o[4 * wq + mm], va[0][2 * mm], va[0][2 * mm + 1], va[1][2 * mm], va[1][2 * mm + 1], pb[2 * mi],
                             pb[2 * mi + 1]);
            }
        }
    }
    /* ---- merge the 4 warps: (m, l, o) per query ---- */
    cp_wait<0>();
    __syncthreads();
    float *wo = (float *)dyn, *wm = wo + 4 * 8 * D, *wl = wm + 4 * 8;
    l_run += __shfl_xor_sync(0xffffffffu, l_run, 1);
    l_run += __shfl_xor_sync(0xffffffffu, l_run, 2);
    if (t == 0) { wm[warp * 8 + g] = m_run; wl[warp * 8 + g] = l_run; }
#pragma unroll
    for (int m = 0; m < NS; m++) {
        const int ca = tc_vcoord<KT, D>(g, 2 * m), cb = tc_vcoord<KT, D>(g, 2 * m + 1);
        float *w0 = wo + (size_t)(warp * 8 + 2 * t) * D, *w1 = w0 + D;
        w0[ca] = o[m][0]; w1[ca] = o[m][1]; w0[cb] = o[m][2]; w1[cb] = o[m][3];
    }
    __syncthreads();
    for (int i = tid; i < gq * D; i += NT) {
        const int j = i / D, c = i % D;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, wm[w * 8 + j]);
        float acc = 0.0f, l = 0.0f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < 4; w++) {
                const float mw = wm[w * 8 + j];
                const float e = mw == -INFINITY ? 0.0f : exp2f(mw - M);
                acc = fmaf(e, wo[(size_t)(w * 8 + j) * D + c], acc);
                l = fmaf(e, wl[w * 8 + j], l);
            }
        }
        acc_out[(size_t)j * D + c] = acc;
        if (c == 0) { ml[2 * j] = M; ml[2 * j + 1] = l; }
    }
    for (int j = gq + tid; j < Gp; j += NT) { ml[2 * j] = -INFINITY; ml[2 * j + 1] = 0.0f; }
}

template <int KT, int D>
cudaError_t launch_tc_one(const Params &p, int Gp, dim3 grid, cudaStream_t st) {
    constexpr int sm = TLay<KT, D>::SMEM;
    static bool attr = false;
    if (!attr) {
        cudaError_t e = cudaFuncSetAttribute(attn_split_tc<KT, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, sm);
        if (e != cudaSuccess) return e;
        attr = true;
    }
    attn_split_tc<KT, D><<<grid, NT, sm, st>>>(p, Gp);
    return cudaGetLastError();
}
template <int KT>
cudaError_t launch_tc_type(int D, int Gp, const Params &p, dim3 grid, cudaStream_t st) {
    return D == 64 ? launch_tc_one<KT, 64>(p, Gp, grid, st) : launch_tc_one<KT, 128>(p, Gp, grid, st);
}

}  // namespace vqc
