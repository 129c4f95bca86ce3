/* kv_policy.h: the cache's token policies, rows of constant tables (kv_policy.c), and the contract
 * the store and the eviction step call them through. Not a public header (docs/eviction.md).
 *
 * Who owns what. The store (kv.c, kv_attend.c) owns pages, rows and positions; it never decides
 * which row goes. A policy row owns how scores are made: what it observes (appended keys,
 * attention weights, positions), how the observed scores become one score per row, and its
 * layer's budget. An allocator row (heads=shared | heads=ada) owns how a layer's budget is shared
 * out. The eviction step (evict.c) ties them together: it asks the row for scores, the allocator
 * for the blocks kept, and the store to drop (or, with demote=, the demoted tier to take) the rest.
 * The spec parser (kv_spec.c) owns every key: a row declares the optional keys it takes
 * (`keys`, bits of vq_pol_key) and the parser validates, defaults and prints them.
 *
 * THE CONTRACT (every hook is a pure function of its arguments: no store call, no allocation,
 * safe on any thread; NULL means "nothing to do"):
 *   observe appended rows  observe_row(k, d, cal, G) -> the score a new row starts with for one KV
 *                          head (k: its d floats; cal: the head's calibration part, VQ_POL_CAL_*,
 *                          or NULL). Rows of a policy without it start at 0.
 *   observe attention      flags & VQ_POL_ATTN: the store adds every observed query's softmax
 *                          weights to the row's per-head scores; reweight(a, w, b0, bn, nblk) may
 *                          first turn one query's weights (blocks b0[i] .. b0[i] + bn[i] of w)
 *                          into others (keyformer's Gumbel softmax).
 *                          VQ_POL_RESET: only the latest query counts (scores cleared at each run);
 *                          VQ_POL_WINDOWED: the last obs prompt queries, cleared after each step.
 *   step                   row_scores(v, rs): the per-head scores (v->sc, H x cap) of the nr rows
 *                          a layer holds (coded rows, then the window) -> one score per row,
 *                          higher kept (v->ev: the row's keys, e.g. chunkkv's chunk=);
 *                          VQ_POL_POOL: pooled over pool rows by the step (vq_pool_scores: max, or
 *                          poolfn=avg);
 *                          budget(ev, B, n, l, L): the rows layer l of L keeps, from the budget B
 *                          when n positions were seen (NULL: B); min_budget(ev): the smallest
 *                          factor of budget any layer gets.
 *   allocate               select(c, n, H, prot, rpb, B, floor, kept): given a cache layer's
 *                          candidate blocks (each of one KV head, scored), the rows each head keeps
 *                          whatever happens (prot) and the budget B per head, marks c[i].keep.
 *
 * THE FATE OF EVICTED ROWS (a third table, vq_kv_fate: rows "drop" and "demote", demote.c). A
 * fate row says what a step does with the rows the allocator did not keep. Unlike the hooks above
 * it acts on the group it is given (its second tier: the store's calls are its tools), so its
 * rows live above the store (demote.c) and the router and the step reach them only through the
 * group's row pointer (g->dm.fate; lib/kv_files ranks demote.c and evict.c side by side: neither
 * calls the other). Same contract shape:
 *   observe appended rows  none (a fate does not score rows)
 *   observe attention      none (demote's tier is attended with the main rows by kv_attend.c,
 *                          whose softmax the policy then observes over both tiers)
 *   step                   take(g, local, drop): local layer `local`'s rows flagged in drop[]
 *                          (whole coded blocks) are about to be dropped by the store: demote
 *                          re-codes them into its tier at their true positions; NULL (drop): lost.
 *   life                   attach(g, sp, spec, seed, err): made with the group (the tier);
 *                          truncate(g, local, n, dry): the fate's rows at positions >= n go,
 *                          returns the bound as vq_kvg_truncate does (NULL: nothing held). */
#ifndef VQ_KV_POLICY_H
#define VQ_KV_POLICY_H
#include <stddef.h>
#include <stdint.h>
#include "veloxquant.h"   /* vq_status, vq_err */

/* Every eviction key, in the order they print; the parser (kv_spec.c) reads the declarations
 * (vq_pol_keys[]) and checks a key against the row it is given with. */
enum {
    VQ_PK_EVICT, VQ_PK_BUDGET, VQ_PK_SINKS, VQ_PK_RECENT, VQ_PK_EVERY,   /* every row */
    VQ_PK_OBS, VQ_PK_POOL, VQ_PK_SLOPE, VQ_PK_TAU, VQ_PK_CHUNK, VQ_PK_SQUEEZE,   /* rows that declare them */
    VQ_PK_POOLFN, VQ_PK_BETA, VQ_PK_NORM, VQ_PK_VNORM,
    VQ_PK_N
};
/* the allocator keys (heads=shared|ada, floor=F) */
enum { VQ_AK_HEADS, VQ_AK_FLOOR, VQ_AK_N };

/* A key: name, kind ('p' the policy's name, 'b' a budget, 'i' an integer, 'o' an odd integer, 'r'
 * a real, 'a' an allocator's name, 'm' one of the names in `range`, separated by '|', stored as
 * its index), range, default (NAN: none), the range as messages print it */
typedef struct vq_pol_key {
    const char *name;
    char kind;
    double lo, hi, def;
    const char *range;
} vq_pol_key;
extern const vq_pol_key vq_pol_keys[VQ_PK_N];
extern const vq_pol_key vq_alloc_keys[VQ_AK_N];

enum {
    VQ_POL_ATTN = 1,       /* observes decode attention's softmax weights (kv_attend.c) */
    VQ_POL_RESET = 2,      /* the scores are the latest observed step only (tova) */
    VQ_POL_WINDOWED = 4,   /* scores from an observation window, cleared after each step */
    VQ_POL_POOL = 8,       /* scores pooled over neighbouring rows (the step: max or avg) */
    VQ_POL_POS = 16,       /* row_scores reads the rows' positions (v->pos) */
    VQ_POL_QSTATS = 32,    /* the store keeps the statistics of the observed queries before RoPE
                              (the session gives the layers' RoPE: vq_kv_set_rope); row_scores
                              reads them, the rows' keys and value norms (v->k, v->vn, v->qs) */
};
/* what calib=FILE must give: nothing, the Q-Filters, the query statistics, the layers' attention
 * cosines (squeeze: the store turns them into per-layer budget factors, vq_squeeze_factors) */
enum { VQ_POL_CAL_NONE, VQ_POL_CAL_FILTER, VQ_POL_CAL_QSTATS, VQ_POL_CAL_LAYERS };

/* one query's attention as the store observed it, for reweight */
typedef struct vq_pol_attn {
    uint64_t seed;   /* the cache's (keyformer's noise) */
    int layer, qp, hq;   /* the cache's layer, the query's position, its query head */
    double tau;      /* keyformer's temperature */
} vq_pol_attn;

typedef struct vq_evict_cfg vq_evict_cfg;

/* a layer's rows as a step (or vq_kv_evict_scores) sees them */
typedef struct vq_pol_view {
    const float *sc;      /* per-head scores: [h * cap + storage index] (the store keeps H x max_ctx) */
    size_t cap;
    int H, nr;            /* KV heads, rows (coded rows, then the window) */
    const int32_t *pos;   /* the rows' positions (VQ_POL_POS rows only) */
    const vq_evict_cfg *ev;   /* the policy's keys (chunkkv's chunk=) */
    /* VQ_POL_QSTATS rows only: */
    int d, G;             /* head dim, query heads per KV head */
    const float *k;       /* the rows' keys, decoded: [i][h][e] (nr x H x d) */
    const float *vn;      /* their values' L2 norms: [i][h] */
    const double *qs;     /* per KV head h, query head g: [h][g] x (1 + d + d*d): the count, the sums
                             of the queries before RoPE and of their outer products */
    const float *rbar;    /* d x d (row-major): RoPE's rotation averaged over the next positions */
    double *work;         /* scratch: 2 * d * d + 3 * d + nr doubles */
} vq_pol_view;

typedef struct vq_kv_policy {
    const char *name;
    unsigned flags;       /* VQ_POL_* */
    unsigned keys;        /* optional keys it takes: 1u << VQ_PK_OBS, ... */
    int calib;            /* VQ_POL_CAL_*: what it needs from calib=FILE */
    const char *help;
    float (*observe_row)(const float *k, int d, const float *cal, int G);
    void (*reweight)(const vq_pol_attn *a, float *w, const int *b0, const int *bn, int nblk);
    void (*row_scores)(const vq_pol_view *v, float *rs);
    double (*budget)(const vq_evict_cfg *ev, double B, int n, int l, int L);
    double (*min_budget)(const vq_evict_cfg *ev);
} vq_kv_policy;

/* A candidate of a step: a coded block b of KV head h that no protected row is in, its score s */
typedef struct vq_ada_cand { float s; int h, b, keep; } vq_ada_cand;

typedef struct vq_kv_alloc {
    const char *name;
    int per_head;         /* rows stored per KV head (the group's vh local layers per cache layer) */
    unsigned keys;        /* 1u << VQ_AK_FLOOR, ... */
    const char *help;
    /* c[0..n): the candidates; prot[h]: rows head h keeps whatever happens; B: rows per head.
     * Marks c[i].keep (may reorder c); kept_rows[h]: the rows head h then holds. Returns blocks kept. */
    int (*select)(vq_ada_cand *c, int n, int H, const int *prot, int rpb, int B, double floor, int *kept_rows);
} vq_kv_alloc;

struct vq_kvg;
struct vq_kv_parsed;
typedef struct vq_kv_fate {
    const char *name;
    const char *help;
    vq_status (*attach)(struct vq_kvg *g, const struct vq_kv_parsed *sp, const char *spec, uint64_t seed,
                        vq_err *err);
    void (*take)(struct vq_kvg *g, int local, const unsigned char *drop);
    int (*truncate)(struct vq_kvg *g, int local, int n, int dry);
} vq_kv_fate;

/* The tables (kv_policy.c), NULL-terminated walks by index */
const vq_kv_policy *vq_kv_policy_at(int i);
const vq_kv_policy *vq_kv_policy_find(const char *name);
const vq_kv_alloc *vq_kv_alloc_at(int i);
const vq_kv_alloc *vq_kv_alloc_find(const char *name);
/* SqueezeAttention's layer budgets (Wang et al., arXiv 2404.04793): the L layers' mean cos(x, x +
 * attn(x)) split into two groups by 1-D 2-means (centres started at the smallest and largest
 * cosine); the group with the higher cosine (attention changes the hidden state least) gets
 * factor p, the other 1 + (1 - p) * n_high / n_low, so the factors' mean is 1 (the total budget
 * is the same); one group only (every cosine equal): all 1. cap > 0 (a ratio budget r: 1 / r, a
 * layer cannot keep more than every row): the low group's factor is at most cap and what it cannot
 * take goes back to the high group, (L - n_low * cap) / n_high, still a mean of 1. w[L] out. */
void vq_squeeze_factors(const float *cos, int L, double p, double cap, float *w);
/* RoPE as the model applies it (vq_rope's meaning: rot pairs (2i, 2i+1), or (i, i + rot/2) when
 * neox, at angle pos * inv[i], cos/sin times mscale), on one head's d floats: x <- R(pos) x.
 * vq_pol_rope(x, ..., -pos, 1 / mscale) undoes it. */
void vq_pol_rope(float *x, int d, int rot, int neox, const float *inv, double pos, double mscale);
/* R (d x d, row-major) = the mean over positions p0 .. p0 + np - 1 of RoPE's matrix (kvpress's
 * expected attention: the future queries' rotation, averaged) */
void vq_pol_avg_rope(float *R, int d, int rot, int neox, const float *inv, double mscale, int p0, int np);
/* The pooling of VQ_POL_POOL rows' scores (the step calls it): fn 0 (poolfn=max): out[i] = the
 * max of rs over rows i - pool/2 .. i + pool/2 of 0..nr-1; fn 1 (poolfn=avg, kvpress's snapkv):
 * rows i < nw (those before the observation window) get the sum of rs over the rows of
 * i - pool/2 .. i + pool/2 inside 0..nw-1, divided by pool (zero padding), rows >= nw keep rs. */
void vq_pool_scores(const float *rs, int nr, int nw, int pool, int fn, float *out);
/* AdaKV's allocator (the heads=ada row's select; tests call it directly) */
int vq_ada_alloc(vq_ada_cand *c, int n, int H, const int *prot, int rpb, int B, double floor, int *kept_rows);
/* The fate table (demote.c, above the store): walk by index; the row a parsed spec asks for
 * (demote=CODEC: "demote", else "drop") */
const vq_kv_fate *vq_kv_fate_at(int i);
const vq_kv_fate *vq_kv_fate_of(const struct vq_kv_parsed *sp);
#endif
