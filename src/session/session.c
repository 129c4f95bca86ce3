/* session.c: a session holds a compressed KV cache, the forward pass's scratch and its position;
 * decode, batched decode of many sessions, truncate and generation run on it (veloxquant.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "codec/codec_dev.h"
#include "session/session_impl.h"

vq_session_params vq_session_default_params(void) {
    return (vq_session_params){ .n_ctx = 0, .n_batch = 0, .kv_seed = 0, .allow_ctx_over_train = 0 };
}

void vq_session_free(vq_session *s) {
    if (!s) return;
    vq_kv_destroy(s->kv);
    if (s->store) s->m->dev->store_free(s->store);
    vq_kv_destroy(s->shadow);
    vq_fwd_destroy(s->f);
    free(s->tokens);
    free(s->logits);
    free(s);
}

vq_status vq_session_cpu_only(const vq_session *s, const char *what, vq_err *err) {
    if (!s || s->kv) return VQ_OK;
    return vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: the session's KV cache is on device %s, and this runs on the "
                      "CPU's cache only", what, s->m->dev_name);
}

/* A device's store holds plain caches (kv.h vq_kv_plain_check: codes and the partial block in
 * fp16; no window past it, sink, eviction or key pre-transform) of codecs its kernels read and
 * write (codec_dev.h, and the row's store_check: docs/cuda.md): anything else is refused by name,
 * never turned into something it can hold. The cache made for the check (kv, with the session's
 * dims and seed) is the session's shadow: its codec states are the ones the store writes. */
static vq_status spec_on_device(const vq_kv_spec *spec, const vq_device *d, const char *name, const vq_kv_dims *dims,
                                uint64_t seed, vq_kv **out, vq_err *err) {
    vq_kv *kv = vq_kv_create(spec, dims, seed, err);
    if (!kv) return err && err->code ? err->code : VQ_ERR_NOMEM;
    vq_err e;
    vq_err_clear(&e);
    char why[sizeof e.msg + 256] = "";
    for (int l = 0; !*why && l < dims->n_layers; l++) {   /* the codecs first, then the store's keys */
        const vq_codec_state *k = vq_kv_codec_state(kv, l, 0), *v = vq_kv_codec_state(kv, l, 1);
        vq_codec_dev info;
        if (vq_codec_dev_info(k, &info, &e) || vq_codec_dev_info(v, &info, &e) ||
            (d->store_check && d->store_check(k, v, dims->n_heads, dims->n_kv_heads, &e)))
            snprintf(why, sizeof why, "layer %d (%.200s): %s", l, vq_kv_layer_spec(kv, l), e.msg);
    }
    if (!*why && vq_kv_plain_check(kv, &e)) snprintf(why, sizeof why, "%s", e.msg);
    if (*why) {
        vq_kv_destroy(kv);
        return vq_err_set(err, VQ_ERR_UNSUPPORTED, "device %s: the KV spec '%s' cannot be held there: %s (docs/cuda.md)",
                          name, vq_kv_spec_given(spec), why);
    }
    if (out) *out = kv;
    else vq_kv_destroy(kv);
    return VQ_OK;
}

vq_status vq_kv_spec_check_device(const vq_kv_spec *spec, const char *device, vq_err *err) {
    vq_err_clear(err);
    if (!spec) return vq_err_set(err, VQ_ERR_ARG, "vq_kv_spec_check_device: no spec");
    const vq_device *d;
    int ix;
    vq_status st = vq_device_parse(device, &d, &ix, err);
    if (st || !d) return st;
    /* no model yet: a shape every kernel takes (head_dim 128, 4 query heads per KV head), 64 layers */
    vq_kv_dims dims;
    memset(&dims, 0, sizeof dims);
    dims.n_layers = 64;
    dims.n_heads = 8;
    dims.n_kv_heads = 2;
    dims.head_dim = 128;
    dims.max_ctx = 4096;
    dims.max_append = 1;
    return spec_on_device(spec, d, device, &dims, 0, NULL, err);
}

/* The device's store and forward scratch for a session (m->dev). The row takes max_batch tokens per
 * call (the GPU's: 1, so a prompt runs as decode steps). */
static vq_status device_store(vq_session *s, const vq_kv_spec *spec, const vq_kv_dims *dims, vq_err *err) {
    const vq_model *m = s->m;
    const vq_device *d = m->dev;
    s->n_batch = d->ops->max_batch > 0 ? VQ_MIN(s->n_batch, d->ops->max_batch) : s->n_batch;
    vq_kv_dims sd = *dims;
    sd.max_append = s->n_batch;
    vq_status st = spec_on_device(spec, d, m->dev_name, &sd, s->kv_seed, &s->shadow, err);
    if (st) return st;
    const vq_codec_state **states = malloc(2 * (size_t)dims->n_layers * sizeof *states);
    if (!states) return vq_err_set(err, VQ_ERR_NOMEM, "vq_session_create: out of memory");
    for (int l = 0; l < dims->n_layers; l++) {
        states[2 * l] = vq_kv_codec_state(s->shadow, l, 0);
        states[2 * l + 1] = vq_kv_codec_state(s->shadow, l, 1);
    }
    s->store = d->store_create(m->dev_ctx, dims->n_layers, dims->n_heads, dims->n_kv_heads, dims->head_dim, s->n_ctx,
                               dims->span, dims->softcap, states, err);
    free(states);
    if (!s->store) return err && err->code ? err->code : VQ_ERR_NOMEM;
    s->f = vq_fwd_create_ops(m, s->n_batch, s->n_ctx, d->ops, m->dev_ctx, err);
    return s->f ? VQ_OK : (err && err->code ? err->code : VQ_ERR_NOMEM);
}

/* keep positions < n in the session's cache: the rows kept (a coded block whole or not at all) */
static int cache_truncate(vq_session *s, int n) {
    return s->store ? s->m->dev->store_truncate(s->store, n) : vq_kv_truncate(s->kv, n);
}

vq_session *vq_session_create(const vq_model *m, const vq_kv_spec *spec, const vq_session_params *p,
                              vq_err *err) {
    vq_err_clear(err);
    vq_session_params d = vq_session_default_params();
    if (!p) p = &d;
    if (!m || !spec) { vq_err_set(err, VQ_ERR_ARG, "vq_session_create: no model or no KV spec"); return NULL; }
    const int train = m->cfg.train_ctx > 0 ? m->cfg.train_ctx : 2048;
    int n_ctx = p->n_ctx > 0 ? p->n_ctx : VQ_MIN(2048, train);
    if (p->n_ctx < 0 || n_ctx < 2 || n_ctx > (1 << 24)) {
        vq_err_set(err, VQ_ERR_ARG, "context size %d is out of range (2..16777216)", p->n_ctx);
        return NULL;
    }
    if (n_ctx > train && !p->allow_ctx_over_train) {
        vq_err_set(err, VQ_ERR_RANGE, "context size %d exceeds the model's training context %d", n_ctx, train);
        return NULL;
    }
    int n_batch = p->n_batch > 0 ? p->n_batch : VQ_SESSION_BATCH_DEFAULT;
    if (p->n_batch < 0 || n_batch > 4096) {
        vq_err_set(err, VQ_ERR_ARG, "batch size %d is out of range (1..4096)", p->n_batch);
        return NULL;
    }
    n_batch = VQ_MIN(n_batch, n_ctx);
    vq_session *s = calloc(1, sizeof *s);
    if (!s) { vq_err_set(err, VQ_ERR_NOMEM, "vq_session_create: out of memory"); return NULL; }
    s->m = m;
    s->n_ctx = n_ctx;
    s->n_batch = n_batch;
    s->kv_seed = p->kv_seed;
    vq_kv_dims dims = vq_model_kv_dims(m, n_ctx);
    if (m->dev) {   /* the model is on a device: its store holds the rows, its row runs the pass */
        if (device_store(s, spec, &dims, err)) { vq_session_free(s); return NULL; }
    } else {
        dims.max_append = n_batch;   /* forward appends at most a batch per call (a ring's bound) */
        s->kv = vq_kv_create(spec, &dims, p->kv_seed, err);
        if (!s->kv || vq_kv_check_model(s->kv, vq_model_config_hash(m, NULL, 0), err)) {   /* calib=FILE */
            vq_session_free(s);
            return NULL;
        }
        for (int l = 0; l < m->cfg.n_layers; l++)   /* the cache's policy may read queries before RoPE */
            if (vq_kv_set_rope(s->kv, l, m->layers[l].rope_inv_freq, m->cfg.rope_dim, m->cfg.rope_neox,
                               m->layers[l].rope_mscale, err)) {
                vq_session_free(s);
                return NULL;
            }
        s->f = vq_fwd_create(m, n_batch, n_ctx, err);
    }
    s->tokens = malloc((size_t)n_ctx * sizeof(int));
    s->logits = malloc((size_t)m->cfg.vocab_size * sizeof(float));
    if (!s->f || !s->tokens || !s->logits) {
        if (s->f) vq_err_set(err, VQ_ERR_NOMEM, "vq_session_create: out of memory");
        vq_session_free(s);
        return NULL;
    }
    return s;
}

static vq_status check_finite(const float *x, size_t n, vq_err *err) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return vq_err_set(err, VQ_ERR_NUMERIC, "the model produced a non-finite logit (%g at %zu): "
                              "the weights or the KV cache hold bad values", (double)x[i], i);
    return VQ_OK;
}

/* tokens run through the model and appended to the cache at positions pos.. (no pending token) */
/* Positions are the session's own (s->pos), never the rows the cache holds: with eviction the
 * cache holds fewer rows than positions, and each new token still gets its true position. */
/* step = 0 (lab_tap.c's observe only): the eviction step that would end the call is left undone */
vq_status vq_session_run(vq_session *s, const int *tokens, int n, float *logits, int all, int step, vq_err *err) {
    const int V = s->m->cfg.vocab_size, pos0 = s->pos;
    if (s->kv) vq_kv_evict_begin(s->kv, pos0, n);
    for (int i = 0; i < n; i += s->n_batch) {
        int nb = VQ_MIN(s->n_batch, n - i), last = i + nb == n;
        float *dst = all && logits ? logits + (size_t)i * V : s->logits;
        int nl = all && logits ? nb : (last ? 1 : 0);
        vq_status st = s->store ? vq_forward_store(s->m, s->f, s->store, tokens + i, nb, s->pos, nl ? dst : NULL, nl, err)
                                : vq_forward(s->m, s->f, s->kv, tokens + i, nb, s->pos, nl ? dst : NULL, nl, err);
        if (!st && nl) st = check_finite(dst, (size_t)nl * V, err);
        if (st) {   /* the cache may hold part of the chunk: cut it back to what the tokens say */
            s->pos = cache_truncate(s, s->pos);
            s->n_tok = s->pos;
            s->have_logits = 0;
            return st;
        }
        memcpy(s->tokens + s->pos, tokens + i, (size_t)nb * sizeof(int));
        s->pos += nb;
        s->n_tok = s->pos;
    }
    if (step && s->kv) vq_kv_evict_end(s->kv, pos0, n);   /* an eviction step when a prompt ends or one is due */
    if (n > 0) {
        if (all && logits) memcpy(s->logits, logits + (size_t)(n - 1) * V, (size_t)V * sizeof(float));
        else if (logits) memcpy(logits, s->logits, (size_t)V * sizeof(float));
        s->have_logits = 1;
    }
    return VQ_OK;
}

vq_status vq_session_flush(vq_session *s, vq_err *err) {
    if (s->n_tok == s->pos) return VQ_OK;
    int t = s->tokens[s->pos];
    s->n_tok = s->pos;
    return vq_session_run(s, &t, 1, NULL, 0, 1, err);
}

vq_status vq_session_decode(vq_session *s, const int *tokens, int n, float *logits, int all_logits,
                            vq_err *err) {
    vq_err_clear(err);
    if (!s || n < 0 || (n > 0 && !tokens)) return vq_err_set(err, VQ_ERR_ARG, "vq_session_decode: bad arguments");
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->m->cfg.vocab_size)
            return vq_err_set(err, VQ_ERR_ARG, "token %d (id %d) is outside the vocabulary (0..%d)", i,
                              tokens[i], s->m->cfg.vocab_size - 1);
    if ((long)s->n_tok + n > s->n_ctx)
        return vq_err_set(err, VQ_ERR_RANGE, "%d tokens do not fit: the session holds %d of %d positions",
                          n, s->n_tok, s->n_ctx);
    vq_status st = vq_session_flush(s, err);
    if (st) return st;
    st = vq_session_run(s, tokens, n, logits, all_logits, 1, err);
    if (!st && n == 0 && logits && !all_logits && s->have_logits)   /* the pending token's logits */
        memcpy(logits, s->logits, (size_t)s->m->cfg.vocab_size * sizeof(float));
    return st;
}

vq_status vq_decode_batch(vq_session *const *ss, int n, const int *tokens, float *logits, vq_err *err) {
    vq_err_clear(err);
    if (!ss || n < 1 || !tokens) return vq_err_set(err, VQ_ERR_ARG, "vq_decode_batch: bad arguments");
    const vq_model *m = ss[0] ? ss[0]->m : NULL;
    for (int a = 0; a < n; a++) {
        vq_session *s = ss[a];
        if (!s || s->m != m)
            return vq_err_set(err, VQ_ERR_ARG, "vq_decode_batch: session %d is NULL or has another model", a);
        for (int b = 0; b < a; b++)
            if (ss[b] == s) return vq_err_set(err, VQ_ERR_ARG, "vq_decode_batch: session %d is also session %d", a, b);
        if (tokens[a] < 0 || tokens[a] >= m->cfg.vocab_size)
            return vq_err_set(err, VQ_ERR_ARG, "vq_decode_batch: token id %d of session %d is outside the vocabulary",
                              tokens[a], a);
        if (s->n_tok + 1 > s->n_ctx)
            return vq_err_set(err, VQ_ERR_RANGE, "vq_decode_batch: session %d is full (%d positions)", a, s->n_ctx);
    }
    for (int a = 0; a < n; a++) {
        vq_status st = vq_session_flush(ss[a], err);
        if (st) return st;
    }
    const int V = m->cfg.vocab_size, cap = ss[0]->n_batch;
    if (m->dev) {   /* no batched pass over device stores yet: each session's token in turn */
        for (int a = 0; a < n; a++) {
            vq_status st = vq_session_run(ss[a], tokens + a, 1, logits ? logits + (size_t)a * V : NULL, 0, 1, err);
            if (st) return st;
        }
        return VQ_OK;
    }
    vq_kv *kvs[cap];
    int pos[cap];
    for (int i = 0; i < n; i += cap) {
        int nb = VQ_MIN(cap, n - i);
        for (int a = 0; a < nb; a++) {
            kvs[a] = ss[i + a]->kv;
            pos[a] = ss[i + a]->pos;
            vq_kv_evict_begin(kvs[a], pos[a], 1);
        }
        /* into the caller's rows when given; else a temporary (the only allocation here) */
        float *buf = logits ? logits + (size_t)i * V : malloc((size_t)nb * V * sizeof(float));
        if (!buf) return vq_err_set(err, VQ_ERR_NOMEM, "vq_decode_batch: out of memory");
        vq_status st = vq_forward_arms(m, ss[0]->f, kvs, nb, tokens + i, pos, buf, err);
        if (!st) st = check_finite(buf, (size_t)nb * V, err);
        for (int a = 0; a < nb; a++) {
            vq_session *s = ss[i + a];
            if (st) {
                s->pos = vq_kv_truncate(s->kv, s->pos);
                s->n_tok = s->pos;
                s->have_logits = 0;
                continue;
            }
            s->tokens[s->pos++] = tokens[i + a];
            s->n_tok = s->pos;
            vq_kv_evict_end(s->kv, s->pos - 1, 1);
            memcpy(s->logits, buf + (size_t)a * V, (size_t)V * sizeof(float));
            s->have_logits = 1;
        }
        if (!logits) free(buf);
        if (st) return st;
    }
    return VQ_OK;
}

int vq_session_pos(const vq_session *s) { return s ? s->n_tok : 0; }
int vq_session_n_ctx(const vq_session *s) { return s ? s->n_ctx : 0; }
const int *vq_session_tokens(const vq_session *s) { return s ? s->tokens : NULL; }
const vq_model *vq_session_model(const vq_session *s) { return s ? s->m : NULL; }
size_t vq_session_kv_bytes(const vq_session *s) {
    if (s && s->store) return s->m->dev->store_bytes(s->store);   /* allocated whole, for n_ctx rows */
    return s ? vq_kv_bytes(s->kv) : 0;
}
double vq_session_kv_bits(const vq_session *s) {
    if (s && s->store) {   /* what the allocation holds per element of n_ctx rows */
        const vq_kv_dims D = vq_model_kv_dims(s->m, s->n_ctx);
        return 8.0 * (double)s->m->dev->store_bytes(s->store) /
               ((double)s->n_ctx * D.n_layers * D.n_kv_heads * D.head_dim * 2.0);
    }
    return s ? vq_kv_bits_per_elem(s->kv) : 0;
}
size_t vq_session_scratch_bytes(const vq_session *s) {
    return s ? vq_fwd_bytes(s->f) + (s->kv ? vq_kv_scratch_bytes(s->kv) : 0) : 0;
}
const char *vq_session_kv_spec_text(const vq_session *s) {
    if (s && s->store) return vq_kv_spec_str(s->shadow);   /* the CPU cache's text for this spec */
    return s ? vq_kv_spec_str(s->kv) : "";
}

vq_status vq_session_truncate(vq_session *s, int n, vq_err *err) {
    vq_err_clear(err);
    if (!s || n < 0 || n > s->n_tok)
        return vq_err_set(err, VQ_ERR_ARG, "vq_session_truncate: %d is outside 0..%d", n, s ? s->n_tok : 0);
    if (n == s->n_tok) return VQ_OK;
    if (n >= s->pos) {   /* only the pending token goes */
        s->n_tok = n;
        return VQ_OK;
    }
    int kept = cache_truncate(s, n);
    if (kept < 0) return vq_err_set(err, VQ_ERR_ARG, "vq_session_truncate: cache refused %d", n);
    s->pos = kept;
    s->n_tok = kept;
    s->have_logits = 0;
    if (kept < n) {   /* rows that shared a code block with dropped rows: run their tokens again */
        int *redo = malloc((size_t)(n - kept) * sizeof(int));
        if (!redo) return vq_err_set(err, VQ_ERR_NOMEM, "vq_session_truncate: out of memory");
        memcpy(redo, s->tokens + kept, (size_t)(n - kept) * sizeof(int));
        vq_status st = vq_session_run(s, redo, n - kept, NULL, 0, 1, err);
        free(redo);
        return st;
    }
    return VQ_OK;
}
