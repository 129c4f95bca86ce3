/* arch.c: the architecture table. One row per GGUF `general.architecture` says which tensors the
 * architecture has (required, optional) and which operations of the one decoder in forward.c it
 * switches on; model.c binds a file through its row, and forward.c reads only config fields. Each
 * row follows what llama.cpp (llama-cpp-python 0.3.36's vendored tree, src/models/<arch>.cpp)
 * loads and runs for that architecture; docs/models.md describes the rows. */
#include "model/model.h"

#include <string.h>

#include "model/chat.h"

/* Tensor classes every row of llama.cpp's create_tensor_qkv accepts: a fused attn_qkv (with its
 * bias, or separate q/k/v biases) instead of separate q/k/v, and optional q/k/v biases. */
#define QKV_ANY (VQ_AT_FUSED_QKV | VQ_AT_QKV_BIAS)

static const vq_arch ROWS[] = {
    {   /* Llama 1-3, SmolLM, Mistral (dense): SwiGLU, rope on adjacent pairs (the converter permutes
         * Q/K). llama.cpp's llama arch loads optional attention-output and FFN biases and Llama 3's
         * rope_freqs; it reads no sliding-window key (a Mistral file's sliding_window is ignored). */
        .name = "llama",
        .optional = QKV_ANY | VQ_AT_O_BIAS | VQ_AT_FFN_BIAS | VQ_AT_ROPE_FREQS,
        .rope_neox = 0, .ffn_gelu = 0, .emb_scale_sqrt_dim = 0,
        .attn_scale = VQ_ATTN_SCALE_HEAD_DIM,
    },
    {   /* Gemma 3: embeddings x sqrt(dim), per-head q/k RMSNorm, post-norms on both branches, GeGLU,
         * rope on halves; sliding-window layers (every 6th global unless the file says otherwise)
         * with their own rope base (key rope.freq_base_swa, default 10000) and no rope scaling (the
         * file's scaling applies to the global layers); final logits soft-capped when the file has
         * final_logit_softcapping; attention scale 1/sqrt(dim/heads) for the 62-layer (27B) shape. */
        .name = "gemma3",
        .required = VQ_AT_QK_NORM | VQ_AT_POST_NORMS,
        .optional = QKV_ANY,
        .rope_neox = 1, .ffn_gelu = 1, .emb_scale_sqrt_dim = 1,
        .attn_scale = VQ_ATTN_SCALE_DIM_HEADS, .attn_scale_layers = 62,
        .swa = 1, .swa_pattern = 6, .rope_base_swa = 10000.0f, .rope_scale_swa = 0,
        .final_softcap = 1,
        .chat_default = VQ_CHAT_GEMMA,
    },
    {   /* Gemma 2: embeddings x sqrt(dim), post-norms on both branches, GeGLU, rope on halves, no
         * q/k norm. Attention scores soft-capped (attn_logit_softcapping, default 50: the cache caps
         * them), final logits soft-capped (final_logit_softcapping, default 30). Sliding window
         * (default 4096 when the key is absent) on layers 0, 2, 4, ... (llama.cpp's swa pattern 2:
         * layer l slides unless l % 2 == 1), with the global layers' rope base and scaling unless
         * rope.freq_base_swa says otherwise. Attention scale 1/sqrt(dim/heads) for the 46-layer
         * (27B) shape (query_pre_attn_scalar 144), else 1/sqrt(head_dim). llama.cpp always ties the
         * output to token_embd (an output.weight is an unused tensor, refused). */
        .name = "gemma2",
        .required = VQ_AT_POST_NORMS,
        .optional = QKV_ANY,
        .rope_neox = 1, .ffn_gelu = 1, .emb_scale_sqrt_dim = 1,
        .attn_scale = VQ_ATTN_SCALE_DIM_HEADS, .attn_scale_layers = 46,
        .swa = 1, .swa_default = 4096, .swa_pattern = 2, .rope_base_swa = 0, .rope_scale_swa = 1,
        .final_softcap = 1, .final_softcap_default = 30.0f,
        .attn_softcap = 1, .attn_softcap_default = 50.0f,
        .no_output = 1,
        .chat_default = VQ_CHAT_GEMMA,
    },
    {   /* Phi-3 (dense): fused attn_qkv (q | k | v rows; llama.cpp also takes separate q/k/v) and
         * fused gate/up in ffn_up (2 x hidden rows: gate first, then up, ggml_swiglu's halves),
         * rope on halves, SwiGLU. llama.cpp disables Phi-3's sliding window (the key is read and
         * set to 0): ignored here too. Longrope (Phi-3 128k, Phi-3.5, Phi-4 mini): per-pair frequency
         * divisors rope_factors_short, or rope_factors_long for a context past the original one, and
         * cos/sin times rope.scaling.attn_factor (model.c). */
        .name = "phi3",
        .required = VQ_AT_FUSED_GATE_UP,
        .optional = QKV_ANY | VQ_AT_LONGROPE,
        .rope_neox = 1, .attn_scale = VQ_ATTN_SCALE_HEAD_DIM,
    },
    {   /* Qwen2 / Qwen2.5: llama with rope on halves, q/k/v biases (optional in llama.cpp, present
         * in released files) and an optional output bias. */
        .name = "qwen2",
        .optional = QKV_ANY | VQ_AT_OUT_BIAS,
        .rope_neox = 1, .attn_scale = VQ_ATTN_SCALE_HEAD_DIM,
    },
    {   /* Qwen3 (dense): rope on halves, per-head q/k RMSNorm before rope, no biases in released
         * files (llama.cpp still accepts q/k/v biases through create_tensor_qkv). */
        .name = "qwen3",
        .required = VQ_AT_QK_NORM,
        .optional = QKV_ANY,
        .rope_neox = 1, .attn_scale = VQ_ATTN_SCALE_HEAD_DIM,
    },
};

const vq_arch *vq_arch_find(const char *name, size_t len) {
    for (size_t i = 0; i < VQ_ARRAY_LEN(ROWS); i++)
        if (strlen(ROWS[i].name) == len && !memcmp(ROWS[i].name, name, len)) return &ROWS[i];
    return NULL;
}

const vq_arch *vq_arch_at(int i) {
    return i >= 0 && (size_t)i < VQ_ARRAY_LEN(ROWS) ? &ROWS[i] : NULL;
}
