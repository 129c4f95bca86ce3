/* test_tq_lanes.c: turboquant_mse's lanes layout at 2, 3 and 4 bits against its packed layout and
 * its documented byte order. Layout: with the same seed, every code of every row sits at the bits
 * docs/lowbit-keys.md (and tq_lanes.c / tq_lanes_lo.c) give, read here by an extraction written
 * from that text, and equals the packed layout's code; norms equal; lanes decode == packed decode
 * bit for bit; bytes per row equal. Loops: score and accumulate of every ISA the CPU has (pinned
 * with vq_tq_force_isa, whatever VQ_CODEC_ISA says), for 1-9 queries, 1 or 5 key blocks and 1-200
 * value rows, equal q . decode and the sum of w . decode to 1e-5 relative. Seed printed. */
#include <stdint.h>
#include "../vq_test.h"
#include "codec/codec.h"
#include "codec/tq.h"
#include "codec/bitpack.h"

static int make(vq_codec_state *st, int d, int side, int bits, const char *layout, int norm32) {
    memset(st, 0, sizeof *st);
    st->codec = vq_codec_find("turboquant_mse");
    st->side = side;
    vq_codec_param p[3];
    snprintf(p[0].key, 32, "bits");
    snprintf(p[0].val, 64, "%d", bits);
    snprintf(p[1].key, 32, "layout");
    snprintf(p[1].val, 64, "%s", layout);
    snprintf(p[2].key, 32, "norm");
    snprintf(p[2].val, 64, "%s", norm32 ? "f32" : "f16");
    vq_err err;
    if (st->codec->init(st, d, side, p, 3, 99, &err) != VQ_OK) {
        fprintf(stderr, "init bits=%d d=%d %s: %s\n", bits, d, layout, err.msg);
        st->codec->fini(st);
        return 0;
    }
    return 1;
}

static unsigned bit_at(const uint8_t *p, size_t bit) { return (p[bit / 8] >> (bit % 8)) & 1u; }
static unsigned bits_at(const uint8_t *p, size_t bit, int n) {
    unsigned v = 0;
    for (int k = 0; k < n; k++) v |= bit_at(p, bit + (size_t)k) << k;
    return v;
}

/* the documented order (docs/lowbit-keys.md, "Lanes layout for 2- and 3-bit turboquant_mse"):
 * code of coordinate i of row r, from the codes after the norms */
static unsigned doc_key(int bits, const uint8_t *c, int r, int i) {
    const int g = i / 32, k = i % 32;
    if (bits == 4) {   /* tq_lanes.c: pair p = i/2, byte p*16 + r, low nibble even i */
        return (c[(size_t)(i / 2) * 16 + (size_t)r] >> (4 * (i & 1))) & 15u;
    }
    const uint8_t *grp = c + (size_t)g * (size_t)bits * 64;
    uint32_t wd[3];
    for (int w = 0; w < bits; w++) memcpy(&wd[w], grp + (size_t)w * 64 + 4 * (size_t)r, 4);
    if (bits == 2) return (wd[k / 16] >> (2 * (k % 16))) & 3u;
    if (k < 30) return (wd[k / 10] >> (3 * (k % 10))) & 7u;
    return ((wd[k - 30] >> 30) & 3u) | (((wd[2] >> k) & 1u) << 2);
}
static unsigned doc_val(int bits, const uint8_t *c, int i) {
    const int g = i / 32, k = i % 32;
    if (bits == 4) return (c[(size_t)g * 16 + (size_t)(k & 15)] >> (4 * (k >> 4))) & 15u;
    if (bits == 2) return (c[(size_t)g * 8 + (size_t)(k % 8)] >> (2 * (k / 8))) & 3u;
    return bits_at(c + (size_t)g * 12, 12 * (size_t)(k % 8) + 3 * (size_t)(k / 8), 3);
}

static void test_layout(vq_rng *rng) {
    const int dims[] = {32, 64, 96, 128, 256};
    int checked = 0;
    for (int bits = 2; bits <= 4; bits++)
        for (size_t di = 0; di < VQ_ARRAY_LEN(dims); di++)
            for (int n32 = 0; n32 < 2; n32++)
                for (int side = 0; side < 2; side++) {
                    const int d = dims[di];
                    vq_codec_state ln, pk;
                    if (!make(&ln, d, side, bits, "lanes", n32) || !make(&pk, d, side, bits, "packed", n32)) {
                        CHECKF(0, "bits=%d d=%d: no state", bits, d);
                        continue;
                    }
                    const int R = ln.rows_per_block;
                    const size_t nb = n32 ? 4 : 2;
                    CHECKF(R == (side == VQ_SIDE_K ? 16 : 1) && pk.rows_per_block == 1,
                           "bits=%d side %d: %d rows per block", bits, side, R);
                    CHECKF(ln.block_bytes == (size_t)R * pk.block_bytes &&
                           pk.block_bytes == nb + (size_t)d * bits / 8,
                           "bits=%d d=%d side %d: %zu bytes per lanes block, %zu per packed row",
                           bits, d, side, ln.block_bytes, pk.block_bytes);
                    CHECK(strstr(ln.params, "layout=lanes") && strstr(pk.params, "layout=packed"));
                    float *x = malloc(sizeof(float) * (size_t)R * d), *xl = malloc(sizeof(float) * (size_t)R * d);
                    float *xp = malloc(sizeof(float) * (size_t)d);
                    uint8_t *bl = malloc(ln.block_bytes), *bp = malloc(pk.block_bytes);
                    for (int e = 0; e < R * d; e++) x[e] = (float)(vq_rng_gauss(rng) * (e % 5 ? 1.0 : 4.0));
                    memset(bl, 0xA5, ln.block_bytes);
                    ln.codec->encode(&ln, x, bl);
                    ln.codec->decode(&ln, bl, xl);
                    const uint8_t *codes = bl + nb * (size_t)R;
                    int bad_code = 0, bad_norm = 0, bad_dec = 0;
                    for (int r = 0; r < R; r++) {
                        memset(bp, 0x5A, pk.block_bytes);
                        pk.codec->encode(&pk, x + (size_t)r * d, bp);
                        pk.codec->decode(&pk, bp, xp);
                        bad_norm += memcmp(bl + nb * (size_t)r, bp, nb) != 0;
                        for (int i = 0; i < d; i++) {
                            unsigned want = vq_bitpack_get(bits, bp + nb, (size_t)i);
                            unsigned got = side == VQ_SIDE_K ? doc_key(bits, codes, r, i) : doc_val(bits, codes, i);
                            bad_code += want != got;
                        }
                        bad_dec += memcmp(xp, xl + (size_t)r * d, sizeof(float) * (size_t)d) != 0;
                    }
                    CHECKF(bad_code == 0 && bad_norm == 0 && bad_dec == 0,
                           "bits=%d d=%d norm%s side %d: %d codes off the documented bits, %d norms, "
                           "%d rows decoding otherwise than packed", bits, d, n32 ? "32" : "16", side,
                           bad_code, bad_norm, bad_dec);
                    checked++;
                    free(x); free(xl); free(xp); free(bl); free(bp);
                    ln.codec->fini(&ln);
                    pk.codec->fini(&pk);
                }
    printf("layout: %d (bits, d, norm, side) cases against the documented bits and packed codes\n", checked);
}

static double rel_score(const float *S, const float *q, const float *xh, int nq, int rows, int d) {
    double worst = 0;
    for (int j = 0; j < nq; j++)
        for (int r = 0; r < rows; r++) {
            double ref = 0, n2q = 0, n2k = 0;
            for (int e = 0; e < d; e++) {
                ref += (double)q[j * d + e] * xh[(size_t)r * d + e];
                n2q += (double)q[j * d + e] * q[j * d + e];
                n2k += (double)xh[(size_t)r * d + e] * xh[(size_t)r * d + e];
            }
            double er = fabs(S[(size_t)j * rows + r] - ref) / (sqrt(n2q * n2k) + 1e-12);
            worst = er == er ? fmax(worst, er) : INFINITY;
        }
    return worst;
}

static void test_isa(vq_rng *rng) {
    const int dims[] = {32, 64, 96, 128, 256}, nqs[] = {1, 2, 3, 4, 5, 7, 9}, nrs[] = {1, 17, 64, 65, 130, 200};
    const int best = (int)vq_cpu_best_isa(), NQ = 9, NR = 200, NBK = 5;
    printf("lanes loops checked on ISAs scalar..%s\n", vq_isa_name((vq_isa)best));
    for (int bits = 2; bits <= 4; bits++)
        for (size_t di = 0; di < VQ_ARRAY_LEN(dims); di++)
            for (int n32 = 0; n32 < 2; n32++) {
                const int d = dims[di];
                vq_codec_state ks, vs;
                if (!make(&ks, d, VQ_SIDE_K, bits, "lanes", n32)) { CHECK(0); continue; }
                if (!make(&vs, d, VQ_SIDE_V, bits, "lanes", n32)) { CHECK(0); ks.codec->fini(&ks); continue; }
                const int R = ks.rows_per_block;
                float *x = malloc(sizeof(float) * (size_t)NR * d), *xh = malloc(sizeof(float) * (size_t)NR * d);
                float *q = malloc(sizeof(float) * (size_t)NQ * d), *S = malloc(sizeof(float) * (size_t)NQ * NR);
                float *w = malloc(sizeof(float) * (size_t)NQ * NR), *acc = malloc(sizeof(float) * (size_t)NQ * d);
                float *acc0 = malloc(sizeof(float) * (size_t)NQ * d), *out = malloc(sizeof(float) * (size_t)d);
                float *out0 = malloc(sizeof(float) * (size_t)NQ * d);
                uint8_t *kb = malloc(ks.block_bytes * NBK), *vb = malloc(vs.block_bytes * NR);
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
                    vs.codec->finish(&vs, acc0 + (size_t)j * d, out0 + (size_t)j * d);
                }
                for (int b = 0; b < NBK; b++) {
                    ks.codec->encode(&ks, x + (size_t)b * R * d, kb + b * ks.block_bytes);
                    ks.codec->decode(&ks, kb + b * ks.block_bytes, xh + (size_t)b * R * d);
                }
                for (int isa = 0; isa <= best; isa++) {
                    vq_tq_force_isa(&ks, (vq_isa)isa);
                    for (size_t qi = 0; qi < VQ_ARRAY_LEN(nqs); qi++)
                        for (int nb = 1; nb <= NBK; nb += NBK - 1) {
                            const int nq = nqs[qi];
                            ks.codec->score(&ks, nq, qp, kb, nb, S);
                            double worst = rel_score(S, q, xh, nq, nb * R, d);
                            CHECKF(worst < 1e-5, "bits=%d keys %s d=%d norm%s nq=%d blocks=%d: score rel err %.3g",
                                   bits, vq_isa_name((vq_isa)isa), d, n32 ? "32" : "16", nq, nb, worst);
                        }
                }
                for (int r = 0; r < NR; r++) {
                    vs.codec->encode(&vs, x + (size_t)r * d, vb + r * vs.block_bytes);
                    vs.codec->decode(&vs, vb + r * vs.block_bytes, xh + (size_t)r * d);
                }
                for (int isa = 0; isa <= best; isa++) {
                    vq_tq_force_isa(&vs, (vq_isa)isa);
                    for (size_t qi = 0; qi < VQ_ARRAY_LEN(nqs); qi++)
                        for (size_t ri = 0; ri < VQ_ARRAY_LEN(nrs); ri++) {
                            const int nq = nqs[qi], n = nrs[ri];
                            memcpy(acc, acc0, sizeof(float) * (size_t)NQ * d);
                            /* the weights of query j at w[j * n + r], as the store lays them out */
                            vs.codec->accumulate(&vs, nq, w, vb, n, accp);
                            double worst = 0;
                            for (int j = 0; j < nq; j++) {
                                vs.codec->finish(&vs, accp[j], out);
                                double scale = 0;
                                for (int e = 0; e < d; e++) scale = fmax(scale, fabs(out0[j * d + e]));
                                for (int r = 0; r < n; r++) {
                                    double n2 = 0;
                                    for (int e = 0; e < d; e++) n2 += (double)xh[(size_t)r * d + e] * xh[(size_t)r * d + e];
                                    scale += fabs(w[j * n + r]) * sqrt(n2);
                                }
                                for (int e = 0; e < d; e++) {
                                    double ref = out0[j * d + e];
                                    for (int r = 0; r < n; r++) ref += (double)w[j * n + r] * xh[(size_t)r * d + e];
                                    double er = fabs(out[e] - ref) / (scale + 1e-12);
                                    worst = er == er ? fmax(worst, er) : INFINITY;
                                }
                            }
                            CHECKF(worst < 1e-5, "bits=%d values %s d=%d norm%s nq=%d rows=%d: sum rel err %.3g",
                                   bits, vq_isa_name((vq_isa)isa), d, n32 ? "32" : "16", nq, n, worst);
                        }
                }
                free(x); free(xh); free(q); free(S); free(w); free(acc); free(acc0); free(out); free(out0);
                free(kb); free(vb);
                vq_aligned_free(qs);
                ks.codec->fini(&ks);
                vs.codec->fini(&vs);
            }
}

static void test_params(void) {
    vq_codec_state st;
    vq_err err;
    memset(&st, 0, sizeof st);
    st.codec = vq_codec_find("turboquant_mse");
    /* bits 1 and d % 32 != 0 have no lanes layout: auto falls back to packed, lanes is refused */
    vq_codec_param p[2] = {{"bits", "1"}, {"layout", "lanes"}};
    CHECK(st.codec->init(&st, 64, VQ_SIDE_K, p, 2, 1, &err) == VQ_ERR_ARG && strstr(err.msg, "layout=lanes"));
    st.codec->fini(&st);
    memset(&st, 0, sizeof st);
    st.codec = vq_codec_find("turboquant_mse");
    snprintf(p[0].val, sizeof p[0].val, "3");
    CHECK(st.codec->init(&st, 48, VQ_SIDE_K, p, 2, 1, &err) == VQ_ERR_ARG && strstr(err.msg, "d=48"));
    st.codec->fini(&st);
    for (int bits = 1; bits <= 5; bits++)
        for (int d = 48; d <= 64; d += 16) {
            memset(&st, 0, sizeof st);
            st.codec = vq_codec_find("turboquant_mse");
            vq_codec_param b = {"bits", ""};
            snprintf(b.val, sizeof b.val, "%d", bits);
            CHECK(st.codec->init(&st, d, VQ_SIDE_K, &b, 1, 1, &err) == VQ_OK);
            const int lanes = bits >= 2 && bits <= 4 && d == 64;
            CHECKF(!!strstr(st.params, "layout=lanes") == lanes && st.rows_per_block == (lanes ? 16 : 1),
                   "bits=%d d=%d: auto gave '%s', %d rows per block", bits, d, st.params, st.rows_per_block);
            st.codec->fini(&st);
        }
}

int main(void) {
    uint64_t seed = vq_t_seed(2312);   /* prints itself */
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    test_params();
    test_layout(&rng);
    test_isa(&rng);
    return vq_t_done();
}
