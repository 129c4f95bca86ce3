/* session_impl.h: the session layer's private state (src/session). A session joins a model, a
 * KV cache made from a parsed spec, the forward pass's scratch and the tokens held. Only this
 * layer sees inside (the lab's door is session/lab_tap.h). */
#ifndef VQ_SESSION_IMPL_H
#define VQ_SESSION_IMPL_H
#include "model/model.h"
#include "model/sampler.h"
#include "model/chat.h"
#include "kv/kv.h"

#define VQ_SESSION_BATCH_DEFAULT 64   /* tokens per forward call when vq_session_params.n_batch is 0 */

struct vq_session {
    const vq_model *m;
    vq_kv *kv;           /* the CPU's cache; NULL when the model is on a device (store) */
    void *store;         /* the device row's store (m->dev): the KV rows live on the device */
    vq_kv *shadow;       /* with a store: a cache of the same spec, dims and seed holding no rows
                            (its codec states are the store's; a state file's rows pass through
                            it: state.c); NULL on the CPU */
    vq_fwd *f;
    int n_ctx, n_batch;
    uint64_t kv_seed;
    int pos;             /* rows the cache holds (positions 0..pos-1) */
    int *tokens;         /* n_ctx: tokens[0..n_tok) held; n_tok = pos, or pos + 1 with a pending token */
    int n_tok;
    float *logits;       /* n_vocab: after the last forward */
    int have_logits;
};

/* VQ_ERR_UNSUPPORTED naming `what` when the session's cache is on a device (a CPU-only path). */
vq_status vq_session_cpu_only(const vq_session *s, const char *what, vq_err *err);
/* The cache of a session (white-box tests; NULL on a device). */
static inline vq_kv *vq_session_kv(vq_session *s) { return s->kv; }
/* Run the pending token (generated, not yet in the cache), if any. */
vq_status vq_session_flush(vq_session *s, vq_err *err);
/* Run n tokens at the session's next positions (no pending token); step = 0 leaves the eviction
 * step that ends the call undone (lab_tap.c). */
vq_status vq_session_run(vq_session *s, const int *tokens, int n, float *logits, int all, int step, vq_err *err);
#endif
