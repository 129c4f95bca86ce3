/* tokenizer.c: the tokenizer handle shared by both algorithms: vocabulary storage and lookup,
 * the heap-driven merge engine, special-token splitting ahead of pre-tokenization, decoding
 * (vq_tok_piece / vq_tok_decode), and loading llama2.c tok*.bin files. */
#include "model/tok_internal.h"
#include "formats/llama2c.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- vocabulary ---- */

static uint64_t tok_hash(const char *s, size_t n) {   /* FNV-1a, then a final mix */
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ULL; }
    h ^= h >> 29;
    return h;
}

vq_tokenizer *vq_tok_alloc(int kind, int n, size_t text_bytes, vq_err *err) {
    if (n <= 0 || n > (1 << 24) || text_bytes > (size_t)UINT32_MAX - 1) {
        vq_err_set(err, VQ_ERR_FORMAT, "tokenizer: vocabulary of %d tokens / %zu bytes is out of range",
                   n, text_bytes);
        return NULL;
    }
    vq_tokenizer *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->kind = kind;
    t->n_vocab = n;
    t->bos = t->eos = t->unk = -1;
    t->arena = malloc(text_bytes + (size_t)n);
    t->dec = malloc(text_bytes + 1);
    t->off = calloc((size_t)n, sizeof *t->off);
    t->len = calloc((size_t)n, sizeof *t->len);
    t->dec_off = calloc((size_t)n, sizeof *t->dec_off);
    t->dec_len = calloc((size_t)n, sizeof *t->dec_len);
    t->score = calloc((size_t)n, sizeof *t->score);
    t->type = calloc((size_t)n, 1);
    if (!t->arena || !t->dec || !t->off || !t->len || !t->dec_off || !t->dec_len || !t->score || !t->type)
        goto oom;
    for (int b = 0; b < 256; b++) { t->byte_id[b] = -1; t->byte_tok[b] = -1; }
    return t;
oom:
    vq_tokenizer_free(t);
    vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory for %d tokens", n);
    return NULL;
}

void vq_tok_set(vq_tokenizer *t, int i, const char *s, size_t len, float score, int type) {
    uint32_t at = i ? t->off[i - 1] + t->len[i - 1] + 1 : 0;
    memcpy(t->arena + at, s, len);
    t->arena[at + len] = 0;
    t->off[i] = at;
    t->len[i] = (uint32_t)len;
    t->score[i] = score;
    t->type[i] = (uint8_t)type;
}

int vq_tok_lookup(const vq_tokenizer *t, const char *s, size_t len) {
    if (!t->map) return -1;
    uint32_t h = (uint32_t)tok_hash(s, len) & t->map_mask;
    for (;;) {
        uint32_t v = t->map[h];
        if (!v) return -1;
        int id = (int)v - 1;
        if (t->len[id] == len && memcmp(tok_text(t, id), s, len) == 0) return id;
        h = (h + 1) & t->map_mask;
    }
}

typedef struct len_id { uint32_t len; int id; } len_id;
static int cmp_special(const void *a, const void *b) {   /* longest first, then lowest id */
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id - y->id;
}

static int spm_byte_piece(const char *s, uint32_t len) {   /* "<0xXX>" -> byte, else -1 */
    if (len != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static void add_eog(vq_tokenizer *t, int id) {
    if (id < 0 || id >= t->n_vocab || t->n_eog >= TOK_MAX_EOG) return;
    for (int k = 0; k < t->n_eog; k++) if (t->eog[k] == id) return;
    t->eog[t->n_eog++] = id;
}

int vq_tok_finish(vq_tokenizer *t, vq_err *err) {
    int n = t->n_vocab;
    if (t->bos >= n) t->bos = -1;
    if (t->eos >= n) t->eos = -1;
    if (t->unk >= n) t->unk = -1;
    uint32_t cap = 16;
    while (cap < (uint32_t)n * 2u) cap <<= 1;
    t->map = calloc(cap, sizeof *t->map);
    t->special = malloc((size_t)n * sizeof *t->special);
    if (!t->map || !t->special) return vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory"), -1;
    t->map_mask = cap - 1;
    for (int i = 0; i < n; i++) {   /* first id wins on duplicate texts */
        if (vq_tok_lookup(t, tok_text(t, i), t->len[i]) >= 0) continue;
        uint32_t h = (uint32_t)tok_hash(tok_text(t, i), t->len[i]) & t->map_mask;
        while (t->map[h]) h = (h + 1) & t->map_mask;
        t->map[h] = (uint32_t)i + 1;
    }
    /* specials: control, unknown and user-defined tokens with text, longest first */
    len_id *sp = malloc((size_t)n * sizeof *sp);
    if (!sp) return vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory"), -1;
    t->n_special = 0;
    for (int i = 0; i < n; i++) {
        int ty = t->type[i];
        if ((ty == TOK_T_CONTROL || ty == TOK_T_USER || ty == TOK_T_UNKNOWN) && t->len[i] > 0)
            sp[t->n_special++] = (len_id){ t->len[i], i };
    }
    qsort(sp, (size_t)t->n_special, sizeof *sp, cmp_special);
    for (int k = 0; k < t->n_special; k++) t->special[k] = sp[k].id;
    free(sp);
    /* what each token prints as */
    uint32_t at = 0;
    for (int i = 0; i < n; i++) {
        const char *s = tok_text(t, i);
        uint32_t L = t->len[i], w = 0;
        char *d = t->dec + at;
        int ty = t->type[i];
        if (t->kind == TOK_KIND_BPE) {
            if (ty == TOK_T_NORMAL || ty == TOK_T_UNDEF || ty == TOK_T_UNUSED || ty == TOK_T_BYTE)
                w = (uint32_t)vq_tok_bpe_decode_piece(s, L, d);
            else { memcpy(d, s, L); w = L; }
        } else {
            int b = spm_byte_piece(s, L);
            if (ty == TOK_T_BYTE && b >= 0) {
                d[w++] = (char)b;
                if (t->byte_id[b] < 0) t->byte_id[b] = i;
            } else if (t->spm_escape_ws) {
                for (uint32_t k = 0; k < L; k++) {
                    if (k + 2 < L && (unsigned char)s[k] == 0xE2 && (unsigned char)s[k + 1] == 0x96 &&
                        (unsigned char)s[k + 2] == 0x81) { d[w++] = ' '; k += 2; }
                    else d[w++] = s[k];
                }
            } else { memcpy(d, s, L); w = L; }
        }
        t->dec_off[i] = at;
        t->dec_len[i] = w;
        at += w;
    }
    /* end of generation: eos plus the chat end markers this vocabulary has */
    add_eog(t, t->eos);
    static const char *const eog_text[] = { "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>",
                                            "<end_of_turn>", "<|end|>", "</s>" };
    for (size_t k = 0; k < VQ_ARRAY_LEN(eog_text); k++) {
        int id = vq_tok_lookup(t, eog_text[k], strlen(eog_text[k]));
        if (id >= 0 && t->type[id] != TOK_T_NORMAL) add_eog(t, id);
    }
    return 0;
}

int vq_tok_utf8_len(const unsigned char *p, size_t avail) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    int n; uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; }
    else return 0;
    if ((size_t)n > avail) return 0;
    for (int k = 1; k < n; k++) {
        if ((p[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[k] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

/* ---- merge engine ---- */

int vq_tok_scratch_syms(tok_scratch *s, size_t n) {
    if (n <= (size_t)s->sym_cap) return 0;
    if (n > (size_t)INT_MAX / 2) return -1;
    size_t cap = n < 64 ? 64 : n * 2;
    tok_sym *p = realloc(s->sym, cap * sizeof *p);
    if (!p) return -1;
    s->sym = p; s->sym_cap = (int)cap;
    return 0;
}

int vq_tok_scratch_buf(tok_scratch *s, size_t n) {
    if (n <= s->buf_cap) return 0;
    size_t cap = n < 256 ? 256 : n + n / 2;
    char *p = realloc(s->buf, cap);
    if (!p) return -1;
    s->buf = p; s->buf_cap = cap;
    return 0;
}

static int cand_less(const tok_cand *a, const tok_cand *b) {
    if (a->prio != b->prio) return a->prio < b->prio;
    return a->start < b->start;
}

static int heap_push(tok_scratch *s, tok_cand c) {
    if (s->heap_n == s->heap_cap) {
        int cap = s->heap_cap ? s->heap_cap * 2 : 64;
        tok_cand *p = realloc(s->heap, (size_t)cap * sizeof *p);
        if (!p) return -1;
        s->heap = p; s->heap_cap = cap;
    }
    int i = s->heap_n++;
    while (i > 0) {
        int up = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[up])) break;
        s->heap[i] = s->heap[up];
        i = up;
    }
    s->heap[i] = c;
    return 0;
}

static tok_cand heap_pop(tok_scratch *s) {
    tok_cand top = s->heap[0], last = s->heap[--s->heap_n];
    int i = 0, n = s->heap_n;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!cand_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static int try_pair(const vq_tokenizer *t, tok_scratch *s, const char *text, int l, int r,
                    tok_pair_fn fn) {
    if (l < 0 || r < 0) return 0;
    tok_cand c;
    if (!fn(t, text, &s->sym[l], &s->sym[r], &c.prio, &c.id)) return 0;
    c.left = l; c.right = r; c.start = s->sym[l].start; c.len = s->sym[l].len + s->sym[r].len;
    return heap_push(s, c);
}

int vq_tok_merge(const vq_tokenizer *t, tok_scratch *s, const char *text, int n, tok_pair_fn fn) {
    s->heap_n = 0;
    for (int i = 0; i + 1 < n; i++)
        if (try_pair(t, s, text, i, i + 1, fn)) return -1;
    while (s->heap_n) {
        tok_cand c = heap_pop(s);
        tok_sym *a = &s->sym[c.left], *b = &s->sym[c.right];
        /* stale when either side was merged since: lengths only grow, dead symbols have len 0 */
        if (a->len == 0 || b->len == 0 || a->next != c.right || a->len + b->len != c.len) continue;
        a->len += b->len;
        a->id = c.id;
        a->next = b->next;
        if (b->next >= 0) s->sym[b->next].prev = c.left;
        b->len = 0;
        if (try_pair(t, s, text, a->prev, c.left, fn) || try_pair(t, s, text, c.left, a->next, fn))
            return -1;
    }
    return 0;
}

static void scratch_free(tok_scratch *s);

/* ---- encoding ---- */

/* A run of text between special tokens. SentencePiece gives each run its dummy-prefix space: every
 * run starts the text or follows a special token, where llama.cpp adds one too. */
static int encode_fragment(const vq_tokenizer *t, tok_scratch *s, const char *p, size_t n,
                           tok_out *o, vq_err *err) {
    if (n == 0) return 0;
    if (t->kind == TOK_KIND_BPE) return vq_tok_bpe_encode(t, s, p, n, o, err);
    return vq_tok_spm_encode(t, s, p, n, t->add_space_prefix, o, err);
}

static int encode(const vq_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
                  const unsigned char *special_ok, int *out, int max_out, vq_err *err);

int vq_tok_encode(const vq_tokenizer *t, const char *text, size_t len, int add_bos,
                int parse_special, int *out, int max_out, vq_err *err) {
    return encode(t, text, len, add_bos, parse_special, NULL, out, max_out, err);
}

int vq_tok_encode_masked(const vq_tokenizer *t, const char *text, size_t len, int add_bos,
                         const unsigned char *special_ok, int *out, int max_out, vq_err *err) {
    if (!special_ok && len)
        return vq_err_set(err, VQ_ERR_ARG, "vq_tok_encode_masked: NULL mask"), -1;
    return encode(t, text, len, add_bos, 1, special_ok, out, max_out, err);
}

static int encode(const vq_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
                  const unsigned char *special_ok, int *out, int max_out, vq_err *err) {
    if (!t || (!text && len) || (!out && max_out > 0))
        return vq_err_set(err, VQ_ERR_ARG, "vq_tok_encode: NULL tokenizer, text or output"), -1;
    if (len > (size_t)INT_MAX / 4)   /* SentencePiece spells spaces in 3 bytes; int offsets */
        return vq_err_set(err, VQ_ERR_RANGE, "vq_tok_encode: text of %zu bytes is too long", len), -1;
    tok_out o = { out, max_out > 0 ? max_out : 0, 0 };
    tok_scratch s;
    memset(&s, 0, sizeof s);
    if (add_bos && t->bos >= 0) tok_push(&o, t->bos);
    unsigned char first[256] = { 0 };   /* first bytes of the specials in force */
    int any = 0;
    for (int k = 0; k < t->n_special; k++) {
        int id = t->special[k];
        if (!parse_special && t->type[id] != TOK_T_USER) continue;
        first[(unsigned char)tok_text(t, id)[0]] = 1;
        any = 1;
    }
    size_t frag = 0, pos = 0;
    int rc = 0;
    while (any && pos < len) {
        if (!first[(unsigned char)text[pos]]) { pos++; continue; }
        int hit = -1;
        for (int k = 0; k < t->n_special; k++) {
            int id = t->special[k];
            if (!parse_special && t->type[id] != TOK_T_USER) continue;
            if (special_ok && t->type[id] != TOK_T_USER && t->len[id] <= len - pos &&
                (!special_ok[pos] || memchr(special_ok + pos, 0, t->len[id])))
                continue;   /* not all of it is template text */
            if (t->len[id] <= len - pos && memcmp(text + pos, tok_text(t, id), t->len[id]) == 0) {
                hit = id;
                break;
            }
        }
        if (hit < 0) { pos++; continue; }
        if ((rc = encode_fragment(t, &s, text + frag, pos - frag, &o, err))) goto done;
        tok_push(&o, hit);
        pos += t->len[hit];
        if (t->rstrip && t->rstrip[hit])   /* C isspace, as llama.cpp strips */
            while (pos < len && (text[pos] == ' ' || (text[pos] >= '\t' && text[pos] <= '\r'))) pos++;
        frag = pos;
    }
    rc = encode_fragment(t, &s, text + frag, len - frag, &o, err);
done:
    scratch_free(&s);
    if (rc) return -1;
    if (o.n > INT_MAX)
        return vq_err_set(err, VQ_ERR_RANGE, "vq_tok_encode: more than INT_MAX tokens"), -1;
    return (int)o.n;
}

/* ---- decoding ---- */

/* Bytes token id prints as after prev: pointer into the decode table and length. */
static const char *piece_of(const vq_tokenizer *t, int prev, int id, int show_special, size_t *n) {
    *n = 0;
    if (!t || id < 0 || id >= t->n_vocab) return NULL;
    int ty = t->type[id];
    if (ty == TOK_T_CONTROL || ty == TOK_T_UNKNOWN) {
        if (!show_special) return NULL;
        *n = t->len[id];
        return tok_text(t, id);
    }
    const char *p = t->dec + t->dec_off[id];
    size_t L = t->dec_len[id];
    /* SentencePiece: the dummy-prefix space of the first piece is not part of the text */
    if (t->kind == TOK_KIND_SPM && t->add_space_prefix && (prev < 0 || prev == t->bos) &&
        ty != TOK_T_BYTE && L > 0 && p[0] == ' ') { p++; L--; }
    *n = L;
    return p;
}

size_t vq_tok_piece(const vq_tokenizer *t, int prev, int id, int show_special, char *buf, size_t cap) {
    size_t n;
    const char *p = piece_of(t, prev, id, show_special, &n);
    if (n > cap) n = cap;
    if (n) memcpy(buf, p, n);
    return n;
}

size_t vq_tok_decode(const vq_tokenizer *t, const int *ids, int n, char *buf, size_t cap) {
    size_t need = 0;
    for (int i = 0; i < n; i++) {
        size_t k;
        const char *p = piece_of(t, i ? ids[i - 1] : -1, ids[i], 0, &k);
        if (need < cap && k) memcpy(buf + need, p, VQ_MIN(k, cap - need));
        need += k;
    }
    return need;
}

/* ---- accessors ---- */

int vq_tok_vocab_size(const vq_tokenizer *t) { return t ? t->n_vocab : 0; }
int vq_tok_bos(const vq_tokenizer *t) { return t ? t->bos : -1; }
int vq_tok_eos(const vq_tokenizer *t) { return t ? t->eos : -1; }
int vq_tok_add_bos_default(const vq_tokenizer *t) { return t ? t->add_bos : 0; }
int vq_tok_is_eog(const vq_tokenizer *t, int id) {
    if (!t || id < 0) return 0;
    for (int k = 0; k < t->n_eog; k++) if (t->eog[k] == id) return 1;
    return 0;
}
int vq_tok_find(const vq_tokenizer *t, const char *piece) {
    return t && piece ? vq_tok_lookup(t, piece, strlen(piece)) : -1;
}

static void scratch_free(tok_scratch *s) {
    free(s->sym); free(s->heap); free(s->buf); free(s->text);
    vq_tok_bpe_scratch_free(s);
}

void vq_tokenizer_free(vq_tokenizer *t) {
    if (!t) return;
    vq_tok_bpe_free(t);
    free(t->arena); free(t->dec); free(t->off); free(t->len); free(t->dec_off); free(t->dec_len);
    free(t->score); free(t->type); free(t->map); free(t->special); free(t->rstrip);
    free(t);
}

/* ---- llama2.c tok*.bin (parsed and validated by src/formats/llama2c.c) ---- */

vq_tokenizer *vq_tokenizer_from_llama2c(const char *path, int vocab_size, vq_err *err) {
    if (!path || vocab_size <= 0 || vocab_size > (1 << 24)) {
        vq_err_set(err, VQ_ERR_ARG, "tokenizer: bad llama2.c vocab_size %d", vocab_size);
        return NULL;
    }
    vq_l2c_vocab *v = vq_l2c_vocab_load(path, vocab_size, err);
    if (!v) return NULL;
    vq_tokenizer *t = NULL;
    if (v->n != vocab_size) {
        vq_err_set(err, VQ_ERR_FORMAT, "%s: %d tokens read, vocab_size is %d", path, v->n, vocab_size);
        goto fail;
    }
    size_t total = 0;
    for (int i = 0; i < v->n; i++) total += (size_t)v->lens[i];
    t = vq_tok_alloc(TOK_KIND_SPM, vocab_size, total, err);
    if (!t) goto fail;
    for (int i = 0; i < v->n; i++) {
        const char *s = v->pieces[i];
        int ty = TOK_T_NORMAL;
        if (i == 0) ty = TOK_T_UNKNOWN;
        else if (i == 1 || i == 2) ty = TOK_T_CONTROL;
        else if (spm_byte_piece(s, (uint32_t)v->lens[i]) >= 0) ty = TOK_T_BYTE;
        vq_tok_set(t, i, s, (size_t)v->lens[i], v->scores[i], ty);
    }
    t->unk = 0; t->bos = 1; t->eos = 2;   /* run.c's fixed ids */
    t->add_bos = 1;
    t->add_space_prefix = 1;
    t->spm_escape_ws = 0;                 /* llama2.c pieces spell spaces as ' ' */
    snprintf(t->pre, sizeof t->pre, "llama2c");
    if (vq_tok_finish(t, err)) goto fail;
    add_eog(t, t->bos);   /* llama2.c models emit BOS between stories; run.c stops on it */
    vq_l2c_vocab_free(v);
    return t;
fail:
    vq_tokenizer_free(t);
    vq_l2c_vocab_free(v);
    return NULL;
}
