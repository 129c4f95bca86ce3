/* test_kv_tq_split.c: the calibrated channel-split key codec (codec_tq_split.c), beyond the contract
 * checks every codec gets (test_codecs_attention, test_kv_codecs):
 *  - block bytes are exactly 4 + n_hi*hi/8 + n_lo*lo/8 (3.0 bits per element at d=64, hi=4, lo=2,
 *    pairs=8, every byte counted);
 *  - the pairs it gives more bits are the calibration's highest-energy pairs of that layer and KV
 *    head: a row living only in those pairs decodes with the hi-bit error, a row living only in
 *    the others with the lo-bit error; another head's state (other top pairs) does not;
 *  - no calibration, another head_dim, a layer or head the file lacks, bad frac/pairs: VQ_ERR_ARG
 *    with a message naming it; through the KV store: a missing, corrupt or mismatched calib=FILE
 *    (other layers, heads, head_dim or model config hash) is a clear error at parse or create. */
#include "../vq_test.h"
#include "veloxquant.h"
#include "codec/codec.h"
#include "kv/kv.h"
#include "../calib_fixture.h"

static vq_status mk(vq_codec_state *st, const vq_calib *cal, int d, int layer, int head, const char *k1,
                    const char *v1, vq_err *err) {
    memset(st, 0, sizeof *st);
    st->codec = vq_codec_find("tq_split");
    st->side = VQ_SIDE_K;
    st->ctx = (vq_codec_ctx){ .layer = layer, .n_layers = cal ? cal->n_layers : 0, .head = head,
                              .n_kv_heads = cal ? cal->n_kv_heads : 0, .calib = cal, .calib_path = "test.vqc" };
    vq_codec_param p[2];
    int np = 0;
    if (k1) { snprintf(p[np].key, 32, "%s", k1); snprintf(p[np].val, 64, "%s", v1); np++; }
    snprintf(p[np].key, 32, "hi"); snprintf(p[np].val, 64, "8"); np += strcmp(k1 ? k1 : "", "hi") ? 1 : 0;
    return st->codec->init(st, d, VQ_SIDE_K, p, np, 99, err);
}

/* cosine of decode(encode(x)) with x */
static double rt_cos(const vq_codec_state *st, const float *x, int d) {
    uint8_t blk[1024];
    float y[256];
    st->codec->encode(st, x, blk);
    st->codec->decode(st, blk, y);
    double xy = 0, xx = 0, yy = 0;
    for (int i = 0; i < d; i++) { xy += (double)x[i] * y[i]; xx += (double)x[i] * x[i]; yy += (double)y[i] * y[i]; }
    return xy / sqrt(xx * yy + 1e-30);
}

int main(void) {
    vq_rng rng;
    vq_rng_seed(&rng, vq_t_seed(4242));
    if (!vq_codec_find("tq_split")) VQ_SKIP("no tq_split row");
    const int d = 64;
    vq_calib cal;
    vq_t_calib_make(&cal, 2, 4, 2, d, &rng);
    /* layer 1: head 0's top 8 pairs are 0..7, head 1's are 24..31 */
    for (int h = 0; h < 2; h++)
        for (int p = 0; p < 32; p++)
            cal.pair_energy[((size_t)1 * 2 + h) * 32 + p] = (h == 0 ? p < 8 : p >= 24) ? 1000.0f + p : 1.0f + 0.01f * p;
    vq_err err;
    vq_codec_state st, st1;

    /* bytes: hi=4 lo=2 pairs=8 at d=64 -> 4 + 8 + 12 = 24 bytes = 3.0 bits per element */
    memset(&st, 0, sizeof st);
    st.codec = vq_codec_find("tq_split");
    st.ctx = (vq_codec_ctx){ .layer = 1, .n_layers = 2, .head = 0, .n_kv_heads = 2, .calib = &cal };
    vq_codec_param p3[3] = { {"hi", "4"}, {"lo", "2"}, {"pairs", "8"} };
    CHECK(st.codec->init(&st, d, VQ_SIDE_K, p3, 3, 1, &err) == VQ_OK);
    /* lanes (the default on keys when each subset allows it): 16 rows, the same 24 bytes a row */
    CHECKF(st.rows_per_block == 16 && st.block_bytes == 16 * 24, "lanes: %d rows, block bytes %zu",
           st.rows_per_block, st.block_bytes);
    CHECKF(!strcmp(st.params, "hi=4,lo=2,pairs=8,layout=lanes"), "params '%s'", st.params);
    st.codec->fini(&st);
    vq_codec_param p4[4] = { {"hi", "4"}, {"lo", "2"}, {"pairs", "8"}, {"layout", "rows"} };
    CHECK(st.codec->init(&st, d, VQ_SIDE_K, p4, 4, 1, &err) == VQ_OK);
    CHECKF(st.rows_per_block == 1 && st.block_bytes == 24, "rows: %d rows, block bytes %zu", st.rows_per_block,
           st.block_bytes);
    CHECKF(!strcmp(st.params, "hi=4,lo=2,pairs=8,layout=rows"), "params '%s'", st.params);
    st.codec->fini(&st);
    /* values keep one row per block; layout=lanes there, or on a subset it cannot hold, is refused */
    CHECK(st.codec->init(&st, d, VQ_SIDE_V, p3, 3, 1, &err) == VQ_OK);
    CHECKF(st.rows_per_block == 1 && st.block_bytes == 24, "V side: %d rows, %zu bytes", st.rows_per_block, st.block_bytes);
    st.codec->fini(&st);
    vq_codec_param p5[4] = { {"hi", "4"}, {"lo", "1"}, {"pairs", "8"}, {"layout", "lanes"} };   /* 48 coords at 1 bit */
    CHECK(st.codec->init(&st, d, VQ_SIDE_K, p5, 4, 1, &err) == VQ_ERR_ARG);
    CHECKF(strstr(err.msg, "layout=lanes") && strstr(err.msg, "lo=1 on 48"), "message: %s", err.msg);
    st.codec->fini(&st);
    vq_codec_param p6[2] = { {"frac", "0.5"}, {"layout", "lanes"} };
    CHECK(st.codec->init(&st, d, VQ_SIDE_V, p6, 2, 1, &err) == VQ_ERR_ARG);
    CHECKF(strstr(err.msg, "value side"), "message: %s", err.msg);
    st.codec->fini(&st);
    vq_codec_param p2[2] = { {"frac", "0.125"}, {"lo", "1"} };   /* 4 pairs at 4 bits, 56 coords at 1 */
    CHECK(st.codec->init(&st, d, VQ_SIDE_K, p2, 2, 1, &err) == VQ_OK);
    CHECKF(st.block_bytes == 4 + 4 + 7, "block bytes %zu", st.block_bytes);
    st.codec->fini(&st);

    /* the high-bit subset is the calibration's top pairs of (layer 1, head 0) */
    CHECK(mk(&st, &cal, d, 1, 0, "lo", "1", &err) == VQ_OK);    /* hi=8 on pairs 0..7, lo=1 elsewhere */
    CHECK(mk(&st1, &cal, d, 1, 1, "lo", "1", &err) == VQ_OK);   /* head 1: hi on pairs 24..31 */
    float xa[64] = {0}, xb[64] = {0};
    for (int i = 0; i < 16; i++) xa[i] = (float)vq_rng_gauss(&rng);        /* pairs 0..7 */
    for (int i = 48; i < 64; i++) xb[i] = (float)vq_rng_gauss(&rng);       /* pairs 24..31 */
    double ca0 = rt_cos(&st, xa, d), cb0 = rt_cos(&st, xb, d), ca1 = rt_cos(&st1, xa, d), cb1 = rt_cos(&st1, xb, d);
    printf("head 0: cos(top pairs) %.6f cos(other) %.6f; head 1: %.6f %.6f\n", ca0, cb0, ca1, cb1);
    CHECKF(ca0 > 0.9999, "head 0, its top pairs at 8 bits: cos %.6f", ca0);
    CHECKF(cb1 > 0.9999, "head 1, its top pairs at 8 bits: cos %.6f", cb1);
    CHECKF(cb0 < 0.99 && ca1 < 0.99, "pairs outside the top set at 1 bit: cos %.6f %.6f", cb0, ca1);
    st.codec->fini(&st);
    st1.codec->fini(&st1);

    /* errors */
    CHECK(mk(&st, NULL, d, 0, 0, NULL, NULL, &err) == VQ_ERR_ARG);
    CHECKF(strstr(err.msg, "calib=FILE") != NULL, "message: %s", err.msg);
    st.codec->fini(&st);
    CHECK(mk(&st, &cal, 128, 0, 0, NULL, NULL, &err) == VQ_ERR_ARG);
    CHECKF(strstr(err.msg, "head_dim 64") != NULL, "message: %s", err.msg);
    st.codec->fini(&st);
    CHECK(mk(&st, &cal, d, 2, 0, NULL, NULL, &err) == VQ_ERR_ARG);
    CHECKF(strstr(err.msg, "layer 2") != NULL, "message: %s", err.msg);
    st.codec->fini(&st);
    const char *badp[][2] = { {"frac", "1.5"}, {"frac", "x"}, {"pairs", "5"}, {"pairs", "40"}, {"lo", "9"}, {"nope", "1"} };
    for (size_t i = 0; i < VQ_ARRAY_LEN(badp); i++) {
        CHECKF(mk(&st, &cal, d, 0, 0, badp[i][0], badp[i][1], &err) == VQ_ERR_ARG && strstr(err.msg, badp[i][0]),
               "%s=%s: %s", badp[i][0], badp[i][1], err.msg);
        st.codec->fini(&st);
    }
    CHECK(mk(&st, &cal, 40, 0, 0, NULL, NULL, &err) == VQ_ERR_ARG);   /* head_dim % 16 */
    st.codec->fini(&st);

    /* through the store: calib=FILE missing, corrupt, for another model */
    char dir[] = "/tmp/vq_tq_split_XXXXXX", path[256], spec[600];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/c.vqc", dir);
    CHECK(vq_calib_write(&cal, path, &err) == VQ_OK);
    vq_kv_dims D = { 2, 4, 2, 64, 64, NULL, 0, 0 };
    snprintf(spec, sizeof spec, "k=tq_split:hi=4,lo=2;v=q8_0;calib=%s", path);
    vq_kv *kv = vq_kv_create_str(spec, &D, 1, &err);
    CHECKF(kv != NULL, "%s: %s", spec, err.msg);
    if (kv) {
        CHECKF(strstr(vq_kv_spec_str(kv), "calib=") != NULL, "normalized: %s", vq_kv_spec_str(kv));
        vq_kv_destroy(kv);
    }
    kv = vq_kv_create_str(spec, &D, 1, &err);   /* the model's config hash: checked by the session */
    CHECKF(kv != NULL, "%s: %s", spec, err.msg);
    CHECK(vq_kv_check_model(kv, cal.config_hash, &err) == VQ_OK);
    CHECK(vq_kv_check_model(kv, cal.config_hash ^ 1, &err) == VQ_ERR_STATE && strstr(err.msg, "config hash"));
    vq_kv_destroy(kv);
    vq_kv_dims D2 = { 3, 4, 2, 64, 64, NULL, 0, 0 }, D3 = { 2, 4, 1, 64, 64, NULL, 0, 0 }, D4 = { 2, 4, 2, 128, 64, NULL, 0, 0 };
    CHECK(vq_kv_create_str(spec, &D2, 1, &err) == NULL && strstr(err.msg, "layers"));
    CHECK(vq_kv_create_str(spec, &D3, 1, &err) == NULL && strstr(err.msg, "KV heads"));
    CHECK(vq_kv_create_str(spec, &D4, 1, &err) == NULL && strstr(err.msg, "head_dim"));
    CHECKF(strstr(err.msg, "another model") != NULL, "message: %s", err.msg);
    snprintf(spec, sizeof spec, "k=tq_split;v=q8_0;calib=%s/none.vqc", dir);
    CHECK(vq_kv_spec_parse(spec, &err) == NULL && strstr(err.msg, "none.vqc"));
    /* a corrupt file (one flipped byte in the statistics) */
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (f) { fseek(f, 200, SEEK_SET); int ch = fgetc(f); fseek(f, 200, SEEK_SET); fputc(ch ^ 1, f); fclose(f); }
    snprintf(spec, sizeof spec, "k=tq_split;v=q8_0;calib=%s", path);
    CHECK(vq_kv_spec_parse(spec, &err) == NULL && strstr(err.msg, "CRC"));
    printf("corrupt: %s\n", err.msg);
    snprintf(spec, sizeof spec, "k=tq_split;v=q8_0;calib=%s;calib=%s", path, path);
    CHECK(vq_kv_spec_parse(spec, &err) == NULL && strstr(err.msg, "twice"));
    unlink(path);
    rmdir(dir);
    vq_calib_free(&cal);
    return vq_t_done();
}
