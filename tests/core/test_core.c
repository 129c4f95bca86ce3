/* test_core.c: fp16/bf16 conversion, the RNG's reproducibility and moments, errors. */
#include "core/core.h"
#include "../vq_test.h"

int main(void) {
    /* fp16: exact round trip of every finite half */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if (((h >> 10) & 0x1f) == 31) continue;
        if (vq_f32_to_f16(vq_f16_to_f32((vq_f16)h)) != h) bad++;
    }
    CHECKF(bad == 0, "%d halves do not round-trip", bad);
    CHECK(vq_f16_to_f32(0x3c00) == 1.0f);
    CHECK(vq_f16_to_f32(0xc000) == -2.0f);
    CHECK(vq_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(vq_f32_to_f16(1e6f) == 0x7c00);
    CHECK(vq_f32_to_f16(1.0f + 1.0f / 4096) == 0x3c00);   /* tie rounds to even */
    CHECK(vq_f32_to_f16(5.96046448e-08f) == 0x0001);      /* smallest subnormal */
    CHECK(isnan(vq_f16_to_f32(vq_f32_to_f16(NAN))));
    CHECK(vq_bf16_to_f32(vq_f32_to_bf16(1.5f)) == 1.5f);

    /* RNG: fixed seed gives fixed numbers (pure integer arithmetic, same on every machine) */
    vq_rng a, b;
    vq_rng_seed(&a, 42); vq_rng_seed(&b, 42);
    uint64_t first = vq_rng_u64(&a);
    CHECK(first == vq_rng_u64(&b));
    vq_rng_seed(&b, 43);
    CHECK(first != vq_rng_u64(&b));
    double s = 0, s2 = 0; int n = 200000;
    vq_rng_seed(&a, 7);
    for (int i = 0; i < n; i++) { double g = vq_rng_gauss(&a); s += g; s2 += g * g; }
    CHECK_NEAR(s / n, 0.0, 0.01);
    CHECK_NEAR(s2 / n, 1.0, 0.02);

    vq_err e; vq_err_clear(&e);
    CHECK(vq_err_set(&e, VQ_ERR_ARG, "bad %s=%d", "k", 9) == VQ_ERR_ARG);
    CHECK(strcmp(e.msg, "bad k=9") == 0);
    CHECK(vq_peak_rss_bytes() > 0 && vq_rss_bytes() > 0);
    return vq_t_done();
}
