/* cuda_kv.c: a layer's codec states described for the CUDA kernels (vq_cuda.h). Plain C, no
 * CUDA: the codec layer says what its bytes are (codec_dev.h), this checks that a kernel reads
 * them and copies the rotation factors and codebooks into the kernels' by-value format. */
#include <math.h>
#include <string.h>
#include "backend/cuda/vq_cuda.h"
#include "codec/codec_dev.h"

static int kv_type(int kind) {
    switch (kind) {
    case VQ_CODEC_DEV_F16: return VQ_CUDA_KV_F16;
    case VQ_CODEC_DEV_Q8_0: return VQ_CUDA_KV_Q8_0;
    case VQ_CODEC_DEV_Q4_0: return VQ_CUDA_KV_Q4_0;
    case VQ_CODEC_DEV_TQ_MSE4: return VQ_CUDA_KV_TQ4;
    default: return 0;
    }
}

static void put_rot(const vq_codec_dev *c, int *flag, float *r) {
    *flag = c->rot_sign != NULL;
    for (int i = 0; i < c->d; i++) r[i] = c->rot_sign ? c->rot_sign[i] * c->rot_scale : 1.0f;
}

vq_status vq_cuda_kv_format_init(vq_cuda_kv_format *f, const struct vq_codec_state *k,
                                 const struct vq_codec_state *v, int n_heads, int n_kv_heads,
                                 vq_err *err) {
    memset(f, 0, sizeof *f);
    vq_codec_dev ck, cv;
    vq_status s = vq_codec_dev_info(k, &ck, err);
    if (!s) s = vq_codec_dev_info(v, &cv, err);
    if (s) return s;
    if (ck.kind != cv.kind || ck.d != cv.d || ck.norm32 != cv.norm32)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: keys (%s) and values (%s) must use the same codec "
                          "and parameters", k->codec->name, v->codec->name);
    if (ck.d != 64 && ck.d != 128)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: head_dim %d has no kernel (64 or 128)", ck.d);
    if (n_kv_heads < 1 || n_heads % n_kv_heads || n_heads / n_kv_heads > VQ_CUDA_MAX_G)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: %d query heads over %d KV heads: the kernels take "
                          "1 to %d query heads per KV head", n_heads, n_kv_heads, VQ_CUDA_MAX_G);
    if ((ck.kind != VQ_CODEC_DEV_F16 && !ck.lanes) || cv.lanes || cv.rows_per_block != 1)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: keys in 16-row lanes blocks and values one row per "
                          "block are what the kernels read");
    f->type = kv_type(ck.kind);
    f->head_dim = ck.d;
    f->n_heads = n_heads;
    f->n_kv_heads = n_kv_heads;
    f->norm32 = ck.norm32;
    put_rot(&ck, &f->rot_k, f->rk);
    put_rot(&cv, &f->rot_v, f->rv);
    for (int i = 0; i < 16; i++) {
        f->cent_k[i] = ck.cent ? ck.cent[i] : 0.0f;
        f->cent_v[i] = cv.cent ? cv.cent[i] : 0.0f;
    }
    f->k_block_bytes = ck.block_bytes;
    f->v_row_bytes = cv.block_bytes;
    return VQ_OK;
}

size_t vq_cuda_kv_bytes(const vq_cuda_kv_format *f, int64_t n) {
    const int64_t rpb = f->type == VQ_CUDA_KV_F16 ? 1 : 16;
    return (size_t)(n / rpb) * f->k_block_bytes + (size_t)n * f->v_row_bytes;
}

vq_status vq_cuda_enc_init(vq_cuda_enc *e, const struct vq_codec_state *st, vq_err *err) {
    memset(e, 0, sizeof *e);
    vq_codec_dev c;
    vq_status s = vq_codec_dev_info(st, &c, err);
    if (s) return s;
    if (c.kind == VQ_CODEC_DEV_F16)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: f16 rows need no encoder (vq_cuda_kv_put_f16)");
    if (c.d < 32 || c.d > VQ_CUDA_MAX_D || c.d % 32)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: no encoder for head_dim %d (32..%d, a multiple of 32)", c.d,
                          VQ_CUDA_MAX_D);
    if (c.kind == VQ_CODEC_DEV_TQ_MSE4 && !c.bound)
        return vq_err_set(err, VQ_ERR_ARG, "cuda: turboquant_mse state without its boundaries");
    e->type = kv_type(c.kind);
    e->d = c.d;
    e->lanes = c.lanes;
    e->rotate = c.rot_sign != NULL;
    e->norm32 = c.norm32;
    e->scale = c.enc_scale;
    e->block_bytes = c.block_bytes;
    for (int i = 0; i < c.d; i++) e->sgn[i] = c.rot_sign ? c.rot_sign[i] : 1.0f;
    for (int i = 0; i < 15; i++) e->bound[i] = c.bound ? c.bound[i] : 0.0f;
    e->bound[15] = INFINITY;
    return VQ_OK;
}
