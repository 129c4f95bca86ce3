/* state.c: a session's state on disk (vq_session_save / vq_session_load; docs/state-format.md).
 * The file is a header (magic, version, flags, a fingerprint of the model, the session's n_ctx,
 * kv seed, position, token count, kv spec, and the header's own CRC-32), then the tokens held, the
 * last logits and the kv stream (kv/kv_state.c), then a CRC-32 over everything before it.
 * The header has its own checksum so that its counts can be trusted before the body is read: a
 * file is refused for another model, spec or seed, or for too many tokens, without reading it all,
 * and the body's size is known (and bounded by what this session can hold) before it is allocated.
 * Saving is atomic (temp file in the same folder, fsync, rename, fsync of the folder); loading
 * reads into temporaries and changes the session only once everything has been checked, so a
 * failed load leaves the session exactly as it was. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "backend/ops.h"
#include "codec/codec.h"
#include "session/session_impl.h"
#include "kernels/kernels.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "state.c writes little-endian fields from memory (x86-64)"
#endif

#define ST_MAGIC "VQSTATE\x1a"
#define ST_VERSION 1u
#define ST_FLAG_LOGITS 1u          /* the last logits follow the tokens */
#define ST_FIXED 128               /* header bytes before the spec text */
#define ST_EMBD_HASH_BYTES 65536   /* leading bytes of the token embedding in the fingerprint */

/* The fixed part of the header, as it lies in the file (little-endian, no padding). */
typedef struct __attribute__((packed)) st_head {
    char magic[8];
    uint32_t version, flags;
    /* the model */
    char arch[32];
    uint32_t n_layers, n_heads, n_kv_heads, head_dim, dim, hidden_dim, n_vocab;
    uint32_t embd_type, embd_crc;
    uint64_t file_bytes;
    /* the session */
    uint32_t n_ctx;
    uint64_t kv_seed;
    uint32_t pos, n_tok;
    uint64_t kv_bytes;
    uint32_t spec_len;
    uint8_t reserved[4];           /* zero */
} st_head;
_Static_assert(sizeof(st_head) == ST_FIXED, "the state header's fixed part is 128 bytes");
_Static_assert(offsetof(st_head, n_layers) == 48 && offsetof(st_head, file_bytes) == 84 &&
               offsetof(st_head, kv_seed) == 96 && offsetof(st_head, kv_bytes) == 112 &&
               offsetof(st_head, spec_len) == 120, "field offsets as docs/state-format.md has them");


/* The cache the stream is written from and read into: the session's, or with a device store its
 * shadow (session_impl.h), which holds the store's rows only while a save or load runs, moved
 * through kv.h's plain rows (the same bytes: the state format keeps one writer and one reader). */
static vq_kv *state_kv(const vq_session *s) { return s->kv ? s->kv : s->shadow; }

/* plain rows of layer l, buffers for n_coded + n_win rows (f: free them) */
static vq_status plain_alloc(const vq_session *s, int l, int n_coded, int n_win, vq_kv_plain *p, vq_err *err) {
    const vq_kv_dims D = vq_model_kv_dims(s->m, s->n_ctx);
    const vq_codec_state *k = vq_kv_codec_state(s->shadow, l, 0), *v = vq_kv_codec_state(s->shadow, l, 1);
    memset(p, 0, sizeof *p);
    p->n_coded = n_coded;
    p->n_win = n_win;
    p->k_head = (size_t)(n_coded / k->rows_per_block) * k->block_bytes;
    p->v_head = (size_t)(n_coded / v->rows_per_block) * v->block_bytes;
    const size_t wb = (size_t)n_win * D.n_kv_heads * D.head_dim;
    p->k = malloc(p->k_head * D.n_kv_heads + 1);
    p->v = malloc(p->v_head * D.n_kv_heads + 1);
    p->win_k = malloc(2 * wb + 2);
    p->win_v = malloc(2 * wb + 2);
    if (!p->k || !p->v || !p->win_k || !p->win_v)
        return vq_err_set(err, VQ_ERR_NOMEM, "session state: out of memory for layer %d's rows", l);
    return VQ_OK;
}
static void plain_free(vq_kv_plain *p) { free(p->k); free(p->v); free(p->win_k); free(p->win_v); }
static void to_store(const vq_kv_plain *p, vq_store_rows *r) {
    r->n_coded = p->n_coded; r->n_win = p->n_win; r->k = p->k; r->v = p->v; r->k_head = p->k_head;
    r->v_head = p->v_head; r->win_k = p->win_k; r->win_v = p->win_v;
}

/* device store -> the (empty) shadow */
static vq_status shadow_from_store(const vq_session *s, vq_err *err) {
    const vq_device *d = s->m->dev;
    vq_kv_clear(s->shadow);
    vq_status st = VQ_OK;
    for (int l = 0; !st && l < s->m->cfg.n_layers; l++) {
        int nw, nc = d->store_rows(s->store, l, &nw);
        vq_kv_plain p;
        vq_store_rows r;
        st = plain_alloc(s, l, nc, nw, &p, err);
        to_store(&p, &r);
        if (!st) st = d->store_get(s->store, l, &r, err);
        if (!st) st = vq_kv_plain_put(s->shadow, l, &p, err);
        plain_free(&p);
    }
    if (st) vq_kv_clear(s->shadow);
    return st;
}

/* the shadow (just read) -> the device store, emptied first; the shadow emptied after */
static vq_status store_from_shadow(vq_session *s, vq_err *err) {
    const vq_device *d = s->m->dev;
    d->store_truncate(s->store, 0);
    vq_status st = VQ_OK;
    for (int l = 0; !st && l < s->m->cfg.n_layers; l++) {
        int nw, nc = vq_kv_plain_rows(s->shadow, l, &nw);
        if (nc < 0) { st = vq_err_set(err, VQ_ERR_FORMAT, "layer %d's rows are not positions 0.. in order", l); break; }
        vq_kv_plain p;
        vq_store_rows r;
        st = plain_alloc(s, l, nc, nw, &p, err);
        if (!st) st = vq_kv_plain_get(s->shadow, l, &p, err);
        to_store(&p, &r);
        if (!st) st = d->store_put(s->store, l, &r, err);
        plain_free(&p);
    }
    vq_kv_clear(s->shadow);
    if (st) d->store_truncate(s->store, 0);
    return st;
}

static uint32_t crc(uint32_t c, const void *p, size_t n) {
    /* zlib's crc32 takes a uInt length: feed large buffers in pieces */
    const uint8_t *b = p;
    while (n) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = (uint32_t)crc32(c, b, k);
        b += k;
        n -= k;
    }
    return c;
}

/* A cheap but discriminating fingerprint: shapes, file size, and a CRC of the embedding's start. */
static void fingerprint(const vq_model *m, st_head *h) {
    const vq_model_config *c = &m->cfg;
    memcpy(h->arch, c->arch, sizeof h->arch);
    h->arch[sizeof h->arch - 1] = 0;
    h->n_layers = (uint32_t)c->n_layers;
    h->n_heads = (uint32_t)c->n_heads;
    h->n_kv_heads = (uint32_t)c->n_kv_heads;
    h->head_dim = (uint32_t)c->head_dim;
    h->dim = (uint32_t)c->dim;
    h->hidden_dim = (uint32_t)c->hidden_dim;
    h->n_vocab = (uint32_t)c->vocab_size;
    h->file_bytes = m->file_bytes;
    h->embd_type = m->tok_embd.type;
    size_t eb = vq_wtype_row_bytes(m->tok_embd.type, m->tok_embd.cols) * (size_t)m->tok_embd.rows;
    eb = VQ_MIN(eb, (size_t)ST_EMBD_HASH_BYTES);
    h->embd_crc = m->tok_embd.data && eb ? crc(0, m->tok_embd.data, eb) : 0;
}

/* ---- save ---- */
typedef struct out {
    FILE *f;
    uint32_t crc;
    int failed;
} out;
static int out_put(void *user, const void *p, size_t n) {
    out *o = user;
    if (o->failed || fwrite(p, 1, n, o->f) != n) { o->failed = 1; return 1; }
    o->crc = crc(o->crc, p, n);
    return 0;
}

static vq_status io_err(vq_err *err, const char *what, const char *path, int e) {
    return vq_err_set(err, VQ_ERR_IO, "session state '%.300s': %s: %s", path, what, strerror(e));
}

/* Header, tokens, logits, kv stream and CRC into an open temp file; 0 or errno. */
static int write_all(const vq_session *s, FILE *f, const st_head *h) {
    out o = { f, 0, 0 };
    const char *spec = vq_kv_spec_str(state_kv(s));
    out_put(&o, h, sizeof *h);
    out_put(&o, spec, h->spec_len);
    uint32_t hcrc = o.crc;
    out_put(&o, &hcrc, 4);
    out_put(&o, s->tokens, (size_t)s->n_tok * sizeof(int32_t));
    if (h->flags & ST_FLAG_LOGITS) out_put(&o, s->logits, (size_t)s->m->cfg.vocab_size * sizeof(float));
    if (!o.failed && vq_kv_state_write(state_kv(s), out_put, &o, NULL)) o.failed = 1;
    uint32_t all = o.crc;
    out_put(&o, &all, 4);
    if (o.failed) return errno ? errno : EIO;
    if (fflush(f)) return errno;
    if (fsync(fileno(f))) return errno;
    return 0;
}

static vq_status write_file(const vq_session *s, const char *path, const st_head *hp, vq_err *err);

vq_status vq_session_save(const vq_session *s, const char *path, vq_err *err) {
    vq_err_clear(err);
    if (!s || !path || !*path) return vq_err_set(err, VQ_ERR_ARG, "vq_session_save: no session or no path");
    if (strlen(path) + 16 >= PATH_MAX)
        return vq_err_set(err, VQ_ERR_ARG, "vq_session_save: path '%.200s...' is too long", path);
    if (vq_kv_evicting(state_kv(s)))   /* nothing is written: the format has no eviction scores */
        return vq_err_set(err, VQ_ERR_STATE, "session state '%.300s': the session's cache evicts tokens "
                          "(%.200s); the state format holds no eviction scores, so saving is refused",
                          path, vq_kv_spec_str(state_kv(s)));
    /* rename() would replace whatever is there: only ever replace a regular file */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return vq_err_set(err, VQ_ERR_IO, "session state '%.300s': exists and is not a regular file "
                          "(a state file is only written over a regular file)", path);
    st_head h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, ST_MAGIC, 8);
    h.version = ST_VERSION;
    h.flags = s->have_logits ? ST_FLAG_LOGITS : 0;
    fingerprint(s->m, &h);
    h.n_ctx = (uint32_t)s->n_ctx;
    h.kv_seed = s->kv_seed;
    h.pos = (uint32_t)s->pos;
    h.n_tok = (uint32_t)s->n_tok;
    h.kv_bytes = vq_kv_state_bytes(state_kv(s));
    h.spec_len = (uint32_t)strlen(vq_kv_spec_str(state_kv(s)));

    if (s->store) {   /* the device's rows into the shadow, for the stream's writer */
        vq_status st = shadow_from_store(s, err);
        if (st) return st;
        h.kv_bytes = vq_kv_state_bytes(s->shadow);
    }
    vq_status st = write_file(s, path, &h, err);
    if (s->store) vq_kv_clear(s->shadow);
    return st;
}

static vq_status write_file(const vq_session *s, const char *path, const st_head *hp, vq_err *err) {
    st_head h = *hp;
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) return io_err(err, "cannot create a temporary file beside it", path, errno);
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return io_err(err, "cannot open the temporary file", path, e);
    }
    errno = 0;
    int e = write_all(s, f, &h);
    if (fclose(f) && !e) e = errno ? errno : EIO;
    if (!e && rename(tmp, path)) e = errno;
    if (e) {
        unlink(tmp);
        return io_err(err, "write failed (an existing file there is unchanged)", path, e);
    }
    if (vq_fsync_dir(path)) return io_err(err, "written, but its folder could not be synced", path, errno);
    return VQ_OK;
}

/* ---- load ---- */
/* Read exactly n bytes at the file's current offset; 0, or -1 with a short count (truncated). */
static int read_full(int fd, void *p, size_t n, int *eno) {
    uint8_t *b = p;
    while (n) {
        ssize_t k = read(fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { *eno = k < 0 ? errno : 0; return -1; }
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static vq_status fmt_err(vq_err *err, const char *path, const char *what) {
    return vq_err_set(err, VQ_ERR_FORMAT, "session state '%.300s': %s", path, what);
}

/* The model fingerprint against the session's model: every field that differs is named. */
static vq_status check_model(const vq_session *s, const st_head *h, const char *path, vq_err *err) {
    st_head mine;
    memset(&mine, 0, sizeof mine);
    fingerprint(s->m, &mine);
    char m[400] = "";
    size_t o = 0;
#define DIFF(field, fmt, cast) \
    if (h->field != mine.field && o < sizeof m) \
        o += (size_t)snprintf(m + o, sizeof m - o, "%s" #field " " fmt " vs " fmt, o ? ", " : "", \
                              (cast)h->field, (cast)mine.field)
    DIFF(n_layers, "%u", unsigned); DIFF(n_heads, "%u", unsigned); DIFF(n_kv_heads, "%u", unsigned);
    DIFF(head_dim, "%u", unsigned); DIFF(dim, "%u", unsigned); DIFF(hidden_dim, "%u", unsigned);
    DIFF(n_vocab, "%u", unsigned); DIFF(file_bytes, "%llu", unsigned long long);
    DIFF(embd_type, "%u", unsigned); DIFF(embd_crc, "%08x", unsigned);
#undef DIFF
    char arch[33];
    memcpy(arch, h->arch, 32);
    arch[32] = 0;
    for (char *c = arch; *c; c++)
        if ((unsigned char)*c < 32 || (unsigned char)*c > 126) *c = '?';
    if (strcmp(arch, mine.arch) && o < sizeof m)
        o += (size_t)snprintf(m + o, sizeof m - o, "%sarch '%s' vs '%s'", o ? ", " : "", arch, mine.arch);
    if (!o) return VQ_OK;
    return vq_err_set(err, VQ_ERR_STATE, "session state '%.200s' was saved from another model "
                      "(saved vs this one: %s)", path, m);
}

/* Header checks in the order that makes the message right: what the file is (magic, version),
 * whether the header is intact (its CRC), whether it fits this session (model, spec, seed,
 * n_ctx: VQ_ERR_STATE), whether its counts agree with each other and with the file's size. */
static vq_status check_head(const vq_session *s, const st_head *h, const uint8_t *spec, uint32_t hcrc,
                            uint64_t file_size, uint64_t *body, const char *path, vq_err *err) {
    uint32_t c = crc(crc(0, h, sizeof *h), spec, h->spec_len);
    if (c != hcrc) return fmt_err(err, path, "the header's checksum does not match (the file is corrupt)");
    if ((h->flags & ~ST_FLAG_LOGITS) || (h->reserved[0] | h->reserved[1] | h->reserved[2] | h->reserved[3]))
        return fmt_err(err, path, "unknown flags or reserved bytes set in the header");
    vq_status st = check_model(s, h, path, err);
    if (st) return st;
    /* before the spec: a smaller context also clamps the page size, which the spec text shows */
    if (h->n_tok > (uint32_t)s->n_ctx)
        return vq_err_set(err, VQ_ERR_STATE, "session state '%.200s' holds %u tokens, more than this "
                          "session's n_ctx %d", path, h->n_tok, s->n_ctx);
    const char *mine = vq_kv_spec_str(state_kv(s));
    if (h->spec_len != strlen(mine) || memcmp(spec, mine, h->spec_len))
        return vq_err_set(err, VQ_ERR_STATE, "session state '%.200s' was saved with kv spec '%.*s', "
                          "this session has '%.200s'", path, (int)VQ_MIN(h->spec_len, 200u), spec, mine);
    if (h->kv_seed != s->kv_seed)
        return vq_err_set(err, VQ_ERR_STATE, "session state '%.200s' was saved with kv_seed %llu, this "
                          "session has kv_seed %llu", path, (unsigned long long)h->kv_seed,
                          (unsigned long long)s->kv_seed);
    if (h->pos > h->n_tok || h->n_tok > h->pos + 1)
        return fmt_err(err, path, "the token count and the position disagree (tokens = position, or "
                       "position + 1 with a pending token)");
    const uint64_t max_kv = vq_kv_state_max_bytes(state_kv(s));
    if (h->kv_bytes > max_kv) {
        char m[160];
        snprintf(m, sizeof m, "the kv section claims %llu bytes, more than this cache can hold (%llu)",
                 (unsigned long long)h->kv_bytes, (unsigned long long)max_kv);
        return fmt_err(err, path, m);
    }
    *body = 4ull * h->n_tok + (h->flags & ST_FLAG_LOGITS ? 4ull * h->n_vocab : 0) + h->kv_bytes + 4;
    const uint64_t want = ST_FIXED + h->spec_len + 4 + *body;
    if (file_size != want) {
        char m[160];
        snprintf(m, sizeof m, "%s: the file is %llu bytes, its header says %llu",
                 file_size < want ? "truncated" : "trailing bytes", (unsigned long long)file_size,
                 (unsigned long long)want);
        return fmt_err(err, path, m);
    }
    return VQ_OK;
}

/* Opened without blocking (a FIFO would wait for a writer), then it must be a regular file. */
static int open_state(const char *path, uint64_t *size, vq_err *err) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) { io_err(err, "cannot open", path, errno); return -1; }
    struct stat sb;
    if (fstat(fd, &sb)) { io_err(err, "cannot stat", path, errno); close(fd); return -1; }
    if (!S_ISREG(sb.st_mode)) {
        vq_err_set(err, VQ_ERR_IO, "session state '%.300s': is %s, not a regular file", path,
                   S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO"
                   : S_ISCHR(sb.st_mode) ? "a character device" : "not a plain file");
        close(fd);
        return -1;
    }
    *size = (uint64_t)sb.st_size;
    return fd;
}

/* The body (tokens, logits, kv stream) checked and applied; the kv reader is all-or-nothing and
 * runs first, the rest cannot fail after it. */
static vq_status apply_body(vq_session *s, const st_head *h, const uint8_t *b, const char *path,
                            vq_err *err) {
    const int V = s->m->cfg.vocab_size;
    for (uint32_t i = 0; i < h->n_tok; i++) {
        int32_t t;
        memcpy(&t, b + 4 * (size_t)i, 4);
        if (t < 0 || t >= V) {
            char m[120];
            snprintf(m, sizeof m, "token %u (id %d) is outside the vocabulary (0..%d)", i, (int)t, V - 1);
            return fmt_err(err, path, m);
        }
    }
    const uint8_t *lg = b + 4 * (size_t)h->n_tok;
    const int have = (h->flags & ST_FLAG_LOGITS) != 0;
    for (int i = 0; have && i < V; i++) {
        float x;
        memcpy(&x, lg + 4 * (size_t)i, 4);
        if (!isfinite(x)) return fmt_err(err, path, "a saved logit is not finite");
    }
    const uint8_t *kvb = lg + (have ? 4 * (size_t)V : 0);
    vq_err e;
    vq_status st = vq_kv_state_read(state_kv(s), kvb, (size_t)h->kv_bytes, (int)h->pos, &e);
    if (st) return vq_err_set(err, st, "session state '%.200s': %s", path, e.msg);
    if (s->store && (st = store_from_shadow(s, &e))) {   /* the store was emptied: so is the session */
        s->pos = s->n_tok = 0;
        s->have_logits = 0;
        return vq_err_set(err, st, "session state '%.200s': %s (the session is now empty)", path, e.msg);
    }
    memcpy(s->tokens, b, 4 * (size_t)h->n_tok);
    if (have) memcpy(s->logits, lg, 4 * (size_t)V);
    s->have_logits = have;
    s->pos = (int)h->pos;
    s->n_tok = (int)h->n_tok;
    return VQ_OK;
}

vq_status vq_session_load(vq_session *s, const char *path, vq_err *err) {
    vq_err_clear(err);
    if (!s || !path || !*path) return vq_err_set(err, VQ_ERR_ARG, "vq_session_load: no session or no path");
    uint64_t size;
    int fd = open_state(path, &size, err);
    if (fd < 0) return err ? err->code : VQ_ERR_IO;
    st_head h;
    uint8_t spec[VQ_KV_SPEC_MAX_LEN];
    uint32_t hcrc;
    uint8_t *body = NULL;
    uint64_t nb = 0;
    int eno = 0;
    vq_status st = VQ_OK;
    char m[200];
    if (size < sizeof h || read_full(fd, &h, sizeof h, &eno)) {
        snprintf(m, sizeof m, "truncated: %llu bytes, shorter than the %d-byte header",
                 (unsigned long long)size, ST_FIXED);
        st = eno ? io_err(err, "read failed", path, eno) : fmt_err(err, path, m);
    } else if (memcmp(h.magic, ST_MAGIC, 8)) {
        st = fmt_err(err, path, "not a session state file (bad magic)");
    } else if (h.version != ST_VERSION) {
        snprintf(m, sizeof m, "format version %u, this library reads version %u%s", h.version,
                 ST_VERSION, h.version > ST_VERSION ? " (the file is from a newer version)" : "");
        st = fmt_err(err, path, m);
    } else if (h.spec_len < 1 || h.spec_len > VQ_KV_SPEC_MAX_LEN) {
        snprintf(m, sizeof m, "kv spec length %u outside 1..%d", h.spec_len, VQ_KV_SPEC_MAX_LEN);
        st = fmt_err(err, path, m);
    } else if (size < (uint64_t)ST_FIXED + h.spec_len + 4 || read_full(fd, spec, h.spec_len, &eno) ||
               read_full(fd, &hcrc, 4, &eno)) {
        snprintf(m, sizeof m, "truncated: %llu bytes, the header alone is %u",
                 (unsigned long long)size, ST_FIXED + h.spec_len + 4);
        st = eno ? io_err(err, "read failed", path, eno) : fmt_err(err, path, m);
    } else {
        st = check_head(s, &h, spec, hcrc, size, &nb, path, err);
    }
    /* nb is now bounded by what this session can hold (checked against the header) */
    if (!st && !(body = malloc((size_t)nb)))
        st = vq_err_set(err, VQ_ERR_NOMEM, "session state '%.200s': out of memory for %llu bytes",
                        path, (unsigned long long)nb);
    if (!st && read_full(fd, body, (size_t)nb, &eno))
        st = eno ? io_err(err, "read failed", path, eno) : fmt_err(err, path, "truncated while reading");
    close(fd);
    if (!st) {
        uint32_t c = crc(crc(crc(crc(0, &h, sizeof h), spec, h.spec_len), &hcrc, 4), body, (size_t)nb - 4), want;
        memcpy(&want, body + nb - 4, 4);
        if (c != want) st = fmt_err(err, path, "checksum mismatch (CRC-32 over the file): the file is corrupt");
    }
    if (!st) st = apply_body(s, &h, body, path, err);
    free(body);
    return st;
}
