/* codec_f32.c: the uncompressed reference codec: a block is one row of d float32, the query
 * state is the query itself, the accumulator is the output. Every other codec is measured
 * against this one (32 bits per element). */
#include <immintrin.h>
#include <string.h>
#include "codec/codec.h"
#define VQ_CODEC_VEC_AVX512_HSUM
#include "codec/codec_vec.h"

#define T5 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

/* AVX-512, d % 16 == 0: 16 rows per query at once, one transpose-add reduction for the 16 */
T5 static void score16_512(int d, int n_q, const void *const *qs, const float *rows, int n_rows,
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
                    a[r] = _mm512_fmadd_ps(vq, _mm512_loadu_ps(rows + (size_t)(r0 + r) * d + c), a[r]);
            }
            _mm512_storeu_ps(scores + (size_t)j * n_rows + r0, vq_hsum16x16_512(a));
        }
    }
}

static vq_status f32_init(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                          uint64_t seed, vq_err *err) {
    vq_status s = vq_codec_params_check(st->codec, p, np, "", err);
    if (s) return s;
    st->d = d;
    st->rows_per_block = 1;
    st->block_bytes = (size_t)d * sizeof(float);
    st->qstate_bytes = (size_t)d * sizeof(float);
    st->acc_floats = d;
    return VQ_OK;
}
static void f32_fini(vq_codec_state *st) { (void)st; }
static void f32_encode(const vq_codec_state *st, const float *x, uint8_t *block) {
    memcpy(block, x, (size_t)st->d * sizeof(float));
}
static void f32_decode(const vq_codec_state *st, const uint8_t *block, float *x) {
    memcpy(x, block, (size_t)st->d * sizeof(float));
}
static void f32_prep(const vq_codec_state *st, const float *q, void *qs) {
    memcpy(qs, q, (size_t)st->d * sizeof(float));
}
static void f32_score(const vq_codec_state *st, int n_q, const void *const *qs,
                      const uint8_t *blocks, int n_blocks, float *scores) {
    const int d = st->d;
    const vq_isa isa = vq_cvec_isa();
    int r = 0;
    if (isa == VQ_ISA_AVX512 && d % 16 == 0) {
        score16_512(d, n_q, qs, (const float *)(const void *)blocks, n_blocks, scores);
        r = n_blocks / 16 * 16;
    }
    for (; r < n_blocks; r++) {
        const float *k = (const float *)(const void *)(blocks + (size_t)r * st->block_bytes);
        for (int j = 0; j < n_q; j++)
            scores[(size_t)j * n_blocks + r] = vq_cvec_dot_isa(isa, (const float *)qs[j], k, d);
    }
}
static void f32_accumulate(const vq_codec_state *st, int n_q, const float *w,
                           const uint8_t *blocks, int n_blocks, float *const *acc) {
    const int d = st->d;
    const vq_isa isa = vq_cvec_isa();
    for (int r = 0; r < n_blocks; r++) {
        const float *v = (const float *)(const void *)(blocks + (size_t)r * st->block_bytes);
        for (int j = 0; j < n_q; j++) {
            float wj = w[(size_t)j * n_blocks + r];
            if (wj != 0.0f) vq_cvec_axpy_isa(isa, acc[j], wj, v, d);
        }
    }
}
static void f32_finish(const vq_codec_state *st, const float *acc, float *out) {
    memcpy(out, acc, (size_t)st->d * sizeof(float));
}

const vq_codec vq_codec_f32 = {
    .name = "f32", .params_help = "(no parameters)",
    .init = f32_init, .fini = f32_fini, .encode = f32_encode, .decode = f32_decode,
    .prep_query = f32_prep, .score = f32_score, .accumulate = f32_accumulate, .finish = f32_finish,
};
