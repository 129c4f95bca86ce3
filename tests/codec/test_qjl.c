/* test_qjl.c: the `qjl` codec and the sign-bit kernels of qjl.h. Checks the estimator is unbiased
 * and has the variance the theory gives, (pi/2 |k|^2 |q|^2 - <q,k>^2) / m; that score, accumulate and
 * finish equal decode-then-dot; determinism by seed; zero, huge, NaN rows; odd d; bad parameters. */
#include "../vq_test.h"
#include "codec/codec.h"
#include "codec/codec_vec.h"
#include "codec/qjl.h"

#include "codec_check.h"

/* The mean of T = 3000 independent trials is normal to a good approximation (CLT), so for an
 * unbiased estimator |mean| / SE is |N(0,1)|. At 4.5 SE a check fails by chance with probability
 * 2 Phi(-4.5) = 6.8e-6, so the 3 checks fail together under 2.1e-5 of seeds: any seed may be given
 * (VQ_TEST_SEED) and a failure means a bias, never retried. (The variance check in unbiased_once: the sample
 * variance of T near-normal errors has relative sd sqrt(2/T) = 2.6%, so +-20% is 7.7 sd.) */
#define UNBIASED_Z 4.5
/* mean and variance of the score error over trials with fresh sketches, against the theory */
static int unbiased_once(int d, int m, uint64_t seed0, vq_rng *r) {
    float *k = malloc(sizeof(float) * d), *q = malloc(sizeof(float) * d), *u = malloc(sizeof(float) * d);
    gauss_vec(r, k, d, 1.0);
    gauss_vec(r, u, d, 1.0);
    double kk = dotd(k, k, d), ku = dotd(k, u, d);
    for (int i = 0; i < d; i++) u[i] -= (float)(ku / kk) * k[i];   /* u orthogonal to k */
    double a = 0.6 / sqrt(kk), b = 0.8 / sqrt(dotd(u, u, d));
    for (int i = 0; i < d; i++) q[i] = (float)(2.0 * (a * k[i] + b * u[i]));   /* |q| = 2, cos = 0.6 */
    double truth = dotd(q, k, d), qq = dotd(q, q, d);
    const int T = 3000;
    double s1 = 0, s2 = 0;
    char spec[64];
    snprintf(spec, sizeof spec, "m=%d,scale=f32", m);
    uint8_t blk[4096];
    for (int t = 0; t < T; t++) {
        vq_codec_state st = mk("qjl", d, spec, seed0 + 1000003ull * (uint64_t)t, NULL);
        st.codec->encode(&st, k, blk);
        double e = score1(&st, q, blk) - truth;
        s1 += e;
        s2 += e * e;
        st.codec->fini(&st);
    }
    double mean = s1 / T, var = s2 / T - mean * mean, se = sqrt(var / T);
    double theory = (M_PI / 2 * kk * qq - truth * truth) / m;
    printf("qjl d=%d m=%d: truth %.4f, mean error %.5f (SE %.5f), variance %.5f, theory %.5f\n", d, m, truth,
           mean, se, var, theory);
    CHECKF(var > 0.8 * theory && var < 1.2 * theory, "d=%d m=%d: variance %.5f vs theory %.5f", d, m, var, theory);
    free(k); free(q); free(u);
    return fabs(mean) <= UNBIASED_Z * se;
}

static void check_unbiased(int d, int m, uint64_t seed0, vq_rng *r) {
    CHECKF(unbiased_once(d, m, seed0, r), "d=%d m=%d: mean error beyond %.1f SE", d, m, UNBIASED_Z);
}

static void check_kernels(vq_rng *r) {
    float y[264], acc0[264], acc1[264];
    uint8_t bits[33];
    for (int n = 8; n <= 264; n += 8) {
        gauss_vec(r, y, n, 1.0);
        for (int i = 0; i < n / 8; i++) bits[i] = (uint8_t)vq_rng_u64(r);
        float ref = vq_masked_sum_for(VQ_ISA_SCALAR)(y, bits, n);
        for (int isa = VQ_ISA_AVX2; isa <= (int)vq_cpu_best_isa(); isa++) {
            float got = vq_masked_sum_for((vq_isa)isa)(y, bits, n);
            CHECK_NEAR(got, ref, 1e-5 * n);
            for (int i = 0; i < n; i++) acc0[i] = acc1[i] = y[i];
            vq_signed_add_for(VQ_ISA_SCALAR)(acc0, 0.37f, bits, n);
            vq_signed_add_for((vq_isa)isa)(acc1, 0.37f, bits, n);
            int same = 1;
            for (int i = 0; i < n; i++) same &= acc0[i] == acc1[i];
            CHECKF(same, "signed_add %s n=%d differs from scalar", vq_isa_name((vq_isa)isa), n);
        }
    }
}


int main(void) {
    uint64_t seed = vq_t_seed(12345);
    printf("best ISA %s\n", vq_isa_name(vq_cpu_best_isa()));
    vq_rng r;
    vq_rng_seed(&r, seed);

    CHECK(vq_codec_find("qjl") != NULL);
    vq_codec_state st = mk("qjl", 64, "", seed, NULL);
    CHECK(st.block_bytes == 16 + 2 && st.acc_floats == 128 && strcmp(st.params, "m=128,scale=f16") == 0);
    CHECK(st.state_bytes >= 128 * 64 * sizeof(float));   /* the sketch matrix is counted */
    printf("qjl d=64 default: %zu bytes/row (%.2f bits/element), params %s\n", st.block_bytes,
           st.block_bytes * 8.0 / 64, st.params);
    check_contract(&st, &r, 1.0);
    st.codec->fini(&st);

    check_kernels(&r);
    check_unbiased(64, 128, seed, &r);
    check_unbiased(128, 64, seed + 7, &r);
    check_unbiased(48, 96, seed + 9, &r);   /* d not a power of two: no restriction */

    /* contract for several shapes, f16 and f32 norms, odd d */
    const char *specs[] = {"bits=1", "m=40,scale=f32", "bits=4"};
    int ds[] = {64, 128, 100, 8};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 4; b++) {
            vq_codec_state s2 = mk("qjl", ds[b], specs[a], seed + a * 10 + b, NULL);
            check_contract(&s2, &r, 3.0);
            s2.codec->fini(&s2);
        }

    check_seeded("qjl", "", &r);   /* determinism by seed */
    /* zero, huge, NaN rows */
    {
        vq_codec_state s = mk("qjl", 64, "", seed, NULL), s32 = mk("qjl", 64, "scale=f32", seed, NULL);
        float x[64] = {0}, q[64], xh[64];
        uint8_t b[64], bb[64];
        gauss_vec(&r, q, 64, 1.0);
        s.codec->encode(&s, x, b);
        s.codec->decode(&s, b, xh);
        CHECK(score1(&s, q, b) == 0.0f);
        int z = 1;
        for (int i = 0; i < 64; i++) z &= xh[i] == 0.0f;
        CHECK(z);
        gauss_vec(&r, x, 64, 1.0);
        s32.codec->encode(&s32, x, b);
        float base = score1(&s32, q, b);
        for (int i = 0; i < 64; i++) x[i] *= 1000.0f;   /* |x| ~ 8000: still an fp16 norm */
        s32.codec->encode(&s32, x, bb);
        CHECK(memcmp(b, bb, 16) == 0);                   /* signs do not depend on scale */
        CHECK_NEAR(score1(&s32, q, bb) / base, 1000.0, 1000.0 * 1e-5);
        for (int i = 0; i < 64; i++) x[i] = 65504.0f * (i % 2 ? 1 : -1);   /* |x| = 524032 > fp16 max */
        s.codec->encode(&s, x, b);
        CHECK(isfinite(score1(&s, q, b)));   /* f16 norm saturates at 65504 (documented) */
        s32.codec->encode(&s32, x, b);
        s32.codec->decode(&s32, b, xh);
        CHECK(isfinite(xh[0]) && isfinite(score1(&s32, q, b)));
        x[5] = NAN;
        s.codec->encode(&s, x, b);   /* the store rejects NaN rows; the codec only must not crash */
        CHECK(isnan(score1(&s, q, b)));
        s.codec->fini(&s); s32.codec->fini(&s32);
    }
    /* a value decodes to an unbiased but noisy reconstruction: report its cosine */
    {
        double cs = 0;
        int T = 200;
        for (int t = 0; t < T; t++) {
            vq_codec_state s = mk("qjl", 64, "", seed + 31 * t, NULL);
            float x[64], xh[64];
            uint8_t b[64];
            gauss_vec(&r, x, 64, 1.0);
            s.codec->encode(&s, x, b);
            s.codec->decode(&s, b, xh);
            cs += dotd(x, xh, 64) / sqrt(dotd(x, x, 64) * dotd(xh, xh, 64));
            s.codec->fini(&s);
        }
        printf("qjl d=64 m=128: mean cosine(x, decode(x)) %.4f\n", cs / T);
        CHECK(cs / T > 0.5);
    }
    /* bad parameters name themselves */
    {
        vq_status s;
        mk("qjl", 64, "m=12", 1, &s);
        CHECK(s == VQ_ERR_ARG);
        mk("qjl", 64, "bits=0", 1, &s);
        CHECK(s == VQ_ERR_ARG);
        mk("qjl", 64, "scale=f8", 1, &s);
        CHECK(s == VQ_ERR_ARG);
        mk("qjl", 64, "rotate=1", 1, &s);
        CHECK(s == VQ_ERR_ARG);
        mk("qjl", 0, "", 1, &s);
        CHECK(s == VQ_ERR_ARG);
    }
    bench("qjl", 64, "", &r);
    bench("qjl", 128, "", &r);
    return vq_t_done();
}
