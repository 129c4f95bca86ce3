/* codec_check.h: helpers the codec tests share: make a codec state from a spec, and check that
 * score / accumulate / finish agree with decode-then-dot (the codec contract of codec.h). */
#ifndef VQ_CODEC_CHECK_H
#define VQ_CODEC_CHECK_H
#include <time.h>
#include "../vq_test.h"
#include "codec/codec.h"
#include "codec/codec_vec.h"
#include "../codec_params.h"

static vq_codec_state mk(const char *name, int d, const char *spec, uint64_t seed, vq_status *stp) {
    vq_codec_state st;
    memset(&st, 0, sizeof st);
    st.codec = vq_codec_find(name);
    vq_codec_param p[8];
    const int np = vq_t_codec_params(spec, p, 8);
    vq_err err;
    vq_err_clear(&err);
    vq_status s = st.codec ? st.codec->init(&st, d, VQ_SIDE_K, p, np, seed, &err) : VQ_ERR_ARG;
    if (s && stp == NULL) {
        fprintf(stderr, "init %s:%s failed: %s\n", name, spec, err.msg);
        exit(1);
    }
    if (s && st.codec) st.codec->fini(&st);
    if (stp) *stp = s;
    return st;
}

static void gauss_vec(vq_rng *r, float *x, int d, double s) {
    for (int i = 0; i < d; i++) x[i] = (float)(s * vq_rng_gauss(r));
}
static double dotd(const float *a, const float *b, int d) {
    double s = 0;
    for (int i = 0; i < d; i++) s += (double)a[i] * b[i];
    return s;
}

static float score1(const vq_codec_state *st, const float *q, const uint8_t *blk) {
    float *qs = vq_aligned_alloc(st->qstate_bytes + 64);
    st->codec->prep_query(st, q, qs);
    const void *qp = qs;
    float s;
    st->codec->score(st, 1, &qp, blk, 1, &s);
    vq_aligned_free(qs);
    return s;
}

/* score / accumulate / finish against decode-then-dot on n rows and 3 queries */
static void check_contract(const vq_codec_state *st, vq_rng *r, double xs) {
    const int d = st->d, n = 37, nq = 3;
    uint8_t *blk = malloc(st->block_bytes * n);
    float *x = malloc(sizeof(float) * d * n), *xh = malloc(sizeof(float) * d * n);
    float *q = malloc(sizeof(float) * d * nq), *sc = malloc(sizeof(float) * n * nq), *w = malloc(sizeof(float) * n * nq);
    gauss_vec(r, x, d * n, xs);
    gauss_vec(r, q, d * nq, 1.0);
    for (int i = 0; i < n; i++) {
        st->codec->encode(st, x + i * d, blk + i * st->block_bytes);
        st->codec->decode(st, blk + i * st->block_bytes, xh + i * d);
    }
    void *qs[3];
    for (int j = 0; j < nq; j++) {
        qs[j] = vq_aligned_alloc(st->qstate_bytes + 64);
        st->codec->prep_query(st, q + j * d, qs[j]);
    }
    st->codec->score(st, nq, (const void *const *)qs, blk, n, sc);
    int bad = 0;
    for (int j = 0; j < nq; j++)
        for (int i = 0; i < n; i++) {
            /* scale of float rounding: |q||x_hat| (codecs sum in a rotated or sketch domain, where
             * the terms can be far larger than q . x_hat itself, e.g. a one-hot x_hat) */
            double ref = dotd(q + j * d, xh + i * d, d);
            double mag = sqrt(dotd(q + j * d, q + j * d, d) * dotd(xh + i * d, xh + i * d, d));
            if (fabs(sc[j * n + i] - ref) > 1e-5 * mag + 1e-30) bad++;
        }
    CHECKF(bad == 0, "%s: %d scores differ from q.decode beyond 1e-5 relative", st->codec->name, bad);
    for (int t = 0; t < n * nq; t++) w[t] = (float)vq_rng_uniform(r) * (t % 7 == 3 ? 0.0f : 1.0f);
    float *acc[3], *out = malloc(sizeof(float) * d);
    for (int j = 0; j < nq; j++) acc[j] = calloc((size_t)st->acc_floats, sizeof(float));
    /* two calls over halves: the store may page the rows */
    int h = n / 2;
    float *w1 = malloc(sizeof(float) * h * nq), *w2 = malloc(sizeof(float) * (n - h) * nq);
    for (int j = 0; j < nq; j++) {
        memcpy(w1 + j * h, w + j * n, sizeof(float) * h);
        memcpy(w2 + j * (n - h), w + j * n + h, sizeof(float) * (n - h));
    }
    st->codec->accumulate(st, nq, w1, blk, h, acc);
    st->codec->accumulate(st, nq, w2, blk + h * st->block_bytes, n - h, acc);
    bad = 0;
    for (int j = 0; j < nq; j++) {
        st->codec->finish(st, acc[j], out);
        for (int t = 0; t < d; t++) {
            double ref = 0, mag = 0;
            for (int i = 0; i < n; i++) {
                ref += (double)w[j * n + i] * xh[i * d + t];
                mag += fabs((double)w[j * n + i]) * sqrt(dotd(xh + i * d, xh + i * d, d));
            }
            if (fabs(out[t] - ref) > 1e-5 * mag + 1e-4 * 1e-5 * xs) bad++;
        }
        free(acc[j]);
        vq_aligned_free(qs[j]);
    }
    CHECKF(bad == 0, "%s: %d accumulate+finish outputs differ from sum w*decode", st->codec->name, bad);
    free(w1); free(w2); free(out); free(blk); free(x); free(xh); free(q); free(sc); free(w);
}

/* thread CPU time: the 2-core CI/dev machines are shared, wall time would count other jobs */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* measured, not asserted: CPU ns per (row, query) for score and accumulate over 4096 rows */
static void bench(const char *name, int d, const char *spec, vq_rng *r) {
    vq_codec_state st = mk(name, d, spec, 1, NULL);
    const int n = 4096, nq = 3;
    uint8_t *blk = malloc(st.block_bytes * n);
    float *x = malloc(sizeof(float) * d), *sc = malloc(sizeof(float) * n * nq), *w = malloc(sizeof(float) * n * nq);
    for (int i = 0; i < n; i++) {
        gauss_vec(r, x, d, 1.0);
        st.codec->encode(&st, x, blk + (size_t)i * st.block_bytes);
    }
    void *qs[3];
    float *acc[3];
    for (int j = 0; j < nq; j++) {
        gauss_vec(r, x, d, 1.0);
        qs[j] = vq_aligned_alloc(st.qstate_bytes + 64);
        st.codec->prep_query(&st, x, qs[j]);
        acc[j] = calloc((size_t)st.acc_floats, sizeof(float));
    }
    for (int i = 0; i < n * nq; i++) w[i] = 1.0f / n;
    double t0 = cpu_s();
    int reps = 0;
    do {
        st.codec->score(&st, nq, (const void *const *)qs, blk, n, sc);
        reps++;
    } while (cpu_s() - t0 < 0.05);
    double ts = (cpu_s() - t0) / reps / (n * nq) * 1e9;
    t0 = cpu_s();
    reps = 0;
    do {
        st.codec->accumulate(&st, nq, w, blk, n, acc);
        reps++;
    } while (cpu_s() - t0 < 0.05);
    double ta = (cpu_s() - t0) / reps / (n * nq) * 1e9;
    printf("speed %s d=%d %s (%s): score %.1f ns/(row*query), accumulate %.1f ns/(row*query), %zu bytes/row\n", name,
           d, spec[0] ? spec : "defaults", vq_isa_name(vq_cvec_isa()), ts, ta, st.block_bytes);
    for (int j = 0; j < nq; j++) {
        vq_aligned_free(qs[j]);
        free(acc[j]);
    }
    free(blk); free(x); free(sc); free(w);
    st.codec->fini(&st);
}

/* same seed -> same codes; another seed -> other codes (d = 64, one Gaussian row) */
static void check_seeded(const char *name, const char *spec, vq_rng *r) {
    float x[64];
    gauss_vec(r, x, 64, 1.0);
    vq_codec_state s1 = mk(name, 64, spec, 42, NULL), s2 = mk(name, 64, spec, 42, NULL),
                   s3 = mk(name, 64, spec, 43, NULL);
    uint8_t *b1 = calloc(3, s1.block_bytes), *b2 = b1 + s1.block_bytes, *b3 = b2 + s1.block_bytes;
    s1.codec->encode(&s1, x, b1);
    s2.codec->encode(&s2, x, b2);
    s3.codec->encode(&s3, x, b3);
    CHECKF(memcmp(b1, b2, s1.block_bytes) == 0, "%s:%s: same seed, other codes", name, spec);
    CHECKF(memcmp(b1, b3, s1.block_bytes) != 0, "%s:%s: another seed, same codes", name, spec);
    free(b1);
    s1.codec->fini(&s1); s2.codec->fini(&s2); s3.codec->fini(&s3);
}
#endif
