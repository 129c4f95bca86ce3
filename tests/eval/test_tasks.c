/* test_tasks.c: the RULER-style task builder (lab/tasks.c) on SmolLM2's tokenizer. For every task
 * and both fillers: the prompt fits ctx - n_gen and is within a sentence (or a CWE item) of it; the
 * answers are what the prompt makes them (needles: the asked key's line holds the value; VT: a
 * chain from the number through the five names in order; CWE: the ten answers are exactly the ten
 * most frequent words, each above every other); same seed -> same prompt, another seed -> another;
 * the score counts answers case-insensitively; too small a ctx is refused with a message. One real
 * greedy run (f16, niah_single, ctx 512) checks the run's records. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../vq_test.h"
#include "lab/eval.h"

static char *detok(const vq_model *m, const int *ids, int n) {
    size_t need = vq_detokenize(m, ids, n, NULL, 0);
    char *s = malloc(need + 1);
    vq_detokenize(m, ids, n, s, need + 1);
    s[need] = 0;
    return s;
}

static int count_occ(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

/* CWE: the words of " N. word" items and their counts; every answer must beat every other word */
static void check_cwe(const char *text, const vq_task_prompt *pr) {
    const char *list = strstr(text, " 1. ");
    CHECKF(list != NULL, "cwe: no numbered list in the prompt");
    if (!list) return;
    char words[512][16]; int counts[512], nw = 0, items = 0;
    for (const char *p = list; (p = strstr(p, ". ")) && strncmp(p, ". Question", 10); ) {
        p += 2;
        char w[16]; int k = 0;
        while (*p >= 'a' && *p <= 'z' && k < 15) w[k++] = *p++;
        w[k] = 0;
        if (!k) continue;
        items++;
        int j = 0;
        while (j < nw && strcmp(words[j], w)) j++;
        if (j == nw && nw < 512) { snprintf(words[nw], 16, "%s", w); counts[nw++] = 0; }
        if (j < 512) counts[j]++;
    }
    CHECKF(items >= 40, "cwe: %d items", items);
    CHECKF(pr->n_answers == 10, "cwe: %d answers", pr->n_answers);
    int min_ans = 1 << 30, max_other = 0;
    for (int j = 0; j < nw; j++) {
        int is_ans = 0;
        for (int a = 0; a < pr->n_answers; a++) is_ans |= !strcmp(words[j], pr->answers[a]);
        if (is_ans) min_ans = counts[j] < min_ans ? counts[j] : min_ans;
        else max_other = counts[j] > max_other ? counts[j] : max_other;
    }
    for (int a = 0; a < pr->n_answers; a++) {
        int found = 0;
        for (int j = 0; j < nw; j++) found |= !strcmp(words[j], pr->answers[a]);
        CHECKF(found, "cwe: answer '%s' is not in the list", pr->answers[a]);
    }
    CHECKF(min_ans > max_other, "cwe: least frequent answer %d times, most frequent other word %d", min_ans, max_other);
}

static void check_task(const vq_model *m, vq_task_kind kind, int ctx, const char *filler, uint64_t seed) {
    vq_err err; vq_err_clear(&err);
    vq_task_params p = { .kind = kind, .ctx = ctx, .n_gen = vq_task_default_n_gen(kind), .seed = seed,
                         .filler_text = filler };
    vq_task_prompt pr, pr2, pr3;
    vq_status s = vq_task_build(m, &p, &pr, &err);
    CHECKF(s == VQ_OK, "%s ctx %d: %s", vq_task_name(kind), ctx, err.msg);
    if (s) return;
    /* fits, and fills the room to within one filler sentence (classic: <= 8 tokens) or CWE item */
    CHECKF(pr.n <= ctx - p.n_gen, "%s: %d prompt tokens > ctx %d - %d", vq_task_name(kind), pr.n, ctx, p.n_gen);
    int slack = filler && kind != VQ_TASK_VT && kind != VQ_TASK_CWE ? 400 : 12;
    CHECKF(pr.n >= ctx - p.n_gen - slack, "%s: %d prompt tokens, room %d", vq_task_name(kind), pr.n, ctx - p.n_gen);
    char *text = detok(m, pr.tok, pr.n);
    char line[160];
    switch (kind) {
    case VQ_TASK_NIAH_SINGLE: case VQ_TASK_NIAH_MULTIKEY: {
        CHECK(pr.n_answers == 1);
        const char *q = strstr(text, "What is the special magic number for ");
        CHECKF(q != NULL, "%s: no question", vq_task_name(kind));
        char key[32] = "";
        if (q) sscanf(q + strlen("What is the special magic number for "), "%31s", key);
        snprintf(line, sizeof line, "One of the special magic numbers for %s is: %s.", key, pr.answers[0]);
        CHECKF(count_occ(text, line) == 1, "%s: the asked key's line '%s' appears %d times", vq_task_name(kind), line,
               count_occ(text, line));
        CHECKF(count_occ(text, "One of the special magic numbers for ") == (kind == VQ_TASK_NIAH_SINGLE ? 1 : 4),
               "%s: %d needles", vq_task_name(kind), count_occ(text, "One of the special magic numbers for "));
        CHECKF(count_occ(text, pr.answers[0]) == 1, "%s: the value appears %d times", vq_task_name(kind),
               count_occ(text, pr.answers[0]));
        break;
    }
    case VQ_TASK_NIAH_MULTIVALUE:
        CHECK(pr.n_answers == 4);
        for (int a = 0; a < pr.n_answers; a++) {
            CHECKF(count_occ(text, pr.answers[a]) == 1, "multivalue: value %s appears %d times", pr.answers[a],
                   count_occ(text, pr.answers[a]));
            for (int b = 0; b < a; b++) CHECK(strcmp(pr.answers[a], pr.answers[b]));
        }
        break;
    case VQ_TASK_VT: {
        CHECK(pr.n_answers == 5);
        const char *q = strstr(text, "assigned the value ");
        char num[16] = "";
        if (q) sscanf(q + strlen("assigned the value "), "%15[0-9]", num);
        snprintf(line, sizeof line, "VAR %s = %s.", pr.answers[0], num);
        const char *at = strstr(text, line);
        CHECKF(at != NULL, "vt: no '%s'", line);
        for (int a = 1; a < pr.n_answers && at; a++) {   /* each link after the previous one */
            snprintf(line, sizeof line, "VAR %s = VAR %s.", pr.answers[a], pr.answers[a - 1]);
            const char *nx = strstr(text, line);
            CHECKF(nx != NULL && nx > at, "vt: link '%s' missing or before its source", line);
            at = nx;
        }
        break;
    }
    case VQ_TASK_CWE:
        check_cwe(text, &pr);
        break;
    default:
        CHECK(0);
    }
    /* deterministic in the seed */
    CHECK(vq_task_build(m, &p, &pr2, &err) == VQ_OK);
    CHECKF(pr2.n == pr.n && !memcmp(pr2.tok, pr.tok, sizeof(int) * (size_t)pr.n) &&
           !memcmp(pr2.answers, pr.answers, sizeof pr.answers), "%s: same seed, another prompt", vq_task_name(kind));
    p.seed = seed + 1;
    CHECK(vq_task_build(m, &p, &pr3, &err) == VQ_OK);
    CHECKF(pr3.n != pr.n || memcmp(pr3.tok, pr.tok, sizeof(int) * (size_t)VQ_MIN(pr.n, pr3.n)) ||
           memcmp(pr3.answers, pr.answers, sizeof pr.answers), "%s: another seed, same prompt", vq_task_name(kind));
    /* scores: all, half, none, case */
    char gen[512] = "";
    for (int a = 0; a < pr.n_answers; a++) { strcat(gen, " "); strcat(gen, pr.answers[a]); }
    CHECKF(vq_task_score(&pr, gen) == 1.0, "%s: full answer scores %g", vq_task_name(kind), vq_task_score(&pr, gen));
    CHECK(vq_task_score(&pr, "nothing here") == 0.0);
    if (pr.n_answers >= 2) {
        snprintf(gen, sizeof gen, "%s", pr.answers[1]);
        for (char *c = gen; *c; c++) if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 32);
        CHECKF(vq_task_score(&pr, gen) == 1.0 / pr.n_answers, "%s: one answer (upper case) scores %g",
               vq_task_name(kind), vq_task_score(&pr, gen));
    }
    free(text);
    vq_task_prompt_free(&pr); vq_task_prompt_free(&pr2); vq_task_prompt_free(&pr3);
}

int main(void) {
    char path[1024], tpath[1024];
    vq_t_model(path, sizeof path);
    vq_err err; vq_err_clear(&err);
    vq_model *m = vq_model_load(path, NULL, &err);
    if (!m) VQ_SKIP("load %s: %s", path, err.msg);
    uint64_t seed = vq_t_seed(20261207);
    snprintf(tpath, sizeof tpath, "%s/data/wikitext-2-raw-test.txt", VQ_SHARED_DIR);
    char *wiki = access(tpath, R_OK) == 0 ? vq_read_file(tpath, NULL, &err) : NULL;
    if (!wiki) printf("note: %s absent, the text-filler checks are skipped\n", tpath);
    for (int k = 0; k < VQ_TASK_N; k++)
        for (int c = 0; c < 2; c++) {
            int ctx = c ? 2048 : 1024;
            for (int t = 0; t < 3; t++) check_task(m, (vq_task_kind)k, ctx, NULL, seed + 17 * (uint64_t)t);
            if (wiki) check_task(m, (vq_task_kind)k, ctx, wiki, seed + 99);
        }
    /* refusals */
    vq_task_prompt pr;
    vq_task_params p = { .kind = VQ_TASK_CWE, .ctx = 300, .n_gen = 64, .seed = seed };
    CHECK(vq_task_build(m, &p, &pr, &err) == VQ_ERR_RANGE && strstr(err.msg, "too small for cwe"));
    p.kind = VQ_TASK_VT; p.ctx = 60;
    CHECKF(vq_task_build(m, &p, &pr, &err) == VQ_ERR_RANGE && strstr(err.msg, "too small for vt"), "%s", err.msg);
    p.n_gen = 0;
    CHECK(vq_task_build(m, &p, &pr, &err) == VQ_ERR_ARG && strstr(err.msg, "n_gen"));
    CHECK(vq_task_find("vt") == VQ_TASK_VT && vq_task_find("ruler") == -1);

    /* one real run: records consistent */
    vq_kv_spec *f16 = vq_kv_spec_parse("f16", &err);
    vq_task_kind kinds[1] = { VQ_TASK_NIAH_SINGLE };
    int ctxs[1] = { 512 };
    vq_tasks_config cfg = { .kinds = kinds, .n_kinds = 1, .ctxs = ctxs, .n_ctxs = 1,
                            .specs = (const vq_kv_spec *const *)&f16, .n_specs = 1, .trials = 1, .seed = seed,
                            .kv_seed = 1 };
    vq_task_outcome out;
    vq_status s = vq_tasks_run(m, &cfg, &out, NULL, NULL, &err);
    CHECKF(s == VQ_OK, "run: %s", err.msg);
    if (!s) {
        CHECK(out.kind == VQ_TASK_NIAH_SINGLE && out.ctx == 512 && out.n_answers == 1 && out.n_gen >= 1);
        CHECK(out.n_prompt <= 512 - vq_task_default_n_gen(VQ_TASK_NIAH_SINGLE));
        CHECK(out.score == (strstr(out.gen, out.answers[0]) ? 1.0 : 0.0));
        printf("real run: answer %s, generated '%s', score %.0f\n", out.answers[0], out.gen, out.score);
    }
    vq_kv_spec_free(f16);
    free(wiki);
    vq_model_free(m);
    return vq_t_done();
}
