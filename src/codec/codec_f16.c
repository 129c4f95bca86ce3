/* codec_f16.c: rows stored as IEEE half precision (llama.cpp's default KV type): 16 bits per
 * element, scores and sums read the halves directly (F16C converts in registers). Finite input
 * beyond the half range (|x| > 65504) is clamped to +-65504 rather than becoming inf. */
#include <string.h>
#include "codec/codec.h"
#include "codec/codec_vec.h"

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
    for (int r = 0; r < n_blocks; r++) {
        const vq_f16 *k = (const vq_f16 *)(const void *)(blocks + (size_t)r * st->block_bytes);
        for (int j = 0; j < n_q; j++)
            scores[(size_t)j * n_blocks + r] = vq_cvec_dot_f16_isa(isa, (const float *)qs[j], k, d);
    }
}
static void f16_accumulate(const vq_codec_state *st, int n_q, const float *w,
                           const uint8_t *blocks, int n_blocks, float *const *acc) {
    const int d = st->d;
    const vq_isa isa = vq_cvec_isa();
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
