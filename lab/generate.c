/* generate.c: one-shot generation for eval (needle, tests): a session, a sampler, one call to
 * vq_session_generate, everything freed. Interactive use holds a session instead. */
#include "lab/eval.h"

vq_status vq_generate(const vq_model *m, const char *kv_spec, const int *prompt, int n_prompt,
                      const vq_gen_params *p, vq_text_cb cb, void *user, vq_gen_stats *st,
                      vq_err *err) {
    *st = (vq_gen_stats){ 0 };
    vq_kv_spec *spec = vq_kv_spec_parse(kv_spec, err);
    if (!spec) return err ? err->code : VQ_ERR_ARG;
    vq_status rc = vq_generate_spec(m, spec, prompt, n_prompt, p, cb, user, st, err);
    vq_kv_spec_free(spec);
    return rc;
}

vq_status vq_generate_spec(const vq_model *m, const vq_kv_spec *spec, const int *prompt, int n_prompt,
                           const vq_gen_params *p, vq_text_cb cb, void *user, vq_gen_stats *st,
                           vq_err *err) {
    *st = (vq_gen_stats){ 0 };
    if (n_prompt < 1) return vq_err_set(err, VQ_ERR_ARG, "the prompt is empty (no tokens)");
    vq_session_params sp = vq_session_default_params();
    sp.n_ctx = p->n_ctx;
    sp.n_batch = p->batch;
    sp.kv_seed = p->kv_seed;
    sp.allow_ctx_over_train = 1;
    vq_session *s = vq_session_create(m, spec, &sp, err);
    vq_sampler *smp = s ? vq_sampler_create(&p->sp, vq_model_n_vocab(m), err) : NULL;
    vq_status rc = s && smp ? VQ_OK : (err && err->code ? err->code : VQ_ERR_NOMEM);
    if (!rc) {
        vq_generate_params gp = vq_generate_default_params();
        gp.n_predict = p->n_predict;
        vq_generate_result r;
        rc = vq_session_generate(s, prompt, n_prompt, smp, &gp, cb, user, &r, err);
        st->n_prompt = r.n_prompt;
        st->n_gen = r.n_gen;
        st->t_prefill = r.t_prefill_s;
        st->t_decode = r.t_decode_s;
        st->kv_bytes = vq_session_kv_bytes(s);
        st->kv_bits_per_elem = vq_session_kv_bits(s);
        st->stopped_eog = r.stop == VQ_STOP_EOG;
    }
    vq_sampler_free(smp);
    vq_session_free(s);
    return rc;
}
