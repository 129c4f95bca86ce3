/* test_turboquant.c: the TurboQuant rows (turboquant_mse, turboquant_prod, turboquant_rvq).
 * Premise: reconstruction MSE of unit vectors matches exact Lloyd-Max for the rotated-coordinate
 * law (and the paper's 0.36/0.117/0.03/0.009 loosely); prod inner products are unbiased over fresh
 * rotations and sketches; rvq 2+2 bits reaches cosine >= 0.97. Mechanics: score/accumulate/finish
 * equal decode-then-dot (1e-5 relative) for every ISA variant; determinism by seed; zero, huge and
 * non-finite rows; non-power-of-two d; bad parameters; block sizes. Random inputs: seed printed. */
#include "codec/codec.h"
#include "codec/tq.h"
#include "codec/codec_vec.h"
#include "../vq_test.h"
#include "../codec_params.h"

extern const vq_codec vq_codec_turboquant_mse, vq_codec_turboquant_prod, vq_codec_turboquant_rvq;
extern const vq_codec vq_codec_f16;   /* speed baseline only */
static const vq_codec *const CODECS[] = {&vq_codec_turboquant_mse, &vq_codec_turboquant_prod,
                                         &vq_codec_turboquant_rvq};

static vq_status mk(vq_codec_state *st, const vq_codec *c, int d, const char *spec, uint64_t seed,
                    vq_err *err) {
    memset(st, 0, sizeof *st);
    st->codec = c;
    vq_codec_param p[8];
    const int np = vq_t_codec_params(spec, p, 8);
    vq_err_clear(err);
    /* the value side: one row per block in every layout (turboquant_mse's lanes key blocks, at
     * 2-4 bits, hold 16 rows; test_codecs_attention and test_tq_lanes cover them, every ISA) */
    vq_status s = c->init(st, d, VQ_SIDE_V, p, np, seed, err);
    if (s) c->fini(st);
    return s;
}

static void must(vq_codec_state *st, const vq_codec *c, int d, const char *spec, uint64_t seed) {
    vq_err err;
    if (mk(st, c, d, spec, seed, &err)) {
        fprintf(stderr, "init %s:%s d=%d failed: %s\n", c->name, spec, d, err.msg);
        exit(1);
    }
}

static void gauss_vec(vq_rng *r, float *x, int d, double scale) {
    for (int i = 0; i < d; i++) x[i] = (float)(scale * vq_rng_gauss(r));
}
static double dotd(const float *a, const float *b, int d) {
    double s = 0;
    for (int i = 0; i < d; i++) s += (double)a[i] * b[i];
    return s;
}

/* E‖u − û‖² over nv random unit vectors (and mean cosine of x̂ with x); g_se: its standard error
 * (the error of the outermost Lloyd-Max cells is heavy-tailed, so tolerances use it at 5+ bits) */
static double g_se;
static double unit_mse(const vq_codec_state *st, vq_rng *r, int nv, double *cosine) {
    int d = st->d;
    float x[VQ_TQ_MAX_D], y[VQ_TQ_MAX_D];
    uint8_t *blk = malloc(st->block_bytes);
    double se = 0, sc = 0, se2 = 0;
    for (int v = 0; v < nv; v++) {
        gauss_vec(r, x, d, 1.0);
        double n = sqrt(dotd(x, x, d));
        for (int i = 0; i < d; i++) x[i] = (float)(x[i] / n);
        st->codec->encode(st, x, blk);
        st->codec->decode(st, blk, y);
        double e = 0;
        for (int i = 0; i < d; i++) e += (double)(x[i] - y[i]) * (x[i] - y[i]);
        se += e;
        se2 += e * e;
        sc += dotd(x, y, d) / sqrt(dotd(y, y, d) + 1e-30);
    }
    free(blk);
    if (cosine) *cosine = sc / nv;
    g_se = sqrt(fmax(se2 / nv - (se / nv) * (se / nv), 0) / nv);
    return se / nv;
}

/* score/accumulate/finish against decode-then-dot, n_q queries over nb blocks */
static void check_attention(const vq_codec_state *st, vq_rng *r, const char *what) {
    enum { NQ = 3, NB = 37 };
    int d = st->d;
    size_t bb = st->block_bytes;
    uint8_t *blocks = malloc(bb * NB);
    float *dec = malloc(sizeof(float) * d * NB), x[VQ_TQ_MAX_D];
    for (int b = 0; b < NB; b++) {
        gauss_vec(r, x, d, 0.5 + b % 5);
        st->codec->encode(st, x, blocks + b * bb);
        st->codec->decode(st, blocks + b * bb, dec + (size_t)b * d);
    }
    float *q[NQ], *acc[NQ], out[VQ_TQ_MAX_D], w[NQ * NB], scores[NQ * NB];
    void *qs[NQ];
    for (int j = 0; j < NQ; j++) {
        q[j] = malloc(sizeof(float) * d);
        gauss_vec(r, q[j], d, 1.0);
        qs[j] = vq_aligned_alloc(st->qstate_bytes + 64);
        st->codec->prep_query(st, q[j], qs[j]);
        acc[j] = calloc((size_t)st->acc_floats, sizeof(float));
        for (int b = 0; b < NB; b++) w[j * NB + b] = (b % 7 == 3) ? 0.0f : vq_rng_uniformf(r);
    }
    st->codec->score(st, NQ, (const void *const *)qs, blocks, NB, scores);
    /* two accumulate calls over a split, to test that it adds */
    int h = NB / 2;
    float w1[NQ * NB], w2[NQ * NB];
    for (int j = 0; j < NQ; j++) {
        memcpy(w1 + j * h, w + j * NB, sizeof(float) * h);
        memcpy(w2 + j * (NB - h), w + j * NB + h, sizeof(float) * (NB - h));
    }
    st->codec->accumulate(st, NQ, w1, blocks, h, acc);
    float *acc2[NQ];
    for (int j = 0; j < NQ; j++) acc2[j] = acc[j];
    st->codec->accumulate(st, NQ, w2, blocks + h * bb, NB - h, acc2);
    double worst_s = 0, worst_a = 0;
    for (int j = 0; j < NQ; j++) {
        for (int b = 0; b < NB; b++) {
            const float *k = dec + (size_t)b * d;
            double ref = dotd(q[j], k, d), scale = sqrt(dotd(q[j], q[j], d) * dotd(k, k, d)) + 1e-30;
            worst_s = fmax(worst_s, fabs(scores[j * NB + b] - ref) / scale);
        }
        st->codec->finish(st, acc[j], out);
        double nn = 0;
        for (int i = 0; i < d; i++) {
            double ref = 0;
            for (int b = 0; b < NB; b++) ref += (double)w[j * NB + b] * dec[(size_t)b * d + i];
            worst_a = fmax(worst_a, fabs(out[i] - ref));
        }
        for (int b = 0; b < NB; b++) nn += fabs(w[j * NB + b]) * sqrt(dotd(dec + (size_t)b * d, dec + (size_t)b * d, d));
        worst_a /= nn / sqrt(d) + 1e-30;
        vq_aligned_free(qs[j]); free(q[j]); free(acc[j]);
    }
    CHECKF(worst_s < 1e-5 && worst_a < 1e-5, "%s: score err %.3g, accumulate err %.3g (relative)",
           what, worst_s, worst_a);
    free(blocks); free(dec);
}

int main(void) {
    uint64_t seed = vq_t_seed(12345);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    vq_err err;
    vq_codec_state st;
    char spec[128];

    /* 1. turboquant_mse distortion vs exact Lloyd-Max (sphere law) and the paper's figures */
    {
        const double paper[] = {0.36, 0.117, 0.03, 0.009};
        const int ds[] = {128, 48, 96};
        for (size_t t = 0; t < VQ_ARRAY_LEN(ds); t++)
            for (int b = 1; b <= (ds[t] == 128 ? 8 : 4); b++) {
                snprintf(spec, sizeof spec, "bits=%d,norm=f32", b);
                must(&st, &vq_codec_turboquant_mse, ds[t], spec, seed + b);
                const vq_tq *tq = st.impl;
                double cs, m = unit_mse(&st, &rng, b <= 4 ? 2000 : 600, &cs), th = tq->cb1->mse * ds[t];
                printf("turboquant_mse d=%d bits=%d: E|u-u^|^2 = %.5f (Lloyd-Max %.5f%s%.3g), cos %.4f, "
                       "%zu B/row\n", ds[t], b, m, th, b <= 4 ? ", paper " : "",
                       b <= 4 ? paper[b - 1] : 0.0, cs, st.block_bytes);
                CHECKF(fabs(m - th) < fmax(0.05 * th, 4 * g_se), "d=%d b=%d mse %.6f vs %.6f (se %.2g)",
                       ds[t], b, m, th, g_se);
                if (b <= 4 && ds[t] == 128)
                    CHECKF(fabs(m - paper[b - 1]) < 0.2 * paper[b - 1], "paper b=%d", b);
                st.codec->fini(&st);
            }
    }

    /* reconstruction of turboquant_prod (for the docs: the unbiased estimator's vector is noisier) */
    for (int b = 1; b <= 4; b++) {
        snprintf(spec, sizeof spec, "bits=%d", b);
        must(&st, &vq_codec_turboquant_prod, 128, spec, seed + b);
        double cs, m = unit_mse(&st, &rng, 1000, &cs);
        printf("turboquant_prod d=128 bits=%d: E|u-u^|^2 = %.5f, cos %.4f, %zu B/row\n", b, m, cs,
               st.block_bytes);
        st.codec->fini(&st);
    }

    /* 2. turboquant_prod: unbiased inner products over fresh rotations and sketches */
    for (int b = 2; b <= 4; b += 2) {
        int d = 64, trials = 800, contrast = 300;   /* inits dominate the time: keep it light */
        float q[64], k[64];
        gauss_vec(&rng, q, d, 1.0);
        gauss_vec(&rng, k, d, 1.0);
        for (int i = 0; i < d; i++) k[i] += 0.5f * q[i];     /* a key that matters to q */
        double truth = dotd(q, k, d), s1 = 0, s2 = 0, m1 = 0, m2 = 0;
        snprintf(spec, sizeof spec, "bits=%d,norm=f32", b);
        for (int tr = 0; tr < trials; tr++) {
            vq_codec_state p, m;
            must(&p, &vq_codec_turboquant_prod, d, spec, seed * 31 + tr);
            uint8_t blk[256];
            float qs[256] __attribute__((aligned(64))), sc;
            p.codec->encode(&p, k, blk);
            p.codec->prep_query(&p, q, qs);
            const void *qp = qs;
            p.codec->score(&p, 1, &qp, blk, 1, &sc);
            s1 += sc - truth;
            s2 += (sc - truth) * (sc - truth);
            p.codec->fini(&p);
            if (tr < contrast) {   /* the MSE-only codec at the same bits is biased (shrinks) */
                must(&m, &vq_codec_turboquant_mse, d, spec, seed * 31 + tr);
                m.codec->encode(&m, k, blk);
                m.codec->prep_query(&m, q, qs);
                m.codec->score(&m, 1, &qp, blk, 1, &sc);
                m1 += sc - truth;
                m2 += (sc - truth) * (sc - truth);
                m.codec->fini(&m);
            }
            snprintf(spec, sizeof spec, "bits=%d,norm=f32", b);
        }
        double mean = s1 / trials, sd = sqrt(s2 / trials - mean * mean), se = sd / sqrt(trials);
        printf("turboquant_prod bits=%d d=%d: q.k=%.4f, mean error %.5f (se %.5f, sd %.4f); "
               "mse-only mean error %.5f, rms %.4f\n", b, d, truth, mean, se, sd, m1 / contrast,
               sqrt(m2 / contrast));
        CHECKF(fabs(mean) < 3 * se, "bits=%d bias %.5f > 3 se %.5f", b, mean, se);
    }

    /* 3. turboquant_rvq: 2 bits per stage on Gaussian rows, d = 128; scale/law variants */
    {
        const char *var[] = {"bits=2", "bits=2,scale=row,law2=laplace", "bits=2,scale=fixed,law2=laplace",
                             "bits=2,scale=row,law2=gauss", "bits=2,scale=fixed,law2=gauss",
                             "bits=2,scale=row,law2=exact", "bits=2,scale=fixed,law2=exact",
                             "bits=1", "bits=3", "bits=4"};
        double cos_default = 0, best_other = 0;
        for (size_t v = 0; v < VQ_ARRAY_LEN(var); v++) {
            must(&st, &vq_codec_turboquant_rvq, 128, var[v], seed + 77);
            double cs, m = unit_mse(&st, &rng, 2000, &cs);
            printf("turboquant_rvq d=128 %-30s: E|u-u^|^2 = %.5f, cos %.4f, %zu B/row (%s)\n", var[v],
                   m, cs, st.block_bytes, st.params);
            if (v == 0) { cos_default = cs; CHECKF(cs >= 0.97, "rvq 2+2 cosine %.4f", cs); }
            else if (v < 7) best_other = fmax(best_other, cs);
            st.codec->fini(&st);
        }
        CHECKF(cos_default >= best_other - 1e-3, "default rvq variant %.4f, another %.4f",
               cos_default, best_other);
    }

    /* 4. codes-attention == decoded attention, every codec, widths, dims, ISA variants */
    {
        const int ds[] = {64, 48, 128, 100};
        for (size_t c = 0; c < VQ_ARRAY_LEN(CODECS); c++)
            for (size_t t = 0; t < VQ_ARRAY_LEN(ds); t++)
                for (int b = 1; b <= 8; b++)
                    for (int isa = VQ_ISA_SCALAR; isa <= (int)vq_cpu_best_isa(); isa++) {
                        if (b == 5 || b == 7 || (t > 0 && b != 2 && b != 3 && b != 4)) continue;
                        snprintf(spec, sizeof spec, "bits=%d%s", b, c == 1 && t == 1 ? ",m=40" : "");
                        must(&st, CODECS[c], ds[t], spec, seed + b);
                        vq_tq_force_isa(&st, (vq_isa)isa);
                        char what[160];
                        snprintf(what, sizeof what, "%s d=%d %s isa=%s", CODECS[c]->name, ds[t], spec,
                                 vq_isa_name((vq_isa)isa));
                        check_attention(&st, &rng, what);
                        st.codec->fini(&st);
                    }
    }

    /* 5. ISA variants decode the same block to the same floats (expand kernels agree) */
    {
        int bad = 0;
        float x[128], y0[128], y1[128];
        for (size_t c = 0; c < VQ_ARRAY_LEN(CODECS); c++)
            for (int b = 1; b <= 8; b++) {
                snprintf(spec, sizeof spec, "bits=%d", b);
                must(&st, CODECS[c], 96, spec, seed);
                uint8_t blk[1024];
                gauss_vec(&rng, x, 96, 3.0);
                st.codec->encode(&st, x, blk);
                vq_tq_force_isa(&st, VQ_ISA_SCALAR);
                st.codec->decode(&st, blk, y0);
                for (int isa = VQ_ISA_AVX2; isa <= (int)vq_cpu_best_isa(); isa++) {
                    vq_tq_force_isa(&st, (vq_isa)isa);
                    st.codec->decode(&st, blk, y1);
                    for (int i = 0; i < 96; i++) bad += fabsf(y0[i] - y1[i]) > 1e-5f * (1 + fabsf(y0[i]));
                }
                st.codec->fini(&st);
            }
        CHECKF(bad == 0, "%d decode mismatches between ISA variants", bad);
    }

    /* 6. determinism, zero rows, huge rows, non-finite rows, block sizes */
    for (size_t c = 0; c < VQ_ARRAY_LEN(CODECS); c++) {
        int d = 64;
        vq_codec_state a, b2, o;
        must(&a, CODECS[c], d, "bits=3", seed);
        must(&b2, CODECS[c], d, "bits=3", seed);
        must(&o, CODECS[c], d, "bits=3", seed + 1);
        size_t bb = a.block_bytes;
        size_t want = c == 0 ? 2 + 24 : c == 1 ? 2 + 2 + 16 + 8 : 2 + 24 + 24;
        CHECKF(bb == want, "%s block bytes %zu, want %zu", CODECS[c]->name, bb, want);
        uint8_t k1[512], k2[512], k3[512];
        float x[64], y[64];
        gauss_vec(&rng, x, d, 2.0);
        memset(k1, 0x11, sizeof k1); memset(k2, 0x22, sizeof k2);
        a.codec->encode(&a, x, k1);
        b2.codec->encode(&b2, x, k2);
        o.codec->encode(&o, x, k3);
        CHECKF(memcmp(k1, k2, bb) == 0, "%s: same seed, different bytes", CODECS[c]->name);
        CHECKF(memcmp(k1, k3, bb) != 0, "%s: other seed, same bytes", CODECS[c]->name);
        /* zero row: norm 0, decodes to exactly 0, scores 0 */
        float z[64] = {0}, qs[512] __attribute__((aligned(64))), sc = 1;
        a.codec->encode(&a, z, k1);
        a.codec->decode(&a, k1, y);
        int nz = 0;
        for (int i = 0; i < d; i++) nz += y[i] != 0.0f;
        a.codec->prep_query(&a, x, qs);
        const void *qp = qs;
        a.codec->score(&a, 1, &qp, k1, 1, &sc);
        CHECKF(nz == 0 && sc == 0.0f, "%s zero row: %d nonzero, score %g", CODECS[c]->name, nz, sc);
        /* large rows: |x| up to 65504 (the store's bound). f32 norm keeps the relative error;
         * fp16 norm saturates at 65504 but stays finite */
        for (int f32 = 0; f32 <= 1; f32++) {
            vq_codec_state L;
            must(&L, CODECS[c], d, f32 ? "bits=3,norm=f32" : "bits=3", seed);
            float big[64];
            for (int i = 0; i < d; i++) big[i] = (i % 2 ? -1 : 1) * (60000.0f - 100 * i);
            L.codec->encode(&L, big, k1);
            L.codec->decode(&L, k1, y);
            double e = 0, nb = dotd(big, big, d), fin = 1;
            for (int i = 0; i < d; i++) { e += ((double)y[i] - big[i]) * ((double)y[i] - big[i]); fin = fin && isfinite(y[i]); }
            /* prod's decode is the unbiased estimator's vector: larger error by design */
            double tol = c == 1 ? 0.6 : 0.2;
            if (f32) CHECKF(e / nb < tol, "%s large row rel err %.3g", CODECS[c]->name, e / nb);
            CHECKF(fin, "%s large row (norm=%s) not finite", CODECS[c]->name, f32 ? "f32" : "f16");
            /* moderate values (|x| ~ 1e3) are exact-scale with fp16 norms too */
            float mid[64];
            gauss_vec(&rng, mid, d, 1000.0);
            L.codec->encode(&L, mid, k1);
            L.codec->decode(&L, k1, y);
            e = 0; nb = dotd(mid, mid, d);
            for (int i = 0; i < d; i++) e += ((double)y[i] - mid[i]) * ((double)y[i] - mid[i]);
            CHECKF(e / nb < tol, "%s |x|~1e3 rel err %.3g", CODECS[c]->name, e / nb);
            L.codec->fini(&L);
        }
        /* NaN / Inf rows: the store rejects them; the codec must not crash and stays deterministic */
        float bad[64];
        memcpy(bad, x, sizeof bad);
        bad[5] = NAN;
        a.codec->encode(&a, bad, k1);
        a.codec->encode(&a, bad, k2);
        CHECK(memcmp(k1, k2, bb) == 0);
        a.codec->decode(&a, k1, y);
        bad[5] = INFINITY;
        a.codec->encode(&a, bad, k1);
        a.codec->decode(&a, k1, y);
        a.codec->fini(&a); b2.codec->fini(&b2); o.codec->fini(&o);
    }

    /* 8. speed of score/accumulate from codes (printed for the docs; no assertion; not under ASan) */
#ifndef __SANITIZE_ADDRESS__
    {
        enum { NB = 4096, NQ = 3 };
        const char *specs[] = {"bits=2", "bits=3", "bits=4"};
        for (size_t c = 0; c <= VQ_ARRAY_LEN(CODECS); c++)
            for (size_t sp = 0; sp < VQ_ARRAY_LEN(specs); sp++) {
                int d = 64;
                const vq_codec *cc = c < VQ_ARRAY_LEN(CODECS) ? CODECS[c] : &vq_codec_f16;
                if (cc == &vq_codec_f16 && sp) break;
                must(&st, cc, d, cc == &vq_codec_f16 ? "" : specs[sp], seed);
                uint8_t *blocks = malloc(st.block_bytes * NB);
                float x[64], *scores = malloc(sizeof(float) * NB * NQ), *acc[NQ];
                void *qs[NQ];
                for (int b = 0; b < NB; b++) { gauss_vec(&rng, x, d, 1.0); st.codec->encode(&st, x, blocks + b * st.block_bytes); }
                for (int j = 0; j < NQ; j++) {
                    qs[j] = vq_aligned_alloc(st.qstate_bytes + 64);
                    acc[j] = calloc((size_t)st.acc_floats, sizeof(float));
                    gauss_vec(&rng, x, d, 1.0);
                    st.codec->prep_query(&st, x, qs[j]);
                }
                for (int i = 0; i < NB * NQ; i++) scores[i] = 1.0f / NB;
                char line[256];
                int o = snprintf(line, sizeof line, "speed %s d=%d %s, %d queries:", cc->name, d,
                                 cc == &vq_codec_f16 ? "" : specs[sp], NQ);
                for (int isa = VQ_ISA_SCALAR; isa <= (int)vq_cpu_best_isa(); isa++) {
                    if (cc == &vq_codec_f16 && isa != (int)vq_cvec_isa()) continue;
                    if (cc != &vq_codec_f16) vq_tq_force_isa(&st, (vq_isa)isa);
                    double ts = 1e9, ta = 1e9;   /* best of 7: the machine is shared */
                    for (int rep = 0; rep < 7; rep++) {
                        double t0 = vq_now_s();
                        st.codec->score(&st, NQ, (const void *const *)qs, blocks, NB, scores);
                        ts = fmin(ts, (vq_now_s() - t0) / NB * 1e9);
                        for (int i = 0; i < NB * NQ; i++) scores[i] = 1.0f / NB;
                        t0 = vq_now_s();
                        st.codec->accumulate(&st, NQ, scores, blocks, NB, acc);
                        ta = fmin(ta, (vq_now_s() - t0) / NB * 1e9);
                    }
                    o += snprintf(line + o, sizeof line - o, " %s score %.1f / acc %.1f ns/row;",
                                  vq_isa_name((vq_isa)isa), ts, ta);
                }
                printf("%s\n", line);
                for (int j = 0; j < NQ; j++) { vq_aligned_free(qs[j]); free(acc[j]); }
                free(blocks); free(scores);
                st.codec->fini(&st);
            }
    }
#endif

    /* 7. bad parameters and dimensions: VQ_ERR_ARG naming the key / value */
    for (size_t c = 0; c < VQ_ARRAY_LEN(CODECS); c++) {
        CHECK(mk(&st, CODECS[c], 64, "bits=0", seed, &err) == VQ_ERR_ARG && strstr(err.msg, "bits"));
        CHECK(mk(&st, CODECS[c], 64, "bits=9", seed, &err) == VQ_ERR_ARG && strstr(err.msg, "9"));
        CHECK(mk(&st, CODECS[c], 64, "bits=x", seed, &err) == VQ_ERR_ARG);
        CHECK(mk(&st, CODECS[c], 64, "norm=f8", seed, &err) == VQ_ERR_ARG && strstr(err.msg, "f8"));
        CHECK(mk(&st, CODECS[c], 64, "rotate=1", seed, &err) == VQ_ERR_ARG && strstr(err.msg, "rotate"));
        CHECK(mk(&st, CODECS[c], 2, "bits=2", seed, &err) == VQ_ERR_ARG && strstr(err.msg, "d=2"));
        CHECK(mk(&st, CODECS[c], 1536, "bits=2", seed, &err) == VQ_ERR_ARG && strstr(err.msg, "d=1536"));
        CHECK(mk(&st, CODECS[c], 64, "", seed, &err) == VQ_OK && st.params[0]);
        printf("%s defaults: %s, %zu B/row at d=64, state %zu B\n", CODECS[c]->name, st.params,
               st.block_bytes, st.state_bytes);
        st.codec->fini(&st);
    }
    CHECK(mk(&st, &vq_codec_turboquant_prod, 64, "m=0", seed, &err) == VQ_ERR_ARG && strstr(err.msg, "m=0"));
    CHECK(mk(&st, &vq_codec_turboquant_rvq, 64, "scale=big", seed, &err) == VQ_ERR_ARG && strstr(err.msg, "big"));
    CHECK(mk(&st, &vq_codec_turboquant_rvq, 64, "law2=cauchy", seed, &err) == VQ_ERR_ARG);
    return vq_t_done();
}
