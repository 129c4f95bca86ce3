/* gguf_access.c: reading a parsed GGUF file: lookups by key and tensor name (hashed), typed
 * getters that name the key in their errors, and element access into packed arrays. */
#include "formats/gguf_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

uint32_t vq_gguf_version(const vq_gguf *g) { return g->version; }
uint64_t vq_gguf_n_kv(const vq_gguf *g) { return g->n_kv; }
uint64_t vq_gguf_n_tensors(const vq_gguf *g) { return g->n_tensors; }
const char *vq_gguf_path(const vq_gguf *g) { return g->name; }
uint64_t vq_gguf_alignment(const vq_gguf *g) { return g->alignment; }
uint64_t vq_gguf_data_offset(const vq_gguf *g) { return g->data_off; }
size_t vq_gguf_size(const vq_gguf *g) { return (size_t)g->size; }

const vq_gguf_kv *vq_gguf_kv_at(const vq_gguf *g, uint64_t i) { return i < g->n_kv ? &g->kvs[i] : NULL; }
const vq_gguf_tensor *vq_gguf_tensor_at(const vq_gguf *g, uint64_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const vq_gguf_kv *vq_gguf_find(const vq_gguf *g, const char *key) {
    int64_t i = vq_gguf_index_find(&g->kv_index, key, vq_gguf_kv_name, g->kvs);
    return i < 0 ? NULL : &g->kvs[i];
}

const vq_gguf_tensor *vq_gguf_find_tensor(const vq_gguf *g, const char *name) {
    int64_t i = vq_gguf_index_find(&g->t_index, name, vq_gguf_tensor_name, g->tensors);
    return i < 0 ? NULL : &g->tensors[i];
}

int vq_str_eq(vq_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

vq_str vq_gguf_arr_str(const vq_gguf_kv *kv, uint64_t i) {
    vq_str none = {"", 0};
    if (!kv || kv->type != VQ_GGUF_ARRAY || kv->arr_type != VQ_GGUF_STRING || i >= kv->arr_len || !kv->arr_str)
        return none;
    return kv->arr_str[i];
}

const char *vq_gguf_type_name(vq_gguf_type t) {
    static const char *names[13] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                    "bool", "string", "array", "uint64", "int64", "float64"};
    return (unsigned)t < 13 ? names[t] : "?";
}

/* ---- packed array elements (little-endian, unaligned) ---- */
static uint64_t le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* element i of a numeric array as raw bits; 0 bytes when not numeric or out of range */
static int elem(const vq_gguf_kv *kv, uint64_t i, uint64_t *bits) {
    static const int sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (!kv || kv->type != VQ_GGUF_ARRAY || (unsigned)kv->arr_type >= 13 || i >= kv->arr_len) return 0;
    int s = sz[kv->arr_type];
    if (s) *bits = le(kv->arr_data + i * (uint64_t)s, s);
    return s;
}

int64_t vq_gguf_arr_int(const vq_gguf_kv *kv, uint64_t i) {
    uint64_t b;
    if (!elem(kv, i, &b)) return 0;
    switch (kv->arr_type) {
    case VQ_GGUF_INT8: return (int8_t)b;
    case VQ_GGUF_INT16: return (int16_t)b;
    case VQ_GGUF_INT32: return (int32_t)b;
    case VQ_GGUF_FLOAT32: case VQ_GGUF_FLOAT64: {   /* truncated toward zero, clamped, NaN -> 0 */
        double d = vq_gguf_arr_float(kv, i);
        if (!(d == d)) return 0;
        if (d >= 9.2233720368547758e18) return INT64_MAX;
        if (d <= -9.2233720368547758e18) return INT64_MIN;
        return (int64_t)d;
    }
    default: return (int64_t)b;
    }
}

uint64_t vq_gguf_arr_uint(const vq_gguf_kv *kv, uint64_t i) { return (uint64_t)vq_gguf_arr_int(kv, i); }

double vq_gguf_arr_float(const vq_gguf_kv *kv, uint64_t i) {
    uint64_t b;
    if (!elem(kv, i, &b)) return 0;
    if (kv->arr_type == VQ_GGUF_FLOAT32) { float f; uint32_t u = (uint32_t)b; memcpy(&f, &u, 4); return f; }
    if (kv->arr_type == VQ_GGUF_FLOAT64) { double d; memcpy(&d, &b, 8); return d; }
    if (kv->arr_type == VQ_GGUF_UINT64) return (double)b;
    return (double)vq_gguf_arr_int(kv, i);
}

/* ---- typed getters ---- */
static const vq_gguf_kv *want(const vq_gguf *g, const char *key, vq_err *err) {
    const vq_gguf_kv *kv = vq_gguf_find(g, key);
    if (!kv) vq_err_set(err, VQ_ERR_FORMAT, "%s: key '%s' not found", g->name, key);
    return kv;
}

static vq_status wrong_type(const vq_gguf *g, const vq_gguf_kv *kv, const char *key, const char *expected, vq_err *err) {
    return vq_err_set(err, VQ_ERR_FORMAT, "%s: key '%s' has type %s, expected %s", g->name, key,
                      vq_gguf_type_name(kv->type), expected);
}

/* integer value of a scalar integer kv: 1 when it is one, with *neg set for negative values */
static int as_int(const vq_gguf_kv *kv, uint64_t *u, int *neg) {
    switch (kv->type) {
    case VQ_GGUF_UINT8: case VQ_GGUF_UINT16: case VQ_GGUF_UINT32: case VQ_GGUF_UINT64:
        *u = kv->val.u; *neg = 0; return 1;
    case VQ_GGUF_INT8: case VQ_GGUF_INT16: case VQ_GGUF_INT32: case VQ_GGUF_INT64:
        *neg = kv->val.i < 0; *u = (uint64_t)kv->val.i; return 1;
    default: return 0;
    }
}

vq_status vq_gguf_get_u64(const vq_gguf *g, const char *key, uint64_t *out, vq_err *err) {
    const vq_gguf_kv *kv = want(g, key, err);
    if (!kv) return VQ_ERR_FORMAT;
    uint64_t u; int neg;
    if (!as_int(kv, &u, &neg)) return wrong_type(g, kv, key, "an integer", err);
    if (neg)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: key '%s' = %lld is negative", g->name, key, (long long)kv->val.i);
    *out = u;
    return VQ_OK;
}

vq_status vq_gguf_get_u32(const vq_gguf *g, const char *key, uint32_t *out, vq_err *err) {
    uint64_t u;
    vq_status s = vq_gguf_get_u64(g, key, &u, err);
    if (s) return s;
    if (u > UINT32_MAX)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: key '%s' = %llu does not fit 32 bits", g->name, key,
                          (unsigned long long)u);
    *out = (uint32_t)u;
    return VQ_OK;
}

vq_status vq_gguf_get_f32(const vq_gguf *g, const char *key, float *out, vq_err *err) {
    const vq_gguf_kv *kv = want(g, key, err);
    if (!kv) return VQ_ERR_FORMAT;
    if (kv->type != VQ_GGUF_FLOAT32 && kv->type != VQ_GGUF_FLOAT64) return wrong_type(g, kv, key, "a float", err);
    double d = kv->val.f;
    if (d == d && (d > FLT_MAX || d < -FLT_MAX) && d != INFINITY && d != -INFINITY)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: key '%s' = %g is out of float32 range", g->name, key, d);
    *out = (float)d;
    return VQ_OK;
}

vq_status vq_gguf_get_str(const vq_gguf *g, const char *key, vq_str *out, vq_err *err) {
    const vq_gguf_kv *kv = want(g, key, err);
    if (!kv) return VQ_ERR_FORMAT;
    if (kv->type != VQ_GGUF_STRING) return wrong_type(g, kv, key, "string", err);
    *out = kv->str;
    return VQ_OK;
}

vq_status vq_gguf_get_bool(const vq_gguf *g, const char *key, int *out, vq_err *err) {
    const vq_gguf_kv *kv = want(g, key, err);
    if (!kv) return VQ_ERR_FORMAT;
    if (kv->type != VQ_GGUF_BOOL) return wrong_type(g, kv, key, "bool", err);
    *out = kv->val.b;
    return VQ_OK;
}

vq_status vq_gguf_get_arr(const vq_gguf *g, const char *key, vq_gguf_type elem_type, const vq_gguf_kv **out,
                          vq_err *err) {
    const vq_gguf_kv *kv = want(g, key, err);
    if (!kv) return VQ_ERR_FORMAT;
    if (kv->type != VQ_GGUF_ARRAY) return wrong_type(g, kv, key, "array", err);
    if (kv->arr_type != elem_type)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: key '%s' is an array of %s, expected an array of %s", g->name,
                          key, vq_gguf_type_name(kv->arr_type), vq_gguf_type_name(elem_type));
    *out = kv;
    return VQ_OK;
}
