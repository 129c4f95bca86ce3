/* test_kv_layers.c: per-layer overrides ("base@0,-1=f16"): the grammar, its normalized form and
 * every error path (messages name the bad text); overridden layers really use their codec; bytes
 * per layer add up against a count from the codecs' block sizes (and the allocation tally); and
 * attention/read-back of an overridden layer equal those of a plain cache of that layer's spec;
 * random specs from the grammar's pieces never crash and round-trip when accepted. */
#include "../vq_test.h"
#include "kv/kv.h"
#include "codec/codec.h"

static vq_kv_dims D = {.n_layers = 6, .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .max_ctx = 700};

/* spec -> normalized (when want_norm), round-trip, and the codec of each layer (K side, V side) */
static void spec_ok(const char *spec, const char *want_norm, const char *const *kcodec,
                    const char *const *vcodec) {
    vq_err err;
    vq_kv *kv = vq_kv_create_str(spec, &D, 1, &err);
    CHECKF(kv != NULL, "'%s' rejected: %s", spec, err.msg);
    if (!kv) return;
    CHECKF(!want_norm || strcmp(vq_kv_spec_str(kv), want_norm) == 0, "'%s' normalized to '%s', want '%s'",
           spec, vq_kv_spec_str(kv), want_norm);
    vq_kv *kv2 = vq_kv_create_str(vq_kv_spec_str(kv), &D, 1, &err);
    CHECKF(kv2 && strcmp(vq_kv_spec_str(kv2), vq_kv_spec_str(kv)) == 0, "'%s' does not round-trip (%s)",
           vq_kv_spec_str(kv), kv2 ? vq_kv_spec_str(kv2) : err.msg);
    for (int l = 0; l < D.n_layers; l++) {
        const vq_codec_state *sk = vq_kv_codec_state(kv, l, VQ_SIDE_K), *sv = vq_kv_codec_state(kv, l, VQ_SIDE_V);
        CHECKF(sk && !strcmp(sk->codec->name, kcodec[l]), "'%s' layer %d K: %s, want %s", spec, l,
               sk ? sk->codec->name : "NULL", kcodec[l]);
        CHECKF(sv && !strcmp(sv->codec->name, vcodec[l]), "'%s' layer %d V: %s, want %s", spec, l,
               sv ? sv->codec->name : "NULL", vcodec[l]);
        if (kv2) CHECK(!strcmp(vq_kv_layer_spec(kv, l), vq_kv_layer_spec(kv2, l)));
    }
    vq_kv_destroy(kv2);
    vq_kv_destroy(kv);
}

static void spec_bad(const char *spec, const char *m1, const char *m2) {
    vq_err err;
    vq_kv *kv = vq_kv_create_str(spec, &D, 1, &err);
    CHECKF(kv == NULL, "'%s' accepted as '%s'", spec, kv ? vq_kv_spec_str(kv) : "");
    vq_kv_destroy(kv);
    CHECKF(err.code == VQ_ERR_ARG, "'%s': code %d", spec, err.code);
    CHECKF(strstr(err.msg, m1) != NULL, "'%s': message lacks '%s': %s", spec, m1, err.msg);
    CHECKF(!m2 || strstr(err.msg, m2) != NULL, "'%s': message lacks '%s': %s", spec, m2, err.msg);
}

static void test_grammar(void) {
    const char *q8[6] = {"q8_0", "q8_0", "q8_0", "q8_0", "q8_0", "q8_0"};
    const char *a[6] = {"f16", "q8_0", "q8_0", "q8_0", "q8_0", "f16"};
    spec_ok("q8_0", "q8_0:rotate=0,layout=lanes", q8, q8);
    /* a window below the codec's own (kivi asks for its residual) is said, or a reparse restores it
     * (found by fuzz_kv_spec: 'kivi;window=0' normalized to a spec with window 128) */
    const char *kv6[6] = {"kivi", "kivi", "kivi", "kivi", "kivi", "kivi"};
    spec_ok("kivi;window=0", "kivi:bits=2,group=32,residual=128,layout=lanes;window=0,wprec=16,page=256", kv6, kv6);
    spec_ok("kivi", "kivi:bits=2,group=32,residual=128,layout=lanes;window=128,wprec=16,page=256", kv6, kv6);
    spec_ok("q8_0@0,-1=f16", "q8_0:rotate=0,layout=lanes@0,5=f16", a, a);
    spec_ok("q8_0@ 5 , 0 =f16", "q8_0:rotate=0,layout=lanes@0,5=f16", a, a);
    /* several overrides, ranges, negative ranges, per-side and store keys inside an override */
    const char *bk[6] = {"f32", "q4_0", "q4_0", "q4_0", "f16", "f16"};
    const char *bv[6] = {"f32", "f16", "f16", "f16", "f16", "f16"};
    spec_ok("f16@-2..-1=f16@1..3=k=q4_0;v=f16;window=4@0=f32",
            "f16@0=f32@1..3=k=q4_0:rotate=0,layout=lanes;v=f16;window=4,wprec=16,page=256@4,5=f16", bk, bv);
    /* every layer overridden: the base still parses (and is normalized), serves none */
    const char *f[6] = {"f16", "f16", "f16", "f16", "f16", "f16"};
    spec_ok("q4_0:rotate=1@0..5=f16", "q4_0:rotate=1,layout=lanes@0..5=f16", f, f);
    /* a multi-row-block codec (KIVI keys: G rows) with its fp window inside an override */
    const char *kk[6] = {"f16", "f16", "kivi", "f16", "f16", "f16"};
    spec_ok("f16@2=kivi:residual=16;page=64", "f16@2=kivi:bits=2,group=32,residual=16,layout=lanes;window=16,wprec=16,page=64",
            kk, kk);

    spec_bad("q8_0@", "layer override '@'", "no '='");
    spec_bad("q8_0@=f16", "'@=f16'", "no layers before '='");
    spec_bad("q8_0@ =f16", "'@ =f16'", "no layers before '='");
    spec_bad("q8_0@0=", "'@0='", "no spec after '='");
    spec_bad("q8_0@0= ", "'@0= '", "no spec after '='");
    spec_bad("@0=f16", "no base spec", NULL);
    spec_bad(" @0=f16", "no base spec", NULL);
    spec_bad("q8_0@6=f16", "layer '6' is outside", "0..5");
    spec_bad("q8_0@-7=f16", "layer '-7' is outside", "'@-7=f16'");
    spec_bad("q8_0@0,0=f16", "layer 0 ('0') is given twice", "'@0,0=f16'");
    spec_bad("q8_0@0..2,1=f16", "layer 1 ('1') is given twice", NULL);
    spec_bad("q8_0@0=f16@-6=f32", "layer 0 ('-6') is already given by '@0=f16'", "'@-6=f32'");
    spec_bad("q8_0@x=f16", "'x' is not a layer number", "'@x=f16'");
    spec_bad("q8_0@1x=f16", "'1x' is not a layer number", NULL);
    spec_bad("q8_0@0,,1=f16", "'' is not a layer number", "'@0,,1=f16'");
    spec_bad("q8_0@0,=f16", "'' is not a layer number", NULL);
    spec_bad("q8_0@3..1=f16", "range '3..1' runs backwards", NULL);
    spec_bad("q8_0@1..=f16", "'1..' is not a layer number", NULL);
    spec_bad("q8_0@0=nosuch", "layer override '@0=nosuch'", "unknown codec 'nosuch'");
    spec_bad("q8_0@0=q4_0:rotate=7", "layer override '@0=q4_0:rotate=7'", "rotate");
    spec_bad("q8_0@0=f16;window=-1", "layer override '@0=f16;window=-1'", "window=-1");
    spec_bad("q8_0@0=k=f16", "layer override '@0=k=f16'", "no codec for the V side");
    spec_bad("nosuch@0=f16", "unknown codec 'nosuch'", NULL);
    spec_bad("nosuch@0..5=f16", "unknown codec 'nosuch'", NULL);   /* base checked even if unused */
    spec_bad("", "empty spec", NULL);
    char longspec[2200];
    memset(longspec, 0, sizeof longspec);
    strcpy(longspec, "f16");
    while (strlen(longspec) < 2100) strcat(longspec, "@0=f16");
    spec_bad(longspec, "longer than 2047", NULL);
    vq_err err;
    CHECK(vq_kv_create_str(NULL, &D, 1, &err) == NULL && err.code == VQ_ERR_ARG);
}

/* Random specs from the grammar's pieces: never a crash (ASan/UBSan builds), either VQ_ERR_ARG
 * with a message or a cache whose normalized spec round-trips and whose layers hold a codec. */
static void test_random_specs(vq_rng *rng) {
    static const char *specs[] = {"f16", "q8_0", "f32;window=3", "q4_0:rotate=1", "k=q8_0;v=f16",
                                  "turboquant_mse:k=4,v=3", "f16;page=8", "kivi:residual=16", "", "nosuch"};
    static const char *items[] = {"0", "1", "5", "-1", "-6", "2..4", "-3..-2", "7", "-7", "x", "", "3..1", " 2 "};
    static const char *piece[] = {"@", "=", ",", "..", "-", "0", ";", "k=", ":", "x", " "};
    int ok = 0, bad = 0;
    for (int it = 0; it < 1200; it++) {
        char spec[512];
        snprintf(spec, sizeof spec, "%s", specs[vq_rng_u64(rng) % 8]);   /* a valid base */
        int n_ovr = (int)(vq_rng_u64(rng) % 4);
        for (int o = 0; o < n_ovr; o++) {
            strcat(spec, "@");
            int n_it = 1 + (int)(vq_rng_u64(rng) % 3);
            for (int i = 0; i < n_it; i++) {
                if (i) strcat(spec, ",");
                size_t range = vq_rng_u64(rng) % 4 ? 7 : VQ_ARRAY_LEN(items);   /* mostly valid items */
                strcat(spec, items[vq_rng_u64(rng) % range]);
            }
            strcat(spec, "=");
            size_t range = vq_rng_u64(rng) % 4 ? 8 : VQ_ARRAY_LEN(specs);
            strcat(spec, specs[vq_rng_u64(rng) % range]);
        }
        if (vq_rng_u64(rng) % 4 == 0) {   /* a stray piece somewhere */
            size_t at = vq_rng_u64(rng) % (strlen(spec) + 1);
            char tail[512];
            snprintf(tail, sizeof tail, "%s", spec + at);
            spec[at] = 0;
            strcat(spec, piece[vq_rng_u64(rng) % VQ_ARRAY_LEN(piece)]);
            strcat(spec, tail);
        }
        vq_err err;
        vq_kv *kv = vq_kv_create_str(spec, &D, 3, &err);
        if (!kv) {
            bad++;
            CHECKF(err.code == VQ_ERR_ARG && err.msg[0], "'%s': code %d, msg '%s'", spec, err.code, err.msg);
            continue;
        }
        ok++;
        vq_kv *kv2 = vq_kv_create_str(vq_kv_spec_str(kv), &D, 3, &err);
        CHECKF(kv2 && !strcmp(vq_kv_spec_str(kv2), vq_kv_spec_str(kv)), "'%s' -> '%s' does not round-trip", spec,
               vq_kv_spec_str(kv));
        for (int l = 0; l < D.n_layers; l++)
            CHECK(vq_kv_codec_state(kv, l, 0) && vq_kv_codec_state(kv, l, 1) && vq_kv_layer_spec(kv, l)[0]);
        CHECK(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv));
        vq_kv_destroy(kv2);
        vq_kv_destroy(kv);
    }
    printf("random specs: %d accepted, %d rejected\n", ok, bad);
    CHECK(ok > 150 && bad > 150);
}

static void fill(vq_rng *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)vq_rng_gauss(r);
}

/* bytes of one page of a layer, from the codecs' block sizes (64-byte aligned sections) */
static size_t page_bytes(const vq_kv *kv, int l, int P) {
    const vq_codec_state *sk = vq_kv_codec_state(kv, l, 0), *sv = vq_kv_codec_state(kv, l, 1);
    size_t pb = ((size_t)P * 4 + 63) / 64 * 64;
    for (int h = 0; h < D.n_kv_heads; h++) {
        pb += ((size_t)(P / sk->rows_per_block) * sk->block_bytes + 63) / 64 * 64;
        pb += ((size_t)(P / sv->rows_per_block) * sv->block_bytes + 63) / 64 * 64;
    }
    return pb;
}

/* Per layer: page rows P and window R as the spec says (page rounded to the block rows). */
typedef struct { int P, R, rpb; } lay;

static void test_bytes(vq_rng *rng) {
    /* base q4_0 page 256, no window; layers 0 and 5 f16 with window 8, page 32; layer 2 KIVI
     * keys (32-row blocks), residual 16, page 40 -> rounded to 64 */
    const char *spec = "q4_0@0,-1=f16;window=8,page=32@2=kivi:residual=16;page=40";
    vq_err err;
    vq_kv *kv = vq_kv_create_str(spec, &D, 7, &err);
    CHECKF(kv != NULL, "%s: %s", spec, err.msg);
    if (!kv) return;
    lay L[6];
    for (int l = 0; l < 6; l++) {
        const vq_codec_state *sk = vq_kv_codec_state(kv, l, 0), *sv = vq_kv_codec_state(kv, l, 1);
        int rpb = sk->rows_per_block > sv->rows_per_block ? sk->rows_per_block : sv->rows_per_block;
        int page = (l == 0 || l == 5) ? 32 : l == 2 ? 40 : 256;
        L[l].rpb = rpb;
        L[l].P = (page + rpb - 1) / rpb * rpb;
        L[l].R = (l == 0 || l == 5) ? 8 : l == 2 ? 16 : 0;
    }
    CHECK(L[2].P == 64 && L[2].rpb == 32);
    CHECK(!strcmp(vq_kv_codec_state(kv, 2, 0)->codec->name, "kivi"));
    CHECK(!strcmp(vq_kv_codec_state(kv, 5, 1)->codec->name, "f16"));
    CHECK(!strcmp(vq_kv_codec_state(kv, 4, 1)->codec->name, "q4_0"));
    CHECK(vq_kv_page_rows(kv) == 32 && vq_kv_window_rows(kv) == 8);   /* layer 0's group */
    CHECK(vq_kv_page_bytes(kv) == page_bytes(kv, 0, 32));

    const int w = D.n_kv_heads * D.head_dim, n = 300;
    float *k = malloc(sizeof(float) * (size_t)n * w), *v = malloc(sizeof(float) * (size_t)n * w);
    fill(rng, k, (size_t)n * w);
    fill(rng, v, (size_t)n * w);
    const size_t empty = vq_kv_bytes(kv);
    CHECK(empty == vq_kv_bytes_tally(kv));
    int rows[6] = {0};
    for (int step = 0; step < 60; step++) {
        int l = (int)(vq_rng_u64(rng) % 6), m = 1 + (int)(vq_rng_u64(rng) % 17);
        if (rows[l] + m > n) continue;
        CHECK(vq_kv_append(kv, l, rows[l], m, k + (size_t)rows[l] * w, v + (size_t)rows[l] * w, &err) == VQ_OK);
        rows[l] += m;
        size_t want = empty;
        for (int j = 0; j < 6; j++) {
            int coded = rows[j] >= L[j].R + L[j].rpb ? (rows[j] - L[j].R) / L[j].rpb * L[j].rpb : 0;
            int pages = (coded + L[j].P - 1) / L[j].P;
            CHECKF(vq_kv_pages(kv, j) == pages, "layer %d rows %d: %d pages, want %d", j, rows[j],
                   vq_kv_pages(kv, j), pages);
            CHECK(vq_kv_rows(kv, j) == rows[j]);
            want += (size_t)pages * page_bytes(kv, j, L[j].P);
        }
        CHECKF(vq_kv_bytes(kv) == want, "step %d: bytes %zu, from block sizes %zu", step, vq_kv_bytes(kv), want);
        CHECKF(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv), "step %d: bytes %zu, tally %zu", step,
               vq_kv_bytes(kv), vq_kv_bytes_tally(kv));
    }
    /* bits per element: bytes over every layer's elements */
    double el = 0;
    for (int j = 0; j < 6; j++) el += (double)rows[j] * w * 2;
    CHECK_NEAR(vq_kv_bits_per_elem(kv), (double)vq_kv_bytes(kv) * 8 / el, 1e-12);
    vq_kv_clear(kv);
    CHECK(vq_kv_bytes(kv) == empty && vq_kv_bytes_tally(kv) == empty && vq_kv_rows(kv, 2) == 0);
    free(k); free(v);
    vq_kv_destroy(kv);
}

/* An overridden layer is exactly a layer of a plain cache of its spec (same seed, same layer):
 * identical read-back and bit-identical attention; the rest equal the plain base cache. */
static void test_same_as_plain(vq_rng *rng) {
    const char *spec = "q4_0:rotate=1@1,-1=q8_0:rotate=1;window=5@3=kivi:residual=16";
    const char *plain[6] = {"q4_0:rotate=1", "q8_0:rotate=1;window=5", "q4_0:rotate=1",
                            "kivi:residual=16", "q4_0:rotate=1", "q8_0:rotate=1;window=5"};
    vq_err err;
    vq_kv *kv = vq_kv_create_str(spec, &D, 99, &err);
    CHECKF(kv != NULL, "%s: %s", spec, err.msg);
    if (!kv) return;
    const int w = D.n_kv_heads * D.head_dim, n = 150, nq = 3, qw = D.n_heads * D.head_dim;
    float *k = malloc(sizeof(float) * (size_t)n * w), *v = malloc(sizeof(float) * (size_t)n * w);
    float *q = malloc(sizeof(float) * (size_t)nq * qw), *o1 = malloc(sizeof(float) * (size_t)nq * qw);
    float *o2 = malloc(sizeof(float) * (size_t)nq * qw), *o3 = malloc(sizeof(float) * (size_t)nq * qw);
    float *k1 = malloc(sizeof(float) * (size_t)n * w), *v1 = malloc(sizeof(float) * (size_t)n * w);
    float *k2 = malloc(sizeof(float) * (size_t)n * w), *v2 = malloc(sizeof(float) * (size_t)n * w);
    int32_t *p1 = malloc(sizeof(int32_t) * n), *p2 = malloc(sizeof(int32_t) * n);
    int qp[3] = {40, 100, n - 1};
    fill(rng, q, (size_t)nq * qw);
    for (int l = 0; l < 6; l++) {
        vq_kv *pk = vq_kv_create_str(plain[l], &D, 99, &err);
        CHECKF(pk != NULL, "%s: %s", plain[l], err.msg);
        if (!pk) continue;
        CHECKF(!strcmp(vq_kv_layer_spec(kv, l), vq_kv_spec_str(pk)), "layer %d: '%s' vs plain '%s'", l,
               vq_kv_layer_spec(kv, l), vq_kv_spec_str(pk));
        fill(rng, k, (size_t)n * w);
        fill(rng, v, (size_t)n * w);
        for (int r = 0; r < n;) {   /* same chunks into both */
            int m = 1 + (int)(vq_rng_u64(rng) % 31);
            m = m < n - r ? m : n - r;
            CHECK(vq_kv_append(kv, l, r, m, k + (size_t)r * w, v + (size_t)r * w, &err) == VQ_OK);
            CHECK(vq_kv_append(pk, l, r, m, k + (size_t)r * w, v + (size_t)r * w, &err) == VQ_OK);
            r += m;
        }
        CHECK(vq_kv_read(kv, l, k1, v1, p1, &err) == VQ_OK && vq_kv_read(pk, l, k2, v2, p2, &err) == VQ_OK);
        CHECKF(!memcmp(k1, k2, sizeof(float) * (size_t)n * w) && !memcmp(v1, v2, sizeof(float) * (size_t)n * w) &&
               !memcmp(p1, p2, sizeof(int32_t) * n), "layer %d (%s): read-back differs from the plain cache", l, plain[l]);
        CHECK(vq_kv_attend(kv, l, nq, qp, q, o1, &err) == VQ_OK);
        CHECK(vq_kv_attend(pk, l, nq, qp, q, o2, &err) == VQ_OK);
        CHECKF(!memcmp(o1, o2, sizeof(float) * (size_t)nq * qw), "layer %d (%s): attention differs from the plain cache",
               l, plain[l]);
        /* the reference switch: float64 attention over the decoded rows, close to the codec path */
        vq_kv_set_ref_attend(kv, 1);
        CHECK(vq_kv_attend(kv, l, nq, qp, q, o3, &err) == VQ_OK);
        vq_kv_set_ref_attend(kv, 0);
        double e = 0;
        for (int i = 0; i < nq * qw; i++) e = fmax(e, fabs((double)o3[i] - o1[i]));
        CHECKF(e < 1e-4, "layer %d (%s): codec attention vs float64 over decoded rows: %.3g", l, plain[l], e);
        vq_kv_destroy(pk);
    }
    free(k); free(v); free(q); free(o1); free(o2); free(o3); free(k1); free(v1); free(k2); free(v2);
    free(p1); free(p2);
    vq_kv_destroy(kv);
}

int main(void) {
    uint64_t seed = 0x1a7e55;
    printf("seed %llu\n", (unsigned long long)seed);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    test_grammar();
    test_random_specs(&rng);
    test_bytes(&rng);
    test_same_as_plain(&rng);
    return vq_t_done();
}
