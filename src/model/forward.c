/* forward.c: the one decoder forward pass over a batch of tokens (chunked prefill, or one token
 * for decode). Reads top to bottom like the math; K/V go to the cache and attention comes back
 * from it, so the pass is the same for every KV codec. What differs between architectures is
 * config and layer fields set at load from the architecture row (arch.c): embedding scale,
 * biases, per-head q/k RMSNorm before RoPE, per-layer rope tables (base, rope_freqs, scaling),
 * the attention scale (a factor on q), post-norms of each branch, GeGLU or SwiGLU, sliding-window
 * layers (the cache masks them), an output bias and final-logit soft-capping. Never an arch name. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/model.h"

struct vq_fwd {
    int max_batch;
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2;
    int *pos;
    size_t bytes;
    vq_fwd_tap tap;
    void *tap_user;
    vq_fwd_attn_tap attn_tap;
    void *attn_tap_user;
};

void vq_fwd_set_tap(vq_fwd *f, vq_fwd_tap tap, void *user) { f->tap = tap; f->tap_user = user; }
void vq_fwd_set_attn_tap(vq_fwd *f, vq_fwd_attn_tap tap, void *user) { f->attn_tap = tap; f->attn_tap_user = user; }

vq_fwd *vq_fwd_create(const vq_model *m, int max_batch, vq_err *err) {
    const vq_model_config *c = &m->cfg;
    if (max_batch < 1 || max_batch > 65536) {
        vq_err_set(err, VQ_ERR_ARG, "batch size %d out of range [1, 65536]", max_batch);
        return NULL;
    }
    vq_fwd *f = calloc(1, sizeof *f);
    if (!f) { vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); return NULL; }
    size_t B = (size_t)max_batch, qd = (size_t)c->n_heads * c->head_dim,
           kvd = (size_t)c->n_kv_heads * c->head_dim;
    f->max_batch = max_batch;
    size_t sizes[8] = { B * c->dim, B * VQ_MAX((size_t)c->dim, qd), B * qd, B * kvd, B * kvd, B * qd,
                        B * c->hidden_dim, B * c->hidden_dim };
    float **ptrs[8] = { &f->x, &f->xb, &f->q, &f->k, &f->v, &f->att, &f->hb, &f->hb2 };
    for (int i = 0; i < 8; i++) {
        *ptrs[i] = vq_aligned_alloc(sizes[i] * sizeof(float));
        if (!*ptrs[i]) { vq_fwd_destroy(f); vq_err_set(err, VQ_ERR_NOMEM, "out of memory for scratch"); return NULL; }
        f->bytes += sizes[i] * sizeof(float);
    }
    f->pos = calloc(B, sizeof(int));
    if (!f->pos) { vq_fwd_destroy(f); vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); return NULL; }
    f->bytes += B * sizeof(int);
    return f;
}

void vq_fwd_destroy(vq_fwd *f) {
    if (!f) return;
    float *ptrs[8] = { f->x, f->xb, f->q, f->k, f->v, f->att, f->hb, f->hb2 };
    for (int i = 0; i < 8; i++) vq_aligned_free(ptrs[i]);
    free(f->pos);
    free(f);
}

size_t vq_fwd_bytes(const vq_fwd *f) { return f->bytes; }

static void add_bias(float *y, const float *b, int n, int dim) {
    if (!b) return;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < dim; i++) y[(size_t)t * dim + i] += b[i];
}

/* Gemma's post-norms: a branch's output RMS-normalized before the residual add (w NULL: none) */
static void post_norm(float *y, const float *w, int n, int dim, float eps) {
    if (!w) return;
    for (int t = 0; t < n; t++) vq_rmsnorm(y + (size_t)t * dim, y + (size_t)t * dim, w, dim, eps);
}

static void matmul(float *y, const vq_wmat *w, const float *x, int n) {
    vq_matmul(y, w->data, w->type, x, n, w->rows, w->cols);
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

static vq_status forward(const vq_model *m, vq_fwd *f, vq_kv *kv, vq_kv *const *kvs,
                         const int *arm_pos, const int *tokens, int n, int pos0, float *logits,
                         int n_logits, vq_err *err) {
    const vq_model_config *c = &m->cfg;
    if (n < 1 || n > f->max_batch)
        return vq_err_set(err, VQ_ERR_ARG, "forward: %d tokens, batch holds 1..%d", n, f->max_batch);
    if (n_logits < 0 || n_logits > n)
        return vq_err_set(err, VQ_ERR_ARG, "forward: n_logits %d out of range [0, %d]", n_logits, n);
    const int dim = c->dim, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    for (int t = 0; t < n; t++) {
        if (tokens[t] < 0 || tokens[t] >= c->vocab_size)
            return vq_err_set(err, VQ_ERR_ARG, "forward: token id %d out of range [0, %d)", tokens[t], c->vocab_size);
        vq_get_row(m->tok_embd.data, m->tok_embd.type, dim, tokens[t], f->x + (size_t)t * dim);
        if (c->emb_scale != 1.0f)
            for (int i = 0; i < dim; i++) f->x[(size_t)t * dim + i] *= c->emb_scale;
        f->pos[t] = kvs ? arm_pos[t] : pos0 + t;
    }
    for (int l = 0; l < c->n_layers; l++) {
        const vq_layer_weights *L = &m->layers[l];
        for (int t = 0; t < n; t++)
            vq_rmsnorm(f->xb + (size_t)t * dim, f->x + (size_t)t * dim, L->attn_norm, dim, c->norm_eps);
        {   /* q, k, v share one quantization of xb and one parallel region */
            vq_matmul_job j[3] = { { f->q, L->wq.data, L->wq.type, L->wq.rows },
                                   { f->k, L->wk.data, L->wk.type, L->wk.rows },
                                   { f->v, L->wv.data, L->wv.type, L->wv.rows } };
            vq_matmul_many(j, 3, f->xb, n, dim);
        }
        add_bias(f->q, L->bq, n, qd);
        add_bias(f->k, L->bk, n, kvd);
        add_bias(f->v, L->bv, n, kvd);
        if (L->q_norm) {   /* QK-norm: each head's q and k RMS-normalized (in place) */
            const int hd = c->head_dim;
            for (size_t r = 0; r < (size_t)n * c->n_heads; r++) vq_rmsnorm(f->q + r * hd, f->q + r * hd, L->q_norm, hd, c->norm_eps);
            for (size_t r = 0; r < (size_t)n * c->n_kv_heads; r++) vq_rmsnorm(f->k + r * hd, f->k + r * hd, L->k_norm, hd, c->norm_eps);
        }
        for (int t = 0; t < n; t++) {   /* RoPE at the true position of each token */
            vq_rope(f->q + (size_t)t * qd, c->n_heads, c->head_dim, c->rope_dim, f->pos[t], L->rope_inv_freq,
                    L->rope_mscale, c->rope_neox);
            vq_rope(f->k + (size_t)t * kvd, c->n_kv_heads, c->head_dim, c->rope_dim, f->pos[t], L->rope_inv_freq,
                    L->rope_mscale, c->rope_neox);
        }
        /* the cache scores q.k / sqrt(head_dim); another attention scale rides on q (before the
         * tap, which sees exactly the rows the cache gets) */
        if (c->q_scale != 1.0f)
            for (size_t i = 0; i < (size_t)n * qd; i++) f->q[i] *= c->q_scale;
        if (f->tap) f->tap(f->tap_user, l, n, f->pos, f->q, f->k, f->v);
        /* A NaN/inf here comes from the weights (or an overflow), not from the caller: say so with
         * VQ_ERR_NUMERIC, as the logits check does, before the cache refuses the row as a bad
         * argument. n x kvd values per layer: nothing next to the matmuls. */
        {
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
            vq_status s = vq_kv_append(kv, l, pos0, n, f->k, f->v, err);
            if (s) return s;
            s = vq_kv_attend(kv, l, n, f->pos, f->q, f->att, err);
            if (s) return s;
        }
        matmul(f->xb, &L->wo, f->att, n);
        add_bias(f->xb, L->bo, n, dim);
        post_norm(f->xb, L->post_attn_norm, n, dim, c->norm_eps);
        if (f->attn_tap) f->attn_tap(f->attn_tap_user, l, n, dim, f->x, f->xb);
        for (size_t i = 0; i < (size_t)n * dim; i++) f->x[i] += f->xb[i];

        for (int t = 0; t < n; t++)
            vq_rmsnorm(f->xb + (size_t)t * dim, f->x + (size_t)t * dim, L->ffn_norm, dim, c->norm_eps);
        {
            vq_matmul_job j[2] = { { f->hb, L->w_gate.data, L->w_gate.type, L->w_gate.rows },
                                   { f->hb2, L->w_up.data, L->w_up.type, L->w_up.rows } };
            vq_matmul_many(j, 2, f->xb, n, dim);
        }
        add_bias(f->hb, L->b_gate, n, c->hidden_dim);
        add_bias(f->hb2, L->b_up, n, c->hidden_dim);
        if (c->ffn_gelu) vq_geglu(f->hb, f->hb2, n * c->hidden_dim);
        else vq_swiglu(f->hb, f->hb2, n * c->hidden_dim);
        matmul(f->xb, &L->w_down, f->hb, n);
        add_bias(f->xb, L->b_down, n, dim);
        post_norm(f->xb, L->post_ffn_norm, n, dim, c->norm_eps);
        for (size_t i = 0; i < (size_t)n * dim; i++) f->x[i] += f->xb[i];
    }
    if (logits && n_logits > 0) {
        int first = n - n_logits;
        for (int t = first; t < n; t++)
            vq_rmsnorm(f->xb + (size_t)(t - first) * dim, f->x + (size_t)t * dim, m->out_norm, dim, c->norm_eps);
        matmul(logits, &m->output, f->xb, n_logits);
        add_bias(logits, m->out_bias, n_logits, c->vocab_size);
        if (c->final_softcap > 0) {   /* logits = cap * tanh(logits / cap) */
            const float cap = c->final_softcap;
            for (size_t i = 0; i < (size_t)n_logits * c->vocab_size; i++) logits[i] = cap * tanhf(logits[i] / cap);
        }
    }
    return VQ_OK;
}

vq_status vq_forward(const vq_model *m, vq_fwd *f, vq_kv *kv, const int *tokens, int n, int pos0,
                     float *logits, int n_logits, vq_err *err) {
    return forward(m, f, kv, NULL, NULL, tokens, n, pos0, logits, n_logits, err);
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
