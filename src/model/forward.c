/* forward.c: the one decoder forward pass over a batch of tokens (chunked prefill, or one token
 * for decode). Reads top to bottom like the math; K/V go to the cache and attention comes back
 * from it, so the pass is the same for every KV codec. What differs between architectures is
 * config and layer fields set at load from the architecture row (arch.c): embedding scale,
 * biases, per-head q/k RMSNorm before RoPE, per-layer rope tables (base, rope_freqs, scaling),
 * the attention scale (a factor on q), post-norms of each branch, GeGLU or SwiGLU, sliding-window
 * layers (the cache masks them), an output bias and final-logit soft-capping. Never an arch name.
 * Every number is computed by a row of the backend contract (backend/ops.h): the CPU's
 * (ops_cpu.c) or a device's, whose buffers this file never reads unless the row says they are
 * host memory (the finiteness check, the tap, the logits it writes in place). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "kernels/kernels.h"
#include "model/model.h"

struct vq_fwd {
    int max_batch;
    int rope_long;          /* longrope model, context past its original one: the long table */
    const vq_ops *ops;
    void *octx;
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2;
    float *logits;          /* a device row's logits (n x vocab), downloaded into the caller's */
    int *pos;
    size_t bytes;
    vq_fwd_tap tap;
    void *tap_user;
    vq_fwd_attn_tap attn_tap;
    void *attn_tap_user;
};

void vq_fwd_set_tap(vq_fwd *f, vq_fwd_tap tap, void *user) { f->tap = tap; f->tap_user = user; }
void vq_fwd_set_attn_tap(vq_fwd *f, vq_fwd_attn_tap tap, void *user) { f->attn_tap = tap; f->attn_tap_user = user; }

/* the row takes every matrix the pass multiplies by (else VQ_ERR_ARG naming the first it lacks) */
static vq_status check_row(const vq_model *m, const vq_ops *ops, void *octx, vq_err *err) {
    const vq_model_config *c = &m->cfg;
    if (!ops->matmul_supported(octx, m->output.type, m->output.cols))
        return vq_err_set(err, VQ_ERR_ARG, "backend %s: no matmul for output.weight (type %u, %d columns)", ops->name,
                          m->output.type, m->output.cols);
    for (int l = 0; l < c->n_layers; l++) {
        const vq_layer_weights *L = &m->layers[l];
        const vq_wmat *w[7] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
        static const char *names[7] = { "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down" };
        for (int i = 0; i < 7; i++)
            if (!ops->matmul_supported(octx, w[i]->type, w[i]->cols))
                return vq_err_set(err, VQ_ERR_ARG, "backend %s: no matmul for blk.%d.%s (type %u, %d columns)",
                                  ops->name, l, names[i], w[i]->type, w[i]->cols);
    }
    return VQ_OK;
}

vq_fwd *vq_fwd_create(const vq_model *m, int max_batch, int n_ctx, vq_err *err) {
    return vq_fwd_create_ops(m, max_batch, n_ctx, &vq_ops_cpu, NULL, err);
}

vq_fwd *vq_fwd_create_ops(const vq_model *m, int max_batch, int n_ctx, const vq_ops *ops, void *octx,
                          vq_err *err) {
    const vq_model_config *c = &m->cfg;
    if (max_batch < 1 || max_batch > 65536) {
        vq_err_set(err, VQ_ERR_ARG, "batch size %d out of range [1, 65536]", max_batch);
        return NULL;
    }
    if (ops->max_batch > 0 && max_batch > ops->max_batch) {
        vq_err_set(err, VQ_ERR_ARG, "backend %s: batch size %d, the row takes at most %d tokens at once", ops->name,
                   max_batch, ops->max_batch);
        return NULL;
    }
    if (!ops->host && check_row(m, ops, octx, err)) return NULL;
    vq_fwd *f = calloc(1, sizeof *f);
    if (!f) { vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); return NULL; }
    size_t B = (size_t)max_batch, qd = (size_t)c->n_heads * c->head_dim,
           kvd = (size_t)c->n_kv_heads * c->head_dim;
    f->max_batch = max_batch;
    f->rope_long = c->longrope && n_ctx > c->yarn_orig_ctx;
    f->ops = ops;
    f->octx = octx;
    size_t sizes[9] = { B * c->dim, B * VQ_MAX((size_t)c->dim, qd), B * qd, B * kvd, B * kvd, B * qd,
                        B * c->hidden_dim, B * c->hidden_dim, ops->host ? 0 : B * c->vocab_size };
    float **ptrs[9] = { &f->x, &f->xb, &f->q, &f->k, &f->v, &f->att, &f->hb, &f->hb2, &f->logits };
    for (int i = 0; i < 9; i++) {
        if (!sizes[i]) continue;
        *ptrs[i] = ops->alloc(octx, sizes[i] * sizeof(float));
        if (!*ptrs[i]) { vq_fwd_destroy(f); vq_err_set(err, VQ_ERR_NOMEM, "out of memory for scratch (backend %s)", ops->name); return NULL; }
        f->bytes += sizes[i] * sizeof(float);
    }
    f->pos = calloc(B, sizeof(int));
    if (!f->pos) { vq_fwd_destroy(f); vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); return NULL; }
    f->bytes += B * sizeof(int);
    return f;
}

void vq_fwd_destroy(vq_fwd *f) {
    if (!f) return;
    float *ptrs[9] = { f->x, f->xb, f->q, f->k, f->v, f->att, f->hb, f->hb2, f->logits };
    for (int i = 0; i < 9; i++)
        if (ptrs[i]) f->ops->free(f->octx, ptrs[i]);
    free(f->pos);
    free(f);
}

size_t vq_fwd_bytes(const vq_fwd *f) { return f->bytes; }

/* a status-returning op: return its error */
#define OP(call) do { vq_status s_ = (call); if (s_) return s_; } while (0)

static vq_status add_bias(const vq_fwd *f, float *y, const float *b, int n, int dim, vq_err *err) {
    return b ? f->ops->add_bias(f->octx, y, b, n, dim, err) : VQ_OK;
}

/* Gemma's post-norms: a branch's output RMS-normalized before the residual add (w NULL: none) */
static vq_status post_norm(const vq_fwd *f, float *y, const float *w, int n, int dim, float eps, vq_err *err) {
    return w ? f->ops->rmsnorm(f->octx, y, y, w, n, dim, eps, err) : VQ_OK;
}

static vq_status matmul(const vq_fwd *f, float *y, const vq_wmat *w, const float *x, int n, vq_err *err) {
    vq_ops_mm j = { y, w->data, w->type, w->rows };
    return f->ops->matmul(f->octx, &j, 1, x, n, w->cols, err);
}

/* kvs == NULL: n tokens of one sequence at pos0.. in kv. kvs != NULL: n arms, row t at position
 * pos0 in kvs[t] (vq_forward_arms). */
static vq_status check_kv_finite(const vq_fwd *f, int layer, int n, int kvd, vq_err *err) {
    for (int side = 0; side < 2; side++) {
        const float *x = side ? f->v : f->k;
        for (size_t i = 0; i < (size_t)n * kvd; i++)
            if (!isfinite(x[i]))
                return vq_err_set(err, VQ_ERR_NUMERIC, "forward: layer %d, position %d: the model produced a "
                                  "non-finite %s value (%g, element %zu): the weights hold bad values", layer,
                                  f->pos[i / kvd], side ? "V" : "K", (double)x[i], i % kvd);
    }
    return VQ_OK;
}

static vq_status forward(const vq_model *m, vq_fwd *f, void *store, vq_kv *const *kvs,
                         const int *arm_pos, const int *tokens, int n, int pos0, float *logits,
                         int n_logits, vq_err *err) {
    const vq_model_config *c = &m->cfg;
    const vq_ops *ops = f->ops;
    void *ox = f->octx;
    if (n < 1 || n > f->max_batch)
        return vq_err_set(err, VQ_ERR_ARG, "forward: %d tokens, batch holds 1..%d", n, f->max_batch);
    if (n_logits < 0 || n_logits > n)
        return vq_err_set(err, VQ_ERR_ARG, "forward: n_logits %d out of range [0, %d]", n_logits, n);
    if (!ops->host && (kvs || f->tap || f->attn_tap))
        return vq_err_set(err, VQ_ERR_ARG, "forward: backend %s: %s runs on the CPU row only", ops->name,
                          kvs ? "a batch of KV arms" : "the measurement tap");
    const int dim = c->dim, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    for (int t = 0; t < n; t++) {
        if (tokens[t] < 0 || tokens[t] >= c->vocab_size)
            return vq_err_set(err, VQ_ERR_ARG, "forward: token id %d out of range [0, %d)", tokens[t], c->vocab_size);
        OP(ops->embed(ox, f->x + (size_t)t * dim, m->tok_embd.data, m->tok_embd.type, dim, tokens[t], c->emb_scale, err));
        f->pos[t] = kvs ? arm_pos[t] : pos0 + t;
    }
    for (int l = 0; l < c->n_layers; l++) {
        const vq_layer_weights *L = &m->layers[l];
        OP(ops->rmsnorm(ox, f->xb, f->x, L->attn_norm, n, dim, c->norm_eps, err));
        {   /* q, k, v share one quantization of xb and one parallel region */
            vq_ops_mm j[3] = { { f->q, L->wq.data, L->wq.type, L->wq.rows },
                               { f->k, L->wk.data, L->wk.type, L->wk.rows },
                               { f->v, L->wv.data, L->wv.type, L->wv.rows } };
            OP(ops->matmul(ox, j, 3, f->xb, n, dim, err));
        }
        OP(add_bias(f, f->q, L->bq, n, qd, err));
        OP(add_bias(f, f->k, L->bk, n, kvd, err));
        OP(add_bias(f, f->v, L->bv, n, kvd, err));
        if (L->q_norm) {   /* QK-norm: each head's q and k RMS-normalized (in place) */
            OP(ops->rmsnorm(ox, f->q, f->q, L->q_norm, n * c->n_heads, c->head_dim, c->norm_eps, err));
            OP(ops->rmsnorm(ox, f->k, f->k, L->k_norm, n * c->n_kv_heads, c->head_dim, c->norm_eps, err));
        }
        /* RoPE at the true position of each token */
        const float *inv = f->rope_long && L->rope_inv_freq_long ? L->rope_inv_freq_long : L->rope_inv_freq;
        OP(ops->rope(ox, f->q, n, f->pos, c->n_heads, c->head_dim, c->rope_dim, inv, L->rope_mscale, c->rope_neox, err));
        OP(ops->rope(ox, f->k, n, f->pos, c->n_kv_heads, c->head_dim, c->rope_dim, inv, L->rope_mscale, c->rope_neox,
                     err));
        /* the cache scores q.k / sqrt(head_dim); another attention scale rides on q (before the
         * tap, which sees exactly the rows the cache gets) */
        if (c->q_scale != 1.0f) OP(ops->scale(ox, f->q, c->q_scale, (size_t)n * qd, err));
        if (f->tap) f->tap(f->tap_user, l, n, f->pos, f->q, f->k, f->v);
        /* A NaN/inf here comes from the weights (or an overflow), not from the caller: say so with
         * VQ_ERR_NUMERIC, as the logits check does, before the cache refuses the row as a bad
         * argument. n x kvd values per layer: nothing next to the matmuls. Host rows only: a
         * device row's non-finite values reach the logits, which the session checks. */
        if (ops->host) {
            vq_status s = check_kv_finite(f, l, n, kvd, err);
            if (s) return s;
        }
        if (kvs) {   /* each arm's row to its own cache; arms in parallel */
            vq_status s = VQ_OK;
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
            for (int t = 0; t < n; t++) {
                vq_err e;
                vq_status st = vq_kv_append(kvs[t], l, f->pos[t], 1, f->k + (size_t)t * kvd, f->v + (size_t)t * kvd, &e);
                if (!st) st = vq_kv_attend(kvs[t], l, 1, f->pos + t, f->q + (size_t)t * qd, f->att + (size_t)t * qd, &e);
                if (st) {
#pragma omp critical(vq_forward_arms_err)
                    if (!s) { s = st; if (err) *err = e; }
                }
            }
            if (s) return s;
        } else {
            OP(ops->kv_append(ox, store, l, pos0, n, f->k, f->v, err));
            OP(ops->kv_attend(ox, store, l, n, f->pos, f->q, f->att, err));
        }
        OP(matmul(f, f->xb, &L->wo, f->att, n, err));
        OP(add_bias(f, f->xb, L->bo, n, dim, err));
        OP(post_norm(f, f->xb, L->post_attn_norm, n, dim, c->norm_eps, err));
        if (f->attn_tap) f->attn_tap(f->attn_tap_user, l, n, dim, f->x, f->xb);
        OP(ops->add(ox, f->x, f->xb, (size_t)n * dim, err));

        OP(ops->rmsnorm(ox, f->xb, f->x, L->ffn_norm, n, dim, c->norm_eps, err));
        {
            vq_ops_mm j[2] = { { f->hb, L->w_gate.data, L->w_gate.type, L->w_gate.rows },
                               { f->hb2, L->w_up.data, L->w_up.type, L->w_up.rows } };
            OP(ops->matmul(ox, j, 2, f->xb, n, dim, err));
        }
        OP(add_bias(f, f->hb, L->b_gate, n, c->hidden_dim, err));
        OP(add_bias(f, f->hb2, L->b_up, n, c->hidden_dim, err));
        OP(ops->glu(ox, f->hb, f->hb2, (size_t)n * c->hidden_dim, c->ffn_gelu, err));
        OP(matmul(f, f->xb, &L->w_down, f->hb, n, err));
        OP(add_bias(f, f->xb, L->b_down, n, dim, err));
        OP(post_norm(f, f->xb, L->post_ffn_norm, n, dim, c->norm_eps, err));
        OP(ops->add(ox, f->x, f->xb, (size_t)n * dim, err));
    }
    if (logits && n_logits > 0) {
        const int first = n - n_logits;
        float *out = ops->host ? logits : f->logits;
        const size_t count = (size_t)n_logits * c->vocab_size;
        OP(ops->rmsnorm(ox, f->xb, f->x + (size_t)first * dim, m->out_norm, n_logits, dim, c->norm_eps, err));
        OP(matmul(f, out, &m->output, f->xb, n_logits, err));
        OP(add_bias(f, out, m->out_bias, n_logits, c->vocab_size, err));
        if (c->final_softcap > 0) OP(ops->softcap(ox, out, c->final_softcap, count, err));   /* cap * tanh(x / cap) */
        if (!ops->host) OP(ops->download(ox, logits, out, count * sizeof(float), err));
    }
    return VQ_OK;
}

vq_status vq_forward(const vq_model *m, vq_fwd *f, vq_kv *kv, const int *tokens, int n, int pos0,
                     float *logits, int n_logits, vq_err *err) {
    if (!f->ops->host)
        return vq_err_set(err, VQ_ERR_ARG, "forward: backend %s keeps its own store: vq_forward_store", f->ops->name);
    return forward(m, f, kv, NULL, NULL, tokens, n, pos0, logits, n_logits, err);
}

vq_status vq_forward_store(const vq_model *m, vq_fwd *f, void *store, const int *tokens, int n, int pos0,
                           float *logits, int n_logits, vq_err *err) {
    return forward(m, f, store, NULL, NULL, tokens, n, pos0, logits, n_logits, err);
}

vq_status vq_forward_arms(const vq_model *m, vq_fwd *f, vq_kv *const *kvs, int n_arms,
                          const int *tokens, const int *pos, float *logits, vq_err *err) {
    if (!kvs || !pos || n_arms < 1) return vq_err_set(err, VQ_ERR_ARG, "forward_arms: %d arms", n_arms);
    for (int a = 0; a < n_arms; a++) {
        if (!kvs[a]) return vq_err_set(err, VQ_ERR_ARG, "forward_arms: arm %d has no cache", a);
        if (pos[a] < 0) return vq_err_set(err, VQ_ERR_ARG, "forward_arms: arm %d at position %d", a, pos[a]);
        for (int b = 0; b < a; b++)
            if (kvs[b] == kvs[a])
                return vq_err_set(err, VQ_ERR_ARG, "forward_arms: arms %d and %d share a cache", b, a);
    }
    return forward(m, f, NULL, kvs, pos, tokens, n_arms, 0, logits, logits ? n_arms : 0, err);
}
