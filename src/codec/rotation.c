/* rotation.c: seeded orthogonal maps (randomized Hadamard for d = 2^k, dense Haar otherwise).
 * Haar: Q from Householder QR of a d×d Gaussian matrix, columns multiplied by sign(R_jj), which
 * makes the law of Q exactly Haar (Mezzadri 2007). Both Π and Πᵀ are kept row-major for fast rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include "codec/rotation.h"
#include "kernels/kernels.h"

struct vq_rotation {
    int d;
    vq_rot_kind kind;
    float *sgn;     /* Hadamard: ±1/√d per coordinate (D with the 1/√d folded in) */
    float *P;       /* dense: Π, row-major */
    float *PT;      /* dense: Πᵀ, row-major */
    int avx2;
};

/* No FMA contraction in the functions below, so every compiler and ISA gives the same bits:
 * GCC takes a per-function attribute, clang the standard pragma (for the whole file). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#define VQ_NO_CONTRACT
#else
#define VQ_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#endif

/* ---- portable Gaussian: log from +,*,/ only; no FMA contraction so every build agrees ---- */
VQ_NO_CONTRACT
static double plog(double x) {   /* x in (0, 1] here */
    int e;
    double m = frexp(x, &e);                 /* exact: x = m·2^e, m in [0.5, 1) */
    if (m < 0.70710678118654752) { m *= 2.0; e -= 1; }
    double s = (m - 1.0) / (m + 1.0), s2 = s * s, term = s, sum = 0.0;
    for (int k = 1; k <= 41; k += 2) { sum += term / k; term *= s2; }   /* |s| < 0.172 */
    return 2.0 * sum + e * 0.69314718055994530942;
}

VQ_NO_CONTRACT
double vq_gauss_portable(vq_rng *rng) {
    for (;;) {
        double u = (double)(vq_rng_u64(rng) >> 11) * 0x1.0p-52 - 1.0;   /* [-1, 1) */
        double v = (double)(vq_rng_u64(rng) >> 11) * 0x1.0p-52 - 1.0;
        double s = u * u + v * v;
        if (s > 0.0 && s < 1.0) return u * sqrt(-2.0 * plog(s) / s);
    }
}

/* ---- dense Haar matrix ---- */
VQ_NO_CONTRACT
static int haar_matrix(int d, uint64_t seed, float *P) {
    double *A = malloc(sizeof(double) * (size_t)d * d);      /* column-major: A[j*d + i] */
    double *Q = malloc(sizeof(double) * (size_t)d * d);      /* row-major */
    double *V = malloc(sizeof(double) * (size_t)d * d);      /* Householder vectors, column k */
    double *rd = malloc(sizeof(double) * (size_t)d);         /* sign of R_kk */
    if (!A || !Q || !V || !rd) { free(A); free(Q); free(V); free(rd); return -1; }
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    for (size_t i = 0; i < (size_t)d * d; i++) A[i] = vq_gauss_portable(&rng);
    memset(V, 0, sizeof(double) * (size_t)d * d);
    for (int k = 0; k < d; k++) {
        double *a = A + (size_t)k * d;                       /* column k */
        double nrm = 0;
        for (int i = k; i < d; i++) nrm += a[i] * a[i];
        nrm = sqrt(nrm);
        double alpha = a[k] >= 0 ? -nrm : nrm;               /* R_kk = alpha */
        rd[k] = alpha >= 0 ? 1.0 : -1.0;
        if (k == d - 1) { rd[k] = a[k] >= 0 ? 1.0 : -1.0; break; }   /* 1x1: no reflection */
        double *v = V + (size_t)k * d;
        for (int i = k; i < d; i++) v[i] = a[i];
        v[k] -= alpha;
        double vn = 0;
        for (int i = k; i < d; i++) vn += v[i] * v[i];
        if (vn == 0) { rd[k] = a[k] >= 0 ? 1.0 : -1.0; continue; }  /* probability 0 */
        vn = 1.0 / sqrt(vn);
        for (int i = k; i < d; i++) v[i] *= vn;
        for (int j = k; j < d; j++) {                        /* A[k:, j] -= 2 v (v·A[k:, j]) */
            double *c = A + (size_t)j * d, t = 0;
            for (int i = k; i < d; i++) t += v[i] * c[i];
            t *= 2.0;
            for (int i = k; i < d; i++) c[i] -= t * v[i];
        }
    }
    /* Q = H_0 H_1 ... H_{d-2}: start from I, apply reflections from the last to the first */
    memset(Q, 0, sizeof(double) * (size_t)d * d);
    for (int i = 0; i < d; i++) Q[(size_t)i * d + i] = 1.0;
    for (int k = d - 2; k >= 0; k--) {
        const double *v = V + (size_t)k * d;
        double vv = 0;
        for (int i = k; i < d; i++) vv += v[i] * v[i];
        if (vv == 0) continue;
        for (int j = 0; j < d; j++) {                        /* Q[k:, j] -= 2 v (v·Q[k:, j]) */
            double t = 0;
            for (int i = k; i < d; i++) t += v[i] * Q[(size_t)i * d + j];
            t *= 2.0;
            for (int i = k; i < d; i++) Q[(size_t)i * d + j] -= t * v[i];
        }
    }
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) P[(size_t)i * d + j] = (float)(Q[(size_t)i * d + j] * rd[j]);
    free(A); free(Q); free(V); free(rd);
    return 0;
}

vq_rotation *vq_rotation_create(int d, uint64_t seed, vq_err *err) {
    return vq_rotation_create_kind(d, seed, VQ_ROT_AUTO, err);
}

vq_rotation *vq_rotation_create_kind(int d, uint64_t seed, vq_rot_kind kind, vq_err *err) {
    int pow2 = d >= 1 && (d & (d - 1)) == 0;
    if (d < 1 || d > (1 << 20)) {
        vq_err_set(err, VQ_ERR_ARG, "rotation: dimension d=%d out of range 1..%d", d, 1 << 20);
        return NULL;
    }
    if (kind == VQ_ROT_AUTO) kind = pow2 ? VQ_ROT_HADAMARD : VQ_ROT_DENSE;
    if (kind == VQ_ROT_HADAMARD && !pow2) {
        vq_err_set(err, VQ_ERR_ARG, "rotation: Hadamard needs d a power of two, got d=%d", d);
        return NULL;
    }
    if (kind == VQ_ROT_DENSE && d > VQ_ROT_MAX_DENSE_D) {
        vq_err_set(err, VQ_ERR_ARG, "rotation: dense rotation needs d <= %d, got d=%d",
                   VQ_ROT_MAX_DENSE_D, d);
        return NULL;
    }
    if (kind != VQ_ROT_HADAMARD && kind != VQ_ROT_DENSE) {
        vq_err_set(err, VQ_ERR_ARG, "rotation: unknown kind %d", (int)kind);
        return NULL;
    }
    vq_rotation *r = calloc(1, sizeof *r);
    if (!r) { vq_err_set(err, VQ_ERR_NOMEM, "rotation: out of memory (d=%d)", d); return NULL; }
    r->d = d;
    r->kind = kind;
    r->avx2 = vq_cpu_best_isa() >= VQ_ISA_AVX2;
    if (kind == VQ_ROT_HADAMARD) {
        r->sgn = vq_aligned_alloc(sizeof(float) * (size_t)d);
        if (!r->sgn) goto nomem;
        vq_rng rng;
        vq_rng_seed(&rng, seed);
        float s = (float)(1.0 / sqrt((double)d));
        for (int i = 0; i < d; i++) r->sgn[i] = vq_rng_sign(&rng) > 0 ? s : -s;
    } else {
        r->P = vq_aligned_alloc(sizeof(float) * (size_t)d * d);
        r->PT = vq_aligned_alloc(sizeof(float) * (size_t)d * d);
        if (!r->P || !r->PT || haar_matrix(d, seed, r->P) != 0) goto nomem;
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) r->PT[(size_t)j * d + i] = r->P[(size_t)i * d + j];
    }
    return r;
nomem:
    vq_rotation_free(r);
    vq_err_set(err, VQ_ERR_NOMEM, "rotation: out of memory (d=%d)", d);
    return NULL;
}

void vq_rotation_free(vq_rotation *r) {
    if (!r) return;
    vq_aligned_free(r->sgn);
    vq_aligned_free(r->P);
    vq_aligned_free(r->PT);
    free(r);
}

int vq_rotation_dim(const vq_rotation *r) { return r->d; }
vq_rot_kind vq_rotation_kind(const vq_rotation *r) { return r->kind; }
const float *vq_rotation_signs(const vq_rotation *r) { return r->kind == VQ_ROT_HADAMARD ? r->sgn : NULL; }

/* ---- dense matvec: y = M x, M row-major d×d ---- */
static void matvec_scalar(const float *M, const float *x, float *y, int d) {
    for (int i = 0; i < d; i++) {
        const float *m = M + (size_t)i * d;
        float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        int j = 0;
        for (; j + 4 <= d; j += 4) {
            a0 += m[j] * x[j]; a1 += m[j + 1] * x[j + 1];
            a2 += m[j + 2] * x[j + 2]; a3 += m[j + 3] * x[j + 3];
        }
        for (; j < d; j++) a0 += m[j] * x[j];
        y[i] = (a0 + a1) + (a2 + a3);
    }
}

__attribute__((target("avx2,fma")))
static void matvec_avx2(const float *M, const float *x, float *y, int d) {
    for (int i = 0; i < d; i++) {
        const float *m = M + (size_t)i * d;
        __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
        int j = 0;
        for (; j + 16 <= d; j += 16) {
            a = _mm256_fmadd_ps(_mm256_loadu_ps(m + j), _mm256_loadu_ps(x + j), a);
            b = _mm256_fmadd_ps(_mm256_loadu_ps(m + j + 8), _mm256_loadu_ps(x + j + 8), b);
        }
        for (; j + 8 <= d; j += 8)
            a = _mm256_fmadd_ps(_mm256_loadu_ps(m + j), _mm256_loadu_ps(x + j), a);
        a = _mm256_add_ps(a, b);
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        float t = _mm_cvtss_f32(s);
        for (; j < d; j++) t += m[j] * x[j];
        y[i] = t;
    }
}

static void dense_apply(const vq_rotation *r, const float *M, const float *x, float *y) {
    float tmp[VQ_ROT_MAX_DENSE_D];
    const float *src = x;
    if (x == y) { memcpy(tmp, x, sizeof(float) * (size_t)r->d); src = tmp; }
    if (r->avx2) matvec_avx2(M, src, y, r->d);
    else matvec_scalar(M, src, y, r->d);
}

void vq_rotation_apply(const vq_rotation *r, const float *x, float *y) {
    if (r->kind == VQ_ROT_DENSE) { dense_apply(r, r->P, x, y); return; }
    for (int i = 0; i < r->d; i++) y[i] = x[i] * r->sgn[i];
    vq_fwht(y, r->d);
}

void vq_rotation_apply_inverse(const vq_rotation *r, const float *y, float *x) {
    if (r->kind == VQ_ROT_DENSE) { dense_apply(r, r->PT, y, x); return; }
    if (x != y) memcpy(x, y, sizeof(float) * (size_t)r->d);
    vq_fwht(x, r->d);
    for (int i = 0; i < r->d; i++) x[i] *= r->sgn[i];
}

void vq_rotation_matrix(const vq_rotation *r, float *P) {
    int d = r->d;
    if (r->kind == VQ_ROT_DENSE) { memcpy(P, r->P, sizeof(float) * (size_t)d * d); return; }
    float *col = malloc(sizeof(float) * (size_t)d);
    if (!col) { memset(P, 0, sizeof(float) * (size_t)d * d); return; }
    for (int j = 0; j < d; j++) {
        memset(col, 0, sizeof(float) * (size_t)d);
        col[j] = 1.0f;
        vq_rotation_apply(r, col, col);
        for (int i = 0; i < d; i++) P[(size_t)i * d + j] = col[i];
    }
    free(col);
}
