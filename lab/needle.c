/* needle.c: passkey retrieval. A prompt is the concatenation of separately tokenized pieces
 * ([BOS] [chat head] prefix, filler, needle, filler, question [chat tail, answer primer]), so its
 * length is exactly ctx - n_gen tokens and the needle sits at a filler sentence boundary chosen
 * by token count; the model answers greedily through vq_generate with the arm's KV cache. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/eval.h"
#include "lab/needle.h"
#include "lab/prompt.h"

/* The task as Mohtashami & Jaggi (2023, "Landmark Attention") posed it. */
static const char *k_prefix = "There is an important info hidden inside a lot of irrelevant text. "
                              "Find it and memorize it. I will quiz you about the important information there.";
static const char *k_classic[] = { " The grass is green.", " The sky is blue.", " The sun is yellow.",
                                   " Here we go.", " There and back again." };

/* The fixed pieces of a prompt for one number. */
typedef struct pieces { vq_ivec head, needle, tail; } pieces;

static void pieces_free(pieces *p) { free(p->head.v); free(p->needle.v); free(p->tail.v); }

static vq_status build_pieces(const vq_model *m, const vq_needle_params *p, const char *number, pieces *pc,
                              vq_err *err) {
    memset(pc, 0, sizeof *pc);
    vq_status s = VQ_OK;
    char *chat = NULL;
    const char *chat_head = NULL, *chat_tail = NULL;
    size_t head_len = 0;
    if (p->format == VQ_NEEDLE_FMT_CHAT) {
        /* render the template around a marker byte, and keep what comes before and after it */
        if (!vq_model_chat_template(m))
            return vq_err_set(err, VQ_ERR_UNSUPPORTED, "--chat: the model file has no chat template");
        const vq_chat_message user = { "user", "\x01" };
        chat = vq_chat_apply(m, &user, 1, 1, 1, err);
        if (!chat) return err && err->code ? err->code : VQ_ERR_UNSUPPORTED;
        char *mark = strchr(chat, '\x01');
        if (!mark) { free(chat); return vq_err_set(err, VQ_ERR_UNSUPPORTED, "needle: chat template lost the user message"); }
        chat_head = chat; head_len = (size_t)(mark - chat); chat_tail = mark + 1;
    }
    if (vq_token_add_bos(m) && vq_token_bos(m) >= 0) {
        int bos = vq_token_bos(m);
        if (vq_ivec_push(&pc->head, &bos, 1)) { s = vq_err_set(err, VQ_ERR_NOMEM, "needle: out of memory"); goto out; }
    }
    if (chat_head && (s = vq_tok_append(m, chat_head, head_len, 1, &pc->head, err))) goto out;
    if ((s = vq_tok_append_str(m, k_prefix, 0, &pc->head, err))) goto out;
    char needle[128];
    snprintf(needle, sizeof needle, " The pass key is %s. Remember it. %s is the pass key.", number, number);
    if ((s = vq_tok_append_str(m, needle, 0, &pc->needle, err))) goto out;
    if (chat_tail) {
        if ((s = vq_tok_append_str(m, " What is the pass key?", 0, &pc->tail, err))) goto out;
        if ((s = vq_tok_append_str(m, chat_tail, 1, &pc->tail, err))) goto out;
        s = vq_tok_append_str(m, "The pass key is", 0, &pc->tail, err);
    } else {
        s = vq_tok_append_str(m, " What is the pass key? The pass key is", 0, &pc->tail, err);
    }
out:
    free(chat);
    if (s) pieces_free(pc);
    return s;
}

static vq_status check_params(const vq_needle_params *p, vq_err *err) {
    if (!(p->depth >= 0 && p->depth <= 1))
        return vq_err_set(err, VQ_ERR_ARG, "needle: depth %g is outside [0, 1]", p->depth);
    if (p->digits < 1 || p->digits > 9)
        return vq_err_set(err, VQ_ERR_ARG, "needle: digits %d is outside 1..9", p->digits);
    if (p->n_gen < 1 || p->n_gen > 256)
        return vq_err_set(err, VQ_ERR_ARG, "needle: n_gen %d is outside 1..256", p->n_gen);
    if (p->filler == VQ_NEEDLE_FILLER_TEXT && (!p->filler_text || !p->filler_text[0]))
        return vq_err_set(err, VQ_ERR_ARG, "needle: text filler chosen but no text given");
    return VQ_OK;
}

int vq_needle_min_ctx(const vq_model *m, const vq_needle_params *p, vq_err *err) {
    vq_needle_params q = *p;
    q.depth = 0;
    if (check_params(&q, err)) return -1;
    char number[16];
    memset(number, '9', (size_t)p->digits);
    number[p->digits] = 0;
    pieces pc;
    if (build_pieces(m, p, number, &pc, err)) return -1;
    int fixed = pc.head.n + pc.needle.n + pc.tail.n;
    pieces_free(&pc);
    return fixed + p->n_gen + 1;
}

/* ---- filler: a stream of sentences ("units"), each tokenized on its own ---- */
typedef struct unit_src {
    const vq_needle_params *p;
    int next_classic;
    vq_sentences text;              /* text filler (lab/prompt.h) */
} unit_src;

static uint64_t splitmix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t vq_needle_trial_seed(uint64_t seed, int ctx, int depth_index, int trial) {
    return splitmix(splitmix(splitmix(seed) ^ (uint64_t)ctx) ^ ((uint64_t)depth_index << 20 | (uint64_t)trial));
}

vq_status vq_needle_build(const vq_model *m, const vq_needle_params *p, vq_needle_prompt *out, vq_err *err) {
    memset(out, 0, sizeof *out);
    vq_status s = check_params(p, err);
    if (s) return s;
    vq_rng rng;
    vq_rng_seed(&rng, p->seed);

    /* the fixed pieces' length does not depend on which digits the number has (checked below) */
    int min_ctx = vq_needle_min_ctx(m, p, err);
    if (min_ctx < 0) return err && err->code ? err->code : VQ_ERR_ARG;
    if (p->ctx < min_ctx)
        return vq_err_set(err, VQ_ERR_RANGE,
                          "needle: ctx %d is too small: prefix, needle, question and %d answer tokens need "
                          "at least %d tokens", p->ctx, p->n_gen, min_ctx);

    unit_src u = { .p = p };
    if (p->filler == VQ_NEEDLE_FILLER_TEXT) vq_sentences_start(&u.text, p->filler_text, vq_rng_u64(&rng));
    vq_ivec fill = { 0 }, bounds = { 0 };
    char *ftext = NULL; size_t ftext_n = 0, ftext_cap = 0;  /* the units' text, to keep the number out */
    pieces pc = { 0 };
    int budget;                 /* filler tokens: what the pieces and the answer leave */
    char number[16];

    /* the number first (from the seed), re-drawn while the filler text contains it */
    uint64_t pow10 = 1;
    for (int i = 1; i < p->digits; i++) pow10 *= 10;
    uint64_t num = pow10 + vq_rng_u64(&rng) % (9 * pow10);     /* no leading zero */
    snprintf(number, sizeof number, "%llu", (unsigned long long)num);
    if ((s = build_pieces(m, p, number, &pc, err))) goto fail;
    budget = p->ctx - p->n_gen - (pc.head.n + pc.needle.n + pc.tail.n);

    /* filler: whole sentences until the budget is reached; the last one is cut to fit */
    char unit[2048];
    while (fill.n < budget) {
        if (p->filler == VQ_NEEDLE_FILLER_TEXT) {
            if (!vq_sentences_next(&u.text, unit, sizeof unit)) {
                s = vq_err_set(err, VQ_ERR_FORMAT, "needle: the filler text has no sentences (only headings or blank lines)");
                goto fail;
            }
        } else {
            snprintf(unit, sizeof unit, "%s", k_classic[u.next_classic]);
            u.next_classic = (u.next_classic + 1) % (int)VQ_ARRAY_LEN(k_classic);
        }
        int start = fill.n;
        if (vq_ivec_push(&bounds, &start, 1)) goto nomem;
        if ((s = vq_tok_append_str(m, unit, 0, &fill, err))) goto fail;
        out->max_unit = VQ_MAX(out->max_unit, fill.n - start);
        size_t ul = strlen(unit);
        if (ftext_n + ul + 1 > ftext_cap) {
            size_t cap = VQ_MAX(ftext_cap * 2, ftext_n + ul + 1 + 4096);
            char *t = realloc(ftext, cap);
            if (!t) goto nomem;
            ftext = t; ftext_cap = cap;
        }
        memcpy(ftext + ftext_n, unit, ul + 1);
        ftext_n += ul;
    }
    fill.n = budget;                        /* the last sentence is cut to fit exactly */
    while (bounds.n > 0 && bounds.v[bounds.n - 1] >= budget) bounds.n--;
    if (vq_ivec_push(&bounds, &budget, 1)) goto nomem;

    for (int tries = 0; ftext && strstr(ftext, number); tries++) {
        if (tries == 1000) { s = vq_err_set(err, VQ_ERR_ARG, "needle: no %d-digit number is absent from the filler", p->digits); goto fail; }
        num = pow10 + vq_rng_u64(&rng) % (9 * pow10);
        snprintf(number, sizeof number, "%llu", (unsigned long long)num);
        pieces_free(&pc);
        if ((s = build_pieces(m, p, number, &pc, err))) goto fail;
        if (p->ctx - p->n_gen - (pc.head.n + pc.needle.n + pc.tail.n) != budget) {
            s = vq_err_set(err, VQ_ERR_UNSUPPORTED, "needle: the needle's token count depends on its digits");
            goto fail;
        }
    }

    /* the needle goes to the sentence boundary nearest depth * filler tokens */
    double target = p->depth * budget;
    int at = 0;
    for (int i = 0; i < bounds.n; i++)
        if (fabs(bounds.v[i] - target) < fabs(at - target)) at = bounds.v[i];

    vq_ivec pr = { 0 };
    if (vq_ivec_push(&pr, pc.head.v, pc.head.n) || vq_ivec_push(&pr, fill.v, at)) goto nomem_pr;
    out->needle_at = pr.n;
    if (vq_ivec_push(&pr, pc.needle.v, pc.needle.n) || vq_ivec_push(&pr, fill.v + at, budget - at) ||
        vq_ivec_push(&pr, pc.tail.v, pc.tail.n)) goto nomem_pr;
    out->tok = pr.v; out->n = pr.n;
    out->needle_len = pc.needle.n;
    out->filler_total = budget;
    out->filler_before = at;
    snprintf(out->number, sizeof out->number, "%s", number);
    free(fill.v); free(bounds.v); free(ftext); pieces_free(&pc);
    return VQ_OK;
nomem_pr:
    free(pr.v);
nomem:
    s = vq_err_set(err, VQ_ERR_NOMEM, "needle: out of memory");
fail:
    free(fill.v); free(bounds.v); free(ftext); pieces_free(&pc);
    memset(out, 0, sizeof *out);
    return s;
}

void vq_needle_prompt_free(vq_needle_prompt *pr) {
    if (!pr) return;
    free(pr->tok);
    memset(pr, 0, sizeof *pr);
}

/* ---- running ---- */
typedef struct gen_buf { char *s; size_t n, cap; } gen_buf;

static int on_token(const char *bytes, size_t n, void *user) {
    gen_buf *g = user;
    size_t room = g->cap - 1 - g->n;
    size_t k = n < room ? n : room;
    memcpy(g->s + g->n, bytes, k);
    g->n += k;
    g->s[g->n] = 0;
    return 0;
}

vq_status vq_needle_trial_run(const vq_model *m, const vq_kv_spec *kv_spec, const vq_needle_prompt *pr,
                              int n_gen, int batch, uint64_t kv_seed, vq_needle_trial *out, vq_err *err) {
    vq_gen_params gp = { .n_predict = n_gen, .n_ctx = pr->n + n_gen, .batch = batch > 0 ? batch : 64,
                         .sp = { .temp = 0, .top_k = 0, .top_p = 1, .min_p = 0 }, .kv_seed = kv_seed };
    gen_buf g = { out->gen, 0, sizeof out->gen };
    out->gen[0] = 0;
    vq_gen_stats st;
    vq_status s = vq_generate_spec(m, kv_spec, pr->tok, pr->n, &gp, on_token, &g, &st, err);
    if (s) return s;
    out->n_prompt = pr->n;
    out->needle_at = pr->needle_at;
    out->depth_actual = pr->filler_total ? (double)pr->filler_before / pr->filler_total : 0;
    snprintf(out->number, sizeof out->number, "%s", pr->number);
    out->n_gen = st.n_gen;
    out->correct = strstr(out->gen, pr->number) != NULL;
    out->seconds = st.t_prefill + st.t_decode;
    return VQ_OK;
}

static vq_status run_all(const vq_model *m, const vq_needle_run_params *p, const vq_kv_spec *const *specs,
                         vq_needle_trial *out, vq_needle_cb cb, void *user, vq_err *err);

vq_status vq_needle_run(const vq_model *m, const vq_needle_run_params *p, vq_needle_trial *out,
                        vq_needle_cb cb, void *user, vq_err *err) {
    if (p->n_ctxs < 1 || p->n_depths < 1 || p->n_specs < 1)
        return vq_err_set(err, VQ_ERR_ARG, "needle: need at least one ctx, one depth and one arm (got %d, %d, %d)",
                          p->n_ctxs, p->n_depths, p->n_specs);
    if (p->trials < 1) return vq_err_set(err, VQ_ERR_ARG, "needle: trials %d must be at least 1", p->trials);
    for (int d = 0; d < p->n_depths; d++)
        if (!(p->depths[d] >= 0 && p->depths[d] <= 1))
            return vq_err_set(err, VQ_ERR_ARG, "needle: depth %g (item %d of the list) is outside [0, 1]",
                              p->depths[d], d + 1);
    vq_needle_params bp = p->base;
    bp.depth = 0;
    int min_ctx = vq_needle_min_ctx(m, &bp, err);
    if (min_ctx < 0) return err && err->code ? err->code : VQ_ERR_ARG;
    int max_ctx = 0;
    for (int c = 0; c < p->n_ctxs; c++) {
        int ctx = p->ctxs[c];
        if (vq_model_n_ctx_train(m) > 0 && ctx > vq_model_n_ctx_train(m))
            return vq_err_set(err, VQ_ERR_RANGE, "needle: ctx %d is above the model's context length %d (%s)",
                              ctx, vq_model_n_ctx_train(m), vq_model_path(m));
        if (ctx < min_ctx)
            return vq_err_set(err, VQ_ERR_RANGE,
                              "needle: ctx %d is too small: prefix, needle, question and %d answer tokens need "
                              "at least %d tokens", ctx, bp.n_gen, min_ctx);
        max_ctx = VQ_MAX(max_ctx, ctx);
    }
    /* every arm parsed once (or as given) and made once at the largest ctx before any trial */
    vq_kv_spec **own = p->parsed ? NULL : calloc((size_t)p->n_specs, sizeof *own);
    if (!p->parsed && !own) return vq_err_set(err, VQ_ERR_NOMEM, "needle: out of memory");
    const vq_kv_spec *const *specs = p->parsed ? p->parsed : (const vq_kv_spec *const *)own;
    vq_status s = VQ_OK;
    for (int a = 0; a < p->n_specs && !s; a++) {
        if (own && !(own[a] = vq_kv_spec_parse(p->specs[a], err))) { s = err && err->code ? err->code : VQ_ERR_ARG; break; }
        size_t bytes;   /* the cache's own accounting makes one: a spec this model cannot use fails here */
        if (vq_kv_spec_bytes(specs[a], m, max_ctx, &bytes, err)) s = err && err->code ? err->code : VQ_ERR_ARG;
    }
    if (!s) s = run_all(m, p, specs, out, cb, user, err);
    for (int a = 0; own && a < p->n_specs; a++) vq_kv_spec_free(own[a]);
    free(own);
    return s;
}

static vq_status run_all(const vq_model *m, const vq_needle_run_params *p, const vq_kv_spec *const *specs,
                         vq_needle_trial *out, vq_needle_cb cb, void *user, vq_err *err) {
    long total = (long)p->n_ctxs * p->n_depths * p->trials * p->n_specs, done = 0;
    for (int c = 0; c < p->n_ctxs; c++)
        for (int d = 0; d < p->n_depths; d++)
            for (int t = 0; t < p->trials; t++) {
                vq_needle_params q = p->base;
                q.ctx = p->ctxs[c];
                q.depth = p->depths[d];
                q.seed = vq_needle_trial_seed(p->base.seed, q.ctx, d, t);
                vq_needle_prompt pr;
                vq_status s = vq_needle_build(m, &q, &pr, err);
                if (s) return s;
                for (int a = 0; a < p->n_specs; a++) {
                    vq_needle_trial *tr = &out[done];
                    memset(tr, 0, sizeof *tr);
                    tr->ctx_index = c; tr->depth_index = d; tr->spec_index = a; tr->trial = t;
                    tr->ctx = q.ctx; tr->depth = q.depth;
                    s = vq_needle_trial_run(m, specs[a], &pr, q.n_gen, p->batch, p->kv_seed, tr, err);
                    if (s) { vq_needle_prompt_free(&pr); return s; }
                    done++;
                    if (cb) cb(tr, done, total, user);
                }
                vq_needle_prompt_free(&pr);
            }
    return VQ_OK;
}
