/* codec_q4_0.c: llama.cpp's q4_0 KV type: blocks of 32 values, an fp16 scale (the signed value
 * of largest magnitude / -8) and 32 4-bit codes offset by 8 (18 bytes = 4.5 bits per element);
 * byte j holds element j (low nibble) and j+16 (high nibble), as in ggml. rotate=1 applies a
 * randomized Hadamard rotation first (llama.cpp's rotated quantized KV cache).
 * layout=lanes (the default) stores keys 16 rows per block, the same blocks' bytes interleaved by
 * coordinate (ggml_lanes.c); layout=rows keeps each key row's blocks together. Values are one row
 * per block in both. */
#include "codec/codec_ggml.h"
#include "codec/codec_vec.h"

#define QK 32
#define BB 18

static vq_status q4_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                         uint64_t seed, vq_err *err) {
    vq_status s = vq_ggml_init(st, d, side, p, np, seed, err);
    if (s) return s;
    const vq_ggml_impl *im = st->impl;
    st->block_bytes = im->lanes ? vq_ggl_block_bytes(VQ_GGL_Q4, d) : (size_t)(d / QK) * BB;
    if (im->lanes) st->qstate_bytes = (size_t)(d + d / QK) * sizeof(float);   /* + per-group sums */
    return VQ_OK;
}

static void quant_row(const float *x, uint8_t *out, int d) {
    for (int b = 0; b < d / QK; b++) {
        const float *xb = x + b * QK;
        uint8_t *blk = out + (size_t)b * BB;
        float amax = 0, max = 0;
        for (int i = 0; i < QK; i++)
            if (fabsf(xb[i]) > amax) { amax = fabsf(xb[i]); max = xb[i]; }
        const float sc = max / -8.0f, id = sc != 0.0f ? 1.0f / sc : 0.0f;
        vq_f16 h = vq_f32_to_f16(sc);
        memcpy(blk, &h, 2);
        for (int j = 0; j < QK / 2; j++) {
            float a = xb[j] * id + 8.5f, c = xb[j + 16] * id + 8.5f;
            int i0 = (int)fminf(15.0f, fmaxf(0.0f, a)), i1 = (int)fminf(15.0f, fmaxf(0.0f, c));
            blk[2 + j] = (uint8_t)(i0 | (i1 << 4));
        }
    }
}
static void encode_row(const vq_codec_state *st, const float *x, uint8_t *out) {
    const vq_ggml_impl *im = st->impl;
    if (im->rotate) {
        float y[4096];
        vq_ggml_rot(im, st->d, x, y);
        quant_row(y, out, st->d);
    } else {
        quant_row(x, out, st->d);
    }
}
static void q4_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    const vq_ggml_impl *im = st->impl;
    if (!im->lanes) { encode_row(st, x, block); return; }
    uint8_t row[4096 / QK * BB];
    for (int r = 0; r < VQ_GGL_ROWS; r++) {
        encode_row(st, x + (size_t)r * st->d, row);
        vq_ggl_put_row(VQ_GGL_Q4, st->d, row, r, block);
    }
}
static inline float blk_scale(const uint8_t *blk) {
    vq_f16 h;
    memcpy(&h, blk, 2);
    return vq_f16_to_f32(h);
}
static inline float code_at(const uint8_t *blk, int i) {
    return (float)((i < 16 ? (blk[2 + i] & 15) : (blk[2 + i - 16] >> 4)) - 8);
}
static void decode_row(const vq_codec_state *st, const uint8_t *block, float *x) {
    for (int b = 0; b < st->d / QK; b++) {
        const uint8_t *blk = block + (size_t)b * BB;
        const float sc = blk_scale(blk);
        for (int i = 0; i < QK; i++) x[b * QK + i] = sc * code_at(blk, i);
    }
    const vq_ggml_impl *im = st->impl;
    if (im->rotate) vq_ggml_unrot(im, st->d, x, x);
}
static void q4_decode(const vq_codec_state *st, const uint8_t *block, float *x) {
    const vq_ggml_impl *im = st->impl;
    if (!im->lanes) { decode_row(st, block, x); return; }
    uint8_t row[4096 / QK * BB];
    for (int r = 0; r < VQ_GGL_ROWS; r++) {
        vq_ggl_get_row(VQ_GGL_Q4, st->d, block, r, row);
        decode_row(st, row, x + (size_t)r * st->d);
    }
}

VQ_GGML_T5 VQ_GGML_INL void dec512(const uint8_t *blk, __m512 *c0, __m512 *c1) {
    uint16_t h;
    memcpy(&h, blk, 2);
    __m512 s = _mm512_set1_ps(_cvtsh_ss(h));
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)));
    __m512i eight = _mm512_set1_epi32(8), m = _mm512_set1_epi32(15);
    __m512i lo = _mm512_sub_epi32(_mm512_and_si512(b, m), eight);
    __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(b, 4), eight);
    *c0 = _mm512_mul_ps(s, _mm512_cvtepi32_ps(lo));
    *c1 = _mm512_mul_ps(s, _mm512_cvtepi32_ps(hi));
}
VQ_GGML_T2 VQ_GGML_INL void dec256(const uint8_t *blk, __m256 *c) {
    uint16_t h;
    memcpy(&h, blk, 2);
    __m256 s = _mm256_set1_ps(_cvtsh_ss(h));
    __m256i eight = _mm256_set1_epi32(8), m = _mm256_set1_epi32(15);
    for (int k = 0; k < 2; k++) {
        __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + 8 * k)));
        c[k] = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(b, m), eight)));
        c[k + 2] = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b, 4), eight)));
    }
}
VQ_GGML_T5 static void score512(int d, int n_q, const void *const *qs, const uint8_t *rows, int n,
                                float *sc) { vq_ggml_score512(d, BB, n_q, qs, rows, n, sc, dec512); }
VQ_GGML_T2 static void score256(int d, int n_q, const void *const *qs, const uint8_t *rows, int n,
                                float *sc) { vq_ggml_score256(d, BB, n_q, qs, rows, n, sc, dec256); }

static void score_scalar(int d, int n_q, const void *const *qs, const uint8_t *rows, int n,
                         float *scores) {
    const size_t rb = (size_t)(d / QK) * BB;
    for (int r = 0; r < n; r++)
        for (int j = 0; j < n_q; j++) {
            const float *q = qs[j];
            float s = 0;
            for (int b = 0; b < d / QK; b++) {
                const uint8_t *blk = rows + r * rb + (size_t)b * BB;
                const float sc = blk_scale(blk);
                for (int i = 0; i < QK; i++) s += q[b * QK + i] * (sc * code_at(blk, i));
            }
            scores[(size_t)j * n + r] = s;
        }
}
static void acc_scalar(int d, int n_q, const float *w, const uint8_t *rows, int n, float *const *acc) {
    const size_t rb = (size_t)(d / QK) * BB;
    for (int r = 0; r < n; r++)
        for (int j = 0; j < n_q; j++) {
            const float wj = w[(size_t)j * n + r];
            if (wj == 0.0f) continue;
            for (int b = 0; b < d / QK; b++) {
                const uint8_t *blk = rows + r * rb + (size_t)b * BB;
                const float sc = blk_scale(blk);
                for (int i = 0; i < QK; i++) acc[j][b * QK + i] += wj * (sc * code_at(blk, i));
            }
        }
}

static void q4_score(const vq_codec_state *st, int n_q, const void *const *qs,
                     const uint8_t *blocks, int n_blocks, float *scores) {
    const vq_ggml_impl *im = st->impl;
    if (im->lanes) { vq_ggl_score(VQ_GGL_Q4, vq_cvec_isa(), st->d, n_q, qs, blocks, n_blocks, scores); return; }
    switch (vq_cvec_isa()) {
    case VQ_ISA_AVX512: score512(st->d, n_q, qs, blocks, n_blocks, scores); break;
    case VQ_ISA_AVX2: score256(st->d, n_q, qs, blocks, n_blocks, scores); break;
    default: score_scalar(st->d, n_q, qs, blocks, n_blocks, scores);
    }
}
static void q4_accumulate(const vq_codec_state *st, int n_q, const float *w,
                          const uint8_t *blocks, int n_blocks, float *const *acc) {
    const vq_ggml_impl *im = st->impl;
    if (im->lanes) { vq_ggl_accumulate(VQ_GGL_Q4, st->d, n_q, w, blocks, n_blocks, acc); return; }
    const vq_isa isa = vq_cvec_isa();   /* AVX2 and AVX-512: the register-resident loop of ggml_lanes.c */
    if (!vq_ggl_acc_rows(VQ_GGL_Q4, isa, st->d, n_q, w, blocks, n_blocks, acc))
        acc_scalar(st->d, n_q, w, blocks, n_blocks, acc);
}

/* lanes keys: the query, then its sum over each group of 32 (vq_ggl_score's -8 offset) */
static void q4_prep(const vq_codec_state *st, const float *q, void *qs) {
    vq_ggml_prep(st, q, qs);
    const vq_ggml_impl *im = st->impl;
    if (im->lanes) vq_ggl_prep_sums(st->d, qs);
}

const vq_codec vq_codec_q4_0 = {
    .name = "q4_0", .params_help = "rotate=0|1 (default 0), rot=SPAN (rotate=1: Walsh-Hadamard on runs of SPAN elements, a power of two dividing head_dim; default the largest such, at most 4096), layout=lanes|rows (default lanes: keys in blocks of 16 rows); head_dim multiple of 32",
    .init = q4_init, .fini = vq_ggml_fini, .encode = q4_encode, .decode = q4_decode,
    .prep_query = q4_prep, .score = q4_score, .accumulate = q4_accumulate,
    .finish = vq_ggml_finish,
};
