/* wtypes_tqw.c: the TurboQuant weight types tqw4 / tqw3 / tqw2 (VeloxQuant's own, never in a
 * GGUF file): the fixed rotation, the Lloyd-Max level tables, and to_float / from_float.
 * The product never undoes the rotation: matmul.c rotates the activations instead (R is
 * orthogonal, so w·x = Rw·Rx), and the row kernels read the codes as int8 levels. */
#include "kernels/kernels_impl.h"
#include <math.h>
#include <string.h>

/* Lloyd-Max quantizers of N(0, 1) (boundaries = midpoints, centroids = conditional means,
 * iterated to convergence; the rotated coordinates of a 64-block are close to Gaussian), as
 * 127 * c_i / c_max rounded to int8. Centroids: 16 levels ±0.1284 ±0.3880 ±0.6568 ±0.9423
 * ±1.2562 ±1.6180 ±2.0690 ±2.7326; 8: ±0.2451 ±0.7560 ±1.3439 ±2.1519; 4: ±0.4528 ±1.5104.
 * tests/kernels/test_tqw.c recomputes them and checks these tables. Entries past 2^b repeat
 * the last one so a stray index still reads a level. */
const int8_t vq_tqw4_levels[16] = {-127, -96, -75, -58, -44, -31, -18, -6,
                                   6, 18, 31, 44, 58, 75, 96, 127};
const int8_t vq_tqw3_levels[16] = {-127, -79, -45, -14, 14, 45, 79, 127,
                                   127, 127, 127, 127, 127, 127, 127, 127};
const int8_t vq_tqw2_levels[16] = {-127, -38, 38, 127, 127, 127, 127, 127,
                                   127, 127, 127, 127, 127, 127, 127, 127};

/* D's signs: the first output of vq_rng seeded with 0x7157 (checked by test_tqw.c) */
const uint64_t vq_tqw_signs = 0x33520de2b1611190ULL;

void vq_tqw_rotate(float *x, int64_t n) {
    for (int64_t b = 0; b + VQ_TQW_BLOCK <= n; b += VQ_TQW_BLOCK) {
        float *v = x + b;
        for (int i = 0; i < VQ_TQW_BLOCK; i++)
            if ((vq_tqw_signs >> i) & 1) v[i] = -v[i];
        vq_fwht(v, VQ_TQW_BLOCK);
        for (int i = 0; i < VQ_TQW_BLOCK; i++) v[i] *= 0.125f;   /* 1/sqrt(64), exact */
    }
}

void vq_tqw_group_codes(uint32_t type, const void *blk, int g, int8_t q[32]) {
    if (type == VQ_TYPE_TQW4) {
        const vq_block_tqw4 *b = blk;
        for (int j = 0; j < 32; j++) q[j] = vq_tqw4_levels[(b->qs[j] >> (4 * g)) & 15];
    } else if (type == VQ_TYPE_TQW3) {
        const vq_block_tqw3 *b = blk;
        uint64_t h; memcpy(&h, b->qh, 8);
        for (int j = 0; j < 32; j++) {
            int i = 32 * g + j;
            int c = ((b->ql[i & 15] >> (2 * (i >> 4))) & 3) | (int)(((h >> i) & 1) << 2);
            q[j] = vq_tqw3_levels[c];
        }
    } else {
        const vq_block_tqw2 *b = blk;
        for (int j = 0; j < 32; j++) {
            int i = 32 * g + j;
            q[j] = vq_tqw2_levels[(b->qs[i & 15] >> (2 * (i >> 4))) & 3];
        }
    }
}

/* decode: y = d[g] * L[code] (exact in float), then x = Rᵀ y = D H y / 8 */
static void tqw_to_float(uint32_t type, size_t bb, const void *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n / VQ_TQW_BLOCK; i++) {
        const uint8_t *blk = (const uint8_t *)src + (size_t)i * bb;
        float *y = dst + i * VQ_TQW_BLOCK;
        int8_t q[32];
        for (int g = 0; g < 2; g++) {
            vq_f16 h; memcpy(&h, blk + 2 * g, 2);   /* d[g] leads every tqw block */
            float d = vq_f16_to_f32(h);
            vq_tqw_group_codes(type, blk, g, q);
            for (int j = 0; j < 32; j++) y[32 * g + j] = d * (float)q[j];
        }
        vq_fwht(y, VQ_TQW_BLOCK);
        for (int j = 0; j < VQ_TQW_BLOCK; j++)
            y[j] = ((vq_tqw_signs >> j) & 1) ? -0.125f * y[j] : 0.125f * y[j];
    }
}

/* One group of 32 rotated values: the codes and scale minimizing sum (y - d*L[c])^2.
 * For a fixed d the best codes are the nearest levels; for fixed codes the best d is the
 * least-squares d* = sum(y*L) / sum(L^2) (better than a norm- or max-based scale: it is the
 * optimum for those codes). Alternating the two never raises the error; it is started from
 * several scales around max|y|/127 and the best result kept, as ggml's IQ4_NL search does. */
static void quantize_group(const double *y, const int8_t *L, int nl, double *d_out, uint8_t *c_out) {
    double amax = 0;
    for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(y[j]));
    int mid = nl / 2;
    if (!(amax > 0)) {   /* zero block: zero scale, any code */
        *d_out = 0;
        memset(c_out, mid, 32);
        return;
    }
    double bnd[15];
    for (int k = 0; k + 1 < nl; k++) bnd[k] = 0.5 * ((double)L[k] + (double)L[k + 1]);
    double best = -1, best_d = 0;
    uint8_t c[32];
    for (int s = 0; s < 12; s++) {
        double d = amax / 127.0 * (0.45 + 0.07 * s);
        for (int it = 0; it < 3; it++) {
            double id = 1.0 / d, syl = 0, sll = 0;
            for (int j = 0; j < 32; j++) {
                double u = y[j] * id;
                int k = 0;
                while (k + 1 < nl && u > bnd[k]) k++;
                c[j] = (uint8_t)k;
                syl += y[j] * L[k];
                sll += (double)L[k] * L[k];
            }
            double score = syl * syl / sll;   /* error = sum y^2 - score */
            if (score > best) { best = score; best_d = syl / sll; memcpy(c_out, c, 32); }
            if (!(syl > 0)) break;
            d = syl / sll;
        }
    }
    *d_out = best_d;
}

static void tqw_from_float(uint32_t type, size_t bb, const float *src, void *dst, int64_t n) {
    const int8_t *L = type == VQ_TYPE_TQW4 ? vq_tqw4_levels : type == VQ_TYPE_TQW3 ? vq_tqw3_levels
                                                                                    : vq_tqw2_levels;
    int nl = type == VQ_TYPE_TQW4 ? 16 : type == VQ_TYPE_TQW3 ? 8 : 4;
    for (int64_t i = 0; i < n / VQ_TQW_BLOCK; i++) {
        uint8_t *blk = (uint8_t *)dst + (size_t)i * bb;
        memset(blk, 0, bb);
        /* the rotation in double: no overflow for any finite float input, and the codes do not
         * depend on the ISA's float FWHT */
        double t[VQ_TQW_BLOCK];
        for (int j = 0; j < VQ_TQW_BLOCK; j++) {
            float v = src[i * VQ_TQW_BLOCK + j];
            t[j] = isfinite(v) ? (((vq_tqw_signs >> j) & 1) ? -(double)v : (double)v) : 0.0;
        }
        for (int h = 1; h < VQ_TQW_BLOCK; h *= 2)
            for (int a = 0; a < VQ_TQW_BLOCK; a += 2 * h)
                for (int j = a; j < a + h; j++) {
                    double p = t[j], q = t[j + h];
                    t[j] = p + q; t[j + h] = p - q;
                }
        uint8_t c[VQ_TQW_BLOCK];
        for (int g = 0; g < 2; g++) {
            double y[32], d;
            for (int j = 0; j < 32; j++) y[j] = t[32 * g + j] * 0.125;
            quantize_group(y, L, nl, &d, c + 32 * g);
            vq_f16 h = vq_f32_to_f16((float)fmin(d, 65504.0));   /* saturate: never inf */
            memcpy(blk + 2 * g, &h, 2);
        }
        if (type == VQ_TYPE_TQW4) {
            vq_block_tqw4 *b = (vq_block_tqw4 *)blk;
            for (int j = 0; j < 32; j++) b->qs[j] = (uint8_t)(c[j] | (c[32 + j] << 4));
        } else if (type == VQ_TYPE_TQW3) {
            vq_block_tqw3 *b = (vq_block_tqw3 *)blk;
            uint64_t h = 0;
            for (int j = 0; j < VQ_TQW_BLOCK; j++) {
                b->ql[j & 15] |= (uint8_t)((c[j] & 3) << (2 * (j >> 4)));
                h |= (uint64_t)(c[j] >> 2) << j;
            }
            memcpy(b->qh, &h, 8);
        } else {
            vq_block_tqw2 *b = (vq_block_tqw2 *)blk;
            for (int j = 0; j < VQ_TQW_BLOCK; j++) b->qs[j & 15] |= (uint8_t)(c[j] << (2 * (j >> 4)));
        }
    }
}

#define TQW_CONV(name, TYPE, btype)                                                           \
    void vq_##name##_to_float(const void *src, float *dst, int64_t n) {                       \
        tqw_to_float(TYPE, sizeof(btype), src, dst, n);                                       \
    }                                                                                         \
    void vq_##name##_from_float(const float *src, void *dst, int64_t n) {                     \
        tqw_from_float(TYPE, sizeof(btype), src, dst, n);                                     \
    }
TQW_CONV(tqw4, VQ_TYPE_TQW4, vq_block_tqw4)
TQW_CONV(tqw3, VQ_TYPE_TQW3, vq_block_tqw3)
TQW_CONV(tqw2, VQ_TYPE_TQW2, vq_block_tqw2)
