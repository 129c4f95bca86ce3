/* reservoir.c: reading and writing reservoir files (reservoir.h; docs/reservoir-format.md has the
 * byte layout). The body is parsed by the GGUF reader, so every check of gguf.c applies to it;
 * this file adds the header page, the alignment rule and the checksums. */
#define _GNU_SOURCE
#include "formats/reservoir.h"
#include "formats/gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the reservoir header is read as a little-endian struct"
#endif

#define KEY_CRC "veloxquant.reservoir.crc32"
#define KEY_PREFIX "veloxquant.reservoir."

/* the header: the first 64 bytes of the first page; the rest of the page is zero */
typedef struct res_head {
    char magic[8];
    uint32_t version;
    uint32_t page;
    uint64_t file_bytes;
    uint64_t body_off;        /* = page */
    uint64_t data_off;        /* absolute offset of the body's tensor data section */
    uint64_t n_tensors;
    uint32_t meta_crc;        /* CRC-32 of bytes [body_off, data_off) */
    uint32_t flags;           /* 0 */
    uint32_t head_crc;        /* CRC-32 of bytes [0, 56) */
    uint32_t reserved;        /* 0 */
} res_head;
_Static_assert(sizeof(res_head) == 64, "the reservoir header is 64 bytes");

static uint32_t crc(uint32_t c, const void *p, uint64_t n) {
    const uint8_t *b = p;
    while (n) {   /* zlib takes a uInt length */
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = (uint32_t)crc32(c, b, k);
        b += k;
        n -= k;
    }
    return c;
}

int vq_reservoir_sniff(const void *p, size_t n) {
    return n >= 8 && memcmp(p, VQ_RESERVOIR_MAGIC, 8) == 0;
}

/* the header's own checks; 0 or a status with err set */
static vq_status check_head(const uint8_t *b, uint64_t size, const char *name, res_head *h, vq_err *err) {
    if (size < VQ_RESERVOIR_PAGE)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: file of %llu bytes is too short for a reservoir header "
                          "(%u bytes)", name, (unsigned long long)size, VQ_RESERVOIR_PAGE);
    memcpy(h, b, sizeof *h);
    if (memcmp(h->magic, VQ_RESERVOIR_MAGIC, 8))
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: not a reservoir file (bad magic)", name);
    if (h->version != VQ_RESERVOIR_VERSION)
        return vq_err_set(err, VQ_ERR_UNSUPPORTED, "%s: reservoir version %u is not supported (this build "
                          "reads version %u)", name, h->version, VQ_RESERVOIR_VERSION);
    uint32_t hc = crc(0, b, offsetof(res_head, head_crc));
    if (hc != h->head_crc)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: header checksum %08x does not match its contents (%08x): "
                          "the header is damaged", name, h->head_crc, hc);
    if (h->page != VQ_RESERVOIR_PAGE || h->flags || h->reserved)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: header: page %u (must be %u), flags %u and reserved %u "
                          "(must be 0)", name, h->page, VQ_RESERVOIR_PAGE, h->flags, h->reserved);
    for (uint32_t i = sizeof *h; i < VQ_RESERVOIR_PAGE; i++)
        if (b[i]) return vq_err_set(err, VQ_ERR_FORMAT, "%s: header page byte %u is %u (must be 0)", name, i, b[i]);
    if (h->file_bytes != size)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: the header says %llu bytes but the file has %llu (%s)", name,
                          (unsigned long long)h->file_bytes, (unsigned long long)size,
                          size < h->file_bytes ? "truncated" : "trailing bytes");
    if (h->body_off != VQ_RESERVOIR_PAGE || h->data_off < h->body_off || h->data_off > size ||
        h->data_off % VQ_RESERVOIR_PAGE)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: header: body at %llu, data at %llu (body must start at %u, "
                          "data page-aligned inside the file of %llu bytes)", name,
                          (unsigned long long)h->body_off, (unsigned long long)h->data_off, VQ_RESERVOIR_PAGE,
                          (unsigned long long)size);
    uint32_t mc = crc(0, b + h->body_off, h->data_off - h->body_off);
    if (mc != h->meta_crc)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: metadata checksum %08x does not match bytes %llu..%llu "
                          "(%08x): the metadata or tensor table is damaged", name, h->meta_crc,
                          (unsigned long long)h->body_off, (unsigned long long)h->data_off, mc);
    return VQ_OK;
}

/* the body's checks beyond GGUF's: layout, the CRC array, every tensor's CRC */
static vq_status check_body(const vq_gguf *g, const res_head *h, const char *name, vq_err *err) {
    if (vq_gguf_alignment(g) != VQ_RESERVOIR_PAGE)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: body alignment %llu (must be %u: tensors are page-aligned)",
                          name, (unsigned long long)vq_gguf_alignment(g), VQ_RESERVOIR_PAGE);
    if (vq_gguf_data_offset(g) + h->body_off != h->data_off)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: the body's data section starts at %llu, the header says %llu",
                          name, (unsigned long long)(vq_gguf_data_offset(g) + h->body_off),
                          (unsigned long long)h->data_off);
    uint64_t n = vq_gguf_n_tensors(g);
    if (n != h->n_tensors)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: the body has %llu tensors, the header says %llu", name,
                          (unsigned long long)n, (unsigned long long)h->n_tensors);
    const vq_gguf_kv *ck;
    vq_status s = vq_gguf_get_arr(g, KEY_CRC, VQ_GGUF_UINT32, &ck, err);
    if (s) return s;
    if (ck->arr_len != n)
        return vq_err_set(err, VQ_ERR_FORMAT, "%s: %s has %llu entries for %llu tensors", name, KEY_CRC,
                          (unsigned long long)ck->arr_len, (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        const vq_gguf_tensor *t = vq_gguf_tensor_at(g, i);
        uint32_t want = (uint32_t)vq_gguf_arr_uint(ck, i), got = crc(0, t->data, t->nbytes);
        if (want != got) {
            char nb[96];
            return vq_err_set(err, VQ_ERR_FORMAT, "%s: tensor '%s': checksum %08x does not match its %llu bytes "
                              "(%08x): the tensor data are damaged", name, vq_gguf_show(t->name, nb, sizeof nb),
                              want, (unsigned long long)t->nbytes, got);
        }
    }
    return VQ_OK;
}

static vq_gguf *open_buf(const uint8_t *b, uint64_t size, const char *name, vq_gguf_layout_fn extra, int own,
                         vq_err *err) {
    res_head h;
    if (check_head(b, size, name, &h, err)) return NULL;
    vq_gguf *g = vq_gguf_parse_mapped(b, size, h.body_off, size - h.body_off, name, extra, own, err);
    if (!g) return NULL;
    if (check_body(g, &h, name, err)) {
        g->mapped = 0;   /* the caller still owns the mapping on failure */
        vq_gguf_close(g);
        return NULL;
    }
    return g;
}

vq_gguf *vq_reservoir_open_mem(const void *buf, size_t len, const char *name, vq_gguf_layout_fn extra,
                               vq_err *err) {
    vq_err_clear(err);
    if (!buf) { vq_err_set(err, VQ_ERR_ARG, "vq_reservoir_open_mem: no buffer"); return NULL; }
    return open_buf(buf, len, name ? name : "<memory>", extra, 0, err);
}

vq_gguf *vq_reservoir_open(const char *path, vq_gguf_layout_fn extra, int copy, vq_err *err) {
    vq_err_clear(err);
    uint64_t size;
    const uint8_t *m = vq_gguf_map_file(path, copy, VQ_RESERVOIR_PAGE, "a reservoir header (4096 bytes)",
                                        &size, err);
    if (!m) return NULL;
    vq_gguf *g = open_buf(m, size, path, extra, 1, err);
    if (!g) munmap((void *)m, (size_t)size);
    return g;
}

int vq_reservoir_fix_checksums(void *buf, size_t len, vq_gguf_layout_fn extra) {
    uint8_t *b = buf;
    if (len < VQ_RESERVOIR_PAGE) return -1;
    res_head h;
    memcpy(&h, b, sizeof h);
    if (memcmp(h.magic, VQ_RESERVOIR_MAGIC, 8) || h.data_off < VQ_RESERVOIR_PAGE || h.data_off > len) return -1;
    /* the tensor CRCs live in the metadata, whose CRC is in the header: fix inside out */
    vq_gguf *g = vq_gguf_parse_mapped(b, len, VQ_RESERVOIR_PAGE, len - VQ_RESERVOIR_PAGE, "<fuzz>", extra, 0, NULL);
    if (g) {
        const vq_gguf_kv *ck = vq_gguf_find(g, KEY_CRC);
        if (ck && ck->type == VQ_GGUF_ARRAY && ck->arr_type == VQ_GGUF_UINT32)
            for (uint64_t i = 0; i < ck->arr_len && i < vq_gguf_n_tensors(g); i++) {
                const vq_gguf_tensor *t = vq_gguf_tensor_at(g, i);
                uint32_t c = crc(0, t->data, t->nbytes);
                memcpy((uint8_t *)ck->arr_data + 4 * i, &c, 4);   /* inside buf, which is writable */
            }
        vq_gguf_close(g);
    }
    h.meta_crc = crc(0, b + VQ_RESERVOIR_PAGE, h.data_off - VQ_RESERVOIR_PAGE);
    memcpy(b, &h, sizeof h);
    h.head_crc = crc(0, b, offsetof(res_head, head_crc));
    memcpy(b, &h, sizeof h);
    return 0;
}

/* ---- writing ---- */
typedef struct wbuf { uint8_t *p; size_t n, cap; int oom; } wbuf;
static void put(wbuf *w, const void *p, size_t n) {
    if (w->oom) return;
    if (w->n + n > w->cap) {
        size_t c = w->cap ? w->cap : 4096;
        while (c < w->n + n) c *= 2;
        uint8_t *q = realloc(w->p, c);
        if (!q) { w->oom = 1; return; }
        w->p = q;
        w->cap = c;
    }
    memcpy(w->p + w->n, p, n);
    w->n += n;
}
static void put_u32(wbuf *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(wbuf *w, uint64_t v) { put(w, &v, 8); }
static void put_str(wbuf *w, const char *s, size_t n) { put_u64(w, n); put(w, s, n); }

static int skip_key(vq_str k) {
    return vq_str_eq(k, "general.alignment") ||
           (k.len >= strlen(KEY_PREFIX) && memcmp(k.ptr, KEY_PREFIX, strlen(KEY_PREFIX)) == 0);
}

static uint64_t round_page(uint64_t x) { return (x + VQ_RESERVOIR_PAGE - 1) / VQ_RESERVOIR_PAGE * VQ_RESERVOIR_PAGE; }

static vq_status io_err(vq_err *err, const char *path, const char *what, int e) {
    return vq_err_set(err, VQ_ERR_IO, "reservoir '%.300s': %s: %s", path, what, strerror(e));
}

static int write_zeros(FILE *f, uint64_t n) {
    static const uint8_t z[4096];
    while (n) {
        size_t k = (size_t)VQ_MIN(n, (uint64_t)sizeof z);
        if (fwrite(z, 1, k, f) != k) return -1;
        n -= k;
    }
    return 0;
}

vq_status vq_reservoir_write(const char *path, const vq_gguf *src, const vq_res_kv *extra, int n_extra,
                             const vq_res_tensor *t, uint64_t n_t, uint64_t *bytes, vq_err *err) {
    vq_err_clear(err);
    if (!path || !*path || (n_t && !t) || n_extra < 0 || (n_extra && !extra))
        return vq_err_set(err, VQ_ERR_ARG, "vq_reservoir_write: bad arguments");
    if (strlen(path) + 16 >= PATH_MAX)
        return vq_err_set(err, VQ_ERR_ARG, "reservoir '%.200s...': path too long", path);
    for (uint64_t i = 0; i < n_t; i++)
        if (!t[i].name || !*t[i].name || t[i].n_dims < 1 || t[i].n_dims > 4 || (t[i].nbytes && !t[i].data))
            return vq_err_set(err, VQ_ERR_ARG, "vq_reservoir_write: tensor %llu is malformed", (unsigned long long)i);
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return vq_err_set(err, VQ_ERR_IO, "reservoir '%.300s': exists and is not a regular file", path);

    /* the metadata: copied entries, then ours */
    uint64_t n_kv = 0;
    wbuf kv = {0};
    for (uint64_t i = 0; src && i < vq_gguf_n_kv(src); i++) {
        const vq_gguf_kv *e = vq_gguf_kv_at(src, i);
        int dup = skip_key(e->key);
        for (int j = 0; j < n_extra && !dup; j++) dup = vq_str_eq(e->key, extra[j].key);
        if (dup) continue;
        put(&kv, e->raw, e->raw_len);
        n_kv++;
    }
    put_str(&kv, "general.alignment", strlen("general.alignment"));
    put_u32(&kv, VQ_GGUF_UINT32);
    put_u32(&kv, VQ_RESERVOIR_PAGE);
    n_kv++;
    for (int j = 0; j < n_extra; j++) {
        put_str(&kv, extra[j].key, strlen(extra[j].key));
        put_u32(&kv, VQ_GGUF_STRING);
        put_str(&kv, extra[j].value ? extra[j].value : "", extra[j].value ? strlen(extra[j].value) : 0);
        n_kv++;
    }
    put_str(&kv, KEY_CRC, strlen(KEY_CRC));
    put_u32(&kv, VQ_GGUF_ARRAY);
    put_u32(&kv, VQ_GGUF_UINT32);
    put_u64(&kv, n_t);
    for (uint64_t i = 0; i < n_t; i++) put_u32(&kv, crc(0, t[i].data, t[i].nbytes));
    n_kv++;

    /* the body: GGUF v3 header, metadata, tensor infos (offsets page-aligned), padding */
    wbuf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, n_t);
    put_u64(&b, n_kv);
    if (kv.p) put(&b, kv.p, kv.n);
    free(kv.p);
    uint64_t off = 0;
    for (uint64_t i = 0; i < n_t; i++) {
        put_str(&b, t[i].name, strlen(t[i].name));
        put_u32(&b, t[i].n_dims);
        for (uint32_t d = 0; d < t[i].n_dims; d++) put_u64(&b, t[i].ne[d]);
        put_u32(&b, t[i].type);
        put_u64(&b, off);
        off = round_page(off + t[i].nbytes);
    }
    if (kv.oom || b.oom) { free(b.p); return vq_err_set(err, VQ_ERR_NOMEM, "reservoir '%.300s': out of memory", path); }
    uint64_t meta = round_page(b.n);
    res_head h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, VQ_RESERVOIR_MAGIC, 8);
    h.version = VQ_RESERVOIR_VERSION;
    h.page = VQ_RESERVOIR_PAGE;
    h.body_off = VQ_RESERVOIR_PAGE;
    h.data_off = h.body_off + meta;
    h.file_bytes = h.data_off + off;
    h.n_tensors = n_t;
    uint8_t *body = realloc(b.p, (size_t)meta);   /* zero the padding: it is under the CRC */
    if (!body) { free(b.p); return vq_err_set(err, VQ_ERR_NOMEM, "reservoir '%.300s': out of memory", path); }
    memset(body + b.n, 0, (size_t)(meta - b.n));
    h.meta_crc = crc(0, body, meta);
    h.head_crc = crc(0, &h, offsetof(res_head, head_crc));

    /* the temporary file's name is known to the process (PATH.tmp.PID), so a CLI stopped by a
     * signal can remove it (tools/cmd_quantize.c); O_EXCL never follows a planted link, and a
     * stale one of a dead process with our pid is replaced once */
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST && !unlink(tmp)) fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) { free(body); return io_err(err, path, "cannot create a temporary file beside it", errno); }
    mode_t um = umask(0);   /* mkstemp makes 0600; a model file is as readable as any other file */
    umask(um);
    if (fchmod(fd, 0666 & ~um)) { int e = errno; close(fd); unlink(tmp); free(body); return io_err(err, path, "chmod", e); }
    FILE *f = fdopen(fd, "wb");
    if (!f) { int e = errno; close(fd); unlink(tmp); free(body); return io_err(err, path, "fdopen", e); }
    int bad = fwrite(&h, 1, sizeof h, f) != sizeof h || write_zeros(f, VQ_RESERVOIR_PAGE - sizeof h) ||
              fwrite(body, 1, (size_t)meta, f) != (size_t)meta;
    free(body);
    for (uint64_t i = 0; i < n_t && !bad; i++) {
        bad = (t[i].nbytes && fwrite(t[i].data, 1, (size_t)t[i].nbytes, f) != (size_t)t[i].nbytes) ||
              write_zeros(f, round_page(t[i].nbytes) - t[i].nbytes);
    }
    int e = bad ? (errno ? errno : EIO) : 0;
    if (!e && fflush(f)) e = errno;
    if (!e && fsync(fileno(f))) e = errno;
    if (fclose(f) && !e) e = errno;
    if (!e && rename(tmp, path)) e = errno;
    if (e) { unlink(tmp); return io_err(err, path, "writing", e); }
    if (vq_fsync_dir(path)) return io_err(err, path, "written, but its folder could not be synced", errno);
    if (bytes) *bytes = h.file_bytes;
    return VQ_OK;
}
