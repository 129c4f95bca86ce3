/* tok_internal.h: the tokenizer handle's layout and the pieces its files share (vocabulary
 * storage, string hash map, the heap-driven merge engine used by both BPE flavours).
 * Private to src/model/tokenizer.c, tok_bpe.c, tok_spm.c and tok_gguf.c. */
#ifndef VQ_TOK_INTERNAL_H
#define VQ_TOK_INTERNAL_H
#include <stdint.h>
#include <stddef.h>
#include "model/tokenizer.h"

/* token types, numbered as llama.cpp / GGUF tokenizer.ggml.token_type number them */
enum { TOK_T_UNDEF = 0, TOK_T_NORMAL = 1, TOK_T_UNKNOWN = 2, TOK_T_CONTROL = 3,
       TOK_T_USER = 4, TOK_T_UNUSED = 5, TOK_T_BYTE = 6 };

enum { TOK_KIND_BPE = 1, TOK_KIND_SPM = 2 };

#define TOK_MAX_REGEX 4
#define TOK_MAX_EOG 8

struct vq_tokenizer {
    int kind;
    int n_vocab;
    /* vocabulary: NUL-terminated copies of the token texts in one arena */
    char *arena;
    uint32_t *off, *len;
    float *score;
    uint8_t *type;
    /* what each token prints as (byte-level decoded, U+2581 -> ' ', <0xXX> -> byte) */
    char *dec;
    uint32_t *dec_off, *dec_len;
    /* text -> id, open addressing, slot holds id+1 (0 = empty) */
    uint32_t *map;
    uint32_t map_mask;
    int bos, eos, unk;
    int add_bos, add_space_prefix;
    int spm_escape_ws;         /* SentencePiece: spaces are written U+2581 in pieces */
    int eog[TOK_MAX_EOG];
    int n_eog;
    /* special tokens matched before pre-tokenization, longest text first */
    int *special;
    int n_special;
    /* llama.cpp's RSTRIP attribute: whitespace after this special token is dropped (NULL: none has it) */
    unsigned char *rstrip;
    /* SentencePiece: <0xXX> ids, -1 when absent */
    int byte_id[256];
    /* byte-level BPE */
    int byte_tok[256];         /* id of the one-byte (mapped) token, -1 when absent */
    uint64_t *pair_key;        /* (left id + 1) << 32 | (right id + 1); 0 = empty */
    int32_t *pair_rank, *pair_id;
    uint32_t pair_mask;
    void *re[TOK_MAX_REGEX];   /* pcre2_code_8 * */
    int n_re;
    int ignore_merges;         /* llama3: a word that is itself a token is emitted whole */
    char pre[48];
};

/* ---- vocabulary building (tokenizer.c) ---- */
/* Allocate the vocabulary arrays for n tokens holding text_bytes of text in total. */
vq_tokenizer *vq_tok_alloc(int kind, int n, size_t text_bytes, vq_err *err);
/* Set token i; called once per i in order 0..n-1 (the arena is filled sequentially). */
void vq_tok_set(vq_tokenizer *t, int i, const char *s, size_t len, float score, int type);
/* Build the hash map, special list, decode table and EOG set. 0 or -1 with err. */
int vq_tok_finish(vq_tokenizer *t, vq_err *err);
int vq_tok_lookup(const vq_tokenizer *t, const char *s, size_t len);   /* -1 when absent */
static inline const char *tok_text(const vq_tokenizer *t, int id) { return t->arena + t->off[id]; }

/* ---- output accumulator ---- */
typedef struct tok_out { int *ids; int max; long n; } tok_out;
static inline void tok_push(tok_out *o, int id) { if (o->n < o->max) o->ids[o->n] = id; o->n++; }

/* ---- merge engine (tokenizer.c): symbols in a linked list, candidate pairs in a heap ---- */
typedef struct tok_sym { int start, len, id, prev, next; } tok_sym;
typedef struct tok_cand { float prio; int left, right, start, len; int id; } tok_cand;
typedef struct tok_scratch {
    tok_sym *sym; int sym_cap;
    tok_cand *heap; int heap_n, heap_cap;
    char *buf; size_t buf_cap;
    char *text; size_t text_cap;   /* byte-level BPE: the input with invalid UTF-8 replaced */
    void *md;                  /* pcre2_match_data_8 * */
    void *mctx;                /* pcre2_match_context_8 * */
    void *jit_stack;           /* pcre2_jit_stack_8 * */
} tok_scratch;
/* Pair callback: can symbols a,b merge? 1 and fill prio (lower first) and merged id, or 0. */
typedef int (*tok_pair_fn)(const vq_tokenizer *t, const char *text, const tok_sym *a,
                           const tok_sym *b, float *prio, int *id);
/* Merge n symbols (already in s->sym, linked 0..n-1) until no candidate pair remains.
 * Lowest prio first; ties go to the leftmost pair. 0, or -1 on allocation failure. */
int vq_tok_merge(const vq_tokenizer *t, tok_scratch *s, const char *text, int n, tok_pair_fn fn);
int vq_tok_scratch_syms(tok_scratch *s, size_t n);
int vq_tok_scratch_buf(tok_scratch *s, size_t n);

/* ---- algorithms ---- */
int  vq_tok_bpe_init(vq_tokenizer *t, const char *const *merges, const size_t *merge_lens,
                     size_t n_merges, vq_err *err);          /* tok_bpe.c */
int  vq_tok_bpe_encode(const vq_tokenizer *t, tok_scratch *s, const char *text, size_t len,
                       tok_out *o, vq_err *err);
void vq_tok_bpe_free(vq_tokenizer *t);
void vq_tok_bpe_scratch_free(tok_scratch *s);
int  vq_tok_bpe_decode_piece(const char *s, size_t len, char *out);  /* bytes written; out >= len */
int  vq_tok_spm_encode(const vq_tokenizer *t, tok_scratch *s, const char *text, size_t len,
                       int prefix, tok_out *o, vq_err *err);   /* tok_spm.c */

/* Length of the valid UTF-8 sequence starting at p (1..4), or 0 when invalid there. */
int vq_tok_utf8_len(const unsigned char *p, size_t avail);
#endif
