/* needle.h: passkey retrieval ("needle in a haystack"): a random number hidden at a chosen depth
 * of filler text, asked for at the end; the model answers greedily and a trial counts as correct
 * when the number appears in what it generated. Prompts are built from separately tokenized
 * pieces, so their length and the needle's position are exact in tokens. */
#ifndef VQ_NEEDLE_H
#define VQ_NEEDLE_H
#include "lab/vqlab.h"

typedef enum { VQ_NEEDLE_FILLER_CLASSIC = 0, VQ_NEEDLE_FILLER_TEXT = 1 } vq_needle_filler;
typedef enum { VQ_NEEDLE_FMT_PLAIN = 0, VQ_NEEDLE_FMT_CHAT = 1 } vq_needle_format;

typedef struct vq_needle_params {
    int ctx;                    /* whole context: prompt (ctx - n_gen tokens) + the answer */
    double depth;               /* [0, 1]: fraction of the filler tokens before the needle */
    int digits;                 /* length of the number, 1..9 */
    int n_gen;                  /* answer tokens generated greedily (room kept for them) */
    vq_needle_filler filler;    /* classic repeated sentences, or sentences of filler_text */
    const char *filler_text;    /* FILLER_TEXT: the text (WikiText-2 raw style), NUL-terminated */
    vq_needle_format format;    /* plain text, or the model's chat template (ChatML) around it */
    uint64_t seed;              /* picks the number and, for FILLER_TEXT, where the text starts */
} vq_needle_params;

typedef struct vq_needle_prompt {
    int *tok; int n;            /* the prompt: n == ctx - n_gen */
    int needle_at, needle_len;  /* the needle's first token index and its token count */
    int filler_total;           /* filler tokens in the prompt */
    int filler_before;          /* of which before the needle */
    int max_unit;               /* longest filler sentence in tokens: the depth's resolution */
    char number[16];            /* the hidden number, decimal */
} vq_needle_prompt;

/* Build one prompt. Errors: ctx too small for the fixed parts (message gives the minimum),
 * bad depth/digits/n_gen, no usable text for FILLER_TEXT, no chat template for FMT_CHAT. */
vq_status vq_needle_build(const vq_model *m, const vq_needle_params *p, vq_needle_prompt *out, vq_err *err);
void      vq_needle_prompt_free(vq_needle_prompt *pr);

/* The smallest ctx that leaves at least one filler token with these parameters. */
int vq_needle_min_ctx(const vq_model *m, const vq_needle_params *p, vq_err *err);

typedef struct vq_needle_trial {
    int ctx_index, depth_index, spec_index, trial;
    int ctx;                    /* requested context */
    double depth;               /* requested depth */
    double depth_actual;        /* filler_before / filler_total */
    int n_prompt, needle_at;
    char number[16];
    char gen[512];              /* the generated text (printable bytes, truncated if longer) */
    int n_gen;                  /* tokens generated */
    int correct;                /* strstr(gen, number) != NULL */
    double seconds;             /* prefill + decode */
} vq_needle_trial;

/* Run one prompt through one KV arm greedily and fill *out (its indices are left to the caller). */
vq_status vq_needle_trial_run(const vq_model *m, const vq_kv_spec *kv_spec, const vq_needle_prompt *pr,
                              int n_gen, int batch, uint64_t kv_seed, vq_needle_trial *out, vq_err *err);

typedef void (*vq_needle_cb)(const vq_needle_trial *t, long done, long total, void *user);

typedef struct vq_needle_run_params {
    const int *ctxs; int n_ctxs;
    const double *depths; int n_depths;
    const char *const *specs; int n_specs;
    const vq_kv_spec *const *parsed;    /* the specs parsed (NULL: parsed here from specs) */
    int trials;                 /* per (ctx, depth), each with its own number */
    int batch;                  /* prefill chunk (0: 64) */
    uint64_t kv_seed;
    vq_needle_params base;      /* digits, n_gen, filler, format, seed; ctx and depth are set per trial */
} vq_needle_run_params;

/* Checks every argument (ctx range and room, depths, arms, trials) before running anything, then
 * runs ctx x depth x trial, each prompt through every arm in turn (so the arms see identical
 * prompts), filling out[] in run order: n = n_ctxs * n_depths * trials * n_specs. */
vq_status vq_needle_run(const vq_model *m, const vq_needle_run_params *p, vq_needle_trial *out,
                        vq_needle_cb cb, void *user, vq_err *err);

/* The seed of trial `trial` at (ctx, depth index) derived from the run's seed (documented so a
 * single trial can be rebuilt). */
uint64_t vq_needle_trial_seed(uint64_t seed, int ctx, int depth_index, int trial);
#endif
