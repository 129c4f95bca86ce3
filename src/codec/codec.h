/* codec.h: vector codecs for KV rows, as rows of one table.
 * A codec encodes rows of dimension d into fixed-size byte blocks and computes attention terms
 * directly from those bytes: prep_query turns a query into per-query state (rotated query,
 * lookup tables), score reads codes and returns q.k_hat, accumulate adds sum_i w_i v_hat_i in the
 * codec's own domain, finish maps that accumulator back to output space once per head.
 * Most codecs encode one row per block; a codec may encode several rows together
 * (KIVI keys: a group of G tokens per channel), rows_per_block says how many.
 *
 * DRAFT by the lead: the kv-store owner may refine it; say so to the codec authors. */
#ifndef VQ_CODEC_H
#define VQ_CODEC_H
#include "core/core.h"

typedef struct vq_codec_param { char key[32]; char val[64]; } vq_codec_param;

typedef struct vq_codec vq_codec;   /* one table row */
typedef struct vq_codec_state {     /* one configured instance (K side or V side of a layer) */
    const vq_codec *codec;
    int d;                          /* row dimension (head_dim) */
    int rows_per_block;
    size_t block_bytes;
    size_t qstate_bytes;            /* bytes prep_query needs per query */
    int acc_floats;                 /* floats of accumulator in codec domain */
    void *impl;                     /* codec-private (rotation, codebooks, sketch matrix) */
} vq_codec_state;

struct vq_codec {
    const char *name;
    const char *params_help;        /* e.g. "bits=1..8 (default 4), rotate=0|1" */
    /* Fill st (codec, d, sizes, impl) from params; unknown key or bad value -> error listing allowed */
    vq_status (*init)(vq_codec_state *st, int d, const vq_codec_param *p, int np, uint64_t seed,
                      vq_err *err);
    void (*fini)(vq_codec_state *st);
    void (*encode)(const vq_codec_state *st, const float *x, uint8_t *block);  /* rows_per_block x d */
    void (*decode)(const vq_codec_state *st, const uint8_t *block, float *x);
    void (*prep_query)(const vq_codec_state *st, const float *q, void *qstate);
    /* scores[j*n_rows + r] = q_j . k_hat_r for n_q queries sharing one pass over n_blocks blocks */
    void (*score)(const vq_codec_state *st, int n_q, const void *const *qstates,
                  const uint8_t *blocks, int n_blocks, float *scores);
    /* acc[j] += sum_r w[j*n_rows + r] * v_hat_r (codec domain), for n_q weight vectors */
    void (*accumulate)(const vq_codec_state *st, int n_q, const float *w,
                       const uint8_t *blocks, int n_blocks, float *const *acc);
    void (*finish)(const vq_codec_state *st, const float *acc, float *out);   /* -> d floats */
};

const vq_codec *vq_codec_find(const char *name);   /* NULL when unknown */
const vq_codec *vq_codec_at(int i);                /* table walk; NULL past the end */
#endif
