/* codec.h: vector codecs for KV rows, as rows of one constant table (codec_table.c).
 * A codec stores rows of dimension d in fixed-size byte blocks and computes attention terms
 * directly from those bytes; the KV store (kv/) never sees a decoded K_hat/V_hat in its hot path.
 *
 * ---- THE CONTRACT (stable; codec authors implement exactly this) ----------------------------
 * Instances. init() configures one vq_codec_state: one per (layer, side) of a cache, shared by all
 *   KV heads of that layer. After init returns VQ_OK the state is READ-ONLY: every other function
 *   takes it const and may be called concurrently from many threads. All per-call scratch lives in
 *   the qstate (one per query, owned by the caller) or on the stack / in the caller's buffers.
 * init(st, d, side, p, np, seed, err): st arrives zeroed with st->codec and st->side already set.
 *   side is VQ_SIDE_K or VQ_SIDE_V (a codec may store keys and values differently, e.g. KIVI).
 *   p[0..np) are this side's parameters, already split by the store: "bits" (the store maps the
 *   spec's k=/v=/bits= to "bits" for each side) and codec-specific keys. Store keys (window,
 *   wprec, page) never reach the codec. Unknown key, malformed or out-of-range value, or a d the
 *   codec cannot handle (e.g. rotate=1 with d not a power of two) -> return VQ_ERR_ARG with a
 *   message that names the key and value and lists what is allowed (params_help).
 *   seed: per (cache seed, layer, side); all randomness (rotations, sketches) derives from it.
 *   init must fill: d, rows_per_block (>= 1), block_bytes (> 0), qstate_bytes (>= 0),
 *   acc_floats (>= 1), impl (may be NULL); may fill: fp_window (rows the codec wants the store to
 *   keep in full precision, e.g. KIVI's residual; 0 otherwise), params (canonical text of ALL
 *   its parameters incl. defaults, "bits=4,rotate=1"; "" when it has none) and state_bytes (bytes
 *   it allocated for impl: rotation signs, codebooks, sketch matrices; the store counts them).
 *   Context (st->ctx, set by the store before init; codecs that do not need it ignore it):
 *   the cache layer and layer count, the KV head and head counts, and the spec's calibration
 *   (store key calib=FILE, loaded and checked against the cache's dims by the store; NULL when
 *   the spec has none). ctx.n_layers == 0 means the caller does not know where the state serves
 *   (the spec parser's probe, unit tests): a codec must then still validate its parameters (with
 *   layer 0 / head 0 of a calibration when it has one). ctx.calib is valid only during init: a
 *   codec copies what it needs. A codec row with per_head = 1 gets one state per (layer, side, KV
 *   head) instead of one per (layer, side); every state of a side must have the same
 *   rows_per_block, block_bytes, qstate_bytes and acc_floats.
 * fini(st): frees impl (and anything init allocated). Called once, also after a failed init.
 * encode(st, x, block): x = rows_per_block rows of d floats, row-major; writes exactly
 *   block_bytes bytes (every byte deterministic: no uninitialised padding). The store guarantees
 *   finite input with |x| <= 65504 (it rejects anything else at append); zero rows must work.
 * decode(st, block, x): the inverse: rows_per_block x d floats, row-major. Reference only (tests,
 *   debugging); attention never calls it. decode must be what score/accumulate compute with:
 *   score == q . decode(block) and accumulate == sum w * decode(block) up to float rounding.
 * prep_query(st, q, qstate): q = d floats (after RoPE, NOT scaled by 1/sqrt(d)); fills
 *   qstate_bytes bytes at qstate (64-byte aligned) - e.g. the rotated query, lookup tables.
 * score(st, n_q, qstates, blocks, n_blocks, scores): blocks = n_blocks consecutive blocks
 *   (n_rows = n_blocks * rows_per_block rows in order); for each query j < n_q and row r:
 *   scores[j * n_rows + r] = q_j . k_hat_r  (raw dot product, UNSCALED; the store applies
 *   1/sqrt(d), masking and softmax). Overwrites, never accumulates.
 * accumulate(st, n_q, w, blocks, n_blocks, acc): for each j < n_q:
 *   acc[j][0..acc_floats) += sum_r w[j * n_rows + r] * (v_hat_r in the codec's domain).
 *   The codec domain is any LINEAR image of v_hat (e.g. rotated coordinates): the store zeroes
 *   acc, may rescale it by a scalar between calls (online softmax), and calls finish once.
 *   Weights may be 0 (masked rows); w and acc do not alias.
 * finish(st, acc, out): out[0..d) = the linear map from codec domain back to output space,
 *   so that finish(sum_r w_r v_hat_r) = sum_r w_r decode(block)_r. acc is read-only.
 * ---------------------------------------------------------------------------------------------- */
#ifndef VQ_CODEC_H
#define VQ_CODEC_H
#include "core/core.h"

enum { VQ_SIDE_K = 0, VQ_SIDE_V = 1 };

typedef struct vq_codec_param { char key[32]; char val[64]; } vq_codec_param;

typedef struct vq_codec vq_codec;   /* one table row */
struct vq_calib;                    /* codec/calib.h */
typedef struct vq_codec_ctx {       /* where a state serves (THE CONTRACT: Context) */
    int layer, n_layers;            /* cache layer, layers of the cache (0: unknown) */
    int head, n_kv_heads, n_heads;  /* KV head (0 unless the row is per_head), KV and query heads */
    const struct vq_calib *calib;   /* the spec's calib=FILE, checked against the dims; or NULL */
    const char *calib_path;         /* its path (messages), or NULL */
} vq_codec_ctx;
typedef struct vq_codec_state {     /* one configured instance (K side or V side of a layer) */
    const vq_codec *codec;
    int d;                          /* row dimension (head_dim) */
    int side;                       /* VQ_SIDE_K / VQ_SIDE_V */
    int rows_per_block;             /* rows encoded together in one block (KIVI keys: G) */
    size_t block_bytes;             /* bytes per block */
    size_t qstate_bytes;            /* bytes prep_query needs per query */
    int acc_floats;                 /* floats of accumulator in codec domain */
    int fp_window;                  /* full-precision rows the codec asks the store to keep */
    char params[128];               /* canonical parameter text, filled by init */
    size_t state_bytes;             /* bytes init allocated (impl, tables): for honest accounting */
    void *impl;                     /* codec-private (rotation, codebooks, sketch matrix) */
    vq_codec_ctx ctx;               /* set by the store before init */
} vq_codec_state;

struct vq_codec {
    const char *name;
    const char *params_help;        /* e.g. "bits=1..8 (default 4), rotate=0|1" */
    int per_head;                   /* 1: one state per KV head (e.g. per-head calibration) */
    int needs_calib;                /* 1: init needs ctx.calib (calib=FILE); table walkers that
                                     * make specs from bare codec names skip such rows */
    vq_status (*init)(vq_codec_state *st, int d, int side, const vq_codec_param *p, int np,
                      uint64_t seed, vq_err *err);
    void (*fini)(vq_codec_state *st);
    void (*encode)(const vq_codec_state *st, const float *x, uint8_t *block);
    void (*decode)(const vq_codec_state *st, const uint8_t *block, float *x);
    void (*prep_query)(const vq_codec_state *st, const float *q, void *qstate);
    void (*score)(const vq_codec_state *st, int n_q, const void *const *qstates,
                  const uint8_t *blocks, int n_blocks, float *scores);
    void (*accumulate)(const vq_codec_state *st, int n_q, const float *w,
                       const uint8_t *blocks, int n_blocks, float *const *acc);
    void (*finish)(const vq_codec_state *st, const float *acc, float *out);
};

const vq_codec *vq_codec_find(const char *name);   /* NULL when unknown */
const vq_codec *vq_codec_at(int i);                /* table walk; NULL past the end */
int vq_codec_count(void);

/* Convenience for codecs: the first value of key in p (NULL when absent), and a check that every
 * key in p is one of the comma-separated names in allowed (else VQ_ERR_ARG naming the key). */
const char *vq_codec_param_get(const vq_codec_param *p, int np, const char *key);
vq_status vq_codec_params_check(const vq_codec *c, const vq_codec_param *p, int np,
                                const char *allowed, vq_err *err);
/* Parse an integer parameter in [lo, hi]; absent -> def. Error names codec, key, value, range. */
vq_status vq_codec_param_int(const vq_codec *c, const vq_codec_param *p, int np, const char *key,
                             int lo, int hi, int def, int *out, vq_err *err);
#endif
