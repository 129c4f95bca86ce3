/* test_tqw.c: the TurboQuant weight types tqw4 / tqw3 / tqw2 beyond what test_matmul.c checks:
 * (1) the level tables are the Gaussian Lloyd-Max quantizers, recomputed here from scratch, and
 * the signs are vq_rng's output for the stated seed; (2) the rotation is orthogonal with entries
 * +-1/8; (3) to_float is the exact inverse rotation of the decoded codes (float64 reference);
 * (4) from_float picks, for its codes, the least-squares scale, and reaches a reconstruction error
 * below the Lloyd-Max distortion of a Gaussian at that width (and below q4_0's at 4 bits);
 * (5) every ISA's row kernel gives the exact integer dot on a case with exact arithmetic;
 * (6) NaN / inf / zero / huge blocks: no crash, no NaN out of finite input, zero block -> d = 0. */
#include "kernels/kernels_impl.h"
#include "../vq_test.h"

static const uint32_t TQ[3] = {VQ_TYPE_TQW4, VQ_TYPE_TQW3, VQ_TYPE_TQW2};
static const int TQ_BITS[3] = {4, 3, 2};

static const int8_t *levels_of(int bits) {
    return bits == 4 ? vq_tqw4_levels : bits == 3 ? vq_tqw3_levels : vq_tqw2_levels;
}

/* Lloyd-Max for N(0, 1) with n levels: boundaries at midpoints, centroids the conditional means
 * (phi(a) - phi(b)) / (Phi(b) - Phi(a)), iterated from a uniform start */
static void lloyd_max_gauss(int n, double *c) {
    for (int i = 0; i < n; i++) c[i] = -3.0 + 6.0 * (i + 0.5) / n;
    for (int it = 0; it < 5000; it++) {
        double b[17];
        b[0] = -INFINITY; b[n] = INFINITY;
        for (int i = 1; i < n; i++) b[i] = 0.5 * (c[i - 1] + c[i]);
        for (int i = 0; i < n; i++) {
            double pa = isinf(b[i]) ? 0 : exp(-0.5 * b[i] * b[i]), pb = isinf(b[i + 1]) ? 0 : exp(-0.5 * b[i + 1] * b[i + 1]);
            double Pa = 0.5 * erfc(-b[i] / sqrt(2.0)), Pb = 0.5 * erfc(-b[i + 1] / sqrt(2.0));
            c[i] = (pa - pb) / sqrt(2 * M_PI) / (Pb - Pa);
        }
    }
}

static void check_tables(void) {
    for (int k = 0; k < 3; k++) {
        int n = 1 << TQ_BITS[k];
        double c[16];
        lloyd_max_gauss(n, c);
        const int8_t *L = levels_of(TQ_BITS[k]);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += L[i] != (int8_t)lround(127.0 * c[i] / c[n - 1]);
        for (int i = n; i < 16; i++) bad += L[i] != 127;
        CHECKF(bad == 0, "tqw%d: %d levels differ from round(127 c_i / c_max) of Gaussian Lloyd-Max", TQ_BITS[k], bad);
        if (n == 16) CHECK_NEAR(c[15], 2.7326, 1e-4);   /* the textbook value */
        if (n == 4) CHECK_NEAR(c[3], 1.5104, 1e-4);
    }
    vq_rng r;
    vq_rng_seed(&r, 0x7157);
    CHECK(vq_rng_u64(&r) == vq_tqw_signs);
}

static void check_rotation(void) {
    static double R[64][64];
    float e[64];
    for (int i = 0; i < 64; i++) {
        memset(e, 0, sizeof e);
        e[i] = 1.0f;
        vq_tqw_rotate(e, 64);
        for (int j = 0; j < 64; j++) R[j][i] = e[j];
    }
    int bad = 0;
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 64; j++) {
            bad += fabs(R[i][j]) != 0.125;
            double s = 0;
            for (int k = 0; k < 64; k++) s += R[k][i] * R[k][j];
            bad += fabs(s - (i == j)) > 1e-12;
        }
    CHECKF(bad == 0, "rotation: %d entries not +-1/8 or columns not orthonormal", bad);
}

/* R^T y in float64 */
static void unrotate64(const double *y, double *x) {
    double t[64];
    memcpy(t, y, sizeof t);
    for (int h = 1; h < 64; h *= 2)
        for (int a = 0; a < 64; a += 2 * h)
            for (int j = a; j < a + h; j++) { double p = t[j], q = t[j + h]; t[j] = p + q; t[j + h] = p - q; }
    for (int j = 0; j < 64; j++) x[j] = (((vq_tqw_signs >> j) & 1) ? -t[j] : t[j]) / 8.0;
}
static void rotate64(const float *x, double *y) {   /* R x in float64 */
    double t[64];
    for (int j = 0; j < 64; j++) t[j] = ((vq_tqw_signs >> j) & 1) ? -(double)x[j] : x[j];
    for (int h = 1; h < 64; h *= 2)
        for (int a = 0; a < 64; a += 2 * h)
            for (int j = a; j < a + h; j++) { double p = t[j], q = t[j + h]; t[j] = p + q; t[j + h] = p - q; }
    for (int j = 0; j < 64; j++) y[j] = t[j] / 8.0;
}
static double f16_at(const uint8_t *p) { vq_f16 h; memcpy(&h, p, 2); return vq_f16_to_f32(h); }

static void check_to_float(vq_rng *rng) {
    for (int k = 0; k < 3; k++) {
        const vq_wtype *t = vq_wtype_get(TQ[k]);
        CHECKF(t && t->block == 64 && t->from_float, "tqw%d row", TQ_BITS[k]);
        if (!t) continue;
        int bad = 0;
        for (int trial = 0; trial < 200; trial++) {
            uint8_t blk[64];
            for (size_t i = 0; i < t->block_bytes; i++) blk[i] = (uint8_t)vq_rng_u64(rng);
            for (int g = 0; g < 2; g++) {
                vq_f16 h = vq_f32_to_f16((float)(0.01 * exp2(8 * vq_rng_uniform(rng) - 4)));
                memcpy(blk + 2 * g, &h, 2);
            }
            double y[64], x[64], sa = 0;
            int8_t q[32];
            for (int g = 0; g < 2; g++) {
                vq_tqw_group_codes(TQ[k], blk, g, q);
                for (int j = 0; j < 32; j++) { y[32 * g + j] = f16_at(blk + 2 * g) * q[j]; sa += fabs(y[32 * g + j]); }
            }
            unrotate64(y, x);
            float out[64];
            t->to_float(blk, out, 64);
            /* float FWHT: 6 rounding steps on partial sums bounded by sum|y| */
            for (int j = 0; j < 64; j++) bad += fabs(out[j] - x[j]) > 8 * 6e-8 * sa / 8;
        }
        CHECKF(bad == 0, "%s: %d outputs differ from the float64 inverse rotation of the codes", t->name, bad);
    }
}

/* from_float on Gaussian rows: the stored d is the LS scale of the codes (in the float64 rotated
 * domain, then fp16), and the relative RMS error stays below the Gaussian Lloyd-Max figure */
static void check_from_float(vq_rng *rng) {
    const double lm_dist[3] = {0.009497, 0.03455, 0.1175};   /* Max 1960 / Lloyd-Max MSE, sigma = 1 */
    enum { N = 64 * 512 };
    float *x = malloc(N * sizeof(float)), *xr = malloc(N * sizeof(float));
    uint8_t *buf = malloc(N);
    for (int i = 0; i < N; i++) x[i] = (float)vq_rng_gauss(rng) * 0.02f;
    double err_q40 = 0, sx = 0;
    for (int i = 0; i < N; i++) sx += (double)x[i] * x[i];
    {
        const vq_wtype *q = vq_wtype_get(VQ_TYPE_Q4_0);
        q->from_float(x, buf, N);
        q->to_float(buf, xr, N);
        for (int i = 0; i < N; i++) err_q40 += ((double)xr[i] - x[i]) * ((double)xr[i] - x[i]);
    }
    for (int k = 0; k < 3; k++) {
        const vq_wtype *t = vq_wtype_get(TQ[k]);
        t->from_float(x, buf, N);
        t->to_float(buf, xr, N);
        double err = 0;
        for (int i = 0; i < N; i++) err += ((double)xr[i] - x[i]) * ((double)xr[i] - x[i]);
        int bad_d = 0;
        for (int b = 0; b < N / 64; b++) {
            const uint8_t *blk = buf + (size_t)b * t->block_bytes;
            double y[64];
            int8_t q[32];
            rotate64(x + 64 * b, y);
            for (int g = 0; g < 2; g++) {
                vq_tqw_group_codes(TQ[k], blk, g, q);
                double syl = 0, sll = 0;
                for (int j = 0; j < 32; j++) { syl += y[32 * g + j] * q[j]; sll += (double)q[j] * q[j]; }
                double dls = syl / sll, d = f16_at(blk + 2 * g);
                bad_d += fabs(d - dls) > fabs(dls) * 0x1p-11 * 1.0001;   /* fp16 rounding of d* */
            }
        }
        double rel = sqrt(err / sx);
        printf("%s on N(0, 0.02^2): relative RMS error %.4f (Gaussian Lloyd-Max at known sigma: %.4f); "
               "q4_0 %.4f\n", t->name, rel, sqrt(lm_dist[k]), sqrt(err_q40 / sx));
        CHECKF(bad_d == 0, "%s: %d scales are not the least-squares scale of their codes", t->name, bad_d);
        CHECKF(rel < sqrt(lm_dist[k]), "%s: relative RMS error %.4f above Lloyd-Max's %.4f", t->name, rel, sqrt(lm_dist[k]));
        if (k == 0) CHECKF(err < err_q40, "tqw4 error %.3g not below q4_0's %.3g", err, err_q40);
    }
    free(x); free(xr); free(buf);
}

/* exact case: scales 2^-4 or 2^-5, activations already integers with d = 1, so every product and
 * sum is exact in float and each ISA must give the integer dot's bits */
static void check_rows_exact(vq_rng *rng) {
    static const vq_rows_fn fns[3][3] = {
        {vq_rows_tqw4_scalar, vq_rows_tqw4_avx2, vq_rows_tqw4_avx512vnni},
        {vq_rows_tqw3_scalar, vq_rows_tqw3_avx2, vq_rows_tqw3_avx512vnni},
        {vq_rows_tqw2_scalar, vq_rows_tqw2_avx2, vq_rows_tqw2_avx512vnni},
    };
    __builtin_cpu_init();
    int has_vnni = vq_cpu_best_isa() >= VQ_ISA_AVX512 && __builtin_cpu_supports("avx512vnni");
    enum { COLS = 640, ROWS = 37, NT = 11 };
    int nb = COLS / 32;
    size_t xs = vq_q8act_stride(nb);
    uint8_t *xa = vq_aligned_alloc(xs * NT);
    float xf[COLS];
    for (int t = 0; t < NT; t++) {
        /* small integers and one +-127 per block (d = 1): every partial sum stays exact in float */
        for (int i = 0; i < COLS; i++) xf[i] = (float)((int)(vq_rng_u64(rng) % 7) - 3);
        for (int b = 0; b < nb; b++) xf[b * 32 + 3] = (vq_rng_u64(rng) & 1) ? 127.0f : -127.0f;
        vq_q8act_quantize(xf, COLS, xa + (size_t)t * xs);
    }
    for (int k = 0; k < 3; k++) {
        const vq_wtype *wt = vq_wtype_get(TQ[k]);
        size_t rb = vq_wtype_row_bytes(TQ[k], COLS);
        uint8_t *W = malloc(rb * ROWS);
        for (size_t i = 0; i < rb * ROWS; i++) W[i] = (uint8_t)vq_rng_u64(rng);
        for (int r = 0; r < ROWS; r++)
            for (int b = 0; b < COLS / 64; b++)
                for (int g = 0; g < 2; g++) {
                    vq_f16 h = vq_f32_to_f16(ldexpf(1.0f, -(int)(vq_rng_u64(rng) % 2) - 4));
                    memcpy(W + rb * r + wt->block_bytes * b + 2 * g, &h, 2);
                }
        double *ref = malloc(sizeof(double) * ROWS * NT);
        for (int r = 0; r < ROWS; r++)
            for (int t = 0; t < NT; t++) {
                const int8_t *q8 = (const int8_t *)(xa + (size_t)t * xs);
                double s = 0;
                int8_t q[32];
                for (int b = 0; b < COLS / 64; b++)
                    for (int g = 0; g < 2; g++) {
                        const uint8_t *blk = W + rb * r + wt->block_bytes * b;
                        vq_tqw_group_codes(TQ[k], blk, g, q);
                        long si = 0;
                        for (int j = 0; j < 32; j++) si += q[j] * q8[b * 64 + g * 32 + j];
                        s += f16_at(blk + 2 * g) * (double)si;
                    }
                ref[(size_t)t * ROWS + r] = s;
            }
        float *Y = malloc(sizeof(float) * ROWS * NT);
        for (int isa = 0; isa < 3; isa++) {
            if (isa == 1 && vq_cpu_best_isa() < VQ_ISA_AVX2) continue;
            if (isa == 2 && !has_vnni) continue;
            for (int nt = 1; nt <= NT; nt += 5) {   /* 1 (split accumulators), 6, 11 tokens */
                fns[k][isa](W, rb, ROWS, xa, xs, nt, nb, Y, ROWS);
                int bad = 0;
                for (int i = 0; i < ROWS * nt; i++) bad += (double)Y[i] != ref[i];
                CHECKF(bad == 0, "%s %s nt=%d: %d outputs differ from the exact integer dot", wt->name,
                       isa == 0 ? "scalar" : isa == 1 ? "avx2" : "avx512vnni", nt, bad);
            }
        }
        free(W); free(ref); free(Y);
    }
    vq_aligned_free(xa);
}

static int all_finite(const float *x, int n) {
    for (int i = 0; i < n; i++) if (!isfinite(x[i])) return 0;
    return 1;
}

/* hostile input: nothing crashes; finite input never decodes to NaN / inf; zero -> zero */
static void check_robust(vq_rng *rng) {
    const uint32_t types[6] = {VQ_TYPE_TQW4, VQ_TYPE_TQW3, VQ_TYPE_TQW2, VQ_TYPE_Q8_0, VQ_TYPE_Q4_0, VQ_TYPE_Q4_1};
    for (int k = 0; k < 6; k++) {
        const vq_wtype *t = vq_wtype_get(types[k]);
        float x[128], y[128];
        uint8_t blk[4 * 64];   /* 128 elements: q8_0 needs 136 bytes */
        size_t nbytes = vq_wtype_row_bytes(types[k], 128);
        /* all zero: scale 0, output exactly 0 */
        memset(x, 0, sizeof x);
        memset(blk, 0x5a, sizeof blk);
        t->from_float(x, blk, 128);
        t->to_float(blk, y, 128);
        int nz = 0;
        for (int i = 0; i < 128; i++) nz += y[i] != 0.0f;
        double d0 = f16_at(blk);   /* q4_0's is -0 (0 / -8), as ggml's */
        CHECKF(nz == 0 && d0 == 0, "%s: zero block gives %d nonzero outputs, d = %g", t->name, nz, d0);
        /* NaN and inf among finite values: the finite output stays finite */
        for (int trial = 0; trial < 4; trial++) {
            for (int i = 0; i < 128; i++) x[i] = (float)vq_rng_gauss(rng);
            x[5] = NAN; x[70] = trial & 1 ? INFINITY : -INFINITY;
            if (trial >= 2) for (int i = 64; i < 128; i++) x[i] = NAN;   /* a whole NaN block */
            t->from_float(x, blk, 128);
            t->to_float(blk, y, 128);
            CHECKF(all_finite(y, 128), "%s: non-finite output from NaN/inf input (trial %d)", t->name, trial);
        }
        /* huge finite values (fp16 cannot hold their scale): saturate, stay finite */
        for (int i = 0; i < 128; i++) x[i] = (i & 1 ? 1 : -1) * 3e38f * (float)vq_rng_uniform(rng);
        x[0] = 3.4e38f; x[1] = -3.4e38f;
        t->from_float(x, blk, 128);
        t->to_float(blk, y, 128);
        CHECKF(all_finite(y, 128), "%s: non-finite output from huge finite input", t->name);
        /* tiny (subnormal) input: no NaN */
        for (int i = 0; i < 128; i++) x[i] = 1e-42f * (float)(i % 7 - 3);
        t->from_float(x, blk, 128);
        t->to_float(blk, y, 128);
        CHECKF(all_finite(y, 128), "%s: non-finite output from subnormal input", t->name);
        /* random bytes decode without crashing (NaN allowed: the bytes may say NaN) */
        for (size_t i = 0; i < nbytes; i++) blk[i] = (uint8_t)vq_rng_u64(rng);
        t->to_float(blk, y, 128);
    }
}

int main(void) {
    uint64_t seed = vq_t_seed(20261202);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    check_tables();
    check_rotation();
    check_to_float(&rng);
    check_from_float(&rng);
    check_rows_exact(&rng);
    check_robust(&rng);
    /* sizes as the table says; SmolLM2's and Gemma's widths are multiples of the block */
    CHECK(vq_wtype_row_bytes(VQ_TYPE_TQW4, 576) == 9 * 36 && vq_wtype_row_bytes(VQ_TYPE_TQW3, 640) == 10 * 28);
    CHECK(vq_wtype_row_bytes(VQ_TYPE_TQW2, 1536) == 24 * 20 && vq_wtype_row_bytes(VQ_TYPE_TQW4, 96) == 0);
    CHECK(vq_matmul_supported(VQ_TYPE_TQW4, 2048) && !vq_matmul_supported(VQ_TYPE_TQW2, 32));
    return vq_t_done();
}
