/* wdecode.cuh: the GGUF weight blocks as the CUDA kernels read them (ops.cu): a unit of 32 weights
 * dotted with 32 activations (unit<T>::dot), and one weight (elem<T>). Host and device code alike,
 * so tests/cuda/test_cuda_wdecode.cu checks the decoding on any machine (no GPU needed) against
 * the CPU weight-type table's to_float. Block layouts: kernels/kernels_impl.h (ggml's). */
#ifndef VQ_CUDA_WDECODE_CUH
#define VQ_CUDA_WDECODE_CUH
#include <cuda_fp16.h>
#include <stdint.h>

#define VQC_HD __host__ __device__
namespace vqw {
enum { T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q8_0 = 8, T_Q4_K = 12, T_Q6_K = 14, T_BF16 = 30 };

VQC_HD inline float h2f(const uint8_t *p) {
    return __half2float(__ushort_as_half(*(const uint16_t *)p));
}
/* two bytes at an even offset as (lo, hi) */
VQC_HD inline uint32_t ld2(const uint8_t *p) { return *(const uint16_t *)p; }


/* ---- one unit of 32 weights dotted with x[0..32) ---- */
template <int T> struct unit;

template <> struct unit<T_Q8_0> {   /* 34 bytes: fp16 d, int8 q[32]; w = d q */
    static constexpr int bytes = 34, per_block = 1;
    VQC_HD static float dot(const uint8_t *b, int, const float *x) {
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < 32; j += 2) {
            uint32_t v = ld2(b + 2 + j);
            s += (float)(int8_t)(v & 0xff) * x[j] + (float)(int8_t)(v >> 8) * x[j + 1];
        }
        return h2f(b) * s;
    }
};
template <> struct unit<T_Q4_0> {   /* 18 bytes: fp16 d, q[16]: byte j = element j (low), j+16 (high); w = d (q - 8) */
    static constexpr int bytes = 18, per_block = 1;
    VQC_HD static float dot(const uint8_t *b, int, const float *x) {
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < 16; j += 2) {
            uint32_t v = ld2(b + 2 + j);
            s += (float)((int)(v & 0xf) - 8) * x[j] + (float)((int)((v >> 4) & 0xf) - 8) * x[j + 16] +
                 (float)((int)((v >> 8) & 0xf) - 8) * x[j + 1] + (float)((int)(v >> 12) - 8) * x[j + 17];
        }
        return h2f(b) * s;
    }
};
template <> struct unit<T_Q4_1> {   /* 20 bytes: fp16 d, fp16 m, q[16] as Q4_0; w = d q + m */
    static constexpr int bytes = 20, per_block = 1;
    VQC_HD static float dot(const uint8_t *b, int, const float *x) {
        float s = 0.0f, sx = 0.0f;
#pragma unroll
        for (int j = 0; j < 16; j += 2) {
            uint32_t v = ld2(b + 4 + j);
            s += (float)(v & 0xf) * x[j] + (float)((v >> 4) & 0xf) * x[j + 16] + (float)((v >> 8) & 0xf) * x[j + 1] +
                 (float)(v >> 12) * x[j + 17];
            sx += x[j] + x[j + 16] + x[j + 1] + x[j + 17];
        }
        return h2f(b) * s + h2f(b + 2) * sx;
    }
};
/* Q4_K, 144 bytes per 256: fp16 d, fp16 dmin, 12 bytes of 6-bit (scale, min) pairs for the 8
 * sub-blocks, q[128]: sub-blocks 2p and 2p+1 are the low and high nibbles of q[32p..32p+32).
 * w = d sc q - dmin m. */
template <> struct unit<T_Q4_K> {
    static constexpr int bytes = 144, per_block = 8;
    VQC_HD static float dot(const uint8_t *b, int j, const float *x) {
        const uint8_t *sc = b + 4;
        int s6, m6;
        if (j < 4) { s6 = sc[j] & 63; m6 = sc[j + 4] & 63; }
        else { s6 = (sc[j + 4] & 0xf) | ((sc[j - 4] >> 6) << 4); m6 = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4); }
        const uint8_t *q = b + 16 + 32 * (j >> 1);
        const int sh = (j & 1) * 4;
        float s = 0.0f, sx = 0.0f;
#pragma unroll
        for (int l = 0; l < 32; l += 2) {
            uint32_t v = ld2(q + l);
            s += (float)((v >> sh) & 0xf) * x[l] + (float)((v >> (8 + sh)) & 0xf) * x[l + 1];
            sx += x[l] + x[l + 1];
        }
        return h2f(b) * (float)s6 * s - h2f(b + 2) * (float)m6 * sx;
    }
};
/* Q6_K, 210 bytes per 256: ql[128], qh[64], int8 scales[16], fp16 d. Two halves of 128; in half
 * h, group g (32 values) takes 4 bits of ql[64h + (g&1)*32 + l] (low nibble for g < 2) and 2 bits
 * of qh[32h + l] (bits 2g..2g+1); scale scales[8h + 2g + l/16]; w = d sc (q - 32). */
template <> struct unit<T_Q6_K> {
    static constexpr int bytes = 210, per_block = 8;
    VQC_HD static float dot(const uint8_t *b, int j, const float *x) {
        const int h = j >> 2, g = j & 3;
        const uint8_t *ql = b + 64 * h + (g & 1) * 32, *qh = b + 128 + 32 * h;
        const int8_t *sc = (const int8_t *)(b + 192) + 8 * h + 2 * g;
        const int shl = (g >> 1) * 4, shh = 2 * g;
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int l = 0; l < 32; l += 2) {
            uint32_t vl = ld2(ql + l), vh = ld2(qh + l);
            int q0 = (int)(((vl >> shl) & 0xf) | (((vh >> shh) & 3) << 4)) - 32;
            int q1 = (int)(((vl >> (8 + shl)) & 0xf) | (((vh >> (8 + shh)) & 3) << 4)) - 32;
            float p = (float)q0 * x[l] + (float)q1 * x[l + 1];
            if (l < 16) s0 += p; else s1 += p;
        }
        return h2f(b + 208) * ((float)sc[0] * s0 + (float)sc[1] * s1);
    }
};

/* weight l (< 32) of unit u of the block at b: what the unit's dot multiplies x[l] by, up to rounding */
template <int T> VQC_HD inline float elem(const uint8_t *b, int u, int l) {
    float w;
    if (T == T_Q8_0) w = h2f(b) * (float)(int8_t)b[2 + l];
    else if (T == T_Q4_0) w = h2f(b) * (float)((int)((b[2 + (l & 15)] >> (l < 16 ? 0 : 4)) & 0xf) - 8);
    else if (T == T_Q4_1) w = h2f(b) * (float)((b[4 + (l & 15)] >> (l < 16 ? 0 : 4)) & 0xf) + h2f(b + 2);
    else if (T == T_Q4_K) {
        const uint8_t *sc = b + 4;
        int s6, m6;
        if (u < 4) { s6 = sc[u] & 63; m6 = sc[u + 4] & 63; }
        else { s6 = (sc[u + 4] & 0xf) | ((sc[u - 4] >> 6) << 4); m6 = (sc[u + 4] >> 4) | ((sc[u] >> 6) << 4); }
        const int q = (b[16 + 32 * (u >> 1) + l] >> ((u & 1) * 4)) & 0xf;
        w = h2f(b) * (float)s6 * (float)q - h2f(b + 2) * (float)m6;
    } else {   /* Q6_K */
        const int h = u >> 2, g = u & 3;
        const int lo = (b[64 * h + (g & 1) * 32 + l] >> ((g >> 1) * 4)) & 0xf;
        const int hi = (b[128 + 32 * h + l] >> (2 * g)) & 3;
        const int8_t sc = (int8_t)b[192 + 8 * h + 2 * g + l / 16];
        w = h2f(b + 208) * (float)sc * (float)((lo | (hi << 4)) - 32);
    }
    return w;
}
}  // namespace vqw
#endif
