/* tokenizer.h: text <-> token ids. Two algorithms behind one handle:
 *  - byte-level BPE (GGUF tokenizer.ggml.model = "gpt2"): pre-tokenizer regex by PCRE2,
 *    bytes mapped to printable code points, merges by rank, special tokens matched first;
 *  - SentencePiece BPE (GGUF "llama", and llama2.c tok*.bin): score-ordered merges,
 *    byte fallback (<0xXX>), dummy prefix space.
 * Invalid UTF-8 input never crashes: byte-level BPE encodes raw bytes; SentencePiece falls back
 * to byte tokens. */
#ifndef VQ_TOKENIZER_H
#define VQ_TOKENIZER_H
#include "core/core.h"
#include "formats/gguf.h"

typedef struct vq_tokenizer vq_tokenizer;

vq_tokenizer *vq_tokenizer_from_gguf(const vq_gguf *g, vq_err *err);
vq_tokenizer *vq_tokenizer_from_llama2c(const char *tok_path, int vocab_size, vq_err *err);
void vq_tokenizer_free(vq_tokenizer *t);

int vq_tok_vocab_size(const vq_tokenizer *t);
int vq_tok_bos(const vq_tokenizer *t);          /* -1 when none */
int vq_tok_eos(const vq_tokenizer *t);
int vq_tok_add_bos_default(const vq_tokenizer *t); /* what the model file asks for */
int vq_tok_is_eog(const vq_tokenizer *t, int id);  /* end of generation: eos, <|im_end|>, eot... */
int vq_tok_find(const vq_tokenizer *t, const char *piece); /* exact vocab lookup; -1 if absent */

/* Encode len bytes of text. add_bos: prepend BOS. parse_special: recognize special-token text
 * such as "<|im_start|>" as single tokens (chat templates); off, it is ordinary text.
 * (User-defined tokens are matched either way, as llama.cpp does. A byte that a byte-level vocabulary
 * has no token for is dropped, as HF tokenizers and llama.cpp do; SentencePiece falls back to <0xXX>,
 * else to unk. Thread-safe: the tokenizer is only read.)
 * Writes at most max_out ids and returns the number the full encoding needs (may exceed
 * max_out: call again with a bigger buffer), or -1 with err set. */
int vq_tok_encode(const vq_tokenizer *t, const char *text, size_t len, int add_bos,
                int parse_special, int *out, int max_out, vq_err *err);

/* vq_tok_encode with parse_special on only where special_ok[i] is nonzero: a special token is
 * matched only when all its bytes are so marked (elsewhere only user-defined tokens, as with
 * parse_special off). Used for chat: the template's markers are special tokens, message content
 * is plain text; the rest of the encoding is that of the whole text. */
int vq_tok_encode_masked(const vq_tokenizer *t, const char *text, size_t len, int add_bos,
                         const unsigned char *special_ok, int *out, int max_out, vq_err *err);

/* Bytes of one token as generation should print them, given the previous token (SentencePiece
 * drops the dummy-prefix space after BOS; byte tokens become their byte; special/control tokens
 * print as nothing unless show_special). Returns the byte count written into buf (<= cap).
 * prev < 0 means "no previous token" (start of text) and is treated like BOS. A byte token may be
 * part of a multi-byte UTF-8 character: a printer should pass bytes through, not validate each. */
size_t vq_tok_piece(const vq_tokenizer *t, int prev, int id, int show_special, char *buf, size_t cap);

/* Decode a whole sequence to text (as the concatenation of vq_tok_piece would, and without
 * the SentencePiece dummy prefix at the start). Returns bytes needed; writes at most cap. */
size_t vq_tok_decode(const vq_tokenizer *t, const int *ids, int n, char *buf, size_t cap);
#endif
