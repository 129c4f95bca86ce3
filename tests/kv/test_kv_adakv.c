/* test_kv_adakv.c: heads=ada (src/kv/adakv.c): rows stored per KV head, AdaKV's budget allocator.
 * Checks:
 *   - heads=/floor= parse, normalize and round-trip; the default layout's normalized specs are
 *     unchanged; bad values and keys without evict= are refused by name;
 *   - a budget covering every row: attention outputs (one and several query chunks), the rows read
 *     back and the policy's scores equal those of the shared layout and of no policy (outputs and
 *     rows memcmp-equal) for 6 codecs (tq_split: per-head codec states) x 8 policies;
 *   - after evicting a different known set of rows from each KV head: each head reads back exactly
 *     its complement at the true positions, attention from the codes equals float64 attention in
 *     which each KV head's query group sees only that head's kept rows (1e-5; also the float64
 *     debug path), pages are freed, bytes == tally, the layer-wide read is refused by name;
 *   - the allocator against a brute force (ranks counted pairwise, no sort): the kept (block, head)
 *     pairs, per-head rows >= the floor, the layer's total within H x budget (block rounding);
 *   - an eviction step (knorm, scores known in closed form) keeps exactly the brute force's rows per
 *     head; decode-time steps on 4 policy/codec pairs keep the budget, the floor, sinks and recent
 *     rows in every head, and attention stays equal to the per-head float64 reference. */
#include "kv_ref.h"
#include "kv/kv.h"
#include "kv/kv_impl.h"
#include "../calib_fixture.h"

static vq_kv_dims D = {.n_layers = 2, .n_heads = 6, .n_kv_heads = 3, .head_dim = 64, .max_ctx = 700};
#define W ((size_t)D.n_kv_heads * D.head_dim)
#define QW ((size_t)D.n_heads * D.head_dim)
static int below(vq_rng *r, int n) { return (int)(vq_rng_u64(r) % (uint64_t)n); }
#define NQ 20   /* queries of the several-chunk attention (chunks of 16) */
static char calib_path[64];

static vq_kv *make(const char *spec) { return kv_make(spec, &D); }
static void fill_rows(vq_kv *kv, const float *K, const float *V, int n, int chunk) { kv_fill_rows(kv, &D, K, V, n, chunk); }

static void parsing(void) {
    vq_err err;
    struct { const char *in, *norm, *tail; } ok[] = {
        {"f16;evict=h2o,budget=0.5,heads=ada", "f16;evict=h2o,budget=0.5,sinks=4,recent=32,every=16,heads=ada,floor=0.2", NULL},
        {"f16;evict=h2o,budget=0.5,heads=shared", "f16;evict=h2o,budget=0.5,sinks=4,recent=32,every=16", NULL},
        {"turboquant_mse:k=4,v=4;evict=snapkv,budget=0.25,heads=ada,floor=0", NULL, ",obs=32,pool=7,heads=ada,floor=0"},
        {"q4_0;window=16,sink=3;evict=tova,budget=100,floor=0.5,heads=ada", NULL, "every=16,heads=ada,floor=0.5"},
        {"f32;evict=keyformer,budget=1.0,tau=0.5,heads=ada,floor=1", NULL, ",tau=0.5,heads=ada,floor=1"},
        {"f16@1=f16;evict=knorm,budget=64,heads=ada", "f16@1=f16;evict=knorm,budget=64,sinks=4,recent=32,every=16,heads=ada,floor=0.2", NULL},
    };
    for (size_t i = 0; i < VQ_ARRAY_LEN(ok); i++) {
        vq_kv *kv = vq_kv_create_str(ok[i].in, &D, 1, &err);
        CHECKF(kv != NULL, "'%s' refused: %s", ok[i].in, kv ? "" : err.msg);
        if (!kv) continue;
        const char *n = vq_kv_spec_str(kv);
        if (ok[i].norm) CHECKF(!strcmp(n, ok[i].norm), "'%s' -> '%s'", ok[i].in, n);
        if (ok[i].tail) CHECKF(strlen(n) >= strlen(ok[i].tail) && !strcmp(n + strlen(n) - strlen(ok[i].tail), ok[i].tail),
                               "'%s' -> '%s'", ok[i].in, n);
        const int ada = strstr(ok[i].in, "heads=ada") != NULL, over = strchr(ok[i].in, '@') != NULL;
        CHECKF(vq_kv_per_head(kv, 1) == ada && vq_kv_per_head(kv, 0) == (ada && !over), "'%s': per-head layers", ok[i].in);
        vq_kv *k2 = vq_kv_create_str(n, &D, 1, &err);
        CHECKF(k2 && !strcmp(vq_kv_spec_str(k2), n), "round trip of '%s': %s", n, k2 ? vq_kv_spec_str(k2) : err.msg);
        vq_kv_destroy(k2);
        vq_kv_destroy(kv);
    }
    struct { const char *in, *says; } bad[] = {
        {"f16;heads=ada", "need evict=POLICY"},
        {"f16;floor=0.2", "need evict=POLICY"},
        {"f16;evict=h2o,budget=0.5,heads=perhead", "heads=perhead is neither ada"},
        {"f16;evict=h2o,budget=0.5,floor=0.3", "floor= applies only with heads=ada"},
        {"f16;evict=h2o,budget=0.5,heads=shared,floor=0.3", "floor= applies only with heads=ada"},
        {"f16;evict=h2o,budget=0.5,heads=ada,floor=1.5", "floor=1.5 is out of range"},
        {"f16;evict=h2o,budget=0.5,heads=ada,floor=-0.1", "floor=-0.1 is out of range"},
        {"f16;evict=h2o,budget=0.5,heads=ada,floor=x", "floor=x is out of range"},
        {"f16;evict=h2o,budget=0.5,heads=ada,heads=ada", "'heads' given twice"},
        {"f16;evict=h2o,heads=ada", "needs budget="},
    };
    for (size_t i = 0; i < VQ_ARRAY_LEN(bad); i++) {
        vq_kv *kv = vq_kv_create_str(bad[i].in, &D, 1, &err);
        CHECKF(!kv && err.code == VQ_ERR_ARG && strstr(err.msg, bad[i].says), "'%s': %s", bad[i].in,
               kv ? "accepted" : err.msg);
        vq_kv_destroy(kv);
    }
    char help[8192];
    size_t n = vq_kv_spec_help(help, sizeof help);
    CHECK(n < sizeof help && strstr(help, "heads=ada") && strstr(help, "floor="));
}

static const char *with_calib(char *buf, size_t cap, const char *codec, const char *evict) {
    const int need = strstr(evict, "qfilters") || strstr(evict, "expected_attention") || strstr(codec, "tq_split");
    snprintf(buf, cap, "%s%s%s%s%s", codec, evict[0] ? ";" : "", evict,
             need && !strstr(codec, "calib=") ? ";calib=" : "", need && !strstr(codec, "calib=") ? calib_path : "");
    return buf;
}

/* a budget covering every row: heads=ada changes no output bit, no row, and (up to the order of a
 * float sum over heads) no score */
static void big_budget(const float *K, const float *V, const float *Q, int N) {
    char tqs[200];
    snprintf(tqs, sizeof tqs, "k=tq_split:hi=4,lo=2,frac=0.25;v=turboquant_mse:bits=4;calib=%s", calib_path);
    const char *codecs[] = {"f16", "f32", "turboquant_mse:k=4,v=4", "kivi:bits=2", "q4_0;window=16,sink=3", tqs};
    const char *pols[] = {"h2o", "tova", "snapkv", "knorm", "keyformer", "streaming_llm", "qfilters", "expected_attention"};
    const size_t rb = sizeof(float) * (size_t)N * W;
    float *ka = malloc(rb), *va = malloc(rb), *kb = malloc(rb), *vb = malloc(rb);
    float *sa = malloc(sizeof(float) * N), *ss = malloc(sizeof(float) * N);
    int32_t *pa = malloc(sizeof(int32_t) * N), *pb = malloc(sizeof(int32_t) * N);
    float *oa = malloc(sizeof(float) * QW * NQ), *ob = malloc(sizeof(float) * QW * NQ), *os = malloc(sizeof(float) * QW * NQ);
    int qp[NQ];
    for (int i = 0; i < NQ; i++) qp[i] = N - 1 - (i * 37) % N;
    for (size_t c = 0; c < VQ_ARRAY_LEN(codecs); c++)
        for (size_t p = 0; p < VQ_ARRAY_LEN(pols); p++) {
            char ev[120], sa_[400], ss_[400], sb_[400];
            snprintf(ev, sizeof ev, "evict=%s,budget=%d,every=1,heads=ada", pols[p], 2 * N);
            with_calib(sa_, sizeof sa_, codecs[c], ev);
            snprintf(ev, sizeof ev, "evict=%s,budget=%d,every=1", pols[p], 2 * N);
            with_calib(ss_, sizeof ss_, codecs[c], ev);
            with_calib(sb_, sizeof sb_, codecs[c], "");
            vq_kv *a = make(sa_), *s = make(ss_), *b = make(sb_);
            if (!a || !s || !b) { vq_kv_destroy(a); vq_kv_destroy(s); vq_kv_destroy(b); continue; }
            fill_rows(a, K, V, N, 37);
            fill_rows(s, K, V, N, 37);
            fill_rows(b, K, V, N, 37);
            CHECK(vq_kv_evict_end(a, 0, N) == 0 && vq_kv_evict_end(s, 0, N) == 0);
            vq_err err;
            int same = 1, rows_same = 1, scores_ok = 1;
            double worst = 0;
            for (int l = 0; l < D.n_layers; l++) {
                for (int step = 0; step < 2; step++) {   /* a prompt chunk of NQ queries, then one decode query */
                    const int nq = step ? 1 : NQ;
                    vq_kv_evict_begin(a, step ? N - 1 : 0, step ? 1 : N);
                    vq_kv_evict_begin(s, step ? N - 1 : 0, step ? 1 : N);
                    CHECK(vq_kv_attend(a, l, nq, qp, Q, oa, &err) == VQ_OK);
                    CHECK(vq_kv_attend(s, l, nq, qp, Q, os, &err) == VQ_OK);
                    CHECK(vq_kv_attend(b, l, nq, qp, Q, ob, &err) == VQ_OK);
                    same &= !memcmp(oa, ob, sizeof(float) * QW * nq) && !memcmp(os, ob, sizeof(float) * QW * nq);
                }
                CHECK(vq_kv_read(a, l, ka, va, pa, &err) == VQ_OK && vq_kv_read(b, l, kb, vb, pb, &err) == VQ_OK);
                rows_same &= vq_kv_rows(a, l) == N && !memcmp(ka, kb, rb) && !memcmp(va, vb, rb) &&
                             !memcmp(pa, pb, sizeof(int32_t) * N);
                for (int h = 0; h < D.n_kv_heads; h++) rows_same &= vq_kv_head_rows(a, l, h) == N;
                vq_status s1 = vq_kv_evict_scores(a, l, sa, pa, &err), s2 = vq_kv_evict_scores(s, l, ss, pb, &err);
                scores_ok &= s1 == VQ_OK && s2 == VQ_OK;
                for (int r = 0; !s1 && !s2 && r < N - 3 * !!strstr(codecs[c], "sink=3"); r++) {
                    scores_ok &= pa[r] == pb[r];
                    worst = fmax(worst, fabs((double)sa[r] - ss[r]) / (1.0 + fabs(ss[r])));
                }
            }
            CHECKF(same, "%s: attention outputs differ from no eviction / the shared layout", sa_);
            CHECKF(rows_same, "%s: rows read back differ from no eviction", sa_);
            CHECKF(scores_ok && worst <= 1e-5, "%s: scores differ from the shared layout's by %.3g", sa_, worst);
            CHECKF(vq_kv_bytes(a) == vq_kv_bytes_tally(a), "%s: bytes %zu tally %zu", sa_, vq_kv_bytes(a),
                   vq_kv_bytes_tally(a));
            /* the cache layer's codec states are the shared layout's (same seeds, same per-head states) */
            for (int l = 0; l < D.n_layers; l++)
                for (int sd = 0; sd < 2; sd++) {
                    const vq_codec_state *x = vq_kv_codec_state(a, l, sd), *y = vq_kv_codec_state(b, l, sd);
                    CHECK(x && y && x->codec == y->codec && x->state_bytes == y->state_bytes &&
                          x->ctx.layer == y->ctx.layer && x->ctx.head == y->ctx.head);
                }
            vq_kv_destroy(a); vq_kv_destroy(s); vq_kv_destroy(b);
        }
    free(ka); free(va); free(kb); free(vb); free(sa); free(ss); free(pa); free(pb); free(oa); free(ob); free(os);
}

/* float64 attention in which KV head h's query group sees only the rows kh/vh/ph of that head */
static double per_head_err(vq_kv *kv, int l, int nq, const int *qp, const float *Q, const float *out) {
    const int d = D.head_dim, G = D.n_heads / D.n_kv_heads, cap = D.max_ctx;
    float *kh = malloc(sizeof(float) * cap * d), *vh = malloc(sizeof(float) * cap * d);
    float *qh = malloc(sizeof(float) * nq * G * d);
    int32_t *ph = malloc(sizeof(int32_t) * cap);
    double *rh = malloc(sizeof(double) * nq * G * d), *ref = malloc(sizeof(double) * nq * QW);
    vq_err err;
    for (int h = 0; h < D.n_kv_heads; h++) {
        const int rows = vq_kv_head_rows(kv, l, h);
        CHECK(vq_kv_read_head(kv, l, h, kh, vh, ph, &err) == VQ_OK);
        for (int i = 0; i < nq; i++)
            memcpy(qh + (size_t)i * G * d, Q + (size_t)i * QW + (size_t)h * G * d, sizeof(float) * G * d);
        ref_attention(rows, kh, vh, ph, 1, G, d, nq, qp, qh, rh);
        for (int i = 0; i < nq; i++)
            memcpy(ref + (size_t)i * QW + (size_t)h * G * d, rh + (size_t)i * G * d, sizeof(double) * G * d);
    }
    double e = rel_err(nq, D.n_heads, d, out, ref);
    free(kh); free(vh); free(qh); free(ph); free(rh); free(ref);
    return e;
}

/* a different known set evicted from each KV head; each head keeps exactly the rest */
static void known_sets(vq_rng *r, const float *K, const float *V, const float *Q, int N) {
    const char *codecs[] = {"f16", "f32", "q8_0", "turboquant_mse:k=4,v=4", "kivi:bits=2,group=32",
                            "q4_0;window=24,sink=3"};
    const int d = D.head_dim;
    float *kh = malloc(sizeof(float) * N * d), *vh = malloc(sizeof(float) * N * d);
    float *kf = malloc(sizeof(float) * N * W), *vf = malloc(sizeof(float) * N * W);
    int32_t *pos = malloc(sizeof(int32_t) * N), *pos0 = malloc(sizeof(int32_t) * N), *drop = malloc(sizeof(int32_t) * N);
    float *out = malloc(sizeof(float) * QW * 3);
    for (size_t c = 0; c < VQ_ARRAY_LEN(codecs); c++) {
        char spec[200];
        snprintf(spec, sizeof spec, "%s;evict=h2o,budget=%d,heads=ada", codecs[c], D.max_ctx);
        vq_kv *kv = make(spec);
        if (!kv) continue;
        fill_rows(kv, K, V, N, 29);
        vq_err err;
        const int rpb = strstr(codecs[c], "kivi") ? 32 : strncmp(codecs[c], "f", 1) ? 16 : 1;
        const int S = strstr(codecs[c], "sink=3") ? 3 : 0, R = vq_kv_window_rows(kv);
        for (int l = 0; l < D.n_layers; l++) {
            const int pages0 = vq_kv_pages(kv, l);
            int nd_all = 0, ok_all = 1;
            for (int h = 0; h < D.n_kv_heads; h++) {
                const int rows0 = vq_kv_head_rows(kv, l, h), m = rows0 - S;
                const int coded = m >= R + rpb ? (m - R) / rpb * rpb : 0;
                CHECK(rows0 == N && vq_kv_read_head(kv, l, h, kh, vh, pos0, &err) == VQ_OK);
                int nd = 0;   /* head 0 also loses a whole page (rows 256..511); each head its own blocks */
                for (int b = 0; b * rpb + rpb <= coded; b++) {
                    int first = pos0[b * rpb];
                    int go = (h == 0 && first >= 256 && first < 512) || vq_rng_uniformf(r) < 0.15f + 0.2f * h;
                    for (int t = 0; go && t < rpb; t++) drop[nd++] = pos0[b * rpb + t];
                }
                vq_status st = vq_kv_evict_head_positions(kv, l, h, drop, nd, &err);
                CHECKF(st == VQ_OK, "%s layer %d head %d: %s", codecs[c], l, h, err.msg);
                if (st) continue;
                nd_all += nd;
                const int rows = vq_kv_head_rows(kv, l, h);
                CHECK(vq_kv_read_head(kv, l, h, kh, vh, pos, &err) == VQ_OK);
                int ok = rows == rows0 - nd, j = 0;
                for (int i = 0; i < rows0; i++) {
                    int gone = 0;
                    for (int e = 0; e < nd && !gone; e++) gone = drop[e] == pos0[i];
                    if (gone) continue;
                    ok &= j < rows && pos[j] == pos0[i];
                    j++;
                }
                ok_all &= ok && j == rows;
            }
            CHECKF(ok_all && nd_all > 0, "%s layer %d: a head's kept positions are not its complement", codecs[c], l);
            CHECKF(vq_kv_pages(kv, l) < pages0, "%s: pages %d -> %d (head 0's dropped page must be freed)", codecs[c],
                   pages0, vq_kv_pages(kv, l));
            int qp[3] = {N - 1, 400, 200};
            CHECK(vq_kv_attend(kv, l, 3, qp, Q, out, &err) == VQ_OK);
            double e = per_head_err(kv, l, 3, qp, Q, out);
            CHECKF(e <= 1e-5, "%s layer %d: attention after per-head eviction off by %.3g", codecs[c], l, e);
            vq_kv_set_ref_attend(kv, 1);   /* the float64 debug path reads per head too */
            CHECK(vq_kv_attend(kv, l, 3, qp, Q, out, &err) == VQ_OK);
            vq_kv_set_ref_attend(kv, 0);
            e = per_head_err(kv, l, 3, qp, Q, out);
            CHECKF(e <= 1e-6, "%s layer %d: the reference attention path off by %.3g", codecs[c], l, e);
            /* the heads hold different rows now: one row list for the layer does not exist */
            CHECKF(vq_kv_read(kv, l, kf, vf, pos, &err) == VQ_ERR_STATE && strstr(err.msg, "vq_kv_read_head"),
                   "%s: layer read: %s", codecs[c], err.msg);
            CHECK(vq_kv_evict_scores(kv, l, kf, pos, &err) == VQ_ERR_STATE);
        }
        CHECKF(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv), "%s: bytes %zu, tally %zu", codecs[c], vq_kv_bytes(kv),
               vq_kv_bytes_tally(kv));
        CHECK(vq_kv_append(kv, 0, N, 1, K, V, &err) == VQ_OK);   /* appends go on at true positions */
        const int t = vq_kv_truncate(kv, N - 50);
        CHECKF(t <= N - 50 && t > N - 50 - 64, "%s: truncate(%d) = %d", codecs[c], N - 50, t);
        for (int h = 0; h < D.n_kv_heads; h++) {
            CHECK(vq_kv_read_head(kv, 0, h, kh, vh, pos, &err) == VQ_OK);
            int below = 1;
            for (int i = 0; i < vq_kv_head_rows(kv, 0, h); i++) below &= pos[i] < t;
            CHECKF(below, "%s: head %d holds a position >= %d after truncate", codecs[c], h, t);
        }
        vq_kv_destroy(kv);
    }
    /* the layer-wide call drops from every head; the per-head one needs heads=ada */
    vq_kv *kv = make("f16;evict=h2o,budget=700,heads=ada"), *sh = make("f16");
    if (kv && sh) {
        vq_err err;
        fill_rows(kv, K, V, 64, 64);
        fill_rows(sh, K, V, 64, 64);
        int32_t p2[2] = {10, 11}, p9 = 999;
        CHECK(vq_kv_evict_positions(kv, 0, p2, 2, &err) == VQ_OK);
        for (int h = 0; h < D.n_kv_heads; h++) CHECK(vq_kv_head_rows(kv, 0, h) == 62);
        CHECK(vq_kv_evict_positions(kv, 0, &p9, 1, &err) == VQ_ERR_ARG && strstr(err.msg, "KV head 0"));
        CHECK(vq_kv_evict_head_positions(kv, 0, 1, p2, 1, &err) == VQ_ERR_ARG && strstr(err.msg, "head 1"));
        CHECK(vq_kv_evict_head_positions(sh, 0, 1, p2, 1, &err) == VQ_ERR_ARG && strstr(err.msg, "heads=ada"));
        CHECK(vq_kv_rows(kv, 0) == 62 && vq_kv_read(kv, 0, kf, vf, pos, &err) == VQ_OK && pos[10] == 12);
    }
    vq_kv_destroy(kv);
    vq_kv_destroy(sh);
    free(kh); free(vh); free(kf); free(vf); free(pos); free(pos0); free(drop); free(out);
}

/* The allocation a brute force expects: ranks by counting, pairwise, the candidates that beat one
 * (higher score; tie: newer block, then lower head). keep[i] for the candidates in their order. */
static int beats(const vq_ada_cand *x, const vq_ada_cand *y) {
    return x->s > y->s || (x->s == y->s && (x->b > y->b || (x->b == y->b && x->h < y->h)));
}
static void brute_alloc(const vq_ada_cand *c, int n, int H, const int *prot, int rpb, int B, double floor,
                        unsigned char *keep) {
    const long F = (long)ceil(floor * B);
    unsigned char *forced = calloc((size_t)n + 1, 1);
    long total = 0;
    for (int h = 0; h < H; h++) total += prot[h];
    for (int i = 0; i < n; i++) {
        const int h = c[i].h;
        const long up = F > prot[h] ? (F - prot[h] + rpb - 1) / rpb : 0, cap = B > prot[h] ? (B - prot[h]) / rpb : 0;
        const long need = VQ_MIN(up, cap);   /* the floor in whole blocks, never past the budget */
        long better = 0;
        for (int j = 0; j < n; j++) better += c[j].h == h && beats(&c[j], &c[i]);
        forced[i] = better < need;
        total += forced[i] ? rpb : 0;
    }
    const long room = (long)H * B > total ? ((long)H * B - total) / rpb : 0;
    for (int i = 0; i < n; i++) {
        long better = 0;
        for (int j = 0; j < n && !forced[i]; j++) better += !forced[j] && beats(&c[j], &c[i]);
        keep[i] = forced[i] || better < room;
    }
    free(forced);
}

static void allocator(vq_rng *r) {
    int bad_set = 0, bad_floor = 0, bad_total = 0, bad_rows = 0, bad_order = 0;
    vq_ada_cand *c = malloc(sizeof *c * 300), *orig = malloc(sizeof *c * 300);
    unsigned char *want = malloc(300);
    for (int it = 0; it < 400; it++) {
        const int H = 1 + below(r, 6), rpbs[3] = {1, 16, 32}, rpb = rpbs[below(r, 3)];
        const double floors[4] = {0.0, 0.2, 0.5, 1.0}, floor = floors[below(r, 4)];
        const int ties = it % 3 == 0;   /* scores on 4 levels: ties everywhere */
        int prot[8], nc[8], kept[8], n = 0;
        long have = 0;
        for (int h = 0; h < H; h++) {
            prot[h] = below(r, 50);
            nc[h] = below(r, 40);
            for (int b = 0; b < nc[h]; b++) {
                float u = vq_rng_uniformf(r);
                orig[n++] = (vq_ada_cand){ties ? floorf(u * 4) / 4 : u * (1.0f + h), h, b, 0};
            }
            have += prot[h] + (long)nc[h] * rpb;
        }
        const int B = 1 + below(r, (int)(have / H + 1));
        memcpy(c, orig, sizeof *c * n);
        const int k = vq_ada_alloc(c, n, H, prot, rpb, B, floor, kept);
        brute_alloc(orig, n, H, prot, rpb, B, floor, want);
        /* the same (head, block) pairs kept */
        int nk = 0;
        for (int i = 0; i < n; i++) {
            int found = -1;
            for (int j = 0; j < n && found < 0; j++)
                if (c[j].h == orig[i].h && c[j].b == orig[i].b) found = j;
            bad_set += found < 0 || c[found].keep != want[i];
            nk += want[i];
        }
        bad_set += nk != k;
        /* per head: its rows, at least the floor (or everything it has) */
        const long F = (long)ceil(floor * B);
        long total = 0, t0 = 0;
        for (int h = 0; h < H; h++) {
            int kh = 0;
            for (int i = 0; i < n; i++) kh += c[i].h == h && c[i].keep;
            bad_rows += kept[h] != prot[h] + kh * rpb;
            bad_floor += kept[h] < VQ_MIN(F, prot[h] + (long)nc[h] * rpb) - (rpb - 1);
            total += kept[h];
            const long up = F > prot[h] ? (F - prot[h] + rpb - 1) / rpb : 0, cap = B > prot[h] ? (B - prot[h]) / rpb : 0;
            t0 += prot[h] + VQ_MIN((long)nc[h], VQ_MIN(up, cap)) * rpb;   /* the protected and forced rows */
        }
        /* the layer: H x B at most (unless the protected and the forced rows alone exceed it: a
         * head's protected rows may pass B while the floors fill the others), and within a block
         * of it unless every candidate is kept */
        if (t0 <= (long)H * B) bad_total += total > (long)H * B || (k < n && total <= (long)H * B - rpb);
        /* every kept candidate the floors did not force outranks every dropped one */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                if (c[i].keep && !c[j].keep) {
                    int need = 0;
                    for (int q = 0; q < n; q++) need += c[q].h == c[i].h && c[q].keep && beats(&c[q], &c[i]);
                    const int forced = F > prot[c[i].h] && (long)need * rpb < F - prot[c[i].h] &&
                                       prot[c[i].h] + (long)(need + 1) * rpb <= B;
                    bad_order += !forced && beats(&c[j], &c[i]);
                }
    }
    CHECKF(!bad_set, "allocator: %d kept sets differ from the brute force", bad_set);
    CHECKF(!bad_floor && !bad_rows, "allocator: %d heads below the floor, %d wrong row counts", bad_floor, bad_rows);
    CHECKF(!bad_total && !bad_order, "allocator: %d totals off H x budget, %d rank inversions", bad_total, bad_order);
    free(c); free(orig); free(want);
}

/* knorm's scores are known in closed form: a step keeps exactly the brute force's rows per head */
static void knorm_step(const float *K0, const float *V, int N) {
    const int d = D.head_dim, H = D.n_kv_heads, B = 150, sinks = 4, recent = 16, next = 400;
    float *K = malloc(sizeof(float) * N * W);
    for (size_t i = 0; i < (size_t)N * W; i++) K[i] = K0[i] * ((i / d) % H == 1 ? 0.7f : 1.0f);   /* head 1: low norms */
    vq_kv *kv = make("f16;evict=knorm,budget=150,sinks=4,recent=16,heads=ada,floor=0.2");
    if (!kv) { free(K); return; }
    vq_err err;
    for (int l = 0; l < D.n_layers; l++) CHECK(vq_kv_append(kv, l, 0, next, K, V, &err) == VQ_OK);
    vq_kv_evict_begin(kv, 0, next);
    CHECK(vq_kv_evict_end(kv, 0, next) > 0);
    vq_ada_cand *c = malloc(sizeof *c * H * next);
    unsigned char *want = malloc((size_t)H * next);
    float *kh = malloc(sizeof(float) * next * d), *vh = malloc(sizeof(float) * next * d);
    int32_t *pos = malloc(sizeof(int32_t) * next);
    int n = 0, prot[3] = {sinks + recent, sinks + recent, sinks + recent};
    for (int h = 0; h < H; h++)
        for (int p = sinks; p < next - recent; p++) {
            double s = 0;
            for (int e = 0; e < d; e++) {
                double x = K[(size_t)p * W + (size_t)h * d + e];
                s += x * x;
            }
            c[n++] = (vq_ada_cand){-(float)sqrt(s), h, p, 0};
        }
    brute_alloc(c, n, H, prot, 1, B, 0.2, want);
    for (int l = 0; l < D.n_layers; l++) {
        int ok = 1, total = 0, rows[3];
        for (int h = 0; h < H; h++) {
            rows[h] = vq_kv_head_rows(kv, l, h);
            total += rows[h];
            CHECK(vq_kv_read_head(kv, l, h, kh, vh, pos, &err) == VQ_OK);
            unsigned char *held = calloc(next, 1);
            for (int i = 0; i < rows[h]; i++) held[pos[i]] = 1;
            for (int p = 0; p < next; p++) {
                int w = p < sinks || p >= next - recent;
                for (int i = 0; i < n; i++) if (c[i].h == h && c[i].b == p) w = want[i];
                ok &= held[p] == w;
            }
            free(held);
        }
        CHECKF(ok, "knorm heads=ada layer %d: the kept rows per head are not the brute force's", l);
        CHECKF(total == H * B && rows[1] > rows[0] && rows[0] >= 30 && rows[2] >= 30,
               "knorm heads=ada layer %d: rows per head %d %d %d (budget %d x %d, floor 30)", l, rows[0], rows[1],
               rows[2], H, B);
    }
    vq_kv_destroy(kv);
    free(K); free(c); free(want); free(kh); free(vh); free(pos);
}

/* decode-time steps: the layer's total within H x budget, every head above the floor, sinks and
 * recent rows in every head, attention equal to the per-head float64 reference */
static void steps(const float *K, const float *V, const float *Q, int N) {
    const char *specs[] = {"f16;evict=h2o,budget=200,sinks=4,recent=32,every=4,heads=ada",
                           "turboquant_mse:k=4,v=4;evict=tova,budget=0.5,sinks=4,recent=32,every=4,heads=ada,floor=0.5",
                           "q4_0;window=20;evict=snapkv,budget=150,sinks=2,recent=8,every=4,heads=ada,floor=0",
                           "kivi:bits=2,group=32;evict=keyformer,budget=0.3,every=4,heads=ada"};
    const int d = D.head_dim, H = D.n_kv_heads;
    int32_t *pos = malloc(sizeof(int32_t) * D.max_ctx);
    float *kh = malloc(sizeof(float) * D.max_ctx * d), *vh = malloc(sizeof(float) * D.max_ctx * d);
    float *out = malloc(sizeof(float) * QW * 3);
    vq_err err;
    for (size_t s = 0; s < VQ_ARRAY_LEN(specs); s++) {
        vq_kv *kv = make(specs[s]);
        if (!kv) continue;
        const int P = 400;
        for (int l = 0; l < D.n_layers; l++) vq_kv_append(kv, l, 0, P, K, V, &err);
        vq_kv_evict_begin(kv, 0, P);
        for (int l = 0; l < D.n_layers; l++) {   /* the prompt's last queries, for snapkv */
            int qp[3] = {P - 3, P - 2, P - 1};
            vq_kv_attend(kv, l, 3, qp, Q, out, &err);
        }
        vq_kv_evict_end(kv, 0, P);
        for (int p = P; p < N; p++) {
            vq_kv_evict_begin(kv, p, 1);
            for (int l = 0; l < D.n_layers; l++) {
                CHECK(vq_kv_append(kv, l, p, 1, K + (size_t)p * W, V + (size_t)p * W, &err) == VQ_OK);
                CHECK(vq_kv_attend(kv, l, 1, &p, Q + (size_t)(p % 4) * QW, out, &err) == VQ_OK);
            }
            vq_kv_evict_end(kv, p, 1);
        }
        vq_kv_evict_now(kv, N);
        const char *bs = strstr(specs[s], "budget=") + 7, *fs = strstr(specs[s], "floor=");
        char *end = NULL;
        const double bv = strtod(bs, &end);
        const int B = memchr(bs, '.', (size_t)(end - bs)) ? (int)ceil(bv * N) : (int)bv;
        const double fl = fs ? atof(fs + 6) : 0.2;
        const int rpb = strstr(specs[s], "kivi") ? 32 : strncmp(specs[s], "f", 1) ? 16 : 1;
        const int sinks = strstr(specs[s], "sinks=2") ? 2 : 4;
        int recent = strstr(specs[s], "recent=8") ? 8 : 32;
        if (strstr(specs[s], "window=20")) recent = VQ_MAX(recent, 20);
        int differ = 0;
        for (int l = 0; l < D.n_layers; l++) {
            int total = 0;
            for (int h = 0; h < H; h++) {
                const int rows = vq_kv_head_rows(kv, l, h);
                total += rows;
                differ |= rows != vq_kv_head_rows(kv, l, 0);
                CHECKF(rows >= (int)ceil(fl * B) - (rpb - 1), "%s layer %d head %d: %d rows, floor %g x %d", specs[s], l, h, rows, fl, B);
                CHECK(vq_kv_read_head(kv, l, h, kh, vh, pos, &err) == VQ_OK);
                int have = 0;
                for (int r = 0; r < rows; r++) have += pos[r] < sinks || pos[r] >= N - recent;
                CHECKF(have == sinks + recent, "%s layer %d head %d: %d of the %d sink and recent rows kept", specs[s],
                       l, h, have, sinks + recent);
            }
            CHECKF(total <= H * B && total > H * B - rpb, "%s layer %d: %d rows, budget %d x %d", specs[s], l, total, H, B);
            int qp[3] = {N - 1, N - 40, 300};
            CHECK(vq_kv_attend(kv, l, 3, qp, Q, out, &err) == VQ_OK);
            double e = per_head_err(kv, l, 3, qp, Q, out);
            CHECKF(e <= 1e-5, "%s layer %d: attention off by %.3g", specs[s], l, e);
        }
        /* adaptive: the heads' row counts differ (kivi's 128-row window leaves one or two 32-row
         * candidate blocks a head: equal counts there are no failure) */
        CHECKF(differ || rpb == 32, "%s: every head kept the same number of rows", specs[s]);
        CHECK(vq_kv_evicted(kv) > 0);
        CHECKF(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv), "%s: bytes %zu tally %zu", specs[s], vq_kv_bytes(kv),
               vq_kv_bytes_tally(kv));
        vq_kv_destroy(kv);
    }
    free(pos); free(kh); free(vh); free(out);
}

/* one KV head: the allocation has one head to give the budget to, so heads=ada must keep exactly
 * the shared layout's rows (any floor <= 1 forces only rows the budget keeps anyway) */
static void one_head(const float *K, const float *V, const float *Q, int N) {
    vq_kv_dims D1 = {.n_layers = 2, .n_heads = 2, .n_kv_heads = 1, .head_dim = 64, .max_ctx = 700};
    const char *specs[] = {"f16;evict=h2o,budget=180,every=4", "turboquant_mse:k=4,v=4;evict=snapkv,budget=0.3,every=4",
                           "q4_0;window=20;evict=knorm,budget=150,sinks=2,recent=8,every=4"};
    const size_t w = 64, qw = 128;
    float *ka = malloc(sizeof(float) * N * w), *kb = malloc(sizeof(float) * N * w), *va = malloc(sizeof(float) * N * w),
          *vb = malloc(sizeof(float) * N * w), *oa = malloc(sizeof(float) * qw), *ob = malloc(sizeof(float) * qw);
    int32_t *pa = malloc(sizeof(int32_t) * N), *pb = malloc(sizeof(int32_t) * N);
    for (size_t s = 0; s < VQ_ARRAY_LEN(specs); s++) {
        char ada[200];
        snprintf(ada, sizeof ada, "%s,heads=ada,floor=%s", specs[s], s == 1 ? "1" : "0.2");
        vq_err err;
        vq_kv *a = vq_kv_create_str(ada, &D1, 7, &err), *b = vq_kv_create_str(specs[s], &D1, 7, &err);
        CHECKF(a && b, "%s: %s", ada, err.msg);
        if (!a || !b) { vq_kv_destroy(a); vq_kv_destroy(b); continue; }
        int same = 1;
        for (int p = 0; p < N; p += (p < 300 ? 300 : 1)) {   /* a prompt of 300, then decode steps */
            const int n = p < 300 ? 300 : 1;
            vq_kv *c[2] = {a, b};
            for (int i = 0; i < 2; i++) {
                vq_kv_evict_begin(c[i], p, n);
                for (int l = 0; l < 2; l++) {
                    /* the cache's rows are 64 floats: K's first head's rows, taken with stride */
                    for (int r = 0; r < n; r++) {
                        CHECK(vq_kv_append(c[i], l, p + r, 1, K + (size_t)(p + r) * W, V + (size_t)(p + r) * W, &err) == VQ_OK);
                    }
                    const int q = p + n - 1;
                    CHECK(vq_kv_attend(c[i], l, 1, &q, Q + (size_t)(q % 4) * QW, i ? ob : oa, &err) == VQ_OK);
                }
                vq_kv_evict_end(c[i], p, n);
            }
            same &= !memcmp(oa, ob, sizeof(float) * qw);
        }
        for (int l = 0; l < 2; l++) {
            same &= vq_kv_rows(a, l) == vq_kv_rows(b, l) && vq_kv_rows(a, l) < N;
            CHECK(vq_kv_read(a, l, ka, va, pa, &err) == VQ_OK && vq_kv_read(b, l, kb, vb, pb, &err) == VQ_OK);
            same &= !memcmp(pa, pb, sizeof(int32_t) * vq_kv_rows(b, l)) && !memcmp(ka, kb, sizeof(float) * w * vq_kv_rows(b, l));
        }
        CHECKF(same && vq_kv_evicted(a) == vq_kv_evicted(b) && vq_kv_evicted(a) > 0,
               "%s: one KV head, rows or outputs differ from the shared layout", ada);
        vq_kv_destroy(a); vq_kv_destroy(b);
    }
    free(ka); free(kb); free(va); free(vb); free(oa); free(ob); free(pa); free(pb);
}

int main(void) {
    uint64_t seed = test_seed();
    vq_rng r;
    vq_rng_seed(&r, seed);
    const int N = 640;
    vq_t_tmpfile("vq_adakv_calib", calib_path, sizeof calib_path);
    vq_t_calib_file(calib_path, D.n_layers, D.n_heads, D.n_kv_heads, D.head_dim, &r);
    float *K = malloc(sizeof(float) * N * W), *V = malloc(sizeof(float) * N * W), *Q = malloc(sizeof(float) * NQ * QW);
    fill_uniform(&r, K, N * W, 2.0f);
    fill_uniform(&r, V, N * W, 1.0f);
    fill_uniform(&r, Q, NQ * QW, 2.0f);
    parsing();
    allocator(&r);
    big_budget(K, V, Q, N);
    known_sets(&r, K, V, Q, N);
    knorm_step(K, V, N);
    steps(K, V, Q, N);
    one_head(K, V, Q, N);
    unlink(calib_path);
    free(K); free(V); free(Q);
    return vq_t_done();
}
