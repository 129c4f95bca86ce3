/* test_ppl_arms.c: perplexity over several KV arms in one batched decode pass
 * (vq_perplexity_windows_arms, built on vq_forward_arms) gives every arm exactly the figures of
 * running that arm alone (vq_perplexity_windows, decode mode), on stories260K: its float32
 * weights use one kernel whatever the batch, so the equality is exact. On quantized weights the
 * single-token kernel sums in another order (kernels/kq512.inc), so there equal arms agree with
 * each other exactly and with a lone run to rounding; checked on SmolLM2 when it is present. */
#include "../vq_test.h"
#include "eval/eval.h"

static void run(vq_model *m, const char *text, const char *const *specs, int n, int ctx, long max_tok,
                int exact) {
    int cap = (int)strlen(text) + 16;
    int *tok = malloc((size_t)cap * sizeof(int));
    vq_err err;
    int nt = vq_tok_encode(m->tok, text, strlen(text), 0, 0, tok, cap, &err);
    CHECK(nt > ctx);
    vq_ppl_params p = {.ctx = ctx, .mode = VQ_PPL_DECODE, .batch = 1, .max_tokens = max_tok, .kv_seed = 7};
    vq_ppl_acc *b = calloc((size_t)n, sizeof *b);
    CHECKF(vq_perplexity_windows_arms(m, specs, n, tok, nt, &p, NULL, NULL, b, &err) == VQ_OK, "arms: %s", err.msg);
    for (int a = 0; a < n; a++) {
        vq_ppl_acc s = {0};
        CHECKF(vq_perplexity_windows(m, specs[a], tok, nt, &p, NULL, NULL, &s, &err) == VQ_OK, "%s: %s", specs[a], err.msg);
        double mb = b[a].nll_sum / b[a].n_scored, ms = s.nll_sum / s.n_scored;
        printf("%-28s batched %.9f alone %.9f (%ld scored, %zu kv bytes)\n", specs[a], mb, ms, s.n_scored, s.kv_bytes);
        CHECK(b[a].n_scored == s.n_scored && b[a].n_scored > 0);
        CHECK(b[a].kv_bytes == s.kv_bytes && b[a].kv_bits == s.kv_bits);
        if (exact) CHECKF(b[a].nll_sum == s.nll_sum, "%s: batched %.12g != alone %.12g", specs[a], mb, ms);
        else   /* reordered float sums re-round int8 activations: a few % over ~100 tokens (measured
                * 0.1-2.5 %); the report measures the gap at full size (docs/results.md) */
            CHECKF(fabs(mb - ms) < 0.05 * ms, "%s: batched %.6f vs alone %.6f", specs[a], mb, ms);
        if (a > 0 && !strcmp(specs[a], specs[0]))   /* the same arm twice: the same figures, exactly */
            CHECK(b[a].nll_sum == b[0].nll_sum);
    }
    /* a bad arm fails the whole call with its name */
    const char *bad[2] = {specs[0], "nosuchcodec"};
    CHECK(vq_perplexity_windows_arms(m, bad, 2, tok, nt, &p, NULL, NULL, b, &err) != VQ_OK &&
          strstr(err.msg, "nosuchcodec"));
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
