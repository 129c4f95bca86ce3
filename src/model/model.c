/* model.c: binds a model file's tensors to the decoder's weight layout through the file's
 * architecture row (arch.c) and checks every shape, type and hyperparameter before the forward
 * pass may touch them. GGUF and llama2.c checkpoints; weights stay in the mapped file. */
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

/* The file being bound: every tensor bound is marked, so that load can refuse a file holding a
 * tensor its architecture row does not use (llama.cpp refuses such files too: "wrong number of
 * tensors"); an ignored tensor was how a Llama 3 file's rope_freqs once went unseen. */
typedef struct binder { const vq_gguf *g; unsigned char *used; } binder;

static void mark(const binder *b, const vq_gguf_tensor *t) {
    if (t) b->used[t - vq_gguf_tensor_at(b->g, 0)] = 1;
}

/* Find a tensor, check it is 2-D rows x cols (ggml: ne0 = cols, ne1 = rows) of a supported type. */
static vq_status bind_mat(const binder *b, const char *name, int rows, int cols, int optional,
                          vq_wmat *out, vq_err *err) {
    const vq_gguf *g = b->g;
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
    mark(b, t);
    return VQ_OK;
}

static vq_status bind_vec(const binder *b, const char *name, int n, int optional, const float **out,
                          vq_err *err) {
    const vq_gguf *g = b->g;
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
    mark(b, t);
    return VQ_OK;
}

/* rows [r0, r0 + n) of a bound matrix (a fused qkv or gate_up): quantized rows are whole blocks,
 * so a row range is a byte range */
static vq_wmat row_slice(const vq_wmat *w, int r0, int n) {
    const vq_wtype *wt = vq_wtype_get(w->type);
    size_t row_bytes = (size_t)(w->cols / wt->block) * wt->block_bytes;
    vq_wmat s = { (const char *)w->data + (size_t)r0 * row_bytes, w->type, n, w->cols };
    return s;
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

/* ---- rope frequencies ----
 * llama.cpp (ggml_rope_ext, ggml-cpu rope_yarn) turns pair i at position p by
 *   theta_extrap = p * base^(-2i/n) / ff[i]          (ff: rope_freqs, Llama 3.x; else 1)
 *   theta = theta_extrap * (freq_scale * (1 - r_i) + r_i),   r_i = ramp_i * ext_factor
 * with cos/sin times mscale = attn_factor * (1 + 0.1 ln(1/freq_scale)) when ext_factor != 0
 * (YaRN) and attn_factor otherwise. The ramp is 1 below the correction dim of beta_fast = 32
 * rotations and 0 above that of beta_slow = 1 over yarn_orig_ctx tokens. Everything but p is
 * fixed at load, so each layer gets one table of p's multipliers. The plain case (no factors, no
 * scaling) is llama2.c's float arithmetic, bit for bit (vq_rope_freqs). */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2 * 3.14159265358979323846f)) / (2 * logf(base));
}

static float rope_table(float *inv, int rot, float base, const float *ff, int scaled, const vq_model_config *c) {
    vq_rope_freqs(inv, rot, base);
    if (ff)
        for (int k = 0; k < rot / 2; k++) inv[k] /= ff[k];
    float fs = scaled ? c->rope_freq_scale : 1.0f, attn = scaled ? c->rope_attn_factor : 1.0f;
    if (!scaled || c->rope_scaling == VQ_ROPE_SCALING_NONE) return 1.0f;
    if (c->rope_scaling == VQ_ROPE_SCALING_LINEAR) {
        if (fs != 1.0f)
            for (int k = 0; k < rot / 2; k++) inv[k] *= fs;
        return attn;
    }
    /* YaRN: llama.cpp's attn_factor is get_mscale(1/fs) / (1 + 0.1 ln(1/fs)) * the file's
     * attn_factor, and rope_yarn multiplies it by (1 + 0.1 ln(1/fs)) again */
    float factor = 1.0f / fs;
    float a = factor <= 1.0f ? 1.0f : 0.1f * logf(factor) + 1.0f;
    a *= 1.0f / (1.0f + 0.1f * logf(factor));
    a *= attn;
    float lo = floorf(yarn_corr_dim(rot, c->yarn_orig_ctx, 32.0f, base));
    float hi = ceilf(yarn_corr_dim(rot, c->yarn_orig_ctx, 1.0f, base));
    lo = VQ_MAX(0.0f, lo);
    hi = VQ_MIN((float)(rot - 1), hi);
    for (int k = 0; k < rot / 2; k++) {
        float y = ((float)k - lo) / VQ_MAX(0.001f, hi - lo);
        float ramp = 1 - VQ_MIN(1.0f, VQ_MAX(0.0f, y));
        inv[k] = inv[k] * fs * (1 - ramp) + inv[k] * ramp;
    }
    return a * (1.0f + 0.1f * logf(1.0f / fs));
}

/* the tensor that marks a mixture-of-experts file, if any */
static const vq_gguf_tensor *moe_tensor(const vq_gguf *g) {
    for (uint64_t i = 0; i < vq_gguf_n_tensors(g); i++) {
        const vq_gguf_tensor *t = vq_gguf_tensor_at(g, i);
        char n[128];
        snprintf(n, sizeof n, "%.*s", (int)VQ_MIN(t->name.len, 127), t->name.ptr);
        if (strstr(n, "_exps.") || strstr(n, "ffn_gate_inp.") || strstr(n, "_shexp.")) return t;
    }
    return NULL;
}

static vq_status read_rope_scaling(const vq_gguf *g, const char *a, vq_model_config *c, vq_err *err) {
    const char *path = vq_gguf_path(g);
    char key[128];
    vq_status s;
    c->rope_scaling = VQ_ROPE_SCALING_LINEAR;   /* llama.cpp's default type; no factor = no scaling */
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    if (vq_gguf_find(g, key)) {
        vq_str t;
        if (vq_gguf_get_str(g, key, &t, err)) return err ? err->code : VQ_ERR_FORMAT;
        if (vq_str_eq(t, "none")) c->rope_scaling = VQ_ROPE_SCALING_NONE;
        else if (vq_str_eq(t, "linear")) c->rope_scaling = VQ_ROPE_SCALING_LINEAR;
        else if (vq_str_eq(t, "yarn")) c->rope_scaling = VQ_ROPE_SCALING_YARN;
        else if (vq_str_eq(t, "longrope"))
            return vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: rope scaling 'longrope' is not supported", path);
        else
            return vq_err_set(err, VQ_ERR_FORMAT, "%s: metadata '%s' = '%.*s' is not a rope scaling type (none, "
                              "linear, yarn)", path, key, (int)VQ_MIN(t.len, 64), t.ptr);
    }
    float factor = 0;   /* 0: absent (llama.cpp: freq_scale 1) */
    snprintf(key, sizeof key, "%s.rope.scaling.factor", a);
    const char *fkey = vq_gguf_find(g, key) ? "rope.scaling.factor" : "rope.scale_linear";
    snprintf(key, sizeof key, "%s.%s", a, fkey);
    if (vq_gguf_find(g, key)) {
        if (vq_gguf_get_f32(g, key, &factor, err)) return err ? err->code : VQ_ERR_FORMAT;
        if (!isfinite(factor) || factor < 0 || factor > 1024)
            return vq_err_set(err, VQ_ERR_FORMAT, "%s: metadata '%s' = %g is out of range [0, 1024]", path, key,
                              (double)factor);
    }
    c->rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    if (c->rope_scaling == VQ_ROPE_SCALING_NONE) c->rope_freq_scale = 1.0f;
    if ((s = get_f32_key(g, a, "rope.scaling.attn_factor", 1.0f, 0, 100, &c->rope_attn_factor, err))) return s;
    if ((s = get_u32_key(g, a, "rope.scaling.original_context_length", 0, (uint32_t)c->train_ctx, 1, 1 << 24,
                         &c->yarn_orig_ctx, err))) return s;
    return VQ_OK;
}

/* which layers slide: the pattern key as a bool array (one per layer) or a period n (layer l
 * slides unless l % n == n - 1), else the row's default period (llama.cpp's set_swa_pattern) */
static vq_status read_swa_pattern(const vq_gguf *g, const char *a, const vq_arch *row, int n_layers, int *swa,
                                  vq_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", a);
    const vq_gguf_kv *kv = vq_gguf_find(g, key);
    if (kv && kv->type == VQ_GGUF_ARRAY) {
        if (kv->arr_type != VQ_GGUF_BOOL || kv->arr_len < (uint64_t)n_layers)
            return vq_err_set(err, VQ_ERR_FORMAT, "%s: metadata '%s' must be a bool array of %d layers", vq_gguf_path(g),
                              key, n_layers);
        for (int l = 0; l < n_layers; l++) swa[l] = kv->arr_data[l] != 0;
        return VQ_OK;
    }
    int n = row->swa_pattern;
    vq_status s = get_u32_key(g, a, "attention.sliding_window_pattern", 0, (uint32_t)n, 0, 1 << 20, &n, err);
    if (s) return s;
    for (int l = 0; l < n_layers; l++) swa[l] = n == 0 || l % n < n - 1;
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
    const vq_arch *row = vq_arch_find(arch.ptr, arch.len);
    if (!row) {
        char known[256] = "";
        for (int i = 0; vq_arch_at(i); i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", vq_arch_at(i)->name);
        return vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not supported (known: %s)",
                          path, (int)VQ_MIN(arch.len, 64), arch.ptr, known);
    }
    m->row = row;
    snprintf(c->arch, sizeof c->arch, "%s", row->name);
    const char *a = c->arch;
    vq_status s;
    {   /* mixture of experts: llama.cpp's llama arch reads expert_count; refuse before any tensor
         * is found missing */
        int n_exp = 0;
        if ((s = get_u32_key(g, a, "expert_count", 0, 0, 0, 1 << 20, &n_exp, err))) return s;
        const vq_gguf_tensor *mt = moe_tensor(g);
        if (n_exp > 0)
            return vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: mixture-of-experts models are not supported (%s.expert_count "
                              "= %d)", path, a, n_exp);
        if (mt)
            return vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: mixture-of-experts models are not supported (tensor '%.*s')",
                              path, (int)VQ_MIN(mt->name.len, 96), mt->name.ptr);
    }
    {   /* Phi-3 longrope: both factor tables or neither (checked before any tensor is bound) */
        const int lg = vq_gguf_find_tensor(g, "rope_factors_long.weight") != NULL,
                  sh = vq_gguf_find_tensor(g, "rope_factors_short.weight") != NULL;
        if (lg != sh)
            return vq_err_set(err, VQ_ERR_FORMAT, "%s: longrope needs both rope_factors_long.weight and "
                              "rope_factors_short.weight (only %s is there)", path,
                              lg ? "rope_factors_long.weight" : "rope_factors_short.weight");
    }
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
    if ((s = read_rope_scaling(g, a, c, err))) return s;
    c->rope_neox = row->rope_neox;
    c->emb_scale = row->emb_scale_sqrt_dim ? sqrtf((float)c->dim) : 1.0f;
    c->ffn_gelu = row->ffn_gelu;
    c->rope_base_swa = c->rope_base;
    c->swa_window = 0;
    if (row->swa) {   /* llama.cpp: gemma3 slides only when the key is present and > 0; gemma2
                       * always does (4096 when the key is absent) */
        if ((s = get_u32_key(g, a, "attention.sliding_window", 0, (uint32_t)row->swa_default, 0, 1 << 24,
                             &c->swa_window, err))) return s;
        if (row->swa_default > 0 && c->swa_window == 0)   /* llama.cpp would mask every row of those layers */
            return vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: %s.attention.sliding_window = 0 is not supported (the "
                              "architecture always has sliding-window layers)", path, a);
        if (c->swa_window > 0 &&
            (s = get_f32_key(g, a, "rope.freq_base_swa", row->rope_base_swa > 0 ? row->rope_base_swa : c->rope_base,
                             1, 1e12, &c->rope_base_swa, err)))
            return s;
    }
    /* attention scale: the cache scores q.k / sqrt(head_dim); another scale is a factor on q */
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    c->q_scale = 1.0f;
    if (row->attn_scale == VQ_ATTN_SCALE_DIM_HEADS && c->n_layers == row->attn_scale_layers)   /* LLM_TYPE_27B */
        c->attn_scale = 1.0f / sqrtf((float)(c->dim / c->n_heads));
    else if (row->attn_scale == VQ_ATTN_SCALE_KEY &&
             (s = get_f32_key(g, a, "attention.scale", c->attn_scale, 0, 100, &c->attn_scale, err)))
        return s;
    if (c->attn_scale != 1.0f / sqrtf((float)c->head_dim)) c->q_scale = c->attn_scale * sqrtf((float)c->head_dim);
    /* soft-capping: final logits here, attention scores in the cache (kv dims.softcap); a row reads
     * each key only where llama.cpp's architecture does, with its default when absent */
    c->final_softcap = 0;
    c->attn_softcap = 0;
    if (row->final_softcap) {
        char key[128];
        snprintf(key, sizeof key, "%s.final_logit_softcapping", a);
        c->final_softcap = row->final_softcap_default;
        if ((vq_gguf_find(g, key) || c->final_softcap > 0) &&
            (s = get_f32_key(g, a, "final_logit_softcapping", c->final_softcap, 0, 1e6, &c->final_softcap, err)))
            return s;
    }
    if (row->attn_softcap &&
        (s = get_f32_key(g, a, "attn_logit_softcapping", row->attn_softcap_default, 0, 1e6, &c->attn_softcap, err)))
        return s;

    binder b = { g, calloc(VQ_MAX(vq_gguf_n_tensors(g), 1), 1) };
    if (!b.used) return vq_err_set(err, VQ_ERR_NOMEM, "out of memory");
    s = VQ_OK;
#define TRY(x) do { if ((s = (x))) goto done; } while (0)
    const unsigned have = row->required | row->optional;
    const vq_gguf_tensor *emb = vq_gguf_find_tensor(g, "token_embd.weight");
    if (!emb) { s = vq_err_set(err, VQ_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", path); goto done; }
    if (emb->ne[1] < 1 || emb->ne[1] > (1u << 24)) {
        s = vq_err_set(err, VQ_ERR_FORMAT, "%s: token_embd.weight has %llu rows", path, (unsigned long long)emb->ne[1]);
        goto done;
    }
    c->vocab_size = (int)emb->ne[1];

    TRY(bind_mat(&b, "token_embd.weight", c->vocab_size, c->dim, 0, &m->tok_embd, err));
    if (!row->no_output) TRY(bind_mat(&b, "output.weight", c->vocab_size, c->dim, 1, &m->output, err));
    if (!m->output.data) m->output = m->tok_embd;   /* tied embeddings */
    TRY(bind_vec(&b, "output_norm.weight", c->dim, 0, &m->out_norm, err));
    if (have & VQ_AT_OUT_BIAS) TRY(bind_vec(&b, "output.bias", c->vocab_size, !(row->required & VQ_AT_OUT_BIAS), &m->out_bias, err));
    const float *rope_ff = NULL;
    if (have & VQ_AT_ROPE_FREQS) TRY(bind_vec(&b, "rope_freqs.weight", c->rope_dim / 2, 1, &rope_ff, err));
    c->has_rope_freqs = rope_ff != NULL;
    /* Phi-3 longrope: llama.cpp divides the frequencies by rope_factors_long when the context
     * exceeds rope.scaling.original_context_length, else by rope_factors_short; both need be there */
    const float *rope_lr[2] = { NULL, NULL };
    if (have & VQ_AT_LONGROPE) {
        TRY(bind_vec(&b, "rope_factors_long.weight", c->rope_dim / 2, 1, &rope_lr[0], err));
        TRY(bind_vec(&b, "rope_factors_short.weight", c->rope_dim / 2, 1, &rope_lr[1], err));
        c->longrope = rope_lr[0] != NULL;
    }
    const float *ff_check[3] = { rope_ff, rope_lr[0], rope_lr[1] };
    const char *ff_name[3] = { "rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight" };
    for (int i = 0; i < 3; i++)
        for (int k = 0; ff_check[i] && k < c->rope_dim / 2; k++)
            if (!isfinite(ff_check[i][k]) || !(ff_check[i][k] > 0)) {
                s = vq_err_set(err, VQ_ERR_FORMAT, "%s: %s[%d] = %g (must be finite and > 0)", path, ff_name[i], k,
                               (double)ff_check[i][k]);
                goto done;
            }
    if (c->longrope) rope_ff = rope_lr[1];   /* the short factors are the plain table's */
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    m->span = calloc((size_t)c->n_layers, sizeof *m->span);
    /* tables of rope_dim/2: global, sliding, and the global one of a long context (longrope) */
    m->rope_tables = malloc(sizeof(float) * (size_t)(c->rope_dim / 2) * 3);
    int *swa = calloc((size_t)c->n_layers, sizeof *swa);
    if (!m->layers || !m->span || !m->rope_tables || !swa) {
        free(swa);
        s = vq_err_set(err, VQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (c->swa_window > 0 && (s = read_swa_pattern(g, a, row, c->n_layers, swa, err))) { free(swa); goto done; }
    const int half = c->rope_dim / 2;
    /* llama.cpp passes rope_freqs to every layer of the llama arch (gemma3 passes none) and
     * scales the sliding layers with rope_freq_scale_train_swa, which it never reads (1) */
    float ms_global = rope_table(m->rope_tables, c->rope_dim, c->rope_base, rope_ff, 1, c);
    float ms_swa = rope_table(m->rope_tables + half, c->rope_dim, c->rope_base_swa, rope_ff, row->rope_scale_swa, c);
    if (c->longrope) rope_table(m->rope_tables + 2 * half, c->rope_dim, c->rope_base, rope_lr[0], 1, c);
    int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    for (int l = 0; l < c->n_layers && !s; l++) {
        vq_layer_weights *L = &m->layers[l];
        L->swa = c->swa_window > 0 && swa[l];
        L->rope_base = L->swa ? c->rope_base_swa : c->rope_base;
        L->rope_inv_freq = m->rope_tables + (L->swa ? half : 0);
        L->rope_inv_freq_long = c->longrope && !L->swa ? m->rope_tables + 2 * half : NULL;
        L->rope_mscale = L->swa ? ms_swa : ms_global;
        m->span[l] = L->swa ? c->swa_window : 0;
        char n[96];
#define NM(suffix) (snprintf(n, sizeof n, "blk.%d.%s", l, suffix), n)
#define REQ(bit) (!(row->required & (bit)) ? 1 : 0)   /* 1: optional */
        if ((s = bind_vec(&b, NM("attn_norm.weight"), c->dim, 0, &L->attn_norm, err))) break;
        if ((s = bind_vec(&b, NM("ffn_norm.weight"), c->dim, 0, &L->ffn_norm, err))) break;
        vq_wmat qkv = { 0 };
        if ((have & VQ_AT_FUSED_QKV) && vq_gguf_find_tensor(g, NM("attn_qkv.weight"))) {
            if ((s = bind_mat(&b, n, qd + 2 * kvd, c->dim, 0, &qkv, err))) break;
            L->wq = row_slice(&qkv, 0, qd);
            L->wk = row_slice(&qkv, qd, kvd);
            L->wv = row_slice(&qkv, qd + kvd, kvd);
            const float *bqkv = NULL;
            if ((s = bind_vec(&b, NM("attn_qkv.bias"), qd + 2 * kvd, 1, &bqkv, err))) break;
            if (bqkv) { L->bq = bqkv; L->bk = bqkv + qd; L->bv = bqkv + qd + kvd; }
        } else {
            if ((s = bind_mat(&b, NM("attn_q.weight"), qd, c->dim, 0, &L->wq, err))) break;
            if ((s = bind_mat(&b, NM("attn_k.weight"), kvd, c->dim, 0, &L->wk, err))) break;
            if ((s = bind_mat(&b, NM("attn_v.weight"), kvd, c->dim, 0, &L->wv, err))) break;
        }
        if ((s = bind_mat(&b, NM("attn_output.weight"), c->dim, qd, 0, &L->wo, err))) break;
        /* fused: required (phi3), or optional and the file has no ffn_gate */
        const int fused_gu = (row->required & VQ_AT_FUSED_GATE_UP) ||
                             ((have & VQ_AT_FUSED_GATE_UP) && !vq_gguf_find_tensor(g, NM("ffn_gate.weight")));
        if (fused_gu) {   /* gate rows then up rows (ggml_swiglu: silu of the first half times the second) */
            vq_wmat gu;
            if ((s = bind_mat(&b, NM("ffn_up.weight"), 2 * c->hidden_dim, c->dim, 0, &gu, err))) break;
            L->w_gate = row_slice(&gu, 0, c->hidden_dim);
            L->w_up = row_slice(&gu, c->hidden_dim, c->hidden_dim);
        } else {
            if ((s = bind_mat(&b, NM("ffn_gate.weight"), c->hidden_dim, c->dim, 0, &L->w_gate, err))) break;
            if ((s = bind_mat(&b, NM("ffn_up.weight"), c->hidden_dim, c->dim, 0, &L->w_up, err))) break;
        }
        if ((s = bind_mat(&b, NM("ffn_down.weight"), c->dim, c->hidden_dim, 0, &L->w_down, err))) break;
        if ((have & VQ_AT_QKV_BIAS) && !L->bq) {
            int opt = REQ(VQ_AT_QKV_BIAS);
            if ((s = bind_vec(&b, NM("attn_q.bias"), qd, opt, &L->bq, err))) break;
            if ((s = bind_vec(&b, NM("attn_k.bias"), kvd, opt, &L->bk, err))) break;
            if ((s = bind_vec(&b, NM("attn_v.bias"), kvd, opt, &L->bv, err))) break;
        }
        if ((have & VQ_AT_O_BIAS) && (s = bind_vec(&b, NM("attn_output.bias"), c->dim, REQ(VQ_AT_O_BIAS), &L->bo, err))) break;
        if (have & VQ_AT_FFN_BIAS) {
            int opt = REQ(VQ_AT_FFN_BIAS);
            if (!fused_gu && (s = bind_vec(&b, NM("ffn_gate.bias"), c->hidden_dim, opt, &L->b_gate, err))) break;
            if ((s = bind_vec(&b, NM("ffn_up.bias"), c->hidden_dim, opt, &L->b_up, err))) break;
            if ((s = bind_vec(&b, NM("ffn_down.bias"), c->dim, opt, &L->b_down, err))) break;
        }
        if (have & VQ_AT_QK_NORM) {
            int opt = REQ(VQ_AT_QK_NORM);
            if ((s = bind_vec(&b, NM("attn_q_norm.weight"), c->head_dim, opt, &L->q_norm, err))) break;
            if ((s = bind_vec(&b, NM("attn_k_norm.weight"), c->head_dim, opt, &L->k_norm, err))) break;
            if (!L->q_norm != !L->k_norm) {
                s = vq_err_set(err, VQ_ERR_FORMAT, "%s: layer %d has only one of attn_q_norm / attn_k_norm", path, l);
                break;
            }
        }
        if (have & VQ_AT_POST_NORMS) {
            int opt = REQ(VQ_AT_POST_NORMS);
            if ((s = bind_vec(&b, NM("post_attention_norm.weight"), c->dim, opt, &L->post_attn_norm, err))) break;
            if ((s = bind_vec(&b, NM("post_ffw_norm.weight"), c->dim, opt, &L->post_ffn_norm, err))) break;
        }
#undef REQ
#undef NM
    }
    free(swa);
    if (s) goto done;
    for (uint64_t i = 0; i < vq_gguf_n_tensors(g); i++)
        if (!b.used[i]) {
            const vq_gguf_tensor *t = vq_gguf_tensor_at(g, i);
            char nm[200], rest;
            unsigned long bl;
            snprintf(nm, sizeof nm, "%.*s", (int)VQ_MIN(t->name.len, sizeof nm - 1), t->name.ptr);
            /* a layer past block_count: say so (the commonest way a file's tensors outnumber its
             * metadata) rather than only that the tensor is unused */
            if (!strncmp(nm, "blk.", 4) && sscanf(nm + 4, "%lu%c", &bl, &rest) == 2 && rest == '.' &&
                bl >= (unsigned long)c->n_layers)
                s = vq_err_set(err, VQ_ERR_FORMAT, "%s: tensor '%s' is of layer %lu but %s.block_count is %d",
                               path, nm, bl, a, c->n_layers);
            else
                s = vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: tensor '%s' is not used by architecture '%s' as we "
                               "implement it (refused rather than ignored: it would change the output)", path,
                               nm, row->name);
            goto done;
        }
#undef TRY
done:
    free(b.used);
    if (s) return s;
    vq_str tmpl;
    if (vq_gguf_find(g, "tokenizer.chat_template") && vq_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL) == VQ_OK)
        m->chat_template = tmpl.ptr;   /* only its presence and a few markers are inspected */
    else if (row->chat_default)   /* Gemma files often carry none; the architecture fixes the turn format */
        m->chat_template = row->chat_default;
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
    c->rope_scaling = VQ_ROPE_SCALING_NONE; c->rope_freq_scale = 1.0f; c->rope_attn_factor = 1.0f;
    c->yarn_orig_ctx = c->train_ctx; c->attn_scale = 1.0f / sqrtf((float)c->head_dim); c->q_scale = 1.0f;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    m->rope_tables = malloc(sizeof(float) * (size_t)(c->rope_dim / 2));
    if (!m->layers || !m->rope_tables) return vq_err_set(err, VQ_ERR_NOMEM, "out of memory");
    vq_rope_freqs(m->rope_tables, c->rope_dim, c->rope_base);
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
        L->rope_inv_freq = m->rope_tables;
        L->rope_mscale = 1.0f;
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
    vq_model_device_release(m);
    if (m->tok) vq_tokenizer_free(m->tok);
    if (m->gguf) vq_gguf_close(m->gguf);
    if (m->l2c) vq_l2c_close(m->l2c);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->span);
    free(m->rope_tables);
    free(m);
}

uint64_t vq_model_config_hash(const vq_model *m, char *text, size_t cap) {
    const vq_model_config *c = &m->cfg;
    char t[512];
    snprintf(t, sizeof t, "arch=%s dim=%d hidden=%d layers=%d heads=%d kv_heads=%d head_dim=%d "
             "vocab=%d rope_base=%.9g rope_dim=%d rope_neox=%d eps=%.9g", c->arch, c->dim,
             c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab_size,
             (double)c->rope_base, c->rope_dim, c->rope_neox, (double)c->norm_eps);
    /* what only the newer rows set is added when it departs from the plain decoder, so the identity
     * of every model loaded before (and of its calibration files) stays what it was */
    size_t at = strlen(t);
    if (c->rope_scaling != VQ_ROPE_SCALING_NONE && c->rope_freq_scale != 1.0f)
        at += (size_t)snprintf(t + at, sizeof t - at, " rope_scaling=%d freq_scale=%.9g attn_factor=%.9g orig_ctx=%d",
                               c->rope_scaling, (double)c->rope_freq_scale, (double)c->rope_attn_factor, c->yarn_orig_ctx);
    if (c->has_rope_freqs) at += (size_t)snprintf(t + at, sizeof t - at, " rope_freqs=1");
    if (c->longrope)
        at += (size_t)snprintf(t + at, sizeof t - at, " longrope=1 attn_factor=%.9g orig_ctx=%d",
                               (double)c->rope_attn_factor, c->yarn_orig_ctx);
    if (c->q_scale != 1.0f) at += (size_t)snprintf(t + at, sizeof t - at, " attn_scale=%.9g", (double)c->attn_scale);
    if (c->attn_softcap > 0) at += (size_t)snprintf(t + at, sizeof t - at, " attn_softcap=%.9g", (double)c->attn_softcap);
    if (text && cap) snprintf(text, cap, "%s", t);
    uint64_t h = 1469598103934665603ull;   /* FNV-1a 64, as vq_calib_config_hash */
    for (const unsigned char *s = (const unsigned char *)t; *s; s++) { h ^= *s; h *= 1099511628211ull; }
    return h;
}

vq_kv_dims vq_model_kv_dims(const vq_model *m, int n_ctx) {
    vq_kv_dims d = { m->cfg.n_layers, m->cfg.n_heads, m->cfg.n_kv_heads, m->cfg.head_dim, n_ctx, m->span, 0,
                     m->cfg.attn_softcap };
    return d;
}

int vq_model_tensors(const vq_model *m, vq_model_tensor_fn fn, void *user) {
    const vq_model_config *c = &m->cfg;
    const size_t F = sizeof(float), qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
#define VQ_T(p, bytes) do { const size_t b_ = (bytes); if ((p) && b_ > 0) { int r_ = fn(user, (p), b_); if (r_) return r_; } } while (0)
#define VQ_TM(w) VQ_T((w).data, vq_wtype_row_bytes((w).type, (w).cols) * (size_t)(w).rows)
    VQ_TM(m->tok_embd);
    if (m->output.data != m->tok_embd.data) VQ_TM(m->output);
    VQ_T(m->out_norm, c->dim * F);
    VQ_T(m->out_bias, c->vocab_size * F);
    for (int l = 0; l < c->n_layers; l++) {
        const vq_layer_weights *L = &m->layers[l];
        VQ_T(L->attn_norm, c->dim * F);
        VQ_T(L->ffn_norm, c->dim * F);
        VQ_TM(L->wq); VQ_TM(L->wk); VQ_TM(L->wv); VQ_TM(L->wo);
        VQ_TM(L->w_gate); VQ_TM(L->w_up); VQ_TM(L->w_down);
        VQ_T(L->bq, qd * F); VQ_T(L->bk, kvd * F); VQ_T(L->bv, kvd * F);
        VQ_T(L->q_norm, c->head_dim * F); VQ_T(L->k_norm, c->head_dim * F);
        VQ_T(L->post_attn_norm, c->dim * F); VQ_T(L->post_ffn_norm, c->dim * F);
        VQ_T(L->bo, c->dim * F); VQ_T(L->b_gate, c->hidden_dim * F); VQ_T(L->b_up, c->hidden_dim * F);
        VQ_T(L->b_down, c->dim * F);
        VQ_T(L->rope_inv_freq, (size_t)(c->rope_dim / 2) * F);
        VQ_T(L->rope_inv_freq_long, (size_t)(c->rope_dim / 2) * F);
    }
#undef VQ_TM
#undef VQ_T
    return 0;
}
