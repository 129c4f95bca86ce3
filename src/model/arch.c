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
        .attn_scale = VQ_ATTN_SCALE_GEMMA3,
        .swa = 1, .swa_pattern = 6, .rope_base_swa = 10000.0f, .rope_scale_swa = 0,
        .final_softcap = 1,
        .chat_default = VQ_CHAT_GEMMA,
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
