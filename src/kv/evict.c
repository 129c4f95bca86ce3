/* evict.c: the eviction step, on top of any codec, and the cache-level eviction calls. A step
 * asks the group's policy row (kv_policy.c) for one score per row, picks the candidate blocks
 * (coded blocks with no protected row: sinks, recent rows; the window and sink=S rows are never
 * candidates), asks the allocator row (heads=shared | heads=ada) which of them stay, then hands the
 * rest to the group's fate row (drop | demote: g->dm.fate, kv_policy.h) and has the store drop
 * (kv.c) them. The policy's scores
 * come from the store's observers (appended rows in kv.c, attention in kv_attend.c).
 * Rows keep their true positions: nothing is renumbered, so kept keys keep their rotary phase
 * and the next row is appended at its true position (the session's, never the row count).
 * Calls go one way: the router -> here -> the store -> the tables; the fate row only through its
 * pointer (docs/eviction.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kv/kv_impl.h"

#define ADA_MAX_HEADS 1024   /* vq_kv_create's bound on n_kv_heads */

static int32_t pos_at(const vq_kvg *g, const vq_kv_layer *L, int c) {
    return ((const int32_t *)(const void *)L->pages[c / g->P])[c % g->P];
}

/* the position of a layer's row i (coded rows, then the window) */
static int32_t row_pos(const vq_kvg *g, const vq_kv_layer *L, int i) {
    return i < L->n_coded ? pos_at(g, L, i) : L->win_pos[(L->win_start + i - L->n_coded) % g->win_cap];
}

/* a step's drop set of one local layer: handed to the group's fate row first (demote= re-codes
 * the rows into its tier; drop: nothing), then dropped from the store */
static int drop_rows(vq_kvg *g, int local, const unsigned char *drop) {
    if (g->dm.fate && g->dm.fate->take) g->dm.fate->take(g, local, drop);
    return vq_kvg_drop_rows(g, local, drop);
}

/* ---- one eviction step of a cache layer ---- */
static int budget(const vq_kvg *g, int local, int next_pos) {   /* rows per head */
    const vq_evict_cfg *ev = &g->ev.cfg;
    double B = ev->budget_ratio ? ceil(ev->budget * next_pos) : ev->budget;
    if (ev->pol->budget) B = ev->pol->budget(ev, B, next_pos, g->gl[local], g->n_layers_all);
    return (int)VQ_MAX(1.0, VQ_MIN(B, (double)(1 << 24)));
}

/* VQ_POL_QSTATS: the view's keys, value norms, statistics and averaged RoPE for local layer
 * `local` (next_pos: the step's next position; kvpress averages over the next 512). Returns the
 * buffer to free (NULL: out of memory, the view left without them). */
#define VQ_EA_FUTURE 512
static void *qstats_view(const vq_kvg *g, int local, int next_pos, vq_pol_view *v) {
    const vq_kv_layer *L = &g->layers[local];
    const int d = g->d, H = g->H, nr = v->nr, all = nr + L->sink_count;
    const size_t w = (size_t)H * d;
    const size_t nf = 2 * (size_t)all * w + (size_t)nr * H + (size_t)d * d + (size_t)all, nd = 2 * (size_t)d * d + 3 * (size_t)d + (size_t)nr;
    char *buf = malloc(nd * sizeof(double) + nf * sizeof(float));
    if (!buf) return NULL;
    double *work = (double *)(void *)buf;
    float *k = (float *)(void *)(work + nd), *val = k + (size_t)all * w, *vn = val + (size_t)all * w, *R = vn + (size_t)nr * H;
    int32_t *pos = (int32_t *)(void *)(R + (size_t)d * d);
    vq_err e;
    if (vq_kvg_read(g, local, k, val, pos, &e)) { free(buf); return NULL; }
    for (int i = 0; i < nr; i++)
        for (int h = 0; h < H; h++) {
            double t = 0;
            for (int x = 0; x < d; x++) t += (double)val[(size_t)i * w + (size_t)h * d + x] * val[(size_t)i * w + (size_t)h * d + x];
            vn[(size_t)i * H + h] = (float)sqrt(t);
        }
    const float *rp = g->ev.rope + (size_t)local * (size_t)(d / 2 + 2);
    vq_pol_avg_rope(R, d, (int)rp[d / 2], g->ev.rope_neox, rp, rp[d / 2 + 1], next_pos, VQ_EA_FUTURE);
    v->d = d;
    v->G = g->G;
    v->k = k;
    v->vn = vn;
    v->qs = g->ev.qst + (size_t)local * vq_kvg_qst_floats(g);
    v->rbar = R;
    v->work = work;
    return buf;
}

void vq_kvg_observe_queries(vq_kvg *g, int local, int n_q, const int *q_pos, const float *q) {
    const int d = g->d, H = g->H, G = g->G, nh = H * G * g->vh;
    const size_t per = 1 + (size_t)d + (size_t)d * d;
    float x[1024];
    if (!g->ev.qst || d > 1024) return;
    for (int lo = local; lo < local + g->vh; lo++) {
        const float *rp = g->ev.rope + (size_t)lo * (size_t)(d / 2 + 2);
        const int rot = (int)rp[d / 2];
        const double msc = rp[d / 2 + 1] != 0 ? 1.0 / rp[d / 2 + 1] : 1.0;
        double *qs = g->ev.qst + (size_t)lo * vq_kvg_qst_floats(g);
        for (int t = 0; t < n_q; t++) {
            if (q_pos[t] < g->ev.cfg.sinks) continue;
            for (int hg = 0; hg < H * G; hg++) {   /* this local layer's query heads */
                const int qh = (lo - local) * H * G + hg;
                memcpy(x, q + ((size_t)t * nh + qh) * d, (size_t)d * sizeof(float));
                if (rot) vq_pol_rope(x, d, rot, g->ev.rope_neox, rp, -(double)q_pos[t], msc);
                double *st = qs + (size_t)hg * per, *sq = st + 1 + d;
                st[0] += 1;
                for (int a = 0; a < d; a++) {
                    st[1 + a] += x[a];
                    const double xa = x[a];
                    for (int b = 0; b < d; b++) sq[(size_t)a * d + b] += xa * x[b];
                }
            }
        }
    }
}

/* The score of each row a layer holds (coded rows, then the window; sinks are never candidates):
 * what an eviction step ranks and vq_kv_evict_scores reports. Higher = kept. posbuf: room for the
 * rows' positions (read by rows that score by position). next_pos: the step's next position. */
static void row_scores(const vq_kvg *g, int local, float *rs, int32_t *posbuf, int next_pos) {
    const vq_kv_layer *L = &g->layers[local];
    const int nr = L->n_coded + L->win_count;
    vq_pol_view v = {.sc = L->ev_score, .cap = (size_t)g->ev.cap, .H = g->H, .nr = nr, .pos = NULL, .ev = &g->ev.cfg};
    if (g->ev.cfg.pol->flags & VQ_POL_POS) {
        for (int i = 0; i < nr; i++) posbuf[i] = row_pos(g, L, i);
        v.pos = posbuf;
    }
    void *buf = NULL;
    if ((g->ev.cfg.pol->flags & VQ_POL_QSTATS) && !(buf = qstats_view(g, local, next_pos, &v))) {
        memset(rs, 0, (size_t)nr * sizeof(float));   /* out of memory: no scores (the oldest rows go) */
        return;
    }
    g->ev.cfg.pol->row_scores(&v, rs);
    free(buf);
}

/* The candidates of a step of local layer `local` (KV head h of its cache layer) into out, block
 * order: every coded block holding no protected row (position < sinks or >= next_pos - recent),
 * scored by the mean of its rows' scores (max-pooled for VQ_POL_POOL rows). Uses g->ev.tmp. */
static int candidates(vq_kvg *g, int local, int h, int next_pos, vq_ada_cand *out) {
    const vq_evict_cfg *ev = &g->ev.cfg;
    vq_kv_layer *L = &g->layers[local];
    const int rpb = g->rpb_store, nb = L->n_coded / rpb, nr = L->n_coded + L->win_count;
    float *rs = g->ev.tmp, *bs = g->ev.tmp + g->ev.cap;
    row_scores(g, local, rs, (int32_t *)(void *)bs, next_pos);   /* coded rows and the window (position order) */
    if (ev->pol->flags & VQ_POL_POOL) {   /* pooled into bs, then back */
        int nw = nr;   /* avg: the rows before the observation window */
        if (ev->poolfn) for (nw = 0; nw < nr && row_pos(g, L, nw) < next_pos - ev->obs;) nw++;
        vq_pool_scores(rs, nr, nw, ev->pool, ev->poolfn, bs);
        memcpy(rs, bs, (size_t)nr * sizeof(float));
    }
    int nc = 0;
    for (int b = 0; b < nb; b++) {
        int prot = 0;
        double s = 0;
        for (int t = 0; t < rpb; t++) {
            int32_t p = pos_at(g, L, b * rpb + t);
            prot |= p < ev->sinks || p >= next_pos - ev->recent;
            s += rs[b * rpb + t];
        }
        if (!prot) out[nc++] = (vq_ada_cand){(float)(s / rpb), h, b, 0};
    }
    return nc;
}

static void step_done(vq_kvg *g, int local) {   /* snapkv: the observation window restarts */
    vq_kv_layer *L = &g->layers[local];
    if ((g->ev.cfg.pol->flags & VQ_POL_WINDOWED) && L->ev_score)
        for (int h = 0; h < g->H; h++)
            memset(L->ev_score + (size_t)h * g->ev.cap, 0, (size_t)(L->n_coded + L->win_count) * sizeof(float));
}

/* One eviction step of the group's l-th cache layer (local layers l * vh .. l * vh + vh - 1: one
 * with heads=shared, one per KV head with heads=ada): each head's candidates, scored by the policy
 * alone; the allocator row marks the blocks kept under the budget; the rest dropped per head.
 * Returns rows dropped. */
static int step_layer(vq_kvg *g, int l, int next_pos) {
    const int vh = g->vh, v0 = l * vh, rpb = g->rpb_store, B = budget(g, v0, next_pos);
    long rows = 0, nb = 0;
    for (int h = 0; h < vh; h++) {
        rows += vq_kvg_rows(g, v0 + h);
        nb += g->layers[v0 + h].n_coded / rpb;
    }
    int dropped = 0;
    if (rows > (long)vh * B && nb > 0) {
        int prot[ADA_MAX_HEADS], kept[ADA_MAX_HEADS], n = 0;
        for (int h = 0; h < vh; h++) {
            const int nc = candidates(g, v0 + h, h, next_pos, g->ev.cand + n);
            prot[h] = vq_kvg_rows(g, v0 + h) - nc * rpb;
            n += nc;
        }
        g->ev.cfg.alloc->select(g->ev.cand, n, vh, prot, rpb, B, g->ev.cfg.floor, kept);
        unsigned char *drop = (unsigned char *)(void *)g->ev.tmp;   /* free once the candidates are out */
        for (int h = 0; h < vh; h++) {
            memset(drop, 0, (size_t)g->layers[v0 + h].n_coded);
            for (int i = 0; i < n; i++)
                if (g->ev.cand[i].h == h && !g->ev.cand[i].keep)
                    memset(drop + (size_t)g->ev.cand[i].b * rpb, 1, (size_t)rpb);
            dropped += drop_rows(g, v0 + h, drop);
        }
    }
    for (int h = 0; h < vh; h++) step_done(g, v0 + h);
    return dropped;
}

/* ---- the cache-level calls (the session's schedule, tests, diagnostics) ---- */
int vq_kv_evicting(const vq_kv *kv) {
    for (int i = 0; kv && i < kv->n_groups; i++)
        if (kv->g[i]->ev.cfg.pol) return 1;
    return 0;
}

void vq_kv_evict_begin(vq_kv *kv, int pos0, int n) {
    for (int i = 0; kv && n > 0 && i < kv->n_groups; i++) {
        vq_kvg *g = kv->g[i];
        if (!g->ev.cfg.pol || !g->ev.attn) continue;
        const unsigned f = g->ev.cfg.pol->flags;
        /* which queries feed the scores: a prompt's last obs (snapkv), the last (tova), or all */
        if (n > 1)
            g->ev.obs_from = (f & VQ_POL_WINDOWED) ? pos0 + n - g->ev.cfg.obs : (f & VQ_POL_RESET) ? pos0 + n - 1 : 0;
        else g->ev.obs_from = 0;
        if (f & VQ_POL_RESET)   /* the rows held now (appended rows start at 0 anyway) */
            for (int l = 0; l < g->dims.n_layers; l++) {
                vq_kv_layer *L = &g->layers[l];
                const size_t nr = (size_t)(L->n_coded + L->win_count);
                for (int h = 0; h < g->H; h++) memset(L->ev_score + (size_t)h * g->ev.cap, 0, nr * sizeof(float));
            }
    }
}

static int step_group(vq_kvg *g, int next_pos) {
    int d = 0;
    const size_t held = g->bytes;
    for (int l = 0; l < g->dims.n_layers / g->vh; l++) d += step_layer(g, l, next_pos);
    g->ev.steps = 0;
    /* pages were freed: give them back, or RSS stays at the peak (pages smaller than glibc's
     * mmap threshold live in the heap, e.g. 4-bit codes: measured 1.28x the accounting without) */
    if (g->bytes < held) vq_heap_release();
    return d;
}

long vq_kv_evict_end(vq_kv *kv, int pos0, int n) {
    long d = 0;
    for (int i = 0; kv && n > 0 && i < kv->n_groups; i++) {
        vq_kvg *g = kv->g[i];
        if (!g->ev.cfg.pol) continue;
        g->ev.obs_from = 0;
        if (n > 1 || ++g->ev.steps >= g->ev.cfg.every) d += step_group(g, pos0 + n);
    }
    return d;
}

long vq_kv_evict_now(vq_kv *kv, int next_pos) {
    long d = 0;
    for (int i = 0; kv && i < kv->n_groups; i++)
        if (kv->g[i]->ev.cfg.pol) d += step_group(kv->g[i], next_pos);
    return d;
}

long vq_kv_evicted(const vq_kv *kv) {
    long d = 0;
    for (int i = 0; kv && i < kv->n_groups; i++) d += kv->g[i]->ev.dropped;
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
        while (c < L->n_coded && pos_at(g, L, c) != pos[i]) c++;
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
    if (!dry) drop_rows(g, local, drop);
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
    if (!L->ev_score && !(g->ev.cfg.pol && (g->ev.cfg.pol->flags & VQ_POL_POS)))
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_evict_scores: layer %d has no eviction policy", layer);
    const int nr = L->n_coded + L->win_count;
    int32_t top = -1;
    for (int i = 0; i < nr; i++) top = VQ_MAX(top, row_pos(g, L, i));
    for (int i = 0; pos && i < nr; i++) pos[i] = row_pos(g, L, i);
    row_scores(g, kv->ll[layer], out, (int32_t *)(void *)g->ev.tmp, top + 1);
    /* heads=ada: the sum over the KV heads (as the shared layout's score), while they hold the same
     * rows in the same order; once their rows differ there is no one row list to report */
    for (int h = 1; h < g->vh; h++) {
        const vq_kv_layer *Lh = &g->layers[kv->ll[layer] + h];
        int same = Lh->n_coded == L->n_coded && Lh->win_count == L->win_count;
        for (int i = 0; same && i < L->n_coded; i++) same = pos_at(g, Lh, i) == pos_at(g, L, i);
        if (!same)
            return vq_err_set(err, VQ_ERR_STATE, "vq_kv_evict_scores: layer %d: its KV heads hold different rows "
                              "(heads=ada after an eviction step): no one row list to score", layer);
        const unsigned f = g->ev.cfg.pol->flags;
        if ((f & VQ_POL_POS) && !(f & VQ_POL_ATTN) && !g->ev.cfg.pol->observe_row)
            continue;   /* scores from positions alone: the same in every head */
        float *t = g->ev.tmp + g->ev.cap;   /* free here: the positions went to the first half */
        row_scores(g, kv->ll[layer] + h, t, (int32_t *)(void *)g->ev.tmp, top + 1);
        for (int i = 0; i < nr; i++) out[i] += t[i];
    }
    return VQ_OK;
}
