/* llama2c.h: reader for llama2.c checkpoints (legacy v0: 7 int32 header, float32 weights,
 * negative vocab_size meaning untied classifier) and llama2.c tokenizer files (tok*.bin).
 * The checkpoint is mapped; weight pointers point into the mapping. Sizes are validated
 * against the file length before any pointer is formed. */
#ifndef VQ_LLAMA2C_H
#define VQ_LLAMA2C_H
#include "core/core.h"

typedef struct vq_l2c_config {
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
    int shared_classifier;   /* 1 when vocab_size was positive in the header */
} vq_l2c_config;

typedef struct vq_l2c_weights {       /* layouts as in llama2.c run.c, row-major float32 */
    const float *token_embedding;     /* vocab x dim */
    const float *rms_att;             /* layer x dim */
    const float *wq, *wk, *wv, *wo;   /* layer x (out x in) */
    const float *rms_ffn;             /* layer x dim */
    const float *w1, *w2, *w3;        /* w1,w3: layer x hidden x dim; w2: layer x dim x hidden */
    const float *rms_final;           /* dim */
    const float *wcls;                /* vocab x dim (== token_embedding when shared) */
} vq_l2c_weights;

typedef struct vq_l2c vq_l2c;
/* header checked (fields positive and bounded, heads divide dim, n_kv_heads divides n_heads, even
 * head size) and the file size must equal exactly what the header implies; else VQ_ERR_FORMAT */
vq_l2c *vq_l2c_open(const char *path, vq_err *err);
void    vq_l2c_close(vq_l2c *m);
const vq_l2c_config  *vq_l2c_config_of(const vq_l2c *m);
const vq_l2c_weights *vq_l2c_weights_of(const vq_l2c *m);

/* llama2.c tokenizer file: int32 max_token_length, then per token: float score, int32 len, bytes */
typedef struct vq_l2c_vocab {
    int n;
    char **pieces;     /* NUL-terminated copies */
    int *lens;
    float *scores;
    int max_token_length;
} vq_l2c_vocab;
/* vocab_size > 0: the file must hold exactly that many tokens (no trailing bytes);
 * vocab_size <= 0: read every token in the file. Lengths are checked against max_token_length
 * and the file size, scores must be finite. */
vq_l2c_vocab *vq_l2c_vocab_load(const char *path, int vocab_size, vq_err *err);
/* the same from a buffer (name used in messages; "<memory>" when NULL) */
vq_l2c_vocab *vq_l2c_vocab_from_mem(const void *data, size_t len, const char *name, int vocab_size, vq_err *err);
void vq_l2c_vocab_free(vq_l2c_vocab *v);
#endif
