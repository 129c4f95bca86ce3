/* lloydmax.c: Lloyd-Max codebooks by numerical integration. The law is tabulated in standard
 * units on a fine grid with cumulative integrals of f, x·f and x²·f (trapezoid rule), so each Lloyd
 * step (boundaries = midpoints, centroids = conditional means) costs O(levels), and the iteration
 * starts from equal-probability cells, which is close to optimal for smooth unimodal laws. */
#include <math.h>
#include <stdlib.h>
#include "codec/lloydmax.h"

const char *vq_law_name(vq_law law) {
    switch (law) {
    case VQ_LAW_SPHERE: return "sphere";
    case VQ_LAW_GAUSS: return "gauss";
    case VQ_LAW_LAPLACE: return "laplace";
    }
    return "?";
}

typedef struct grid {
    int n;            /* intervals */
    double lo, h;
    double *F, *M, *S;   /* cumulative ∫f, ∫x f, ∫x² f from lo to node k (normalized: F[n] = 1) */
} grid;

static double pdf_std(vq_law law, int d, double x) {   /* unnormalized, in standard units */
    switch (law) {
    case VQ_LAW_SPHERE: {   /* t = x/√d; (1 − t²)^((d−3)/2) */
        double t2 = x * x / d;
        if (t2 >= 1.0) return d == 3 ? 1.0 : 0.0;
        return d == 3 ? 1.0 : exp(0.5 * (d - 3) * log1p(-t2));
    }
    case VQ_LAW_GAUSS: return exp(-0.5 * x * x);
    case VQ_LAW_LAPLACE: return exp(-fabs(x) * 1.4142135623730951);
    }
    return 0;
}

/* cumulative value at x by linear interpolation between nodes */
static inline double cum(const grid *g, const double *C, double x) {
    double u = (x - g->lo) / g->h;
    if (u <= 0) return C[0];
    if (u >= g->n) return C[g->n];
    int k = (int)u;
    double fr = u - k;
    return C[k] + fr * (C[k + 1] - C[k]);
}

vq_status vq_lloydmax_build(vq_codebook *cb, vq_law law, int d, int bits, vq_err *err) {
    if (bits < 1 || bits > VQ_LM_MAX_BITS)
        return vq_err_set(err, VQ_ERR_ARG, "lloydmax: bits=%d out of range 1..%d (law %s)", bits,
                          VQ_LM_MAX_BITS, vq_law_name(law));
    if (law != VQ_LAW_SPHERE && law != VQ_LAW_GAUSS && law != VQ_LAW_LAPLACE)
        return vq_err_set(err, VQ_ERR_ARG, "lloydmax: unknown law %d", (int)law);
    if (law == VQ_LAW_SPHERE && (d < 3 || d > (1 << 20)))
        return vq_err_set(err, VQ_ERR_ARG, "lloydmax: sphere law needs d in 3..%d, got d=%d",
                          1 << 20, d);
    grid g;
    double L = law == VQ_LAW_LAPLACE ? 40.0 : 12.0;        /* standard units */
    if (law == VQ_LAW_SPHERE && sqrt((double)d) < L) L = sqrt((double)d);
    g.n = law == VQ_LAW_LAPLACE ? (1 << 18) : (1 << 16);
    g.lo = -L;
    g.h = 2 * L / g.n;
    g.F = malloc(sizeof(double) * (size_t)(g.n + 1) * 3);
    if (!g.F) return vq_err_set(err, VQ_ERR_NOMEM, "lloydmax: out of memory");
    g.M = g.F + g.n + 1;
    g.S = g.M + g.n + 1;
    double fp = pdf_std(law, d, g.lo), xp = g.lo;
    g.F[0] = g.M[0] = g.S[0] = 0;
    for (int k = 1; k <= g.n; k++) {
        double x = g.lo + k * g.h, f = pdf_std(law, d, x);
        g.F[k] = g.F[k - 1] + 0.5 * g.h * (fp + f);
        g.M[k] = g.M[k - 1] + 0.5 * g.h * (xp * fp + x * f);
        g.S[k] = g.S[k - 1] + 0.5 * g.h * (xp * xp * fp + x * x * f);
        fp = f; xp = x;
    }
    double Z = g.F[g.n];
    for (int k = 0; k <= g.n; k++) { g.F[k] /= Z; g.M[k] /= Z; g.S[k] /= Z; }

    int n = 1 << bits;
    double c[1 << VQ_LM_MAX_BITS], bnd[(1 << VQ_LM_MAX_BITS) + 1];
    /* start: equal-probability cells (quantiles by bisection on F), centroid = cell mean */
    bnd[0] = g.lo;
    bnd[n] = g.lo + g.n * g.h;
    for (int i = 1; i < n; i++) {
        double target = (double)i / n, a = g.lo, z = bnd[n];
        for (int it = 0; it < 60; it++) {
            double m = 0.5 * (a + z);
            if (cum(&g, g.F, m) < target) a = m; else z = m;
        }
        bnd[i] = 0.5 * (a + z);
    }
    int iters = 0;
    for (; iters < 20000; iters++) {
        double moved = 0;
        for (int i = 0; i < n; i++) {
            double p = cum(&g, g.F, bnd[i + 1]) - cum(&g, g.F, bnd[i]);
            double m = cum(&g, g.M, bnd[i + 1]) - cum(&g, g.M, bnd[i]);
            double ci = p > 1e-300 ? m / p : 0.5 * (bnd[i] + bnd[i + 1]);
            if (iters) moved = fmax(moved, fabs(ci - c[i]));
            c[i] = ci;
        }
        for (int i = 1; i < n; i++) bnd[i] = 0.5 * (c[i - 1] + c[i]);
        if (iters && moved < 1e-10) break;
    }
    /* symmetric laws: make the codebook exactly antisymmetric (removes grid round-off) */
    for (int i = 0; i < n / 2; i++) {
        double s = 0.5 * (c[n - 1 - i] - c[i]);
        c[i] = -s; c[n - 1 - i] = s;
    }
    for (int i = 1; i < n; i++) bnd[i] = 0.5 * (c[i - 1] + c[i]);
    double mse = 0;
    for (int i = 0; i < n; i++) {
        double p = cum(&g, g.F, bnd[i + 1]) - cum(&g, g.F, bnd[i]);
        double m = cum(&g, g.M, bnd[i + 1]) - cum(&g, g.M, bnd[i]);
        double s = cum(&g, g.S, bnd[i + 1]) - cum(&g, g.S, bnd[i]);
        mse += s - 2 * c[i] * m + c[i] * c[i] * p;
    }
    free(g.F);

    double sigma = law == VQ_LAW_SPHERE ? 1.0 / sqrt((double)d) : 1.0;
    cb->law = law;
    cb->d = law == VQ_LAW_SPHERE ? d : 0;
    cb->bits = bits;
    cb->n = n;
    for (int i = 0; i < (1 << VQ_LM_MAX_BITS); i++) { cb->c[i] = 0; cb->b[i] = INFINITY; }
    for (int i = 0; i < n; i++) cb->c[i] = (float)(c[i] * sigma);
    for (int i = 0; i + 1 < n; i++) cb->b[i] = (float)(0.5 * (c[i] + c[i + 1]) * sigma);
    cb->mse = mse * sigma * sigma;
    cb->var = sigma * sigma;
    cb->iters = iters;
    return VQ_OK;
}

void vq_lloydmax_quantize(const vq_codebook *cb, const float *x, float inv_scale, int n,
                          uint8_t *idx) {
    for (int j = 0; j < n; j++) idx[j] = (uint8_t)vq_lloydmax_index(cb, x[j] * inv_scale);
}
