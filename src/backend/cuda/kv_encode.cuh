/* kv_encode.cuh: K/V rows encoded on the device into the CPU codecs' bytes (vq_cuda.h,
 * "encoding K/V rows on the device"; docs/cuda.md "Codes written on the GPU"). Host-and-device
 * code: kv_encode.cu's kernel runs these steps with one thread per coordinate (or per output
 * byte) and shared memory between them; tests/cuda/test_cuda_kvenc.cu runs the SAME steps on the
 * host in loops and compares every byte with the CPU codec's encode.
 *
 * Bit for bit, by construction: every float operation is the CPU encoder's, in its order, each
 * rounded once (on the device through the _rn intrinsics, so nvcc cannot contract a product and
 * a sum into one FMA; the CPU's encoders are plain C compiled without FMA, so they round twice):
 *   - q8_0 (codec_q8_0.c quant_row): amax = fmaxf over the 32 |x| (exact in any order), sc =
 *     amax / 127, id = 1 / sc (IEEE division both), code = roundf(x * id) clamped to ±127, scale
 *     stored as fp16 rounded to nearest even (core.c vq_f32_to_f16, ported below);
 *   - q4_0 (codec_q4_0.c): the first element of largest |x| in index order, sc = max / -8, id =
 *     1 / sc, code = (int)clamp(x * id + 8.5, 0, 15) with the product and the sum rounded apart;
 *   - rotate=1 (codec_ggml.h vq_ggml_rot): y = x * sgn (exact, sgn = ±1), the Walsh-Hadamard
 *     butterflies in the order of kernels/ops.c vq_fwht (strides 1, 2, 4, ...: every SIMD variant
 *     there gives the same bits, and so does a butterfly per thread), then y * scale;
 *   - turboquant_mse, 4 bits (tq_common.c vq_tq_rotate_unit, tq_lanes.c): ‖x‖² summed in double
 *     in index order (each x² exact in double; one thread sums, so the order is the CPU's), sqrt
 *     and 1/‖x‖ in double (IEEE on both), y = (float)(x * inv) then * sgn (the rotation's ±1/sqrt(d)
 *     factors), butterflies as above, index = the Lloyd-Max binary search over the boundaries
 *     (lloydmax.h), norm stored as (float)‖x‖ saturated to ±65504 then fp16 (vq_tq_put_h) or f32.
 * Inputs that came through the CPU store's fp16 window are decoded exactly (fp16 -> f32 is exact),
 * so the device takes the same floats the CPU takes. */
#ifndef VQ_CUDA_KV_ENCODE_CUH
#define VQ_CUDA_KV_ENCODE_CUH
#include <math.h>
#include <stdint.h>
#include "backend/cuda/vq_cuda.h"

#ifdef __CUDACC__
#define VQE_HD __host__ __device__ __forceinline__
#else
#define VQE_HD static inline
#endif

namespace vqe {

VQE_HD float fmul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
VQE_HD float fadd(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
VQE_HD float fsub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
VQE_HD float fdiv(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}
VQE_HD double dmul(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
VQE_HD double dadd(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
VQE_HD double ddiv(double a, double b) {
#ifdef __CUDA_ARCH__
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}
VQE_HD double dsqrt(double a) {
#ifdef __CUDA_ARCH__
    return __dsqrt_rn(a);
#else
    return sqrt(a);
#endif
}
VQE_HD float d2f(double a) {
#ifdef __CUDA_ARCH__
    return __double2float_rn(a);
#else
    return (float)a;
#endif
}
VQE_HD uint32_t fbits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    union { float f; uint32_t u; } v;
    v.f = f;
    return v.u;
#endif
}
VQE_HD float bitsf(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    union { float f; uint32_t u; } v;
    v.u = u;
    return v.f;
#endif
}

/* core.c's vq_f32_to_f16 (round to nearest even, saturating to inf past 65520), bit for bit */
VQE_HD uint16_t f32_to_f16(float f) {
    const uint32_t x = fbits(f), sign = (x >> 16) & 0x8000, absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) {
        if (absx < 0x33000000u) return (uint16_t)sign;
        const uint32_t man = (absx & 0x7fffff) | 0x800000;
        const int shift = 126 - (int)(absx >> 23);
        uint32_t r = man >> shift;
        const uint32_t rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = (absx >> 13) - (112u << 10);
    const uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}
/* core.c's vq_f16_to_f32 (exact) */
VQE_HD float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    return bitsf(bits);
}

/* ---- one row: the steps, each for one index i (a thread on the device, a loop on the host) ---- */

/* TurboQuant: ‖x‖ in double, summed in index order (one thread) */
VQE_HD double tq_norm(const float *x, int d) {
    double s = 0;
    for (int i = 0; i < d; i++) s = dadd(s, dmul((double)x[i], (double)x[i]));
    return dsqrt(s);
}
/* the zero / garbage row of vq_tq_rotate_unit: its direction is 0 */
VQE_HD int tq_degenerate(double nrm) { return !(nrm > 0) || !(nrm <= 1.7976931348623157e308); }

/* step 1, coordinate i: y = sgn ⊙ x (q8_0/q4_0 rotated), x (not rotated), sgn ⊙ (float)(x / ‖x‖) (TQ4) */
VQE_HD float step_in(const vq_cuda_enc *e, const float *x, int i, double inv, int degenerate) {
    if (e->type == VQ_CUDA_KV_TQ4) return degenerate ? 0.0f : fmul(d2f(dmul((double)x[i], inv)), e->sgn[i]);
    return e->rotate ? fmul(x[i], e->sgn[i]) : x[i];
}
/* step 2, butterfly p (0 <= p < d/2) of the stage of stride h (1, 2, 4, ... in that order) */
VQE_HD void step_fwht(float *y, int p, int h) {
    const int j = (p / h) * 2 * h + p % h;
    const float a = y[j], b = y[j + h];
    y[j] = fadd(a, b);
    y[j + h] = fsub(a, b);
}
/* step 3, coordinate i (q8_0/q4_0 rotated): the span's 1/sqrt(d) */
VQE_HD float step_scale(const vq_cuda_enc *e, float y) { return fmul(y, e->scale); }

/* where a block's pieces go: scale or norm of row r, group g; code byte j of group g */
VQE_HD size_t ggml_bb(const vq_cuda_enc *e) { return e->type == VQ_CUDA_KV_Q8_0 ? 34 : 18; }
VQE_HD size_t ggml_scale_at(const vq_cuda_enc *e, int r, int g) {
    return e->lanes ? (size_t)g * 16 * ggml_bb(e) + 2 * (size_t)r : (size_t)g * ggml_bb(e);
}
VQE_HD size_t ggml_code_at(const vq_cuda_enc *e, int r, int g, int j) {
    return e->lanes ? (size_t)g * 16 * ggml_bb(e) + 32 + (size_t)j * 16 + (size_t)r : (size_t)g * ggml_bb(e) + 2 + (size_t)j;
}

/* step 4, group g (32 coordinates): the block's scale (stored at its place) and 1/scale */
VQE_HD float step_group(const vq_cuda_enc *e, const float *y, int g, int r, uint8_t *out) {
    const float *xb = y + 32 * g;
    float sc, id;
    if (e->type == VQ_CUDA_KV_Q8_0) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
        sc = fdiv(amax, 127.0f);
        id = sc > 0 ? fdiv(1.0f, sc) : 0.0f;
    } else {
        float amax = 0, mx = 0;
        for (int i = 0; i < 32; i++)
            if (fabsf(xb[i]) > amax) { amax = fabsf(xb[i]); mx = xb[i]; }
        sc = fdiv(mx, -8.0f);
        id = sc != 0.0f ? fdiv(1.0f, sc) : 0.0f;
    }
    const uint16_t h = f32_to_f16(sc);
    uint8_t *p = out + ggml_scale_at(e, r, g);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
    return id;
}

/* the Lloyd-Max index (lloydmax.h vq_lloydmax_index: the same binary search, 16 levels) */
VQE_HD int tq_index(const vq_cuda_enc *e, float x) {
    int i = 0;
    for (int s = 8; s; s >>= 1) i += (x > e->bound[i + s - 1]) ? s : 0;
    return i;
}

/* bytes of codes per row (step 5 runs once per code byte) */
VQE_HD int code_bytes(const vq_cuda_enc *e) { return e->type == VQ_CUDA_KV_Q8_0 ? e->d : e->d / 2; }

/* step 5, code byte b of row r: computed from y (and the groups' 1/scale) and stored */
VQE_HD void step_code(const vq_cuda_enc *e, const float *y, const float *gid, int b, int r, uint8_t *out) {
    if (e->type == VQ_CUDA_KV_Q8_0) {
        const int g = b / 32, j = b % 32;
        float v = roundf(fmul(y[b], gid[g]));
        v = fminf(127.0f, fmaxf(-127.0f, v));
        out[ggml_code_at(e, r, g, j)] = (uint8_t)(int8_t)v;
    } else if (e->type == VQ_CUDA_KV_Q4_0) {
        const int g = b / 16, j = b % 16;
        const float id = gid[g];
        const float a = fadd(fmul(y[32 * g + j], id), 8.5f), c = fadd(fmul(y[32 * g + j + 16], id), 8.5f);
        const int i0 = (int)fminf(15.0f, fmaxf(0.0f, a)), i1 = (int)fminf(15.0f, fmaxf(0.0f, c));
        out[ggml_code_at(e, r, g, j)] = (uint8_t)(i0 | (i1 << 4));
    } else {
        const size_t nb = e->norm32 ? 4 : 2, hdr = nb * (e->lanes ? 16 : 1);
        int c0, c1;   /* the two coordinates of byte b */
        if (e->lanes) { c0 = 2 * b; c1 = 2 * b + 1; }
        else { c0 = 32 * (b / 16) + b % 16; c1 = c0 + 16; }
        const uint8_t v = (uint8_t)(tq_index(e, y[c0]) | (tq_index(e, y[c1]) << 4));
        out[hdr + (e->lanes ? (size_t)b * 16 + (size_t)r : (size_t)b)] = v;
    }
}

/* the TQ4 row norm at its place (vq_tq_put_norm) */
VQE_HD void tq_put_norm(const vq_cuda_enc *e, double nrm, int r, uint8_t *out) {
    float f = d2f(nrm);
    uint32_t u;
    if (e->norm32) {
        u = fbits(f);
        uint8_t *p = out + 4 * (size_t)r;
        p[0] = (uint8_t)u; p[1] = (uint8_t)(u >> 8); p[2] = (uint8_t)(u >> 16); p[3] = (uint8_t)(u >> 24);
        return;
    }
    if (f > 65504.0f) f = 65504.0f;
    if (f < -65504.0f) f = -65504.0f;
    u = f32_to_f16(f);
    uint8_t *p = out + 2 * (size_t)r;
    p[0] = (uint8_t)u;
    p[1] = (uint8_t)(u >> 8);
}

/* the row's input value i: row t of the window (fp16) or of src (f32) */
VQE_HD float in_value(const uint16_t *win, int n_win, const float *src, int H, int h, int d, int t, int i) {
    return t < n_win ? f16_to_f32(win[((size_t)t * H + h) * d + i]) : src[((size_t)(t - n_win) * H + h) * d + i];
}

}  // namespace vqe
#endif
