/* kv_impl.h: the KV store's private layout, shared by the files of src/kv: kv_policy.c (the policy
 * tables, kv_policy.h), kv_spec.c (spec parsing), kv_attend.c (attention from codes), kv.c
 * (create, append, compaction, accounting), demote.c and evict.c (side by side: the step reaches
 * the demoted tier through the fate row's hooks), adakv.c, kv_layers.c (the router) and kv_state.c,
 * in that order of calls: a file calls only files before it (lib/kv_files). Not a public header.
 * A cache (struct vq_kv) routes each layer to a group (struct vq_kvg): one group per codec
 * config, so per-layer overrides ("base@0,-1=f16") get their own page layout. */
#ifndef VQ_KV_IMPL_H
#define VQ_KV_IMPL_H
#include <math.h>
#include <string.h>
#include "kv/kv.h"
#include "codec/codec.h"
#include "kv/kv_policy.h"

#define VQ_KV_MAX_PARAMS 16
#define VQ_KV_ABS_MAX 65504.0f   /* largest |x| append accepts (the fp16 range) */
#define VQ_KV_SPEC_MAX 2048      /* a full spec (base + layer overrides), incl. the NUL */
#define VQ_KV_CALIB_MAX 256      /* calib=FILE path, incl. the NUL */

/* Token eviction: a policy (a row of kv_policy.c's table), an allocator (heads=) and their
 * parameters, from the spec's keys evict=NAME,budget=..,sinks=..,recent=..,every=.. (parsed by
 * kv_spec.c from the keys the tables declare; docs/kv-spec.md). */
struct vq_evict_cfg {
    const vq_kv_policy *pol;      /* NULL: no eviction */
    const vq_kv_alloc *alloc;     /* heads=shared (the default) or heads=ada; set with pol */
    double budget;                /* >= 1: rows per layer; (0, 1]: ratio of the positions seen */
    int budget_ratio;             /* budget given as a ratio */
    int sinks, recent, every;     /* first positions kept, last positions kept, decode steps per step */
    int obs, pool;                /* snapkv/pyramidkv: observed prompt queries, max-pool width */
    double slope, tau;            /* pyramidkv budget slope; keyformer Gumbel temperature */
    int chunk;                    /* chunkkv: rows per chunk (positions c*chunk .. c*chunk+chunk-1) */
    double squeeze;               /* squeeze: the budget factor of the layers attention changes least */
    int poolfn;                   /* snapkv/pyramidkv/squeeze pooling: 0 max (over every row), 1 avg
                                     (kvpress: over the rows before the window, zero-padded) */
    double beta;                  /* pyramidkv: 0 (not given) the slope schedule; >= 1 the published one */
    int norm;                     /* h2o acc=: 0 sum; 1 mean over the queries that saw the row (kvpress) */
    int vnorm;                    /* expected_attention_prompt: 0 (on) scores times ||v|| (kvpress), 1 off */
    const float *layer_w;         /* squeeze: per cache layer budget factors (the store's, from
                                     calib=FILE at create; NULL in a parsed spec) */
    unsigned seen;                /* keys given (parser bookkeeping, bit VQ_PK_*) */
    double floor;                 /* heads=ada: each head keeps at least floor * budget rows */
    unsigned ada_seen;            /* heads= / floor= given (parser bookkeeping, bit VQ_AK_*) */
};

/* Demote mode (demote.c): the spec part demote=CODEC[:params] names the codec an eviction step
 * re-codes the rows it drops with (a second, lower-precision tier) instead of dropping them. */
typedef struct vq_kv_demote {
    const vq_codec *codec;                /* NULL: no demote= part */
    vq_codec_param p[2][VQ_KV_MAX_PARAMS];
    int np[2];
    char norm[192];                       /* "codec:params" as normalized (probe or the tier's states) */
} vq_kv_demote;

/* A parsed spec: one codec and its parameters per side, plus the store's own keys. */
typedef struct vq_kv_parsed {
    const vq_codec *codec[2];             /* [VQ_SIDE_K], [VQ_SIDE_V] */
    vq_codec_param p[2][VQ_KV_MAX_PARAMS];
    int np[2];
    int window;                           /* -1: not given (codec's fp_window or 0) */
    int sink;                             /* first rows (positions < sink) kept in full precision */
    int wprec;                            /* 8, 16 or 32 */
    int page;                             /* rows per page (rounded up to a multiple of rpb) */
    int side_bits[2];                     /* k= / v= seen (parser bookkeeping) */
    int bits_seen, store_seen;            /* bits= seen; store keys seen (bit per key) */
    vq_evict_cfg ev;                      /* token eviction (evict=...; ev.pol NULL: none) */
    char calib[VQ_KV_CALIB_MAX];          /* calib=FILE (docs/calibration-format.md), "" if none */
    vq_kv_demote dm;                      /* demote=CODEC (needs evict=; dm.codec NULL: none) */
    int kmean;                            /* kmean=1: keys coded about the calibration's mean key */
    double kscale;                        /* kscale=A: keys scaled by (query energy / key variance)^A */
    int cache_layers;                     /* layers of the whole cache (set by vq_kv_create) */
} vq_kv_parsed;

/* One plain spec (no '@'): grammar only (codec parameters are checked by the codec's init). */
vq_status vq_kv_part_parse(const char *spec, vq_kv_parsed *out, vq_err *err);

/* A full spec, parsed once (kv_spec.c): the base clause and the per-layer overrides, each with its
 * parsed codecs and parameters (validated by a probe of the codecs) and its layer items as
 * written (negative = from the end; resolved against the cache's layers by vq_kv_create). */
typedef struct vq_kv_item { int a, b; char tok[48]; } vq_kv_item;
typedef struct vq_kv_clause {
    vq_kv_parsed sp;
    char norm[512];          /* normalized plain spec */
    char given[512];         /* the clause as written ("0,-1=f16"; the base: its spec) */
    int n_items;
    vq_kv_item *items;
} vq_kv_clause;
struct vq_kv_spec {
    char given[VQ_KV_SPEC_MAX];
    char text[VQ_KV_SPEC_MAX];   /* normalized */
    int n;                       /* clauses; c[0] is the base */
    vq_kv_clause *c;
};
/* The normalized plain spec from codec states and store values (kv.c and the parser share it). */
void vq_kv_normalize(char *out, size_t cap, const vq_codec_state *st_k, const vq_codec_state *st_v,
                     const vq_kv_parsed *sp, int R, int wprec, int P, int S);

/* One layer: pages of codes plus a ring of the most recent rows in full precision.
 * Page layout (page_bytes, 64-byte aligned sections):
 *   int32 pos[P] | for each KV head h: K blocks (P / rpb_k blocks) | V blocks (P / rpb_v) */
typedef struct vq_kv_layer {
    uint8_t **pages;       /* page_cap pointers; [0, n_pages) allocated */
    int32_t *page_minpos;  /* smallest position in each page (page skipping under causality) */
    int n_pages;
    int n_coded;           /* rows held as codes */
    void *win_k, *win_v;   /* ring of win_cap rows x (H*d) elements, fp16 or fp32 */
    int32_t *win_pos;
    int win_start, win_count;
    void *sink_k, *sink_v; /* rows with position < S, full precision, never coded (sink=S) */
    int32_t *sink_pos;
    int sink_count;
    float *ev_score;       /* eviction: H x ev.cap scores, [h * ev.cap + storage index] (coded rows,
                              then the window; sink rows have none): what the policy observed */
    int span;              /* the cache layer's attention span (0: unbounded, no ring) */
    int ring_lo;           /* the ring freed every position in [S, ring_lo) (0: none freed) */
    int n_spare;           /* pages the ring let go, kept for the next append: pages[n_pages ..
                              n_pages + n_spare) (reused, so RSS follows the accounting) */
} vq_kv_layer;

/* One group: the layers that share one codec config. dims.n_layers = layers in the group;
 * arrays indexed by layer are local (0..n_layers); gl[] maps them back to the cache's layers
 * (codec seeds and messages use the cache's layer number). */
typedef struct vq_kvg {
    vq_kv_dims dims;       /* heads=ada: n_layers = cache layers x vh, one KV head (G query heads) each */
    int *gl;               /* global layer of each local layer */
    char spec[512];        /* normalized spec of this group */
    int H, G, d;           /* KV heads (of a local layer), query heads per KV head, head_dim */
    int vh;                /* local layers per cache layer: 1, or n_kv_heads with heads=ada (the
                              per-head layout, adakv.c: local layer l*vh + h holds KV head h of the
                              group's l-th cache layer, so pages, window, sinks, positions and
                              scores exist per (layer, head) with the code unchanged) */
    int xs;                /* floats between two rows of append's k/v (the cache's KV heads x d) */
    int qrow;              /* query heads per row of attend's q/out (the cache's n_heads) */
    int rpb[2];            /* rows per block, K and V */
    int rpb_store;         /* rows leave the window in multiples of this (lcm of rpb[]) */
    int R;                 /* full-precision window (rows) */
    int S;                 /* attention-sink rows: positions < S stay in full precision (0: none) */
    int wprec;             /* 8 (q8_0 blocks), 16 or 32 */
    int P;                 /* rows per page */
    int win_cap;           /* ring capacity: R + rpb_store - 1 (0 when no window needed) */
    int page_cap;          /* page pointers per layer */
    size_t page_bytes, *off_k, *off_v;   /* page size; per-head section offsets in a page */
    size_t bytes;          /* tally of every allocation the store made (and still holds) */
    vq_codec_state *st[2]; /* st[side][cache layer * hs[side] + head] (cache layers of the group,
                              local / vh): vq_kvg_st */
    int hs[2];             /* states per layer and side: n_kv_heads for per_head codecs, else 1 */
    /* kmean= / kscale= (the key pre-transform, kv.c): coded keys are k' = a ⊙ (k − c), queries
     * scored on them are q ⊘ a, plus q·c; window and sink rows stay as given. [cache layer of the
     * group][KV head of the cache][3][d]: c, a, 1/a. NULL: none. */
    float *kx;
    int kx_hc;             /* KV heads of the cache (the array's second dimension) */
    uint64_t calib_hash;   /* config hash recorded in the spec's calib=FILE (0: none) */
    uint32_t calib_crc;    /* that file's data CRC-32 (0: none): a KV state records it (kv_state.c) */
    char calib_model[64];  /* its model name */
    float *enc_tmp;        /* encode scratch: rpb_store rows of d floats */
    uint8_t *scratch;      /* attention scratch: n_slots slots of slot_bytes (kv_attend.c) */
    size_t slot_bytes;
    int n_slots;
    int is_tier;           /* a demoted tier (demote.c): each attention slot starts with its output */
    int *slot_busy;        /* per slot: taken (atomic flag) */
    vq_kv_layer *layers;
    int n_layers_all;      /* the cache's layer count (pyramidkv's schedule) */
    long ring_dropped;     /* rows the sliding-window rings freed, all layers of the group */
    /* token eviction: the policy and allocator rows with their keys (kv_policy.h) and what the
     * group keeps for them. The observed per-row scores are in the layers (ev_score: the store
     * keeps them in step with the rows it moves; the row decides what goes in and how it is
     * read); the observer's buffer, the calibration the row asked for, the step's schedule and
     * scratch (evict.c) are here. */
    struct vq_kvg_ev {
        vq_evict_cfg cfg;  /* cfg.pol NULL: no eviction */
        int cap;           /* rows per head in ev_score (max_ctx) */
        int attn;          /* attention observes softmax weights into ev_score (VQ_POL_ATTN) */
        int obs_from;      /* queries at positions >= this feed the scores */
        int steps;         /* decode steps since the last eviction step */
        uint64_t seed;     /* keyformer's noise */
        long dropped;      /* rows evicted so far, all layers of the group */
        int nblk;          /* per-task block table entries (kv_attend.c) */
        float *raw;        /* the observer's weights: n_slots x nv x raw_cap floats, grown (by
                              append, in pages of P rows) to the most rows a layer has held */
        int nv, raw_cap;
        float *cal;        /* from calib=FILE, else NULL: qfilters: [local layer][H][d] unit filters;
                              expected_attention: [local layer][H][G][2][d]: E[q]/sqrt(d), Var[q]/(2d);
                              squeeze: [cache layer] budget factors (cfg.layer_w points here) */
        int cal_layers;    /* squeeze: the cache's layers (cal's floats) */
        float *tmp;        /* step scratch: 2 x cap floats (row scores, pooling) */
        /* VQ_POL_QSTATS (expected_attention_prompt): per local layer, KV head h, query head g of
         * its group, (1 + d + d*d) doubles: the count, the sum of the observed queries before
         * RoPE and of their outer products (every query at a position >= sinks); the layers'
         * RoPE (vq_kv_set_rope): per local layer d/2 inverse frequencies, then the rotated dims
         * (0: none set) and the cos/sin factor; the pair layout */
        double *qst;
        float *rope;
        int rope_neox;
        vq_ada_cand *cand; /* step scratch: vh x cap candidate blocks of a cache layer's heads */
    } ev;
    /* the fate of the rows a step evicts (a row of kv_policy.h's fate table: drop | demote; the
     * router sets it from the spec, NULL in a demoted tier) and, for demote (demote.c), the tier
     * an eviction step re-codes the rows it drops into: a group of the same layers (its own codec,
     * window 0 as a staging ring for partial blocks, no sink, no policy) whose rows hold their
     * true positions, in no particular order */
    struct vq_kvg_dm {
        const vq_kv_fate *fate;
        struct vq_kvg *tier;   /* NULL: rows evicted are dropped */
        float *buf;            /* (tier) a main store block decoded: K, V (rpb x H x d each), a row */
        size_t bytes;          /* (tier) buf's size (vq_kv_scratch_bytes counts it) */
        long rows;             /* (tier) rows demoted into it so far, all layers */
    } dm;
} vq_kvg;

struct vq_kv {
    vq_kv_dims dims;
    char spec[VQ_KV_SPEC_MAX];   /* normalized full spec: base, then @layers=spec per override */
    int n_groups, g_cap;   /* groups made; slots in g (one per clause of the spec as given) */
    vq_kvg **g;            /* n_groups; g[0] serves the layers no override names (if any) */
    int *lg, *ll;          /* per cache layer: its group and its local index there */
    int *span;             /* per cache layer: attention span in tokens (0: unbounded; dims.span) */
    int ref_attend;        /* debug: attention over decoded rows in float64 (vq_kv_set_ref_attend) */
    int ring_off;          /* debug: sliding-window layers keep every row (vq_kv_set_ring) */
    uint64_t seed;         /* the codecs' seed (kept so a saved state can say which it was made with) */
    size_t bytes;          /* tally of the router's own allocations (groups keep their own) */
};

/* kv.c: one group. spec: a plain spec (no '@'); gl: the cache layer of each of dims->n_layers
 * local layers (seeds derive from it, so a layer's codec state does not depend on grouping). */
vq_kvg *vq_kvg_create(const vq_kv_parsed *sp, const char *spec, const vq_kv_dims *dims,
                      const int *gl, uint64_t seed, vq_err *err);
void vq_kvg_destroy(vq_kvg *g);
void vq_kvg_clear(vq_kvg *g);
size_t vq_kvg_bytes(const vq_kvg *g);   /* from the layout (the tally is g->bytes) */
int vq_kvg_rows(const vq_kvg *g, int local);
/* ring: a sliding-window layer frees its pages no query from pos0 on can see (vq_kvg_ring_drop) */
vq_status vq_kvg_append(vq_kvg *g, int local, int pos0, int n, const float *k, const float *v,
                        int ring, vq_err *err);
vq_status vq_kvg_read(const vq_kvg *g, int local, float *k, float *v, int32_t *pos, vq_err *err);
/* every element of n rows of k and v (xs floats each: all the cache's KV heads) finite, in range */
vq_status vq_kvg_check_rows(const vq_kvg *g, int layer, int pos0, int n, const float *k, const float *v,
                            vq_err *err);
/* kv_attend.c: attention of the group layers local .. local + nloc - 1 (one cache layer: nloc =
 * vh, each a KV head of it); layer = the cache's for messages; span: its attention span (0:
 * unbounded) */
vq_status vq_kvg_attend(const vq_kvg *g, int local, int nloc, int layer, int span, int n_q,
                        const int *q_pos, const float *q, float *out, vq_err *err);

vq_status vq_kvg_scratch_init(vq_kvg *g);
size_t vq_kvg_bytes_at(const vq_kvg *g, int rows);   /* layout bytes when each layer holds rows */
int vq_kvg_truncate(vq_kvg *g, int local, int n, int dry);
/* A sliding-window layer's ring (layer span > 0): free the leading pages whose rows all have
 * positions <= limit, moving only page pointers. Returns rows freed. */
int vq_kvg_ring_drop(vq_kvg *g, int local, int32_t limit);
void vq_kvg_free_spares(vq_kvg *g, vq_kv_layer *L);   /* before anything else frees pages */
/* kv.c, the store's part of eviction: the observer's buffer for rows held; the rows a policy
 * starts with (observe appended rows, through the row's observe_row); compaction: drop the coded
 * blocks whose rows are all flagged (drop[storage index] != 0; window and sink rows cannot be
 * dropped), the pages compacted and the empty ones freed. Returns rows dropped. */
size_t vq_kvg_obs_bytes(const vq_kvg *g, int rows);
/* VQ_POL_QSTATS: doubles of one local layer's query statistics (H x G x (1 + d + d*d)) */
size_t vq_kvg_qst_floats(const vq_kvg *g);
/* VQ_POL_QSTATS (evict.c): queries of cache layer `layer` (n_q x n_heads x d, after RoPE, at
 * q_pos) into the statistics of the group's local layers local .. local + vh - 1 */
void vq_kvg_observe_queries(vq_kvg *g, int local, int n_q, const int *q_pos, const float *q);
int vq_kvg_drop_rows(vq_kvg *g, int local, const unsigned char *drop);
/* demote.c: the fate table's rows (kv_policy.h: vq_kv_fate_at / vq_kv_fate_of); the router and
 * the eviction step reach the demoted tier only through g->ev.fate's hooks. */
/* kv_spec.c: demote='s normalized text "codec:params" from the tier codec's two states */
void vq_kv_demote_print(vq_kv_demote *dm, const vq_codec_state *sk, const vq_codec_state *sv);
/* kv_attend.c: bytes at the head of a tier's attention slot (its output, handed to the main pass) */
size_t vq_kvg_tier_out_bytes(const vq_kvg *g);
/* Window and sink rows (wprec=): fp16 or fp32 elements, or 8-bit codes (wprec=8: per head, blocks
 * of 32 elements, each an fp16 scale and 32 int8, x = scale * q: llama.cpp's q8_0 block, 34 bytes;
 * head_dim % 32 == 0). Bytes of one head's part of a row, of a whole row (H heads). */
#define VQ_KV_Q8_BLOCK 34
#define VQ_KV_FP_MAX_D 4096   /* the largest head_dim a cache takes (kv_layers.c) */
static inline size_t vq_kv_fp_head_bytes(const vq_kvg *kv) {
    return kv->wprec == 8 ? (size_t)(kv->d / 32) * VQ_KV_Q8_BLOCK : (size_t)kv->d * (kv->wprec == 16 ? 2 : 4);
}
static inline size_t vq_kv_fp_row_bytes(const vq_kvg *kv) { return (size_t)kv->H * vq_kv_fp_head_bytes(kv); }
/* one head's d elements <-> the window's format (dst / src: that head's bytes) */
static inline void vq_kv_fp_put(const vq_kvg *kv, uint8_t *dst, const float *x) {
    const int d = kv->d;
    if (kv->wprec == 16) { vq_f32_to_f16_row(x, (vq_f16 *)(void *)dst, (size_t)d); return; }
    if (kv->wprec == 32) { memcpy(dst, x, (size_t)d * sizeof(float)); return; }
    for (int b = 0; b < d / 32; b++, dst += VQ_KV_Q8_BLOCK) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
        const float sc = amax / 127.0f, inv = sc > 0.0f ? 1.0f / sc : 0.0f;
        const vq_f16 h = vq_f32_to_f16(sc);
        memcpy(dst, &h, 2);
        for (int i = 0; i < 32; i++) dst[2 + i] = (uint8_t)(int8_t)lrintf(xb[i] * inv);
    }
}
static inline void vq_kv_fp_get(const vq_kvg *kv, const uint8_t *src, float *x) {
    const int d = kv->d;
    if (kv->wprec == 16) { vq_f16_to_f32_row((const vq_f16 *)(const void *)src, x, (size_t)d); return; }
    if (kv->wprec == 32) { memcpy(x, src, (size_t)d * sizeof(float)); return; }
    for (int b = 0; b < d / 32; b++, src += VQ_KV_Q8_BLOCK) {
        vq_f16 h;
        memcpy(&h, src, 2);
        const float sc = vq_f16_to_f32(h);
        for (int i = 0; i < 32; i++) x[32 * b + i] = sc * (float)(int8_t)src[2 + i];
    }
}
/* The codec state serving (side, local layer, KV head h of the local layer). With heads=ada a
 * local layer is KV head local % vh of cache layer local / vh: the states are the shared layout's
 * (one per cache layer, or per KV head for per_head codecs), not copies. */
static inline int vq_kvg_head0(const vq_kvg *g, int local) { return g->vh > 1 ? local % g->vh : 0; }
/* The key pre-transform of (local layer, KV head h of it): c, a, 1/a (d floats each), or NULL */
static inline const float *vq_kvg_kx(const vq_kvg *g, int local, int h) {
    if (!g->kx) return NULL;
    return g->kx + ((size_t)(local / g->vh) * g->kx_hc + (size_t)(vq_kvg_head0(g, local) + h)) * 3 * (size_t)g->d;
}
/* rows of d floats, in place: to the coded domain (a ⊙ (x − c)) and back (x ⊘ a + c) */
static inline void vq_kx_fwd(const float *kx, int d, float *x, int rows) {
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < d; i++) x[(size_t)r * d + i] = kx[d + i] * (x[(size_t)r * d + i] - kx[i]);
}
static inline void vq_kx_inv(const float *kx, int d, float *x, int rows) {
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < d; i++) x[(size_t)r * d + i] = x[(size_t)r * d + i] * kx[2 * d + i] + kx[i];
}
static inline const vq_codec_state *vq_kvg_st(const vq_kvg *g, int side, int local, int h) {
    const int hh = vq_kvg_head0(g, local) + h;
    return &g->st[side][(size_t)(local / g->vh) * g->hs[side] + (g->hs[side] > 1 ? hh : 0)];
}

/* ---- heads=ada (adakv.c): the router's per-head paths (local: the cache layer's first local layer) ---- */
vq_status vq_ada_append(vq_kvg *g, int local, int layer, int pos0, int n, const float *k, const float *v,
                        int ring, vq_err *err);
vq_status vq_ada_read(const vq_kvg *g, int local, int layer, float *k, float *v, int32_t *pos, vq_err *err);
#endif
