/* eval.h: what the CLI runs: generation, perplexity and the throughput benchmark.
 * Each takes a loaded model and a KV spec; none prints by itself (callbacks and result structs),
 * so the CLI only formats. */
#ifndef VQ_EVAL_H
#define VQ_EVAL_H
#include "model/model.h"
#include "model/sampler.h"

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

/* Called with the printable bytes of each generated token; return nonzero to stop. */
typedef int (*vq_token_cb)(const char *bytes, size_t n, int id, void *user);

vq_status vq_generate(const vq_model *m, const char *kv_spec, const int *prompt, int n_prompt,
                      const vq_gen_params *p, vq_token_cb cb, void *user, vq_gen_stats *st,
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
} vq_bench_sample;

/* Runs reps x ctxs x specs, interleaved (rep outermost, arms innermost), filling out[] in run
 * order (n = reps * n_ctxs * n_specs). */
vq_status vq_bench_run(const vq_model *m, const vq_bench_params *p, vq_bench_sample *out,
                       vq_progress_cb cb, void *user, vq_err *err);
#endif
