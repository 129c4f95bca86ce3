/* test_session_demote.c: demote mode through a session on a real model (stories260K; head_dim 8,
 * so the tiers are f32/f16 here: the codecs with 32-wide blocks need head_dim >= 32).
 *   - f32 rows demoted into an f32 tier lose nothing: 60 greedy steps after a prompt-end step give
 *     logits within 1e-4 of a session without eviction (only the two tiers' softmax merge rounds
 *     differently) and the same tokens; every demoted row is bit-identical to the row the session
 *     held at that position in its main tier (a prompt row: the no-eviction session's, computed
 *     before any step; a later row: the session's own as appended; in layer 0, whose rows depend
 *     on the token alone, the no-eviction session's at every position: the rotary phase is the
 *     true position's), and the two tiers hold every position once. (A later row of a deeper layer
 *     is not the no-eviction session's bit for bit: it comes from attention whose two-tier merge
 *     rounds differently.)
 *   - into an f16 tier: each demoted row is the fp16 rounding of that row;
 *   - generation runs with a policy and a tier, truncate keeps only positions below its result
 *     and decoding goes on; saving is refused. */
#include "veloxquant.h"
#include "session/session_impl.h"
#include "../vq_test.h"

static vq_session *mk(const vq_model *m, const char *spec, int n_ctx) {
    vq_err e;
    vq_kv_spec *sp = vq_kv_spec_parse(spec, &e);
    CHECKF(sp != NULL, "%s: %s", spec, sp ? "" : e.msg);
    if (!sp) return NULL;
    vq_session_params p = vq_session_default_params();
    p.n_ctx = n_ctx;
    p.n_batch = 32;
    vq_session *s = vq_session_create(m, sp, &p, &e);
    CHECKF(s != NULL, "%s: %s", spec, s ? "" : e.msg);
    vq_kv_spec_free(sp);
    return s;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

/* every row of layer l of s, both tiers: k, v, pos (buffers of n_ctx rows); returns the count and
 * the main tier's in *nm */
static int rows_of(vq_session *s, int l, float *k, float *v, int32_t *pos, int *nm) {
    vq_kv *kv = vq_session_kv(s);
    const vq_kv_dims d = vq_model_kv_dims(s->m, 8);
    const size_t w = (size_t)d.n_kv_heads * d.head_dim;
    vq_err e;
    *nm = vq_kv_rows(kv, l);
    CHECK(vq_kv_read(kv, l, k, v, pos, &e) == VQ_OK);
    const int nt = vq_kv_demoted_rows(kv, l);
    if (nt) CHECK(vq_kv_read_demoted(kv, l, k + (size_t)*nm * w, v + (size_t)*nm * w, pos + *nm, &e) == VQ_OK);
    return *nm + nt;
}

/* rows as held in the main tier: [layer][position] x w floats each side, and which are set */
typedef struct hist { float *k, *v; unsigned char *set; size_t w; int n_ctx; } hist;

/* record every row of s's main tier at a position >= from (a row never changes while it is there) */
static void record(hist *H, vq_session *s, int NL, int from) {
    float *k = malloc(sizeof(float) * H->n_ctx * H->w), *v = malloc(sizeof(float) * H->n_ctx * H->w);
    int32_t *pos = malloc(sizeof(int32_t) * H->n_ctx);
    vq_err e;
    for (int l = 0; l < NL; l++) {
        const int n = vq_kv_rows(vq_session_kv(s), l);
        CHECK(vq_kv_read(vq_session_kv(s), l, k, v, pos, &e) == VQ_OK);
        for (int i = 0; i < n; i++) {
            if (pos[i] < from) continue;
            const size_t at = ((size_t)l * H->n_ctx + pos[i]) * H->w;
            memcpy(H->k + at, k + (size_t)i * H->w, sizeof(float) * H->w);
            memcpy(H->v + at, v + (size_t)i * H->w, sizeof(float) * H->w);
            H->set[(size_t)l * H->n_ctx + pos[i]] = 1;
        }
    }
    free(k); free(v); free(pos);
}

/* layer l's demoted rows of A against the rows A held there (f16: rounded) and, in layer 0,
 * against C's rows at the same positions; every position held once over A's two tiers; returns
 * the demoted rows compared */
static int check_tier(vq_session *A, vq_session *C, const hist *H, int NL, int n_ctx, int f16, int *bad) {
    const vq_kv_dims d = vq_model_kv_dims(A->m, n_ctx);
    const size_t w = (size_t)d.n_kv_heads * d.head_dim;
    float *ka = malloc(sizeof(float) * n_ctx * w), *va = malloc(sizeof(float) * n_ctx * w);
    float *kc = malloc(sizeof(float) * n_ctx * w), *vc = malloc(sizeof(float) * n_ctx * w), *t = malloc(sizeof(float) * w);
    int32_t *pa = malloc(sizeof(int32_t) * n_ctx), *pc = malloc(sizeof(int32_t) * n_ctx);
    vq_f16 *h = malloc(sizeof(vq_f16) * w);
    unsigned char *seen = malloc(n_ctx);
    int n_cmp = 0;
    for (int l = 0; l < NL; l++) {
        int nm, nmc;
        const int n = rows_of(A, l, ka, va, pa, &nm), nc = rows_of(C, l, kc, vc, pc, &nmc);
        memset(seen, 0, n_ctx);
        int dup = 0;
        for (int i = 0; i < n; i++) { dup += seen[pa[i]]; seen[pa[i]] = 1; }
        *bad += n != vq_session_pos(A) || dup || nc != n;
        for (int i = nm; i < n; i++) {
            const size_t at = ((size_t)l * n_ctx + pa[i]) * w;
            if (!H->set[(size_t)l * n_ctx + pa[i]]) { (*bad)++; continue; }
            int j = 0;
            while (j < nc && pc[j] != pa[i]) j++;
            if (j == nc) { (*bad)++; continue; }
            for (int s = 0; s < 2; s++) {
                const float *src = (s ? H->v : H->k) + at, *got = (s ? va : ka) + (size_t)i * w;
                memcpy(t, src, sizeof(float) * w);
                if (f16) { vq_f32_to_f16_row(src, h, w); vq_f16_to_f32_row(h, t, w); }
                *bad += memcmp(t, got, sizeof(float) * w) != 0;
                if (l == 0) *bad += memcmp(src, (s ? vc : kc) + (size_t)j * w, sizeof(float) * w) != 0;
            }
            n_cmp++;
        }
    }
    free(ka); free(va); free(kc); free(vc); free(t); free(pa); free(pc); free(h); free(seen);
    return n_cmp;
}

int main(void) {
    char mp[1024], tp[1024];
    vq_t_shared("data/stories260K.bin", mp, sizeof mp);
    vq_t_shared("data/tok512.bin", tp, sizeof tp);
    vq_err e;
    vq_model_params mpp = vq_model_default_params();
    mpp.tokenizer_path = tp;
    vq_model *m = vq_model_load(mp, &mpp, &e);
    CHECKF(m != NULL, "load: %s", m ? "" : e.msg);
    if (!m) return vq_t_done();
    const int V = vq_model_n_vocab(m), NL = vq_model_n_layers(m), n_ctx = 256;
    const char *text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
                       "park with her friends. One day, she saw a big red ball under a tree.";
    int prompt[200];
    int np = vq_tokenize(m, text, strlen(text), 1, 0, prompt, 200, &e);
    CHECKF(np > 30, "tokenize: %d", np);
    float *la = malloc(sizeof(float) * V), *lc = malloc(sizeof(float) * V);

    const char *specs[] = {"f32;evict=h2o,budget=40,sinks=4,recent=8,every=4;demote=f32",
                           "f32;evict=snapkv,budget=0.5,obs=8,every=3;demote=f32",
                           "f32;evict=tova,budget=24,sinks=2,recent=4,every=5;demote=f16"};
    for (size_t s = 0; s < VQ_ARRAY_LEN(specs); s++) {
        const int f16 = strstr(specs[s], "demote=f16") != NULL;
        vq_session *A = mk(m, specs[s], n_ctx), *C = mk(m, "f32", n_ctx);
        if (!A || !C) { vq_session_free(A); vq_session_free(C); continue; }
        CHECK(vq_session_decode(A, prompt, np, la, 0, &e) == VQ_OK);
        CHECK(vq_session_decode(C, prompt, np, lc, 0, &e) == VQ_OK);
        const vq_kv_dims dd = vq_model_kv_dims(m, n_ctx);
        hist H = {.w = (size_t)dd.n_kv_heads * dd.head_dim, .n_ctx = n_ctx};
        H.k = malloc(sizeof(float) * NL * n_ctx * H.w);
        H.v = malloc(sizeof(float) * NL * n_ctx * H.w);
        H.set = calloc((size_t)NL * n_ctx, 1);
        record(&H, C, NL, 0);   /* the prompt's rows, as computed before any eviction step */
        double worst = 0;
        int same_tok = 1, bad = 0, cmp = 0;
        for (int g = 0; g < 60; g++) {
            for (int i = 0; i < V; i++) worst = fmax(worst, fabs(la[i] - lc[i]));
            same_tok &= argmax(la, V) == argmax(lc, V);
            int t = argmax(lc, V);
            CHECK(vq_session_decode(A, &t, 1, la, 0, &e) == VQ_OK);
            CHECK(vq_session_decode(C, &t, 1, lc, 0, &e) == VQ_OK);
            record(&H, A, NL, np);   /* the new row, as appended (its recent window holds it) */
            if (g % 10 == 9) cmp += check_tier(A, C, &H, NL, n_ctx, f16, &bad);
        }
        CHECKF(vq_kv_evicted(vq_session_kv(A)) > 0 && vq_kv_demoted(vq_session_kv(A)) > 0 && cmp > 0,
               "%s: nothing was demoted", specs[s]);
        CHECKF(vq_session_kv_rows(A, 0) < vq_session_pos(A), "%s: %d main rows for %d positions", specs[s],
               vq_session_kv_rows(A, 0), vq_session_pos(A));
        CHECKF(!bad, "%s: %d demoted rows differ from the row at their position (of %d)", specs[s], bad, cmp);
        free(H.k); free(H.v); free(H.set);
        if (!f16) CHECKF(worst <= 1e-4 && same_tok, "%s: logits off no eviction's by %.3g (tokens %s)", specs[s], worst,
                         same_tok ? "same" : "differ");
        /* truncate: only positions below what it returns, then decoding goes on */
        const int n0 = vq_session_pos(A) - 20;
        CHECK(vq_session_truncate(A, n0, &e) == VQ_OK && vq_session_pos(A) == n0);
        int nm;
        const vq_kv_dims d = vq_model_kv_dims(m, n_ctx);
        float *k = malloc(sizeof(float) * n_ctx * d.n_kv_heads * d.head_dim), *v = malloc(sizeof(float) * n_ctx * d.n_kv_heads * d.head_dim);
        int32_t *pos = malloc(sizeof(int32_t) * n_ctx);
        int ok = 1;
        for (int l = 0; l < NL; l++) {
            const int n = rows_of(A, l, k, v, pos, &nm);
            for (int i = 0; i < n; i++) ok &= pos[i] < n0;
        }
        CHECKF(ok, "%s: a row at or past %d survived truncate", specs[s], n0);
        int t = prompt[3];
        CHECK(vq_session_decode(A, &t, 1, la, 0, &e) == VQ_OK && vq_session_pos(A) == n0 + 1);
        free(k); free(v); free(pos);
        char path[] = "/tmp/vq_demote_stateXXXXXX";
        int fd = mkstemp(path);
        if (fd >= 0) close(fd);
        CHECKF(vq_session_save(A, path, &e) != VQ_OK && strstr(e.msg, "evicts"), "save: %s", e.msg);
        unlink(path);
        vq_session_free(A); vq_session_free(C);
    }

    /* generation with a policy and a tier */
    vq_session *G = mk(m, "f16;evict=keyformer,budget=0.5,every=4;demote=f16", n_ctx);
    if (G) {
        vq_sampler_params sp = vq_sampler_default_params();
        sp.temp = 0;
        vq_sampler *smp = vq_sampler_create(&sp, V, &e);
        vq_generate_params gp = vq_generate_default_params();
        gp.n_predict = 80;
        vq_generate_result res;
        CHECKF(vq_session_generate(G, prompt, np, smp, &gp, NULL, NULL, &res, &e) == VQ_OK, "generate: %s", e.msg);
        CHECKF(res.n_gen > 0 && vq_kv_demoted(vq_session_kv(G)) > 0, "generated %d, demoted %ld", res.n_gen,
               vq_kv_demoted(vq_session_kv(G)));
        CHECK(vq_session_kv_bytes(G) == vq_kv_bytes_tally(vq_session_kv(G)));
        vq_sampler_free(smp);
        vq_session_free(G);
    }
    free(la); free(lc);
    vq_model_free(m);
    return vq_t_done();
}
