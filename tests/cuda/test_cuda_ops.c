/* test_cuda_ops.c: the CUDA forward-pass ops (vq_cuda.h, "forward-pass ops") against float64
 * references built from the CPU kernels' own definitions: the weight-type table's to_float for
 * every weight (so the GPU reads the same bytes the same way), vq_rope_freqs for the frequency
 * tables, the CPU's argmax, add and scale. Exits 77 when there is no CUDA device (CI has none).
 *
 * Bounds (u = 2^-24; first-order terms of the standard float error model, Higham ch. 3; nothing
 * fitted). A weight is w = A - B with A = d * scale * q (the scaled code) and B = dmin * min (the
 * min part; 0 for F32/F16/BF16/Q8_0/Q4_0/Q6_K); to_float rounds w at most twice.
 *  - matvec: |y - ref| <= (gamma_m + 2u) sum_i (|A_i| + |B_i|) |x_i|, gamma_m = m u / (1 - m u),
 *    m = 40 + ceil(cols / 32): a term's longest chain of float32 roundings (32 products and sums
 *    inside a unit, the scale and min products, one lane's ceil(units / 32) sums, 5 shuffle
 *    levels, with room to spare); 2u: the reference's to_float. |A| + |B| <= |w| + 2|B|.
 *  - get_row: |w_gpu - w| <= 5u (|w| + 2|B|) (3 roundings on the GPU, 2 in to_float); dense
 *    types exactly equal.
 *  - rmsnorm: relative ((m_r + 2) / 2 + 6) u, m_r = ceil(dim / 256) + 13 (the sum of squares'
 *    chain: per thread, 5 shuffle levels, 8 partials); /n, +eps, sqrt, 1/x, *x, *w one each.
 *  - rope: the angle reduced to [-pi, pi] and rounded to float (2u), __cosf/__sinf absolute error
 *    <= 2^-21.19 (7u): |cos, sin error| <= 9u; times mscale (u), two products and a sum (2u):
 *    |err| <= 13u * mscale * (|x0| + |x1|). Dims past rot_dim unchanged, bit for bit.
 *  - swiglu: expf <= 2 ulp (4u relative), then 1+e, 1/, *x, *up: |err| <= 9u |ref| (inputs in
 *    [-80, 80], where expf does not overflow).
 *  - geglu: the tanh argument a = c (x + 0.044715 x^3) to Ea = c u (2|x| + 5|0.044715 x^3|),
 *    tanhf <= 2 ulp: |err| <= 0.5 |x| |up| (Ea + 4u |tanh a| + u |1 + tanh a|) + 4u |ref|.
 *  - add, scale: one correctly rounded operation each, equal to the CPU's bit for bit.
 *  - argmax: the CPU's index (the first of the largest), exactly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../vq_test.h"
#include "core/core.h"
#include "kernels/kernels.h"
#include "backend/cuda/vq_cuda.h"

static const double U = 1.0 / 16777216.0;

#define CK(x) do { vq_err e_ = {0}; if ((x) != VQ_OK) { (void)e_; fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x); exit(1); } } while (0)
#define CKE(x) do { vq_err e_ = {0}; vq_status s_ = (x); if (s_) { fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, e_.msg); exit(1); } } while (0)

static void *dev_put(const void *h, size_t n) {
    void *d = NULL;
    vq_err e = {0};
    if (vq_cuda_malloc(&d, n ? n : 1, &e) || (n && vq_cuda_memcpy_h2d(d, h, n, &e))) {
        fprintf(stderr, "device upload of %zu bytes: %s\n", n, e.msg);
        exit(1);
    }
    return d;
}
static void dev_get(void *h, const void *d, size_t n) {
    vq_err e = {0};
    if (vq_cuda_sync(&e) || vq_cuda_memcpy_d2h(h, d, n, &e)) { fprintf(stderr, "device read: %s\n", e.msg); exit(1); }
}
static float *dev_nan(size_t n) {   /* a float buffer poisoned with NaN (0xff bytes) */
    void *d = NULL;
    vq_err e = {0};
    if (vq_cuda_malloc(&d, n * sizeof(float), &e) || vq_cuda_memset(d, 0xff, n * sizeof(float), &e)) {
        fprintf(stderr, "device alloc: %s\n", e.msg);
        exit(1);
    }
    return d;
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

/* |B| of element c of a row (the min part), from the block bytes */
static double min_part(uint32_t type, const uint8_t *row, int c) {
    if (type == VQ_TYPE_Q4_1) return fabs(vq_f16_to_f32(rd16(row + (size_t)(c / 32) * 20 + 2)));
    if (type == VQ_TYPE_Q4_K) {
        const uint8_t *b = row + (size_t)(c / 256) * 144, *sc = b + 4;
        const int j = (c % 256) / 32;
        const int m6 = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
        return fabs((double)vq_f16_to_f32(rd16(b + 2)) * m6);
    }
    return 0.0;
}

/* a rows x cols matrix in `type`: quantized from Gaussian floats where the table has a
 * quantizer, else random code bytes with sane fp16 scales (K-quants) or rounded floats (BF16) */
static uint8_t *make_weights(uint32_t type, int rows, int cols, vq_rng *rng) {
    const size_t rb = vq_wtype_row_bytes(type, cols), n = (size_t)rows * cols;
    uint8_t *w = malloc((size_t)rows * rb);
    const vq_wtype *t = vq_wtype_get(type);
    if (type == VQ_TYPE_BF16) {
        for (size_t i = 0; i < n; i++) wr16(w + 2 * i, vq_f32_to_bf16((float)(0.05 * vq_rng_gauss(rng))));
    } else if (t->from_float) {
        float *f = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) f[i] = (float)(0.05 * vq_rng_gauss(rng));
        for (int r = 0; r < rows; r++) t->from_float(f + (size_t)r * cols, w + (size_t)r * rb, cols);
        free(f);
    } else {
        for (size_t i = 0; i < (size_t)rows * rb; i++) w[i] = (uint8_t)vq_rng_u64(rng);
        const int nb = cols / 256;
        for (int r = 0; r < rows; r++)
            for (int b = 0; b < nb; b++) {
                uint8_t *blk = w + (size_t)r * rb + (size_t)b * t->block_bytes;
                if (type == VQ_TYPE_Q4_K) {
                    wr16(blk, vq_f32_to_f16((float)(0.002 * (0.5 + vq_rng_uniform(rng)))));
                    wr16(blk + 2, vq_f32_to_f16((float)(0.001 * (0.5 + vq_rng_uniform(rng)))));
                } else {   /* Q6_K */
                    wr16(blk + 208, vq_f32_to_f16((float)(0.0005 * (0.5 + vq_rng_uniform(rng)))));
                }
            }
    }
    return w;
}

static void test_matvec(uint32_t type, int rows, int cols, vq_rng *rng, double *worst) {
    const vq_wtype *t = vq_wtype_get(type);
    const size_t rb = vq_wtype_row_bytes(type, cols);
    CHECK(vq_cuda_matvec_supported(type, cols));
    CHECK(vq_cuda_weight_bytes(type, rows, cols) == (size_t)rows * rb);
    uint8_t *w = make_weights(type, rows, cols, rng);
    float *x = malloc((size_t)cols * sizeof(float)), *y = malloc((size_t)rows * sizeof(float));
    float *wf = malloc((size_t)cols * sizeof(float)), *g = malloc((size_t)cols * sizeof(float));
    for (int c = 0; c < cols; c++) x[c] = (float)vq_rng_gauss(rng);
    void *dw = dev_put(w, (size_t)rows * rb);
    float *dx = dev_put(x, (size_t)cols * sizeof(float)), *dy = dev_nan((size_t)rows), *dg = dev_nan((size_t)cols);
    vq_err e = {0};
    CKE(vq_cuda_matvec(type, dw, rows, cols, dx, dy, NULL, &e_));
    dev_get(y, dy, (size_t)rows * sizeof(float));
    const double m = 40.0 + ceil(cols / 32.0), gam = m * U / (1.0 - m * U) + 2 * U;
    int bad = 0;
    double ratio = 0.0;
    for (int r = 0; r < rows; r++) {
        const uint8_t *row = w + (size_t)r * rb;
        t->to_float(row, wf, cols);
        double ref = 0.0, mag = 0.0;
        for (int c = 0; c < cols; c++) {
            ref += (double)wf[c] * x[c];
            mag += (fabs((double)wf[c]) + 2 * min_part(type, row, c)) * fabs((double)x[c]);
        }
        const double err = fabs((double)y[r] - ref), bound = gam * mag;
        if (!(err <= bound)) {
            if (bad++ < 3) fprintf(stderr, "  matvec %s %dx%d row %d: gpu %.9g ref %.9g err %.3g bound %.3g\n",
                                   t->name, rows, cols, r, (double)y[r], ref, err, bound);
        }
        if (bound > 0 && err / bound > ratio) ratio = err / bound;
    }
    CHECKF(bad == 0, "matvec %s %dx%d: %d rows outside the bound", t->name, rows, cols, bad);
    /* the embedding row: a few rows, element by element */
    int bad_row = 0;
    for (int k = 0; k < 3; k++) {
        const int r = (int)(vq_rng_u64(rng) % (uint64_t)rows);
        CKE(vq_cuda_get_row(type, dw, cols, r, dg, NULL, &e_));
        dev_get(g, dg, (size_t)cols * sizeof(float));
        const uint8_t *row = w + (size_t)r * rb;
        t->to_float(row, wf, cols);
        const int dense = t->block == 1;
        for (int c = 0; c < cols; c++) {
            const double b = dense ? 0.0 : 5 * U * (fabs((double)wf[c]) + 2 * min_part(type, row, c));
            if (!(fabs((double)g[c] - wf[c]) <= b)) {
                if (bad_row++ < 3) fprintf(stderr, "  get_row %s row %d col %d: gpu %.9g cpu %.9g\n", t->name, r, c,
                                           (double)g[c], (double)wf[c]);
            }
        }
    }
    CHECKF(bad_row == 0, "get_row %s %d columns: %d elements outside the bound", t->name, cols, bad_row);
    printf("matvec %-5s %5d x %5d: worst error / bound %.4f%s\n", t->name, rows, cols, ratio, bad ? "  FAIL" : "");
    if (ratio > *worst) *worst = ratio;
    (void)e;
    vq_cuda_free(dw); vq_cuda_free(dx); vq_cuda_free(dy); vq_cuda_free(dg);
    free(w); free(x); free(y); free(wf); free(g);
}

static void test_rmsnorm(int n_rows, int dim, vq_rng *rng) {
    const size_t n = (size_t)n_rows * dim;
    float *x = malloc(n * sizeof(float)), *w = malloc((size_t)dim * sizeof(float)), *o = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(3.0 * vq_rng_gauss(rng));
    for (int i = 0; i < dim; i++) w[i] = (float)(1.0 + 0.3 * vq_rng_gauss(rng));
    float *dx = dev_put(x, n * sizeof(float)), *dw = dev_put(w, (size_t)dim * sizeof(float)), *dout = dev_nan(n);
    CKE(vq_cuda_rmsnorm(dout, dx, dw, n_rows, dim, 1e-5f, NULL, &e_));
    dev_get(o, dout, n * sizeof(float));
    const double mr = ceil(dim / 256.0) + 13, rel = ((mr + 2) / 2 + 6) * U;
    int bad = 0;
    double ratio = 0;
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        const double s = 1.0 / sqrt(ss / dim + (double)1e-5f);
        for (int i = 0; i < dim; i++) {
            const double ref = (double)w[i] * xr[i] * s, err = fabs(o[(size_t)r * dim + i] - ref), b = rel * fabs(ref);
            if (!(err <= b) && bad++ < 3) fprintf(stderr, "  rmsnorm dim %d [%d,%d]: %.9g vs %.9g\n", dim, r, i, (double)o[(size_t)r * dim + i], ref);
            if (b > 0 && err / b > ratio) ratio = err / b;
        }
    }
    CHECKF(bad == 0, "rmsnorm %d x %d: %d elements outside the bound", n_rows, dim, bad);
    printf("rmsnorm %d x %5d: worst error / bound %.4f\n", n_rows, dim, ratio);
    vq_cuda_free(dx); vq_cuda_free(dw); vq_cuda_free(dout);
    free(x); free(w); free(o);
}

static void test_rope(int n_heads, int head_dim, int rot_dim, int neox, int pos, const float *inv_freq, float mscale,
                      const char *what, vq_rng *rng) {
    const size_t n = (size_t)n_heads * head_dim;
    float *x = malloc(n * sizeof(float)), *o = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)vq_rng_gauss(rng);
    float *dx = dev_put(x, n * sizeof(float)), *df = dev_put(inv_freq, (size_t)(rot_dim / 2) * sizeof(float));
    CKE(vq_cuda_rope(dx, n_heads, head_dim, rot_dim, pos, df, mscale, neox, NULL, &e_));
    dev_get(o, dx, n * sizeof(float));
    const int half = rot_dim / 2;
    int bad = 0;
    double ratio = 0;
    for (int h = 0; h < n_heads; h++) {
        const float *v = x + (size_t)h * head_dim;
        const float *g = o + (size_t)h * head_dim;
        for (int k = 0; k < half; k++) {
            const float val = (float)pos * inv_freq[k];
            const double c = cos((double)val) * mscale, s = sin((double)val) * mscale;
            const int a = neox ? k : 2 * k, b = neox ? k + half : a + 1;
            const double r0 = v[a] * c - v[b] * s, r1 = v[a] * s + v[b] * c;
            const double bound = 13 * U * mscale * (fabs(v[a]) + fabs(v[b]));
            const double e0 = fabs(g[a] - r0), e1 = fabs(g[b] - r1);
            if (!(e0 <= bound && e1 <= bound) && bad++ < 3)
                fprintf(stderr, "  rope %s pos %d head %d pair %d: (%.9g, %.9g) vs (%.9g, %.9g)\n", what, pos, h, k,
                        (double)g[a], (double)g[b], r0, r1);
            if (bound > 0) ratio = fmax(ratio, fmax(e0, e1) / bound);
        }
        for (int i = rot_dim; i < head_dim; i++)
            if (memcmp(&g[i], &v[i], sizeof(float)) && bad++ < 3) fprintf(stderr, "  rope %s: dim %d changed\n", what, i);
    }
    CHECKF(bad == 0, "rope %s, %d heads x %d (rot %d, neox %d) at %d: %d outside the bound", what, n_heads, head_dim,
           rot_dim, neox, pos, bad);
    printf("rope %-13s hd %3d rot %3d neox %d pos %6d: worst error / bound %.4f\n", what, head_dim, rot_dim, neox, pos, ratio);
    vq_cuda_free(dx); vq_cuda_free(df);
    free(x); free(o);
}

static void test_glu(int gelu, int n, vq_rng *rng) {
    float *g = malloc((size_t)n * sizeof(float)), *u = malloc((size_t)n * sizeof(float)), *o = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) {
        g[i] = (float)(i < 8 ? -80.0 + 160.0 * i / 7 : 3.0 * vq_rng_gauss(rng));
        u[i] = (float)vq_rng_gauss(rng);
    }
    float *dg = dev_put(g, (size_t)n * sizeof(float)), *du = dev_put(u, (size_t)n * sizeof(float));
    CKE(vq_cuda_glu(dg, du, n, gelu, NULL, &e_));
    dev_get(o, dg, (size_t)n * sizeof(float));
    int bad = 0;
    double ratio = 0;
    const double c = (double)0.7978845608028654f, k3 = (double)0.044715f;
    for (int i = 0; i < n; i++) {
        const double x = g[i], up = u[i];
        double ref, bound;
        if (gelu) {
            const double t3 = k3 * x * x * x, a = c * (x + t3), th = tanh(a);
            ref = 0.5 * x * (1.0 + th) * up;
            const double ea = c * U * (2 * fabs(x) + 5 * fabs(t3));
            bound = 0.5 * fabs(x) * fabs(up) * (ea + 4 * U * fabs(th) + U * fabs(1 + th)) + 4 * U * fabs(ref);
        } else {
            ref = x / (1.0 + exp(-x)) * up;
            bound = 9 * U * fabs(ref);
        }
        const double err = fabs(o[i] - ref);
        if (!(err <= bound) && bad++ < 3) fprintf(stderr, "  %s x=%.9g up=%.9g: %.9g vs %.9g\n", gelu ? "geglu" : "swiglu", x, up, (double)o[i], ref);
        if (bound > 0) ratio = fmax(ratio, err / bound);
    }
    CHECKF(bad == 0, "%s over %d: %d outside the bound", gelu ? "geglu" : "swiglu", n, bad);
    printf("%-6s %d: worst error / bound %.4f\n", gelu ? "geglu" : "swiglu", n, ratio);
    vq_cuda_free(dg); vq_cuda_free(du);
    free(g); free(u); free(o);
}

static void test_add_scale_argmax(int n, vq_rng *rng) {
    float *y = malloc((size_t)n * sizeof(float)), *x = malloc((size_t)n * sizeof(float)), *o = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) { y[i] = (float)vq_rng_gauss(rng); x[i] = (float)vq_rng_gauss(rng); }
    float *dy = dev_put(y, (size_t)n * sizeof(float)), *dx = dev_put(x, (size_t)n * sizeof(float));
    CKE(vq_cuda_add(dy, dx, n, NULL, &e_));
    CKE(vq_cuda_scale(dy, 0.37f, n, NULL, &e_));
    dev_get(o, dy, (size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) y[i] = (y[i] + x[i]) * 0.37f;
    CHECKF(!memcmp(o, y, (size_t)n * sizeof(float)), "add + scale over %d: not the CPU's bits", n);
    /* argmax: random values, then a tie at the top (the first index wins), then one at the end */
    int *di = NULL, got = -1;
    vq_err e = {0};
    CK(vq_cuda_malloc((void **)&di, sizeof(int), &e));
    for (int trial = 0; trial < 3; trial++) {
        for (int i = 0; i < n; i++) x[i] = (float)vq_rng_gauss(rng);
        if (trial == 1) { x[n / 3] = 100.0f; x[n / 2] = 100.0f; x[n - 1] = 100.0f; }
        if (trial == 2) x[n - 1] = 100.0f;
        int want = 0;
        for (int i = 1; i < n; i++)
            if (x[i] > x[want]) want = i;
        CK(vq_cuda_memcpy_h2d(dx, x, (size_t)n * sizeof(float), &e));
        CKE(vq_cuda_argmax(dx, n, di, NULL, &e_));
        dev_get(&got, di, sizeof(int));
        CHECKF(got == want, "argmax over %d (trial %d): %d, the CPU's %d", n, trial, got, want);
    }
    printf("add, scale, argmax over %d: checked\n", n);
    vq_cuda_free(di); vq_cuda_free(dy); vq_cuda_free(dx);
    free(y); free(x); free(o);
}

int main(void) {
    if (vq_cuda_device_count() == 0) VQ_SKIP("no CUDA device (cudaGetDeviceCount gives none): GPU tests skipped");
    char name[256];
    vq_err err = {0};
    if (!vq_cuda_device_name(name, sizeof name, &err)) printf("device: %s\n", name);
    const uint64_t seed = vq_t_seed(32033);
    vq_rng rng;
    vq_rng_seed(&rng, seed);

    /* the refusals: a type or a row length no kernel reads */
    CHECK(!vq_cuda_matvec_supported(VQ_TYPE_Q5_K, 256));
    CHECK(!vq_cuda_matvec_supported(VQ_TYPE_Q4_K, 576));
    CHECK(!vq_cuda_matvec_supported(VQ_TYPE_Q8_0, 100));
    CHECK(vq_cuda_matvec_supported(VQ_TYPE_F16, 100));
    {
        vq_err e = {0};
        CHECK(vq_cuda_matvec(VQ_TYPE_Q5_K, NULL, 4, 256, NULL, NULL, NULL, &e) == VQ_ERR_ARG);
        CHECK(strstr(e.msg, "no matvec kernel") != NULL);
    }

    double worst = 0;
    const uint32_t types[] = {VQ_TYPE_F32, VQ_TYPE_F16, VQ_TYPE_BF16, VQ_TYPE_Q8_0, VQ_TYPE_Q4_0, VQ_TYPE_Q4_1,
                              VQ_TYPE_Q4_K, VQ_TYPE_Q6_K};
    const int shapes[][2] = {{129, 256}, {300, 576}, {67, 4096}, {33, 11008}, {45, 100}};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const int rows = shapes[si][0], cols = shapes[si][1];
            if (vq_wtype_row_bytes(types[ti], cols) == 0) continue;   /* 576 and 100 for K-quants, 100 for blocks */
            test_matvec(types[ti], rows, cols, &rng, &worst);
        }
    printf("matvec: worst error / bound %.4f\n", worst);

    test_rmsnorm(3, 576, &rng);
    test_rmsnorm(2, 4096, &rng);
    test_rmsnorm(4, 100, &rng);

    /* rope tables as the model's load makes them: plain base, linear scaling (factor 4 folded into
     * the frequencies), per-pair divisors (rope_freqs), a YaRN-like magnitude scale */
    float f64[64], f64lin[64], f64div[64], f32[32];
    vq_rope_freqs(f64, 128, 10000.0f);
    vq_rope_freqs(f32, 64, 500000.0f);
    for (int i = 0; i < 64; i++) {
        f64lin[i] = f64[i] * 0.25f;
        f64div[i] = f64[i] / (i < 16 ? 1.0f : i < 40 ? 1.0f + (float)(i - 16) / 3.0f : 8.0f);
    }
    const int positions[] = {0, 1, 17, 4095, 131071};
    for (size_t pi = 0; pi < sizeof positions / sizeof *positions; pi++) {
        const int p = positions[pi];
        test_rope(8, 128, 128, 0, p, f64, 1.0f, "base", &rng);
        test_rope(8, 128, 128, 1, p, f64, 1.0f, "base", &rng);
        test_rope(4, 128, 128, 1, p, f64lin, 1.0f, "linear x4", &rng);
        test_rope(4, 128, 128, 0, p, f64div, 1.0f, "rope_freqs", &rng);
        test_rope(4, 128, 128, 1, p, f64, 1.2f, "mscale 1.2", &rng);
        test_rope(6, 96, 64, 1, p, f32, 1.0f, "partial", &rng);
    }
    test_glu(0, 5000, &rng);
    test_glu(1, 5000, &rng);
    test_add_scale_argmax(49152, &rng);
    test_add_scale_argmax(1000, &rng);
    return vq_t_done();
}
