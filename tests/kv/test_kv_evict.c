/* test_kv_evict.c: token eviction in the KV store (src/kv/evict.c), on several codecs.
 * Checks: the spec keys parse, normalize and round-trip, and bad ones say what was wrong; a
 * budget >= the rows held changes nothing (attention outputs memcmp-equal to a cache without a
 * policy); after evicting a known set of rows (whole code blocks) the rows read back are exactly
 * the kept ones at their true positions, attention over the codes equals float64 attention over
 * them (1e-5), pages are freed and the byte count equals the allocation tally; the attention
 * observer's scores equal the float64 softmax weights (h2o: summed over query heads, tova: the
 * last query only, knorm: -||k||); an eviction step keeps the budget, the sinks, the recent rows
 * and the window; truncate on an evicted cache returns a position. */
#include "kv_ref.h"
#include "kv/kv.h"
#include "kv/kv_impl.h"
#include <unistd.h>
#include "../calib_fixture.h"

static vq_kv_dims D = {.n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .max_ctx = 700};
#define W ((size_t)D.n_kv_heads * D.head_dim)
#define QW ((size_t)D.n_heads * D.head_dim)

static vq_kv *make(const char *spec) { return kv_make(spec, &D); }
static void fill_rows(vq_kv *kv, const float *K, const float *V, int n, int chunk) { kv_fill_rows(kv, &D, K, V, n, chunk); }

static void parsing(void) {
    vq_err err;
    struct { const char *in, *norm; } ok[] = {
        {"f16;evict=h2o,budget=0.5", "f16;evict=h2o,budget=0.5,sinks=4,recent=32,every=16"},
        {"turboquant_mse:k=4,v=4,evict=tova,budget=128,every=8,sinks=0,recent=8", NULL},
        {"q4_0;evict=snapkv,budget=0.25,obs=16,pool=5", NULL},
        {"q4_0;evict=pyramidkv,budget=100,slope=0.8", NULL},
        {"f32;evict=keyformer,budget=1.0,tau=0.5", NULL},
        {"kivi:bits=2;evict=knorm,budget=64", NULL},
        {"q8_0;evict=streaming_llm,budget=64,recent=0", NULL},
        {"f16;evict=chunkkv,budget=0.5", "f16;evict=chunkkv,budget=0.5,sinks=4,recent=32,every=16,obs=32,chunk=10"},
        {"q4_0;evict=chunkkv,budget=64,obs=8,chunk=16", NULL},
        {"f16;evict=snapkv,budget=0.5,obs=64,pool=5,poolfn=avg",
         "f16;evict=snapkv,budget=0.5,sinks=4,recent=32,every=16,obs=64,pool=5,poolfn=avg"},
        {"f16;evict=pyramidkv,budget=0.5,beta=20", NULL},
        {"f16;evict=h2o,budget=0.5,acc=mean", "f16;evict=h2o,budget=0.5,sinks=4,recent=32,every=16,acc=mean"},
    };
    for (size_t i = 0; i < VQ_ARRAY_LEN(ok); i++) {
        vq_kv *kv = vq_kv_create_str(ok[i].in, &D, 1, &err);
        CHECKF(kv != NULL, "'%s' refused: %s", ok[i].in, kv ? "" : err.msg);
        if (!kv) continue;
        CHECK(vq_kv_evicting(kv));
        if (ok[i].norm) CHECKF(!strcmp(vq_kv_spec_str(kv), ok[i].norm), "'%s' -> '%s'", ok[i].in, vq_kv_spec_str(kv));
        /* the normalized text parses to itself */
        vq_kv *k2 = vq_kv_create_str(vq_kv_spec_str(kv), &D, 1, &err);
        CHECKF(k2 && !strcmp(vq_kv_spec_str(k2), vq_kv_spec_str(kv)), "round trip of '%s': %s", vq_kv_spec_str(kv),
               k2 ? vq_kv_spec_str(k2) : err.msg);
        vq_kv_destroy(k2);
        vq_kv_destroy(kv);
    }
    vq_kv *plain = vq_kv_create_str("f16", &D, 1, &err);
    CHECK(plain && !vq_kv_evicting(plain));
    vq_kv_destroy(plain);
    struct { const char *in, *says; } bad[] = {
        {"f16;evict=lru,budget=0.5", "unknown eviction policy 'lru'"},
        {"f16;evict=h2o", "needs budget="},
        {"f16;budget=0.5", "need evict=POLICY"},
        {"f16;evict=h2o,budget=0", "budget=0"},
        {"f16;evict=h2o,budget=1.5", "budget=1.5"},
        {"f16;evict=h2o,budget=0.5,obs=8", "obs= does not apply to evict=h2o"},
        {"f16;evict=snapkv,budget=0.5,pool=4", "pool=4"},
        {"f16;evict=snapkv,budget=0.5,poolfn=mean", "poolfn=mean is out of range (max|avg)"},
        {"f16;evict=pyramidkv,budget=0.5,beta=0.5", "beta=0.5"},
        {"f16;evict=snapkv,budget=0.5,acc=mean", "acc= does not apply to evict=snapkv (only to h2o)"},
        {"f16;evict=h2o,budget=0.5,every=0", "every=0"},
        {"f16;evict=h2o,evict=tova,budget=3", "given twice"},
        {"f16;evict=tova,budget=9,tau=2", "tau= does not apply"},
        {"f16;evict=chunkkv,budget=0.5,chunk=0", "chunk=0"},
        {"f16;evict=snapkv,budget=0.5,chunk=4", "chunk= does not apply to evict=snapkv (only to chunkkv)"},
        {"f16;evict=chunkkv,budget=0.5,pool=3", "pool= does not apply to evict=chunkkv"},
    };
    for (size_t i = 0; i < VQ_ARRAY_LEN(bad); i++) {
        vq_kv *kv = vq_kv_create_str(bad[i].in, &D, 1, &err);
        CHECKF(!kv && err.code == VQ_ERR_ARG && strstr(err.msg, bad[i].says), "'%s': %s", bad[i].in,
               kv ? "accepted" : err.msg);
        vq_kv_destroy(kv);
    }
    char help[8192];
    size_t n = vq_kv_spec_help(help, sizeof help);
    CHECK(n < sizeof help && strstr(help, "evict=h2o") && strstr(help, "evict=knorm") && strstr(help, "budget="));
}

/* The policy tables (kv_policy.c) walked: every row parses with the keys it declares, refuses
 * the optional keys it does not (naming the rows that take them), its normalized text parses back
 * to itself, and the help names it; the same for the allocator rows (heads=). A new row is covered
 * without editing this test. */
static void table(void) {
    vq_err err;
    char help[16384];
    CHECK(vq_kv_spec_help(help, sizeof help) < sizeof help);
    int n = 0;
    for (int p = 0; vq_kv_policy_at(p); p++, n++) {
        const vq_kv_policy *pol = vq_kv_policy_at(p);
        CHECKF(vq_kv_policy_find(pol->name) == pol && pol->row_scores, "row %d (%s)", p, pol->name);
        char want[64];
        snprintf(want, sizeof want, "evict=%s: ", pol->name);
        CHECKF(strstr(help, want) != NULL, "the help has no line for %s", pol->name);
        for (int a = 0; vq_kv_alloc_at(a); a++) {
            const vq_kv_alloc *al = vq_kv_alloc_at(a);
            char spec[400], keys[200] = "";
            size_t o = 0;
            for (int k = VQ_PK_OBS; k < VQ_PK_N; k++)   /* every optional key it declares, at a legal value */
                if (pol->keys & (1u << k) && vq_pol_keys[k].kind == 'm')   /* a mode: its last name */
                    o += (size_t)snprintf(keys + o, sizeof keys - o, ",%s=%s", vq_pol_keys[k].name,
                                          strrchr(vq_pol_keys[k].range, '|') + 1);
                else if (pol->keys & (1u << k))
                    o += (size_t)snprintf(keys + o, sizeof keys - o, ",%s=%.6g", vq_pol_keys[k].name,
                                          vq_pol_keys[k].kind == 'o' ? 3.0 : vq_pol_keys[k].lo);
            snprintf(spec, sizeof spec, "q4_0;evict=%s,budget=0.5%s,heads=%s%s", pol->name, keys, al->name,
                     (al->keys & (1u << VQ_AK_FLOOR)) ? ",floor=0.3" : "");
            vq_kv_spec *s = vq_kv_spec_parse(spec, &err);
            CHECKF(s != NULL, "'%s' refused: %s", spec, s ? "" : err.msg);
            if (!s) continue;
            vq_kv_spec *s2 = vq_kv_spec_parse(vq_kv_spec_text(s), &err);
            CHECKF(s2 && vq_kv_spec_equal(s, s2), "'%s' -> '%s' does not parse back", spec, vq_kv_spec_text(s));
            CHECKF(strstr(vq_kv_spec_text(s), keys) != NULL, "'%s' -> '%s' lost its keys", spec, vq_kv_spec_text(s));
            vq_kv_spec_free(s2);
            vq_kv_spec_free(s);
        }
        for (int k = VQ_PK_OBS; k < VQ_PK_N; k++) {   /* the optional keys it does not declare: refused */
            if (pol->keys & (1u << k)) continue;
            char spec[200], says[120];
            snprintf(spec, sizeof spec, "q4_0;evict=%s,budget=0.5,%s=%s", pol->name, vq_pol_keys[k].name,
                     vq_pol_keys[k].kind == 'o' ? "3" : vq_pol_keys[k].kind == 'm' ? strrchr(vq_pol_keys[k].range, '|') + 1 : "1");
            snprintf(says, sizeof says, "%s= does not apply to evict=%s (only to ", vq_pol_keys[k].name, pol->name);
            vq_kv_spec *s = vq_kv_spec_parse(spec, &err);
            CHECKF(!s && strstr(err.msg, says), "'%s': %s", spec, s ? "accepted" : err.msg);
            vq_kv_spec_free(s);
        }
    }
    CHECK(n >= 9);
    CHECK(vq_kv_alloc_find("shared") == vq_kv_alloc_at(0) && vq_kv_alloc_find("ada") && vq_kv_alloc_find("ada")->per_head);
}

/* a budget that covers every row: no step drops anything, outputs are bit-identical */
static void big_budget(const float *K, const float *V, const float *Q, int N) {
    const char *codecs[] = {"f16", "turboquant_mse:k=4,v=4", "kivi:bits=2", "q4_0;window=16"};
    const char *pols[] = {"h2o", "tova", "knorm", "snapkv", "keyformer", "streaming_llm", "pyramidkv"};
    for (size_t c = 0; c < VQ_ARRAY_LEN(codecs); c++)
        for (size_t p = 0; p < VQ_ARRAY_LEN(pols); p++) {
            char spec[200];
            /* pyramidkv gives the first layer more, the last less: 2 * N covers both */
            snprintf(spec, sizeof spec, "%s;evict=%s,budget=%d,every=1", codecs[c], pols[p], 2 * N);
            vq_kv *a = make(spec), *b = make(codecs[c]);
            if (!a || !b) { vq_kv_destroy(a); vq_kv_destroy(b); continue; }
            fill_rows(a, K, V, N, 37);
            fill_rows(b, K, V, N, 37);
            CHECK(vq_kv_evict_end(a, 0, N) == 0);
            float *oa = malloc(sizeof(float) * QW * 4), *ob = malloc(sizeof(float) * QW * 4);
            int qp[4] = {N - 1, N - 1, N / 2, 3};
            vq_err err;
            int same = 1;
            for (int l = 0; l < D.n_layers; l++) {
                vq_kv_evict_begin(a, N - 1, 1);
                CHECK(vq_kv_attend(a, l, 4, qp, Q, oa, &err) == VQ_OK);
                CHECK(vq_kv_attend(b, l, 4, qp, Q, ob, &err) == VQ_OK);
                CHECK(vq_kv_evict_end(a, N - 1, 1) == 0);
                same &= !memcmp(oa, ob, sizeof(float) * QW * 4) && vq_kv_rows(a, l) == N;
            }
            CHECKF(same, "%s: outputs differ from no eviction", spec);
            free(oa); free(ob);
            vq_kv_destroy(a); vq_kv_destroy(b);
        }
}

/* evict a known set; what is left is exactly the rest, at its true positions */
static void known_set(vq_rng *r, const float *K, const float *V, const float *Q, int N) {
    const char *codecs[] = {"f16", "f32", "q8_0", "turboquant_mse:k=4,v=4", "kivi:bits=2,group=32",
                            "q4_0;window=24,sink=3", "turboquant_mse:k=4,v=4;evict=h2o,budget=700"};
    float *rk = malloc(sizeof(float) * N * W), *rv = malloc(sizeof(float) * N * W);
    int32_t *pos = malloc(sizeof(int32_t) * N), *pos0 = malloc(sizeof(int32_t) * N), *drop = malloc(sizeof(int32_t) * N);
    float *out = malloc(sizeof(float) * QW * 3);
    double *ref = malloc(sizeof(double) * QW * 3);
    for (size_t c = 0; c < VQ_ARRAY_LEN(codecs); c++) {
        vq_kv *kv = make(codecs[c]);
        if (!kv) continue;
        fill_rows(kv, K, V, N, 29);
        vq_err err;
        for (int l = 0; l < D.n_layers; l++) {
            const int rows0 = vq_kv_rows(kv, l), pages0 = vq_kv_pages(kv, l);
            CHECK(vq_kv_read(kv, l, rk, rv, pos0, &err) == VQ_OK);
            /* the coded rows come first (storage order); blocks of rpb rows: drop about 40 % of them,
             * every block of rows 256..511 (a whole page) among them */
            const int rpb = strstr(codecs[c], "kivi") ? 32 : strncmp(codecs[c], "f", 1) ? 16 : 1;   /* lanes keys: 16 */
            /* coded rows as the store's layout makes them (kv.c coded_at) */
            const int S = strstr(codecs[c], "sink=3") ? 3 : 0, R = vq_kv_window_rows(kv), m = rows0 - S;
            const int coded = m >= R + rpb ? (m - R) / rpb * rpb : 0;
            int nd = 0;
            for (int b = 0; b * rpb + rpb <= coded; b++) {
                int first = pos0[b * rpb];
                int go = (first >= 256 && first < 512) || vq_rng_uniformf(r) < 0.4f;
                for (int t = 0; go && t < rpb; t++) drop[nd++] = pos0[b * rpb + t];
            }
            vq_status st = vq_kv_evict_positions(kv, l, drop, nd, &err);
            CHECKF(st == VQ_OK, "%s layer %d: %s", codecs[c], l, err.msg);
            if (st) continue;
            const int rows = vq_kv_rows(kv, l);
            CHECKF(rows == rows0 - nd, "%s: %d rows, expected %d - %d", codecs[c], rows, rows0, nd);
            CHECKF(vq_kv_pages(kv, l) < pages0, "%s: pages %d -> %d (a dropped page must be freed)", codecs[c],
                   pages0, vq_kv_pages(kv, l));
            CHECK(vq_kv_read(kv, l, rk, rv, pos, &err) == VQ_OK);
            /* exactly the rows not listed, in order */
            int ok = 1, j = 0;
            for (int i = 0; i < rows0; i++) {
                int gone = 0;
                for (int d = 0; d < nd && !gone; d++) gone = drop[d] == pos0[i];
                if (gone) continue;
                ok &= j < rows && pos[j] == pos0[i];
                j++;
            }
            CHECKF(ok && j == rows, "%s layer %d: the kept positions are not the complement", codecs[c], l);
            /* attention over the codes == float64 attention over the kept rows at true positions */
            int qp[3] = {N - 1, 400, 200};
            CHECK(vq_kv_attend(kv, l, 3, qp, Q, out, &err) == VQ_OK);
            ref_attention(rows, rk, rv, pos, D.n_kv_heads, D.n_heads, D.head_dim, 3, qp, Q, ref);
            double e = rel_err(3, D.n_heads, D.head_dim, out, ref);
            CHECKF(e <= 1e-5, "%s layer %d: attention after eviction off by %.3g", codecs[c], l, e);
        }
        CHECKF(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv), "%s: bytes %zu, tally %zu", codecs[c], vq_kv_bytes(kv),
               vq_kv_bytes_tally(kv));
        /* appends continue at true positions after the holes */
        CHECK(vq_kv_append(kv, 0, N, 1, K, V, &err) == VQ_OK);
        vq_kv_destroy(kv);
    }
    /* a block listed in part is refused, and changes nothing */
    vq_kv *kv = make("turboquant_mse:k=4,v=4");
    if (kv) {
        fill_rows(kv, K, V, 64, 64);
        int32_t p3[3] = {0, 1, 2};
        vq_err err;
        CHECK(vq_kv_evict_positions(kv, 0, p3, 3, &err) == VQ_ERR_ARG && strstr(err.msg, "whole"));
        CHECK(vq_kv_rows(kv, 0) == 64);
        vq_kv_destroy(kv);
    }
    free(rk); free(rv); free(pos); free(pos0); free(drop); free(out); free(ref);
}

static void ref_weights(const float *rk, const int32_t *pos, int rows, const float *q, int qp, double *wsum) {
    ref_softmax_weights(rows, rk, pos, D.n_kv_heads, D.n_heads, D.head_dim, q, qp, wsum);
}

static void observer(const float *K, const float *V, const float *Q, int N) {
    const char *codecs[] = {"f16", "turboquant_mse:k=4,v=4", "q4_0;window=40"};
    float *rk = malloc(sizeof(float) * N * W), *rv = malloc(sizeof(float) * N * W), *sc = malloc(sizeof(float) * N);
    int32_t *pos = malloc(sizeof(int32_t) * N), *sp = malloc(sizeof(int32_t) * N);
    double *w1 = malloc(sizeof(double) * N), *w2 = malloc(sizeof(double) * N);
    float *out = malloc(sizeof(float) * QW * 2);
    vq_err err;
    for (size_t c = 0; c < VQ_ARRAY_LEN(codecs); c++)
        for (int pol = 0; pol < 3; pol++) {
            char spec[160];
            snprintf(spec, sizeof spec, "%s;evict=%s,budget=%d", codecs[c], pol == 0 ? "h2o" : pol == 1 ? "tova" : "knorm", 2 * N);
            vq_kv *kv = make(spec);
            if (!kv) continue;
            fill_rows(kv, K, V, N, 50);
            const int l = 1, rows = vq_kv_rows(kv, l);
            CHECK(vq_kv_read(kv, l, rk, rv, pos, &err) == VQ_OK);
            /* two decode steps (queries at N - 1 and N / 2) */
            int q1 = N - 1, q2 = N / 2;
            vq_kv_evict_begin(kv, q1, 1);
            CHECK(vq_kv_attend(kv, l, 1, &q1, Q, out, &err) == VQ_OK);
            vq_kv_evict_end(kv, q1, 1);
            vq_kv_evict_begin(kv, q2, 1);
            CHECK(vq_kv_attend(kv, l, 1, &q2, Q + QW, out, &err) == VQ_OK);
            vq_kv_evict_end(kv, q2, 1);
            CHECK(vq_kv_evict_scores(kv, l, sc, sp, &err) == VQ_OK);
            ref_weights(rk, pos, rows, Q, q1, w1);
            ref_weights(rk, pos, rows, Q + QW, q2, w2);
            double worst = 0;
            int pos_ok = 1;
            for (int r = 0; r < rows; r++) {
                pos_ok &= sp[r] == pos[r];
                double want;
                if (pol == 0) want = w1[r] + w2[r];
                else if (pol == 1) want = w2[r];
                else {
                    want = 0;
                    for (int h = 0; h < D.n_kv_heads; h++) {
                        double s = 0;
                        for (int e = 0; e < D.head_dim; e++) {
                            double x = K[(size_t)pos[r] * W + (size_t)h * D.head_dim + e];
                            s += x * x;
                        }
                        want -= sqrt(s);
                    }
                }
                worst = fmax(worst, fabs(sc[r] - want) / (pol == 2 ? fabs(want) : 1.0));
            }
            CHECKF(pos_ok && worst <= 1e-5, "%s: scores off by %.3g (positions %s)", spec, worst, pos_ok ? "ok" : "wrong");
            vq_kv_destroy(kv);
        }
    free(rk); free(rv); free(sc); free(pos); free(sp); free(w1); free(w2); free(out);
}

/* eviction steps: budget, sinks, recent rows and the window kept; memory follows */
static void steps(const float *K, const float *V, const float *Q, int N) {
    const char *specs[] = {"f16;evict=h2o,budget=200,sinks=4,recent=32,every=4",
                           "turboquant_mse:k=4,v=4;evict=tova,budget=0.5,sinks=4,recent=32,every=4",
                           "q4_0;window=20;evict=knorm,budget=150,sinks=2,recent=8,every=4",
                           "f16;evict=streaming_llm,budget=100,sinks=4,recent=0,every=4",
                           "kivi:bits=2,group=32;evict=snapkv,budget=0.3,every=4",
                           "q8_0;evict=pyramidkv,budget=160,every=4",
                           "f16;evict=keyformer,budget=180,every=4",
                           "q8_0;evict=expected_attention_prompt,budget=180,every=4"};
    int32_t *pos = malloc(sizeof(int32_t) * D.max_ctx);
    float *rk = malloc(sizeof(float) * D.max_ctx * W), *rv = malloc(sizeof(float) * D.max_ctx * W);
    float *out = malloc(sizeof(float) * QW);
    vq_err err;
    for (size_t s = 0; s < VQ_ARRAY_LEN(specs); s++) {
        vq_kv *kv = make(specs[s]);
        if (!kv) continue;
        const int P = 400;   /* a "prompt" of P rows, then N - P decode steps */
        for (int l = 0; l < D.n_layers; l++) vq_kv_append(kv, l, 0, P, K, V, &err);
        vq_kv_evict_begin(kv, 0, P);
        vq_kv_evict_end(kv, 0, P);
        size_t b_prompt = vq_kv_bytes(kv);
        for (int p = P; p < N; p++) {
            vq_kv_evict_begin(kv, p, 1);
            for (int l = 0; l < D.n_layers; l++) {
                CHECK(vq_kv_append(kv, l, p, 1, K + (size_t)p * W, V + (size_t)p * W, &err) == VQ_OK);
                CHECK(vq_kv_attend(kv, l, 1, &p, Q + (size_t)(p % 4) * QW, out, &err) == VQ_OK);
            }
            vq_kv_evict_end(kv, p, 1);
        }
        vq_kv_evict_now(kv, N);
        const int ratio = strstr(specs[s], "budget=0.") != NULL;
        for (int l = 0; l < D.n_layers; l++) {
            int B = strstr(specs[s], "budget=200") ? 200 : strstr(specs[s], "budget=150") ? 150
                  : strstr(specs[s], "budget=100") ? 100 : strstr(specs[s], "budget=160") ? (l == 0 ? 240 : 80)
                  : strstr(specs[s], "budget=180") ? 180 : ratio ? (int)ceil(atof(strstr(specs[s], "budget=") + 7) * N) : 0;
            const int rows = vq_kv_rows(kv, l);
            CHECKF(rows <= B && rows >= B - 32, "%s layer %d: %d rows, budget %d", specs[s], l, rows, B);
            CHECK(vq_kv_read(kv, l, rk, rv, pos, &err) == VQ_OK);
            int sinks = strstr(specs[s], "sinks=2") ? 2 : 4, recent = strstr(specs[s], "recent=8") ? 8
                      : strstr(specs[s], "recent=0") ? 0 : 32;
            if (strstr(specs[s], "window=20")) recent = VQ_MAX(recent, 20);
            int have = 0;
            for (int r = 0; r < rows; r++) have += pos[r] < sinks || pos[r] >= N - recent;
            CHECKF(have == sinks + recent, "%s layer %d: %d of the %d sink and recent rows kept", specs[s], l, have,
                   sinks + recent);
            if (strstr(specs[s], "streaming_llm")) {   /* the sinks, then the newest rows */
                int ok = 1;
                for (int r = 0; r < rows; r++) ok &= pos[r] < 4 || pos[r] >= N - (rows - 4);
                CHECKF(ok, "streaming_llm kept an old row");
            }
            for (int r = 1; r < rows; r++)
                if (pos[r] < pos[r - 1] && !strstr(specs[s], "sink=")) { CHECKF(0, "%s: storage order not by position", specs[s]); break; }
        }
        CHECK(vq_kv_evicted(kv) > 0);
        CHECKF(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv), "%s: bytes %zu tally %zu", specs[s], vq_kv_bytes(kv), vq_kv_bytes_tally(kv));
        CHECKF(vq_kv_bytes(kv) <= b_prompt + vq_kv_page_bytes(kv) * D.n_layers, "%s: bytes grew from %zu to %zu",
               specs[s], b_prompt, vq_kv_bytes(kv));
        /* truncate returns a position, not a row count */
        int t = vq_kv_truncate(kv, N - 5);
        CHECKF(t <= N - 5 && t > N - 5 - 40, "%s: truncate(%d) = %d", specs[s], N - 5, t);
        vq_kv_destroy(kv);
    }
    free(pos); free(rk); free(rv); free(out);
}

/* chunkkv: after a prompt whose last 4 queries are observed, a row's score is the sum over its
 * chunk (positions c*C .. c*C+C-1) of snapkv's scores (pool=1, the same observation), chunk=1 is
 * snapkv itself, and the prompt-end step keeps or drops whole chunks: at most one chunk (the one
 * at the budget's edge) is cut. Per-row scores (evict=snapkv) in place of the chunk sums fail
 * the first and the last check (f16: one row a block; the others keep whole blocks of 16 or 32). */
static void chunks(const float *K, const float *V, const float *Q) {
    const int P = 300, C = 8;
    const char *codecs[] = {"f16", "q8_0", "turboquant_mse:k=4,v=4"};
    float *sa = malloc(sizeof(float) * P), *sb = malloc(sizeof(float) * P), *sc1 = malloc(sizeof(float) * P);
    int32_t *pa = malloc(sizeof(int32_t) * P), *pb = malloc(sizeof(int32_t) * P);
    float *out = malloc(sizeof(float) * QW * 4);
    int qp[4] = {P - 4, P - 3, P - 2, P - 1};
    vq_err err;
    for (size_t c = 0; c < VQ_ARRAY_LEN(codecs); c++) {
        char s1[160], s2[160], s3[160];
        snprintf(s1, sizeof s1, "%s;evict=chunkkv,budget=0.5,obs=4,chunk=%d,sinks=4,recent=16", codecs[c], C);
        snprintf(s2, sizeof s2, "%s;evict=snapkv,budget=0.5,obs=4,pool=1,sinks=4,recent=16", codecs[c]);
        snprintf(s3, sizeof s3, "%s;evict=chunkkv,budget=0.5,obs=4,chunk=1,sinks=4,recent=16", codecs[c]);
        vq_kv *kv[3] = {make(s1), make(s2), make(s3)};
        if (!kv[0] || !kv[1] || !kv[2]) { for (int i = 0; i < 3; i++) vq_kv_destroy(kv[i]); continue; }
        for (int i = 0; i < 3; i++) {
            for (int l = 0; l < D.n_layers; l++) CHECK(vq_kv_append(kv[i], l, 0, P, K, V, &err) == VQ_OK);
            vq_kv_evict_begin(kv[i], 0, P);
            for (int l = 0; l < D.n_layers; l++) CHECK(vq_kv_attend(kv[i], l, 4, qp, Q, out, &err) == VQ_OK);
        }
        const int l = 1;
        CHECK(vq_kv_evict_scores(kv[0], l, sa, pa, &err) == VQ_OK);
        CHECK(vq_kv_evict_scores(kv[1], l, sb, pb, &err) == VQ_OK);
        CHECK(vq_kv_evict_scores(kv[2], l, sc1, NULL, &err) == VQ_OK);
        const int rows = vq_kv_rows(kv[0], l);
        double worst = 0, worst1 = 0;
        for (int r = 0; r < rows; r++) {
            double want = 0;
            for (int j = 0; j < rows; j++) want += pb[j] / C == pa[r] / C ? sb[j] : 0.0;
            worst = fmax(worst, fabs(sa[r] - want) / fmax(1e-6, fabs(want)));
            worst1 = fmax(worst1, fabs(sc1[r] - sb[r]));
        }
        CHECKF(rows == P && worst < 1e-5 && worst1 == 0, "%s: chunk sums off by %.3g, chunk=1 vs snapkv by %.3g", s1, worst,
               worst1);
        for (int i = 0; i < 3; i++) vq_kv_evict_end(kv[i], 0, P);
        /* whole chunks: count the chunks kept in part (sinks and recent rows are kept whatever happens) */
        const int kept = vq_kv_rows(kv[0], l);
        float *rk = malloc(sizeof(float) * P * W), *rv = malloc(sizeof(float) * P * W);
        CHECK(vq_kv_read(kv[0], l, rk, rv, pa, &err) == VQ_OK);
        int per[P / C + 1], cut = 0;
        memset(per, 0, sizeof per);
        for (int r = 0; r < kept; r++)
            if (pa[r] >= 8 && pa[r] < P - 16) per[pa[r] / C]++;   /* chunks clear of sinks and recent rows */
        for (int ch = 1; ch < (P - 16) / C; ch++) cut += per[ch] != 0 && per[ch] != C;
        printf("%s: %d of %d rows kept, %d chunk(s) cut\n", s1, kept, P, cut);
        CHECKF(kept <= P / 2 && kept >= P / 2 - (c ? 32 : C) && cut <= 1, "%s: %d rows kept, %d chunks cut", s1, kept, cut);
        free(rk); free(rv);
        for (int i = 0; i < 3; i++) vq_kv_destroy(kv[i]);
    }
    free(sa); free(sb); free(sc1); free(pa); free(pb); free(out);
}

/* squeeze (SqueezeAttention's layer budgets): the factors on a hand-built case (the layers with
 * the higher attention cosines get p, the rest share what they gave up), their mean is 1 and a
 * layer with a higher cosine never gets more budget than one with a lower (random cosines, seeded);
 * a cache whose calibration says layer 1 changes the hidden state least keeps p x budget rows
 * there and (2 - p) x budget in layer 0 after a prompt-end step; without calib=FILE it is refused.
 * The groups swapped (budget to the high-cosine layers) fails all three. */
static void squeeze(vq_rng *r, const float *K, const float *V, const float *Q) {
    const float cosv[6] = {0.30f, 0.35f, 0.92f, 0.95f, 0.40f, 0.90f};
    float w[64];
    vq_squeeze_factors(cosv, 6, 0.3, 0, w);
    int ok = 1;
    for (int l = 0; l < 6; l++) ok &= fabsf(w[l] - (cosv[l] > 0.5f ? 0.3f : 1.7f)) < 1e-6f;
    CHECKF(ok, "squeeze factors: %.3f %.3f %.3f %.3f %.3f %.3f", w[0], w[1], w[2], w[3], w[4], w[5]);
    const float same[3] = {0.7f, 0.7f, 0.7f};
    vq_squeeze_factors(same, 3, 0.3, 0, w);
    CHECK(w[0] == 1.0f && w[1] == 1.0f && w[2] == 1.0f);
    const float one_low[4] = {0.3f, 0.9f, 0.92f, 0.95f};   /* capped at 2 (budget=0.5): 2, then 2/3 each */
    vq_squeeze_factors(one_low, 4, 0.5, 2.0, w);
    CHECKF(fabsf(w[0] - 2.0f) < 1e-6f && fabsf(w[1] - 2.0f / 3) < 1e-6f && fabsf(w[3] - 2.0f / 3) < 1e-6f,
           "capped factors %.4f %.4f %.4f %.4f", w[0], w[1], w[2], w[3]);
    for (int t = 0; t < 50; t++) {
        float c[64];
        const int L = 2 + (int)(vq_rng_uniform(r) * 60);
        const double p = vq_rng_uniform(r), cap = t % 2 ? 1.0 + 3.0 * vq_rng_uniform(r) : 0.0;
        for (int l = 0; l < L; l++) c[l] = (float)(2.0 * vq_rng_uniform(r) - 1.0);
        vq_squeeze_factors(c, L, p, cap, w);
        double mean = 0;
        int mono = 1;
        for (int i = 0; i < L; i++) {
            mean += w[i] / L;
            mono &= cap == 0 || w[i] <= cap + 1e-6;
            for (int j = 0; j < L; j++) mono &= !(c[i] > c[j] && w[i] > w[j]);
        }
        CHECKF(fabs(mean - 1.0) < 1e-5 && mono, "L %d p %.3f: mean factor %.6f, monotone %d", L, p, mean, mono);
    }
    char dir[] = "/tmp/vq_squeeze_XXXXXX", path[96], spec[200];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/s.vqc", dir);
    vq_calib cal;
    vq_err err;
    vq_t_calib_make(&cal, D.n_layers, D.n_heads, D.n_kv_heads, D.head_dim, r);
    cal.attn_cos[0] = 0.3f;
    cal.attn_cos[1] = 0.9f;
    CHECK(vq_calib_write(&cal, path, &err) == VQ_OK);
    vq_calib_free(&cal);
    const int P = 600, B = 200;
    snprintf(spec, sizeof spec, "f16;evict=squeeze,budget=%d,squeeze=0.25,obs=4,sinks=4,recent=16;calib=%s", B, path);
    vq_kv *kv = make(spec);
    if (kv) {
        float *out = malloc(sizeof(float) * QW * 4);
        int qp[4] = {P - 4, P - 3, P - 2, P - 1};
        for (int l = 0; l < D.n_layers; l++) CHECK(vq_kv_append(kv, l, 0, P, K, V, &err) == VQ_OK);
        vq_kv_evict_begin(kv, 0, P);
        for (int l = 0; l < D.n_layers; l++) CHECK(vq_kv_attend(kv, l, 4, qp, Q, out, &err) == VQ_OK);
        vq_kv_evict_end(kv, 0, P);
        printf("%s: layer 0 keeps %d rows, layer 1 %d\n", spec, vq_kv_rows(kv, 0), vq_kv_rows(kv, 1));
        CHECKF(vq_kv_rows(kv, 0) == 350 && vq_kv_rows(kv, 1) == 50, "squeeze: layer rows %d, %d (want 350, 50)",
               vq_kv_rows(kv, 0), vq_kv_rows(kv, 1));
        CHECK(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv));
        free(out);
        vq_kv_destroy(kv);
    }
    vq_kv *no = vq_kv_create_str("f16;evict=squeeze,budget=0.5", &D, 1, &err);
    CHECKF(!no && strstr(err.msg, "calib=FILE"), "squeeze without calib=FILE: %s", no ? "accepted" : err.msg);
    vq_kv_destroy(no);
    unlink(path);
    rmdir(dir);
}

/* kvpress's options on hand-checked cases: avg pooling (kvpress's snapkv), PyramidKV's published
 * schedule (kvpress: 960 rows in layer 0 down to 64 in layer 29 at 1024 positions, 50 %), h2o's
 * mean over the queries that saw a row (kvpress's observed attention) */
static void kvpress_options(void) {
    const float rs[7] = {1, 2, 3, 4, 5, 100, 200};
    float out[7];
    vq_pool_scores(rs, 7, 5, 3, 1, out);   /* avg of rows 0..4, zero-padded; the window's two as they are */
    const float want_avg[7] = {1, 2, 3, 4, 3, 100, 200}, want_max[7] = {2, 3, 4, 5, 100, 200, 200};
    int ok = 1;
    for (int i = 0; i < 7; i++) ok &= fabsf(out[i] - want_avg[i]) < 1e-6f;
    CHECKF(ok, "avg pool: %g %g %g %g %g %g %g", out[0], out[1], out[2], out[3], out[4], out[5], out[6]);
    vq_pool_scores(rs, 7, 5, 3, 0, out);
    ok = 1;
    for (int i = 0; i < 7; i++) ok &= out[i] == want_max[i];
    CHECKF(ok, "max pool: %g %g %g %g %g %g %g", out[0], out[1], out[2], out[3], out[4], out[5], out[6]);

    const vq_kv_policy *py = vq_kv_policy_find("pyramidkv");
    vq_evict_cfg ev = {.pol = py, .beta = 20, .obs = 64, .slope = 0.5};
    double sum = 0;
    for (int l = 0; l < 30; l++) sum += py->budget(&ev, 512, 1024, l, 30);
    CHECKF(py->budget(&ev, 512, 1024, 0, 30) == 960 && py->budget(&ev, 512, 1024, 29, 30) == 64 &&
           py->budget(&ev, 512, 1024, 1, 30) == 929 && fabs(sum / 30 - 512) < 0.5,
           "pyramid 50 %%: %g .. %g, mean %g", py->budget(&ev, 512, 1024, 0, 30), py->budget(&ev, 512, 1024, 29, 30), sum / 30);
    /* 75 %: max 1497.6 capped at 960, min 2 * 768 - 960 = 576; 25 %: min 12.8 < W: every layer 256 */
    CHECK(py->budget(&ev, 768, 1024, 0, 30) == 960 && py->budget(&ev, 768, 1024, 29, 30) == 576);
    CHECK(py->budget(&ev, 256, 1024, 0, 30) == 256 && py->budget(&ev, 256, 1024, 29, 30) == 256);
    ev.beta = 0;   /* the slope schedule: 512 * 1.5 .. 512 * 0.5 */
    CHECK(py->budget(&ev, 512, 1024, 0, 30) == 768 && py->budget(&ev, 512, 1024, 29, 30) == 256);

    const vq_kv_policy *h2o = vq_kv_policy_find("h2o");
    const float sc[2 * 3] = {1, 1, 1, 1, 0, 1};   /* 2 heads x 3 rows, summed: 2, 1, 2 */
    const int32_t pos[3] = {10, 11, 12};
    vq_evict_cfg e2 = {.pol = h2o, .norm = 0};
    vq_pol_view v = {.sc = sc, .cap = 3, .H = 2, .nr = 3, .pos = pos, .ev = &e2};
    h2o->row_scores(&v, out);
    CHECKF(out[0] == 2 && out[1] == 1 && out[2] == 2, "h2o sum: %g %g %g", out[0], out[1], out[2]);
    e2.norm = 1;   /* seen by 3, 2, 1 queries (positions 10..12) */
    h2o->row_scores(&v, out);
    CHECKF(fabsf(out[0] - 2.0f / 3) < 1e-6f && out[1] == 0.5f && out[2] == 2, "h2o mean: %g %g %g", out[0], out[1], out[2]);
}

/* expected_attention_prompt. (1) The row hook on a hand-checked case: d = 2, one KV head, one
 * query head, queries (1, 0) and (3, 0): mean (2, 0), covariance diag(1, 0); no RoPE (R = I); keys
 * (1, 0) and (0, 1): logits 2/sqrt(2) + 1/4 and 0; scores softmax times ||v|| (2 and 1); the sink
 * row above them all. (2) RoPE: the averaged rotation over one position is that position's; a
 * rotation undone gives the vector back. (3) Through the store (no RoPE set): the scores
 * vq_kv_evict_scores reports equal a float64 computation from the queries attended and the keys
 * and values appended, within 1e-5 relative. */
static void expected_prompt(const float *K, const float *V, const float *Q) {
    const vq_kv_policy *ea = vq_kv_policy_find("expected_attention_prompt");
    CHECK(ea && (ea->flags & VQ_POL_QSTATS));
    if (!ea) return;
    const double qs[1 + 2 + 4] = {2, 4, 0, 10, 0, 0, 0};   /* n, sum q, sum q q' */
    const float R[4] = {1, 0, 0, 1}, k[3 * 2] = {5, 5, 1, 0, 0, 1}, vn[3] = {9, 2, 1};
    const int32_t pos[3] = {0, 1, 2};
    double work[2 * 4 + 3 * 2 + 3];
    vq_evict_cfg ev = {.pol = ea, .sinks = 1, .vnorm = 0};
    vq_pol_view v = {.H = 1, .nr = 3, .pos = pos, .ev = &ev, .d = 2, .G = 1, .k = k, .vn = vn, .qs = qs, .rbar = R,
                     .work = work};
    float out[3];
    ea->row_scores(&v, out);
    const double z1 = 2.0 / sqrt(2.0) + 1.0 / 4, w1 = exp(z1) / (exp(z1) + 1), w2 = 1 / (exp(z1) + 1);
    CHECKF(fabs(out[1] - 2 * w1) < 1e-6 && fabs(out[2] - w2) < 1e-6 && fabs(out[0] - (2 * w1 + 1)) < 1e-6,
           "expected attention, hand case: %g %g %g (want %g %g %g)", out[0], out[1], out[2], 2 * w1 + 1, 2 * w1, w2);
    ev.vnorm = 1;   /* vnorm=off */
    ea->row_scores(&v, out);
    CHECKF(fabs(out[1] - w1) < 1e-6 && fabs(out[2] - w2) < 1e-6, "vnorm=off: %g %g", out[1], out[2]);

    float inv[4] = {1.0f, 0.1f, 0.01f, 0.001f}, M[64], x[8], y[8];
    for (int neox = 0; neox < 2; neox++) {
        vq_pol_avg_rope(M, 8, 8, neox, inv, 1.0, 37, 1);
        for (int e = 0; e < 8; e++) x[e] = y[e] = (float)(e + 1);
        vq_pol_rope(x, 8, 8, neox, inv, 37, 1.0);
        double worst = 0;
        for (int a = 0; a < 8; a++) {
            double t = 0;
            for (int b = 0; b < 8; b++) t += M[a * 8 + b] * y[b];
            worst = fmax(worst, fabs(t - x[a]));
        }
        vq_pol_rope(x, 8, 8, neox, inv, -37, 1.0);
        for (int e = 0; e < 8; e++) worst = fmax(worst, fabs(x[e] - y[e]));
        CHECKF(worst < 1e-5, "rope (neox %d): the averaged matrix or the inverse off by %g", neox, worst);
    }

    /* (3) through the store: P rows appended, the last 8 of them attended as queries */
    vq_err err;
    vq_kv *kv = make("f32;evict=expected_attention_prompt,budget=1.0,sinks=4");
    if (!kv) return;
    const int P = 100, d = D.head_dim, G = D.n_heads / D.n_kv_heads, nq = 8;
    float *qq = malloc(sizeof(float) * nq * QW), *o = malloc(sizeof(float) * nq * QW), *got = malloc(sizeof(float) * P);
    int qp[8];
    for (int t = 0; t < nq; t++) { qp[t] = P - nq + t; memcpy(qq + (size_t)t * QW, Q + (size_t)(t % 4) * QW, QW * sizeof(float)); }
    for (int t = 0; t < nq; t++) qq[(size_t)t * QW + t] += 0.5f * t;   /* queries that differ */
    CHECK(vq_kv_append(kv, 0, 0, P, K, V, &err) == VQ_OK);
    CHECK(vq_kv_attend(kv, 0, nq, qp, qq, o, &err) == VQ_OK);
    CHECK(vq_kv_evict_scores(kv, 0, got, NULL, &err) == VQ_OK);
    double *want = calloc((size_t)P, sizeof(double)), *z = malloc(sizeof(double) * P), *mu = malloc(sizeof(double) * d),
           *S = malloc(sizeof(double) * d * d);
    for (int h = 0; h < D.n_kv_heads; h++)
        for (int g = 0; g < G; g++) {
            const int qh = h * G + g;
            for (int a = 0; a < d; a++) {
                mu[a] = 0;
                for (int t = 0; t < nq; t++) mu[a] += qq[(size_t)t * QW + (size_t)qh * d + a] / (double)nq;
            }
            for (int a = 0; a < d; a++)
                for (int b = 0; b < d; b++) {
                    double c = 0;
                    for (int t = 0; t < nq; t++)
                        c += (qq[(size_t)t * QW + (size_t)qh * d + a] - mu[a]) * (qq[(size_t)t * QW + (size_t)qh * d + b] - mu[b]);
                    S[(size_t)a * d + b] = c / nq;
                }
            double mx = -1e300, zs = 0;
            for (int i = 4; i < P; i++) {
                const float *kk = K + (size_t)i * W + (size_t)h * d;
                double lin = 0, quad = 0;
                for (int a = 0; a < d; a++) {
                    lin += mu[a] * kk[a];
                    for (int b = 0; b < d; b++) quad += kk[a] * S[(size_t)a * d + b] * kk[b];
                }
                z[i] = lin / sqrt((double)d) + quad / (2.0 * d);
                mx = fmax(mx, z[i]);
            }
            for (int i = 4; i < P; i++) zs += exp(z[i] - mx);
            for (int i = 4; i < P; i++) {
                double vv = 0;
                for (int a = 0; a < d; a++) vv += (double)V[(size_t)i * W + (size_t)h * d + a] * V[(size_t)i * W + (size_t)h * d + a];
                want[i] += exp(z[i] - mx) / zs / G * sqrt(vv);
            }
        }
    double worst = 0, top = 0;
    for (int i = 4; i < P; i++) { worst = fmax(worst, fabs(got[i] - want[i]) / fabs(want[i])); top = fmax(top, want[i]); }
    int sinks_top = 1;
    for (int i = 0; i < 4; i++) sinks_top &= got[i] > top;
    printf("expected_attention_prompt through the store: worst relative error %.3g\n", worst);
    CHECKF(worst < 1e-5 && sinks_top, "expected_attention_prompt store scores off by %.3g relative (sinks on top %d)",
           worst, sinks_top);
    CHECK(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv));
    free(qq); free(o); free(got); free(want); free(z); free(mu); free(S);
    vq_kv_destroy(kv);
}

static int null_writer(void *u, const void *b, size_t n) { (void)u; (void)b; (void)n; return 0; }

int main(void) {
    uint64_t seed = test_seed();
    vq_rng r;
    vq_rng_seed(&r, seed);
    const int N = 640;
    float *K = malloc(sizeof(float) * N * W), *V = malloc(sizeof(float) * N * W), *Q = malloc(sizeof(float) * 4 * QW);
    fill_uniform(&r, K, N * W, 2.0f);
    fill_uniform(&r, V, N * W, 1.0f);
    fill_uniform(&r, Q, 4 * QW, 2.0f);
    parsing();
    table();
    big_budget(K, V, Q, N);
    known_set(&r, K, V, Q, N);
    observer(K, V, Q, N);
    steps(K, V, Q, N);
    chunks(K, V, Q);
    squeeze(&r, K, V, Q);
    kvpress_options();
    expected_prompt(K, V, Q);
    vq_kv *kv = make("f16;evict=h2o,budget=8");
    vq_err err;
    if (kv) {
        CHECK(vq_kv_state_write(kv, null_writer, NULL, &err) == VQ_ERR_STATE && strstr(err.msg, "evicts"));
        vq_kv_destroy(kv);
    }
    free(K); free(V); free(Q);
    return vq_t_done();
}
