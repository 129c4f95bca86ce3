/* test_kv_gear.c: GEAR (codec_gear.c: a base codec + low rank of its error + sparse residual),
 * beyond the contract checks every codec gets (test_codecs_attention, test_kv_codecs):
 *  - block bytes are exactly the base's blocks + 2·R·(B + d) + 3·B·k (every byte counted);
 *  - rank=0,sparse=0 decodes exactly as the base; each added rank and sparse entry lowers the
 *    error of a block (heavy-tailed rows), and a row's largest remaining errors are the ones kept;
 *  - bad base (unknown, gear itself), group not a multiple of the base's block rows, rank and
 *    sparse out of range, the base's own errors: VQ_ERR_ARG naming it;
 *  - through the store, several bases (q4_0, q8_0, kivi, turboquant_mse, lowrank with calib=):
 *    attention from the codes equals float64 attention over the decoded rows, bytes == tally. */
#include "../vq_test.h"
#include "kv/kv.h"
#include "codec/codec.h"
#include "kv_ref.h"
#include "../calib_fixture.h"

static vq_status mk(vq_codec_state *st, const char *name, int d, const char *pl, vq_err *err) {
    memset(st, 0, sizeof *st);
    st->codec = vq_codec_find(name);
    st->side = VQ_SIDE_K;
    vq_codec_param p[10];
    int np = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", pl);
    for (char *sv = NULL, *t = strtok_r(buf, ",", &sv); t && np < 10; t = strtok_r(NULL, ",", &sv)) {
        char *e = strchr(t, '=');
        if (!e) continue;
        *e = 0;
        snprintf(p[np].key, sizeof p[np].key, "%s", t);
        snprintf(p[np].val, sizeof p[np].val, "%s", e + 1);
        np++;
    }
    return st->codec->init(st, d, VQ_SIDE_K, p, np, 5, err);
}

/* mean squared error of decode(encode(X)) over one block of rows */
static double blk_mse(const vq_codec_state *st, const float *x, float *y) {
    uint8_t *b = malloc(st->block_bytes);
    st->codec->encode(st, x, b);
    st->codec->decode(st, b, y);
    free(b);
    double e = 0;
    for (int i = 0; i < st->rows_per_block * st->d; i++) e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
    return e / (st->rows_per_block * st->d);
}

int main(void) {
    vq_rng rng;
    vq_rng_seed(&rng, vq_t_seed(5151));
    if (!vq_codec_find("gear")) VQ_SKIP("no gear row");
    const int d = 64, B = 64;
    vq_err err;
    vq_codec_state st, sb;

    /* bytes */
    CHECK(mk(&st, "gear", d, "base=q4_0,layout=rows,rank=2,group=64,sparse=0.02", &err) == VQ_OK);
    CHECKF(st.block_bytes == 64 * 36 + 2 * 2 * (64 + 64) + 3 * 64 * 1 && st.rows_per_block == 64,
           "%zu bytes", st.block_bytes);
    printf("gear:base=q4_0,rank=2,group=64,sparse=0.02 at d=64: %.3f bits per element\n", st.block_bytes * 8.0 / (64 * 64));
    st.codec->fini(&st);
    CHECK(mk(&st, "gear", d, "base=kivi,bits=4,rank=4,group=128,sparse=0.05", &err) == VQ_OK);
    CHECKF(st.block_bytes == 4 * (4 * 64 + 32 * 64 * 4 / 8) + 2 * 4 * (128 + 64) + 3 * 128 * 3, "%zu bytes (%s)",
           st.block_bytes, st.params);
    CHECK(st.fp_window == 128);   /* kivi's residual passes through */
    st.codec->fini(&st);

    /* heavy-tailed rows: rank 0 + sparse 0 is the base exactly; rank and sparse each lower the error */
    float *x = malloc(sizeof(float) * B * d), *y = malloc(sizeof(float) * B * d), *yb = malloc(sizeof(float) * B * d);
    float dir[64];
    for (int i = 0; i < d; i++) dir[i] = (float)vq_rng_gauss(&rng);
    for (int t = 0; t < B; t++)
        for (int i = 0; i < d; i++)
            x[t * d + i] = (float)(vq_rng_gauss(&rng) * (i % 13 == 0 ? 6.0 : 1.0) + 0.7 * dir[i] * vq_rng_gauss(&rng));
    CHECK(mk(&sb, "q4_0", d, "layout=rows", &err) == VQ_OK);
    double eb = 0;
    for (int t = 0; t < B; t++) eb += blk_mse(&sb, x + t * d, yb + t * d) / B;
    CHECK(mk(&st, "gear", d, "base=q4_0,layout=rows,rank=0,sparse=0", &err) == VQ_OK);
    double e0 = blk_mse(&st, x, y);
    CHECKF(memcmp(y, yb, sizeof(float) * B * d) == 0 && fabs(e0 - eb) < 1e-12 * (eb + 1), "rank 0 sparse 0: %g vs base %g", e0, eb);
    st.codec->fini(&st);
    double prev = e0;
    const char *steps[] = { "base=q4_0,layout=rows,rank=1,sparse=0", "base=q4_0,layout=rows,rank=2,sparse=0",
                            "base=q4_0,layout=rows,rank=4,sparse=0", "base=q4_0,layout=rows,rank=4,sparse=0.02",
                            "base=q4_0,layout=rows,rank=4,sparse=0.1" };
    for (size_t s = 0; s < VQ_ARRAY_LEN(steps); s++) {
        CHECK(mk(&st, "gear", d, steps[s], &err) == VQ_OK);
        double e = blk_mse(&st, x, y);
        printf("%-45s mse %.5f (base %.5f)\n", steps[s], e, eb);
        CHECKF(e < prev, "%s: mse %g not below %g", steps[s], e, prev);
        prev = e;
        st.codec->fini(&st);
    }
    /* sparse only: the kept entries are each row's largest errors of the base */
    CHECK(mk(&st, "gear", d, "base=q4_0,layout=rows,rank=0,sparse=0.05", &err) == VQ_OK);   /* 3 a row */
    blk_mse(&st, x, y);
    for (int t = 0; t < B; t++) {
        double eb3[3] = {0}, rest = 0;   /* the 3 largest base errors of the row; the largest kept error */
        for (int i = 0; i < d; i++) {
            double e = fabs((double)x[t * d + i] - yb[t * d + i]);
            for (int m = 0; m < 3; m++)
                if (e > eb3[m]) { for (int n = 2; n > m; n--) eb3[n] = eb3[n - 1]; eb3[m] = e; break; }
        }
        for (int i = 0; i < d; i++) rest = fmax(rest, fabs((double)x[t * d + i] - y[t * d + i]));
        CHECKF(rest <= eb3[2] * (1 + 1e-6) + 1e-6, "row %d: largest error left %g, the base's third %g", t, rest, eb3[2]);
    }
    st.codec->fini(&st);
    sb.codec->fini(&sb);

    /* refusals */
    const char *bad[][2] = { {"base=nope", "base=nope"}, {"base=gear", "base=gear"}, {"base=kivi,group=48", "group=48"},
                             {"rank=17", "rank"}, {"sparse=0.6", "sparse"}, {"sparse=x", "sparse"},
                             {"base=q4_0,bits=4", "base=q4_0"}, {"base=q4_0,rotate=2", "rotate"} };
    for (size_t i = 0; i < VQ_ARRAY_LEN(bad); i++) {
        CHECKF(mk(&st, "gear", d, bad[i][0], &err) == VQ_ERR_ARG && strstr(err.msg, bad[i][1]), "%s: %s", bad[i][0], err.msg);
        st.codec->fini(&st);
    }
    CHECK(mk(&st, "gear", 512, "base=f16", &err) == VQ_ERR_ARG && strstr(err.msg, "256"));
    st.codec->fini(&st);

    /* through the store */
    char cdir[] = "/tmp/vq_gear_XXXXXX", path[256], spec[600];
    CHECK(mkdtemp(cdir) != NULL);
    snprintf(path, sizeof path, "%s/c.vqc", cdir);
    vq_t_calib_file(path, 2, 4, 2, d, &rng);
    const char *specs[] = { "gear", "gear:base=q4_0,rotate=1,rank=1,sparse=0", "gear:base=kivi,bits=4,rank=2,sparse=0.02",
                            "gear:base=kivi,bits=2,rank=4,sparse=0.05,residual=0;window=5",
                            "gear:base=turboquant_mse,bits=3,rank=3,sparse=0.01,group=32",
                            "k=gear:base=q8_0,group=16,rank=1;v=q4_0", "k=f16;v=gear:base=q4_0,layout=rows,group=7,rank=2,sparse=0.1",
                            "gear:base=lowrank,bits=4,rk=32,rv=48,rank=2,sparse=0.03" };
    vq_kv_dims D = {.n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = d, .max_ctx = 700};
    for (size_t s = 0; s < VQ_ARRAY_LEN(specs); s++) {
        snprintf(spec, sizeof spec, "%s;calib=%s", specs[s], path);
        vq_kv *kv = vq_kv_create_str(spec, &D, vq_rng_u64(&rng), &err);
        CHECKF(kv != NULL, "%s: %s", spec, err.msg);
        if (!kv) continue;
        const int H = 2, NH = 4, w = H * d, rows = 400, n_q = 6;
        float *K = malloc(sizeof(float) * rows * w), *V = malloc(sizeof(float) * rows * w);
        float *Kr = malloc(sizeof(float) * rows * w), *Vr = malloc(sizeof(float) * rows * w);
        int32_t pr[400];
        float Q[6 * 4 * 64], O[6 * 4 * 64];
        double R[6 * 4 * 64];
        int qp[6];
        for (int l = 0; l < 2; l++) {
            fill_uniform(&rng, K, (size_t)rows * w, 2.0f);
            fill_uniform(&rng, V, (size_t)rows * w, 1.0f);
            for (int r = 0; r < rows; r += 40)
                CHECK(vq_kv_append(kv, l, r, 40, K + (size_t)r * w, V + (size_t)r * w, &err) == VQ_OK);
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
        printf("%-62s ok, %.3f bits/elem at %d rows\n", specs[s], vq_kv_bits_per_elem(kv), rows);
        vq_kv_destroy(kv);
        free(K); free(V); free(Kr); free(Vr);
    }
    unlink(path);
    rmdir(cdir);
    free(x); free(y); free(yb);
    return vq_t_done();
}
