/* test_kv_input.c: the KV cache's input checks. A repeated spec parameter is refused naming the key;
 * page= is clamped to the context (a huge page on a tiny cache allocates little); a spec of
 * VQ_KV_SPEC_MAX_LEN (2047) characters is accepted and one more is refused naming the limit, which
 * docs/kv-spec.md states too; vq_kv_append refuses non-finite rows (and |x| > 65504) and leaves the
 * cache as it was; vq_kv_spec_equal compares whole specs (two long specs that differ only past their
 * 255th character are different) and vq_kv_spec_dup copies one that outlives its original. */
#include "../vq_test.h"
#include "veloxquant.h"
#include "kv/kv.h"

static vq_kv_dims D = {.n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .max_ctx = 64};

/* refused by the parser and by create, the message holding want and want2 */
static void spec_refused(const char *spec, const char *want, const char *want2) {
    vq_err e;
    vq_kv_spec *s = vq_kv_spec_parse(spec, &e);
    CHECKF(!s && e.code == VQ_ERR_ARG && strstr(e.msg, want) && (!want2 || strstr(e.msg, want2)),
           "parse '%.60s': want \"%s\"%s%s, got %s", spec, want, want2 ? ", " : "", want2 ? want2 : "",
           s ? vq_kv_spec_text(s) : e.msg);
    vq_kv_spec_free(s);
    vq_kv *kv = vq_kv_create_str(spec, &D, 1, &e);
    CHECKF(!kv && e.code == VQ_ERR_ARG && strstr(e.msg, want), "create '%.60s': %s", spec, kv ? "accepted" : e.msg);
    vq_kv_destroy(kv);
}

static void check_repeats(void) {
    spec_refused("turboquant_mse:bits=4,bits=2", "bits", "twice");
    spec_refused("f16;sink=1,sink=2", "sink", "twice");
    spec_refused("f16;sink=1;sink=2", "sink", "twice");   /* in two parts */
    spec_refused("q4_0:rotate=1,rotate=0", "rotate", "twice");
    spec_refused("q4_0:rotate=1,rotate=1", "rotate", "twice");   /* even with the same value */
    spec_refused("f16;window=4,window=4", "window", "twice");
    spec_refused("f16;page=16;page=32", "page", "twice");
    spec_refused("f16;wprec=16,wprec=32", "wprec", "twice");
    spec_refused("turboquant_mse:k=4,k=3", "'k='", "twice");
    spec_refused("q8_0@0=q4_0:rotate=1,rotate=0", "rotate", "twice");   /* inside an override */
}

/* page= is clamped to the context: "f16;page=65536" with max_ctx 2 must not allocate 65536-row pages */
static void check_page_clamp(void) {
    vq_kv_dims d = D;
    d.max_ctx = 2;
    vq_err e;
    vq_kv *big = vq_kv_create_str("f16;page=65536", &d, 1, &e), *small = vq_kv_create_str("f16;page=2", &d, 1, &e);
    CHECKF(big && small, "create: %s", e.msg);
    if (!big || !small) { vq_kv_destroy(big); vq_kv_destroy(small); return; }
    const int w = d.n_kv_heads * d.head_dim;
    float k[2 * 128], v[2 * 128];
    for (int i = 0; i < 2 * w; i++) { k[i] = 0.01f * i; v[i] = -0.02f * i; }
    for (int l = 0; l < d.n_layers; l++) {
        CHECK(vq_kv_append(big, l, 0, 2, k, v, &e) == VQ_OK);
        CHECK(vq_kv_append(small, l, 0, 2, k, v, &e) == VQ_OK);
    }
    /* 65536-row f16 pages would be 65536 x 2 heads x 64 x 2 sides x 2 bytes = 32 MiB a layer */
    size_t bb = vq_kv_bytes(big), bs = vq_kv_bytes(small);
    printf("f16;page=65536 at max_ctx 2: %d rows a page, %zu bytes held (page=2: %zu)\n", vq_kv_page_rows(big),
           bb, bs);
    CHECKF(vq_kv_page_rows(big) <= 2, "page rows %d for a 2-row context", vq_kv_page_rows(big));
    CHECKF(bb == bs && bb < 64 * 1024, "f16;page=65536 holds %zu bytes, f16;page=2 %zu", bb, bs);
    CHECK(vq_kv_bytes_at(big, 2) == vq_kv_bytes_at(small, 2));
    vq_kv_destroy(big);
    vq_kv_destroy(small);
}

/* "f16@0,1,2,...,N" padded with spaces (ignored around layer numbers) to exactly n characters */
static void long_spec(char *out, size_t n) {
    size_t o = (size_t)sprintf(out, "f16@0");
    for (int i = 1; o + 12 < n; i++) o += (size_t)sprintf(out + o, ",%d", i);
    while (o + 4 < n) out[o++] = ' ';
    strcpy(out + o, "=f16");
}

static void check_length(void) {
    CHECK(VQ_KV_SPEC_MAX_LEN == 2047);
    static char s[VQ_KV_SPEC_MAX_LEN + 2];
    long_spec(s, VQ_KV_SPEC_MAX_LEN);
    CHECK(strlen(s) == VQ_KV_SPEC_MAX_LEN);
    vq_err e;
    vq_kv_spec *sp = vq_kv_spec_parse(s, &e);
    CHECKF(sp != NULL, "a spec of %zu characters (the limit) is refused: %s", strlen(s), e.msg);
    vq_kv_dims d = D;
    d.n_layers = 1024;   /* the layer list names ~500 layers */
    d.max_ctx = 2;
    vq_kv *kv = sp ? vq_kv_create(sp, &d, 1, &e) : NULL;
    CHECKF(!sp || kv, "create from the %d-character spec: %s", VQ_KV_SPEC_MAX_LEN, e.msg);
    vq_kv_destroy(kv);
    vq_kv_spec_free(sp);
    long_spec(s, VQ_KV_SPEC_MAX_LEN + 1);
    CHECK(strlen(s) == VQ_KV_SPEC_MAX_LEN + 1);
    sp = vq_kv_spec_parse(s, &e);
    CHECKF(!sp && e.code == VQ_ERR_ARG && strstr(e.msg, "2047"), "a spec of %zu characters: %s", strlen(s),
           sp ? "accepted" : e.msg);
    vq_kv_spec_free(sp);
    /* the doc states the same limit */
    char path[1024], want[64];
    snprintf(path, sizeof path, "%s/docs/kv-spec.md", VQ_SOURCE_DIR);
    size_t len;
    char *doc = vq_read_file(path, &len, &e);
    CHECKF(doc != NULL, "%s: %s", path, e.msg);
    snprintf(want, sizeof want, "at most %d characters", VQ_KV_SPEC_MAX_LEN);
    CHECKF(doc && strstr(doc, want), "%s does not say \"%s\"", path, want);
    CHECKF(doc && !strstr(doc, "511 characters"), "%s still names a 511-character limit", path);
    free(doc);
}

/* vq_kv_append: NaN, +-inf and values beyond the f16 range are VQ_ERR_ARG naming the element; the
 * cache keeps what it held */
static void check_append(void) {
    vq_err e;
    const char *specs[] = { "f16", "f32", "turboquant_mse:bits=4", "q8_0", "f16;window=4" };
    const float bad[] = { NAN, INFINITY, -INFINITY, 65505.0f, -1e30f };
    const int w = D.n_kv_heads * D.head_dim;
    float k[128], v[128];
    for (size_t s = 0; s < VQ_ARRAY_LEN(specs); s++) {
        vq_kv *kv = vq_kv_create_str(specs[s], &D, 1, &e);
        CHECKF(kv != NULL, "%s: %s", specs[s], e.msg);
        if (!kv) continue;
        for (int i = 0; i < w; i++) { k[i] = 0.5f - 0.01f * i; v[i] = 0.25f + 0.003f * i; }
        CHECK(vq_kv_append(kv, 0, 0, 1, k, v, &e) == VQ_OK);
        for (size_t b = 0; b < VQ_ARRAY_LEN(bad); b++)
            for (int side = 0; side < 2; side++) {
                float *x = side ? v : k;
                const float keep = x[77];
                x[77] = bad[b];
                size_t bytes = vq_kv_bytes(kv);
                vq_status st = vq_kv_append(kv, 0, 1, 1, k, v, &e);
                CHECKF(st == VQ_ERR_ARG && strstr(e.msg, isfinite(bad[b]) ? "65504" : "not finite") &&
                       strstr(e.msg, side ? " V " : " K ") && strstr(e.msg, "elem 13"),
                       "%s: %s %g: %s", specs[s], side ? "V" : "K", (double)bad[b], st ? e.msg : "accepted");
                CHECKF(vq_kv_rows(kv, 0) == 1 && vq_kv_bytes(kv) == bytes, "%s: a refused row changed the cache",
                       specs[s]);
                x[77] = keep;
            }
        CHECK(vq_kv_append(kv, 0, 1, 1, k, v, &e) == VQ_OK && vq_kv_rows(kv, 0) == 2);
        vq_kv_destroy(kv);
    }
}

/* equality is of the whole normalized spec: specs that share their first 255+ characters and
 * differ in a last override's key differ; a spelling and its normalized text are equal */
static void check_equal_dup(void) {
    vq_err e;
    char a[1024], b[1024];
    size_t o = (size_t)sprintf(a, "f16@0");
    for (int i = 1; o < 300; i++) o += (size_t)sprintf(a + o, ",%d", i);
    strcpy(b, a);
    strcat(a, "=f32;window=4");
    strcat(b, "=f32");
    vq_kv_spec *sa = vq_kv_spec_parse(a, &e), *sb = vq_kv_spec_parse(b, &e);
    CHECKF(sa && sb, "parse the long specs: %s", e.msg);
    if (!sa || !sb) { vq_kv_spec_free(sa); vq_kv_spec_free(sb); return; }
    CHECK(strlen(vq_kv_spec_text(sa)) > 300 && !strncmp(vq_kv_spec_text(sa), vq_kv_spec_text(sb), 255));
    CHECKF(!vq_kv_spec_equal(sa, sb), "'...=f32;window=4' equals '...=f32'");
    CHECK(vq_kv_spec_equal(sa, sa) && vq_kv_spec_equal(NULL, NULL) && !vq_kv_spec_equal(sa, NULL));
    CHECKF(strstr(vq_kv_spec_text(sa), "window=4") != NULL, "the normalized text lost the override's window: %s",
           vq_kv_spec_text(sa));
    vq_kv_spec *q = vq_kv_spec_parse("q4_0", &e), *qn = q ? vq_kv_spec_parse(vq_kv_spec_text(q), &e) : NULL;
    CHECKF(q && qn && vq_kv_spec_equal(q, qn), "q4_0 and its normalized text '%s' are not equal", q ? vq_kv_spec_text(q) : e.msg);
    CHECK(!vq_kv_spec_equal(q, sa));
    vq_kv_spec *d = vq_kv_spec_dup(sa, &e);
    CHECKF(d && vq_kv_spec_equal(d, sa), "dup: %s", d ? "not equal" : e.msg);
    vq_kv_spec_free(sa);   /* the copy outlives its original */
    vq_kv_dims dd = D;
    dd.n_layers = 300;
    vq_kv *kv = d ? vq_kv_create(d, &dd, 1, &e) : NULL;
    CHECKF(kv != NULL, "a cache from the copy: %s", e.msg);
    vq_kv_destroy(kv);
    CHECK(!vq_kv_spec_dup(NULL, &e) && e.code == VQ_ERR_ARG);
    vq_kv_spec_free(d);
    vq_kv_spec_free(sb);
    vq_kv_spec_free(q);
    vq_kv_spec_free(qn);
}

int main(void) {
    check_equal_dup();
    check_repeats();
    check_page_clamp();
    check_length();
    check_append();
    return vq_t_done();
}
