/* calib.h: the calibration file (docs/calibration-format.md): per layer and head, statistics of
 * the model's own queries, keys and values after RoPE on a calibration text, written by
 * `veloxquant calibrate` and read by KV codecs (tq_split ranks RoPE pairs with it) and, later, by
 * eviction policies (Q-Filters / expected attention use the query statistics).
 * Lives in the codec layer so codecs can use it; the eval layer fills it from a forward pass.
 * All statistics are float32 in memory and on disk (accumulated in double by the writer). */
#ifndef VQ_CALIB_H
#define VQ_CALIB_H
#include "core/core.h"

#define VQ_CALIB_MAGIC "VQCALIB\0"
#define VQ_CALIB_VI_CB 16       /* VecInfer codebook entries (4-bit codes) */
#define VQ_CALIB_VERSION 4u   /* 2: q_filter added; 3: attn_cos added; 4: low-rank bases added */
#define VQ_CALIB_VERSION_MIN 3u   /* version 3 files still read: they have no low-rank bases */
#define VQ_CALIB_VERSION_VI 5u   /* version 4 + the VecInfer section (written only when it is there) */
#define VQ_CALIB_NAME 64        /* model name bytes (NUL padded) */
#define VQ_CALIB_MAX_DIM 4096   /* bound on layers, heads and head_dim a reader accepts */

typedef struct vq_calib {
    char model[VQ_CALIB_NAME];  /* model name (NUL terminated) */
    uint64_t config_hash;       /* FNV-1a 64 of the model's config text (vq_calib_config_hash) */
    int n_layers, n_heads, n_kv_heads, head_dim;
    int rope_dim;               /* dims rotated per head (pairs: rope_dim / 2; the rest unrotated) */
    int rope_neox;              /* pair layout: 0 = (2p, 2p+1), 1 = (p, p + head_dim/2) */
    uint64_t n_tokens;          /* calibration tokens seen */
    uint32_t data_crc;          /* the file's CRC-32 of its statistics (set by parse; 0 in memory):
                                   what a KV state records of the calibration its codes depend on */
    /* per layer l and KV head h (index l * n_kv_heads + h): */
    float *pair_energy;         /* [L][Hkv][d/2]: Σ_{g in group} E‖q_g,p‖² · E‖k_p‖² */
    float *k_mean, *k_sq;       /* [L][Hkv][d]: E[k_i], E[k_i²] */
    float *v_sq;                /* [L][Hkv][d]: E[v_i²] */
    /* per layer l and query head hq (index l * n_heads + hq): */
    float *q_mean, *q_sq;       /* [L][Hq][d]: E[q_i] (the mean query direction), E[q_i²] */
    /* per layer l and KV head h: the Q-Filter (evict=qfilters), a unit vector: the top eigenvector
     * of Σ_{g in group} E[q_g q_gᵀ] (not mean-centred), signed so that Σ_g E[q_g]·f >= 0, so a
     * key's score k·f is higher where the group's queries attend more; 0 where queries are all 0 */
    float *q_filter;            /* [L][Hkv][d] */
    /* per layer: the mean over calibration rows of cos(x, x + attn(x)), x the residual stream
     * entering the layer (SqueezeAttention's layer importance: near 1 = attention changes the
     * hidden state little; evict=squeeze) */
    float *attn_cos;            /* [L] */
    /* The VecInfer section (codec vecinfer, docs/codecs-vecinfer.md; file version 5): absent when
     * vi_sub_k == 0. Keys are coded as k' = Π (k / λ), Π the Hadamard rotation of seed vi_seed,
     * then product-quantized in d / vi_sub_k sub-vectors of vi_sub_k coordinates, each with its own
     * codebook of VQ_CALIB_VI_CB entries; values are product-quantized as they are (vi_sub_v).
     * Per layer l and KV head h (index l * n_kv_heads + h): */
    int vi_sub_k, vi_sub_v;     /* sub-vector lengths (1, 2, 4 or 8, dividing head_dim) */
    uint64_t vi_seed;           /* the rotation's seed (vq_rotation_create) */
    int vi_vnorm;               /* 1: the value codebooks were trained on unit-norm rows (the codec
                                 * stores each value row's norm in fp16 and codes v / ||v||) */
    float *vi_smooth;           /* [L][Hkv][d]: λ > 0 (the key channel's max |k| over the text) */
    float *vi_cb_k;             /* [L][Hkv][d / sub_k][CB][sub_k] */
    float *vi_cb_v;             /* [L][Hkv][d / sub_v][CB][sub_v] */
    /* version 4 (has_lowrank = 1; all NULL in a version 3 file): per layer l and KV head h, the
     * lowrank codec's projections (docs/calibration-format.md says how calibrate makes them).
     * Values: the principal axes of E[v vᵀ] (not centred: a zero row stays zero), row j of v_basis
     * = unit eigenvector j, eigenvalues descending. Keys: query-weighted axes: with S = (M_q + εI)^½,
     * M_q = Σ_{g in group} E[q_g q_gᵀ], the eigenvectors p_j of S E[k kᵀ] S (descending); a key is
     * coded as c_j = k_basis[j]·k (k_basis[j] = S p_j) and read back as Σ_j c_j k_dec[j]
     * (k_dec[j] = S⁻¹ p_j), so rank r minimizes the expected squared score error. The codec of
     * rank r keeps rows 0..r-1. */
    int has_lowrank;
    float *k_eig, *v_eig;       /* [L][Hkv][d]: eigenvalues (S E[kkᵀ] S; E[vvᵀ]), descending, >= 0 */
    float *k_basis, *v_basis;   /* [L][Hkv][d][d]: row j = the coding vector of axis j */
    float *k_dec;               /* [L][Hkv][d][d]: row j = the reading vector of key axis j */
} vq_calib;

/* Channel i and its pair partner under the file's pair layout: pair p holds channels
 * vq_calib_pair_ch(c, p, 0) and vq_calib_pair_ch(c, p, 1), p < head_dim / 2. */
static inline int vq_calib_pair_ch(const vq_calib *c, int p, int which) {
    return c->rope_neox ? p + which * (c->head_dim / 2) : 2 * p + which;
}

/* Allocate the arrays for the dims already set in c (zeroed); the version 4 arrays too when
 * c->has_lowrank. */
vq_status vq_calib_alloc(vq_calib *c, vq_err *err);
void vq_calib_free(vq_calib *c);   /* frees the arrays; c may be zeroed or half made */
/* Allocate the VecInfer arrays (zeroed) for sub-vector lengths sub_k, sub_v (VQ_ERR_ARG when one
 * is not 1, 2, 4 or 8 or does not divide head_dim). */
vq_status vq_calib_vi_alloc(vq_calib *c, int sub_k, int sub_v, uint64_t seed, vq_err *err);
/* floats per (layer, KV head) of each VecInfer codebook array: head_dim * VQ_CALIB_VI_CB */
static inline size_t vq_calib_vi_cb_floats(const vq_calib *c) { return (size_t)c->head_dim * VQ_CALIB_VI_CB; }
size_t vq_calib_file_bytes(const vq_calib *c);   /* exact size of the file for c's dims */

/* Serialize to / parse from memory. parse checks every field (magic, version, sizes against the
 * length, bounds, both CRC-32s, every value finite, second moments >= 0): VQ_ERR_FORMAT naming
 * the field; on error c is left zeroed. */
vq_status vq_calib_parse(const uint8_t *buf, size_t len, vq_calib *c, vq_err *err);
vq_status vq_calib_serialize(const vq_calib *c, uint8_t **buf, size_t *len, vq_err *err);

/* Files: write atomically (temp file beside it, fsync, rename, fsync of the folder); read a
 * regular file only (VQ_ERR_IO naming the path and why; VQ_ERR_FORMAT for a corrupt file). */
vq_status vq_calib_write(const vq_calib *c, const char *path, vq_err *err);
vq_status vq_calib_read(const char *path, vq_calib *c, vq_err *err);

/* The model a calibration is for must match: layers, heads, KV heads, head_dim (VQ_ERR_STATE
 * naming the path, what differs, both values). hash 0 / name NULL skip those two checks. */
vq_status vq_calib_check(const vq_calib *c, const char *path, int n_layers, int n_heads,
                         int n_kv_heads, int head_dim, const char *model, uint64_t config_hash,
                         vq_err *err);

/* The key pre-transform k' = scale ⊙ (k − cent) of (layer, KV head) (store keys kmean=/kscale=,
 * calib.c says how): cent = the mean key when mean, else 0; scale_i ∝ (query energy / key
 * variance)^alpha (alpha 0: all 1). head_dim floats each. */
void vq_calib_key_affine(const vq_calib *c, int layer, int kv_head, int mean, double alpha,
                         float *cent, float *scale);

/* FNV-1a 64 over text (the model layer builds the config text; eval calls this). */
uint64_t vq_calib_config_hash(const char *text);
/* VecInfer section training (codec_vecinfer.c; run by `veloxquant calibrate --vecinfer` through
 * the lab door). */
/* Train one (layer, KV head): k, v = n rows of d floats (after RoPE, as the cache gets them).
 * smooth[d] = λ_i = (max_r |k_ri|)^alpha (the paper: alpha 1; the seeds' MLX port: 0.5; floored
 * at 1e-6 of the largest, and at 1e-30); the keys are
 * coded as Π(k / λ) with Π = vq_rotation_create(d, rot_seed); cb_k = d / sub_k codebooks of
 * VQ_CALIB_VI_CB entries of sub_k floats ([m][c][t]), k-means (k-means++ seeding from seed, then
 * 20 Lloyd steps) of those sub-vectors; cb_v the same of the raw values, or with vnorm of
 * the values scaled to unit norm (rows of norm 0 left out). d % 16 == 0,
 * d <= 256, n >= 1. VQ_ERR_ARG / VQ_ERR_NOMEM with a message. */
vq_status vq_vi_train_head(const float *k, const float *v, int n, int d, int sub_k, int sub_v,
                           double alpha, int vnorm, uint64_t rot_seed, uint64_t seed, float *smooth, float *cb_k,
                           float *cb_v, vq_err *err);

#endif
