/* test_tokenizer_smollm2.c: byte-level BPE on SmolLM2's GGUF vocabulary. Token ids must equal those
 * of an independent tokenizer (HF tokenizers, tests/fixtures/smollm2_tokens.tsv, written by
 * tools/reference/make_token_fixtures.py) on fixed and random strings and on whole data files;
 * decode(encode(s)) == s byte-exactly for random valid UTF-8, and for arbitrary bytes == s as llama.cpp reads
 * it (invalid UTF-8 becomes U+FFFD, one per byte; see llama_clean). */
#include "formats/gguf.h"
#include "model/tokenizer.h"
#include "../vq_test.h"

static uint64_t fnv64_ids(const int *ids, int n) {
    uint64_t h = 0xCBF29CE484222325ULL;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) { h ^= ((uint32_t)ids[i] >> (8 * k)) & 0xFF; h *= 0x100000001B3ULL; }
    return h;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static size_t unescape(const char *s, size_t n, char *o) {
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) { o[w++] = s[i]; continue; }
        char c = s[++i];
        if (c == 'n') o[w++] = '\n';
        else if (c == 't') o[w++] = '\t';
        else if (c == 'r') o[w++] = '\r';
        else if (c == 'x' && i + 2 < n) { o[w++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2])); i += 2; }
        else o[w++] = c;
    }
    return w;
}

/* Tokenize a whole buffer, growing the output as vq_tok_encode asks. */
static int *encode_all(const vq_tokenizer *t, const char *s, size_t n, int special, int *count) {
    vq_err e;
    int cap = (int)(n / 2) + 16;
    int *ids = malloc((size_t)cap * sizeof *ids);
    int need = vq_tok_encode(t, s, n, 0, special, ids, cap, &e);
    if (need > cap) {
        ids = realloc(ids, (size_t)need * sizeof *ids);
        need = vq_tok_encode(t, s, n, 0, special, ids, need, &e);
    }
    if (need < 0) fprintf(stderr, "vq_tok_encode: %s\n", e.msg);
    *count = need;
    return ids;
}

/* Bytes the vocabulary has a token for (looked up by their GPT-2 spelling): the others are dropped
 * by the encoder (as by HF and llama.cpp), so decode(encode(s)) is s without them. */
static unsigned char g_has_byte[256];
static int g_n_missing;
static void find_byte_tokens(const vq_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        uint32_t cp = b <= 0x20 ? 256u + (unsigned)b : (b >= 0x7F && b <= 0xA0) ? 256u + 33 + (unsigned)(b - 0x7F)
                    : b == 0xAD ? 256u + 67 : (unsigned)b;
        char sp[3] = { 0 };
        if (cp < 0x80) sp[0] = (char)cp;
        else { sp[0] = (char)(0xC0 | cp >> 6); sp[1] = (char)(0x80 | (cp & 63)); }
        g_has_byte[b] = vq_tok_find(t, sp) >= 0;
        g_n_missing += !g_has_byte[b];
    }
    printf("%d of 256 bytes have no token in this vocabulary\n", g_n_missing);
}

/* The text the encoder sees, as llama.cpp reads it: each byte that does not start a sequence of the
 * length its lead byte says with continuation bytes after it becomes U+FFFD; an overlong form is read
 * as its code point and spelled again in the shortest form; past U+10FFFF is invalid too.
 * (Written from that rule, separately from src/model/tok_bpe.c.) Returns the length written to o. */
static size_t llama_clean(const unsigned char *p, size_t n, char *o) {
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        int len = p[i] < 0x80 ? 1 : p[i] < 0xC0 ? 0 : p[i] < 0xE0 ? 2 : p[i] < 0xF0 ? 3 : p[i] < 0xF8 ? 4 : 0;
        uint32_t cp = len == 1 ? p[i] : (uint32_t)(p[i] & (0x7F >> len));
        if (len > 1 && i + (size_t)len > n) len = 0;
        for (int k = 1; k < len; k++) {
            if ((p[i + (size_t)k] & 0xC0) != 0x80) { len = 0; break; }
            cp = cp << 6 | (p[i + (size_t)k] & 0x3F);
        }
        if (len == 0 || cp > 0x10FFFF) { memcpy(o + w, "\xEF\xBF\xBD", 3); w += 3; i++; continue; }
        i += (size_t)len;
        char tmp[4]; int m;
        if (cp < 0x80) { tmp[0] = (char)cp; m = 1; }
        else if (cp < 0x800) { tmp[0] = (char)(0xC0 | cp >> 6); tmp[1] = (char)(0x80 | (cp & 63)); m = 2; }
        else if (cp < 0x10000) { tmp[0] = (char)(0xE0 | cp >> 12); tmp[1] = (char)(0x80 | ((cp >> 6) & 63));
                                 tmp[2] = (char)(0x80 | (cp & 63)); m = 3; }
        else { tmp[0] = (char)(0xF0 | cp >> 18); tmp[1] = (char)(0x80 | ((cp >> 12) & 63));
               tmp[2] = (char)(0x80 | ((cp >> 6) & 63)); tmp[3] = (char)(0x80 | (cp & 63)); m = 4; }
        memcpy(o + w, tmp, (size_t)m); w += (size_t)m;
    }
    return w;
}

static int round_trips(const vq_tokenizer *t, const char *s, size_t n) {
    int k;
    int *ids = encode_all(t, s, n, 0, &k);
    char *clean = malloc(3 * n + 1), *want = malloc(3 * n + 1), *back = malloc(3 * n + 1);
    size_t c = llama_clean((const unsigned char *)s, n, clean), w = 0;
    for (size_t i = 0; i < c; i++) if (g_has_byte[(unsigned char)clean[i]]) want[w++] = clean[i];
    size_t m = k >= 0 ? vq_tok_decode(t, ids, k, back, 3 * n + 1) : (size_t)-1;
    int ok = m == w && memcmp(back, want, w) == 0;
    free(ids); free(back); free(want); free(clean);
    return ok;
}

static void check_fixture(const vq_tokenizer *t) {
    char path[600];
    snprintf(path, sizeof path, "%s/tests/fixtures/smollm2_tokens.tsv", VQ_SOURCE_DIR);
    size_t len; vq_err e;
    char *fx = vq_read_file(path, &len, &e);
    CHECKF(fx != NULL, "%s", e.msg);
    if (!fx) return;
    int cases = 0, same = 0, files = 0;
    char *text = malloc(len + 1);
    int ref[4096];
    for (char *line = fx; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char *f[5] = { line }; int nf = 1;
        for (char *p = line; *p && nf < 5; p++) if (*p == '\t') { *p = 0; f[nf++] = p + 1; }
        if (line[0] != '#' && nf == 4 && strcmp(f[0], "case") == 0) {
            int special = strcmp(f[1], "special") == 0;
            size_t tl = unescape(f[2], strlen(f[2]), text);
            int nref = 0;
            for (char *p = f[3]; *p && nref < 4096;) { ref[nref++] = (int)strtol(p, &p, 10); while (*p == ' ') p++; }
            int n;
            int *ids = encode_all(t, text, tl, special, &n);
            cases++;
            int eq = n == nref && memcmp(ids, ref, (size_t)n * sizeof *ids) == 0;
            same += eq;
            if (!eq) {
                fprintf(stderr, "mismatch (%s) \"%s\": got", f[1], f[2]);
                for (int i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
                fprintf(stderr, "\n   want");
                for (int i = 0; i < nref && i < 40; i++) fprintf(stderr, " %d", ref[i]);
                fputc('\n', stderr);
            }
            if (!special) CHECKF(round_trips(t, text, tl), "decode(encode(\"%s\"))", f[2]);
            free(ids);
        } else if (line[0] != '#' && nf == 4 && strcmp(f[0], "file") == 0) {
            char p2[600];
            snprintf(p2, sizeof p2, "%s/%s", VQ_SHARED_DIR, f[1]);
            size_t dl;
            char *data = vq_read_file(p2, &dl, &e);
            if (!data) { printf("skip %s: absent\n", p2); }
            else {
                int n;
                double t0 = vq_now_s();
                int *ids = encode_all(t, data, dl, 0, &n);
                double dt = vq_now_s() - t0;
                long want_n = strtol(f[2], NULL, 10);
                unsigned long long want_h = strtoull(f[3], NULL, 16);
                files++;
                printf("%s: %d tokens (reference %ld) in %.3f s: %.0f tokens/s, %.2f MB/s\n", f[1], n, want_n,
                       dt, n / dt, dl / dt / 1e6);
                CHECKF(n == want_n && fnv64_ids(ids, n) == want_h, "%s: %d tokens, hash %016llx; want %ld, %s",
                       f[1], n, (unsigned long long)fnv64_ids(ids, n), want_n, f[3]);
                CHECKF(n <= 0 || dt < 5.0, "%s took %.2f s", f[1], dt);
                char *back = malloc(dl + 1);
                CHECK(vq_tok_decode(t, ids, n, back, dl + 1) == dl && memcmp(back, data, dl) == 0);
                free(back); free(ids); free(data);
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    printf("fixture: %d/%d strings give the reference ids; %d data files checked\n", same, cases, files);
    CHECK(cases >= 50);
    CHECKF(same == cases, "%d of %d fixture strings differ", cases - same, cases);
    free(text); free(fx);
}

/* pyref's fixture: the first 8192 ids of WikiText-2 test, the file's bytes as they are (CRLF kept). */
static void check_pyref_ids(const vq_tokenizer *t) {
    char path[600], sp[600];
    snprintf(path, sizeof path, "%s/tests/fixtures/smollm2_wikitext_8k_ids.txt", VQ_SOURCE_DIR);
    snprintf(sp, sizeof sp, "%s/data/wikitext-2-raw-test.txt", VQ_SHARED_DIR);
    size_t fl, dl; vq_err e;
    char *fx = vq_read_file(path, &fl, &e), *data = fx ? vq_read_file(sp, &dl, &e) : NULL;
    if (!fx || !data) { printf("skip pyref ids: fixture or data absent\n"); free(fx); return; }
    int n;
    int *ids = encode_all(t, data, dl, 0, &n);
    int k = 0, bad = 0;
    long total = -1;
    char *tp = strstr(fx, "BOS add_bos_token=False): ");
    if (!tp) tp = strstr(fx, "): ");
    if (tp) total = strtol(strchr(tp, ':') + 2, NULL, 10);
    for (char *p = fx; *p;) {
        if (*p == '#') { p = strchr(p, '\n'); if (!p) break; p++; continue; }
        char *q;
        long v = strtol(p, &q, 10);
        if (q == p) { p++; continue; }
        if (k >= n || ids[k] != v) bad++;
        k++; p = q;
    }
    printf("pyref wikitext ids: %d compared, %d differ; total %d (pyref says %ld)\n", k, bad, n, total);
    CHECK(k >= 1000 && bad == 0);
    CHECK(total < 0 || total == n);
    free(ids); free(data); free(fx);
}

static size_t rand_utf8(vq_rng *r, char *o, int n_cp) {
    size_t w = 0;
    for (int i = 0; i < n_cp; i++) {
        uint32_t cp, cls = (uint32_t)(vq_rng_u64(r) % 8);
        if (cls < 3) { static const char a[] = "ab cd  ef\n\n\t 0123 4.5,'s!?"; cp = (uint8_t)a[vq_rng_u64(r) % (sizeof a - 1)]; }
        else if (cls == 3) cp = (uint32_t)(vq_rng_u64(r) % 0x80);
        else if (cls == 4) cp = 0x80 + (uint32_t)(vq_rng_u64(r) % (0x800 - 0x80));
        else if (cls == 5) { do cp = 0x800 + (uint32_t)(vq_rng_u64(r) % (0x10000 - 0x800)); while (cp >= 0xD800 && cp <= 0xDFFF); }
        else if (cls == 6) cp = 0x3040 + (uint32_t)(vq_rng_u64(r) % 0x6000);   /* kana, CJK */
        else cp = 0x10000 + (uint32_t)(vq_rng_u64(r) % (0x110000 - 0x10000));
        if (cp < 0x80) o[w++] = (char)cp;
        else if (cp < 0x800) { o[w++] = (char)(0xC0 | cp >> 6); o[w++] = (char)(0x80 | (cp & 63)); }
        else if (cp < 0x10000) { o[w++] = (char)(0xE0 | cp >> 12); o[w++] = (char)(0x80 | ((cp >> 6) & 63)); o[w++] = (char)(0x80 | (cp & 63)); }
        else { o[w++] = (char)(0xF0 | cp >> 18); o[w++] = (char)(0x80 | ((cp >> 12) & 63)); o[w++] = (char)(0x80 | ((cp >> 6) & 63)); o[w++] = (char)(0x80 | (cp & 63)); }
    }
    return w;
}

static void check_round_trips(const vq_tokenizer *t) {
    uint64_t seed = 424242;
    vq_rng r; vq_rng_seed(&r, seed);
    printf("round-trip seed %llu\n", (unsigned long long)seed);
    char buf[2048];
    int ok = 0, n_utf8 = 400, n_bytes = 400;
    for (int it = 0; it < n_utf8; it++) {
        size_t n = rand_utf8(&r, buf, 1 + (int)(vq_rng_u64(&r) % 200));
        ok += round_trips(t, buf, n);
    }
    CHECKF(ok == n_utf8, "valid UTF-8: %d/%d round-trip (seed %llu)", ok, n_utf8, (unsigned long long)seed);
    ok = 0;
    for (int it = 0; it < n_bytes; it++) {   /* arbitrary bytes, mostly invalid UTF-8 */
        size_t n = 1 + vq_rng_u64(&r) % 300;
        for (size_t i = 0; i < n; i++) {
            uint64_t v = vq_rng_u64(&r);
            buf[i] = (v & 3) ? (char)(v >> 8) : "a \n1\x80\xc3\xe2\xf0"[(v >> 8) % 8];
        }
        ok += round_trips(t, buf, n);
    }
    CHECKF(ok == n_bytes, "random bytes: %d/%d round-trip (seed %llu)", ok, n_bytes, (unsigned long long)seed);
    static const char *bad[] = { "\x80", "a\xbf" "b", "\xc3", "ab\xe6\x97", "\xf0\x9f\x98", "\xc0\xaf",
                                 "\xe0\x80\xaf", "\xed\xa0\x80", "\xff\xfe", "x\xf5\x80\x80\x80y", " \xc3 \xa9 ",
                                 "12\xff" "34", "don\xe2\x80't", "\xf4\x90\x80\x80" };
    for (size_t k = 0; k < VQ_ARRAY_LEN(bad); k++)
        CHECKF(round_trips(t, bad[k], strlen(bad[k])), "invalid input %zu", k);
    /* random bytes with special-token parsing on, and decoding of arbitrary ids: no crash, and
     * vq_tok_decode reports the full length while writing no more than cap */
    for (int it = 0; it < 200; it++) {
        size_t n = 1 + vq_rng_u64(&r) % 200;
        for (size_t i = 0; i < n; i++) buf[i] = (vq_rng_u64(&r) & 1) ? (char)vq_rng_u64(&r) : "<|im_start>end"[vq_rng_u64(&r) % 14];
        int ids[512]; vq_err e;
        int k = vq_tok_encode(t, buf, n, 1, 1, ids, 512, &e);
        CHECK(k >= 1 && k <= 512);
        for (int i = 0; i < 16; i++) ids[i] = (int)(vq_rng_u64(&r) % 60000) - 5000;
        char small[8 + 4];
        memset(small, 0x5A, sizeof small);
        size_t full = vq_tok_decode(t, ids, 16, NULL, 0);
        size_t got = vq_tok_decode(t, ids, 16, small, 8);
        CHECK(got == full && small[8] == 0x5A && small[11] == 0x5A);
    }
    /* long runs: whitespace (regex backtracking), one long word, digits */
    size_t big = 200000;
    char *s = malloc(big);
    const char fill[] = { ' ', '\n', 'a', '7', '\t' };
    for (size_t k = 0; k < sizeof fill; k++) {
        memset(s, fill[k], big);
        double t0 = vq_now_s();
        CHECKF(round_trips(t, s, big), "200000 x 0x%02x", fill[k]);
        printf("200000 x 0x%02x: %.3f s\n", fill[k], vq_now_s() - t0);
    }
    free(s);
}

static void check_specials(const vq_tokenizer *t) {
    int ids[64]; vq_err e;
    const char *chat = "<|im_start|>user\nHi<|im_end|>\n";
    int n = vq_tok_encode(t, chat, strlen(chat), 0, 1, ids, 64, &e);
    CHECK(n >= 5 && ids[0] == vq_tok_find(t, "<|im_start|>") && ids[n - 2] == vq_tok_find(t, "<|im_end|>"));
    int m = vq_tok_encode(t, chat, strlen(chat), 0, 0, ids, 64, &e);
    CHECK(m > n);
    for (int i = 0; i < m; i++) CHECK(ids[i] > 16);   /* no control token from plain text */
    n = vq_tok_encode(t, chat, strlen(chat), 0, 1, ids, 64, &e);
    char out[128];
    size_t k = vq_tok_decode(t, ids, n, out, sizeof out);
    CHECK(k == strlen("user\nHi\n") && memcmp(out, "user\nHi\n", k) == 0);   /* control tokens silent */
    size_t w = 0;
    for (int i = 0; i < n; i++) w += vq_tok_piece(t, i ? ids[i - 1] : -1, ids[i], 1, out + w, sizeof out - w);
    CHECK(w == strlen(chat) && memcmp(out, chat, w) == 0);                   /* unless shown */
    CHECK(vq_tok_encode(t, chat, strlen(chat), 1, 1, ids, 64, &e) == n + 1 && ids[0] == vq_tok_bos(t));
    CHECK(vq_tok_encode(NULL, chat, 3, 0, 0, ids, 64, &e) == -1 && e.code == VQ_ERR_ARG);
    CHECK(vq_tok_encode(t, NULL, 3, 0, 0, ids, 64, &e) == -1);
}

int main(void) {
    char mpath[600];
    vq_t_model(mpath, sizeof mpath);
    vq_err e; vq_err_clear(&e);
    vq_gguf *g = vq_gguf_open(mpath, &e);
    CHECKF(g != NULL, "%s", e.msg);
    if (!g) return vq_t_done();
    double t0 = vq_now_s();
    vq_tokenizer *t = vq_tokenizer_from_gguf(g, &e);
    printf("load: %.3f s\n", vq_now_s() - t0);
    vq_gguf_close(g);   /* the tokenizer keeps its own copies */
    CHECKF(t != NULL, "%s", e.msg);
    if (!t) return vq_t_done();
    CHECK(vq_tok_vocab_size(t) == 49152 && vq_tok_bos(t) == 1 && vq_tok_eos(t) == 2);
    CHECK(vq_tok_add_bos_default(t) == 0);
    CHECK(vq_tok_is_eog(t, 2) && vq_tok_is_eog(t, 0) && !vq_tok_is_eog(t, 1) && !vq_tok_is_eog(t, 19556));
    CHECK(vq_tok_find(t, "<|im_end|>") == 2 && vq_tok_find(t, "Hello") == 19556);
    find_byte_tokens(t);
    CHECK(g_n_missing < 32 && g_has_byte[' '] && g_has_byte['a'] && g_has_byte[0xE6]);
    check_specials(t);
    check_fixture(t);
    check_pyref_ids(t);
    check_round_trips(t);
    vq_tokenizer_free(t);
    return vq_t_done();
}
