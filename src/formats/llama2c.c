/* llama2c.c: llama2.c checkpoints (legacy v0) mapped read-only, weight pointers into the mapping
 * in run.c's order, and llama2.c tokenizer files copied into a small vocabulary.
 * The header is validated and the exact file size implied by it is checked before any pointer is formed. */
#define _GNU_SOURCE
#include "formats/llama2c.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* sane upper bounds: far above any llama2.c model, low enough that no size product overflows */
#define L2C_MAX_DIM (1 << 16)
#define L2C_MAX_HIDDEN (1 << 20)
#define L2C_MAX_LAYERS 1024
#define L2C_MAX_HEADS 1024
#define L2C_MAX_VOCAB (1 << 22)
#define L2C_MAX_SEQ (1 << 22)
#define L2C_HEADER_BYTES 28

struct vq_l2c {
    vq_l2c_config cfg;
    vq_l2c_weights w;
    void *map;
    size_t size;
};

static vq_status check_field(const char *path, const char *field, int v, int max, vq_err *err) {
    if (v >= 1 && v <= max) return VQ_OK;
    return vq_err_set(err, VQ_ERR_FORMAT, "%s: header field %s = %d (must be 1..%d)", path, field, v, max);
}

static vq_status check_config(const char *path, vq_l2c_config *c, vq_err *err) {
    vq_status s;
    if ((s = check_field(path, "dim", c->dim, L2C_MAX_DIM, err)) ||
        (s = check_field(path, "hidden_dim", c->hidden_dim, L2C_MAX_HIDDEN, err)) ||
        (s = check_field(path, "n_layers", c->n_layers, L2C_MAX_LAYERS, err)) ||
        (s = check_field(path, "n_heads", c->n_heads, L2C_MAX_HEADS, err)) ||
        (s = check_field(path, "n_kv_heads", c->n_kv_heads, c->n_heads, err)) ||
        (s = check_field(path, "|vocab_size|", c->vocab_size, L2C_MAX_VOCAB, err)) ||
        (s = check_field(path, "seq_len", c->seq_len, L2C_MAX_SEQ, err)))
        return s;
    if (c->dim % c->n_heads)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: dim %d is not a multiple of n_heads %d", path, c->dim, c->n_heads);
    if (c->n_heads % c->n_kv_heads)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: n_heads %d is not a multiple of n_kv_heads %d", path,
                          c->n_heads, c->n_kv_heads);
    if ((c->dim / c->n_heads) % 2)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: head size %d is odd (RoPE rotates pairs)", path,
                          c->dim / c->n_heads);
    return VQ_OK;
}

/* lay the weights out over the mapping; returns the number of floats the file must hold */
static uint64_t layout(const vq_l2c_config *c, const float *base, vq_l2c_weights *w) {
    uint64_t dim = (uint64_t)c->dim, hid = (uint64_t)c->hidden_dim, L = (uint64_t)c->n_layers;
    uint64_t hs = dim / (uint64_t)c->n_heads, kv_dim = hs * (uint64_t)c->n_kv_heads;
    uint64_t vocab = (uint64_t)c->vocab_size, o = 0;
#define TAKE(field, count) do { if (w) w->field = base + o; o += (count); } while (0)
    TAKE(token_embedding, vocab * dim);
    TAKE(rms_att, L * dim);
    TAKE(wq, L * dim * dim);
    TAKE(wk, L * dim * kv_dim);
    TAKE(wv, L * dim * kv_dim);
    TAKE(wo, L * dim * dim);
    TAKE(rms_ffn, L * dim);
    TAKE(w1, L * dim * hid);
    TAKE(w2, L * hid * dim);
    TAKE(w3, L * dim * hid);
    TAKE(rms_final, dim);
    o += (uint64_t)c->seq_len * hs;   /* freq_cis_real and freq_cis_imag: seq_len * hs/2 each, unused */
    if (c->shared_classifier) { if (w) w->wcls = w->token_embedding; }
    else TAKE(wcls, vocab * dim);
#undef TAKE
    return o;
}

vq_l2c *vq_l2c_open(const char *path, vq_err *err) {
    vq_err_clear(err);
    uint64_t size;
    int fd = vq_open_regular(path, &size, err);   /* never blocks on a FIFO; refuses directories */
    if (fd < 0) return NULL;
    int32_t h[7];
    if (size < L2C_HEADER_BYTES) {
        close(fd);
        vq_err_set(err, VQ_ERR_FORMAT, "%s: file of %llu bytes is shorter than the 28-byte header", path,
                   (unsigned long long)size);
        return NULL;
    }
    if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
        vq_err_set(err, VQ_ERR_IO, "%s: cannot read the header: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    vq_l2c_config c = {h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[5] > 0};
    if (h[5] == INT32_MIN) c.vocab_size = 0;   /* -INT32_MIN overflows; 0 is then refused */
    else if (h[5] < 0) c.vocab_size = -h[5];
    if (check_config(path, &c, err)) { close(fd); return NULL; }
    uint64_t want = L2C_HEADER_BYTES + 4 * layout(&c, NULL, NULL);
    if (size != want) {
        close(fd);
        vq_err_set(err, VQ_ERR_FORMAT,
                   "%s: file has %llu bytes, but the header (dim %d, hidden %d, layers %d, heads %d/%d, vocab %d%s, seq %d) implies %llu",
                   path, (unsigned long long)size, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                   c.vocab_size, c.shared_classifier ? "" : " unshared", c.seq_len, (unsigned long long)want);
        return NULL;
    }
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) { vq_err_set(err, VQ_ERR_IO, "%s: mmap failed: %s", path, strerror(e)); return NULL; }
    vq_l2c *l = calloc(1, sizeof *l);
    if (!l) {
        munmap(m, (size_t)size);
        vq_err_set(err, VQ_ERR_NOMEM, "%s: out of memory", path);
        return NULL;
    }
    l->cfg = c;
    l->map = m;
    l->size = (size_t)size;
    layout(&c, (const float *)((const char *)m + L2C_HEADER_BYTES), &l->w);
    return l;
}

void vq_l2c_close(vq_l2c *m) {
    if (!m) return;
    munmap(m->map, m->size);
    free(m);
}

const vq_l2c_config *vq_l2c_config_of(const vq_l2c *m) { return &m->cfg; }
const vq_l2c_weights *vq_l2c_weights_of(const vq_l2c *m) { return &m->w; }

/* ---- tokenizer ---- */
void vq_l2c_vocab_free(vq_l2c_vocab *v) {
    if (!v) return;
    if (v->pieces)
        for (int i = 0; i < v->n; i++) free(v->pieces[i]);
    free(v->pieces);
    free(v->lens);
    free(v->scores);
    free(v);
}

static int32_t rd_i32(const unsigned char *p) {
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t v;
    memcpy(&v, &u, 4);
    return v;
}

vq_l2c_vocab *vq_l2c_vocab_from_mem(const void *data, size_t len, const char *path, int vocab_size, vq_err *err) {
    vq_err_clear(err);
    const unsigned char *buf = data;
    if (!path) path = "<memory>";
    if (!buf) len = 0;
    vq_l2c_vocab *v = NULL;
    if (vocab_size > L2C_MAX_VOCAB) {
        vq_err_set(err, VQ_ERR_ARG, "%s: vocab_size %d is above the limit %d", path, vocab_size, L2C_MAX_VOCAB);
        goto bad;
    }
    if (len < 4) {
        vq_err_set(err, VQ_ERR_FORMAT, "%s: file of %zu bytes is too short for max_token_length", path, len);
        goto bad;
    }
    int32_t maxlen = rd_i32(buf);
    if (maxlen < 1 || maxlen > 65536) {
        vq_err_set(err, VQ_ERR_FORMAT, "%s: max_token_length = %d (must be 1..65536)", path, maxlen);
        goto bad;
    }
    /* count the tokens first (each takes at least 8 bytes), so nothing is allocated from a bad count */
    size_t pos = 4;
    int n = 0;
    while (pos < len && (vocab_size <= 0 || n < vocab_size)) {
        if (len - pos < 8) {
            vq_err_set(err, VQ_ERR_FORMAT, "%s: token %d: truncated: score and length need 8 bytes at offset %zu, %zu left",
                       path, n, pos, len - pos);
            goto bad;
        }
        float score;
        memcpy(&score, buf + pos, 4);
        int32_t tl = rd_i32(buf + pos + 4);
        if (!isfinite(score)) {
            vq_err_set(err, VQ_ERR_FORMAT, "%s: token %d: score is not finite (offset %zu)", path, n, pos);
            goto bad;
        }
        if (tl < 0 || tl > maxlen) {
            vq_err_set(err, VQ_ERR_FORMAT, "%s: token %d: length %d at offset %zu (must be 0..max_token_length %d)",
                       path, n, tl, pos + 4, maxlen);
            goto bad;
        }
        if ((size_t)tl > len - pos - 8) {
            vq_err_set(err, VQ_ERR_FORMAT, "%s: token %d: truncated: %d bytes at offset %zu, %zu left", path, n, tl,
                       pos + 8, len - pos - 8);
            goto bad;
        }
        pos += 8 + (size_t)tl;
        n++;
    }
    if (vocab_size > 0 && n < vocab_size) {
        vq_err_set(err, VQ_ERR_FORMAT, "%s: holds %d tokens, expected vocab_size %d", path, n, vocab_size);
        goto bad;
    }
    if (pos != len) {
        vq_err_set(err, VQ_ERR_FORMAT, "%s: %zu trailing bytes after %d tokens (wrong vocab_size?)", path, len - pos, n);
        goto bad;
    }
    if (n == 0) {
        vq_err_set(err, VQ_ERR_FORMAT, "%s: holds no tokens", path);
        goto bad;
    }
    v = calloc(1, sizeof *v);
    if (!v || !(v->pieces = calloc((size_t)n, sizeof *v->pieces)) || !(v->lens = calloc((size_t)n, sizeof *v->lens)) ||
        !(v->scores = calloc((size_t)n, sizeof *v->scores))) {
        vq_err_set(err, VQ_ERR_NOMEM, "%s: out of memory for %d tokens", path, n);
        goto bad;
    }
    v->n = n;
    v->max_token_length = maxlen;
    pos = 4;
    for (int i = 0; i < n; i++) {
        memcpy(&v->scores[i], buf + pos, 4);
        v->lens[i] = rd_i32(buf + pos + 4);
        v->pieces[i] = malloc((size_t)v->lens[i] + 1);
        if (!v->pieces[i]) {
            vq_err_set(err, VQ_ERR_NOMEM, "%s: out of memory", path);
            goto bad;
        }
        memcpy(v->pieces[i], buf + pos + 8, (size_t)v->lens[i]);
        v->pieces[i][v->lens[i]] = 0;
        pos += 8 + (size_t)v->lens[i];
    }
    return v;
bad:
    vq_l2c_vocab_free(v);
    return NULL;
}

vq_l2c_vocab *vq_l2c_vocab_load(const char *path, int vocab_size, vq_err *err) {
    vq_err_clear(err);
    size_t len;
    char *buf = vq_read_file(path, &len, err);
    if (!buf) return NULL;
    vq_l2c_vocab *v = vq_l2c_vocab_from_mem(buf, len, path, vocab_size, err);
    free(buf);
    return v;
}
