/* tok_gguf.c: builds a tokenizer from a GGUF file's tokenizer.ggml.* metadata (llama.cpp's
 * key names): "gpt2" -> byte-level BPE with merges and the tokenizer.ggml.pre regexes,
 * "llama" -> SentencePiece BPE with scores. Every array length and id is checked. */
#include "model/tok_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int opt_id(const vq_gguf *g, const char *key, int n, int *out, vq_err *err) {
    if (!vq_gguf_find(g, key)) return 0;
    uint32_t v;
    if (vq_gguf_get_u32(g, key, &v, err)) return -1;
    if (v >= (uint32_t)n)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: %s = %u is outside the vocabulary (%d tokens)",
                          vq_gguf_path(g), key, v, n), -1;
    *out = (int)v;
    return 0;
}

static int opt_bool(const vq_gguf *g, const char *key, int *out, vq_err *err) {
    if (!vq_gguf_find(g, key)) return 0;
    return vq_gguf_get_bool(g, key, out, err) ? -1 : 0;
}

static const vq_gguf_kv *opt_arr(const vq_gguf *g, const char *key, vq_gguf_type ty, uint64_t n,
                                 int *bad, vq_err *err) {
    const vq_gguf_kv *kv = NULL;
    *bad = 0;
    if (!vq_gguf_find(g, key)) return NULL;
    if (vq_gguf_get_arr(g, key, ty, &kv, err)) { *bad = 1; return NULL; }
    if (n && kv->arr_len != n) {
        vq_err_set(err, VQ_ERR_FORMAT, "%s: %s has %llu entries, tokenizer.ggml.tokens has %llu",
                   vq_gguf_path(g), key, (unsigned long long)kv->arr_len, (unsigned long long)n);
        *bad = 1;
        return NULL;
    }
    return kv;
}

/* llama.cpp makes these texts control tokens whatever type the file gives them (end-of-turn and
 * fill-in-the-middle markers, src/llama-vocab.cpp "auto-detect special tokens by text"): so Phi-3's
 * user-defined "</s>" is ordinary text when special tokens are not parsed, as there. */
static const char *const control_text[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C\x65nd\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>" /* \x65: e */, "[e~[",
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
};

static void mark_control(vq_tokenizer *t) {
    for (int i = 0; i < t->n_vocab; i++) {
        char c0 = t->len[i] >= 3 ? tok_text(t, i)[0] : 0;
        if (t->type[i] == TOK_T_CONTROL || (c0 != '<' && c0 != '[' && c0 != '_' && c0 != '\xE2')) continue;
        for (size_t k = 0; k < VQ_ARRAY_LEN(control_text); k++)
            if (t->len[i] == strlen(control_text[k]) && !memcmp(tok_text(t, i), control_text[k], t->len[i])) {
                t->type[i] = TOK_T_CONTROL;
                break;
            }
    }
}

/* llama.cpp gives Phi-3's special tokens the RSTRIP attribute (whitespace after them is dropped
 * before tokenizing), keyed on general.name holding "phi-3" or "phi3", any case: every control,
 * user-defined and unknown token, and "</s>"; not "<unk>", "<s>", "<|endoftext|>". */
static int phi3_rstrip(const vq_gguf *g, vq_tokenizer *t, vq_err *err) {
    if (!vq_gguf_find(g, "general.name")) return 0;
    vq_str name;
    if (vq_gguf_get_str(g, "general.name", &name, err)) return -1;
    char low[128];
    size_t n = VQ_MIN(name.len, sizeof low - 1);
    for (size_t i = 0; i < n; i++) low[i] = (char)((name.ptr[i] >= 'A' && name.ptr[i] <= 'Z') ? name.ptr[i] + 32 : name.ptr[i]);
    low[n] = 0;
    if (!strstr(low, "phi-3") && !strstr(low, "phi3")) return 0;
    t->rstrip = calloc((size_t)t->n_vocab, 1);
    if (!t->rstrip) return vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory"), -1;
    for (int k = 0; k < t->n_special; k++) t->rstrip[t->special[k]] = 1;
    static const char *const keep[] = { "<unk>", "<s>", "<|endoftext|>" };
    for (size_t k = 0; k < VQ_ARRAY_LEN(keep); k++) {
        int id = vq_tok_lookup(t, keep[k], strlen(keep[k]));
        if (id >= 0) t->rstrip[id] = 0;
    }
    return 0;
}

vq_tokenizer *vq_tokenizer_from_gguf(const vq_gguf *g, vq_err *err) {
    if (!g) { vq_err_set(err, VQ_ERR_ARG, "vq_tokenizer_from_gguf: NULL file"); return NULL; }
    const char *path = vq_gguf_path(g);
    vq_str model;
    if (vq_gguf_get_str(g, "tokenizer.ggml.model", &model, err)) return NULL;
    int kind = vq_str_eq(model, "gpt2") ? TOK_KIND_BPE : vq_str_eq(model, "llama") ? TOK_KIND_SPM : 0;
    if (!kind) {
        vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model = '%.*s' (supported: gpt2, llama)",
                   path, (int)VQ_MIN(model.len, 64), model.ptr);
        return NULL;
    }
    int bad;
    const vq_gguf_kv *toks = opt_arr(g, "tokenizer.ggml.tokens", VQ_GGUF_STRING, 0, &bad, err);
    if (!toks) {
        if (!bad) vq_err_set(err, VQ_ERR_FORMAT, "%s: tokenizer.ggml.tokens is missing", path);
        return NULL;
    }
    uint64_t n = toks->arr_len;
    if (n == 0 || n > (1u << 24)) {
        vq_err_set(err, VQ_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries", path, (unsigned long long)n);
        return NULL;
    }
    const vq_gguf_kv *scores = opt_arr(g, "tokenizer.ggml.scores", VQ_GGUF_FLOAT32, n, &bad, err);
    if (bad) return NULL;
    const vq_gguf_kv *types = opt_arr(g, "tokenizer.ggml.token_type", VQ_GGUF_INT32, n, &bad, err);
    if (bad) return NULL;
    const vq_gguf_kv *merges = NULL;
    if (kind == TOK_KIND_BPE) {
        merges = opt_arr(g, "tokenizer.ggml.merges", VQ_GGUF_STRING, 0, &bad, err);
        if (!merges) {
            if (!bad) vq_err_set(err, VQ_ERR_FORMAT, "%s: a gpt2 tokenizer needs tokenizer.ggml.merges", path);
            return NULL;
        }
    }
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) total += vq_gguf_arr_str(toks, i).len;
    vq_tokenizer *t = vq_tok_alloc(kind, (int)n, total, err);
    const char **mp = NULL;
    size_t *ml = NULL;
    if (!t) return NULL;
    for (uint64_t i = 0; i < n; i++) {
        vq_str s = vq_gguf_arr_str(toks, i);
        float sc = scores ? (float)vq_gguf_arr_float(scores, i) : 0.0f;
        if (isnan(sc)) sc = -INFINITY;
        int ty = types ? (int)vq_gguf_arr_int(types, i) : TOK_T_NORMAL;
        if (ty < TOK_T_NORMAL || ty > TOK_T_BYTE) ty = TOK_T_NORMAL;
        vq_tok_set(t, (int)i, s.ptr, (size_t)s.len, sc, ty);
    }
    mark_control(t);
    if (opt_id(g, "tokenizer.ggml.bos_token_id", (int)n, &t->bos, err) ||
        opt_id(g, "tokenizer.ggml.eos_token_id", (int)n, &t->eos, err) ||
        opt_id(g, "tokenizer.ggml.unknown_token_id", (int)n, &t->unk, err))
        goto fail;
    int pad = -1;   /* unused here (no batch padding), but an id past the vocabulary is a broken file */
    if (opt_id(g, "tokenizer.ggml.padding_token_id", (int)n, &pad, err)) goto fail;
    if (kind == TOK_KIND_SPM) {   /* SentencePiece conventions when the file is silent */
        if (t->bos < 0 && n > 1) t->bos = 1;
        if (t->eos < 0 && n > 2) t->eos = 2;
        if (t->unk < 0) t->unk = 0;
    }
    t->add_bos = kind == TOK_KIND_SPM;
    t->add_space_prefix = kind == TOK_KIND_SPM;
    t->spm_escape_ws = kind == TOK_KIND_SPM;
    if (opt_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err) ||
        opt_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err))
        goto fail;
    snprintf(t->pre, sizeof t->pre, "default");
    if (vq_gguf_find(g, "tokenizer.ggml.pre")) {
        vq_str pre;
        if (vq_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err)) goto fail;
        snprintf(t->pre, sizeof t->pre, "%.*s", (int)VQ_MIN(pre.len, sizeof t->pre - 1), pre.ptr);
    }
    if (vq_tok_finish(t, err)) goto fail;
    if (phi3_rstrip(g, t, err)) goto fail;
    /* llama.cpp also names end-of-turn tokens explicitly */
    int eot = -1, eom = -1;
    if (opt_id(g, "tokenizer.ggml.eot_token_id", (int)n, &eot, err) ||
        opt_id(g, "tokenizer.ggml.eom_token_id", (int)n, &eom, err))
        goto fail;
    for (int k = 0; k < 2; k++) {
        int id = k ? eom : eot;
        if (id >= 0 && t->n_eog < TOK_MAX_EOG && !vq_tok_is_eog(t, id)) t->eog[t->n_eog++] = id;
    }
    if (kind == TOK_KIND_BPE) {
        uint64_t nm = merges->arr_len;
        mp = malloc((nm ? nm : 1) * sizeof *mp);
        ml = malloc((nm ? nm : 1) * sizeof *ml);
        if (!mp || !ml) { vq_err_set(err, VQ_ERR_NOMEM, "%s: out of memory for merges", path); goto fail; }
        for (uint64_t i = 0; i < nm; i++) {
            vq_str s = vq_gguf_arr_str(merges, i);
            mp[i] = s.ptr; ml[i] = (size_t)s.len;
        }
        if (vq_tok_bpe_init(t, mp, ml, (size_t)nm, err)) goto fail;
        free(mp); free(ml);
    }
    return t;
fail:
    free(mp); free(ml);
    vq_tokenizer_free(t);
    return NULL;
}
