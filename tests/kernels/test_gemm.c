/* test_gemm.c: the prefill GEMM kernels (src/kernels/gemm.h) give the scalar row kernel's bits,
 * on every ISA the CPU has, for every type that has one: through vq_matmul_isa (n >= the GEMM
 * threshold, odd n, token tails of the 8-token pass), and called directly on row counts that
 * leave panel tails (1..GP-1 rows) and panel-group tails, with ldy > rows. Weights are random
 * blocks (every code reachable) with finite fp16 scales; activations Gaussian with outliers. */
#include "kernels/gemm.h"
#include "../vq_test.h"
#include <omp.h>

typedef struct { uint32_t type; int f16_at[2]; } gtype;
static const gtype TYPES[] = {
    {VQ_TYPE_Q4_0, {0, -1}}, {VQ_TYPE_Q8_0, {0, -1}}, {VQ_TYPE_Q4_K, {0, 2}}, {VQ_TYPE_Q6_K, {208, -1}},
};

static void random_rows(vq_rng *rng, const gtype *gt, int rows, int cols, uint8_t *W) {
    const vq_wtype *wt = vq_wtype_get(gt->type);
    size_t bb = wt->block_bytes, nbl = (size_t)rows * (cols / wt->block);
    for (size_t i = 0; i < bb * nbl; i++) W[i] = (uint8_t)vq_rng_u64(rng);
    for (size_t b = 0; b < nbl; b++)
        for (int f = 0; f < 2; f++) {
            if (gt->f16_at[f] < 0) continue;
            vq_f16 h = vq_f32_to_f16(0.002f * exp2f(4.0f * vq_rng_uniformf(rng) - 2.0f) * (f ? 0.1f : 1.0f));
            memcpy(W + bb * b + gt->f16_at[f], &h, 2);
        }
}

static void check_matmul(vq_rng *rng, const gtype *gt, int rows, int cols, int n) {
    size_t rb = vq_wtype_row_bytes(gt->type, cols);
    uint8_t *W = malloc(rb * rows);
    float *X = malloc(sizeof(float) * n * cols), *Y0 = malloc(sizeof(float) * n * rows),
          *Y1 = malloc(sizeof(float) * n * rows);
    random_rows(rng, gt, rows, cols, W);
    for (int i = 0; i < n * cols; i++) X[i] = (float)vq_rng_gauss(rng) * (i % 13 == 0 ? 3.0f : 1.0f);
    vq_matmul_isa(VQ_ISA_SCALAR, Y0, W, gt->type, X, n, rows, cols);
    for (int isa = VQ_ISA_AVX2; isa <= (int)vq_cpu_best_isa(); isa++) {
        if (!vq_gemm_pick(gt->type, (vq_isa)isa)) continue;   /* the row kernel: test_matmul.c */
        vq_matmul_isa((vq_isa)isa, Y1, W, gt->type, X, n, rows, cols);
        int bad = 0;
        for (int i = 0; i < n * rows; i++) bad += memcmp(&Y0[i], &Y1[i], 4) != 0;
        CHECKF(bad == 0, "%s %s %dx%d n=%d: %d outputs differ from the scalar kernel's bits",
               vq_isa_name((vq_isa)isa), vq_wtype_get(gt->type)->name, rows, cols, n, bad);
    }
    free(W); free(X); free(Y0); free(Y1);
}

/* the kernel itself on a sub-range of rows with ldy > rows (as matmul.c's chunks call it) */
static void check_direct(vq_rng *rng, const gtype *gt, int rows, int cols, int n, vq_isa isa) {
    vq_rows_fn g = vq_gemm_pick(gt->type, isa);
    if (!g) return;
    int nb = cols / VQ_QK, ldy = rows + 5;
    size_t rb = vq_wtype_row_bytes(gt->type, cols), qs = vq_q8act_stride(nb);
    uint8_t *W = malloc(rb * rows), *xa = vq_aligned_alloc(qs * n);
    float *X = malloc(sizeof(float) * cols);
    float *Y0 = malloc(sizeof(float) * n * ldy), *Y1 = malloc(sizeof(float) * n * ldy);
    random_rows(rng, gt, rows, cols, W);
    for (int t = 0; t < n; t++) {
        for (int c = 0; c < cols; c++) X[c] = (float)vq_rng_gauss(rng);
        vq_q8act_quantize(X, cols, xa + qs * t);
    }
    vq_rows_fn ref = gt->type == VQ_TYPE_Q4_0 ? vq_rows_q4_0_scalar : gt->type == VQ_TYPE_Q8_0 ? vq_rows_q8_0_scalar
                   : gt->type == VQ_TYPE_Q4_K ? vq_rows_q4_k_scalar : vq_rows_q6_k_scalar;
    for (int i = 0; i < n * ldy; i++) Y0[i] = Y1[i] = -1.0f;   /* the gap columns must stay */
    ref(W, rb, rows, xa, qs, n, nb, Y0, ldy);
    g(W, rb, rows, xa, qs, n, nb, Y1, ldy);
    CHECKF(memcmp(Y0, Y1, sizeof(float) * n * ldy) == 0, "direct %s %s rows=%d cols=%d n=%d: bits differ",
           vq_isa_name(isa), vq_wtype_get(gt->type)->name, rows, cols, n);
    free(W); vq_aligned_free(xa); free(X); free(Y0); free(Y1);
}

int main(void) {
    uint64_t seed = vq_t_seed(20261207);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    omp_set_num_threads(2);
    for (size_t ti = 0; ti < VQ_ARRAY_LEN(TYPES); ti++) {
        const gtype *gt = &TYPES[ti];
        int blk = vq_wtype_get(gt->type)->block;
        const int ns[] = {VQ_GEMM_MIN_TOKENS, 9, 17, 31};
        const int rs[] = {1, 7, 16, 33, 70, 131};
        for (size_t ni = 0; ni < VQ_ARRAY_LEN(ns); ni++)
            for (size_t ri = 0; ri < VQ_ARRAY_LEN(rs); ri++)
                check_matmul(&rng, gt, rs[ri], blk == 256 ? 256 * (1 + (int)(ri % 3)) : 32 * (1 + 5 * (int)(ri % 3)), ns[ni]);
        for (int isa = VQ_ISA_AVX2; isa <= (int)vq_cpu_best_isa(); isa++)
            for (int rows = 1; rows <= 70; rows += 3)
                check_direct(&rng, gt, rows, blk == 256 ? 512 : 96, 1 + rows % 12, (vq_isa)isa);
    }
    return vq_t_done();
}
