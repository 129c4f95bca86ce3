/* bench_kernels.h: decode-attention and encode speed of every KV codec through the real store
 * (one layer, one KV head, a GQA group of 3 query heads), against f16 and a measured memcpy
 * ceiling; arms interleaved, inputs rotated over a pool of caches larger than the LLC. */
#ifndef VQ_BENCH_KERNELS_H
#define VQ_BENCH_KERNELS_H
#include "lab/vqlab.h"

#define VQ_BK_GROUP 3   /* query heads per KV head in the benchmark */

typedef struct vq_bk_params {
    const int *ns; int n_ns;              /* rows in the cache (context lengths) */
    const int *dims; int n_dims;          /* head_dim values */
    const char *const *specs; int n_specs;/* KV arms; NULL/0: every table row + the usual extras */
    const vq_kv_spec *const *parsed;      /* NULL, or specs parsed: then specs are only the arms'
                                             names and the list is taken as it is (no f16 added) */
    int reps;                             /* >= 1 (>= 5 for a result) */
    int threads;                          /* OpenMP threads for vq_kv_attend (1 = single-threaded) */
    size_t pool_bytes;                    /* each arm's caches together hold at least this much */
    int split;                            /* also time score and accumulate apart via the codec table */
    uint64_t seed;
} vq_bk_params;

/* One (N, d, spec) arm. Per-repeat vectors hold reps values (NULL when the arm failed). */
typedef struct vq_bk_arm {
    int n, d;
    const char *spec;                     /* as given */
    char norm[256];                       /* vq_kv_spec_str() of the cache */
    int ok;
    char why[256];                        /* when !ok: the store's message */
    int pool;                             /* distinct caches rotated through */
    size_t kv_bytes;                      /* vq_kv_bytes of one cache = bytes one step reads */
    double bits;                          /* vq_kv_bits_per_elem */
    double code_bits;                     /* the codecs' block bytes per element, K and V averaged (codes
                                             and per-block metadata; not the store's window or tables) */
    double *attend_s;                     /* seconds per decode step, per repeat: thread CPU time when
                                             single-threaded, else wall */
    double *attend_wall_s;                /* the same by wall clock */
    double *encode_rps;                   /* rows/s appended (K and V of one row), per repeat (CPU time) */
    double *score_s, *accum_s;            /* split: per step, per repeat (NULL without split) */
} vq_bk_arm;

typedef struct vq_bk_result {
    int n_arms;
    vq_bk_arm *arms;                      /* order: n outer, d, spec inner */
    int n_specs;
    const char **specs;                   /* the arms' specs (borrowed or static) */
    int reps, threads;
    size_t pool_bytes;
    size_t copy_bytes;                    /* memcpy buffer size */
    double *copy_bps;                     /* memcpy bytes copied per second (thread CPU time), per repeat */
    double *copy_wall_bps;                /* the same by wall clock */
    double *read_bps;                     /* read-only sweep bytes per second, per repeat */
    double load1_before, load1_after;     /* /proc/loadavg */
    char machine[512];
    char isa[32];
} vq_bk_result;

typedef void (*vq_bk_progress)(const char *what, void *user);

vq_status vq_bench_kernels(const vq_bk_params *p, vq_bk_result *r, vq_bk_progress cb, void *user,
                           vq_err *err);
void vq_bench_kernels_free(vq_bk_result *r);
#endif
