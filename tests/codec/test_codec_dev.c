/* test_codec_dev.c: codec_dev.h's descriptions against the codecs themselves, on the CPU (so CI,
 * which has no GPU, holds the CUDA kernels' contract): for every row kind a device kernel reads,
 * the rows rebuilt from the block bytes as the description says (layout, scales or norms and
 * centroids, then x = r ⊙ (H y) when rotated) equal the codec's own decode; the kinds no kernel
 * reads are refused with a message. */
#include "../vq_test.h"
#include "core/core.h"
#include "codec/codec.h"
#include "codec/codec_dev.h"

static float h2f(const uint8_t *p) { vq_f16 h; memcpy(&h, p, 2); return vq_f16_to_f32(h); }

/* value of row r, coordinate i, in the codec domain, read from the bytes as codec_dev.h says */
static float dev_value(const vq_codec_dev *c, const uint8_t *blk, int r, int i) {
    const int d = c->d, g = i / 32, k = i % 32;
    switch (c->kind) {
    case VQ_CODEC_DEV_F16: return h2f(blk + 2 * (size_t)i);
    case VQ_CODEC_DEV_Q8_0:
        if (c->lanes) { const uint8_t *grp = blk + (size_t)g * 16 * 34; return h2f(grp + 2 * r) * (float)(int8_t)grp[32 + k * 16 + r]; }
        return h2f(blk + (size_t)g * 34) * (float)(int8_t)blk[(size_t)g * 34 + 2 + k];
    case VQ_CODEC_DEV_Q4_0: {
        const uint8_t *grp = c->lanes ? blk + (size_t)g * 16 * 18 : blk + (size_t)g * 18;
        const float sc = c->lanes ? h2f(grp + 2 * r) : h2f(grp);
        const uint8_t b = c->lanes ? grp[32 + (k & 15) * 16 + r] : grp[2 + (k & 15)];
        return sc * (float)((k < 16 ? b & 15 : b >> 4) - 8);
    }
    default: {   /* turboquant_mse, 4 bits, lanes layout */
        const int nb = c->norm32 ? 4 : 2, rows = c->lanes ? 16 : 1;
        const uint8_t *nr = blk + (size_t)nb * r, *codes = blk + (size_t)nb * rows;
        float n;
        if (c->norm32) memcpy(&n, nr, 4); else n = h2f(nr);
        const uint8_t b = c->lanes ? codes[(size_t)(i / 2) * 16 + r] : codes[(size_t)g * 16 + (k & 15)];
        const int code = c->lanes ? (i & 1 ? b >> 4 : b & 15) : (k < 16 ? b & 15 : b >> 4);
        (void)d;
        return n * c->cent[code];
    }
    }
}

static void check(const char *name, const char *key, const char *val, int d, int side, vq_rng *rng) {
    const vq_codec *c = vq_codec_find(name);
    vq_codec_param p[1];
    int np = 0;
    if (key) { snprintf(p[0].key, sizeof p[0].key, "%s", key); snprintf(p[0].val, sizeof p[0].val, "%s", val); np = 1; }
    vq_codec_state st;
    memset(&st, 0, sizeof st);
    st.codec = c;
    st.side = side;
    vq_err err = {0};
    CHECKF(c->init(&st, d, side, p, np, vq_rng_u64(rng), &err) == VQ_OK, "%s init: %s", name, err.msg);
    vq_codec_dev dv;
    vq_status s = vq_codec_dev_info(&st, &dv, &err);
    CHECKF(s == VQ_OK, "%s %s=%s side %d: %s", name, key ? key : "", val ? val : "", side, err.msg);
    if (s) { c->fini(&st); return; }
    const int rows = st.rows_per_block;
    CHECK(dv.rows_per_block == rows && dv.block_bytes == st.block_bytes && dv.d == d);
    float *x = malloc(sizeof(float) * 16 * d), *dec = malloc(sizeof(float) * 16 * d), *y = malloc(sizeof(float) * d);
    uint8_t *blk = malloc(st.block_bytes);
    for (int i = 0; i < rows * d; i++) x[i] = (float)vq_rng_gauss(rng);
    c->encode(&st, x, blk);
    c->decode(&st, blk, dec);
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < d; i++) y[i] = dev_value(&dv, blk, r, i);
        if (dv.rot_sign) {   /* x = r ⊙ (H y), H natural order, unnormalised */
            for (int h = 1; h < d; h *= 2)
                for (int i = 0; i < d; i += 2 * h)
                    for (int j = i; j < i + h; j++) { float a = y[j], b = y[j + h]; y[j] = a + b; y[j + h] = a - b; }
            for (int i = 0; i < d; i++) y[i] *= dv.rot_sign[i] * dv.rot_scale;
        }
        double nrm = 0;
        for (int i = 0; i < d; i++) nrm += (double)dec[(size_t)r * d + i] * dec[(size_t)r * d + i];
        for (int i = 0; i < d; i++) {
            const double e = fabs(y[i] - dec[(size_t)r * d + i]) / (sqrt(nrm / d) + 1e-30);
            if (e > worst) worst = e;
        }
    }
    /* float32 rounding of a log2(d)-level transform on both sides: far under 1e-5 of the row's rms */
    CHECKF(worst < 1e-5, "%s %s=%s d=%d side %d: rebuilt rows differ from decode by %.3g of the rms", name,
           key ? key : "", val ? val : "", d, side, worst);
    free(x); free(dec); free(y); free(blk);
    c->fini(&st);
}

/* a codec state of name with params p at head_dim 128 on side, which the device description must
 * refuse with a message (holding want, when given) */
static void refused_p(const char *name, const vq_codec_param *p, int np, int side, const char *want) {
    const vq_codec *c = vq_codec_find(name);
    vq_codec_state st;
    memset(&st, 0, sizeof st);
    st.codec = c;
    st.side = side;
    vq_err err = {0};
    if (c->init(&st, 128, side, p, np, 7, &err)) { CHECKF(0, "%s init: %s", name, err.msg); c->fini(&st); return; }
    vq_codec_dev dv;
    err.msg[0] = 0;
    CHECKF(vq_codec_dev_info(&st, &dv, &err) == VQ_ERR_ARG && err.msg[0] && (!want || strstr(err.msg, want)),
           "%s %s=%s: not refused as expected (%s)", name, np ? p[0].key : "", np ? p[0].val : "", err.msg);
    c->fini(&st);
}
static void refused(const char *name, const char *key, const char *val, int side) {
    vq_codec_param p[1];
    int np = 0;
    if (key) { snprintf(p[0].key, sizeof p[0].key, "%s", key); snprintf(p[0].val, sizeof p[0].val, "%s", val); np = 1; }
    refused_p(name, p, np, side, NULL);
}

int main(void) {
    vq_rng rng;
    vq_rng_seed(&rng, vq_t_seed(20261207));
    for (int d = 64; d <= 128; d *= 2)
        for (int side = 0; side < 2; side++) {
            check("f16", NULL, NULL, d, side, &rng);
            check("q8_0", NULL, NULL, d, side, &rng);
            check("q8_0", "rotate", "1", d, side, &rng);
            check("q4_0", NULL, NULL, d, side, &rng);
            check("q4_0", "rotate", "1", d, side, &rng);
            check("turboquant_mse", "bits", "4", d, side, &rng);
            check("turboquant_mse", "norm", "f32", d, side, &rng);
        }
    check("q8_0", "layout", "rows", 128, VQ_SIDE_V, &rng);   /* values are one row per block either way */
    refused("q8_0", "layout", "rows", VQ_SIDE_K);
    refused("turboquant_mse", "bits", "3", VQ_SIDE_K);
    refused("kivi", NULL, NULL, VQ_SIDE_K);
    refused("qjl", NULL, NULL, VQ_SIDE_K);
    /* a rotation in spans shorter than the row (rot=64 at head_dim 128): the kernels turn whole rows */
    const vq_codec_param span[2] = {{"rotate", "1"}, {"rot", "64"}};
    refused_p("q4_0", span, 2, VQ_SIDE_V, "rot=64");
    return vq_t_done();
}
