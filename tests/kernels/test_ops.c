/* test_ops.c: rope (both pair layouts) against the direct formula and against llama2.c's loop
 * bit for bit; fwht against the O(n^2) Hadamard product, H·H = n·I, and SIMD = scalar bits;
 * rmsnorm, softmax, swiglu, dot and axpy against float64. */
#include "kernels/kernels_impl.h"
#include "../vq_test.h"

static int popc(unsigned v) { return __builtin_popcount(v); }

/* llama2.c run.c's rope loop for one head, literally (q only, head_size = rot_dim) */
static void rope_llama2c(float *q, int head_size, int pos) {
    for (int i = 0; i < head_size; i += 2) {
        int head_dim = i % head_size;
        float freq = 1.0f / powf(10000.0f, head_dim / (float)head_size);
        float val = pos * freq;
        float fcr = cosf(val);
        float fci = sinf(val);
        float v0 = q[i], v1 = q[i + 1];
        volatile float a = v0 * fcr, b = v1 * fci, c = v0 * fci, d = v1 * fcr;   /* no FMA */
        q[i] = a - b;
        q[i + 1] = c + d;
    }
}

static void scalar_fwht(float *x, int n) {
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) { float a = x[j], b = x[j + h]; x[j] = a + b; x[j + h] = a - b; }
}

int main(void) {
    uint64_t seed = 777;
    printf("seed %llu\n", (unsigned long long)seed);
    vq_rng rng; vq_rng_seed(&rng, seed);

    /* ---- rope ---- */
    const int hd = 64, nh = 3;
    float x[3 * 64], x0[3 * 64];
    const int poss[] = {0, 1, 17, 300, 4095};
    for (int layout = 0; layout < 2; layout++)
        for (size_t pi = 0; pi < VQ_ARRAY_LEN(poss); pi++)
            for (int rot = 32; rot <= 64; rot += 32) {
                int pos = poss[pi];
                for (int i = 0; i < nh * hd; i++) x0[i] = x[i] = (float)vq_rng_gauss(&rng);
                float inv[32];
                vq_rope_freqs(inv, rot, 100000.0f);
                vq_rope(x, nh, hd, rot, pos, inv, 1.0f, layout);
                int bad = 0, untouched = 0;
                double maxe = 0;
                for (int h = 0; h < nh; h++) {
                    const float *a = x0 + h * hd; const float *o = x + h * hd;
                    for (int k = 0; k < rot / 2; k++) {
                        int i0 = layout ? k : 2 * k, i1 = layout ? k + rot / 2 : 2 * k + 1;
                        double th = pos * pow(100000.0, -(2.0 * k) / rot);
                        double e0 = a[i0] * cos(th) - a[i1] * sin(th), e1 = a[i0] * sin(th) + a[i1] * cos(th);
                        /* the float angle pos*freq carries ~pos*2^-24 relative error */
                        double tol = 1e-5 + 2e-7 * (pos + 1) * (fabs(a[i0]) + fabs(a[i1]));
                        double e = fmax(fabs(o[i0] - e0), fabs(o[i1] - e1));
                        if (e > tol) bad++;
                        maxe = fmax(maxe, e);
                    }
                    for (int i = rot; i < hd; i++) untouched += o[i] != a[i];
                }
                CHECKF(bad == 0, "rope layout %d pos %d rot %d: %d pairs off (max err %.3g)", layout, pos, rot, bad, maxe);
                CHECKF(untouched == 0, "rope rot %d changed %d dims past rot_dim", rot, untouched);
                if (pos == 0) CHECK(memcmp(x, x0, sizeof x) == 0);
            }
    /* adjacent pairs at base 10000 = llama2.c's loop, bit for bit */
    for (size_t pi = 0; pi < VQ_ARRAY_LEN(poss); pi++) {
        for (int i = 0; i < nh * hd; i++) x0[i] = x[i] = (float)vq_rng_gauss(&rng);
        float inv[32];
        vq_rope_freqs(inv, hd, 10000.0f);
        vq_rope(x, nh, hd, hd, poss[pi], inv, 1.0f, 0);
        for (int h = 0; h < nh; h++) rope_llama2c(x0 + h * hd, hd, poss[pi]);
        CHECKF(memcmp(x, x0, sizeof x) == 0, "rope differs from llama2.c's arithmetic at pos %d", poss[pi]);
    }

    /* ---- fwht ---- */
    for (int n = 2; n <= 1024; n *= 2) {
        float *v = malloc(sizeof(float) * n), *orig = malloc(sizeof(float) * n), *s = malloc(sizeof(float) * n);
        for (int i = 0; i < n; i++) orig[i] = v[i] = (float)vq_rng_gauss(&rng);
        vq_fwht(v, n);
        int bad = 0;
        for (int i = 0; i < n; i++) {
            double r = 0, mag = 0;
            for (int j = 0; j < n; j++) { r += (popc((unsigned)(i & j)) & 1 ? -1.0 : 1.0) * orig[j]; mag += fabs(orig[j]); }
            if (fabs(v[i] - r) > 1e-6 * mag * (1 + log2(n))) bad++;
        }
        CHECKF(bad == 0, "fwht n=%d: %d outputs differ from the Hadamard product", n, bad);
        /* H·H = n·I, exact on small integers */
        for (int i = 0; i < n; i++) orig[i] = v[i] = (float)((int)(vq_rng_u64(&rng) % 21) - 10);
        vq_fwht(v, n); vq_fwht(v, n);
        bad = 0;
        for (int i = 0; i < n; i++) bad += v[i] != (float)n * orig[i];
        CHECKF(bad == 0, "fwht n=%d: H*H != n*I on %d entries", n, bad);
        /* each SIMD path = scalar bits */
        for (int i = 0; i < n; i++) orig[i] = s[i] = (float)vq_rng_gauss(&rng);
        scalar_fwht(s, n);
        if (n >= 16 && vq_cpu_best_isa() >= VQ_ISA_AVX2) {
            memcpy(v, orig, sizeof(float) * n); vq_fwht_avx2(v, n);
            CHECKF(memcmp(v, s, sizeof(float) * n) == 0, "fwht avx2 n=%d differs from scalar", n);
        }
        if (n >= 16 && vq_cpu_best_isa() >= VQ_ISA_AVX512) {
            memcpy(v, orig, sizeof(float) * n); vq_fwht_avx512(v, n);
            CHECKF(memcmp(v, s, sizeof(float) * n) == 0, "fwht avx512 n=%d differs from scalar", n);
        }
        free(v); free(orig); free(s);
    }
    if (vq_cpu_best_isa() < VQ_ISA_AVX512) printf("fwht: avx512 path skipped (CPU lacks it)\n");

    /* ---- rmsnorm ---- */
    float a[577], w[577], o[577];
    for (int i = 0; i < 577; i++) { a[i] = (float)vq_rng_gauss(&rng) * 3; w[i] = 1.0f; }
    vq_rmsnorm(o, a, w, 577, 0.0f);
    double ss = 0; for (int i = 0; i < 577; i++) ss += (double)o[i] * o[i];
    CHECK_NEAR(ss / 577, 1.0, 1e-5);
    for (int i = 0; i < 577; i++) w[i] = (float)vq_rng_gauss(&rng);
    vq_rmsnorm(o, a, w, 577, 1e-5f);
    ss = 0; for (int i = 0; i < 577; i++) ss += (double)a[i] * a[i];
    double inv = 1.0 / sqrt(ss / 577 + 1e-5);
    int bad = 0;
    for (int i = 0; i < 577; i++) bad += fabs(o[i] - w[i] * a[i] * inv) > 1e-5 * (1 + fabs(w[i] * a[i] * inv));
    CHECKF(bad == 0, "rmsnorm: %d outputs off the float64 formula", bad);

    /* ---- softmax ---- */
    float sm[100];
    for (int i = 0; i < 100; i++) sm[i] = (float)vq_rng_gauss(&rng) * 5 + 1000.0f;   /* large: needs max-subtraction */
    float sm0[100]; memcpy(sm0, sm, sizeof sm);
    vq_softmax(sm, 100);
    double tot = 0, mx = sm0[0]; for (int i = 0; i < 100; i++) mx = fmax(mx, sm0[i]);
    double z = 0; for (int i = 0; i < 100; i++) z += exp(sm0[i] - mx);
    bad = 0;
    for (int i = 0; i < 100; i++) { tot += sm[i]; bad += !(fabs(sm[i] - exp(sm0[i] - mx) / z) <= 1e-6); }
    CHECKF(bad == 0, "softmax: %d entries off", bad);
    CHECK_NEAR(tot, 1.0, 1e-5);
    sm[0] = 3.0f; vq_softmax(sm, 1); CHECK(sm[0] == 1.0f);

    /* ---- swiglu, dot, axpy ---- */
    float g[50], u[50], g0[50];
    for (int i = 0; i < 50; i++) { g0[i] = g[i] = (float)vq_rng_gauss(&rng) * 4; u[i] = (float)vq_rng_gauss(&rng); }
    vq_swiglu(g, u, 50);
    bad = 0;
    for (int i = 0; i < 50; i++) { double e = g0[i] / (1 + exp(-(double)g0[i])) * u[i]; bad += fabs(g[i] - e) > 1e-5 * (1 + fabs(e)); }
    CHECKF(bad == 0, "swiglu: %d entries off", bad);
    for (int n = 0; n <= 131; n += 7) {
        double r = 0, mag = 0;
        for (int i = 0; i < n; i++) { r += (double)a[i] * w[i]; mag += fabs((double)a[i] * w[i]); }
        float d = vq_dot_f32(a, w, n);
        CHECKF(fabs(d - r) <= 1e-6 * mag + 1e-30, "dot n=%d: %.9g vs %.9g", n, d, r);
    }
    memcpy(o, a, sizeof a);
    vq_axpy_f32(o, 0.5f, w, 577);
    bad = 0; for (int i = 0; i < 577; i++) bad += o[i] != a[i] + 0.5f * w[i];
    CHECKF(bad == 0, "axpy: %d entries off", bad);
    return vq_t_done();
}
