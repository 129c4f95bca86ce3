/* test_vecinfer.c: the VecInfer codec (codec_vecinfer.c) and its calibration section.
 *  - training: λ is the channel max; every code the encoder writes is its sub-vector's nearest
 *    centroid; trained codebooks code the training rows better than their mean does;
 *  - the calibration file's version 5 section: serialize -> parse gives the same arrays and bytes;
 *    a flipped byte anywhere in the section, a truncation, an unknown sub are refused;
 *  - the codec contract on every ISA this CPU has (scalar, AVX2, AVX-512): score == q . decode(k)
 *    and finish(accumulate) == Σ w decode(v), against float64, within bounds derived from the
 *    float operations (not tuned): see bound_score / bound_acc;
 *  - init refusals: no calibration, no section, a sub= or bits= the file does not hold.
 * Fixed seeds, printed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../vq_test.h"
#include "core/core.h"
#include "codec/calib.h"
#include "codec/vecinfer.h"
#include "codec/codec.h"

#define SEED 20261208ull

/* a calibration of 2 layers x 2 KV heads of head_dim d with a trained VecInfer section; rows with
 * a few outlier key channels (as real keys have) */
static void make_calib(vq_calib *c, int d, int sub_k, int sub_v, int vnorm, int n, vq_rng *rng) {
    memset(c, 0, sizeof *c);
    snprintf(c->model, sizeof c->model, "synthetic");
    c->n_layers = 2; c->n_heads = 4; c->n_kv_heads = 2; c->head_dim = d; c->rope_dim = d;
    c->n_tokens = (uint64_t)n;
    c->has_lowrank = 1;   /* a VecInfer section rides on version 4's arrays (zero here) */
    vq_err err;
    CHECK(vq_calib_alloc(c, &err) == VQ_OK);
    for (size_t i = 0; i < (size_t)2 * 2 * d; i++) { c->k_sq[i] = 1; c->v_sq[i] = 1; c->q_filter[i] = 0; }
    for (int l = 0; l < 2; l++) c->attn_cos[l] = 0.5f;
    CHECK(vq_calib_vi_alloc(c, sub_k, sub_v, 77, &err) == VQ_OK);
    c->vi_vnorm = vnorm;
    float *k = malloc(sizeof(float) * (size_t)n * d), *v = malloc(sizeof(float) * (size_t)n * d);
    for (int kh = 0; kh < 4; kh++) {
        for (int r = 0; r < n; r++)
            for (int i = 0; i < d; i++) {
                k[(size_t)r * d + i] = (float)(vq_rng_gauss(rng) * (i % 13 == 3 ? 12.0 : 1.0) + (i == 5 ? 4.0 : 0.0));
                v[(size_t)r * d + i] = (float)(vq_rng_gauss(rng) * (0.5 + (i % 7) * 0.2) * (r % 5 == 0 ? 8.0 : 1.0));
            }
        CHECKF(vq_vi_train_head(k, v, n, d, sub_k, sub_v, 1.0, vnorm, c->vi_seed, SEED + kh, c->vi_smooth + (size_t)kh * d,
                                c->vi_cb_k + (size_t)kh * d * 16, c->vi_cb_v + (size_t)kh * d * 16, &err) == VQ_OK,
               "train: %s", err.msg);
        if (kh == 0) {   /* λ = channel max */
            for (int i = 0; i < d; i++) {
                double m = 0;
                for (int r = 0; r < n; r++) m = fmax(m, fabs(k[(size_t)r * d + i]));
                CHECK(fabs(c->vi_smooth[i] - m) <= 1e-6 * m);
            }
        }
    }
    free(k);
    free(v);
}

static vq_status mkst(vq_codec_state *st, const vq_calib *c, int d, int side, int layer, int head,
                      const char *key, const char *val, vq_err *err) {
    memset(st, 0, sizeof *st);
    st->codec = vq_codec_find("vecinfer");
    st->side = side;
    st->ctx.calib = c;
    st->ctx.layer = layer; st->ctx.n_layers = c ? c->n_layers : 2;
    st->ctx.head = head; st->ctx.n_kv_heads = 2; st->ctx.n_heads = 4;
    vq_codec_param p[1];
    int np = 0;
    if (key) { snprintf(p[0].key, sizeof p[0].key, "%s", key); snprintf(p[0].val, sizeof p[0].val, "%s", val); np = 1; }
    vq_status s = st->codec->init(st, d, side, p, np, 1, err);
    if (s) st->codec->fini(st);
    return s;
}

static const double U = 0x1p-24;   /* float unit roundoff */
static double gam(double n) { return n * U / (1 - n * U); }

static void test_file(vq_rng *rng) {
    vq_calib c, b;
    make_calib(&c, 64, 2, 4, 1, 300, rng);
    uint8_t *buf;
    size_t len;
    vq_err err;
    CHECK(vq_calib_serialize(&c, &buf, &len, &err) == VQ_OK);
    CHECK(len == vq_calib_file_bytes(&c));
    uint32_t ver;
    memcpy(&ver, buf + 8, 4);
    CHECK(ver == 5);
    CHECKF(vq_calib_parse(buf, len, &b, &err) == VQ_OK, "parse: %s", err.msg);
    CHECK(b.vi_sub_k == 2 && b.vi_sub_v == 4 && b.vi_seed == 77 && b.vi_vnorm == 1);
    CHECK(!memcmp(b.vi_cb_k, c.vi_cb_k, sizeof(float) * 4 * 64 * 16));
    CHECK(!memcmp(b.vi_cb_v, c.vi_cb_v, sizeof(float) * 4 * 64 * 16));
    CHECK(!memcmp(b.vi_smooth, c.vi_smooth, sizeof(float) * 4 * 64));
    uint8_t *buf2;
    size_t len2;
    CHECK(vq_calib_serialize(&b, &buf2, &len2, &err) == VQ_OK && len2 == len && !memcmp(buf, buf2, len));
    free(buf2);
    vq_calib_free(&b);
    /* every byte of the section, flipped; and every truncation into it */
    const size_t base = len - (32 + 4 * 64 * 4 * 33 + 4);
    int refused = 0, tried = 0;
    for (size_t at = base; at < len; at += 7, tried++) {
        buf[at] ^= 0x20;
        if (vq_calib_parse(buf, len, &b, &err) != VQ_OK) refused++;
        else vq_calib_free(&b);
        buf[at] ^= 0x20;
    }
    CHECKF(refused == tried, "flipped section bytes: %d of %d refused", refused, tried);
    for (size_t l = base - 1; l < len; l += 97) CHECK(vq_calib_parse(buf, l, &b, &err) != VQ_OK);
    /* a codebook whose entry 0 is not the zero vector (CRC made right) */
    {
        vq_calib e;
        CHECK(vq_calib_parse(buf, len, &e, &err) == VQ_OK);
        e.vi_cb_v[16 * 4 * 3 + 1] = 0.5f;   /* (layer 0, head 0, sub-vector 3), entry 0 */
        uint8_t *be;
        size_t le;
        CHECK(vq_calib_serialize(&e, &be, &le, &err) == VQ_OK);
        CHECK(vq_calib_parse(be, le, &b, &err) == VQ_ERR_FORMAT && strstr(err.msg, "zero vector"));
        free(be);
        vq_calib_free(&e);
    }
    /* a version 3 file (no section) still reads */
    vq_calib v3 = c;
    v3.vi_sub_k = v3.vi_sub_v = 0;
    v3.has_lowrank = 0;
    v3.vi_smooth = v3.vi_cb_k = v3.vi_cb_v = NULL;
    uint8_t *b3;
    size_t l3;
    CHECK(vq_calib_serialize(&v3, &b3, &l3, &err) == VQ_OK && l3 < base);
    memcpy(&ver, b3 + 8, 4);
    CHECK(ver == 3);
    CHECK(vq_calib_parse(b3, l3, &b, &err) == VQ_OK && b.vi_sub_k == 0);
    vq_calib_free(&b);
    free(b3);
    free(buf);
    vq_calib_free(&c);
    printf("calibration section: round trip, %d flipped bytes and truncations refused, version 3 reads\n", tried);
}

static void test_contract(vq_rng *rng, int d, int sub_k, int sub_v, int vnorm) {
    vq_calib c;
    make_calib(&c, d, sub_k, sub_v, vnorm, 400, rng);
    vq_err err;
    vq_codec_state ks, vs;
    CHECKF(mkst(&ks, &c, d, VQ_SIDE_K, 1, 1, NULL, NULL, &err) == VQ_OK, "init K: %s", err.msg);
    CHECKF(mkst(&vs, &c, d, VQ_SIDE_V, 1, 1, NULL, NULL, &err) == VQ_OK, "init V: %s", err.msg);
    CHECK(ks.block_bytes * 8 == (size_t)16 * d * 4 / sub_k);   /* 4/sub bits per element, nothing else */
    CHECK(vs.block_bytes * 8 == (size_t)16 * d * 4 / sub_v + (vnorm ? 16 * 16 : 0));   /* + fp16 norms */
    const int NB = 21, NR = NB * 16, NQ = 5;
    float *x = malloc(sizeof(float) * NR * d), *xh = malloc(sizeof(float) * NR * d);
    float *vx = malloc(sizeof(float) * NR * d), *vh = malloc(sizeof(float) * NR * d);
    uint8_t *kb = malloc(ks.block_bytes * NB), *vb = malloc(vs.block_bytes * NB);
    for (int r = 0; r < NR; r++)
        for (int i = 0; i < d; i++) {
            x[r * d + i] = (float)(vq_rng_gauss(rng) * (i % 13 == 3 ? 12.0 : 1.0));
            vx[r * d + i] = (float)(vq_rng_gauss(rng) * (r % 7 == 2 ? 20.0 : 1.0));   /* some large rows */
        }
    for (int b = 0; b < NB; b++) {
        ks.codec->encode(&ks, x + b * 16 * d, kb + b * ks.block_bytes);
        ks.codec->decode(&ks, kb + b * ks.block_bytes, xh + b * 16 * d);
        vs.codec->encode(&vs, vx + b * 16 * d, vb + b * vs.block_bytes);
        vs.codec->decode(&vs, vb + b * vs.block_bytes, vh + b * 16 * d);
    }
    /* zero rows decode to exactly zero (entry 0 of every codebook) */
    {
        float *z = calloc((size_t)16 * d, sizeof(float)), *zh = malloc(sizeof(float) * 16 * d);
        uint8_t *zb = malloc(ks.block_bytes + vs.block_bytes);
        ks.codec->encode(&ks, z, zb);
        ks.codec->decode(&ks, zb, zh);
        double zm = 0;
        for (int i = 0; i < 16 * d; i++) zm = fmax(zm, fabs(zh[i]));
        vs.codec->encode(&vs, z, zb);
        vs.codec->decode(&vs, zb, zh);
        for (int i = 0; i < 16 * d; i++) zm = fmax(zm, fabs(zh[i]));
        CHECKF(zm == 0, "zero rows decode to %g", zm);
        free(z); free(zh); free(zb);
    }
    /* the values' codes are the nearest centroids: no other codebook entry is closer (vnorm: to the
     * row over its stored fp16 norm n, in float as the encoder divides; the code read from the block) */
    const float *cbv = c.vi_cb_v + (size_t)3 * d * 16;
    for (int r = 0; r < NR; r++) {
        float n = 1;
        const uint8_t *blk = vb + (size_t)(r / 16) * vs.block_bytes;
        if (vnorm) {
            vq_f16 h;
            memcpy(&h, blk + vs.block_bytes - 32 + (size_t)(r % 16) * 2, 2);
            n = vq_f16_to_f32(h);
            double s2 = 0;
            for (int i = 0; i < d; i++) s2 += (double)vx[r * d + i] * vx[r * d + i];
            CHECKF(fabs(n - sqrt(s2)) <= 0x1p-11 * sqrt(s2), "row %d: stored norm %g, ||v|| %g", r, n, sqrt(s2));
        }
        for (int m = 0; m < d / sub_v; m++) {
            double e0 = 0;
            const int cm = (blk[(m / 2) * 16 + r % 16] >> (4 * (m & 1))) & 15;
            for (int u = 0; u < sub_v; u++) {
                double e = vnorm ? (double)(vx[r * d + m * sub_v + u] / n) - cbv[(m * 16 + cm) * sub_v + u]
                                 : (double)vx[r * d + m * sub_v + u] - vh[r * d + m * sub_v + u];
                e0 += e * e;
            }
            for (int e = 0; e < 16; e++) {
                double e1 = 0;
                for (int u = 0; u < sub_v; u++) { double t = (double)(vx[r * d + m * sub_v + u] / n) - cbv[(m * 16 + e) * sub_v + u]; e1 += t * t; }
                CHECK(e0 <= e1 * (1 + 1e-6) + 1e-12);
            }
        }
    }
    float *q = malloc(sizeof(float) * NQ * d), *w = malloc(sizeof(float) * NQ * NR), *sc = malloc(sizeof(float) * NQ * NR);
    for (int i = 0; i < NQ * d; i++) q[i] = (float)vq_rng_gauss(rng);
    for (int i = 0; i < NQ * NR; i++) w[i] = (i % 11 == 0) ? 0.0f : (float)vq_rng_uniform(rng);
    void *qs[8], *vqs[8];
    for (int j = 0; j < NQ; j++) {
        qs[j] = vq_aligned_alloc(ks.qstate_bytes + 64);
        ks.codec->prep_query(&ks, q + j * d, qs[j]);
        vqs[j] = vq_aligned_alloc(vs.qstate_bytes + 64);
        vs.codec->prep_query(&vs, q + j * d, vqs[j]);
    }
    const int best = (int)vq_cpu_best_isa();
    double worst_s = 0, worst_a = 0;
    float *acc[8], out[VQ_VI_MAX_D];
    for (int j = 0; j < NQ; j++) acc[j] = malloc(sizeof(float) * vs.acc_floats);
    for (int isa = 0; isa <= best; isa++) {
        vq_vi_force_isa(&ks, (vq_isa)isa);
        vq_vi_force_isa(&vs, (vq_isa)isa);
        for (int nq = 1; nq <= NQ; nq++) {
            ks.codec->score(&ks, nq, (const void *const *)qs, kb, NB, sc);
            for (int j = 0; j < nq; j++)
                for (int r = 0; r < NR; r++) {
                    /* bound_score: the LUT path rounds Π(q ⊙ λ) (log2 d + 2 ops a coordinate), the
                     * LUT's sub-term dots and the M-term sum; the reference's decode rounds Πᵀ and λ
                     * the same way; each step's error is at most γ_n Σ|terms| <= γ_n ‖q⊙λ‖‖ĉ‖ with
                     * ĉ the codeword vector, and ‖ĉ‖ = ‖Π(k̂/λ)‖ */
                    double ql = 0, cn = 0, ref = 0;
                    for (int i = 0; i < d; i++) {
                        double a = (double)q[j * d + i] * c.vi_smooth[(size_t)3 * d + i];
                        ql += a * a;
                        double y = xh[r * d + i] / c.vi_smooth[(size_t)3 * d + i];
                        cn += y * y;
                        ref += (double)q[j * d + i] * xh[r * d + i];
                    }
                    const double lg = log2((double)d);
                    const double bound = gam(2 * (lg + 2) + sub_k + d / sub_k + 4) * sqrt(ql * cn) * 2;
                    const double e = fabs(sc[j * NR + r] - ref);
                    worst_s = fmax(worst_s, e / bound);
                    CHECKF(e <= bound, "score isa %s d %d sub %d q %d row %d: %g vs %g (bound %g)",
                           vq_isa_name((vq_isa)isa), d, sub_k, j, r, (double)sc[j * NR + r], ref, bound);
                }
            /* a value state scored (the contract allows either side): q · decode(v), the norm's
             * multiply and the reference decode's n·ĉ are two more roundings than bound_score's */
            vs.codec->score(&vs, nq, (const void *const *)vqs, vb, NB, sc);
            for (int j = 0; j < nq; j++)
                for (int r = 0; r < NR; r++) {
                    double ql = 0, cn = 0, ref = 0;
                    for (int i = 0; i < d; i++) {
                        ql += (double)q[j * d + i] * q[j * d + i];
                        cn += (double)vh[r * d + i] * vh[r * d + i];
                        ref += (double)q[j * d + i] * vh[r * d + i];
                    }
                    const double bound = gam(sub_v + d / sub_v + 4 + 2) * sqrt(ql * cn) * 2 + 1e-30;
                    const double e = fabs(sc[j * NR + r] - ref);
                    worst_s = fmax(worst_s, e / bound);
                    CHECKF(e <= bound, "value score isa %s d %d sub %d vnorm %d q %d row %d: %g vs %g (bound %g)",
                           vq_isa_name((vq_isa)isa), d, sub_v, vnorm, j, r, (double)sc[j * NR + r], ref, bound);
                }
            for (int j = 0; j < nq; j++) memset(acc[j], 0, sizeof(float) * vs.acc_floats);
            /* two calls (rows 0..31, 32..335: 19 blocks, more than the vnorm loop's chunk of 16), as the store's pages */
            float *w1 = malloc(sizeof(float) * nq * NR);
            for (int j = 0; j < nq; j++) memcpy(w1 + j * 32, w + j * NR, sizeof(float) * 32);
            vs.codec->accumulate(&vs, nq, w1, vb, 2, acc);
            for (int j = 0; j < nq; j++) memcpy(w1 + j * (NR - 32), w + j * NR + 32, sizeof(float) * (NR - 32));
            vs.codec->accumulate(&vs, nq, w1, vb + 2 * vs.block_bytes, NB - 2, acc);
            free(w1);
            for (int j = 0; j < nq; j++) {
                vs.codec->finish(&vs, acc[j], out);
                for (int i = 0; i < d; i++) {
                    double ref = 0, mag = 0;
                    for (int r = 0; r < NR; r++) {
                        ref += (double)w[j * NR + r] * vh[r * d + i];
                        mag += fabs((double)w[j * NR + r] * vh[r * d + i]);
                    }
                    /* bound_acc: each lane sums NR/16 products (one rounding each for the FMA
                     * chain), finish sums 16 lanes: γ_{NR/16 + 16 + 1} Σ|w v̂|; vnorm adds the
                     * kernel's rounding of w·n and the reference decode's of c·n: + 2 */
                    const double bound = gam(NR / 16 + 17 + (vnorm ? 2 : 0)) * mag + 1e-30;
                    const double e = fabs(out[i] - ref);
                    worst_a = fmax(worst_a, e / bound);
                    CHECKF(e <= bound, "acc isa %s d %d sub %d q %d coord %d: %g vs %g (bound %g)",
                           vq_isa_name((vq_isa)isa), d, sub_v, j, i, (double)out[i], ref, bound);
                }
            }
        }
    }
    printf("d %3d sub k %d v %d vnorm %d: scalar..%s, score error <= %.3f of its bound, accumulate <= %.3f\n", d,
           sub_k, sub_v, vnorm, vq_isa_name((vq_isa)best), worst_s, worst_a);
    for (int j = 0; j < NQ; j++) { vq_aligned_free(qs[j]); vq_aligned_free(vqs[j]); free(acc[j]); }
    free(x); free(xh); free(vx); free(vh); free(kb); free(vb); free(q); free(w); free(sc);
    ks.codec->fini(&ks);
    vs.codec->fini(&vs);
    vq_calib_free(&c);
}

static void test_refusals(vq_rng *rng) {
    vq_calib c;
    make_calib(&c, 64, 2, 2, 0, 64, rng);
    vq_err err;
    vq_codec_state st;
    CHECK(mkst(&st, NULL, 64, VQ_SIDE_K, 0, 0, NULL, NULL, &err) == VQ_ERR_ARG && strstr(err.msg, "calib=FILE"));
    CHECK(mkst(&st, &c, 64, VQ_SIDE_K, 0, 0, "sub", "4", &err) == VQ_ERR_ARG && strstr(err.msg, "sub=4"));
    CHECK(mkst(&st, &c, 64, VQ_SIDE_K, 0, 0, "bits", "4", &err) == VQ_ERR_ARG && strstr(err.msg, "bits=4"));
    CHECK(mkst(&st, &c, 64, VQ_SIDE_K, 0, 0, "bits", "2", &err) == VQ_OK);
    st.codec->fini(&st);
    CHECK(mkst(&st, &c, 64, VQ_SIDE_K, 0, 0, "window", "2", &err) == VQ_ERR_ARG);
    CHECK(mkst(&st, &c, 32, VQ_SIDE_K, 0, 0, NULL, NULL, &err) == VQ_ERR_ARG && strstr(err.msg, "head_dim"));
    CHECK(mkst(&st, &c, 64, VQ_SIDE_K, 2, 0, NULL, NULL, &err) == VQ_ERR_ARG);
    int sk = c.vi_sub_k;
    c.vi_sub_k = 0;
    CHECK(mkst(&st, &c, 64, VQ_SIDE_V, 0, 0, NULL, NULL, &err) == VQ_ERR_ARG && strstr(err.msg, "no VecInfer"));
    c.vi_sub_k = sk;
    CHECK(mkst(&st, &c, 64, VQ_SIDE_V, 0, 0, "vnorm", "1", &err) == VQ_ERR_ARG && strstr(err.msg, "vnorm=1"));
    c.vi_vnorm = 1;
    CHECK(mkst(&st, &c, 64, VQ_SIDE_V, 0, 0, "vnorm", "0", &err) == VQ_ERR_ARG && strstr(err.msg, "vnorm=0"));
    CHECK(mkst(&st, &c, 64, VQ_SIDE_V, 0, 0, "vnorm", "1", &err) == VQ_OK && st.block_bytes == 16 * 16 + 32);
    st.codec->fini(&st);
    CHECK(mkst(&st, &c, 64, VQ_SIDE_K, 0, 0, "vnorm", "1", &err) == VQ_OK && st.block_bytes == 16 * 16);   /* keys: no norm */
    st.codec->fini(&st);
    vq_calib_free(&c);
    printf("refusals: no calibration, no section, sub=, bits=, vnorm= against the file, unknown key, head_dim, layer\n");
}

int main(void) {
    printf("test_vecinfer: seed %llu\n", (unsigned long long)SEED);
    vq_rng rng;
    vq_rng_seed(&rng, SEED);
    test_file(&rng);
    test_refusals(&rng);
    const int cfg[][3] = { { 64, 2, 2 }, { 64, 1, 4 }, { 64, 4, 8 }, { 128, 2, 1 }, { 16, 8, 2 } };
    for (int i = 0; i < 5; i++)
        for (int vn = 0; vn < 2; vn++) test_contract(&rng, cfg[i][0], cfg[i][1], cfg[i][2], vn);
    return vq_t_done();
}
