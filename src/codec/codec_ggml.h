/* codec_ggml.h: shared pieces of the llama.cpp-style KV codecs (q8_0, q4_0): the optional
 * randomized Hadamard rotation (rotate=1) and generic score loops over rows made of 32-element
 * blocks (layout=rows keys; values are summed by vq_ggl_acc_rows in ggml_lanes.c). A codec supplies a block decoder that produces the block's 32 values in
 * registers; the loops inline it (always_inline), so codes are read from memory and expanded
 * only in registers: no K_hat/V_hat row is ever written out. */
#ifndef VQ_CODEC_GGML_H
#define VQ_CODEC_GGML_H
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codec/codec.h"
#include "kernels/kernels.h"
#define VQ_CODEC_VEC_AVX512_HSUM
#include "codec/codec_vec.h"
#include "codec/ggml_lanes.h"

#define VQ_GGML_T2 __attribute__((target("avx2,fma,f16c")))
#define VQ_GGML_T5 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
#define VQ_GGML_INL static inline __attribute__((always_inline))
#define VQ_GGML_QB 8     /* queries sharing one pass over a row in the SIMD loops */

typedef struct vq_ggml_impl {
    int rotate;
    int span;        /* rotate: Walsh-Hadamard on each run of span elements (a power of two dividing d) */
    int lanes;       /* this state's blocks are lanes blocks (keys with layout=lanes): ggml_lanes.h */
    float *sgn;      /* d random signs when rotate */
} vq_ggml_impl;

/* parse rotate=0|1, rot=SPAN and layout=lanes|rows, check d; allocates impl (state_bytes counted); sets
 * rows_per_block (16 for lanes keys, else 1); the codec sets block_bytes */
static inline vq_status vq_ggml_init(vq_codec_state *st, int d, int side, const vq_codec_param *p,
                                     int np, uint64_t seed, vq_err *err) {
    const vq_codec *c = st->codec;
    vq_status s = vq_codec_params_check(c, p, np, "rotate,rot,layout", err);
    int rot = 0, span = 0;
    if (!s) s = vq_codec_param_int(c, p, np, "rotate", 0, 1, 0, &rot, err);
    if (!s) s = vq_codec_param_int(c, p, np, "rot", 0, 4096, 0, &span, err);
    if (s) return s;
    const char *lay = vq_codec_param_get(p, np, "layout");
    if (lay && strcmp(lay, "lanes") && strcmp(lay, "rows"))
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: layout=%s is not lanes or rows (%s)", c->name,
                          lay, c->params_help);
    const int lanes = !lay || !strcmp(lay, "lanes");
    if (lanes && side == VQ_SIDE_K && d > 4096)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: layout=lanes supports head_dim <= 4096, got %d "
                          "(layout=rows has no limit)", c->name, d);
    if (d % 32)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: head_dim %d is not a multiple of 32 (blocks of "
                          "32 elements)", c->name, d);
    if (span && !rot)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: rot=%d is the span of the rotation: it needs "
                          "rotate=1", c->name, span);
    if (rot && !span) {   /* default: the largest power of two dividing head_dim, at most 4096 */
        span = d & -d;
        if (span > 4096) span = 4096;
    }
    if (rot && ((span & (span - 1)) || span < 2 || d % span))
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: rot=%d must be a power of two (>= 2) that "
                          "divides head_dim %d (Walsh-Hadamard spans)", c->name, span, d);
    vq_ggml_impl *im = calloc(1, sizeof *im);
    if (!im) return vq_err_set(err, VQ_ERR_NOMEM, "codec %s: out of memory", c->name);
    st->impl = im;
    st->state_bytes = sizeof *im;
    im->rotate = rot;
    im->span = span;
    im->lanes = lanes && side == VQ_SIDE_K;
    if (rot) {
        im->sgn = malloc((size_t)d * sizeof(float));
        if (!im->sgn) return vq_err_set(err, VQ_ERR_NOMEM, "codec %s: out of memory", c->name);
        st->state_bytes += (size_t)d * sizeof(float);
        vq_rng r;
        vq_rng_seed(&r, seed);
        for (int i = 0; i < d; i++) im->sgn[i] = (float)vq_rng_sign(&r);
    }
    /* rot= is spelled only when it is not the whole row, so a power-of-two head_dim keeps the
     * params text (and state files) it always had */
    if (rot && span != d)
        snprintf(st->params, sizeof st->params, "rotate=1,rot=%d,layout=%s", span,
                 lanes ? "lanes" : "rows");
    else
        snprintf(st->params, sizeof st->params, "rotate=%d,layout=%s", rot, lanes ? "lanes" : "rows");
    st->d = d;
    st->rows_per_block = im->lanes ? VQ_GGL_ROWS : 1;
    st->qstate_bytes = (size_t)d * sizeof(float);
    st->acc_floats = d;
    return VQ_OK;
}
static inline void vq_ggml_fini(vq_codec_state *st) {
    vq_ggml_impl *im = st->impl;
    if (im) free(im->sgn);
    free(im);
    st->impl = NULL;
}
/* y = H D x (orthogonal; H the Walsh-Hadamard transform of each span, scaled by 1/sqrt(span)) and
 * its inverse x = D H y */
static inline void vq_ggml_rot(const vq_ggml_impl *im, int d, const float *x, float *y) {
    for (int i = 0; i < d; i++) y[i] = x[i] * im->sgn[i];
    for (int o = 0; o < d; o += im->span) vq_fwht(y + o, im->span);
    const float s = 1.0f / sqrtf((float)im->span);
    for (int i = 0; i < d; i++) y[i] *= s;
}
static inline void vq_ggml_unrot(const vq_ggml_impl *im, int d, const float *y, float *x) {
    if (x != y) memcpy(x, y, (size_t)d * sizeof(float));
    for (int o = 0; o < d; o += im->span) vq_fwht(x + o, im->span);
    const float s = 1.0f / sqrtf((float)im->span);
    for (int i = 0; i < d; i++) x[i] *= s * im->sgn[i];
}
static inline void vq_ggml_prep(const vq_codec_state *st, const float *q, void *qs) {
    const vq_ggml_impl *im = st->impl;
    if (im->rotate) vq_ggml_rot(im, st->d, q, qs);
    else memcpy(qs, q, (size_t)st->d * sizeof(float));
}
static inline void vq_ggml_finish(const vq_codec_state *st, const float *acc, float *out) {
    const vq_ggml_impl *im = st->impl;
    if (im->rotate) vq_ggml_unrot(im, st->d, acc, out);
    else memcpy(out, acc, (size_t)st->d * sizeof(float));
}

/* ---- generic loops: rows of nb = d/32 blocks of bb bytes; dec* expand one block ---- */
typedef void (*vq_dec512)(const uint8_t *blk, __m512 *c0, __m512 *c1);
typedef void (*vq_dec256)(const uint8_t *blk, __m256 *c);   /* c[4] */

VQ_GGML_T5 VQ_GGML_INL float vq_ggml_hsum512(__m512 v) { return _mm512_reduce_add_ps(v); }
VQ_GGML_T2 VQ_GGML_INL float vq_ggml_hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* AVX-512 scores: per query, 16 rows at once (one transpose-add reduction for the 16), the
 * rows' tail one at a time */
VQ_GGML_T5 VQ_GGML_INL void vq_ggml_score512(int d, size_t bb, int n_q, const void *const *qs,
                                             const uint8_t *rows, int n_rows, float *scores,
                                             vq_dec512 dec) {
    const int nb = d / 32;
    const size_t rb = (size_t)nb * bb;
    const int n16 = n_rows / 16 * 16;
    for (int j = 0; j < n_q; j++) {
        const float *q = qs[j];
        for (int r0 = 0; r0 < n16; r0 += 16) {
            __m512 a[16];
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++) a[r] = _mm512_setzero_ps();
            for (int b = 0; b < nb; b++) {
                const __m512 q0 = _mm512_loadu_ps(q + b * 32), q1 = _mm512_loadu_ps(q + b * 32 + 16);
#pragma GCC unroll 16
                for (int r = 0; r < 16; r++) {
                    __m512 c0, c1;
                    dec(rows + (size_t)(r0 + r) * rb + (size_t)b * bb, &c0, &c1);
                    a[r] = _mm512_fmadd_ps(q0, c0, a[r]);
                    a[r] = _mm512_fmadd_ps(q1, c1, a[r]);
                }
            }
            _mm512_storeu_ps(scores + (size_t)j * n_rows + r0, vq_hsum16x16_512(a));
        }
        for (int r = n16; r < n_rows; r++) {
            __m512 a = _mm512_setzero_ps();
            for (int b = 0; b < nb; b++) {
                __m512 c0, c1;
                dec(rows + (size_t)r * rb + (size_t)b * bb, &c0, &c1);
                a = _mm512_fmadd_ps(_mm512_loadu_ps(q + b * 32), c0, a);
                a = _mm512_fmadd_ps(_mm512_loadu_ps(q + b * 32 + 16), c1, a);
            }
            scores[(size_t)j * n_rows + r] = vq_ggml_hsum512(a);
        }
    }
}
VQ_GGML_T2 VQ_GGML_INL void vq_ggml_score256(int d, size_t bb, int n_q, const void *const *qs,
                                             const uint8_t *rows, int n_rows, float *scores,
                                             vq_dec256 dec) {
    const int nb = d / 32;
    const size_t rb = (size_t)nb * bb;
    for (int j0 = 0; j0 < n_q; j0 += VQ_GGML_QB) {
        const int nj = VQ_MIN(VQ_GGML_QB, n_q - j0);
        for (int r = 0; r < n_rows; r++) {
            const uint8_t *row = rows + (size_t)r * rb;
            __m256 a[VQ_GGML_QB];
            for (int j = 0; j < VQ_GGML_QB; j++) a[j] = _mm256_setzero_ps();
            for (int b = 0; b < nb; b++) {
                __m256 c[4];
                dec(row + (size_t)b * bb, c);
                for (int j = 0; j < nj; j++) {
                    const float *q = (const float *)qs[j0 + j] + b * 32;
                    a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q), c[0], a[j]);
                    a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8), c[1], a[j]);
                    a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + 16), c[2], a[j]);
                    a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + 24), c[3], a[j]);
                }
            }
            for (int j = 0; j < nj; j++) scores[(size_t)(j0 + j) * n_rows + r] = vq_ggml_hsum256(a[j]);
        }
    }
}
/* values on AVX2 and AVX-512: vq_ggl_acc_rows (ggml_lanes.c), accumulators in registers */
#endif
