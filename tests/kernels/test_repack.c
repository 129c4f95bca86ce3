/* test_repack.c: q4_0x16, q4_Kx16 and q6_Kx16 (src/kernels/repack.c), Q4_0 / Q4_K / Q6_K rows
 * interleaved 16 at a time, give the source type's scalar kernel's bits: the scalar q4_0x16 kernel and (where the CPU has AVX-512 VNNI) the
 * AVX-512 one, through vq_matmul_isa (1 token = decode, 2..13 tokens = the token tiles and their
 * tails) and on a sub-range of groups with ldy > rows, as matmul.c's chunks call it. Weights are
 * random blocks (every nibble reachable) with finite fp16 scales; activations Gaussian with
 * outliers. Shapes the repack refuses (rows not a multiple of 16, cols not of 32) return -1. */
#include "kernels/kernels_impl.h"
#include "../vq_test.h"
#include <omp.h>

static void random_q4_0(vq_rng *rng, int rows, int cols, uint8_t *W) {
    size_t nbl = (size_t)rows * (cols / VQ_QK);
    for (size_t i = 0; i < nbl * sizeof(vq_block_q4_0); i++) W[i] = (uint8_t)vq_rng_u64(rng);
    for (size_t b = 0; b < nbl; b++) {
        vq_f16 h = vq_f32_to_f16(0.002f * exp2f(4.0f * vq_rng_uniformf(rng) - 2.0f) * (b % 7 ? 1.0f : -1.0f));
        memcpy(W + sizeof(vq_block_q4_0) * b, &h, 2);
    }
}

/* Q4_K blocks: random bytes (every scale, min and code reachable) with finite fp16 d, dmin */
static void random_q4_k(vq_rng *rng, int rows, int cols, uint8_t *W) {
    size_t nbl = (size_t)rows * (cols / VQ_QKK);
    for (size_t i = 0; i < nbl * sizeof(vq_block_q4_k); i++) W[i] = (uint8_t)vq_rng_u64(rng);
    for (size_t b = 0; b < nbl; b++)
        for (int f = 0; f < 2; f++) {
            vq_f16 h = vq_f32_to_f16(0.002f * exp2f(4.0f * vq_rng_uniformf(rng) - 2.0f) * (f ? 0.1f : 1.0f));
            memcpy(W + sizeof(vq_block_q4_k) * b + 2 * f, &h, 2);
        }
}

/* Q6_K blocks: random codes and int8 scales, a finite fp16 d (the last two bytes) */
static void random_q6_k(vq_rng *rng, int rows, int cols, uint8_t *W) {
    size_t nbl = (size_t)rows * (cols / VQ_QKK);
    for (size_t i = 0; i < nbl * sizeof(vq_block_q6_k); i++) W[i] = (uint8_t)vq_rng_u64(rng);
    for (size_t b = 0; b < nbl; b++) {
        vq_f16 h = vq_f32_to_f16(0.002f * exp2f(4.0f * vq_rng_uniformf(rng) - 2.0f));
        memcpy(W + sizeof(vq_block_q6_k) * b + 208, &h, 2);
    }
}

static void check(vq_rng *rng, uint32_t st, int rows, int cols, int n) {
    const uint32_t dt = st == VQ_TYPE_Q4_0 ? VQ_TYPE_Q4_0X16 : st == VQ_TYPE_Q4_K ? VQ_TYPE_Q4_KX16 : VQ_TYPE_Q6_KX16;
    size_t rb = vq_wtype_row_bytes(st, cols), rd = vq_wtype_row_bytes(dt, cols);
    CHECK(st == VQ_TYPE_Q4_K ? rd == rb / 144 * 148 : rd == rb);   /* q4_Kx16: scales unpacked */
    uint8_t *W = malloc(rb * rows), *P = malloc(rd * rows);
    float *X = malloc(sizeof(float) * n * cols), *Y0 = malloc(sizeof(float) * n * rows),
          *Y1 = malloc(sizeof(float) * n * rows);
    if (st == VQ_TYPE_Q4_0) random_q4_0(rng, rows, cols, W);
    else if (st == VQ_TYPE_Q4_K) random_q4_k(rng, rows, cols, W);
    else random_q6_k(rng, rows, cols, W);
    CHECK((st == VQ_TYPE_Q4_0 ? vq_q4_0x16_repack : st == VQ_TYPE_Q4_K ? vq_q4_kx16_repack : vq_q6_kx16_repack)(
              W, P, rows, cols) == 0);
    for (int i = 0; i < n * cols; i++) X[i] = (float)vq_rng_gauss(rng) * (i % 13 == 0 ? 3.0f : 1.0f);
    vq_matmul_isa(VQ_ISA_SCALAR, Y0, W, st, X, n, rows, cols);
    for (int isa = VQ_ISA_SCALAR; isa <= (int)vq_cpu_best_isa(); isa++) {
        vq_matmul_isa((vq_isa)isa, Y1, P, dt, X, n, rows, cols);
        int bad = 0;
        for (int i = 0; i < n * rows; i++) bad += memcmp(&Y0[i], &Y1[i], 4) != 0;
        CHECKF(bad == 0, "%s %s %dx%d n=%d: %d outputs differ from %s's scalar bits",
               vq_isa_name((vq_isa)isa), vq_wtype_get(dt)->name, rows, cols, n, bad, vq_wtype_get(st)->name);
    }
    free(W); free(P); free(X); free(Y0); free(Y1);
}

/* the AVX-512 kernel on groups [16, rows) with ldy > rows */
static void check_direct(vq_rng *rng, int rows, int cols, int n) {
    __builtin_cpu_init();
    if (vq_cpu_best_isa() < VQ_ISA_AVX512 || !__builtin_cpu_supports("avx512vnni")) return;
    int nb = cols / VQ_QK, ldy = rows + 5;
    size_t rb = vq_wtype_row_bytes(VQ_TYPE_Q4_0, cols), qs = vq_q8act_stride(nb);
    uint8_t *W = malloc(rb * rows), *P = malloc(rb * rows), *xa = vq_aligned_alloc(qs * n);
    float *X = malloc(sizeof(float) * cols);
    float *Y0 = malloc(sizeof(float) * n * ldy), *Y1 = malloc(sizeof(float) * n * ldy);
    random_q4_0(rng, rows, cols, W);
    CHECK(vq_q4_0x16_repack(W, P, rows, cols) == 0);
    for (int t = 0; t < n; t++) {
        for (int c = 0; c < cols; c++) X[c] = (float)vq_rng_gauss(rng);
        vq_q8act_quantize(X, cols, xa + qs * t);
    }
    for (int i = 0; i < n * ldy; i++) Y0[i] = Y1[i] = -1.0f;   /* the gap columns must stay */
    vq_rows_q4_0_scalar(W + 16 * rb, rb, rows - 16, xa, qs, n, nb, Y0 + 16, ldy);
    vq_rows_q4_0x16_avx512vnni(P + 16 * rb, rb, rows - 16, xa, qs, n, nb, Y1 + 16, ldy);
    CHECKF(memcmp(Y0, Y1, sizeof(float) * n * ldy) == 0, "direct q4_0x16 rows=%d cols=%d n=%d: bits differ",
           rows, cols, n);
    free(W); free(P); free(xa); free(X); free(Y0); free(Y1);
}

int main(void) {
    uint64_t seed = vq_t_seed(20261208);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    omp_set_num_threads(2);
    const int ns[] = {1, 2, 3, 4, 5, 8, 13, 64};
    const int rs[] = {16, 32, 48, 80, 256};
    for (size_t ni = 0; ni < VQ_ARRAY_LEN(ns); ni++)
        for (size_t ri = 0; ri < VQ_ARRAY_LEN(rs); ri++)
            for (int k = 0; k < 3; k++)
                check(&rng, k == 0 ? VQ_TYPE_Q4_0 : k == 1 ? VQ_TYPE_Q4_K : VQ_TYPE_Q6_K, rs[ri],
                      (k ? 256 : 32) * (1 + 7 * (int)((ri + ni) % 3)) + (ri == 4 ? 2048 : 0), ns[ni]);
    for (int n = 1; n <= 6; n++) check_direct(&rng, 16 + 16 * n, 96 + 32 * n, n);
    uint8_t buf[18 * 64];
    CHECK(vq_q4_0x16_repack(buf, buf, 8, 32) == -1);
    CHECK(vq_q4_0x16_repack(buf, buf, 16, 40) == -1);
    CHECK(vq_q4_0x16_repack(buf, buf, 0, 32) == -1);
    CHECK(vq_q4_kx16_repack(buf, buf, 16, 32) == -1);
    CHECK(vq_q6_kx16_repack(buf, buf, 24, 256) == -1);
    return vq_t_done();
}
