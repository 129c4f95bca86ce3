/* generate.c: prompt prefill in chunks, then one token at a time until end-of-generation or
 * n_predict tokens, streaming each token's bytes through a callback. */
#include <stdlib.h>

#include "eval/eval.h"

vq_status vq_generate(const vq_model *m, const char *kv_spec, const int *prompt, int n_prompt,
                      const vq_gen_params *p, vq_token_cb cb, void *user, vq_gen_stats *st,
                      vq_err *err) {
    *st = (vq_gen_stats){ 0 };
    if (n_prompt < 1) return vq_err_set(err, VQ_ERR_ARG, "the prompt is empty (no tokens)");
    if (p->n_ctx < 2) return vq_err_set(err, VQ_ERR_ARG, "context size %d is too small", p->n_ctx);
    if (n_prompt >= p->n_ctx)
        return vq_err_set(err, VQ_ERR_RANGE,
                          "the prompt is %d tokens but the context holds %d (raise -c, or shorten the prompt)",
                          n_prompt, p->n_ctx);
    vq_kv_dims dims = vq_model_kv_dims(m, p->n_ctx);
    vq_kv *kv = vq_kv_create_str(kv_spec, &dims, p->kv_seed, err);
    if (!kv) return err ? err->code : VQ_ERR_ARG;
    int batch = p->batch > 0 ? p->batch : 64;
    vq_fwd *f = vq_fwd_create(m, batch, err);
    vq_sampler *smp = vq_sampler_create(&p->sp, m->cfg.vocab_size, err);
    float *logits = malloc((size_t)m->cfg.vocab_size * sizeof(float));
    vq_status s = VQ_OK;
    if (!f || !smp || !logits) { s = err && err->code ? err->code : vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); goto done; }

    double t0 = vq_now_s();
    for (int i = 0; i < n_prompt && !s; i += batch) {
        int nb = VQ_MIN(batch, n_prompt - i);
        s = vq_forward(m, f, kv, prompt + i, nb, i, i + nb == n_prompt ? logits : NULL, 1, err);
    }
    st->t_prefill = vq_now_s() - t0;
    st->n_prompt = n_prompt;
    if (s) goto done;

    int prev = prompt[n_prompt - 1], pos = n_prompt;
    double t1 = vq_now_s();
    for (int g = 0; g < p->n_predict; g++) {
        int next = vq_sample(smp, logits);
        st->n_gen++;
        if (vq_tok_is_eog(m->tok, next)) { st->stopped_eog = 1; break; }
        char buf[256];
        size_t nbytes = vq_tok_piece(m->tok, prev, next, 0, buf, sizeof buf);
        if (cb && cb(buf, nbytes, next, user)) break;
        prev = next;
        if (g + 1 == p->n_predict) break;            /* no forward needed after the last token */
        if (pos >= p->n_ctx) break;                  /* context full */
        s = vq_forward(m, f, kv, &next, 1, pos, logits, 1, err);
        if (s) break;
        pos++;
    }
    st->t_decode = vq_now_s() - t1;
    st->kv_bytes = vq_kv_bytes(kv);
    st->kv_bits_per_elem = vq_kv_bits_per_elem(kv);
done:
    free(logits);
    vq_sampler_free(smp);
    vq_fwd_destroy(f);
    vq_kv_destroy(kv);
    return s;
}
