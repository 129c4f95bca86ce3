/* wtypes_k.c: Q5_0, Q5_1, IQ4_NL and the K-quants (Q2_K..Q6_K, IQ4_XS) read as integers.
 * Each decoder turns one block into vq_kdec (integer codes, integer per-16 scales and mins,
 * float multipliers); to_float and the scalar row kernels are built on it. The bit layouts
 * are ggml's (documented in docs/weights-kquants.md); results match gguf-py's dequantize. */
#include "kernels/kernels_impl.h"
#include <string.h>

const int8_t vq_iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                  1, 13, 25, 38, 53, 69, 89, 113};

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* 32-element blocks: byte j holds element j (low nibble) and j+16 (high); Q5's fifth bit of
 * element i is bit i of the little-endian qh word */
void vq_kdec_q5_0(const void *blk, vq_kdec *o) {
    const vq_block_q5_0 *b = blk;
    uint32_t qh = rd32(b->qh);
    o->d = vq_f16_to_f32(b->d); o->dm = 0.0f; o->has_min = 0;
    for (int j = 0; j < 16; j++) {
        o->q[j] = (int8_t)(((b->qs[j] & 15) | (((qh >> j) & 1) << 4)) - 16);
        o->q[j + 16] = (int8_t)(((b->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
    }
    o->sc[0] = o->sc[1] = 1; o->m[0] = o->m[1] = 0;
}

void vq_kdec_q5_1(const void *blk, vq_kdec *o) {
    const vq_block_q5_1 *b = blk;
    uint32_t qh = rd32(b->qh);
    o->d = vq_f16_to_f32(b->d); o->dm = vq_f16_to_f32(b->m); o->has_min = 1;
    for (int j = 0; j < 16; j++) {
        o->q[j] = (int8_t)((b->qs[j] & 15) | (((qh >> j) & 1) << 4));
        o->q[j + 16] = (int8_t)((b->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
    }
    o->sc[0] = o->sc[1] = 1; o->m[0] = o->m[1] = 1;
}

void vq_kdec_iq4_nl(const void *blk, vq_kdec *o) {
    const vq_block_iq4_nl *b = blk;
    o->d = vq_f16_to_f32(b->d); o->dm = 0.0f; o->has_min = 0;
    for (int j = 0; j < 16; j++) {
        o->q[j] = vq_iq4_levels[b->qs[j] & 15];
        o->q[j + 16] = vq_iq4_levels[b->qs[j] >> 4];
    }
    o->sc[0] = o->sc[1] = 1; o->m[0] = o->m[1] = 0;
}

/* Q2_K: 2-bit codes; byte l of 32-byte half h holds elements h*128 + s*32 + l at bits 2s;
 * scales[k] = scale (low nibble) | min (high nibble) of the 16 elements k*16.. */
void vq_kdec_q2_k(const void *blk, vq_kdec *o) {
    const vq_block_q2_k *b = blk;
    o->d = vq_f16_to_f32(b->d); o->dm = -vq_f16_to_f32(b->dmin); o->has_min = 1;
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++)
            for (int l = 0; l < 32; l++) o->q[h * 128 + s * 32 + l] = (int8_t)((b->qs[h * 32 + l] >> (2 * s)) & 3);
    for (int k = 0; k < 16; k++) { o->sc[k] = b->scales[k] & 15; o->m[k] = b->scales[k] >> 4; }
}

/* Q3_K: the 2 low bits as Q2_K; bit k of hmask[l] is the third bit of element k*32 + l, and a
 * clear bit subtracts 4 (q in -4..3); signed 6-bit scales per 16 */
void vq_kdec_q3_k(const void *blk, vq_kdec *o) {
    const vq_block_q3_k *b = blk;
    o->d = vq_f16_to_f32(b->d); o->dm = 0.0f; o->has_min = 0;
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++)
            for (int l = 0; l < 32; l++) {
                int i = h * 128 + s * 32 + l;
                int lo = (b->qs[h * 32 + l] >> (2 * s)) & 3, hb = (b->hmask[l] >> (i / 32)) & 1;
                o->q[i] = (int8_t)(lo - (hb ? 0 : 4));
            }
    for (int k = 0; k < 16; k++) { o->sc[k] = (int16_t)vq_q3k_scale(b->scales, k); o->m[k] = 0; }
}

/* Q4_K: byte l of 32-byte chunk c holds elements c*64 + l (low nibble) and c*64 + 32 + l (high);
 * 6-bit scale and min per 32 */
void vq_kdec_q4_k(const void *blk, vq_kdec *o) {
    const vq_block_q4_k *b = blk;
    o->d = vq_f16_to_f32(b->d); o->dm = -vq_f16_to_f32(b->dmin); o->has_min = 1;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            o->q[c * 64 + l] = (int8_t)(b->qs[c * 32 + l] & 15);
            o->q[c * 64 + 32 + l] = (int8_t)(b->qs[c * 32 + l] >> 4);
        }
    for (int j = 0; j < 8; j++) {
        int sc, m;
        vq_k4_scale_min(b->scales, j, &sc, &m);
        o->sc[2 * j] = o->sc[2 * j + 1] = (int16_t)sc;
        o->m[2 * j] = o->m[2 * j + 1] = (int16_t)m;
    }
}

/* Q5_K: Q4_K plus a fifth bit: bit k of qh[l] belongs to element k*32 + l */
void vq_kdec_q5_k(const void *blk, vq_kdec *o) {
    const vq_block_q5_k *b = blk;
    o->d = vq_f16_to_f32(b->d); o->dm = -vq_f16_to_f32(b->dmin); o->has_min = 1;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            int i0 = c * 64 + l, i1 = i0 + 32;
            o->q[i0] = (int8_t)((b->qs[c * 32 + l] & 15) | (((b->qh[l] >> (i0 / 32)) & 1) << 4));
            o->q[i1] = (int8_t)((b->qs[c * 32 + l] >> 4) | (((b->qh[l] >> (i1 / 32)) & 1) << 4));
        }
    for (int j = 0; j < 8; j++) {
        int sc, m;
        vq_k4_scale_min(b->scales, j, &sc, &m);
        o->sc[2 * j] = o->sc[2 * j + 1] = (int16_t)sc;
        o->m[2 * j] = o->m[2 * j + 1] = (int16_t)m;
    }
}

/* Q6_K: per 128-element half h, ql byte l (l < 64) holds element h*128 + l (low nibble) and
 * h*128 + 64 + l (high); qh byte l (l < 32) holds the top 2 bits of h*128 + s*32 + l at bits 2s;
 * q - 32; signed 8-bit scales per 16 */
void vq_kdec_q6_k(const void *blk, vq_kdec *o) {
    const vq_block_q6_k *b = blk;
    o->d = vq_f16_to_f32(b->d); o->dm = 0.0f; o->has_min = 0;
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 128; i++) {
            int lo = (b->ql[h * 64 + (i & 63)] >> (4 * (i >> 6))) & 15;
            int hi = (b->qh[h * 32 + (i & 31)] >> (2 * (i >> 5))) & 3;
            o->q[h * 128 + i] = (int8_t)((lo | (hi << 4)) - 32);
        }
    for (int k = 0; k < 16; k++) { o->sc[k] = b->scales[k]; o->m[k] = 0; }
}

/* IQ4_XS: IQ4_NL's levels in 8 groups of 32 (16 bytes each, nibble order as IQ4_NL), signed
 * 6-bit scale per 32 */
void vq_kdec_iq4_xs(const void *blk, vq_kdec *o) {
    const vq_block_iq4_xs *b = blk;
    o->d = vq_f16_to_f32(b->d); o->dm = 0.0f; o->has_min = 0;
    for (int j = 0; j < 8; j++) {
        for (int l = 0; l < 16; l++) {
            o->q[j * 32 + l] = vq_iq4_levels[b->qs[j * 16 + l] & 15];
            o->q[j * 32 + 16 + l] = vq_iq4_levels[b->qs[j * 16 + l] >> 4];
        }
        o->sc[2 * j] = o->sc[2 * j + 1] = (int16_t)vq_iq4xs_scale(b, j);
        o->m[2 * j] = o->m[2 * j + 1] = 0;
    }
}
