/* prompt.h: what the lab's prompt builders share (needle.c, tasks.c): a growable token array,
 * text tokenized onto its end, and a text read as a stream of sentences (WikiText-2 raw spacing:
 * a sentence ends at " . " or at its line's end; empty and " = Heading = " lines are skipped). */
#ifndef VQ_LAB_PROMPT_H
#define VQ_LAB_PROMPT_H
#include "lab/vqlab.h"

typedef struct vq_ivec { int *v; int n, cap; } vq_ivec;
int vq_ivec_reserve(vq_ivec *a, int need);                  /* 0, or -1 out of memory */
int vq_ivec_push(vq_ivec *a, const int *x, int n);          /* n == 0 copies nothing */
/* the tokens of text[0..len) (no BOS) appended to a */
vq_status vq_tok_append(const vq_model *m, const char *text, size_t len, int special, vq_ivec *a, vq_err *err);
vq_status vq_tok_append_str(const vq_model *m, const char *text, int special, vq_ivec *a, vq_err *err);

typedef struct vq_sentences { const char *text, *scan, *cur, *end; int wraps; } vq_sentences;
/* start at the first line start after byte offset r % strlen(text) (text non-empty) */
void vq_sentences_start(vq_sentences *u, const char *text, uint64_t r);
/* the next sentence as " " + sentence into buf (an overlong one is cut, still one unit); 0 when
 * the text has none (after wrapping around twice) */
int vq_sentences_next(vq_sentences *u, char *buf, size_t cap);
#endif
