/* repack.c: q4_0x16, Q4_0 rows interleaved 16 at a time (an in-memory type made at load from a
 * GGUF Q4_0 matrix, never stored in a file; docs/weights-kquants.md "q4_0x16"). The bytes are a
 * permutation of Q4_0's: same scales, same nibbles, so every product is Q4_0's bit for bit.
 * Layout: a group of 16 rows holds, for each 32-column block b in order, 288 bytes:
 *   d[16]     the 16 rows' fp16 scales of block b (row r at d[r])
 *   qs[4][64] chunk c (0..3), row r, byte i (0..3) = Q4_0 qs[4c + i] of row r, block b
 *             (low nibble: element 4c + i, high nibble: element 4c + i + 16)
 * so one 64-byte load holds four weights of each of the 16 rows, one 32-bit lane per row: the
 * AVX-512 VNNI kernel multiplies it by one broadcast 4-byte group of the activations, and the
 * 16 rows' scales convert in one instruction. A group is 16 * row_bytes bytes, so row r0 (a
 * multiple of 16) starts at r0 * row_bytes as in Q4_0.
 *
 * q4_Kx16, Q4_K rows interleaved alike: per 256-column super-block of a group, 2368 bytes (148 a
 * row, 4 more than Q4_K's 144: the 6-bit scales and mins are stored unpacked):
 *   d[16], dmin[16]   the rows' fp16 super-block scales, as in the Q4_K blocks
 *   8 x {sc[16], m[16]}   per 32-column sub-block a: the rows' 6-bit scale and min as bytes
 *   8 x qs[4][64]     per sub-block a: its 32 codes as q4_0x16 holds a block's
 * The kernel's sums are Q4_K's scalar kernel's (matmul_kquants.c) bit for bit.
 *
 * q6_Kx16, Q6_K alike: per super-block of a group, 3360 bytes (210 a row, as Q6_K):
 *   d[16]                     the rows' fp16 scales
 *   8 x {sc0[16], sc1[16]}    per sub-block a: the rows' int8 scales of its two 16-halves
 *   8 x {qs[4][64], qh[2][64]}  per sub-block: the codes' low 4 bits as q4_0x16 holds them;
 *                             qh[h] lane r byte i, bits 2k..2k+1: the top 2 bits of the code
 *                             whose low bits are in q4_0x16's vector 4h + k (h = 0: the low
 *                             nibbles of chunk k, elements 4k+i; h = 1: the high, 16+4k+i)
 * Codes are unsigned (q + 32), as in the file. */
#include "kernels/kernels_impl.h"
#include <string.h>

int vq_q4_0x16_repack(const void *src, void *dst, int rows, int cols) {
    if (rows <= 0 || rows % VQ_Q4X16_ROWS || cols <= 0 || cols % VQ_QK) return -1;
    const int nb = cols / VQ_QK;
    const vq_block_q4_0 *s = src;
    uint8_t *o = dst;
    for (int g = 0; g < rows; g += VQ_Q4X16_ROWS)
        for (int b = 0; b < nb; b++, o += VQ_Q4X16_ROWS * sizeof(vq_block_q4_0)) {
            for (int r = 0; r < VQ_Q4X16_ROWS; r++) {
                const vq_block_q4_0 *blk = s + (size_t)(g + r) * nb + b;
                memcpy(o + 2 * r, &blk->d, 2);
                for (int c = 0; c < 4; c++) memcpy(o + 32 + 64 * c + 4 * r, blk->qs + 4 * c, 4);
            }
        }
    return 0;
}

/* block b of row r (0..15) of a group back to a Q4_0 block */
static void q4x16_block(const uint8_t *grp, int nb, int b, int r, vq_block_q4_0 *out) {
    (void)nb;
    const uint8_t *p = grp + (size_t)b * VQ_Q4X16_ROWS * sizeof(vq_block_q4_0);
    memcpy(&out->d, p + 2 * r, 2);
    for (int c = 0; c < 4; c++) memcpy(out->qs + 4 * c, p + 32 + 64 * c + 4 * r, 4);
}

/* the reference: Q4_0's scalar kernel on the de-interleaved blocks (same sums, same order) */
void vq_rows_q4_0x16_scalar(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                            int nt, int nb, float *Y, int ldy) {
    vq_block_q4_0 row[64];
    for (int r = 0; r < nrows; r++) {
        const uint8_t *grp = W + (size_t)(r / VQ_Q4X16_ROWS) * VQ_Q4X16_ROWS * ws;
        for (int b0 = 0; b0 < nb; b0 += 64) {   /* a row in pieces of 64 blocks */
            const int n = VQ_MIN(64, nb - b0);
            for (int b = 0; b < n; b++) q4x16_block(grp, nb, b0 + b, r % VQ_Q4X16_ROWS, &row[b]);
            for (int t = 0; t < nt; t++) {
                const uint8_t *xb = (const uint8_t *)xa + (size_t)t * xs;
                const size_t off = (size_t)b0 * VQ_QK;
                float y = b0 ? Y[(size_t)t * ldy + r] : 0.0f;
                /* the piece through Q4_0's own kernel would restart the sum: continue it here */
                const int8_t *q = (const int8_t *)xb + off;
                const float *ds = vq_q8act_ds(xb, nb) + 2 * b0;
                for (int b = 0; b < n; b++) {
                    int sumi = 0;
                    for (int j = 0; j < VQ_QK / 2; j++) {
                        sumi += ((row[b].qs[j] & 0x0f) - 8) * q[b * VQ_QK + j];
                        sumi += ((row[b].qs[j] >> 4) - 8) * q[b * VQ_QK + j + VQ_QK / 2];
                    }
                    y += (vq_f16_to_f32(row[b].d) * ds[2 * b]) * (float)sumi;
                }
                Y[(size_t)t * ldy + r] = y;
            }
        }
    }
}

/* ---- q4_Kx16 ---- */
#define K16_META (64 + 8 * 32)   /* d, dmin, then sc/m per sub-block */
#define K16_SB (VQ_Q4X16_ROWS * 148)

int vq_q4_kx16_repack(const void *src, void *dst, int rows, int cols) {
    if (rows <= 0 || rows % VQ_Q4X16_ROWS || cols <= 0 || cols % VQ_QKK) return -1;
    const int nsb = cols / VQ_QKK;
    const vq_block_q4_k *s = src;
    uint8_t *o = dst;
    vq_kdec k;
    for (int g = 0; g < rows; g += VQ_Q4X16_ROWS)
        for (int sb = 0; sb < nsb; sb++, o += K16_SB)
            for (int r = 0; r < VQ_Q4X16_ROWS; r++) {
                const vq_block_q4_k *blk = s + (size_t)(g + r) * nsb + sb;
                vq_kdec_q4_k(blk, &k);
                memcpy(o + 2 * r, &blk->d, 2);
                memcpy(o + 32 + 2 * r, &blk->dmin, 2);
                for (int a = 0; a < 8; a++) {
                    o[64 + 32 * a + r] = (uint8_t)k.sc[2 * a];
                    o[64 + 32 * a + 16 + r] = (uint8_t)k.m[2 * a];
                    uint8_t *q = o + K16_META + 256 * a;
                    for (int c = 0; c < 4; c++)
                        for (int i = 0; i < 4; i++)
                            q[64 * c + 4 * r + i] = (uint8_t)(k.q[32 * a + 4 * c + i] | k.q[32 * a + 16 + 4 * c + i] << 4);
                }
            }
    return 0;
}

/* super-block sb of row r (0..15) of a group back to its decoded form */
static void k16_dec(const uint8_t *grp, int sb, int r, vq_kdec *k) {
    const uint8_t *p = grp + (size_t)sb * K16_SB;
    vq_f16 h;
    memcpy(&h, p + 2 * r, 2); k->d = vq_f16_to_f32(h);
    memcpy(&h, p + 32 + 2 * r, 2); k->dm = -vq_f16_to_f32(h);
    k->has_min = 1;
    for (int a = 0; a < 8; a++) {
        k->sc[2 * a] = k->sc[2 * a + 1] = p[64 + 32 * a + r];
        k->m[2 * a] = k->m[2 * a + 1] = p[64 + 32 * a + 16 + r];
        const uint8_t *q = p + K16_META + 256 * a;
        for (int c = 0; c < 4; c++)
            for (int i = 0; i < 4; i++) {
                uint8_t v = q[64 * c + 4 * r + i];
                k->q[32 * a + 4 * c + i] = (int8_t)(v & 15);
                k->q[32 * a + 16 + 4 * c + i] = (int8_t)(v >> 4);
            }
    }
}

/* the reference: Q4_K's scalar kernel's arithmetic on the decoded super-blocks */
void vq_rows_q4_kx16_scalar(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                            int nt, int nb, float *Y, int ldy) {
    const int nsb = nb / 8;
    vq_kdec k;
    for (int r = 0; r < nrows; r++) {
        const uint8_t *grp = W + (size_t)(r / VQ_Q4X16_ROWS) * VQ_Q4X16_ROWS * ws;
        for (int t = 0; t < nt; t++) Y[(size_t)t * ldy + r] = 0.0f;
        for (int sb = 0; sb < nsb; sb++) {
            k16_dec(grp, sb, r % VQ_Q4X16_ROWS, &k);
            for (int t = 0; t < nt; t++) {
                const void *xb = (const uint8_t *)xa + (size_t)t * xs;
                const int8_t *q = xb;
                const float *ds = vq_q8act_ds(xb, nb);
                float acc = Y[(size_t)t * ldy + r];
                for (int a = 0; a < 8; a++) {
                    int ab = sb * 8 + a;
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
                    acc += (k.d * dx) * (float)s1;
                    acc += (k.dm * dx) * (float)s2;
                }
                Y[(size_t)t * ldy + r] = acc;
            }
        }
    }
}

/* ---- q6_Kx16 ---- */
#define Q6_SB (VQ_Q4X16_ROWS * 210)
#define Q6_META (32 + 8 * 32)

int vq_q6_kx16_repack(const void *src, void *dst, int rows, int cols) {
    if (rows <= 0 || rows % VQ_Q4X16_ROWS || cols <= 0 || cols % VQ_QKK) return -1;
    const int nsb = cols / VQ_QKK;
    const vq_block_q6_k *s = src;
    uint8_t *o = dst;
    vq_kdec k;
    for (int g = 0; g < rows; g += VQ_Q4X16_ROWS)
        for (int sb = 0; sb < nsb; sb++, o += Q6_SB) {
            memset(o, 0, Q6_SB);
            for (int r = 0; r < VQ_Q4X16_ROWS; r++) {
                const vq_block_q6_k *blk = s + (size_t)(g + r) * nsb + sb;
                vq_kdec_q6_k(blk, &k);
                memcpy(o + 2 * r, &blk->d, 2);
                for (int a = 0; a < 8; a++) {
                    o[32 + 32 * a + r] = (uint8_t)(int8_t)k.sc[2 * a];
                    o[32 + 32 * a + 16 + r] = (uint8_t)(int8_t)k.sc[2 * a + 1];
                    uint8_t *q = o + Q6_META + 384 * a;
                    for (int c = 0; c < 4; c++)
                        for (int i = 0; i < 4; i++) {
                            int u0 = k.q[32 * a + 4 * c + i] + 32, u1 = k.q[32 * a + 16 + 4 * c + i] + 32;
                            q[64 * c + 4 * r + i] = (uint8_t)((u0 & 15) | (u1 & 15) << 4);
                            q[256 + 4 * r + i] |= (uint8_t)((u0 >> 4) << (2 * c));
                            q[320 + 4 * r + i] |= (uint8_t)((u1 >> 4) << (2 * c));
                        }
                }
            }
        }
    return 0;
}

static void q6k16_dec(const uint8_t *grp, int sb, int r, vq_kdec *k) {
    const uint8_t *p = grp + (size_t)sb * Q6_SB;
    vq_f16 h;
    memcpy(&h, p + 2 * r, 2); k->d = vq_f16_to_f32(h);
    k->dm = 0.0f; k->has_min = 0;
    for (int a = 0; a < 8; a++) {
        k->sc[2 * a] = (int8_t)p[32 + 32 * a + r];
        k->sc[2 * a + 1] = (int8_t)p[32 + 32 * a + 16 + r];
        k->m[2 * a] = k->m[2 * a + 1] = 0;
        const uint8_t *q = p + Q6_META + 384 * a;
        for (int c = 0; c < 4; c++)
            for (int i = 0; i < 4; i++) {
                uint8_t v = q[64 * c + 4 * r + i];
                int h0 = (q[256 + 4 * r + i] >> (2 * c)) & 3, h1 = (q[320 + 4 * r + i] >> (2 * c)) & 3;
                k->q[32 * a + 4 * c + i] = (int8_t)(((v & 15) | h0 << 4) - 32);
                k->q[32 * a + 16 + 4 * c + i] = (int8_t)(((v >> 4) | h1 << 4) - 32);
            }
    }
}

/* the reference: Q6_K's scalar kernel's arithmetic on the decoded super-blocks */
void vq_rows_q6_kx16_scalar(const uint8_t *W, size_t ws, int nrows, const void *xa, size_t xs,
                            int nt, int nb, float *Y, int ldy) {
    const int nsb = nb / 8;
    vq_kdec k;
    for (int r = 0; r < nrows; r++) {
        const uint8_t *grp = W + (size_t)(r / VQ_Q4X16_ROWS) * VQ_Q4X16_ROWS * ws;
        for (int t = 0; t < nt; t++) Y[(size_t)t * ldy + r] = 0.0f;
        for (int sb = 0; sb < nsb; sb++) {
            q6k16_dec(grp, sb, r % VQ_Q4X16_ROWS, &k);
            for (int t = 0; t < nt; t++) {
                const void *xb = (const uint8_t *)xa + (size_t)t * xs;
                const int8_t *q = xb;
                const float *ds = vq_q8act_ds(xb, nb);
                float acc = Y[(size_t)t * ldy + r];
                for (int a = 0; a < 8; a++) {
                    int ab = sb * 8 + a;
                    const int8_t *x = q + (size_t)ab * VQ_QK;
                    int s1 = 0;
                    for (int g = 0; g < 2; g++) {
                        int dq = 0, gi = a * 2 + g;
                        for (int j = 0; j < 16; j++) dq += k.q[gi * 16 + j] * x[g * 16 + j];
                        s1 += k.sc[gi] * dq;
                    }
                    acc += (k.d * ds[2 * ab]) * (float)s1;
                }
                Y[(size_t)t * ldy + r] = acc;
            }
        }
    }
}
