/* test_session_evict.c: token eviction through a session on a real model (stories260K).
 *   - a budget >= the context: every logit memcmp-equal to the same spec without a policy
 *     (f16 and turboquant_mse:k=4,v=4, prompt + greedy decode);
 *   - true positions: after eviction the session's position is the token count, and layer 0's
 *     newest key (which depends only on the token and its position) equals the one a session
 *     without eviction appends for the same token: a RoPE offset after eviction would differ;
 *   - generation after eviction matches a reference that masks the same tokens: a session
 *     without a policy that, after each of the evicting session's steps, drops exactly the
 *     positions the evicting one no longer holds (per layer): logits memcmp-equal at every step,
 *     and the float64 reference attention over the kept rows (vq_session_set_ref_attention)
 *     gives the same greedy tokens with logits within 1e-3;
 *   - saving an evicting session is refused with a message naming eviction. */
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

/* positions layer l of s holds -> held[] (1 each), returns how many */
static int held_positions(vq_session *s, int l, unsigned char *held, int n_ctx) {
    vq_kv *kv = vq_session_kv(s);
    const int rows = vq_kv_rows(kv, l);
    vq_kv_dims d = vq_model_kv_dims(s->m, n_ctx);
    size_t w = (size_t)d.n_kv_heads * d.head_dim;
    float *k = malloc(sizeof(float) * (rows + 1) * w), *v = malloc(sizeof(float) * (rows + 1) * w);
    int32_t *pos = malloc(sizeof(int32_t) * (rows + 1));
    vq_err e;
    memset(held, 0, (size_t)n_ctx);
    CHECK(vq_kv_read(kv, l, k, v, pos, &e) == VQ_OK);
    for (int r = 0; r < rows; r++) held[pos[r]] = 1;
    free(k); free(v); free(pos);
    return rows;
}

/* layer 0's row at position p (K side), through the read-back */
static void key_at(vq_session *s, int p, float *out, int n_ctx) {
    vq_kv *kv = vq_session_kv(s);
    const int rows = vq_kv_rows(kv, 0);
    vq_kv_dims d = vq_model_kv_dims(s->m, n_ctx);
    size_t w = (size_t)d.n_kv_heads * d.head_dim;
    float *k = malloc(sizeof(float) * rows * w), *v = malloc(sizeof(float) * rows * w);
    int32_t *pos = malloc(sizeof(int32_t) * rows);
    vq_err e;
    memset(out, 0, sizeof(float) * w);
    if (vq_kv_read(kv, 0, k, v, pos, &e) == VQ_OK)
        for (int r = 0; r < rows; r++)
            if (pos[r] == p) memcpy(out, k + (size_t)r * w, sizeof(float) * w);
    free(k); free(v); free(pos);
}

/* R (no policy) drops, per layer, the positions A (evicting) no longer holds; returns how many */
static int sync_ref(vq_session *A, vq_session *R, int NL, unsigned char *ha, unsigned char *hr, int n_ctx) {
    int total = 0;
    vq_err e;
    int32_t *drop = malloc(sizeof(int32_t) * n_ctx);
    for (int l = 0; l < NL; l++) {
        held_positions(A, l, ha, n_ctx);
        held_positions(R, l, hr, n_ctx);
        int nd = 0;
        for (int p = 0; p < vq_session_pos(R); p++)
            if (hr[p] && !ha[p]) drop[nd++] = p;
        total += nd;
        CHECKF(vq_kv_evict_positions(vq_session_kv(R), l, drop, nd, &e) == VQ_OK, "%s", e.msg);
    }
    free(drop);
    return total;
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
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);

    /* 1. a budget covering the context changes no bit */
    const char *codecs[] = {"f16", "turboquant_mse:k=4,v=4"};
    const char *pols[] = {"h2o", "tova", "snapkv", "knorm"};
    for (size_t c = 0; c < VQ_ARRAY_LEN(codecs); c++)
        for (size_t p = 0; p < VQ_ARRAY_LEN(pols); p++) {
            char spec[160];
            snprintf(spec, sizeof spec, "%s;evict=%s,budget=%d,every=2", codecs[c], pols[p], n_ctx);
            vq_session *a = mk(m, spec, n_ctx), *b = mk(m, codecs[c], n_ctx);
            if (!a || !b) { vq_session_free(a); vq_session_free(b); continue; }
            int same = vq_session_decode(a, prompt, np, la, 0, &e) == VQ_OK &&
                       vq_session_decode(b, prompt, np, lb, 0, &e) == VQ_OK && !memcmp(la, lb, sizeof(float) * V);
            for (int g = 0; g < 40 && same; g++) {
                int t = argmax(la, V);
                same = vq_session_decode(a, &t, 1, la, 0, &e) == VQ_OK && vq_session_decode(b, &t, 1, lb, 0, &e) == VQ_OK &&
                       !memcmp(la, lb, sizeof(float) * V);
            }
            CHECKF(same, "%s: logits differ from no eviction", spec);
            CHECK(vq_kv_evicted(vq_session_kv(a)) == 0);
            vq_session_free(a); vq_session_free(b);
        }

    /* 2 + 3. evicting session A, position check against C (no eviction), masked reference R */
    const char *specs[] = {"f32;evict=h2o,budget=40,sinks=4,recent=8,every=4",
                           "f32;evict=tova,budget=0.5,sinks=2,recent=4,every=3",
                           "f32;evict=snapkv,budget=32,obs=8,every=5",
                           "f32;evict=streaming_llm,budget=24,sinks=4,recent=0,every=2"};
    unsigned char *ha = malloc(n_ctx), *hr = malloc(n_ctx);
    vq_kv_dims d = vq_model_kv_dims(m, n_ctx);
    const size_t w = (size_t)d.n_kv_heads * d.head_dim;
    float *ka = malloc(sizeof(float) * w), *kc = malloc(sizeof(float) * w), *lr = malloc(sizeof(float) * V);
    for (size_t s = 0; s < VQ_ARRAY_LEN(specs); s++) {
        vq_session *A = mk(m, specs[s], n_ctx), *R = mk(m, "f32", n_ctx), *C = mk(m, "f32", n_ctx);
        if (!A || !R || !C) { vq_session_free(A); vq_session_free(R); vq_session_free(C); continue; }
        CHECK(vq_session_decode(A, prompt, np, la, 0, &e) == VQ_OK);
        CHECK(vq_session_decode(R, prompt, np, lb, 0, &e) == VQ_OK);
        CHECK(vq_session_decode(C, prompt, np, lr, 0, &e) == VQ_OK);
        int bit_same = 1, pos_ok = 1, key_ok = 1, evicted = 0;
        double worst = 0;
        for (int g = 0; g < 60; g++) {
            evicted += sync_ref(A, R, NL, ha, hr, n_ctx);   /* R drops what A no longer holds */
            int t = argmax(la, V);
            CHECK(vq_session_decode(A, &t, 1, la, 0, &e) == VQ_OK);
            CHECK(vq_session_decode(R, &t, 1, lb, 0, &e) == VQ_OK);
            CHECK(vq_session_decode(C, &t, 1, lr, 0, &e) == VQ_OK);
            bit_same &= !memcmp(la, lb, sizeof(float) * V);
            const int p = vq_session_pos(A) - 1;
            pos_ok &= p == np + g && vq_session_kv_rows(A, 0) <= vq_session_pos(A);
            key_at(A, p, ka, n_ctx);
            key_at(C, p, kc, n_ctx);
            key_ok &= !memcmp(ka, kc, sizeof(float) * w);
        }
        CHECKF(evicted > 0, "%s: nothing was evicted", specs[s]);
        CHECKF(vq_session_kv_rows(A, 0) < vq_session_pos(A), "%s: %d rows for %d positions", specs[s],
               vq_session_kv_rows(A, 0), vq_session_pos(A));
        CHECKF(bit_same, "%s: logits differ from the reference that masks the same tokens", specs[s]);
        CHECKF(pos_ok, "%s: the session's position is not the token count", specs[s]);
        CHECKF(key_ok, "%s: layer 0's new key differs from no eviction's: the position is not the true one", specs[s]);
        /* the float64 reference attention over the kept rows: same next token, logits close */
        sync_ref(A, R, NL, ha, hr, n_ctx);
        vq_session_set_ref_attention(R, 1);
        int t = argmax(la, V);
        CHECK(vq_session_decode(A, &t, 1, la, 0, &e) == VQ_OK);
        CHECK(vq_session_decode(R, &t, 1, lb, 0, &e) == VQ_OK);
        for (int i = 0; i < V; i++) worst = fmax(worst, fabs(la[i] - lb[i]));
        CHECKF(worst <= 1e-3 && argmax(la, V) == argmax(lb, V), "%s: float64 reference off by %.3g", specs[s], worst);
        /* saving is refused, naming why */
        char path[] = "/tmp/vq_evict_stateXXXXXX";
        int fd = mkstemp(path);
        if (fd >= 0) close(fd);
        CHECKF(vq_session_save(A, path, &e) != VQ_OK && strstr(e.msg, "evicts"), "save: %s", e.msg);
        unlink(path);
        vq_session_free(A); vq_session_free(R); vq_session_free(C);
    }
    free(ha); free(hr); free(ka); free(kc); free(lr);
    free(la); free(lb);
    vq_model_free(m);
    return vq_t_done();
}
