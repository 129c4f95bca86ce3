/* codec_f16.c: rows stored as IEEE half precision (llama.cpp's default KV type): 16 bits per
 * element, scores and sums read the halves directly (F16C converts in registers). Finite input
 * beyond the half range (|x| > 65504) is clamped to +-65504 rather than becoming inf. */
#include <immintrin.h>
#include <string.h>
#include "codec/codec.h"
#define VQ_CODEC_VEC_AVX512_HSUM
#include "codec/codec_vec.h"

#define T5 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

/* AVX-512, d % 16 == 0: 16 rows per query at once, one transpose-add reduction for the 16 */
T5 static void score16_512(int d, int n_q, const void *const *qs, const vq_f16 *rows, int n_rows,
                           float *scores) {
    for (int j = 0; j < n_q; j++) {
        const float *q = qs[j];
        for (int r0 = 0; r0 + 16 <= n_rows; r0 += 16) {
            __m512 a[16];
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++) a[r] = _mm512_setzero_ps();
            for (int c = 0; c < d; c += 16) {
                __m512 vq = _mm512_loadu_ps(q + c);
#pragma GCC unroll 16
                for (int r = 0; r < 16; r++)
                    a[r] = _mm512_fmadd_ps(vq, _mm512_cvtph_ps(_mm256_loadu_si256(
                               (const __m256i *)(rows + (size_t)(r0 + r) * d + c))), a[r]);
            }
            _mm512_storeu_ps(scores + (size_t)j * n_rows + r0, vq_hsum16x16_512(a));
        }
    }
}
/* AVX-512, d % 64 == 0: 64 accumulator lanes per query stay in registers across the rows */
T5 static void acc64_512(int d, int n_q, const float *w, const vq_f16 *rows, int n_rows,
                         float *const *acc) {
    for (int j = 0; j < n_q; j++) {
        const float *wj = w + (size_t)j * n_rows;
        for (int c = 0; c < d; c += 64) {
            float *y = acc[j] + c;
            __m512 a0 = _mm512_loadu_ps(y), a1 = _mm512_loadu_ps(y + 16);
            __m512 a2 = _mm512_loadu_ps(y + 32), a3 = _mm512_loadu_ps(y + 48);
            for (int r = 0; r < n_rows; r++) {
                if (wj[r] == 0.0f) continue;
                const vq_f16 *x = rows + (size_t)r * d + c;
                __m512 vw = _mm512_set1_ps(wj[r]);
                a0 = _mm512_fmadd_ps(vw, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)x)), a0);
                a1 = _mm512_fmadd_ps(vw, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + 16))), a1);
                a2 = _mm512_fmadd_ps(vw, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + 32))), a2);
                a3 = _mm512_fmadd_ps(vw, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + 48))), a3);
            }
            _mm512_storeu_ps(y, a0);
            _mm512_storeu_ps(y + 16, a1);
            _mm512_storeu_ps(y + 32, a2);
            _mm512_storeu_ps(y + 48, a3);
        }
    }
}

static vq_status f16_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                          uint64_t seed, vq_err *err) {
    vq_status s = vq_codec_params_check(st->codec, p, np, "", err);
    if (s) return s;
    st->d = d;
    st->rows_per_block = 1;
    st->block_bytes = (size_t)d * sizeof(vq_f16);
    st->qstate_bytes = (size_t)d * sizeof(float);
    st->acc_floats = d;
    return VQ_OK;
}
static void f16_fini(vq_codec_state *st) { (void)st; }
static void f16_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    vq_f16 *h = (vq_f16 *)(void *)block;
    for (int i = 0; i < st->d; i++) {
        float v = x[i];
        if (v > 65504.0f) v = 65504.0f;
        if (v < -65504.0f) v = -65504.0f;
        h[i] = vq_f32_to_f16(v);
    }
}
static void f16_decode(const vq_codec_state *st, const uint8_t *block, float *x) {
    const vq_f16 *h = (const vq_f16 *)(const void *)block;
    for (int i = 0; i < st->d; i++) x[i] = vq_f16_to_f32(h[i]);
}
static void f16_prep(const vq_codec_state *st, const float *q, void *qs) {
    memcpy(qs, q, (size_t)st->d * sizeof(float));
}
static void f16_score(const vq_codec_state *st, int n_q, const void *const *qs,
                      const uint8_t *blocks, int n_blocks, float *scores) {
    const int d = st->d;
    const vq_isa isa = vq_cvec_isa();
    int r = 0;
    if (isa == VQ_ISA_AVX512 && d % 16 == 0) {
        score16_512(d, n_q, qs, (const vq_f16 *)(const void *)blocks, n_blocks, scores);
        r = n_blocks / 16 * 16;
    }
    for (; r < n_blocks; r++) {
        const vq_f16 *k = (const vq_f16 *)(const void *)(blocks + (size_t)r * st->block_bytes);
        for (int j = 0; j < n_q; j++)
            scores[(size_t)j * n_blocks + r] = vq_cvec_dot_f16_isa(isa, (const float *)qs[j], k, d);
    }
}
static void f16_accumulate(const vq_codec_state *st, int n_q, const float *w,
                           const uint8_t *blocks, int n_blocks, float *const *acc) {
    const int d = st->d;
    const vq_isa isa = vq_cvec_isa();
    if (isa == VQ_ISA_AVX512 && d % 64 == 0) {
        acc64_512(d, n_q, w, (const vq_f16 *)(const void *)blocks, n_blocks, acc);
        return;
    }
    for (int r = 0; r < n_blocks; r++) {
        const vq_f16 *v = (const vq_f16 *)(const void *)(blocks + (size_t)r * st->block_bytes);
        for (int j = 0; j < n_q; j++) {
            float wj = w[(size_t)j * n_blocks + r];
            if (wj != 0.0f) vq_cvec_axpy_f16_isa(isa, acc[j], wj, v, d);
        }
    }
}
static void f16_finish(const vq_codec_state *st, const float *acc, float *out) {
    memcpy(out, acc, (size_t)st->d * sizeof(float));
}

const vq_codec vq_codec_f16 = {
    .name = "f16", .params_help = "(no parameters)",
    .init = f16_init, .fini = f16_fini, .encode = f16_encode, .decode = f16_decode,
    .prep_query = f16_prep, .score = f16_score, .accumulate = f16_accumulate, .finish = f16_finish,
};
