/* lab_tap.c: the functions of the lab's door (session/lab_tap.h): a forward tap on a session, a
 * decode that leaves the eviction step undone, the policy's scores, the model's config hash. */
#include "session/lab_tap.h"
#include "session/session_impl.h"

void vq_lab_session_set_tap(vq_session *s, vq_lab_tap tap, void *user) {
    if (s) vq_fwd_set_tap(s->f, tap, user);
}

void vq_lab_session_set_attn_tap(vq_session *s, vq_lab_attn_tap tap, void *user) {
    if (s) vq_fwd_set_attn_tap(s->f, tap, user);
}

vq_status vq_lab_session_observe(vq_session *s, const int *tokens, int n, vq_err *err) {
    vq_err_clear(err);
    if (!s || n < 0 || (n > 0 && !tokens)) return vq_err_set(err, VQ_ERR_ARG, "vq_lab_session_observe: bad arguments");
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->m->cfg.vocab_size)
            return vq_err_set(err, VQ_ERR_ARG, "token %d (id %d) is outside the vocabulary", i, tokens[i]);
    if ((long)s->n_tok + n > s->n_ctx)
        return vq_err_set(err, VQ_ERR_RANGE, "%d tokens do not fit: the session holds %d of %d positions",
                          n, s->n_tok, s->n_ctx);
    vq_status st = vq_session_flush(s, err);
    return st ? st : vq_session_run(s, tokens, n, NULL, 0, 0, err);
}

vq_status vq_lab_session_evict_scores(const vq_session *s, int layer, float *scores, int32_t *pos,
                                      vq_err *err) {
    if (!s) return vq_err_set(err, VQ_ERR_ARG, "vq_lab_session_evict_scores: no session");
    return vq_kv_evict_scores(s->kv, layer, scores, pos, err);
}

uint64_t vq_lab_model_config_hash(const vq_model *m) { return m ? vq_model_config_hash(m, NULL, 0) : 0; }
float vq_lab_model_attn_softcap(const vq_model *m) { return m ? m->cfg.attn_softcap : 0.0f; }
