/* matmul_kquants.c: the scalar reference row kernels of Q5_0, Q5_1, IQ4_NL, the K-quants and
 * the tqw types.
 * They define the product the SIMD kernels must reproduce: per 32-element activation block,
 * integer sums s1 = sum_k sc[k]*sum(q*x) and s2 = sum_k m[k]*sum(x) over its two 16-groups,
 * then acc += (d*dx)*s1 + (dm*dx)*s2 in float, blocks in order. */
#include "kernels/kernels_impl.h"

static inline __attribute__((always_inline)) void rows_kdec(vq_kdec_fn dec, int blk, size_t bb,
        const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs, int nt, int nb,
        float *Y, int ldy) {
    int nwb = nb * VQ_QK / blk;   /* weight blocks per row */
    vq_kdec k;
    for (int r = 0; r < nrows; r++) {
        const uint8_t *w = W + (size_t)r * ws;
        for (int t0 = 0; t0 < nt; t0 += VQ_TILE) {   /* each block decoded once per tile of tokens */
            int tn = VQ_MIN(VQ_TILE, nt - t0);
            float acc[VQ_TILE] = {0};
            for (int wb = 0; wb < nwb; wb++) {
                dec(w + (size_t)wb * bb, &k);
                for (int t = 0; t < tn; t++) {
                    const void *xb = (const uint8_t *)xa + (size_t)(t0 + t) * xs;
                    const int8_t *q = xb;
                    const float *ds = vq_q8act_ds(xb, nb);
                    for (int a = 0; a < blk / VQ_QK; a++) {
                        int ab = wb * (blk / VQ_QK) + a;   /* activation block */
                        const int8_t *x = q + (size_t)ab * VQ_QK;
                        int s1 = 0, s2 = 0;
                        for (int g = 0; g < 2; g++) {
                            int dq = 0, sx = 0, gi = a * 2 + g;
                            for (int j = 0; j < 16; j++) {
                                dq += k.q[gi * 16 + j] * x[g * 16 + j];
                                sx += x[g * 16 + j];
                            }
                            s1 += k.sc[gi] * dq;
                            s2 += k.m[gi] * sx;
                        }
                        float dx = ds[2 * ab];
                        acc[t] += (k.d * dx) * (float)s1;
                        if (k.has_min) acc[t] += (k.dm * dx) * (float)s2;
                    }
                }
            }
            for (int t = 0; t < tn; t++) Y[(size_t)(t0 + t) * ldy + r] = acc[t];
        }
    }
}

#define KDEC_ROWS(name, blk, btype)                                                            \
    void vq_rows_##name##_scalar(const uint8_t *W, size_t ws, int nrows, const void *xa,        \
                                 size_t xs, int nt, int nb, float *Y, int ldy) {                \
        rows_kdec(vq_kdec_##name, blk, sizeof(btype), W, ws, nrows, xa, xs, nt, nb, Y, ldy);    \
    }
KDEC_ROWS(q5_0, VQ_QK, vq_block_q5_0)
KDEC_ROWS(q5_1, VQ_QK, vq_block_q5_1)
KDEC_ROWS(iq4_nl, VQ_QK, vq_block_iq4_nl)
KDEC_ROWS(q2_k, VQ_QKK, vq_block_q2_k)
KDEC_ROWS(q3_k, VQ_QKK, vq_block_q3_k)
KDEC_ROWS(q4_k, VQ_QKK, vq_block_q4_k)
KDEC_ROWS(q5_k, VQ_QKK, vq_block_q5_k)
KDEC_ROWS(q6_k, VQ_QKK, vq_block_q6_k)
KDEC_ROWS(iq4_xs, VQ_QKK, vq_block_iq4_xs)

/* tqw: activations arrive rotated (matmul.c), so group g of block wb meets activation block
 * 2*wb + g: acc += (d[g]*dx) * sum(L[code]*xq), groups in order; the SIMD kernels' definition */
static inline __attribute__((always_inline)) void rows_tqw(uint32_t type, size_t bb,
        const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs, int nt, int nb,
        float *Y, int ldy) {
    int8_t q[2][32];
    for (int r = 0; r < nrows; r++) {
        const uint8_t *w = W + (size_t)r * ws;
        for (int t0 = 0; t0 < nt; t0 += VQ_TILE) {
            int tn = VQ_MIN(VQ_TILE, nt - t0);
            float acc[VQ_TILE] = {0};
            for (int wb = 0; wb < nb / 2; wb++) {
                const uint8_t *blk = w + (size_t)wb * bb;
                float d[2];
                for (int g = 0; g < 2; g++) {
                    vq_f16 h; __builtin_memcpy(&h, blk + 2 * g, 2);
                    d[g] = vq_f16_to_f32(h);
                    vq_tqw_group_codes(type, blk, g, q[g]);
                }
                for (int t = 0; t < tn; t++) {
                    const void *xb = (const uint8_t *)xa + (size_t)(t0 + t) * xs;
                    const int8_t *x = xb;
                    const float *ds = vq_q8act_ds(xb, nb);
                    for (int g = 0; g < 2; g++) {
                        int ab = 2 * wb + g, s = 0;
                        for (int j = 0; j < 32; j++) s += q[g][j] * x[ab * VQ_QK + j];
                        acc[t] += (d[g] * ds[2 * ab]) * (float)s;
                    }
                }
            }
            for (int t = 0; t < tn; t++) Y[(size_t)(t0 + t) * ldy + r] = acc[t];
        }
    }
}
#define TQW_ROWS(name, TYPE, btype)                                                            \
    void vq_rows_##name##_scalar(const uint8_t *W, size_t ws, int nrows, const void *xa,        \
                                 size_t xs, int nt, int nb, float *Y, int ldy) {                \
        rows_tqw(TYPE, sizeof(btype), W, ws, nrows, xa, xs, nt, nb, Y, ldy);                    \
    }
TQW_ROWS(tqw4, VQ_TYPE_TQW4, vq_block_tqw4)
TQW_ROWS(tqw3, VQ_TYPE_TQW3, vq_block_tqw3)
TQW_ROWS(tqw2, VQ_TYPE_TQW2, vq_block_tqw2)
