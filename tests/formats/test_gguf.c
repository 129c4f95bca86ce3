/* test_gguf.c: the GGUF reader against files written here (v2/v3, alignment 32/64, every value
 * type, one tensor of each type), every truncation of them, one-field corruptions, and, when it
 * was fetched, the real SmolLM2 model. */
#include "formats/gguf.h"
#include "kernels/wtype_ids.h"   /* type ids (header only) */
#include "../vq_test.h"
#include "gguf_writer.h"

#include <stdint.h>
#include <sys/stat.h>

/* open a private copy of exactly n bytes, so ASan sees any read past the end */
static int open_copy(const uint8_t *p, size_t n, vq_err *e) {
    uint8_t *c = malloc(n ? n : 1);
    if (n) memcpy(c, p, n);
    vq_gguf *g = vq_gguf_open_mem(c, n, "t.gguf", e);
    int opened = g != NULL;
    vq_gguf_close(g);   /* the buffer is borrowed: close before freeing it */
    free(c);
    return opened;
}

/* expect open to fail with code, a message naming the buffer and containing needle */
#define EXPECT_FAIL(buf, n, code_, needle) do { vq_err _e; \
    int _g = open_copy((buf), (n), &_e); \
    CHECKF(!_g && _e.code == (code_) && strncmp(_e.msg, "t.gguf: ", 8) == 0 && strstr(_e.msg, (needle)), \
           "got code %d msg '%s', want code %d and '%s'", _g ? 0 : (int)_e.code, _g ? "(opened)" : _e.msg, \
           (int)(code_), (needle)); } while (0)

static void check_values(const vq_gguf *g, const tw_opts *o, const tw_layout *L, const uint8_t *base) {
    vq_err e;
    CHECK(vq_gguf_version(g) == o->version);
    CHECK(vq_gguf_n_kv(g) == L->n_kv_written);
    CHECK(vq_gguf_n_tensors(g) == (uint64_t)o->n_tensors);
    CHECK(vq_gguf_alignment(g) == (o->alignment ? o->alignment : 32));
    CHECK(vq_gguf_data_offset(g) == L->data_off);
    const vq_gguf_kv *kv;
    CHECK((kv = vq_gguf_find(g, "k.u8")) && kv->type == VQ_GGUF_UINT8 && kv->val.u == 200);
    CHECK((kv = vq_gguf_find(g, "k.i8")) && kv->type == VQ_GGUF_INT8 && kv->val.i == -100);
    CHECK((kv = vq_gguf_find(g, "k.u16")) && kv->type == VQ_GGUF_UINT16 && kv->val.u == 60000);
    CHECK((kv = vq_gguf_find(g, "k.i16")) && kv->type == VQ_GGUF_INT16 && kv->val.i == -30000);
    CHECK((kv = vq_gguf_find(g, "k.u32")) && kv->type == VQ_GGUF_UINT32 && kv->val.u == 4000000000u);
    CHECK((kv = vq_gguf_find(g, "k.i32")) && kv->type == VQ_GGUF_INT32 && kv->val.i == -2000000000);
    CHECK((kv = vq_gguf_find(g, "k.f32")) && kv->type == VQ_GGUF_FLOAT32 && kv->val.f == 1.5);
    CHECK((kv = vq_gguf_find(g, "k.bool")) && kv->type == VQ_GGUF_BOOL && kv->val.b == 1);
    CHECK((kv = vq_gguf_find(g, "k.str")) && kv->type == VQ_GGUF_STRING && vq_str_eq(kv->str, "hello, gguf"));
    CHECK((kv = vq_gguf_find(g, "k.u64")) && kv->type == VQ_GGUF_UINT64 && kv->val.u == (1ull << 63) + 5);
    CHECK((kv = vq_gguf_find(g, "k.i64")) && kv->type == VQ_GGUF_INT64 && kv->val.i == -(1ll << 62));
    CHECK((kv = vq_gguf_find(g, "k.f64")) && kv->type == VQ_GGUF_FLOAT64 && kv->val.f == -2.25e100);
    CHECK((kv = vq_gguf_find(g, "k.empty")) && kv->type == VQ_GGUF_STRING && kv->str.len == 0 && vq_str_eq(kv->str, ""));
    CHECK(vq_gguf_find(g, "k.u") == NULL && vq_gguf_find(g, "k.u8x") == NULL && vq_gguf_find(g, "") == NULL);
    /* order is kept: kv_at walks them as written */
    CHECK((kv = vq_gguf_kv_at(g, 0)) && vq_str_eq(kv->key, "k.u8"));
    CHECK((kv = vq_gguf_kv_at(g, L->n_kv_written - 1)) && vq_str_eq(kv->key, "a.nested"));
    CHECK(vq_gguf_kv_at(g, L->n_kv_written) == NULL);

    /* arrays */
    CHECK((kv = vq_gguf_find(g, "a.u8")) && kv->type == VQ_GGUF_ARRAY && kv->arr_type == VQ_GGUF_UINT8 &&
          kv->arr_len == 3 && vq_gguf_arr_uint(kv, 0) == 1 && vq_gguf_arr_uint(kv, 2) == 255 &&
          kv->arr_data == base + L->arr_type_u8 + 12);
    CHECK((kv = vq_gguf_find(g, "a.i8")) && kv->arr_type == VQ_GGUF_INT8 && vq_gguf_arr_int(kv, 0) == -128 &&
          vq_gguf_arr_int(kv, 1) == 127);
    CHECK((kv = vq_gguf_find(g, "a.u16")) && kv->arr_type == VQ_GGUF_UINT16 && vq_gguf_arr_uint(kv, 0) == 65535);
    CHECK((kv = vq_gguf_find(g, "a.i16")) && kv->arr_type == VQ_GGUF_INT16 && vq_gguf_arr_int(kv, 0) == -1 &&
          vq_gguf_arr_int(kv, 1) == 2);
    CHECK((kv = vq_gguf_find(g, "a.u32")) && vq_gguf_arr_uint(kv, 0) == 4294967295u);
    CHECK((kv = vq_gguf_find(g, "a.i32")) && kv->arr_len == 3 && vq_gguf_arr_int(kv, 0) == -5 &&
          vq_gguf_arr_int(kv, 1) == 7 && vq_gguf_arr_int(kv, 2) == INT32_MIN && vq_gguf_arr_int(kv, 3) == 0);
    CHECK((kv = vq_gguf_find(g, "a.f32")) && vq_gguf_arr_float(kv, 0) == 0.5 && vq_gguf_arr_float(kv, 1) == (double)-1e30f);
    CHECK((kv = vq_gguf_find(g, "a.bool")) && kv->arr_type == VQ_GGUF_BOOL && vq_gguf_arr_int(kv, 0) == 1 &&
          vq_gguf_arr_int(kv, 1) == 0 && vq_gguf_arr_int(kv, 2) == 1);
    CHECK((kv = vq_gguf_find(g, "a.str")) && kv->arr_type == VQ_GGUF_STRING && kv->arr_len == 4);
    if (kv) {
        CHECK(vq_str_eq(vq_gguf_arr_str(kv, 0), "alpha"));
        CHECK(vq_gguf_arr_str(kv, 1).len == 0);
        vq_str s = vq_gguf_arr_str(kv, 2);
        CHECK(s.len == 3 && memcmp(s.ptr, "g\0x", 3) == 0);
        CHECK(vq_str_eq(vq_gguf_arr_str(kv, 3), "\xce\xb3"));
        CHECK(vq_gguf_arr_str(kv, 4).len == 0);   /* out of range: empty, no crash */
    }
    CHECK((kv = vq_gguf_find(g, "a.u64")) && vq_gguf_arr_uint(kv, 0) == UINT64_MAX && vq_gguf_arr_uint(kv, 1) == 0);
    CHECK((kv = vq_gguf_find(g, "a.i64")) && vq_gguf_arr_int(kv, 0) == INT64_MIN);
    CHECK((kv = vq_gguf_find(g, "a.f64")) && vq_gguf_arr_float(kv, 0) == 3.25 && vq_gguf_arr_float(kv, 1) == 0.0);
    CHECK((kv = vq_gguf_find(g, "a.empty")) && kv->arr_type == VQ_GGUF_UINT32 && kv->arr_len == 0);
    /* conversions between element kinds: floats truncate and clamp, ints widen to double */
    CHECK((kv = vq_gguf_find(g, "a.f32")) && vq_gguf_arr_int(kv, 0) == 0 && vq_gguf_arr_int(kv, 1) == INT64_MIN);
    CHECK((kv = vq_gguf_find(g, "a.f64")) && vq_gguf_arr_int(kv, 0) == 3 && vq_gguf_arr_uint(kv, 0) == 3);
    CHECK((kv = vq_gguf_find(g, "a.u64")) && vq_gguf_arr_float(kv, 0) == 18446744073709551615.0);
    CHECK((kv = vq_gguf_find(g, "a.i32")) && vq_gguf_arr_float(kv, 0) == -5.0 && vq_gguf_arr_float(kv, 3) == 0.0);
    CHECK((kv = vq_gguf_find(g, "a.str")) && vq_gguf_arr_int(kv, 0) == 0 && vq_gguf_arr_float(kv, 0) == 0.0);
    CHECK((kv = vq_gguf_find(g, "k.u8")) && vq_gguf_arr_int(kv, 0) == 0 && vq_gguf_arr_str(kv, 0).len == 0);
    CHECK((kv = vq_gguf_find(g, "a.nested")) && kv->arr_type == VQ_GGUF_ARRAY && kv->arr_len == 2 &&
          kv->arr_data == base + L->nested_type + 12);

    /* typed getters */
    uint32_t u32 = 0; uint64_t u64 = 0; float f = 0; int bl = -1; vq_str s = {0};
    CHECK(vq_gguf_get_u32(g, "k.u8", &u32, &e) == VQ_OK && u32 == 200);
    CHECK(vq_gguf_get_u32(g, "k.u32", &u32, &e) == VQ_OK && u32 == 4000000000u);
    CHECK(vq_gguf_get_u32(g, "k.i8", &u32, &e) == VQ_ERR_FORMAT && strstr(e.msg, "k.i8") && strstr(e.msg, "negative"));
    CHECK(vq_gguf_get_u32(g, "k.u64", &u32, &e) == VQ_ERR_FORMAT && strstr(e.msg, "32 bits"));
    CHECK(vq_gguf_get_u64(g, "k.u64", &u64, &e) == VQ_OK && u64 == (1ull << 63) + 5);
    CHECK(vq_gguf_get_u32(g, "k.str", &u32, &e) == VQ_ERR_FORMAT && strstr(e.msg, "'k.str' has type string"));
    CHECK(vq_gguf_get_u32(g, "no.such", &u32, &e) == VQ_ERR_FORMAT && strstr(e.msg, "'no.such' not found"));
    CHECK(vq_gguf_get_f32(g, "k.f32", &f, &e) == VQ_OK && f == 1.5f);
    CHECK(vq_gguf_get_f32(g, "k.u8", &f, &e) == VQ_ERR_FORMAT);
    CHECK(vq_gguf_get_f32(g, "k.f64", &f, &e) == VQ_ERR_FORMAT && strstr(e.msg, "out of float32 range"));
    CHECK(vq_gguf_get_bool(g, "k.bool", &bl, &e) == VQ_OK && bl == 1);
    CHECK(vq_gguf_get_bool(g, "k.u8", &bl, &e) == VQ_ERR_FORMAT);
    CHECK(vq_gguf_get_str(g, "k.str", &s, &e) == VQ_OK && vq_str_eq(s, "hello, gguf"));
    CHECK(vq_gguf_get_str(g, "a.str", &s, &e) == VQ_ERR_FORMAT && strstr(e.msg, "type array"));
    const vq_gguf_kv *arr = NULL;
    CHECK(vq_gguf_get_arr(g, "a.str", VQ_GGUF_STRING, &arr, &e) == VQ_OK && arr && arr->arr_len == 4);
    CHECK(vq_gguf_get_arr(g, "a.str", VQ_GGUF_INT32, &arr, &e) == VQ_ERR_FORMAT && strstr(e.msg, "array of string"));

    /* tensors */
    for (int t = 0; t < o->n_tensors; t++) {
        const vq_gguf_tensor *x = vq_gguf_find_tensor(g, TW_T[t].name);
        CHECKF(x && x == vq_gguf_tensor_at(g, (uint64_t)t), "tensor %s", TW_T[t].name);
        if (!x) continue;
        CHECK(vq_str_eq(x->name, TW_T[t].name));
        CHECK(x->n_dims == TW_T[t].n_dims && x->type == TW_T[t].type);
        for (int d = 0; d < 4; d++) CHECK(x->ne[d] == TW_T[t].ne[d]);
        CHECKF(x->nbytes == TW_T[t].nbytes, "%s nbytes %llu", TW_T[t].name, (unsigned long long)x->nbytes);
        CHECK(x->offset == L->t_off[t]);
        CHECK((const uint8_t *)x->data == base + L->data_off + L->t_off[t]);
        CHECK((x->offset % vq_gguf_alignment(g)) == 0);
        int same = 1;
        for (uint64_t i = 0; i < x->nbytes; i++) same &= ((const uint8_t *)x->data)[i] == tw_pattern(t, i);
        CHECKF(same, "tensor %s data differs", TW_T[t].name);
    }
    CHECK(vq_gguf_find_tensor(g, "t.f3") == NULL && vq_gguf_tensor_at(g, (uint64_t)o->n_tensors) == NULL);
}

/* every prefix of a valid file fails with VQ_ERR_FORMAT, and the message names the buffer */
static void check_truncations(const tw_buf *b) {
    int bad = 0;
    for (size_t n = 0; n < b->n; n++) {
        vq_err e;
        int g = open_copy(b->p, n, &e);
        if (g || e.code != VQ_ERR_FORMAT || strncmp(e.msg, "t.gguf: ", 8) != 0) {
            if (bad++ < 5) fprintf(stderr, "truncated at %zu of %zu: %s (code %d)\n", n, b->n, g ? "opened" : e.msg, (int)e.code);
        }
    }
    CHECKF(bad == 0, "%d of %zu truncations did not fail cleanly", bad, b->n);
}

static void check_corruptions(const tw_buf *b, const tw_layout *L) {
    uint8_t *c = malloc(b->n);
#define FRESH() memcpy(c, b->p, b->n)
    FRESH(); c[3] = 'G'; EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "bad magic");
    FRESH(); tw_patch(c, L->version, 1, 4); EXPECT_FAIL(c, b->n, VQ_ERR_UNSUPPORTED, "version 1");
    FRESH(); tw_patch(c, L->version, 4, 4); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "unknown GGUF version 4");
    FRESH(); tw_patch(c, L->version, 0, 4); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "unknown GGUF version 0");
    FRESH(); tw_patch(c, L->version, 3u << 24, 4); EXPECT_FAIL(c, b->n, VQ_ERR_UNSUPPORTED, "big-endian");
    /* hostile counts and lengths: refused before any allocation (ASan aborts on a huge one) */
    FRESH(); tw_patch(c, L->n_kv, UINT64_MAX, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "kv count");
    FRESH(); tw_patch(c, L->n_kv, 1ull << 40, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "kv count");
    FRESH(); tw_patch(c, L->n_tensors, 1ull << 62, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "tensor count");
    FRESH(); tw_patch(c, L->n_kv, L->n_kv_written + 1, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "tensor 0: name length");
    FRESH(); tw_patch(c, L->key_u8, UINT64_MAX, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "kv 0: key length");
    FRESH(); tw_patch(c, L->key_u8, 0, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "key length 0");
    FRESH(); tw_patch(c, L->arr_type_u8 + 4, 1ull << 61, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "'a.u8': array of");
    FRESH(); tw_patch(c, L->arr_len_str, 1ull << 60, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "'a.str': array of");
    FRESH(); tw_patch(c, L->arr_len_str + 8, UINT64_MAX - 3, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "string 0 of 4 length");
    FRESH(); tw_patch(c, L->nested_type + 4, 1ull << 59, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "array of");
    /* bad types and values */
    FRESH(); tw_patch(c, L->key_u8 + 12, 13, 4); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "value type 13");
    FRESH(); tw_patch(c, L->arr_type_u8, 0xffffffffu, 4); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "array element type 4294967295");
    FRESH(); tw_patch(c, L->nested_type + 12, 77, 4); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "array element type 77");
    FRESH(); c[L->val_bool] = 2; EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "bool value 2");
    FRESH(); memcpy(c + L->key_i8 + 8, "k.u8", 4); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "kv 1 'k.u8': duplicate key");
    if (L->align_val) {
        FRESH(); tw_patch(c, L->align_val, 0, 4); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "general.alignment");
        FRESH(); tw_patch(c, L->align_val, 48, 4); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "48 is not a nonzero power of two");
        FRESH(); tw_patch(c, L->align_val - 4, 5, 4); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "type int32 (must be uint32)");
    }
    /* tensor infos */
    FRESH(); tw_patch(c, L->n_dims[1], 5, 4); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "tensor 't.f16': n_dims 5");
    FRESH(); tw_patch(c, L->n_dims[1], 0, 4); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "n_dims 0");
    FRESH(); tw_patch(c, L->ne[1] + 8, 0, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "ne[1] = 0");
    FRESH(); tw_patch(c, L->ne[1], 1ull << 63, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "ne[0] = 9223372036854775808");
    FRESH(); tw_patch(c, L->ne[1], 1ull << 32, 8); tw_patch(c, L->ne[1] + 8, 1ull << 32, 8);
    EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "element count overflows");
    FRESH(); tw_patch(c, L->ne[5], 1ull << 40, 8); tw_patch(c, L->ne[5] + 16, 1ull << 40, 8);
    EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "tensor 't.q4_1': element count overflows at ne[2]");
    /* 2^62 F32 elements: the count fits int64 but the byte size (2^64) does not */
    FRESH(); tw_patch(c, L->ne[0], 1ull << 61, 8); tw_patch(c, L->ne[0] + 8, 2, 8);
    EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "byte size overflows");
    FRESH(); tw_patch(c, L->ne[3], 33, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "ne[0] = 33 is not a multiple of Q8_0's block size 32");
    FRESH(); tw_patch(c, L->type[2], 99, 4); EXPECT_FAIL(c, b->n, VQ_ERR_UNSUPPORTED, "tensor 't.bf16': unknown tensor type 99");
    FRESH(); tw_patch(c, L->type[2], 4, 4); EXPECT_FAIL(c, b->n, VQ_ERR_UNSUPPORTED, "unknown tensor type 4");
    FRESH(); tw_patch(c, L->offset[2], L->t_off[2] + 1, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "not a multiple of the alignment");
    FRESH(); tw_patch(c, L->offset[2], L->t_off[1], 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "overlaps");
    FRESH(); tw_patch(c, L->offset[0], 1ull << 20, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "tensor 't.f32': offset 1048576 + 96 bytes past end");
    FRESH(); tw_patch(c, L->offset[0], UINT64_MAX - 31 - 32, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "past end");
    FRESH(); memcpy(c + L->name[1] + 8, "t.f32", 5); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "tensor 't.f32': duplicate tensor name");
    FRESH(); tw_patch(c, L->name[3], 0, 8); EXPECT_FAIL(c, b->n, VQ_ERR_FORMAT, "tensor 3: name length 0");
    /* more tensors claimed than written: the next info is read from the padding/data and fails */
    FRESH(); tw_patch(c, L->n_tensors, TW_NT + 1, 8);
    { vq_err e; CHECK(!open_copy(c, b->n, &e) && e.code == VQ_ERR_FORMAT); }
    free(c);
#undef FRESH
}

/* arrays nested n deep around one empty u8 array */
static tw_buf nested_file(int depth) {
    tw_buf b = {0};
    tw_put(&b, "GGUF", 4); tw_u32(&b, 3); tw_u64(&b, 0); tw_u64(&b, 1);
    tw_key(&b, "deep", 9);
    for (int i = 1; i < depth; i++) { tw_u32(&b, 9); tw_u64(&b, 1); }
    tw_u32(&b, 0); tw_u64(&b, 0);
    return b;
}

static void check_misc(void) {
    vq_err e;
    /* nesting limit */
    tw_buf b = nested_file(8);
    vq_gguf *g = vq_gguf_open_mem(b.p, b.n, "t.gguf", &e);
    CHECKF(g && vq_gguf_find(g, "deep") && vq_gguf_find(g, "deep")->arr_type == VQ_GGUF_ARRAY, "%s", g ? "" : e.msg);
    vq_gguf_close(g);
    free(b.p);
    b = nested_file(9);
    EXPECT_FAIL(b.p, b.n, VQ_ERR_FORMAT, "nested deeper than 8");
    free(b.p);
    /* a file with no tensors may end right after its metadata (no data section) */
    b = nested_file(1);
    g = vq_gguf_open_mem(b.p, b.n, "t.gguf", &e);
    CHECKF(g && vq_gguf_n_tensors(g) == 0 && vq_gguf_n_kv(g) == 1, "%s", g ? "" : e.msg);
    vq_gguf_close(g);
    free(b.p);
    EXPECT_FAIL(NULL, 0, VQ_ERR_FORMAT, "too short");
    g = vq_gguf_open_mem(NULL, 0, NULL, &e);
    CHECK(!g && strncmp(e.msg, "<memory>: ", 10) == 0);
    /* files: absent, a directory, empty */
    CHECK(!vq_gguf_open("/nonexistent/x.gguf", &e) && e.code == VQ_ERR_IO && strstr(e.msg, "/nonexistent/x.gguf"));
    CHECK(!vq_gguf_open("/tmp", &e) && e.code == VQ_ERR_IO && strstr(e.msg, "is a directory"));
    CHECK(vq_ggml_type_name(3) && strcmp(vq_ggml_type_name(3), "Q4_1") == 0 && vq_ggml_type_name(4) == NULL);
    uint32_t blk = 0, by = 0;
    CHECK(vq_ggml_type_layout(14, &blk, &by) && blk == 256 && by == 210);   /* Q6_K */
    CHECK(!vq_ggml_type_layout(1000, &blk, &by));
}

/* the same bytes through the mmap path */
static void check_file(const tw_buf *b, const tw_opts *o, const tw_layout *L) {
    char path[] = "/tmp/vq_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    CHECK(write(fd, b->p, b->n) == (ssize_t)b->n);
    close(fd);
    vq_err e;
    vq_gguf *g = vq_gguf_open(path, &e);
    CHECKF(g != NULL, "%s", e.msg);
    if (g) {
        CHECK(strcmp(vq_gguf_path(g), path) == 0 && vq_gguf_size(g) == b->n);
        const vq_gguf_tensor *t = vq_gguf_tensor_at(g, 0);
        check_values(g, o, L, (const uint8_t *)t->data - L->data_off - L->t_off[0]);
        for (uint64_t i = 0; i < vq_gguf_n_tensors(g); i++)
            CHECK(((uintptr_t)vq_gguf_tensor_at(g, i)->data % vq_gguf_alignment(g)) == 0);   /* page-aligned map */
        vq_gguf_close(g);
    }
    /* truncated on disk: names the path */
    CHECK(truncate(path, (off_t)(b->n - 1)) == 0);
    CHECK(!vq_gguf_open(path, &e) && e.code == VQ_ERR_FORMAT && strncmp(e.msg, path, strlen(path)) == 0);
    CHECK(truncate(path, 0) == 0);
    CHECK(!vq_gguf_open(path, &e) && e.code == VQ_ERR_FORMAT);
    unlink(path);
}

static void check_model(void) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", VQ_MODELS_DIR);
    if (access(buf, R_OK) != 0) { printf("SmolLM2 model absent (scripts/fetch_model.sh): its checks skipped\n"); return; }
    vq_err e;
    double t0 = vq_now_s();
    vq_gguf *g = vq_gguf_open(buf, &e);
    double dt = vq_now_s() - t0;
    CHECKF(g != NULL, "%s", e.msg);
    if (!g) return;
    printf("SmolLM2: opened and validated in %.1f ms\n", dt * 1e3);
    CHECK(vq_gguf_version(g) == 3);
    CHECK(vq_gguf_n_tensors(g) == 272);
    CHECK(vq_gguf_n_kv(g) == 33);
    uint32_t u = 0;
    CHECK(vq_gguf_get_u32(g, "llama.block_count", &u, &e) == VQ_OK && u == 30);
    CHECK(vq_gguf_get_u32(g, "llama.embedding_length", &u, &e) == VQ_OK && u == 576);
    float f = 0;
    CHECK(vq_gguf_get_f32(g, "llama.rope.freq_base", &f, &e) == VQ_OK && f == 100000.0f);
    vq_str s;
    CHECK(vq_gguf_get_str(g, "general.architecture", &s, &e) == VQ_OK && vq_str_eq(s, "llama"));
    CHECK(vq_gguf_get_str(g, "tokenizer.ggml.pre", &s, &e) == VQ_OK && vq_str_eq(s, "smollm"));
    const vq_gguf_kv *kv = NULL;
    CHECK(vq_gguf_get_arr(g, "tokenizer.ggml.tokens", VQ_GGUF_STRING, &kv, &e) == VQ_OK && kv->arr_len == 49152);
    if (kv) {
        uint64_t total = 0;
        for (uint64_t i = 0; i < kv->arr_len; i++) total += vq_gguf_arr_str(kv, i).len;
        CHECK(total > 49152);
    }
    CHECK(vq_gguf_get_arr(g, "tokenizer.ggml.merges", VQ_GGUF_STRING, &kv, &e) == VQ_OK && kv->arr_len == 48900);
    CHECK(vq_gguf_get_arr(g, "tokenizer.ggml.token_type", VQ_GGUF_INT32, &kv, &e) == VQ_OK && kv->arr_len == 49152);
    const vq_gguf_tensor *t = vq_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->type == VQ_TYPE_Q8_0 && t->n_dims == 2 && t->ne[0] == 576 && t->ne[1] == 49152 &&
          t->nbytes == 576ull * 49152 / 32 * 34);
    t = vq_gguf_find_tensor(g, "blk.0.attn_k.weight");
    CHECK(t && t->type == VQ_TYPE_Q4_1 && t->ne[0] == 576 && t->ne[1] == 192 && t->nbytes == 69120);
    t = vq_gguf_find_tensor(g, "blk.29.ffn_norm.weight");
    CHECK(t && t->type == VQ_TYPE_F32 && t->n_dims == 1 && t->ne[0] == 576 && t->nbytes == 576 * 4);
    CHECK(vq_gguf_find_tensor(g, "blk.30.ffn_norm.weight") == NULL);
    /* every tensor inside the file, aligned, and the tensors tile the data section without overlap */
    uint64_t sum = 0;
    int ok = 1;
    for (uint64_t i = 0; i < vq_gguf_n_tensors(g); i++) {
        t = vq_gguf_tensor_at(g, i);
        sum += t->nbytes;
        ok &= vq_gguf_data_offset(g) + t->offset + t->nbytes <= vq_gguf_size(g) && t->offset % 32 == 0;
    }
    CHECK(ok);
    CHECK(sum <= vq_gguf_size(g) - vq_gguf_data_offset(g) && sum > vq_gguf_size(g) / 2);
    vq_gguf_close(g);
}

int main(void) {
    const uint32_t versions[2] = {2, 3}, aligns[3] = {0, 32, 64};
    for (int vi = 0; vi < 2; vi++)
        for (int ai = 0; ai < 3; ai++)
            for (int rev = 0; rev < 2; rev++) {
                tw_opts o = {versions[vi], aligns[ai], rev, TW_NT};
                tw_layout L;
                tw_buf b = tw_build(&o, &L);
                vq_err e;
                vq_gguf *g = vq_gguf_open_mem(b.p, b.n, "t.gguf", &e);
                CHECKF(g != NULL, "v%u align %u rev %d: %s", o.version, o.alignment, rev, e.msg);
                if (g) { check_values(g, &o, &L, b.p); vq_gguf_close(g); }
                if (rev == 0 && ai != 1) {
                    check_truncations(&b);
                    check_corruptions(&b, &L);
                }
                if (vi == 1 && rev == 1) check_file(&b, &o, &L);
                free(b.p);
            }
    check_misc();
    check_model();
    return vq_t_done();
}
