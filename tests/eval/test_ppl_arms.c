/* test_ppl_arms.c: perplexity over several KV arms in one batched decode pass
 * (vq_perplexity_windows_arms, built on vq_forward_arms) gives every arm exactly the figures of
 * running that arm alone (vq_perplexity_windows, decode mode), on stories260K: its float32
 * weights use one kernel whatever the batch, so the equality is exact. On quantized weights the
 * single-token kernel sums in another order (kernels/kq512.inc), so there equal arms agree with
 * each other exactly and with a lone run to rounding; checked on SmolLM2 when it is present. */
#include "../vq_test.h"
#include "lab/eval.h"
#include "session/session_impl.h"

static void run(vq_model *m, const char *text, const char *const *specs, int n, int ctx, long max_tok,
                int exact) {
    int cap = (int)strlen(text) + 16;
    int *tok = malloc((size_t)cap * sizeof(int));
    vq_err err;
    int nt = vq_tok_encode(m->tok, text, strlen(text), 0, 0, tok, cap, &err);
    CHECK(nt > ctx);
    vq_ppl_params p = vq_ppl_default_params();
    p.n_ctx = ctx; p.mode = VQ_PPL_DECODE; p.n_batch = 1; p.max_tokens = max_tok; p.kv_seed = 7;
    vq_kv_spec *sp[16];
    CHECK(n <= 16);
    for (int a = 0; a < n; a++) {
        sp[a] = vq_kv_spec_parse(specs[a], &err);
        CHECKF(sp[a] != NULL, "%s: %s", specs[a], err.msg);
        if (!sp[a]) return;
    }
    const vq_kv_spec *const *arms = (const vq_kv_spec *const *)sp;
    vq_ppl_result *b = calloc((size_t)n, sizeof *b);
    p.kl_vs_first = 1;
    CHECKF(vq_perplexity(m, arms, n, tok, nt, &p, NULL, NULL, b, &err) == VQ_OK, "arms: %s", err.msg);
    p.kl_vs_first = 0;
    for (int a = 0; a < n; a++) {
        vq_ppl_result s;
        CHECKF(vq_perplexity(m, arms + a, 1, tok, nt, &p, NULL, NULL, &s, &err) == VQ_OK, "%s: %s", specs[a], err.msg);
        double mb = b[a].mean_nll, ms = s.mean_nll;
        printf("%-28s batched %.9f alone %.9f (%ld scored, %zu kv bytes) KL vs arm 0 %.3g\n", specs[a], mb, ms,
               s.n_scored, s.kv_bytes, b[a].kl_mean);
        CHECK(b[a].n_scored == s.n_scored && b[a].n_scored > 0);
        CHECK(b[a].kv_bytes == s.kv_bytes && b[a].kv_bits == s.kv_bits);
        CHECK(b[a].kl_sum >= 0 && (a > 0 || b[a].kl_sum == 0));
        if (exact) CHECKF(b[a].nll_sum == s.nll_sum, "%s: batched %.12g != alone %.12g", specs[a], mb, ms);
        else   /* reordered float sums re-round int8 activations: a few % over ~100 tokens (measured
                * 0.1-2.5 %); the report measures the gap at full size (docs/results.md) */
            CHECKF(fabs(mb - ms) < 0.05 * ms, "%s: batched %.6f vs alone %.6f", specs[a], mb, ms);
        if (a > 0 && !strcmp(specs[a], specs[0])) {   /* the same arm twice: the same figures, exactly */
            CHECK(b[a].nll_sum == b[0].nll_sum);
            CHECKF(b[a].kl_sum == 0, "%s twice: KL %.3g, not 0", specs[a], b[a].kl_sum);
        }
    }
    /* serial arms (each its own forward per token) give the batched figures */
    p.serial_arms = 1;
    vq_ppl_result *c = calloc((size_t)n, sizeof *c);
    CHECK(vq_perplexity(m, arms, n, tok, nt, &p, NULL, NULL, c, &err) == VQ_OK);
    for (int a = 0; a < n && exact; a++) CHECKF(c[a].nll_sum == b[a].nll_sum, "%s: serial != batched", specs[a]);
    free(c);
    p.serial_arms = 0;
    /* a text shorter than one window is an error before any work, and leaves no figures */
    CHECK(vq_perplexity(m, arms, n, tok, ctx - 1, &p, NULL, NULL, b, &err) == VQ_ERR_RANGE &&
          strstr(err.msg, "fewer than one window") && b[0].n_scored == 0);
    for (int a = 0; a < n; a++) vq_kv_spec_free(sp[a]);
    free(b);
    free(tok);
}

/* Windows at an offset and per-window figures (the context-compression protocol, docs/eviction.md):
 * first_window = k scores exactly what a run over the tokens from k windows on scores (nll sums
 * equal bit for bit); n_windows stops after that many; the per-window figures (window_cb) sum to
 * the totals and carry the text's window index; a first window past the text is refused. */
typedef struct wins { long n, idx[16]; double nll[16][4]; long sc[16][4], tk[16][4]; } wins;
static void on_window(long index, const vq_ppl_result *r, int n_arms, void *user) {
    wins *w = user;
    if (w->n >= 16 || n_arms > 4) return;
    w->idx[w->n] = index;
    for (int a = 0; a < n_arms; a++) {
        w->nll[w->n][a] = r[a].nll_sum;
        w->sc[w->n][a] = r[a].n_scored;
        w->tk[w->n][a] = r[a].n_tokens;
        CHECK(r[a].n_scored == 0 || fabs(r[a].mean_nll - r[a].nll_sum / r[a].n_scored) < 1e-12);
    }
    w->n++;
}

static void offsets(vq_model *m, const char *text) {
    int cap = (int)strlen(text) + 16;
    int *tok = malloc((size_t)cap * sizeof(int));
    vq_err err;
    const int nt = vq_tok_encode(m->tok, text, strlen(text), 0, 0, tok, cap, &err), ctx = 48;
    CHECK(nt >= 6 * ctx);
    vq_kv_spec *sp[2] = {vq_kv_spec_parse("f16", &err), vq_kv_spec_parse("f16;evict=chunkkv,budget=0.5,chunk=4,recent=4", &err)};
    CHECK(sp[0] && sp[1]);
    const vq_kv_spec *const *arms = (const vq_kv_spec *const *)sp;
    vq_ppl_params p = vq_ppl_default_params();
    p.n_ctx = ctx; p.mode = VQ_PPL_PREFILL; p.n_batch = 32; p.first_scored = 32; p.kv_seed = 7;
    for (int mode = 0; mode < 2; mode++) {
        p.mode = mode ? VQ_PPL_DECODE : VQ_PPL_PREFILL;
        wins w = {0};
        vq_ppl_result a[2], b[2];
        p.first_window = 2; p.n_windows = 3; p.window_cb = on_window; p.window_user = &w;
        CHECKF(vq_perplexity(m, arms, 2, tok, nt, &p, NULL, NULL, a, &err) == VQ_OK, "%s", err.msg);
        p.first_window = 0; p.window_cb = NULL;
        CHECK(vq_perplexity(m, arms, 2, tok + 2 * ctx, 3 * ctx, &p, NULL, NULL, b, &err) == VQ_OK);
        CHECKF(w.n == 3 && w.idx[0] == 2 && w.idx[2] == 4, "%ld windows from %ld", w.n, w.idx[0]);
        for (int k = 0; k < 2; k++) {
            printf("mode %d arm %d: windows 2..4 nll %.9f, the tokens from window 2 on %.9f (%ld scored)\n", mode, k,
                   a[k].mean_nll, b[k].mean_nll, a[k].n_scored);
            CHECKF(a[k].nll_sum == b[k].nll_sum && a[k].n_scored == b[k].n_scored && a[k].n_scored == 3 * (ctx - 1 - 32),
                   "arm %d: offset run %.12g (%ld) vs shifted tokens %.12g (%ld)", k, a[k].nll_sum, a[k].n_scored,
                   b[k].nll_sum, b[k].n_scored);
            double s = 0;
            long sc = 0, tk = 0;
            for (long i = 0; i < w.n; i++) { s += w.nll[i][k]; sc += w.sc[i][k]; tk += w.tk[i][k]; }
            CHECKF(fabs(s - a[k].nll_sum) < 1e-9 * fabs(s) && sc == a[k].n_scored && tk == a[k].n_tokens,
                   "arm %d: windows sum to %.9g (%ld scored, %ld tokens), totals %.9g (%ld, %ld)", k, s, sc, tk,
                   a[k].nll_sum, a[k].n_scored, a[k].n_tokens);
        }
        CHECK(w.nll[0][0] != w.nll[1][0]);   /* different windows, different figures */
    }
    p.first_window = nt / ctx;   /* past the last window */
    vq_ppl_result c[2];
    CHECK(vq_perplexity(m, arms, 2, tok, nt, &p, NULL, NULL, c, &err) == VQ_ERR_RANGE && strstr(err.msg, "first window"));
    p.first_window = -1;
    CHECK(vq_perplexity(m, arms, 2, tok, nt, &p, NULL, NULL, c, &err) == VQ_ERR_ARG);
    vq_kv_spec_free(sp[0]);
    vq_kv_spec_free(sp[1]);
    free(tok);
}

int main(void) {
    char mp[4096], tp[4096], txt[4096];
    vq_t_shared("data/stories260K.bin", mp, sizeof mp);   /* each skips the test when absent */
    vq_t_shared("data/tok512.bin", tp, sizeof tp);
    vq_t_shared("data/tinystories-valid-sample.txt", txt, sizeof txt);
    vq_err err;
    vq_model *m = vq_model_open(mp, tp, &err);
    CHECKF(m != NULL, "%s", err.msg);
    char *text = calloc(4001, 1);
    FILE *f = fopen(txt, "rb");
    CHECK(f && fread(text, 1, 4000, f) == 4000);
    if (f) fclose(f);
    const char *arms[] = {"f16", "f32", "turboquant_mse:bits=3", "polar", "f16", "qjl"};
    run(m, text, arms, 6, 64, 256, 1);
    offsets(m, text);
    vq_model_free(m);

    char sm[4096];
    snprintf(sm, sizeof sm, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", VQ_MODELS_DIR);
    if (access(sm, R_OK) == 0) {
        vq_model *s = vq_model_open(sm, NULL, &err);
        CHECKF(s != NULL, "%s", err.msg);
        const char *sarms[] = {"f16", "turboquant_mse:k=4,v=4", "q4_0", "f16"};
        run(s, text, sarms, 4, 48, 96, 0);
        vq_model_free(s);
    } else printf("SmolLM2 not found: the quantized-weight half skipped\n");
    free(text);
    return vq_t_done();
}
