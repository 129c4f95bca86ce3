/* kv_ref.h: the float64 naive attention the KV tests compare against, and a random-cache driver:
 * appends random rows in random chunks (with position gaps), then queries random positions. */
#ifndef VQ_KV_REF_H
#define VQ_KV_REF_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "../vq_test.h"

/* out[i, qh, :] = softmax_r(q.k_r / sqrt(d) over rows with pos_r <= q_pos[i]) . v_r, in float64.
 * k, v: rows x (H*d); q, out: n_q x (NH*d). A query that sees no row gets zeros. */
static inline void ref_attention(int rows, const float *k, const float *v, const int32_t *pos, int H,
                          int NH, int d, int n_q, const int *q_pos, const float *q, double *out) {
    const int G = NH / H;
    double *s = malloc(sizeof(double) * (size_t)(rows > 0 ? rows : 1));
    for (int i = 0; i < n_q; i++)
        for (int qh = 0; qh < NH; qh++) {
            const int h = qh / G;
            const float *qq = q + ((size_t)i * NH + qh) * d;
            double mx = -INFINITY, sum = 0;
            for (int r = 0; r < rows; r++) {
                if (pos[r] > q_pos[i]) { s[r] = -INFINITY; continue; }
                double acc = 0;
                const float *kk = k + ((size_t)r * H + h) * d;
                for (int e = 0; e < d; e++) acc += (double)qq[e] * kk[e];
                s[r] = acc / sqrt((double)d);
                if (s[r] > mx) mx = s[r];
            }
            double *o = out + ((size_t)i * NH + qh) * d;
            for (int e = 0; e < d; e++) o[e] = 0;
            if (mx == -INFINITY) continue;
            for (int r = 0; r < rows; r++) {
                if (s[r] == -INFINITY) continue;
                double w = exp(s[r] - mx);
                sum += w;
                const float *vv = v + ((size_t)r * H + h) * d;
                for (int e = 0; e < d; e++) o[e] += w * vv[e];
            }
            for (int e = 0; e < d; e++) o[e] /= sum;
        }
    free(s);
}

/* ref_attention over the rows each query's window sees (p - span < pos; span 0: all) */
static inline void windowed_ref(int rows, const float *k, const float *v, const int32_t *pos, int H, int NH, int d,
                         int n_q, const int *q_pos, const float *q, int span, double *out) {
    float *ks = malloc(sizeof(float) * (size_t)rows * H * d), *vs = malloc(sizeof(float) * (size_t)rows * H * d);
    int32_t *ps = malloc(sizeof(int32_t) * (size_t)rows);
    for (int i = 0; i < n_q; i++) {
        int m = 0;
        for (int r = 0; r < rows; r++) {
            if (span > 0 && (long)pos[r] <= (long)q_pos[i] - span) continue;
            memcpy(ks + (size_t)m * H * d, k + (size_t)r * H * d, sizeof(float) * H * d);
            memcpy(vs + (size_t)m * H * d, v + (size_t)r * H * d, sizeof(float) * H * d);
            ps[m++] = pos[r];
        }
        ref_attention(m, ks, vs, ps, H, NH, d, 1, q_pos + i, q + (size_t)i * NH * d, out + (size_t)i * NH * d);
    }
    free(ks); free(vs); free(ps);
}

/* largest |a - b| / (max|b| over the same head row + floor) */
static inline double rel_err(int n_q, int NH, int d, const float *a, const double *b) {
    double worst = 0;
    for (int i = 0; i < n_q * NH; i++) {
        double mb = 0, md = 0;
        for (int e = 0; e < d; e++) {
            mb = fmax(mb, fabs(b[(size_t)i * d + e]));
            double df = fabs(a[(size_t)i * d + e] - b[(size_t)i * d + e]);
            if (!(df == df) || isinf(df)) return INFINITY;   /* NaN/inf never passes */
            md = fmax(md, df);
        }
        worst = fmax(worst, md / (mb + 1e-6));
    }
    return worst;
}

static inline void fill_uniform(vq_rng *r, float *x, size_t n, float amp) {
    for (size_t i = 0; i < n; i++) x[i] = amp * (2.0f * vq_rng_uniformf(r) - 1.0f);
}

/* fixed default, VQ_TEST_SEED overrides, printed: vq_t_seed in vq_test.h */
static inline uint64_t test_seed(void) { return vq_t_seed(12345); }
#endif
