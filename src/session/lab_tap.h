/* lab_tap.h: the lab's one door into the product (lab/ may include veloxquant.h, its own headers
 * and this, nothing else; this header includes only veloxquant.h and core/core.h, and every lab
 * object uses only the public header's, this door's, core's and the lab's own symbols:
 * tests/lib/check_layers.sh and check_lab_links.sh). Each function exists because the public
 * session API cannot say it; the lab drives models through public sessions otherwise, and what it
 * needs below a session (a cache or a forward apart, a codec's hooks, the calibration file) it
 * reaches here through opaque handles and plain structs, never a product struct. Built into the
 * library's archive, never exported by libveloxquant.so (no VQ_API). */
#ifndef VQ_LAB_TAP_H
#define VQ_LAB_TAP_H
#include "veloxquant.h"
/* The bottom floor, no model or cache internals: error text (vq_err_set), the seeded RNG (needle's
 * numbers and bench-kernels' inputs must be the same on every machine as the product's), VQ_MIN /
 * VQ_MAX, aligned allocation. */
#include "core/core.h"

/* Forward tap: called in every layer of every forward the session runs with the batch's rows after
 * RoPE (q: n x n_heads*head_dim, k and v: n x n_kv_heads*head_dim, pos: their positions), before
 * they reach the cache; NULL removes it. Calibration sums their statistics and kv-fidelity captures
 * them to replay through each codec: activations the public API never shows. */
typedef void (*vq_lab_tap)(void *user, int layer, int n, const int *pos, const float *q, const float *k,
                           const float *v);
void vq_lab_session_set_tap(vq_session *s, vq_lab_tap tap, void *user);
/* Attention-block tap: every layer's residual stream x entering it and what attention adds, dx
 * (n x dim each), before the add; calibration's per-layer cos(x, x + dx) (SqueezeAttention's layer
 * importance) needs the hidden state, which the public API never shows. NULL removes it. */
typedef void (*vq_lab_attn_tap)(void *user, int layer, int n, int dim, const float *x, const float *dx);
void vq_lab_session_set_attn_tap(vq_session *s, vq_lab_attn_tap tap, void *user);

/* Eviction scores as the policy keeps them: evict-corr ranks a policy's scores against the
 * attention later queries pay. vq_lab_session_observe runs tokens as vq_session_decode does (no
 * logits) but leaves the eviction step that would end the call undone, so a windowed policy still
 * holds its observation when the scores are read; the scores of a layer's rows and their
 * positions: vq_lab_session_evict_scores (rows: vq_session_kv_rows). */
vq_status vq_lab_session_observe(vq_session *s, const int *tokens, int n, vq_err *err);
vq_status vq_lab_session_evict_scores(const vq_session *s, int layer, float *scores, int32_t *pos,
                                      vq_err *err);

/* 1 when no clause of the spec has an eviction budget that would drop a row of the first n
 * positions (kv/kv.h defines it): evict-corr reads scores before any eviction step, so a spec
 * that would evict there is refused rather than measured as if it kept every row. */
int vq_kv_spec_keeps_rows(const vq_kv_spec *s, int n);

/* The hash of a model's config that a calibration file records and the cache checks when a spec
 * names calib=FILE: calibrate writes it. */
uint64_t vq_lab_model_config_hash(const vq_model *m);

/* The model's attention soft-cap (Gemma 2's attn_logit_softcapping; 0: none): the cache applies it
 * (vq_kv_dims.softcap), so kv-fidelity's replay caches need it to attend as the model does. */
float vq_lab_model_attn_softcap(const vq_model *m);

/* ---- A cache apart from any session, and a forward apart from it ----
 * kv-fidelity replays captured rows through one layer's store and reads them back decoded;
 * bench's resident-memory fill makes the forward's scratch before its RSS baseline and the cache
 * after it, which one session (both at once) cannot. The store's own calls by handle (kv/kv.h
 * holds their contracts); the handles are opaque here. */
typedef struct vq_kv vq_kv;
typedef struct vq_fwd vq_fwd;
/* a cache of n_layers layers (every one unbounded), made as a session makes its own */
vq_kv *vq_lab_kv_create(const vq_kv_spec *spec, int n_layers, int n_heads, int n_kv_heads, int head_dim,
                        int max_ctx, float softcap, uint64_t seed, vq_err *err);
/* a cache of max_ctx positions shaped for the model (its layers, heads, spans, soft-cap) */
vq_kv *vq_lab_kv_for_model(const vq_model *m, const vq_kv_spec *spec, int max_ctx, uint64_t seed, vq_err *err);
void vq_lab_kv_free(vq_kv *kv);
vq_status vq_lab_kv_append(vq_kv *kv, int layer, int pos0, int n, const float *k, const float *v, vq_err *err);
vq_status vq_lab_kv_attend(vq_kv *kv, int layer, int n_q, const int *q_pos, const float *q, float *out,
                           vq_err *err);
vq_status vq_lab_kv_read(const vq_kv *kv, int layer, float *k, float *v, int32_t *pos, vq_err *err);
int vq_lab_kv_rows(const vq_kv *kv, int layer);
int vq_lab_kv_window_rows(const vq_kv *kv);
size_t vq_lab_kv_bytes(const vq_kv *kv);
double vq_lab_kv_bits(const vq_kv *kv);
const char *vq_lab_kv_spec_text(const vq_kv *kv);
/* The codec serving (layer, side: 0 K, 1 V; KV head 0) of a cache: its code geometry and the codec
 * table's hooks on blocks (codec/codec.h holds their contract), for bench-kernels --split, which
 * times score and accumulate on encoded blocks apart from the store. The state is opaque here and
 * lives as long as the cache. Returns 0, or -1 (no cache, a bad layer or side). */
typedef struct vq_codec_state vq_codec_state;
typedef struct vq_lab_codec {
    const vq_codec_state *st;
    int rows_per_block, acc_floats;
    size_t block_bytes, qstate_bytes;
    void (*encode)(const vq_codec_state *st, const float *x, uint8_t *block);
    void (*prep_query)(const vq_codec_state *st, const float *q, void *qstate);
    void (*score)(const vq_codec_state *st, int n_q, const void *const *qstates, const uint8_t *blocks,
                  int n_blocks, float *scores);
    void (*accumulate)(const vq_codec_state *st, int n_q, const float *w, const uint8_t *blocks, int n_blocks,
                       float *const *acc);
    void (*finish)(const vq_codec_state *st, const float *acc, float *out);
} vq_lab_codec;
int vq_lab_kv_codec(const vq_kv *kv, int layer, int side, vq_lab_codec *out);
/* the forward's scratch for batches of up to max_batch tokens at positions below n_ctx (the
 * context picks phi3 longrope's factors, as a session's does) */
vq_fwd *vq_lab_fwd_create(const vq_model *m, int max_batch, int n_ctx, vq_err *err);
void vq_lab_fwd_free(vq_fwd *f);
/* n tokens at positions pos0.. through the model into kv; logits (may be NULL): the last token's;
 * evict: as a session's prompt, the eviction step of an evicting spec after the chunk */
vq_status vq_lab_forward(const vq_model *m, vq_fwd *f, vq_kv *kv, const int *tokens, int n, int pos0,
                         float *logits, int evict, vq_err *err);
/* the product's float dot product kernel (kv-fidelity scores with it, as the cache does) */
float vq_lab_dot_f32(const float *a, const float *b, int n);
/* the codec table's row i (vq_codec_name(i)): 1 when it needs calib=FILE */
int vq_lab_codec_needs_calib(int i);

/* ---- The calibration file (docs/calibration-format.md) ----
 * calibrate fills the statistics, calib-layers reads them back. The arrays are the caller's when
 * it writes (sizes by the dims: [L][Hkv][d/2] pair_energy; [L][Hkv][d] k_mean, k_sq, v_sq,
 * q_filter; [L][Hq][d] q_mean, q_sq) and the door's when it reads (vq_lab_calib_free). */
typedef struct vq_lab_calib {
    char model[64];             /* the model's name (NUL terminated) */
    uint64_t config_hash;       /* vq_lab_model_config_hash */
    int n_layers, n_heads, n_kv_heads, head_dim;
    int rope_dim, rope_neox;    /* dims rotated per head; pair layout (vq_model_details) */
    uint64_t n_tokens;
    float *pair_energy, *k_mean, *k_sq, *v_sq, *q_mean, *q_sq, *q_filter;
    float *attn_cos;            /* [L]: mean cos(x, x + attn(x)) per layer (file version 3) */
    /* the VecInfer section (file version 4; vi_sub_k 0: none): [L][Hkv][d] vi_smooth, and
     * [L][Hkv][d * 16] vi_cb_k, vi_cb_v (calib.h says what they are) */
    int vi_sub_k, vi_sub_v;
    uint64_t vi_seed;
    int vi_vnorm;               /* 1: value codebooks trained on unit-norm rows */
    float *vi_smooth, *vi_cb_k, *vi_cb_v;
    /* file version 4 (has_lowrank): [L][Hkv][d] k_eig, v_eig; [L][Hkv][d][d] k_basis, k_dec,
     * v_basis (the lowrank codec's projections: codec/calib.h says what each is) */
    int has_lowrank;
    float *k_eig, *k_basis, *k_dec, *v_eig, *v_basis;
} vq_lab_calib;
/* VecInfer's training of one (layer, KV head) (codec/vecinfer.h, vq_vi_train_head): k, v = n rows
 * of d floats; fills smooth[d], cb_k[d * 16], cb_v[d * 16]. */
vq_status vq_lab_vi_train_head(const float *k, const float *v, int n, int d, int sub_k, int sub_v,
                               double alpha, int vnorm, uint64_t rot_seed, uint64_t seed, float *smooth, float *cb_k,
                               float *cb_v, vq_err *err);
/* written atomically (as every calibration file); file_bytes (may be NULL): its size */
vq_status vq_lab_calib_write(const vq_lab_calib *c, const char *path, size_t *file_bytes, vq_err *err);
/* read and checked (VQ_ERR_IO / VQ_ERR_FORMAT naming the path or the field) */
vq_status vq_lab_calib_read(const char *path, vq_lab_calib *out, vq_err *err);
void vq_lab_calib_free(vq_lab_calib *c);
/* Channel of RoPE pair p (which: 0 or 1) under the file's pair layout */
int vq_lab_calib_pair_ch(const vq_lab_calib *c, int p, int which);

/* Bench's fast fill (`bench --fill P`, docs/benchmarks.md "Fast fill"): appends rows to dst's cache
 * at its next positions dst..depth-1, row p a copy of src's decoded row (p mod R) in position order
 * (R: the rows src's cache holds; a real prefill of P tokens gives R = P), through the store's
 * append, so every codec encodes and accounts them as it would; dst's tokens repeat src's the same
 * way and its position becomes depth (decode continues there). The rows do not belong to their
 * positions: speed and bytes only, never quality. src and dst share the model and the layer
 * specs' dims; src may be dst (then R is its rows before the call). Refused: a spec that evicts
 * (its scores would be made up), a pending token in either, depth past dst's n_ctx. */
vq_status vq_lab_session_fill_repeat(vq_session *dst, const vq_session *src, int depth, vq_err *err);
/* The same below the session, for bench's resident-memory fill (which holds caches by handle, not
 * sessions): positions from..to-1 of dst from src's rows, at most chunk rows per append (dst's
 * dims.max_append or less). */
vq_status vq_lab_kv_fill_repeat(const vq_model *m, vq_kv *dst, int from, int to, const vq_kv *src, int chunk,
                                vq_err *err);

#endif
