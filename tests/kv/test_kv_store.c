/* test_kv_store.c: the store's mechanics: spec grammar and its errors, input validation (NaN,
 * inf, 1e30, bad layer, max_ctx), the window (rows leave it into codes as it overflows), pages
 * that never move, clear, and vq_kv_bytes against a count computed here from the layout. */
#include "../vq_test.h"
#include "kv/kv.h"
#include "codec/codec.h"
#include "kv_ref.h"

static vq_kv_dims D = {.n_layers = 3, .n_heads = 9, .n_kv_heads = 3, .head_dim = 64, .max_ctx = 1000};

static void spec_ok(const char *spec, const char *want_norm) {
    vq_err err;
    vq_kv *kv = vq_kv_create_str(spec, &D, 1, &err);
    CHECKF(kv != NULL, "'%s' rejected: %s", spec, err.msg);
    if (!kv) return;
    CHECKF(!want_norm || strcmp(vq_kv_spec_str(kv), want_norm) == 0, "'%s' normalized to '%s', want '%s'",
           spec, vq_kv_spec_str(kv), want_norm);
    /* the normalized spec parses to the same normalized spec */
    vq_kv *kv2 = vq_kv_create_str(vq_kv_spec_str(kv), &D, 1, &err);
    CHECKF(kv2 && strcmp(vq_kv_spec_str(kv2), vq_kv_spec_str(kv)) == 0, "'%s' does not round-trip",
           vq_kv_spec_str(kv));
    vq_kv_destroy(kv2);
    vq_kv_destroy(kv);
}
static void spec_bad(const char *spec, const char *must_mention) {
    vq_err err;
    vq_kv *kv = vq_kv_create_str(spec, &D, 1, &err);
    CHECKF(kv == NULL, "'%s' accepted", spec);
    vq_kv_destroy(kv);
    CHECKF(err.code == VQ_ERR_ARG, "'%s': code %d", spec, err.code);
    CHECKF(strstr(err.msg, must_mention) != NULL, "'%s': message lacks '%s': %s", spec, must_mention, err.msg);
}

static void test_specs(void) {
    spec_ok("f16", "f16");
    spec_ok("f32", "f32");
    spec_ok("q8_0", "q8_0:rotate=0,layout=lanes");
    spec_ok("q4_0:rotate=1", "q4_0:rotate=1,layout=lanes");
    spec_ok("kivi", "kivi:bits=2,group=32,residual=128,layout=lanes;window=128,wprec=16,page=256");
    spec_ok("kivi:k=2,v=4", "k=kivi:bits=2,group=32,residual=128,layout=lanes;v=kivi:bits=4,group=32,residual=128,layout=lanes;window=128,wprec=16,page=256");
    spec_ok("kivi:bits=4,k=2", "k=kivi:bits=2,group=32,residual=128,layout=lanes;v=kivi:bits=4,group=32,residual=128,layout=lanes;window=128,wprec=16,page=256");
    spec_ok("k=q8_0:rotate=1;v=f16", "k=q8_0:rotate=1,layout=lanes;v=f16");
    spec_ok("v=f16;k=q4_0", "k=q4_0:rotate=0,layout=lanes;v=f16");
    spec_ok("f16:window=64", "f16;window=64,wprec=16,page=256");
    spec_ok("f16;window=64,wprec=32,page=100", "f16;window=64,wprec=32,page=100");
    spec_ok("q4_0:rotate=1,layout=rows;window=16,sink=4,wprec=8",
            "q4_0:rotate=1,layout=rows;window=16,wprec=8,page=256,sink=4");
    {   /* wprec=8 holds q8_0 blocks of 32: another head_dim is refused by name */
        vq_kv_dims d48 = D;
        d48.head_dim = 48;
        vq_err err;
        vq_kv *kv = vq_kv_create_str("f16;window=8,wprec=8", &d48, 1, &err);
        CHECKF(kv == NULL && err.code == VQ_ERR_ARG && strstr(err.msg, "wprec=8") && strstr(err.msg, "48"),
               "wprec=8 at head_dim 48: %s", kv ? "(accepted)" : err.msg);
        vq_kv_destroy(kv);
    }
    spec_ok("kivi:residual=0,window=16", NULL);
    /* 3-bit keys (kivi, kvquant); kvquant's outlier fraction in canonical form */
    spec_ok("kivi:k=3,v=4", "k=kivi:bits=3,group=32,residual=128,layout=lanes;v=kivi:bits=4,group=32,residual=128,layout=lanes;window=128,wprec=16,page=256");
    spec_ok("kvquant", "kvquant:bits=2,group=32,residual=0,layout=lanes,outliers=0.01,qweight=0");
    spec_ok("kvquant:k=3,v=4,outliers=0.020,group=16", "k=kvquant:bits=3,group=16,residual=0,layout=lanes,outliers=0.02,qweight=0;v=kvquant:bits=4,group=16,residual=0,layout=lanes,outliers=0.02,qweight=0");
    spec_ok("k=kvquant:bits=3,outliers=0;v=turboquant_mse:bits=3;sink=4", NULL);
    spec_ok("kvquant:k=2,v=4,layout=rows,outliers=0.125", NULL);
    /* every codec in the table is reachable by name with its defaults */
    for (int i = 0; vq_codec_at(i); i++) {
        vq_err err;
        if (vq_codec_at(i)->needs_calib) {   /* without calib=FILE: refused, saying what it needs */
            CHECKF(vq_kv_create_str(vq_codec_at(i)->name, &D, 7, &err) == NULL && strstr(err.msg, "calib=FILE"),
                   "codec %s without calib=FILE: %s", vq_codec_at(i)->name, err.msg);
            continue;
        }
        vq_kv *kv = vq_kv_create_str(vq_codec_at(i)->name, &D, 7, &err);
        CHECKF(kv != NULL, "codec %s with defaults: %s", vq_codec_at(i)->name, err.msg);
        vq_kv_destroy(kv);
    }
    spec_bad("nope", "unknown codec 'nope'");
    spec_bad("nope", "f16");               /* the list of known codecs */
    spec_bad("nope", "kivi");
    spec_bad("nope", "window=R");          /* the store keys */
    char help[8192];
    size_t hl = vq_kv_spec_help(help, sizeof help);
    CHECK(hl > 0 && hl < sizeof help && strstr(help, "kivi: bits=2|4") && strstr(help, "q4_0: rotate=0|1") &&
          strstr(help, "wprec=8|16|32"));
    for (int i = 0; vq_codec_at(i); i++) CHECK(strstr(help, vq_codec_at(i)->name) != NULL);
    spec_bad("q4_0:rotate=7", "rotate=0|1");   /* a codec's error lists its parameters */
    spec_bad("f16:bits=4", "unknown parameter 'bits'");
    spec_bad("q8_0:rotate=2", "rotate=2");
    spec_bad("q8_0:frobnicate=1", "frobnicate");
    spec_bad("kivi:bits=3", "bits=3");
    spec_bad("kivi:bits=9", "bits=9");
    spec_bad("kivi:group=0", "group=0");
    spec_bad("kivi:outliers=0.01", "outliers");            /* kvquant's, not kivi's */
    spec_bad("kvquant:outliers=0.2", "outliers=0.2");      /* at most 0.125 */
    spec_bad("kvquant:outliers=-0.01", "outliers=-0.01");
    spec_bad("kvquant:outliers=abc", "outliers=abc");
    spec_bad("kvquant:outliers=0.01x", "outliers=0.01x");
    spec_bad("kvquant:outliers=nan", "outliers=nan");
    spec_bad("kvquant:bits=3", "keys only");
    spec_bad("kvquant:qweight=1", "calib=FILE");            /* the weights come from a calibration */
    spec_bad("kvquant:qweight=2", "qweight=2");               /* 3-bit values are not packed */
    spec_bad("kvquant:k=3,v=4,layout=rows", "layout=lanes");
    spec_bad("k=kvquant:group=1;v=f16", "group=1");         /* an outlier needs a second row */
    spec_bad("k=kvquant:group=512;v=f16", "group=512");     /* row index in a byte */
    spec_bad("k=kvquant:group=16,outliers=0;v=f16@1=k=kvquant:group=300;v=f16", "group=300");
    spec_bad("f16:window=-1", "window=-1");
    spec_bad("f16:window=abc", "window=abc");
    spec_bad("f16:wprec=12", "wprec=12");
    spec_bad("f16:wprec=0", "wprec=0");
    spec_bad("", "empty spec");
    spec_bad("k=f16", "no codec for the V side");
    spec_bad("f16;k=f32", "the K side is given a codec twice");
    spec_bad("f16:window", "not key=value");
    spec_bad("kivi:k=2,k=4", "given twice");
    spec_bad("window=4", "no codec named");
    spec_bad("k=kivi:k=2;v=f16", "use bits=");
    /* rotate at head_dim 96 turns spans of 32 (the largest power of two dividing it); a span
     * that does not divide head_dim is refused; blocks of 32 need a multiple of 32 */
    vq_kv_dims d96 = D;
    d96.head_dim = 96;
    vq_err err;
    vq_kv *kv = vq_kv_create_str("q4_0:rotate=1", &d96, 1, &err);
    CHECKF(kv != NULL, "q4_0:rotate=1 d=96: %s", err.msg);
    vq_kv_destroy(kv);
    kv = vq_kv_create_str("q4_0:rotate=1,rot=64", &d96, 1, &err);
    CHECK(kv == NULL && err.code == VQ_ERR_ARG && strstr(err.msg, "divides head_dim 96"));
    vq_kv_destroy(kv);
    kv = vq_kv_create_str("q4_0", &d96, 1, &err);   /* no rotation: 96 = 3 blocks is fine */
    CHECKF(kv != NULL, "q4_0 d=96: %s", err.msg);
    vq_kv_destroy(kv);
    d96.head_dim = 40;
    kv = vq_kv_create_str("q8_0", &d96, 1, &err);
    CHECK(kv == NULL && strstr(err.msg, "multiple of 32"));
    vq_kv_destroy(kv);
    vq_kv_dims bad = D;
    bad.n_heads = 8;   /* not a multiple of 3 kv heads */
    kv = vq_kv_create_str("f16", &bad, 1, &err);
    CHECK(kv == NULL && err.code == VQ_ERR_ARG && strstr(err.msg, "n_heads=8"));
    CHECK(vq_kv_create_str("f16", NULL, 1, &err) == NULL && err.code == VQ_ERR_ARG);
}

static void test_validation(vq_rng *rng) {
    vq_err err;
    vq_kv *kv = vq_kv_create_str("q4_0:rotate=1;window=4", &D, 3, &err);
    CHECK(kv != NULL);
    if (!kv) return;
    const int w = D.n_kv_heads * D.head_dim;
    float *k = calloc((size_t)8 * w, sizeof(float)), *v = calloc((size_t)8 * w, sizeof(float));
    fill_uniform(rng, k, (size_t)8 * w, 1);
    fill_uniform(rng, v, (size_t)8 * w, 1);
    k[2 * w + 70] = NAN;   /* row 2, head 1, elem 6 */
    CHECK(vq_kv_append(kv, 1, 10, 8, k, v, &err) == VQ_ERR_ARG);
    CHECKF(strstr(err.msg, "layer 1 row 2 (pos 12) K head 1 elem 6") && strstr(err.msg, "not finite"), "%s", err.msg);
    CHECK(vq_kv_rows(kv, 1) == 0);   /* rejected appends change nothing */
    k[2 * w + 70] = 0.5f;
    v[5 * w + 3] = INFINITY;
    CHECK(vq_kv_append(kv, 1, 10, 8, k, v, &err) == VQ_ERR_ARG && strstr(err.msg, "V head 0 elem 3"));
    v[5 * w + 3] = -1e30f;
    CHECK(vq_kv_append(kv, 1, 10, 8, k, v, &err) == VQ_ERR_ARG && strstr(err.msg, "65504"));
    v[5 * w + 3] = -65504.0f;   /* the edge of the range is accepted and stays finite */
    CHECKF(vq_kv_append(kv, 1, 10, 8, k, v, &err) == VQ_OK, "%s", err.msg);
    CHECK(vq_kv_rows(kv, 1) == 8);
    CHECK(vq_kv_append(kv, 3, 0, 1, k, v, &err) == VQ_ERR_ARG && strstr(err.msg, "layer 3"));
    CHECK(vq_kv_append(kv, 0, -1, 1, k, v, &err) == VQ_ERR_ARG);
    CHECK(vq_kv_append(kv, 0, 0, 1, NULL, v, &err) == VQ_ERR_ARG);
    CHECK(vq_kv_append(kv, 0, 0, 0, NULL, NULL, &err) == VQ_OK);
    /* max_ctx */
    float *big_k = calloc((size_t)D.max_ctx * w, sizeof(float)), *big_v = calloc((size_t)D.max_ctx * w, sizeof(float));
    CHECK(vq_kv_append(kv, 1, 100, D.max_ctx - 7, big_k, big_v, &err) == VQ_ERR_RANGE &&
          strstr(err.msg, "max_ctx"));
    CHECK(vq_kv_append(kv, 1, 100, D.max_ctx - 8, big_k, big_v, &err) == VQ_OK);  /* zero rows */
    CHECK(vq_kv_rows(kv, 1) == D.max_ctx);
    /* attention over it stays finite (zero rows, the -65504 value) */
    float *q = malloc(sizeof(float) * 2 * D.n_heads * D.head_dim), *o = malloc(sizeof(float) * 2 * D.n_heads * D.head_dim);
    fill_uniform(rng, q, (size_t)2 * D.n_heads * D.head_dim, 1);
    int qp[2] = {15, 5000};
    CHECK(vq_kv_attend(kv, 1, 2, qp, q, o, &err) == VQ_OK);
    int finite = 1;
    for (int i = 0; i < 2 * D.n_heads * D.head_dim; i++) finite &= isfinite(o[i]);
    CHECK(finite);
    /* a query before every row sees nothing: zeros */
    qp[0] = 3;
    CHECK(vq_kv_attend(kv, 1, 1, qp, q, o, &err) == VQ_OK);
    int zero = 1;
    for (int i = 0; i < D.n_heads * D.head_dim; i++) zero &= o[i] == 0.0f;
    CHECK(zero);
    CHECK(vq_kv_attend(kv, 5, 1, qp, q, o, &err) == VQ_ERR_ARG && strstr(err.msg, "layer 5"));
    CHECK(vq_kv_attend(kv, 1, 1, NULL, q, o, &err) == VQ_ERR_ARG);
    vq_kv_destroy(kv);
    free(k); free(v); free(big_k); free(big_v); free(q); free(o);
}

/* rows leave the window into codes as it overflows; pages never move; bytes match the layout */
static void test_window_pages_bytes(vq_rng *rng) {
    const char *specs[] = {"q8_0;window=50,page=64", "kivi:bits=2,group=32,residual=40;page=64",
                           "f16;wprec=32,window=10", "q4_0", "q8_0;window=12,wprec=8"};
    for (size_t si = 0; si < VQ_ARRAY_LEN(specs); si++) {
        vq_err err;
        vq_kv *kv = vq_kv_create_str(specs[si], &D, 5, &err);
        CHECKF(kv != NULL, "%s: %s", specs[si], err.msg);
        if (!kv) continue;
        const vq_codec_state *sk = vq_kv_codec_state(kv, 0, 0), *sv = vq_kv_codec_state(kv, 0, 1);
        const int P = vq_kv_page_rows(kv), R = vq_kv_window_rows(kv), H = D.n_kv_heads, d = D.head_dim;
        const int rpb = sk->rows_per_block > sv->rows_per_block ? sk->rows_per_block : sv->rows_per_block;
        /* page bytes from the codecs' block sizes, each section 64-byte aligned */
        size_t pb = ((size_t)P * 4 + 63) / 64 * 64;
        for (int h = 0; h < H; h++) {
            pb += ((size_t)(P / sk->rows_per_block) * sk->block_bytes + 63) / 64 * 64;
            pb += ((size_t)(P / sv->rows_per_block) * sv->block_bytes + 63) / 64 * 64;
        }
        CHECKF(vq_kv_page_bytes(kv) == pb, "%s: page bytes %zu, computed %zu", specs[si], vq_kv_page_bytes(kv), pb);
        const int w = H * d, n = 300;
        float *k = malloc(sizeof(float) * (size_t)n * w), *v = malloc(sizeof(float) * (size_t)n * w);
        fill_uniform(rng, k, (size_t)n * w, 1);
        fill_uniform(rng, v, (size_t)n * w, 1);
        size_t empty = vq_kv_bytes(kv);
        int rows = 0;
        const void *first_page_codes = NULL;
        while (rows < n) {
            int m = 1 + (int)(vq_rng_u64(rng) % 23);
            m = VQ_MIN(m, n - rows);
            CHECK(vq_kv_append(kv, 0, rows, m, k + (size_t)rows * w, v + (size_t)rows * w, &err) == VQ_OK);
            rows += m;
            /* window holds R rows (or up to R + block - 1 while a block of rows fills) */
            int coded = rows >= R + rpb ? (rows - R) / rpb * rpb : 0;
            int pages = (coded + P - 1) / P;
            CHECK(vq_kv_pages(kv, 0) == pages);
            CHECKF(vq_kv_bytes(kv) == empty + (size_t)pages * pb, "%s rows %d: bytes %zu want %zu",
                   specs[si], rows, vq_kv_bytes(kv), empty + (size_t)pages * pb);
            CHECK(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv));
            if (pages > 0) {   /* the first page's decoded content never changes once written */
                float *kr = malloc(sizeof(float) * (size_t)rows * w), *vr = malloc(sizeof(float) * (size_t)rows * w);
                int32_t *pr = malloc(sizeof(int32_t) * (size_t)rows);
                vq_kv_read(kv, 0, kr, vr, pr, &err);
                if (!first_page_codes) {
                    float *keep = malloc(sizeof(float) * (size_t)VQ_MIN(rows, rpb) * w);
                    memcpy(keep, kr, sizeof(float) * (size_t)VQ_MIN(rows, rpb) * w);
                    first_page_codes = keep;
                } else {
                    CHECK(memcmp(first_page_codes, kr, sizeof(float) * (size_t)rpb * w) == 0);
                }
                int ordered = 1;
                for (int i = 0; i < rows; i++) ordered &= pr[i] == i;
                CHECK(ordered);
                free(kr); free(vr); free(pr);
            }
        }
        /* independent total: fixed part (computed at rows = 0) + pages; and the fixed part is
         * at least the window buffers: 2 * window rows * H * d * (wprec/8) */
        const double wprec = strstr(specs[si], "wprec=32") ? 4 : strstr(specs[si], "wprec=8") ? 34.0 / 32 : 2;
        CHECK(empty >= (size_t)(2 * (R + rpb - 1) * H * d * wprec * D.n_layers));
        double bpe = vq_kv_bits_per_elem(kv);
        CHECK(bpe > 0);
        printf("%-45s page %zu B (%d rows), bits/elem at %d rows in layer 0: %.2f\n", specs[si], pb, P,
               rows, bpe);
        vq_kv_clear(kv);
        CHECK(vq_kv_rows(kv, 0) == 0 && vq_kv_pages(kv, 0) == 0 && vq_kv_bytes(kv) == empty);
        CHECK(vq_kv_bytes(kv) == vq_kv_bytes_tally(kv));
        CHECK(vq_kv_append(kv, 0, 0, 10, k, v, &err) == VQ_OK && vq_kv_rows(kv, 0) == 10);
        vq_kv_destroy(kv);
        free(k); free(v); free((void *)first_page_codes);
    }
}

/* codes of a zero row decode to zeros for the ggml arms and kivi */
static void test_zero_rows(void) {
    const char *specs[] = {"f16", "q8_0", "q4_0", "q4_0:rotate=1", "kivi:residual=0"};
    for (size_t si = 0; si < VQ_ARRAY_LEN(specs); si++) {
        vq_err err;
        vq_kv *kv = vq_kv_create_str(specs[si], &D, 5, &err);
        const int w = D.n_kv_heads * D.head_dim, n = 64;
        float *z = calloc((size_t)n * w, sizeof(float)), *kr = malloc(sizeof(float) * (size_t)n * w);
        float *vr = malloc(sizeof(float) * (size_t)n * w);
        int32_t pr[64];
        CHECK(vq_kv_append(kv, 2, 0, n, z, z, &err) == VQ_OK);
        CHECK(vq_kv_read(kv, 2, kr, vr, pr, &err) == VQ_OK);
        int ok = 1;
        for (int i = 0; i < n * w; i++) ok &= kr[i] == 0.0f && vr[i] == 0.0f;
        CHECKF(ok, "%s: zero rows do not decode to zero", specs[si]);
        vq_kv_destroy(kv);
        free(z); free(kr); free(vr);
    }
}

int main(void) {
    uint64_t seed = test_seed();
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    test_specs();
    test_validation(&rng);
    test_window_pages_bytes(&rng);
    test_zero_rows();
    vq_kv_destroy(NULL);
    vq_kv_clear(NULL);
    return vq_t_done();
}
