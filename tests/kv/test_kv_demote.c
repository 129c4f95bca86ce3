/* test_kv_demote.c: demote mode of token eviction (src/kv/demote.c): the rows an eviction step
 * drops are re-coded into a second tier of the layer (another codec) at their true positions.
 * Checks: demote=CODEC parses, normalizes and round-trips, and every refusal names what was wrong;
 * a budget covering every row leaves attention memcmp-equal to no policy; after demoting a known
 * set of blocks (two rounds, so the tier's positions are out of order), on f16/f32/q8_0/4-bit/
 * kivi/q4_0-with-window-and-sink main tiers into q8_0/2-bit/kivi/q4_0 tiers: the main tier reads
 * back exactly the kept rows, the tier holds exactly the dropped positions and its rows are
 * bit-identical to the tier codec's own coding of the main tier's decoded rows, attention equals
 * float64 attention over (kept rows) U (tier rows as decoded) within 1e-5 (also for queries that
 * see only tier rows, and through the float64 debug path), main pages are freed, bytes == tally;
 * the observer's scores are the softmax weights over both tiers; eviction steps keep every
 * position in one tier or the other; truncate keeps what lies below the position it returns; a
 * sliding-window layer's tier frees what no query can see; saving is refused; heads=ada with
 * demote= is refused (not built); demote is the "demote" row of the fate table (kv_policy.h) and
 * each group carries the row its clause asked for. */
#include "kv_ref.h"
#include "../calib_fixture.h"
#include "kv/kv.h"
#include "kv/kv_impl.h"

static vq_kv_dims D = {.n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .max_ctx = 700};
#define W ((size_t)D.n_kv_heads * D.head_dim)
#define QW ((size_t)D.n_heads * D.head_dim)

static vq_kv *make_d(const char *spec, const vq_kv_dims *d) { return kv_make(spec, d); }
static vq_kv *make(const char *spec) { return kv_make(spec, &D); }
static void fill_rows(vq_kv *kv, const float *K, const float *V, int n, int chunk) { kv_fill_rows(kv, &D, K, V, n, chunk); }

/* a layer's rows, main tier then demoted tier: k, v, pos (buffers of max_ctx rows); returns rows */
static int read_all(vq_kv *kv, int l, float *k, float *v, int32_t *pos, int *n_main) {
    vq_err err;
    const int nm = vq_kv_rows(kv, l), nt = vq_kv_demoted_rows(kv, l);
    CHECK(vq_kv_read(kv, l, k, v, pos, &err) == VQ_OK);
    if (nt) CHECK(vq_kv_read_demoted(kv, l, k + (size_t)nm * W, v + (size_t)nm * W, pos + nm, &err) == VQ_OK);
    if (n_main) *n_main = nm;
    return nm + nt;
}

static void parsing(void) {
    vq_err err;
    struct { const char *in, *norm; } ok[] = {
        {"turboquant_mse:k=4,v=4;evict=snapkv,budget=0.5;demote=turboquant_mse:k=2,v=2",
         "turboquant_mse:bits=4,norm=f16,layout=lanes;evict=snapkv,budget=0.5,sinks=4,recent=32,every=16,obs=32,"
         "pool=7;demote=turboquant_mse:bits=2,norm=f16,layout=lanes"},
        {"f16;evict=h2o,budget=1024;demote=q4_0:rotate=1",
         "f16;evict=h2o,budget=1024,sinks=4,recent=32,every=16;demote=q4_0:rotate=1,layout=lanes"},
        {"f16;demote=turboquant_mse:v=2,k=4;evict=h2o,budget=10",
         "f16;evict=h2o,budget=10,sinks=4,recent=32,every=16;demote=turboquant_mse:k=4,v=2,norm=f16,layout=lanes"},
        {"q8_0;evict=tova,budget=0.5;demote=f16", "q8_0:rotate=0,layout=lanes;evict=tova,budget=0.5,sinks=4,"
         "recent=32,every=16;demote=f16"},
        {"kivi:bits=2;evict=knorm,budget=64;demote=kivi:k=2,v=4,group=64", NULL},
        {"f32;evict=keyformer,budget=0.25,tau=2;demote=turboquant_mse:bits=3,layout=packed", NULL},
        {"f16;evict=h2o,budget=64;demote=q8_0@1=f16", NULL},
        {"f16@0=q4_0;evict=streaming_llm,budget=100;demote=turboquant_mse:bits=2", NULL},
        {"f16;evict=h2o,budget=64,heads=shared;demote=q8_0",
         "f16;evict=h2o,budget=64,sinks=4,recent=32,every=16;demote=q8_0:rotate=0,layout=lanes"},
    };
    for (size_t i = 0; i < VQ_ARRAY_LEN(ok); i++) {
        vq_kv *kv = vq_kv_create_str(ok[i].in, &D, 1, &err);
        CHECKF(kv != NULL, "'%s' refused: %s", ok[i].in, kv ? "" : err.msg);
        if (!kv) continue;
        if (ok[i].norm) CHECKF(!strcmp(vq_kv_spec_str(kv), ok[i].norm), "'%s' -> '%s'", ok[i].in, vq_kv_spec_str(kv));
        CHECKF(strstr(vq_kv_spec_str(kv), ";demote="), "'%s' -> '%s'", ok[i].in, vq_kv_spec_str(kv));
        /* the normalized text parses to itself, through the parser alone and through a cache */
        vq_kv_spec *sp = vq_kv_spec_parse(vq_kv_spec_str(kv), &err);
        CHECKF(sp && !strcmp(vq_kv_spec_text(sp), vq_kv_spec_str(kv)), "parse of '%s': %s", vq_kv_spec_str(kv),
               sp ? vq_kv_spec_text(sp) : err.msg);
        vq_kv_spec_free(sp);
        vq_kv *k2 = vq_kv_create_str(vq_kv_spec_str(kv), &D, 1, &err);
        CHECKF(k2 && !strcmp(vq_kv_spec_str(k2), vq_kv_spec_str(kv)), "round trip of '%s': %s", vq_kv_spec_str(kv),
               k2 ? vq_kv_spec_str(k2) : err.msg);
        vq_kv_destroy(k2);
        CHECK(vq_kv_demoted_rows(kv, 0) == 0 && vq_kv_demoted(kv) == 0);
        vq_kv_destroy(kv);
    }
    /* a layer without a tier: reading it is refused, its counts are 0 */
    vq_kv *kv = make("f16;evict=h2o,budget=64;demote=q8_0@1=f16");
    if (kv) {
        float k[1], v[1];
        int32_t p[1];
        CHECK(vq_kv_read_demoted(kv, 1, k, v, p, &err) == VQ_ERR_ARG && strstr(err.msg, "no demoted tier"));
        CHECK(vq_kv_demoted_rows(kv, 1) == 0 && vq_kv_demoted_pages(kv, 1) == 0);
        vq_kv_destroy(kv);
    }
    struct { const char *in, *says; } bad[] = {
        {"f16;demote=q8_0", "demote= needs evict=POLICY"},
        {"f16;evict=h2o,budget=10;demote=foo", "demote=: unknown codec 'foo'"},
        {"f16;evict=h2o,budget=10;demote=q8_0:foo=1", "unknown parameter 'foo'"},
        {"f16;evict=h2o,budget=10;demote=q8_0:foo=1", "demote=q8_0"},
        {"f16;evict=h2o,budget=10;demote=turboquant_mse:bits=9", "bits=9"},
        {"f16;evict=h2o,budget=10;demote=q8_0:window=3", "'window=' inside demote=q8_0"},
        {"f16;evict=h2o,budget=10;demote=q8_0:budget=3", "'budget=' inside demote=q8_0"},
        {"f16;evict=h2o,budget=10;demote=k=q8_0", "one codec for both sides"},
        {"f16;evict=h2o,budget=10;demote=", "demote= needs a codec"},
        {"f16;evict=h2o,budget=10;demote=q8_0;demote=f16", "demote= given twice"},
        {"f16;evict=h2o,budget=10;demote=turboquant_mse:k=2,k=3", "'k=' given twice"},
        {"f16;evict=h2o,budget=10;demote=tq_split", "needs a calibration"},
        {"f16;evict=h2o,budget=10;demote=q8_0:rotate=1@1=f16;demote=q8_0", "demote= needs evict=POLICY"},
        {"f16;evict=h2o,budget=10,heads=ada;demote=q8_0", "demote= with heads=ada is not built"},
        {"turboquant_mse:k=4,v=4;demote=turboquant_mse:k=2,v=2;evict=tova,budget=0.5,heads=ada,floor=0.1",
         "demote= with heads=ada is not built"},
    };
    for (size_t i = 0; i < VQ_ARRAY_LEN(bad); i++) {
        vq_kv *b = vq_kv_create_str(bad[i].in, &D, 1, &err);
        CHECKF(!b && err.code == VQ_ERR_ARG && strstr(err.msg, bad[i].says), "'%s': %s", bad[i].in,
               b ? "accepted" : err.msg);
        vq_kv_destroy(b);
    }
    char help[8192];
    vq_kv_spec_help(help, sizeof help);
    CHECK(strstr(help, "demote=CODEC") != NULL);
}

/* a budget covering every row: nothing is demoted, outputs are bit-identical to no policy */
static void big_budget(const float *K, const float *V, const float *Q, int N) {
    const char *codecs[] = {"f16", "turboquant_mse:k=4,v=4", "kivi:bits=2", "q4_0;window=16"};
    const char *pols[] = {"h2o", "tova", "snapkv", "streaming_llm"};
    for (size_t c = 0; c < VQ_ARRAY_LEN(codecs); c++)
        for (size_t p = 0; p < VQ_ARRAY_LEN(pols); p++) {
            char spec[200];
            snprintf(spec, sizeof spec, "%s;evict=%s,budget=%d,every=1;demote=turboquant_mse:k=2,v=2", codecs[c],
                     pols[p], N);
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
                same &= !memcmp(oa, ob, sizeof(float) * QW * 4) && vq_kv_rows(a, l) == N && vq_kv_demoted_rows(a, l) == 0;
            }
            CHECKF(same, "%s: outputs differ from no eviction", spec);
            CHECK(vq_kv_demoted(a) == 0);
            free(oa); free(ob);
            vq_kv_destroy(a); vq_kv_destroy(b);
        }
}

/* rows per coded block of the main codec (as the store makes them) and its coded rows */
static int main_rpb(const char *m) { return strstr(m, "kivi") ? 32 : strncmp(m, "f", 1) ? 16 : 1; }

/* demote a known set in two rounds; check both tiers, the attention, bytes, pages, truncate */
static void known_set(vq_rng *r, const float *K, const float *V, const float *Q, int N) {
    struct { const char *main, *tier, *tier_plain; } pairs[] = {
        {"f16", "q8_0", "q8_0;window=0"},
        {"f16", "turboquant_mse:k=2,v=2", "turboquant_mse:k=2,v=2;window=0"},
        {"f32", "turboquant_mse:k=4,v=4", "turboquant_mse:k=4,v=4;window=0"},
        {"turboquant_mse:k=4,v=4", "turboquant_mse:k=2,v=2", "turboquant_mse:k=2,v=2;window=0"},
        {"q4_0;window=24,sink=3", "kivi:bits=2,group=32", "kivi:bits=2,group=32;window=0"},
        {"kivi:bits=2,group=32", "q4_0:rotate=1", "q4_0:rotate=1;window=0"},
        {"q8_0", "turboquant_mse:k=3,v=2,layout=packed", "turboquant_mse:k=3,v=2,layout=packed;window=0"},
    };
    const size_t cap = (size_t)D.max_ctx;
    float *rk = malloc(sizeof(float) * cap * W), *rv = malloc(sizeof(float) * cap * W);
    float *k0 = malloc(sizeof(float) * cap * W), *v0 = malloc(sizeof(float) * cap * W);
    float *tk = malloc(sizeof(float) * cap * W), *tv = malloc(sizeof(float) * cap * W);
    float *ek = malloc(sizeof(float) * cap * W), *ev = malloc(sizeof(float) * cap * W);
    int32_t *pos = malloc(sizeof(int32_t) * cap), *pos0 = malloc(sizeof(int32_t) * cap);
    int32_t *drop = malloc(sizeof(int32_t) * cap), *tpos = malloc(sizeof(int32_t) * cap), *epos = malloc(sizeof(int32_t) * cap);
    float *out = malloc(sizeof(float) * QW * 4);
    double *ref = malloc(sizeof(double) * QW * 4);
    int qp[4] = {N - 1, 400, 200, 40};   /* 40: the main tier holds nothing visible there (no sink) */
    for (size_t c = 0; c < VQ_ARRAY_LEN(pairs); c++) {
        char spec[300];
        snprintf(spec, sizeof spec, "%s;evict=h2o,budget=700;demote=%s", pairs[c].main, pairs[c].tier);
        vq_kv *kv = make(spec), *tref = make(pairs[c].tier_plain);
        if (!kv || !tref) { vq_kv_destroy(kv); vq_kv_destroy(tref); continue; }
        fill_rows(kv, K, V, N, 29);
        vq_err err;
        const int rpb = main_rpb(pairs[c].main), S = strstr(pairs[c].main, "sink=3") ? 3 : 0;
        for (int l = 0; l < D.n_layers; l++) {
            const int rows0 = vq_kv_rows(kv, l), pages0 = vq_kv_pages(kv, l);
            CHECK(vq_kv_read(kv, l, k0, v0, pos0, &err) == VQ_OK);
            const int R = vq_kv_window_rows(kv), m = rows0 - S;
            const int coded = m >= R + rpb ? (m - R) / rpb * rpb : 0;
            int nt = 0, bad_tier = 0;
            for (int round = 0; round < 2; round++) {
                /* round 0: every block below 64 and of 256..511 (a page), 20 % of the rest; round 1:
                 * 30 % of what is left (its positions come after some of round 0's in the tier) */
                int nd = 0;
                for (int b = 0; b * rpb + rpb <= coded; b++) {
                    int first = pos0[b * rpb], gone = 0;
                    for (int i = 0; i < nt && !gone; i++) gone = tpos[i] == first;
                    if (gone) continue;
                    int go = round ? vq_rng_uniformf(r) < 0.3f
                                   : first < 64 || (first >= 256 && first < 512) || vq_rng_uniformf(r) < 0.2f;
                    for (int t = 0; go && t < rpb; t++) drop[nd++] = pos0[b * rpb + t];
                }
                vq_status st = vq_kv_evict_positions(kv, l, drop, nd, &err);
                CHECKF(st == VQ_OK, "%s layer %d: %s", spec, l, err.msg);
                /* the tier codec's own coding of the main tier's decoded rows, in the same order and
                 * appends (one per main block: rows that wait in a store's fp16 ring are rounded) */
                for (int i = 0; i < nd; i += rpb) {
                    int src = 0;
                    while (pos0[src] != drop[i]) src++;
                    CHECK(vq_kv_append(tref, l, drop[i], rpb, k0 + (size_t)src * W, v0 + (size_t)src * W, &err) == VQ_OK);
                    for (int t = 0; t < rpb; t++) tpos[nt++] = drop[i + t];
                }
            }
            if (l == 0) CHECKF(vq_kv_pages(kv, l) < pages0, "%s: pages %d -> %d (a dropped page must be freed)", spec,
                               pages0, vq_kv_pages(kv, l));
            /* main: exactly the rows not demoted, in order */
            const int rows = vq_kv_rows(kv, l), trows = vq_kv_demoted_rows(kv, l);
            CHECKF(rows == rows0 - nt && trows == nt, "%s layer %d: %d + %d rows, expected %d + %d", spec, l, rows,
                   trows, rows0 - nt, nt);
            CHECK(vq_kv_read(kv, l, rk, rv, pos, &err) == VQ_OK);
            int ok = 1, j = 0;
            for (int i = 0; i < rows0; i++) {
                int gone = 0;
                for (int t = 0; t < nt && !gone; t++) gone = tpos[t] == pos0[i];
                if (gone) continue;
                ok &= j < rows && pos[j] == pos0[i] && !memcmp(rk + (size_t)j * W, k0 + (size_t)i * W, sizeof(float) * W);
                j++;
            }
            CHECKF(ok && j == rows, "%s layer %d: the main tier is not the kept rows", spec, l);
            /* tier: exactly the demoted positions, in demotion order, bit-identical to the reference */
            CHECK(vq_kv_read_demoted(kv, l, tk, tv, pos + rows, &err) == VQ_OK);
            CHECK(vq_kv_read(tref, l, ek, ev, epos, &err) == VQ_OK && vq_kv_rows(tref, l) == nt);
            for (int i = 0; i < nt; i++) bad_tier += pos[rows + i] != tpos[i] || epos[i] != tpos[i];
            bad_tier += memcmp(tk, ek, sizeof(float) * W * nt) != 0 || memcmp(tv, ev, sizeof(float) * W * nt) != 0;
            CHECKF(!bad_tier, "%s layer %d: the tier is not the tier codec's coding of the demoted rows", spec, l);
            /* attention from both tiers == float64 attention over their rows as decoded */
            memcpy(rk + (size_t)rows * W, tk, sizeof(float) * W * nt);
            memcpy(rv + (size_t)rows * W, tv, sizeof(float) * W * nt);
            ref_attention(rows + nt, rk, rv, pos, D.n_kv_heads, D.n_heads, D.head_dim, 4, qp, Q, ref);
            CHECK(vq_kv_attend(kv, l, 4, qp, Q, out, &err) == VQ_OK);
            double e = rel_err(4, D.n_heads, D.head_dim, out, ref);
            CHECKF(e <= 1e-5, "%s layer %d: attention over both tiers off by %.3g", spec, l, e);
            vq_kv_set_ref_attend(kv, 1);   /* the debug path reads both tiers too */
            CHECK(vq_kv_attend(kv, l, 4, qp, Q, out, &err) == VQ_OK);
            vq_kv_set_ref_attend(kv, 0);
            e = rel_err(4, D.n_heads, D.head_dim, out, ref);
            CHECKF(e <= 1e-6, "%s layer %d: reference attention over both tiers off by %.3g", spec, l, e);
            CHECKF(vq_kv_demoted_pages(kv, l) >= 1, "%s layer %d: the tier has no page", spec, l);
        }
        CHECKF(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv), "%s: bytes %zu, tally %zu", spec, vq_kv_bytes(kv),
               vq_kv_bytes_tally(kv));
        CHECK(vq_kv_demoted(kv) > 0);
        /* appends continue at true positions; truncate keeps everything below what it returns */
        CHECK(vq_kv_append(kv, 0, N, 1, K, V, &err) == VQ_OK);
        int before[2];
        int32_t *pb = malloc(sizeof(int32_t) * cap * 2);
        for (int l = 0; l < D.n_layers; l++) before[l] = read_all(kv, l, rk, rv, pb + (size_t)l * cap, NULL);
        const int t = vq_kv_truncate(kv, 450);
        CHECKF(t >= 0 && t <= 450, "%s: truncate(450) = %d", spec, t);
        for (int l = 0; l < D.n_layers; l++) {
            const int n = read_all(kv, l, rk, rv, pos, NULL);
            int below = 0, ok = 1;
            for (int i = 0; i < before[l]; i++) below += pb[(size_t)l * cap + i] < t;
            for (int i = 0; i < n; i++) ok &= pos[i] < t;
            CHECKF(ok && n == below, "%s layer %d: after truncate(450) = %d: %d rows, %d held below", spec, l, t, n, below);
        }
        free(pb);
        CHECKF(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv), "%s: after truncate, bytes %zu, tally %zu", spec,
               vq_kv_bytes(kv), vq_kv_bytes_tally(kv));
        vq_kv_destroy(kv);
        vq_kv_destroy(tref);
    }
    free(rk); free(rv); free(k0); free(v0); free(tk); free(tv); free(ek); free(ev);
    free(pos); free(pos0); free(drop); free(tpos); free(epos); free(out); free(ref);
}

static void ref_weights(const float *rk, const int32_t *pos, int rows, const float *q, int qp, double *wsum) {
    ref_softmax_weights(rows, rk, pos, D.n_kv_heads, D.n_heads, D.head_dim, q, qp, wsum);
}

/* h2o's scores with a tier: the main rows' share of the softmax over both tiers */
static void observer(const float *K, const float *V, const float *Q, int N) {
    const char *specs[] = {"f16;evict=h2o,budget=700;demote=q8_0",
                           "turboquant_mse:k=4,v=4;evict=h2o,budget=700;demote=turboquant_mse:k=2,v=2"};
    const size_t cap = (size_t)D.max_ctx;
    float *rk = malloc(sizeof(float) * cap * W), *rv = malloc(sizeof(float) * cap * W), *sc = malloc(sizeof(float) * cap);
    int32_t *pos = malloc(sizeof(int32_t) * cap), *sp = malloc(sizeof(int32_t) * cap), *drop = malloc(sizeof(int32_t) * cap);
    double *w1 = malloc(sizeof(double) * cap), *w2 = malloc(sizeof(double) * cap);
    float *out = malloc(sizeof(float) * QW);
    vq_err err;
    for (size_t c = 0; c < VQ_ARRAY_LEN(specs); c++) {
        vq_kv *kv = make(specs[c]);
        if (!kv) continue;
        fill_rows(kv, K, V, N, 50);
        const int l = 1, rpb = c ? 16 : 1;
        CHECK(vq_kv_read(kv, l, rk, rv, pos, &err) == VQ_OK);
        int nd = 0;   /* every other block of 64..383 */
        for (int r = 0; r + rpb <= vq_kv_rows(kv, l) - 32; r += rpb)
            if (pos[r] >= 64 && pos[r] < 384 && (r / rpb) % 2 == 0)
                for (int t = 0; t < rpb; t++) drop[nd++] = pos[r + t];
        CHECK(vq_kv_evict_positions(kv, l, drop, nd, &err) == VQ_OK);
        int nm = 0;
        const int rows = read_all(kv, l, rk, rv, pos, &nm);
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
        double worst = 0, tier_mass = 0;
        int pos_ok = 1;
        for (int r = 0; r < nm; r++) {
            pos_ok &= sp[r] == pos[r];
            worst = fmax(worst, fabs(sc[r] - (w1[r] + w2[r])));
        }
        for (int r = nm; r < rows; r++) tier_mass += w1[r] + w2[r];
        CHECKF(pos_ok && worst <= 1e-5 && tier_mass > 0.01, "%s: scores off by %.3g (tier mass %.3g, positions %s)",
               specs[c], worst, tier_mass, pos_ok ? "ok" : "wrong");
        vq_kv_destroy(kv);
    }
    free(rk); free(rv); free(sc); free(pos); free(sp); free(drop); free(w1); free(w2); free(out);
}

/* eviction steps with a tier: the budget holds, and every position stays in one tier or the other */
static char g_kxspec[400];   /* the key pre-transform over both tiers (main() writes its calibration) */
static void steps(const float *K, const float *V, const float *Q, int N) {
    const char *specs[] = {"f16;evict=h2o,budget=200,sinks=4,recent=32,every=4;demote=q8_0", g_kxspec,
                           "turboquant_mse:k=4,v=4;evict=tova,budget=0.5,every=4;demote=turboquant_mse:k=2,v=2",
                           "q4_0;window=20;evict=knorm,budget=150,sinks=2,recent=8,every=4;demote=kivi:bits=2,group=32",
                           "kivi:bits=2,group=32;evict=snapkv,budget=0.3,every=4;demote=q4_0",
                           "f16;evict=keyformer,budget=180,every=4;demote=f16"};
    const size_t cap = (size_t)D.max_ctx;
    int32_t *pos = malloc(sizeof(int32_t) * cap);
    float *rk = malloc(sizeof(float) * cap * W), *rv = malloc(sizeof(float) * cap * W);
    float *out = malloc(sizeof(float) * QW);
    double *ref = malloc(sizeof(double) * QW);
    unsigned char *seen = malloc(cap);
    vq_err err;
    for (size_t s = 0; s < VQ_ARRAY_LEN(specs); s++) {
        vq_kv *kv = make(specs[s]);
        CHECKF(kv != NULL, "'%s' not made", specs[s]);
        if (!kv) continue;
        const int P = 400;
        for (int l = 0; l < D.n_layers; l++) vq_kv_append(kv, l, 0, P, K, V, &err);
        vq_kv_evict_begin(kv, 0, P);
        vq_kv_evict_end(kv, 0, P);
        double worst = 0;
        for (int p = P; p < N; p++) {
            vq_kv_evict_begin(kv, p, 1);
            for (int l = 0; l < D.n_layers; l++) {
                CHECK(vq_kv_append(kv, l, p, 1, K + (size_t)p * W, V + (size_t)p * W, &err) == VQ_OK);
                CHECK(vq_kv_attend(kv, l, 1, &p, Q + (size_t)(p % 4) * QW, out, &err) == VQ_OK);
                if (p % 37 == 0) {   /* the step's attention == float64 over both tiers */
                    const int n = read_all(kv, l, rk, rv, pos, NULL);
                    ref_attention(n, rk, rv, pos, D.n_kv_heads, D.n_heads, D.head_dim, 1, &p, Q + (size_t)(p % 4) * QW, ref);
                    worst = fmax(worst, rel_err(1, D.n_heads, D.head_dim, out, ref));
                }
            }
            vq_kv_evict_end(kv, p, 1);
        }
        vq_kv_evict_now(kv, N);
        CHECKF(worst <= 1e-5, "%s: attention during the steps off by %.3g", specs[s], worst);
        for (int l = 0; l < D.n_layers; l++) {
            const char *b = strstr(specs[s], "budget=") + 7;
            const int B = strchr(b, '.') && strchr(b, '.') < strchr(b, ',') ? (int)ceil(atof(b) * N) : atoi(b);
            CHECKF(vq_kv_rows(kv, l) <= B, "%s layer %d: %d main rows, budget %d", specs[s], l, vq_kv_rows(kv, l), B);
            const int n = read_all(kv, l, rk, rv, pos, NULL);
            memset(seen, 0, cap);
            int dup = 0;
            for (int i = 0; i < n; i++) { dup += seen[pos[i]]; seen[pos[i]] = 1; }
            CHECKF(n == N && !dup, "%s layer %d: %d rows over both tiers (%d twice) for %d positions", specs[s], l, n,
                   dup, N);
            CHECKF(vq_kv_demoted_rows(kv, l) >= N - B, "%s layer %d: %d rows demoted", specs[s], l,
                   vq_kv_demoted_rows(kv, l));
        }
        CHECK(vq_kv_evicted(kv) > 0 && vq_kv_demoted(kv) > 0);
        CHECKF(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv), "%s: bytes %zu tally %zu", specs[s], vq_kv_bytes(kv),
               vq_kv_bytes_tally(kv));
        CHECKF(vq_kv_bytes_at(kv, N) >= vq_kv_bytes(kv), "%s: bytes_at(%d) %zu below the bytes held %zu", specs[s], N,
               vq_kv_bytes_at(kv, N), vq_kv_bytes(kv));
        const int t = vq_kv_truncate(kv, N - 100);
        for (int l = 0; l < D.n_layers; l++) {
            const int n = read_all(kv, l, rk, rv, pos, NULL);
            int ok = 1;
            for (int i = 0; i < n; i++) ok &= pos[i] < t;
            /* a tier block mixes old and new positions: one holding a row >= N - 100 takes the bound
             * down to its oldest row (kivi's 32-row blocks: far) */
            CHECKF(ok && n == t && t <= N - 100, "%s layer %d: truncate(%d) = %d, %d rows", specs[s], l, N - 100, t, n);
        }
        vq_kv_destroy(kv);
    }
    free(pos); free(rk); free(rv); free(out); free(ref); free(seen);
}

/* a sliding-window layer (span 96): its tier frees what no later query can see */
static void span_layer(const float *K, const float *V, const float *Q, int N) {
    const int span[2] = {0, 96};
    vq_kv_dims d = D;
    d.span = span;
    const char *spec = "f16;evict=h2o,budget=64,every=4;demote=q8_0";
    vq_kv *kv = make_d(spec, &d);
    if (!kv) return;
    const size_t cap = (size_t)D.max_ctx;
    int32_t *pos = malloc(sizeof(int32_t) * cap);
    float *rk = malloc(sizeof(float) * cap * W), *rv = malloc(sizeof(float) * cap * W), *out = malloc(sizeof(float) * QW);
    double *ref = malloc(sizeof(double) * QW);
    vq_err err;
    double worst = 0;
    for (int p = 0; p < N; p++) {
        vq_kv_evict_begin(kv, p, 1);
        for (int l = 0; l < 2; l++) {
            CHECK(vq_kv_append(kv, l, p, 1, K + (size_t)p * W, V + (size_t)p * W, &err) == VQ_OK);
            CHECK(vq_kv_attend(kv, l, 1, &p, Q + (size_t)(p % 4) * QW, out, &err) == VQ_OK);
            if (p % 41 == 0) {
                const int n = read_all(kv, l, rk, rv, pos, NULL);
                windowed_ref(n, rk, rv, pos, D.n_kv_heads, D.n_heads, D.head_dim, 1, &p, Q + (size_t)(p % 4) * QW,
                             span[l], ref);
                worst = fmax(worst, rel_err(1, D.n_heads, D.head_dim, out, ref));
            }
        }
        vq_kv_evict_end(kv, p, 1);
    }
    CHECKF(worst <= 1e-5, "%s with a span layer: attention off by %.3g", spec, worst);
    /* the unbounded layer keeps every position; the span layer's tier holds only rows a query at
     * N could still see, up to one tier block (16 rows) and its 15-row staging ring */
    CHECK(vq_kv_rows(kv, 0) + vq_kv_demoted_rows(kv, 0) == N);
    int nm = 0;
    const int n = read_all(kv, 1, rk, rv, pos, &nm);
    int old = 0;
    for (int i = nm; i < n; i++) old += pos[i] <= N - span[1];
    CHECKF(vq_kv_demoted_rows(kv, 1) <= span[1] + 31 && old <= 31, "span layer: %d tier rows, %d invisible ones",
           vq_kv_demoted_rows(kv, 1), old);
    CHECK(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv));
    /* truncating below what the span layer's tier freed goes back to 0, as the main ring does */
    CHECKF(vq_kv_truncate(kv, N / 2) == 0, "span layer: truncate(%d) keeps rows the tier freed", N / 2);
    CHECK(vq_kv_rows(kv, 1) == 0 && vq_kv_demoted_rows(kv, 1) == 0 && vq_kv_bytes(kv) == vq_kv_bytes_tally(kv));
    vq_kv_destroy(kv);
    free(pos); free(rk); free(rv); free(out); free(ref);
}

static int null_writer(void *u, const void *b, size_t n) { (void)u; (void)b; (void)n; return 0; }

/* demote is a row of the fate table (kv_policy.h): "drop" has no hooks, "demote" all three; a
 * parsed spec with demote= asks for it, one without for drop; a cache's groups carry the row their
 * clause asked for, and the step reaches the tier only through it */
static void fate_table(void) {
    int n = 0;
    for (const vq_kv_fate *f; (f = vq_kv_fate_at(n)); n++) CHECKF(f->name && f->help, "fate row %d unnamed", n);
    CHECKF(n == 2, "fate table: %d rows", n);
    const vq_kv_fate *drop = vq_kv_fate_at(0), *dem = vq_kv_fate_at(1);
    CHECK(drop && !strcmp(drop->name, "drop") && !drop->attach && !drop->take && !drop->truncate);
    CHECK(dem && !strcmp(dem->name, "demote") && dem->attach && dem->take && dem->truncate);
    CHECK(!vq_kv_fate_at(-1) && !vq_kv_fate_at(2));
    vq_kv_parsed p;
    vq_err err;
    CHECK(vq_kv_part_parse("f16;evict=h2o,budget=8;demote=q8_0", &p, &err) == VQ_OK && vq_kv_fate_of(&p) == dem);
    CHECK(vq_kv_part_parse("f16;evict=h2o,budget=8", &p, &err) == VQ_OK && vq_kv_fate_of(&p) == drop);
    vq_kv *kv = make("f16;evict=h2o,budget=8;demote=q8_0@1=f16;evict=h2o,budget=8");
    CHECK(kv != NULL);
    if (kv) {
        CHECK(kv->g[kv->lg[0]]->dm.fate == dem && kv->g[kv->lg[1]]->dm.fate == drop);
        CHECK(kv->g[kv->lg[0]]->dm.tier && !kv->g[kv->lg[0]]->dm.tier->dm.fate && !kv->g[kv->lg[1]]->dm.tier);
        vq_kv_destroy(kv);
    }
}

int main(void) {
    uint64_t seed = test_seed();
    vq_rng r;
    vq_rng_seed(&r, seed);
    const int N = 640;
    float *K = malloc(sizeof(float) * N * W), *V = malloc(sizeof(float) * N * W), *Q = malloc(sizeof(float) * 4 * QW);
    fill_uniform(&r, K, N * W, 2.0f);
    fill_uniform(&r, V, N * W, 1.0f);
    fill_uniform(&r, Q, 4 * QW, 2.0f);
    char cal[64];
    vq_t_tmpfile("vq_demote_kx", cal, sizeof cal);
    vq_t_calib_file(cal, D.n_layers, D.n_heads, D.n_kv_heads, D.head_dim, &r);
    snprintf(g_kxspec, sizeof g_kxspec, "q8_0:layout=rows;evict=tova,budget=150,sinks=4,recent=16,every=4;"
             "demote=turboquant_mse:k=4,v=4;kmean=1,kscale=0.25;calib=%s", cal);
    parsing();
    fate_table();
    big_budget(K, V, Q, N);
    known_set(&r, K, V, Q, N);
    observer(K, V, Q, N);
    steps(K, V, Q, N);
    span_layer(K, V, Q, N);
    vq_kv *kv = make("f16;evict=h2o,budget=8;demote=q8_0");
    vq_err err;
    if (kv) {
        CHECK(vq_kv_state_write(kv, null_writer, NULL, &err) == VQ_ERR_STATE && strstr(err.msg, "evicts"));
        vq_kv_destroy(kv);
    }
    unlink(cal);
    free(K); free(V); free(Q);
    return vq_t_done();
}
