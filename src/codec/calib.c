/* calib.c: the calibration file's reader and writer (docs/calibration-format.md has the bytes).
 * Layout: a 128-byte header with its own CRC-32, the float32 arrays in a fixed order, and a
 * CRC-32 of those arrays. Little-endian, as every machine this builds for. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "codec/calib.h"

#define HDR 128

static uint32_t crc(uint32_t c, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {   /* zlib's length is a uInt */
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = (uint32_t)crc32(c, b, k);
        b += k;
        n -= k;
    }
    return c;
}

/* element counts of the arrays, in file order: eight in every version, five more in version 4
 * (has_lowrank; 0 elements otherwise) */
#define N_ARR 13   /* arrays in a version 4 file */
static void counts(const vq_calib *c, size_t n[N_ARR]) {
    size_t kv = (size_t)c->n_layers * c->n_kv_heads, q = (size_t)c->n_layers * c->n_heads;
    const size_t d = (size_t)c->head_dim, lr = c->has_lowrank ? 1 : 0;
    n[0] = kv * (d / 2);
    n[1] = n[2] = n[3] = kv * d;
    n[4] = n[5] = q * d;
    n[6] = kv * d;
    n[7] = (size_t)c->n_layers;
    n[8] = n[11] = lr * kv * d;
    n[9] = n[10] = n[12] = lr * kv * d * d;
}
static float **arrays(vq_calib *c, float **a[N_ARR]) {
    a[0] = &c->pair_energy; a[1] = &c->k_mean; a[2] = &c->k_sq; a[3] = &c->v_sq;
    a[4] = &c->q_mean; a[5] = &c->q_sq; a[6] = &c->q_filter; a[7] = &c->attn_cos;
    a[8] = &c->k_eig; a[9] = &c->k_basis; a[10] = &c->k_dec; a[11] = &c->v_eig; a[12] = &c->v_basis;
    return NULL;
}
static const char *const ARR_NAME[N_ARR] = { "pair_energy", "k_mean", "k_sq", "v_sq", "q_mean", "q_sq",
                                             "q_filter", "attn_cos", "k_eig", "k_basis", "k_dec",
                                             "v_eig", "v_basis" };
/* arrays 1, 4 (means), 6 (unit directions), 7 (cosines), 9, 10 and 12 (projection vectors) take
 * any sign; the rest are second moments, their products or eigenvalues of second moments */
static int signed_arr(int i) { return i == 1 || i == 4 || i == 6 || i == 7 || i == 9 || i == 10 || i == 12; }

/* The VecInfer section (version 5): "VECINFER", u32 sub_k, u32 sub_v, u32 codebook entries, u32
 * reserved 0, u64 rotation seed, then f32 smooth [L][Hkv][d], cb_k and cb_v [L][Hkv][d * CB]
 * each, then a CRC-32 of the section's bytes before it. */
#define VI_HDR 32
static size_t vi_floats(const vq_calib *c) {   /* one of the three arrays' counts: smooth is d per head */
    return (size_t)c->n_layers * c->n_kv_heads * (size_t)c->head_dim;
}
static size_t vi_bytes(const vq_calib *c) {
    return c->vi_sub_k ? VI_HDR + vi_floats(c) * (1 + 2 * VQ_CALIB_VI_CB) * sizeof(float) + 4 : 0;
}
static size_t base_bytes(const vq_calib *c) {
    size_t n[N_ARR], t = 0;
    counts(c, n);
    for (int i = 0; i < N_ARR; i++) t += n[i];
    return HDR + t * sizeof(float) + 4;
}
size_t vq_calib_file_bytes(const vq_calib *c) { return base_bytes(c) + vi_bytes(c); }

static int vi_sub_ok(int sub, int d) { return (sub == 1 || sub == 2 || sub == 4 || sub == 8) && d % sub == 0; }

vq_status vq_calib_vi_alloc(vq_calib *c, int sub_k, int sub_v, uint64_t seed, vq_err *err) {
    if (!vi_sub_ok(sub_k, c->head_dim) || !vi_sub_ok(sub_v, c->head_dim))
        return vq_err_set(err, VQ_ERR_ARG, "calibration: VecInfer sub-vector lengths %d/%d (keys/values) "
                          "must be 1, 2, 4 or 8 and divide head_dim %d", sub_k, sub_v, c->head_dim);
    const size_t n = vi_floats(c);
    free(c->vi_smooth); free(c->vi_cb_k); free(c->vi_cb_v);
    c->vi_smooth = calloc(n, sizeof(float));
    c->vi_cb_k = calloc(n * VQ_CALIB_VI_CB, sizeof(float));
    c->vi_cb_v = calloc(n * VQ_CALIB_VI_CB, sizeof(float));
    if (!c->vi_smooth || !c->vi_cb_k || !c->vi_cb_v) {
        free(c->vi_smooth); free(c->vi_cb_k); free(c->vi_cb_v);
        c->vi_smooth = c->vi_cb_k = c->vi_cb_v = NULL;
        c->vi_sub_k = c->vi_sub_v = 0;
        return vq_err_set(err, VQ_ERR_NOMEM, "calibration: out of memory (VecInfer section)");
    }
    c->vi_sub_k = sub_k;
    c->vi_sub_v = sub_v;
    c->vi_seed = seed;
    return VQ_OK;
}

void vq_calib_free(vq_calib *c) {
    if (!c) return;
    float **a[N_ARR];
    arrays(c, a);
    for (int i = 0; i < N_ARR; i++) { free(*a[i]); *a[i] = NULL; }
    free(c->vi_smooth); free(c->vi_cb_k); free(c->vi_cb_v);
    c->vi_smooth = c->vi_cb_k = c->vi_cb_v = NULL;
    c->vi_sub_k = c->vi_sub_v = c->vi_vnorm = 0;
}

static int dims_ok(const vq_calib *c) {
    return c->n_layers >= 1 && c->n_layers <= VQ_CALIB_MAX_DIM && c->n_heads >= 1 &&
           c->n_heads <= VQ_CALIB_MAX_DIM && c->n_kv_heads >= 1 && c->n_kv_heads <= c->n_heads &&
           c->n_heads % c->n_kv_heads == 0 && c->head_dim >= 2 && c->head_dim <= VQ_CALIB_MAX_DIM &&
           c->head_dim % 2 == 0 && c->rope_dim >= 2 && c->rope_dim <= c->head_dim &&   /* >= 1 pair: the
                                                         pair energies are what a calibration is for */
           c->rope_dim % 2 == 0 && (c->rope_neox == 0 || c->rope_neox == 1);
}

vq_status vq_calib_alloc(vq_calib *c, vq_err *err) {
    if (!dims_ok(c))
        return vq_err_set(err, VQ_ERR_ARG, "calibration: bad dims (layers %d, heads %d, kv heads %d, "
                          "head_dim %d, rope_dim %d)", c->n_layers, c->n_heads, c->n_kv_heads,
                          c->head_dim, c->rope_dim);
    size_t n[N_ARR];
    float **a[N_ARR];
    counts(c, n);
    arrays(c, a);
    for (int i = 0; i < N_ARR; i++) {
        if (!n[i]) continue;   /* a version 3 calibration: no low-rank arrays */
        *a[i] = calloc(n[i], sizeof(float));
        if (!*a[i]) { vq_calib_free(c); return vq_err_set(err, VQ_ERR_NOMEM, "calibration: out of memory"); }
    }
    return VQ_OK;
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

vq_status vq_calib_serialize(const vq_calib *c, uint8_t **buf, size_t *len, vq_err *err) {
    *buf = NULL;
    *len = 0;
    if (!dims_ok(c) || !c->pair_energy)
        return vq_err_set(err, VQ_ERR_ARG, "calibration: nothing to write (bad dims or no arrays)");
    size_t total = vq_calib_file_bytes(c), n[N_ARR];
    uint8_t *b = calloc(1, total);
    if (!b) return vq_err_set(err, VQ_ERR_NOMEM, "calibration: out of memory (%zu bytes)", total);
    memcpy(b, VQ_CALIB_MAGIC, 8);
    if (c->vi_sub_k && !c->has_lowrank) {
        free(b);
        return vq_err_set(err, VQ_ERR_ARG, "calibration: a VecInfer section needs the version 4 arrays (has_lowrank)");
    }
    /* so a read file writes back its bytes */
    put32(b + 8, c->vi_sub_k ? VQ_CALIB_VERSION_VI : c->has_lowrank ? VQ_CALIB_VERSION : 3u);
    put32(b + 12, HDR);
    memcpy(b + 16, c->model, strnlen(c->model, VQ_CALIB_NAME - 1));
    put64(b + 80, c->config_hash);
    put32(b + 88, (uint32_t)c->n_layers);
    put32(b + 92, (uint32_t)c->n_heads);
    put32(b + 96, (uint32_t)c->n_kv_heads);
    put32(b + 100, (uint32_t)c->head_dim);
    put32(b + 104, (uint32_t)c->rope_dim);
    put32(b + 108, (uint32_t)c->rope_neox);
    put64(b + 112, c->n_tokens);
    put32(b + 124, crc(0, b, 124));
    counts(c, n);
    const float *src[N_ARR] = { c->pair_energy, c->k_mean, c->k_sq, c->v_sq, c->q_mean, c->q_sq,
                                c->q_filter, c->attn_cos, c->k_eig, c->k_basis, c->k_dec, c->v_eig,
                                c->v_basis };
    if (c->has_lowrank && (!c->k_dec || !c->k_eig || !c->k_basis || !c->v_eig || !c->v_basis)) {
        free(b);
        return vq_err_set(err, VQ_ERR_ARG, "calibration: has_lowrank set without its arrays");
    }
    size_t off = HDR;
    for (int i = 0; i < N_ARR; i++) {
        if (!n[i]) continue;
        memcpy(b + off, src[i], n[i] * sizeof(float));
        off += n[i] * sizeof(float);
    }
    put32(b + off, crc(0, b + HDR, off - HDR));
    off += 4;
    if (c->vi_sub_k) {
        uint8_t *v = b + off;
        memcpy(v, "VECINFER", 8);
        put32(v + 8, (uint32_t)c->vi_sub_k);
        put32(v + 12, (uint32_t)c->vi_sub_v);
        put32(v + 16, VQ_CALIB_VI_CB);
        put32(v + 20, c->vi_vnorm ? 1u : 0u);
        put64(v + 24, c->vi_seed);
        size_t o = VI_HDR, n = vi_floats(c);
        memcpy(v + o, c->vi_smooth, n * sizeof(float)); o += n * sizeof(float);
        memcpy(v + o, c->vi_cb_k, n * VQ_CALIB_VI_CB * sizeof(float)); o += n * VQ_CALIB_VI_CB * sizeof(float);
        memcpy(v + o, c->vi_cb_v, n * VQ_CALIB_VI_CB * sizeof(float)); o += n * VQ_CALIB_VI_CB * sizeof(float);
        put32(v + o, crc(0, v, o));
    }
    *buf = b;
    *len = total;
    return VQ_OK;
}

static vq_status bad(vq_err *err, const char *what, size_t at) {
    return vq_err_set(err, VQ_ERR_FORMAT, "calibration file: %s (byte offset %zu)", what, at);
}

vq_status vq_calib_parse(const uint8_t *buf, size_t len, vq_calib *c, vq_err *err) {
    memset(c, 0, sizeof *c);
    if (len < HDR + 4) return bad(err, "too short for the 128-byte header (truncated or not a calibration file)", len);
    if (memcmp(buf, VQ_CALIB_MAGIC, 8)) return bad(err, "bad magic: not a veloxquant calibration file", 0);
    uint32_t ver = get32(buf + 8);
    if (ver < VQ_CALIB_VERSION_MIN || ver > VQ_CALIB_VERSION_VI) {
        vq_err_set(err, VQ_ERR_FORMAT, "calibration file: version %u, this build reads versions %u..%u "
                   "(%u: with a VecInfer section) (byte offset 8)", ver, VQ_CALIB_VERSION_MIN,
                   VQ_CALIB_VERSION_VI, VQ_CALIB_VERSION_VI);
        return VQ_ERR_FORMAT;
    }
    if (get32(buf + 12) != HDR) return bad(err, "header_bytes is not 128", 12);
    if (get32(buf + 124) != crc(0, buf, 124)) return bad(err, "header CRC-32 mismatch (corrupt header)", 124);
    if (get32(buf + 120) != 0) return bad(err, "reserved field is not zero", 120);
    vq_calib t;
    memset(&t, 0, sizeof t);
    memcpy(t.model, buf + 16, VQ_CALIB_NAME);
    const char *nul = memchr(t.model, 0, VQ_CALIB_NAME);
    if (!nul) return bad(err, "model name is not NUL terminated", 16);
    for (size_t i = (size_t)(nul - t.model); i < VQ_CALIB_NAME; i++)   /* NUL-padded: the writer's bytes */
        if (t.model[i]) return bad(err, "model name has bytes after its NUL (must be NUL-padded)", 16 + i);
    t.config_hash = get64(buf + 80);
    uint32_t v[6];
    for (int i = 0; i < 6; i++) v[i] = get32(buf + 88 + 4 * i);
    for (int i = 0; i < 6; i++)
        if (v[i] > VQ_CALIB_MAX_DIM) return bad(err, "a dimension is out of range (> 4096)", 88 + 4 * (size_t)i);
    t.n_layers = (int)v[0]; t.n_heads = (int)v[1]; t.n_kv_heads = (int)v[2]; t.head_dim = (int)v[3];
    t.rope_dim = (int)v[4]; t.rope_neox = (int)v[5];
    if (!dims_ok(&t)) return bad(err, "inconsistent dims (layers, heads, kv heads, head_dim, rope)", 88);
    t.n_tokens = get64(buf + 112);
    t.has_lowrank = ver >= 4;
    /* statistics over no rows are no statistics; the count is used as a double and a long, so it
     * stays below 2^53 (calibrate writes at most 2^22) */
    if (t.n_tokens < 1 || t.n_tokens > ((uint64_t)1 << 53)) return bad(err, "n_tokens is outside 1..2^53", 112);
    const size_t bb = base_bytes(&t);
    if (ver == VQ_CALIB_VERSION_VI) {   /* the section's header fixes its size */
        if (len < bb + VI_HDR + 4) return bad(err, "version 4 without a whole VecInfer section header", len);
        const uint8_t *v = buf + bb;
        if (memcmp(v, "VECINFER", 8)) return bad(err, "VecInfer section: bad tag", bb);
        uint32_t sk = get32(v + 8), sv = get32(v + 12);
        if (sk > 8 || sv > 8 || !vi_sub_ok((int)sk, t.head_dim) || !vi_sub_ok((int)sv, t.head_dim))
            return bad(err, "VecInfer section: a sub-vector length is not 1, 2, 4 or 8 dividing head_dim", bb + 8);
        if (get32(v + 16) != VQ_CALIB_VI_CB) return bad(err, "VecInfer section: codebook entries are not 16", bb + 16);
        if (get32(v + 20) > 1) return bad(err, "VecInfer section: flags other than bit 0 (vnorm) set", bb + 20);
        t.vi_sub_k = (int)sk;
        t.vi_sub_v = (int)sv;
        t.vi_seed = get64(v + 24);
        t.vi_vnorm = (int)get32(v + 20);
    }
    if (vq_calib_file_bytes(&t) != len) {
        vq_err_set(err, VQ_ERR_FORMAT, "calibration file: %zu bytes, its dims need %zu (truncated or "
                   "extended)", len, vq_calib_file_bytes(&t));
        return VQ_ERR_FORMAT;
    }
    if (get32(buf + bb - 4) != crc(0, buf + HDR, bb - 4 - HDR))
        return bad(err, "data CRC-32 mismatch (corrupt statistics)", bb - 4);
    if (t.vi_sub_k && get32(buf + len - 4) != crc(0, buf + bb, len - 4 - bb))
        return bad(err, "VecInfer section CRC-32 mismatch (corrupt codebooks)", len - 4);
    /* what a KV state records: the statistics' CRC, and in version 4 that CRC chained over the
     * whole section (codes depend on the codebooks) */
    t.data_crc = t.vi_sub_k ? crc(get32(buf + bb - 4), buf + bb, len - bb) : get32(buf + bb - 4);
    const int vsk = t.vi_sub_k, vsv = t.vi_sub_v;
    const uint64_t vseed = t.vi_seed;
    t.vi_sub_k = t.vi_sub_v = 0;   /* allocated below */
    vq_status s = vq_calib_alloc(&t, err);
    if (s) return s;
    size_t n[N_ARR], off = HDR;
    float **a[N_ARR];
    counts(&t, n);
    arrays(&t, a);
    for (int i = 0; i < N_ARR; i++) {
        if (!n[i]) continue;
        memcpy(*a[i], buf + off, n[i] * sizeof(float));
        for (size_t j = 0; j < n[i]; j++) {
            float x = (*a[i])[j];
            if (!isfinite(x) || (!signed_arr(i) && x < 0) || (i == 7 && fabsf(x) > 1.0f)) {
                char m[96];
                snprintf(m, sizeof m, "%s[%zu] = %g is not a finite%s value", ARR_NAME[i], j, (double)x,
                         i == 7 ? " cosine (-1..1)" : !signed_arr(i) ? " non-negative" : "");
                vq_calib_free(&t);
                return bad(err, m, off + j * sizeof(float));
            }
        }
        off += n[i] * sizeof(float);
    }
    if (vsk) {
        s = vq_calib_vi_alloc(&t, vsk, vsv, vseed, err);
        if (s) { vq_calib_free(&t); return s; }
        const size_t nf = vi_floats(&t);
        float *dst[3] = { t.vi_smooth, t.vi_cb_k, t.vi_cb_v };
        const size_t cnt[3] = { nf, nf * VQ_CALIB_VI_CB, nf * VQ_CALIB_VI_CB };
        static const char *const nm[3] = { "vi_smooth", "vi_cb_k", "vi_cb_v" };
        off += 4 + VI_HDR;
        for (int i = 0; i < 3; i++) {
            memcpy(dst[i], buf + off, cnt[i] * sizeof(float));
            for (size_t j = 0; j < cnt[i]; j++) {
                float x = dst[i][j];
                if (!isfinite(x) || (i == 0 && !(x > 0))) {
                    char m[96];
                    snprintf(m, sizeof m, "%s[%zu] = %g is not a finite%s value", nm[i], j, (double)x,
                             i == 0 ? " positive" : "");
                    vq_calib_free(&t);
                    return bad(err, m, off + j * sizeof(float));
                }
            }
            off += cnt[i] * sizeof(float);
        }
        /* entry 0 of every codebook is the zero vector (zero rows code exactly: the codec's promise) */
        for (int side = 0; side < 2; side++) {
            const int sub = side ? t.vi_sub_v : t.vi_sub_k;
            const float *cb = side ? t.vi_cb_v : t.vi_cb_k;
            for (size_t g = 0; g < nf / (size_t)sub; g++)   /* (layer, head, sub-vector) */
                for (int u = 0; u < sub; u++)
                    if (cb[g * VQ_CALIB_VI_CB * sub + u] != 0.0f) {
                        vq_calib_free(&t);
                        return bad(err, side ? "vi_cb_v: a codebook's entry 0 is not the zero vector"
                                             : "vi_cb_k: a codebook's entry 0 is not the zero vector", 0);
                    }
        }
    }
    *c = t;
    return VQ_OK;
}

static vq_status io_err(vq_err *err, const char *what, const char *path, int e) {
    return vq_err_set(err, VQ_ERR_IO, "calibration file '%.300s': %s%s%s", path, what, e ? ": " : "",
                      e ? strerror(e) : "");
}

vq_status vq_calib_write(const vq_calib *c, const char *path, vq_err *err) {
    if (!path || !*path) return vq_err_set(err, VQ_ERR_ARG, "calibration: no output path");
    if (strlen(path) + 16 >= PATH_MAX) return io_err(err, "path too long", path, 0);
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return io_err(err, "exists and is not a regular file (only a regular file is replaced)", path, 0);
    uint8_t *buf;
    size_t len;
    vq_status s = vq_calib_serialize(c, &buf, &len, err);
    if (s) return s;
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) { free(buf); return io_err(err, "cannot create a temporary file beside it", path, errno); }
    int e = 0;
    for (size_t o = 0; o < len && !e;) {
        ssize_t k = write(fd, buf + o, len - o);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) e = k < 0 ? errno : EIO;
        else o += (size_t)k;
    }
    free(buf);
    if (!e && fsync(fd)) e = errno;
    if (close(fd) && !e) e = errno;
    if (!e && rename(tmp, path)) e = errno;
    if (e) {
        unlink(tmp);
        return io_err(err, "write failed (an existing file there is unchanged)", path, e);
    }
    if (vq_fsync_dir(path)) return io_err(err, "written, but its folder could not be synced", path, errno);
    return VQ_OK;
}

vq_status vq_calib_read(const char *path, vq_calib *c, vq_err *err) {
    memset(c, 0, sizeof *c);
    if (!path || !*path) return vq_err_set(err, VQ_ERR_ARG, "calibration: no file given");
    size_t len = 0;
    vq_err e2;
    char *buf = vq_read_file(path, &len, &e2);   /* regular files only, FIFOs refused at once */
    if (!buf) return vq_err_set(err, e2.code, "calibration file: %s", e2.msg);
    vq_status s = vq_calib_parse((const uint8_t *)buf, len, c, &e2);
    free(buf);
    if (s) return vq_err_set(err, s, "'%.200s': %s", path, e2.msg);
    return VQ_OK;
}

vq_status vq_calib_check(const vq_calib *c, const char *path, int n_layers, int n_heads,
                         int n_kv_heads, int head_dim, const char *model, uint64_t config_hash,
                         vq_err *err) {
    const char *p = path ? path : "(calibration)";
    const struct { const char *what; int file, want; } f[4] = {
        { "layers", c->n_layers, n_layers }, { "query heads", c->n_heads, n_heads },
        { "KV heads", c->n_kv_heads, n_kv_heads }, { "head_dim", c->head_dim, head_dim } };
    for (int i = 0; i < 4; i++)
        if (f[i].file != f[i].want)
            return vq_err_set(err, VQ_ERR_STATE, "calibration file '%.200s' is for another model: %d %s "
                              "(model '%s'), this model has %d", p, f[i].file, f[i].what, c->model, f[i].want);
    if (model && strcmp(model, c->model))
        return vq_err_set(err, VQ_ERR_STATE, "calibration file '%.200s' is for model '%s', not '%s'", p,
                          c->model, model);
    if (config_hash && config_hash != c->config_hash)
        return vq_err_set(err, VQ_ERR_STATE, "calibration file '%.200s' is for another config of '%s' "
                          "(config hash %016llx, this model %016llx)", p, c->model,
                          (unsigned long long)c->config_hash, (unsigned long long)config_hash);
    return VQ_OK;
}

uint64_t vq_calib_config_hash(const char *text) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *s = (const unsigned char *)text; *s; s++) { h ^= *s; h *= 1099511628211ull; }
    return h;
}

/* The key pre-transform of a KV store (store keys kmean= / kscale=; docs/lowbit-keys.md, "Key
 * pre-transform"): k' = a ⊙ (k − c). c = E[k] when mean (the mean key after RoPE); a_i =
 * (w_i / σ_i²)^alpha with w_i = Σ_{g in group} E[q_g,i²] and σ_i² the key's second moment about
 * c, scaled so that Σ a_i² σ_i² = Σ σ_i² (the codes see as much energy as before). The ratio
 * w/σ² is bounded to 1e-6 of its largest value (a channel no query reads, or a constant one). */
void vq_calib_key_affine(const vq_calib *c, int layer, int kv_head, int mean, double alpha,
                         float *cent, float *scale) {
    const int d = c->head_dim, G = c->n_heads / c->n_kv_heads;
    const size_t kh = ((size_t)layer * c->n_kv_heads + kv_head) * (size_t)d;
    double var[VQ_CALIB_MAX_DIM], r[VQ_CALIB_MAX_DIM], rmax = 0, e0 = 0, e1 = 0;
    for (int i = 0; i < d; i++) {
        const double mu = mean ? c->k_mean[kh + i] : 0.0;
        cent[i] = (float)mu;
        var[i] = fmax(0.0, (double)c->k_sq[kh + i] - mu * mu);
        double w = 0;
        for (int g = 0; g < G; g++)
            w += c->q_sq[((size_t)layer * c->n_heads + (size_t)kv_head * G + g) * (size_t)d + i];
        r[i] = var[i] > 0 ? w / var[i] : 0.0;
        rmax = fmax(rmax, r[i]);
    }
    for (int i = 0; i < d; i++) {
        double a = 1.0;
        if (alpha > 0 && rmax > 0) a = pow(fmax(r[i], rmax * 1e-6), alpha);
        r[i] = a;
        e0 += var[i];
        e1 += a * a * var[i];
    }
    const double k = e1 > 0 && e0 > 0 ? sqrt(e0 / e1) : 1.0;
    for (int i = 0; i < d; i++) scale[i] = (float)(r[i] * k);
}
