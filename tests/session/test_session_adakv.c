/* test_session_adakv.c: heads=ada (per-head rows, AdaKV budgets) through a session on a real model
 * (stories260K: 4 KV heads of 8 query heads, 5 layers).
 *   - a budget >= the context: every logit memcmp-equal to the same codec without a policy
 *     (4 policies x f16 and turboquant_mse:k=4,v=4, prompt + 40 greedy steps);
 *   - true positions: after per-head eviction the session's position is the token count, and
 *     layer 0's newest key (every head's, which depends only on the token and its position)
 *     equals the key a session without eviction appends for the same token;
 *   - generation after eviction matches a reference that masks the same tokens per head: a
 *     heads=ada session whose budget never evicts, which after each of the evicting session's
 *     steps drops exactly the (position, head) pairs the evicting one no longer holds: logits
 *     memcmp-equal at every step; the float64 reference attention (per head) over the kept rows
 *     gives the same greedy token with logits within 1e-3;
 *   - the heads really keep different numbers of rows, the layer within heads x budget, each head
 *     at least floor x budget; saving is refused naming eviction. */
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

/* positions KV head h of layer l holds -> held[] (1 each); returns how many */
static int held_positions(vq_session *s, int l, int h, unsigned char *held, int n_ctx, int d) {
    vq_kv *kv = vq_session_kv(s);
    const int rows = vq_kv_head_rows(kv, l, h);
    float *k = malloc(sizeof(float) * (rows + 1) * d), *v = malloc(sizeof(float) * (rows + 1) * d);
    int32_t *pos = malloc(sizeof(int32_t) * (rows + 1));
    vq_err e;
    memset(held, 0, (size_t)n_ctx);
    CHECK(vq_kv_read_head(kv, l, h, k, v, pos, &e) == VQ_OK);
    for (int r = 0; r < rows; r++) held[pos[r]] = 1;
    free(k); free(v); free(pos);
    return rows;
}

/* layer 0's key at position p, every head (zeros where a head does not hold it); returns a mask
 * of the heads that hold it */
static unsigned key_at(vq_session *s, int p, float *out, int H, int d, int n_ctx) {
    unsigned mask = 0;
    vq_kv *kv = vq_session_kv(s);
    float *k = malloc(sizeof(float) * n_ctx * d), *v = malloc(sizeof(float) * n_ctx * d);
    int32_t *pos = malloc(sizeof(int32_t) * n_ctx);
    vq_err e;
    memset(out, 0, sizeof(float) * H * d);
    for (int h = 0; h < H; h++)
        if (vq_kv_read_head(kv, 0, h, k, v, pos, &e) == VQ_OK)
            for (int r = 0; r < vq_kv_head_rows(kv, 0, h); r++)
                if (pos[r] == p) {
                    memcpy(out + (size_t)h * d, k + (size_t)r * d, sizeof(float) * d);
                    mask |= 1u << h;
                }
    free(k); free(v); free(pos);
    return mask;
}

/* R drops, per (layer, head), the positions A no longer holds; returns how many */
static int sync_ref(vq_session *A, vq_session *R, int NL, int H, int d, unsigned char *ha, unsigned char *hr, int n_ctx) {
    int total = 0;
    vq_err e;
    int32_t *drop = malloc(sizeof(int32_t) * n_ctx);
    for (int l = 0; l < NL; l++)
        for (int h = 0; h < H; h++) {
            held_positions(A, l, h, ha, n_ctx, d);
            held_positions(R, l, h, hr, n_ctx, d);
            int nd = 0;
            for (int p = 0; p < vq_session_pos(R); p++)
                if (hr[p] && !ha[p]) drop[nd++] = p;
            total += nd;
            CHECKF(vq_kv_evict_head_positions(vq_session_kv(R), l, h, drop, nd, &e) == VQ_OK, "%s", e.msg);
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
    vq_kv_dims dims = vq_model_kv_dims(m, n_ctx);
    const int H = dims.n_kv_heads, d = dims.head_dim;
    CHECKF(H > 1, "stories260K has %d KV heads: heads=ada needs several", H);
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
            snprintf(spec, sizeof spec, "%s;evict=%s,budget=%d,every=2,heads=ada", codecs[c], pols[p], n_ctx);
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
            CHECK(vq_kv_evicted(vq_session_kv(a)) == 0 && vq_kv_per_head(vq_session_kv(a), 0));
            vq_session_free(a); vq_session_free(b);
        }

    /* 2 + 3. evicting session A, position check against C (no eviction), per-head masked reference R */
    struct { const char *spec; int B; double floor; } specs[] = {
        {"f32;evict=h2o,budget=40,sinks=4,recent=8,every=4,heads=ada", 40, 0.2},
        {"f32;evict=tova,budget=0.5,sinks=2,recent=4,every=3,heads=ada,floor=0.5", 0, 0.5},
        {"f32;evict=snapkv,budget=32,obs=8,recent=8,every=5,heads=ada", 32, 0.2},
        {"f32;evict=knorm,budget=24,sinks=4,recent=0,every=2,heads=ada,floor=0", 24, 0.0},
    };
    char rspec[120];
    snprintf(rspec, sizeof rspec, "f32;evict=streaming_llm,budget=%d,heads=ada", n_ctx);   /* never evicts */
    unsigned char *ha = malloc(n_ctx), *hr = malloc(n_ctx);
    float *ka = malloc(sizeof(float) * H * d), *kc = malloc(sizeof(float) * H * d), *lr = malloc(sizeof(float) * V);
    for (size_t s = 0; s < VQ_ARRAY_LEN(specs); s++) {
        vq_session *A = mk(m, specs[s].spec, n_ctx), *R = mk(m, rspec, n_ctx), *C = mk(m, "f32", n_ctx);
        if (!A || !R || !C) { vq_session_free(A); vq_session_free(R); vq_session_free(C); continue; }
        CHECK(vq_session_decode(A, prompt, np, la, 0, &e) == VQ_OK);
        CHECK(vq_session_decode(R, prompt, np, lb, 0, &e) == VQ_OK);
        CHECK(vq_session_decode(C, prompt, np, lr, 0, &e) == VQ_OK);
        int bit_same = 1, pos_ok = 1, key_ok = 1, evicted = 0, differ = 0, budget_ok = 1, keys = 0;
        double worst = 0;
        for (int g = 0; g < 60; g++) {
            evicted += sync_ref(A, R, NL, H, d, ha, hr, n_ctx);   /* R drops what A no longer holds */
            for (int l = 0; l < NL; l++) {   /* right after a step (or between steps, every later) */
                int total = 0, lo = n_ctx;
                for (int h = 0; h < H; h++) {
                    const int r = vq_kv_head_rows(vq_session_kv(A), l, h);
                    total += r;
                    lo = VQ_MIN(lo, r);
                    differ |= r != vq_kv_head_rows(vq_session_kv(A), l, 0);
                }
                const int pos = vq_session_pos(A), B = specs[s].B ? specs[s].B : (pos + 1) / 2;
                budget_ok &= total <= H * (B + 5) && lo >= VQ_MIN((int)ceil(specs[s].floor * (B - 5)), pos);
            }
            int t = argmax(la, V);
            CHECK(vq_session_decode(A, &t, 1, la, 0, &e) == VQ_OK);
            CHECK(vq_session_decode(R, &t, 1, lb, 0, &e) == VQ_OK);
            CHECK(vq_session_decode(C, &t, 1, lr, 0, &e) == VQ_OK);
            bit_same &= !memcmp(la, lb, sizeof(float) * V);
            const int p = vq_session_pos(A) - 1;
            pos_ok &= p == np + g && vq_session_kv_rows(A, 0) <= vq_session_pos(A);
            /* every head A still holds it in (with recent=0 a step may already have dropped it) */
            const unsigned ma = key_at(A, p, ka, H, d, n_ctx), mc = key_at(C, p, kc, H, d, n_ctx);
            for (int h = 0; h < H; h++)
                if (ma >> h & 1) {
                    key_ok &= (mc >> h & 1) && !memcmp(ka + (size_t)h * d, kc + (size_t)h * d, sizeof(float) * d);
                    keys++;
                }
        }
        CHECKF(evicted > 0, "%s: nothing was evicted", specs[s].spec);
        CHECKF(differ, "%s: every KV head kept the same rows count at every step", specs[s].spec);
        CHECKF(budget_ok, "%s: a layer over heads x budget or a head under the floor", specs[s].spec);
        CHECKF(bit_same, "%s: logits differ from the reference that masks the same (position, head) pairs", specs[s].spec);
        CHECKF(pos_ok, "%s: the session's position is not the token count", specs[s].spec);
        CHECKF(keys >= 60, "%s: only %d new keys compared", specs[s].spec, keys);
        CHECKF(key_ok, "%s: layer 0's new key differs from no eviction's: the position is not the true one", specs[s].spec);
        /* the float64 reference attention over each head's kept rows: same next token, logits close */
        sync_ref(A, R, NL, H, d, ha, hr, n_ctx);
        vq_session_set_ref_attention(R, 1);
        int t = argmax(la, V);
        CHECK(vq_session_decode(A, &t, 1, la, 0, &e) == VQ_OK);
        CHECK(vq_session_decode(R, &t, 1, lb, 0, &e) == VQ_OK);
        for (int i = 0; i < V; i++) worst = fmax(worst, fabs(la[i] - lb[i]));
        CHECKF(worst <= 1e-3 && argmax(la, V) == argmax(lb, V), "%s: float64 reference off by %.3g", specs[s].spec, worst);
        char path[] = "/tmp/vq_adakv_stateXXXXXX";
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
