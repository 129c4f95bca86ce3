/* veloxquant.h: the public API of libveloxquant, the one header a program includes.
 *
 * VeloxQuant runs language models (GGUF files, llama2.c checkpoints) on x86-64 CPUs with a KV
 * cache that is really compressed: the cache stores codes and attention reads them directly.
 *
 * Conventions (in the manner of zstd.h and llama.h):
 *   - opaque handles with create/free pairs; free(NULL) is a no-op;
 *   - parameter structs come from a *_default_params() function, then the caller edits fields;
 *   - a function that can fail returns vq_status (or NULL) and fills an optional vq_err with the
 *     code and a message naming what was wrong; err may be NULL;
 *   - sizes are in tokens unless named *_bytes; positions count from 0;
 *   - a model is read-only after load and may be shared by many sessions and threads; a session is
 *     used by one thread at a time.
 * The section behind VQ_EXPERIMENTAL (diagnostics) may change between versions.
 * docs/api.md describes every function. The measuring harness (perplexity, bench, needle,
 * kv-fidelity, calibrate, ...) is not part of this library: it is the lab (lab/vqlab.h, a static
 * library of the source tree that the CLI and the tests link). */
#ifndef VELOXQUANT_H
#define VELOXQUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(VQ_BUILDING_LIBRARY) && defined(__GNUC__)
#define VQ_API __attribute__((visibility("default")))
#else
#define VQ_API
#endif

/* ---- version ---------------------------------------------------------------------------------- */
#define VQ_VERSION_MAJOR 0
#define VQ_VERSION_MINOR 2
#define VQ_VERSION_PATCH 0
#define VQ_VERSION_NUMBER (VQ_VERSION_MAJOR * 10000 + VQ_VERSION_MINOR * 100 + VQ_VERSION_PATCH)
#define VQ_VERSION_STRING "0.2.0"
VQ_API unsigned    vq_version_number(void);   /* VQ_VERSION_NUMBER of the library linked */
VQ_API const char *vq_version_string(void);   /* "0.2.0" */

/* ---- status and errors ------------------------------------------------------------------------ */
typedef enum vq_status {
    VQ_OK = 0,
    VQ_ERR_IO,          /* a file could not be opened, read, written or mapped */
    VQ_ERR_FORMAT,      /* a file's contents are corrupt, truncated or inconsistent */
    VQ_ERR_UNSUPPORTED, /* valid input we do not handle (tensor type, architecture) */
    VQ_ERR_ARG,         /* a bad argument: unknown name, out-of-range value, malformed spec */
    VQ_ERR_NOMEM,       /* an allocation failed */
    VQ_ERR_RANGE,       /* a size limit was hit (e.g. prompt longer than the context) */
    VQ_ERR_NUMERIC,     /* the model produced NaN or infinite values */
    VQ_ERR_STATE,       /* a saved session state does not fit this model or spec */
} vq_status;

typedef struct vq_err {
    vq_status code;
    char msg[512];      /* what was wrong and where; control bytes are replaced by '?' */
} vq_err;

VQ_API const char *vq_status_name(vq_status s);   /* "bad argument", ... */
VQ_API void        vq_free(void *p);               /* frees strings the library returns */

/* ---- model -------------------------------------------------------------------------------------- */
typedef struct vq_model vq_model;

typedef struct vq_model_params {
    const char *tokenizer_path;   /* llama2.c checkpoints only: the tokenizer .bin (GGUF: NULL) */
    int n_threads;                /* OpenMP threads for all work; 0: leave the runtime's default */
    /* Re-code the weights in memory at load ("TYPE[,CLASS=TYPE...]", as vq_quantize takes):
     * for measuring weight formats on any model; the weights are then no longer used in place.
     * NULL: as the file has them. */
    const char *weights;
    int copy_weights;             /* 1: read the file into memory instead of mapping it (the
                                   * baseline of the sharing measurement); 0: map it */
    /* Where the forward pass runs: NULL or "cpu"; "cuda" or "cuda:N" (also llama.cpp's "CUDA0").
     * A GPU model holds a copy of every weight in device memory (made once, here) and its
     * sessions keep their KV cache there. Refused at load (VQ_ERR_UNSUPPORTED, the message says
     * why), never run on the CPU instead: a library built without CUDA, no usable GPU or driver,
     * a weight type or attention shape the GPU has no kernel for. docs/cuda.md has what runs. */
    const char *device;
} vq_model_params;

VQ_API vq_model_params vq_model_default_params(void);
/* Load a GGUF file (weights used in place from the mapping) or a llama2.c checkpoint. The path
 * must name a regular file; a corrupt or truncated file is VQ_ERR_FORMAT naming the field. */
VQ_API vq_model *vq_model_load(const char *path, const vq_model_params *p, vq_err *err);
VQ_API void      vq_model_free(vq_model *m);

typedef struct vq_model_info {
    char arch[32];          /* "llama", ... */
    int n_layers, n_heads, n_kv_heads, head_dim, dim, hidden_dim, n_vocab;
    int n_ctx_train;        /* context length the model was trained for */
    float rope_base;
    size_t file_bytes;      /* size of the model file */
    int has_chat_template;
} vq_model_info;
VQ_API vq_model_info vq_model_get_info(const vq_model *m);

/* Quantize a model's weights into a reservoir file (docs/reservoir-format.md): a GGUF or
 * reservoir file in, every weight matrix re-coded by its class as `weights` says
 * ("TYPE[,CLASS=TYPE...]": CLASS embd, output, attn, ffn or one matrix kind such as ffn_down;
 * TYPE a weight type with a quantizer, e.g. q8_0, q4_0, or keep), norms and biases as they are;
 * written atomically, every tensor page-aligned so that loads map it without copying.
 * info (may be NULL) receives per-tensor figures; free them with vq_quantize_info_free. */
typedef struct vq_quantize_tensor {
    char name[96];
    char src_type[16], dst_type[16];
    uint64_t src_bytes, dst_bytes;
    double rel_rms;               /* sqrt(sum (new - old)^2 / sum old^2) of the re-coded values; 0 kept */
    const char *kept;             /* why a matrix the spec names stayed as it was; NULL otherwise */
} vq_quantize_tensor;
typedef struct vq_quantize_info {
    int n_tensors, n_converted, n_kept;
    uint64_t src_bytes, out_bytes, file_bytes;   /* tensor bytes in and out; the file's size */
    double seconds;
    char weights[256];            /* the normalized spec: class=type for every class */
    vq_quantize_tensor *t;        /* n_tensors */
} vq_quantize_info;
VQ_API vq_status vq_quantize(const char *in, const char *out, const char *weights, vq_quantize_info *info,
                             vq_err *err);
VQ_API void vq_quantize_info_free(vq_quantize_info *info);
VQ_API int         vq_model_n_layers(const vq_model *m);
VQ_API int         vq_model_n_vocab(const vq_model *m);
VQ_API int         vq_model_n_ctx_train(const vq_model *m);
VQ_API const char *vq_model_chat_template(const vq_model *m);   /* NULL when the file has none */
VQ_API const char *vq_model_path(const vq_model *m);
/* Where the model runs: "cpu" or "cuda:N". */
VQ_API const char *vq_model_device(const vq_model *m);

/* ---- tokenizer ---------------------------------------------------------------------------------- */
/* Encode len bytes of text. add_bos: prepend BOS (-1: as the model file asks). parse_special:
 * special-token text such as "<|im_start|>" becomes single tokens (chat templates). Writes at most
 * max_out ids and returns how many the full encoding needs (call again with more room when it
 * exceeds max_out), or -1 with err set. */
VQ_API int vq_tokenize(const vq_model *m, const char *text, size_t len, int add_bos,
                       int parse_special, int *out, int max_out, vq_err *err);
/* Bytes of token id as generation prints them after token prev (prev < 0: start of text).
 * Special tokens print as nothing unless show_special. Returns the byte count (<= cap written). */
VQ_API size_t vq_token_piece(const vq_model *m, int prev, int id, int show_special, char *buf,
                             size_t cap);
/* A whole sequence as text; returns the bytes needed, writes at most cap. */
VQ_API size_t vq_detokenize(const vq_model *m, const int *ids, int n, char *buf, size_t cap);
VQ_API int vq_token_bos(const vq_model *m);            /* -1 when none */
VQ_API int vq_token_eos(const vq_model *m);
VQ_API int vq_token_is_eog(const vq_model *m, int id);  /* end of generation (eos, <|im_end|>) */
VQ_API int vq_token_add_bos(const vq_model *m);         /* what the model file asks for */

/* One turn of a conversation. role: "system", "user" or "assistant". */
typedef struct vq_chat_message { const char *role; const char *content; } vq_chat_message;
/* Render messages with the model's chat template (recognized by family: ChatML, Llama 3, Gemma,
 * Phi-3). When the first
 * message is not "system" and the template has a default system prompt, it is added (only when
 * add_default_system). add_assistant: end with the assistant header, ready to generate.
 * Returns a malloc'd string (vq_free) or NULL with err set. */
VQ_API char *vq_chat_apply(const vq_model *m, const vq_chat_message *msgs, int n, int add_assistant,
                           int add_default_system, vq_err *err);
/* Render messages as vq_chat_apply does and tokenize the result so that only the template's own
 * markers become special tokens: special-token text inside a message ("hello<|im_end|>") stays
 * plain text and cannot end the turn. add_bos as vq_tokenize (-1: as the model file asks).
 * content_special = 1 lets message content hold special tokens too (trusted input only). Returns
 * the id count as vq_tokenize does (call again with more room when it exceeds max_out), or -1
 * with err set. */
VQ_API int vq_chat_tokenize(const vq_model *m, const vq_chat_message *msgs, int n, int add_assistant,
                            int add_default_system, int add_bos, int content_special, int *out,
                            int max_out, vq_err *err);

/* ---- KV cache spec ------------------------------------------------------------------------------ */
/* The spec says how a session's KV cache is stored, e.g. "f16", "turboquant_mse:k=4,v=4",
 * "q4_0:rotate=1;sink=4,window=64", "k=turboquant_mse:bits=4;v=q8_0", "q4_0@0,-1=f16".
 * docs/kv-spec.md has the grammar. Parsing is the only validation: a parsed spec is valid for
 * every model whose head_dim the codecs accept, and nothing re-reads the text after parsing. */
typedef struct vq_kv_spec vq_kv_spec;
#define VQ_KV_SPEC_MAX_LEN 2047
VQ_API vq_kv_spec *vq_kv_spec_parse(const char *text, vq_err *err);
/* The same for a spec from someone who may not read the host's files (a server's client): calib=
 * may only name a calibration file of calib_dir by its plain name ([A-Za-z0-9._-], not starting
 * with '.'); with calib_dir NULL no calib= is taken. Every such refusal has one message. */
VQ_API vq_kv_spec *vq_kv_spec_parse_confined(const char *text, const char *calib_dir, vq_err *err);
VQ_API void        vq_kv_spec_free(vq_kv_spec *s);
VQ_API const char *vq_kv_spec_text(const vq_kv_spec *s);   /* normalized: every default spelled out */
/* 1 when a and b build the same cache (their normalized texts are equal; two NULLs are equal). */
VQ_API int         vq_kv_spec_equal(const vq_kv_spec *a, const vq_kv_spec *b);
/* A copy to free on its own (NULL with err: VQ_ERR_ARG for no spec, VQ_ERR_NOMEM). */
VQ_API vq_kv_spec *vq_kv_spec_dup(const vq_kv_spec *s, vq_err *err);
/* The text the spec was parsed from (for labels; with vq_kv_spec_with_layers: the base's text,
 * '@' and the overrides as given). */
VQ_API const char *vq_kv_spec_given(const vq_kv_spec *s);
VQ_API int         vq_kv_spec_n_overrides(const vq_kv_spec *s);   /* per-layer overrides ('@' clauses) */
VQ_API int         vq_kv_spec_evicts(const vq_kv_spec *s);        /* 1: some layer evicts rows (evict=) */
/* New specs made from a spec: what a program would otherwise do by cutting and pasting spec text.
 * Each result is parsed again (as vq_kv_spec_parse, so an override's calib= is not confined) and
 * freed on its own; NULL with err naming what was wrong.
 * with_layers: base with per-layer overrides added, overrides written as after a spec's '@'
 * ("0,-1=f16", "0,1=q8_0@-1=f16"): the spec base@overrides.
 * with_eviction: s with every clause's eviction replaced by policy keeping budget rows per layer
 * (the policy's other keys at their defaults); policy NULL: no eviction (and no demote=). */
VQ_API vq_kv_spec *vq_kv_spec_with_layers(const vq_kv_spec *base, const char *overrides, vq_err *err);
VQ_API vq_kv_spec *vq_kv_spec_with_eviction(const vq_kv_spec *s, const char *policy, int budget, vq_err *err);
/* The per-layer override giving layers[0..n) the spec s, written as after a spec's '@' (what
 * --kv-layers and vq_kv_spec_with_layers take): "3,7,12=" and s's text as given. s must have no
 * overrides of its own; s NULL writes the placeholder "SPEC" (a template to fill in). Returns the
 * length needed (buf NUL-terminated when cap > 0), or 0 for no layers, a negative layer or an s
 * with overrides. */
VQ_API size_t vq_kv_spec_layers_text(const vq_kv_spec *s, const int *layers, int n, char *buf, size_t cap);
/* Bytes a session's cache holds when every layer holds n_ctx rows (exact: the cache's own
 * accounting for those rows, codes + metadata + full-precision window + codec state). */
VQ_API vq_status vq_kv_spec_bytes(const vq_kv_spec *s, const vq_model *m, int n_ctx, size_t *bytes,
                                  vq_err *err);
/* Bytes the cache of a session made with context n_ctx holds after n_rows rows (0..n_ctx): pages
 * are sized by the context, so a long-context session holding few rows holds more than
 * vq_kv_spec_bytes(n_rows). What a server reserves for a request in a slot of n_ctx positions. */
VQ_API vq_status vq_kv_spec_bytes_at(const vq_kv_spec *s, const vq_model *m, int n_ctx, int n_rows,
                                     size_t *bytes, vq_err *err);
/* The same for a session made with n_batch (vq_session_params.n_batch; 0: the default 64): a
 * sliding-window layer's ring holds up to one batch more than its window (docs/gemma.md). */
VQ_API vq_status vq_kv_spec_bytes_batch(const vq_kv_spec *s, const vq_model *m, int n_ctx, int n_batch,
                                        int n_rows, size_t *bytes, vq_err *err);
/* VQ_OK when sessions of a model on `device` (vq_model_params.device) can hold this spec; else
 * VQ_ERR_UNSUPPORTED naming the spec and why the device's store cannot hold it (the GPU's: f16,
 * q8_0, q4_0 and 4-bit turboquant_mse codes, no window, sink or eviction: docs/api.md), or
 * VQ_ERR_ARG for a device name that is none. No GPU is probed and no model read (the spec is
 * tried on a stand-in shape), so a program can refuse a run before it loads anything. */
VQ_API vq_status vq_kv_spec_check_device(const vq_kv_spec *s, const char *device, vq_err *err);
/* Every codec with its parameters, then the store keys, one per line; returns the length needed. */
VQ_API size_t vq_kv_spec_help(char *buf, size_t cap);

/* ---- sampler ------------------------------------------------------------------------------------ */
typedef struct vq_sampler vq_sampler;
typedef struct vq_sampler_params {
    float temp;      /* <= 0: greedy (argmax) */
    int top_k;       /* <= 0: off */
    float top_p;     /* >= 1: off */
    float min_p;     /* <= 0: off */
    uint64_t seed;   /* the portable RNG: a seed reproduces a run on any machine */
} vq_sampler_params;
VQ_API vq_sampler_params vq_sampler_default_params(void);   /* temp 0.8, top-k 40, top-p 0.95, min-p 0.05 */
VQ_API vq_sampler *vq_sampler_create(const vq_sampler_params *p, int n_vocab, vq_err *err);
VQ_API void        vq_sampler_free(vq_sampler *s);
VQ_API int         vq_sampler_sample(vq_sampler *s, const float *logits);   /* n_vocab logits */

/* ---- session: a model + a compressed KV cache + scratch + position -------------------------- */
typedef struct vq_session vq_session;
typedef struct vq_session_params {
    int n_ctx;          /* positions the session holds (prompt + generated); 0: 2048, capped at
                           the model's training context unless allow_ctx_over_train */
    int n_batch;        /* tokens per forward pass when decoding many (prefill chunk); 0: 64 */
    uint64_t kv_seed;   /* seeds the codecs' rotations and sketches */
    int allow_ctx_over_train;
} vq_session_params;
VQ_API vq_session_params vq_session_default_params(void);
/* The session owns all memory decode needs (cache pages grow as rows arrive; scratch is made
 * here), so decode fails for lack of memory only when a new cache page cannot be had. */
VQ_API vq_session *vq_session_create(const vq_model *m, const vq_kv_spec *spec,
                                     const vq_session_params *p, vq_err *err);
VQ_API void vq_session_free(vq_session *s);

/* Run n tokens at the session's next positions. logits: NULL, or room for the logits of the last
 * token (n_vocab floats), or of every token when all_logits (n x n_vocab). Non-finite logits are
 * VQ_ERR_NUMERIC. Longer than the room left: VQ_ERR_RANGE, nothing run. n = 0 runs the pending
 * token (one a generator took), if any, and gives the logits of the last token run. */
VQ_API vq_status vq_session_decode(vq_session *s, const int *tokens, int n, float *logits,
                                   int all_logits, vq_err *err);
/* One token for each of n sessions, each at its own position, in one forward pass (the weights
 * are read once for all): what a server's decode step and perplexity's KV arms do. The sessions
 * must share one model and be distinct. logits: n x n_vocab, or NULL. Each session's result
 * is a vq_session_decode of that one token up to floating-point summation order: the weight
 * kernels sum a row in another order when they run several tokens at once (as they do for a
 * prompt of n > 1), and int8 activation rounding can carry that difference through the layers
 * (docs/api.md: up to ~1 logit on SmolLM2, 0.2-0.3 % in perplexity at ctx 64). */
VQ_API vq_status vq_decode_batch(vq_session *const *sessions, int n, const int *tokens,
                                 float *logits, vq_err *err);
VQ_API int vq_session_pos(const vq_session *s);        /* tokens held (next position) */
VQ_API int vq_session_n_ctx(const vq_session *s);
/* The tokens held, in order (n = vq_session_pos): for prefix reuse. */
VQ_API const int *vq_session_tokens(const vq_session *s);
/* Keep the first n positions, drop the rest (n <= pos). Rows that share a code block with a
 * dropped row are recomputed from the held tokens, so the state equals a session that never
 * saw the dropped tokens. */
VQ_API vq_status vq_session_truncate(vq_session *s, int n, vq_err *err);
VQ_API size_t vq_session_kv_bytes(const vq_session *s);      /* bytes the cache holds now */
VQ_API double vq_session_kv_bits(const vq_session *s);       /* bits per K/V element held */
VQ_API size_t vq_session_scratch_bytes(const vq_session *s); /* forward + attention scratch */
VQ_API const char *vq_session_kv_spec_text(const vq_session *s);  /* layers resolved */
VQ_API const vq_model *vq_session_model(const vq_session *s);

/* ---- generation --------------------------------------------------------------------------------- */
typedef enum vq_stop_reason {
    VQ_STOP_NONE = 0,
    VQ_STOP_LENGTH,      /* n_predict tokens made */
    VQ_STOP_EOG,         /* the model ended its turn (the end token is held, not printed) */
    VQ_STOP_STRING,      /* a stop string appeared (it is not printed) */
    VQ_STOP_CALLBACK,    /* the callback returned nonzero */
    VQ_STOP_CONTEXT,     /* the session's context is full */
} vq_stop_reason;
VQ_API const char *vq_stop_reason_name(vq_stop_reason r);   /* "length", "eog", ... */

/* Called with the printable bytes of generated text (whole UTF-8 characters: the bytes of one a
 * token left incomplete, and text that could begin a stop string, are held back until they are
 * decided; at the end what is left is given as it is); return nonzero to stop. */
typedef int (*vq_text_cb)(const char *bytes, size_t n, void *user);

typedef struct vq_generate_params {
    int n_predict;                  /* most tokens to generate; <= 0: until the context is full */
    const char *const *stop;        /* stop strings (may be NULL) */
    int n_stop;
    int show_special;               /* print special tokens' text */
} vq_generate_params;
VQ_API vq_generate_params vq_generate_default_params(void);

typedef struct vq_generate_result {
    int n_prompt, n_gen;            /* tokens prefilled here, tokens generated */
    double t_prefill_s, t_decode_s; /* wall seconds */
    vq_stop_reason stop;
} vq_generate_result;
/* Prefill prompt (may be empty when the session already holds tokens) at the session's next
 * positions, then sample until a stop condition. Every generated token ends up in the cache, so
 * the next call continues the conversation without re-prefilling it. */
VQ_API vq_status vq_session_generate(vq_session *s, const int *prompt, int n_prompt,
                                     vq_sampler *smp, const vq_generate_params *p, vq_text_cb cb,
                                     void *user, vq_generate_result *res, vq_err *err);

/* The generate loop one token at a time, for callers that drive it themselves (a server steps many
 * sessions in one batched forward pass). A generator works over a session whose prompt the caller
 * has decoded (vq_session_decode) and keeps the text, the stop strings and the limits of one
 * answer; vq_session_generate is a loop over vq_generator_step. smp may be NULL when every token
 * comes through vq_generator_take; the session, the sampler and p's strings (copied) are borrowed
 * for the generator's life: free it before them. */
typedef struct vq_generator vq_generator;
typedef struct vq_gen_step {
    int token;              /* the token taken (the session's pending token now); -1: none */
    const char *text;       /* bytes made printable by this step (valid until the generator's */
    size_t n_text;          /* next call); at a stop, everything left that is printed */
    vq_stop_reason stop;    /* VQ_STOP_NONE: step again */
} vq_gen_step;
VQ_API vq_generator *vq_generator_create(vq_session *s, vq_sampler *smp, const vq_generate_params *p,
                                         vq_err *err);
VQ_API void vq_generator_free(vq_generator *g);
/* Run the pending token (if any), sample one from the session's logits, take it. */
VQ_API vq_status vq_generator_step(vq_generator *g, vq_gen_step *out, vq_err *err);
/* vq_generator_step for n generators over distinct sessions of one model, their pending tokens
 * run in one vq_decode_batch. logits: NULL or room for n x n_vocab floats (no allocation then):
 * row i receives the logits generator i sampled from. out: n steps. */
VQ_API vq_status vq_generator_step_batch(vq_generator *const *gs, int n, float *logits, vq_gen_step *out,
                                         vq_err *err);
/* Take a token chosen by the caller (its own sampling of the logits that vq_session_decode or
 * vq_decode_batch gave): the session must hold no pending token. */
VQ_API vq_status vq_generator_take(vq_generator *g, int token, vq_gen_step *out, vq_err *err);

/* ---- session state on disk --------------------------------------------------------------------- */
/* The cache as packed codes (not decoded floats), the tokens and the position, in a versioned,
 * checksummed file (docs/state-format.md) written atomically (temp file, fsync, rename). Loading
 * into a session made from another model or spec, or a corrupt file, is VQ_ERR_STATE / _FORMAT.
 * A loaded session gives bit-identical logits to the one that was saved. */
VQ_API vq_status vq_session_save(const vq_session *s, const char *path, vq_err *err);
VQ_API vq_status vq_session_load(vq_session *s, const char *path, vq_err *err);

/* ---- runtime: threads, clock, memory, the machine ------------------------------------------- */
VQ_API void        vq_cpu_description(char *buf, size_t cap); /* "model name, N cores, flags" */
VQ_API const char *vq_kernels_isa_name(void);   /* the matmul variant chosen: "avx512", "avx2", ... */
VQ_API int         vq_max_threads(void);        /* OpenMP threads work runs on */
VQ_API void        vq_set_threads(int n);       /* n >= 1: threads for all later work */
VQ_API size_t      vq_rss_now_bytes(void);      /* resident set now (/proc/self/statm) */
VQ_API size_t      vq_rss_peak_bytes(void);     /* VmHWM (/proc/self/status) */
VQ_API double      vq_clock_s(void);            /* CLOCK_MONOTONIC seconds */
/* The codec table's names, i = 0.. (NULL past the end). */
VQ_API const char *vq_codec_name(int i);

#ifdef VQ_EXPERIMENTAL
/* ==== experimental: diagnostics (may change between versions) ================================= */
/* Attention over decoded rows in float64 instead of the codecs' kernels (slow; for checks). */
VQ_API void vq_session_set_ref_attention(vq_session *s, int on);
/* The page layout of the cache: rows per page, bytes per page, pages held by a layer. */
VQ_API int    vq_session_kv_page_rows(const vq_session *s);
VQ_API size_t vq_session_kv_page_bytes(const vq_session *s);
VQ_API int    vq_session_kv_pages(const vq_session *s, int layer);
VQ_API int    vq_session_kv_rows(const vq_session *s, int layer);
/* Rows a layer keeps in full precision: the window (plus a codec block's not yet full rows). */
VQ_API int    vq_session_kv_window_rows(const vq_session *s);
/* The codec serving a layer's K (side 0) or V (side 1): name and canonical parameters. */
VQ_API const char *vq_session_kv_codec(const vq_session *s, int layer, int side, char *buf,
                                       size_t cap);

/* What `info` prints beyond vq_model_info. */
typedef struct vq_model_details {
    float norm_eps;
    int rope_dim;                  /* dims rotated per head */
    int rope_neox;                 /* 0: adjacent pairs (llama), 1: halves (neox) */
    char weight_type[16];          /* layer 0's q projection: "q4_1", ... */
    char embd_type[16];            /* token embeddings */
} vq_model_details;
VQ_API vq_model_details vq_model_get_details(const vq_model *m);
#endif /* VQ_EXPERIMENTAL */

#ifdef __cplusplus
}
#endif
#endif /* VELOXQUANT_H */
