/* kv_layers.c: the public cache as a router over groups. A spec "base@0,-1=f16@5=q8_0" gives each
 * listed layer its own full spec; every distinct clause is one group (kv.c) with its own codec
 * states and page layout, and the layers no clause names share the base group. Here: override
 * parsing, layer -> (group, local layer) routing, accounting over all groups, the normalized
 * spec, and a debug reference attention over decoded rows (float64). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kv/kv_impl.h"

static vq_status ovr_err(vq_err *err, const char *spec, const char *clause, const char *what) {
    return vq_err_set(err, VQ_ERR_ARG, "kv spec '%.160s': layer override '@%.100s': %s", spec,
                      clause, what);
}
/* the override's own spec failed: its message (codecs, parameters) follows the clause */
static vq_status ovr_spec_err(vq_err *err, const char *spec, const char *clause, const vq_err *e) {
    return vq_err_set(err, e->code ? e->code : VQ_ERR_ARG, "kv spec '%.160s': layer override "
                      "'@%.100s': %s", spec, clause, e->msg);
}

/* "0,1,2,3,7" -> "0..3,7" (runs of 3 or more as ranges); gl: a group's local layers, vh of them
 * per cache layer */
static int print_layers(char *buf, size_t n, const int *gl_local, int cnt_local, int vh) {
    size_t o = 0;
    int cnt = cnt_local / vh, *gl = malloc(((size_t)cnt + 1) * sizeof(int));
    if (!gl) return 0;
    for (int i = 0; i < cnt; i++) gl[i] = gl_local[i * vh];
    for (int i = 0; i < cnt;) {
        int j = i;
        while (j + 1 < cnt && gl[j + 1] == gl[j] + 1) j++;
        int w = j - i >= 2 ? snprintf(buf + o, n - o, "%s%d..%d", i ? "," : "", gl[i], gl[j])
                           : snprintf(buf + o, n - o, "%s%d", i ? "," : "", gl[i]);
        if (w < 0 || (size_t)w >= n - o) { free(gl); return 0; }
        o += (size_t)w;
        i = j - i >= 2 ? j + 1 : i + 1;
    }
    free(gl);
    return 1;
}

void vq_kv_destroy(vq_kv *kv) {
    if (!kv) return;
    for (int i = 0; kv->g && i < kv->n_groups; i++) vq_kvg_destroy(kv->g[i]);
    vq_aligned_free(kv->g);
    vq_aligned_free(kv->lg);
    vq_aligned_free(kv->ll);
    vq_aligned_free(kv->span);
    vq_aligned_free(kv);
}

/* Group for the layers owned by clause c (owner[] == c); NULL + err on failure. */
static vq_kvg *make_group(const vq_kv_clause *cl, const vq_kv_dims *D, const int *owner, int c,
                          uint64_t seed, vq_err *err) {
    int *gl = malloc((size_t)D->n_layers * sizeof(int)), cnt = 0;
    if (!gl) { vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_create: out of memory"); return NULL; }
    for (int l = 0; l < D->n_layers; l++)
        if (owner[l] == c) gl[cnt++] = l;
    vq_kv_dims gd = *D;
    gd.n_layers = cnt;
    gd.span = NULL;   /* spans are the router's (indexed by cache layer) */
    vq_kv_parsed sp = cl->sp;
    sp.cache_layers = D->n_layers;   /* calib=FILE is checked against the whole cache */
    vq_kvg *g = cnt ? vq_kvg_create(&sp, cl->norm, &gd, gl, seed, err) : NULL;
    /* the fate of evicted rows (a row of kv_policy.h's fate table): demote= makes the group's second
     * tier (its layers, the tier's codec) once the group is */
    if (g) g->dm.fate = vq_kv_fate_of(&sp);
    if (g && g->dm.fate->attach && g->dm.fate->attach(g, &sp, cl->norm, seed, err)) {
        vq_kvg_destroy(g);
        g = NULL;
    }
    if (g) g->n_layers_all = D->n_layers;
    free(gl);
    return g;
}

/* Resolve clause c's layer items against n layers into owner[]; errors name the item. */
static vq_status own_layers(const vq_kv_spec *sp, int c, int n, int *owner, vq_err *err) {
    const vq_kv_clause *cl = &sp->c[c];
    char m[240];
    for (int i = 0; i < cl->n_items; i++) {
        const vq_kv_item *it = &cl->items[i];
        int a = it->a, b = it->b;
        if (a < -n || a >= n || b < -n || b >= n) {
            snprintf(m, sizeof m, "layer '%s' is outside the cache's %d layers (0..%d, or -%d..-1)",
                     it->tok, n, n - 1, n);
            return ovr_err(err, sp->given, cl->given, m);
        }
        if (a < 0) a += n;
        if (b < 0) b += n;
        if (a > b) {
            snprintf(m, sizeof m, "range '%s' runs backwards (layers %d..%d)", it->tok, a, b);
            return ovr_err(err, sp->given, cl->given, m);
        }
        for (int l = a; l <= b; l++) {
            if (owner[l] >= 0) {
                snprintf(m, sizeof m, "layer %d ('%s') is already given%s'@%.60s'", l, it->tok,
                         owner[l] == c ? " in this override" : " by ",
                         owner[l] == c ? "" : sp->c[owner[l]].given);
                if (owner[l] == c) snprintf(m, sizeof m, "layer %d ('%s') is given twice", l, it->tok);
                return ovr_err(err, sp->given, cl->given, m);
            }
            owner[l] = c;
        }
    }
    return VQ_OK;
}

vq_kv *vq_kv_create(const vq_kv_spec *spec, const vq_kv_dims *dims, uint64_t seed, vq_err *err) {
    vq_err_clear(err);
    if (!dims) { vq_err_set(err, VQ_ERR_ARG, "vq_kv_create: dims is NULL"); return NULL; }
    if (!spec) { vq_err_set(err, VQ_ERR_ARG, "vq_kv_create: spec is NULL"); return NULL; }
    const vq_kv_dims *D = dims;
    if (D->n_layers < 1 || D->n_layers > 4096 || D->n_kv_heads < 1 || D->n_kv_heads > 1024 ||
        D->n_heads < 1 || D->n_heads % D->n_kv_heads || D->head_dim < 1 || D->head_dim > 4096 ||
        D->max_ctx < 1 || D->max_ctx > (1 << 24) || D->max_append < 0) {
        vq_err_set(err, VQ_ERR_ARG, "vq_kv_create: bad dims n_layers=%d n_heads=%d n_kv_heads=%d "
                   "head_dim=%d max_ctx=%d max_append=%d (need layers 1..4096, kv heads 1..1024 dividing "
                   "heads, head_dim 1..4096, max_ctx 1..2^24, max_append >= 0)", D->n_layers, D->n_heads,
                   D->n_kv_heads, D->head_dim, D->max_ctx, D->max_append);
        return NULL;
    }
    if (!isfinite(D->softcap) || D->softcap < 0) {
        vq_err_set(err, VQ_ERR_ARG, "vq_kv_create: attention soft-cap %g (need a finite value >= 0; 0 = none)",
                   (double)D->softcap);
        return NULL;
    }
    const int NL = D->n_layers, nc = spec->n;
    int *owner = malloc((size_t)NL * sizeof(int)), *gid = malloc((size_t)nc * sizeof(int));
    vq_kv *kv = vq_aligned_alloc(sizeof *kv);
    if (!owner || !gid || !kv) {
        vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_create: out of memory");
        goto fail;
    }
    kv->dims = *D;
    kv->dims.span = NULL;
    kv->seed = seed;
    kv->bytes = sizeof *kv + 3 * (size_t)NL * sizeof(int);
    kv->lg = vq_aligned_alloc((size_t)NL * sizeof(int));
    kv->ll = vq_aligned_alloc((size_t)NL * sizeof(int));
    kv->span = vq_aligned_alloc((size_t)NL * sizeof(int));
    if (!kv->lg || !kv->ll || !kv->span) { vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_create: out of memory"); goto fail; }
    for (int l = 0; l < NL; l++) {
        kv->span[l] = D->span ? D->span[l] : 0;
        if (kv->span[l] < 0) {
            vq_err_set(err, VQ_ERR_ARG, "vq_kv_create: layer %d: attention span %d (need >= 0; 0 = unbounded)",
                       l, kv->span[l]);
            goto fail;
        }
    }
    for (int l = 0; l < NL; l++) owner[l] = -1;
    for (int c = 1; c < nc; c++)
        if (own_layers(spec, c, NL, owner, err)) goto fail;
    for (int l = 0; l < NL; l++)
        if (owner[l] < 0) owner[l] = 0;

    /* groups: the base first (if it serves a layer), then the clauses by their first layer */
    kv->g = vq_aligned_alloc((size_t)nc * sizeof(vq_kvg *));
    if (!kv->g) { vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_create: out of memory"); goto fail; }
    kv->bytes += (size_t)nc * sizeof(vq_kvg *);
    kv->g_cap = nc;
    for (int c = 0; c < nc; c++) gid[c] = -1;
    int ng = 0, base_used = 0;
    for (int l = 0; l < NL; l++) base_used |= owner[l] == 0;
    if (base_used) gid[0] = ng++;
    for (int l = 0; l < NL; l++)
        if (gid[owner[l]] < 0) gid[owner[l]] = ng++;
    for (int c = 0; c < nc; c++) {
        if (gid[c] < 0) continue;
        vq_err e;
        vq_err_clear(&e);
        vq_kvg *g = make_group(&spec->c[c], D, owner, c, seed, &e);
        if (!g) {
            if (c) ovr_spec_err(err, spec->given, spec->c[c].given, &e);
            else vq_err_set(err, e.code ? e.code : VQ_ERR_ARG, "%s", e.msg);
            goto fail;
        }
        kv->g[gid[c]] = g;
        kv->n_groups = VQ_MAX(kv->n_groups, gid[c] + 1);
    }
    for (int i = 0; i < ng; i++)   /* ll: the cache layer's first local layer (heads=ada: vh of them) */
        for (int j = 0; j < kv->g[i]->dims.n_layers; j++) {
            kv->lg[kv->g[i]->gl[j]] = i;
            if (j % kv->g[i]->vh == 0) kv->ll[kv->g[i]->gl[j]] = j;
            kv->g[i]->layers[j].span = kv->span[kv->g[i]->gl[j]];
        }

    /* the normalized full spec with layers resolved: base (as parsed when no layer uses it) */
    snprintf(kv->spec, sizeof kv->spec, "%s", base_used ? kv->g[0]->spec : spec->c[0].norm);
    for (int i = base_used; i < ng; i++) {
        char lay[VQ_KV_SPEC_MAX];
        size_t o = strlen(kv->spec);
        if (!print_layers(lay, sizeof lay, kv->g[i]->gl, kv->g[i]->dims.n_layers, kv->g[i]->vh) ||
            snprintf(kv->spec + o, sizeof kv->spec - o, "@%s=%s", lay, kv->g[i]->spec) >=
                (int)(sizeof kv->spec - o)) {
            vq_err_set(err, VQ_ERR_ARG, "kv spec '%.160s': the normalized spec is longer than %d "
                       "characters", spec->given, VQ_KV_SPEC_MAX - 1);
            goto fail;
        }
    }
    free(owner); free(gid);
    return kv;
fail:
    free(owner); free(gid);
    vq_kv_destroy(kv);
    return NULL;
}

vq_kv *vq_kv_create_str(const char *spec, const vq_kv_dims *dims, uint64_t seed, vq_err *err) {
    vq_kv_spec *sp = vq_kv_spec_parse(spec, err);
    if (!sp) return NULL;
    vq_kv *kv = vq_kv_create(sp, dims, seed, err);
    vq_kv_spec_free(sp);
    return kv;
}

/* ---- routing: every public call finds the layer's group and its local index ---- */
static int bad_layer(const vq_kv *kv, int layer) { return !kv || layer < 0 || layer >= kv->dims.n_layers; }
#define GROUP(kv, layer) ((kv)->g[(kv)->lg[layer]])
#define LOCAL(kv, layer) ((kv)->ll[layer])

void vq_kv_clear(vq_kv *kv) {
    for (int i = 0; kv && i < kv->n_groups; i++) vq_kvg_clear(kv->g[i]);
}

vq_status vq_kv_append(vq_kv *kv, int layer, int pos0, int n, const float *k, const float *v,
                       vq_err *err) {
    vq_err_clear(err);
    if (!kv) return vq_err_set(err, VQ_ERR_ARG, "vq_kv_append: kv is NULL");
    if (layer < 0 || layer >= kv->dims.n_layers)
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_append: layer %d outside 0..%d", layer,
                          kv->dims.n_layers - 1);
    if (n < 0 || pos0 < 0 || (n > 0 && (!k || !v)) || (int64_t)pos0 + n > INT32_MAX)
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_append: layer %d: bad arguments pos0=%d n=%d%s",
                          layer, pos0, n, (n > 0 && (!k || !v)) ? " (k or v is NULL)" : "");
    if (n == 0) return VQ_OK;
    if (GROUP(kv, layer)->vh > 1)
        return vq_ada_append(GROUP(kv, layer), LOCAL(kv, layer), layer, pos0, n, k, v, !kv->ring_off, err);
    return vq_kvg_append(GROUP(kv, layer), LOCAL(kv, layer), pos0, n, k, v, !kv->ring_off, err);
}

static vq_status ref_attend(const vq_kv *kv, int layer, int n_q, const int *q_pos, const float *q,
                            float *out, vq_err *err);

vq_status vq_kv_attend(vq_kv *kv, int layer, int n_q, const int *q_pos, const float *q,
                       float *out, vq_err *err) {
    vq_err_clear(err);
    if (!kv) return vq_err_set(err, VQ_ERR_ARG, "vq_kv_attend: kv is NULL");
    if (layer < 0 || layer >= kv->dims.n_layers)
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_attend: layer %d outside 0..%d", layer,
                          kv->dims.n_layers - 1);
    if (n_q < 0 || (n_q > 0 && (!q_pos || !q || !out)))
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_attend: layer %d: bad arguments n_q=%d", layer, n_q);
    if (n_q == 0) return VQ_OK;
    if (GROUP(kv, layer)->ev.qst)   /* expected_attention_prompt: the queries' statistics */
        vq_kvg_observe_queries(GROUP(kv, layer), LOCAL(kv, layer), n_q, q_pos, q);
    if (kv->ref_attend) return ref_attend(kv, layer, n_q, q_pos, q, out, err);
    return vq_kvg_attend(GROUP(kv, layer), LOCAL(kv, layer), GROUP(kv, layer)->vh, layer, kv->span[layer], n_q,
                         q_pos, q, out, err);
}

vq_status vq_kv_set_rope(vq_kv *kv, int layer, const float *inv_freq, int rot, int neox, float mscale, vq_err *err) {
    if (bad_layer(kv, layer) || rot < 0)
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_set_rope: bad arguments (layer %d, rotated dims %d)", layer, rot);
    vq_kvg *g = GROUP(kv, layer);
    if (!g->ev.qst) return VQ_OK;   /* no policy reads queries before RoPE */
    if (rot > 0 && !inv_freq)
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_set_rope: layer %d: %d rotated dims and no frequencies", layer, rot);
    const int d = g->d;
    rot = VQ_MIN(rot, d) & ~1;
    for (int lo = LOCAL(kv, layer); lo < LOCAL(kv, layer) + g->vh; lo++) {
        float *rp = g->ev.rope + (size_t)lo * (size_t)(d / 2 + 2);
        for (int i = 0; i < rot / 2; i++) rp[i] = inv_freq[i];
        rp[d / 2] = (float)rot;
        rp[d / 2 + 1] = mscale;
    }
    g->ev.rope_neox = neox;
    return VQ_OK;
}

vq_status vq_kv_read(const vq_kv *kv, int layer, float *k, float *v, int32_t *pos, vq_err *err) {
    if (bad_layer(kv, layer)) return vq_err_set(err, VQ_ERR_ARG, "vq_kv_read: bad kv or layer %d", layer);
    if (GROUP(kv, layer)->vh > 1) return vq_ada_read(GROUP(kv, layer), LOCAL(kv, layer), layer, k, v, pos, err);
    return vq_kvg_read(GROUP(kv, layer), LOCAL(kv, layer), k, v, pos, err);
}

/* computed from the layouts (router + groups), independently of the allocation tallies */
size_t vq_kv_bytes(const vq_kv *kv) {
    if (!kv) return 0;
    size_t b = sizeof(vq_kv) + 3 * (size_t)kv->dims.n_layers * sizeof(int);
    b += (size_t)kv->g_cap * sizeof(vq_kvg *);
    for (int i = 0; i < kv->n_groups; i++) b += vq_kvg_bytes(kv->g[i]);
    return b;
}
size_t vq_kv_bytes_at(const vq_kv *kv, int rows) {
    if (!kv) return 0;
    size_t b = sizeof(vq_kv) + 3 * (size_t)kv->dims.n_layers * sizeof(int) + (size_t)kv->g_cap * sizeof(vq_kvg *);
    for (int i = 0; kv && i < kv->n_groups; i++) b += vq_kvg_bytes_at(kv->g[i], rows);
    return b;
}

size_t vq_kv_scratch_bytes(const vq_kv *kv) {
    size_t b = 0;
    for (int i = 0; kv && i < kv->n_groups; i++)
        for (const vq_kvg *g = kv->g[i]; g; g = g->dm.tier)   /* a group and its demoted tier */
            b += (size_t)g->n_slots * g->slot_bytes + (size_t)g->rpb_store * g->d * sizeof(float) + g->dm.bytes;
    return b;
}

int vq_kv_truncate(vq_kv *kv, int n) {
    if (!kv || n < 0) return -1;
    /* every layer must keep the same rows: the least any layer can keep, until it settles */
    int keep = n;
    for (;;) {
        int m = keep;
        for (int l = 0; l < kv->dims.n_layers; l++) {
            for (int h = 0; h < GROUP(kv, l)->vh; h++)   /* heads=ada: every KV head of the layer */
                m = VQ_MIN(m, vq_kvg_truncate(GROUP(kv, l), LOCAL(kv, l) + h, keep, 1));
            const vq_kv_fate *f = GROUP(kv, l)->dm.fate;   /* demote=: its tier's rows too */
            if (f && f->truncate) m = VQ_MIN(m, f->truncate(GROUP(kv, l), LOCAL(kv, l), keep, 1));
        }
        if (m == keep) break;
        keep = m;
    }
    for (int l = 0; l < kv->dims.n_layers; l++) {
        for (int h = 0; h < GROUP(kv, l)->vh; h++) vq_kvg_truncate(GROUP(kv, l), LOCAL(kv, l) + h, keep, 0);
        const vq_kv_fate *f = GROUP(kv, l)->dm.fate;
        if (f && f->truncate) f->truncate(GROUP(kv, l), LOCAL(kv, l), keep, 0);
    }
    return keep;
}

size_t vq_kv_bytes_tally(const vq_kv *kv) {
    if (!kv) return 0;
    size_t b = kv->bytes;
    for (int i = 0; i < kv->n_groups; i++) b += kv->g[i]->bytes + (kv->g[i]->dm.tier ? kv->g[i]->dm.tier->bytes : 0);
    return b;
}
int vq_kv_rows(const vq_kv *kv, int layer) {   /* heads=ada: the most any KV head holds */
    int r = 0;
    for (int h = 0; !bad_layer(kv, layer) && h < GROUP(kv, layer)->vh; h++)
        r = VQ_MAX(r, vq_kvg_rows(GROUP(kv, layer), LOCAL(kv, layer) + h));
    return r;
}
int vq_kv_per_head(const vq_kv *kv, int layer) { return bad_layer(kv, layer) ? 0 : GROUP(kv, layer)->vh > 1; }
int vq_kv_head_rows(const vq_kv *kv, int layer, int h) {
    if (bad_layer(kv, layer) || h < 0 || h >= kv->dims.n_kv_heads) return 0;
    const vq_kvg *g = GROUP(kv, layer);
    return vq_kvg_rows(g, LOCAL(kv, layer) + (g->vh > 1 ? h : 0));
}
vq_status vq_kv_read_head(const vq_kv *kv, int layer, int h, float *k, float *v, int32_t *pos, vq_err *err) {
    if (bad_layer(kv, layer) || h < 0 || h >= kv->dims.n_kv_heads || !k || !v || !pos)
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_read_head: bad arguments (layer %d, head %d)", layer, h);
    const vq_kvg *g = GROUP(kv, layer);
    if (g->vh > 1) return vq_kvg_read(g, LOCAL(kv, layer) + h, k, v, pos, err);
    /* the shared layout: every head's rows, head h's columns kept */
    const int rows = vq_kv_rows(kv, layer), d = kv->dims.head_dim, H = kv->dims.n_kv_heads;
    float *fk = malloc(((size_t)rows * H * d + 1) * sizeof(float)), *fv = malloc(((size_t)rows * H * d + 1) * sizeof(float));
    vq_status st = fk && fv ? vq_kvg_read(g, LOCAL(kv, layer), fk, fv, pos, err)
                            : vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_read_head: out of memory");
    for (int r = 0; !st && r < rows; r++) {
        memcpy(k + (size_t)r * d, fk + ((size_t)r * H + h) * d, (size_t)d * sizeof(float));
        memcpy(v + (size_t)r * d, fv + ((size_t)r * H + h) * d, (size_t)d * sizeof(float));
    }
    free(fk); free(fv);
    return st;
}
const char *vq_kv_spec_str(const vq_kv *kv) { return kv ? kv->spec : ""; }
const char *vq_kv_layer_spec(const vq_kv *kv, int layer) {
    return bad_layer(kv, layer) ? "" : GROUP(kv, layer)->spec;
}
double vq_kv_bits_per_elem(const vq_kv *kv) {
    if (!kv) return 0;
    double elems = 0;
    for (int l = 0; l < kv->dims.n_layers; l++) {   /* heads=ada: each head's rows; demote=: the tier's */
        for (int h = 0; h < kv->dims.n_kv_heads; h++) elems += (double)vq_kv_head_rows(kv, l, h) * kv->dims.head_dim * 2;
        elems += (double)vq_kv_demoted_rows(kv, l) * kv->dims.n_kv_heads * kv->dims.head_dim * 2;
    }
    return elems > 0 ? (double)vq_kv_bytes(kv) * 8.0 / elems : 0;
}
/* layout of a layer's group; the layer-less forms report layer 0's group */
size_t vq_kv_page_bytes(const vq_kv *kv) { return kv ? GROUP(kv, 0)->page_bytes : 0; }
int vq_kv_page_rows(const vq_kv *kv) { return kv ? GROUP(kv, 0)->P : 0; }
int vq_kv_window_rows(const vq_kv *kv) { return kv ? GROUP(kv, 0)->R : 0; }
int vq_kv_pages(const vq_kv *kv, int layer) {   /* heads=ada: the pages of every KV head */
    int n = 0;
    for (int h = 0; !bad_layer(kv, layer) && h < GROUP(kv, layer)->vh; h++)
        n += GROUP(kv, layer)->layers[LOCAL(kv, layer) + h].n_pages;
    return n;
}
const vq_codec_state *vq_kv_codec_state(const vq_kv *kv, int layer, int side) {
    if (bad_layer(kv, layer) || side < 0 || side > 1) return NULL;
    return vq_kvg_st(GROUP(kv, layer), side, LOCAL(kv, layer), 0);   /* KV head 0's (per_head rows) */
}
void vq_kv_set_ref_attend(vq_kv *kv, int on) { if (kv) kv->ref_attend = on != 0; }
void vq_kv_set_ring(vq_kv *kv, int on) { if (kv) kv->ring_off = on == 0; }
long vq_kv_ring_dropped(const vq_kv *kv) {
    long d = 0;
    for (int i = 0; kv && i < kv->n_groups; i++) d += kv->g[i]->ring_dropped;
    return d;
}
vq_status vq_kv_check_model(const vq_kv *kv, uint64_t config_hash, vq_err *err) {
    for (int i = 0; kv && i < kv->n_groups; i++) {
        const vq_kvg *g = kv->g[i];
        if (g->calib_hash && g->calib_hash != config_hash)
            return vq_err_set(err, VQ_ERR_STATE, "kv spec '%.200s': its calibration is for model '%s' of "
                              "another config (config hash %016llx, this model %016llx): run veloxquant "
                              "calibrate with this model", g->spec, g->calib_model,
                              (unsigned long long)g->calib_hash, (unsigned long long)config_hash);
    }
    return VQ_OK;
}

/* ---- reference attention: decoded rows (vq_kv_read_head), float64 scores and softmax ----
 * One KV head at a time (with heads=ada each head holds its own rows). */
static vq_status ref_attend(const vq_kv *kv, int layer, int n_q, const int *q_pos, const float *q,
                            float *out, vq_err *err) {
    /* each head's main rows, then the demoted tier's (demote=; read once, every head's columns) */
    const int nt = vq_kv_demoted_rows(kv, layer), rows = vq_kv_rows(kv, layer) + nt;
    const int H = kv->dims.n_kv_heads, d = kv->dims.head_dim;
    const int nh = kv->dims.n_heads, G = nh / H, span = kv->span[layer];
    const double cap = kv->dims.softcap;
    float *k = malloc(((size_t)rows * d + 1) * sizeof(float)), *v = malloc(((size_t)rows * d + 1) * sizeof(float));
    float *tk = malloc(((size_t)nt * H * d + 1) * sizeof(float)), *tv = malloc(((size_t)nt * H * d + 1) * sizeof(float));
    int32_t *pos = malloc(((size_t)rows + 1) * sizeof(int32_t)), *tpos = malloc(((size_t)nt + 1) * sizeof(int32_t));
    double *s = malloc(((size_t)rows + 1) * sizeof(double)), *acc = malloc((size_t)d * sizeof(double));
    vq_status st = VQ_OK;
    if (!k || !v || !tk || !tv || !pos || !tpos || !s || !acc)
        st = vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_attend (reference): out of memory");
    if (!st && nt) st = vq_kv_read_demoted(kv, layer, tk, tv, tpos, err);
    for (int h = 0; !st && h < H; h++) {
        int rh = vq_kv_head_rows(kv, layer, h);
        st = vq_kv_read_head(kv, layer, h, k, v, pos, err);
        for (int r = 0; !st && r < nt; r++, rh++) {
            memcpy(k + (size_t)rh * d, tk + ((size_t)r * H + h) * d, (size_t)d * sizeof(float));
            memcpy(v + (size_t)rh * d, tv + ((size_t)r * H + h) * d, (size_t)d * sizeof(float));
            pos[rh] = tpos[r];
        }
        for (int i = 0; !st && i < n_q; i++)
            for (int hq = h * G; hq < (h + 1) * G; hq++) {
                const float *qr = q + ((size_t)i * nh + hq) * d;
                float *o = out + ((size_t)i * nh + hq) * d;
                double mx = -INFINITY, sum = 0;
                for (int r = 0; r < rh; r++) {
                    s[r] = -INFINITY;
                    if (pos[r] > q_pos[i] || (span > 0 && (int64_t)pos[r] <= (int64_t)q_pos[i] - span)) continue;
                    double dot = 0;
                    for (int e = 0; e < d; e++) dot += (double)qr[e] * k[(size_t)r * d + e];
                    s[r] = dot / sqrt((double)d);
                    if (cap > 0) s[r] = cap * tanh(s[r] / cap);   /* soft-capping (dims.softcap) */
                    mx = s[r] > mx ? s[r] : mx;
                }
                for (int e = 0; e < d; e++) acc[e] = 0;
                for (int r = 0; r < rh && mx > -INFINITY; r++) {
                    if (s[r] == -INFINITY) continue;
                    double wt = exp(s[r] - mx);
                    sum += wt;
                    for (int e = 0; e < d; e++) acc[e] += wt * v[(size_t)r * d + e];
                }
                for (int e = 0; e < d; e++) o[e] = sum > 0 ? (float)(acc[e] / sum) : 0.0f;
            }
    }
    free(tk); free(tv); free(tpos);
    free(k); free(v); free(pos); free(s); free(acc);
    return st;
}
