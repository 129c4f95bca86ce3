/* codec_dev.c: codec states described for device kernels (codec_dev.h). Reads the private state
 * of the rows it knows (codec_ggml.h, tq.h), so that nothing outside the codec layer does. */
#include <math.h>
#include <string.h>
#include "codec/codec_dev.h"
#include "codec/codec_ggml.h"
#include "codec/tq.h"

extern const vq_codec vq_codec_f16, vq_codec_q8_0, vq_codec_q4_0, vq_codec_turboquant_mse;

vq_status vq_codec_dev_info(const vq_codec_state *st, vq_codec_dev *out, vq_err *err) {
    memset(out, 0, sizeof *out);
    const vq_codec *c = st->codec;
    out->d = st->d;
    out->rows_per_block = st->rows_per_block;
    out->block_bytes = st->block_bytes;
    out->rot_scale = 1.0f;
    out->enc_scale = 1.0f;
    if (c == &vq_codec_f16) {
        out->kind = VQ_CODEC_DEV_F16;
        return VQ_OK;
    }
    if (c == &vq_codec_q8_0 || c == &vq_codec_q4_0) {
        const vq_ggml_impl *im = st->impl;
        if (st->side == VQ_SIDE_K && !im->lanes)
            return vq_err_set(err, VQ_ERR_ARG, "device kernels: %s keys need layout=lanes (the default), "
                              "not layout=rows", c->name);
        out->kind = c == &vq_codec_q8_0 ? VQ_CODEC_DEV_Q8_0 : VQ_CODEC_DEV_Q4_0;
        out->lanes = im->lanes;
        if (im->rotate && im->span != st->d)
            return vq_err_set(err, VQ_ERR_ARG, "device kernels: %s rotates whole rows only (rot=%d "
                              "given, head_dim %d)", c->name, im->span, st->d);
        if (im->rotate) {
            out->rot_sign = im->sgn;
            out->rot_scale = (float)(1.0 / sqrt((double)st->d));
            out->enc_scale = 1.0f / sqrtf((float)im->span);   /* vq_ggml_rot's factor, as it computes it */
        }
        return VQ_OK;
    }
    if (c == &vq_codec_turboquant_mse) {
        const vq_tq *t = st->impl;
        if (t->bits != 4 || !t->lanes)
            return vq_err_set(err, VQ_ERR_ARG, "device kernels: turboquant_mse needs bits=4 in the lanes "
                              "layout (got bits=%d, layout=%s)", t->bits, t->lanes ? "lanes" : "packed");
        if (!vq_rotation_signs(t->rot))
            return vq_err_set(err, VQ_ERR_ARG, "device kernels: turboquant_mse needs a Hadamard rotation "
                              "(head_dim a power of two), got d=%d", st->d);
        out->kind = VQ_CODEC_DEV_TQ_MSE4;
        out->lanes = st->side == VQ_SIDE_K;
        out->norm32 = t->norm32;
        out->rot_sign = vq_rotation_signs(t->rot);
        out->cent = t->cent1;
        out->bound = t->cb1->b;
        return VQ_OK;
    }
    return vq_err_set(err, VQ_ERR_ARG, "device kernels: no kernel reads %s codes (f16, q8_0, q4_0 and "
                      "turboquant_mse at 4 bits have one)", c->name);
}
