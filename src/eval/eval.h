/* eval.h: what the CLI runs: generation, perplexity and the throughput benchmark.
 * Each takes a loaded model and a KV spec; none prints (callbacks and result structs): the CLI
 * formats, through the wrappers in veloxquant.h's experimental section (cli_api.c). */
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
vq_status vq_generate_spec(const vq_model *m, const vq_kv_spec *spec, const int *prompt, int n_prompt,
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

#include "eval/bench.h"   /* throughput, bandwidth, resident memory */
#endif
