/* test_codecs_attention.c: the codec contract (codec.h) checked for EVERY row of the table
 * (walked with vq_codec_at, so codecs added later are covered), both sides, several d:
 * encode writes every byte deterministically; score == q . decode(block) and accumulate+finish ==
 * sum w * decode(block) to 1e-5 relative (attention terms from codes equal those from K_hat/V_hat);
 * finish is linear; zero rows and rows at the range edge (+-65504) decode finite. Runs itself once
 * per SIMD variant (VQ_CODEC_ISA=scalar|avx2|avx512). */
#include <stdint.h>
#include "../vq_test.h"
#include "codec/codec.h"
#include "../calib_fixture.h"

/* codecs that need a calibration (tq_split) get a synthetic one of this d (1 layer, 1 KV head) */
static vq_calib g_cal;
static void set_ctx(vq_codec_state *st, int d, vq_rng *rng) {
    if (!st->codec->needs_calib && !st->ctx.calib_path) return;   /* calib_path "want": kvquant qweight=1 */
    if (g_cal.head_dim != d) {
        vq_calib_free(&g_cal);
        vq_t_calib_make(&g_cal, 1, 1, 1, d, rng);
    }
    st->ctx = (vq_codec_ctx){ .layer = 0, .n_layers = 1, .head = 0, .n_kv_heads = 1, .n_heads = 1,
                              .calib = &g_cal, .calib_path = "synthetic" };
}


/* pl: "key=value,key=value" (or NULL): the parameters */
static void check_params(vq_rng *rng, const vq_codec *c, const char *pl, int d, int side) {
    vq_codec_param p[8];
    int np = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", pl ? pl : "");
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && np < 8; t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        if (!eq) continue;
        *eq = 0;
        snprintf(p[np].key, sizeof p[np].key, "%s", t);
        snprintf(p[np].val, sizeof p[np].val, "%s", eq + 1);
        np++;
    }
    vq_codec_state st;
    memset(&st, 0, sizeof st);
    st.codec = c;
    st.side = side;
    if (pl && strstr(pl, "qweight=1")) st.ctx.calib_path = "want";
    set_ctx(&st, d, rng);
    vq_err err;
    if (c->init(&st, d, side, p, np, vq_rng_u64(rng), &err) != VQ_OK) {
        CHECKF(err.code == VQ_ERR_ARG && strlen(err.msg) > 10, "%s d=%d: rejected without a message", c->name, d);
        c->fini(&st);
        return;
    }
    CHECKF(st.d == d && st.rows_per_block >= 1 && st.block_bytes > 0 && st.acc_floats >= 1,
           "%s: state d=%d rpb=%d bytes=%zu acc=%d", c->name, st.d, st.rows_per_block, st.block_bytes, st.acc_floats);
    /* one-row blocks: 37 of them, so a value loop that takes 16 rows at a time meets full chunks and
     * a short one; nq = 5: a pass of 4 queries and one of 1 */
    const int rpb = st.rows_per_block, nb = rpb == 1 ? 37 : 3, rows = nb * rpb, nq = 5;
    const size_t bb = st.block_bytes;
    float *x = malloc(sizeof(float) * (size_t)rows * d), *xh = malloc(sizeof(float) * (size_t)rows * d);
    uint8_t *b1 = malloc(bb * nb), *b2 = malloc(bb * nb);
    for (int i = 0; i < rows * d; i++) x[i] = (float)vq_rng_gauss(rng) * (i % 7 == 0 ? 3.0f : 1.0f);
    memset(b1, 0xA5, bb * nb);
    memset(b2, 0x5A, bb * nb);
    for (int b = 0; b < nb; b++) {
        c->encode(&st, x + (size_t)b * rpb * d, b1 + b * bb);
        c->encode(&st, x + (size_t)b * rpb * d, b2 + b * bb);
    }
    CHECKF(memcmp(b1, b2, bb * nb) == 0, "%s side %d d=%d: encode leaves bytes unwritten or is not deterministic", c->name, side, d);
    for (int b = 0; b < nb; b++) c->decode(&st, b1 + b * bb, xh + (size_t)b * rpb * d);
    int finite = 1;
    for (int i = 0; i < rows * d; i++) finite &= isfinite(xh[i]);
    CHECKF(finite, "%s: decode not finite", c->name);

    /* queries */
    float *q = malloc(sizeof(float) * (size_t)nq * d), *S = malloc(sizeof(float) * (size_t)nq * rows);
    size_t qsb = (st.qstate_bytes + 63) / 64 * 64;
    uint8_t *qs = vq_aligned_alloc(qsb * nq + 64);
    const void *qp[5];
    for (int i = 0; i < nq * d; i++) q[i] = (float)vq_rng_gauss(rng);
    for (int j = 0; j < nq; j++) { c->prep_query(&st, q + (size_t)j * d, qs + j * qsb); qp[j] = qs + j * qsb; }
    c->score(&st, nq, qp, b1, nb, S);
    double worst = 0;
    for (int j = 0; j < nq; j++)
        for (int r = 0; r < rows; r++) {
            double ref = 0, nq2 = 0, nk2 = 0;
            for (int e = 0; e < d; e++) {
                ref += (double)q[j * d + e] * xh[r * d + e];
                nq2 += (double)q[j * d + e] * q[j * d + e];
                nk2 += (double)xh[r * d + e] * xh[r * d + e];
            }
            double den = sqrt(nq2 * nk2) + 1e-12, e = fabs(S[j * rows + r] - ref) / den;
            if (!(e == e)) e = INFINITY;
            if (e > worst) worst = e;
        }
    CHECKF(worst < 1e-5, "%s side %d d=%d: score vs q.decode rel err %.3g", c->name, side, d, worst);

    /* accumulate + finish */
    float *w = malloc(sizeof(float) * (size_t)nq * rows), *acc = calloc((size_t)nq * st.acc_floats, sizeof(float));
    float *out = malloc(sizeof(float) * d), *out2 = malloc(sizeof(float) * d);
    float *accp[5];
    for (int i = 0; i < nq * rows; i++) w[i] = vq_rng_uniform(rng) < 0.2 ? 0.0f : vq_rng_uniformf(rng);
    for (int j = 0; j < nq; j++) accp[j] = acc + (size_t)j * st.acc_floats;
    c->accumulate(&st, nq, w, b1, nb, accp);
    worst = 0;
    for (int j = 0; j < nq; j++) {
        c->finish(&st, accp[j], out);
        double scale = 0;
        for (int r = 0; r < rows; r++) {
            double n2 = 0;
            for (int e = 0; e < d; e++) n2 += (double)xh[r * d + e] * xh[r * d + e];
            scale += fabs(w[j * rows + r]) * sqrt(n2);
        }
        for (int e = 0; e < d; e++) {
            double ref = 0;
            for (int r = 0; r < rows; r++) ref += (double)w[j * rows + r] * xh[r * d + e];
            double er = fabs(out[e] - ref) / (scale + 1e-12);
            if (!(er == er)) er = INFINITY;
            if (er > worst) worst = er;
        }
        /* linear: finish(2 acc) = 2 finish(acc) */
        for (int i = 0; i < st.acc_floats; i++) accp[j][i] *= 2.0f;
        c->finish(&st, accp[j], out2);
        double lin = 0;
        for (int e = 0; e < d; e++) lin = fmax(lin, fabs(out2[e] - 2.0f * out[e]) / (2 * scale + 1e-12));
        CHECKF(lin < 1e-6, "%s side %d: finish is not linear (%.3g)", c->name, side, lin);
    }
    CHECKF(worst < 1e-5, "%s side %d d=%d: accumulate+finish vs sum w.decode rel err %.3g", c->name, side, d, worst);

    /* zero rows decode to (near) zero; range-edge rows decode finite */
    memset(x, 0, sizeof(float) * (size_t)rpb * d);
    c->encode(&st, x, b1);
    c->decode(&st, b1, xh);
    double zmax = 0;
    for (int i = 0; i < rpb * d; i++) zmax = fmax(zmax, isfinite(xh[i]) ? fabs(xh[i]) : INFINITY);
    CHECKF(zmax <= 1e-6, "%s side %d: zero row decodes to |x| up to %g", c->name, side, zmax);
    for (int i = 0; i < rpb * d; i++) x[i] = (i % 3 ? 65504.0f : -65504.0f) * (i % 5 ? 1.0f : 0.25f);
    c->encode(&st, x, b1);
    c->decode(&st, b1, xh);
    finite = 1;
    for (int i = 0; i < rpb * d; i++) finite &= isfinite(xh[i]);
    CHECKF(finite, "%s side %d: rows at +-65504 decode to non-finite values", c->name, side);
    c->score(&st, 1, qp, b1, 1, S);
    finite = 1;
    for (int r = 0; r < rpb; r++) finite &= isfinite(S[r]);
    CHECKF(finite, "%s side %d: scores of rows at +-65504 are not finite", c->name, side);

    c->fini(&st);
    free(x); free(xh); free(b1); free(b2); free(q); free(S); vq_aligned_free(qs);
    free(w); free(acc); free(out); free(out2);
}
static void check_codec(vq_rng *rng, const vq_codec *c, const char *pk, const char *pv, int d, int side) {
    char pl[128] = "";
    if (pk) snprintf(pl, sizeof pl, "%s=%s", pk, pv);
    check_params(rng, c, pk ? pl : NULL, d, side);
}

static int run_all(uint64_t seed) {
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    const int dims[] = {64, 128, 32, 256, 48, 96};   /* 96: Phi-3 */
    for (int i = 0; vq_codec_at(i); i++) {
        const vq_codec *c = vq_codec_at(i);
        for (size_t k = 0; k < VQ_ARRAY_LEN(dims); k++)
            for (int side = 0; side < 2; side++) {
                check_codec(&rng, c, NULL, NULL, dims[k], side);
                for (int bits = 1; bits <= 4; bits++) {   /* codecs with bits: a few widths */
                    char v[8];
                    snprintf(v, sizeof v, "%d", bits);
                    vq_codec_param p = {"bits", ""};
                    snprintf(p.val, sizeof p.val, "%d", bits);
                    vq_codec_state st = {.codec = c, .side = side};
                    set_ctx(&st, dims[k], &rng);
                    vq_err err;
                    int ok = c->init(&st, dims[k], side, &p, 1, 1, &err) == VQ_OK;
                    c->fini(&st);
                    if (ok) check_codec(&rng, c, "bits", v, dims[k], side);
                }
            }
        printf("codec %-18s checked\n", c->name);
    }
    const char *rot[] = {"q8_0", "q4_0"};
    for (int i = 0; i < 2; i++)
        if (vq_codec_find(rot[i]))
            for (int side = 0; side < 2; side++) {
                check_codec(&rng, vq_codec_find(rot[i]), "rotate", "1", 64, side);
                check_codec(&rng, vq_codec_find(rot[i]), "rotate", "1", 128, side);
            }
    if (vq_codec_find("kivi"))
        for (int side = 0; side < 2; side++) {
            check_codec(&rng, vq_codec_find("kivi"), "group", "16", 64, side);
            check_codec(&rng, vq_codec_find("kivi"), "group", "64", 128, side);
            /* bits=4 lanes keys, the old row layout, and (keys) a group with a short last tile */
            check_codec(&rng, vq_codec_find("kivi"), "bits", "4", 64, side);
            check_codec(&rng, vq_codec_find("kivi"), "bits", "4", 128, side);
            check_codec(&rng, vq_codec_find("kivi"), "layout", "rows", 64, side);
            check_codec(&rng, vq_codec_find("kivi"), "layout", "rows", 128, side);
            if (side == VQ_SIDE_K) check_codec(&rng, vq_codec_find("kivi"), "group", "24", 128, side);
            /* head_dim 96 at 4 bits: not a multiple of 64, so AVX-512 values take the per-row
             * loop (vacc_512); AVX2 makes three 32-channel passes */
            check_codec(&rng, vq_codec_find("kivi"), "bits", "4", 96, side);
            /* head_dim 2048: the lanes keys fold 2 queries a pass (their folds fill the buffer) */
            if (side == VQ_SIDE_K) check_codec(&rng, vq_codec_find("kivi"), "group", "32", 2048, side);
        }
    /* 3-bit keys (a 2-bit and a 1-bit plane) and kvquant's sparse outliers: every scoring path
     * (lanes with full tiles, a short last tile with G = 24, the rows layout), several fractions;
     * each arm on both sides (the V side ignores outliers= and refuses bits=3) */
    const char *kv3[] = {"bits=3", "bits=3,group=24", "bits=3,group=16", "bits=2,group=48"};
    for (size_t i = 0; i < VQ_ARRAY_LEN(kv3); i++) {
        check_params(&rng, vq_codec_find("kivi"), kv3[i], 64, VQ_SIDE_K);
        check_params(&rng, vq_codec_find("kivi"), kv3[i], 128, VQ_SIDE_K);
    }
    const char *kvq[] = {"bits=2,outliers=0.01", "bits=3,outliers=0.01", "bits=4,outliers=0.02",
                         "bits=3,outliers=0.05,group=24", "bits=2,outliers=0.125,group=16",
                         "bits=3,outliers=0", "bits=2,outliers=0.01,layout=rows",
                         "bits=4,outliers=0.03,layout=rows,group=20", "bits=2,outliers=0.001,group=64",
                         "bits=3,outliers=0.01,group=2", "bits=3,outliers=0.02,qweight=1",
                         "bits=2,outliers=0.05,group=24,qweight=1"};
    for (size_t i = 0; i < VQ_ARRAY_LEN(kvq); i++)
        for (int side = 0; side < 2; side++) {
            check_params(&rng, vq_codec_find("kvquant"), kvq[i], 64, side);
            check_params(&rng, vq_codec_find("kvquant"), kvq[i], 128, side);
        }
    /* q8_0/q4_0 rotated at head_dim 96 (spans of 32 by default, or 32 given) and 128 with spans of 64 */
    for (int side = 0; side < 2; side++) {
        check_params(&rng, vq_codec_find("q4_0"), "rotate=1", 96, side);
        check_params(&rng, vq_codec_find("q8_0"), "rotate=1,rot=32", 96, side);
        check_params(&rng, vq_codec_find("q4_0"), "rotate=1,rot=64,layout=rows", 128, side);
    }
    /* head_dim 96 (not a power of two: the sparse index is divided, not shifted) */
    check_params(&rng, vq_codec_find("kvquant"), "bits=4,outliers=0.02", 96, VQ_SIDE_K);
    check_params(&rng, vq_codec_find("kvquant"), "bits=4,outliers=0.05,group=24", 96, VQ_SIDE_K);
    if (vq_codec_find("tq_split")) {   /* its widths and splits (2.5, 3 and 3.5 bits at d=64) */
        const char *pv[][2] = {{"hi", "3"}, {"lo", "1"}, {"frac", "0.125"}, {"pairs", "12"}, {"hi", "8"}, {"lo", "3"}};
        for (size_t i = 0; i < VQ_ARRAY_LEN(pv); i++)
            for (int side = 0; side < 2; side++) {
                check_codec(&rng, vq_codec_find("tq_split"), pv[i][0], pv[i][1], 64, side);
                check_codec(&rng, vq_codec_find("tq_split"), pv[i][0], pv[i][1], 128, side);
            }
        /* the lanes layout's subsets: 1, 2 (with a last group of 16), 3 and 4 bits, each beside
         * the rows layout of the same codes; layout=lanes where a subset cannot is refused */
        const char *sp[] = {"frac=0.5,lo=1", "frac=0.5,hi=3,lo=1", "frac=0.5,hi=4,lo=3", "frac=0.5,hi=2,lo=1",
                            "hi=4,lo=2", "pairs=8,hi=2,lo=2", "frac=0.5,lo=1,layout=rows", "hi=4,lo=2,layout=rows",
                            "frac=0.5,hi=3,lo=3,layout=lanes", "hi=4,lo=1,layout=lanes"};
        for (size_t i = 0; i < VQ_ARRAY_LEN(sp); i++)
            for (int side = 0; side < 2; side++) {
                check_params(&rng, vq_codec_find("tq_split"), sp[i], 64, side);
                check_params(&rng, vq_codec_find("tq_split"), sp[i], 128, side);
            }
    }
    vq_calib_free(&g_cal);
    return vq_t_done();
}

int main(int argc, char **argv) {
    if (argc > 2) return run_all(strtoull(argv[2], NULL, 0));
    uint64_t seed = vq_t_seed(12345);   /* the children get it on their command line */
    char self[4000];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) VQ_SKIP("cannot read /proc/self/exe");
    self[n] = 0;
    const char *isas[] = {"scalar", "avx2", "avx512"};
    for (int i = 0; i <= (int)vq_cpu_best_isa(); i++) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "VQ_CODEC_ISA=%s '%s' %s %llu", isas[i], self, isas[i], (unsigned long long)seed);
        printf("--- %s ---\n", isas[i]);
        fflush(stdout);
        int rc = system(cmd);
        CHECKF(rc == 0, "variant %s failed (rc %d)", isas[i], rc);
    }
    return vq_t_done();
}
