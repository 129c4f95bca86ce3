/* core.c: error messages, aligned allocation, the portable RNG, fp16/bf16 conversion,
 * CPU detection, clocks and OS-measured memory. */
#define _GNU_SOURCE
#include "core/core.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

char *vq_read_file(const char *path, size_t *len, vq_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { vq_err_set(err, VQ_ERR_IO, "%s: cannot open: %s", path, strerror(errno)); return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) { fclose(f); vq_err_set(err, VQ_ERR_NOMEM, "%s: out of memory", path); return NULL; }
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) { free(buf); fclose(f); vq_err_set(err, VQ_ERR_NOMEM, "%s: out of memory", path); return NULL; }
        buf = nb; cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); vq_err_set(err, VQ_ERR_IO, "%s: read error", path); return NULL; }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}
