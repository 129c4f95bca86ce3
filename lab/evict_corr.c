/* evict_corr.c: how well an eviction policy's scores predict the attention later queries pay.
 * Each spec's cache (its policy, a budget covering every row: nothing is evicted) takes the same
 * text's first `at` tokens; its scores are read then (no eviction step has run, so windowed
 * policies still hold their observation). A truth cache of the same codec with evict=h2o takes
 * the same tokens, then `future` more (teacher forcing): the attention the future queries paid to
 * each of the first `at` rows is its h2o score after minus before. Per layer: Spearman's rank
 * correlation of the two over the rows at positions < at (ties: average ranks). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lab/eval.h"

typedef struct { float v; int i; } vk;
static int cmp_vk(const void *a, const void *b) {
    const vk *x = a, *y = b;
    return (x->v > y->v) - (x->v < y->v);
}
/* average ranks of x[0..n) into r */
static void ranks(const float *x, int n, double *r, vk *tmp) {
    for (int i = 0; i < n; i++) tmp[i] = (vk){x[i], i};
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_vk);
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && tmp[j + 1].v == tmp[i].v) j++;
        for (int k = i; k <= j; k++) r[tmp[k].i] = 0.5 * (i + j);
        i = j + 1;
    }
}
static double spearman(const float *a, const float *b, int n, double *ra, double *rb, vk *tmp) {
    ranks(a, n, ra, tmp);
    ranks(b, n, rb, tmp);
    double ma = 0, mb = 0;
    for (int i = 0; i < n; i++) { ma += ra[i]; mb += rb[i]; }
    ma /= n; mb /= n;
    double sab = 0, saa = 0, sbb = 0;
    for (int i = 0; i < n; i++) {
        sab += (ra[i] - ma) * (rb[i] - mb);
        saa += (ra[i] - ma) * (ra[i] - ma);
        sbb += (rb[i] - mb) * (rb[i] - mb);
    }
    return saa > 0 && sbb > 0 ? sab / sqrt(saa * sbb) : 0.0;
}

/* The truth's spec: the arm's codec and store with h2o keeping every one of the n rows (a spec
 * value made by the parser: no spec text is cut here). NULL with err set. */
static vq_kv_spec *truth_spec(const vq_kv_spec *s, int n, vq_err *err) {
    if (vq_kv_spec_n_overrides(s)) {
        vq_err_set(err, VQ_ERR_ARG, "evict-corr: '%s': per-layer overrides are not supported here", vq_kv_spec_text(s));
        return NULL;
    }
    if (!vq_kv_spec_evicts(s)) {
        vq_err_set(err, VQ_ERR_ARG, "evict-corr: '%s' has no eviction policy (evict=...)", vq_kv_spec_text(s));
        return NULL;
    }
    return vq_kv_spec_with_eviction(s, "h2o", n, err);
}

/* A session of spec holding N positions; NULL with err set. */
static vq_session *session_of(const vq_model *m, const vq_kv_spec *spec, int N, vq_err *err) {
    vq_session_params sp = vq_session_default_params();
    sp.n_ctx = N;
    sp.n_batch = 64;
    sp.kv_seed = 0;
    sp.allow_ctx_over_train = 1;
    return vq_session_create(m, spec, &sp, err);
}

vq_status vq_evict_correlation(const vq_model *m, const vq_kv_spec *const *specs, int n_specs,
                               const int *tok, int n_tok, int at, int future, double *rho, vq_err *err) {
    vq_err_clear(err);
    if (!m || !specs || n_specs < 1 || !tok || !rho || at < 2 || future < 1 || (long)at + future > n_tok)
        return vq_err_set(err, VQ_ERR_ARG, "evict-corr: bad arguments (need 2 <= at, 1 <= future, at + "
                          "future <= %d text tokens; got at %d, future %d)", n_tok, at, future);
    const int NL = vq_model_n_layers(m), N = at + future;
    float *sc = malloc(sizeof(float) * N), *s0 = malloc(sizeof(float) * (size_t)NL * N), *s1 = malloc(sizeof(float) * N);
    double *ra = malloc(sizeof(double) * N), *rb = malloc(sizeof(double) * N);
    int32_t *pos = malloc(sizeof(int32_t) * N);
    vk *tmp = malloc(sizeof(vk) * N);
    float *truth = malloc(sizeof(float) * (size_t)NL * N);
    vq_status st = sc && s0 && s1 && ra && rb && pos && tmp && truth ? VQ_OK
                 : vq_err_set(err, VQ_ERR_NOMEM, "evict-corr: out of memory");
    vq_kv_spec *last_truth = NULL;
    for (int a = 0; !st && a < n_specs; a++) {
        /* the scores are read before any eviction step: a budget that would drop rows of the
         * first `at` tokens would be ignored in silence, so it is refused */
        if (!vq_kv_spec_keeps_rows(specs[a], at)) {
            st = vq_err_set(err, VQ_ERR_ARG, "evict-corr: '%s': its budget would evict rows of the first %d "
                            "tokens; the scores are read before any eviction, so give a budget that keeps "
                            "every row (budget=1.0)", vq_kv_spec_text(specs[a]), at);
            break;
        }
        vq_kv_spec *tspec = truth_spec(specs[a], N, err);
        if (!tspec) { st = err && err->code ? err->code : VQ_ERR_ARG; break; }
        if (!vq_kv_spec_equal(tspec, last_truth)) {   /* the truth for this codec (shared by arms in a row) */
            vq_session *kt = session_of(m, tspec, N, err);
            if (!kt) { vq_kv_spec_free(tspec); st = err->code; break; }
            /* the prompt's observation window, no eviction step; then each future token the same */
            st = vq_lab_session_observe(kt, tok, at, err);
            for (int l = 0; !st && l < NL; l++) st = vq_lab_session_evict_scores(kt, l, s0 + (size_t)l * N, pos, err);
            for (int p = at; !st && p < N; p++) st = vq_lab_session_observe(kt, tok + p, 1, err);
            for (int l = 0; !st && l < NL; l++) {
                st = vq_lab_session_evict_scores(kt, l, s1, pos, err);
                for (int r = 0; !st && r < at; r++) truth[(size_t)l * N + r] = s1[r] - s0[(size_t)l * N + r];
            }
            vq_session_free(kt);
            vq_kv_spec_free(last_truth);
            last_truth = tspec;
            if (st) { vq_kv_spec_free(last_truth); last_truth = NULL; break; }
        } else {
            vq_kv_spec_free(tspec);
        }
        vq_session *kv = session_of(m, specs[a], N, err);
        if (!kv) { st = err->code; break; }
        st = vq_lab_session_observe(kv, tok, at, err);
        for (int l = 0; !st && l < NL; l++) {
            if (vq_session_kv_rows(kv, l) != at) {
                st = vq_err_set(err, VQ_ERR_ARG, "evict-corr: '%s' holds %d rows of %d at layer %d", vq_kv_spec_text(specs[a]),
                                vq_session_kv_rows(kv, l), at, l);
                break;
            }
            st = vq_lab_session_evict_scores(kv, l, sc, pos, err);
            for (int r = 0; !st && r < at; r++)
                if (pos[r] != r) st = vq_err_set(err, VQ_ERR_ARG, "evict-corr: '%s' layer %d: rows are not the "
                                                 "positions in order (sink=/window= specs are not supported here)",
                                                 vq_kv_spec_text(specs[a]), l);
            if (!st) rho[(size_t)a * NL + l] = spearman(sc, truth + (size_t)l * N, at, ra, rb, tmp);
        }
        vq_session_free(kv);
    }
    vq_kv_spec_free(last_truth);
    free(sc); free(s0); free(s1); free(ra); free(rb); free(pos); free(tmp); free(truth);
    return st;
}
