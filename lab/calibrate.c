/* calibrate.c: `veloxquant calibrate`: the model runs over a calibration text in windows of ctx
 * tokens (an f32 cache, cleared between windows, so every window starts at position 0 as in use);
 * the forward pass's tap sees every layer's q, k, v after RoPE and this file sums, in double,
 * per channel E[q], E[q²] (per query head), E[k], E[k²], E[v²] (per KV head). The pair energy of
 * a KV head is then Σ_{query heads g of its GQA group} E‖q_g,p‖² · E‖k_p‖² for each RoPE pair p:
 * the expected squared score contribution of that pair if q and k were independent, and the
 * weight a quantization error in that pair gets in the scores (docs/calibration-format.md says
 * why). A pair's norm does not change under RoPE, so its energy is position independent.
 * The Q-Filter of a KV head (evict=qfilters, arXiv 2503.02812) is the top eigenvector of the
 * group's summed, not mean-centred, query second moment M = Σ_g E[q_g q_gᵀ] (the direction the
 * queries project on most), found by power iteration in double from the mean query direction, and
 * signed so that the group's mean query projects on it positively: then a key's k·f estimates how
 * much attention it draws, higher = more (the seeds' filter had no fixed sign).
 * The attention block's tap gives each layer's mean cos(x, x + attn(x)) over the rows (x the
 * residual stream entering it): SqueezeAttention's layer importance (evict=squeeze).
 * Version 4: per layer and KV head, the second moments E[k kᵀ] and E[v vᵀ] are summed too and
 * eigen-decomposed (cyclic Jacobi, in double) into the axes the lowrank codec projects on
 * (Palu-style per-head low rank, of the keys after RoPE: the cache holds nothing else; not
 * centred, so a zero row stays zero and the codes stay a linear image of the rows). Values: the
 * principal axes of E[v vᵀ]. Keys: weighted by the group's queries, S = (M_q + εI)^½ with M_q =
 * Σ_g E[q_g q_gᵀ] and ε = 1e-2 of its mean eigenvalue; the eigenvectors p_j of S E[k kᵀ] S; coded
 * by S p_j, read by S⁻¹ p_j: the rank-r code that minimizes E[(q·(k − k̂))²] when q and k are
 * independent (plain PCA of the keys ignores where the queries look). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/vqlab.h"
#include "session/lab_tap.h"

#define CAL_CHUNK 64

typedef struct cal_acc {
    int L, Hq, Hk, d;
    double *q1, *q2, *k1, *k2, *v2;   /* sums: [L][Hq][d] and [L][Hk][d] */
    double *qq;                        /* [L][Hk][d][d]: Σ over the group's queries of q qᵀ (upper) */
    double *kk, *vv;                   /* [L][Hk][d][d]: Σ k kᵀ, Σ v vᵀ (upper) */
    double *tmp;                       /* 3 d: a mean query and the power iteration's two vectors */
    uint64_t *rows;                    /* per layer: rows seen */
    double *cos;                       /* per layer: Σ over rows of cos(x, x + attn(x)) */
    uint64_t *cos_rows;                /* per layer: rows in it */
    int vi_rows;                       /* VecInfer: rows kept per layer for the k-means (0: none) */
    float *vik, *viv;                  /* [L][Hk][vi_rows][d]: the first rows' keys and values */
    int *vi_n;                         /* per layer: rows kept */
} cal_acc;

/* The attention block's tap: cos(x, x + dx) per row, x the residual stream entering the layer and
 * dx what attention adds (SqueezeAttention's layer importance); a zero vector counts as cosine 1. */
static void attn_tap(void *user, int layer, int n, int dim, const float *x, const float *dx) {
    cal_acc *a = user;
    if (layer < 0 || layer >= a->L) return;
    for (int t = 0; t < n; t++) {
        const float *u = x + (size_t)t * dim, *e = dx + (size_t)t * dim;
        double uu = 0, vv = 0, uv = 0;
        for (int i = 0; i < dim; i++) {
            const double v = (double)u[i] + e[i];
            uu += (double)u[i] * u[i];
            vv += v * v;
            uv += (double)u[i] * v;
        }
        a->cos[layer] += uu > 0 && vv > 0 ? fmax(-1.0, fmin(1.0, uv / sqrt(uu * vv))) : 1.0;
        a->cos_rows[layer]++;
    }
}

static void tap(void *user, int layer, int n, const int *pos, const float *q, const float *k,
                const float *v) {
    cal_acc *a = user;
    (void)pos;
    if (layer < 0 || layer >= a->L) return;
    const size_t wq = (size_t)a->Hq * a->d, wk = (size_t)a->Hk * a->d;
    double *q1 = a->q1 + layer * wq, *q2 = a->q2 + layer * wq;
    double *k1 = a->k1 + layer * wk, *k2 = a->k2 + layer * wk, *v2 = a->v2 + layer * wk;
    const int d = a->d, G = a->Hq / a->Hk;
    for (int t = 0; t < n; t++) {
        const float *qt = q + t * wq, *kt = k + t * wk, *vt = v + t * wk;
        for (size_t i = 0; i < wq; i++) { q1[i] += qt[i]; q2[i] += (double)qt[i] * qt[i]; }
        for (int hq = 0; hq < a->Hq; hq++) {
            const float *x = qt + (size_t)hq * d;
            double *m = a->qq + ((size_t)layer * a->Hk + hq / G) * d * d;
            for (int i = 0; i < d; i++) {
                const double xi = x[i];
                double *row = m + (size_t)i * d;
                for (int j = i; j < d; j++) row[j] += xi * x[j];
            }
        }
        for (size_t i = 0; i < wk; i++) {
            k1[i] += kt[i];
            k2[i] += (double)kt[i] * kt[i];
            v2[i] += (double)vt[i] * vt[i];
        }
        for (int h = 0; h < a->Hk; h++) {
            const float *x = kt + (size_t)h * d, *y = vt + (size_t)h * d;
            double *mk = a->kk + ((size_t)layer * a->Hk + h) * d * d;
            double *mv = a->vv + ((size_t)layer * a->Hk + h) * d * d;
            for (int i = 0; i < d; i++) {
                const double xi = x[i], yi = y[i];
                double *rk = mk + (size_t)i * d, *rv = mv + (size_t)i * d;
                for (int j = i; j < d; j++) { rk[j] += xi * x[j]; rv[j] += yi * y[j]; }
            }
        }
    }
    a->rows[layer] += (uint64_t)n;
    for (int t = 0; t < n && a->vi_rows && a->vi_n[layer] < a->vi_rows; t++, a->vi_n[layer]++)
        for (int h = 0; h < a->Hk; h++) {
            const size_t o = (((size_t)layer * a->Hk + h) * a->vi_rows + a->vi_n[layer]) * d;
            memcpy(a->vik + o, k + t * wk + (size_t)h * d, sizeof(float) * (size_t)d);
            memcpy(a->viv + o, v + t * wk + (size_t)h * d, sizeof(float) * (size_t)d);
        }
}

/* The top eigenvector of the symmetric PSD m (upper triangle filled; mirrored here), by power
 * iteration from the mean direction (or all ones), signed so that mean·f >= 0. f = 0 when m is.
 * tmp: 2 d doubles. */
static void q_filter(double *m, int d, const double *mean, float *f, double *tmp) {
    for (int i = 0; i < d; i++)
        for (int j = 0; j < i; j++) m[(size_t)i * d + j] = m[(size_t)j * d + i];
    double *x = tmp, *y = tmp + d, nx = 0;
    for (int i = 0; i < d; i++) nx += mean[i] * mean[i];
    for (int i = 0; i < d; i++) x[i] = nx > 0 ? mean[i] : 1.0;
    for (int it = 0; it < 2000; it++) {
        double n2 = 0, dot = 0;
        for (int i = 0; i < d; i++) {
            double acc = 0;
            for (int j = 0; j < d; j++) acc += m[(size_t)i * d + j] * x[j];
            y[i] = acc;
            n2 += acc * acc;
        }
        if (n2 <= 0) { memset(f, 0, (size_t)d * sizeof(float)); return; }
        const double inv = 1.0 / sqrt(n2);
        for (int i = 0; i < d; i++) { y[i] *= inv; dot += y[i] * x[i]; }
        memcpy(x, y, (size_t)d * sizeof(double));
        if (it > 0 && fabs(dot) > 1.0 - 1e-14) break;   /* unit x: the direction stopped moving */
    }
    double sgn = 0;
    for (int i = 0; i < d; i++) sgn += mean[i] * x[i];
    for (int i = 0; i < d; i++) f[i] = (float)(sgn < 0 ? -x[i] : x[i]);
}

/* Eigen-decomposition of the symmetric d x d matrix m (both triangles filled; destroyed) by cyclic
 * Jacobi rotations: eigenvalues in eig (descending, negatives from rounding clamped to 0), unit
 * eigenvectors as the rows of basis, each signed so that its largest-magnitude entry is positive
 * (a fixed choice: the file does not depend on the sweep order's sign flips). v: d*d doubles,
 * ix: d ints of scratch. */
static void sym_eig(double *m, int d, double *v, int *ix, double *eig, double *basis) {
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) v[(size_t)i * d + j] = i == j;
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0, tot = 0;
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) {
                const double x = m[(size_t)i * d + j] * m[(size_t)i * d + j];
                tot += x;
                if (i != j) off += x;
            }
        if (off <= 1e-30 * tot || off == 0) break;
        for (int p = 0; p < d - 1; p++)
            for (int q = p + 1; q < d; q++) {
                const double apq = m[(size_t)p * d + q];
                if (apq == 0) continue;
                const double app = m[(size_t)p * d + p], aqq = m[(size_t)q * d + q];
                const double th = (aqq - app) / (2 * apq);
                const double t = (th >= 0 ? 1.0 : -1.0) / (fabs(th) + sqrt(th * th + 1));
                const double c = 1 / sqrt(t * t + 1), sn = t * c;
                for (int k = 0; k < d; k++) {   /* columns p, q of m */
                    const double mkp = m[(size_t)k * d + p], mkq = m[(size_t)k * d + q];
                    m[(size_t)k * d + p] = c * mkp - sn * mkq;
                    m[(size_t)k * d + q] = sn * mkp + c * mkq;
                }
                for (int k = 0; k < d; k++) {   /* rows p, q */
                    const double mpk = m[(size_t)p * d + k], mqk = m[(size_t)q * d + k];
                    m[(size_t)p * d + k] = c * mpk - sn * mqk;
                    m[(size_t)q * d + k] = sn * mpk + c * mqk;
                }
                for (int k = 0; k < d; k++) {   /* eigenvectors as columns of v */
                    const double vkp = v[(size_t)k * d + p], vkq = v[(size_t)k * d + q];
                    v[(size_t)k * d + p] = c * vkp - sn * vkq;
                    v[(size_t)k * d + q] = sn * vkp + c * vkq;
                }
            }
    }
    for (int i = 0; i < d; i++) ix[i] = i;
    for (int i = 1; i < d; i++) {   /* insertion sort by eigenvalue, descending (stable) */
        int o = ix[i], j = i;
        while (j > 0 && m[(size_t)ix[j - 1] * d + ix[j - 1]] < m[(size_t)o * d + o]) { ix[j] = ix[j - 1]; j--; }
        ix[j] = o;
    }
    for (int r = 0; r < d; r++) {
        const int c = ix[r];
        eig[r] = fmax(0.0, m[(size_t)c * d + c]);
        double big = 0, n2 = 0;
        for (int k = 0; k < d; k++) {
            const double x = v[(size_t)k * d + c];
            n2 += x * x;
            if (fabs(x) > fabs(big)) big = x;
        }
        const double sc = (big < 0 ? -1.0 : 1.0) / sqrt(n2 > 0 ? n2 : 1.0);
        for (int k = 0; k < d; k++) basis[(size_t)r * d + k] = v[(size_t)k * d + c] * sc;
    }
}

/* The second moment E[x xᵀ] of the sums s (upper triangle, n rows) into m (full). */
static void moment(const double *s, double n, int d, double *m) {
    const double inv = n > 0 ? 1.0 / n : 0.0;
    for (int i = 0; i < d; i++)
        for (int j = i; j < d; j++) m[(size_t)i * d + j] = m[(size_t)j * d + i] = s[(size_t)i * d + j] * inv;
}

/* The values' axes: the eigen-decomposition of E[v vᵀ]. w: 5 d*d + d doubles of scratch. */
static void pca_v(const double *s, double n, int d, double *w, int *ix, float *eig, float *basis) {
    double *m = w, *v = w + (size_t)d * d, *e = w + 2 * (size_t)d * d, *b = e + d;
    moment(s, n, d, m);
    sym_eig(m, d, v, ix, e, b);
    for (int i = 0; i < d; i++) eig[i] = (float)e[i];
    for (size_t i = 0; i < (size_t)d * d; i++) basis[i] = (float)b[i];
}

/* The keys' query-weighted axes (the header says why): sk, sq the summed k kᵀ and group q qᵀ
 * (upper triangles) over n rows. enc rows S p_j, dec rows S⁻¹ p_j, eig the eigenvalues of S M_k S.
 * w: 5 d*d + d doubles of scratch (plus 3 d*d more: 8 d*d + d in all). */
static void pca_k(const double *sk, const double *sq, double n, int d, double *w, int *ix, float *eig,
                  float *enc, float *dec) {
    double *m = w, *v = w + (size_t)d * d, *e = w + 2 * (size_t)d * d, *b = e + d;
    double *S = b + (size_t)d * d, *Si = S + (size_t)d * d, *T = Si + (size_t)d * d;
    moment(sq, n, d, m);
    sym_eig(m, d, v, ix, e, b);   /* M_q = Σ e_i b_i b_iᵀ */
    double mean = 0;
    for (int i = 0; i < d; i++) mean += e[i] / d;
    const double eps = mean > 0 ? 1e-2 * mean : 1.0;
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) {
            double a = 0, ai = 0;
            for (int k = 0; k < d; k++) {
                const double bb = b[(size_t)k * d + i] * b[(size_t)k * d + j], ev = e[k] + eps;
                a += sqrt(ev) * bb;
                ai += bb / sqrt(ev);
            }
            S[(size_t)i * d + j] = a;
            Si[(size_t)i * d + j] = ai;
        }
    moment(sk, n, d, m);
    for (int i = 0; i < d; i++)   /* T = M_k S */
        for (int j = 0; j < d; j++) {
            double a = 0;
            for (int k = 0; k < d; k++) a += m[(size_t)i * d + k] * S[(size_t)k * d + j];
            T[(size_t)i * d + j] = a;
        }
    for (int i = 0; i < d; i++)   /* m = S T = S M_k S, symmetrized */
        for (int j = 0; j < d; j++) {
            double a = 0;
            for (int k = 0; k < d; k++) a += S[(size_t)i * d + k] * T[(size_t)k * d + j];
            m[(size_t)i * d + j] = a;
        }
    for (int i = 0; i < d; i++)
        for (int j = 0; j < i; j++) m[(size_t)i * d + j] = m[(size_t)j * d + i] = 0.5 * (m[(size_t)i * d + j] + m[(size_t)j * d + i]);
    sym_eig(m, d, v, ix, e, b);
    for (int r = 0; r < d; r++) {
        eig[r] = (float)e[r];
        for (int i = 0; i < d; i++) {
            double a = 0, ai = 0;
            for (int k = 0; k < d; k++) {
                a += S[(size_t)i * d + k] * b[(size_t)r * d + k];
                ai += Si[(size_t)i * d + k] * b[(size_t)r * d + k];
            }
            enc[(size_t)r * d + i] = (float)a;
            dec[(size_t)r * d + i] = (float)ai;
        }
    }
}

static uint64_t vq_calibrate_model_hash(const vq_model *m, char *name, size_t name_cap) {
    if (name && name_cap) {
        const char *b = strrchr(vq_model_path(m), '/');
        snprintf(name, name_cap, "%.63s", b ? b + 1 : vq_model_path(m));
    }
    return vq_lab_model_config_hash(m);
}

vq_status vq_calibrate(const vq_model *m, const int *tok, int n_tok, int ctx, const char *out_path,
                       vq_calibrate_info *info, vq_err *err) {
    return vq_calibrate_vi(m, tok, n_tok, ctx, 0, 0, 0, 1.0, 0, out_path, info, err);
}

/* The VecInfer section's seeds: the rotation's (recorded in the file) and the k-means' */
#define VI_ROT_SEED 0x5ec1f0e5ull
#define VI_KM_SEED 20251007ull

vq_status vq_calibrate_vi(const vq_model *m, const int *tok, int n_tok, int ctx, int vi_sub_k,
                          int vi_sub_v, int vi_rows, double vi_alpha, int vi_vnorm, const char *out_path,
                          vq_calibrate_info *info, vq_err *err) {
    vq_err_clear(err);
    if (info) memset(info, 0, sizeof *info);
    if (!m || !tok || !out_path) return vq_err_set(err, VQ_ERR_ARG, "calibrate: no model, tokens or output path");
    if (ctx < 2 || n_tok < 2)
        return vq_err_set(err, VQ_ERR_ARG, "calibrate: %d tokens with windows of %d (need >= 2 each)", n_tok, ctx);
    const vq_model_info c = vq_model_get_info(m);
    const vq_model_details det = vq_model_get_details(m);
    cal_acc a = { .L = c.n_layers, .Hq = c.n_heads, .Hk = c.n_kv_heads, .d = c.head_dim };
    if (vi_sub_k || vi_sub_v) {
        if (!(vi_sub_k == 1 || vi_sub_k == 2 || vi_sub_k == 4 || vi_sub_k == 8) ||
            !(vi_sub_v == 1 || vi_sub_v == 2 || vi_sub_v == 4 || vi_sub_v == 8))
            return vq_err_set(err, VQ_ERR_ARG, "calibrate: VecInfer sub-vector lengths %d,%d: each must be "
                              "1, 2, 4 or 8", vi_sub_k, vi_sub_v);
        if (vi_rows < 16 || vi_rows > (1 << 20))
            return vq_err_set(err, VQ_ERR_ARG, "calibrate: VecInfer rows %d outside 16..2^20", vi_rows);
        a.vi_rows = vi_rows;
        a.vik = malloc(sizeof(float) * (size_t)a.L * a.Hk * vi_rows * a.d);
        a.viv = malloc(sizeof(float) * (size_t)a.L * a.Hk * vi_rows * a.d);
        a.vi_n = calloc((size_t)a.L, sizeof(int));
        if (!a.vik || !a.viv || !a.vi_n) {
            free(a.vik); free(a.viv); free(a.vi_n);
            return vq_err_set(err, VQ_ERR_NOMEM, "calibrate: out of memory for %d VecInfer rows", vi_rows);
        }
    }
    const size_t wq = (size_t)a.L * a.Hq * a.d, wk = (size_t)a.L * a.Hk * a.d;
    a.q1 = calloc(wq, sizeof(double)); a.q2 = calloc(wq, sizeof(double));
    a.k1 = calloc(wk, sizeof(double)); a.k2 = calloc(wk, sizeof(double)); a.v2 = calloc(wk, sizeof(double));
    a.rows = calloc((size_t)a.L, sizeof(uint64_t));
    a.qq = calloc((size_t)a.L * a.Hk * a.d * a.d, sizeof(double));
    a.tmp = calloc(3 * (size_t)a.d, sizeof(double));
    a.cos = calloc((size_t)a.L, sizeof(double));
    a.cos_rows = calloc((size_t)a.L, sizeof(uint64_t));
    a.kk = calloc((size_t)a.L * a.Hk * a.d * a.d, sizeof(double));
    a.vv = calloc((size_t)a.L * a.Hk * a.d * a.d, sizeof(double));
    double *em = malloc(sizeof(double) * (8 * (size_t)a.d * a.d + a.d));   /* pca scratch */
    int *eix = malloc(sizeof(int) * (size_t)a.d);
    vq_lab_calib cal;   /* its arrays are ours (vq_lab_calib_free frees them) */
    memset(&cal, 0, sizeof cal);
    vq_session *ss = NULL;
    vq_kv_spec *f32 = NULL;
    vq_status s = VQ_OK;
    if (!a.q1 || !a.q2 || !a.k1 || !a.k2 || !a.v2 || !a.rows || !a.qq || !a.tmp || !a.cos || !a.cos_rows ||
        !a.kk || !a.vv || !em || !eix) {
        s = vq_err_set(err, VQ_ERR_NOMEM, "calibrate: out of memory");
        goto done;
    }
    if (ctx > n_tok) ctx = n_tok;
    /* an f32 session whose forward the tap watches; chunks of CAL_CHUNK tokens */
    vq_session_params sp = vq_session_default_params();
    sp.n_ctx = ctx;
    sp.n_batch = CAL_CHUNK;
    sp.kv_seed = 1;
    sp.allow_ctx_over_train = 1;
    f32 = vq_kv_spec_parse("f32", err);
    ss = f32 ? vq_session_create(m, f32, &sp, err) : NULL;
    if (!ss) { s = err && err->code ? err->code : VQ_ERR_NOMEM; goto done; }
    vq_lab_session_set_tap(ss, tap, &a);
    vq_lab_session_set_attn_tap(ss, attn_tap, &a);
    int n_win = 0;
    for (int w0 = 0; w0 + 1 < n_tok && !s; w0 += ctx, n_win++) {   /* windows of ctx tokens */
        int wn = VQ_MIN(ctx, n_tok - w0);
        s = vq_session_truncate(ss, 0, err);   /* every window from position 0 */
        if (!s) s = vq_session_decode(ss, tok + w0, wn, NULL, 0, err);
    }
    if (s) goto done;

    cal.n_layers = a.L; cal.n_heads = a.Hq; cal.n_kv_heads = a.Hk; cal.head_dim = a.d;
    cal.rope_dim = det.rope_dim; cal.rope_neox = det.rope_neox;
    cal.config_hash = vq_calibrate_model_hash(m, cal.model, sizeof cal.model);
    cal.n_tokens = a.rows[0];
    {
        const size_t hk = (size_t)a.L * a.Hk * a.d, hq = (size_t)a.L * a.Hq * a.d;
        cal.pair_energy = calloc(hk / 2, sizeof(float));
        cal.k_mean = calloc(hk, sizeof(float));
        cal.k_sq = calloc(hk, sizeof(float));
        cal.v_sq = calloc(hk, sizeof(float));
        cal.q_filter = calloc(hk, sizeof(float));
        cal.q_mean = calloc(hq, sizeof(float));
        cal.q_sq = calloc(hq, sizeof(float));
        cal.attn_cos = calloc((size_t)a.L, sizeof(float));
        cal.has_lowrank = 1;
        cal.k_eig = calloc(hk, sizeof(float));
        cal.v_eig = calloc(hk, sizeof(float));
        cal.k_basis = calloc(hk * (size_t)a.d, sizeof(float));
        cal.k_dec = calloc(hk * (size_t)a.d, sizeof(float));
        cal.v_basis = calloc(hk * (size_t)a.d, sizeof(float));
        if (!cal.pair_energy || !cal.k_mean || !cal.k_sq || !cal.v_sq || !cal.q_filter || !cal.q_mean || !cal.q_sq ||
            !cal.attn_cos || !cal.k_eig || !cal.k_dec || !cal.v_eig || !cal.k_basis || !cal.v_basis) {
            s = vq_err_set(err, VQ_ERR_NOMEM, "calibrate: out of memory");
            goto done;
        }
    }
    const int G = a.Hq / a.Hk, np = a.d / 2;
    for (int l = 0; l < a.L; l++) {
        const double inv = a.rows[l] ? 1.0 / (double)a.rows[l] : 0.0;
        cal.attn_cos[l] = a.cos_rows[l] ? (float)(a.cos[l] / (double)a.cos_rows[l]) : 1.0f;
        for (size_t i = 0; i < (size_t)a.Hq * a.d; i++) {
            size_t o = (size_t)l * a.Hq * a.d + i;
            cal.q_mean[o] = (float)(a.q1[o] * inv);
            cal.q_sq[o] = (float)(a.q2[o] * inv);
        }
        for (size_t i = 0; i < (size_t)a.Hk * a.d; i++) {
            size_t o = (size_t)l * a.Hk * a.d + i;
            cal.k_mean[o] = (float)(a.k1[o] * inv);
            cal.k_sq[o] = (float)(a.k2[o] * inv);
            cal.v_sq[o] = (float)(a.v2[o] * inv);
        }
        for (int h = 0; h < a.Hk; h++) {   /* the principal axes of keys and values (version 4) */
            const size_t o = ((size_t)l * a.Hk + h) * a.d, oo = o * a.d;
            const double n = (double)a.rows[l];
            pca_k(a.kk + oo, a.qq + oo, n, a.d, em, eix, cal.k_eig + o, cal.k_basis + oo, cal.k_dec + oo);
            pca_v(a.vv + oo, n, a.d, em, eix, cal.v_eig + o, cal.v_basis + oo);
        }
        for (int h = 0; h < a.Hk; h++)
            for (int p = 0; p < np; p++) {
                int c0 = vq_lab_calib_pair_ch(&cal, p, 0), c1 = vq_lab_calib_pair_ch(&cal, p, 1);
                size_t ko = ((size_t)l * a.Hk + h) * a.d;
                double ke = (a.k2[ko + c0] + a.k2[ko + c1]) * inv, qe = 0;
                for (int g = 0; g < G; g++) {
                    size_t qo = ((size_t)l * a.Hq + (size_t)h * G + g) * a.d;
                    qe += (a.q2[qo + c0] + a.q2[qo + c1]) * inv;
                }
                cal.pair_energy[((size_t)l * a.Hk + h) * np + p] = (float)(qe * ke);
            }
        for (int h = 0; h < a.Hk; h++) {   /* the group's mean query, then its filter */
            memset(a.tmp, 0, (size_t)a.d * sizeof(double));
            for (int g = 0; g < G; g++)
                for (int i = 0; i < a.d; i++) a.tmp[i] += a.q1[((size_t)l * a.Hq + (size_t)h * G + g) * a.d + i] * inv;
            q_filter(a.qq + ((size_t)l * a.Hk + h) * a.d * a.d, a.d, a.tmp,
                     cal.q_filter + ((size_t)l * a.Hk + h) * a.d, a.tmp + a.d);
        }
    }
    if (a.vi_rows) {   /* VecInfer: λ and the codebooks of every (layer, KV head), from the kept rows */
        const size_t nf = (size_t)a.L * a.Hk * a.d;
        cal.vi_sub_k = vi_sub_k; cal.vi_sub_v = vi_sub_v; cal.vi_seed = VI_ROT_SEED; cal.vi_vnorm = vi_vnorm ? 1 : 0;
        cal.vi_smooth = calloc(nf, sizeof(float));
        cal.vi_cb_k = calloc(nf * 16, sizeof(float));
        cal.vi_cb_v = calloc(nf * 16, sizeof(float));
        if (!cal.vi_smooth || !cal.vi_cb_k || !cal.vi_cb_v) {
            s = vq_err_set(err, VQ_ERR_NOMEM, "calibrate: out of memory");
            goto done;
        }
        for (int l = 0; l < a.L && !s; l++)
            for (int h = 0; h < a.Hk && !s; h++) {
                const size_t kh = (size_t)l * a.Hk + h, o = kh * a.vi_rows * a.d;
                s = vq_lab_vi_train_head(a.vik + o, a.viv + o, a.vi_n[l], a.d, vi_sub_k, vi_sub_v, vi_alpha, vi_vnorm, VI_ROT_SEED,
                                         VI_KM_SEED + kh, cal.vi_smooth + kh * a.d, cal.vi_cb_k + kh * a.d * 16,
                                         cal.vi_cb_v + kh * a.d * 16, err);
            }
        if (s) goto done;
    }
    size_t file_bytes = 0;
    s = vq_lab_calib_write(&cal, out_path, &file_bytes, err);
    if (!s && info) {
        info->n_tokens = (long)a.rows[0];
        info->n_windows = n_win;
        info->file_bytes = file_bytes;
        info->config_hash = cal.config_hash;
    }
done:
    vq_lab_calib_free(&cal);
    vq_session_free(ss);
    vq_kv_spec_free(f32);
    free(a.q1); free(a.q2); free(a.k1); free(a.k2); free(a.v2); free(a.rows); free(a.qq); free(a.tmp);
    free(a.cos); free(a.cos_rows); free(a.kk); free(a.vv); free(em); free(eix);
    free(a.vik); free(a.viv); free(a.vi_n);
    return s;
}

/* ---------------- per-layer ranking (vq_calib_layers_read) ---------------- */
vq_status vq_calib_layers_read(const char *path, vq_calib_layers *out, vq_err *err) {
    memset(out, 0, sizeof *out);
    vq_lab_calib c;
    vq_status s = vq_lab_calib_read(path, &c, err);
    if (s) return s;
    const int L = c.n_layers, H = c.n_kv_heads, np = c.head_dim / 2;
    out->energy = calloc((size_t)L, sizeof(double));
    out->rank = malloc(sizeof(int) * (size_t)L);
    if (!out->energy || !out->rank) {
        vq_lab_calib_free(&c);
        vq_calib_layers_free(out);
        return vq_err_set(err, VQ_ERR_NOMEM, "calibration '%s': out of memory", path);
    }
    snprintf(out->model, sizeof out->model, "%s", c.model);
    out->n_layers = L;
    out->n_heads = c.n_heads;
    out->n_kv_heads = H;
    out->head_dim = c.head_dim;
    out->n_tokens = (long)c.n_tokens;
    for (int l = 0; l < L; l++) {
        for (size_t i = 0; i < (size_t)H * np; i++) out->energy[l] += c.pair_energy[(size_t)l * H * np + i];
        out->rank[l] = l;
    }
    for (int i = 1; i < L; i++) {   /* insertion sort, stable: ties keep the lower layer first */
        int o = out->rank[i], j = i;
        while (j > 0 && out->energy[out->rank[j - 1]] < out->energy[o]) { out->rank[j] = out->rank[j - 1]; j--; }
        out->rank[j] = o;
    }
    vq_lab_calib_free(&c);
    return VQ_OK;
}

void vq_calib_layers_free(vq_calib_layers *l) {
    if (!l) return;
    free(l->energy);
    free(l->rank);
    l->energy = NULL;
    l->rank = NULL;
}
