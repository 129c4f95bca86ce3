/* tok_bpe.c: byte-level BPE (GGUF tokenizer.ggml.model = "gpt2"): the pre-tokenizer regexes of
 * tokenizer.ggml.pre run by PCRE2 (UTF + UCP, invalid UTF-8 tolerated), GPT-2's bytes-to-unicode
 * spelling, and merges applied by rank from a (left id, right id) -> (rank, id) hash map. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include "model/tok_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- GPT-2 bytes_to_unicode, in closed form: printable Latin-1 bytes stand for themselves,
 * the other 68 (0x00-0x20, 0x7F-0xA0, 0xAD) become U+0100.. in byte order ---- */
static uint32_t byte_to_cp(unsigned b) {
    if (b <= 0x20) return 256 + b;
    if (b >= 0x7F && b <= 0xA0) return 256 + 33 + (b - 0x7F);
    if (b == 0xAD) return 256 + 67;
    return b;
}
static int cp_to_byte(uint32_t cp) {
    if (cp < 256) return (cp <= 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) ? -1 : (int)cp;
    uint32_t k = cp - 256;
    if (k < 33) return (int)k;
    if (k < 67) return (int)(0x7F + k - 33);
    if (k == 67) return 0xAD;
    return -1;
}
static int put_cp(char *o, uint32_t cp) {   /* cp < 0x800 here */
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

int vq_tok_bpe_decode_piece(const char *s, size_t len, char *out) {
    const unsigned char *p = (const unsigned char *)s;
    int w = 0;
    for (size_t i = 0; i < len;) {
        int k = vq_tok_utf8_len(p + i, len - i);
        if (k == 0) { out[w++] = s[i++]; continue; }
        uint32_t cp = k == 1 ? p[i] : k == 2 ? ((p[i] & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu) : 0x110000;
        int b = cp_to_byte(cp);
        if (b >= 0) out[w++] = (char)b;
        else { memcpy(out + w, s + i, (size_t)k); w += k; }   /* not a byte-level char: as is */
        i += (size_t)k;
    }
    return w;
}

/* ---- pre-tokenizer regexes, as llama.cpp assigns them to tokenizer.ggml.pre ---- */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
/* contractions spelled with classes, as llama.cpp does: (?i:'s) would also take U+017F */
#define RE_CONTR "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3 RE_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 RE_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_DIGIT "\\p{N}"
/* llama.cpp's "default" (a missing tokenizer.ggml.pre): punctuation runs, GPT-2's regex, digit runs, threes */
#define RE_DEF_PUNCT "[\\p{P}\\$\\+<=>\\^~\\|]+"
#define RE_DEF_DIGITS "\\p{N}+"
#define RE_DEF_THREE "[0-9][0-9][0-9]"

/* Names as llama.cpp's llama_vocab::load assigns them to a pre-tokenizer type (src/llama-vocab.cpp),
 * only those whose regexes we run; a name missing here is refused, never guessed. */
typedef struct pre_def { const char *names; const char *re[TOK_MAX_REGEX]; int ignore_merges; } pre_def;
static const pre_def pre_defs[] = {
    { ",default,", { RE_DEF_PUNCT, RE_GPT2, RE_DEF_DIGITS, RE_DEF_THREE }, 0 },
    { ",gpt-2,phi-2,mpt,olmo,jais,exaone4,mellum,gigachat,a.x-4.0,", { RE_GPT2 }, 0 },
    { ",smollm,starcoder,refact,command-r,codeshell,exaone,minerva-7b,", { RE_DIGIT, RE_GPT2 }, 0 },
    { ",llama3,llama-bpe,llama-v3,falcon3,falcon-h1,pixtral,midm-2.0,lfm2,", { RE_LLAMA3 }, 1 },
    { ",dbrx,smaug-bpe,", { RE_LLAMA3 }, 0 },
    { ",qwen2,deepseek-r1-qwen,kormo,megrez,stablelm2,", { RE_QWEN2 }, 0 },
};

static const pre_def *find_pre(const char *name) {
    char key[64];
    snprintf(key, sizeof key, ",%s,", name);
    for (size_t i = 0; i < VQ_ARRAY_LEN(pre_defs); i++)
        if (strstr(pre_defs[i].names, key)) return &pre_defs[i];
    return NULL;
}

/* ---- merges ---- */
static uint32_t pair_slot(uint64_t key, uint32_t mask) {
    return (uint32_t)((key * 0x9E3779B97F4A7C15ULL) >> 32) & mask;
}

int vq_tok_bpe_init(vq_tokenizer *t, const char *const *merges, const size_t *merge_lens,
                    size_t n_merges, vq_err *err) {
    char tmp[8];
    for (unsigned b = 0; b < 256; b++) {
        int n = put_cp(tmp, byte_to_cp(b));
        t->byte_tok[b] = vq_tok_lookup(t, tmp, (size_t)n);
    }
    if (n_merges > (size_t)1 << 26)
        return vq_err_set(err, VQ_ERR_FORMAT, "tokenizer: %zu merges is out of range", n_merges), -1;
    uint32_t cap = 16;
    while (cap < n_merges * 2) cap <<= 1;
    t->pair_key = calloc(cap, sizeof *t->pair_key);
    t->pair_rank = malloc(cap * sizeof *t->pair_rank);
    t->pair_id = malloc(cap * sizeof *t->pair_id);
    if (!t->pair_key || !t->pair_rank || !t->pair_id)
        return vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory for %zu merges", n_merges), -1;
    t->pair_mask = cap - 1;
    char *cat = NULL;
    size_t cat_cap = 0;
    for (size_t r = 0; r < n_merges; r++) {
        const char *m = merges[r];
        size_t L = merge_lens[r], sp = 1;
        while (sp < L && m[sp] != ' ') sp++;
        if (sp >= L) {
            free(cat);
            return vq_err_set(err, VQ_ERR_FORMAT, "tokenizer.ggml.merges[%zu]: no space separating the pair "
                              "in \"%.*s\"", r, (int)VQ_MIN(L, 64), m), -1;
        }
        int a = vq_tok_lookup(t, m, sp), b = vq_tok_lookup(t, m + sp + 1, L - sp - 1);
        if (cat_cap < L) {
            char *nc = realloc(cat, L + 16);
            if (!nc) { free(cat); return vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory"), -1; }
            cat = nc; cat_cap = L + 16;
        }
        memcpy(cat, m, sp);
        memcpy(cat + sp, m + sp + 1, L - sp - 1);
        int id = vq_tok_lookup(t, cat, L - 1);
        if (a < 0 || b < 0 || id < 0) continue;   /* a merge naming unknown tokens can never apply */
        uint64_t key = ((uint64_t)(a + 1) << 32) | (uint32_t)(b + 1);
        uint32_t h = pair_slot(key, t->pair_mask);
        while (t->pair_key[h] && t->pair_key[h] != key) h = (h + 1) & t->pair_mask;
        if (t->pair_key[h]) continue;   /* the first (best) rank of a pair wins */
        t->pair_key[h] = key;
        t->pair_rank[h] = (int32_t)r;
        t->pair_id[h] = id;
    }
    free(cat);
    const pre_def *pd = find_pre(t->pre);
    if (!pd) {   /* another pre-tokenizer's regexes would split words where the model never saw them */
        char known[640];
        size_t w = 0;
        for (size_t i = 0; i < VQ_ARRAY_LEN(pre_defs) && w < sizeof known; i++) {
            const char *nm = pre_defs[i].names + 1;
            size_t L = strlen(nm) - 1;
            w += (size_t)snprintf(known + w, sizeof known - w, "%s%.*s", i ? "," : "", (int)L, nm);
        }
        return vq_err_set(err, VQ_ERR_UNSUPPORTED, "tokenizer: unknown pre-tokenizer tokenizer.ggml.pre = '%s' "
                          "(known: %s)", t->pre, known), -1;
    }
    t->ignore_merges = pd->ignore_merges;
    for (int k = 0; k < TOK_MAX_REGEX && pd->re[k]; k++) {
        int ec; PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pd->re[k], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(ec, msg, sizeof msg);
            return vq_err_set(err, VQ_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer '%s' regex %d: %s at %zu",
                              t->pre, k, (const char *)msg, (size_t)eo), -1;
        }
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   /* when JIT is unavailable pcre2 interprets */
        t->re[t->n_re++] = re;
    }
    return 0;
}

void vq_tok_bpe_free(vq_tokenizer *t) {
    for (int k = 0; k < t->n_re; k++) pcre2_code_free(t->re[k]);
    t->n_re = 0;
    free(t->pair_key); free(t->pair_rank); free(t->pair_id);
    t->pair_key = NULL; t->pair_rank = t->pair_id = NULL;
}

void vq_tok_bpe_scratch_free(tok_scratch *s) {
    if (s->md) pcre2_match_data_free(s->md);
    if (s->mctx) pcre2_match_context_free(s->mctx);
    if (s->jit_stack) pcre2_jit_stack_free(s->jit_stack);
    s->md = s->mctx = s->jit_stack = NULL;
}

/* ---- encoding ---- */
static int bpe_pair(const vq_tokenizer *t, const char *text, const tok_sym *a, const tok_sym *b,
                    float *prio, int *id) {
    if (a->id < 0 || b->id < 0) return 0;
    uint64_t key = ((uint64_t)(a->id + 1) << 32) | (uint32_t)(b->id + 1);
    for (uint32_t h = pair_slot(key, t->pair_mask); t->pair_key[h]; h = (h + 1) & t->pair_mask) {
        if (t->pair_key[h] == key) {
            *prio = (float)t->pair_rank[h];
            *id = t->pair_id[h];
            return 1;
        }
    }
    return 0;
}

/* A byte the vocabulary has no token for is dropped, as llama.cpp and HF tokenizers do (SmolLM2
 * lacks 21 of the 256, e.g. 0x04 and 0xF1): its unknown id is <|endoftext|>, which would end a turn. */
static void push_or_unk(const vq_tokenizer *t, tok_out *o, int id) {
    if (id >= 0) tok_push(o, id);
}

static int bpe_word(const vq_tokenizer *t, tok_scratch *s, const char *p, size_t n, tok_out *o,
                    vq_err *err) {
    if (n == 1) { push_or_unk(t, o, t->byte_tok[(unsigned char)p[0]]); return 0; }
    if (t->ignore_merges) {
        if (vq_tok_scratch_buf(s, n * 2))
            return vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory"), -1;
        size_t w = 0;
        for (size_t i = 0; i < n; i++) w += (size_t)put_cp(s->buf + w, byte_to_cp((unsigned char)p[i]));
        int id = vq_tok_lookup(t, s->buf, w);
        if (id >= 0) { tok_push(o, id); return 0; }
    }
    if (vq_tok_scratch_syms(s, n))
        return vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory for a %zu-byte word", n), -1;
    for (size_t i = 0; i < n; i++) {
        tok_sym *y = &s->sym[i];
        y->start = (int)i; y->len = 1; y->id = t->byte_tok[(unsigned char)p[i]];
        y->prev = (int)i - 1; y->next = (int)i + 1;
    }
    s->sym[n - 1].next = -1;
    if (vq_tok_merge(t, s, p, (int)n, bpe_pair))
        return vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory while merging"), -1;
    for (int i = 0; i >= 0; i = s->sym[i].next) push_or_unk(t, o, s->sym[i].id);
    return 0;
}

/* Split p[0..n) by regex `level`: matches and the gaps between them both go on to the next
 * level (llama.cpp's and HF's "isolated" behaviour); after the last level each piece is a word. */
static int split(const vq_tokenizer *t, tok_scratch *s, int level, const char *p, size_t n,
                 tok_out *o, vq_err *err) {
    if (level == t->n_re) return bpe_word(t, s, p, n, o, err);
    size_t at = 0, gap = 0;
    while (at < n) {
        int rc = pcre2_match(t->re[level], (PCRE2_SPTR)p, n, at, 0, s->md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !s->jit_stack) {
            /* rare (very long runs): give this call a big JIT stack and try again */
            s->mctx = pcre2_match_context_create(NULL);
            s->jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
            if (!s->mctx || !s->jit_stack)
                return vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory for the regex stack"), -1;
            pcre2_jit_stack_assign(s->mctx, NULL, s->jit_stack);
            continue;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return vq_err_set(err, VQ_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer '%s' regex %d failed on a "
                              "%zu-byte piece: %s", t->pre, level, n, (const char *)msg), -1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) {   /* an empty match: step over one character and search on */
            int k = vq_tok_utf8_len((const unsigned char *)p + ms, n - ms);
            at = ms + (size_t)(k ? k : 1);
            continue;
        }
        if (ms > gap && split(t, s, level + 1, p + gap, ms - gap, o, err)) return -1;
        if (split(t, s, level + 1, p + ms, me - ms, o, err)) return -1;
        at = gap = me;
    }
    if (gap < n && split(t, s, level + 1, p + gap, n - gap, o, err)) return -1;
    return 0;
}

/* llama.cpp reads the text as code points before splitting it and spells each word again from them:
 * a byte that does not start a sequence it accepts becomes U+FFFD, one per byte. It checks only the
 * lead byte's length and the continuation bytes, so an overlong form is read as its code point
 * ("\xC0\xAF" is "/") and a surrogate as itself. A 4-byte form past U+10FFFF makes llama.cpp abort
 * (it cannot spell it again); here it is invalid like the rest. Writes the result into s->text;
 * returns its length, or (size_t)-1 when out of memory. */
static size_t clean_utf8(tok_scratch *s, const char *text, size_t len) {
    if (len > SIZE_MAX / 3 - 1) return (size_t)-1;
    if (s->text_cap < len * 3) {
        char *p = realloc(s->text, len * 3);
        if (!p) return (size_t)-1;
        s->text = p; s->text_cap = len * 3;
    }
    const unsigned char *p = (const unsigned char *)text;
    char *o = s->text;
    size_t w = 0;
    for (size_t i = 0; i < len;) {
        unsigned c = p[i];
        int n = c < 0x80 ? 1 : c < 0xC0 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 0;
        uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
        if (n > 1 && (size_t)n > len - i) n = 0;
        for (int k = 1; k < n; k++) {
            if ((p[i + (size_t)k] & 0xC0) != 0x80) { n = 0; break; }
            cp = (cp << 6) | (p[i + (size_t)k] & 0x3Fu);
        }
        if (n == 0 || cp > 0x10FFFF) { memcpy(o + w, "\xEF\xBF\xBD", 3); w += 3; i++; continue; }
        i += (size_t)n;
        if (cp < 0x80) o[w++] = (char)cp;
        else if (cp < 0x800) { o[w++] = (char)(0xC0 | cp >> 6); o[w++] = (char)(0x80 | (cp & 0x3F)); }
        else if (cp < 0x10000) {
            o[w++] = (char)(0xE0 | cp >> 12); o[w++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            o[w++] = (char)(0x80 | (cp & 0x3F));
        } else {
            o[w++] = (char)(0xF0 | cp >> 18); o[w++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            o[w++] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[w++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return w;
}

int vq_tok_bpe_encode(const vq_tokenizer *t, tok_scratch *s, const char *text, size_t len,
                      tok_out *o, vq_err *err) {
    size_t i = 0;
    while (i < len) {   /* valid UTF-8 (the usual case) is split as it is */
        int k = vq_tok_utf8_len((const unsigned char *)text + i, len - i);
        if (!k) break;
        i += (size_t)k;
    }
    if (i < len) {
        size_t n = clean_utf8(s, text, len);
        if (n == (size_t)-1) return vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory for %zu bytes", len), -1;
        text = s->text;
        len = n;
    }
    if (!s->md) {   /* the JIT's default 32 KiB stack serves until a match needs more */
        s->md = pcre2_match_data_create(8, NULL);
        if (!s->md) return vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory for the regex matcher"), -1;
    }
    return split(t, s, 0, text, len, o, err);
}
