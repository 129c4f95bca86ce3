/* wtypes.c: the weight-type table (one row per ggml type we read) and each type's to_float.
 * Adding a type is adding a row here and a row kernel in matmul*.c; nothing else switches on
 * the type. Block layouts are ggml's, asserted in kernels_impl.h. */
#include "kernels/kernels_impl.h"
#include <float.h>
#include <math.h>
#include <string.h>

static void f32_to_float(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}
static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        vq_f16 h; memcpy(&h, p + 2 * i, 2);
        dst[i] = vq_f16_to_f32(h);
    }
}
static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        vq_bf16 h; memcpy(&h, p + 2 * i, 2);
        dst[i] = vq_bf16_to_f32(h);
    }
}
static void q8_0_to_float(const void *src, float *dst, int64_t n) {
    const vq_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / VQ_QK; i++) {
        float d = vq_f16_to_f32(b[i].d);
        for (int j = 0; j < VQ_QK; j++) dst[i * VQ_QK + j] = d * (float)b[i].qs[j];
    }
}
static void q4_0_to_float(const void *src, float *dst, int64_t n) {
    const vq_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / VQ_QK; i++) {
        float d = vq_f16_to_f32(b[i].d);
        float *y = dst + i * VQ_QK;
        for (int j = 0; j < VQ_QK / 2; j++) {
            y[j] = d * (float)((b[i].qs[j] & 0x0f) - 8);
            y[j + VQ_QK / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}
static void q4_1_to_float(const void *src, float *dst, int64_t n) {
    const vq_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / VQ_QK; i++) {
        float d = vq_f16_to_f32(b[i].d), m = vq_f16_to_f32(b[i].m);
        float *y = dst + i * VQ_QK;
        for (int j = 0; j < VQ_QK / 2; j++) {
            y[j] = (float)(b[i].qs[j] & 0x0f) * d + m;
            y[j + VQ_QK / 2] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

/* ---- from_float: ggml's reference quantizers (quantize_row_*_ref), round to nearest ----
 * Same bytes as ggml and gguf-py for finite input (tests/kernels/test_quant_fixture.c checks
 * gguf-py's); beyond that, non-finite elements are coded as 0 and a scale or min past fp16's
 * range saturates at +-65504 instead of becoming inf, so nothing decodes to NaN. */
static void finite_block(const float *x, float *v) {
    for (int j = 0; j < VQ_QK; j++) v[j] = isfinite(x[j]) ? x[j] : 0.0f;
}
static vq_f16 f16_sat(float v) { return vq_f32_to_f16(fminf(fmaxf(v, -65504.0f), 65504.0f)); }
/* a float code in [lo, hi] (NaN -> lo) before the cast, so the cast is always defined */
static float clampf(float v, float lo, float hi) { return v >= lo ? (v <= hi ? v : hi) : lo; }

static void f32_from_float(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static void f16_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) { vq_f16 h = f16_sat(isfinite(src[i]) ? src[i] : 0.0f); memcpy(p + 2 * i, &h, 2); }
}
static void q8_0_from_float(const float *src, void *dst, int64_t n) {
    vq_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / VQ_QK; i++) {
        float v[VQ_QK], amax = 0.0f;
        finite_block(src + i * VQ_QK, v);
        for (int j = 0; j < VQ_QK; j++) amax = fmaxf(amax, fabsf(v[j]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = f16_sat(d);
        for (int j = 0; j < VQ_QK; j++) b[i].qs[j] = (int8_t)clampf(roundf(v[j] * id), -127.0f, 127.0f);
    }
}
static void q4_0_from_float(const float *src, void *dst, int64_t n) {
    vq_block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / VQ_QK; i++) {
        float v[VQ_QK], amax = 0.0f, mx = 0.0f;
        finite_block(src + i * VQ_QK, v);
        for (int j = 0; j < VQ_QK; j++)
            if (amax < fabsf(v[j])) { amax = fabsf(v[j]); mx = v[j]; }   /* first of the largest */
        float d = mx / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = f16_sat(d);
        for (int j = 0; j < VQ_QK / 2; j++) {
            int a = (int)clampf(v[j] * id + 8.5f, 0.0f, 15.0f);   /* truncation, as ggml's cast */
            int c = (int)clampf(v[j + VQ_QK / 2] * id + 8.5f, 0.0f, 15.0f);
            b[i].qs[j] = (uint8_t)(a | (c << 4));
        }
    }
}
static void q4_1_from_float(const float *src, void *dst, int64_t n) {
    vq_block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / VQ_QK; i++) {
        float v[VQ_QK], mn = FLT_MAX, mx = -FLT_MAX;
        finite_block(src + i * VQ_QK, v);
        for (int j = 0; j < VQ_QK; j++) { mn = fminf(mn, v[j]); mx = fmaxf(mx, v[j]); }
        float d = (mx - mn) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = f16_sat(d);
        b[i].m = f16_sat(mn);
        for (int j = 0; j < VQ_QK / 2; j++) {
            int a = (int)clampf((v[j] - mn) * id + 0.5f, 0.0f, 15.0f);
            int c = (int)clampf((v[j + VQ_QK / 2] - mn) * id + 0.5f, 0.0f, 15.0f);
            b[i].qs[j] = (uint8_t)(a | (c << 4));
        }
    }
}

/* the types read through vq_kdec: x = (d*sc)*q (+ dm*m), each product rounded to float as
 * gguf-py's numpy dequantize rounds it (float32 d*sc first), so the bits agree */
static void kdec_to_float(vq_kdec_fn dec, int blk, size_t bb, const void *src, float *dst, int64_t n) {
    vq_kdec k;
    for (int64_t i = 0; i < n / blk; i++) {
        dec((const uint8_t *)src + (size_t)i * bb, &k);
        float *y = dst + i * blk;
        for (int g = 0; g < blk / 16; g++) {
            float dl = k.d * (float)k.sc[g], ml = k.dm * (float)k.m[g];
            for (int j = g * 16; j < g * 16 + 16; j++)
                y[j] = k.has_min ? dl * (float)k.q[j] + ml : dl * (float)k.q[j];
        }
    }
}
#define KDEC_TO_FLOAT(name, blk, btype)                                                 \
    static void name##_to_float(const void *src, float *dst, int64_t n) {                \
        kdec_to_float(vq_kdec_##name, blk, sizeof(btype), src, dst, n);                  \
    }
KDEC_TO_FLOAT(q5_0, VQ_QK, vq_block_q5_0)
KDEC_TO_FLOAT(q5_1, VQ_QK, vq_block_q5_1)
KDEC_TO_FLOAT(iq4_nl, VQ_QK, vq_block_iq4_nl)
KDEC_TO_FLOAT(q2_k, VQ_QKK, vq_block_q2_k)
KDEC_TO_FLOAT(q3_k, VQ_QKK, vq_block_q3_k)
KDEC_TO_FLOAT(q4_k, VQ_QKK, vq_block_q4_k)
KDEC_TO_FLOAT(q5_k, VQ_QKK, vq_block_q5_k)
KDEC_TO_FLOAT(q6_k, VQ_QKK, vq_block_q6_k)
KDEC_TO_FLOAT(iq4_xs, VQ_QKK, vq_block_iq4_xs)

static const vq_wtype wtypes[] = {
    {VQ_TYPE_F32, "f32", 1, 4, f32_to_float, f32_from_float},
    {VQ_TYPE_F16, "f16", 1, 2, f16_to_float, f16_from_float},
    {VQ_TYPE_BF16, "bf16", 1, 2, bf16_to_float, NULL},
    {VQ_TYPE_Q8_0, "q8_0", VQ_QK, sizeof(vq_block_q8_0), q8_0_to_float, q8_0_from_float},
    {VQ_TYPE_Q4_0, "q4_0", VQ_QK, sizeof(vq_block_q4_0), q4_0_to_float, q4_0_from_float},
    {VQ_TYPE_Q4_1, "q4_1", VQ_QK, sizeof(vq_block_q4_1), q4_1_to_float, q4_1_from_float},
    {VQ_TYPE_Q5_0, "q5_0", VQ_QK, sizeof(vq_block_q5_0), q5_0_to_float, NULL},
    {VQ_TYPE_Q5_1, "q5_1", VQ_QK, sizeof(vq_block_q5_1), q5_1_to_float, NULL},
    {VQ_TYPE_IQ4_NL, "iq4_nl", VQ_QK, sizeof(vq_block_iq4_nl), iq4_nl_to_float, NULL},
    {VQ_TYPE_Q2_K, "q2_K", VQ_QKK, sizeof(vq_block_q2_k), q2_k_to_float, NULL},
    {VQ_TYPE_Q3_K, "q3_K", VQ_QKK, sizeof(vq_block_q3_k), q3_k_to_float, NULL},
    {VQ_TYPE_Q4_K, "q4_K", VQ_QKK, sizeof(vq_block_q4_k), q4_k_to_float, NULL},
    {VQ_TYPE_Q5_K, "q5_K", VQ_QKK, sizeof(vq_block_q5_k), q5_k_to_float, NULL},
    {VQ_TYPE_Q6_K, "q6_K", VQ_QKK, sizeof(vq_block_q6_k), q6_k_to_float, NULL},
    {VQ_TYPE_IQ4_XS, "iq4_xs", VQ_QKK, sizeof(vq_block_iq4_xs), iq4_xs_to_float, NULL},
    {VQ_TYPE_TQW4, "tqw4", VQ_TQW_BLOCK, sizeof(vq_block_tqw4), vq_tqw4_to_float, vq_tqw4_from_float},
    {VQ_TYPE_TQW3, "tqw3", VQ_TQW_BLOCK, sizeof(vq_block_tqw3), vq_tqw3_to_float, vq_tqw3_from_float},
    {VQ_TYPE_TQW2, "tqw2", VQ_TQW_BLOCK, sizeof(vq_block_tqw2), vq_tqw2_to_float, vq_tqw2_from_float},
    /* interleaved rows (repack.c): neither to_float nor from_float, made from Q4_0 by a repack */
    {VQ_TYPE_Q4_0X16, "q4_0x16", VQ_QK, sizeof(vq_block_q4_0), NULL, NULL},
    {VQ_TYPE_Q4_KX16, "q4_Kx16", VQ_QKK, 148, NULL, NULL},
    {VQ_TYPE_Q6_KX16, "q6_Kx16", VQ_QKK, sizeof(vq_block_q6_k), NULL, NULL},
};

const vq_wtype *vq_wtype_get(uint32_t type) {
    for (size_t i = 0; i < VQ_ARRAY_LEN(wtypes); i++)
        if (wtypes[i].type == type) return &wtypes[i];
    return NULL;
}

size_t vq_wtype_row_bytes(uint32_t type, int64_t n) {
    const vq_wtype *t = vq_wtype_get(type);
    if (!t || n < 0 || n % t->block) return 0;
    return (size_t)(n / t->block) * t->block_bytes;
}

void vq_get_row(const void *W, uint32_t type, int cols, int row, float *out) {
    const vq_wtype *t = vq_wtype_get(type);
    size_t rb = vq_wtype_row_bytes(type, cols);
    if (!t || !t->to_float || rb == 0 || row < 0) {   /* unsupported type or cols: NaN makes the misuse visible */
        for (int i = 0; i < cols; i++) out[i] = NAN;
        return;
    }
    t->to_float((const uint8_t *)W + (size_t)row * rb, out, cols);
}
