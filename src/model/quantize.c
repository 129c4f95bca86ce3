/* quantize.c: weights re-coded into other weight types, by tensor class (a --weights spec):
 * into a reservoir file (vq_quantize: `veloxquant quantize`), or in memory at load
 * (vq_model_requantize: `--weights` on the other commands, for measuring formats on models
 * that are not GGUF files, e.g. stories260K's fp32 checkpoint). Both go through one converter:
 * the source rows to float (the type table's to_float), then the target's from_float. */
#include "model/model.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/gguf.h"
#include "formats/reservoir.h"
#include "kernels/kernels.h"
#include "veloxquant.h"

/* tensor classes a spec can name; "attn" and "ffn" name groups of them */
static const char *const CLASS_NAME[VQ_WCLASS_N] = {
    "embd", "output", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};
#define CLASS_ATTN_LO 2
#define CLASS_ATTN_HI 5
#define CLASS_FFN_LO 6
#define CLASS_FFN_HI 8

static const char *type_name(uint32_t t) {
    if (t == VQ_WKEEP) return "keep";
    if (t == VQ_WX16) return "x16";
    const vq_wtype *w = vq_wtype_get(t);
    return w ? w->name : "?";
}

static int parse_type(const char *s, size_t n, uint32_t *out) {
    char b[32];
    if (n == 0 || n >= sizeof b) return 0;
    for (size_t i = 0; i < n; i++) b[i] = (char)tolower((unsigned char)s[i]);
    b[n] = 0;
    if (!strcmp(b, "keep")) { *out = VQ_WKEEP; return 1; }
    if (!strcmp(b, "x16")) { *out = VQ_WX16; return 1; }
    for (uint32_t t = 0; t < 0x20000; t++) {   /* ggml ids and VeloxQuant's own (wtype_ids.h) */
        const vq_wtype *w = vq_wtype_get(t);
        if (!w) continue;
        char lw[32];
        size_t k = strlen(w->name);
        if (k >= sizeof lw) continue;
        for (size_t i = 0; i <= k; i++) lw[i] = (char)tolower((unsigned char)w->name[i]);
        if (!strcmp(lw, b)) { *out = t; return 1; }
    }
    return 0;
}

static void list_quantizable(char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (uint32_t t = 0; t < 0x20000 && o + 16 < cap; t++) {
        const vq_wtype *w = vq_wtype_get(t);
        if (w && w->from_float) o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", w->name);
    }
    snprintf(buf + o, cap - o, ", keep");
}

/* the classes lo..hi an item key names (a class or a group), or 0 */
static int key_classes(const char *p, size_t kn, int *lo, int *hi) {
    *lo = *hi = -1;
    if (kn == 4 && !memcmp(p, "attn", 4)) { *lo = CLASS_ATTN_LO; *hi = CLASS_ATTN_HI; }
    else if (kn == 3 && !memcmp(p, "ffn", 3)) { *lo = CLASS_FFN_LO; *hi = CLASS_FFN_HI; }
    else
        for (int c = 0; c < VQ_WCLASS_N; c++)
            if (strlen(CLASS_NAME[c]) == kn && !memcmp(p, CLASS_NAME[c], kn)) *lo = *hi = c;
    return *lo >= 0;
}

/* "blk.A[-B]." at p (n bytes of key): the layers, and the key's rest; 0 when p is no such prefix,
 * -1 when it starts with "blk." but the layers are malformed */
static int layer_prefix(const char *p, size_t n, int *a, int *b, size_t *rest) {
    if (n < 4 || memcmp(p, "blk.", 4)) return 0;
    size_t i = 4;
    long v[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        size_t d0 = i;
        while (i < n && isdigit((unsigned char)p[i]) && i - d0 < 5) v[k] = 10 * v[k] + (p[i++] - '0');
        if (i == d0 || (i < n && isdigit((unsigned char)p[i]))) return -1;   /* no digits, or > 5 */
        if (k == 0 && i < n && p[i] == '-') { i++; continue; }
        if (k == 0) v[1] = v[0];
        break;
    }
    if (i >= n || p[i] != '.' || v[1] < v[0]) return -1;
    *a = (int)v[0];
    *b = (int)v[1];
    *rest = i + 1;
    return 1;
}

vq_status vq_wspec_parse(const char *s, vq_wspec *w, vq_err *err) {
    for (int c = 0; c < VQ_WCLASS_N; c++) w->type[c] = VQ_WKEEP;
    w->n_items = 0;
    w->max_layer = -1;
    w->text[0] = 0;
    if (!s || !*s) return vq_err_set(err, VQ_ERR_ARG, "weights spec is empty (e.g. q8_0 or tqw4,embd=q8_0)");
    if (strlen(s) >= 512)
        return vq_err_set(err, VQ_ERR_ARG, "weights spec '%.64s...' is longer than 511 bytes", s);
    char types[256];
    list_quantizable(types, sizeof types);
    int first = 1;
    for (const char *p = s; *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        uint32_t t;
        if (!eq) {
            if (!first)
                return vq_err_set(err, VQ_ERR_ARG, "weights spec '%s': '%.*s' has no class (only the first item "
                                  "may be a bare type; then CLASS=TYPE)", s, (int)n, p);
            if (!parse_type(p, n, &t))
                return vq_err_set(err, VQ_ERR_ARG, "weights spec '%s': unknown weight type '%.*s' (known: %s)",
                                  s, (int)n, p, types);
            for (int c = 0; c < VQ_WCLASS_N; c++) w->type[c] = t;
        } else {
            size_t kn = (size_t)(eq - p), r = 0;
            if (!parse_type(eq + 1, n - kn - 1, &t))
                return vq_err_set(err, VQ_ERR_ARG, "weights spec '%s': unknown weight type '%.*s' (known: %s)",
                                  s, (int)(n - kn - 1), eq + 1, types);
            int la = -1, lb = -1, lo, hi;
            int lp = layer_prefix(p, kn, &la, &lb, &r);
            if (lp < 0)
                return vq_err_set(err, VQ_ERR_ARG, "weights spec '%s': '%.*s': a per-layer item is blk.L.CLASS or "
                                  "blk.A-B.CLASS (layers: decimal, at most 5 digits, A <= B)", s, (int)kn, p);
            if (!key_classes(p + r, kn - r, &lo, &hi))
                return vq_err_set(err, VQ_ERR_ARG, "weights spec '%s': unknown tensor class '%.*s' (known: embd, "
                                  "output, attn, ffn, attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, "
                                  "ffn_down; per layer: blk.L.CLASS, blk.A-B.CLASS)", s, (int)(kn - r), p + r);
            if (lp && lo < CLASS_ATTN_LO)
                return vq_err_set(err, VQ_ERR_ARG, "weights spec '%s': '%.*s': embd and output are not per-layer "
                                  "tensors", s, (int)kn, p);
            /* an item overrides the earlier layer items it covers: those are dropped */
            int k = 0;
            for (int i = 0; i < w->n_items; i++) {
                int c = w->item[i].cls;
                int covered = c >= lo && c <= hi && (!lp || (w->item[i].lo >= la && w->item[i].hi <= lb));
                if (!covered) w->item[k++] = w->item[i];
            }
            w->n_items = k;
            if (!lp) {
                for (int c = lo; c <= hi; c++) w->type[c] = t;
            } else {
                for (int c = lo; c <= hi; c++) {
                    if (w->n_items == VQ_WSPEC_LAYER_ITEMS)
                        return vq_err_set(err, VQ_ERR_ARG, "weights spec '%s': more than %d per-layer items (a group "
                                          "counts one per class)", s, VQ_WSPEC_LAYER_ITEMS);
                    w->item[w->n_items].lo = la;
                    w->item[w->n_items].hi = lb;
                    w->item[w->n_items].cls = c;
                    w->item[w->n_items].type = t;
                    w->n_items++;
                }
                if (lb > w->max_layer) w->max_layer = lb;
            }
        }
        if (t != VQ_WKEEP && t != VQ_WX16 && !vq_wtype_interleaved(t) && !vq_wtype_get(t)->from_float)
            return vq_err_set(err, VQ_ERR_ARG, "weights spec '%s': type %s has no quantizer here (quantizable: %s)",
                              s, type_name(t), types);
        first = 0;
        p += n;
        if (*p == ',') {
            p++;
            if (!*p) return vq_err_set(err, VQ_ERR_ARG, "weights spec '%s' ends with ','", s);
        }
    }
    /* normalized: the type of every class, in class order, then the layer items in spec order
     * (each at most 36 bytes: 32 of them and the classes fit the 2048 bytes) */
    size_t o = 0;
    for (int c = 0; c < VQ_WCLASS_N; c++)
        o += (size_t)snprintf(w->text + o, sizeof w->text - o, "%s%s=%s", c ? "," : "", CLASS_NAME[c],
                              type_name(w->type[c]));
    for (int i = 0; i < w->n_items && o < sizeof w->text; i++) {
        char lay[24];
        if (w->item[i].lo == w->item[i].hi) snprintf(lay, sizeof lay, "%d", w->item[i].lo);
        else snprintf(lay, sizeof lay, "%d-%d", w->item[i].lo, w->item[i].hi);
        o += (size_t)snprintf(w->text + o, sizeof w->text - o, ",blk.%s.%s=%s", lay, CLASS_NAME[w->item[i].cls],
                              type_name(w->item[i].type));
    }
    return VQ_OK;
}

uint32_t vq_wspec_type(const vq_wspec *w, int cls, int layer) {
    if (cls < 0 || cls >= VQ_WCLASS_N) return VQ_WKEEP;
    for (int i = w->n_items - 1; i >= 0 && layer >= 0; i--)
        if (w->item[i].cls == cls && layer >= w->item[i].lo && layer <= w->item[i].hi) return w->item[i].type;
    return w->type[cls];
}

vq_status vq_wspec_check_layers(const vq_wspec *w, int n_layers, vq_err *err) {
    for (int i = 0; i < w->n_items; i++)
        if (w->item[i].hi >= n_layers) {
            char lay[24];
            if (w->item[i].lo == w->item[i].hi) snprintf(lay, sizeof lay, "%d", w->item[i].lo);
            else snprintf(lay, sizeof lay, "%d-%d", w->item[i].lo, w->item[i].hi);
            return vq_err_set(err, VQ_ERR_ARG, "weights spec: blk.%s.%s names layer %d, but the model has %d "
                              "layers (0..%d)", lay, CLASS_NAME[w->item[i].cls], w->item[i].hi, n_layers,
                              n_layers - 1);
        }
    return VQ_OK;
}

/* the class of a GGUF tensor name, or -1 (norms, biases: never re-coded); its layer in *layer
 * (-1 for embd and output) */
static int class_of(const char *name, int *layer) {
    *layer = -1;
    if (!strcmp(name, "token_embd.weight")) return 0;
    if (!strcmp(name, "output.weight")) return 1;
    int l, k = 0;
    if (sscanf(name, "blk.%d.%n", &l, &k) != 1 || k == 0) return -1;
    const char *r = name + k;
    for (int c = 2; c < VQ_WCLASS_N; c++) {
        size_t n = strlen(CLASS_NAME[c]);
        if (!strncmp(r, CLASS_NAME[c], n) && !strcmp(r + n, ".weight")) { *layer = l; return c; }
    }
    return -1;
}

/* rows x cols of src_type -> dst (rows * row_bytes(dst_type)); the relative RMS error of the
 * result against the source values goes to *rel (sum over rows of squared errors / of squares) */
static vq_status convert(const void *src, uint32_t st, void *dst, uint32_t dt, int64_t rows, int64_t cols,
                         double *rel, vq_err *err) {
    const vq_wtype *a = vq_wtype_get(st), *b = vq_wtype_get(dt);
    size_t sr = vq_wtype_row_bytes(st, cols), dr = vq_wtype_row_bytes(dt, cols);
    if (!a || !b || !b->from_float || !sr || !dr)
        return vq_err_set(err, VQ_ERR_UNSUPPORTED, "cannot convert %s to %s at %lld columns", a ? a->name : "?",
                          b ? b->name : "?", (long long)cols);
    double e2 = 0, x2 = 0;
    int oom = 0;
#pragma omp parallel reduction(+ : e2, x2) reduction(| : oom)
    {
        float *x = malloc((size_t)cols * 2 * sizeof *x);
        if (!x) oom = 1;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (!x) continue;
            float *y = x + cols;
            a->to_float((const uint8_t *)src + (size_t)r * sr, x, cols);
            b->from_float(x, (uint8_t *)dst + (size_t)r * dr, cols);
            b->to_float((const uint8_t *)dst + (size_t)r * dr, y, cols);
            for (int64_t i = 0; i < cols; i++) {
                double d = (double)y[i] - x[i];
                e2 += d * d;
                x2 += (double)x[i] * x[i];
            }
        }
        free(x);
    }
    if (oom) return vq_err_set(err, VQ_ERR_NOMEM, "out of memory converting to %s", b->name);
    if (rel) *rel = x2 > 0 ? sqrt(e2 / x2) : 0;
    return VQ_OK;
}

/* ---- in memory, at load ---- */
static vq_status requant_mat(vq_model *m, vq_wmat *w, uint32_t dt, vq_err *err) {
    if (dt == VQ_WX16)
        dt = w->type == VQ_TYPE_Q4_0 ? VQ_TYPE_Q4_0X16 : w->type == VQ_TYPE_Q4_K ? VQ_TYPE_Q4_KX16 : VQ_WKEEP;
    if (dt == VQ_WKEEP || dt == w->type) return VQ_OK;
    const vq_wtype *b = vq_wtype_get(dt);
    if (w->cols % b->block || !vq_matmul_supported(dt, w->cols)) return VQ_OK;   /* stays as it is */
    /* q4_0x16 is Q4_0's bytes interleaved 16 rows at a time: made from Q4_0 only (a permutation,
     * the products unchanged); any other matrix, and one whose rows are not a multiple of 16,
     * stays as it is */
    const int repack = dt == VQ_TYPE_Q4_0X16 ? 1 : dt == VQ_TYPE_Q4_KX16 ? 2 : dt == VQ_TYPE_Q6_KX16 ? 3 : 0;
    static const uint32_t from[4] = {0, VQ_TYPE_Q4_0, VQ_TYPE_Q4_K, VQ_TYPE_Q6_K};
    if (repack && (w->type != from[repack] || w->rows % VQ_Q4X16_ROWS)) return VQ_OK;
    size_t bytes = vq_wtype_row_bytes(dt, w->cols) * (size_t)w->rows;
    void **o = realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *o);
    if (!o) return vq_err_set(err, VQ_ERR_NOMEM, "out of memory");
    m->owned = o;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) return vq_err_set(err, VQ_ERR_NOMEM, "out of memory");
    m->owned[m->n_owned++] = p;
    int (*rp)(const void *, void *, int, int) = repack == 1 ? vq_q4_0x16_repack : repack == 2 ? vq_q4_kx16_repack
                                              : vq_q6_kx16_repack;
    vq_status s = repack ? (rp(w->data, p, w->rows, w->cols) ? VQ_ERR_FORMAT : VQ_OK)
                         : convert(w->data, w->type, p, dt, w->rows, w->cols, NULL, err);
    if (s) return s;
    w->data = p;
    w->type = dt;
    return VQ_OK;
}

vq_status vq_model_requantize(vq_model *m, const vq_wspec *ws, vq_err *err) {
    vq_status s;
    if ((s = vq_wspec_check_layers(ws, m->cfg.n_layers, err))) return s;
    int tied = m->output.data == m->tok_embd.data;
    /* the embedding is read by rows (vq_get_row): never interleaved */
    if (!vq_wtype_interleaved(ws->type[0]) && ws->type[0] != VQ_WX16 && (s = requant_mat(m, &m->tok_embd, ws->type[0], err))) return s;
    /* x16 leaves the embedding as it is and interleaves the output's own copy (untied) */
    if (tied && ws->type[1] == ws->type[0] && ws->type[1] != VQ_WX16) m->output = m->tok_embd;
    else if ((s = requant_mat(m, &m->output, ws->type[1], err))) return s;   /* unties when they differ */
    for (int l = 0; l < m->cfg.n_layers; l++) {
        vq_layer_weights *L = &m->layers[l];
        vq_wmat *mats[7] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down };
        for (int k = 0; k < 7; k++)
            if ((s = requant_mat(m, mats[k], vq_wspec_type(ws, 2 + k, l), err))) return s;
    }
    snprintf(m->weights, sizeof m->weights, "%s", ws->text);
    return VQ_OK;
}

/* ---- into a reservoir file ---- */
static int layout_of(uint32_t type, uint32_t *block, uint32_t *bytes) {
    const vq_wtype *t = vq_wtype_get(type);
    if (!t) return 0;
    *block = (uint32_t)t->block;
    *bytes = (uint32_t)t->block_bytes;
    return 1;
}
vq_gguf_layout_fn vq_model_layouts(void) { return layout_of; }

void vq_quantize_info_free(vq_quantize_info *i) {
    if (!i) return;
    free(i->t);
    i->t = NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

vq_status vq_quantize(const char *in, const char *out, const char *weights, vq_quantize_info *info, vq_err *err) {
    vq_err_clear(err);
    vq_quantize_info dummy;
    if (!info) info = &dummy;
    memset(info, 0, sizeof *info);
    if (!in || !*in || !out || !*out)
        return vq_err_set(err, VQ_ERR_ARG, "vq_quantize: the input and output paths are required");
    double t0 = now_s();
    vq_wspec ws;
    vq_status s = vq_wspec_parse(weights, &ws, err);
    if (s) return s;
    for (int c = 0; c < VQ_WCLASS_N; c++)
        if (ws.type[c] == VQ_WX16 || vq_wtype_interleaved(ws.type[c]))
            return vq_err_set(err, VQ_ERR_ARG, "weights spec '%s': %s is a layout made at load, never written to a file",
                              ws.text, type_name(ws.type[c]));
    /* the info's copy is the public struct's 256 bytes: a longer spec ends in "..." there (the
     * file's veloxquant.reservoir.weights holds it whole) */
    size_t wl = strlen(ws.text);
    if (wl < sizeof info->weights) memcpy(info->weights, ws.text, wl + 1);
    else {
        memcpy(info->weights, ws.text, sizeof info->weights - 4);
        memcpy(info->weights + sizeof info->weights - 4, "...", 4);
    }
    /* the source: a GGUF file or a reservoir; refused before anything is written otherwise */
    uint8_t magic[8] = {0};
    FILE *f = fopen(in, "rb");
    size_t got = f ? fread(magic, 1, 8, f) : 0;
    if (f) fclose(f);
    if (f && !vq_reservoir_sniff(magic, got) && (got < 4 || memcmp(magic, "GGUF", 4)))
        return vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: quantize reads GGUF and reservoir files (a llama2.c "
                          "checkpoint can be re-quantized at load instead: --weights SPEC)", in);
    vq_model *check = vq_model_open(in, NULL, err);   /* validates shapes and types as a load does */
    if (!check) return err ? err->code : VQ_ERR_FORMAT;
    s = vq_wspec_check_layers(&ws, check->cfg.n_layers, err);
    vq_model_free(check);
    if (s) return s;
    vq_gguf *g = vq_reservoir_sniff(magic, got) ? vq_reservoir_open(in, layout_of, 0, err) : vq_gguf_open(in, err);
    if (!g) return err ? err->code : VQ_ERR_FORMAT;
    uint64_t n = vq_gguf_n_tensors(g);
    int untie = !vq_gguf_find_tensor(g, "output.weight") && ws.type[1] != ws.type[0];
    uint64_t nt = n + (uint64_t)untie;
    vq_res_tensor *rt = calloc(nt ? nt : 1, sizeof *rt);
    void **bufs = calloc(nt ? nt : 1, sizeof *bufs);
    char **names = calloc(nt ? nt : 1, sizeof *names);
    info->t = calloc(nt ? nt : 1, sizeof *info->t);
    if (!rt || !bufs || !names || !info->t) { s = vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); goto done; }
    for (uint64_t i = 0; i < nt && !s; i++) {
        const vq_gguf_tensor *t = vq_gguf_tensor_at(g, i < n ? i : 0);
        if (i == n) t = vq_gguf_find_tensor(g, "token_embd.weight");   /* the untied output */
        if (!t) { s = vq_err_set(err, VQ_ERR_FORMAT, "%s: token_embd.weight is missing", in); break; }
        /* names are copied whole (a GGUF name may hold any bytes; the writer needs them exact) */
        names[i] = i < n ? strndup(t->name.ptr, (size_t)t->name.len) : strdup("output.weight");
        if (!names[i]) { s = vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); break; }
        if (i < n && memchr(t->name.ptr, 0, (size_t)t->name.len)) {
            s = vq_err_set(err, VQ_ERR_FORMAT, "%s: tensor %llu's name holds a NUL byte", in, (unsigned long long)i);
            break;
        }
        const char *name = names[i];
        vq_quantize_tensor *qi = &info->t[i];
        snprintf(qi->name, sizeof qi->name, "%.*s", (int)(sizeof qi->name - 1), name);
        const vq_wtype *sw = vq_wtype_get(t->type);
        snprintf(qi->src_type, sizeof qi->src_type, "%s", sw ? sw->name : vq_ggml_type_name(t->type) ? vq_ggml_type_name(t->type) : "?");
        qi->src_bytes = t->nbytes;
        int layer, c = class_of(name, &layer);
        uint32_t dt = vq_wspec_type(&ws, c, layer);
        const vq_wtype *dw = dt == VQ_WKEEP ? NULL : vq_wtype_get(dt);
        rt[i] = (vq_res_tensor){ .n_dims = t->n_dims, .type = t->type, .data = t->data, .nbytes = t->nbytes };
        memcpy(rt[i].ne, t->ne, sizeof rt[i].ne);
        if (dw && dt != t->type) {
            if (!sw) { qi->kept = "source type has no decoder"; }
            else if (t->n_dims != 2) { qi->kept = "not a matrix"; }
            else if (t->ne[0] % (uint64_t)dw->block) { qi->kept = "columns not a multiple of the block"; }
            else {
                size_t bytes = vq_wtype_row_bytes(dt, (int64_t)t->ne[0]) * (size_t)t->ne[1];
                bufs[i] = malloc(bytes ? bytes : 1);
                if (!bufs[i]) { s = vq_err_set(err, VQ_ERR_NOMEM, "out of memory for %s", name); break; }
                s = convert(t->data, t->type, bufs[i], dt, (int64_t)t->ne[1], (int64_t)t->ne[0], &qi->rel_rms, err);
                if (s) break;
                rt[i].type = dt;
                rt[i].data = bufs[i];
                rt[i].nbytes = bytes;
                info->n_converted++;
            }
        }
        if (rt[i].type == t->type) info->n_kept++;
        snprintf(qi->dst_type, sizeof qi->dst_type, "%s", type_name(rt[i].type));
        qi->dst_bytes = rt[i].nbytes;
        info->src_bytes += i < n ? t->nbytes : 0;
        info->out_bytes += rt[i].nbytes;
        rt[i].name = name;
    }
    info->n_tensors = (int)nt;
    if (!s) {
        char src_name[256];
        const char *base = strrchr(in, '/');
        snprintf(src_name, sizeof src_name, "%s", base ? base + 1 : in);
        vq_res_kv kv[3] = {
            { "veloxquant.reservoir.source", src_name },
            { "veloxquant.reservoir.weights", ws.text },
            { "veloxquant.reservoir.writer", "veloxquant " VQ_VERSION_STRING },
        };
        s = vq_reservoir_write(out, g, kv, 3, rt, nt, &info->file_bytes, err);
    }
done:
    for (uint64_t i = 0; bufs && i < nt; i++) free(bufs[i]);
    for (uint64_t i = 0; names && i < nt; i++) free(names[i]);
    free(bufs);
    free(names);
    free(rt);
    vq_gguf_close(g);
    info->seconds = now_s() - t0;
    if (s || info == &dummy) vq_quantize_info_free(info);   /* the caller asked for no report: nothing is kept */
    return s;
}
