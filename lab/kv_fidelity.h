/* kv_fidelity.h: how much a KV codec changes attention on a real model's rows. The model runs once
 * with an f32 cache while a tap captures every layer's q, k, v after RoPE; each codec then gets the
 * same rows through the real store (decode order: append row t, attend query t), per layer. */
#ifndef VQ_KV_FIDELITY_H
#define VQ_KV_FIDELITY_H
#include "lab/vqlab.h"

typedef struct vq_kvfid_capture {
    int n, n_layers, n_heads, n_kv, hd;
    float softcap;            /* the model's attention soft-cap (0: none): every replay cache applies it */
    float **q, **k, **v;      /* per layer: n x (n_heads*hd), n x (n_kv*hd), n x (n_kv*hd) */
    float **o;                /* per layer: exact attention outputs (f32 cache), n x (n_heads*hd) */
} vq_kvfid_capture;

/* Run tok[0..n) through the model (f32 cache, chunks of 64) and capture every layer. */
vq_kvfid_capture *vq_kvfid_capture_run(const vq_model *m, const int *tok, int n, vq_err *err);
void vq_kvfid_capture_free(vq_kvfid_capture *c);

typedef struct vq_kvfid_layer {
    double key_cos;   /* mean over rows and KV heads of cos(k_hat, k) (stored state after all rows) */
    double val_cos;   /* same for values */
    double kl;        /* mean over query positions and query heads of KL(p_exact || p_codec) (nats) */
    double rel_err;   /* mean over query positions and query heads of |o - o_hat| / |o| */
} vq_kvfid_layer;

typedef struct vq_kvfid_result {
    char spec[256], norm[256];
    int ok;
    char why[256];
    double bits;              /* vq_kv_bits_per_elem of a 1-layer cache holding the n rows */
    size_t bytes;             /* its vq_kv_bytes */
    double code_bits;         /* the codecs' own bits per element (block bytes, K and V averaged):
                                 without the store's fixed costs and fp window */
    int n_layers;
    vq_kvfid_layer *layer;
    vq_kvfid_layer mean, worst;  /* over layers; worst = min cosine, max KL, max rel err */
    int worst_layer[4];          /* layer of each worst value: key_cos, val_cos, kl, rel_err */
} vq_kvfid_result;

/* Measure one spec on a capture. Attention weights come from decoded keys (vq_kv_read, which the
 * codec contract makes equal to what score() computes), as the store holds them when query t runs.
 * An unusable spec (e.g. head_dim unsupported) gives VQ_OK with r->ok = 0 and r->why. */
vq_status vq_kvfid_eval(const vq_kvfid_capture *c, const char *spec, uint64_t seed,
                        vq_kvfid_result *r, vq_err *err);
/* The same for a parsed spec (r->spec gets its normalized text). */
vq_status vq_kvfid_eval_spec(const vq_kvfid_capture *c, const vq_kv_spec *spec, uint64_t seed,
                             vq_kvfid_result *r, vq_err *err);
void vq_kvfid_result_free(vq_kvfid_result *r);

/* Default specs: f32, every table row with its defaults, the turboquant_mse 2/3/4-bit ladder and
 * q4_0:rotate=1. Writes up to cap names into out, returns how many. */
int vq_kvfid_default_specs(char (*out)[96], int cap);

#endif
