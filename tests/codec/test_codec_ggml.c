/* test_codec_ggml.c: the llama.cpp arms and KIVI against the formats' definitions: q8_0/q4_0
 * bytes equal an independent re-implementation of ggml's reference quantizers, hand-made blocks
 * decode to the documented values, error bounds per element, bits per element, the premise of
 * rotate=1 (a Hadamard rotation spreads an outlier channel: lower q4_0 error), KIVI's bounds. */
#include <stdint.h>
#include "../vq_test.h"
#include "codec/codec.h"
#include "codec/ggml_lanes.h"

static vq_codec_state make(const char *name, int d, int side, const char *k, const char *v) {
    vq_codec_state st;
    memset(&st, 0, sizeof st);
    st.codec = vq_codec_find(name);
    st.side = side;
    vq_codec_param p[2];
    int np = 0;
    if (k) { snprintf(p[0].key, 32, "%s", k); snprintf(p[0].val, 64, "%s", v); np = 1; }
    vq_err err;
    if (!st.codec || st.codec->init(&st, d, side, p, np, 42, &err) != VQ_OK) {
        fprintf(stderr, "init %s: %s\n", name, st.codec ? err.msg : "missing");
        exit(1);
    }
    return st;
}

/* ggml's quantize_row_q8_0_ref / q4_0_ref, written from their definition */
static void ref_q8_0(const float *x, uint8_t *y, int d) {
    for (int b = 0; b < d / 32; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        float s = amax / 127, id = s ? 1 / s : 0;
        vq_f16 h = vq_f32_to_f16(s);
        memcpy(y + b * 34, &h, 2);
        for (int i = 0; i < 32; i++) y[b * 34 + 2 + i] = (uint8_t)(int8_t)roundf(x[b * 32 + i] * id);
    }
}
static void ref_q4_0(const float *x, uint8_t *y, int d) {
    for (int b = 0; b < d / 32; b++) {
        float amax = 0, max = 0;
        for (int i = 0; i < 32; i++)
            if (amax < fabsf(x[b * 32 + i])) { amax = fabsf(x[b * 32 + i]); max = x[b * 32 + i]; }
        float s = max / -8, id = s ? 1 / s : 0;
        vq_f16 h = vq_f32_to_f16(s);
        memcpy(y + b * 18, &h, 2);
        for (int j = 0; j < 16; j++) {
            int a = (int)(int8_t)(x[b * 32 + j] * id + 8.5f), c = (int)(int8_t)(x[b * 32 + 16 + j] * id + 8.5f);
            a = a > 15 ? 15 : a;
            c = c > 15 ? 15 : c;
            y[b * 18 + 2 + j] = (uint8_t)(a | (c << 4));
        }
    }
}

static void test_ggml_bytes(vq_rng *rng) {
    const int d = 128;
    /* one-row layouts: q8_0 keys with layout=rows, q4_0 values (one row per block in every layout) */
    vq_codec_state s8 = make("q8_0", d, 0, "layout", "rows"), s4 = make("q4_0", d, 1, NULL, NULL);
    CHECK(s8.rows_per_block == 1 && s4.rows_per_block == 1);
    CHECK(s8.block_bytes * 8.0 / d == 8.5 && s4.block_bytes * 8.0 / d == 4.5);
    float x[128], xh[128];
    uint8_t a[200], b[200];
    int same8 = 1, same4 = 1;
    double worst8 = 0, worst4 = 0;
    for (int t = 0; t < 500; t++) {
        /* 0.05 .. 150: keeps the fp16 scale normal (subnormal scales lose relative precision) */
        float amp = (float)exp(vq_rng_uniform(rng) * 8 - 3);
        for (int i = 0; i < d; i++) x[i] = amp * (float)vq_rng_gauss(rng);
        if (t % 50 == 0) for (int i = 0; i < 32; i++) x[i] = 0;   /* an all-zero block */
        s8.codec->encode(&s8, x, a);
        ref_q8_0(x, b, d);
        same8 &= memcmp(a, b, s8.block_bytes) == 0;
        s8.codec->decode(&s8, a, xh);
        for (int i = 0; i < d; i++) {
            vq_f16 h; memcpy(&h, a + (i / 32) * 34, 2);
            double sc = vq_f16_to_f32(h);
            /* fp16 scale rounding adds up to 127 * 2^-11 relative to the half-step bound */
            worst8 = fmax(worst8, fabs(x[i] - xh[i]) / (sc * (0.5 + 127.0 / 2048) + 1e-30));
        }
        s4.codec->encode(&s4, x, a);
        ref_q4_0(x, b, d);
        same4 &= memcmp(a, b, s4.block_bytes) == 0;
        s4.codec->decode(&s4, a, xh);
        for (int i = 0; i < d; i++) {
            vq_f16 h; memcpy(&h, a + (i / 32) * 18, 2);
            double sc = fabs(vq_f16_to_f32(h));
            worst4 = fmax(worst4, fabs(x[i] - xh[i]) / (sc * (1.0 + 8.0 / 2048) + 1e-30));
        }
    }
    CHECK(same8);
    CHECK(same4);
    CHECKF(worst8 <= 1.0, "q8_0 error %.3f of the bound", worst8);
    CHECKF(worst4 <= 1.0, "q4_0 error %.3f of the bound", worst4);
    /* a hand-made q4_0 block: scale 0.5, byte j = j | (15 - j) << 4 */
    uint8_t blk[18 * 4] = {0};
    for (int bl = 0; bl < 4; bl++) {
        vq_f16 h = vq_f32_to_f16(0.5f);
        memcpy(blk + bl * 18, &h, 2);
        for (int j = 0; j < 16; j++) blk[bl * 18 + 2 + j] = (uint8_t)(j | ((15 - j) << 4));
    }
    s4.codec->decode(&s4, blk, xh);
    int ok = 1;
    for (int j = 0; j < 16; j++) ok &= xh[j] == 0.5f * (j - 8) && xh[16 + j] == 0.5f * (7 - j);
    CHECK(ok);
    /* a hand-made q8_0 block: scale 0.25, code i - 16 */
    uint8_t b8[34 * 4] = {0};
    for (int bl = 0; bl < 4; bl++) {
        vq_f16 h = vq_f32_to_f16(0.25f);
        memcpy(b8 + bl * 34, &h, 2);
        for (int i = 0; i < 32; i++) b8[bl * 34 + 2 + i] = (uint8_t)(int8_t)(i - 16);
    }
    s8.codec->decode(&s8, b8, xh);
    ok = 1;
    for (int i = 0; i < 32; i++) ok &= xh[i] == 0.25f * (i - 16);
    CHECK(ok);
    s8.codec->fini(&s8);
    s4.codec->fini(&s4);
}

/* layout=lanes keys (the default): a block of 16 rows holds exactly the 16 rows' llama.cpp blocks,
 * rearranged as documented in src/codec/ggml_lanes.c: per group g of 32 coordinates, the 16 rows'
 * fp16 scales, then byte j of row r's block at j*16 + r. Checked against the reference quantizers
 * (so the content is bit-identical to llama.cpp's), decode equal to the one-row layout's decode,
 * bits per element 8.5 / 4.5, and with rotate=1 too. */
static void test_lanes_bytes(vq_rng *rng) {
    const int d = 128, nb = d / 32, R = 16;
    for (int kind = 0; kind < 2; kind++)
        for (int rot = 0; rot < 2; rot++) {
            const char *name = kind ? "q4_0" : "q8_0";
            const size_t bb = kind ? 18 : 34;
            vq_codec_state ln = make(name, d, 0, "rotate", rot ? "1" : "0");
            vq_codec_param pr[2] = {{"rotate", "0"}, {"layout", "rows"}};
            snprintf(pr[0].val, sizeof pr[0].val, "%d", rot);
            vq_codec_state rw;
            memset(&rw, 0, sizeof rw);
            rw.codec = ln.codec;
            vq_err err;
            CHECK(rw.codec->init(&rw, d, 0, pr, 2, 42, &err) == VQ_OK);
            CHECKF(ln.rows_per_block == R && ln.block_bytes == R * nb * bb, "%s lanes: %d rows, %zu bytes",
                   name, ln.rows_per_block, ln.block_bytes);
            CHECK_NEAR(ln.block_bytes * 8.0 / (R * d), kind ? 4.5 : 8.5, 1e-12);
            CHECK(strstr(ln.params, "layout=lanes") && strstr(rw.params, "layout=rows"));
            float x[16 * 128], xl[16 * 128], xr[16 * 128];
            uint8_t blk[16 * 4 * 34], row[4 * 34], ref[4 * 34];
            int same = 1, dec_same = 1;
            for (int t = 0; t < 40; t++) {
                for (int i = 0; i < R * d; i++) x[i] = (float)(vq_rng_gauss(rng) * exp(vq_rng_uniform(rng) * 4 - 2));
                if (t % 10 == 0) for (int i = 0; i < 32; i++) x[3 * d + 32 + i] = 0;   /* an all-zero block */
                ln.codec->encode(&ln, x, blk);
                ln.codec->decode(&ln, blk, xl);
                for (int r = 0; r < R; r++) {
                    rw.codec->encode(&rw, x + r * d, row);   /* the one-row bytes (rotated when rot) */
                    if (!rot) {                              /* and against ggml's definition */
                        if (kind) ref_q4_0(x + r * d, ref, d); else ref_q8_0(x + r * d, ref, d);
                        same &= memcmp(row, ref, nb * bb) == 0;
                    }
                    for (int g = 0; g < nb; g++) {
                        const uint8_t *grp = blk + g * R * bb;
                        same &= memcmp(grp + 2 * r, row + g * bb, 2) == 0;
                        for (size_t j = 0; j < bb - 2; j++) same &= grp[32 + j * R + r] == row[g * bb + 2 + j];
                    }
                    rw.codec->decode(&rw, row, xr + r * d);
                }
                dec_same &= memcmp(xl, xr, sizeof(float) * R * d) == 0;
            }
            CHECKF(same, "%s rotate=%d: lanes bytes are not the rows' llama.cpp blocks rearranged", name, rot);
            CHECKF(dec_same, "%s rotate=%d: lanes decode differs from the one-row decode", name, rot);
            ln.codec->fini(&ln);
            rw.codec->fini(&rw);
        }
    /* values stay one row per block; a bad layout value is refused with the allowed ones */
    vq_codec_state v = make("q8_0", d, 1, NULL, NULL);
    CHECK(v.rows_per_block == 1 && v.block_bytes == 4 * 34);
    v.codec->fini(&v);
    vq_codec_state b;
    memset(&b, 0, sizeof b);
    b.codec = vq_codec_find("q4_0");
    vq_codec_param bp = {"layout", "tiles"};
    vq_err err;
    CHECK(b.codec->init(&b, d, 0, &bp, 1, 1, &err) == VQ_ERR_ARG && strstr(err.msg, "layout=tiles") &&
          strstr(err.msg, "lanes"));
    b.codec->fini(&b);
}

/* the lanes loops of ggml_lanes.c called directly with every ISA this CPU has (scalar, AVX2,
 * AVX-512: one process checks them all, whatever VQ_CODEC_ISA says), on shapes the codec-table
 * tests do not reach: head_dim 32..256, 1..9 queries (AVX2 passes of 3, AVX-512 passes of 4, and
 * their remainders), 1 or 5 key blocks; values over 1..200 rows (the 64-row chunks, a partial
 * last chunk, d/32 odd for AVX-512's two-group passes), summed into non-zero accumulators.
 * Scores equal q . decode(row) and sums equal acc0 + sum w decode(row) to 1e-5 relative, as in
 * test_codecs_attention. */
static void test_lanes_isa(vq_rng *rng) {
    const int dims[] = {32, 64, 96, 128, 256}, nqs[] = {1, 2, 3, 4, 5, 7, 9}, nrs[] = {1, 17, 64, 65, 130, 200};
    const int best = (int)vq_cpu_best_isa(), NQ = 9, NR = 200;
    printf("lanes loops checked on ISAs scalar..%s\n", vq_isa_name((vq_isa)best));
    for (int kind = 0; kind < 2; kind++)
        for (size_t di = 0; di < VQ_ARRAY_LEN(dims); di++) {
            const int d = dims[di];
            const vq_ggl_kind gk = kind ? VQ_GGL_Q4 : VQ_GGL_Q8;
            const char *name = kind ? "q4_0" : "q8_0";
            vq_codec_state ks = make(name, d, 0, NULL, NULL), vs = make(name, d, 1, NULL, NULL);
            const int R = ks.rows_per_block, nbk = 5;
            float *x = malloc(sizeof(float) * (size_t)NR * d), *xh = malloc(sizeof(float) * (size_t)NR * d);
            float *q = malloc(sizeof(float) * (size_t)NQ * d), *S = malloc(sizeof(float) * (size_t)NQ * NR);
            float *w = malloc(sizeof(float) * (size_t)NQ * NR), *acc = malloc(sizeof(float) * (size_t)NQ * d);
            float *acc0 = malloc(sizeof(float) * (size_t)NQ * d);
            uint8_t *kb = malloc(ks.block_bytes * nbk), *vb = malloc(vs.block_bytes * NR);
            const size_t qsb = (ks.qstate_bytes + 63) / 64 * 64;
            uint8_t *qs = vq_aligned_alloc(qsb * NQ);
            const void *qp[9];
            float *accp[9];
            for (int i = 0; i < NR * d; i++) x[i] = (float)(vq_rng_gauss(rng) * exp(vq_rng_uniform(rng) * 4 - 2));
            for (int i = 0; i < NQ * d; i++) q[i] = (float)vq_rng_gauss(rng);
            for (int i = 0; i < NQ * d; i++) acc0[i] = (float)vq_rng_gauss(rng);
            for (int i = 0; i < NQ * NR; i++) w[i] = vq_rng_uniform(rng) < 0.2 ? 0.0f : vq_rng_uniformf(rng);
            for (int j = 0; j < NQ; j++) {
                ks.codec->prep_query(&ks, q + (size_t)j * d, qs + j * qsb);
                qp[j] = qs + j * qsb;
                accp[j] = acc + (size_t)j * d;
            }
            /* keys: nbk lanes blocks of the first nbk * 16 rows */
            for (int b = 0; b < nbk; b++) {
                ks.codec->encode(&ks, x + (size_t)b * R * d, kb + b * ks.block_bytes);
                ks.codec->decode(&ks, kb + b * ks.block_bytes, xh + (size_t)b * R * d);
            }
            for (int isa = 0; isa <= best; isa++)
                for (size_t qi = 0; qi < VQ_ARRAY_LEN(nqs); qi++)
                    for (int nb = 1; nb <= nbk; nb += nbk - 1) {
                        const int nq = nqs[qi], rows = nb * R;
                        vq_ggl_score(gk, (vq_isa)isa, d, nq, qp, kb, nb, S);
                        double worst = 0;
                        for (int j = 0; j < nq; j++)
                            for (int r = 0; r < rows; r++) {
                                double ref = 0, n2q = 0, n2k = 0;
                                for (int e = 0; e < d; e++) {
                                    ref += (double)q[j * d + e] * xh[r * d + e];
                                    n2q += (double)q[j * d + e] * q[j * d + e];
                                    n2k += (double)xh[r * d + e] * xh[r * d + e];
                                }
                                double er = fabs(S[j * rows + r] - ref) / (sqrt(n2q * n2k) + 1e-12);
                                worst = er == er ? fmax(worst, er) : INFINITY;
                            }
                        CHECKF(worst < 1e-5, "%s keys %s d=%d nq=%d blocks=%d: score rel err %.3g", name,
                               vq_isa_name((vq_isa)isa), d, nq, nb, worst);
                    }
            /* values: one row per block */
            for (int r = 0; r < NR; r++) {
                vs.codec->encode(&vs, x + (size_t)r * d, vb + r * vs.block_bytes);
                vs.codec->decode(&vs, vb + r * vs.block_bytes, xh + (size_t)r * d);
            }
            for (int isa = VQ_ISA_AVX2; isa <= best; isa++)
                for (size_t qi = 0; qi < VQ_ARRAY_LEN(nqs); qi++)
                    for (size_t ri = 0; ri < VQ_ARRAY_LEN(nrs); ri++) {
                        const int nq = nqs[qi], n = nrs[ri];
                        memcpy(acc, acc0, sizeof(float) * (size_t)NQ * d);
                        /* the weights of query j at w[j * n + r], as the store lays them out */
                        CHECK(vq_ggl_acc_rows(gk, (vq_isa)isa, d, nq, w, vb, n, accp) == 1);
                        double worst = 0;
                        for (int j = 0; j < nq; j++) {
                            double scale = fabs(acc0[j * d]);
                            for (int e = 1; e < d; e++) scale = fmax(scale, fabs(acc0[j * d + e]));
                            for (int r = 0; r < n; r++) {
                                double n2 = 0;
                                for (int e = 0; e < d; e++) n2 += (double)xh[r * d + e] * xh[r * d + e];
                                scale += fabs(w[j * n + r]) * sqrt(n2);
                            }
                            for (int e = 0; e < d; e++) {
                                double ref = acc0[j * d + e];
                                for (int r = 0; r < n; r++) ref += (double)w[j * n + r] * xh[r * d + e];
                                double er = fabs(acc[j * d + e] - ref) / (scale + 1e-12);
                                worst = er == er ? fmax(worst, er) : INFINITY;
                            }
                        }
                        CHECKF(worst < 1e-5, "%s values %s d=%d nq=%d rows=%d: sum rel err %.3g", name,
                               vq_isa_name((vq_isa)isa), d, nq, n, worst);
                    }
            ks.codec->fini(&ks);
            vs.codec->fini(&vs);
            free(x); free(xh); free(q); free(S); free(w); free(acc); free(acc0); free(kb); free(vb);
            vq_aligned_free(qs);
        }
}

/* rotate=1: with one outlier channel per row, rotated q4_0 has lower error than plain q4_0
 * (the rotation spreads the outlier over all channels of the block) */
static void test_rotate_premise(vq_rng *rng) {
    const int d = 128, n = 400;
    /* the V side: one row per block (keys are 16 rows per block in the default lanes layout) */
    vq_codec_state p = make("q4_0", d, 1, NULL, NULL), r = make("q4_0", d, 1, "rotate", "1");
    float x[128], xh[128];
    uint8_t blk[256];
    double ep = 0, er = 0, n2 = 0;
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < d; i++) x[i] = (float)vq_rng_gauss(rng);
        x[7] = 20.0f;   /* an outlier channel, as in real keys */
        for (int i = 0; i < d; i++) n2 += x[i] * x[i];
        p.codec->encode(&p, x, blk);
        p.codec->decode(&p, blk, xh);
        for (int i = 0; i < d; i++) ep += (x[i] - xh[i]) * (x[i] - xh[i]);
        r.codec->encode(&r, x, blk);
        r.codec->decode(&r, blk, xh);
        for (int i = 0; i < d; i++) er += (x[i] - xh[i]) * (x[i] - xh[i]);
    }
    printf("q4_0 relative MSE with an outlier channel: plain %.5f, rotate=1 %.5f\n", ep / n2, er / n2);
    CHECKF(er < 0.7 * ep, "rotation did not help: %.5f vs %.5f", er / n2, ep / n2);
    /* without outliers, rotation keeps the norm: decoded norm within 2%% */
    for (int i = 0; i < d; i++) x[i] = (float)vq_rng_gauss(rng);
    vq_codec_state r8 = make("q8_0", d, 1, "rotate", "1");
    r8.codec->encode(&r8, x, blk);
    r8.codec->decode(&r8, blk, xh);
    double a = 0, b = 0;
    for (int i = 0; i < d; i++) { a += x[i] * x[i]; b += xh[i] * xh[i]; }
    CHECK_NEAR(sqrt(b / a), 1.0, 0.02);
    p.codec->fini(&p); r.codec->fini(&r); r8.codec->fini(&r8);
}

/* rot=SPAN: the rotation acts on runs of SPAN channels. A row with one channel set spreads over
 * its span only (the other blocks keep scale 0); the default span is the largest power of two
 * dividing head_dim (96 -> 32), spelled in the params text only when it is not the whole row; the
 * decoded norm is kept; spans that are not powers of two dividing head_dim are refused. */
static void test_rotate_spans(vq_rng *rng) {
    vq_codec_state a = make("q8_0", 96, 1, "rotate", "1");
    CHECKF(!strcmp(a.params, "rotate=1,rot=32,layout=lanes"), "params %s", a.params);
    float x[128] = {0}, xh[128];
    uint8_t blk[4 * 34];
    x[7] = 3.0f;
    a.codec->encode(&a, x, blk);
    vq_f16 h0, h1, h2;
    memcpy(&h0, blk, 2); memcpy(&h1, blk + 34, 2); memcpy(&h2, blk + 68, 2);
    CHECKF(vq_f16_to_f32(h0) > 0 && vq_f16_to_f32(h1) == 0 && vq_f16_to_f32(h2) == 0,
           "one channel of span 0 reached other spans: scales %g %g %g", vq_f16_to_f32(h0),
           vq_f16_to_f32(h1), vq_f16_to_f32(h2));
    a.codec->decode(&a, blk, xh);
    CHECK_NEAR(xh[7], 3.0f, 0.03);
    for (int i = 0; i < 96; i++) x[i] = (float)vq_rng_gauss(rng);
    a.codec->encode(&a, x, blk);
    a.codec->decode(&a, blk, xh);
    double n0 = 0, n1 = 0, e = 0;
    for (int i = 0; i < 96; i++) { n0 += x[i] * x[i]; n1 += xh[i] * xh[i]; e += (x[i] - xh[i]) * (x[i] - xh[i]); }
    CHECK_NEAR(sqrt(n1 / n0), 1.0, 0.02);
    CHECKF(e / n0 < 1e-3, "q8_0 rotate span 32 relative error %g", e / n0);
    a.codec->fini(&a);
    vq_codec_state b = make("q4_0", 128, 1, "rotate", "1");
    CHECKF(!strcmp(b.params, "rotate=1,layout=lanes"), "params %s", b.params);
    b.codec->fini(&b);
    static const struct { int d; const char *rot, *rotate, *msg; } bad[] = {
        {128, "64", NULL, "needs rotate=1"}, {96, "64", "1", "divides head_dim 96"},
        {128, "48", "1", "power of two"}, {128, "1", "1", "power of two"}, {128, "8192", "1", "0..4096"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vq_codec_state st;
        memset(&st, 0, sizeof st);
        st.codec = vq_codec_find("q4_0");
        st.side = 1;
        vq_codec_param p[2];
        int np = 0;
        snprintf(p[np].key, 32, "rot"); snprintf(p[np].val, 64, "%s", bad[i].rot); np++;
        if (bad[i].rotate) { snprintf(p[np].key, 32, "rotate"); snprintf(p[np].val, 64, "%s", bad[i].rotate); np++; }
        vq_err err;
        vq_status s = st.codec->init(&st, bad[i].d, 1, p, np, 42, &err);
        CHECKF(s == VQ_ERR_ARG && strstr(err.msg, bad[i].msg), "rot=%s d=%d: %s", bad[i].rot, bad[i].d,
               s ? err.msg : "accepted");
        if (st.codec->fini) st.codec->fini(&st);
    }
    /* and a span smaller than the default: rot=32 at head_dim 128 */
    vq_codec_state r;
    memset(&r, 0, sizeof r);
    r.codec = vq_codec_find("q8_0");
    r.side = 1;
    vq_codec_param p2[2] = {{"rotate", "1"}, {"rot", "32"}};
    vq_err err;
    CHECKF(r.codec->init(&r, 128, 1, p2, 2, 42, &err) == VQ_OK, "rot=32: %s", err.msg);
    CHECKF(!strcmp(r.params, "rotate=1,rot=32,layout=lanes"), "params %s", r.params);
    memset(x, 0, sizeof x);
    x[100] = 2.0f;   /* channel 100 is in span 3 (96..127) */
    r.codec->encode(&r, x, blk);
    for (int bk = 0; bk < 4; bk++) {
        vq_f16 h;
        memcpy(&h, blk + bk * 34, 2);
        CHECKF((vq_f16_to_f32(h) > 0) == (bk == 3), "rot=32: block %d scale %g", bk, vq_f16_to_f32(h));
    }
    r.codec->fini(&r);
}

/* KIVI: keys per channel over G tokens, values per token in groups of G channels */
static void test_kivi(vq_rng *rng) {
    const int d = 64;
    for (int bits = 2; bits <= 4; bits += 2) {
        char bv[4];
        snprintf(bv, sizeof bv, "%d", bits);
        vq_codec_state k = make("kivi", d, 0, "bits", bv), v = make("kivi", d, 1, "bits", bv);
        const int G = k.rows_per_block;
        CHECK(G == 32 && v.rows_per_block == 1 && k.fp_window == 128);
        CHECK_NEAR(k.block_bytes * 8.0 / (G * d), bits + 32.0 / G, 1e-12);   /* b + two fp16 per channel / G */
        CHECK_NEAR(v.block_bytes * 8.0 / d, bits + 32.0 / 32, 1e-12);          /* b + two fp16 per group */
        float *x = malloc(sizeof(float) * G * d), *xh = malloc(sizeof(float) * G * d);
        uint8_t *blk = malloc(k.block_bytes);
        for (int i = 0; i < G * d; i++) x[i] = (float)vq_rng_gauss(rng) * (i % d == 3 ? 30.0f : 1.0f);
        for (int r = 0; r < G; r++) x[r * d + 5] = 1.25f;   /* a constant channel: exact */
        k.codec->encode(&k, x, blk);
        k.codec->decode(&k, blk, xh);
        double worst = 0;
        for (int c = 0; c < d; c++) {
            float lo = x[c], hi = x[c];
            for (int r = 0; r < G; r++) { lo = fminf(lo, x[r * d + c]); hi = fmaxf(hi, x[r * d + c]); }
            double step = (hi - lo) / ((1 << bits) - 1);
            for (int r = 0; r < G; r++)
                worst = fmax(worst, fabs(x[r * d + c] - xh[r * d + c]) / (step * 0.5 * 1.01 + fabs(lo) * 1e-3 + 1e-6));
        }
        CHECKF(worst <= 1.0, "kivi K bits=%d: error %.3f of the per-channel bound", bits, worst);
        int exact = 1;
        for (int r = 0; r < G; r++) exact &= xh[r * d + 5] == 1.25f;
        CHECK(exact);
        /* the outlier channel does not hurt the other channels (per-channel scales) */
        double other = 0;
        for (int r = 0; r < G; r++) other = fmax(other, fabs(x[r * d + 10] - xh[r * d + 10]));
        CHECKF(other < 2.0, "kivi K: channel 10 error %.3f", other);
        uint8_t *vb = malloc(v.block_bytes);
        v.codec->encode(&v, x, vb);
        v.codec->decode(&v, vb, xh);
        worst = 0;
        for (int g = 0; g < d / 32; g++) {
            float lo = x[g * 32], hi = x[g * 32];
            for (int c = g * 32; c < g * 32 + 32; c++) { lo = fminf(lo, x[c]); hi = fmaxf(hi, x[c]); }
            double step = (hi - lo) / ((1 << bits) - 1);
            for (int c = g * 32; c < g * 32 + 32; c++)
                worst = fmax(worst, fabs(x[c] - xh[c]) / (step * 0.5 * 1.01 + fabs(lo) * 1e-3 + 1e-6));
        }
        CHECKF(worst <= 1.0, "kivi V bits=%d: error %.3f of the per-group bound", bits, worst);
        k.codec->fini(&k); v.codec->fini(&v);
        free(x); free(xh); free(blk); free(vb);
    }
}

int main(void) {
    uint64_t seed = vq_t_seed(12345);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    test_ggml_bytes(&rng);
    test_lanes_bytes(&rng);
    test_lanes_isa(&rng);
    test_rotate_premise(&rng);
    test_rotate_spans(&rng);
    test_kivi(&rng);
    return vq_t_done();
}
