/* generate.c: the one generate loop (veloxquant.h). A generator takes tokens one at a time over a
 * session: each becomes the session's pending token, its piece is appended to the answer's text,
 * and the bytes that are decided (no stop string can begin in them, no UTF-8 character is cut)
 * are handed out. vq_session_generate is a loop over vq_generator_step; the server steps many
 * generators in one batched forward pass (vq_generator_step_batch). */
#include <stdlib.h>
#include <string.h>

#include "session/session_impl.h"

struct vq_generator {
    vq_session *s;
    vq_sampler *smp;             /* borrowed; NULL: tokens come through vq_generator_take */
    int n_predict, show_special;
    int n_stop;
    char **stop;                 /* copies */
    size_t *stop_len;
    char *text;                  /* the answer so far */
    size_t tlen, tcap, emitted;  /* text[0..emitted) has been handed out */
    int prev;                    /* the token before the next piece; -2: the session's last */
    int n_gen;
    vq_stop_reason why;          /* VQ_STOP_NONE while it runs */
};

vq_generate_params vq_generate_default_params(void) {
    return (vq_generate_params){ .n_predict = 128, .stop = NULL, .n_stop = 0, .show_special = 0 };
}

const char *vq_stop_reason_name(vq_stop_reason r) {
    switch (r) {
    case VQ_STOP_NONE: return "none";
    case VQ_STOP_LENGTH: return "length";
    case VQ_STOP_EOG: return "eog";
    case VQ_STOP_STRING: return "stop";
    case VQ_STOP_CALLBACK: return "callback";
    case VQ_STOP_CONTEXT: return "context";
    }
    return "unknown";
}

void vq_generator_free(vq_generator *g) {
    if (!g) return;
    for (int i = 0; i < g->n_stop; i++) free(g->stop[i]);
    free(g->stop);
    free(g->stop_len);
    free(g->text);
    free(g);
}

vq_generator *vq_generator_create(vq_session *s, vq_sampler *smp, const vq_generate_params *gp, vq_err *err) {
    vq_err_clear(err);
    vq_generate_params dp = vq_generate_default_params();
    const vq_generate_params *p = gp ? gp : &dp;
    if (!s || p->n_stop < 0 || (p->n_stop && !p->stop)) {
        vq_err_set(err, VQ_ERR_ARG, "vq_generator_create: bad arguments");
        return NULL;
    }
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0]) {
            vq_err_set(err, VQ_ERR_ARG, "vq_generator_create: stop string %d is empty", i);
            return NULL;
        }
    vq_generator *g = calloc(1, sizeof *g);
    if (!g) goto nomem;
    g->s = s;
    g->smp = smp;
    g->n_predict = p->n_predict;
    g->show_special = p->show_special;
    g->prev = -2;
    if (p->n_stop) {
        g->stop = calloc((size_t)p->n_stop, sizeof *g->stop);
        g->stop_len = calloc((size_t)p->n_stop, sizeof *g->stop_len);
        if (!g->stop || !g->stop_len) goto nomem;
        for (; g->n_stop < p->n_stop; g->n_stop++) {
            int i = g->n_stop;
            g->stop_len[i] = strlen(p->stop[i]);
            if (!(g->stop[i] = malloc(g->stop_len[i] + 1))) goto nomem;
            memcpy(g->stop[i], p->stop[i], g->stop_len[i] + 1);
        }
    }
    return g;
nomem:
    vq_generator_free(g);
    vq_err_set(err, VQ_ERR_NOMEM, "vq_generator_create: out of memory");
    return NULL;
}

/* Bytes at the end of text[0..n) that could begin a stop string. */
static size_t stop_holdback(const vq_generator *g, size_t n) {
    size_t best = 0;
    for (int i = 0; i < g->n_stop; i++) {
        size_t L = g->stop_len[i];
        for (size_t k = VQ_MIN(L - 1, n); k > best; k--)
            if (!memcmp(g->text + n - k, g->stop[i], k)) { best = k; break; }
    }
    return best;
}

/* Bytes at the end of t[0..n) that begin a UTF-8 character the next piece may finish. */
static size_t utf8_holdback(const unsigned char *t, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned c = t[n - k];
        if ((c & 0xC0) == 0x80) continue;   /* a continuation byte: its lead is further back */
        size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
        return len > k ? k : 0;
    }
    return 0;
}

/* Hand out text[emitted..upto): the step's text grows (a step's text is one run of bytes). */
static void hand_out(vq_generator *g, vq_gen_step *out, size_t upto) {
    if (upto <= g->emitted) return;
    if (!out->n_text) out->text = g->text + g->emitted;
    out->n_text += upto - g->emitted;
    g->emitted = upto;
}

static void stop(vq_generator *g, vq_gen_step *out, vq_stop_reason why) {
    g->why = why;
    out->stop = why;
    if (why != VQ_STOP_STRING) hand_out(g, out, g->tlen);   /* what was held back is decided now */
}

/* id becomes the session's pending token; its text, stop strings and limits (no checks). */
static vq_status take(vq_generator *g, int id, vq_gen_step *out, vq_err *err) {
    vq_session *s = g->s;
    const vq_tokenizer *tok = s->m->tok;
    if (g->prev == -2) g->prev = s->n_tok > 0 ? s->tokens[s->n_tok - 1] : -1;
    s->tokens[s->n_tok++] = id;   /* pending: enters the cache on the next forward */
    g->n_gen++;
    out->token = id;
    const int eog = vq_tok_is_eog(tok, id);
    if (eog && !g->show_special) { stop(g, out, VQ_STOP_EOG); return VQ_OK; }
    char piece[256];
    size_t nb = VQ_MIN(vq_tok_piece(tok, g->prev, id, g->show_special, piece, sizeof piece), sizeof piece);
    g->prev = id;
    if (g->tlen + nb + 1 > g->tcap) {
        size_t nc = (g->tlen + nb + 1) * 2;
        char *t = realloc(g->text, nc);
        if (!t) return vq_err_set(err, VQ_ERR_NOMEM, "generation: out of memory");
        g->text = t;
        g->tcap = nc;
    }
    memcpy(g->text + g->tlen, piece, nb);
    size_t old = g->tlen;
    g->tlen += nb;
    /* a stop string that now appears: hand out up to it and stop */
    size_t cut = g->tlen;
    for (int i = 0; i < g->n_stop; i++) {
        size_t L = g->stop_len[i];
        for (size_t j = old >= L ? old - L + 1 : 0; j + L <= g->tlen; j++)
            if (!memcmp(g->text + j, g->stop[i], L)) { if (j < cut) cut = j; break; }
    }
    if (cut < g->tlen) {
        hand_out(g, out, cut);
        stop(g, out, VQ_STOP_STRING);
        return VQ_OK;
    }
    size_t hold = VQ_MAX(stop_holdback(g, g->tlen), utf8_holdback((const unsigned char *)g->text, g->tlen));
    hand_out(g, out, g->tlen - hold);
    if (eog) stop(g, out, VQ_STOP_EOG);
    else if (g->n_predict > 0 && g->n_gen >= g->n_predict) stop(g, out, VQ_STOP_LENGTH);
    else if (s->n_tok >= s->n_ctx) stop(g, out, VQ_STOP_CONTEXT);   /* no room to run another */
    return VQ_OK;
}

static vq_status begin(vq_generator *g, vq_gen_step *out, const char *fn, vq_err *err) {
    if (out) *out = (vq_gen_step){ .token = -1, .text = "", .n_text = 0, .stop = VQ_STOP_NONE };
    if (!g || !out) return vq_err_set(err, VQ_ERR_ARG, "%s: bad arguments", fn);
    if (g->why != VQ_STOP_NONE)
        return vq_err_set(err, VQ_ERR_ARG, "%s: the generator has stopped (%s)", fn, vq_stop_reason_name(g->why));
    return VQ_OK;
}

/* Sample from the session's logits (its pending token already run) and take the token. */
static vq_status sample_take(vq_generator *g, vq_gen_step *out, vq_err *err) {
    vq_session *s = g->s;
    if (!s->have_logits)
        return vq_err_set(err, VQ_ERR_ARG, "generation: the session has decoded nothing to continue from");
    if (s->n_tok >= s->n_ctx) { stop(g, out, VQ_STOP_CONTEXT); return VQ_OK; }
    return take(g, vq_sample(g->smp, s->logits), out, err);
}

vq_status vq_generator_step(vq_generator *g, vq_gen_step *out, vq_err *err) {
    vq_err_clear(err);
    vq_status st = begin(g, out, "vq_generator_step", err);
    if (st) return st;
    if (!g->smp) return vq_err_set(err, VQ_ERR_ARG, "vq_generator_step: the generator has no sampler");
    if ((st = vq_session_flush(g->s, err))) return st;
    return sample_take(g, out, err);
}

vq_status vq_generator_step_batch(vq_generator *const *gs, int n, float *logits, vq_gen_step *out, vq_err *err) {
    vq_err_clear(err);
    if (!gs || n < 1 || !out) return vq_err_set(err, VQ_ERR_ARG, "vq_generator_step_batch: bad arguments");
    for (int a = 0; a < n; a++) {
        vq_status st = begin(gs[a], &out[a], "vq_generator_step_batch", err);
        if (st) return st;
        if (!gs[a]->smp) return vq_err_set(err, VQ_ERR_ARG, "vq_generator_step_batch: generator %d has no sampler", a);
        for (int b = 0; b < a; b++)
            if (gs[b]->s == gs[a]->s)
                return vq_err_set(err, VQ_ERR_ARG, "vq_generator_step_batch: generators %d and %d share a session", b, a);
        if (gs[a]->s->m != gs[0]->s->m)
            return vq_err_set(err, VQ_ERR_ARG, "vq_generator_step_batch: generator %d has another model", a);
    }
    /* the pending tokens, run together: each leaves the session's pending place for the batch */
    vq_session *ss[n];
    int tok[n], np = 0;
    for (int a = 0; a < n; a++) {
        vq_session *s = gs[a]->s;
        if (s->n_tok == s->pos) continue;
        ss[np] = s;
        tok[np++] = s->tokens[s->pos];
        s->n_tok = s->pos;
    }
    const int V = gs[0]->s->m->cfg.vocab_size;
    if (np) {
        vq_status st = vq_decode_batch(ss, np, tok, logits, err);
        if (st) return st;
    }
    if (logits)   /* rows by generator: the batch's rows move up to theirs (from the last down) */
        for (int a = n - 1, c = np - 1; a >= 0; a--) {
            float *row = logits + (size_t)a * V;
            if (c >= 0 && gs[a]->s == ss[c]) {
                if (c != a) memmove(row, logits + (size_t)c * V, (size_t)V * sizeof(float));
                c--;
            } else if (gs[a]->s->have_logits) {
                memcpy(row, gs[a]->s->logits, (size_t)V * sizeof(float));
            }
        }
    for (int a = 0; a < n; a++) {
        vq_status st = sample_take(gs[a], &out[a], err);
        if (st) return st;
    }
    return VQ_OK;
}

vq_status vq_generator_take(vq_generator *g, int token, vq_gen_step *out, vq_err *err) {
    vq_err_clear(err);
    vq_status st = begin(g, out, "vq_generator_take", err);
    if (st) return st;
    vq_session *s = g->s;
    if (token < 0 || token >= s->m->cfg.vocab_size)
        return vq_err_set(err, VQ_ERR_ARG, "vq_generator_take: token id %d is outside the vocabulary (0..%d)",
                          token, s->m->cfg.vocab_size - 1);
    if (s->n_tok != s->pos)
        return vq_err_set(err, VQ_ERR_ARG, "vq_generator_take: the session's pending token is not run yet "
                          "(vq_session_decode with n = 0 runs it and gives its logits)");
    if (s->n_tok >= s->n_ctx) { stop(g, out, VQ_STOP_CONTEXT); return VQ_OK; }
    return take(g, token, out, err);
}

vq_status vq_session_generate(vq_session *s, const int *prompt, int n_prompt, vq_sampler *smp,
                              const vq_generate_params *gp, vq_text_cb cb, void *user,
                              vq_generate_result *res, vq_err *err) {
    vq_err_clear(err);
    vq_generate_result r0;
    if (!res) res = &r0;
    memset(res, 0, sizeof *res);
    vq_generate_params dp = vq_generate_default_params();
    const vq_generate_params *p = gp ? gp : &dp;
    if (!s || !smp || n_prompt < 0 || (n_prompt > 0 && !prompt) || p->n_stop < 0 || (p->n_stop && !p->stop))
        return vq_err_set(err, VQ_ERR_ARG, "vq_session_generate: bad arguments");
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return vq_err_set(err, VQ_ERR_ARG, "vq_session_generate: stop string %d is empty", i);
    if (n_prompt == 0 && !s->have_logits && s->n_tok == s->pos)
        return vq_err_set(err, VQ_ERR_ARG, "vq_session_generate: no prompt and nothing decoded yet");
    if ((long)s->n_tok + n_prompt >= s->n_ctx)
        return vq_err_set(err, VQ_ERR_RANGE, "the prompt is %d tokens and the session holds %d, but the "
                          "context holds %d (raise -c, or shorten the prompt)", n_prompt, s->n_tok, s->n_ctx);
    vq_generator *g = vq_generator_create(s, smp, p, err);
    if (!g) return err ? err->code : VQ_ERR_NOMEM;
    double t0 = vq_now_s();
    vq_status st = VQ_OK;
    if (n_prompt > 0 || s->n_tok != s->pos) st = vq_session_decode(s, prompt, n_prompt, NULL, 0, err);
    res->t_prefill_s = vq_now_s() - t0;
    res->n_prompt = n_prompt;
    double t1 = vq_now_s();
    vq_stop_reason why = VQ_STOP_NONE;
    while (!st && why == VQ_STOP_NONE) {
        vq_gen_step o;
        st = vq_generator_step(g, &o, err);
        if (st) break;
        res->n_gen += o.token >= 0;
        if (o.n_text && cb && cb(o.text, o.n_text, user)) why = VQ_STOP_CALLBACK;
        else why = o.stop;
    }
    /* every generated token ends up in the cache: the last one runs when no other can follow */
    if (!st && why == VQ_STOP_CONTEXT) st = vq_session_flush(s, err);
    vq_generator_free(g);
    res->t_decode_s = vq_now_s() - t1;
    res->stop = why;
    return st;
}
