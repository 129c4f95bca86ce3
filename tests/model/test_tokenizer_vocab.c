/* test_tokenizer_vocab.c: our tokenizer on the real vocabularies of the families we run (Llama 3
 * "llama-bpe", Qwen2, Phi-3 and Llama/Mistral SentencePiece: models/vocab/, scripts/fetch_vocabs.sh)
 * (and Llama 3's with tokenizer.ggml.pre = "default") must give exactly llama.cpp's ids
 * (tests/fixtures/vocab_<name>_tokens.tsv, written by
 * tools/reference/make_vocab_fixtures.py) on every string, and on the whole WikiText-2 test file. */
#define _GNU_SOURCE   /* memmem */
#include "formats/gguf.h"
#include "model/tokenizer.h"
#include "../vq_test.h"

static const char *const VOCABS[] = { "llama-bpe", "qwen2", "phi-3", "llama-spm", "llama-bpe-default" };

/* llama-bpe's file with tokenizer.ggml.pre = "default" (llama.cpp's four regexes, which no shipped
 * vocabulary uses), made in memory as tools/reference/make_vocab_fixtures.py makes it: the string
 * value replaced, the rest of the bytes as they are (the file has no tensors). */
static char *default_pre_copy(const char *path, size_t *len) {
    size_t n; vq_err e;
    char *d = vq_read_file(path, &n, &e);
    if (!d) return NULL;
    const char key[] = "tokenizer.ggml.pre";
    char *k = memmem(d, n, key, sizeof key - 1);
    if (!k || (size_t)(k - d) + sizeof key - 1 + 12 > n) { free(d); return NULL; }
    size_t at = (size_t)(k - d) + sizeof key - 1 + 4, old;   /* after the value type */
    uint64_t v;
    memcpy(&v, d + at, 8);
    old = (size_t)v;
    if (old > n - at - 8) { free(d); return NULL; }
    char *o = malloc(n + 16);
    memcpy(o, d, at);
    uint64_t seven = 7;
    memcpy(o + at, &seven, 8);
    memcpy(o + at + 8, "default", 7);
    memcpy(o + at + 15, d + at + 8 + old, n - at - 8 - old);
    *len = n - old + 7;
    free(d);
    return o;
}

static uint64_t fnv64_ids(const int *ids, int n) {
    uint64_t h = 0xCBF29CE484222325ULL;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) { h ^= ((uint32_t)ids[i] >> (8 * k)) & 0xFF; h *= 0x100000001B3ULL; }
    return h;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : 0;
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

static void check_vocab(const char *name) {
    char path[700];
    int dflt = !strcmp(name, "llama-bpe-default");
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", VQ_MODELS_DIR, dflt ? "llama-bpe" : name);
    vq_err e; vq_err_clear(&e);
    size_t blen = 0;
    char *buf = dflt ? default_pre_copy(path, &blen) : NULL;
    CHECKF(!dflt || buf, "%s: cannot rewrite tokenizer.ggml.pre", path);
    vq_gguf *g = dflt ? (buf ? vq_gguf_open_mem(buf, blen, "llama-bpe (pre default)", &e) : NULL) : vq_gguf_open(path, &e);
    CHECKF(g != NULL, "%s", e.msg);
    if (!g) { free(buf); return; }
    vq_tokenizer *t = vq_tokenizer_from_gguf(g, &e);
    vq_gguf_close(g);
    free(buf);
    CHECKF(t != NULL, "%s: %s", name, e.msg);
    if (!t) return;
    snprintf(path, sizeof path, "%s/tests/fixtures/vocab_%s_tokens.tsv", VQ_SOURCE_DIR, name);
    size_t len;
    char *fx = vq_read_file(path, &len, &e);
    CHECKF(fx != NULL, "%s", e.msg);
    if (!fx) { vq_tokenizer_free(t); return; }
    int cases = 0, same = 0, files = 0;
    char *text = malloc(len + 1);
    int *ref = malloc(8192 * sizeof *ref);
    for (char *line = fx; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char *f[5] = { line }; int nf = 1;
        for (char *p = line; *p && nf < 5; p++) if (*p == '\t') { *p = 0; f[nf++] = p + 1; }
        if (line[0] != '#' && nf == 4 && strcmp(f[0], "case") == 0) {
            int special = strcmp(f[1], "special") == 0;
            size_t tl = unescape(f[2], strlen(f[2]), text);
            int nref = 0;
            for (char *p = f[3]; *p && nref < 8192;) { ref[nref++] = (int)strtol(p, &p, 10); while (*p == ' ') p++; }
            int n;
            int *ids = encode_all(t, text, tl, special, &n);
            cases++;
            int eq = n == nref && memcmp(ids, ref, (size_t)n * sizeof *ids) == 0;
            same += eq;
            if (!eq) {
                fprintf(stderr, "%s mismatch (%s) \"%s\": got", name, f[1], f[2]);
                for (int i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
                fprintf(stderr, "\n   want");
                for (int i = 0; i < nref && i < 40; i++) fprintf(stderr, " %d", ref[i]);
                fputc('\n', stderr);
            }
            free(ids);
        } else if (line[0] != '#' && nf == 4 && strcmp(f[0], "file") == 0) {
            char p2[700];
            snprintf(p2, sizeof p2, "%s/%s", VQ_SHARED_DIR, f[1]);
            size_t dl;
            char *data = vq_read_file(p2, &dl, &e);
            if (!data) printf("skip %s: absent\n", p2);
            else {
                int n;
                double t0 = vq_now_s();
                int *ids = encode_all(t, data, dl, 0, &n);
                double dt = vq_now_s() - t0;
                long want_n = strtol(f[2], NULL, 10);
                unsigned long long want_h = strtoull(f[3], NULL, 16);
                files++;
                printf("%s %s: %d tokens (llama.cpp %ld), hash %016llx (llama.cpp %s), %.3f s\n", name, f[1], n,
                       want_n, (unsigned long long)fnv64_ids(ids, n), f[3], dt);
                CHECKF(n == want_n && fnv64_ids(ids, n) == want_h, "%s %s: %d tokens, want %ld", name, f[1], n, want_n);
                free(ids); free(data);
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    printf("%s: %d/%d strings give llama.cpp's ids; %d data files checked\n", name, same, cases, files);
    CHECK(cases >= 300);
    CHECKF(same == cases, "%s: %d of %d fixture strings differ", name, cases - same, cases);
    free(ref); free(text); free(fx);
    vq_tokenizer_free(t);
}

int main(void) {
    char probe[700];
    snprintf(probe, sizeof probe, "%s/vocab/ggml-vocab-qwen2.gguf", VQ_MODELS_DIR);
    if (access(probe, R_OK) != 0) VQ_SKIP("%s not found: run scripts/fetch_vocabs.sh", probe);
    for (size_t k = 0; k < VQ_ARRAY_LEN(VOCABS); k++) check_vocab(VOCABS[k]);
    return vq_t_done();
}
