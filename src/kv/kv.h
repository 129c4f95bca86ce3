/* kv.h: the KV cache boundary. The model hands the cache its K/V rows after RoPE, with their
 * true positions, and asks it for attention outputs; it never reads K/V memory itself.
 * A cache is made from a parsed spec (vq_kv_spec_parse in veloxquant.h; "f16", "turboquant_mse:k=4,v=4", ...): the codec table
 * (codec/codec.h) says how rows are stored and how attention is computed from the codes. */
#ifndef VQ_KV_H
#define VQ_KV_H
#include "core/core.h"

typedef struct vq_kv_dims {
    int n_layers;
    int n_heads;      /* query heads */
    int n_kv_heads;   /* K/V heads; n_heads % n_kv_heads == 0 (GQA group = n_heads / n_kv_heads) */
    int head_dim;
    int max_ctx;      /* most rows a layer will hold (an append past it is VQ_ERR_RANGE) */
    /* Per cache layer: the attention span W in tokens (a sliding-window layer: a query at position
     * p sees rows with p - W < pos <= p); 0 = unbounded. NULL: every layer unbounded. Copied by
     * vq_kv_create (the caller's array need not outlive the cache). */
    const int *span;
    /* Most rows one vq_kv_append call brings (a session's batch); 0 = max_ctx. Only the
     * accounting of a sliding-window layer's ring uses it (vq_kv_bytes_at: the rows a ring layer
     * can hold at once are its span + a page + one append). */
    int max_append;
    /* Attention logit soft-capping (Gemma 2's attn_logit_softcapping): every score s = q.k/sqrt(d)
     * becomes c * tanh(s / c) before the softmax, on every attention path of every codec (and the
     * reference path). 0 = none; else finite and > 0. Nothing stored depends on it. */
    float softcap;
} vq_kv_dims;

typedef struct vq_kv vq_kv;

/* Spec grammar (docs/kv-spec.md has the full reference):
 *   full  := spec ('@' layers '=' spec)*        per-layer overrides, e.g. "q4_0@0,-1=f16"
 *   layers:= item (',' item)*, item := L | L '..' L   (L < 0 counts from the end: -1 = last)
 *   spec  := part (';' part)*
 *   part  := ['k=' | 'v='] codec [':' key=val (',' key=val)*]  |  key=val (',' key=val)*
 * One codec part without k=/v= serves both sides; inside it k=B / v=B are the K / V bits and
 * bits=B both ("turboquant_mse:k=4,v=3"). Per-side codecs: "k=turboquant_mse:bits=4;v=q8_0".
 * Store keys in any part: window=R (R most recent rows kept in full precision, for any codec;
 * default: the codec's own, e.g. KIVI residual, else 0), wprec=16|32 (window precision, default
 * 16), page=N (rows per page, default 256). Append rejects NaN/inf and |x| > 65504 (VQ_ERR_ARG).
 * An override is a full, independent spec for the layers it lists (nothing is inherited from the
 * base); a layer named twice, out of range, an empty list or a bad override spec: VQ_ERR_ARG.
 * Unknown codec, parameter or value: NULL, err lists what is known/allowed. */
vq_kv *vq_kv_create(const vq_kv_spec *spec, const vq_kv_dims *dims, uint64_t seed, vq_err *err);
/* Parse + create + free the parsed spec (tests, tools that take one text once). */
vq_kv *vq_kv_create_str(const char *spec, const vq_kv_dims *dims, uint64_t seed, vq_err *err);
void   vq_kv_destroy(vq_kv *kv);
void   vq_kv_clear(vq_kv *kv);             /* drop every row, keep the allocation policy */

/* Append n rows to a layer. k, v: n x (n_kv_heads * head_dim) floats, after RoPE.
 * Row i has absolute position pos0 + i. */
vq_status vq_kv_append(vq_kv *kv, int layer, int pos0, int n, const float *k, const float *v,
                       vq_err *err);

/* Attention for n_q query rows: q and out are n_q x (n_heads * head_dim); q after RoPE.
 * Query i at position q_pos[i] sees exactly the rows with position <= q_pos[i] (and, in a layer
 * with a span W (dims.span), > q_pos[i] - W).
 * Scores are scaled by 1/sqrt(head_dim) (then soft-capped when dims.softcap > 0); softmax in float32. */
vq_status vq_kv_attend(vq_kv *kv, int layer, int n_q, const int *q_pos, const float *q,
                       float *out, vq_err *err);

/* The RoPE the model applies to layer `layer`'s queries and keys (vq_rope's meaning: rot dims
 * rotated, pairs (2i, 2i+1) or, neox, (i, i + rot/2), angle pos * inv_freq[i], cos/sin times
 * mscale). Only a policy that reads the queries before RoPE (expected_attention_prompt) keeps it
 * (a copy); without it the queries are taken as they come (no rotation). The session sets it. */
vq_status vq_kv_set_rope(vq_kv *kv, int layer, const float *inv_freq, int rot, int neox, float mscale, vq_err *err);

size_t vq_kv_bytes(const vq_kv *kv);      /* bytes actually held: codes + metadata + fp window */
int    vq_kv_rows(const vq_kv *kv, int layer);
const char *vq_kv_spec_str(const vq_kv *kv);  /* normalized spec string, layers resolved */
double vq_kv_bits_per_elem(const vq_kv *kv); /* bytes held * 8 / (rows * kv_heads * head_dim * 2) */

/* ---- additions by the kv owner (diagnostics, tests, eval) ---- */
/* What attention sees for every row of a layer, in storage order (coded rows, the window, then
 * the sink rows of sink=S):
 * k, v: rows x (n_kv_heads * head_dim) decoded floats; pos: rows true positions. Reference path
 * (decodes every block); buffers must hold vq_kv_rows(kv, layer) rows. */
vq_status vq_kv_read(const vq_kv *kv, int layer, float *k, float *v, int32_t *pos, vq_err *err);
size_t vq_kv_bytes_at(const vq_kv *kv, int rows);   /* bytes held when every layer holds rows */
size_t vq_kv_scratch_bytes(const vq_kv *kv);          /* attention + encode scratch (not counted above) */
/* Drop rows at positions >= n. A coded block is kept whole or not at all, so fewer rows may be
 * kept: returns the rows every layer holds afterwards (all positions below it), or -1. */
int vq_kv_truncate(vq_kv *kv, int n);
size_t vq_kv_bytes_tally(const vq_kv *kv);   /* running sum of the store's allocations (== bytes) */
size_t vq_kv_page_bytes(const vq_kv *kv);    /* bytes of one page (all KV heads of a layer) */
int    vq_kv_page_rows(const vq_kv *kv);     /* rows per page */
int    vq_kv_pages(const vq_kv *kv, int layer);        /* pages allocated in a layer */
int    vq_kv_window_rows(const vq_kv *kv);   /* R: rows kept in full precision */
/* Every codec with its parameters, then the store keys, one per line; returns the length needed. */
size_t vq_kv_spec_help(char *buf, size_t n);
struct vq_codec_state;
const struct vq_codec_state *vq_kv_codec_state(const vq_kv *kv, int layer, int side);
/* Per-layer overrides (spec "base@LAYERS=spec..."): layers with another config form their own
 * group; vq_kv_page_bytes/page_rows/window_rows above report layer 0's group. */
const char *vq_kv_layer_spec(const vq_kv *kv, int layer);   /* normalized spec serving a layer */
/* Debug/reference switch: when on, vq_kv_attend reads the layer's rows back decoded (vq_kv_read)
 * and computes plain float64 softmax attention over them instead of the codecs' score/accumulate
 * (slow; for tests that check the codec path against what the cache holds). */
void vq_kv_set_ref_attend(vq_kv *kv, int on);
/* Sliding-window layers (dims.span) keep a ring: before an append at pos0, the pages whose rows
 * all lie at or below pos0 - span (no later query can see them) are freed, whole, without moving
 * a code byte. Off (debug, tests): every row is kept and only the mask hides the old ones. */
void vq_kv_set_ring(vq_kv *kv, int on);
long vq_kv_ring_dropped(const vq_kv *kv);   /* rows the rings have freed, all layers */
/* Every calib=FILE of the cache's spec was made for a model of this config hash (the model
 * layer's vq_model_config_hash); else VQ_ERR_STATE naming the file's model and both hashes.
 * The store checks dims at create; the session calls this with its model. */
vq_status vq_kv_check_model(const vq_kv *kv, uint64_t config_hash, vq_err *err);

/* ---- token eviction (evict.c; docs/eviction.md): spec keys evict=POLICY,budget=B,... ----
 * Rows keep their true positions; an eviction step drops coded rows (whole code blocks) down to
 * the layer's budget, never the sinks (positions < sinks), the recent rows (positions >=
 * next_pos - recent), the full-precision window or sink=S rows; the pages are compacted and the
 * ones left empty freed (vq_kv_bytes and the tally follow). The session brackets every run of
 * tokens with begin/end: end runs a step when a prompt (n > 1) ends and every `every` decode
 * steps. */
int  vq_kv_evicting(const vq_kv *kv);                   /* some layer has an eviction policy */
/* 1 when no clause's eviction budget drops a row of the first n positions (a ratio of 1, or rows
 * >= n on every layer, pyramidkv's smallest layer included; no policy drops nothing) */
int  vq_kv_spec_keeps_rows(const vq_kv_spec *s, int n);
void vq_kv_evict_begin(vq_kv *kv, int pos0, int n);     /* n tokens at pos0.. are about to run */
long vq_kv_evict_end(vq_kv *kv, int pos0, int n);       /* they ran: a step if due; rows dropped */
long vq_kv_evict_now(vq_kv *kv, int next_pos);          /* a step now (tests, tools) */
long vq_kv_evicted(const vq_kv *kv);                    /* rows dropped so far, all layers */
/* Drop exactly the coded rows at the listed positions (whole code blocks only, else VQ_ERR_ARG). */
vq_status vq_kv_evict_positions(vq_kv *kv, int layer, const int32_t *pos, int n, vq_err *err);
/* Demote mode (demote.c): a spec part demote=CODEC[:params] next to evict= makes an eviction
 * step re-code the rows it would drop with that codec, into a second tier of the layer, at their
 * true positions, instead of dropping them; attention covers both tiers (one exact softmax).
 * vq_kv_rows / vq_kv_read / vq_kv_pages above are the main tier's; these are the demoted tier's
 * (0 rows and pages, or VQ_ERR_ARG, for a layer without one). vq_kv_bytes counts both. */
int  vq_kv_demoted_rows(const vq_kv *kv, int layer);
int  vq_kv_demoted_pages(const vq_kv *kv, int layer);
vq_status vq_kv_read_demoted(const vq_kv *kv, int layer, float *k, float *v, int32_t *pos, vq_err *err);
long vq_kv_demoted(const vq_kv *kv);                    /* rows demoted so far, all layers */
/* The policy's score of every coded and window row of a layer, storage order (as vq_kv_read
 * lists them, sinks excluded; higher = kept); pos (optional) gets their positions. */
vq_status vq_kv_evict_scores(const vq_kv *kv, int layer, float *out, int32_t *pos, vq_err *err);
/* heads=ada (adakv.c; docs/eviction.md "AdaKV: per-head budgets"): each KV head of a layer holds
 * its own rows, so an eviction step keeps a different number of rows per head (the top
 * heads x budget (block, head) pairs of the layer by the policy's score, each head at least
 * floor x budget rows). vq_kv_rows is then the most rows any head holds, vq_kv_pages the pages of
 * all heads, vq_kv_page_bytes one head's page; vq_kv_read works while the heads hold the same
 * positions (else VQ_ERR_STATE), vq_kv_evict_positions drops from every head and
 * vq_kv_evict_scores sums the heads' scores under the same condition. */
int vq_kv_per_head(const vq_kv *kv, int layer);                  /* 1: the layer stores rows per KV head */
int vq_kv_head_rows(const vq_kv *kv, int layer, int h);          /* rows KV head h holds (shared: the layer's) */
/* KV head h's rows as attention sees them, storage order: k, v: rows x head_dim; pos: positions */
vq_status vq_kv_read_head(const vq_kv *kv, int layer, int h, float *k, float *v, int32_t *pos, vq_err *err);
/* Drop exactly KV head h's coded rows at the listed positions (heads=ada only; whole blocks) */
vq_status vq_kv_evict_head_positions(vq_kv *kv, int layer, int h, const int32_t *pos, int n, vq_err *err);

/* ---- state: the cache's contents as a byte stream (kv_state.c; docs/state-format.md) ----
 * The stream holds the codes exactly as stored (pages in use), the full-precision window (oldest
 * row first) and the sink rows, with every row's position; codec states are not in it (they are
 * read-only and derive from the seed), so it records the normalized spec, the dims and the seed
 * instead, and is read back only into a cache made from the same three. */
/* Takes the stream's bytes in order; returns 0, or nonzero to stop (an I/O error). */
typedef int (*vq_kv_write_fn)(void *user, const void *bytes, size_t n);
vq_status vq_kv_state_write(const vq_kv *kv, vq_kv_write_fn fn, void *user, vq_err *err);
size_t vq_kv_state_bytes(const vq_kv *kv);       /* the stream's exact length for what it holds now */
size_t vq_kv_state_max_bytes(const vq_kv *kv);   /* an upper bound for any stream this cache reads */
/* Replace the cache's contents with the stream buf[0..len). rows >= 0: every layer must hold
 * exactly positions 0..rows-1 (what a session's cache holds); rows < 0: any contents a cache
 * could reach. Another spec, dims (max_ctx aside: rows must fit) or seed: VQ_ERR_STATE naming it;
 * a malformed stream: VQ_ERR_FORMAT naming the field and its byte offset. Every count and size is
 * checked before use, so any bytes are safe to feed. On any error the cache is left unchanged. */
vq_status vq_kv_state_read(vq_kv *kv, const uint8_t *buf, size_t len, int rows, vq_err *err);

/* ---- plain rows: a layer's codes as arrays, for a device store holding the same bytes
 * (kv_state.c; session/state.c moves them between a device store and a cache to save or load a
 * state file; docs/cuda.md) ----
 * A cache is plain when every layer's rows are one codec state per side with keys 1 or 16 rows
 * per block, fp16 window rows (wprec=16), window=0 (the window holds only the partial block),
 * no sink, no eviction, no kmean/kscale, heads shared: VQ_ERR_UNSUPPORTED naming what is not. */
vq_status vq_kv_plain_check(const vq_kv *kv, vq_err *err);
typedef struct vq_kv_plain {
    int n_coded, n_win;        /* positions 0..n_coded-1 as codes, then n_win fp16 rows */
    uint8_t *k, *v;            /* KV head h's K blocks (in row order) at k + h * k_head, V at v + h * v_head */
    size_t k_head, v_head;
    uint16_t *win_k, *win_v;   /* n_win x n_kv_heads x head_dim */
} vq_kv_plain;
/* layer's counts (n_coded, n_win); -1 when the rows are not positions 0..n-1 in order */
int vq_kv_plain_rows(const vq_kv *kv, int layer, int *n_win);
/* the layer's rows into p's buffers (sized by the caller from vq_kv_plain_rows) */
vq_status vq_kv_plain_get(const vq_kv *kv, int layer, const vq_kv_plain *p, vq_err *err);
/* an EMPTY layer takes p's rows (pages allocated and counted; nothing changed on failure) */
vq_status vq_kv_plain_put(vq_kv *kv, int layer, const vq_kv_plain *p, vq_err *err);
#endif
