/* test_polar.c: the `polar` codec (PolarQuant). Checks bytes per row (3.875 bits/element at the paper's
 * budget), that reconstruction error falls as bits rise, cosine at the default budget, score/accumulate/
 * finish == decode-then-dot, determinism, zero/huge/NaN rows, d not a power of two (padded), bad params. */
#include "../vq_test.h"
#include "codec/codec.h"
#include "codec/codec_vec.h"

#include "codec_check.h"

/* mean relative squared error |x - x_hat|^2 / |x|^2 and mean cosine over T Gaussian rows */
static void recon(int d, const char *spec, int T, uint64_t seed, vq_rng *r, double *mse, double *cosm, double *ipe) {
    vq_codec_state st = mk("polar", d, spec, seed, NULL);
    float *x = malloc(sizeof(float) * d), *xh = malloc(sizeof(float) * d), *q = malloc(sizeof(float) * d);
    uint8_t *b = malloc(st.block_bytes);
    double se = 0, cs = 0, ie = 0;
    for (int t = 0; t < T; t++) {
        gauss_vec(r, x, d, 1.0);
        gauss_vec(r, q, d, 1.0);
        st.codec->encode(&st, x, b);
        st.codec->decode(&st, b, xh);
        double e = 0, xx = dotd(x, x, d), hh = dotd(xh, xh, d);
        for (int i = 0; i < d; i++) e += (double)(x[i] - xh[i]) * (x[i] - xh[i]);
        se += e / xx;
        cs += dotd(x, xh, d) / sqrt(xx * hh);
        double di = score1(&st, q, b) - dotd(q, x, d);
        ie += di * di / (xx * dotd(q, q, d));
    }
    *mse = se / T;
    *cosm = cs / T;
    *ipe = sqrt(ie / T);   /* RMS of (q.x_hat - q.x) / (|q||x|) */
    st.codec->fini(&st);
    free(x); free(xh); free(q); free(b);
}


int main(void) {
    uint64_t seed = vq_t_seed(12345);
    vq_rng r;
    vq_rng_seed(&r, seed);

    CHECK(vq_codec_find("polar") != NULL);
    {
        vq_codec_state a = mk("polar", 64, "", seed, NULL), b = mk("polar", 128, "", seed, NULL);
        /* d=64: 32x4 + 16x2 + 8x2 + 4x2 bits = 23 bytes + 4 fp16 radii; d=128: 46 + 8 radii */
        CHECK(a.block_bytes == 31 && b.block_bytes == 62);
        CHECK(strcmp(a.params, "bits=4,deep=2,levels=4,scale=f16") == 0);
        CHECK(a.state_bytes >= 64 * sizeof(float));
        printf("polar default: d=64 %zu bytes/row (%.3f bits/element), d=128 %zu bytes/row (%.3f), params %s\n",
               a.block_bytes, a.block_bytes * 8.0 / 64, b.block_bytes, b.block_bytes * 8.0 / 128, a.params);
        a.codec->fini(&a);
        b.codec->fini(&b);
    }
    /* contract over budgets, depths, odd d (padded to 2^k), f32 radii */
    const char *specs[] = {"", "bits=2,deep=1", "bits=6,deep=3,levels=1", "bits=3,deep=2,scale=f32", "levels=2,bits=8,deep=8"};
    int ds[] = {64, 128, 100, 8, 2};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++) {
            if (a == 4 && ds[b] == 2) continue;   /* levels=2 needs D >= 4 */
            vq_codec_state s2 = mk("polar", ds[b], specs[a], seed + 10 * a + b, NULL);
            check_contract(&s2, &r, 2.0);
            s2.codec->fini(&s2);
        }
    /* full-depth tree (levels = log2 d, one radius) works too */
    {
        vq_codec_state s2 = mk("polar", 128, "levels=7", seed, NULL);
        CHECK(s2.block_bytes == 32 + 8 + 4 + 2 + 1 + 1 + 1 + 2);
        check_contract(&s2, &r, 2.0);
        s2.codec->fini(&s2);
    }
    /* reconstruction error falls as the budget grows */
    const char *budgets[] = {"bits=2,deep=1", "bits=3,deep=2", "bits=4,deep=2", "bits=5,deep=3", "bits=6,deep=4",
                             "bits=8,deep=6,scale=f32"};
    for (int dd = 64; dd <= 128; dd *= 2) {
        double prev = 1e9;
        for (int i = 0; i < 6; i++) {
            double mse, cs, ipe;
            recon(dd, budgets[i], 400, seed + i, &r, &mse, &cs, &ipe);
            vq_codec_state s2 = mk("polar", dd, budgets[i], 1, NULL);
            printf("polar d=%d %-24s %5.3f bits/el: rel. MSE %.5f, cosine %.5f, inner-product RMS error %.5f\n", dd,
                   budgets[i], s2.block_bytes * 8.0 / dd, mse, cs, ipe);
            s2.codec->fini(&s2);
            CHECKF(mse < 0.8 * prev, "d=%d %s: MSE %.5f not below 0.8 x %.5f", dd, budgets[i], mse, prev);
            if (i == 2) CHECKF(cs > 0.97, "d=%d default budget: cosine %.4f", dd, cs);
            prev = mse;
        }
    }
    {
        double mse4, cs4, ipe4, mse7, cs7, ipe7;
        recon(128, "", 400, seed, &r, &mse4, &cs4, &ipe4);
        recon(128, "levels=7", 400, seed, &r, &mse7, &cs7, &ipe7);
        printf("polar d=128 default levels=4: MSE %.5f; levels=7 (one radius, 3.05 bits/el): MSE %.5f\n", mse4, mse7);
        CHECK(mse7 > mse4);   /* quantizing the deep radii as angles costs accuracy */
    }
    check_seeded("polar", "", &r);   /* determinism by seed */
    /* zero, huge, NaN */
    {
        vq_codec_state s = mk("polar", 64, "", seed, NULL), s32 = mk("polar", 64, "scale=f32", seed, NULL);
        float x[64] = {0}, q[64], xh[64];
        uint8_t b[64], bb[64];
        gauss_vec(&r, q, 64, 1.0);
        s.codec->encode(&s, x, b);
        s.codec->decode(&s, b, xh);
        int z = 1;
        for (int i = 0; i < 64; i++) z &= xh[i] == 0.0f;
        CHECK(z && score1(&s, q, b) == 0.0f);
        gauss_vec(&r, x, 64, 1.0);
        s32.codec->encode(&s32, x, b);
        float base = score1(&s32, q, b);
        for (int i = 0; i < 64; i++) x[i] *= 1000.0f;
        s32.codec->encode(&s32, x, bb);
        CHECK(memcmp(b, bb, 23) == 0);   /* angles do not depend on scale */
        CHECK_NEAR(score1(&s32, q, bb) / base, 1000.0, 1000.0 * 1e-4);
        for (int i = 0; i < 64; i++) x[i] = 65504.0f * (i % 3 ? 1 : -1);
        s.codec->encode(&s, x, b);
        CHECK(isfinite(score1(&s, q, b)));
        x[9] = NAN;
        s.codec->encode(&s, x, b);
        CHECK(isnan(score1(&s, q, b)));
        s.codec->fini(&s); s32.codec->fini(&s32);
    }
    /* bad parameters */
    {
        vq_status s;
        mk("polar", 64, "levels=7", 1, &s);
        CHECK(s == VQ_ERR_ARG);
        mk("polar", 64, "bits=0", 1, &s);
        CHECK(s == VQ_ERR_ARG);
        mk("polar", 64, "deep=9", 1, &s);
        CHECK(s == VQ_ERR_ARG);
        mk("polar", 64, "m=1", 1, &s);
        CHECK(s == VQ_ERR_ARG);
        mk("polar", 1, "", 1, &s);
        CHECK(s == VQ_ERR_ARG);
    }
    bench("polar", 64, "", &r);
    bench("polar", 128, "", &r);
    return vq_t_done();
}
