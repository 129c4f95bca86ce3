/* eval.h: what the CLI runs: generation, perplexity and the throughput benchmark.
 * Each takes a loaded model and a KV spec; none prints by itself (callbacks and result structs),
 * so the CLI only formats. */
#ifndef VQ_EVAL_H
#define VQ_EVAL_H
#include "model/model.h"
#include "model/sampler.h"
#include "session/session_impl.h"
#include <stdio.h>

/* ---- generation ---- */
typedef struct vq_gen_params {
    int n_predict;          /* tokens to generate (stops earlier at end-of-generation) */
    int n_ctx;              /* context size: prompt + generated must fit */
    int batch;              /* prefill chunk */
    vq_sampler_params sp;
    uint64_t kv_seed;
} vq_gen_params;

typedef struct vq_gen_stats {
    int n_prompt, n_gen;
    double t_prefill, t_decode;     /* seconds */
    size_t kv_bytes;
    double kv_bits_per_elem;
    int stopped_eog;
} vq_gen_stats;

/* One-shot generation on a session made and freed here (vq_session_generate does the work). */
vq_status vq_generate(const vq_model *m, const char *kv_spec, const int *prompt, int n_prompt,
                      const vq_gen_params *p, vq_text_cb cb, void *user, vq_gen_stats *st,
                      vq_err *err);

/* ---- perplexity ---- */
typedef enum { VQ_PPL_DECODE = 0, VQ_PPL_PREFILL = 1 } vq_ppl_mode;
typedef struct vq_ppl_acc {
    double nll_sum;
    long n_scored;
    long n_tokens;          /* tokens run through the model */
    double seconds;
    size_t kv_bytes;        /* the cache's bytes held at the end of the longest sequence scored */
    double kv_bits;         /* its bits per element then (vq_kv_bits_per_elem) */
} vq_ppl_acc;

/* Score one sequence: every next token from position `first_scored`+1 on (predictions made at
 * positions first_scored .. n-2). decode: one token per forward, every prediction reads the
 * cache; prefill: chunks of `batch`, each chunk attending to the cached history. The cache is
 * cleared first. Adds into acc. */
vq_status vq_ppl_sequence(const vq_model *m, vq_fwd *f, vq_kv *kv, const int *tok, int n,
                          int first_scored, vq_ppl_mode mode, int batch, vq_ppl_acc *acc, vq_err *err);


typedef void (*vq_progress_cb)(long done, long total, void *user);

typedef struct vq_ppl_params {
    int ctx;                /* window length in tokens */
    vq_ppl_mode mode;
    int batch;              /* prefill chunk */
    long max_tokens;        /* 0: all of the text */
    int first_scored;       /* first position whose next-token prediction counts (0 = all) */
    int bos_per_window;     /* put BOS at the start of every window/paragraph */
    int max_paragraphs;     /* paragraph mode: 0 = all */
    uint64_t kv_seed;
} vq_ppl_params;

/* Non-overlapping windows of ctx tokens over tokens[0..n) (cut at max_tokens). With
 * bos_per_window, each window is BOS + ctx-1 text tokens. */
vq_status vq_perplexity_windows(const vq_model *m, const char *kv_spec, const int *tok, long n,
                                const vq_ppl_params *p, vq_progress_cb cb, void *user,
                                vq_ppl_acc *acc, vq_err *err);

/* Decode mode over several KV arms in one pass: the same windows as vq_perplexity_windows, every
 * arm's cache fed the same token at each step through vq_forward_arms (weights read once per step
 * for all arms). accs[a] gets arm a's figures; seconds is the shared wall time of the pass. */
vq_status vq_perplexity_windows_arms(const vq_model *m, const char *const *specs, int n_specs,
                                     const int *tok, long n, const vq_ppl_params *p,
                                     vq_progress_cb cb, void *user, vq_ppl_acc *accs, vq_err *err);

/* llama2.c convention: text split on blank lines into paragraphs; each is [BOS] + its tokens,
 * cut at ctx; every next token from position 1 on is scored. */
vq_status vq_perplexity_paragraphs(const vq_model *m, const char *kv_spec, const char *text,
                                   const vq_ppl_params *p, vq_progress_cb cb, void *user,
                                   vq_ppl_acc *acc, int *n_paragraphs, vq_err *err);

/* ---- throughput benchmark ---- */
typedef struct vq_bench_params {
    const int *ctxs; int n_ctxs;          /* context fills to measure decode at */
    const char *const *specs; int n_specs;/* KV arms */
    int reps, n_gen, batch;
    const int *text; long n_text;         /* real token ids to prefill with (rotated per repeat) */
    uint64_t kv_seed;
} vq_bench_params;

typedef struct vq_bench_sample {
    int ctx_index, spec_index, rep;
    double prefill_tps, decode_tps;
    size_t kv_bytes;
    long rss_delta;                       /* resident bytes after the run minus before the cache */
    /* additions by bench: */
    double prefill_s, decode_s;           /* the timed regions themselves */
    size_t peak_rss;                      /* VmHWM over this sample alone (reset before it), 0 if
                                             the kernel does not allow the reset */
    double load1;                         /* 1-minute load average when the sample started */
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
    double fill_s;            /* seconds to prefill to the largest ctx */
} vq_bench_rss_result;
/* Prefill tok[0 .. max(ctxs)) in chunks of `batch` through a cache of `spec`, reading the RSS at
 * each ctx of ctxs (ascending); out[n_ctxs]. Call it once per process, before any other cache. */
vq_status vq_bench_rss_fill(const vq_model *m, const char *spec, const int *tok, long n_tok,
                            const int *ctxs, int n_ctxs, int batch, uint64_t seed,
                            vq_bench_rss_point *out, vq_bench_rss_result *res, vq_err *err);

/* The throughput report: medians, the baseline's noise floor, ratios, the physical limit. */
typedef struct vq_bench_report_in {
    const char *command, *machine, *model_path, *isa;
    size_t model_bytes;       /* weight bytes read per token (the model file: an upper bound) */
    int threads;
    const vq_bench_params *p;
    const vq_bench_sample *samples;       /* reps * n_ctxs * n_specs, run order */
    const double *bw_gbps; int n_bw;      /* read-bandwidth passes (vq_bench_read_bw) */
    size_t bw_bytes;
    size_t peak_rss;                      /* whole process */
} vq_bench_report_in;
void vq_bench_report(FILE *f, const vq_bench_report_in *in, int json);
#endif
