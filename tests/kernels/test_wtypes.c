/* test_wtypes.c: the weight-type table: block sizes, row sizes, and every type's to_float on
 * hand-built blocks whose values are known exactly; vq_get_row; misuse gives NaN, not a crash. */
#include "kernels/kernels_impl.h"
#include "../vq_test.h"

int main(void) {
    /* table rows and sizes */
    const uint32_t types[] = {VQ_TYPE_F32, VQ_TYPE_F16, VQ_TYPE_BF16, VQ_TYPE_Q8_0, VQ_TYPE_Q4_0, VQ_TYPE_Q4_1};
    const size_t bytes[] = {4, 2, 2, 34, 18, 20};
    const int block[] = {1, 1, 1, 32, 32, 32};
    for (size_t i = 0; i < VQ_ARRAY_LEN(types); i++) {
        const vq_wtype *t = vq_wtype_get(types[i]);
        CHECKF(t != NULL, "type %u missing", types[i]);
        if (!t) continue;
        CHECKF(t->block_bytes == bytes[i] && t->block == block[i], "%s: block %d bytes %zu", t->name, t->block, t->block_bytes);
        CHECK(vq_wtype_row_bytes(types[i], 64) == (size_t)(64 / block[i]) * bytes[i]);
        CHECK(vq_matmul_supported(types[i], 64));
    }
    CHECK(vq_wtype_get(12345) == NULL);
    CHECK(vq_wtype_row_bytes(VQ_TYPE_Q4_1, 33) == 0);
    CHECK(vq_wtype_row_bytes(VQ_TYPE_Q4_1, 576) == 18 * 20);
    CHECK(vq_wtype_row_bytes(VQ_TYPE_F16, 7) == 14);
    CHECK(!vq_matmul_supported(VQ_TYPE_Q8_0, 33));
    CHECK(!vq_matmul_supported(12345, 64));
    CHECK(!vq_matmul_supported(VQ_TYPE_F32, 0));
    /* K-quants: 256-element super-blocks; a row of 576 (SmolLM2's width) cannot be one */
    const uint32_t ktypes[] = {VQ_TYPE_Q2_K, VQ_TYPE_Q3_K, VQ_TYPE_Q4_K, VQ_TYPE_Q5_K, VQ_TYPE_Q6_K, VQ_TYPE_IQ4_XS};
    const size_t kbytes[] = {84, 110, 144, 176, 210, 136};
    for (size_t i = 0; i < VQ_ARRAY_LEN(ktypes); i++) {
        const vq_wtype *t = vq_wtype_get(ktypes[i]);
        CHECKF(t && t->block == 256 && t->block_bytes == kbytes[i], "K type %u: block/bytes", ktypes[i]);
        CHECK(vq_matmul_supported(ktypes[i], 1536) && !vq_matmul_supported(ktypes[i], 576));
        CHECK(vq_wtype_row_bytes(ktypes[i], 576) == 0 && vq_wtype_row_bytes(ktypes[i], 512) == 2 * kbytes[i]);
    }
    const uint32_t t32[] = {VQ_TYPE_Q5_0, VQ_TYPE_Q5_1, VQ_TYPE_IQ4_NL};
    const size_t b32[] = {22, 24, 18};
    for (size_t i = 0; i < VQ_ARRAY_LEN(t32); i++) {
        const vq_wtype *t = vq_wtype_get(t32[i]);
        CHECKF(t && t->block == 32 && t->block_bytes == b32[i], "type %u: block/bytes", t32[i]);
        CHECK(vq_matmul_supported(t32[i], 576));
    }

    float out[64];
    /* q8_0: d = -0.5, qs = j - 16 (covers negatives, zero, positives) and -128 at the end */
    vq_block_q8_0 b8[2];
    b8[0].d = vq_f32_to_f16(-0.5f);
    b8[1].d = vq_f32_to_f16(0.125f);
    for (int j = 0; j < 32; j++) { b8[0].qs[j] = (int8_t)(j - 16); b8[1].qs[j] = (int8_t)(j * 8 - 128); }
    vq_wtype_get(VQ_TYPE_Q8_0)->to_float(b8, out, 64);
    int bad = 0;
    for (int j = 0; j < 32; j++) {
        bad += out[j] != -0.5f * (float)(j - 16);
        bad += out[32 + j] != 0.125f * (float)(j * 8 - 128);
    }
    CHECKF(bad == 0, "q8_0: %d of 64 values wrong", bad);

    /* q4_0: byte j holds element j (low nibble) and element j+16 (high nibble); x = d*(q-8) */
    vq_block_q4_0 b40;
    b40.d = vq_f32_to_f16(0.25f);
    for (int j = 0; j < 16; j++) b40.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    vq_wtype_get(VQ_TYPE_Q4_0)->to_float(&b40, out, 32);
    bad = 0;
    for (int j = 0; j < 16; j++) {
        bad += out[j] != 0.25f * (float)(j - 8);
        bad += out[j + 16] != 0.25f * (float)(15 - j - 8);
    }
    CHECKF(bad == 0, "q4_0: %d of 32 values wrong (nibble order?)", bad);

    /* q4_1: x = d*q + m */
    vq_block_q4_1 b41;
    b41.d = vq_f32_to_f16(0.5f);
    b41.m = vq_f32_to_f16(-1.5f);
    for (int j = 0; j < 16; j++) b41.qs[j] = (uint8_t)(((j * 7) & 15) | (((j * 3 + 1) & 15) << 4));
    vq_wtype_get(VQ_TYPE_Q4_1)->to_float(&b41, out, 32);
    bad = 0;
    for (int j = 0; j < 16; j++) {
        bad += out[j] != 0.5f * (float)((j * 7) & 15) - 1.5f;
        bad += out[j + 16] != 0.5f * (float)((j * 3 + 1) & 15) - 1.5f;
    }
    CHECKF(bad == 0, "q4_1: %d of 32 values wrong", bad);

    /* f16 / bf16 / f32 */
    const float vals[5] = {1.0f, -2.5f, 0.0009765625f, 65504.0f, -0.0f};
    vq_f16 h[5]; vq_bf16 bh[5];
    for (int j = 0; j < 5; j++) { h[j] = vq_f32_to_f16(vals[j]); bh[j] = vq_f32_to_bf16(vals[j]); }
    vq_wtype_get(VQ_TYPE_F16)->to_float(h, out, 5);
    bad = 0;
    for (int j = 0; j < 5; j++) bad += out[j] != vals[j];
    CHECKF(bad == 0, "f16: %d wrong", bad);
    vq_wtype_get(VQ_TYPE_BF16)->to_float(bh, out, 5);
    bad = 0;
    for (int j = 0; j < 4; j++) bad += out[j] != vq_bf16_to_f32(bh[j]);
    CHECK(out[0] == 1.0f && out[1] == -2.5f);
    CHECKF(bad == 0, "bf16: %d wrong", bad);
    vq_wtype_get(VQ_TYPE_F32)->to_float(vals, out, 5);
    CHECK(memcmp(out, vals, sizeof vals) == 0);

    /* get_row: row 1 of the 2-row q8_0 "matrix" b8 with 32 columns */
    vq_get_row(b8, VQ_TYPE_Q8_0, 32, 1, out);
    CHECK(out[0] == -16.0f && out[31] == 0.125f * 120.0f);
    vq_get_row(b8, 12345, 4, 0, out);
    CHECK(isnan(out[0]) && isnan(out[3]));
    vq_get_row(b8, VQ_TYPE_Q8_0, 31, 0, out);   /* not a multiple of the block */
    CHECK(isnan(out[0]));

    /* matmul misuse: NaN out, nothing read past W */
    float x[33] = {0}, y[2] = {0, 0};
    vq_matmul(y, b8, VQ_TYPE_Q8_0, x, 1, 2, 33);
    CHECK(isnan(y[0]) && isnan(y[1]));
    /* a K-quant matrix of 576 columns: NaN, not a read past the row */
    uint8_t kq[2 * 144] = {0};
    float x576[576] = {0};
    y[0] = y[1] = 0;
    vq_matmul(y, kq, VQ_TYPE_Q4_K, x576, 1, 2, 576);
    CHECK(isnan(y[0]) && isnan(y[1]));
    return vq_t_done();
}
