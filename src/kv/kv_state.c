/* kv_state.c: a cache's contents as a byte stream and back (docs/state-format.md, "KV stream").
 * What is written is what the store holds: the code bytes of the rows in use of every page, the
 * pages' smallest positions, the full-precision window (linearized, oldest row first) and the
 * sink rows, each row with its position. Codec states are not written: they are read-only after
 * init and derive from (seed, layer, side), so the stream names the spec, dims and seed and is
 * only read into a cache made from the same ones.
 * The reader works on a memory buffer in two passes: the first checks every count, size, position
 * and window value against this cache's layout without touching the cache (and without any
 * allocation sized by the input); the second allocates all pages, then swaps the contents in. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kv/kv_impl.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kv_state.c writes the store's memory as little-endian bytes (x86-64)"
#endif

#define KVS_MAGIC "VQKVSTR1"
#define KVS_VERSION 2u   /* 2: a group's layout ends with its calibration's data CRC-32 */

/* ---- writing ---- */
typedef struct wr {
    vq_kv_write_fn fn;
    void *user;
    int failed;
} wr;

static void put(wr *w, const void *p, size_t n) {
    if (!w->failed && n && w->fn(w->user, p, n)) w->failed = 1;
}
static void put_u32(wr *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(wr *w, uint64_t v) { put(w, &v, 8); }

static size_t wrow_bytes(const vq_kvg *g) { return vq_kv_fp_row_bytes(g); }

static void put_group_header(wr *w, const vq_kvg *g) {
    const uint32_t f[10] = { (uint32_t)g->dims.n_layers, (uint32_t)g->P, (uint32_t)g->rpb[0],
                             (uint32_t)g->rpb[1], (uint32_t)g->R, (uint32_t)g->S, (uint32_t)g->wprec,
                             (uint32_t)g->st[0][0].block_bytes, (uint32_t)g->st[1][0].block_bytes, g->calib_crc };
    put(w, f, sizeof f);
}

/* One layer: counts, the used part of each page, the window ring in order, the sink rows. */
static void put_layer(wr *w, const vq_kvg *g, int local) {
    const vq_kv_layer *L = &g->layers[local];
    const uint32_t f[4] = { (uint32_t)g->gl[local], (uint32_t)L->n_coded, (uint32_t)L->win_count,
                            (uint32_t)L->sink_count };
    put(w, f, sizeof f);
    for (int pg = 0; pg < L->n_pages; pg++) {
        const int u = VQ_MIN(g->P, L->n_coded - pg * g->P);
        const uint8_t *page = L->pages[pg];
        put(w, &L->page_minpos[pg], 4);
        put(w, page, (size_t)u * 4);
        for (int h = 0; h < g->H; h++) {
            put(w, page + g->off_k[h], (size_t)(u / g->rpb[0]) * g->st[0][0].block_bytes);
            put(w, page + g->off_v[h], (size_t)(u / g->rpb[1]) * g->st[1][0].block_bytes);
        }
    }
    const size_t wb = wrow_bytes(g);
    for (int i = 0; i < L->win_count; i++) put(w, &L->win_pos[(L->win_start + i) % g->win_cap], 4);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < L->win_count; i++)
            put(w, (const uint8_t *)(s ? L->win_v : L->win_k) + (size_t)((L->win_start + i) % g->win_cap) * wb, wb);
    put(w, L->sink_pos, (size_t)L->sink_count * 4);
    put(w, L->sink_k, (size_t)L->sink_count * wb);
    put(w, L->sink_v, (size_t)L->sink_count * wb);
}

static void put_all(wr *w, const vq_kv *kv) {
    put(w, KVS_MAGIC, 8);
    put_u32(w, KVS_VERSION);
    const uint32_t sl = (uint32_t)strlen(kv->spec);
    put_u32(w, sl);
    put(w, kv->spec, sl);
    const vq_kv_dims *D = &kv->dims;
    const uint32_t dims[5] = { (uint32_t)D->n_layers, (uint32_t)D->n_heads, (uint32_t)D->n_kv_heads,
                               (uint32_t)D->head_dim, (uint32_t)D->max_ctx };
    put(w, dims, sizeof dims);
    put_u64(w, kv->seed);
    put_u32(w, (uint32_t)kv->n_groups);
    for (int i = 0; i < kv->n_groups; i++) {
        put_group_header(w, kv->g[i]);
        for (int l = 0; l < kv->g[i]->dims.n_layers; l++) put_layer(w, kv->g[i], l);
    }
}

vq_status vq_kv_state_write(const vq_kv *kv, vq_kv_write_fn fn, void *user, vq_err *err) {
    vq_err_clear(err);
    if (!kv || !fn) return vq_err_set(err, VQ_ERR_ARG, "vq_kv_state_write: no cache or no writer");
    if (vq_kv_evicting(kv))
        return vq_err_set(err, VQ_ERR_STATE, "vq_kv_state_write: the cache evicts tokens (%s): the "
                          "state format holds no eviction scores, so saving it is refused", kv->spec);
    wr w = { fn, user, 0 };
    put_all(&w, kv);
    return w.failed ? vq_err_set(err, VQ_ERR_IO, "vq_kv_state_write: the writer failed") : VQ_OK;
}

static int count_fn(void *user, const void *p, size_t n) { (void)p; *(size_t *)user += n; return 0; }

size_t vq_kv_state_bytes(const vq_kv *kv) {
    size_t n = 0;
    if (kv) vq_kv_state_write(kv, count_fn, &n, NULL);
    return n;
}

/* Every layer full (max_ctx rows), each row costing the most a row can cost in this layout. */
size_t vq_kv_state_max_bytes(const vq_kv *kv) {
    if (!kv) return 0;
    size_t b = 8 + 4 + 4 + strlen(kv->spec) + 5 * 4 + 8 + 4;
    const size_t rows = (size_t)kv->dims.max_ctx;
    for (int i = 0; i < kv->n_groups; i++) {
        const vq_kvg *g = kv->g[i];
        const size_t bk = g->st[0][0].block_bytes, bv = g->st[1][0].block_bytes;
        const size_t coded = 4 + (size_t)g->H * ((bk + (size_t)g->rpb[0] - 1) / (size_t)g->rpb[0] +
                                                 (bv + (size_t)g->rpb[1] - 1) / (size_t)g->rpb[1]);
        const size_t fp = 4 + 2 * wrow_bytes(g), row = VQ_MAX(coded, fp);
        b += 10 * 4 + (size_t)g->dims.n_layers * (4 * 4 + (size_t)g->page_cap * 4 + rows * row);
    }
    return b;
}

/* ---- reading ---- */
typedef struct rd {
    const uint8_t *p;
    size_t n, off;
    vq_err *err;
} rd;

/* n bytes at the cursor, or NULL with a FORMAT error naming what they were for */
static const uint8_t *take(rd *r, size_t n, const char *what) {
    if (n > r->n - r->off) {
        vq_err_set(r->err, VQ_ERR_FORMAT, "kv state: truncated at byte %zu: %s needs %zu bytes, %zu left",
                   r->off, what, n, r->n - r->off);
        return NULL;
    }
    const uint8_t *q = r->p + r->off;
    r->off += n;
    return q;
}
static int get_u32(rd *r, uint32_t *v, const char *what) {
    const uint8_t *q = take(r, 4, what);
    if (q) memcpy(v, q, 4);
    return q != NULL;
}
static int32_t i32_at(const uint8_t *q, size_t i) { int32_t v; memcpy(&v, q + 4 * i, 4); return v; }

/* Where one layer's sections lie in the buffer (first pass), for the second pass to copy. */
typedef struct plan {
    int n_coded, wc, sc;
    int ring_lo;               /* positions in [S, ring_lo) the stream's ring had freed */
    size_t pages, win, sink;   /* offsets of the page data, window data, sink data */
} plan;

/* Window or sink values must be what append lets in: finite, |x| <= 65504 (fp16 finite). */
static int fp_rows_ok(const vq_kvg *g, const uint8_t *q, size_t rows) {
    const size_t n = rows * g->H * g->d;
    if (g->wprec == 8) {   /* q8_0 blocks: every scale a finite fp16 that keeps 128 * scale in range */
        for (size_t b = 0; b < n / 32; b++) {
            vq_f16 h;
            memcpy(&h, q + b * VQ_KV_Q8_BLOCK, 2);
            const float sc = vq_f16_to_f32(h);
            if (!isfinite(sc) || fabsf(sc) * 128.0f > VQ_KV_ABS_MAX) return 0;
        }
    } else if (g->wprec == 16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, q + 2 * i, 2);
            if ((h & 0x7C00) == 0x7C00) return 0;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, q + 4 * i, 4);
            if (!isfinite(f) || fabsf(f) > VQ_KV_ABS_MAX) return 0;
        }
    }
    return 1;
}

/* Positions of n rows: in 0..INT32_MAX-1 (vq_kv_append's range); with want0 >= 0 exactly want0, want0 + 1, ... */
static vq_status check_pos(rd *r, const uint8_t *q, size_t at, int n, int want0, int below,
                           int layer, const char *what) {
    for (int i = 0; i < n; i++) {
        int32_t p = i32_at(q, (size_t)i);
        if (p < 0 || p == INT32_MAX || (below >= 0 && p >= below) || (want0 >= 0 && p != want0 + i)) {
            char m[200];
            snprintf(m, sizeof m, "layer %d %s row %d has position %d (%s)", layer, what, i, (int)p,
                     want0 >= 0 ? "a session's rows are positions 0..n-1 in order"
                                : below >= 0 ? "sink rows lie below the sink size"
                                             : "positions lie in 0..2^31-2, as vq_kv_append takes them");
            return vq_err_set(r->err, VQ_ERR_FORMAT, "kv state: byte %zu: %s", at + 4 * (size_t)i, m);
        }
    }
    return VQ_OK;
}

/* First pass over one layer: counts against the layout, then every section's size and contents. */
static vq_status scan_layer(rd *r, const vq_kv *kv, const vq_kvg *g, int local, int rows, plan *pl) {
    uint32_t f[4];
    const size_t at = r->off;
    const uint8_t *q = take(r, sizeof f, "a layer's counts");
    if (!q) return VQ_ERR_FORMAT;
    memcpy(f, q, sizeof f);
    const int layer = g->gl[local];
    if (f[0] != (uint32_t)layer)
        return vq_err_set(r->err, VQ_ERR_FORMAT, "kv state: byte %zu: layer %u found where layer %d "
                          "belongs", at, f[0], layer);
    const uint64_t total = (uint64_t)f[1] + f[2] + f[3];
    if (total > (uint64_t)kv->dims.max_ctx)
        return vq_err_set(r->err, VQ_ERR_STATE, "kv state: layer %d holds %llu rows, more than this "
                          "cache's max_ctx %d", layer, (unsigned long long)total, kv->dims.max_ctx);
    const int nc = (int)f[1], wc = (int)f[2], sc = (int)f[3];
    if (nc % g->rpb_store)
        return vq_err_set(r->err, VQ_ERR_FORMAT, "kv state: byte %zu: layer %d: %d coded rows is not "
                          "a whole number of %d-row blocks", at + 4, layer, nc, g->rpb_store);
    if (wc > g->win_cap)
        return vq_err_set(r->err, VQ_ERR_FORMAT, "kv state: byte %zu: layer %d: %d window rows, the "
                          "window holds at most %d", at + 8, layer, wc, g->win_cap);
    if (sc > g->S)
        return vq_err_set(r->err, VQ_ERR_FORMAT, "kv state: byte %zu: layer %d: %d sink rows, the sink "
                          "holds %d", at + 12, layer, sc, g->S);
    /* a session's layer holds positions 0..rows-1 in order; a sliding-window layer (span W) may
     * have freed a run after its sinks, as long as it holds what a query at rows sees (> rows - W) */
    const int span = g->layers[local].span;
    const int64_t s0 = rows >= 0 ? (int64_t)rows - nc - wc : 0;   /* its first row past the sinks */
    if (rows >= 0 && (total > (uint64_t)rows || sc != VQ_MIN(g->S, rows) ||
                      (s0 != sc && (span <= 0 || s0 < sc || s0 > VQ_MAX((int64_t)sc, (int64_t)rows - span + 1)))))
        return vq_err_set(r->err, VQ_ERR_FORMAT, "kv state: byte %zu: layer %d holds %d coded + %d "
                          "window + %d sink rows; the session holds %d positions%s", at, layer, nc, wc, sc, rows,
                          span > 0 ? " (a sliding-window layer holds at least the last span of them)" : "");
    pl->n_coded = nc; pl->wc = wc; pl->sc = sc;
    pl->ring_lo = rows >= 0 && s0 > sc ? (int)s0 : 0;

    pl->pages = r->off;
    const size_t bk = g->st[0][0].block_bytes, bv = g->st[1][0].block_bytes;
    for (int pg = 0; pg * g->P < nc; pg++) {
        const int u = VQ_MIN(g->P, nc - pg * g->P);
        const size_t pat = r->off;
        const size_t codes = (size_t)g->H * ((size_t)(u / g->rpb[0]) * bk + (size_t)(u / g->rpb[1]) * bv);
        const uint8_t *pp = take(r, 4 + (size_t)u * 4 + codes, "a page (smallest position, positions, codes)");
        if (!pp) return VQ_ERR_FORMAT;
        const int32_t minpos = i32_at(pp, 0);
        vq_status st = check_pos(r, pp + 4, pat + 4, u, rows >= 0 ? (int)s0 + pg * g->P : -1, -1, layer, "coded");
        if (st) return st;
        int32_t lo = INT32_MAX;
        for (int i = 0; i < u; i++) lo = VQ_MIN(lo, i32_at(pp + 4, (size_t)i));
        /* the store keeps a page's smallest position or less (truncate leaves it as it was) */
        if (minpos < 0 || minpos > lo)
            return vq_err_set(r->err, VQ_ERR_FORMAT, "kv state: byte %zu: layer %d page %d: smallest "
                              "position %d does not bound the page's rows (lowest %d)", pat, layer, pg,
                              (int)minpos, (int)lo);
    }
    const size_t wb = wrow_bytes(g);
    pl->win = r->off;
    const uint8_t *wq = take(r, (size_t)wc * (4 + 2 * wb), "the window rows (positions, K, V)");
    if (!wq) return VQ_ERR_FORMAT;
    vq_status st = check_pos(r, wq, pl->win, wc, rows >= 0 ? (int)s0 + nc : -1, -1, layer, "window");
    if (st) return st;
    if (!fp_rows_ok(g, wq + (size_t)wc * 4, 2 * (size_t)wc))
        return vq_err_set(r->err, VQ_ERR_FORMAT, "kv state: byte %zu: layer %d: a window value is not "
                          "finite or beyond +-65504", pl->win, layer);
    pl->sink = r->off;
    const uint8_t *sq = take(r, (size_t)sc * (4 + 2 * wb), "the sink rows (positions, K, V)");
    if (!sq) return VQ_ERR_FORMAT;
    st = check_pos(r, sq, pl->sink, sc, rows >= 0 ? 0 : -1, g->S, layer, "sink");
    if (st) return st;
    if (!fp_rows_ok(g, sq + (size_t)sc * 4, 2 * (size_t)sc))
        return vq_err_set(r->err, VQ_ERR_FORMAT, "kv state: byte %zu: layer %d: a sink value is not "
                          "finite or beyond +-65504", pl->sink, layer);
    return VQ_OK;
}

/* The stream's spec, dims and seed against this cache's: what differs is VQ_ERR_STATE. */
static vq_status scan_head(rd *r, const vq_kv *kv) {
    const uint8_t *q = take(r, 8, "the magic");
    if (!q) return VQ_ERR_FORMAT;
    if (memcmp(q, KVS_MAGIC, 8))
        return vq_err_set(r->err, VQ_ERR_FORMAT, "kv state: byte 0: not a kv state stream (bad magic)");
    uint32_t ver, sl;
    if (!get_u32(r, &ver, "the version")) return VQ_ERR_FORMAT;
    if (ver != KVS_VERSION)
        return vq_err_set(r->err, VQ_ERR_FORMAT, "kv state: byte 8: version %u, this library reads "
                          "version %u", ver, KVS_VERSION);
    if (!get_u32(r, &sl, "the spec length")) return VQ_ERR_FORMAT;
    if (sl < 1 || sl > VQ_KV_SPEC_MAX_LEN)
        return vq_err_set(r->err, VQ_ERR_FORMAT, "kv state: byte 12: spec length %u outside 1..%d",
                          sl, VQ_KV_SPEC_MAX_LEN);
    const uint8_t *spec = take(r, sl, "the spec text");
    if (!spec) return VQ_ERR_FORMAT;
    if (sl != strlen(kv->spec) || memcmp(spec, kv->spec, sl)) {
        char saved[VQ_KV_SPEC_MAX];
        memcpy(saved, spec, sl);
        saved[sl] = 0;
        for (uint32_t i = 0; i < sl; i++)
            if ((unsigned char)saved[i] < 32) saved[i] = '?';
        return vq_err_set(r->err, VQ_ERR_STATE, "kv state: made with kv spec '%.200s', this cache "
                          "is '%.200s'", saved, kv->spec);
    }
    uint32_t d[5];
    const uint8_t *dq = take(r, sizeof d, "the dims");
    if (!dq) return VQ_ERR_FORMAT;
    memcpy(d, dq, sizeof d);
    const vq_kv_dims *D = &kv->dims;
    static const char *names[4] = { "layers", "heads", "kv heads", "head_dim" };
    const int mine[4] = { D->n_layers, D->n_heads, D->n_kv_heads, D->head_dim };
    for (int i = 0; i < 4; i++)
        if (d[i] != (uint32_t)mine[i])
            return vq_err_set(r->err, VQ_ERR_STATE, "kv state: made for a cache of %u %s, this cache "
                              "has %d", d[i], names[i], mine[i]);
    uint64_t seed;
    const uint8_t *sq = take(r, 8, "the seed");
    if (!sq) return VQ_ERR_FORMAT;
    memcpy(&seed, sq, 8);
    if (seed != kv->seed)
        return vq_err_set(r->err, VQ_ERR_STATE, "kv state: made with kv seed %llu, this cache has "
                          "seed %llu", (unsigned long long)seed, (unsigned long long)kv->seed);
    uint32_t ng;
    if (!get_u32(r, &ng, "the group count")) return VQ_ERR_FORMAT;
    if (ng != (uint32_t)kv->n_groups)
        return vq_err_set(r->err, VQ_ERR_FORMAT, "kv state: byte %zu: %u layer groups, the spec "
                          "makes %d", r->off - 4, ng, kv->n_groups);
    return VQ_OK;
}

/* A group's layout as written against this cache's: same spec, other layout = another build. */
static vq_status scan_group(rd *r, const vq_kvg *g, int gi) {
    uint32_t f[10], mine[10];
    const size_t at = r->off;
    const uint8_t *q = take(r, sizeof f, "a group's layout");
    if (!q) return VQ_ERR_FORMAT;
    memcpy(f, q, sizeof f);
    static const char *names[10] = { "layers", "rows per page", "K rows per block", "V rows per block",
                                     "window rows", "sink rows", "window precision", "K block bytes",
                                     "V block bytes", "calibration data CRC-32" };
    mine[0] = (uint32_t)g->dims.n_layers; mine[1] = (uint32_t)g->P;
    mine[2] = (uint32_t)g->rpb[0]; mine[3] = (uint32_t)g->rpb[1];
    mine[4] = (uint32_t)g->R; mine[5] = (uint32_t)g->S; mine[6] = (uint32_t)g->wprec;
    mine[7] = (uint32_t)g->st[0][0].block_bytes; mine[8] = (uint32_t)g->st[1][0].block_bytes;
    mine[9] = g->calib_crc;
    if (f[9] != mine[9])   /* same calib=FILE path, other contents: the codes mean something else */
        return vq_err_set(r->err, VQ_ERR_STATE, "kv state: byte %zu: group %d (spec '%.200s') was made "
                          "with a calibration of other contents (data CRC-32 %08x, this cache's file "
                          "%08x): its codes depend on it", at + 36, gi, g->spec, f[9], mine[9]);
    for (int i = 0; i < 9; i++)
        if (f[i] != mine[i])
            return vq_err_set(r->err, VQ_ERR_STATE, "kv state: byte %zu: group %d (spec '%.200s') "
                              "has %u %s, this cache %u (written by another version?)",
                              at + 4 * (size_t)i, gi, g->spec, f[i], names[i], mine[i]);
    return VQ_OK;
}

/* Second pass, one layer: the pages (already allocated, zeroed), the window, the sink. */
static void load_layer(vq_kvg *g, int local, const uint8_t *buf, const plan *pl, uint8_t **pages) {
    vq_kv_layer *L = &g->layers[local];
    const uint8_t *q = buf + pl->pages;
    const size_t bk = g->st[0][0].block_bytes, bv = g->st[1][0].block_bytes, wb = wrow_bytes(g);
    L->n_pages = (pl->n_coded + g->P - 1) / g->P;
    for (int pg = 0; pg < L->n_pages; pg++) {
        const int u = VQ_MIN(g->P, pl->n_coded - pg * g->P);
        uint8_t *page = L->pages[pg] = pages[pg];
        g->bytes += g->page_bytes;
        memcpy(&L->page_minpos[pg], q, 4);
        memcpy(page, q + 4, (size_t)u * 4);
        q += 4 + (size_t)u * 4;
        for (int h = 0; h < g->H; h++) {
            const size_t nk = (size_t)(u / g->rpb[0]) * bk, nv = (size_t)(u / g->rpb[1]) * bv;
            memcpy(page + g->off_k[h], q, nk);
            memcpy(page + g->off_v[h], q + nk, nv);
            q += nk + nv;
        }
    }
    L->n_coded = pl->n_coded;
    L->win_start = 0;
    L->win_count = pl->wc;
    q = buf + pl->win;
    if (pl->wc) {
        memcpy(L->win_pos, q, (size_t)pl->wc * 4);
        memcpy(L->win_k, q + (size_t)pl->wc * 4, (size_t)pl->wc * wb);
        memcpy(L->win_v, q + (size_t)pl->wc * (4 + wb), (size_t)pl->wc * wb);
    }
    L->sink_count = pl->sc;
    L->ring_lo = pl->ring_lo;
    if (L->span > 0 && !pl->ring_lo) {   /* a free-form stream: what it lacks past its sinks counts as freed */
        int32_t lo = INT32_MAX;
        for (int i = 0; i < pl->n_coded; i++) lo = VQ_MIN(lo, ((const int32_t *)(const void *)L->pages[i / g->P])[i % g->P]);
        for (int i = 0; i < pl->wc; i++) lo = VQ_MIN(lo, L->win_pos[i]);
        L->ring_lo = lo != INT32_MAX && lo > g->S ? lo : 0;
    }
    q = buf + pl->sink;
    if (pl->sc) {
        memcpy(L->sink_pos, q, (size_t)pl->sc * 4);
        memcpy(L->sink_k, q + (size_t)pl->sc * 4, (size_t)pl->sc * wb);
        memcpy(L->sink_v, q + (size_t)pl->sc * (4 + wb), (size_t)pl->sc * wb);
    }
}

vq_status vq_kv_state_read(vq_kv *kv, const uint8_t *buf, size_t len, int rows, vq_err *err) {
    vq_err_clear(err);
    if (!kv || (!buf && len)) return vq_err_set(err, VQ_ERR_ARG, "vq_kv_state_read: no cache or no buffer");
    if (vq_kv_evicting(kv))
        return vq_err_set(err, VQ_ERR_STATE, "vq_kv_state_read: the cache evicts tokens (%s): the "
                          "state format holds no eviction scores, so loading into it is refused", kv->spec);
    rd r = { buf, len, 0, err };
    vq_status st = scan_head(&r, kv);
    if (st) return st;
    const int NL = kv->dims.n_layers;
    plan *pl = calloc((size_t)NL, sizeof *pl);   /* sized by this cache, not by the stream */
    if (!pl) return vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_state_read: out of memory");
    size_t n_pages = 0;
    for (int i = 0; !st && i < kv->n_groups; i++) {
        const vq_kvg *g = kv->g[i];
        st = scan_group(&r, g, i);
        for (int l = 0; !st && l < g->dims.n_layers; l++) {
            st = scan_layer(&r, kv, g, l, rows, &pl[g->gl[l]]);
            n_pages += (size_t)(pl[g->gl[l]].n_coded + g->P - 1) / (size_t)g->P;
        }
    }
    if (!st && r.off != len)
        st = vq_err_set(err, VQ_ERR_FORMAT, "kv state: %zu bytes after the end of the stream (byte %zu)",
                        len - r.off, r.off);
    /* every page first, so that running out of memory leaves the cache as it was */
    uint8_t **pages = st ? NULL : calloc(n_pages + 1, sizeof *pages);
    if (!st && !pages) st = vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_state_read: out of memory");
    size_t k = 0;
    for (int i = 0; !st && i < kv->n_groups; i++)
        for (int l = 0; !st && l < kv->g[i]->dims.n_layers; l++) {
            const vq_kvg *g = kv->g[i];
            for (int pg = 0; pg * g->P < pl[g->gl[l]].n_coded; pg++)
                if (!(pages[k++] = vq_aligned_alloc(g->page_bytes)))
                    st = vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_state_read: out of memory for page %d "
                                    "of layer %d (%zu bytes)", pg, g->gl[l], g->page_bytes);
        }
    if (st) {
        for (size_t i = 0; pages && i < k; i++) vq_aligned_free(pages[i]);
        free(pages);
        free(pl);
        return st;
    }
    k = 0;
    for (int i = 0; i < kv->n_groups; i++) {
        vq_kvg *g = kv->g[i];
        vq_kvg_clear(g);
        for (int l = 0; l < g->dims.n_layers; l++) {
            load_layer(g, l, buf, &pl[g->gl[l]], pages + k);
            k += (size_t)g->layers[l].n_pages;
        }
    }
    free(pages);
    free(pl);
    return VQ_OK;
}

/* ---- plain rows (kv.h) ---- */
static const vq_kvg *plain_group(const vq_kv *kv, int layer, int *local) {
    *local = kv->ll[layer];
    return kv->g[kv->lg[layer]];
}

vq_status vq_kv_plain_check(const vq_kv *kv, vq_err *err) {
    if (!kv) return vq_err_set(err, VQ_ERR_ARG, "vq_kv_plain_check: no cache");
    for (int i = 0; i < kv->n_groups; i++) {
        const vq_kvg *g = kv->g[i];
        const char *what = g->S ? "sink=" : g->R ? "window=" : g->wprec != 16 ? "wprec=" : g->ev.cfg.pol ? "evict="
                         : g->kx ? "kmean=/kscale=" : g->vh != 1 ? "heads=ada" : g->dm.tier ? "demote="
                         : g->hs[0] != 1 || g->hs[1] != 1 ? "a per-head codec"
                         : (g->rpb[0] != 1 && g->rpb[0] != 16) || g->rpb[1] != 1 ? "keys of 1 or 16 rows per block, values of 1"
                         : NULL;
        if (what)
            return vq_err_set(err, VQ_ERR_UNSUPPORTED, "'%s' has %s, which a device store does not hold "
                              "(it keeps codes, and the partial block in fp16)", g->spec, what);
    }
    return VQ_OK;
}

int vq_kv_plain_rows(const vq_kv *kv, int layer, int *n_win) {
    int local;
    const vq_kvg *g = plain_group(kv, layer, &local);
    const vq_kv_layer *L = &g->layers[local];
    *n_win = L->win_count;
    if (L->sink_count) return -1;
    for (int i = 0; i < L->n_coded; i++)
        if (((const int32_t *)(const void *)L->pages[i / g->P])[i % g->P] != i) return -1;
    for (int i = 0; i < L->win_count; i++)
        if (L->win_pos[(L->win_start + i) % g->win_cap] != L->n_coded + i) return -1;
    return L->n_coded;
}

vq_status vq_kv_plain_get(const vq_kv *kv, int layer, const vq_kv_plain *p, vq_err *err) {
    int local, nw;
    const vq_kvg *g = plain_group(kv, layer, &local);
    const vq_kv_layer *L = &g->layers[local];
    if (vq_kv_plain_rows(kv, layer, &nw) != p->n_coded || nw != p->n_win)
        return vq_err_set(err, VQ_ERR_STATE, "vq_kv_plain_get: layer %d does not hold %d + %d rows at positions 0.. in order",
                          layer, p->n_coded, p->n_win);
    const size_t bk = g->st[0][0].block_bytes, bv = g->st[1][0].block_bytes, wb = wrow_bytes(g);
    for (int pg = 0; pg < L->n_pages && pg * g->P < L->n_coded; pg++) {
        const int u = VQ_MIN(g->P, L->n_coded - pg * g->P), r0 = pg * g->P;
        for (int h = 0; h < g->H; h++) {
            memcpy(p->k + (size_t)h * p->k_head + (size_t)(r0 / g->rpb[0]) * bk, L->pages[pg] + g->off_k[h],
                   (size_t)(u / g->rpb[0]) * bk);
            memcpy(p->v + (size_t)h * p->v_head + (size_t)(r0 / g->rpb[1]) * bv, L->pages[pg] + g->off_v[h],
                   (size_t)(u / g->rpb[1]) * bv);
        }
    }
    for (int i = 0; i < L->win_count; i++) {
        const size_t slot = (size_t)((L->win_start + i) % g->win_cap);
        memcpy((uint8_t *)p->win_k + (size_t)i * wb, (const uint8_t *)L->win_k + slot * wb, wb);
        memcpy((uint8_t *)p->win_v + (size_t)i * wb, (const uint8_t *)L->win_v + slot * wb, wb);
    }
    return VQ_OK;
}

vq_status vq_kv_plain_put(vq_kv *kv, int layer, const vq_kv_plain *p, vq_err *err) {
    int local;
    vq_kvg *g = (vq_kvg *)plain_group(kv, layer, &local);
    vq_kv_layer *L = &g->layers[local];
    if (vq_kv_plain_check(kv, err)) return err->code;
    if (L->n_coded || L->win_count || L->sink_count)
        return vq_err_set(err, VQ_ERR_STATE, "vq_kv_plain_put: layer %d is not empty", layer);
    if (p->n_coded < 0 || p->n_win < 0 || p->n_coded % g->rpb_store || p->n_win > g->win_cap ||
        p->n_coded + p->n_win > g->dims.max_ctx)
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_plain_put: layer %d: %d coded rows and %d window rows do not fit "
                          "(blocks of %d, window %d, max_ctx %d)", layer, p->n_coded, p->n_win, g->rpb_store,
                          g->win_cap, g->dims.max_ctx);
    vq_kvg_free_spares(g, L);
    const int np = (p->n_coded + g->P - 1) / g->P;
    if (np > g->page_cap) return vq_err_set(err, VQ_ERR_RANGE, "vq_kv_plain_put: layer %d: page table full", layer);
    for (int pg = 0; pg < np; pg++) {
        L->pages[pg] = vq_aligned_alloc(g->page_bytes);
        if (!L->pages[pg]) {
            while (pg-- > 0) vq_aligned_free(L->pages[pg]);
            return vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_plain_put: out of memory (%zu bytes a page)", g->page_bytes);
        }
        memset(L->pages[pg], 0, g->page_bytes);
        g->bytes += g->page_bytes;
    }
    const size_t bk = g->st[0][0].block_bytes, bv = g->st[1][0].block_bytes, wb = wrow_bytes(g);
    for (int pg = 0; pg < np; pg++) {
        const int u = VQ_MIN(g->P, p->n_coded - pg * g->P), r0 = pg * g->P;
        int32_t *pos = (int32_t *)(void *)L->pages[pg];
        for (int r = 0; r < u; r++) pos[r] = r0 + r;
        L->page_minpos[pg] = r0;
        for (int h = 0; h < g->H; h++) {
            memcpy(L->pages[pg] + g->off_k[h], p->k + (size_t)h * p->k_head + (size_t)(r0 / g->rpb[0]) * bk,
                   (size_t)(u / g->rpb[0]) * bk);
            memcpy(L->pages[pg] + g->off_v[h], p->v + (size_t)h * p->v_head + (size_t)(r0 / g->rpb[1]) * bv,
                   (size_t)(u / g->rpb[1]) * bv);
        }
    }
    L->n_pages = np;
    L->n_coded = p->n_coded;
    L->win_start = 0;
    L->win_count = p->n_win;
    for (int i = 0; i < p->n_win; i++) {
        L->win_pos[i] = p->n_coded + i;
        memcpy((uint8_t *)L->win_k + (size_t)i * wb, (const uint8_t *)p->win_k + (size_t)i * wb, wb);
        memcpy((uint8_t *)L->win_v + (size_t)i * wb, (const uint8_t *)p->win_v + (size_t)i * wb, wb);
    }
    return VQ_OK;
}
