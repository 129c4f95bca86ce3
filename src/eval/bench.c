/* bench.c: prefill and decode throughput at given context fills, for several KV arms, with the
 * arms interleaved per repeat and the input text rotated per repeat (BENCHMARKING.md). */
#include <stdlib.h>

#include "eval/eval.h"

vq_status vq_bench_run(const vq_model *m, const vq_bench_params *p, vq_bench_sample *out,
                       vq_progress_cb cb, void *user, vq_err *err) {
    int max_ctx = 0;
    for (int c = 0; c < p->n_ctxs; c++) max_ctx = VQ_MAX(max_ctx, p->ctxs[c]);
    if (p->n_text < max_ctx + p->n_gen)
        return vq_err_set(err, VQ_ERR_RANGE, "bench: %ld text tokens, need %d", p->n_text, max_ctx + p->n_gen);
    vq_fwd *f = vq_fwd_create(m, VQ_MAX(1, p->batch), err);
    float *logits = malloc((size_t)m->cfg.vocab_size * sizeof(float));
    if (!f || !logits) { vq_fwd_destroy(f); free(logits); return err->code ? err->code : vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); }
    vq_status s = VQ_OK;
    long k = 0, total = (long)p->reps * p->n_ctxs * p->n_specs;
    for (int r = 0; r < p->reps && !s; r++)
        for (int c = 0; c < p->n_ctxs && !s; c++)
            for (int a = 0; a < p->n_specs && !s; a++, k++) {
                int ctx = p->ctxs[c];
                long span = p->n_text - ctx - p->n_gen;
                long off = span > 0 ? ((long)r * 7919 + (long)c * 104729 + a * 31) % span : 0;
                const int *tok = p->text + off;
                long rss0 = (long)vq_rss_bytes();
                vq_kv_dims dims = vq_model_kv_dims(m, ctx + p->n_gen);
                vq_kv *kv = vq_kv_create(p->specs[a], &dims, p->kv_seed, err);
                if (!kv) { s = err->code; break; }
                double t0 = vq_now_s();
                for (int i = 0; i < ctx && !s; i += p->batch) {
                    int nb = VQ_MIN(p->batch, ctx - i);
                    s = vq_forward(m, f, kv, tok + i, nb, i, i + nb == ctx ? logits : NULL, 1, err);
                }
                double t1 = vq_now_s();
                int next = vq_argmax(logits, m->cfg.vocab_size);
                for (int g = 0; g < p->n_gen && !s; g++) {
                    s = vq_forward(m, f, kv, &next, 1, ctx + g, logits, 1, err);
                    next = vq_argmax(logits, m->cfg.vocab_size);
                }
                double t2 = vq_now_s();
                vq_bench_sample *o = &out[k];
                o->ctx_index = c; o->spec_index = a; o->rep = r;
                o->prefill_tps = ctx / (t1 - t0);
                o->decode_tps = p->n_gen / (t2 - t1);
                o->kv_bytes = vq_kv_bytes(kv);
                o->rss_delta = (long)vq_rss_bytes() - rss0;
                vq_kv_destroy(kv);
                if (cb) cb(k + 1, total, user);
            }
    free(logits);
    vq_fwd_destroy(f);
    return s;
}
