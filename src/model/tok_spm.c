/* tok_spm.c: SentencePiece BPE encoding (GGUF "llama" vocabularies, llama2.c tok*.bin):
 * optional dummy-prefix space, spaces written U+2581 where the vocabulary does, one symbol per
 * UTF-8 character, the highest-scoring adjacent pair merged first, byte fallback (<0xXX>). */
#include "model/tok_internal.h"
#include <string.h>

static int spm_pair(const vq_tokenizer *t, const char *text, const tok_sym *a, const tok_sym *b,
                    float *prio, int *id) {
    int k = vq_tok_lookup(t, text + a->start, (size_t)a->len + (size_t)b->len);
    if (k < 0) return 0;
    int ty = t->type[k];
    /* control, unknown and byte pieces are never the result of a merge */
    if (ty == TOK_T_CONTROL || ty == TOK_T_UNKNOWN || ty == TOK_T_BYTE) return 0;
    *prio = -t->score[k];
    *id = k;
    return 1;
}

int vq_tok_spm_encode(const vq_tokenizer *t, tok_scratch *s, const char *text, size_t len,
                      int prefix, tok_out *o, vq_err *err) {
    if (vq_tok_scratch_buf(s, (len + 1) * 3 + 1))
        return vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory for %zu bytes of text", len), -1;
    char *b = s->buf;
    size_t n = 0;
    if (prefix) {
        if (t->spm_escape_ws) { memcpy(b, "\xE2\x96\x81", 3); n = 3; }
        else b[n++] = ' ';
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ' && t->spm_escape_ws) { memcpy(b + n, "\xE2\x96\x81", 3); n += 3; }
        else b[n++] = text[i];
    }
    if (vq_tok_scratch_syms(s, n))
        return vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory for %zu symbols", n), -1;
    int ns = 0;
    for (size_t i = 0; i < n;) {
        /* a symbol is as long as its first byte says (capped at the end), continuation bytes
         * unchecked, as llama.cpp splits: an invalid sequence is then no piece and falls back to
         * its byte tokens whole, so "\xC3a" gives <0xC3> <0x61>, not <0xC3> "a" */
        unsigned c = (unsigned char)b[i];
        size_t k = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (k > n - i) k = n - i;
        tok_sym *y = &s->sym[ns];
        y->start = (int)i; y->len = (int)k; y->id = -1; y->prev = ns - 1; y->next = ns + 1;
        i += k;
        ns++;
    }
    if (ns == 0) return 0;
    s->sym[ns - 1].next = -1;
    if (vq_tok_merge(t, s, b, ns, spm_pair))
        return vq_err_set(err, VQ_ERR_NOMEM, "tokenizer: out of memory while merging"), -1;
    for (int i = 0; i >= 0; i = s->sym[i].next) {
        const tok_sym *y = &s->sym[i];
        int id = y->id;
        if (id < 0) {
            id = vq_tok_lookup(t, b + y->start, (size_t)y->len);
            if (id >= 0 && (t->type[id] == TOK_T_CONTROL || t->type[id] == TOK_T_UNKNOWN)) id = -1;
        }
        if (id >= 0) { tok_push(o, id); continue; }
        for (int k = 0; k < y->len; k++) {
            int bid = t->byte_id[(unsigned char)b[y->start + k]];
            if (bid >= 0) tok_push(o, bid);
            else if (t->unk >= 0) tok_push(o, t->unk);
        }
    }
    return 0;
}
