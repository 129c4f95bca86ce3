/* demote.c: demote mode of token eviction, the "demote" row of the fate table (kv_policy.h: what a
 * step does with the rows it evicts; the other row, "drop", loses them). A spec part
 * demote=CODEC[:params] (with evict=) gives
 * each evicting group a tier: a second group of the same layers, coded with that codec. An
 * eviction step decodes the blocks it would drop and appends their rows to the tier at their true
 * positions instead of losing them (mixed-precision KV: MiKV, ZipCache); attention then covers
 * both tiers (kv_attend.c merges the two passes exactly). Here: the row's hooks, the tier's
 * creation (attach: the router calls it once the group is made), the re-coding (take: the
 * eviction step, evict.c, calls it through g->dm.fate before the store drops the rows), its
 * truncation, and the cache-level calls. The spec's check of the codec
 * and the tier's normalized text are the parser's (kv_spec.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kv/kv_impl.h"

/* ---- the tier ---- */
/* dm.buf: K and V of one main store block (rpb rows of H x d), a decode scratch of rpb x d, the
 * block's positions, then one flag byte per row a layer can hold */
static size_t dm_buf_bytes(const vq_kvg *g) {
    const size_t rpb = (size_t)g->rpb_store, w = (size_t)g->H * g->d;
    return (2 * rpb * w + rpb * g->d) * sizeof(float) + rpb * sizeof(int32_t) + (size_t)g->dims.max_ctx;
}

static vq_status demote_attach(vq_kvg *g, const vq_kv_parsed *sp0, const char *spec, uint64_t seed, vq_err *err) {
    vq_kv_parsed *t = calloc(1, sizeof *t), *sp = malloc(sizeof *sp);
    if (!t || !sp) {
        free(t);
        free(sp);
        return vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_create: out of memory (demote tier)");
    }
    *sp = *sp0;   /* its dm.norm is printed again from the tier's codec states */
    t->codec[0] = t->codec[1] = sp->dm.codec;
    memcpy(t->p, sp->dm.p, sizeof t->p);
    memcpy(t->np, sp->dm.np, sizeof t->np);
    t->window = 0;   /* the store's ring then holds only a partial block's rows until it fills */
    t->wprec = sp->wprec;
    t->page = sp->page;
    t->cache_layers = sp->cache_layers;
    /* the key pre-transform (kmean= / kscale=) is the store's: the tier codes its keys the same way */
    t->kmean = sp->kmean;
    t->kscale = sp->kscale;
    if (sp->dm.codec->needs_calib || sp->kmean || sp->kscale > 0) memcpy(t->calib, sp->calib, sizeof t->calib);
    char label[600];
    snprintf(label, sizeof label, "%.500s (demote=%s)", spec, sp->dm.codec->name);
    vq_err e;
    vq_err_clear(&e);
    /* the same seed: layer L's tier codec states are those of a plain cache of the tier's codec */
    vq_kvg *T = vq_kvg_create(t, label, &g->dims, g->gl, seed, &e);
    free(t);
    if (!T) {
        vq_status rc = vq_err_set(err, e.code ? e.code : VQ_ERR_ARG, "kv spec '%.300s': demote=%s: %s", spec,
                                  sp->dm.codec->name, e.msg);
        free(sp);
        return rc;
    }
    T->n_layers_all = g->n_layers_all;
    T->is_tier = 1;   /* its attention slots also carry its output to the main pass */
    vq_aligned_free(T->scratch);
    vq_aligned_free(T->slot_busy);
    T->dm.bytes = dm_buf_bytes(g);
    T->dm.buf = vq_aligned_alloc(T->dm.bytes);
    if (vq_kvg_scratch_init(T) || !T->dm.buf) {
        vq_kvg_destroy(T);
        free(sp);
        return vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_create: out of memory (demote tier of '%.300s')", spec);
    }
    g->dm.tier = T;
    vq_kv_demote_print(&sp->dm, &T->st[0][0], &T->st[1][0]);
    vq_kv_normalize(g->spec, sizeof g->spec, &g->st[0][0], &g->st[1][0], sp, g->R, g->wprec, g->P, g->S);
    free(sp);
    return VQ_OK;
}

static int32_t row_pos(const vq_kvg *g, const vq_kv_layer *L, int c) {
    return ((const int32_t *)(const void *)L->pages[c / g->P])[c % g->P];
}

/* one main store block (rows c .. c + rpb_store) decoded: k, v row-major (rows x H x d) */
static void read_block(const vq_kvg *g, int local, int c, float *k, float *v, float *tmp, int32_t *pos) {
    const vq_kv_layer *L = &g->layers[local];
    const int rpb = g->rpb_store, d = g->d, rin = c % g->P;
    const size_t w = (size_t)g->H * d;
    const uint8_t *page = L->pages[c / g->P];
    for (int t = 0; t < rpb; t++) pos[t] = ((const int32_t *)(const void *)page)[rin + t];
    for (int s = 0; s < 2; s++) {
        const int rb = g->rpb[s];
        float *out = s ? v : k;
        for (int h = 0; h < g->H; h++) {
            const vq_codec_state *st = vq_kvg_st(g, s, local, h);
            const uint8_t *src = page + (s ? g->off_v[h] : g->off_k[h]) + (size_t)(rin / rb) * st->block_bytes;
            for (int t = 0; t < rpb; t += rb)
                st->codec->decode(st, src + (size_t)(t / rb) * st->block_bytes, tmp + (size_t)t * d);
            const float *kx = s ? NULL : vq_kvg_kx(g, local, h);
            if (kx) vq_kx_inv(kx, d, tmp, rpb);
            for (int t = 0; t < rpb; t++)
                memcpy(out + (size_t)t * w + (size_t)h * d, tmp + (size_t)t * d, (size_t)d * sizeof(float));
        }
    }
}

/* A sliding-window layer: tier rows at positions <= lim are invisible to every later query (they
 * come at the next position or later); whole tier blocks of them are freed, as the main ring does. */
static void span_drop(vq_kvg *T, int local, int64_t lim, unsigned char *flag) {
    vq_kv_layer *TL = &T->layers[local];
    const size_t rpb = (size_t)T->rpb_store;
    int any = 0;
    int32_t top = -1;
    for (size_t b = 0; b < (size_t)TL->n_coded / rpb; b++) {
        int all = 1;
        int32_t mx = -1;
        for (size_t t = 0; t < rpb && all; t++) {
            int32_t p = row_pos(T, TL, (int)(b * rpb + t));
            all = p <= lim;
            mx = VQ_MAX(mx, p);
        }
        memset(flag + b * rpb, all, rpb);
        if (all) { any = 1; top = VQ_MAX(top, mx); }
    }
    if (!any) return;
    vq_kvg_drop_rows(T, local, flag);
    TL->ring_lo = VQ_MAX(TL->ring_lo, top + 1);
}

static void demote_rows(vq_kvg *g, int local, const unsigned char *drop) {
    vq_kvg *T = g->dm.tier;
    const vq_kv_layer *L = &g->layers[local];
    const int rpb = g->rpb_store, nb = L->n_coded / rpb, d = g->d;
    const size_t w = (size_t)g->H * d;
    float *k = T->dm.buf, *v = k + (size_t)rpb * w, *tmp = v + (size_t)rpb * w;
    int32_t *pos = (int32_t *)(void *)(tmp + (size_t)rpb * d);
    unsigned char *flag = (unsigned char *)(pos + rpb);
    /* a sliding-window layer: rows no later query can see are dropped, not demoted */
    int64_t lim = INT64_MIN;
    if (L->span > 0 && L->n_coded + L->win_count > 0) {
        int32_t newest = L->win_count ? L->win_pos[(L->win_start + L->win_count - 1) % g->win_cap]
                                      : row_pos(g, L, L->n_coded - 1);
        lim = (int64_t)newest + 1 - L->span;
    }
    for (int b = 0; b < nb; b++) {
        int all = 1;
        for (int t = 0; t < rpb && all; t++) all = drop[b * rpb + t] != 0;
        if (!all) continue;   /* vq_kvg_drop_rows keeps a block listed in part */
        read_block(g, local, b * rpb, k, v, tmp, pos);
        /* a code may decode a little past the fp16 range the store accepts (a rotation's error) */
        for (size_t i = 0; i < 2 * (size_t)rpb * w; i++) k[i] = VQ_MAX(-VQ_KV_ABS_MAX, VQ_MIN(VQ_KV_ABS_MAX, k[i]));
        for (int i = 0; i < rpb;) {   /* runs of consecutive positions, each one append */
            if (pos[i] <= lim) { i++; continue; }
            int j = i + 1;
            while (j < rpb && pos[j] == pos[j - 1] + 1) j++;
            vq_err e;
            /* ring 0: the tier's positions are in no order, its own span_drop frees it instead;
             * a failed append (out of memory) leaves those rows evicted, as without demote */
            if (vq_kvg_append(T, local, pos[i], j - i, k + (size_t)i * w, v + (size_t)i * w, 0, &e) == VQ_OK)
                T->dm.rows += j - i;
            i = j;
        }
    }
    if (lim > INT64_MIN) span_drop(T, local, lim, flag);
}

/* Truncate the tier of a group layer to positions < n (see vq_kvg_truncate): a tier block holding
 * a row at or past n goes whole, and the bound drops to the smallest position below n it held. */
static int demote_truncate(vq_kvg *g, int local, int n, int dry) {
    vq_kvg *T = g->dm.tier;
    vq_kv_layer *TL = &T->layers[local];
    const int span = g->layers[local].span, rpb = T->rpb_store;
    if (span > 0 && TL->ring_lo > VQ_MAX(0, (int64_t)n - span + 1)) n = 0;   /* as the main ring */
    unsigned char *flag = (unsigned char *)(T->dm.buf) + dm_buf_bytes(g) - (size_t)g->dims.max_ctx;
    int bound = n, any = 0;
    for (int b = 0; b < TL->n_coded / rpb; b++) {
        int cut = 0;
        for (int t = 0; t < rpb; t++) cut |= row_pos(T, TL, b * rpb + t) >= n;
        for (int t = 0; t < rpb && cut; t++) bound = VQ_MIN(bound, row_pos(T, TL, b * rpb + t));
        if (!dry) memset(flag + (size_t)b * rpb, cut, (size_t)(unsigned)rpb);
        any |= cut;
    }
    if (dry) return bound;
    if (any) vq_kvg_drop_rows(T, local, flag);
    /* the staging ring: rows at or past n go, the others keep their order */
    const size_t wrow = vq_kv_fp_row_bytes(T);
    int j = 0;
    for (int i = 0; i < TL->win_count; i++) {
        const int si = (TL->win_start + i) % T->win_cap, sj = (TL->win_start + j) % T->win_cap;
        if (TL->win_pos[si] >= n) continue;
        if (si != sj) {
            memcpy((uint8_t *)TL->win_k + (size_t)sj * wrow, (uint8_t *)TL->win_k + (size_t)si * wrow, wrow);
            memcpy((uint8_t *)TL->win_v + (size_t)sj * wrow, (uint8_t *)TL->win_v + (size_t)si * wrow, wrow);
            TL->win_pos[sj] = TL->win_pos[si];
        }
        j++;
    }
    TL->win_count = j;
    if (n == 0) TL->ring_lo = 0;
    return bound;
}

/* ---- the fate table (kv_policy.h: what a step does with the rows it evicts) ---- */
static const vq_kv_fate FATES[] = {
    {"drop", "evicted rows are lost (the store frees their pages)", NULL, NULL, NULL},
    {"demote", "demote=CODEC[:params]: evicted rows are re-coded into a second tier at their true "
     "positions; attention covers both tiers", demote_attach, demote_rows, demote_truncate},
};

const vq_kv_fate *vq_kv_fate_at(int i) {
    return i >= 0 && i < (int)VQ_ARRAY_LEN(FATES) ? &FATES[i] : NULL;
}

const vq_kv_fate *vq_kv_fate_of(const vq_kv_parsed *sp) { return &FATES[sp && sp->dm.codec ? 1 : 0]; }

/* ---- the cache-level calls ---- */
static const vq_kvg *tier_of(const vq_kv *kv, int layer) {
    if (!kv || layer < 0 || layer >= kv->dims.n_layers) return NULL;
    return kv->g[kv->lg[layer]]->dm.tier;
}

int vq_kv_demoted_rows(const vq_kv *kv, int layer) {
    const vq_kvg *T = tier_of(kv, layer);
    return T ? vq_kvg_rows(T, kv->ll[layer]) : 0;
}

int vq_kv_demoted_pages(const vq_kv *kv, int layer) {
    const vq_kvg *T = tier_of(kv, layer);
    return T ? T->layers[kv->ll[layer]].n_pages : 0;
}

vq_status vq_kv_read_demoted(const vq_kv *kv, int layer, float *k, float *v, int32_t *pos, vq_err *err) {
    const vq_kvg *T = tier_of(kv, layer);
    if (!T) return vq_err_set(err, VQ_ERR_ARG, "vq_kv_read_demoted: layer %d has no demoted tier "
                              "(no demote= in its spec, or a bad layer)", layer);
    return vq_kvg_read(T, kv->ll[layer], k, v, pos, err);
}

long vq_kv_demoted(const vq_kv *kv) {
    long n = 0;
    for (int i = 0; kv && i < kv->n_groups; i++)
        if (kv->g[i]->dm.tier) n += kv->g[i]->dm.tier->dm.rows;
    return n;
}
