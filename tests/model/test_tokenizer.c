/* test_tokenizer.c: SentencePiece BPE on llama2.c's tok512.bin: the exact ids run.c gives for the
 * reference strings, agreement with a plain O(n^2) re-statement of run.c's encoder on real and
 * random text, decode(encode(s)) == s on random UTF-8 and on invalid bytes, hostile files. */
#include "model/tokenizer.h"
#include "../vq_test.h"
#include <float.h>

/* ---- an independent, deliberately naive encoder: run.c's algorithm read from its description:
 * dummy " " token, one lookup per UTF-8 character (else its bytes as <0xXX> = byte + 3), then
 * repeatedly merge the adjacent pair whose concatenation has the highest score (leftmost on ties) */
typedef struct ref_vocab { int n; char **s; float *sc; int *sorted; } ref_vocab;
static const ref_vocab *g_rv;
static int cmp_idx(const void *a, const void *b) {
    return strcmp(g_rv->s[*(const int *)a], g_rv->s[*(const int *)b]);
}
static int ref_load(ref_vocab *v, const char *path, int n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int mx;
    if (fread(&mx, 4, 1, f) != 1) { fclose(f); return -1; }
    v->n = n; v->s = calloc((size_t)n, sizeof *v->s); v->sc = calloc((size_t)n, 4);
    v->sorted = calloc((size_t)n, sizeof(int));
    for (int i = 0; i < n; i++) {
        int len;
        if (fread(&v->sc[i], 4, 1, f) != 1 || fread(&len, 4, 1, f) != 1 || len < 0 || len > 64) { fclose(f); return -1; }
        v->s[i] = calloc((size_t)len + 1, 1);
        if (fread(v->s[i], 1, (size_t)len, f) != (size_t)len) { fclose(f); return -1; }
        v->sorted[i] = i;
    }
    fclose(f);
    g_rv = v;
    qsort(v->sorted, (size_t)n, sizeof(int), cmp_idx);
    return 0;
}
static int ref_find(const ref_vocab *v, const char *s) {
    int lo = 0, hi = v->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(s, v->s[v->sorted[mid]]);
        if (!c) return v->sorted[mid];
        if (c < 0) hi = mid - 1; else lo = mid + 1;
    }
    return -1;
}
static int ref_encode(const ref_vocab *v, const char *text, int *out) {
    int n = 0;
    out[n++] = 1;
    if (text[0]) out[n++] = ref_find(v, " ");
    char buf[16];
    for (const char *c = text; *c;) {
        int k = 1;
        while (k < 4 && c[k] && ((unsigned char)c[k] & 0xC0) == 0x80) k++;
        memcpy(buf, c, (size_t)k); buf[k] = 0;
        int id = ref_find(v, buf);
        if (id >= 0) out[n++] = id;
        else for (int j = 0; j < k; j++) out[n++] = (unsigned char)c[j] + 3;
        c += k;
    }
    char cat[160];
    for (;;) {
        float best = -FLT_MAX; int bi = -1, bid = -1;
        for (int i = 1; i + 1 < n; i++) {
            snprintf(cat, sizeof cat, "%s%s", v->s[out[i]], v->s[out[i + 1]]);
            int id = ref_find(v, cat);
            if (id >= 0 && v->sc[id] > best) { best = v->sc[id]; bi = i; bid = id; }
        }
        if (bi < 0) break;
        out[bi] = bid;
        memmove(out + bi + 1, out + bi + 2, (size_t)(n - bi - 2) * sizeof(int));
        n--;
    }
    return n;
}

/* random valid UTF-8: code points of 1-4 bytes, no surrogates, no NUL */
static size_t rand_utf8(vq_rng *r, char *o, int n_cp) {
    size_t w = 0;
    for (int i = 0; i < n_cp; i++) {
        uint32_t cp, cls = (uint32_t)(vq_rng_u64(r) % 8);
        if (cls < 4) { static const char a[] = "ab cde  fgh\n\tThe story.,!?'0123"; cp = (uint8_t)a[vq_rng_u64(r) % (sizeof a - 1)]; }
        else if (cls == 4) cp = 1 + (uint32_t)(vq_rng_u64(r) % 0x7F);
        else if (cls == 5) cp = 0x80 + (uint32_t)(vq_rng_u64(r) % (0x800 - 0x80));
        else if (cls == 6) { do cp = 0x800 + (uint32_t)(vq_rng_u64(r) % (0x10000 - 0x800)); while (cp >= 0xD800 && cp <= 0xDFFF); }
        else cp = 0x10000 + (uint32_t)(vq_rng_u64(r) % (0x110000 - 0x10000));
        if (cp < 0x80) o[w++] = (char)cp;
        else if (cp < 0x800) { o[w++] = (char)(0xC0 | cp >> 6); o[w++] = (char)(0x80 | (cp & 63)); }
        else if (cp < 0x10000) { o[w++] = (char)(0xE0 | cp >> 12); o[w++] = (char)(0x80 | ((cp >> 6) & 63)); o[w++] = (char)(0x80 | (cp & 63)); }
        else { o[w++] = (char)(0xF0 | cp >> 18); o[w++] = (char)(0x80 | ((cp >> 12) & 63)); o[w++] = (char)(0x80 | ((cp >> 6) & 63)); o[w++] = (char)(0x80 | (cp & 63)); }
    }
    o[w] = 0;
    return w;
}

static int ids_equal(const int *a, int na, const int *b, int nb) {
    return na == nb && memcmp(a, b, (size_t)na * sizeof(int)) == 0;
}

static void check_reference_ids(vq_tokenizer *t) {
    static const struct { const char *s; int ids[32]; int n; } ref[] = {
        { "Once upon a time", {1,403,407,261,378}, 5 },
        { "Hello, world!", {1,346,306,414,432,263,304,341,443}, 9 },
        { "Lily and Ben went to the park. They saw a big dog.",
          {1,317,269,368,302,263,377,267,265,282,295,433,426,342,394,261,370,400,428,426}, 20 },
        { "  two  spaces\ttab\nnewline",
          {1,410,410,259,424,414,410,262,427,412,331,419,12,413,412,430,13,416,411,424,421,271,411}, 23 },
        { "caf\xc3\xa9 \xe2\x80\x94 na\xc3\xafve \xf0\x9f\x98\x80 \xe6\x97\xa5\xe6\x9c\xac",
          {1,280,412,431,485,410,481,297,412,198,178,360,410,243,162,155,131,410,233,154,168,233,159,175}, 24 },
    };
    for (size_t k = 0; k < VQ_ARRAY_LEN(ref); k++) {
        int out[64]; vq_err e; vq_err_clear(&e);
        int n = vq_tok_encode(t, ref[k].s, strlen(ref[k].s), 1, 0, out, 64, &e);
        CHECKF(ids_equal(out, n, ref[k].ids, ref[k].n), "\"%s\": got %d ids, want %d", ref[k].s, n, ref[k].n);
        char txt[256];
        size_t m = vq_tok_decode(t, out, n, txt, sizeof txt - 1);
        txt[VQ_MIN(m, sizeof txt - 1)] = 0;
        CHECKF(m == strlen(ref[k].s) && strcmp(txt, ref[k].s) == 0, "decode \"%s\" -> \"%s\"", ref[k].s, txt);
        /* streaming the same ids with vq_tok_piece gives the same text */
        char st[256]; size_t w = 0;
        for (int i = 0; i < n; i++) w += vq_tok_piece(t, i ? out[i - 1] : -1, out[i], 0, st + w, sizeof st - 1 - w);
        CHECK(w == m && memcmp(st, txt, m) == 0);
    }
    /* a too-small output buffer: the count still comes back, and what fits is the prefix */
    int few[3]; vq_err e;
    int n = vq_tok_encode(t, "Once upon a time", 16, 1, 0, few, 3, &e);
    CHECK(n == 5 && few[0] == 1 && few[1] == 403 && few[2] == 407);
    CHECK(vq_tok_encode(t, "", 0, 1, 0, few, 3, &e) == 1 && few[0] == 1);
    CHECK(vq_tok_encode(t, "", 0, 0, 0, few, 3, &e) == 0);
}

static void check_against_naive(vq_tokenizer *t, const ref_vocab *rv) {
    char path[512];
    size_t len; vq_err e;
    char *txt = vq_read_file(vq_t_shared("data/tinystories-valid-sample.txt", path, sizeof path), &len, &e);
    CHECK(txt != NULL);
    if (!txt) return;
    int *a = malloc(8192 * sizeof(int)), *b = malloc(8192 * sizeof(int));
    int paragraphs = 0, agree = 0;
    char *para = malloc(4096);
    for (char *p = txt; *p && paragraphs < 150;) {
        char *end = strstr(p, "\n\n");
        size_t L = end ? (size_t)(end - p) : strlen(p);
        if (L > 0 && L < 2000) {
            memcpy(para, p, L); para[L] = 0;
            int na = vq_tok_encode(t, para, L, 1, 0, a, 8192, &e);
            int nb = ref_encode(rv, para, b);
            paragraphs++;
            if (ids_equal(a, na, b, nb)) agree++;
            else if (paragraphs - agree <= 3) fprintf(stderr, "differs from naive: \"%.60s...\"\n", para);
        }
        p += L;
        while (*p == '\n') p++;
    }
    printf("tinystories: %d/%d paragraphs identical to the naive encoder\n", agree, paragraphs);
    /* the whole file as one text: speed, and decode gives it back (minus nothing: bytes fall back) */
    int cap = (int)len + 16;
    int *all = malloc((size_t)cap * sizeof *all);
    double t0 = vq_now_s();
    int na = vq_tok_encode(t, txt, len, 1, 0, all, cap, &e);
    double dt = vq_now_s() - t0;
    printf("tinystories-valid-sample.txt (%zu bytes): %d tokens in %.3f s: %.0f tokens/s\n", len, na, dt, na / dt);
    CHECK(na > 100000 && na <= cap && dt < 5.0);
    char *back = malloc(len + 1);
    CHECK(na > 0 && vq_tok_decode(t, all, na, back, len + 1) == len && memcmp(back, txt, len) == 0);
    free(back); free(all);
    CHECK(paragraphs >= 100 && agree == paragraphs);
    /* random text, including characters outside the vocabulary (byte fallback) */
    uint64_t seed = 20261129;
    vq_rng r; vq_rng_seed(&r, seed);
    printf("random-text seed %llu\n", (unsigned long long)seed);
    int rnd_ok = 0;
    for (int it = 0; it < 300; it++) {
        size_t w = rand_utf8(&r, para, 1 + (int)(vq_rng_u64(&r) % 120));
        int na = vq_tok_encode(t, para, w, 1, 0, a, 8192, &e);
        int nb = ref_encode(rv, para, b);
        rnd_ok += ids_equal(a, na, b, nb);
        char back[4096];
        size_t m = vq_tok_decode(t, a, na, back, sizeof back);
        CHECKF(m == w && memcmp(back, para, w) == 0, "round trip of random string %d (seed %llu)", it,
               (unsigned long long)seed);
    }
    CHECKF(rnd_ok == 300, "%d/300 random strings identical to the naive encoder", rnd_ok);
    free(para); free(a); free(b); free(txt);
}

static void check_invalid_utf8(vq_tokenizer *t) {
    static const char *bad[] = { "\x80", "a\xbf" "b", "\xc3", "ab\xe6\x97", "\xf0\x9f\x98", "\xc0\xaf",
                                 "\xe0\x80\xaf", "\xed\xa0\x80", "\xff\xfe", "x\xf5\x80\x80\x80y", " \xc3 \xa9 " };
    for (size_t k = 0; k < VQ_ARRAY_LEN(bad); k++) {
        int out[64]; vq_err e;
        size_t L = strlen(bad[k]);
        int n = vq_tok_encode(t, bad[k], L, 1, 0, out, 64, &e);
        CHECKF(n >= 1 && n <= 64, "invalid input %zu: %d ids", k, n);
        char back[128];
        size_t m = vq_tok_decode(t, out, n, back, sizeof back);
        CHECKF(m == L && memcmp(back, bad[k], L) == 0, "invalid input %zu does not round-trip", k);
    }
}

static void check_bad_files(const char *good) {
    size_t n; vq_err e;
    char *buf = vq_read_file(good, &n, &e);
    CHECK(buf != NULL);
    if (!buf) return;
    char tmp[] = "/tmp/vq_tok_XXXXXX";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0);
    if (fd < 0) { free(buf); return; }
    close(fd);
    size_t cuts[] = { 0, 3, 4, 9, 13, n / 2, n - 1 };
    for (size_t k = 0; k < VQ_ARRAY_LEN(cuts); k++) {
        FILE *f = fopen(tmp, "wb");
        fwrite(buf, 1, cuts[k], f); fclose(f);
        vq_err_clear(&e);
        vq_tokenizer *t = vq_tokenizer_from_llama2c(tmp, 512, &e);
        CHECKF(t == NULL && e.code == VQ_ERR_FORMAT && strstr(e.msg, tmp), "cut at %zu: %s", cuts[k], e.msg);
        vq_tokenizer_free(t);
    }
    /* a corrupt length field: negative, then huge */
    for (int k = 0; k < 2; k++) {
        int32_t L = k ? 0x7fffffff : -5;
        memcpy(buf + 4 + 4, &L, 4);
        FILE *f = fopen(tmp, "wb");
        fwrite(buf, 1, n, f); fclose(f);
        vq_err_clear(&e);
        vq_tokenizer *t = vq_tokenizer_from_llama2c(tmp, 512, &e);
        CHECKF(t == NULL && e.code == VQ_ERR_FORMAT, "corrupt length %d: %s", (int)L, e.msg);
        vq_tokenizer_free(t);
    }
    vq_err_clear(&e);
    CHECK(vq_tokenizer_from_llama2c("/nonexistent/tok.bin", 512, &e) == NULL && e.code == VQ_ERR_IO);
    CHECK(vq_tokenizer_from_llama2c(good, 0, &e) == NULL && e.code == VQ_ERR_ARG);
    unlink(tmp);
    free(buf);
}

int main(void) {
    char path[512];
    vq_t_shared("data/tok512.bin", path, sizeof path);
    vq_err e; vq_err_clear(&e);
    vq_tokenizer *t = vq_tokenizer_from_llama2c(path, 512, &e);
    CHECKF(t != NULL, "%s", e.msg);
    if (!t) return vq_t_done();
    CHECK(vq_tok_vocab_size(t) == 512 && vq_tok_bos(t) == 1 && vq_tok_eos(t) == 2);
    CHECK(vq_tok_add_bos_default(t) == 1);
    /* run.c stops on BOS too: llama2.c models emit it between stories */
    CHECK(vq_tok_is_eog(t, 2) && vq_tok_is_eog(t, 1) && !vq_tok_is_eog(t, 403) && !vq_tok_is_eog(t, 0));
    CHECK(vq_tok_find(t, " Once") == 403 && vq_tok_find(t, "no such piece") == -1);
    char b[16];
    CHECK(vq_tok_piece(t, 1, 403, 0, b, sizeof b) == 4 && memcmp(b, "Once", 4) == 0);  /* after BOS */
    CHECK(vq_tok_piece(t, 403, 407, 0, b, sizeof b) == 5 && memcmp(b, " upon", 5) == 0);
    CHECK(vq_tok_piece(t, 403, 13, 0, b, sizeof b) == 1 && b[0] == '\n');               /* <0x0A> */
    CHECK(vq_tok_piece(t, 403, 2, 0, b, sizeof b) == 0);                                /* control */
    CHECK(vq_tok_piece(t, 403, 2, 1, b, sizeof b) > 0);
    CHECK(vq_tok_piece(t, 403, 9999, 0, b, sizeof b) == 0);
    check_reference_ids(t);
    ref_vocab rv;
    CHECK(ref_load(&rv, path, 512) == 0);
    check_against_naive(t, &rv);
    check_invalid_utf8(t);
    check_bad_files(path);
    for (int i = 0; i < rv.n; i++) free(rv.s[i]);
    free(rv.s); free(rv.sc); free(rv.sorted);
    vq_tokenizer_free(t);
    return vq_t_done();
}
