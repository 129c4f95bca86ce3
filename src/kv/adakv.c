/* adakv.c: heads=ada, AdaKV's per-head budgets (Feng et al., arXiv 2407.11550) on top of any
 * eviction policy. The store normally shares a row across a layer's KV heads (a page holds every
 * head's codes for it), so a row goes for all heads or none. With heads=ada a group keeps each KV
 * head of a cache layer as a local layer of its own (kv.c: vh local layers per cache layer, one
 * head each), so pages, window, sink rows, positions, page skipping, compaction and scores exist
 * per (layer, head) with the code unchanged; this file holds the spec keys, the allocator (the top
 * H * B (block, head) pairs of a layer by score, each head kept at least floor * B rows), the
 * eviction step that applies it, and the router's per-head append and read-back. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kv/kv_impl.h"

#define ADA_MAX_HEADS 1024   /* vq_kv_create's bound on n_kv_heads */

/* ---- spec keys: heads=ada|shared, floor=F ---- */
int vq_ada_is_key(const char *key) { return !strcmp(key, "heads") || !strcmp(key, "floor"); }

vq_status vq_ada_key(vq_evict_cfg *ev, const char *key, const char *val, char *msg, size_t cap) {
    const unsigned bit = !strcmp(key, "heads") ? 1u : 2u;
    if (ev->ada_seen & bit) { snprintf(msg, cap, "eviction key '%s' given twice", key); return VQ_ERR_ARG; }
    ev->ada_seen |= bit;
    if (bit == 1) {
        if (!strcmp(val, "ada")) ev->ada = 1;
        else if (!strcmp(val, "shared")) ev->ada = 0;
        else {
            snprintf(msg, cap, "heads=%s is neither ada (rows per KV head, budgets allocated across a "
                     "layer's heads) nor shared (the default: a row is kept for every head or none)", val);
            return VQ_ERR_ARG;
        }
        return VQ_OK;
    }
    char *end = NULL;
    double x = strtod(val, &end);
    if (end == val || *end || !isfinite(x) || x < 0.0 || x > 1.0) {
        snprintf(msg, cap, "floor=%s is out of range (0..1: each head keeps at least floor x budget rows)", val);
        return VQ_ERR_ARG;
    }
    ev->floor = x;
    return VQ_OK;
}

vq_status vq_ada_check(vq_evict_cfg *ev, char *msg, size_t cap) {
    if ((ev->ada_seen & 2) && !ev->ada) {
        snprintf(msg, cap, "floor= applies only with heads=ada (the per-head budgets' safeguard)");
        return VQ_ERR_ARG;
    }
    if (!(ev->ada_seen & 2)) ev->floor = 0.2;   /* AdaKV's alpha */
    return VQ_OK;
}

int vq_ada_print(const vq_evict_cfg *ev, char *out, size_t cap) {
    if (!ev->ada) { if (cap) out[0] = 0; return 0; }
    return snprintf(out, cap, ",heads=ada,floor=%.6g", ev->floor);
}

/* ---- the allocator ---- */
/* Higher score first; ties: the newer block (so the older goes first, as in the shared layout's
 * step), then the lower head (equal scores in every head, e.g. streaming_llm's positions, then
 * share the budget evenly instead of favouring head 0). */
static int cmp_cand(const void *a, const void *b) {
    const vq_ada_cand *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    if (x->b != y->b) return x->b > y->b ? -1 : 1;
    return x->h < y->h ? -1 : x->h > y->h;
}

/* A layer of H heads, budget B rows per head (H * B in all). c[0..n): the candidate blocks of
 * every head (rpb rows each: scored, not protected); prot[h]: the rows head h keeps whatever
 * happens (sinks, recent, window, sink=S rows, candidates' blocks that hold a protected row).
 * Sorts c by cmp_cand and sets c[i].keep: first each head's best blocks until it holds
 * F = ceil(floor * B) rows (the safeguard; in whole blocks, never past B: a head then holds at
 * least min(F, the most rows <= B its blocks allow)), then the best of the rest while the layer
 * holds at most H * B rows (AdaKV's top-k across heads, at block granularity). kept_rows[h] gets
 * the rows head h then holds. Returns the blocks kept. */
int vq_ada_alloc(vq_ada_cand *c, int n, int H, const int *prot, int rpb, int B, double floor, int *kept_rows) {
    if (n > 1) qsort(c, (size_t)n, sizeof *c, cmp_cand);
    const long F = (long)ceil(floor * B);
    long total = 0;
    int kept = 0, forced[ADA_MAX_HEADS];
    for (int h = 0; h < H; h++) {
        const long up = F > prot[h] ? (F - prot[h] + rpb - 1) / rpb : 0, cap = B > prot[h] ? (B - prot[h]) / rpb : 0;
        forced[h] = (int)VQ_MIN(up, cap);
        kept_rows[h] = prot[h];
    }
    for (int i = 0; i < n; i++) {
        c[i].keep = forced[c[i].h] > 0;
        if (c[i].keep) { forced[c[i].h]--; kept_rows[c[i].h] += rpb; kept++; }
    }
    for (int h = 0; h < H; h++) total += kept_rows[h];
    long room = (long)H * B > total ? ((long)H * B - total) / rpb : 0;
    for (int i = 0; i < n && room > 0; i++)
        if (!c[i].keep) {
            c[i].keep = 1;
            kept_rows[c[i].h] += rpb;
            kept++;
            room--;
        }
    return kept;
}

/* One eviction step of the group's l-th cache layer: its heads' candidates (each head scored by
 * the policy alone, pooled per head for snapkv), allocated across the heads, dropped per head. */
int vq_ada_evict_layer(vq_kvg *g, int l, int next_pos) {
    const int vh = g->vh, v0 = l * vh, rpb = g->rpb_store, B = vq_evict_budget(g, v0, next_pos);
    long rows = 0;
    for (int h = 0; h < vh; h++) rows += vq_kvg_rows(g, v0 + h);
    int dropped = 0;
    if (rows > (long)vh * B) {
        int prot[ADA_MAX_HEADS], kept[ADA_MAX_HEADS], n = 0;
        for (int h = 0; h < vh; h++) {
            const int nc = vq_evict_candidates(g, v0 + h, next_pos, g->ev_blk);
            for (int i = 0; i < nc; i++) g->ada_cand[n++] = (vq_ada_cand){g->ev_blk[i].s, h, g->ev_blk[i].b, 0};
            prot[h] = vq_kvg_rows(g, v0 + h) - nc * rpb;
        }
        vq_ada_alloc(g->ada_cand, n, vh, prot, rpb, B, g->ev.floor, kept);
        unsigned char *drop = (unsigned char *)(void *)g->ev_tmp;   /* free once the candidates are out */
        for (int h = 0; h < vh; h++) {
            memset(drop, 0, (size_t)g->layers[v0 + h].n_coded);
            int any = 0;
            for (int i = 0; i < n; i++)
                if (g->ada_cand[i].h == h && !g->ada_cand[i].keep) {
                    memset(drop + (size_t)g->ada_cand[i].b * rpb, 1, (size_t)rpb);
                    any = 1;
                }
            if (any) dropped += vq_kvg_drop_rows(g, v0 + h, drop);
        }
    }
    for (int h = 0; h < vh; h++) vq_evict_step_done(g, v0 + h);
    return dropped;
}

/* ---- the router's per-head paths ---- */
/* Rows of every KV head: checked whole first (nothing is stored when any element is bad or any
 * head is full), then each head's columns appended to its local layer (k + h * d, rows xs apart).
 * A failure after that (out of memory) leaves the earlier heads with the rows, as a failed append
 * of a later layer does; the session truncates back to its position either way. */
vq_status vq_ada_append(vq_kvg *g, int local, int layer, int pos0, int n, const float *k, const float *v,
                        int ring, vq_err *err) {
    for (int h = 0; h < g->vh; h++) {
        const int rows = vq_kvg_rows(g, local + h);
        if ((int64_t)rows + n > g->dims.max_ctx)
            return vq_err_set(err, VQ_ERR_RANGE, "vq_kv_append: layer %d KV head %d holds %d rows, +%d "
                              "exceeds max_ctx %d", layer, h, rows, n, g->dims.max_ctx);
    }
    vq_status rc = vq_kvg_check_rows(g, layer, pos0, n, k, v, err);
    for (int h = 0; !rc && h < g->vh; h++)
        rc = vq_kvg_append(g, local + h, pos0, n, k + (size_t)h * g->d, v + (size_t)h * g->d, ring, err);
    return rc;
}

/* vq_kv_read of a per-head layer: the heads' rows interleaved back into rows of every head, which
 * needs them to hold the same positions in the same order (before any eviction step has told them
 * apart, or with a budget covering every row); else VQ_ERR_STATE pointing at vq_kv_read_head. */
vq_status vq_ada_read(const vq_kvg *g, int local, int layer, float *k, float *v, int32_t *pos, vq_err *err) {
    const int rows = vq_kvg_rows(g, local), d = g->d, vh = g->vh;
    for (int h = 1; h < vh; h++)
        if (vq_kvg_rows(g, local + h) != rows)
            return vq_err_set(err, VQ_ERR_STATE, "vq_kv_read: layer %d: its KV heads hold different rows (KV "
                              "head 0 %d, head %d %d; heads=ada): read each with vq_kv_read_head", layer, rows,
                              h, vq_kvg_rows(g, local + h));
    float *hk = malloc(((size_t)rows * d + 1) * sizeof(float)), *hv = malloc(((size_t)rows * d + 1) * sizeof(float));
    int32_t *hp = malloc(((size_t)rows + 1) * sizeof(int32_t));
    vq_status st = hk && hv && hp ? VQ_OK : vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_read: out of memory");
    for (int h = 0; !st && h < vh; h++) {
        st = vq_kvg_read(g, local + h, hk, hv, h ? hp : pos, err);
        for (int r = 0; !st && h && r < rows; r++)
            if (hp[r] != pos[r])
                st = vq_err_set(err, VQ_ERR_STATE, "vq_kv_read: layer %d: KV head %d holds position %d where "
                                "head 0 holds %d (heads=ada): read each with vq_kv_read_head", layer, h, hp[r],
                                pos[r]);
        for (int r = 0; !st && r < rows; r++) {
            memcpy(k + ((size_t)r * vh + h) * d, hk + (size_t)r * d, (size_t)d * sizeof(float));
            memcpy(v + ((size_t)r * vh + h) * d, hv + (size_t)r * d, (size_t)d * sizeof(float));
        }
    }
    free(hk); free(hv); free(hp);
    return st;
}
