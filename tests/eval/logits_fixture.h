/* logits_fixture.h: checks a model's logits against a reference-logits fixture (the record format
 * of tests/fixtures/smollm2_logits.txt and gemma3_logits.txt; tests/fixtures/README.md). For every
 * case: the logits at each 'pos' line (computed incrementally: the case's ids are fed up to that
 * position, so a long case never holds more than one row of logits), every 'top' and 'samples'
 * value within the tolerances as a log-probability (logit - logsumexp over the vocabulary; the
 * reference's logsumexp is its 'stats' line), the argmax equal to the reference's, and the greedy
 * continuation equal to the reference's while the reference's top-1 margin is at least
 * greedy_margin. Log-probabilities, not raw logits: int8 activation rounding moves all logits of
 * a position together by up to 0.44 (measured on SmolLM2, tests/fixtures/README.md), a shift the
 * softmax removes, and which made the raw distance depend on the realization of that rounding
 * (0.13-0.23 mean on one machine's ISAs). The raw distance is still printed. */
#ifndef VQ_LOGITS_FIXTURE_H
#define VQ_LOGITS_FIXTURE_H
#include "lab/eval.h"
#include "session/session_impl.h"
#include "../vq_test.h"

typedef struct vq_t_logit_tol {
    double max_abs;        /* max |ours - reference| over every checked logit */
    double mean_abs;       /* mean |ours - reference| */
    double greedy_margin;  /* greedy steps compared while the reference's top-1 lead is >= this */
    int max_ids;           /* longest case */
    const char *spec;      /* the cache the logits are read through (NULL: f32) */
    int chunk;             /* ids per forward call (0: each stretch up to a checked position at once) */
} vq_t_logit_tol;

/* Returns the rows the cache's sliding-window rings freed over all cases (vq_kv_ring_dropped). */
static long vq_t_check_logits(const vq_model *m, const char *path, const vq_t_logit_tol *tol) {
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f) return 0;
    long ring = 0;
    char *line = malloc(1 << 22);
    const int V = m->cfg.vocab_size;
    int *ids = malloc(sizeof(int) * (size_t)tol->max_ids), n = 0, pos = -1, fed = 0;
    float *lg = malloc((size_t)V * sizeof(float));
    char name[64] = "";
    double worst = 0, sum_abs = 0, raw_worst = 0, raw_sum = 0, lse = 0, ref_lse = NAN;
    long n_cmp = 0;
    vq_err err;
    vq_err_clear(&err);
    vq_kv *kv = NULL;
    vq_fwd *fw = NULL;
    while (fgets(line, 1 << 22, f)) {
        char *p = line;
        if (!strncmp(p, "case ", 5)) sscanf(p + 5, "%63s", name);
        else if (!strncmp(p, "ids ", 4)) {
            p += 4;
            n = (int)strtol(p, &p, 10);
            CHECKF(n > 0 && n <= tol->max_ids, "case %s: %d ids", name, n);
            if (n <= 0 || n > tol->max_ids) break;
            for (int i = 0; i < n; i++) ids[i] = (int)strtol(p, &p, 10);
            ring += vq_kv_ring_dropped(kv);
            vq_kv_destroy(kv);
            vq_fwd_destroy(fw);
            vq_kv_dims d = vq_model_kv_dims(m, n + 64);
            kv = vq_kv_create_str(tol->spec ? tol->spec : "f32", &d, 1, &err);
            fw = vq_fwd_create(m, n, n + 64, &err);
            CHECKF(kv && fw, "%s", err.msg);
            fed = 0;
        } else if (!strncmp(p, "stats ", 6) && pos >= 0) {
            double st[5];
            CHECKF(sscanf(p + 6, "%lf %lf %lf %lf %lf", &st[0], &st[1], &st[2], &st[3], &st[4]) == 5,
                   "case %s pos %d: a stats line without its logsumexp", name, pos);
            ref_lse = st[4];
        } else if (!strncmp(p, "pos ", 4) && kv && fw) {
            pos = atoi(p + 4);
            ref_lse = NAN;
            CHECKF(pos >= fed && pos < n, "case %s: pos %d after %d fed of %d", name, pos, fed, n);
            if (pos < fed || pos >= n) break;
            while (fed <= pos) {   /* in chunks of tol->chunk ids (0: all at once), logits of the last */
                int c = tol->chunk > 0 ? VQ_MIN(tol->chunk, pos + 1 - fed) : pos + 1 - fed;
                int last = fed + c == pos + 1;
                CHECKF(vq_forward(m, fw, kv, ids + fed, c, fed, last ? lg : NULL, last, &err) == VQ_OK, "%s", err.msg);
                fed += c;
            }
            double mx = lg[vq_argmax(lg, V)], se = 0;
            for (int i = 0; i < V; i++) se += exp((double)lg[i] - mx);
            lse = mx + log(se);
        } else if ((!strncmp(p, "top ", 4) || !strncmp(p, "samples ", 8)) && pos >= 0) {
            int is_top = p[0] == 't';
            p += is_top ? 4 : 8;
            int k = (int)strtol(p, &p, 10);
            for (int j = 0; j < k; j++) {
                int id = (int)strtol(p, &p, 10);
                double want = strtod(p, &p);
                if (id < 0 || id >= V) { CHECKF(0, "case %s: id %d", name, id); break; }
                CHECKF(ref_lse == ref_lse, "case %s pos %d: no stats line before the values", name, pos);
                double raw = fabs(lg[id] - want), diff = fabs((lg[id] - lse) - (want - ref_lse));
                raw_worst = VQ_MAX(raw_worst, raw); raw_sum += raw;
                worst = VQ_MAX(worst, diff); sum_abs += diff; n_cmp++;
                if (is_top && j == 0)
                    CHECKF(vq_argmax(lg, V) == id, "case %s pos %d: argmax %d, reference %d", name, pos, vq_argmax(lg, V), id);
            }
        } else if (!strncmp(p, "greedy ", 7) && n > 0) {
            p += 7;
            int k = (int)strtol(p, &p, 10), want[64];
            for (int j = 0; j < k && j < 64; j++) want[j] = (int)strtol(p, &p, 10);
            double margin[64] = { 0 };
            if (fgets(line, 1 << 22, f) && !strncmp(line, "greedy_margin ", 14)) {
                char *q = line + 14;
                strtol(q, &q, 10);
                for (int j = 0; j < k && j < 64; j++) margin[j] = strtod(q, &q);
            }
            vq_kv_dims d = vq_model_kv_dims(m, n + 64);
            vq_kv *gk = vq_kv_create_str("f16", &d, 1, &err);
            vq_fwd *gf = vq_fwd_create(m, n, n + 64, &err);
            CHECKF(gk && gf && vq_forward(m, gf, gk, ids, n, 0, lg, 1, &err) == VQ_OK, "%s", err.msg);
            int compared = 0;
            for (int j = 0; gk && gf && j < k && j < 64; j++) {
                int got = vq_argmax(lg, V);
                if (margin[j] < tol->greedy_margin) break;   /* a near-tie may flip; stop comparing */
                CHECKF(got == want[j], "case %s greedy step %d: %d, reference %d", name, j, got, want[j]);
                compared++;
                if (got != want[j]) break;
                vq_forward(m, gf, gk, &got, 1, n + j, lg, 1, &err);
            }
            printf("case %s: greedy tokens equal the reference's for the first %d steps (until a margin < %.2f)\n",
                   name, compared, tol->greedy_margin);
            CHECK(compared >= 1);
            vq_fwd_destroy(gf);
            vq_kv_destroy(gk);
            pos = -1;
        }
    }
    printf("log-probabilities vs reference (kv %s): %ld compared, max |diff| %.4f, mean |diff| %.4f "
           "(raw logits: max %.4f, mean %.4f)\n", tol->spec ? tol->spec : "f32", n_cmp, worst,
           sum_abs / VQ_MAX(n_cmp, 1), raw_worst, raw_sum / VQ_MAX(n_cmp, 1));
    CHECK(n_cmp > 300);
    CHECKF(worst <= tol->max_abs, "max |diff| %.4f > %.2f", worst, tol->max_abs);
    CHECKF(sum_abs / VQ_MAX(n_cmp, 1) <= tol->mean_abs, "mean |diff| %.4f > %.2f", sum_abs / VQ_MAX(n_cmp, 1),
           tol->mean_abs);
    ring += vq_kv_ring_dropped(kv);
    vq_kv_destroy(kv);
    vq_fwd_destroy(fw);
    free(lg);
    free(ids);
    free(line);
    fclose(f);
    return ring;
}
#endif
