/* tasks.c: RULER-style synthetic tasks (Hsieh et al. 2024, "RULER: What's the Real Context Size of
 * Your Long-Context Language Models?"): needles with keys (one, several keys, several values),
 * variable tracking and common-word extraction, each a prompt of at most ctx - n_gen tokens with
 * the answers it must contain. A prompt is built from separately tokenized pieces (as needle.c
 * does): [BOS] [chat head] instruction, a body of units (filler sentences with the task's lines
 * placed at seeded unit boundaries, or CWE's numbered words), question [chat tail] answer primer.
 * Every arm answers the same prompt greedily; the score of a trial is the fraction of the answers
 * found in the generated text (RULER's string_match_all). docs/tasks.md. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/eval.h"
#include "lab/prompt.h"

/* words for keys, variable names' stand-ins and CWE's lists: common English nouns, each a
 * separate word of the vocabularies we run (a key needs to be findable, not rare) */
static const char *const k_words[] = {
    "apple", "river", "garden", "window", "silver", "candle", "forest", "pepper", "rabbit", "violin",
    "mirror", "pencil", "button", "castle", "dragon", "marble", "orange", "parrot", "rocket", "saddle",
    "tunnel", "wallet", "anchor", "basket", "cactus", "dinner", "engine", "falcon", "ginger", "hammer",
    "island", "jacket", "kettle", "ladder", "magnet", "napkin", "oyster", "pillow", "quartz", "ribbon",
    "salmon", "ticket", "umbrella", "valley", "walnut", "yellow", "zipper", "bridge", "cotton", "desert",
    "feather", "glacier", "harbor", "insect", "jungle", "kitten", "lemon", "meadow", "needle", "ocean",
    "planet", "puzzle", "rainbow", "shadow", "spider", "thunder", "tomato", "trumpet", "turtle", "velvet",
    "wizard", "bottle", "camera", "cookie", "copper", "crystal", "doctor", "donkey", "finger", "flower",
    "guitar", "helmet", "hunter", "lizard", "monkey", "museum", "nickel", "noodle", "palace", "peanut",
    "pirate", "potato", "powder", "prison", "school", "sister", "spring", "stable", "summer", "tiger",
    "tower", "village", "water", "winter", "wolf", "yogurt", "bamboo", "beetle", "blanket", "cabin",
    "carpet", "cherry", "circus", "cousin", "dolphin", "eagle", "fabric", "fossil", "goblin", "gravel",
};
#define N_WORDS ((int)VQ_ARRAY_LEN(k_words))

static const char *const k_classic[] = { " The grass is green.", " The sky is blue.", " The sun is yellow.",
                                         " Here we go.", " There and back again." };

static const char *const k_names[VQ_TASK_N] = { "niah_single", "niah_multikey", "niah_multivalue", "vt", "cwe" };

const char *vq_task_name(vq_task_kind k) { return k >= 0 && k < VQ_TASK_N ? k_names[k] : "?"; }

int vq_task_find(const char *name) {
    for (int i = 0; i < VQ_TASK_N; i++)
        if (name && !strcmp(name, k_names[i])) return i;
    return -1;
}

int vq_task_default_n_gen(vq_task_kind k) {
    switch (k) {
    case VQ_TASK_NIAH_SINGLE: case VQ_TASK_NIAH_MULTIKEY: return 16;
    case VQ_TASK_NIAH_MULTIVALUE: return 48;
    case VQ_TASK_VT: return 32;
    default: return 64;
    }
}

/* ---- the task's text: instruction, lines to place, question and primer ---- */
typedef struct task_text {
    char instr[256];
    char lines[8][160]; int n_lines;     /* placed in the body at seeded unit boundaries (in order) */
    char question[256], primer[256];
} task_text;

static void number7(vq_rng *r, char *out) {
    snprintf(out, VQ_TASK_ANSWER_LEN, "%07llu", (unsigned long long)(1000000 + vq_rng_u64(r) % 9000000));
}

/* k distinct word indices into idx */
static void pick_words(vq_rng *r, int *idx, int k) {
    for (int i = 0; i < k; i++) {
        int w, dup;
        do {
            w = (int)(vq_rng_u64(r) % N_WORDS);
            dup = 0;
            for (int j = 0; j < i; j++) dup |= idx[j] == w;
        } while (dup);
        idx[i] = w;
    }
}

static void add_answer(vq_task_prompt *o, const char *a) {
    size_t n = strnlen(a, VQ_TASK_ANSWER_LEN - 1);
    memcpy(o->answers[o->n_answers], a, n);
    o->answers[o->n_answers++][n] = 0;
}

static void upper5(vq_rng *r, char *out) {
    for (int i = 0; i < 5; i++) out[i] = (char)('A' + vq_rng_u64(r) % 26);
    out[5] = 0;
}

static vq_status make_text(vq_task_kind kind, vq_rng *r, task_text *t, vq_task_prompt *out, vq_err *err) {
    memset(t, 0, sizeof *t);
    out->n_answers = 0;
    if (kind == VQ_TASK_NIAH_SINGLE || kind == VQ_TASK_NIAH_MULTIKEY || kind == VQ_TASK_NIAH_MULTIVALUE) {
        snprintf(t->instr, sizeof t->instr, "Some special magic numbers are hidden within the following text. "
                 "Make sure to memorize them. I will quiz you about the numbers afterwards.");
        int keys[4];
        pick_words(r, keys, 4);
        int n = kind == VQ_TASK_NIAH_SINGLE ? 1 : 4;
        char val[4][VQ_TASK_ANSWER_LEN];
        for (int i = 0; i < n; i++) {
            for (int dup = 1; dup;) {   /* distinct values */
                number7(r, val[i]);
                dup = 0;
                for (int j = 0; j < i; j++) dup |= !strcmp(val[i], val[j]);
            }
            const char *key = k_words[kind == VQ_TASK_NIAH_MULTIVALUE ? keys[0] : keys[i]];
            snprintf(t->lines[i], sizeof t->lines[i], " One of the special magic numbers for %s is: %s.", key, val[i]);
        }
        t->n_lines = n;
        const char *key = k_words[keys[0]];
        if (kind == VQ_TASK_NIAH_MULTIVALUE) {
            snprintf(t->question, sizeof t->question, " What are all the special magic numbers for %s mentioned "
                     "in the provided text?", key);
            snprintf(t->primer, sizeof t->primer, " The special magic numbers for %s mentioned in the provided "
                     "text are", key);
            for (int i = 0; i < n; i++) add_answer(out, val[i]);
        } else {
            snprintf(t->question, sizeof t->question, " What is the special magic number for %s mentioned in the "
                     "provided text?", key);
            snprintf(t->primer, sizeof t->primer, " The special magic number for %s mentioned in the provided "
                     "text is", key);
            add_answer(out, val[0]);
        }
        /* the asked line's place among the lines: shuffled so it is not always first */
        for (int i = n - 1; i > 0; i--) {
            int j = (int)(vq_rng_u64(r) % (uint64_t)(i + 1));
            char tmp[160];
            memcpy(tmp, t->lines[i], sizeof tmp);
            memcpy(t->lines[i], t->lines[j], sizeof tmp);
            memcpy(t->lines[j], tmp, sizeof tmp);
        }
        return VQ_OK;
    }
    if (kind == VQ_TASK_VT) {   /* one chain of 4 hops: VAR A = N, VAR B = VAR A, ... */
        snprintf(t->instr, sizeof t->instr, "Memorize and track the chain(s) of variable assignment hidden in the "
                 "following text.");
        char num[VQ_TASK_ANSWER_LEN], names[5][8];
        snprintf(num, sizeof num, "%05llu", (unsigned long long)(10000 + vq_rng_u64(r) % 90000));
        for (int i = 0; i < 5; i++) {
            int dup;
            do {
                upper5(r, names[i]);
                dup = 0;
                for (int j = 0; j < i; j++) dup |= !strcmp(names[i], names[j]);
            } while (dup);
        }
        snprintf(t->lines[0], sizeof t->lines[0], " VAR %s = %s.", names[0], num);
        for (int i = 1; i < 5; i++) snprintf(t->lines[i], sizeof t->lines[i], " VAR %s = VAR %s.", names[i], names[i - 1]);
        t->n_lines = 5;
        snprintf(t->question, sizeof t->question, " Question: Find all variables that are assigned the value %s in "
                 "the text above.", num);
        snprintf(t->primer, sizeof t->primer, " Answer: According to the chain(s) of variable assignment in the text "
                 "above, 5 variables are assigned the value %s, they are:", num);
        for (int i = 0; i < 5; i++) add_answer(out, names[i]);
        return VQ_OK;
    }
    if (kind == VQ_TASK_CWE) {
        snprintf(t->instr, sizeof t->instr, "Below is a numbered list of words. In these words, some appear more "
                 "often than others. Memorize the ones that appear most often.");
        snprintf(t->question, sizeof t->question, " Question: What are the 10 most common words in the above list?");
        snprintf(t->primer, sizeof t->primer, " Answer: The top 10 words that appear most often in the list are:");
        return VQ_OK;   /* the words (and answers) come with the body */
    }
    return vq_err_set(err, VQ_ERR_ARG, "tasks: unknown task %d", (int)kind);
}

/* ---- building ---- */
static vq_status check(const vq_task_params *p, vq_err *err) {
    if (p->kind < 0 || p->kind >= VQ_TASK_N) return vq_err_set(err, VQ_ERR_ARG, "tasks: unknown task %d", (int)p->kind);
    if (p->n_gen < 1 || p->n_gen > 512) return vq_err_set(err, VQ_ERR_ARG, "tasks: n_gen %d is outside 1..512", p->n_gen);
    if (p->ctx < 2) return vq_err_set(err, VQ_ERR_ARG, "tasks: ctx %d is too small", p->ctx);
    return VQ_OK;
}

/* head (BOS, chat head, instruction) and tail (question, chat tail, primer) */
static vq_status frame(const vq_model *m, const vq_task_params *p, const task_text *t, vq_ivec *head, vq_ivec *tail,
                       vq_err *err) {
    vq_status s = VQ_OK;
    char *chat = NULL, *mark = NULL;
    if (p->chat) {
        if (!vq_model_chat_template(m))
            return vq_err_set(err, VQ_ERR_UNSUPPORTED, "tasks: --format chat: the model file has no chat template");
        const vq_chat_message user = { "user", "\x01" };
        chat = vq_chat_apply(m, &user, 1, 1, 1, err);
        if (!chat) return err && err->code ? err->code : VQ_ERR_UNSUPPORTED;
        mark = strchr(chat, '\x01');
        if (!mark) { free(chat); return vq_err_set(err, VQ_ERR_UNSUPPORTED, "tasks: chat template lost the user message"); }
    }
    if (vq_token_add_bos(m) && vq_token_bos(m) >= 0) {
        int bos = vq_token_bos(m);
        if (vq_ivec_push(head, &bos, 1)) { s = vq_err_set(err, VQ_ERR_NOMEM, "tasks: out of memory"); goto out; }
    }
    if (chat && (s = vq_tok_append(m, chat, (size_t)(mark - chat), 1, head, err))) goto out;
    if ((s = vq_tok_append_str(m, t->instr, 0, head, err))) goto out;
    if ((s = vq_tok_append_str(m, t->question, 0, tail, err))) goto out;
    if (chat && (s = vq_tok_append_str(m, mark + 1, 1, tail, err))) goto out;
    s = vq_tok_append_str(m, chat ? t->primer + 1 : t->primer, 0, tail, err);   /* after a chat tail: no leading space */
out:
    free(chat);
    return s;
}

/* the next filler unit: a sentence of the text (lab/prompt.h), or the classic sentences in turn */
typedef struct filler { int use_text, classic; vq_sentences text; } filler;
static int next_unit(filler *f, char *buf, size_t cap) {
    if (!f->use_text) {
        snprintf(buf, cap, "%s", k_classic[f->classic]);
        f->classic = (f->classic + 1) % (int)VQ_ARRAY_LEN(k_classic);
        return 1;
    }
    return vq_sentences_next(&f->text, buf, cap);
}

/* body of a line task: filler units up to the budget, the lines at sorted seeded unit boundaries */
static vq_status body_lines(const vq_model *m, const vq_task_params *p, const task_text *t, vq_rng *r, int budget,
                            vq_ivec *body, vq_err *err) {
    vq_ivec line_tok[8] = { { 0 } };
    int lines_n = 0;
    vq_status s = VQ_OK;
    for (int i = 0; i < t->n_lines && !s; i++) {
        s = vq_tok_append_str(m, t->lines[i], 0, &line_tok[i], err);
        lines_n += line_tok[i].n;
    }
    vq_ivec fill = { 0 }, bounds = { 0 };
    if (!s && budget - lines_n < 1)
        s = vq_err_set(err, VQ_ERR_RANGE, "tasks: ctx %d is too small for %s: its fixed parts and %d answer tokens "
                       "leave no room for filler", p->ctx, vq_task_name(p->kind), p->n_gen);
    filler f = { 0 };
    if (!s && p->kind != VQ_TASK_VT && p->filler_text && p->filler_text[0]) {   /* VT: RULER's noise */
        f.use_text = 1;
        vq_sentences_start(&f.text, p->filler_text, vq_rng_u64(r));
    }
    char unit[2048];
    while (!s && fill.n < budget - lines_n) {
        if (!next_unit(&f, unit, sizeof unit)) {
            s = vq_err_set(err, VQ_ERR_FORMAT, "tasks: the filler text has no sentences");
            break;
        }
        int at = fill.n;
        if (vq_ivec_push(&bounds, &at, 1)) s = vq_err_set(err, VQ_ERR_NOMEM, "tasks: out of memory");
        else s = vq_tok_append_str(m, unit, 0, &fill, err);
    }
    if (!s) {
        /* whole sentences only: when the last one does not fit, the filler ends before it (a prompt
         * is up to a sentence shorter than ctx - n_gen); a single sentence too long is cut */
        int target = budget - lines_n;
        if (fill.n > target) {
            if (bounds.n > 1) fill.n = bounds.v[--bounds.n];
            else fill.n = target;
        }
        /* each line at a distinct boundary drawn uniformly, in increasing order */
        int at[8];
        for (int i = 0; i < t->n_lines; i++) at[i] = bounds.v[vq_rng_u64(r) % (uint64_t)bounds.n];
        for (int i = 1; i < t->n_lines; i++)
            for (int j = i; j > 0 && at[j] < at[j - 1]; j--) { int x = at[j]; at[j] = at[j - 1]; at[j - 1] = x; }
        int from = 0;
        for (int i = 0; i < t->n_lines && !s; i++) {
            if (vq_ivec_push(body, fill.v + from, at[i] - from) || vq_ivec_push(body, line_tok[i].v, line_tok[i].n))
                s = vq_err_set(err, VQ_ERR_NOMEM, "tasks: out of memory");
            from = at[i];
        }
        if (!s && vq_ivec_push(body, fill.v + from, fill.n - from)) s = vq_err_set(err, VQ_ERR_NOMEM, "tasks: out of memory");
    }
    for (int i = 0; i < 8; i++) free(line_tok[i].v);
    free(fill.v); free(bounds.v);
    return s;
}

/* CWE's body: " 1. word 2. word ..." with 10 common words (each ~25 % of the list / 10 times) and
 * uncommon ones (3 times each), shuffled, cut to the budget at an item boundary; the answers are
 * the 10 most frequent words of what was kept (refused when the 10th ties the 11th) */
/* one CWE list of n_items: 10 common words (order[0..9]) c_freq times each, uncommon ones 3 times,
 * shuffled, tokenized item by item up to the budget; returns the items kept (counts per word) */
static int cwe_list(const vq_model *m, const int *order, int n_items, vq_rng *r, int budget, vq_ivec *body,
                    int *count, vq_status *st, vq_err *err) {
    int c_freq = VQ_MAX(6, n_items * 3 / 100), n_unc = VQ_MIN(N_WORDS - 10, VQ_MAX(0, n_items - 10 * c_freq) / 3);
    int n_list = 10 * c_freq + 3 * n_unc;
    int *list = malloc(sizeof(int) * (size_t)n_list);
    if (!list) { *st = vq_err_set(err, VQ_ERR_NOMEM, "tasks: out of memory"); return 0; }
    int k = 0;
    for (int i = 0; i < 10; i++) for (int j = 0; j < c_freq; j++) list[k++] = order[i];
    for (int i = 0; i < n_unc; i++) for (int j = 0; j < 3; j++) list[k++] = order[10 + i];
    for (int i = n_list - 1; i > 0; i--) {
        int j = (int)(vq_rng_u64(r) % (uint64_t)(i + 1)), x = list[i];
        list[i] = list[j]; list[j] = x;
    }
    memset(count, 0, sizeof(int) * N_WORDS);
    body->n = 0;
    char item[64];
    int kept = 0;
    vq_status s = VQ_OK;
    for (int i = 0; i < n_list && !s; i++) {
        snprintf(item, sizeof item, " %d. %s", i + 1, k_words[list[i]]);
        vq_ivec it = { 0 };
        s = vq_tok_append_str(m, item, 0, &it, err);
        if (!s && body->n + it.n > budget) { free(it.v); break; }
        if (!s && vq_ivec_push(body, it.v, it.n)) s = vq_err_set(err, VQ_ERR_NOMEM, "tasks: out of memory");
        count[list[i]]++;
        kept++;
        free(it.v);
    }
    free(list);
    *st = s;
    return kept;
}

/* CWE's body: " 1. word 2. word ..." with 10 common words (~30 % of the items) and uncommon ones
 * (3 times each), shuffled, ending within one item of the budget. A first list planned for short
 * items tells how many fit; the list is then planned for that many and made again (cut by at
 * most a few items, so it still ends within one item of the budget). The answers are the 10 most frequent words kept (refused on a tie). */
static vq_status body_cwe(const vq_model *m, const vq_task_params *p, vq_rng *r, int budget, vq_ivec *body,
                          vq_task_prompt *out, vq_err *err) {
    vq_ivec probe = { 0 };
    vq_status s = vq_tok_append_str(m, " 10. umbrella", 0, &probe, err);   /* tokens of a short item */
    int per = probe.n > 0 ? probe.n : 4;
    free(probe.v);
    if (s) return s;
    if (budget / per < 40)
        return vq_err_set(err, VQ_ERR_RANGE, "tasks: ctx %d is too small for cwe: %d words fit, 40 are needed",
                          p->ctx, budget / per);
    int order[N_WORDS], count[N_WORDS];
    pick_words(r, order, N_WORDS);             /* a permutation: the first 10 are the common words */
    int kept = cwe_list(m, order, budget / VQ_MAX(2, per - 1), r, budget, body, count, &s, err);
    if (!s) cwe_list(m, order, kept + 4, r, budget, body, count, &s, err);
    if (s) return s;
    int top[11];
    for (int t = 0; t < 11; t++) {
        int best = -1;
        for (int w = 0; w < N_WORDS; w++) {
            int used = 0;
            for (int j = 0; j < t; j++) used |= top[j] == w;
            if (!used && (best < 0 || count[w] > count[best])) best = w;
        }
        top[t] = best;
    }
    if (count[top[9]] <= count[top[10]])
        return vq_err_set(err, VQ_ERR_RANGE, "tasks: ctx %d is too small for cwe: the 10th most common word ties "
                          "the 11th", p->ctx);
    out->n_answers = 0;
    for (int t = 0; t < 10; t++) add_answer(out, k_words[top[t]]);
    return VQ_OK;
}

vq_status vq_task_build(const vq_model *m, const vq_task_params *p, vq_task_prompt *out, vq_err *err) {
    memset(out, 0, sizeof *out);
    vq_status s = check(p, err);
    if (s) return s;
    vq_rng r;
    vq_rng_seed(&r, p->seed);
    task_text t;
    if ((s = make_text(p->kind, &r, &t, out, err))) return s;
    vq_ivec head = { 0 }, tail = { 0 }, body = { 0 }, all = { 0 };
    if ((s = frame(m, p, &t, &head, &tail, err))) goto done;
    int budget = p->ctx - p->n_gen - head.n - tail.n;
    if (budget < 1) {
        s = vq_err_set(err, VQ_ERR_RANGE, "tasks: ctx %d is too small for %s: instruction, question and %d answer "
                       "tokens need %d", p->ctx, vq_task_name(p->kind), p->n_gen, p->ctx - budget + 1);
        goto done;
    }
    s = p->kind == VQ_TASK_CWE ? body_cwe(m, p, &r, budget, &body, out, err)
                               : body_lines(m, p, &t, &r, budget, &body, err);
    if (s) goto done;
    if (vq_ivec_push(&all, head.v, head.n) || vq_ivec_push(&all, body.v, body.n) || vq_ivec_push(&all, tail.v, tail.n)) {
        s = vq_err_set(err, VQ_ERR_NOMEM, "tasks: out of memory");
        goto done;
    }
    out->tok = all.v; out->n = all.n;
    all.v = NULL;
done:
    free(head.v); free(tail.v); free(body.v); free(all.v);
    if (s) memset(out, 0, sizeof *out);
    return s;
}

void vq_task_prompt_free(vq_task_prompt *pr) {
    if (!pr) return;
    free(pr->tok);
    memset(pr, 0, sizeof *pr);
}

/* case-insensitive substring (CWE's words may come capitalized) */
static int contains(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return 1;
    }
    return 0;
}

double vq_task_score(const vq_task_prompt *pr, const char *gen) {
    if (!pr->n_answers) return 0;
    int k = 0;
    for (int i = 0; i < pr->n_answers; i++) k += contains(gen, pr->answers[i]);
    return (double)k / pr->n_answers;
}

uint64_t vq_task_trial_seed(uint64_t seed, int kind, int ctx, int trial) {
    uint64_t x = seed ^ ((uint64_t)kind << 56) ^ ((uint64_t)ctx << 20) ^ (uint64_t)trial;
    for (int i = 0; i < 3; i++) {   /* splitmix64 rounds */
        x += 0x9E3779B97F4A7C15ull;
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        x ^= x >> 31;
    }
    return x;
}

typedef struct gen_buf { char *s; size_t n, cap; } gen_buf;
static int on_token(const char *bytes, size_t n, void *user) {
    gen_buf *g = user;
    size_t k = VQ_MIN(n, g->cap - 1 - g->n);
    memcpy(g->s + g->n, bytes, k);
    g->n += k;
    g->s[g->n] = 0;
    return 0;
}

vq_status vq_tasks_run(const vq_model *m, const vq_tasks_config *c, vq_task_outcome *out,
                       vq_task_outcome_cb cb, void *user, vq_err *err) {
    if (c->n_kinds < 1 || c->n_ctxs < 1 || c->n_specs < 1 || c->trials < 1)
        return vq_err_set(err, VQ_ERR_ARG, "tasks: need at least one task, ctx, arm and trial");
    /* every prompt is built (and so checked) before anything runs */
    long total = (long)c->n_kinds * c->n_ctxs * c->trials * c->n_specs, done = 0;
    int n_prompts = c->n_kinds * c->n_ctxs * c->trials;
    vq_task_prompt *pr = calloc((size_t)n_prompts, sizeof *pr);
    if (!pr) return vq_err_set(err, VQ_ERR_NOMEM, "tasks: out of memory");
    vq_status s = VQ_OK;
    for (int i = 0; i < n_prompts && !s; i++) {
        int k = i / (c->n_ctxs * c->trials), ci = i / c->trials % c->n_ctxs, t = i % c->trials;
        if (c->ctxs[ci] > vq_model_n_ctx_train(m) && vq_model_n_ctx_train(m) > 0) {
            s = vq_err_set(err, VQ_ERR_RANGE, "tasks: ctx %d is above the model's context length %d", c->ctxs[ci],
                           vq_model_n_ctx_train(m));
            break;
        }
        vq_task_params p = { .kind = c->kinds[k], .ctx = c->ctxs[ci],
                             .n_gen = c->n_gen > 0 ? c->n_gen : vq_task_default_n_gen(c->kinds[k]),
                             .seed = vq_task_trial_seed(c->seed, c->kinds[k], c->ctxs[ci], t),
                             .filler_text = c->filler_text, .chat = c->chat };
        s = vq_task_build(m, &p, &pr[i], err);
    }
    for (int i = 0; i < n_prompts && !s; i++) {
        int k = i / (c->n_ctxs * c->trials), ci = i / c->trials % c->n_ctxs, t = i % c->trials;
        int n_gen = c->n_gen > 0 ? c->n_gen : vq_task_default_n_gen(c->kinds[k]);
        for (int a = 0; a < c->n_specs && !s; a++) {
            vq_task_outcome *o = &out[done];
            memset(o, 0, sizeof *o);
            o->kind = c->kinds[k]; o->ctx_index = ci; o->spec_index = a; o->trial = t;
            o->ctx = c->ctxs[ci]; o->n_prompt = pr[i].n; o->n_answers = pr[i].n_answers;
            memcpy(o->answers, pr[i].answers, sizeof o->answers);
            vq_gen_params gp = { .n_predict = n_gen, .n_ctx = pr[i].n + n_gen, .batch = c->batch > 0 ? c->batch : 64,
                                 .sp = { .temp = 0, .top_k = 0, .top_p = 1, .min_p = 0 }, .kv_seed = c->kv_seed };
            gen_buf g = { o->gen, 0, sizeof o->gen };
            vq_gen_stats st;
            s = vq_generate_spec(m, c->specs[a], pr[i].tok, pr[i].n, &gp, on_token, &g, &st, err);
            if (s) break;
            o->n_gen = st.n_gen;
            o->score = vq_task_score(&pr[i], o->gen);
            o->seconds = st.t_prefill + st.t_decode;
            done++;
            if (cb) cb(o, done, total, user);
        }
    }
    for (int i = 0; i < n_prompts; i++) vq_task_prompt_free(&pr[i]);
    free(pr);
    return s;
}
