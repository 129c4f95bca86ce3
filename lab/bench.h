/* bench.h: the throughput benchmark, the read-bandwidth sweep and the resident-memory fill
 * (lab/bench.c). Apart from eval.h so that cli_api.c can include it. Nothing here prints. */
#ifndef VQ_EVAL_BENCH_H
#define VQ_EVAL_BENCH_H
#include "lab/vqlab.h"

/* ---- throughput benchmark ---- */
typedef struct vq_bench_params {
    const int *ctxs; int n_ctxs;          /* context fills to measure decode at */
    const vq_kv_spec *const *specs; int n_specs;  /* KV arms, parsed */
    int reps, n_gen, batch;
    const int *text; long n_text;         /* real token ids to prefill with (rotated per repeat) */
    uint64_t kv_seed;
    int fill;                             /* > 0: fast fill (docs/benchmarks.md): per arm, one session
                                             prefills text[0..fill) for real, once; every sample's cache
                                             repeats its rows to ctx (vq_lab_session_fill_repeat), no
                                             prefill is timed. 0: each sample prefills ctx real tokens */
} vq_bench_params;

typedef struct vq_bench_sample {
    int ctx_index, spec_index, rep;
    double prefill_tps, decode_tps;
    size_t kv_bytes;
    long rss_delta;                       /* resident bytes after the run minus before the session (its
                                             cache, and its scratch as the run touched it) */
    /* additions by bench: */
    double prefill_s, decode_s;           /* the timed regions themselves */
    size_t peak_rss;                      /* VmHWM over this sample alone (reset before it), 0 if
                                             the kernel does not allow the reset */
    double load1;                         /* 1-minute load average when the sample started */
    double decode_cpu_s;                  /* process CPU seconds over the timed decode (all threads) */
    double fill_s;                        /* fast fill: seconds to repeat the rows to ctx (then
                                             prefill_s and prefill_tps are 0) */
} vq_bench_sample;

/* Runs reps x ctxs x specs, interleaved (rep outermost, arms innermost), filling out[] in run
 * order (n = reps * n_ctxs * n_specs). */
vq_status vq_bench_run(const vq_model *m, const vq_bench_params *p, vq_bench_sample *out,
                       vq_progress_cb cb, void *user, vq_err *err);

/* ---- additions by bench: memory bandwidth, honest resident memory, the report ---- */
/* Read-only sweep over a buffer of `bytes` (filled first, so every page is real), with the
 * OpenMP threads decode uses; gbps[reps] gets each pass in GB/s (1e9 bytes/s). Returns 0 or -1
 * (out of memory). */
int vq_bench_read_bw(size_t bytes, int reps, double *gbps);

/* Resident memory of one cache filled with real rows, for a fresh process (one arm per process:
 * an allocator that keeps freed pages would otherwise blur deltas between arms). */
typedef struct vq_bench_rss_point {
    int ctx;                  /* rows held by every layer */
    size_t kv_bytes;          /* vq_kv_bytes then (the cache's own account) */
    double kv_bits;           /* vq_kv_bits_per_elem then */
    size_t rss;               /* resident bytes of the process then (/proc/self/statm) */
    size_t rss_trim;          /* the same right after malloc_trim(0): freed scratch the allocator
                                 kept (per-thread arenas) given back; held memory cannot be */
} vq_bench_rss_point;
typedef struct vq_bench_rss_result {
    size_t rss_base;          /* after model load, a warm-up forward (every weight page read,
                                 the codec's code paged in), scratch made, malloc_trim: no cache */
    size_t rss_end_trim;      /* after the last point and malloc_trim(0) (allocator slack dropped) */
    size_t kv_bytes_empty;    /* the cache created, no rows yet (page tables, window, codec state) */
    double fill_s;            /* seconds to prefill (or fast-fill) to the largest ctx */
    double prefill_s;         /* fast fill: seconds of the real prefill of the source cache */
} vq_bench_rss_result;
/* Prefill tok[0 .. max(ctxs)) in chunks of `batch` through a cache of `spec`, reading the RSS at
 * each ctx of ctxs (ascending); out[n_ctxs]. Call it once per process, before any other cache.
 * fill > 0 (fast fill): a source cache of the same spec prefills tok[0 .. fill) for real before
 * the RSS baseline (so it is in the baseline, not in a delta), and the measured cache is filled
 * from its rows repeated (vq_lab_kv_fill_repeat): the same bytes as a real prefill, not the same
 * values. */
vq_status vq_bench_rss_fill(const vq_model *m, const vq_kv_spec *spec, const int *tok, long n_tok,
                            const int *ctxs, int n_ctxs, int batch, int fill, uint64_t seed,
                            vq_bench_rss_point *out, vq_bench_rss_result *res, vq_err *err);

#endif
