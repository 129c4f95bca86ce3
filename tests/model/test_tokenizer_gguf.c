/* test_tokenizer_gguf.c: the GGUF tokenizer loader on small GGUF files written here in memory:
 * a "llama" (SentencePiece) vocabulary made from tok512.bin with spaces spelled U+2581 must give
 * run.c's ids; a tiny "gpt2" vocabulary shows that tokenizer.ggml.pre picks the regexes; bad
 * metadata (wrong types, lengths, ids, model names) fails with a message, never a crash. */
#include "formats/gguf.h"
#include "model/tokenizer.h"
#include "../vq_test.h"

/* ---- a minimal GGUF v3 writer: metadata only, no tensors ---- */
typedef struct wb { uint8_t *p; size_t n, cap; int n_kv; } wb;
static void put(wb *b, const void *d, size_t k) {
    if (!k) return;
    if (b->n + k > b->cap) { b->cap = (b->n + k) * 2 + 64; b->p = realloc(b->p, b->cap); }
    memcpy(b->p + b->n, d, k); b->n += k;
}
static void u32(wb *b, uint32_t v) { put(b, &v, 4); }
static void u64(wb *b, uint64_t v) { put(b, &v, 8); }
static void strn(wb *b, const char *s, size_t n) { u64(b, n); put(b, s, n); }
static void key(wb *b, const char *k, uint32_t ty) { strn(b, k, strlen(k)); u32(b, ty); b->n_kv++; }
static void kv_str(wb *b, const char *k, const char *v) { key(b, k, VQ_GGUF_STRING); strn(b, v, strlen(v)); }
static void kv_u32(wb *b, const char *k, uint32_t v) { key(b, k, VQ_GGUF_UINT32); u32(b, v); }
static void kv_bool(wb *b, const char *k, int v) { key(b, k, VQ_GGUF_BOOL); uint8_t c = (uint8_t)v; put(b, &c, 1); }
static void kv_strs(wb *b, const char *k, char **s, const size_t *len, int n) {
    key(b, k, VQ_GGUF_ARRAY); u32(b, VQ_GGUF_STRING); u64(b, (uint64_t)n);
    for (int i = 0; i < n; i++) strn(b, s[i], len ? len[i] : strlen(s[i]));
}
static void kv_nums(wb *b, const char *k, uint32_t ty, const void *v, int n) {   /* 4-byte elements */
    key(b, k, VQ_GGUF_ARRAY); u32(b, ty); u64(b, (uint64_t)n); put(b, v, (size_t)n * 4);
}
static vq_gguf *finish(wb *b, wb *file, vq_err *e) {
    file->n = 0; file->n_kv = 0;
    put(file, "GGUF", 4); u32(file, 3); u64(file, 0); u64(file, (uint64_t)b->n_kv);
    put(file, b->p, b->n);
    static const uint8_t zero[64];
    put(file, zero, 32 - file->n % 32);
    return vq_gguf_open_mem(file->p, file->n, "mem.gguf", e);
}

/* tok512.bin read into plain arrays */
typedef struct l2c { int n; char *s[512]; size_t len[512]; float sc[512]; int32_t ty[512]; } l2c;
static int load_l2c(l2c *v, const char *path) {
    size_t n; vq_err e;
    char *buf = vq_read_file(path, &n, &e);
    if (!buf) return -1;
    size_t at = 4;
    v->n = 512;
    for (int i = 0; i < 512; i++) {
        int32_t L;
        memcpy(&v->sc[i], buf + at, 4); memcpy(&L, buf + at + 4, 4);
        at += 8;
        /* spaces as U+2581, the way GGUF SentencePiece vocabularies spell them */
        v->s[i] = malloc((size_t)L * 3 + 1);
        size_t w = 0;
        for (int k = 0; k < L; k++) {
            if (buf[at + k] == ' ') { memcpy(v->s[i] + w, "\xE2\x96\x81", 3); w += 3; }
            else v->s[i][w++] = buf[at + k];
        }
        v->len[i] = w;
        at += (size_t)L;
        v->ty[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
    }
    free(buf);
    return 0;
}

static void check_llama_vocab(const l2c *v) {
    wb b = { 0 }, f = { 0 }; vq_err e;
    kv_str(&b, "tokenizer.ggml.model", "llama");
    kv_strs(&b, "tokenizer.ggml.tokens", (char **)v->s, v->len, v->n);
    kv_nums(&b, "tokenizer.ggml.scores", VQ_GGUF_FLOAT32, v->sc, v->n);
    kv_nums(&b, "tokenizer.ggml.token_type", VQ_GGUF_INT32, v->ty, v->n);
    kv_u32(&b, "tokenizer.ggml.bos_token_id", 1);
    kv_u32(&b, "tokenizer.ggml.eos_token_id", 2);
    vq_gguf *g = finish(&b, &f, &e);
    CHECKF(g != NULL, "%s", e.msg);
    vq_tokenizer *t = g ? vq_tokenizer_from_gguf(g, &e) : NULL;
    CHECKF(t != NULL, "%s", e.msg);
    if (t) {
        CHECK(vq_tok_add_bos_default(t) == 1 && vq_tok_bos(t) == 1 && vq_tok_is_eog(t, 2));
        static const struct { const char *s; int ids[32]; int n; } ref[] = {   /* run.c on tok512 */
            { "Once upon a time", {1,403,407,261,378}, 5 },
            { "Hello, world!", {1,346,306,414,432,263,304,341,443}, 9 },
            { "  two  spaces\ttab\nnewline",
              {1,410,410,259,424,414,410,262,427,412,331,419,12,413,412,430,13,416,411,424,421,271,411}, 23 },
            { "caf\xc3\xa9 \xe2\x80\x94 na\xc3\xafve \xf0\x9f\x98\x80 \xe6\x97\xa5\xe6\x9c\xac",
              {1,280,412,431,485,410,481,297,412,198,178,360,410,243,162,155,131,410,233,154,168,233,159,175}, 24 },
        };
        for (size_t k = 0; k < VQ_ARRAY_LEN(ref); k++) {
            int ids[64];
            int n = vq_tok_encode(t, ref[k].s, strlen(ref[k].s), 1, 0, ids, 64, &e);
            CHECKF(n == ref[k].n && memcmp(ids, ref[k].ids, (size_t)n * sizeof(int)) == 0, "\"%s\": %d ids",
                   ref[k].s, n);
            char out[128];
            size_t m = vq_tok_decode(t, ids, n, out, sizeof out);
            CHECKF(m == strlen(ref[k].s) && memcmp(out, ref[k].s, m) == 0, "decode \"%s\"", ref[k].s);
        }
        /* after a special token the next run of text gets its dummy prefix again (llama.cpp) */
        int ids[16];
        const char *sp = "Once\n</s>\nupon";
        int n = vq_tok_encode(t, sp, strlen(sp), 1, 1, ids, 16, &e);
        CHECKF(n == 4 && ids[0] == 1 && ids[1] == 403 && ids[2] == 2 && ids[3] == 407, "%d ids", n);
        n = vq_tok_encode(t, sp, strlen(sp), 1, 0, ids, 16, &e);
        CHECK(n > 4);
        for (int i = 1; i < n; i++) CHECK(ids[i] != 2);
        char piece[16];
        CHECK(vq_tok_piece(t, 403, 407, 0, piece, sizeof piece) == 5 && memcmp(piece, " upon", 5) == 0);
        CHECK(vq_tok_piece(t, 1, 403, 0, piece, sizeof piece) == 4 && memcmp(piece, "Once", 4) == 0);
    }
    vq_tokenizer_free(t);
    vq_gguf_close(g);
    free(b.p); free(f.p);
}

/* a tiny byte-level vocabulary: the 256 byte tokens (GPT-2 spelling), merges "1 2", "12 3", "3 4",
 * "4 5"; the pre-tokenizer decides which of them can apply to "x 12345" */
static int bytes_spelling(unsigned b, char *o) {
    uint32_t cp = b <= 0x20 ? 256 + b : (b >= 0x7F && b <= 0xA0) ? 256 + 33 + (b - 0x7F) : b == 0xAD ? 256 + 67 : b;
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63));
    return 2;
}
static vq_tokenizer *tiny_bpe(const char *pre, vq_err *e) {
    char *tok[262]; size_t len[262];
    for (unsigned b = 0; b < 256; b++) { tok[b] = malloc(4); len[b] = (size_t)bytes_spelling(b, tok[b]); }
    const char *extra[] = { "12", "123", "34", "45", "<|eot_id|>", "<|user|>" };
    for (int k = 0; k < 6; k++) { tok[256 + k] = strdup(extra[k]); len[256 + k] = strlen(extra[k]); }
    int32_t ty[262];
    for (int i = 0; i < 262; i++) ty[i] = i == 260 ? 3 : i == 261 ? 4 : 1;
    char *merges[] = { "1 2", "12 3", "3 4", "4 5" };
    wb b = { 0 }, f = { 0 };
    kv_str(&b, "tokenizer.ggml.model", "gpt2");
    if (pre) kv_str(&b, "tokenizer.ggml.pre", pre);   /* NULL: the key is absent */
    kv_strs(&b, "tokenizer.ggml.tokens", tok, len, 262);
    kv_nums(&b, "tokenizer.ggml.token_type", VQ_GGUF_INT32, ty, 262);
    kv_strs(&b, "tokenizer.ggml.merges", merges, NULL, 4);
    kv_u32(&b, "tokenizer.ggml.eos_token_id", 260);
    vq_gguf *g = finish(&b, &f, e);
    vq_tokenizer *t = g ? vq_tokenizer_from_gguf(g, e) : NULL;
    vq_gguf_close(g);
    for (int i = 0; i < 262; i++) free(tok[i]);
    free(b.p); free(f.p);
    return t;
}

static void check_pre_tokenizers(void) {
    const char *text = "x 12345";
    struct { const char *pre; const char *pieces; } expect[] = {
        /* gpt2: " 12345" is one word: 1 2 -> 12, 12 3 -> 123, 4 5 -> 45 */
        { "gpt-2", "x| |123|45" },
        /* llama.cpp's default: GPT-2's words, then digit runs apart from their space, then threes */
        { "default", "x| |123|45" },
        { NULL, "x| |123|45" },
        /* smollm: each digit alone, nothing merges */
        { "smollm", "x| |1|2|3|4|5" },
        /* llama3: " " alone, then digits in threes: "123" "45" */
        { "llama3", "x| |123|45" },
        /* qwen2: single digits */
        { "qwen2", "x| |1|2|3|4|5" },
    };
    for (size_t k = 0; k < VQ_ARRAY_LEN(expect); k++) {
        vq_err e; vq_err_clear(&e);
        vq_tokenizer *t = tiny_bpe(expect[k].pre, &e);
        const char *pn = expect[k].pre ? expect[k].pre : "(absent)";
        CHECKF(t != NULL, "pre %s: %s", pn, e.msg);
        if (!t) continue;
        int ids[32];
        int n = vq_tok_encode(t, text, strlen(text), 0, 0, ids, 32, &e);
        char got[128]; size_t w = 0;
        for (int i = 0; i < n && w < 100; i++) {
            if (i) got[w++] = '|';
            w += vq_tok_piece(t, i ? ids[i - 1] : -1, ids[i], 0, got + w, 20);
        }
        got[w] = 0;
        CHECKF(strcmp(got, expect[k].pieces) == 0, "pre %s: \"%s\" -> %s, want %s", pn, text, got,
               expect[k].pieces);
        /* specials: control only with parse_special, user-defined always; eot is end of generation */
        const char *sp = "a<|eot_id|>b<|user|>";
        n = vq_tok_encode(t, sp, strlen(sp), 0, 1, ids, 32, &e);
        CHECK(n == 4 && ids[1] == 260 && ids[3] == 261);
        n = vq_tok_encode(t, sp, strlen(sp), 0, 0, ids, 32, &e);
        CHECK(n > 4 && ids[n - 1] == 261);
        CHECK(vq_tok_is_eog(t, 260) && vq_tok_bos(t) == -1 && vq_tok_add_bos_default(t) == 0);
        vq_tokenizer_free(t);
    }
    /* an unknown pre-tokenizer is refused, naming it and the known ones (no silent GPT-2 regex) */
    const char *unknown[] = { "no-such-pre", "gpt2", "deepseek-llm" };
    for (size_t k = 0; k < VQ_ARRAY_LEN(unknown); k++) {
        vq_err e; vq_err_clear(&e);
        vq_tokenizer *t = tiny_bpe(unknown[k], &e);
        char want[80];
        snprintf(want, sizeof want, "tokenizer.ggml.pre = '%s'", unknown[k]);
        CHECKF(t == NULL && e.code == VQ_ERR_UNSUPPORTED && strstr(e.msg, want) && strstr(e.msg, "known: default,") &&
               strstr(e.msg, "qwen2") && strstr(e.msg, "llama-bpe"), "pre %s: %s", unknown[k], e.msg);
        if (k == 0) printf("unknown pre-tokenizer: %s\n", e.msg);
        vq_tokenizer_free(t);
    }
}

static void expect_fail(wb *b, vq_status code, const char *needle) {
    wb f = { 0 }; vq_err e; vq_err_clear(&e);
    vq_gguf *g = finish(b, &f, &e);
    CHECKF(g != NULL, "%s", e.msg);
    vq_tokenizer *t = g ? vq_tokenizer_from_gguf(g, &e) : NULL;
    CHECKF(t == NULL && e.code == code && strstr(e.msg, needle), "want failure %d naming '%s', got %d: %s",
           (int)code, needle, (int)e.code, e.msg);
    vq_tokenizer_free(t);
    vq_gguf_close(g);
    free(b->p); free(f.p);
    memset(b, 0, sizeof *b);
}

static void check_bad_metadata(void) {
    char *toks[3] = { "a", "b", "ab" };
    float sc[3] = { 0, 0, 1 };
    int32_t ty[3] = { 1, 1, 1 };
    char *merges_bad[1] = { "ab" };
    wb b = { 0 };
    expect_fail(&b, VQ_ERR_FORMAT, "tokenizer.ggml.model");                       /* nothing at all */
    kv_str(&b, "tokenizer.ggml.model", "bert"); kv_strs(&b, "tokenizer.ggml.tokens", toks, NULL, 3);
    expect_fail(&b, VQ_ERR_UNSUPPORTED, "bert");
    kv_str(&b, "tokenizer.ggml.model", "llama");
    expect_fail(&b, VQ_ERR_FORMAT, "tokenizer.ggml.tokens");
    kv_str(&b, "tokenizer.ggml.model", "llama"); kv_nums(&b, "tokenizer.ggml.tokens", VQ_GGUF_INT32, ty, 3);
    expect_fail(&b, VQ_ERR_FORMAT, "tokenizer.ggml.tokens");
    kv_str(&b, "tokenizer.ggml.model", "llama"); kv_strs(&b, "tokenizer.ggml.tokens", toks, NULL, 3);
    kv_nums(&b, "tokenizer.ggml.scores", VQ_GGUF_FLOAT32, sc, 2);
    expect_fail(&b, VQ_ERR_FORMAT, "tokenizer.ggml.scores");
    kv_str(&b, "tokenizer.ggml.model", "llama"); kv_strs(&b, "tokenizer.ggml.tokens", toks, NULL, 3);
    kv_nums(&b, "tokenizer.ggml.token_type", VQ_GGUF_FLOAT32, sc, 3);
    expect_fail(&b, VQ_ERR_FORMAT, "tokenizer.ggml.token_type");
    kv_str(&b, "tokenizer.ggml.model", "llama"); kv_strs(&b, "tokenizer.ggml.tokens", toks, NULL, 3);
    kv_u32(&b, "tokenizer.ggml.bos_token_id", 3);
    expect_fail(&b, VQ_ERR_FORMAT, "bos_token_id");
    kv_str(&b, "tokenizer.ggml.model", "llama"); kv_strs(&b, "tokenizer.ggml.tokens", toks, NULL, 3);
    kv_str(&b, "tokenizer.ggml.add_bos_token", "yes");
    expect_fail(&b, VQ_ERR_FORMAT, "add_bos_token");
    kv_str(&b, "tokenizer.ggml.model", "gpt2"); kv_strs(&b, "tokenizer.ggml.tokens", toks, NULL, 3);
    expect_fail(&b, VQ_ERR_FORMAT, "merges");
    kv_str(&b, "tokenizer.ggml.model", "gpt2"); kv_strs(&b, "tokenizer.ggml.tokens", toks, NULL, 3);
    kv_strs(&b, "tokenizer.ggml.merges", merges_bad, NULL, 1);
    expect_fail(&b, VQ_ERR_FORMAT, "merges[0]");
    /* a minimal valid one still loads: no scores, no types, no ids */
    wb f = { 0 }; vq_err e;
    kv_str(&b, "tokenizer.ggml.model", "llama"); kv_strs(&b, "tokenizer.ggml.tokens", toks, NULL, 3);
    kv_bool(&b, "tokenizer.ggml.add_space_prefix", 0);
    vq_gguf *g = finish(&b, &f, &e);
    vq_tokenizer *t = g ? vq_tokenizer_from_gguf(g, &e) : NULL;
    CHECKF(t != NULL, "%s", e.msg);
    int ids[8];
    CHECK(t && vq_tok_encode(t, "ab\xff", 3, 0, 0, ids, 8, &e) >= 1);   /* no byte tokens: unk */
    vq_tokenizer_free(t);
    vq_gguf_close(g);
    free(b.p); free(f.p);
}

int main(void) {
    char path[512];
    vq_t_shared("data/tok512.bin", path, sizeof path);
    l2c v;
    CHECK(load_l2c(&v, path) == 0);
    check_llama_vocab(&v);
    for (int i = 0; i < v.n; i++) free(v.s[i]);
    check_pre_tokenizers();
    check_bad_metadata();
    return vq_t_done();
}
