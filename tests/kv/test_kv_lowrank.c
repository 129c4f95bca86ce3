/* test_kv_lowrank.c: the low-rank codec (codec_lowrank.c), beyond the contract checks every codec
 * gets (test_codecs_attention, test_kv_codecs):
 *  - block bytes are exactly 2r (bits=16) or 2·ceil(r/32) + r·bits/8 (every byte counted), the
 *    state's r·d floats are counted in state_bytes;
 *  - at bits=16 a row decodes to its orthogonal projection on the calibration's first r axes of
 *    that layer, KV head and side (float64 reference), full rank gives the row back; another
 *    head's state projects on its own axes; 8 and 4 bits stay close to the projection;
 *  - no calibration, a version 3 calibration (no projections), another head_dim, a layer or head
 *    the file lacks, bad rk/rv/bits/rot: VQ_ERR_ARG naming it;
 *  - through the store with calib=FILE: attention from the codes equals float64 attention over the
 *    decoded rows (GQA, windows, per-side ranks and bits), bytes == tally; a version 3 file is
 *    refused at create with the reason, a file of another model at create. */
#include "../vq_test.h"
#include "kv/kv.h"
#include "codec/codec.h"
#include "kv_ref.h"
#include "../calib_fixture.h"

static vq_status mk(vq_codec_state *st, const vq_calib *cal, int d, int side, int layer, int head,
                    const char *pl, vq_err *err) {
    memset(st, 0, sizeof *st);
    st->codec = vq_codec_find("lowrank");
    st->side = side;
    st->ctx = (vq_codec_ctx){ .layer = layer, .n_layers = cal ? cal->n_layers : 0, .head = head,
                              .n_kv_heads = cal ? cal->n_kv_heads : 0, .calib = cal, .calib_path = "test.vqc" };
    vq_codec_param p[6];
    int np = 0;
    char buf[200];
    snprintf(buf, sizeof buf, "%s", pl);
    for (char *sv = NULL, *t = strtok_r(buf, ",", &sv); t && np < 6; t = strtok_r(NULL, ",", &sv)) {
        char *e = strchr(t, '=');
        if (!e) continue;
        *e = 0;
        snprintf(p[np].key, sizeof p[np].key, "%s", t);
        snprintf(p[np].val, sizeof p[np].val, "%s", e + 1);
        np++;
    }
    return st->codec->init(st, d, side, p, np, 77, err);
}

/* max |decode(encode(x)) - P_r x| / |x|, P_r the projection on rows 0..r-1 of basis B */
static double proj_err(const vq_codec_state *st, const float *B, int r, const float *x, int d, double *cosv) {
    uint8_t blk[1024];
    float y[256];
    double ref[256] = {0}, e = 0, n = 0, xy = 0, yy = 0;
    st->codec->encode(st, x, blk);
    st->codec->decode(st, blk, y);
    for (int j = 0; j < r; j++) {
        double c = 0;
        for (int i = 0; i < d; i++) c += (double)B[(size_t)j * d + i] * x[i];
        for (int i = 0; i < d; i++) ref[i] += c * B[(size_t)j * d + i];
    }
    for (int i = 0; i < d; i++) {
        e = fmax(e, fabs(y[i] - ref[i]));
        n += (double)x[i] * x[i];
        xy += ref[i] * y[i];
        yy += (double)y[i] * y[i];
    }
    double rr = 0;
    for (int i = 0; i < d; i++) rr += ref[i] * ref[i];
    if (cosv) *cosv = xy / sqrt(rr * yy + 1e-30);
    return e / sqrt(n);
}

int main(void) {
    vq_rng rng;
    vq_rng_seed(&rng, vq_t_seed(3333));
    if (!vq_codec_find("lowrank")) VQ_SKIP("no lowrank row");
    const int d = 64;
    vq_calib cal;
    vq_t_calib_make(&cal, 2, 4, 2, d, &rng);
    vq_err err;
    vq_codec_state st, st2;

    /* bytes */
    const struct { const char *pl; size_t bytes; } by[] = {
        { "rk=32", 64 }, { "rk=32,bits=8", 34 }, { "rk=32,bits=4", 18 }, { "rk=20,bits=4", 12 },
        { "rk=40,bits=8", 44 }, { "rk=64,bits=16", 128 }, { "rk=7,bits=4,rot=0", 6 } };
    for (size_t i = 0; i < VQ_ARRAY_LEN(by); i++) {
        CHECKF(mk(&st, &cal, d, VQ_SIDE_K, 1, 1, by[i].pl, &err) == VQ_OK, "%s: %s", by[i].pl, err.msg);
        CHECKF(st.block_bytes == by[i].bytes, "%s: %zu bytes, want %zu", by[i].pl, st.block_bytes, by[i].bytes);
        CHECK(st.state_bytes >= sizeof(float) * (size_t)atoi(by[i].pl + 3) * d);
        st.codec->fini(&st);
    }

    /* bits=16: the orthogonal projection on the layer's, head's and side's first r axes */
    float x[64];
    for (int side = 0; side < 2; side++)
        for (int r = 1; r <= d; r += 21) {
            char pl[64];
            snprintf(pl, sizeof pl, "%s=%d", side ? "rv" : "rk", r);
            CHECK(mk(&st, &cal, d, side, 1, 1, pl, &err) == VQ_OK);
            const float *B = (side ? cal.v_basis : cal.k_basis) + (size_t)(1 * 2 + 1) * d * d;
            for (int t = 0; t < 20; t++) {
                for (int i = 0; i < d; i++) x[i] = (float)vq_rng_gauss(&rng);
                double e = proj_err(&st, B, r, x, d, NULL);
                CHECKF(e < 2e-3, "side %d r %d: decode vs float64 projection %.3g", side, r, e);
            }
            st.codec->fini(&st);
        }
    CHECK(mk(&st, &cal, d, VQ_SIDE_K, 0, 0, "rk=64", &err) == VQ_OK);   /* full rank: the row back */
    for (int i = 0; i < d; i++) x[i] = (float)vq_rng_gauss(&rng);
    CHECK(proj_err(&st, cal.k_basis, d, x, d, NULL) < 2e-3);
    st.codec->fini(&st);
    /* a row in head 0's first 16 axes: kept by head 0's rank-16 state, not by head 1's */
    {
        const float *B0 = cal.k_basis + (size_t)(1 * 2 + 0) * d * d, *B1 = cal.k_basis + (size_t)(1 * 2 + 1) * d * d;
        memset(x, 0, sizeof x);
        for (int j = 0; j < 16; j++) {
            const double c = vq_rng_gauss(&rng);
            for (int i = 0; i < d; i++) x[i] += (float)(c * B0[(size_t)j * d + i]);
        }
        CHECK(mk(&st, &cal, d, VQ_SIDE_K, 1, 0, "rk=16", &err) == VQ_OK);
        CHECK(mk(&st2, &cal, d, VQ_SIDE_K, 1, 1, "rk=16", &err) == VQ_OK);
        double e0 = proj_err(&st, B0, 16, x, d, NULL), e1 = proj_err(&st2, B0, 16, x, d, NULL);
        CHECKF(e0 < 2e-3 && e1 > 0.1, "own axes %.3g, another head's %.3g", e0, e1);
        (void)B1;
        st.codec->fini(&st);
        st2.codec->fini(&st2);
    }
    /* 8 and 4 bits: close to the projection (cosine), more so at 8 */
    for (int bits = 4; bits <= 8; bits += 4)
        for (int rot = 0; rot < 2; rot++) {
            char pl[64];
            snprintf(pl, sizeof pl, "rk=48,bits=%d,rot=%d", bits, rot);
            CHECK(mk(&st, &cal, d, VQ_SIDE_K, 1, 1, pl, &err) == VQ_OK);
            double worst = 1;
            for (int t = 0; t < 50; t++) {
                for (int i = 0; i < d; i++) x[i] = (float)vq_rng_gauss(&rng);
                double cv;
                proj_err(&st, cal.k_basis + (size_t)3 * d * d, 48, x, d, &cv);
                worst = fmin(worst, cv);
            }
            printf("%s: worst cosine to the float64 projection %.5f\n", pl, worst);
            CHECKF(worst > (bits == 8 ? 0.9995 : 0.97), "%s: cosine %.5f", pl, worst);
            st.codec->fini(&st);
        }

    /* refusals */
    CHECK(mk(&st, NULL, d, VQ_SIDE_K, 0, 0, "", &err) == VQ_ERR_ARG && strstr(err.msg, "calib=FILE"));
    st.codec->fini(&st);
    {
        vq_calib c3 = cal;   /* a version 3 calibration: no projections */
        c3.has_lowrank = 0;
        c3.k_basis = c3.v_basis = c3.k_eig = c3.v_eig = NULL;
        CHECK(mk(&st, &c3, d, VQ_SIDE_K, 0, 0, "", &err) == VQ_ERR_ARG && strstr(err.msg, "no low-rank projections"));
        printf("version 3: %s\n", err.msg);
        st.codec->fini(&st);
    }
    CHECK(mk(&st, &cal, 128, VQ_SIDE_K, 0, 0, "", &err) == VQ_ERR_ARG && strstr(err.msg, "head_dim 64"));
    st.codec->fini(&st);
    CHECK(mk(&st, &cal, d, VQ_SIDE_V, 2, 0, "", &err) == VQ_ERR_ARG && strstr(err.msg, "layer 2"));
    st.codec->fini(&st);
    CHECK(mk(&st, &cal, d, VQ_SIDE_V, 0, 2, "", &err) == VQ_ERR_ARG && strstr(err.msg, "head 2"));
    st.codec->fini(&st);
    const char *badp[][2] = { {"rk", "0"}, {"rk", "65"}, {"rv", "x"}, {"bits", "6"}, {"bits", "2"}, {"rot", "2"},
                              {"nope", "1"} };
    for (size_t i = 0; i < VQ_ARRAY_LEN(badp); i++) {
        char pl[64];
        snprintf(pl, sizeof pl, "%s=%s", badp[i][0], badp[i][1]);
        CHECKF(mk(&st, &cal, d, VQ_SIDE_K, 0, 0, pl, &err) == VQ_ERR_ARG && strstr(err.msg, badp[i][0]), "%s: %s", pl, err.msg);
        st.codec->fini(&st);
    }

    /* through the store: attention on the codes vs float64 over the decoded rows */
    char dir[] = "/tmp/vq_lowrank_XXXXXX", path[256], path3[256], spec[700];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/c.vqc", dir);
    snprintf(path3, sizeof path3, "%s/c3.vqc", dir);
    CHECK(vq_calib_write(&cal, path, &err) == VQ_OK);
    {
        vq_calib c3 = cal;
        c3.has_lowrank = 0;
        c3.vi_sub_k = c3.vi_sub_v = 0;   /* version 3: neither low-rank arrays nor a VecInfer section */
        CHECK(vq_calib_write(&c3, path3, &err) == VQ_OK);
    }
    const char *specs[] = { "lowrank:rk=24,rv=40", "lowrank:rk=32,rv=32,bits=8", "lowrank:rk=48,rv=16,bits=4;window=7",
                            "k=lowrank:rk=20,bits=4;v=lowrank:rv=64,bits=8", "k=lowrank:rk=33,bits=8;v=q8_0;sink=3",
                            "k=f16;v=lowrank:rv=17,bits=4,rot=0" };
    vq_kv_dims D = {.n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = d, .max_ctx = 600};
    for (size_t s = 0; s < VQ_ARRAY_LEN(specs); s++) {
        snprintf(spec, sizeof spec, "%s;calib=%s", specs[s], path);
        vq_kv *kv = vq_kv_create_str(spec, &D, vq_rng_u64(&rng), &err);
        CHECKF(kv != NULL, "%s: %s", spec, err.msg);
        if (!kv) continue;
        const int H = 2, NH = 4, w = H * d, rows = 300, n_q = 6;
        float *K = malloc(sizeof(float) * rows * w), *V = malloc(sizeof(float) * rows * w);
        float *Kr = malloc(sizeof(float) * rows * w), *Vr = malloc(sizeof(float) * rows * w);
        int32_t pr[300];
        float Q[6 * 4 * 64], O[6 * 4 * 64];
        double R[6 * 4 * 64];
        int qp[6];
        for (int l = 0; l < 2; l++) {
            fill_uniform(&rng, K, (size_t)rows * w, 2.0f);
            fill_uniform(&rng, V, (size_t)rows * w, 1.0f);
            for (int r = 0; r < rows; r += 50)
                CHECK(vq_kv_append(kv, l, r, 50, K + (size_t)r * w, V + (size_t)r * w, &err) == VQ_OK);
            CHECK(vq_kv_read(kv, l, Kr, Vr, pr, &err) == VQ_OK);
            fill_uniform(&rng, Q, (size_t)n_q * NH * d, 2.0f);
            for (int i = 0; i < n_q; i++) qp[i] = i == 0 ? rows - 1 : (int)(vq_rng_u64(&rng) % rows);
            CHECK(vq_kv_attend(kv, l, n_q, qp, Q, O, &err) == VQ_OK);
            ref_attention(rows, Kr, Vr, pr, H, NH, d, n_q, qp, Q, R);
            double e = rel_err(n_q, NH, d, O, R);
            CHECKF(e < 1e-5, "'%s' layer %d: codes vs float64 over decoded rows rel err %.3g", specs[s], l, e);
        }
        CHECKF(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv), "%s: bytes %zu tally %zu", specs[s], vq_kv_bytes(kv),
               vq_kv_bytes_tally(kv));
        printf("%-50s ok, %.3f bits/elem at %d rows (%s)\n", specs[s], vq_kv_bits_per_elem(kv), rows, vq_kv_spec_str(kv));
        vq_kv_destroy(kv);
        free(K); free(V); free(Kr); free(Vr);
    }
    /* a version 3 file: refused at create, saying why; another model: refused at create */
    snprintf(spec, sizeof spec, "lowrank;calib=%s", path3);
    CHECK(vq_kv_create_str(spec, &D, 1, &err) == NULL && strstr(err.msg, "no low-rank projections"));
    printf("v3 file: %s\n", err.msg);
    snprintf(spec, sizeof spec, "lowrank;calib=%s", path);
    vq_kv_dims D2 = D;
    D2.n_kv_heads = 1;
    CHECK(vq_kv_create_str(spec, &D2, 1, &err) == NULL && strstr(err.msg, "another model"));
    printf("another model: %s\n", err.msg);
    unlink(path);
    unlink(path3);
    rmdir(dir);
    vq_calib_free(&cal);
    return vq_t_done();
}
