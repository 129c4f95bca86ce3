/* model.c: binds a model file's tensors to the Llama-family weight layout and checks every
 * shape and type before the forward pass may touch them. GGUF ("llama" and "gemma3"
 * architectures) and llama2.c checkpoints are supported; weights stay in the mapped file. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/gguf.h"
#include "formats/llama2c.h"
#include "formats/reservoir.h"
#include "kernels/kernels.h"
#include "model/chat.h"

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

/* Find a tensor, check it is 2-D rows x cols (ggml: ne0 = cols, ne1 = rows) of a supported type. */
static vq_status bind_mat(const vq_gguf *g, const char *name, int rows, int cols, int optional,
                          vq_wmat *out, vq_err *err) {
    const vq_gguf_tensor *t = vq_gguf_find_tensor(g, name);
    memset(out, 0, sizeof *out);
    if (!t) {
        if (optional) return VQ_OK;
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: tensor '%s' is missing", vq_gguf_path(g), name);
    }
    if (t->ne[0] != (uint64_t)cols || t->ne[1] != (uint64_t)rows || t->ne[2] != 1 || t->ne[3] != 1)
        return vq_err_set(err, VQ_ERR_FORMAT,
                          "%s: tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%d, %d]",
                          vq_gguf_path(g), name, (unsigned long long)t->ne[0],
                          (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                          (unsigned long long)t->ne[3], cols, rows);
    const vq_wtype *wt = vq_wtype_get(t->type);
    if (!wt)
        return vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: tensor '%s' has type %u, which is not supported",
                          vq_gguf_path(g), name, t->type);
    if (cols % wt->block != 0)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: tensor '%s': %d columns not a multiple of %s block %d",
                          vq_gguf_path(g), name, cols, wt->name, wt->block);
    out->data = t->data; out->type = t->type; out->rows = rows; out->cols = cols;
    return VQ_OK;
}

static vq_status bind_vec(const vq_gguf *g, const char *name, int n, int optional, const float **out,
                          vq_err *err) {
    const vq_gguf_tensor *t = vq_gguf_find_tensor(g, name);
    *out = NULL;
    if (!t) {
        if (optional) return VQ_OK;
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: tensor '%s' is missing", vq_gguf_path(g), name);
    }
    if (t->type != VQ_TYPE_F32 || t->ne[0] != (uint64_t)n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: tensor '%s' must be F32 of %d elements (type %u, ne0 %llu)",
                          vq_gguf_path(g), name, n, t->type, (unsigned long long)t->ne[0]);
    *out = (const float *)t->data;
    return VQ_OK;
}

static vq_status get_u32_key(const vq_gguf *g, const char *arch, const char *suffix, int required,
                             uint32_t def, uint32_t lo, uint32_t hi, int *out, vq_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v = def;
    if (vq_gguf_find(g, key)) {
        if (vq_gguf_get_u32(g, key, &v, err)) return err ? err->code : VQ_ERR_FORMAT;
    } else if (required) {
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: metadata key '%s' is missing", vq_gguf_path(g), key);
    }
    if (v < lo || v > hi)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: metadata '%s' = %u is out of range [%u, %u]",
                          vq_gguf_path(g), key, v, lo, hi);
    *out = (int)v;
    return VQ_OK;
}

/* An optional float hyperparameter: def when absent; present, it must be finite and in (lo, hi]
 * (NaN, +-inf and absurd values are refused at load, naming the key, rather than surfacing as NaN
 * logits many tokens later). */
static vq_status get_f32_key(const vq_gguf *g, const char *arch, const char *suffix, float def, double lo,
                             double hi, float *out, vq_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    float v = def;
    if (vq_gguf_find(g, key) && vq_gguf_get_f32(g, key, &v, err)) return err ? err->code : VQ_ERR_FORMAT;
    if (!isfinite(v) || !(v > lo && v <= hi))
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: metadata '%s' = %g is out of range (must be finite, > %g "
                          "and <= %g)", vq_gguf_path(g), key, (double)v, lo, hi);
    *out = v;
    return VQ_OK;
}

static vq_status load_gguf(vq_model *m, const char *path, int reservoir, int copy, vq_err *err) {
    vq_gguf *g = reservoir ? vq_reservoir_open(path, vq_model_layouts(), copy, err) : vq_gguf_open_ex(path, copy, err);
    if (!g) return err ? err->code : VQ_ERR_IO;
    m->reservoir = reservoir;
    m->copied = copy;
    m->gguf = g;
    vq_model_config *c = &m->cfg;
    vq_str arch;
    if (vq_gguf_get_str(g, "general.architecture", &arch, err)) return err->code;
    const int gemma = vq_str_eq(arch, "gemma3");
    if (!vq_str_eq(arch, "llama") && !gemma)
        return vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not supported (known: llama, gemma3)",
                          path, (int)VQ_MIN(arch.len, 64), arch.ptr);
    snprintf(c->arch, sizeof c->arch, "%s", gemma ? "gemma3" : "llama");
    const char *a = c->arch;
    vq_status s;
    if ((s = get_u32_key(g, a, "embedding_length", 1, 0, 1, 65536, &c->dim, err))) return s;
    if ((s = get_u32_key(g, a, "block_count", 1, 0, 1, 1024, &c->n_layers, err))) return s;
    if ((s = get_u32_key(g, a, "feed_forward_length", 1, 0, 1, 1 << 20, &c->hidden_dim, err))) return s;
    if ((s = get_u32_key(g, a, "attention.head_count", 1, 0, 1, 1024, &c->n_heads, err))) return s;
    if ((s = get_u32_key(g, a, "attention.head_count_kv", 0, (uint32_t)c->n_heads, 1, 1024, &c->n_kv_heads, err))) return s;
    /* a session needs 2 positions at least (vq_session_create's n_ctx 2..) */
    if ((s = get_u32_key(g, a, "context_length", 0, 2048, 2, 1 << 24, &c->train_ctx, err))) return s;
    /* head_dim: attention.key_length when the file says (Gemma 3: 256 with dim 640 and 4 heads),
     * else dim / heads; values must have the same width (the cache stores K and V rows alike) */
    int kl = 0, vl = 0;
    if ((s = get_u32_key(g, a, "attention.key_length", 0, 0, 0, 4096, &kl, err))) return s;
    if ((s = get_u32_key(g, a, "attention.value_length", 0, (uint32_t)kl, 0, 4096, &vl, err))) return s;
    if (kl != vl)
        return vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: key_length %d != value_length %d is not supported",
                          path, kl, vl);
    if (c->n_heads % c->n_kv_heads || (!kl && c->dim % c->n_heads))
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: dim %d / heads %d / kv heads %d are inconsistent",
                          path, c->dim, c->n_heads, c->n_kv_heads);
    c->head_dim = kl ? kl : c->dim / c->n_heads;
    if ((s = get_u32_key(g, a, "rope.dimension_count", 0, (uint32_t)c->head_dim, 2, (uint32_t)c->head_dim, &c->rope_dim, err))) return s;
    if (c->rope_dim % 2) return vq_err_set(err, VQ_ERR_FORMAT, "%s: rope.dimension_count %d is odd", path, c->rope_dim);
    /* eps: llama files use 1e-6..1e-5; above 0.5 it would swamp the mean square of unit-scale
     * activations. rope base: the frequencies base^(-2i/d) need base > 1; released models use
     * 1e4..1e7, so 1e12 leaves room and still refuses nonsense. */
    if ((s = get_f32_key(g, a, "attention.layer_norm_rms_epsilon", 1e-5f, 0, 0.5, &c->norm_eps, err))) return s;
    if ((s = get_f32_key(g, a, "rope.freq_base", 10000.0f, 1, 1e12, &c->rope_base, err))) return s;
    c->rope_neox = 0;
    c->emb_scale = 1.0f;
    c->rope_base_swa = c->rope_base;
    if (gemma) {
        /* Gemma 3: rotary on halves (the converter does not permute Q/K), embeddings scaled by
         * sqrt(dim), GeGLU, sliding-window layers (every 6th layer global: 5, 11, 17, ...) with rope
         * base 10000 (the files carry no key for it), QK-norm and post-norms (bound below). */
        c->rope_neox = 1;
        c->emb_scale = sqrtf((float)c->dim);
        c->ffn_gelu = 1;
        c->rope_base_swa = 10000.0f;
        if ((s = get_u32_key(g, a, "attention.sliding_window", 1, 0, 1, 1 << 24, &c->swa_window, err))) return s;
    }
    const vq_gguf_tensor *emb = vq_gguf_find_tensor(g, "token_embd.weight");
    if (!emb) return vq_err_set(err, VQ_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", path);
    if (emb->ne[1] < 1 || emb->ne[1] > (1u << 24))
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: token_embd.weight has %llu rows", path,
                          (unsigned long long)emb->ne[1]);
    c->vocab_size = (int)emb->ne[1];

    if ((s = bind_mat(g, "token_embd.weight", c->vocab_size, c->dim, 0, &m->tok_embd, err))) return s;
    if ((s = bind_mat(g, "output.weight", c->vocab_size, c->dim, 1, &m->output, err))) return s;
    if (!m->output.data) m->output = m->tok_embd;   /* tied embeddings */
    if ((s = bind_vec(g, "output_norm.weight", c->dim, 0, &m->out_norm, err))) return s;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    m->span = calloc((size_t)c->n_layers, sizeof *m->span);
    if (!m->layers || !m->span) return vq_err_set(err, VQ_ERR_NOMEM, "out of memory");
    int kvd = c->n_kv_heads * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        vq_layer_weights *L = &m->layers[l];
        L->swa = gemma && l % 6 != 5;
        L->rope_base = L->swa ? c->rope_base_swa : c->rope_base;
        m->span[l] = L->swa ? c->swa_window : 0;
        char n[96];
#define NM(suffix) (snprintf(n, sizeof n, "blk.%d.%s", l, suffix), n)
        if ((s = bind_vec(g, NM("attn_norm.weight"), c->dim, 0, &L->attn_norm, err))) return s;
        if ((s = bind_vec(g, NM("ffn_norm.weight"), c->dim, 0, &L->ffn_norm, err))) return s;
        if ((s = bind_mat(g, NM("attn_q.weight"), c->n_heads * c->head_dim, c->dim, 0, &L->wq, err))) return s;
        if ((s = bind_mat(g, NM("attn_k.weight"), kvd, c->dim, 0, &L->wk, err))) return s;
        if ((s = bind_mat(g, NM("attn_v.weight"), kvd, c->dim, 0, &L->wv, err))) return s;
        if ((s = bind_mat(g, NM("attn_output.weight"), c->dim, c->n_heads * c->head_dim, 0, &L->wo, err))) return s;
        if ((s = bind_mat(g, NM("ffn_gate.weight"), c->hidden_dim, c->dim, 0, &L->w_gate, err))) return s;
        if ((s = bind_mat(g, NM("ffn_up.weight"), c->hidden_dim, c->dim, 0, &L->w_up, err))) return s;
        if ((s = bind_mat(g, NM("ffn_down.weight"), c->dim, c->hidden_dim, 0, &L->w_down, err))) return s;
        if ((s = bind_vec(g, NM("attn_q.bias"), c->n_heads * c->head_dim, 1, &L->bq, err))) return s;
        if ((s = bind_vec(g, NM("attn_k.bias"), kvd, 1, &L->bk, err))) return s;
        if ((s = bind_vec(g, NM("attn_v.bias"), kvd, 1, &L->bv, err))) return s;
        if (gemma) {
            if ((s = bind_vec(g, NM("attn_q_norm.weight"), c->head_dim, 0, &L->q_norm, err))) return s;
            if ((s = bind_vec(g, NM("attn_k_norm.weight"), c->head_dim, 0, &L->k_norm, err))) return s;
            if ((s = bind_vec(g, NM("post_attention_norm.weight"), c->dim, 0, &L->post_attn_norm, err))) return s;
            if ((s = bind_vec(g, NM("post_ffw_norm.weight"), c->dim, 0, &L->post_ffn_norm, err))) return s;
        }
#undef NM
    }
    /* a tensor of a layer past block_count would be ignored in silence (garbage out, exit 0) */
    for (uint64_t i = 0; i < vq_gguf_n_tensors(g); i++) {
        const vq_gguf_tensor *t = vq_gguf_tensor_at(g, i);
        unsigned long bl;
        char rest;
        if (t && t->name.len > 4 && t->name.len < 200 && !memcmp(t->name.ptr, "blk.", 4)) {
            char nm[200];
            snprintf(nm, sizeof nm, "%.*s", (int)t->name.len, t->name.ptr);
            if (sscanf(nm + 4, "%lu%c", &bl, &rest) == 2 && rest == '.' && bl >= (unsigned long)c->n_layers)
                return vq_err_set(err, VQ_ERR_FORMAT, "%s: tensor '%s' is of layer %lu but %s.block_count is %d",
                                  path, nm, bl, a, c->n_layers);
        }
    }
    vq_str tmpl;
    if (vq_gguf_find(g, "tokenizer.chat_template") && vq_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL) == VQ_OK)
        m->chat_template = tmpl.ptr;   /* only its presence and a few markers are inspected */
    else if (gemma)   /* Gemma files often carry none; the architecture fixes the turn format */
        m->chat_template = VQ_CHAT_GEMMA;
    m->tok = vq_tokenizer_from_gguf(g, err);
    if (!m->tok) return err ? err->code : VQ_ERR_FORMAT;
    if (vq_tok_vocab_size(m->tok) != c->vocab_size)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: tokenizer has %d tokens but token_embd has %d rows", path,
                          vq_tok_vocab_size(m->tok), c->vocab_size);
    return VQ_OK;
}

static vq_status load_l2c(vq_model *m, const char *path, const char *tok_path, vq_err *err) {
    /* opened first: an empty or damaged file (not GGUF, so tried as llama2.c) is told as such,
     * not as a checkpoint missing its tokenizer */
    vq_err e;
    vq_l2c *l = vq_l2c_open(path, &e);
    if (!l)
        return vq_err_set(err, e.code, "%s: neither a GGUF file (no 'GGUF' magic) nor a llama2.c checkpoint: %s",
                          path, e.msg);
    m->l2c = l;
    if (!tok_path)
        return vq_err_set(err, VQ_ERR_ARG, "%s: a llama2.c checkpoint needs its tokenizer file (--tokenizer tok512.bin)", path);
    const vq_l2c_config *lc = vq_l2c_config_of(l);
    const vq_l2c_weights *w = vq_l2c_weights_of(l);
    vq_model_config *c = &m->cfg;
    snprintf(c->arch, sizeof c->arch, "llama2.c");
    c->dim = lc->dim; c->hidden_dim = lc->hidden_dim; c->n_layers = lc->n_layers;
    c->n_heads = lc->n_heads; c->n_kv_heads = lc->n_kv_heads; c->vocab_size = lc->vocab_size;
    c->train_ctx = lc->seq_len; c->head_dim = lc->dim / lc->n_heads;
    c->norm_eps = 1e-5f; c->rope_base = 10000.0f; c->rope_dim = c->head_dim; c->rope_neox = 0;
    c->emb_scale = 1.0f; c->rope_base_swa = c->rope_base;
    int d = c->dim, kvd = c->n_kv_heads * c->head_dim, h = c->hidden_dim;
    m->tok_embd = (vq_wmat){ w->token_embedding, VQ_TYPE_F32, c->vocab_size, d };
    m->output = (vq_wmat){ w->wcls, VQ_TYPE_F32, c->vocab_size, d };
    m->out_norm = w->rms_final;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return vq_err_set(err, VQ_ERR_NOMEM, "out of memory");
    for (int i = 0; i < c->n_layers; i++) {
        vq_layer_weights *L = &m->layers[i];
        L->attn_norm = w->rms_att + (size_t)i * d;
        L->ffn_norm = w->rms_ffn + (size_t)i * d;
        L->wq = (vq_wmat){ w->wq + (size_t)i * d * d, VQ_TYPE_F32, d, d };
        L->wk = (vq_wmat){ w->wk + (size_t)i * d * kvd, VQ_TYPE_F32, kvd, d };
        L->wv = (vq_wmat){ w->wv + (size_t)i * d * kvd, VQ_TYPE_F32, kvd, d };
        L->wo = (vq_wmat){ w->wo + (size_t)i * d * d, VQ_TYPE_F32, d, d };
        L->w_gate = (vq_wmat){ w->w1 + (size_t)i * d * h, VQ_TYPE_F32, h, d };
        L->w_down = (vq_wmat){ w->w2 + (size_t)i * d * h, VQ_TYPE_F32, d, h };
        L->w_up = (vq_wmat){ w->w3 + (size_t)i * d * h, VQ_TYPE_F32, h, d };
        L->rope_base = c->rope_base;
    }
    vq_err te;
    vq_err_clear(&te);
    m->tok = vq_tokenizer_from_llama2c(tok_path, c->vocab_size, &te);
    if (!m->tok)   /* say which of the two files it was: both are often .bin */
        return vq_err_set(err, te.code ? te.code : VQ_ERR_FORMAT, "tokenizer %s", te.msg);
    return VQ_OK;
}

vq_model *vq_model_open(const char *path, const char *tok_path, vq_err *err) {
    return vq_model_open_ex(path, tok_path, 0, err);
}

vq_model *vq_model_open_ex(const char *path, const char *tok_path, int copy, vq_err *err) {
    vq_model *m = calloc(1, sizeof *m);
    if (!m) { vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); return NULL; }
    snprintf(m->path, sizeof m->path, "%s", path);
    /* a FIFO, a directory or a device is refused here without blocking (vq_open_regular) */
    uint64_t sz;
    int fd = vq_open_regular(path, &sz, err);
    if (fd < 0) { free(m); return NULL; }
    char magic[8] = {0};
    ssize_t got = pread(fd, magic, 8, 0);
    close(fd);
    m->file_bytes = (size_t)sz;
    vq_status s;
    if (got >= 4 && memcmp(magic, "GGUF", 4) == 0) s = load_gguf(m, path, 0, copy, err);
    else if (got > 0 && vq_reservoir_sniff(magic, (size_t)got)) s = load_gguf(m, path, 1, copy, err);
    else if (ends_with(path, ".gguf")) s = vq_err_set(err, VQ_ERR_FORMAT, "%s: not a GGUF file (bad magic)", path);
    else s = load_l2c(m, path, tok_path, err);
    if (s) { vq_model_free(m); return NULL; }
    return m;
}

void vq_model_free(vq_model *m) {
    if (!m) return;
    if (m->tok) vq_tokenizer_free(m->tok);
    if (m->gguf) vq_gguf_close(m->gguf);
    if (m->l2c) vq_l2c_close(m->l2c);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->span);
    free(m);
}

uint64_t vq_model_config_hash(const vq_model *m, char *text, size_t cap) {
    const vq_model_config *c = &m->cfg;
    char t[512];
    snprintf(t, sizeof t, "arch=%s dim=%d hidden=%d layers=%d heads=%d kv_heads=%d head_dim=%d "
             "vocab=%d rope_base=%.9g rope_dim=%d rope_neox=%d eps=%.9g", c->arch, c->dim,
             c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab_size,
             (double)c->rope_base, c->rope_dim, c->rope_neox, (double)c->norm_eps);
    if (text && cap) snprintf(text, cap, "%s", t);
    uint64_t h = 1469598103934665603ull;   /* FNV-1a 64, as vq_calib_config_hash */
    for (const unsigned char *s = (const unsigned char *)t; *s; s++) { h ^= *s; h *= 1099511628211ull; }
    return h;
}

vq_kv_dims vq_model_kv_dims(const vq_model *m, int n_ctx) {
    vq_kv_dims d = { m->cfg.n_layers, m->cfg.n_heads, m->cfg.n_kv_heads, m->cfg.head_dim, n_ctx, m->span, 0 };
    return d;
}
