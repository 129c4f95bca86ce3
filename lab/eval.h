/* eval.h: the lab's own: one-shot generation, and the benchmarks' internal interface.
 * Each takes a loaded model and a KV spec; none prints (callbacks and result structs): the CLI
 * formats, through the wrappers of lab/vqlab.h (cli_api.c). */
#ifndef VQ_EVAL_H
#define VQ_EVAL_H
#include "lab/vqlab.h"
#include "session/lab_tap.h"
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

/* ---- perplexity: vq_perplexity / vq_perplexity_text (lab/vqlab.h) ---- */

#include "lab/bench.h"   /* throughput, bandwidth, resident memory */
/* vq_bench_share (bench_share.c) is declared in lab/vqlab.h */
#endif
