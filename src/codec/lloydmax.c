/* lloydmax.c: Lloyd-Max codebooks by numerical integration. The law is tabulated in standard
 * units on a fine grid with cumulative integrals of f, x·f and x²·f (trapezoid rule), so each Lloyd
 * step (boundaries = midpoints, centroids = conditional means) costs O(levels), and the iteration
 * starts from the Panter-Dite point density f^(1/3), close to optimal at every width. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include "codec/lloydmax.h"

const char *vq_law_name(vq_law law) {
    switch (law) {
    case VQ_LAW_SPHERE: return "sphere";
    case VQ_LAW_GAUSS: return "gauss";
    case VQ_LAW_LAPLACE: return "laplace";
    case VQ_LAW_RESIDUAL: return "residual";
    }
    return "?";
}

typedef struct grid {
    int n;            /* intervals */
    double lo, h;
    double *F, *M, *S;   /* cumulative ∫f, ∫x f, ∫x² f from lo to node k (normalized: F[n] = 1) */
    double *G;           /* cumulative ∫f^(1/3): the high-resolution optimal point density */
} grid;

#ifndef OMEGA
#define OMEGA 1.9
#endif
typedef struct law_ctx {
    vq_law law;
    int d;
    const vq_codebook *s1;   /* RESIDUAL: the stage-1 sphere codebook */
    double sig;              /* RESIDUAL: std of the residual, in the stage-1 law's units */
} law_ctx;

static double sphere_pdf(int d, double x) {   /* x in standard units: t = x/√d */
    double t2 = x * x / d;
    if (d == 3) return t2 <= 1.0 ? 1.0 : 0.0;
    if (t2 >= 1.0) return 0.0;
    return exp(0.5 * (d - 3) * log1p(-t2));
}

static double pdf_std(const law_ctx *L, double x) {   /* unnormalized, in standard units */
    switch (L->law) {
    case VQ_LAW_SPHERE: return sphere_pdf(L->d, x);
    case VQ_LAW_GAUSS: return exp(-0.5 * x * x);
    case VQ_LAW_LAPLACE: return exp(-fabs(x) * 1.4142135623730951);
    case VQ_LAW_RESIDUAL: {   /* e = t − c_i for t in cell i: sum the cells that can produce e */
        const vq_codebook *s1 = L->s1;
        double e = x * L->sig, sd = sqrt((double)L->d), f = 0;
        for (int i = 0; i < s1->n; i++) {
            double lo = i ? s1->b[i - 1] - s1->c[i] : -INFINITY;
            double hi = i + 1 < s1->n ? s1->b[i] - s1->c[i] : INFINITY;
            if (e > lo && e <= hi) f += sphere_pdf(L->d, (s1->c[i] + e) * sd);
        }
        return f;
    }
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

/* Lloyd-Max for the law in ctx, tabulated on [−L, L] (standard units) with n grid intervals;
 * sigma converts standard units to the law's own units. */
static vq_status build(vq_codebook *cb, const law_ctx *ctx, double L, int ngrid, double sigma,
                       int bits, vq_err *err) {
    const vq_law law = ctx->law;
    const int d = ctx->d;
    grid g;
    g.n = ngrid;
    g.lo = -L;
    g.h = 2 * L / g.n;
    g.F = malloc(sizeof(double) * (size_t)(g.n + 1) * 4);
    if (!g.F) return vq_err_set(err, VQ_ERR_NOMEM, "lloydmax: out of memory");
    g.M = g.F + g.n + 1;
    g.S = g.M + g.n + 1;
    g.G = g.S + g.n + 1;
    double fp = pdf_std(ctx, g.lo), xp = g.lo;
    g.F[0] = g.M[0] = g.S[0] = g.G[0] = 0;
    for (int k = 1; k <= g.n; k++) {
        double x = g.lo + k * g.h, f = pdf_std(ctx, x);
        g.F[k] = g.F[k - 1] + 0.5 * g.h * (fp + f);
        g.M[k] = g.M[k - 1] + 0.5 * g.h * (xp * fp + x * f);
        g.S[k] = g.S[k - 1] + 0.5 * g.h * (xp * xp * fp + x * x * f);
        g.G[k] = g.G[k - 1] + 0.5 * g.h * (cbrt(fp) + cbrt(f));
        fp = f; xp = x;
    }
    double Z = g.F[g.n];
    double ZG = g.G[g.n];
    for (int k = 0; k <= g.n; k++) { g.F[k] /= Z; g.M[k] /= Z; g.S[k] /= Z; g.G[k] /= ZG; }

    int n = 1 << bits;
    double c[1 << VQ_LM_MAX_BITS], bnd[(1 << VQ_LM_MAX_BITS) + 1];
    /* start: cells of equal mass under f^(1/3) (Panter-Dite: the asymptotically optimal density
     * of levels), which leaves Lloyd little to do even at 8 bits */
    bnd[0] = g.lo;
    bnd[n] = g.lo + g.n * g.h;
    for (int i = 1; i < n; i++) {
        double target = (double)i / n, a = g.lo, z = bnd[n];
        for (int it = 0; it < 60; it++) {
            double m = 0.5 * (a + z);
            if (cum(&g, g.G, m) < target) a = m; else z = m;
        }
        bnd[i] = 0.5 * (a + z);
    }
    int iters = 0;
    double omega = bits >= 3 ? OMEGA : 1.0;
    for (; iters < 20000; iters++) {
        double moved = 0;
        for (int i = 0; i < n; i++) {
            double p = cum(&g, g.F, bnd[i + 1]) - cum(&g, g.F, bnd[i]);
            double m = cum(&g, g.M, bnd[i + 1]) - cum(&g, g.M, bnd[i]);
            double ci = p > 1e-300 ? m / p : 0.5 * (bnd[i] + bnd[i + 1]);
            if (iters) {   /* over-relaxed step: plain Lloyd creeps at 5+ bits */
                moved = fmax(moved, fabs(ci - c[i]));
                ci = c[i] + omega * (ci - c[i]);
            }
            c[i] = ci;
        }
        for (int i = 1; i < n; i++)
            if (c[i] <= c[i - 1]) { omega = 1.0; break; }   /* never let levels cross */
        for (int i = 1; i < n; i++) bnd[i] = 0.5 * (c[i - 1] + c[i]);
        if (iters && moved < 1e-7) break;
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

    cb->law = law;
    cb->d = law == VQ_LAW_SPHERE || law == VQ_LAW_RESIDUAL ? d : 0;
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

/* Built codebooks depend only on (law, d, bits), and a cache builds the same one for every layer
 * and side: the first build is kept for the life of the process (a few dozen at most, each on the
 * heap, so a pointer to one stays valid) and later ones share or copy it. */
static vq_codebook **memo;
static int memo_n, memo_cap;
static pthread_mutex_t memo_mu = PTHREAD_MUTEX_INITIALIZER;

static const vq_codebook *memo_find(vq_law law, int d, int bits) {   /* memo_mu held */
    for (int i = 0; i < memo_n; i++)
        if (memo[i]->law == law && memo[i]->d == (law == VQ_LAW_SPHERE ? d : 0) && memo[i]->bits == bits) return memo[i];
    return NULL;
}
static int memo_get(vq_codebook *cb, vq_law law, int d, int bits) {
    pthread_mutex_lock(&memo_mu);
    const vq_codebook *m = memo_find(law, d, bits);
    if (m) *cb = *m;
    pthread_mutex_unlock(&memo_mu);
    return m != NULL;
}
/* the kept copy of cb (NULL: out of memory; the caller then keeps its own) */
static const vq_codebook *memo_put(const vq_codebook *cb, vq_law law, int d, int bits) {
    pthread_mutex_lock(&memo_mu);
    const vq_codebook *m = memo_find(law, d, bits);
    if (!m && memo_n == memo_cap) {
        int cap = memo_cap ? 2 * memo_cap : 16;
        vq_codebook **g = realloc(memo, sizeof *g * (size_t)cap);
        if (g) { memo = g; memo_cap = cap; }
    }
    if (!m && memo_n < memo_cap) {
        vq_codebook *c = malloc(sizeof *c);
        if (c) { *c = *cb; memo[memo_n++] = c; m = c; }
    }
    pthread_mutex_unlock(&memo_mu);
    return m;
}

static vq_status build_law(vq_codebook *cb, vq_law law, int d, int bits, vq_err *err);
vq_status vq_lloydmax_build(vq_codebook *cb, vq_law law, int d, int bits, vq_err *err) {
    if (bits >= 1 && bits <= VQ_LM_MAX_BITS && memo_get(cb, law, d, bits)) return VQ_OK;
    vq_status s = build_law(cb, law, d, bits, err);
    if (!s) memo_put(cb, law, d, bits);
    return s;
}

const vq_codebook *vq_lloydmax_shared(vq_law law, int d, int bits, vq_err *err) {
    if (bits >= 1 && bits <= VQ_LM_MAX_BITS) {
        pthread_mutex_lock(&memo_mu);
        const vq_codebook *m = memo_find(law, d, bits);
        pthread_mutex_unlock(&memo_mu);
        if (m) return m;
    }
    vq_codebook cb;
    if (build_law(&cb, law, d, bits, err)) return NULL;
    const vq_codebook *m = memo_put(&cb, law, d, bits);
    if (!m) vq_err_set(err, VQ_ERR_NOMEM, "lloydmax: out of memory (codebook of law %s, d=%d, %d bits)",
                       vq_law_name(law), d, bits);
    return m;
}

static vq_status build_law(vq_codebook *cb, vq_law law, int d, int bits, vq_err *err) {
    if (bits < 1 || bits > VQ_LM_MAX_BITS)
        return vq_err_set(err, VQ_ERR_ARG, "lloydmax: bits=%d out of range 1..%d (law %s)", bits,
                          VQ_LM_MAX_BITS, vq_law_name(law));
    if (law != VQ_LAW_SPHERE && law != VQ_LAW_GAUSS && law != VQ_LAW_LAPLACE)
        return vq_err_set(err, VQ_ERR_ARG, "lloydmax: unknown law %d", (int)law);
    if (law == VQ_LAW_SPHERE && (d < 3 || d > (1 << 20)))
        return vq_err_set(err, VQ_ERR_ARG, "lloydmax: sphere law needs d in 3..%d, got d=%d",
                          1 << 20, d);
    law_ctx ctx = {law, d, NULL, 0};
    double L = law == VQ_LAW_LAPLACE ? 40.0 : 12.0;        /* standard units */
    if (law == VQ_LAW_SPHERE && sqrt((double)d) < L) L = sqrt((double)d);
    double sigma = law == VQ_LAW_SPHERE ? 1.0 / sqrt((double)d) : 1.0;
    return build(cb, &ctx, L, law == VQ_LAW_LAPLACE ? (1 << 17) : (1 << 15), sigma, bits, err);
}

vq_status vq_lloydmax_build_residual(vq_codebook *cb, const vq_codebook *stage1, int bits,
                                     vq_err *err) {
    if (bits < 1 || bits > VQ_LM_MAX_BITS)
        return vq_err_set(err, VQ_ERR_ARG, "lloydmax: bits=%d out of range 1..%d (law residual)",
                          bits, VQ_LM_MAX_BITS);
    if (!stage1 || stage1->law != VQ_LAW_SPHERE || !(stage1->mse > 0))
        return vq_err_set(err, VQ_ERR_ARG, "lloydmax: residual law needs a sphere-law stage 1");
    law_ctx ctx = {VQ_LAW_RESIDUAL, stage1->d, stage1, sqrt(stage1->mse)};
    /* support: |e| <= 1 + max|c| (t in [−1, 1]); mass beyond 12 stage-1 std is negligible */
    double cmax = fabs(stage1->c[0]), sx = 1.0 / sqrt((double)stage1->d);
    double L = fmin((fmin(1.0, 12 * sx) + cmax) / ctx.sig, 48.0);   /* beyond 48 std: < 1e-6 mass */
    return build(cb, &ctx, L, 1 << 16, 1.0, bits, err);
}

void vq_lloydmax_quantize(const vq_codebook *cb, const float *x, float inv_scale, int n,
                          uint8_t *idx) {
    for (int j = 0; j < n; j++) idx[j] = (uint8_t)vq_lloydmax_index(cb, x[j] * inv_scale);
}
