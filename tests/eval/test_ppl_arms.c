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
