/* perplexity.c: negative log-likelihood of a token sequence, in decode mode (one token per
 * forward pass, so every prediction reads the KV cache as generation does) or chunked prefill. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval.h"

static double nll_of(const float *logits, int vocab, int target) {
    double mx = logits[0];
    for (int i = 1; i < vocab; i++) if (logits[i] > mx) mx = logits[i];
    double z = 0;
    for (int i = 0; i < vocab; i++) z += exp((double)logits[i] - mx);
    return log(z) + mx - (double)logits[target];
}

vq_status vq_ppl_sequence(const vq_model *m, vq_fwd *f, vq_kv *kv, const int *tok, int n,
                          int first_scored, vq_ppl_mode mode, int batch, vq_ppl_acc *acc, vq_err *err) {
    const int vocab = m->cfg.vocab_size;
    if (n < 2) return VQ_OK;
    if (first_scored < 0 || first_scored > n - 2)
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: first scored position %d out of range for %d tokens", first_scored, n);
    int step = mode == VQ_PPL_DECODE ? 1 : VQ_MAX(1, batch);
    float *logits = malloc((size_t)step * vocab * sizeof(float));
    if (!logits) return vq_err_set(err, VQ_ERR_NOMEM, "out of memory");
    vq_kv_clear(kv);
    double t0 = vq_now_s();
    vq_status s = VQ_OK;
    /* position n-1 is only a target, never input */
    for (int i = 0; i < n - 1 && !s; i += step) {
        int nb = VQ_MIN(step, n - 1 - i);
        s = vq_forward(m, f, kv, tok + i, nb, i, logits, nb, err);
        for (int t = 0; t < nb && !s; t++) {
            int p = i + t;
            if (p < first_scored) continue;
            acc->nll_sum += nll_of(logits + (size_t)t * vocab, vocab, tok[p + 1]);
            acc->n_scored++;
        }
        acc->n_tokens += nb;
    }
    acc->seconds += vq_now_s() - t0;
    if (!s && vq_kv_bytes(kv) > acc->kv_bytes) {
        acc->kv_bytes = vq_kv_bytes(kv);
        acc->kv_bits = vq_kv_bits_per_elem(kv);
    }
    free(logits);
    return s;
}

vq_status vq_perplexity_windows(const vq_model *m, const char *kv_spec, const int *tok, long n,
                                const vq_ppl_params *p, vq_progress_cb cb, void *user,
                                vq_ppl_acc *acc, vq_err *err) {
    if (p->ctx < 2) return vq_err_set(err, VQ_ERR_ARG, "perplexity: --ctx %d must be at least 2", p->ctx);
    if (p->max_tokens > 0 && n > p->max_tokens) n = p->max_tokens;
    int text_per_win = p->bos_per_window ? p->ctx - 1 : p->ctx;
    long n_win = n / text_per_win;
    if (n_win < 1)
        return vq_err_set(err, VQ_ERR_RANGE, "perplexity: the text has %ld tokens, fewer than one window of %d",
                          n, text_per_win);
    int bos = vq_tok_bos(m->tok);
    if (p->bos_per_window && bos < 0)
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: the model has no BOS token for --bos-per-window");
    vq_kv_dims dims = vq_model_kv_dims(m, p->ctx);
    vq_kv *kv = vq_kv_create_str(kv_spec, &dims, p->kv_seed, err);
    if (!kv) return err ? err->code : VQ_ERR_ARG;
    vq_fwd *f = vq_fwd_create(m, p->mode == VQ_PPL_DECODE ? 1 : VQ_MAX(1, p->batch), err);
    int *win = malloc((size_t)p->ctx * sizeof(int));
    vq_status s = VQ_OK;
    if (!f || !win) s = f ? vq_err_set(err, VQ_ERR_NOMEM, "out of memory") : err->code;
    for (long w = 0; w < n_win && !s; w++) {
        int k = 0;
        if (p->bos_per_window) win[k++] = bos;
        for (int i = 0; i < text_per_win; i++) win[k++] = tok[w * text_per_win + i];
        s = vq_ppl_sequence(m, f, kv, win, p->ctx, p->first_scored, p->mode, p->batch, acc, err);
        if (cb) cb(w + 1, n_win, user);
    }
    free(win);
    vq_fwd_destroy(f);
    vq_kv_destroy(kv);
    return s;
}

vq_status vq_perplexity_windows_arms(const vq_model *m, const char *const *specs, int n_specs,
                                     const int *tok, long n, const vq_ppl_params *p,
                                     vq_progress_cb cb, void *user, vq_ppl_acc *accs, vq_err *err) {
    if (n_specs < 1) return vq_err_set(err, VQ_ERR_ARG, "perplexity: no KV arm");
    if (p->ctx < 2) return vq_err_set(err, VQ_ERR_ARG, "perplexity: --ctx %d must be at least 2", p->ctx);
    if (p->max_tokens > 0 && n > p->max_tokens) n = p->max_tokens;
    const int text_per_win = p->bos_per_window ? p->ctx - 1 : p->ctx, vocab = m->cfg.vocab_size;
    const long n_win = n / text_per_win;
    if (n_win < 1)
        return vq_err_set(err, VQ_ERR_RANGE, "perplexity: the text has %ld tokens, fewer than one window of %d",
                          n, text_per_win);
    const int bos = vq_tok_bos(m->tok);
    if (p->bos_per_window && bos < 0)
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: the model has no BOS token for --bos-per-window");
    if (p->first_scored < 0 || p->first_scored > p->ctx - 2)
        return vq_err_set(err, VQ_ERR_ARG, "perplexity: first scored position %d out of range for %d tokens",
                          p->first_scored, p->ctx);
    vq_kv_dims dims = vq_model_kv_dims(m, p->ctx);
    vq_kv **kvs = calloc((size_t)n_specs, sizeof *kvs);
    int *win = malloc((size_t)p->ctx * sizeof(int)), *step = malloc((size_t)n_specs * sizeof(int));
    float *logits = malloc((size_t)n_specs * vocab * sizeof(float));
    vq_fwd *f = NULL;
    vq_status s = (!kvs || !win || !step || !logits) ? vq_err_set(err, VQ_ERR_NOMEM, "out of memory") : VQ_OK;
    for (int a = 0; a < n_specs && !s; a++)
        if (!(kvs[a] = vq_kv_create_str(specs[a], &dims, p->kv_seed, err))) s = err ? err->code : VQ_ERR_ARG;
    if (!s && !(f = vq_fwd_create(m, n_specs, err))) s = err ? err->code : VQ_ERR_NOMEM;
    for (long w = 0; w < n_win && !s; w++) {
        int k = 0;
        if (p->bos_per_window) win[k++] = bos;
        for (int i = 0; i < text_per_win; i++) win[k++] = tok[w * text_per_win + i];
        for (int a = 0; a < n_specs; a++) vq_kv_clear(kvs[a]);
        double t0 = vq_now_s();
        for (int i = 0; i < p->ctx - 1 && !s; i++) {   /* position ctx-1 is only a target */
            int apos[n_specs];
            for (int a = 0; a < n_specs; a++) { step[a] = win[i]; apos[a] = i; }
            s = vq_forward_arms(m, f, kvs, n_specs, step, apos, logits, err);
            if (s || i < p->first_scored) continue;
            for (int a = 0; a < n_specs; a++) {
                accs[a].nll_sum += nll_of(logits + (size_t)a * vocab, vocab, win[i + 1]);
                accs[a].n_scored++;
            }
        }
        double dt = vq_now_s() - t0;
        for (int a = 0; a < n_specs && !s; a++) {
            accs[a].n_tokens += p->ctx - 1;
            accs[a].seconds += dt;
            if (vq_kv_bytes(kvs[a]) > accs[a].kv_bytes) {
                accs[a].kv_bytes = vq_kv_bytes(kvs[a]);
                accs[a].kv_bits = vq_kv_bits_per_elem(kvs[a]);
            }
        }
        if (cb) cb(w + 1, n_win, user);
    }
    for (int a = 0; kvs && a < n_specs; a++) vq_kv_destroy(kvs[a]);
    vq_fwd_destroy(f);
    free(kvs); free(win); free(step); free(logits);
    return s;
}

vq_status vq_perplexity_paragraphs(const vq_model *m, const char *kv_spec, const char *text,
                                   const vq_ppl_params *p, vq_progress_cb cb, void *user,
                                   vq_ppl_acc *acc, int *n_paragraphs, vq_err *err) {
    /* collect paragraph spans: separated by one or more blank lines, trimmed of newlines */
    size_t len = strlen(text);
    long cap = 64, np = 0;
    size_t (*spans)[2] = malloc((size_t)cap * sizeof *spans);
    if (!spans) return vq_err_set(err, VQ_ERR_NOMEM, "out of memory");
    size_t i = 0;
    while (i < len) {
        while (i < len && text[i] == '\n') i++;
        size_t start = i;
        while (i < len && !(text[i] == '\n' && i + 1 < len && text[i + 1] == '\n')) i++;
        size_t end = i;
        while (end > start && text[end - 1] == '\n') end--;
        if (end > start) {
            if (np == cap) {
                cap *= 2;
                void *nsp = realloc(spans, (size_t)cap * sizeof *spans);
                if (!nsp) { free(spans); return vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); }
                spans = nsp;
            }
            spans[np][0] = start; spans[np][1] = end; np++;
        }
    }
    if (p->max_paragraphs > 0 && np > p->max_paragraphs) np = p->max_paragraphs;
    vq_kv_dims dims = vq_model_kv_dims(m, p->ctx);
    vq_kv *kv = vq_kv_create_str(kv_spec, &dims, p->kv_seed, err);
    if (!kv) { free(spans); return err ? err->code : VQ_ERR_ARG; }
    vq_fwd *f = vq_fwd_create(m, p->mode == VQ_PPL_DECODE ? 1 : VQ_MAX(1, p->batch), err);
    int cap_tok = 4096, *tok = malloc((size_t)cap_tok * sizeof(int));
    vq_status s = (!f || !tok) ? (f ? vq_err_set(err, VQ_ERR_NOMEM, "out of memory") : err->code) : VQ_OK;
    for (long k = 0; k < np && !s; k++) {
        size_t plen = spans[k][1] - spans[k][0];
        int need = vq_tok_encode(m->tok, text + spans[k][0], plen, 1, 0, tok, cap_tok, err);
        if (need < 0) { s = err->code; break; }
        if (need > cap_tok) {
            int *nt = realloc(tok, (size_t)need * sizeof(int));
            if (!nt) { s = vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); break; }
            tok = nt; cap_tok = need;
            need = vq_tok_encode(m->tok, text + spans[k][0], plen, 1, 0, tok, cap_tok, err);
        }
        int n = VQ_MIN(need, p->ctx);
        s = vq_ppl_sequence(m, f, kv, tok, n, 0, p->mode, p->batch, acc, err);
        if (cb) cb(k + 1, np, user);
    }
    if (n_paragraphs) *n_paragraphs = (int)np;
    free(tok);
    free(spans);
    vq_fwd_destroy(f);
    vq_kv_destroy(kv);
    return s;
}
