/* vqlab.h: the lab, VeloxQuant's measuring harness (perplexity, throughput and memory benchmarks,
 * eviction-score correlation, passkey retrieval, KV fidelity, calibration, the sharing and
 * attention-kernel benchmarks). Not part of libveloxquant: lab/ builds a static library of its own
 * that the CLI (tools/) and the tests link, on top of the product's public header (veloxquant.h)
 * and one narrow internal door (src/session/lab_tap.h). Functions here fill result structs and
 * never print; the CLI formats them. Every spec is parsed first (vq_kv_spec_parse), so a bad --kv
 * fails before any work. This interface may change with any commit; docs/api.md describes it. */
#ifndef VQ_LAB_H
#define VQ_LAB_H
#include "veloxquant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- perplexity: several KV arms scored over the same text ---- */
typedef enum vq_ppl_mode {
    VQ_PPL_DECODE = 0,             /* one token per forward: every prediction reads the cache */
    VQ_PPL_PREFILL = 1,            /* chunks of n_batch tokens, each attending to the cached history */
} vq_ppl_mode;
typedef enum vq_ppl_score {
    VQ_PPL_SCORE_ALL = 0,          /* every next-token prediction in a window */
    VQ_PPL_SCORE_SECOND_HALF = 1,  /* only predictions at window positions >= n_ctx/2, as
                                      llama.cpp's llama-perplexity scores (compare 1:1 with it) */
} vq_ppl_score;
typedef enum vq_ppl_split {
    VQ_PPL_SPLIT_WINDOWS = 0,      /* non-overlapping windows of n_ctx tokens of the whole text */
    VQ_PPL_SPLIT_PARAGRAPHS = 1,   /* text only: blank-line separated paragraphs, each BOS + its
                                      tokens cut at n_ctx, every prediction scored (llama2.c's way) */
} vq_ppl_split;
struct vq_ppl_result;   /* below: a window's figures (window_cb) */
typedef struct vq_ppl_params {
    int n_ctx;                     /* window length in tokens (>= 2) */
    vq_ppl_mode mode;
    vq_ppl_score score;
    int n_batch;                   /* prefill chunk; 0: 64 */
    long max_tokens;               /* windows: use only the first max_tokens tokens; 0: all */
    int first_scored;              /* > 0: first window position whose prediction counts
                                      (overrides score) */
    int bos_per_window;            /* windows: each window is BOS + n_ctx-1 text tokens */
    uint64_t kv_seed;              /* every arm's cache seed */
    int kl_vs_first;               /* arms > 0 also report KL(arm 0 || arm) per scored token */
    vq_ppl_split split;            /* vq_perplexity_text only */
    int max_paragraphs;            /* paragraphs: only the first N; 0: all */
    int serial_arms;               /* decode mode: each arm its own forward per token instead of
                                      one batched forward for all arms (same figures; tok/s per arm) */
    long first_window;             /* windows: skip the text's first N windows (the offset is
                                      first_window x window tokens; max_tokens still counts from
                                      the text's start); 0: from the start */
    long n_windows;                /* windows: score at most N windows; 0: every one left */
    /* windows and paragraphs: called after each window (paragraph) with its index in the text
     * (0-based, counting skipped ones) and, per arm, that window's figures (nll_sum, n_scored,
     * mean_nll, ppl, n_tokens; the rest 0); NULL: none */
    void (*window_cb)(long index, const struct vq_ppl_result *per_arm, int n_arms, void *user);
    void *window_user;
} vq_ppl_params;
vq_ppl_params vq_ppl_default_params(void);   /* n_ctx 512, decode, score all, batch 64 */
typedef struct vq_ppl_result {
    double nll_sum;                /* sum of -log p(target) over scored predictions */
    long n_scored;
    double mean_nll, ppl;          /* nll_sum / n_scored, exp of it */
    long n_tokens;                 /* tokens run through the model for this arm */
    double seconds;                /* wall time of this arm's forwards (batched: the shared pass) */
    size_t kv_bytes;               /* cache bytes at the end of the longest sequence scored */
    double kv_bits;                /* bits per element then */
    double kl_sum;                 /* kl_vs_first: sum over scored predictions of KL(arm 0 || arm) */
    double kl_mean;                /* kl_sum / n_scored */
    long n_units;                  /* windows or paragraphs scored */
} vq_ppl_result;
typedef void (*vq_progress_cb)(long done, long total, void *user);
/* Score n_specs KV arms over the same windows of tokens[0..n_tokens) (split must be windows).
 * Every arm is a session of its own; in decode mode the arms step together through one batched
 * forward (vq_decode_batch) unless serial_arms. out[n_specs]. Text shorter than one window, a bad
 * parameter or an arm that cannot be made: an error before any work (nothing in out). */
vq_status vq_perplexity(const vq_model *m, const vq_kv_spec *const *specs, int n_specs,
                        const int *tokens, long n_tokens, const vq_ppl_params *p,
                        vq_progress_cb cb, void *user, vq_ppl_result *out, vq_err *err);
/* The same over a text: windows tokenize the whole text without BOS; paragraphs as above.
 * A text with no paragraph, or shorter than one window, is VQ_ERR_RANGE. */
vq_status vq_perplexity_text(const vq_model *m, const vq_kv_spec *const *specs, int n_specs,
                             const char *text, size_t len, const vq_ppl_params *p,
                             vq_progress_cb cb, void *user, vq_ppl_result *out, vq_err *err);

/* Throughput: prefill then decode at each context fill, arms interleaved per repeat (rep
 * outermost), the text rotated per repeat. out[reps * n_ctxs * n_specs] in run order. */
typedef struct vq_tput_params {
    const int *ctxs; int n_ctxs;
    const vq_kv_spec *const *specs; int n_specs;
    int reps, n_gen, batch;
    const int *text; long n_text;  /* real token ids to prefill with */
    uint64_t kv_seed;
    int fill;                      /* > 0: fast fill: each arm prefills text[0..fill) once, every
                                      sample's cache repeats those rows to ctx (speed and bytes
                                      only; no prefill timed); 0: a real prefill of ctx tokens */
} vq_tput_params;
typedef struct vq_tput_sample {
    int ctx_index, spec_index, rep;
    double prefill_tps, decode_tps;
    double prefill_s, decode_s;    /* the timed regions */
    size_t kv_bytes;
    long rss_delta;                /* resident bytes after the run minus before its session (the
                                      cache, and the scratch as the run touched it) */
    size_t peak_rss;               /* VmHWM over this sample alone; 0 when the reset is refused */
    double load1;                  /* 1-minute load average when the sample started */
    double decode_cpu_s;           /* process CPU seconds of the timed decode, every thread */
    double fill_s;                 /* fast fill: seconds to fill to ctx (prefill_* are then 0) */
} vq_tput_sample;
vq_status vq_bench_throughput(const vq_model *m, const vq_tput_params *p, vq_tput_sample *out,
                              vq_progress_cb cb, void *user, vq_err *err);
/* Read-only sweep over `bytes` with the decode threads; gbps[reps] per pass (1e9 bytes/s). */
vq_status vq_bench_read_bandwidth(size_t bytes, int reps, double *gbps, vq_err *err);

/* Resident memory of one cache filled with real rows (one arm per process): RSS read at each of
 * ctxs (ascending) while prefilling tok through a cache of spec. out[n_ctxs]. */
typedef struct vq_rss_point {
    int ctx;
    size_t kv_bytes;
    double kv_bits;
    size_t rss, rss_trim;          /* resident bytes, and right after malloc_trim(0) */
} vq_rss_point;
typedef struct vq_rss_result {
    size_t rss_base;               /* model loaded and warmed, scratch made, no cache */
    size_t rss_end_trim;
    size_t kv_bytes_empty;         /* the cache made, no rows yet */
    double fill_s;                 /* seconds to fill to the largest ctx */
    double prefill_s;              /* fill > 0: the source cache's real prefill of fill tokens */
} vq_rss_result;
/* fill > 0: the cache repeats the rows of a real fill-token prefill (made before the baseline in
 * a source cache of the same spec) instead of prefilling every ctx token: same bytes, not the
 * same values. */
vq_status vq_bench_rss(const vq_model *m, const vq_kv_spec *spec, const int *tok, long n_tok,
                       const int *ctxs, int n_ctxs, int batch, int fill, uint64_t seed,
                       vq_rss_point *out, vq_rss_result *res, vq_err *err);

/* Token eviction's score fidelity (docs/eviction.md): per spec (each with evict=POLICY and a
 * budget covering every row) and layer, Spearman's rank correlation of the policy's scores after
 * the text's first `at` tokens with the attention the next `future` tokens' queries pay to those
 * rows (measured by an evict=h2o cache of the same codec). rho[n_specs * n_layers]. */
vq_status vq_evict_correlation(const vq_model *m, const vq_kv_spec *const *specs, int n_specs,
                               const int *tok, int n_tok, int at, int future, double *rho,
                               vq_err *err);

/* Passkey retrieval (docs/needle.md): a number hidden at a depth of filler text. */
typedef enum vq_needle_fill { VQ_NEEDLE_CLASSIC = 0, VQ_NEEDLE_TEXT = 1 } vq_needle_fill;
typedef enum vq_needle_fmt { VQ_NEEDLE_PLAIN = 0, VQ_NEEDLE_CHAT = 1 } vq_needle_fmt;
typedef struct vq_needle_config {
    const int *ctxs; int n_ctxs;
    const double *depths; int n_depths;
    const vq_kv_spec *const *specs; int n_specs;
    int trials, batch, digits, n_gen;
    vq_needle_fill filler;
    const char *filler_text;       /* VQ_NEEDLE_TEXT: the text, NUL-terminated */
    vq_needle_fmt format;
    uint64_t seed, kv_seed;
} vq_needle_config;
typedef struct vq_needle_outcome {
    int ctx_index, depth_index, spec_index, trial;
    int ctx;
    double depth, depth_actual;
    int n_prompt, needle_at, n_gen;
    char number[16];
    char gen[512];                 /* the generated text (truncated if longer) */
    int correct;
    double seconds;
} vq_needle_outcome;
typedef void (*vq_needle_outcome_cb)(const vq_needle_outcome *t, long done, long total, void *user);
/* Checks everything first, then runs ctx x depth x trial, each prompt through every arm;
 * out[n_ctxs * n_depths * trials * n_specs] in run order. */
vq_status vq_needle(const vq_model *m, const vq_needle_config *c, vq_needle_outcome *out,
                    vq_needle_outcome_cb cb, void *user, vq_err *err);
typedef struct vq_needle_prompt_info {
    int n, needle_at, needle_len, filler_total, filler_before, max_unit;
    char number[16];
} vq_needle_prompt_info;
/* The first trial's prompt (ctxs[0], depths[0]) as text (vq_free) with its token counts. */
char *vq_needle_first_prompt(const vq_model *m, const vq_needle_config *c,
                             vq_needle_prompt_info *info, vq_err *err);

/* RULER-style synthetic tasks (docs/tasks.md): needles with keys, variable tracking, common words.
 * A prompt holds at most ctx - n_gen tokens and lists the answers the generated text must hold;
 * a trial's score is the fraction of them found (case-insensitive). */
typedef enum vq_task_kind {
    VQ_TASK_NIAH_SINGLE,        /* one "special magic number" for a key; asked for it */
    VQ_TASK_NIAH_MULTIKEY,      /* four keys with a number each; asked for one key's */
    VQ_TASK_NIAH_MULTIVALUE,    /* four numbers for one key; asked for all four */
    VQ_TASK_VT,                 /* a chain VAR A = N, VAR B = VAR A, ... (5 names) in noise; all names */
    VQ_TASK_CWE,                /* a numbered word list; the 10 most frequent words */
    VQ_TASK_N
} vq_task_kind;
#define VQ_TASK_ANSWER_LEN 16
typedef struct vq_task_params {
    vq_task_kind kind;
    int ctx, n_gen;
    uint64_t seed;
    const char *filler_text;    /* needles' filler: sentences of this text (NULL: RULER's noise) */
    int chat;                   /* the prompt inside the model's chat template */
} vq_task_params;
typedef struct vq_task_prompt {
    int *tok; int n;
    char answers[10][VQ_TASK_ANSWER_LEN]; int n_answers;
} vq_task_prompt;
const char *vq_task_name(vq_task_kind k);
int vq_task_find(const char *name);                 /* -1: unknown */
int vq_task_default_n_gen(vq_task_kind k);
vq_status vq_task_build(const vq_model *m, const vq_task_params *p, vq_task_prompt *out, vq_err *err);
void vq_task_prompt_free(vq_task_prompt *pr);
double vq_task_score(const vq_task_prompt *pr, const char *gen);
uint64_t vq_task_trial_seed(uint64_t seed, int kind, int ctx, int trial);
typedef struct vq_tasks_config {
    const vq_task_kind *kinds; int n_kinds;
    const int *ctxs; int n_ctxs;
    const vq_kv_spec *const *specs; int n_specs;
    int trials, batch, n_gen;   /* n_gen 0: each task's default */
    const char *filler_text;
    int chat;
    uint64_t seed, kv_seed;
} vq_tasks_config;
typedef struct vq_task_outcome {
    vq_task_kind kind;
    int ctx_index, spec_index, trial, ctx, n_prompt, n_gen, n_answers;
    char answers[10][VQ_TASK_ANSWER_LEN];
    char gen[1024];
    double score, seconds;
} vq_task_outcome;
typedef void (*vq_task_outcome_cb)(const vq_task_outcome *o, long done, long total, void *user);
/* Builds every prompt first (refusing what cannot be built), then runs task x ctx x trial, each
 * prompt through every arm; out[n_kinds * n_ctxs * trials * n_specs] in run order. */
vq_status vq_tasks_run(const vq_model *m, const vq_tasks_config *c, vq_task_outcome *out,
                       vq_task_outcome_cb cb, void *user, vq_err *err);

/* KV fidelity: the model runs once with an f32 cache capturing every layer's q, k, v after RoPE;
 * each spec then gets the same rows through its own store, layer by layer. */
typedef struct vq_kvfid_capture vq_kvfid_capture;
vq_kvfid_capture *vq_kv_fidelity_capture(const vq_model *m, const int *tok, int n, vq_err *err);
void vq_kv_fidelity_capture_free(vq_kvfid_capture *c);
typedef struct vq_kv_fidelity_stats { double key_cos, val_cos, kl, rel_err; } vq_kv_fidelity_stats;
typedef struct vq_kv_fidelity_result {
    int ok;                        /* 0: unusable here (e.g. head_dim), why says so */
    char why[256], normalized[256];
    double bits, code_bits;        /* whole store / the codecs' blocks only, per element */
    size_t bytes;
    int n_layers;
    vq_kv_fidelity_stats *layer;   /* n_layers */
    vq_kv_fidelity_stats mean, worst;
    int worst_layer[4];            /* key_cos, val_cos, kl, rel_err */
} vq_kv_fidelity_result;
vq_status vq_kv_fidelity_eval(const vq_kvfid_capture *c, const vq_kv_spec *spec, uint64_t seed,
                              vq_kv_fidelity_result *r, vq_err *err);
void vq_kv_fidelity_result_free(vq_kv_fidelity_result *r);
/* The default arms (f32, every codec, the turboquant_mse ladder, q4_0:rotate=1); returns the count. */
int vq_kv_fidelity_default_specs(char (*out)[96], int cap);

/* Calibration (docs/calibration-format.md): the model runs over tok[0..n_tok) in windows of ctx
 * tokens (each from position 0) and per layer and head the statistics of its q, k, v after RoPE
 * (per-channel means and second moments, per-RoPE-pair query x key energy) are written to
 * out_path atomically, with the model's identity. KV specs point at it with calib=FILE. */
typedef struct vq_calibrate_info {
    long n_tokens;                 /* tokens (rows per layer) the statistics are over */
    int n_windows;
    size_t file_bytes;
    uint64_t config_hash;          /* of the model's config, as recorded in the file */
} vq_calibrate_info;
vq_status vq_calibrate(const vq_model *m, const int *tok, int n_tok, int ctx, const char *out_path,
                       vq_calibrate_info *info, vq_err *err);
/* The same, plus the VecInfer section (codec vecinfer, docs/codecs-vecinfer.md) when vi_sub_k > 0:
 * per (layer, KV head) the key smoothing λ and k-means codebooks of 16 entries for key sub-vectors
 * of vi_sub_k and value sub-vectors of vi_sub_v coordinates (1, 2, 4 or 8), trained on the first
 * vi_rows rows of each layer (16..2^20); the smoothing is λ = (channel max |k|)^vi_alpha (0 < alpha
 * <= 1; the paper: 1; calibrate's default: 0.5); vi_vnorm 1 trains the value codebooks on unit-norm rows (the file's flag:
 * the codec then stores each value row's fp16 norm). */
vq_status vq_calibrate_vi(const vq_model *m, const int *tok, int n_tok, int ctx, int vi_sub_k,
                          int vi_sub_v, int vi_rows, double vi_alpha, int vi_vnorm, const char *out_path,
                          vq_calibrate_info *info, vq_err *err);
/* A calibration file's layers ranked by their query x key energy E_l = Σ_{KV heads} Σ_{RoPE pairs}
 * pair_energy: a key codec of a given relative error shifts a layer's scores by an amount whose
 * mean square grows with E_l, so the layers with the most are where more key bits help most (the
 * per-layer budget of issue 12: `--kv-layers` / `@LAYERS=SPEC` with the top layers).
 * docs/lowbit-keys.md "Per-layer budgets from calibration" measures it. */
typedef struct vq_calib_layers {
    char model[64];
    int n_layers, n_heads, n_kv_heads, head_dim;
    long n_tokens;
    double *energy;                /* [n_layers]: E_l */
    int *rank;                     /* [n_layers]: layers by E_l, highest first (ties: lower layer) */
} vq_calib_layers;
vq_status vq_calib_layers_read(const char *path, vq_calib_layers *out, vq_err *err);
void vq_calib_layers_free(vq_calib_layers *l);

/* Sharing benchmark: n_procs processes each load model_path themselves and decode (1 thread,
 * f16 cache); while all decode, each one's /proc/PID/smaps gives the Rss and Pss of the
 * weights' mapping (the file's; with copy_weights the anonymous copy) and smaps_rollup its
 * totals. The processes are stopped before this returns. */
#define VQ_SHARE_MAX 16
typedef struct vq_bench_share_params {
    const char *model_path, *tokenizer_path;
    int n_procs, n_decode;        /* decode steps before the measurement */
    int copy_weights;
} vq_bench_share_params;
typedef struct vq_bench_share_proc {
    int pid;
    uint64_t map_rss_kb, map_pss_kb;   /* the weights' mapping */
    uint64_t rss_kb, pss_kb;           /* the whole process */
} vq_bench_share_proc;
typedef struct vq_bench_share_result {
    uint64_t file_bytes;
    int n_procs;
    vq_bench_share_proc proc[VQ_SHARE_MAX];
    uint64_t total_map_pss_kb, total_pss_kb, total_rss_kb;
} vq_bench_share_result;
vq_status vq_bench_share(const vq_bench_share_params *p, vq_bench_share_result *r, vq_err *err);

/* Attention-kernel benchmark: one layer, one KV head, GQA group of 3, through the real store. */
#define VQ_BK_GROUP_SIZE 3
typedef struct vq_bench_kernels_params {
    const int *ns; int n_ns;       /* rows in the cache */
    const int *dims; int n_dims;   /* head_dim values */
    const vq_kv_spec *const *specs; const char *const *labels; int n_specs;  /* 0: the defaults */
    int reps, threads;
    size_t pool_bytes;
    int split;
    uint64_t seed;
} vq_bench_kernels_params;
typedef struct vq_bk_arm_result {
    int n, d;
    const char *label;
    char normalized[256];
    int ok;
    char why[256];
    int pool;
    size_t kv_bytes;
    double bits;
    const double *attend_s, *attend_wall_s, *encode_rps;   /* reps each */
    const double *score_s, *accum_s;                       /* split only, else NULL */
    double code_bits;   /* the codecs' block bytes per element, K and V averaged (no window or tables) */
} vq_bk_arm_result;
typedef struct vq_bench_kernels_result {
    int n_arms;
    vq_bk_arm_result *arms;        /* n outer, d, spec inner; f16 first per (n, d) */
    int n_specs, reps, threads;
    size_t pool_bytes, copy_bytes;
    const double *copy_bps, *copy_wall_bps, *read_bps;     /* 2 * reps each */
    double load1_before, load1_after;
    char machine[512], isa[32];
    void *impl;
} vq_bench_kernels_result;
vq_status vq_bench_kernels_run(const vq_bench_kernels_params *p, vq_bench_kernels_result *r,
                               void (*progress)(const char *what, void *user), void *user,
                               vq_err *err);
void vq_bench_kernels_result_free(vq_bench_kernels_result *r);

#ifdef __cplusplus
}
#endif
#endif /* VQ_LAB_H */
