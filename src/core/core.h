/* core.h: the pieces every layer uses: status codes with a message, aligned allocation,
 * a seeded RNG that gives the same numbers on every machine, fp16/bf16 conversion,
 * CPU feature detection and a monotonic clock. No global mutable state lives here. */
#ifndef VQ_CORE_H
#define VQ_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include "veloxquant.h"   /* vq_status */

/* ---- errors: a code plus a message naming what was wrong and where ---- */
/* vq_err (code + message) is public: include/veloxquant.h */

/* Set err (if non-NULL) and return code. printf-style message. */
vq_status vq_err_set(vq_err *err, vq_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void vq_err_clear(vq_err *err) { if (err) { err->code = VQ_OK; err->msg[0] = 0; } }

/* ---- memory ---- */
void *vq_aligned_alloc(size_t bytes);          /* 64-byte aligned, zeroed; NULL on failure */
void  vq_aligned_free(void *p);
/* Hand the allocator's free pages back to the OS (glibc: malloc_trim). Freed blocks below the heap
 * top stay resident otherwise; a cache that has just dropped pages calls it so that RSS follows
 * what it holds. A no-op where the C library has no such call. */
void  vq_heap_release(void);

/* ---- RNG: xoshiro256** seeded through splitmix64; pure integer, so identical everywhere ---- */
typedef struct vq_rng { uint64_t s[4]; } vq_rng;
void     vq_rng_seed(vq_rng *r, uint64_t seed);
uint64_t vq_rng_u64(vq_rng *r);
double   vq_rng_uniform(vq_rng *r);            /* [0, 1), 53 bits */
float    vq_rng_uniformf(vq_rng *r);           /* [0, 1), 24 bits */
double   vq_rng_gauss(vq_rng *r);              /* N(0,1), Box-Muller, no cached state */
int      vq_rng_sign(vq_rng *r);               /* +1 / -1 */

/* ---- half precision ---- */
typedef uint16_t vq_f16;
typedef uint16_t vq_bf16;
float  vq_f16_to_f32(vq_f16 h);
vq_f16 vq_f32_to_f16(float f);                 /* round to nearest even; overflow -> inf */
static inline float vq_bf16_to_f32(vq_bf16 h) {
    union { uint32_t u; float f; } v; v.u = (uint32_t)h << 16; return v.f;
}
vq_bf16 vq_f32_to_bf16(float f);
void vq_f16_to_f32_row(const vq_f16 *x, float *y, size_t n);
void vq_f32_to_f16_row(const float *x, vq_f16 *y, size_t n);

/* ---- CPU features (detected once, read-only after) ---- */
typedef enum vq_isa { VQ_ISA_SCALAR = 0, VQ_ISA_AVX2 = 1, VQ_ISA_AVX512 = 2 } vq_isa;
vq_isa      vq_cpu_best_isa(void);             /* what this CPU supports (AVX2 needs FMA+F16C) */
const char *vq_isa_name(vq_isa isa);
void        vq_cpu_describe(char *buf, size_t n); /* "model name, N cores, flags" */

/* ---- time ---- */
double vq_now_s(void);                         /* CLOCK_MONOTONIC seconds */

/* ---- memory measured by the OS ---- */
size_t vq_rss_bytes(void);                     /* current resident set (from /proc/self/statm) */
size_t vq_peak_rss_bytes(void);                /* VmHWM from /proc/self/status */

/* ---- small helpers ---- */
#define VQ_MIN(a, b) ((a) < (b) ? (a) : (b))
#define VQ_MAX(a, b) ((a) > (b) ? (a) : (b))
#define VQ_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Open path for reading; it must be a regular file. The open is non-blocking, so a FIFO (which
 * would wait for a writer) or a device returns at once, and fstat then refuses anything but a
 * regular file, saying what it is ("is a directory", "is a FIFO", ...). Returns the descriptor
 * (O_CLOEXEC, back in blocking mode) and the file's size, or -1 with err set (VQ_ERR_IO). */
int vq_open_regular(const char *path, uint64_t *size, vq_err *err);

/* Files read whole into memory (tokenizer .bin, texts) are at most this big: a wrong path to a
 * huge file fails with a message instead of exhausting memory. Models are mapped, not read. */
#define VQ_READ_FILE_MAX ((uint64_t)1 << 30)
#define VQ_READ_FILE_MAX_TEXT "1 GiB"
/* Read a whole regular file (vq_open_regular) of at most VQ_READ_FILE_MAX bytes into memory,
 * NUL-terminated. Returns NULL and sets err on failure (over the limit: VQ_ERR_RANGE). */
char *vq_read_file(const char *path, size_t *len, vq_err *err);

/* fsync the folder holding path, so that a rename() into it is on disk (the last step of an atomic
 * write: temp file beside it, fsync, rename, then this). 0, or -1 with errno set. */
int vq_fsync_dir(const char *path);

#endif
