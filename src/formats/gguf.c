/* gguf.c: parsing and validation of GGUF v2/v3 files (docs/formats.md lists every check).
 * One forward pass over header, metadata and tensor infos; every count is bounded by the bytes
 * left before anything is allocated, so a hostile file costs at most O(file size) memory. */
#define _GNU_SOURCE
#include "formats/gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAX_NESTING 8        /* arrays of arrays deeper than this are refused */
#define GGUF_MAX_KEY 65535u       /* the specification's limit on key length */
#define GGUF_MAX_DIMS 4

/* ---- the cursor: bounds-checked little-endian reads that report what they were reading ---- */
typedef struct cursor {
    const uint8_t *p;
    uint64_t n, pos;
    const char *name;     /* file or buffer name, first in every message */
    char ctx[192];        /* the item being read: "kv 3 'general.name'", "tensor 7 'x'" */
    vq_err *err;
} cursor;

static int fail(cursor *c, vq_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(cursor *c, vq_status code, const char *fmt, ...) {
    char buf[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (c->ctx[0]) vq_err_set(c->err, code, "%s: %s: %s", c->name, c->ctx, buf);
    else vq_err_set(c->err, code, "%s: %s", c->name, buf);
    return -1;
}

static uint64_t left(const cursor *c) { return c->n - c->pos; }

static int need(cursor *c, uint64_t bytes, const char *what) {
    if (left(c) >= bytes) return 0;
    return fail(c, VQ_ERR_FORMAT, "truncated: %s needs %llu bytes at offset %llu, only %llu left (size %llu)",
                what, (unsigned long long)bytes, (unsigned long long)c->pos,
                (unsigned long long)left(c), (unsigned long long)c->n);
}

static uint64_t le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return -1;
    *v = (uint32_t)le(c->p + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return -1;
    *v = le(c->p + c->pos, 8);
    c->pos += 8;
    return 0;
}

/* a GGUF string: uint64 length, then that many bytes (no terminator). what names it; for the
 * elements of a string array idx < n and the message says "string idx of n" (formatted only on error) */
static int rd_str(cursor *c, vq_str *s, const char *what, uint64_t idx, uint64_t n) {
    char w[96];
    if (left(c) < 8 || le(c->p + c->pos, 8) > left(c) - 8) {
        if (idx < n) snprintf(w, sizeof w, "%s %llu of %llu", what, (unsigned long long)idx, (unsigned long long)n);
        else snprintf(w, sizeof w, "%s", what);
        if (left(c) < 8) {
            char wl[112];
            snprintf(wl, sizeof wl, "%s length", w);
            return need(c, 8, wl);
        }
        return fail(c, VQ_ERR_FORMAT, "%s length %llu at offset %llu exceeds the %llu bytes left", w,
                    (unsigned long long)le(c->p + c->pos, 8), (unsigned long long)c->pos,
                    (unsigned long long)(left(c) - 8));
    }
    s->len = le(c->p + c->pos, 8);
    s->ptr = (const char *)c->p + c->pos + 8;
    c->pos += 8 + s->len;
    return 0;
}

/* printable, bounded rendering of a name for messages */
const char *vq_gguf_show(vq_str s, char *buf, size_t n) {
    size_t o = 0;
    for (uint64_t i = 0; i < s.len; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        if (o + 8 >= n) { memcpy(buf + o, "...", 4); return buf; }
        if (ch < 0x20 || ch >= 0x7f || ch == '\'' || ch == '\\') o += (size_t)snprintf(buf + o, n - o, "\\x%02x", ch);
        else buf[o++] = (char)ch;
    }
    buf[o] = 0;
    return buf;
}

/* ---- name index: open addressing over FNV-1a hashes; slots hold index+1, 0 = empty ---- */
uint64_t vq_gguf_hash(const char *p, uint64_t len) {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < len; i++) { h ^= (unsigned char)p[i]; h *= 1099511628211ull; }
    return h;
}

static int index_init(vq_gguf_index *ix, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    ix->slot = calloc(cap, sizeof *ix->slot);
    ix->mask = cap - 1;
    return ix->slot ? 0 : -1;
}

/* insert item i (name s); returns the index of an existing item with that name, or -1 */
static int64_t index_add(vq_gguf_index *ix, vq_str s, uint64_t i, const vq_str *(*name_of)(const void *, uint64_t),
                         const void *items) {
    uint64_t h = vq_gguf_hash(s.ptr, s.len) & ix->mask;
    while (ix->slot[h]) {
        uint64_t j = ix->slot[h] - 1;
        const vq_str *o = name_of(items, j);
        if (o->len == s.len && memcmp(o->ptr, s.ptr, s.len) == 0) return (int64_t)j;
        h = (h + 1) & ix->mask;
    }
    ix->slot[h] = i + 1;
    return -1;
}

int64_t vq_gguf_index_find(const vq_gguf_index *ix, const char *name, const vq_str *(*name_of)(const void *, uint64_t),
                           const void *items) {
    if (!ix->slot || !name) return -1;
    uint64_t len = strlen(name);
    uint64_t h = vq_gguf_hash(name, len) & ix->mask;
    while (ix->slot[h]) {
        uint64_t j = ix->slot[h] - 1;
        const vq_str *o = name_of(items, j);
        if (o->len == len && memcmp(o->ptr, name, len) == 0) return (int64_t)j;
        h = (h + 1) & ix->mask;
    }
    return -1;
}

const vq_str *vq_gguf_kv_name(const void *items, uint64_t i) { return &((const vq_gguf_kv *)items)[i].key; }
const vq_str *vq_gguf_tensor_name(const void *items, uint64_t i) { return &((const vq_gguf_tensor *)items)[i].name; }

/* ---- metadata values ---- */
static int scalar_size(uint32_t t) {   /* bytes of a fixed-size value type; 0 for string/array/invalid */
    static const int sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < 13 ? sz[t] : 0;
}

static int check_type(cursor *c, uint32_t t, const char *what) {
    if (t <= VQ_GGUF_FLOAT64) return 0;
    return fail(c, VQ_ERR_FORMAT, "%s %u is not a GGUF value type (0..12), at offset %llu", what, t,
                (unsigned long long)(c->pos - 4));
}

static int check_bools(cursor *c, const uint8_t *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (p[i] > 1)
            return fail(c, VQ_ERR_FORMAT, "bool value %u (must be 0 or 1) at offset %llu", p[i],
                        (unsigned long long)(p + i - c->p));
    return 0;
}

/* an array value after its kv header: element type, length, elements. kv == NULL: validate and
 * skip (nested arrays); otherwise fill kv's array fields and index string elements. */
static int parse_array(cursor *c, vq_gguf_kv *kv, int depth) {
    uint32_t et;
    uint64_t len;
    if (rd_u32(c, &et, "array element type") || check_type(c, et, "array element type")) return -1;
    if (rd_u64(c, &len, "array length")) return -1;
    const uint8_t *data = c->p + c->pos;
    int es = scalar_size(et);
    if (kv) { kv->arr_type = (vq_gguf_type)et; kv->arr_len = len; kv->arr_data = data; }
    if (es) {
        if (len > left(c) / (uint64_t)es)
            return fail(c, VQ_ERR_FORMAT, "array of %llu %s elements (%d bytes each) at offset %llu exceeds the %llu bytes left",
                        (unsigned long long)len, vq_gguf_type_name((vq_gguf_type)et), es,
                        (unsigned long long)c->pos, (unsigned long long)left(c));
        if (et == VQ_GGUF_BOOL && check_bools(c, data, len)) return -1;
        c->pos += len * (uint64_t)es;
        return 0;
    }
    if (et == VQ_GGUF_STRING) {
        if (len > left(c) / 8)   /* each string takes at least its 8-byte length */
            return fail(c, VQ_ERR_FORMAT, "array of %llu strings at offset %llu exceeds the %llu bytes left",
                        (unsigned long long)len, (unsigned long long)c->pos, (unsigned long long)left(c));
        vq_str *strs = NULL;
        if (kv) {
            strs = malloc((len ? len : 1) * sizeof *strs);
            if (!strs) return fail(c, VQ_ERR_NOMEM, "out of memory indexing %llu strings", (unsigned long long)len);
            kv->arr_str = strs;
        }
        vq_str tmp;
        for (uint64_t i = 0; i < len; i++)
            if (rd_str(c, strs ? &strs[i] : &tmp, "string", i, len)) return -1;
        return 0;
    }
    /* arrays of arrays: each element is at least a 4-byte type and an 8-byte length */
    if (depth + 1 >= GGUF_MAX_NESTING)
        return fail(c, VQ_ERR_FORMAT, "arrays nested deeper than %d levels at offset %llu", GGUF_MAX_NESTING,
                    (unsigned long long)c->pos);
    if (len > left(c) / 12)
        return fail(c, VQ_ERR_FORMAT, "array of %llu arrays at offset %llu exceeds the %llu bytes left",
                    (unsigned long long)len, (unsigned long long)c->pos, (unsigned long long)left(c));
    for (uint64_t i = 0; i < len; i++)
        if (parse_array(c, NULL, depth + 1)) return -1;
    return 0;
}

static int parse_value(cursor *c, vq_gguf_kv *kv) {
    uint32_t t = kv->type;
    int es = scalar_size(t);
    if (es) {
        if (need(c, (uint64_t)es, "value")) return -1;
        const uint8_t *p = c->p + c->pos;
        uint64_t u = le(p, es);
        switch (t) {
        case VQ_GGUF_INT8: kv->val.i = (int8_t)u; break;
        case VQ_GGUF_INT16: kv->val.i = (int16_t)u; break;
        case VQ_GGUF_INT32: kv->val.i = (int32_t)u; break;
        case VQ_GGUF_INT64: kv->val.i = (int64_t)u; break;
        case VQ_GGUF_FLOAT32: { float f; uint32_t b = (uint32_t)u; memcpy(&f, &b, 4); kv->val.f = f; break; }
        case VQ_GGUF_FLOAT64: { double d; memcpy(&d, &u, 8); kv->val.f = d; break; }
        case VQ_GGUF_BOOL:
            if (check_bools(c, p, 1)) return -1;
            kv->val.b = (int)u;
            break;
        default: kv->val.u = u; break;   /* unsigned types */
        }
        c->pos += (uint64_t)es;
        return 0;
    }
    if (t == VQ_GGUF_STRING) return rd_str(c, &kv->str, "string value", 0, 0);
    return parse_array(c, kv, 0);
}

/* ---- tensor types: block layouts as ggml defines them (elements per block, bytes per block) ---- */
typedef struct type_row { const char *name; uint32_t block, bytes; } type_row;
static const type_row TYPES[] = {
    [0] = {"F32", 1, 4},        [1] = {"F16", 1, 2},        [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},     [6] = {"Q5_0", 32, 22},     [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},     [9] = {"Q8_1", 32, 40},     [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},  [12] = {"Q4_K", 256, 144},  [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},  [15] = {"Q8_K", 256, 292},  [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74}, [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},  [21] = {"IQ3_S", 256, 110}, [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},       [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},       [27] = {"I64", 1, 8},       [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},  [30] = {"BF16", 1, 2},      [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},  [39] = {"MXFP4", 32, 17},
};

int vq_ggml_type_layout(uint32_t type, uint32_t *block, uint32_t *bytes) {
    if (type >= VQ_ARRAY_LEN(TYPES) || !TYPES[type].name) return 0;
    if (block) *block = TYPES[type].block;
    if (bytes) *bytes = TYPES[type].bytes;
    return 1;
}

const char *vq_ggml_type_name(uint32_t type) {
    return vq_ggml_type_layout(type, NULL, NULL) ? TYPES[type].name : NULL;
}

/* ---- tensor infos ---- */
static int parse_tensor(cursor *c, vq_gguf_tensor *t, uint64_t alignment, vq_gguf_layout_fn extra) {
    uint32_t nd;
    if (rd_u32(c, &nd, "n_dims")) return -1;
    if (nd < 1 || nd > GGUF_MAX_DIMS)
        return fail(c, VQ_ERR_FORMAT, "n_dims %u at offset %llu (must be 1..%d)", nd,
                    (unsigned long long)(c->pos - 4), GGUF_MAX_DIMS);
    t->n_dims = nd;
    uint64_t nel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
        char w[16];
        snprintf(w, sizeof w, "ne[%u]", d);
        if (rd_u64(c, &t->ne[d], w)) return -1;
        if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX)
            return fail(c, VQ_ERR_FORMAT, "ne[%u] = %llu at offset %llu (must be 1..2^63-1)", d,
                        (unsigned long long)t->ne[d], (unsigned long long)(c->pos - 8));
        if (__builtin_mul_overflow(nel, t->ne[d], &nel) || nel > (uint64_t)INT64_MAX)
            return fail(c, VQ_ERR_FORMAT, "element count overflows at ne[%u] = %llu", d,
                        (unsigned long long)t->ne[d]);
    }
    if (rd_u32(c, &t->type, "type") || rd_u64(c, &t->offset, "offset")) return -1;
    uint32_t block, bytes;
    char tn[24];
    if (vq_ggml_type_layout(t->type, &block, &bytes)) snprintf(tn, sizeof tn, "%s", TYPES[t->type].name);
    else if (extra && extra(t->type, &block, &bytes) && block && bytes) snprintf(tn, sizeof tn, "type %u", t->type);
    else return fail(c, VQ_ERR_UNSUPPORTED, "unknown tensor type %u", t->type);
    if (t->ne[0] % block)
        return fail(c, VQ_ERR_FORMAT, "row length ne[0] = %llu is not a multiple of %s's block size %u",
                    (unsigned long long)t->ne[0], tn, block);
    if (__builtin_mul_overflow(nel / block, (uint64_t)bytes, &t->nbytes))
        return fail(c, VQ_ERR_FORMAT, "byte size overflows (%llu elements of %s)", (unsigned long long)nel, tn);
    if (t->offset % alignment)
        return fail(c, VQ_ERR_FORMAT, "offset %llu is not a multiple of the alignment %llu",
                    (unsigned long long)t->offset, (unsigned long long)alignment);
    return 0;
}

static int cmp_offset(const void *a, const void *b, void *arg) {
    const vq_gguf_tensor *t = arg;
    uint64_t x = t[*(const uint64_t *)a].offset, y = t[*(const uint64_t *)b].offset;
    return x < y ? -1 : x > y;
}

/* data section: every tensor inside it, none overlapping another */
static int check_data(cursor *c, vq_gguf *g) {
    uint64_t room = c->n - g->data_off;
    char nb[96];
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        vq_gguf_tensor *t = &g->tensors[i];
        if (t->offset > room || t->nbytes > room - t->offset)
            return fail(c, VQ_ERR_FORMAT, "tensor '%s': offset %llu + %llu bytes past end of data section (%llu bytes from %llu, file size %llu)",
                        vq_gguf_show(t->name, nb, sizeof nb), (unsigned long long)t->offset,
                        (unsigned long long)t->nbytes, (unsigned long long)room,
                        (unsigned long long)g->data_off, (unsigned long long)c->n);
        t->data = c->p + g->data_off + t->offset;
    }
    if (g->n_tensors < 2) return 0;
    uint64_t *ord = malloc(g->n_tensors * sizeof *ord);
    if (!ord) return fail(c, VQ_ERR_NOMEM, "out of memory sorting %llu tensors", (unsigned long long)g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++) ord[i] = i;
    qsort_r(ord, g->n_tensors, sizeof *ord, cmp_offset, g->tensors);
    int rc = 0;
    for (uint64_t k = 1; k < g->n_tensors && !rc; k++) {
        const vq_gguf_tensor *a = &g->tensors[ord[k - 1]], *b = &g->tensors[ord[k]];
        if (b->offset < a->offset + a->nbytes) {
            char na[96];
            rc = fail(c, VQ_ERR_FORMAT, "tensor '%s' (offset %llu) overlaps tensor '%s' (offset %llu, %llu bytes)",
                      vq_gguf_show(b->name, nb, sizeof nb), (unsigned long long)b->offset,
                      vq_gguf_show(a->name, na, sizeof na), (unsigned long long)a->offset,
                      (unsigned long long)a->nbytes);
        }
    }
    free(ord);
    return rc;
}

/* ---- the whole file ---- */
static int parse_header(cursor *c, vq_gguf *g) {
    if (c->n < 4 || memcmp(c->p, "GGUF", 4) != 0) {
        if (c->n < 4) return fail(c, VQ_ERR_FORMAT, "file of %llu bytes is too short for the GGUF magic",
                                  (unsigned long long)c->n);
        return fail(c, VQ_ERR_FORMAT, "bad magic %02x %02x %02x %02x (expected \"GGUF\")", c->p[0], c->p[1],
                    c->p[2], c->p[3]);
    }
    c->pos = 4;
    if (rd_u32(c, &g->version, "version")) return -1;
    if (g->version == 1)
        return fail(c, VQ_ERR_UNSUPPORTED, "GGUF version 1 is not supported (32-bit counts; re-convert the model)");
    if (g->version != 2 && g->version != 3) {
        uint32_t v = g->version;
        if ((v & 0xffff) == 0 && (v >> 24) >= 1 && (v >> 24) <= 3)
            return fail(c, VQ_ERR_UNSUPPORTED, "version field %u looks byte-swapped: big-endian GGUF is not supported", v);
        return fail(c, VQ_ERR_FORMAT, "unknown GGUF version %u (supported: 2, 3)", v);
    }
    if (rd_u64(c, &g->n_tensors, "tensor count") || rd_u64(c, &g->n_kv, "metadata kv count")) return -1;
    /* smallest kv: 8-byte key length + 1-byte key + 4-byte type + 1-byte value;
     * smallest tensor info: 8 + 1 + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset) */
    if (g->n_kv > left(c) / 14)
        return fail(c, VQ_ERR_FORMAT, "metadata kv count %llu cannot fit in the %llu bytes left",
                    (unsigned long long)g->n_kv, (unsigned long long)left(c));
    if (g->n_tensors > left(c) / 33)
        return fail(c, VQ_ERR_FORMAT, "tensor count %llu cannot fit in the %llu bytes left",
                    (unsigned long long)g->n_tensors, (unsigned long long)left(c));
    return 0;
}

static int parse_kvs(cursor *c, vq_gguf *g) {
    g->kvs = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kvs);
    if (!g->kvs || index_init(&g->kv_index, g->n_kv))
        return fail(c, VQ_ERR_NOMEM, "out of memory for %llu metadata entries", (unsigned long long)g->n_kv);
    char nb[96];
    for (uint64_t i = 0; i < g->n_kv; i++) {
        vq_gguf_kv *kv = &g->kvs[i];
        snprintf(c->ctx, sizeof c->ctx, "kv %llu", (unsigned long long)i);
        uint64_t start = c->pos;
        if (rd_str(c, &kv->key, "key", 0, 0)) return -1;
        if (kv->key.len == 0 || kv->key.len > GGUF_MAX_KEY)
            return fail(c, VQ_ERR_FORMAT, "key length %llu (must be 1..%u)", (unsigned long long)kv->key.len, GGUF_MAX_KEY);
        snprintf(c->ctx, sizeof c->ctx, "kv %llu '%s'", (unsigned long long)i, vq_gguf_show(kv->key, nb, sizeof nb));
        int64_t dup = index_add(&g->kv_index, kv->key, i, vq_gguf_kv_name, g->kvs);
        if (dup >= 0) return fail(c, VQ_ERR_FORMAT, "duplicate key (also kv %lld)", (long long)dup);
        uint32_t t;
        if (rd_u32(c, &t, "value type") || check_type(c, t, "value type")) return -1;
        kv->type = (vq_gguf_type)t;
        if (parse_value(c, kv)) return -1;
        kv->raw = c->p + start;
        kv->raw_len = c->pos - start;
    }
    c->ctx[0] = 0;
    const vq_gguf_kv *al = vq_gguf_find(g, "general.alignment");
    g->alignment = 32;
    if (al) {
        snprintf(c->ctx, sizeof c->ctx, "kv 'general.alignment'");
        if (al->type != VQ_GGUF_UINT32)
            return fail(c, VQ_ERR_FORMAT, "type %s (must be uint32)", vq_gguf_type_name(al->type));
        if (al->val.u == 0 || (al->val.u & (al->val.u - 1)))
            return fail(c, VQ_ERR_FORMAT, "value %llu is not a nonzero power of two", (unsigned long long)al->val.u);
        g->alignment = al->val.u;
        c->ctx[0] = 0;
    }
    return 0;
}

static int parse_tensors(cursor *c, vq_gguf *g) {
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    if (!g->tensors || index_init(&g->t_index, g->n_tensors))
        return fail(c, VQ_ERR_NOMEM, "out of memory for %llu tensor infos", (unsigned long long)g->n_tensors);
    char nb[96];
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        vq_gguf_tensor *t = &g->tensors[i];
        snprintf(c->ctx, sizeof c->ctx, "tensor %llu", (unsigned long long)i);
        if (rd_str(c, &t->name, "name", 0, 0)) return -1;
        if (t->name.len == 0 || t->name.len > GGUF_MAX_KEY)
            return fail(c, VQ_ERR_FORMAT, "name length %llu (must be 1..%u)", (unsigned long long)t->name.len, GGUF_MAX_KEY);
        snprintf(c->ctx, sizeof c->ctx, "tensor '%s'", vq_gguf_show(t->name, nb, sizeof nb));
        int64_t dup = index_add(&g->t_index, t->name, i, vq_gguf_tensor_name, g->tensors);
        if (dup >= 0) return fail(c, VQ_ERR_FORMAT, "duplicate tensor name (also tensor %lld)", (long long)dup);
        if (parse_tensor(c, t, g->alignment, g->extra_layout)) return -1;
    }
    c->ctx[0] = 0;
    uint64_t end = c->pos;
    g->data_off = end + (g->alignment - end % g->alignment) % g->alignment;
    if (g->data_off > c->n) {
        if (g->n_tensors == 0) { g->data_off = c->n; return 0; }   /* no data section needed */
        return fail(c, VQ_ERR_FORMAT, "data section starts at %llu (tensor infos end at %llu, alignment %llu), past end of file (size %llu)",
                    (unsigned long long)g->data_off, (unsigned long long)end,
                    (unsigned long long)g->alignment, (unsigned long long)c->n);
    }
    return check_data(c, g);
}

static void free_parts(vq_gguf *g) {
    if (g->kvs)
        for (uint64_t i = 0; i < g->n_kv; i++) free((void *)g->kvs[i].arr_str);
    free(g->kvs);
    free(g->tensors);
    free(g->kv_index.slot);
    free(g->t_index.slot);
    free(g->name);
}

static vq_gguf *parse(const uint8_t *p, uint64_t n, const char *name, vq_gguf_layout_fn extra,
                      vq_err *err) {
    vq_gguf *g = calloc(1, sizeof *g);
    char *nm = strdup(name);
    if (!g || !nm) {
        free(g); free(nm);
        vq_err_set(err, VQ_ERR_NOMEM, "%s: out of memory", name);
        return NULL;
    }
    g->name = nm;
    g->base = p;
    g->size = n;
    g->extra_layout = extra;
    cursor c = {.p = p, .n = n, .pos = 0, .name = nm, .err = err};
    c.ctx[0] = 0;
    if (parse_header(&c, g)) goto bad;
    uint64_t n_tensors = g->n_tensors;
    g->n_tensors = 0;        /* free_parts must not walk what was never allocated */
    if (parse_kvs(&c, g)) goto bad;
    g->n_tensors = n_tensors;
    if (parse_tensors(&c, g)) goto bad;
    return g;
bad:
    free_parts(g);
    free(g);
    return NULL;
}

vq_gguf *vq_gguf_open_mem(const void *buf, size_t len, const char *name, vq_err *err) {
    static const uint8_t empty[1];
    if (!name) name = "<memory>";
    vq_err_clear(err);
    return parse(buf ? buf : empty, buf ? len : 0, name, NULL, err);
}

vq_gguf *vq_gguf_parse_mapped(const uint8_t *map, uint64_t map_size, uint64_t off, uint64_t len,
                              const char *name, vq_gguf_layout_fn extra, int own, vq_err *err) {
    if (off > map_size || len > map_size - off) {
        vq_err_set(err, VQ_ERR_FORMAT, "%s: body of %llu bytes at %llu lies past the end (%llu bytes)",
                   name, (unsigned long long)len, (unsigned long long)off, (unsigned long long)map_size);
        return NULL;
    }
    vq_gguf *g = parse(map + off, len, name, extra, err);
    if (!g) return NULL;
    g->mapped = own;
    g->map_base = map;
    g->map_size = map_size;
    return g;
}

const uint8_t *vq_gguf_map_file(const char *path, int copy, uint64_t min, const char *too_short,
                                uint64_t *out_size, vq_err *err) {
    uint64_t size;
    int fd = vq_open_regular(path, &size, err);   /* never blocks on a FIFO; refuses directories */
    if (fd < 0) return NULL;
    if (size < min) {
        close(fd);
        vq_err_set(err, VQ_ERR_FORMAT, "%s: file of %llu bytes is too short for %s", path,
                   (unsigned long long)size, too_short);
        return NULL;
    }
    if (size > SIZE_MAX) {
        close(fd);
        vq_err_set(err, VQ_ERR_RANGE, "%s: file of %llu bytes cannot be mapped", path, (unsigned long long)size);
        return NULL;
    }
    void *m;
    int e;
    if (!copy) {
        m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        e = errno;
    } else {   /* the baseline of the sharing measurement: a private copy of the whole file */
        m = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        e = errno;
        for (uint64_t o = 0; m != MAP_FAILED && o < size;) {
            ssize_t k = pread(fd, (uint8_t *)m + o, (size_t)VQ_MIN(size - o, (uint64_t)1 << 30), (off_t)o);
            if (k <= 0) { e = k < 0 ? errno : EIO; munmap(m, (size_t)size); m = MAP_FAILED; break; }
            o += (uint64_t)k;
        }
        /* read-only from here on, as a mapped file is; that also keeps the kernel from merging it
         * with neighbouring read-write memory, so /proc/PID/smaps shows it as a VMA of its own
         * (the sharing measurement finds it there, by name where the kernel has VMA names) */
        if (m != MAP_FAILED) {
            mprotect(m, (size_t)size, PROT_READ);
            prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, m, (size_t)size, "vq-weights-copy");
        }
    }
    close(fd);
    if (m == MAP_FAILED) {
        vq_err_set(err, VQ_ERR_IO, "%s: %s failed: %s", path, copy ? "reading" : "mmap", strerror(e));
        return NULL;
    }
    *out_size = size;
    return m;
}

vq_gguf *vq_gguf_open_ex(const char *path, int copy, vq_err *err) {
    vq_err_clear(err);
    uint64_t size;
    const uint8_t *m = vq_gguf_map_file(path, copy, 4, "the GGUF magic", &size, err);
    if (!m) return NULL;
    vq_gguf *g = vq_gguf_parse_mapped(m, size, 0, size, path, NULL, 1, err);
    if (!g) munmap((void *)m, (size_t)size);
    return g;
}

vq_gguf *vq_gguf_open(const char *path, vq_err *err) { return vq_gguf_open_ex(path, 0, err); }

void vq_gguf_close(vq_gguf *g) {
    if (!g) return;
    if (g->mapped) munmap((void *)g->map_base, g->map_size);
    free_parts(g);
    free(g);
}
