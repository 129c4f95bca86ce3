/* kv.c: one group of the KV store (layers sharing a codec config): create from a spec, append
 * rows (validated, encoded into fixed-size pages once they leave the full-precision window), exact
 * byte accounting, and a reference read-back of what attention sees. The public API routes layers
 * to groups in kv_layers.c; attention lives in kv_attend.c, spec parsing in kv_spec.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kv/kv_impl.h"
#include "codec/calib.h"

static void *kv_alloc(vq_kvg *kv, size_t n) {
    if (n == 0) return NULL;
    void *p = vq_aligned_alloc(n);
    if (p) kv->bytes += n;
    return p;
}
static void kv_free(vq_kvg *kv, void *p, size_t n) {
    if (!p) return;
    vq_aligned_free(p);
    kv->bytes -= n;
}
static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }
static int gcd(int a, int b) { while (b) { int t = a % b; a = b; b = t; } return a; }

static uint64_t mix_seed(uint64_t seed, int layer, int side) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(2 * layer + side + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t ev_score_bytes(const vq_kvg *kv) {   /* a layer's eviction scores */
    return kv->ev.cfg.pol && kv->ev.cap ? (size_t)kv->H * kv->ev.cap * sizeof(float) : 0;
}
static size_t ev_cal_bytes(const vq_kvg *kv) {   /* the group's Q-Filters or query statistics */
    const size_t per = (size_t)kv->dims.n_layers * kv->H * kv->d * sizeof(float);
    const int c = kv->ev.cfg.pol ? kv->ev.cfg.pol->calib : VQ_POL_CAL_NONE;
    return c == VQ_POL_CAL_FILTER ? per : c == VQ_POL_CAL_QSTATS ? per * kv->G * 2
         : c == VQ_POL_CAL_LAYERS ? (size_t)kv->ev.cal_layers * sizeof(float) : 0;
}
static size_t ev_q_bytes(const vq_kvg *kv) {   /* VQ_POL_QSTATS: the query statistics and RoPE */
    if (!kv->ev.cfg.pol || !(kv->ev.cfg.pol->flags & VQ_POL_QSTATS)) return 0;
    return (size_t)kv->dims.n_layers * ((size_t)kv->H * kv->G * (1 + kv->d + (size_t)kv->d * kv->d) * sizeof(double) +
                                        (size_t)(kv->d / 2 + 2) * sizeof(float));
}
size_t vq_kvg_qst_floats(const vq_kvg *kv) { return (size_t)kv->H * kv->G * (1 + kv->d + (size_t)kv->d * kv->d); }
static size_t kx_bytes(const vq_kvg *kv) {   /* the key pre-transform (kmean= / kscale=) */
    return kv->kx ? (size_t)(kv->dims.n_layers / kv->vh) * kv->kx_hc * 3 * kv->d * sizeof(float) : 0;
}
static size_t layer_fixed_bytes(const vq_kvg *kv) {
    size_t wrow = vq_kv_fp_row_bytes(kv);
    return (size_t)kv->page_cap * (sizeof(uint8_t *) + sizeof(int32_t)) +
           (size_t)(kv->win_cap + kv->S) * (2 * wrow + sizeof(int32_t)) + ev_score_bytes(kv);
}

/* the codec states of a layer: the array slots and what each init allocated (heads=ada: the
 * local layers of a cache layer share its states, counted with its first) */
static size_t states_bytes(const vq_kvg *kv, int l) {
    size_t b = 0;
    if (l % kv->vh) return 0;
    for (int s = 0; s < 2; s++)
        for (int h = 0; h < kv->hs[s]; h++)
            b += sizeof(vq_codec_state) + kv->st[s][(size_t)(l / kv->vh) * kv->hs[s] + h].state_bytes;
    return b;
}

size_t vq_kvg_bytes(const vq_kvg *kv) {
    /* computed from the layout, independently of the allocation tally (tests compare both) */
    size_t b = sizeof(vq_kvg) + 2 * (size_t)kv->H * sizeof(size_t) + (size_t)kv->dims.n_layers * sizeof(int) +
               (size_t)kv->dims.n_layers * sizeof(vq_kv_layer);
    for (int l = 0; l < kv->dims.n_layers; l++) {
        b += states_bytes(kv, l);
        b += layer_fixed_bytes(kv) + (size_t)(kv->layers[l].n_pages + kv->layers[l].n_spare) * kv->page_bytes;
    }
    return b + (kv->ev.raw ? vq_kvg_obs_bytes(kv, kv->ev.raw_cap) : 0) + ev_cal_bytes(kv) + kx_bytes(kv) + ev_q_bytes(kv) +
           (kv->dm.tier ? vq_kvg_bytes(kv->dm.tier) : 0);
}
/* Rows coded (not in the window or the sink) once a layer has taken `rows` rows in order. */
static int coded_at(const vq_kvg *kv, int rows) {
    int m = rows - VQ_MIN(kv->S, rows), rpb = kv->rpb_store;
    return m >= kv->R + rpb ? (m - kv->R) / rpb * rpb : 0;
}
/* The most rows a ring layer (span W) holds: its S sinks, then consecutive positions from the
 * first row of the oldest page kept. Before an append of n rows at pos0 a page goes once all its
 * rows are <= pos0 - W, so the oldest page kept starts at pos0 - W + 2 - P or later, and after
 * the append the layer holds at most W + P + n - 2 rows past its sinks (n <= dims.max_append). */
static int ring_rows_max(const vq_kvg *kv, int span) {
    const int64_t A = kv->dims.max_append > 0 ? kv->dims.max_append : kv->dims.max_ctx;
    return (int)VQ_MIN((int64_t)kv->dims.max_ctx, (int64_t)kv->S + span + kv->P + A - 2);
}
size_t vq_kvg_bytes_at(const vq_kvg *kv, int rows) {
    size_t b = sizeof(vq_kvg) + 2 * (size_t)kv->H * sizeof(size_t) + (size_t)kv->dims.n_layers * sizeof(int) +
               (size_t)kv->dims.n_layers * sizeof(vq_kv_layer);
    for (int l = 0; l < kv->dims.n_layers; l++) {
        const int span = kv->layers[l].span, r = span > 0 ? VQ_MIN(rows, ring_rows_max(kv, span)) : rows;
        const size_t pages = (size_t)(coded_at(kv, r) + kv->P - 1) / kv->P;
        b += states_bytes(kv, l) + layer_fixed_bytes(kv) + pages * kv->page_bytes;
    }
    /* a demoted tier holds at most the rows (an upper bound, as the main layers' with eviction) */
    return b + vq_kvg_obs_bytes(kv, rows) + ev_cal_bytes(kv) + kx_bytes(kv) +
           (kv->dm.tier ? vq_kvg_bytes_at(kv->dm.tier, rows) : 0);
}

/* Truncate a layer to positions < n: every sink and window row below n is kept, and the coded
 * rows below n rounded down to a whole block (a block is coded as a unit). Returns the position
 * boundary the layer then holds everything it held below: n, lowered to the first position below
 * n that had to go with its block, and to one past the highest position held (without eviction,
 * that is the row count). dry: only compute it. */
int vq_kvg_truncate(vq_kvg *kv, int local, int n, int dry) {
    vq_kv_layer *L = &kv->layers[local];
    /* a ring layer that freed rows a query at n would see cannot be cut back to n: nothing held
     * is reusable then (the caller runs the tokens again from 0) */
    if (L->span > 0 && L->ring_lo > VQ_MAX(kv->S, (int64_t)n - L->span + 1)) n = 0;
    int sk = 0, top = -1;
    while (sk < L->sink_count && L->sink_pos[sk] < n) sk++;
    for (int i = 0; i < L->sink_count; i++) top = VQ_MAX(top, L->sink_pos[i]);
    int c = 0;   /* first coded row at or past n */
    while (c < L->n_coded) {
        const int32_t *pp = (const int32_t *)(const void *)L->pages[c / kv->P];
        if (pp[c % kv->P] >= n) break;
        c++;
    }
    int ck = c / kv->rpb_store * kv->rpb_store, wk = 0;
    if (ck == L->n_coded)
        while (wk < L->win_count && L->win_pos[(L->win_start + wk) % kv->win_cap] < n) wk++;
    int bound = n;
    for (int r = ck; r < L->n_coded; r++) {
        int32_t p = ((const int32_t *)(const void *)L->pages[r / kv->P])[r % kv->P];
        top = VQ_MAX(top, p);
        if (r < c) bound = VQ_MIN(bound, p);
    }
    for (int r = 0; r < ck; r++) top = VQ_MAX(top, ((const int32_t *)(const void *)L->pages[r / kv->P])[r % kv->P]);
    for (int i = 0; i < L->win_count; i++) {
        int32_t p = L->win_pos[(L->win_start + i) % kv->win_cap];
        top = VQ_MAX(top, p);
        if (i >= wk && p < n) bound = VQ_MIN(bound, p);
    }
    bound = VQ_MIN(bound, top + 1);   /* positions end below INT32_MAX (append, state reader) */
    if (dry) return bound;
    L->sink_count = sk;
    L->n_coded = ck;
    L->win_count = wk;
    if (n <= kv->S) L->ring_lo = 0;
    vq_kvg_free_spares(kv, L);
    int need = (ck + kv->P - 1) / kv->P;
    for (int p = need; p < L->n_pages; p++) kv_free(kv, L->pages[p], kv->page_bytes);
    L->n_pages = VQ_MIN(L->n_pages, need);
    return bound;
}

int vq_kvg_rows(const vq_kvg *kv, int l) {
    return kv->layers[l].n_coded + kv->layers[l].win_count + kv->layers[l].sink_count;
}

void vq_kvg_destroy(vq_kvg *kv) {
    if (!kv) return;
    vq_kvg_destroy(kv->dm.tier);
    vq_aligned_free(kv->dm.buf);   /* (a tier's: made by demote.c, freed with its group) */
    for (int l = 0; kv->layers && l < kv->dims.n_layers; l++) {
        vq_kv_layer *L = &kv->layers[l];
        if (L->pages) vq_kvg_free_spares(kv, L);
        for (int p = 0; L->pages && p < L->n_pages; p++) kv_free(kv, L->pages[p], kv->page_bytes);
        size_t wrow = vq_kv_fp_row_bytes(kv);
        kv_free(kv, L->pages, (size_t)kv->page_cap * sizeof(uint8_t *));
        kv_free(kv, L->page_minpos, (size_t)kv->page_cap * sizeof(int32_t));
        kv_free(kv, L->win_k, (size_t)kv->win_cap * wrow);
        kv_free(kv, L->win_v, (size_t)kv->win_cap * wrow);
        kv_free(kv, L->win_pos, (size_t)kv->win_cap * sizeof(int32_t));
        kv_free(kv, L->sink_k, (size_t)kv->S * wrow);
        kv_free(kv, L->sink_v, (size_t)kv->S * wrow);
        kv_free(kv, L->sink_pos, (size_t)kv->S * sizeof(int32_t));
        kv_free(kv, L->ev_score, ev_score_bytes(kv));
    }
    for (int s = 0; s < 2; s++) {
        for (size_t i = 0; kv->st[s] && i < (size_t)(kv->dims.n_layers / kv->vh) * kv->hs[s]; i++)
            if (kv->st[s][i].codec && kv->st[s][i].codec->fini) kv->st[s][i].codec->fini(&kv->st[s][i]);
        vq_aligned_free(kv->st[s]);
    }
    vq_aligned_free(kv->layers);
    vq_aligned_free(kv->scratch);
    vq_aligned_free(kv->slot_busy);
    vq_aligned_free(kv->enc_tmp);
    kv_free(kv, kv->ev.raw, kv->ev.raw ? vq_kvg_obs_bytes(kv, kv->ev.raw_cap) : 0);
    kv_free(kv, kv->ev.cal, ev_cal_bytes(kv));
    if (kv->ev.qst) kv_free(kv, kv->ev.qst, ev_q_bytes(kv));
    kv_free(kv, kv->kx, kx_bytes(kv));
    vq_aligned_free(kv->ev.tmp);
    vq_aligned_free(kv->ev.cand);
    vq_aligned_free(kv->off_k);
    vq_aligned_free(kv->off_v);
    vq_aligned_free(kv->gl);
    vq_aligned_free(kv);
}

void vq_kvg_clear(vq_kvg *kv) {
    for (int l = 0; l < kv->dims.n_layers; l++) {
        vq_kv_layer *L = &kv->layers[l];
        vq_kvg_free_spares(kv, L);
        for (int p = 0; p < L->n_pages; p++) kv_free(kv, L->pages[p], kv->page_bytes);
        L->n_pages = L->n_coded = L->win_start = L->win_count = L->sink_count = L->ring_lo = 0;
    }
    if (kv->dm.tier) vq_kvg_clear(kv->dm.tier);
}

void vq_kvg_free_spares(vq_kvg *kv, vq_kv_layer *L) {
    for (; L->n_spare > 0; L->n_spare--) kv_free(kv, L->pages[L->n_pages + L->n_spare - 1], kv->page_bytes);
}

int vq_kvg_ring_drop(vq_kvg *kv, int local, int32_t limit) {
    vq_kv_layer *L = &kv->layers[local];
    int np = 0;
    while (np < L->n_pages) {   /* rows are in position order; a page goes once its newest is old */
        const int u = VQ_MIN(kv->P, L->n_coded - np * kv->P);
        const int32_t *pp = (const int32_t *)(const void *)L->pages[np];
        int32_t mx = -1;
        for (int r = 0; r < u; r++) mx = VQ_MAX(mx, pp[r]);
        if (u <= 0 || mx > limit) break;
        L->ring_lo = VQ_MAX(L->ring_lo, mx + 1);
        np++;
    }
    if (!np) return 0;
    const int rows = VQ_MIN(L->n_coded, np * kv->P), keep = L->n_pages - np;
    /* the freed pages become spares behind the kept ones (rotate the pointers; np is 1 but for a
     * layer that skipped far ahead), beyond the two the next appends can want they go back */
    uint8_t *gone[8];
    const int ng = VQ_MIN(np, 8);
    for (int p = ng; p < np; p++) kv_free(kv, L->pages[p], kv->page_bytes);
    memcpy(gone, L->pages, (size_t)ng * sizeof *gone);
    memmove(L->pages, L->pages + np, (size_t)(keep + L->n_spare) * sizeof *L->pages);
    memcpy(L->pages + keep + L->n_spare, gone, (size_t)ng * sizeof *gone);
    memmove(L->page_minpos, L->page_minpos + np, (size_t)keep * sizeof *L->page_minpos);
    L->n_pages = keep;
    L->n_spare += ng;
    while (L->n_spare > 2) kv_free(kv, L->pages[keep + --L->n_spare], kv->page_bytes);
    L->n_coded -= rows;
    if (L->ev_score)   /* scores are indexed by storage row: the kept rows' move down with them */
        for (int h = 0; h < kv->H; h++) {
            float *sc = L->ev_score + (size_t)h * kv->ev.cap;
            memmove(sc, sc + rows, (size_t)(L->n_coded + L->win_count) * sizeof(float));
        }
    kv->ring_dropped += rows;
    return rows;
}

/* A group for the layers gl[0..dims->n_layers) of a cache (dims already validated). With
 * heads=ada (sp.ev.alloc->per_head) the group splits each cache layer into n_kv_heads local layers of one KV
 * head each (adakv.c); dims and gl are the cache's either way. */
vq_kvg *vq_kvg_create(const vq_kv_parsed *spp, const char *spec, const vq_kv_dims *dims,
                      const int *gl0, uint64_t seed, vq_err *err) {
    const vq_kv_parsed sp = *spp;
    if (sp.wprec == 8 && dims->head_dim % 32) {
        vq_err_set(err, VQ_ERR_ARG, "kv spec '%s': wprec=8 (window and sink rows in q8_0 blocks of 32) needs "
                   "head_dim %% 32 == 0, not %d", spec, dims->head_dim);
        return NULL;
    }
    const int vh = sp.ev.pol && sp.ev.alloc->per_head ? dims->n_kv_heads : 1;
    vq_kv_dims vd = *dims;   /* the local layers: one KV head and its G query heads each */
    vd.n_layers = dims->n_layers * vh;
    vd.n_kv_heads = dims->n_kv_heads / vh;
    vd.n_heads = dims->n_heads / vh;
    const vq_kv_dims *D = &vd;
    int *gl = malloc((size_t)vd.n_layers * sizeof(int));
    vq_kvg *kv = gl ? vq_aligned_alloc(sizeof *kv) : NULL;
    if (!kv) { free(gl); vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_create: out of memory"); return NULL; }
    for (int l = 0; l < vd.n_layers; l++) gl[l] = gl0[l / vh];
    memset(kv, 0, sizeof *kv);
    kv->bytes = sizeof *kv;
    kv->dims = *D;
    kv->vh = vh;
    kv->H = D->n_kv_heads;
    kv->G = D->n_heads / D->n_kv_heads;
    kv->d = D->head_dim;
    kv->xs = dims->n_kv_heads * D->head_dim;
    kv->qrow = dims->n_heads;
    kv->wprec = sp.wprec;
    kv->ev.cfg = sp.ev;
    kv->ev.cap = sp.ev.pol ? D->max_ctx : 0;
    kv->ev.attn = sp.ev.pol && (sp.ev.pol->flags & VQ_POL_ATTN);
    kv->n_layers_all = D->n_layers;   /* the group's; the router sets the cache's */
    kv->ev.seed = mix_seed(seed, -1, 7);
    const int NL = D->n_layers, NLc = dims->n_layers, Hc = dims->n_kv_heads;   /* local; the cache's */
    kv->gl = vq_aligned_alloc((size_t)NL * sizeof(int));
    if (!kv->gl) { free(gl); goto nomem; }
    memcpy(kv->gl, gl, (size_t)NL * sizeof(int));
    free(gl);
    gl = kv->gl;
    kv->bytes += (size_t)NL * sizeof(int);
    kv->off_k = vq_aligned_alloc((size_t)kv->H * sizeof(size_t));
    kv->off_v = vq_aligned_alloc((size_t)kv->H * sizeof(size_t));
    kv->layers = vq_aligned_alloc((size_t)NL * sizeof(vq_kv_layer));
    for (int s = 0; s < 2; s++) {   /* per cache layer, as in the shared layout */
        kv->hs[s] = sp.codec[s]->per_head ? Hc : 1;
        kv->st[s] = vq_aligned_alloc((size_t)NLc * kv->hs[s] * sizeof(vq_codec_state));
    }
    if (!kv->off_k || !kv->off_v || !kv->layers || !kv->st[0] || !kv->st[1]) goto nomem;
    kv->bytes += 2 * (size_t)kv->H * sizeof(size_t) + (size_t)NL * sizeof(vq_kv_layer) +
                 (size_t)NLc * (kv->hs[0] + kv->hs[1]) * sizeof(vq_codec_state);

    /* calib=FILE: read and checked against the cache's dims here, handed to every init, freed
     * before create returns (codecs copy what they need) */
    vq_calib cal;
    memset(&cal, 0, sizeof cal);
    if (sp.calib[0]) {
        int nl = sp.cache_layers > 0 ? sp.cache_layers : NLc;
        if (vq_calib_read(sp.calib, &cal, err) ||
            vq_calib_check(&cal, sp.calib, nl, dims->n_heads, Hc, D->head_dim, NULL, 0, err)) {
            vq_calib_free(&cal);
            vq_kvg_destroy(kv);
            return NULL;
        }
        kv->calib_hash = cal.config_hash;
        kv->calib_crc = cal.data_crc;
        snprintf(kv->calib_model, sizeof kv->calib_model, "%s", cal.model);
    }
    if (sp.ev.pol && sp.ev.pol->calib == VQ_POL_CAL_LAYERS)   /* squeeze: a factor per cache layer */
        kv->ev.cal_layers = sp.cache_layers > 0 ? sp.cache_layers : NLc;
    if (ev_cal_bytes(kv)) {   /* qfilters / expected_attention / squeeze: each layer's part, copied */
        if (!sp.calib[0]) {
            vq_err_set(err, VQ_ERR_ARG, "kv spec '%s': evict=%s needs calib=FILE (it is made from the "
                       "model's queries: veloxquant calibrate -m MODEL -f TEXT -o FILE)", spec, sp.ev.pol->name);
            vq_kvg_destroy(kv);
            return NULL;
        }
        kv->ev.cal = kv_alloc(kv, ev_cal_bytes(kv));
        if (!kv->ev.cal) { vq_calib_free(&cal); goto nomem; }
        /* a local layer's part: its KV heads' filters, its query heads' statistics (heads=ada:
         * one KV head's, from head vq_kvg_head0 of the cache layer) */
        const size_t w = (size_t)kv->H * kv->d;
        if (sp.ev.pol->calib == VQ_POL_CAL_LAYERS) {   /* the whole cache's layers, clustered together */
            vq_squeeze_factors(cal.attn_cos, kv->ev.cal_layers, sp.ev.squeeze,
                               sp.ev.budget_ratio ? 1.0 / sp.ev.budget : 0.0, kv->ev.cal);
            kv->ev.cfg.layer_w = kv->ev.cal;
        } else if (sp.ev.pol->calib == VQ_POL_CAL_FILTER)
            for (int l = 0; l < NL; l++)
                memcpy(kv->ev.cal + l * w, cal.q_filter + ((size_t)gl[l] * Hc + vq_kvg_head0(kv, l)) * kv->d,
                       w * sizeof(float));
        else
            for (int l = 0; l < NL; l++)
                for (int hq = 0; hq < D->n_heads; hq++) {   /* query head hq = h * G + q, in that order */
                    const size_t cq = (size_t)gl[l] * dims->n_heads + (size_t)vq_kvg_head0(kv, l) * kv->G + hq;
                    const float *mu = cal.q_mean + cq * kv->d;
                    const float *sq = cal.q_sq + cq * kv->d;
                    float *a = kv->ev.cal + ((size_t)l * D->n_heads + hq) * 2 * kv->d, *b = a + kv->d;
                    for (int i = 0; i < kv->d; i++) {
                        a[i] = (float)(mu[i] / sqrt((double)kv->d));
                        b[i] = (float)(fmax(0.0, (double)sq[i] - (double)mu[i] * mu[i]) / (2.0 * kv->d));
                    }
                }
    }
    int fpw = 0;
    for (int s = 0; s < 2; s++)
        for (int l = 0; l < NLc; l++)
            for (int h = 0; h < kv->hs[s]; h++) {
                vq_codec_state *st = &kv->st[s][(size_t)l * kv->hs[s] + h], *st0 = &kv->st[s][0];
                st->codec = sp.codec[s];
                st->side = s;
                st->ctx = (vq_codec_ctx){ .layer = gl0[l], .n_layers = sp.cache_layers > 0 ? sp.cache_layers : NLc,
                                          .head = h, .n_kv_heads = Hc, .n_heads = dims->n_heads,
                                          .calib = sp.calib[0] ? &cal : NULL,
                                          .calib_path = sp.calib[0] ? sp.calib : NULL };
                vq_status rc = st->codec->init(st, kv->d, s, sp.p[s], sp.np[s], mix_seed(seed, gl0[l], s), err);
                st->ctx.calib = NULL;
                st->ctx.calib_path = NULL;
                if (rc) { st->codec = sp.codec[s]; vq_calib_free(&cal); vq_kvg_destroy(kv); return NULL; }
                if (st->rows_per_block < 1 || st->block_bytes == 0 || st->acc_floats < 1 ||
                    st->d != kv->d || (st != st0 && (st->rows_per_block != st0->rows_per_block ||
                                                     st->block_bytes != st0->block_bytes ||
                                                     st->qstate_bytes != st0->qstate_bytes ||
                                                     st->acc_floats != st0->acc_floats))) {
                    vq_err_set(err, VQ_ERR_ARG, "codec %s (%s side): init filled an invalid state "
                               "(rows_per_block=%d block_bytes=%zu acc_floats=%d d=%d)", st->codec->name,
                               s ? "V" : "K", st->rows_per_block, st->block_bytes, st->acc_floats, st->d);
                    vq_calib_free(&cal);
                    vq_kvg_destroy(kv);
                    return NULL;
                }
                kv->bytes += st->state_bytes;
                fpw = VQ_MAX(fpw, st->fp_window);
            }
    if (sp.kmean || sp.kscale > 0) {   /* the key pre-transform of every (cache layer, KV head) */
        kv->kx_hc = Hc;
        kv->kx = vq_aligned_alloc((size_t)NLc * Hc * 3 * kv->d * sizeof(float));
        if (!kv->kx) { vq_calib_free(&cal); goto nomem; }
        kv->bytes += kx_bytes(kv);
        for (int l = 0; l < NLc; l++)
            for (int h = 0; h < Hc; h++) {
                float *x = kv->kx + ((size_t)l * Hc + h) * 3 * kv->d;
                vq_calib_key_affine(&cal, gl0[l], h, sp.kmean, sp.kscale, x, x + kv->d);
                for (int i = 0; i < kv->d; i++) x[2 * kv->d + i] = 1.0f / x[kv->d + i];
            }
    }
    vq_calib_free(&cal);
    kv->rpb[0] = kv->st[0][0].rows_per_block;
    kv->rpb[1] = kv->st[1][0].rows_per_block;
    kv->rpb_store = kv->rpb[0] / gcd(kv->rpb[0], kv->rpb[1]) * kv->rpb[1];
    if (kv->rpb_store > 65536) {
        vq_err_set(err, VQ_ERR_ARG, "kv spec '%s': rows per block K=%d V=%d give a block of %d rows "
                   "(max 65536)", spec, kv->rpb[0], kv->rpb[1], kv->rpb_store);
        vq_kvg_destroy(kv);
        return NULL;
    }
    kv->R = sp.window >= 0 ? sp.window : fpw;
    kv->S = VQ_MIN(sp.sink, D->max_ctx);
    /* rows per page: as asked, but never more than the context needs (a page is allocated whole) */
    int page = VQ_MIN(sp.page, D->max_ctx);
    kv->P = (page + kv->rpb_store - 1) / kv->rpb_store * kv->rpb_store;
    int wr = VQ_MIN(kv->R, D->max_ctx);
    kv->win_cap = wr + kv->rpb_store - 1;
    kv->page_cap = (D->max_ctx + kv->P - 1) / kv->P + 1;

    size_t off = align64((size_t)kv->P * sizeof(int32_t));
    for (int h = 0; h < kv->H; h++) {
        kv->off_k[h] = off;
        off = align64(off + (size_t)(kv->P / kv->rpb[0]) * kv->st[0][0].block_bytes);
        kv->off_v[h] = off;
        off = align64(off + (size_t)(kv->P / kv->rpb[1]) * kv->st[1][0].block_bytes);
    }
    kv->page_bytes = off;

    size_t wrow = vq_kv_fp_row_bytes(kv);
    for (int l = 0; l < NL; l++) {
        vq_kv_layer *L = &kv->layers[l];
        L->pages = kv_alloc(kv, (size_t)kv->page_cap * sizeof(uint8_t *));
        L->page_minpos = kv_alloc(kv, (size_t)kv->page_cap * sizeof(int32_t));
        if (!L->pages || !L->page_minpos) goto nomem;
        if (kv->win_cap > 0) {
            L->win_k = kv_alloc(kv, (size_t)kv->win_cap * wrow);
            L->win_v = kv_alloc(kv, (size_t)kv->win_cap * wrow);
            L->win_pos = kv_alloc(kv, (size_t)kv->win_cap * sizeof(int32_t));
            if (!L->win_k || !L->win_v || !L->win_pos) goto nomem;
        }
        if (kv->S > 0) {
            L->sink_k = kv_alloc(kv, (size_t)kv->S * wrow);
            L->sink_v = kv_alloc(kv, (size_t)kv->S * wrow);
            L->sink_pos = kv_alloc(kv, (size_t)kv->S * sizeof(int32_t));
            if (!L->sink_k || !L->sink_v || !L->sink_pos) goto nomem;
        }
        if (ev_score_bytes(kv)) {
            L->ev_score = kv_alloc(kv, ev_score_bytes(kv));
            if (!L->ev_score) goto nomem;
            memset(L->ev_score, 0, ev_score_bytes(kv));
        }
    }
    if (ev_q_bytes(kv)) {   /* one block: the statistics, then the layers' RoPE (none set: zeros) */
        kv->ev.qst = kv_alloc(kv, ev_q_bytes(kv));
        if (!kv->ev.qst) goto nomem;
        memset(kv->ev.qst, 0, ev_q_bytes(kv));
        kv->ev.rope = (float *)(void *)(kv->ev.qst + (size_t)kv->dims.n_layers * vq_kvg_qst_floats(kv));
    }
    if (kv->ev.cfg.pol) {   /* eviction scratch (like enc_tmp: outside the tally, in scratch_bytes) */
        kv->ev.tmp = vq_aligned_alloc(2 * (size_t)kv->ev.cap * sizeof(float));
        kv->ev.cand = vq_aligned_alloc((size_t)kv->vh * kv->ev.cap * sizeof *kv->ev.cand);
        if (!kv->ev.tmp || !kv->ev.cand) goto nomem;
    }
    if (vq_kvg_scratch_init(kv)) goto nomem;
    kv->enc_tmp = vq_aligned_alloc((size_t)kv->rpb_store * kv->d * sizeof(float));
    if (!kv->enc_tmp) goto nomem;
    vq_kv_normalize(kv->spec, sizeof kv->spec, &kv->st[0][0], &kv->st[1][0], &sp, kv->R, kv->wprec,
                    kv->P, kv->S);
    return kv;
nomem:
    vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_create: out of memory (spec '%s', %d layers)", spec, NL);
    vq_kvg_destroy(kv);
    return NULL;
}

/* ---- the store's part of eviction: the observer's buffer, the rows a policy starts with, compaction ---- */
size_t vq_kvg_obs_bytes(const vq_kvg *g, int rows) {
    if (!g->ev.attn || rows <= 0) return 0;
    size_t cap = (size_t)VQ_MIN(g->dims.max_ctx, (rows + g->P - 1) / g->P * g->P);
    return (size_t)g->n_slots * g->ev.nv * cap * sizeof(float);
}

/* ---- observe appended rows: new rows' scores start at what the policy row makes of their keys
 * (observe_row: knorm's norms, qfilters' projections on the filters, expected_attention's expected
 * log-attention), else at 0 ---- */
static void observe_append(vq_kvg *g, int local, int idx0, int n, const float *k) {
    float *sc = g->layers[local].ev_score;
    if (!sc || n <= 0) return;
    const vq_kv_policy *pol = g->ev.cfg.pol;
    const int d = g->d;
    /* one KV head's part of the calibration the row asked for (create refuses a spec without it):
     * its filter (d floats) or its query heads' statistics (G x 2 x d) */
    const size_t ch = pol->calib == VQ_POL_CAL_FILTER ? (size_t)d
                    : pol->calib == VQ_POL_CAL_QSTATS ? (size_t)g->G * 2 * d : 0;
    const float *cal = ch && g->ev.cal ? g->ev.cal + (size_t)local * g->H * ch : NULL;
    for (int h = 0; h < g->H; h++)
        for (int i = 0; i < n; i++)
            sc[(size_t)h * g->ev.cap + idx0 + i] = pol->observe_row && (!ch || cal)
                ? pol->observe_row(k + (size_t)i * g->xs + (size_t)h * d, d, cal ? cal + h * ch : NULL, g->G) : 0.0f;
}

/* ---- compaction ---- */
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
            float *sc = L->ev_score + (size_t)h * g->ev.cap;
            memmove(sc + cd, sc + cs, (size_t)rpb * sizeof(float));
        }
}

static void page_free(vq_kvg *g, void *p) {
    if (!p) return;
    vq_aligned_free(p);
    g->bytes -= g->page_bytes;
}

int vq_kvg_drop_rows(vq_kvg *g, int local, const unsigned char *drop) {
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
            float *sc = L->ev_score + (size_t)h * g->ev.cap;
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
    g->ev.dropped += old - nc;
    return old - nc;
}

/* ---- append ---- */

/* Row idx of the sequence "window rows (oldest first), then the n new rows", head h, one side. */
static void get_row(const vq_kvg *kv, const vq_kv_layer *L, int side, int idx, int h,
                    const float *src, float *dst) {
    const int d = kv->d;
    if (idx < L->win_count) {
        size_t slot = (size_t)((L->win_start + idx) % kv->win_cap);
        const uint8_t *w = side ? L->win_v : L->win_k;
        vq_kv_fp_get(kv, w + slot * vq_kv_fp_row_bytes(kv) + (size_t)h * vq_kv_fp_head_bytes(kv), dst);
    } else {
        memcpy(dst, src + (size_t)(idx - L->win_count) * kv->xs + (size_t)h * d, (size_t)d * sizeof(float));
    }
}

/* every element of n rows of xs floats (all the cache's KV heads) */
static vq_status check_rows(const vq_kvg *kv, int layer, int pos0, int n, const float *x,
                            const char *side, vq_err *err) {
    const int w = kv->xs;
    for (int i = 0; i < n; i++)
        for (int e = 0; e < w; e++) {
            float v = x[(size_t)i * w + e];
            if (!isfinite(v) || fabsf(v) > VQ_KV_ABS_MAX)
                return vq_err_set(err, VQ_ERR_ARG, "vq_kv_append: layer %d row %d (pos %d) %s head %d "
                                  "elem %d: value %g is %s", layer, i, pos0 + i, side, e / kv->d,
                                  e % kv->d, (double)v, isfinite(v) ? "beyond +-65504 (the cache's "
                                  "range, fp16 max)" : "not finite");
        }
    return VQ_OK;
}

/* Full-precision rows (the window ring and the sink): row `slot` of kb/vb <- / -> float rows */
static void put_fp_row(const vq_kvg *kv, void *kb, void *vb, int slot, const float *k, const float *v) {
    const size_t hb = vq_kv_fp_head_bytes(kv), rb = vq_kv_fp_row_bytes(kv);
    for (int h = 0; h < kv->H; h++) {
        vq_kv_fp_put(kv, (uint8_t *)kb + (size_t)slot * rb + (size_t)h * hb, k + (size_t)h * kv->d);
        vq_kv_fp_put(kv, (uint8_t *)vb + (size_t)slot * rb + (size_t)h * hb, v + (size_t)h * kv->d);
    }
}
static void get_fp_row(const vq_kvg *kv, const void *kb, const void *vb, int slot, float *k, float *v) {
    const size_t hb = vq_kv_fp_head_bytes(kv), rb = vq_kv_fp_row_bytes(kv);
    for (int h = 0; h < kv->H; h++) {
        vq_kv_fp_get(kv, (const uint8_t *)kb + (size_t)slot * rb + (size_t)h * hb, k + (size_t)h * kv->d);
        vq_kv_fp_get(kv, (const uint8_t *)vb + (size_t)slot * rb + (size_t)h * hb, v + (size_t)h * kv->d);
    }
}

vq_status vq_kvg_check_rows(const vq_kvg *g, int layer, int pos0, int n, const float *k, const float *v,
                            vq_err *err) {
    vq_status rc = check_rows(g, layer, pos0, n, k, "K", err);
    return rc ? rc : check_rows(g, layer, pos0, n, v, "V", err);
}

/* Append to local layer `local` (arguments checked by vq_kv_append, n > 0). k, v: rows xs floats
 * apart, the local layer's heads first (heads=ada: the router points them at its KV head and has
 * checked every element of the rows). */
vq_status vq_kvg_append(vq_kvg *kv, int local, int pos0, int n, const float *k, const float *v,
                        int ring, vq_err *err) {
    const int layer = kv->gl[local];
    vq_kv_layer *L = &kv->layers[local];
    int rows = L->n_coded + L->win_count + L->sink_count;
    if ((int64_t)rows + n > kv->dims.max_ctx)
        return vq_err_set(err, VQ_ERR_RANGE, "vq_kv_append: layer %d holds %d rows, +%d exceeds "
                          "max_ctx %d", layer, rows, n, kv->dims.max_ctx);
    if (kv->vh == 1) {
        vq_status rc = vq_kvg_check_rows(kv, layer, pos0, n, k, v, err);
        if (rc) return rc;
    }
    for (int h = 0; kv->kx && h < kv->H; h++) {   /* the coded keys a ⊙ (k − c) stay in the range too */
        const float *kx = vq_kvg_kx(kv, local, h);
        for (int i = 0; i < n; i++)
            for (int e = 0; e < kv->d; e++) {
                const float x = kx[kv->d + e] * (k[(size_t)i * kv->xs + (size_t)h * kv->d + e] - kx[e]);
                if (!(fabsf(x) <= VQ_KV_ABS_MAX))
                    return vq_err_set(err, VQ_ERR_ARG, "vq_kv_append: layer %d row %d (pos %d) K head %d elem %d: "
                                      "%g becomes %g under the key pre-transform (kmean=/kscale=), beyond +-65504",
                                      layer, i, pos0 + i, vq_kvg_head0(kv, local) + h, e,
                                      (double)k[(size_t)i * kv->xs + (size_t)h * kv->d + e], (double)x);
            }
    }
    /* a sliding-window layer: rows at or below pos0 - span are invisible to every query from pos0
     * on (queries come in position order; truncate refuses to go back past what the ring freed) */
    if (ring && L->span > 0 && (int64_t)pos0 - L->span >= 0) {
        vq_kvg_ring_drop(kv, local, pos0 - L->span);
        rows = L->n_coded + L->win_count + L->sink_count;
    }
    if (kv->ev.attn && rows + n > kv->ev.raw_cap) {   /* the observer's buffer grows with the rows */
        int cap = VQ_MIN(kv->dims.max_ctx, (rows + n + kv->P - 1) / kv->P * kv->P);
        float *raw = kv_alloc(kv, vq_kvg_obs_bytes(kv, cap));
        if (!raw)
            return vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_append: layer %d: out of memory for the eviction "
                              "observer (%zu bytes)", layer, vq_kvg_obs_bytes(kv, cap));
        kv_free(kv, kv->ev.raw, kv->ev.raw ? vq_kvg_obs_bytes(kv, kv->ev.raw_cap) : 0);
        kv->ev.raw = raw;
        kv->ev.raw_cap = cap;
    }

    /* attention sink: the leading rows whose position is < S stay in full precision for good */
    const size_t w = (size_t)kv->xs;
    int ns = 0;
    while (ns < n && pos0 + ns < kv->S && L->sink_count < kv->S) {
        int slot = L->sink_count++;
        put_fp_row(kv, L->sink_k, L->sink_v, slot, k + (size_t)ns * w, v + (size_t)ns * w);
        L->sink_pos[slot] = pos0 + ns;
        ns++;
    }
    if (ns == n) return VQ_OK;
    k += (size_t)ns * w;
    v += (size_t)ns * w;
    pos0 += ns;
    n -= ns;

    const int total = L->win_count + n, rpb = kv->rpb_store, d = kv->d;
    const int idx0 = L->n_coded + L->win_count;   /* storage index of the first new row */
    const int F = total >= kv->R + rpb ? (total - kv->R) / rpb * rpb : 0;   /* rows to encode */
    /* allocate every page this append needs first, so a failure changes nothing */
    int need = (L->n_coded + F + kv->P - 1) / kv->P;
    if (need > kv->page_cap)
        return vq_err_set(err, VQ_ERR_RANGE, "vq_kv_append: layer %d: page table full", layer);
    const int reuse = VQ_MIN(L->n_spare, VQ_MAX(0, need - L->n_pages));   /* the ring's spares first */
    for (int p = L->n_pages; p < L->n_pages + reuse; p++) {
        memset(L->pages[p], 0, kv->page_bytes);   /* as a new page comes */
        L->page_minpos[p] = INT32_MAX;
    }
    for (int p = L->n_pages + reuse; p < need; p++) {   /* no spare is left past here */
        L->pages[p] = kv_alloc(kv, kv->page_bytes);
        if (!L->pages[p]) {   /* the spares stay spares */
            for (int q = L->n_pages + reuse; q < p; q++) kv_free(kv, L->pages[q], kv->page_bytes);
            return vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_append: layer %d: out of memory for page %d "
                              "(%zu bytes)", layer, p, kv->page_bytes);
        }
        L->page_minpos[p] = INT32_MAX;
    }
    L->n_spare -= reuse;
    L->n_pages = VQ_MAX(L->n_pages, need);

    if (F > 0) {
        float *tmp = kv->enc_tmp;   /* made with the group: append never allocates scratch */
        for (int b = 0; b < F; b += rpb) {
            int c = L->n_coded + b, pg = c / kv->P, rin = c % kv->P;
            uint8_t *page = L->pages[pg];
            int32_t *ppos = (int32_t *)(void *)page;
            for (int t = 0; t < rpb; t++) {
                int idx = b + t;
                int32_t p = idx < L->win_count ? L->win_pos[(L->win_start + idx) % kv->win_cap]
                                               : pos0 + (idx - L->win_count);
                ppos[rin + t] = p;
                if (p < L->page_minpos[pg]) L->page_minpos[pg] = p;
            }
            for (int s = 0; s < 2; s++) {
                const int rb = kv->rpb[s];
                for (int h = 0; h < kv->H; h++) {
                    const vq_codec_state *st = vq_kvg_st(kv, s, local, h);
                    for (int t = 0; t < rpb; t++)
                        get_row(kv, L, s, b + t, h, s ? v : k, tmp + (size_t)t * d);
                    const float *kx = s ? NULL : vq_kvg_kx(kv, local, h);
                    if (kx) vq_kx_fwd(kx, d, tmp, rpb);
                    uint8_t *dst = page + (s ? kv->off_v[h] : kv->off_k[h]) +
                                   (size_t)(rin / rb) * st->block_bytes;
                    for (int t = 0; t < rpb; t += rb)
                        st->codec->encode(st, tmp + (size_t)t * d, dst + (size_t)(t / rb) * st->block_bytes);
                }
            }
        }
        L->n_coded += F;
    }
    /* the window drops its F oldest rows (or all it had), then takes the new rows not encoded */
    int from_win = VQ_MIN(F, L->win_count);
    if (kv->win_cap > 0) L->win_start = (L->win_start + from_win) % kv->win_cap;
    L->win_count -= from_win;
    for (int i = F - from_win; i < n; i++) {
        int slot = (L->win_start + L->win_count) % kv->win_cap;
        put_fp_row(kv, L->win_k, L->win_v, slot, k + (size_t)i * w, v + (size_t)i * w);
        L->win_pos[slot] = pos0 + i;
        L->win_count++;
    }
    observe_append(kv, local, idx0, n, k);
    return VQ_OK;
}

/* ---- reference read-back: what attention sees, decoded ---- */
vq_status vq_kvg_read(const vq_kvg *kv, int layer, float *k, float *v, int32_t *pos, vq_err *err) {
    const vq_kv_layer *L = &kv->layers[layer];
    const int d = kv->d, H = kv->H;
    const size_t w = (size_t)H * d;
    float *tmp = malloc((size_t)kv->rpb_store * d * sizeof(float));
    if (!tmp) return vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_read: out of memory");
    for (int c = 0; c < L->n_coded; c += kv->rpb_store) {
        const uint8_t *page = L->pages[c / kv->P];
        int rin = c % kv->P;
        for (int t = 0; t < kv->rpb_store; t++) pos[c + t] = ((const int32_t *)(const void *)page)[rin + t];
        for (int s = 0; s < 2; s++) {
            const int rb = kv->rpb[s];
            float *out = s ? v : k;
            for (int h = 0; h < H; h++) {
                const vq_codec_state *st = vq_kvg_st(kv, s, layer, h);
                const uint8_t *src = page + (s ? kv->off_v[h] : kv->off_k[h]) +
                                     (size_t)(rin / rb) * st->block_bytes;
                for (int t = 0; t < kv->rpb_store; t += rb)
                    st->codec->decode(st, src + (size_t)(t / rb) * st->block_bytes, tmp + (size_t)t * d);
                const float *kx = s ? NULL : vq_kvg_kx(kv, layer, h);
                if (kx) vq_kx_inv(kx, d, tmp, kv->rpb_store);
                for (int t = 0; t < kv->rpb_store; t++)
                    memcpy(out + (size_t)(c + t) * w + (size_t)h * d, tmp + (size_t)t * d,
                           (size_t)d * sizeof(float));
            }
        }
    }
    free(tmp);
    for (int i = 0; i < L->win_count; i++) {
        int slot = (L->win_start + i) % kv->win_cap, r = L->n_coded + i;
        pos[r] = L->win_pos[slot];
        get_fp_row(kv, L->win_k, L->win_v, slot, k + (size_t)r * w, v + (size_t)r * w);
    }
    for (int i = 0; i < L->sink_count; i++) {   /* then the sink rows */
        int r = L->n_coded + L->win_count + i;
        pos[r] = L->sink_pos[i];
        get_fp_row(kv, L->sink_k, L->sink_v, i, k + (size_t)r * w, v + (size_t)r * w);
    }
    return VQ_OK;
}
