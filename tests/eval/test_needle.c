/* test_needle.c: passkey retrieval. The prompt builder (exact length, needle at the requested
 * depth within one filler sentence, the number only in the needle, same seed -> same prompt) for
 * both fillers and both formats, the argument checks, and one real greedy run on SmolLM2 at
 * ctx 1024 with the f16 cache whose result records must be consistent (accuracy is printed, not
 * asserted: docs/needle.md has the measured figures). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../vq_test.h"
#include "lab/needle.h"
#include "session/session_impl.h"

/* Under ASan the forward pass is ~20x slower: the real run then uses a shorter context. */
#if defined(__SANITIZE_ADDRESS__)
#define REAL_CTX 256
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REAL_CTX 256
#endif
#endif
#ifndef REAL_CTX
#define REAL_CTX 1024
#endif

static int count_occ(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

static char *detok(const vq_model *m, const int *ids, int n) {
    size_t need = vq_tok_decode(m->tok, ids, n, NULL, 0);
    char *s = malloc(need + 1);
    size_t got = vq_tok_decode(m->tok, ids, n, s, need);
    s[got] = 0;
    return s;
}

/* Build one prompt and check everything a prompt must satisfy. */
static void check_prompt(const vq_model *m, const vq_needle_params *p) {
    vq_err err; vq_err_clear(&err);
    vq_needle_prompt pr, pr2;
    vq_status s = vq_needle_build(m, p, &pr, &err);
    CHECKF(s == VQ_OK, "build ctx %d depth %g seed %llu: %s", p->ctx, p->depth, (unsigned long long)p->seed, err.msg);
    if (s) return;
    CHECKF(pr.n == p->ctx - p->n_gen, "prompt %d tokens, want ctx %d - n_gen %d", pr.n, p->ctx, p->n_gen);
    CHECK(pr.filler_total > 0 && pr.filler_before >= 0 && pr.filler_before <= pr.filler_total);
    CHECK(pr.max_unit >= 1);
    double target = p->depth * pr.filler_total;
    CHECKF(fabs(pr.filler_before - target) <= pr.max_unit,
           "needle after %d filler tokens, target %.1f (depth %g of %d), sentence <= %d tokens", pr.filler_before,
           target, p->depth, pr.filler_total, pr.max_unit);
    CHECK((int)strlen(pr.number) == p->digits && pr.number[0] != '0');

    char want[128];
    snprintf(want, sizeof want, " The pass key is %s. Remember it. %s is the pass key.", pr.number, pr.number);
    char *needle = detok(m, pr.tok + pr.needle_at, pr.needle_len);
    CHECKF(!strcmp(needle, want), "needle tokens decode to '%s', want '%s'", needle, want);
    free(needle);
    char *text = detok(m, pr.tok, pr.n);
    CHECKF(count_occ(text, want) == 1, "the needle sentence occurs %d times", count_occ(text, want));
    CHECKF(count_occ(text, pr.number) == 2, "the number %s occurs %d times in the prompt (2 in the needle)",
           pr.number, count_occ(text, pr.number));
    const char *end = "The pass key is";
    size_t tl = strlen(text), el = strlen(end);
    CHECKF(tl >= el && !strcmp(text + tl - el, end), "prompt ends '%s'", tl > 40 ? text + tl - 40 : text);
    free(text);
    if (p->format == VQ_NEEDLE_FMT_CHAT) {
        int im = vq_tok_find(m->tok, "<|im_start|>"), k = 0;
        for (int i = 0; i < pr.n; i++) k += pr.tok[i] == im;
        CHECKF(k == 3, "chat prompt has %d <|im_start|> tokens (want system, user, assistant)", k);
    }

    /* same seed: the same prompt, token for token */
    s = vq_needle_build(m, p, &pr2, &err);
    CHECK(s == VQ_OK);
    if (!s) {
        CHECK(pr2.n == pr.n && !memcmp(pr2.tok, pr.tok, (size_t)pr.n * sizeof(int)));
        CHECK(!strcmp(pr2.number, pr.number) && pr2.needle_at == pr.needle_at);
        vq_needle_prompt_free(&pr2);
    }
    vq_needle_prompt_free(&pr);
}

int main(void) {
    char path[1024], tpath[1024];
    vq_t_model(path, sizeof path);
    vq_err err; vq_err_clear(&err);
    vq_model *m = vq_model_open(path, NULL, &err);
    if (!m) { fprintf(stderr, "load: %s\n", err.msg); return 1; }
    uint64_t seed = 20261130;
    printf("seed %llu\n", (unsigned long long)seed);

    snprintf(tpath, sizeof tpath, "%s/data/wikitext-2-raw-test.txt", VQ_SHARED_DIR);
    char *wiki = access(tpath, R_OK) == 0 ? vq_read_file(tpath, NULL, &err) : NULL;
    if (!wiki) printf("note: %s absent, the text-filler checks are skipped\n", tpath);

    const int ctxs[] = { 200, 1024, 3001 };
    const double depths[] = { 0, 0.1, 0.25, 0.5, 0.77, 1 };
    for (int f = 0; f < 2; f++)
        for (int fmt = 0; fmt < 2; fmt++) {
            if (f == VQ_NEEDLE_FILLER_TEXT && !wiki) continue;
            for (int c = 0; c < (int)VQ_ARRAY_LEN(ctxs); c++)
                for (int d = 0; d < (int)VQ_ARRAY_LEN(depths); d++) {
                    vq_needle_params p = { .ctx = ctxs[c], .depth = depths[d], .digits = 3 + (c + d) % 5,
                                           .n_gen = 8, .filler = f, .filler_text = wiki, .format = fmt,
                                           .seed = seed + 7 * (uint64_t)(c * 10 + d) };
                    check_prompt(m, &p);
                }
        }

    /* different seeds give different numbers (20 draws of 5 digits: all equal is impossible in practice) */
    {
        vq_needle_params p = { .ctx = 300, .depth = 0.5, .digits = 5, .n_gen = 8 };
        char first[16] = "";
        int differ = 0;
        for (int i = 0; i < 20; i++) {
            vq_needle_prompt pr;
            p.seed = seed + (uint64_t)i;
            if (vq_needle_build(m, &p, &pr, &err)) { CHECKF(0, "%s", err.msg); break; }
            if (!i) snprintf(first, sizeof first, "%s", pr.number);
            else differ += strcmp(first, pr.number) != 0;
            vq_needle_prompt_free(&pr);
        }
        CHECK(differ > 0);
    }

    /* bad input: clear errors, nothing run */
    {
        vq_needle_params p = { .ctx = 1024, .depth = 0.5, .digits = 5, .n_gen = 8 };
        vq_needle_prompt pr;
        int minc = vq_needle_min_ctx(m, &p, &err);
        CHECK(minc > 8 && minc < 200);
        p.ctx = minc - 1;
        CHECK(vq_needle_build(m, &p, &pr, &err) == VQ_ERR_RANGE && strstr(err.msg, "too small"));
        p.ctx = minc;
        CHECK(vq_needle_build(m, &p, &pr, &err) == VQ_OK && pr.filler_total >= 1);
        vq_needle_prompt_free(&pr);
        p.ctx = 1024; p.depth = 1.5;
        CHECK(vq_needle_build(m, &p, &pr, &err) == VQ_ERR_ARG && strstr(err.msg, "depth"));
        p.depth = NAN;
        CHECK(vq_needle_build(m, &p, &pr, &err) == VQ_ERR_ARG);
        p.depth = 0; p.digits = 0;
        CHECK(vq_needle_build(m, &p, &pr, &err) == VQ_ERR_ARG);
        p.digits = 5; p.filler = VQ_NEEDLE_FILLER_TEXT; p.filler_text = "\n = Heading = \n\n";
        CHECK(vq_needle_build(m, &p, &pr, &err) != VQ_OK);

        int ctx_ok = 1024, ctx_big = m->cfg.train_ctx + 1, ctx_small = 10;
        double dep = 0.5, dep_bad = -0.1;
        const char *f16[] = { "f16" }, *bad[] = { "f16", "nosuchcodec" };
        vq_needle_trial tr[4];
        vq_needle_run_params rp = { .ctxs = &ctx_ok, .n_ctxs = 1, .depths = &dep, .n_depths = 1, .specs = bad,
                                    .n_specs = 2, .trials = 1, .base = { .digits = 5, .n_gen = 8 } };
        CHECK(vq_needle_run(m, &rp, tr, NULL, NULL, &err) == VQ_ERR_ARG && strstr(err.msg, "nosuchcodec"));
        rp.specs = f16; rp.n_specs = 1; rp.ctxs = &ctx_big;
        CHECK(vq_needle_run(m, &rp, tr, NULL, NULL, &err) == VQ_ERR_RANGE && strstr(err.msg, "context length"));
        rp.ctxs = &ctx_small;
        CHECK(vq_needle_run(m, &rp, tr, NULL, NULL, &err) == VQ_ERR_RANGE && strstr(err.msg, "too small"));
        rp.ctxs = &ctx_ok; rp.depths = &dep_bad;
        CHECK(vq_needle_run(m, &rp, tr, NULL, NULL, &err) == VQ_ERR_ARG && strstr(err.msg, "depth"));
        rp.depths = &dep; rp.trials = 0;
        CHECK(vq_needle_run(m, &rp, tr, NULL, NULL, &err) == VQ_ERR_ARG && strstr(err.msg, "trials"));
    }

    /* a real run: ctx 1024 (256 under ASan), f16, needle at the start and at the end, one trial each; one thread,
     * because two threads on a busy 2-core machine are several times slower than one */
    {
        omp_set_num_threads(1);
        int ctx = REAL_CTX;
        double dd[] = { 0, 1 };
        const char *specs[] = { "f16" };
        vq_needle_trial tr[2];
        vq_needle_run_params rp = { .ctxs = &ctx, .n_ctxs = 1, .depths = dd, .n_depths = 2, .specs = specs,
                                    .n_specs = 1, .trials = 1, .kv_seed = 0x5eed,
                                    .base = { .digits = 5, .n_gen = 8, .seed = seed } };
        vq_status s = vq_needle_run(m, &rp, tr, NULL, NULL, &err);
        CHECKF(s == VQ_OK, "%s", err.msg);
        int correct = 0;
        for (int i = 0; i < 2 && !s; i++) {
            vq_needle_trial *t = &tr[i];
            printf("ctx %d depth %.2f: %s -> '%s' %s (%.1f s)\n", t->ctx, t->depth, t->number, t->gen,
                   t->correct ? "ok" : "miss", t->seconds);
            CHECK(t->ctx == ctx && t->ctx_index == 0 && t->spec_index == 0 && t->trial == 0 && t->depth_index == i);
            CHECK(t->depth == dd[i] && fabs(t->depth_actual - dd[i]) < 0.05);
            CHECK(t->n_prompt == ctx - 8 && t->n_gen >= 1 && t->n_gen <= 8);
            CHECK(t->gen[0] != 0);
            CHECK(t->correct == (strstr(t->gen, t->number) != NULL));
            /* the record's number is the one a rebuilt prompt hides */
            vq_needle_params q = rp.base;
            q.ctx = ctx; q.depth = dd[i]; q.seed = vq_needle_trial_seed(seed, ctx, i, 0);
            vq_needle_prompt pr;
            if (!vq_needle_build(m, &q, &pr, &err)) {
                CHECK(!strcmp(pr.number, t->number) && pr.needle_at == t->needle_at);
                vq_needle_prompt_free(&pr);
            }
            correct += t->correct;
        }
        printf("f16 at ctx %d: %d/2 correct (printed, not asserted)\n", ctx, correct);
    }
    free(wiki);
    vq_model_free(m);
    return vq_t_done();
}
