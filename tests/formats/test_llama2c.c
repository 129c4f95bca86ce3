/* test_llama2c.c: the llama2.c checkpoint and tokenizer readers on stories260K.bin / tok512.bin
 * (offsets checked against the file read independently), then truncated and corrupted copies
 * written to temp files: every one must fail with VQ_ERR_FORMAT and name the file. */
#include "formats/llama2c.h"
#include "../vq_test.h"

#include <stdint.h>

static char tmp_path[64];

/* write n bytes to a fresh temp file; returns its path (valid until the next call) */
static const char *write_tmp(const void *p, size_t n) {
    if (tmp_path[0]) unlink(tmp_path);
    snprintf(tmp_path, sizeof tmp_path, "/tmp/vq_test_l2c_XXXXXX");
    int fd = mkstemp(tmp_path);
    if (fd < 0 || write(fd, p, n) != (ssize_t)n) { perror("temp file"); exit(1); }
    close(fd);
    return tmp_path;
}

static unsigned char *slurp(const char *path, size_t *n) {
    vq_err e;
    char *b = vq_read_file(path, n, &e);
    if (!b) { fprintf(stderr, "%s\n", e.msg); exit(1); }
    return (unsigned char *)b;
}

static void set_i32(unsigned char *p, int field, int32_t v) { memcpy(p + 4 * field, &v, 4); }

/* open must fail with code and a message that starts with the path and contains needle */
static void expect_open_fail(const void *p, size_t n, vq_status code, const char *needle, int line) {
    const char *path = write_tmp(p, n);
    vq_err e;
    vq_l2c *m = vq_l2c_open(path, &e);
    CHECKF(!m && e.code == code && strncmp(e.msg, path, strlen(path)) == 0 && strstr(e.msg, needle),
           "line %d: got %s, want code %d and '%s'", line, m ? "(opened)" : e.msg, (int)code, needle);
    vq_l2c_close(m);
}
#define OPEN_FAIL(p, n, code, needle) expect_open_fail((p), (n), (code), (needle), __LINE__)

static void check_checkpoint(const char *path) {
    size_t n;
    unsigned char *raw = slurp(path, &n);
    vq_err e;
    vq_l2c *m = vq_l2c_open(path, &e);
    CHECKF(m != NULL, "%s", e.msg);
    if (!m) { free(raw); return; }
    const vq_l2c_config *c = vq_l2c_config_of(m);
    CHECK(c->dim == 64 && c->hidden_dim == 172 && c->n_layers == 5 && c->n_heads == 8 && c->n_kv_heads == 4 &&
          c->vocab_size == 512 && c->seq_len == 512 && c->shared_classifier == 1);
    const vq_l2c_weights *w = vq_l2c_weights_of(m);
    /* offsets (in floats from the start of the weights) follow run.c's order */
    const float *b = w->token_embedding;
    uint64_t D = 64, H = 172, L = 5, KV = 32, V = 512;
    CHECK(w->rms_att - b == (ptrdiff_t)(V * D));
    CHECK(w->wq - w->rms_att == (ptrdiff_t)(L * D));
    CHECK(w->wk - w->wq == (ptrdiff_t)(L * D * D));
    CHECK(w->wv - w->wk == (ptrdiff_t)(L * D * KV));
    CHECK(w->wo - w->wv == (ptrdiff_t)(L * D * KV));
    CHECK(w->rms_ffn - w->wo == (ptrdiff_t)(L * D * D));
    CHECK(w->w1 - w->rms_ffn == (ptrdiff_t)(L * D));
    CHECK(w->w2 - w->w1 == (ptrdiff_t)(L * D * H));
    CHECK(w->w3 - w->w2 == (ptrdiff_t)(L * D * H));
    CHECK(w->rms_final - w->w3 == (ptrdiff_t)(L * D * H));
    CHECK(w->wcls == w->token_embedding);
    /* the freq_cis tables (seq_len * head_size/2 floats, twice) end the file */
    CHECK((size_t)(w->rms_final - b) + D + 512 * 4 * 2 == (n - 28) / 4);
    /* values equal the bytes read independently */
    CHECK(memcmp(w->token_embedding, raw + 28, 64 * 4) == 0);
    CHECK(memcmp(w->rms_final, raw + 28 + 4 * (size_t)(w->rms_final - b), D * 4) == 0);
    CHECK(memcmp(w->w2 + 123, raw + 28 + 4 * (size_t)(w->w2 + 123 - b), 4) == 0);
    int pos = 0;
    for (int i = 0; i < 64; i++) pos += w->rms_final[i] > 0;
    CHECK(pos > 48);   /* a trained RMSNorm gain is mostly positive: we point at the right floats */
    vq_l2c_close(m);

    /* truncated and extended copies */
    const size_t cuts[] = {0, 3, 27, 28, 29, 100, 28 + 512 * 64 * 4, n / 2, n - 4, n - 1};
    for (size_t i = 0; i < VQ_ARRAY_LEN(cuts); i++) {
        const char *needle = cuts[i] < 28 ? "shorter than the 28-byte header" : "implies 1056540";
        OPEN_FAIL(raw, cuts[i], VQ_ERR_FORMAT, needle);
    }
    unsigned char *big = calloc(1, n + 8);
    memcpy(big, raw, n);
    OPEN_FAIL(big, n + 4, VQ_ERR_FORMAT, "file has 1056544 bytes");

    /* header fields */
    unsigned char *h = malloc(n);
    struct { int field; int32_t v; const char *needle; } bad[] = {
        {0, 0, "dim = 0"}, {0, -64, "dim = -64"}, {0, 1 << 20, "dim = 1048576"},
        {1, 0, "hidden_dim = 0"}, {2, -1, "n_layers = -1"}, {2, 100000, "n_layers = 100000"},
        {3, 0, "n_heads = 0"}, {3, 7, "dim 64 is not a multiple of n_heads 7"},
        {3, 64, "head size 1 is odd"}, {4, 16, "n_kv_heads = 16 (must be 1..8)"}, {4, 3, "n_heads 8 is not a multiple of n_kv_heads 3"},
        {4, 0, "n_kv_heads = 0"}, {5, 0, "|vocab_size| = 0"}, {5, INT32_MIN, "|vocab_size| = 0"},
        {5, 1 << 30, "|vocab_size| = 1073741824"}, {6, 0, "seq_len = 0"}, {6, INT32_MAX, "seq_len = 2147483647"},
        {5, 513, "implies"}, {6, 511, "implies"}, {5, -512, "vocab 512 unshared"},
    };
    for (size_t i = 0; i < VQ_ARRAY_LEN(bad); i++) {
        memcpy(h, raw, n);
        set_i32(h, bad[i].field, bad[i].v);
        OPEN_FAIL(h, n, VQ_ERR_FORMAT, bad[i].needle);
    }
    /* an unshared classifier: negative vocab_size and vocab x dim more floats after freq_cis */
    size_t nu = n + V * D * 4;
    unsigned char *u = malloc(nu);
    memcpy(u, raw, n);
    for (size_t i = 0; i < V * D; i++) { float f = (float)i * 0.25f; memcpy(u + n + 4 * i, &f, 4); }
    set_i32(u, 5, -512);
    const char *up = write_tmp(u, nu);
    m = vq_l2c_open(up, &e);
    CHECKF(m != NULL, "%s", e.msg);
    if (m) {
        c = vq_l2c_config_of(m);
        w = vq_l2c_weights_of(m);
        CHECK(c->vocab_size == 512 && c->shared_classifier == 0);
        CHECK(w->wcls != w->token_embedding && w->wcls - w->token_embedding == (ptrdiff_t)((n - 28) / 4));
        CHECK(w->wcls[0] == 0.0f && w->wcls[5] == 1.25f && w->wcls[V * D - 1] == (float)(V * D - 1) * 0.25f);
        vq_l2c_close(m);
    }
    CHECK(!vq_l2c_open("/nonexistent/x.bin", &e) && e.code == VQ_ERR_IO && strstr(e.msg, "/nonexistent/x.bin"));
    CHECK(!vq_l2c_open("/tmp", &e) && e.code == VQ_ERR_IO);
    free(u); free(h); free(big); free(raw);
}

static void vocab_fail(const void *p, size_t n, int vocab, const char *needle, int line) {
    const char *path = write_tmp(p, n);
    vq_err e;
    vq_l2c_vocab *v = vq_l2c_vocab_load(path, vocab, &e);
    CHECKF(!v && e.code == VQ_ERR_FORMAT && strncmp(e.msg, path, strlen(path)) == 0 && (!needle || strstr(e.msg, needle)),
           "line %d: got %s, want '%s'", line, v ? "(loaded)" : e.msg, needle ? needle : "");
    vq_l2c_vocab_free(v);
}
#define VOCAB_FAIL(p, n, vocab, needle) vocab_fail((p), (n), (vocab), (needle), __LINE__)

static void check_vocab(const char *path) {
    vq_err e;
    vq_l2c_vocab *v = vq_l2c_vocab_load(path, 512, &e);
    CHECKF(v != NULL, "%s", e.msg);
    if (!v) return;
    CHECK(v->n == 512 && v->max_token_length == 7);
    CHECK(strcmp(v->pieces[0], "<unk>") == 0 && v->lens[0] == 5);
    CHECK(strcmp(v->pieces[1], "\n<s>\n") == 0 && strcmp(v->pieces[2], "\n</s>\n") == 0);
    CHECK(strcmp(v->pieces[3 + 0x41], "<0x41>") == 0);   /* byte tokens: id = byte + 3 */
    CHECK(strcmp(v->pieces[259], " t") == 0);
    int ok = 1;
    for (int i = 0; i < v->n; i++) ok &= v->lens[i] >= 0 && v->lens[i] <= 7 && (int)strlen(v->pieces[i]) == v->lens[i] && isfinite(v->scores[i]);
    CHECK(ok);
    CHECK(v->scores[300] < 0 && v->scores[300] >= v->scores[400]);   /* merges: earlier = higher score */
    vq_l2c_vocab_free(v);
    v = vq_l2c_vocab_load(path, 0, &e);   /* 0: all tokens in the file */
    CHECK(v && v->n == 512);
    vq_l2c_vocab_free(v);

    size_t n;
    unsigned char *raw = slurp(path, &n);
    VOCAB_FAIL(raw, n, 511, "trailing bytes after 511 tokens");
    VOCAB_FAIL(raw, n, 513, "holds 512 tokens, expected vocab_size 513");
    /* every truncation */
    int bad = 0;
    for (size_t k = 0; k < n; k++) {
        const char *tp = write_tmp(raw, k);
        v = vq_l2c_vocab_load(tp, 512, &e);
        if (v || e.code != VQ_ERR_FORMAT || strncmp(e.msg, tp, strlen(tp)) != 0) {
            if (bad++ < 5) fprintf(stderr, "tok512 truncated to %zu: %s\n", k, v ? "loaded" : e.msg);
        }
        vq_l2c_vocab_free(v);
    }
    CHECKF(bad == 0, "%d of %zu truncations did not fail cleanly", bad, n);
    /* the buffer entry point gives the same vocabulary and names its buffer */
    v = vq_l2c_vocab_from_mem(raw, n, "tok.mem", 512, &e);
    CHECK(v && v->n == 512 && strcmp(v->pieces[259], " t") == 0);
    vq_l2c_vocab_free(v);
    v = vq_l2c_vocab_from_mem(raw, n - 1, "tok.mem", 512, &e);
    CHECK(!v && e.code == VQ_ERR_FORMAT && strncmp(e.msg, "tok.mem: token 511: truncated", 29) == 0);
    v = vq_l2c_vocab_from_mem(NULL, 0, NULL, 512, &e);
    CHECK(!v && e.code == VQ_ERR_FORMAT && strncmp(e.msg, "<memory>: ", 10) == 0);
    v = vq_l2c_vocab_from_mem(raw, n, "tok.mem", (1 << 22) + 1, &e);
    CHECK(!v && e.code == VQ_ERR_ARG && strstr(e.msg, "above the limit"));
    v = vq_l2c_vocab_from_mem(raw, 4, "tok.mem", 0, &e);
    CHECK(!v && e.code == VQ_ERR_FORMAT && strstr(e.msg, "holds no tokens"));
    unsigned char *c = malloc(n);
    memcpy(c, raw, n); set_i32(c, 0, 0); VOCAB_FAIL(c, n, 512, "max_token_length = 0");
    memcpy(c, raw, n); set_i32(c, 0, -7); VOCAB_FAIL(c, n, 512, "max_token_length = -7");
    memcpy(c, raw, n); set_i32(c, 2, -1); VOCAB_FAIL(c, n, 512, "token 0: length -1");
    memcpy(c, raw, n); set_i32(c, 2, 8); VOCAB_FAIL(c, n, 512, "token 0: length 8");
    memcpy(c, raw, n); set_i32(c, 2, 7); VOCAB_FAIL(c, n, 512, NULL);   /* misaligned from then on */
    float nan_ = NAN;
    memcpy(c, raw, n); memcpy(c + 4, &nan_, 4); VOCAB_FAIL(c, n, 512, "token 0: score is not finite");
    free(c);
    free(raw);
}

int main(void) {
    char b1[1024], b2[1024];
    const char *ckpt = vq_t_shared("data/stories260K.bin", b1, sizeof b1);
    const char *tok = vq_t_shared("data/tok512.bin", b2, sizeof b2);
    check_checkpoint(ckpt);
    check_vocab(tok);
    if (tmp_path[0]) unlink(tmp_path);
    return vq_t_done();
}
