/* kv_ref.h: the float64 naive attention the KV tests compare against, and a random-cache driver:
 * appends random rows in random chunks (with position gaps), then queries random positions. */
#ifndef VQ_KV_REF_H
#define VQ_KV_REF_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "kv/kv.h"
#include "../vq_test.h"

/* out[i, qh, :] = softmax_r(q.k_r / sqrt(d) over rows with pos_r <= q_pos[i]) . v_r, in float64.
 * k, v: rows x (H*d); q, out: n_q x (NH*d). A query that sees no row gets zeros. cap > 0: every
 * score s becomes cap * tanh(s / cap) before the softmax (the cache's dims.softcap). */
static inline void ref_attention_cap(int rows, const float *k, const float *v, const int32_t *pos, int H,
                                     int NH, int d, int n_q, const int *q_pos, const float *q, double cap,
                                     double *out) {
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
                if (cap > 0) s[r] = cap * tanh(s[r] / cap);
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

static inline void ref_attention(int rows, const float *k, const float *v, const int32_t *pos, int H,
                          int NH, int d, int n_q, const int *q_pos, const float *q, double *out) {
    ref_attention_cap(rows, k, v, pos, H, NH, d, n_q, q_pos, q, 0, out);
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

/* a cache of spec over dims (seed 42); a failure is a test failure (NULL returned) */
static inline vq_kv *kv_make(const char *spec, const vq_kv_dims *dims) {
    vq_err err;
    vq_kv *kv = vq_kv_create_str(spec, dims, 42, &err);
    CHECKF(kv != NULL, "%s: %s", spec, kv ? "" : err.msg);
    return kv;
}

/* rows 0..n-1 (positions = row index) of K and V (n x n_kv_heads*head_dim) appended to every
 * layer in chunks of chunk rows */
static inline void kv_fill_rows(vq_kv *kv, const vq_kv_dims *dims, const float *K, const float *V, int n, int chunk) {
    const size_t w = (size_t)dims->n_kv_heads * dims->head_dim;
    vq_err err;
    for (int l = 0; l < dims->n_layers; l++)
        for (int p = 0; p < n; p += chunk) {
            int c = n - p < chunk ? n - p : chunk;
            CHECKF(vq_kv_append(kv, l, p, c, K + (size_t)p * w, V + (size_t)p * w, &err) == VQ_OK, "%s", err.msg);
        }
}

/* float64 softmax weights of one query row q (NH*d, at position qp) over rows (k: rows x H*d,
 * causal by pos), summed over each KV head's query heads into wsum[rows] */
static inline void ref_softmax_weights(int rows, const float *k, const int32_t *pos, int H, int NH, int d,
                                       const float *q, int qp, double *wsum) {
    const int G = NH / H;
    double *s = malloc(sizeof(double) * (size_t)(rows > 0 ? rows : 1));
    for (int r = 0; r < rows; r++) wsum[r] = 0;
    for (int hq = 0; hq < NH; hq++) {
        int h = hq / G;
        double mx = -INFINITY, sum = 0;
        for (int r = 0; r < rows; r++) {
            double dot = 0;
            for (int e = 0; e < d; e++) dot += (double)q[(size_t)hq * d + e] * k[((size_t)r * H + h) * d + e];
            s[r] = pos[r] <= qp ? dot / sqrt((double)d) : -INFINITY;
            mx = fmax(mx, s[r]);
        }
        for (int r = 0; r < rows; r++) sum += s[r] == -INFINITY ? 0 : exp(s[r] - mx);
        for (int r = 0; r < rows; r++) wsum[r] += s[r] == -INFINITY ? 0 : exp(s[r] - mx) / sum;
    }
    free(s);
}

#endif
