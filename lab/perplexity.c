/* perplexity.c: negative log-likelihood of a text under several KV arms (vq_perplexity in
 * lab/vqlab.h). Each arm is a session of its own; the arms walk the same sequences chunk by
 * chunk, so every chunk's logits of all arms are at hand together (KL against arm 0 without
 * keeping a window of logits). Decode mode feeds one token per forward, so every prediction reads
 * the cache as generation does; with several arms the step is one batched forward
 * (vq_decode_batch: the weights are read once for all arms). Prefill mode feeds chunks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lab/eval.h"

vq_ppl_params vq_ppl_default_params(void) {
    return (vq_ppl_params){ .n_ctx = 512, .mode = VQ_PPL_DECODE, .score = VQ_PPL_SCORE_ALL, .n_batch = 64 };
}

/* log-softmax of logits into out (float64), returning nothing; the max is subtracted first */
static void log_softmax(const float *logits, int vocab, double *out) {
    double mx = logits[0];
    for (int i = 1; i < vocab; i++) if (logits[i] > mx) mx = logits[i];
    double z = 0;
    for (int i = 0; i < vocab; i++) z += exp((double)logits[i] - mx);
    double lz = log(z) + mx;
    for (int i = 0; i < vocab; i++) out[i] = (double)logits[i] - lz;
}

static double nll_of(const float *logits, int vocab, int target) {
    double mx = logits[0];
    for (int i = 1; i < vocab; i++) if (logits[i] > mx) mx = logits[i];
    double z = 0;
    for (int i = 0; i < vocab; i++) z += exp((double)logits[i] - mx);
    return log(z) + mx - (double)logits[target];
}

/* KL(p || q) with p given as log-probabilities and q as logits */
static double kl_of(const double *lp, const float *q_logits, int vocab, double *tmp) {
    log_softmax(q_logits, vocab, tmp);
    double kl = 0;
    for (int i = 0; i < vocab; i++) kl += exp(lp[i]) * (lp[i] - tmp[i]);
    return kl;
}

typedef struct ppl_run {
    const vq_model *m;
    const vq_ppl_params *p;
    int n_arms, step, batched, V;
    vq_session **s;
    float *logits;      /* n_arms x step x V */
    double *lp0, *tmp;  /* kl: arm 0's log-probabilities of one prediction, scratch */
    int *same;          /* n_arms copies of one token (batched decode) */
    vq_ppl_result *out;
    vq_ppl_result *win; /* window_cb: each arm's figures before the window, then the window's */
} ppl_run;

static void run_free(ppl_run *r) {
    for (int a = 0; r->s && a < r->n_arms; a++) vq_session_free(r->s[a]);
    free(r->s);
    free(r->logits);
    free(r->lp0);
    free(r->tmp);
    free(r->same);
    free(r->win);
}

/* Sessions for every arm (n_ctx positions each), and the buffers one chunk needs. */
static vq_status run_init(ppl_run *r, const vq_model *m, const vq_kv_spec *const *specs, int n,
                          const vq_ppl_params *p, vq_ppl_result *out, vq_err *err) {
    memset(r, 0, sizeof *r);
    r->m = m;
    r->p = p;
    r->n_arms = n;
    r->V = vq_model_n_vocab(m);
    const int batch = p->n_batch > 0 ? p->n_batch : 64;
    r->step = p->mode == VQ_PPL_DECODE ? 1 : VQ_MIN(batch, p->n_ctx);
    r->batched = p->mode == VQ_PPL_DECODE && n > 1 && !p->serial_arms;
    r->out = out;
    r->s = calloc((size_t)n, sizeof *r->s);
    r->logits = malloc((size_t)n * r->step * r->V * sizeof(float));
    r->same = malloc((size_t)n * sizeof(int));
    if (p->kl_vs_first) {
        r->lp0 = malloc((size_t)r->V * sizeof(double));
        r->tmp = malloc((size_t)r->V * sizeof(double));
    }
    if (p->window_cb) r->win = calloc((size_t)n, sizeof *r->win);
    if (!r->s || !r->logits || !r->same || (p->kl_vs_first && (!r->lp0 || !r->tmp)) || (p->window_cb && !r->win))
        return vq_err_set(err, VQ_ERR_NOMEM, "perplexity: out of memory");
    vq_session_params sp = vq_session_default_params();
    sp.n_ctx = p->n_ctx;
    /* batched decode runs every arm through arm 0's forward scratch: it must hold n rows */
    sp.n_batch = p->mode == VQ_PPL_DECODE ? VQ_MAX(n, 1) : r->step;
    sp.kv_seed = p->kv_seed;
    sp.allow_ctx_over_train = 1;
    for (int a = 0; a < n; a++) {
        if (!specs[a]) return vq_err_set(err, VQ_ERR_ARG, "perplexity: arm %d has no KV spec", a);
        r->s[a] = vq_session_create(m, specs[a], &sp, err);
        if (!r->s[a]) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err ? err->msg : "");
            return vq_err_set(err, err ? err->code : VQ_ERR_ARG, "perplexity: arm %d (%s): %s", a,
                              vq_kv_spec_text(specs[a]), why);
        }
    }
    return VQ_OK;
}

/* Score one sequence tok[0..n) in every arm: predictions at positions >= first count. Every arm's
 * session starts empty. */
static vq_status run_seq(ppl_run *r, const int *tok, int n, int first, vq_err *err) {
    if (n < 2) return VQ_OK;
    const int V = r->V, A = r->n_arms, step = r->step;
    for (int a = 0; a < A; a++) {
        vq_status st = vq_session_truncate(r->s[a], 0, err);
        if (st) return st;
    }
    for (int i = 0; i < n - 1; i += step) {   /* position n-1 is only a target, never input */
        const int nb = VQ_MIN(step, n - 1 - i);
        if (r->batched) {
            for (int a = 0; a < A; a++) r->same[a] = tok[i];
            double t0 = vq_now_s();
            vq_status st = vq_decode_batch(r->s, A, r->same, r->logits, err);
            double dt = vq_now_s() - t0;
            if (st) return st;
            for (int a = 0; a < A; a++) r->out[a].seconds += dt;
        } else {
            for (int a = 0; a < A; a++) {
                double t0 = vq_now_s();
                vq_status st = vq_session_decode(r->s[a], tok + i, nb, r->logits + (size_t)a * step * V, 1, err);
                r->out[a].seconds += vq_now_s() - t0;
                if (st) return st;
            }
        }
        for (int a = 0; a < A; a++) r->out[a].n_tokens += nb;
        for (int t = 0; t < nb; t++) {
            const int pos = i + t;
            if (pos < first) continue;
            /* batched decode: arm a's row is a * V (step is 1); otherwise a * step * V + t * V */
            for (int a = 0; a < A; a++) {
                const float *lg = r->logits + ((size_t)a * step + t) * V;
                r->out[a].nll_sum += nll_of(lg, V, tok[pos + 1]);
                r->out[a].n_scored++;
            }
            if (r->p->kl_vs_first && A > 1) {
                log_softmax(r->logits + (size_t)t * V, V, r->lp0);
                for (int a = 1; a < A; a++)
                    r->out[a].kl_sum += kl_of(r->lp0, r->logits + ((size_t)a * step + t) * V, V, r->tmp);
            }
        }
    }
    for (int a = 0; a < A; a++) {
        size_t b = vq_session_kv_bytes(r->s[a]);
        if (b > r->out[a].kv_bytes) {
            r->out[a].kv_bytes = b;
            r->out[a].kv_bits = vq_session_kv_bits(r->s[a]);
        }
        r->out[a].n_units++;
    }
    return VQ_OK;
}

/* run_seq, then (window_cb) the sequence's own figures per arm: the totals' difference */
static vq_status run_unit(ppl_run *r, const int *tok, int n, int first, long index, vq_err *err) {
    const vq_ppl_params *p = r->p;
    for (int a = 0; p->window_cb && a < r->n_arms; a++) r->win[a] = r->out[a];
    vq_status st = run_seq(r, tok, n, first, err);
    if (st || !p->window_cb) return st;
    for (int a = 0; a < r->n_arms; a++) {
        const vq_ppl_result *o = &r->out[a];
        vq_ppl_result w = {0};
        w.nll_sum = o->nll_sum - r->win[a].nll_sum;
        w.n_scored = o->n_scored - r->win[a].n_scored;
        w.n_tokens = o->n_tokens - r->win[a].n_tokens;
        w.mean_nll = w.n_scored ? w.nll_sum / (double)w.n_scored : 0;
        w.ppl = exp(w.mean_nll);
        w.n_units = 1;
        r->win[a] = w;
    }
    p->window_cb(index, r->win, r->n_arms, p->window_user);
    return VQ_OK;
}

static void finish(vq_ppl_result *out, int n) {
    for (int a = 0; a < n; a++) {
        vq_ppl_result *o = &out[a];
        o->mean_nll = o->n_scored ? o->nll_sum / (double)o->n_scored : 0;
        o->ppl = exp(o->mean_nll);
        o->kl_mean = o->n_scored ? o->kl_sum / (double)o->n_scored : 0;
    }
}

static vq_status check_params(const vq_model *m, const vq_kv_spec *const *specs, int n_specs,
                              const vq_ppl_params *p, vq_ppl_result *out, vq_err *err) {
    if (!m || !specs || !p || !out || n_specs < 1)
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: no model, no KV arm or no result array");
    if (p->n_ctx < 2 || p->n_ctx > (1 << 24))
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: context %d is out of range (2..16777216)", p->n_ctx);
    if (p->mode != VQ_PPL_DECODE && p->mode != VQ_PPL_PREFILL)
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: unknown mode %d", (int)p->mode);
    if (p->score != VQ_PPL_SCORE_ALL && p->score != VQ_PPL_SCORE_SECOND_HALF)
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: unknown score %d", (int)p->score);
    if (p->n_batch < 0 || p->n_batch > 4096)
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: batch %d is out of range (1..4096)", p->n_batch);
    if (p->max_tokens < 0 || p->max_paragraphs < 0)
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: negative max_tokens or max_paragraphs");
    if (p->first_window < 0 || p->n_windows < 0)
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: negative first window (%ld) or window count (%ld)",
                          p->first_window, p->n_windows);
    if (p->first_scored < 0 || p->first_scored > p->n_ctx - 2)
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: first scored position %d is out of range for windows of %d "
                          "(0..%d)", p->first_scored, p->n_ctx, p->n_ctx - 2);
    if (n_specs > 256) return vq_err_set(err, VQ_ERR_ARG, "perplexity: %d arms (at most 256)", n_specs);
    memset(out, 0, (size_t)n_specs * sizeof *out);
    return VQ_OK;
}

static vq_status windows(const vq_model *m, const vq_kv_spec *const *specs, int n_specs, const int *tok,
                         long n, const vq_ppl_params *p, vq_progress_cb cb, void *user,
                         vq_ppl_result *out, vq_err *err) {
    if (p->max_tokens > 0 && n > p->max_tokens) n = p->max_tokens;
    const int per_win = p->bos_per_window ? p->n_ctx - 1 : p->n_ctx;
    long n_win = n / per_win;
    if (n_win < 1)
        return vq_err_set(err, VQ_ERR_RANGE, "perplexity: the text has %ld tokens, fewer than one window of %d",
                          n, per_win);
    if (p->first_window >= n_win)
        return vq_err_set(err, VQ_ERR_RANGE, "perplexity: first window %ld is past the text's last (it has %ld "
                          "windows of %d tokens: 0..%ld)", p->first_window, n_win, per_win, n_win - 1);
    const long w0 = p->first_window;
    if (p->n_windows > 0 && n_win - w0 > p->n_windows) n_win = w0 + p->n_windows;
    const int bos = vq_token_bos(m);
    if (p->bos_per_window && bos < 0)
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: the model has no BOS token for bos_per_window");
    for (long i = w0 * per_win; i < n_win * per_win; i++)
        if (tok[i] < 0 || tok[i] >= vq_model_n_vocab(m))
            return vq_err_set(err, VQ_ERR_ARG, "perplexity: token %ld (id %d) is outside the vocabulary", i, tok[i]);
    const int first = p->first_scored > 0 ? p->first_scored
                    : p->score == VQ_PPL_SCORE_SECOND_HALF ? p->n_ctx / 2 : 0;
    ppl_run r;
    vq_status st = run_init(&r, m, specs, n_specs, p, out, err);
    int *win = st ? NULL : malloc((size_t)p->n_ctx * sizeof(int));
    if (!st && !win) st = vq_err_set(err, VQ_ERR_NOMEM, "perplexity: out of memory");
    for (long w = w0; w < n_win && !st; w++) {
        int k = 0;
        if (p->bos_per_window) win[k++] = bos;
        memcpy(win + k, tok + w * per_win, (size_t)per_win * sizeof(int));
        st = run_unit(&r, win, p->n_ctx, first, w, err);
        if (cb) cb(w - w0 + 1, n_win - w0, user);
    }
    free(win);
    run_free(&r);
    if (st) memset(out, 0, (size_t)n_specs * sizeof *out);
    else finish(out, n_specs);
    return st;
}

vq_status vq_perplexity(const vq_model *m, const vq_kv_spec *const *specs, int n_specs, const int *tokens,
                        long n_tokens, const vq_ppl_params *p, vq_progress_cb cb, void *user,
                        vq_ppl_result *out, vq_err *err) {
    vq_err_clear(err);
    vq_status st = check_params(m, specs, n_specs, p, out, err);
    if (st) return st;
    if (p->split != VQ_PPL_SPLIT_WINDOWS)
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: paragraphs need the text (vq_perplexity_text)");
    if (n_tokens < 0 || (n_tokens > 0 && !tokens)) return vq_err_set(err, VQ_ERR_ARG, "perplexity: no tokens");
    return windows(m, specs, n_specs, tokens, n_tokens, p, cb, user, out, err);
}

/* Paragraph spans of text: runs separated by one or more blank lines, trimmed of newlines. */
static long paragraphs_of(const char *text, size_t len, size_t (**spans)[2], vq_err *err) {
    long cap = 64, np = 0;
    size_t (*sp)[2] = malloc((size_t)cap * sizeof *sp);
    if (!sp) return vq_err_set(err, VQ_ERR_NOMEM, "perplexity: out of memory"), -1;
    size_t i = 0;
    while (i < len) {
        while (i < len && text[i] == '\n') i++;
        size_t start = i;
        while (i < len && !(text[i] == '\n' && i + 1 < len && text[i + 1] == '\n')) i++;
        size_t end = i;
        while (end > start && text[end - 1] == '\n') end--;
        if (end <= start) continue;
        if (np == cap) {
            void *n2 = realloc(sp, (size_t)cap * 2 * sizeof *sp);
            if (!n2) { free(sp); return vq_err_set(err, VQ_ERR_NOMEM, "perplexity: out of memory"), -1; }
            sp = n2;
            cap *= 2;
        }
        sp[np][0] = start;
        sp[np][1] = end;
        np++;
    }
    *spans = sp;
    return np;
}

/* Tokens of text[0..len) (no BOS unless bos), malloc'd; -1 with err set. */
static long tokenize(const vq_model *m, const char *text, size_t len, int bos, int **out, vq_err *err) {
    int need = vq_tokenize(m, text, len, bos, 0, NULL, 0, err);
    if (need < 0) return -1;
    int *ids = malloc(((size_t)need + 1) * sizeof(int));
    if (!ids) return vq_err_set(err, VQ_ERR_NOMEM, "perplexity: out of memory"), -1;
    if (vq_tokenize(m, text, len, bos, 0, ids, need, err) != need) {
        free(ids);
        return vq_err_set(err, VQ_ERR_FORMAT, "perplexity: the tokenizer gave two lengths for one text"), -1;
    }
    *out = ids;
    return need;
}

vq_status vq_perplexity_text(const vq_model *m, const vq_kv_spec *const *specs, int n_specs, const char *text,
                             size_t len, const vq_ppl_params *p, vq_progress_cb cb, void *user,
                             vq_ppl_result *out, vq_err *err) {
    vq_err_clear(err);
    vq_status st = check_params(m, specs, n_specs, p, out, err);
    if (st) return st;
    if (!text && len) return vq_err_set(err, VQ_ERR_ARG, "perplexity: no text");
    if (p->split == VQ_PPL_SPLIT_WINDOWS) {
        int *tok = NULL;
        long n = tokenize(m, text ? text : "", len, 0, &tok, err);
        if (n < 0) return err ? err->code : VQ_ERR_ARG;
        st = windows(m, specs, n_specs, tok, n, p, cb, user, out, err);
        free(tok);
        return st;
    }
    if (p->split != VQ_PPL_SPLIT_PARAGRAPHS) return vq_err_set(err, VQ_ERR_ARG, "perplexity: unknown split %d", (int)p->split);
    if (p->first_window || p->n_windows)
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: a first window or a window count applies to windows, not to "
                          "paragraphs (max_paragraphs limits those)");
    size_t (*spans)[2] = NULL;
    long np = paragraphs_of(text ? text : "", len, &spans, err);
    if (np < 0) return err ? err->code : VQ_ERR_NOMEM;
    if (p->max_paragraphs > 0 && np > p->max_paragraphs) np = p->max_paragraphs;
    if (np == 0) {
        free(spans);
        return vq_err_set(err, VQ_ERR_RANGE, "perplexity: the text has no paragraph (it is empty or only newlines)");
    }
    ppl_run r;
    st = run_init(&r, m, specs, n_specs, p, out, err);
    for (long k = 0; k < np && !st; k++) {
        int *tok = NULL;
        long n = tokenize(m, text + spans[k][0], spans[k][1] - spans[k][0], 1, &tok, err);
        if (n < 0) { st = err ? err->code : VQ_ERR_ARG; break; }
        st = run_unit(&r, tok, (int)VQ_MIN(n, (long)p->n_ctx), 0, k, err);
        free(tok);
        if (cb) cb(k + 1, np, user);
    }
    run_free(&r);
    free(spans);
    if (!st && out[0].n_scored == 0)
        st = vq_err_set(err, VQ_ERR_RANGE, "perplexity: no paragraph has two tokens to score");
    if (st) memset(out, 0, (size_t)n_specs * sizeof *out);
    else finish(out, n_specs);
    return st;
}
