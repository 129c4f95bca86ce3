/* core.c: error messages, aligned allocation, the portable RNG, fp16/bf16 conversion,
 * CPU detection, clocks and OS-measured memory. */
#define _GNU_SOURCE
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

const char *vq_status_name(vq_status s) {
    switch (s) {
    case VQ_OK: return "ok";
    case VQ_ERR_IO: return "i/o error";
    case VQ_ERR_FORMAT: return "bad file format";
    case VQ_ERR_UNSUPPORTED: return "unsupported";
    case VQ_ERR_ARG: return "bad argument";
    case VQ_ERR_NOMEM: return "out of memory";
    case VQ_ERR_RANGE: return "out of range";
    case VQ_ERR_NUMERIC: return "non-finite values";
    case VQ_ERR_STATE: return "state does not match";
    }
    return "unknown status";
}

vq_status vq_err_set(vq_err *err, vq_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        /* messages quote paths, spec text and file contents: a control byte (a newline, an ANSI
         * escape) would forge or garble what the caller prints, so each becomes '?' (UTF-8 stays) */
        for (char *c = err->msg; *c; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c == 0x7f) *c = '?';
        err->code = code;
    }
    return code;
}

void *vq_aligned_alloc(size_t bytes) {
    if (bytes == 0) bytes = 64;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes) return NULL;
    void *p = aligned_alloc(64, rounded);
    if (p) memset(p, 0, rounded);
    return p;
}

void vq_aligned_free(void *p) { free(p); }

void vq_heap_release(void) {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* ---- RNG ---- */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void vq_rng_seed(vq_rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t vq_rng_u64(vq_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double vq_rng_uniform(vq_rng *r) { return (double)(vq_rng_u64(r) >> 11) * 0x1.0p-53; }
float vq_rng_uniformf(vq_rng *r) { return (float)(vq_rng_u64(r) >> 40) * 0x1.0p-24f; }
int vq_rng_sign(vq_rng *r) { return (vq_rng_u64(r) >> 63) ? -1 : 1; }

double vq_rng_gauss(vq_rng *r) {
    double u1 = vq_rng_uniform(r), u2 = vq_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

/* ---- half precision (bit manipulation, no hardware dependence) ---- */
float vq_f16_to_f32(vq_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    union { uint32_t u; float f; } v; v.u = bits; return v.f;
}

vq_f16 vq_f32_to_f16(float f) {
    union { float f; uint32_t u; } v; v.f = f;
    uint32_t x = v.u, sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (vq_f16)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) return (vq_f16)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (absx < 0x38800000u) { /* subnormal half or zero */
        if (absx < 0x33000000u) return (vq_f16)sign;
        uint32_t man = (absx & 0x7fffff) | 0x800000;
        int shift = 126 - (int)(absx >> 23); /* 14..24 */
        uint32_t r = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (vq_f16)(sign | r);
    }
    uint32_t r = ((absx >> 13) - (112u << 10));
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (vq_f16)(sign | r);
}

vq_bf16 vq_f32_to_bf16(float f) {
    union { float f; uint32_t u; } v; v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (vq_bf16)((v.u >> 16) | 0x40);
    uint32_t r = v.u + 0x7fff + ((v.u >> 16) & 1);
    return (vq_bf16)(r >> 16);
}

void vq_f16_to_f32_row(const vq_f16 *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = vq_f16_to_f32(x[i]);
}
void vq_f32_to_f16_row(const float *x, vq_f16 *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = vq_f32_to_f16(x[i]);
}

/* ---- CPU ---- */
vq_isa vq_cpu_best_isa(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
        return VQ_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return VQ_ISA_AVX2;
    return VQ_ISA_SCALAR;
}

const char *vq_isa_name(vq_isa isa) {
    switch (isa) {
    case VQ_ISA_SCALAR: return "scalar";
    case VQ_ISA_AVX2: return "avx2";
    case VQ_ISA_AVX512: return "avx512";
    }
    return "?";
}

void vq_cpu_describe(char *buf, size_t n) {
    char model[256] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[1024];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) == 0) {
                char *c = strchr(line, ':');
                if (c) {
                    c++;
                    while (*c == ' ') c++;
                    snprintf(model, sizeof model, "%s", c);
                    model[strcspn(model, "\n")] = 0;
                }
                break;
            }
        }
        fclose(f);
    }
    snprintf(buf, n, "%s, %ld cores online, best ISA %s", model, sysconf(_SC_NPROCESSORS_ONLN),
             vq_isa_name(vq_cpu_best_isa()));
}

double vq_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t vq_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long size = 0, res = 0;
    int ok = fscanf(f, "%lu %lu", &size, &res);
    fclose(f);
    return ok == 2 ? (size_t)res * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

size_t vq_peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) { kb = strtoull(line + 6, NULL, 10); break; }
    fclose(f);
    return kb * 1024;
}

static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "is a directory";
    if (S_ISFIFO(m)) return "is a FIFO (named pipe), not a regular file";
    if (S_ISCHR(m)) return "is a character device, not a regular file";
    if (S_ISBLK(m)) return "is a block device, not a regular file";
    if (S_ISSOCK(m)) return "is a socket, not a regular file";
    return "is not a regular file";
}

int vq_open_regular(const char *path, uint64_t *size, vq_err *err) {
    if (!path || !*path) { vq_err_set(err, VQ_ERR_IO, "empty file path"); return -1; }
    /* O_NONBLOCK: without it, opening a FIFO blocks until some process opens it for writing */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        struct stat st;   /* open(2) of a directory read-only succeeds; this is for EACCES & co */
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            vq_err_set(err, VQ_ERR_IO, "%s: %s", path, file_kind(st.st_mode));
        else
            vq_err_set(err, VQ_ERR_IO, "%s: cannot open: %s", path, strerror(e));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        vq_err_set(err, VQ_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        vq_err_set(err, VQ_ERR_IO, "%s: %s", path, file_kind(st.st_mode));
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);   /* a regular file ignores O_NONBLOCK; clear it all the same */
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (size) *size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    return fd;
}

char *vq_read_file(const char *path, size_t *len, vq_err *err) {
    uint64_t size;
    int fd = vq_open_regular(path, &size, err);
    if (fd < 0) return NULL;
    if (size > VQ_READ_FILE_MAX) {
        close(fd);
        vq_err_set(err, VQ_ERR_RANGE, "%s: file of %llu bytes is over the %s limit for files read into "
                   "memory", path, (unsigned long long)size, VQ_READ_FILE_MAX_TEXT);
        return NULL;
    }
    /* the size is a hint (the file may change while read, procfs says 0): read to EOF, bounded */
    size_t cap = (size_t)size + 1 > ((size_t)1 << 16) ? (size_t)size + 1 : ((size_t)1 << 16), n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) { close(fd); vq_err_set(err, VQ_ERR_NOMEM, "%s: out of memory for %zu bytes", path, cap); return NULL; }
    for (;;) {
        if (n == cap) {
            if ((uint64_t)cap > VQ_READ_FILE_MAX) {
                free(buf);
                close(fd);
                vq_err_set(err, VQ_ERR_RANGE, "%s: grew past the %s limit for files read into memory while "
                           "being read", path, VQ_READ_FILE_MAX_TEXT);
                return NULL;
            }
            size_t nc = cap * 2 > (size_t)VQ_READ_FILE_MAX + 1 ? (size_t)VQ_READ_FILE_MAX + 1 : cap * 2;
            char *nb = realloc(buf, nc + 1);
            if (!nb) { free(buf); close(fd); vq_err_set(err, VQ_ERR_NOMEM, "%s: out of memory", path); return NULL; }
            buf = nb;
            cap = nc;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            vq_err_set(err, VQ_ERR_IO, "%s: read error: %s", path, strerror(e));
            return NULL;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int vq_fsync_dir(const char *path) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}
