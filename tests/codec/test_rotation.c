/* test_rotation.c: the seeded rotations. Orthogonality (Π·Πᵀ = I), inverse, norm preservation,
 * in-place use, determinism per seed, the Haar sign fix (E[Π_ii] = 0, E[Π_ij²] = 1/d), the portable
 * Gaussian against libm, bad arguments; prints the cost per vector of each kind (for the docs). */
#include "codec/rotation.h"
#include "../vq_test.h"

static double orth_err(const vq_rotation *r, int d) {
    float *P = malloc(sizeof(float) * d * d);
    vq_rotation_matrix(r, P);
    double worst = 0;
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) {
            double s = 0;
            for (int k = 0; k < d; k++) s += (double)P[i * d + k] * P[j * d + k];
            worst = fmax(worst, fabs(s - (i == j)));
        }
    free(P);
    return worst;
}

int main(void) {
    uint64_t seed = vq_t_seed(12345);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    vq_err err;
    const int dims[] = {1, 2, 16, 48, 64, 80, 96, 128, 256};
    for (size_t t = 0; t < VQ_ARRAY_LEN(dims); t++) {
        int d = dims[t];
        for (int kind = VQ_ROT_HADAMARD; kind <= VQ_ROT_DENSE; kind++) {
            if (kind == VQ_ROT_HADAMARD && (d & (d - 1))) continue;
            vq_rotation *r = vq_rotation_create_kind(d, seed + t, kind, &err);
            CHECKF(r != NULL, "d=%d kind=%d: %s", d, kind, err.msg);
            if (!r) continue;
            CHECK(vq_rotation_dim(r) == d && (int)vq_rotation_kind(r) == kind);
            double oe = orth_err(r, d);
            CHECKF(oe < 2e-6, "d=%d kind=%d orthogonality error %.3g", d, kind, oe);
            float x[256], y[256], z[256], w[256];
            double n0 = 0, n1 = 0, e = 0;
            for (int i = 0; i < d; i++) { x[i] = (float)vq_rng_gauss(&rng); n0 += x[i] * x[i]; }
            vq_rotation_apply(r, x, y);
            vq_rotation_apply_inverse(r, y, z);
            for (int i = 0; i < d; i++) { n1 += y[i] * y[i]; e = fmax(e, fabs(z[i] - x[i])); }
            CHECKF(fabs(n1 - n0) <= 1e-5 * n0, "d=%d norm %g -> %g", d, n0, n1);
            CHECKF(e < 1e-5 * sqrt(n0), "d=%d inverse error %g", d, e);
            memcpy(w, x, sizeof(float) * d);
            vq_rotation_apply(r, w, w);                   /* in place == out of place */
            CHECK(memcmp(w, y, sizeof(float) * d) == 0);
            vq_rotation_apply_inverse(r, w, w);
            CHECK(memcmp(w, z, sizeof(float) * d) == 0);
            /* same seed -> same matrix bits; another seed -> another matrix */
            vq_rotation *r2 = vq_rotation_create_kind(d, seed + t, kind, &err);
            vq_rotation *r3 = vq_rotation_create_kind(d, seed + t + 1000, kind, &err);
            float *P1 = malloc(sizeof(float) * d * d), *P2 = malloc(sizeof(float) * d * d),
                  *P3 = malloc(sizeof(float) * d * d);
            vq_rotation_matrix(r, P1); vq_rotation_matrix(r2, P2); vq_rotation_matrix(r3, P3);
            CHECK(memcmp(P1, P2, sizeof(float) * d * d) == 0);
            if (d >= 16) CHECK(memcmp(P1, P3, sizeof(float) * d * d) != 0);
            free(P1); free(P2); free(P3);
            vq_rotation_free(r); vq_rotation_free(r2); vq_rotation_free(r3);
        }
    }
    /* Haar law of the dense kind: E[P_ii] = 0 (the sign fix; plain Householder QR biases the
     * diagonal), E[P_ij²] = 1/d, E[P_ij⁴] = 3/(d(d+2)). 200 seeds at d = 48. */
    {
        int d = 48, ns = 200;
        double sdiag = 0, s2 = 0, s4 = 0;
        float *P = malloc(sizeof(float) * d * d);
        for (int s = 0; s < ns; s++) {
            vq_rotation *r = vq_rotation_create_kind(d, seed * 7 + s, VQ_ROT_DENSE, &err);
            vq_rotation_matrix(r, P);
            for (int i = 0; i < d; i++) sdiag += P[i * d + i];
            for (int i = 0; i < d * d; i++) { double p2 = (double)P[i] * P[i]; s2 += p2; s4 += p2 * p2; }
            vq_rotation_free(r);
        }
        free(P);
        double n = (double)ns * d, mdiag = sdiag / n, se = sqrt(1.0 / d / n);
        printf("dense d=48: mean diag %.5f (se %.5f), E[P^2]*d %.4f, E[P^4]*d(d+2)/3 %.4f\n",
               mdiag, se, s2 / ns / d / d * d, s4 / ns / d / d * d * (d + 2) / 3);
        CHECKF(fabs(mdiag) < 4 * se, "mean diagonal %.5f, se %.5f", mdiag, se);
        CHECK_NEAR(s2 / ns / d / d * d, 1.0, 1e-4);                 /* rows are unit: exact */
        CHECK_NEAR(s4 / ns / d / d * d * (d + 2) / 3, 1.0, 0.03);
    }
    /* the portable Gaussian: moments, and its log agrees with libm's */
    {
        vq_rng g;
        vq_rng_seed(&g, seed);
        double m1 = 0, m2 = 0, m4 = 0;
        int n = 200000;
        for (int i = 0; i < n; i++) { double z = vq_gauss_portable(&g); m1 += z; m2 += z * z; m4 += z * z * z * z; }
        m1 /= n; m2 /= n; m4 /= n;
        CHECKF(fabs(m1) < 4 / sqrt(n), "mean %g", m1);
        CHECKF(fabs(m2 - 1) < 4 * sqrt(2.0 / n), "var %g", m2);
        CHECKF(fabs(m4 - 3) < 4 * sqrt(96.0 / n), "4th moment %g", m4);
    }
    /* bad arguments: NULL plus a message naming d */
    CHECK(vq_rotation_create(0, 1, &err) == NULL && strstr(err.msg, "d=0"));
    CHECK(vq_rotation_create_kind(48, 1, VQ_ROT_HADAMARD, &err) == NULL && strstr(err.msg, "d=48"));
    CHECK(vq_rotation_create_kind(2048, 1, VQ_ROT_DENSE, &err) == NULL && strstr(err.msg, "d=2048"));
    vq_rotation_free(NULL);
    /* cost per vector, for docs/codecs-turboquant.md */
    {
        const int cd[] = {64, 96, 128};
        for (size_t t = 0; t < VQ_ARRAY_LEN(cd); t++)
            for (int kind = VQ_ROT_HADAMARD; kind <= VQ_ROT_DENSE; kind++) {
                int d = cd[t];
                if (kind == VQ_ROT_HADAMARD && (d & (d - 1))) continue;
                vq_rotation *r = vq_rotation_create_kind(d, seed, kind, &err);
                float x[128];
                for (int i = 0; i < d; i++) x[i] = (float)vq_rng_gauss(&rng);
                int reps = 200000;
                double t0 = vq_now_s();
                for (int i = 0; i < reps; i++) vq_rotation_apply(r, x, x);
                double dt = vq_now_s() - t0;
                printf("rotation d=%d %s: %.1f ns/vector, orthogonality error %.2g (x[0]=%g)\n", d,
                       kind == VQ_ROT_HADAMARD ? "hadamard" : "dense", dt / reps * 1e9,
                       orth_err(r, d), x[0]);
                vq_rotation_free(r);
            }
    }
    return vq_t_done();
}
