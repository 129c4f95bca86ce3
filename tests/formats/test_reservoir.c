/* test_reservoir.c: the reservoir file (formats/reservoir.h) written from the test GGUF (every
 * metadata type, one tensor of each type): the metadata copied entry for entry, every tensor
 * page-aligned in the mapping and byte-equal, the copy mode; every truncation, a flipped byte in
 * each region (header, metadata, each tensor, padding) refused with a message naming it; other
 * versions; types beyond ggml's only through the caller's layout table; atomic writing. */
#include "formats/reservoir.h"
#include "../vq_test.h"
#include "gguf_writer.h"

#include <stdint.h>
#include <sys/stat.h>

static const char *dir;

/* a private copy of exactly n bytes, so ASan sees any read past the end */
static vq_gguf *open_copy(const uint8_t *p, size_t n, vq_gguf_layout_fn extra, vq_err *e, uint8_t **keep) {
    uint8_t *c = malloc(n ? n : 1);
    if (n) memcpy(c, p, n);
    vq_gguf *g = vq_reservoir_open_mem(c, n, "t.vqr", extra, e);
    if (!g) { free(c); *keep = NULL; } else *keep = c;
    return g;
}
static int opens(const uint8_t *p, size_t n, vq_err *e) {
    uint8_t *k;
    vq_gguf *g = open_copy(p, n, NULL, e, &k);
    vq_gguf_close(g);
    free(k);
    return g != NULL;
}
#define EXPECT_FAIL(buf, n, code_, needle) do { vq_err _e; int _o = opens((buf), (n), &_e); \
    CHECKF(!_o && _e.code == (code_) && strstr(_e.msg, "t.vqr") && strstr(_e.msg, (needle)), \
           "got %s code %d '%s', want code %d and '%s'", _o ? "opened" : "", _o ? 0 : (int)_e.code, \
           _o ? "" : _e.msg, (int)(code_), (needle)); } while (0)

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)sz);
    *n = fread(p, 1, (size_t)sz, f);
    fclose(f);
    return p;
}

static int layout_extra(uint32_t type, uint32_t *block, uint32_t *bytes) {
    if (type != 0x10001) return 0;
    *block = 64;
    *bytes = 40;
    return 1;
}

int main(void) {
    char dbuf[] = "/tmp/vq_test_reservoir_XXXXXX";
    dir = mkdtemp(dbuf);
    if (!dir) VQ_SKIP("cannot make a temporary folder");
    /* the source: the test GGUF (alignment 32) */
    tw_opts o = { 3, 0, 0, TW_NT };
    tw_layout L;
    tw_buf src = tw_build(&o, &L);
    vq_err e;
    vq_gguf *g = vq_gguf_open_mem(src.p, src.n, "src.gguf", &e);
    CHECKF(g != NULL, "%s", e.msg);
    if (!g) return vq_t_done();
    vq_res_tensor t[TW_NT + 1];
    for (int i = 0; i < TW_NT; i++) {
        const vq_gguf_tensor *s = vq_gguf_find_tensor(g, TW_T[i].name);
        t[i] = (vq_res_tensor){ TW_T[i].name, s->n_dims, {s->ne[0], s->ne[1], s->ne[2], s->ne[3]}, s->type,
                                s->data, s->nbytes };
    }
    vq_res_kv kv[2] = { { "veloxquant.reservoir.source", "src.gguf" }, { "k.str", "replaced" } };
    char path[256];
    snprintf(path, sizeof path, "%s/m.vqr", dir);
    uint64_t bytes = 0;
    mode_t um = umask(022);
    CHECKF(vq_reservoir_write(path, g, kv, 2, t, TW_NT, &bytes, &e) == VQ_OK, "%s", e.msg);
    umask(um);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (uint64_t)sb.st_size == bytes && (sb.st_mode & 0777) == 0644);

    /* mapped and copied: metadata, alignment, tensors */
    for (int copy = 0; copy <= 1; copy++) {
        vq_gguf *r = vq_reservoir_open(path, NULL, copy, &e);
        CHECKF(r != NULL, "copy %d: %s", copy, e.msg);
        if (!r) continue;
        CHECK(vq_gguf_alignment(r) == VQ_RESERVOIR_PAGE);
        CHECK(vq_gguf_n_tensors(r) == TW_NT);
        const vq_gguf_kv *a = vq_gguf_find(r, "k.u8"), *b = vq_gguf_find(r, "a.nested"), *c = vq_gguf_find(r, "a.str");
        CHECK(a && a->type == VQ_GGUF_UINT8 && a->val.u == 200);
        CHECK(b && b->type == VQ_GGUF_ARRAY && b->arr_type == VQ_GGUF_ARRAY && b->arr_len == 2);
        CHECK(c && c->arr_len == 4 && vq_gguf_arr_str(c, 2).len == 3 && !memcmp(vq_gguf_arr_str(c, 2).ptr, "g\0x", 3));
        vq_str sv;
        CHECK(vq_gguf_get_str(r, "k.str", &sv, NULL) == VQ_OK && vq_str_eq(sv, "replaced"));
        CHECK(vq_gguf_get_str(r, "veloxquant.reservoir.source", &sv, NULL) == VQ_OK && vq_str_eq(sv, "src.gguf"));
        CHECK(vq_gguf_n_kv(r) == vq_gguf_n_kv(g) + 3);   /* + alignment, source, crc array */
        for (int i = 0; i < TW_NT; i++) {
            const vq_gguf_tensor *x = vq_gguf_find_tensor(r, TW_T[i].name);
            CHECKF(x && x->type == TW_T[i].type && x->nbytes == TW_T[i].nbytes &&
                   ((uintptr_t)x->data % VQ_RESERVOIR_PAGE) == 0 && !memcmp(x->data, t[i].data, x->nbytes),
                   "tensor %s (copy %d)", TW_T[i].name, copy);
        }
        vq_gguf_close(r);
    }

    size_t n = 0;
    uint8_t *f = read_all(path, &n);
    CHECK(f && n == bytes && vq_reservoir_sniff(f, n));
    if (!f || n != bytes) return vq_t_done();
    /* every truncation at a page boundary and a few bytes around the header's fields */
    int trunc_ok = 1;
    for (size_t k = 0; k < n; k += (k < 128 ? 1 : 509)) {
        vq_err te;
        if (opens(f, k, &te) || te.code != VQ_ERR_FORMAT || !strstr(te.msg, "t.vqr")) {
            trunc_ok = 0;
            fprintf(stderr, "truncated to %zu: %s\n", k, te.msg);
            break;
        }
    }
    CHECK(trunc_ok);
    EXPECT_FAIL(f, n - 1, VQ_ERR_FORMAT, "truncated");
    /* a byte flipped in each region: the message says which */
    uint8_t *m = malloc(n + 1);
    memcpy(m, f, n);
    m[0] ^= 1; EXPECT_FAIL(m, n, VQ_ERR_FORMAT, "not a reservoir"); m[0] ^= 1;
    m[17] ^= 1; EXPECT_FAIL(m, n, VQ_ERR_FORMAT, "header checksum"); m[17] ^= 1;
    m[1000] = 1; EXPECT_FAIL(m, n, VQ_ERR_FORMAT, "header page byte 1000"); m[1000] = 0;
    m[VQ_RESERVOIR_PAGE + 30] ^= 4; EXPECT_FAIL(m, n, VQ_ERR_FORMAT, "metadata checksum"); m[VQ_RESERVOIR_PAGE + 30] ^= 4;
    {
        vq_gguf *r = vq_reservoir_open(path, NULL, 0, &e);
        for (int i = 0; r && i < TW_NT; i++) {
            const vq_gguf_tensor *x = vq_gguf_find_tensor(r, TW_T[i].name);
            size_t at = (size_t)(vq_gguf_data_offset(r) + VQ_RESERVOIR_PAGE + x->offset) + x->nbytes - 1;
            m[at] ^= 0x80;
            char want[64];
            snprintf(want, sizeof want, "tensor '%s': checksum", TW_T[i].name);
            EXPECT_FAIL(m, n, VQ_ERR_FORMAT, want);
            m[at] ^= 0x80;
        }
        vq_gguf_close(r);
    }
    m[n] = 0;
    EXPECT_FAIL(m, n + 1, VQ_ERR_FORMAT, "trailing bytes");
    /* another version, with its checksum right: refused as unsupported */
    uint32_t v2 = 2;
    memcpy(m + 8, &v2, 4);
    vq_reservoir_fix_checksums(m, n, NULL);
    EXPECT_FAIL(m, n, VQ_ERR_UNSUPPORTED, "version 2");
    memcpy(m, f, n);
    /* a flipped tensor byte with every checksum recomputed opens (the checksums are the only
     * guard of the data; fix_checksums is what the fuzz target uses to reach the body parser) */
    uint64_t data_off;
    memcpy(&data_off, m + 32, 8);   /* the header's data offset: the first tensor's first byte */
    m[data_off] ^= 0x40;
    CHECK(!opens(m, n, &e));
    CHECK(vq_reservoir_fix_checksums(m, n, NULL) == 0 && opens(m, n, &e));
    free(m);
    free(f);

    /* a type beyond ggml's: only with the caller's layouts */
    uint8_t blob[2 * 40];
    for (size_t i = 0; i < sizeof blob; i++) blob[i] = (uint8_t)(i * 13 + 5);
    t[TW_NT] = (vq_res_tensor){ "t.own", 2, {128, 1, 1, 1}, 0x10001, blob, sizeof blob };
    snprintf(path, sizeof path, "%s/own.vqr", dir);
    CHECKF(vq_reservoir_write(path, g, NULL, 0, t, TW_NT + 1, &bytes, &e) == VQ_OK, "%s", e.msg);
    vq_gguf *r = vq_reservoir_open(path, NULL, 0, &e);
    CHECKF(!r && e.code == VQ_ERR_UNSUPPORTED && strstr(e.msg, "unknown tensor type 65537"), "%s", r ? "opened" : e.msg);
    vq_gguf_close(r);
    r = vq_reservoir_open(path, layout_extra, 0, &e);
    const vq_gguf_tensor *own = r ? vq_gguf_find_tensor(r, "t.own") : NULL;
    CHECKF(own && own->nbytes == sizeof blob && !memcmp(own->data, blob, sizeof blob), "%s", r ? "" : e.msg);
    vq_gguf_close(r);
    /* and a plain GGUF reader never takes such a type */
    CHECK(vq_gguf_open(path, &e) == NULL);

    /* writing: over a folder is refused and leaves it; a missing folder is an I/O error; an
     * existing file is replaced whole */
    CHECKF(vq_reservoir_write(dir, g, NULL, 0, t, 1, NULL, &e) == VQ_ERR_IO && strstr(e.msg, "not a regular file"),
           "%s", e.msg);
    snprintf(path, sizeof path, "%s/no/such/m.vqr", dir);
    CHECK(vq_reservoir_write(path, g, NULL, 0, t, 1, NULL, &e) == VQ_ERR_IO);
    snprintf(path, sizeof path, "%s/m.vqr", dir);
    CHECKF(vq_reservoir_write(path, NULL, NULL, 0, t, 1, &bytes, &e) == VQ_OK, "%s", e.msg);
    r = vq_reservoir_open(path, NULL, 0, &e);
    CHECKF(r && vq_gguf_n_tensors(r) == 1 && vq_gguf_n_kv(r) == 2, "%s", r ? "" : e.msg);
    vq_gguf_close(r);
    /* a GGUF file is not a reservoir */
    EXPECT_FAIL(src.p, src.n, VQ_ERR_FORMAT, "");
    vq_gguf_close(g);
    free(src.p);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return vq_t_done();
}
