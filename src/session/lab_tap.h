/* lab_tap.h: the lab's one door into the product (lab/ may include veloxquant.h, its own headers
 * and this, nothing else: tests/lib/check_layers.sh). Each function exists because the public
 * session API cannot say it; the lab drives models through public sessions otherwise. Built into
 * the library's archive, never exported by libveloxquant.so (no VQ_API). */
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

#ifdef VQ_LAB_STORE
/* Not yet behind functions of this door (issue 31, step 3): the files that define VQ_LAB_STORE
 * (lab/kv_fidelity.c, lab/bench_kernels.c, lab/calibrate.c, lab/bench.c) work below the session:
 * bench's resident-memory fill (vq_bench_rss_fill) makes the forward's scratch before its RSS
 * baseline and the cache after it, which one session (both at once) cannot; kv-fidelity
 * replays captured rows through one layer's store and reads them back decoded; bench-kernels
 * times the store's append/attend and, with --split, the codec table's score and accumulate on
 * encoded blocks; calibrate fills and writes the calibration file's struct. */
#include "model/model.h"   /* bench's resident-memory fill: scratch before the baseline, the cache after */
#include "kv/kv.h"
#include "codec/codec.h"
#include "codec/calib.h"
#include "kernels/kernels.h"
#endif
#endif
