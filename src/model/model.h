/* model.h: a loaded language model (the architecture rows of arch.c) and its forward pass.
 * Weights point into the mapped file (GGUF or llama2.c checkpoint); nothing is dequantized.
 * The forward pass hands K/V rows to a vq_kv cache and asks it for attention outputs: it never
 * reads K/V memory itself (docs/architecture.md), so every codec plugs in without touching this code. */
#ifndef VQ_MODEL_H
#define VQ_MODEL_H
#include "core/core.h"
#include "kv/kv.h"
#include "model/tokenizer.h"

/* ---- architecture rows (arch.c) ----
 * A row says, for one GGUF `general.architecture`, which tensors exist and which operations of
 * the one decoder in forward.c differ; model.c binds a file through its row into the config and
 * layer fields below, and forward.c reads only those (never an architecture's name). */
enum {                           /* tensor classes a row requires or allows (bits) */
    VQ_AT_QKV_BIAS   = 1 << 0,   /* blk.N.attn_{q,k,v}.bias (or attn_qkv.bias with a fused qkv) */
    VQ_AT_O_BIAS     = 1 << 1,   /* blk.N.attn_output.bias */
    VQ_AT_FFN_BIAS   = 1 << 2,   /* blk.N.ffn_{gate,up,down}.bias */
    VQ_AT_QK_NORM    = 1 << 3,   /* blk.N.attn_{q,k}_norm.weight: RMSNorm of each q/k head before rope */
    VQ_AT_POST_NORMS = 1 << 4,   /* blk.N.post_attention_norm / post_ffw_norm: RMSNorm of each branch */
    VQ_AT_FUSED_QKV  = 1 << 5,   /* blk.N.attn_qkv.weight: q, k, v rows in one matrix */
    VQ_AT_FUSED_GATE_UP = 1 << 6,/* blk.N.ffn_up.weight: gate rows then up rows, no ffn_gate */
    VQ_AT_ROPE_FREQS = 1 << 7,   /* rope_freqs.weight: per-pair frequency divisors (Llama 3.x) */
    VQ_AT_OUT_BIAS   = 1 << 8,   /* output.bias */
    VQ_AT_LONGROPE   = 1 << 9,   /* rope_factors_long/short.weight: Phi-3 longrope frequency divisors */
};
enum { VQ_ATTN_SCALE_HEAD_DIM,   /* 1/sqrt(head_dim) */
       VQ_ATTN_SCALE_DIM_HEADS,  /* 1/sqrt(dim/heads) when n_layers == the row's attn_scale_layers
                                  * (llama.cpp's LLM_TYPE_27B test of gemma2 / gemma3), else head_dim's */
       VQ_ATTN_SCALE_KEY };      /* attention.scale from the file, else head_dim's */
enum { VQ_ROPE_SCALING_NONE, VQ_ROPE_SCALING_LINEAR, VQ_ROPE_SCALING_YARN };

typedef struct vq_arch {
    const char *name;            /* general.architecture */
    unsigned required, optional; /* VQ_AT_* beyond the Llama set every row has */
    int rope_neox;               /* rope on halves (1) or adjacent pairs (0) */
    int ffn_gelu;                /* GeGLU (1) or SwiGLU (0) */
    int emb_scale_sqrt_dim;      /* embeddings multiplied by sqrt(dim) */
    int attn_scale;              /* VQ_ATTN_SCALE_* */
    int attn_scale_layers;       /* VQ_ATTN_SCALE_DIM_HEADS: the layer count that selects it */
    int swa;                     /* reads attention.sliding_window (0: the key is ignored) */
    int swa_default;             /* window when the key is absent (0: no sliding layers) */
    int swa_pattern;             /* default: every swa_pattern-th layer global (pattern key overrides) */
    float rope_base_swa;         /* default rope base of sliding layers (key rope.freq_base_swa);
                                  * 0: the global layers' rope base */
    int rope_scale_swa;          /* rope scaling applies to the sliding layers too */
    int final_softcap;           /* reads final_logit_softcapping */
    float final_softcap_default; /* its value when the key is absent (0: no capping) */
    int attn_softcap;            /* reads attn_logit_softcapping (the KV cache caps the scores) */
    float attn_softcap_default;  /* its value when the key is absent (0: no capping) */
    int no_output;               /* output.weight is not read: the output is always tied */
    const char *chat_default;    /* turn format when the file has no chat template (NULL: none) */
} vq_arch;
const vq_arch *vq_arch_find(const char *name, size_t len);   /* NULL: unknown */
const vq_arch *vq_arch_at(int i);                            /* the i-th row; NULL past the end */

typedef struct vq_model_config {
    char arch[32];
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, head_dim, vocab_size;
    int train_ctx;          /* context length the model was trained for */
    float norm_eps, rope_base;
    int rope_dim;           /* dims rotated per head */
    int rope_neox;          /* 0: adjacent pairs (llama), 1: halves (neox) */
    float emb_scale;        /* embeddings multiplied by it (gemma: sqrt(dim)); 1 */
    int ffn_gelu;           /* 0: SwiGLU (silu), 1: GeGLU (gelu, tanh form) */
    int swa_window;         /* sliding-window layers see this many tokens (0: none) */
    float rope_base_swa;    /* rope base of the sliding-window layers */
    /* rope scaling (llama.cpp's meaning): freq_scale = 1/factor; YaRN mixes interpolated and
     * extrapolated frequencies between the correction dims of yarn_orig_ctx and scales cos/sin */
    int rope_scaling;       /* VQ_ROPE_SCALING_* */
    float rope_freq_scale;  /* 1 / rope.scaling.factor (1: none) */
    float rope_attn_factor; /* rope.scaling.attn_factor (1) */
    int yarn_orig_ctx;      /* rope.scaling.original_context_length (train_ctx) */
    int has_rope_freqs;     /* rope_freqs.weight divides the frequencies (Llama 3.x) */
    int longrope;           /* rope_factors_long/short (Phi-3 longrope): a context of more than
                             * yarn_orig_ctx tokens turns by the long factors, else the short ones */
    float attn_scale;       /* softmax scale of q.k; the cache applies 1/sqrt(head_dim), so forward
                             * multiplies q by q_scale = attn_scale * sqrt(head_dim) when it differs */
    float q_scale;          /* 1 exactly when attn_scale is 1/sqrt(head_dim) */
    float final_softcap;    /* logits = c * tanh(logits / c) (0: none) */
    float attn_softcap;     /* attention scores c * tanh(score / c), applied by the cache (kv dims.softcap) */
} vq_model_config;

typedef struct vq_wmat { const void *data; uint32_t type; int rows, cols; } vq_wmat; /* rows x cols */

typedef struct vq_layer_weights {
    const float *attn_norm, *ffn_norm;      /* dim */
    vq_wmat wq, wk, wv, wo, w_gate, w_up, w_down;
    const float *bq, *bk, *bv;              /* optional biases (NULL when absent) */
    const float *q_norm, *k_norm;           /* head_dim: RMSNorm of each q/k head before RoPE (QK-norm) */
    const float *post_attn_norm, *post_ffn_norm;   /* dim: RMSNorm of each branch's output */
    const float *bo, *b_gate, *b_up, *b_down;  /* optional biases (NULL when absent) */
    int swa;                                /* 1: a sliding-window layer (cfg.swa_window) */
    float rope_base;                        /* this layer's rope base */
    /* rope_dim/2 inverse frequencies (the angle of pair i at position p is p * rope_inv_freq[i]):
     * base, rope_freqs, linear and YaRN scaling folded in at load; cos/sin times rope_mscale */
    const float *rope_inv_freq;
    const float *rope_inv_freq_long;        /* longrope: the table of a long context (else NULL) */
    float rope_mscale;
} vq_layer_weights;

typedef struct vq_model {
    vq_model_config cfg;
    vq_wmat tok_embd;                       /* vocab x dim */
    vq_wmat output;                         /* vocab x dim (== tok_embd when tied) */
    const float *out_norm;
    const float *out_bias;                  /* vocab (NULL: none) */
    const vq_arch *row;                     /* the architecture row (NULL: llama2.c checkpoint) */
    float *rope_tables;                     /* the layers' rope_inv_freq (owned) */
    vq_layer_weights *layers;
    int *span;                              /* per layer: attention span for the cache (0: all) */
    vq_tokenizer *tok;
    const char *chat_template;              /* NULL when the file has none */
    size_t file_bytes;
    char path[1024];
    void *gguf, *l2c;                       /* the open file (one of them) */
    int reservoir;                          /* the GGUF handle is a reservoir's body */
    int copied;                             /* the file was read into memory, not mapped */
    char weights[2048];                     /* the --weights spec applied at load ("" none) */
    void **owned; int n_owned;              /* weights re-quantized at load (freed with it) */
    /* the device row the model is bound to (model_device.c; NULL: the CPU row) and its context
     * (the device copies of the buffers the pass reads) */
    const struct vq_device *dev;
    void *dev_ctx;
    char dev_name[32];                      /* "cuda:0" ("" on the CPU) */
} vq_model;

/* Load a GGUF file, a reservoir (formats/reservoir.h), or a llama2.c checkpoint (tokenizer path
 * required for those: tok_path). copy = 1: read the file into memory instead of mapping it (GGUF
 * and reservoir files; the baseline of the sharing measurement). */
vq_model *vq_model_open(const char *path, const char *tok_path, vq_err *err);
vq_model *vq_model_open_ex(const char *path, const char *tok_path, int copy, vq_err *err);
void      vq_model_free(vq_model *m);

/* ---- weights re-coded by tensor class (quantize.c) ----
 * A --weights spec: "TYPE[,ITEM=TYPE...]"; an ITEM is a CLASS, one of embd, output, attn (attn_q,
 * attn_k, attn_v, attn_output), ffn (ffn_gate, ffn_up, ffn_down), or a per-layer item
 * blk.L.CLASS / blk.A-B.CLASS (layers L, or A..B, of a layer class or group); TYPE a weight type
 * with a quantizer or "keep" (the source's bytes). A later item overrides what an earlier one set
 * for the same matrices. Norms and biases are never re-coded; a matrix whose row length is not a
 * multiple of the target's block stays as it is. */
#define VQ_WCLASS_N 9
#define VQ_WKEEP 0xffffffffu
/* "x16": each matrix of Q4_0 or Q4_K to its rows-interleaved form (q4_0x16, q4_Kx16;
 * kernels.h), the others kept: an in-memory layout for the AVX-512 decode kernels. (Q6_K is
 * not included: q6_Kx16 measured no faster than Q6_K's own kernel; name it to get it.) */
#define VQ_WX16 0xfffffffeu
#define VQ_WSPEC_LAYER_ITEMS 32
typedef struct vq_wspec {
    uint32_t type[VQ_WCLASS_N];             /* per class: a weight type or VQ_WKEEP */
    int n_items;                            /* per-layer items, in spec order (a group: one per class) */
    struct { int lo, hi, cls; uint32_t type; } item[VQ_WSPEC_LAYER_ITEMS];
    int max_layer;                          /* the highest layer an item names (-1: none) */
    char text[2048];                        /* normalized: every class=type, then the layer items */
} vq_wspec;
vq_status vq_wspec_parse(const char *s, vq_wspec *w, vq_err *err);
/* the type of class cls in layer `layer` (-1 for embd/output): the last item naming it */
uint32_t vq_wspec_type(const vq_wspec *w, int cls, int layer);
/* refuses a spec whose layer items name a layer the model lacks (n_layers of them) */
vq_status vq_wspec_check_layers(const vq_wspec *w, int n_layers, vq_err *err);
/* Re-code the loaded model's matrices in memory (no longer zero-copy: for measurement). A tied
 * output is untied when embd and output get different types. */
vq_status vq_model_requantize(vq_model *m, const vq_wspec *w, vq_err *err);
/* The layouts of every type in the weight-type table, for the reservoir reader. */
#include "formats/gguf.h"
vq_gguf_layout_fn vq_model_layouts(void);

/* Every buffer the forward pass reads from the model (matrices, norms, biases, rope tables), once
 * each in a fixed order, with its byte length: what a device row of the backend contract mirrors
 * when a model is bound to it (backend/ops.h). fn returns nonzero to stop (returned). */
typedef int (*vq_model_tensor_fn)(void *user, const void *data, size_t bytes);
int vq_model_tensors(const vq_model *m, vq_model_tensor_fn fn, void *user);
/* Bind the model to a device ("cpu"/NULL: nothing; "cuda", "cuda:N": vq_device_find's names):
 * refuses, before copying anything, a device this build or machine lacks, a matrix type the row
 * has no kernel for and an attention shape its store cannot hold (VQ_ERR_UNSUPPORTED, named);
 * then mirrors every buffer the pass reads (after any re-coding of the weights: call it last).
 * vq_model_free releases it (model_device.c). */
vq_status vq_model_to_device(vq_model *m, const char *device, vq_err *err);
void      vq_model_device_release(vq_model *m);

/* Scratch for a forward pass over up to max_batch tokens at once, for caches of n_ctx positions
 * (a longrope model turns by its long factors when n_ctx exceeds its original context, as
 * llama.cpp chooses by the context's size), on a row of the backend contract (backend/ops.h):
 * vq_fwd_create is the CPU row (vq_ops_cpu). Another row's scratch lives where the row allocates
 * it; a row that is not host memory must take every matrix of the model (else VQ_ERR_ARG naming
 * the first it lacks) and keeps its own store: vq_forward_store. */
struct vq_ops;
extern const struct vq_ops vq_ops_cpu;
typedef struct vq_fwd vq_fwd;
vq_fwd *vq_fwd_create(const vq_model *m, int max_batch, int n_ctx, vq_err *err);
vq_fwd *vq_fwd_create_ops(const vq_model *m, int max_batch, int n_ctx, const struct vq_ops *ops, void *ops_ctx,
                          vq_err *err);
void    vq_fwd_destroy(vq_fwd *f);
size_t  vq_fwd_bytes(const vq_fwd *f);

/* Measurement tap: when set, called in every layer with the batch's rows after RoPE
 * (q: n x n_heads*head_dim, k and v: n x n_kv_heads*head_dim), before they reach the cache.
 * Used by kv-fidelity to feed real activations to codecs; NULL (default) costs nothing. */
typedef void (*vq_fwd_tap)(void *user, int layer, int n, const int *pos, const float *q,
                           const float *k, const float *v);
void vq_fwd_set_tap(vq_fwd *f, vq_fwd_tap tap, void *user);
/* Attention-block tap: when set, called in every layer with the residual stream entering the
 * layer (x: n x dim) and what the attention block adds to it (dx: n x dim, after the output
 * projection and any post-norm), before the add. Calibration's per-layer cosine of x and x + dx
 * (SqueezeAttention's layer importance) uses it; NULL (default) costs nothing. */
typedef void (*vq_fwd_attn_tap)(void *user, int layer, int n, int dim, const float *x, const float *dx);
void vq_fwd_set_attn_tap(vq_fwd *f, vq_fwd_attn_tap tap, void *user);

/* Kv dims this model needs for a context of n_ctx tokens. */
vq_kv_dims vq_model_kv_dims(const vq_model *m, int n_ctx);
/* FNV-1a 64 of the model's config text (arch, dims, vocab, rope, eps): the identity a calibration
 * file records (docs/calibration-format.md); text (may be NULL) receives the text. */
uint64_t vq_model_config_hash(const vq_model *m, char *text, size_t cap);

/* Run n tokens (n <= max_batch) at positions pos0.. through the model, appending their K/V to kv.
 * logits: when non-NULL, receives vocab_size floats per token for the last `n_logits` tokens
 * (n_logits = 1: the last token only; n_logits = n: every token). */
vq_status vq_forward(const vq_model *m, vq_fwd *f, vq_kv *kv, const int *tokens, int n, int pos0,
                     float *logits, int n_logits, vq_err *err);

/* vq_forward on any row: `store` is the row's KV store (the CPU row's: a vq_kv). The tap and
 * KV arms are the CPU row's only. */
vq_status vq_forward_store(const vq_model *m, vq_fwd *f, void *store, const int *tokens, int n, int pos0,
                           float *logits, int n_logits, vq_err *err);

/* Decode one step of n_arms independent sequences, arm a at position pos[a]: row a is
 * tokens[a] and reads/writes kvs[a] only (the caches must be distinct). The weights are read once for every arm (the batch
 * shares the matrix products), and each row's arithmetic is the one vq_forward does for a single
 * token, so per-arm results equal n_arms separate vq_forward calls. logits: n_arms x vocab.
 * Used to score several KV arms over the same text in one pass (perplexity --kv ... --kv ...). */
vq_status vq_forward_arms(const vq_model *m, vq_fwd *f, vq_kv *const *kvs, int n_arms,
                          const int *tokens, const int *pos, float *logits, vq_err *err);
#endif
