/* evict.c: token eviction, on top of any codec. Policies are rows of one table (what a policy
 * observes and how it turns that into a score per row); the store keys that configure them
 * (evict=, budget=, sinks=, recent=, every=, ...) are parsed here; an eviction step scores the
 * coded rows of a layer, keeps sinks and the recent rows, and compacts the pages it keeps.
 * Rows keep their true positions: nothing is renumbered, so kept keys keep their rotary phase
 * and the next row is appended at its true position (the session's, never the row count). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kv/kv_impl.h"

enum {
    EV_ATTN = 1,      /* observes decode attention's softmax weights (kv_attend.c) */
    EV_KNORM = 2,     /* observes key norms at append */
    EV_RESET = 4,     /* the scores are the latest observed step only (tova) */
    EV_WINDOWED = 8,  /* scores from an observation window, cleared after each eviction step */
    EV_POOL = 16,     /* scores max-pooled over neighbouring rows (snapkv) */
    EV_PYRAMID = 32,  /* per-layer budget schedule (pyramidkv) */
    EV_GUMBEL = 64,   /* Gumbel-noised, tempered softmax of the logits (keyformer) */
    EV_POS = 128,     /* score = position: the most recent rows win (streaming_llm) */
    EV_FILTER = 256,  /* observes k . filter at append, the filter calibrated (qfilters) */
    EV_EXPECT = 512,  /* observes the expected log-attention at append, from query statistics;
                         per-head softmax over the rows at the step (expected_attention) */
};

struct vq_evict_policy {
    const char *name;
    unsigned flags;
    const char *help;
};

static const vq_evict_policy POLICIES[] = {
    {"streaming_llm", EV_POS, "the sinks and the most recent rows (score = position)"},
    {"h2o", EV_ATTN, "attention accumulated over every query since the row arrived (heavy hitters)"},
    {"tova", EV_ATTN | EV_RESET, "the latest query's attention"},
    {"knorm", EV_KNORM, "key L2 norm: score = -sum over KV heads of ||k||, so LOW-norm keys are kept"},
    {"snapkv", EV_ATTN | EV_WINDOWED | EV_POOL,
     "attention of the last obs prompt queries (in decode: of the queries since the last step), "
     "max-pooled over pool rows"},
    {"pyramidkv", EV_ATTN | EV_WINDOWED | EV_POOL | EV_PYRAMID,
     "snapkv with a per-layer budget: budget * (1 + slope * (1 - 2 l / (L - 1))), more rows low"},
    {"keyformer", EV_ATTN | EV_GUMBEL,
     "accumulated softmax((logit + Gumbel noise) / tau) (seeded by the cache seed)"},
    {"expected_attention", EV_EXPECT,
     "sum over KV heads of the softmax over rows of log sum_g E[exp(q_g . k / sqrt(d))], q_g ~ "
     "N(mean, diag var) of query head g from calib=FILE (kvpress's expected attention, stationary)"},
    {"qfilters", EV_FILTER,
     "score = sum over KV heads of k . f, f the head's Q-Filter from calib=FILE (the top direction "
     "of its queries, signed so that a higher score means more attention)"},
};
#define N_POLICIES (int)(sizeof POLICIES / sizeof POLICIES[0])

static const char *KEYS[] = {"evict", "budget", "sinks", "recent", "every", "obs", "pool", "slope", "tau"};
#define N_KEYS (int)(sizeof KEYS / sizeof KEYS[0])

int vq_evict_is_key(const char *key) {
    for (int i = 0; i < N_KEYS; i++)
        if (!strcmp(key, KEYS[i])) return 1;
    return vq_ada_is_key(key);
}
int vq_evict_needs_attn(const vq_evict_cfg *ev) { return ev->pol && (ev->pol->flags & EV_ATTN); }
int vq_evict_needs_knorm(const vq_evict_cfg *ev) { return ev->pol && (ev->pol->flags & EV_KNORM); }
int vq_evict_gumbel(const vq_evict_cfg *ev) { return ev->pol && (ev->pol->flags & EV_GUMBEL); }
int vq_evict_needs_filter(const vq_evict_cfg *ev) { return ev->pol && (ev->pol->flags & EV_FILTER); }
int vq_evict_needs_qstats(const vq_evict_cfg *ev) { return ev->pol && (ev->pol->flags & EV_EXPECT); }

static void policy_names(char *out, size_t cap) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < N_POLICIES && o < cap; i++) {
        int w = snprintf(out + o, cap - o, "%s%s", i ? ", " : "", POLICIES[i].name);
        if (w > 0) o += (size_t)w;
    }
}

static int num(const char *s, double lo, double hi, double *out) {
    char *end = NULL;
    double x = strtod(s, &end);
    if (end == s || *end || !isfinite(x) || x < lo || x > hi) return 0;
    *out = x;
    return 1;
}
static int inum(const char *s, int lo, int hi, int *out) {
    double x;
    if (!num(s, lo, hi, &x) || x != floor(x) || strchr(s, '.') || strchr(s, 'e') || strchr(s, 'E')) return 0;
    *out = (int)x;
    return 1;
}

vq_status vq_evict_key(vq_evict_cfg *ev, const char *key, const char *val, char *msg, size_t cap) {
    if (vq_ada_is_key(key)) return vq_ada_key(ev, key, val, msg, cap);   /* heads=, floor= */
    int i = 0;
    while (i < N_KEYS && strcmp(key, KEYS[i])) i++;
    if (i == N_KEYS) { snprintf(msg, cap, "'%s' is not an eviction key", key); return VQ_ERR_ARG; }
    if (ev->seen & (1u << i)) { snprintf(msg, cap, "eviction key '%s' given twice", key); return VQ_ERR_ARG; }
    ev->seen |= 1u << i;
    double x = 0;
    int ok = 1;
    switch (i) {
    case 0: {
        ev->pol = NULL;
        for (int p = 0; p < N_POLICIES; p++)
            if (!strcmp(val, POLICIES[p].name)) ev->pol = &POLICIES[p];
        if (!ev->pol) {
            char names[200];
            policy_names(names, sizeof names);
            snprintf(msg, cap, "unknown eviction policy '%s' (policies: %s)", val, names);
            return VQ_ERR_ARG;
        }
        break;
    }
    case 1:   /* an integer: rows; with a '.' (or below 1): a ratio of the positions seen */
        if (strchr(val, '.') || strchr(val, 'e') || strchr(val, 'E')) {
            ok = num(val, 1e-6, 1.0, &x);
            ev->budget_ratio = 1;
        } else {
            int t = 0;
            ok = inum(val, 1, 1 << 24, &t);
            x = t;
            ev->budget_ratio = 0;
        }
        ev->budget = x;
        if (!ok) {
            snprintf(msg, cap, "budget=%s is neither a row count (1..16777216) nor a ratio "
                     "(0 < r <= 1, written with a '.', e.g. 0.5)", val);
            return VQ_ERR_ARG;
        }
        break;
    case 2: ok = inum(val, 0, 1 << 20, &ev->sinks); break;
    case 3: ok = inum(val, 0, 1 << 20, &ev->recent); break;
    case 4: ok = inum(val, 1, 1 << 20, &ev->every); break;
    case 5: ok = inum(val, 1, 1 << 20, &ev->obs); break;
    case 6: ok = inum(val, 1, 1025, &ev->pool) && (ev->pool & 1); break;
    case 7: ok = num(val, 0.0, 1.0, &ev->slope); break;
    case 8: ok = num(val, 1e-3, 1e3, &ev->tau); break;
    }
    if (!ok) {
        static const char *range[] = {"", "", "0..1048576", "0..1048576", "1..1048576", "1..1048576",
                                      "an odd number 1..1025", "0..1", "0.001..1000"};
        snprintf(msg, cap, "%s=%s is out of range (%s)", key, val, range[i]);
        return VQ_ERR_ARG;
    }
    return VQ_OK;
}

/* after every key of a part: defaults, and keys that need evict= or another policy */
vq_status vq_evict_check(vq_evict_cfg *ev, char *msg, size_t cap) {
    if (!ev->seen && !ev->ada_seen) return VQ_OK;
    if (!ev->pol) {
        snprintf(msg, cap, "eviction keys (budget=, sinks=, recent=, every=, ...) need evict=POLICY");
        return VQ_ERR_ARG;
    }
    if (!(ev->seen & 2)) {
        snprintf(msg, cap, "evict=%s needs budget= (rows per layer, e.g. budget=512, or a ratio of "
                 "the positions seen, e.g. budget=0.5)", ev->pol->name);
        return VQ_ERR_ARG;
    }
    const unsigned f = ev->pol->flags;
    struct { int bit; int ok; const char *who; } only[] = {
        {5, !!(f & EV_WINDOWED), "snapkv, pyramidkv"}, {6, !!(f & EV_POOL), "snapkv, pyramidkv"},
        {7, !!(f & EV_PYRAMID), "pyramidkv"}, {8, !!(f & EV_GUMBEL), "keyformer"}};
    for (int i = 0; i < 4; i++)
        if ((ev->seen & (1u << only[i].bit)) && !only[i].ok) {
            snprintf(msg, cap, "%s= does not apply to evict=%s (only to %s)", KEYS[only[i].bit],
                     ev->pol->name, only[i].who);
            return VQ_ERR_ARG;
        }
    if (!(ev->seen & 4)) ev->sinks = 4;
    if (!(ev->seen & 8)) ev->recent = 32;
    if (!(ev->seen & 16)) ev->every = 16;
    if (!(ev->seen & 32)) ev->obs = 32;
    if (!(ev->seen & 64)) ev->pool = 7;
    if (!(ev->seen & 128)) ev->slope = 0.5;
    if (!(ev->seen & 256)) ev->tau = 1.0;
    return vq_ada_check(ev, msg, cap);
}

int vq_evict_keeps(const vq_evict_cfg *ev, int n) {
    if (!ev->pol) return 1;
    /* pyramidkv's smallest budget is its top layer's: budget * (1 - slope) */
    double low = ev->budget * ((ev->pol->flags & EV_PYRAMID) ? 1.0 - ev->slope : 1.0);
    return ev->budget_ratio ? low >= 1.0 : low >= n;
}

int vq_evict_print(const vq_evict_cfg *ev, char *out, size_t cap) {
    if (!ev->pol) { if (cap) out[0] = 0; return 0; }
    const unsigned f = ev->pol->flags;
    char b[40];
    if (ev->budget_ratio) snprintf(b, sizeof b, "%.6g", ev->budget);
    else snprintf(b, sizeof b, "%d", (int)ev->budget);
    if (ev->budget_ratio && !strchr(b, '.')) snprintf(b, sizeof b, "%.1f", ev->budget);
    int o = snprintf(out, cap, ";evict=%s,budget=%s,sinks=%d,recent=%d,every=%d", ev->pol->name, b,
                     ev->sinks, ev->recent, ev->every);
    if (o < 0 || (size_t)o >= cap) return o;
    if (f & EV_WINDOWED) o += snprintf(out + o, cap - (size_t)o, ",obs=%d,pool=%d", ev->obs, ev->pool);
    if ((size_t)o < cap && (f & EV_PYRAMID)) o += snprintf(out + o, cap - (size_t)o, ",slope=%.6g", ev->slope);
    if ((size_t)o < cap && (f & EV_GUMBEL)) o += snprintf(out + o, cap - (size_t)o, ",tau=%.6g", ev->tau);
    if ((size_t)o < cap) o += vq_ada_print(ev, out + o, cap - (size_t)o);
    return o;
}

size_t vq_evict_help(char *buf, size_t n) {
    size_t o = 0;
    int w = snprintf(buf + VQ_MIN(o, n), n > o ? n - o : 0,
                     "eviction keys (any codec): evict=POLICY, budget=N rows per layer or a ratio "
                     "0<r<=1 of the positions seen (written with a '.'), sinks=S first positions "
                     "always kept (default 4), recent=R last positions always kept (default 32), "
                     "every=N decode steps between eviction steps (default 16; one step also when "
                     "a prompt ends); snapkv/pyramidkv: obs=W (default 32), pool=K odd (default 7); "
                     "pyramidkv: slope=0..1 (default 0.5); keyformer: tau=T (default 1); "
                     "heads=ada (rows per KV head, AdaKV budgets across a layer's heads; default "
                     "heads=shared) with floor=0..1 (default 0.2: each head keeps >= floor * budget)\n");
    if (w > 0) o += (size_t)w;
    for (int i = 0; i < N_POLICIES; i++) {
        w = snprintf(buf + VQ_MIN(o, n), n > o ? n - o : 0, "evict=%s: %s\n", POLICIES[i].name,
                     POLICIES[i].help);
        if (w > 0) o += (size_t)w;
    }
    return o;
}

size_t vq_evict_raw_bytes(const vq_kvg *g, int rows) {
    if (!g->ev_attn || rows <= 0) return 0;
    size_t cap = (size_t)VQ_MIN(g->dims.max_ctx, (rows + g->P - 1) / g->P * g->P);
    return (size_t)g->n_slots * g->ev_nv * cap * sizeof(float);
}

/* ---- observation at append: new rows' scores start at 0 (knorm: the key norms; qfilters: the
 * keys' projections on the filters; expected_attention: the expected log-attention) ---- */
void vq_evict_observe_append(vq_kvg *g, int local, int idx0, int n, const float *k) {
    float *sc = g->layers[local].ev_score;
    if (!sc || n <= 0) return;
    const int knorm = vq_evict_needs_knorm(&g->ev), d = g->d;
    const float *filt = g->ev_cal && vq_evict_needs_filter(&g->ev) ? g->ev_cal + (size_t)local * g->H * d : NULL;
    const float *qs = g->ev_cal && vq_evict_needs_qstats(&g->ev) ? g->ev_cal + (size_t)local * g->H * g->G * 2 * d : NULL;
    for (int h = 0; h < g->H; h++)
        for (int i = 0; i < n; i++) {
            float v = 0;
            const float *x = k + (size_t)i * g->xs + (size_t)h * d;
            if (knorm) {
                double s = 0;
                for (int e = 0; e < d; e++) s += (double)x[e] * x[e];
                v = (float)sqrt(s);
            } else if (filt) {
                double s = 0;
                for (int e = 0; e < d; e++) s += (double)x[e] * filt[(size_t)h * d + e];
                v = (float)s;
            } else if (qs) {   /* log sum_g exp(mu_g.k / sqrt d + k' diag(var_g) k / (2 d)) */
                double mx = -INFINITY, z = 0;   /* an online log-sum-exp over the group */
                for (int q = 0; q < g->G; q++) {
                    const float *a = qs + ((size_t)h * g->G + q) * 2 * d, *b = a + d;
                    double t = 0;
                    for (int e = 0; e < d; e++) t += (double)x[e] * a[e] + (double)x[e] * x[e] * b[e];
                    if (t > mx) { z = z * exp(mx - t) + 1.0; mx = t; }
                    else z += exp(t - mx);
                }
                v = (float)(mx + log(z));
            }
            sc[(size_t)h * g->ev_cap + idx0 + i] = v;
        }
}

/* ---- compaction ---- */
static int32_t *row_pos(vq_kvg *g, vq_kv_layer *L, int c) {
    return (int32_t *)(void *)L->pages[c / g->P] + c % g->P;
}
/* one store block (rpb_store rows) from block index b to w: positions, and for every head the K
 * and V codes (a store block never straddles a page: P is a multiple of rpb_store) */
static void move_block(vq_kvg *g, vq_kv_layer *L, int b, int w) {
    const int rpb = g->rpb_store, cs = b * rpb, cd = w * rpb;
    uint8_t *ps = L->pages[cs / g->P], *pd = L->pages[cd / g->P];
    const int rs = cs % g->P, rd = cd % g->P;
    memmove((int32_t *)(void *)pd + rd, (int32_t *)(void *)ps + rs, (size_t)rpb * sizeof(int32_t));
    for (int s = 0; s < 2; s++) {
        const size_t bb = g->st[s][0].block_bytes, n = (size_t)(rpb / g->rpb[s]) * bb;
        for (int h = 0; h < g->H; h++) {
            size_t off = s ? g->off_v[h] : g->off_k[h];
            memmove(pd + off + (size_t)(rd / g->rpb[s]) * bb, ps + off + (size_t)(rs / g->rpb[s]) * bb, n);
        }
    }
    if (L->ev_score)
        for (int h = 0; h < g->H; h++) {
            float *sc = L->ev_score + (size_t)h * g->ev_cap;
            memmove(sc + cd, sc + cs, (size_t)rpb * sizeof(float));
        }
}

static void page_free(vq_kvg *g, void *p) {
    if (!p) return;
    vq_aligned_free(p);
    g->bytes -= g->page_bytes;
}

int vq_kvg_drop_rows(vq_kvg *g, int local, const unsigned char *drop) {
    if (g->tier) vq_demote_rows(g, local, drop);   /* demote=: re-coded into the tier first */
    vq_kv_layer *L = &g->layers[local];
    const int rpb = g->rpb_store, nb = L->n_coded / rpb;
    int w = 0;
    for (int b = 0; b < nb; b++) {
        int all = 1;
        for (int t = 0; t < rpb && all; t++) all = drop[b * rpb + t] != 0;
        if (all) continue;
        if (w != b) move_block(g, L, b, w);
        w++;
    }
    const int old = L->n_coded, nc = w * rpb;
    if (nc == old) return 0;
    if (L->ev_score)   /* the window's scores follow the coded rows */
        for (int h = 0; h < g->H; h++) {
            float *sc = L->ev_score + (size_t)h * g->ev_cap;
            memmove(sc + nc, sc + old, (size_t)L->win_count * sizeof(float));
        }
    L->n_coded = nc;
    const int need = (nc + g->P - 1) / g->P;
    vq_kvg_free_spares(g, L);
    for (int p = need; p < L->n_pages; p++) page_free(g, L->pages[p]);
    L->n_pages = VQ_MIN(L->n_pages, need);
    for (int p = 0; p < L->n_pages; p++) {
        int32_t mn = INT32_MAX;
        const int32_t *pp = (const int32_t *)(const void *)L->pages[p];
        for (int r = 0; r < VQ_MIN(g->P, nc - p * g->P); r++) mn = VQ_MIN(mn, pp[r]);
        L->page_minpos[p] = mn;
    }
    g->ev_dropped += old - nc;
    return old - nc;
}

/* ---- one eviction step of a layer ---- */
int vq_evict_budget(const vq_kvg *g, int local, int next_pos) {
    const vq_evict_cfg *ev = &g->ev;
    double B = ev->budget_ratio ? ceil(ev->budget * next_pos) : ev->budget;
    if (ev->pol->flags & EV_PYRAMID) {
        const int Lc = g->n_layers_all, l = g->gl[local];
        if (Lc > 1) B = floor(B * (1.0 + ev->slope * (1.0 - 2.0 * l / (Lc - 1))) + 0.5);
    }
    return (int)VQ_MAX(1.0, VQ_MIN(B, (double)(1 << 24)));
}

/* candidates sorted by score, ties by block index (the older block goes first) */
static int cmp_blk(const void *a, const void *b) {
    const vq_evict_blk *x = a, *y = b;
    if (x->s < y->s) return -1;
    if (x->s > y->s) return 1;
    return x->b < y->b ? -1 : x->b > y->b;
}

/* The score of each row a layer holds (coded rows, then the window; sinks are never candidates):
 * what an eviction step ranks and vq_kv_evict_scores reports. Higher = kept. */
void vq_evict_row_scores(const vq_kvg *g, int local, float *rs) {
    const vq_kv_layer *L = &g->layers[local];
    const unsigned f = g->ev.pol->flags;
    const int nr = L->n_coded + L->win_count;
    if (f & EV_POS) {
        for (int i = 0; i < nr; i++)
            rs[i] = (float)(i < L->n_coded ? ((const int32_t *)(const void *)L->pages[i / g->P])[i % g->P]
                                           : L->win_pos[(L->win_start + i - L->n_coded) % g->win_cap]);
        return;
    }
    if (f & EV_EXPECT) {   /* per KV head: softmax over the rows of the expected log-attention */
        for (int i = 0; i < nr; i++) rs[i] = 0;
        for (int h = 0; h < g->H; h++) {
            const float *sc = L->ev_score + (size_t)h * g->ev_cap;
            double mx = -INFINITY, z = 0;
            for (int i = 0; i < nr; i++) mx = fmax(mx, sc[i]);
            for (int i = 0; i < nr; i++) z += exp(sc[i] - mx);
            for (int i = 0; i < nr; i++) rs[i] += (float)(exp(sc[i] - mx) / z);
        }
        return;
    }
    for (int i = 0; i < nr; i++) {
        double s = 0;
        for (int h = 0; h < g->H; h++) s += L->ev_score[(size_t)h * g->ev_cap + i];
        rs[i] = (float)((f & EV_KNORM) ? -s : s);
    }
}

/* The candidates of a step (into out, block order): every coded block holding no protected row
 * (position < sinks or >= next_pos - recent), scored by the mean of its rows' scores (pooled for
 * snapkv). Uses g->ev_tmp. */
int vq_evict_candidates(vq_kvg *g, int local, int next_pos, vq_evict_blk *out) {
    const vq_evict_cfg *ev = &g->ev;
    vq_kv_layer *L = &g->layers[local];
    const int rpb = g->rpb_store, nb = L->n_coded / rpb, nr = L->n_coded + L->win_count;
    float *rs = g->ev_tmp, *bs = g->ev_tmp + g->ev_cap;
    vq_evict_row_scores(g, local, rs);   /* coded rows and the window (storage order = position order) */
    if (ev->pol->flags & EV_POOL) {   /* max-pool, written to bs first, then back */
        const int k = ev->pool / 2;
        for (int i = 0; i < nr; i++) {
            float m = rs[i];
            for (int j = VQ_MAX(0, i - k); j <= VQ_MIN(nr - 1, i + k); j++) m = rs[j] > m ? rs[j] : m;
            bs[i] = m;
        }
        memcpy(rs, bs, (size_t)nr * sizeof(float));
    }
    int nc = 0;
    for (int b = 0; b < nb; b++) {
        int prot = 0;
        double s = 0;
        for (int t = 0; t < rpb; t++) {
            int32_t p = *row_pos(g, L, b * rpb + t);
            prot |= p < ev->sinks || p >= next_pos - ev->recent;
            s += rs[b * rpb + t];
        }
        if (!prot) out[nc++] = (vq_evict_blk){(float)(s / rpb), b};
    }
    return nc;
}

void vq_evict_step_done(vq_kvg *g, int local) {
    vq_kv_layer *L = &g->layers[local];
    if ((g->ev.pol->flags & EV_WINDOWED) && L->ev_score)
        for (int h = 0; h < g->H; h++)
            memset(L->ev_score + (size_t)h * g->ev_cap, 0, (size_t)(L->n_coded + L->win_count) * sizeof(float));
}

int vq_kvg_evict_layer(vq_kvg *g, int local, int next_pos) {
    const vq_evict_cfg *ev = &g->ev;
    if (!ev->pol) return 0;
    vq_kv_layer *L = &g->layers[local];
    const int rows = L->sink_count + L->n_coded + L->win_count, B = vq_evict_budget(g, local, next_pos);
    const int rpb = g->rpb_store, nb = L->n_coded / rpb;
    int dropped = 0;
    if (rows > B && nb > 0) {
        float *rs = g->ev_tmp;
        const int nc = vq_evict_candidates(g, local, next_pos, g->ev_blk);
        qsort(g->ev_blk, (size_t)nc, sizeof *g->ev_blk, cmp_blk);
        const int want = VQ_MIN(nc, (rows - B + rpb - 1) / rpb);
        unsigned char *drop = (unsigned char *)(void *)rs;   /* rs is no longer needed */
        memset(drop, 0, (size_t)L->n_coded);
        for (int i = 0; i < want; i++) memset(drop + (size_t)g->ev_blk[i].b * rpb, 1, (size_t)rpb);
        dropped = vq_kvg_drop_rows(g, local, drop);
    }
    vq_evict_step_done(g, local);
    return dropped;
}

/* ---- the cache-level calls (the session's schedule, tests, diagnostics) ---- */
int vq_kv_evicting(const vq_kv *kv) {
    for (int i = 0; kv && i < kv->n_groups; i++)
        if (kv->g[i]->ev.pol) return 1;
    return 0;
}

void vq_kv_evict_begin(vq_kv *kv, int pos0, int n) {
    for (int i = 0; kv && n > 0 && i < kv->n_groups; i++) {
        vq_kvg *g = kv->g[i];
        if (!g->ev.pol || !g->ev_attn) continue;
        const unsigned f = g->ev.pol->flags;
        /* which queries feed the scores: a prompt's last obs (snapkv), the last (tova), or all */
        if (n > 1) g->ev_obs_from = (f & EV_WINDOWED) ? pos0 + n - g->ev.obs : (f & EV_RESET) ? pos0 + n - 1 : 0;
        else g->ev_obs_from = 0;
        if (f & EV_RESET)   /* the rows held now (appended rows start at 0 anyway) */
            for (int l = 0; l < g->dims.n_layers; l++) {
                vq_kv_layer *L = &g->layers[l];
                const size_t nr = (size_t)(L->n_coded + L->win_count);
                for (int h = 0; h < g->H; h++) memset(L->ev_score + (size_t)h * g->ev_cap, 0, nr * sizeof(float));
            }
    }
}

static int step_group(vq_kvg *g, int next_pos) {
    int d = 0;
    const size_t held = g->bytes;
    if (g->ev.ada)   /* heads=ada: budgets across each cache layer's KV heads (adakv.c) */
        for (int l = 0; l < g->dims.n_layers / g->vh; l++) d += vq_ada_evict_layer(g, l, next_pos);
    else
        for (int l = 0; l < g->dims.n_layers; l++) d += vq_kvg_evict_layer(g, l, next_pos);
    g->ev_steps = 0;
    /* pages were freed: give them back, or RSS stays at the peak (pages smaller than glibc's
     * mmap threshold live in the heap, e.g. 4-bit codes: measured 1.28x the accounting without) */
    if (g->bytes < held) vq_heap_release();
    return d;
}

long vq_kv_evict_end(vq_kv *kv, int pos0, int n) {
    long d = 0;
    for (int i = 0; kv && n > 0 && i < kv->n_groups; i++) {
        vq_kvg *g = kv->g[i];
        if (!g->ev.pol) continue;
        g->ev_obs_from = 0;
        if (n > 1 || ++g->ev_steps >= g->ev.every) d += step_group(g, pos0 + n);
    }
    return d;
}

long vq_kv_evict_now(vq_kv *kv, int next_pos) {
    long d = 0;
    for (int i = 0; kv && i < kv->n_groups; i++)
        if (kv->g[i]->ev.pol) d += step_group(kv->g[i], next_pos);
    return d;
}

long vq_kv_evicted(const vq_kv *kv) {
    long d = 0;
    for (int i = 0; kv && i < kv->n_groups; i++) d += kv->g[i]->ev_dropped;
    return d;
}

/* Drop the coded rows of local layer `local` at the listed positions (whole blocks only); dry:
 * only check. head: for messages (-1: the layer's rows are shared by its heads). */
static vq_status drop_positions(vq_kvg *g, int local, int layer, int head, const int32_t *pos, int n, int dry,
                                vq_err *err) {
    vq_kv_layer *L = &g->layers[local];
    char who[48];
    if (head >= 0) snprintf(who, sizeof who, "layer %d KV head %d", layer, head);
    else snprintf(who, sizeof who, "layer %d", layer);
    unsigned char *drop = calloc((size_t)L->n_coded + 1, 1);
    if (!drop) return vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_evict_positions: out of memory");
    for (int i = 0; i < n; i++) {
        int c = 0;
        while (c < L->n_coded && *row_pos(g, L, c) != pos[i]) c++;
        if (c == L->n_coded) {
            free(drop);
            return vq_err_set(err, VQ_ERR_ARG, "vq_kv_evict_positions: %s holds no coded row at "
                              "position %d (window and sink rows are never evicted)", who, pos[i]);
        }
        drop[c] = 1;
    }
    for (int b = 0; b < L->n_coded / g->rpb_store; b++) {
        int cnt = 0;
        for (int t = 0; t < g->rpb_store; t++) cnt += drop[b * g->rpb_store + t];
        if (cnt && cnt < g->rpb_store) {
            free(drop);
            return vq_err_set(err, VQ_ERR_ARG, "vq_kv_evict_positions: %s: block %d (%d rows) is "
                              "listed in part; a coded block is evicted whole", who, b, g->rpb_store);
        }
    }
    if (!dry) vq_kvg_drop_rows(g, local, drop);
    free(drop);
    return VQ_OK;
}

vq_status vq_kv_evict_positions(vq_kv *kv, int layer, const int32_t *pos, int n, vq_err *err) {
    if (!kv || layer < 0 || layer >= kv->dims.n_layers || n < 0 || (n && !pos))
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_evict_positions: bad arguments (layer %d, n %d)", layer, n);
    vq_kvg *g = kv->g[kv->lg[layer]];
    const int local = kv->ll[layer];
    if (g->vh == 1) return drop_positions(g, local, layer, -1, pos, n, 0, err);
    for (int h = 0; h < g->vh; h++) {   /* heads=ada: from every KV head, checked before any changes */
        vq_status st = drop_positions(g, local + h, layer, h, pos, n, 1, err);
        if (st) return st;
    }
    for (int h = 0; h < g->vh; h++) drop_positions(g, local + h, layer, h, pos, n, 0, err);
    return VQ_OK;
}

vq_status vq_kv_evict_head_positions(vq_kv *kv, int layer, int h, const int32_t *pos, int n, vq_err *err) {
    if (!kv || layer < 0 || layer >= kv->dims.n_layers || h < 0 || h >= kv->dims.n_kv_heads || n < 0 || (n && !pos))
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_evict_head_positions: bad arguments (layer %d, head %d, n %d)",
                          layer, h, n);
    vq_kvg *g = kv->g[kv->lg[layer]];
    if (g->vh == 1)
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_evict_head_positions: layer %d stores rows shared by its KV "
                          "heads (spec '%s'); per-head rows need heads=ada", layer, g->spec);
    return drop_positions(g, kv->ll[layer] + h, layer, h, pos, n, 0, err);
}

vq_status vq_kv_evict_scores(const vq_kv *kv, int layer, float *out, int32_t *pos, vq_err *err) {
    if (!kv || layer < 0 || layer >= kv->dims.n_layers || !out)
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_evict_scores: bad arguments (layer %d)", layer);
    vq_kvg *g = kv->g[kv->lg[layer]];
    vq_kv_layer *L = &g->layers[kv->ll[layer]];
    if (!L->ev_score && !(g->ev.pol && (g->ev.pol->flags & EV_POS)))
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_evict_scores: layer %d has no eviction policy", layer);
    const int nr = L->n_coded + L->win_count;
    for (int i = 0; pos && i < nr; i++)
        pos[i] = i < L->n_coded ? *row_pos(g, L, i) : L->win_pos[(L->win_start + i - L->n_coded) % g->win_cap];
    vq_evict_row_scores(g, kv->ll[layer], out);
    /* heads=ada: the sum over the KV heads (as the shared layout's score), while they hold the same
     * rows in the same order; once their rows differ there is no one row list to report */
    for (int h = 1; h < g->vh; h++) {
        const vq_kv_layer *Lh = &g->layers[kv->ll[layer] + h];
        int same = Lh->n_coded == L->n_coded && Lh->win_count == L->win_count;
        for (int i = 0; same && i < L->n_coded; i++) same = *row_pos(g, (vq_kv_layer *)Lh, i) == *row_pos(g, L, i);
        if (!same)
            return vq_err_set(err, VQ_ERR_STATE, "vq_kv_evict_scores: layer %d: its KV heads hold different rows "
                              "(heads=ada after an eviction step): no one row list to score", layer);
        if (g->ev.pol->flags & EV_POS) continue;   /* positions: the same in every head */
        float *t = g->ev_tmp + g->ev_cap;   /* free here: row_scores uses ev_tmp's first half only */
        vq_evict_row_scores(g, kv->ll[layer] + h, t);
        for (int i = 0; i < nr; i++) out[i] += t[i];
    }
    return VQ_OK;
}
