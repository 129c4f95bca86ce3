/* sampler.c: greedy and filtered-temperature sampling over a logit vector. */
#include "model/sampler.h"

#include <math.h>
#include <stdlib.h>

typedef struct { float logit; int id; } cand;

struct vq_sampler {
    vq_sampler_params p;
    int vocab;
    cand *c;
    vq_rng rng;
};

vq_sampler *vq_sampler_create(const vq_sampler_params *p, int vocab, vq_err *err) {
    if (isnan(p->temp) || p->temp > 100.0f) {
        vq_err_set(err, VQ_ERR_ARG, "temperature %g out of range [0, 100]", p->temp); return NULL;
    }
    if (!(p->top_p > 0.0f) || p->top_p > 1.0f) {
        vq_err_set(err, VQ_ERR_ARG, "top-p %g out of range (0, 1]", p->top_p); return NULL;
    }
    if (!(p->min_p >= 0.0f) || p->min_p >= 1.0f) {
        vq_err_set(err, VQ_ERR_ARG, "min-p %g out of range [0, 1)", p->min_p); return NULL;
    }
    if (p->top_k < 0) { vq_err_set(err, VQ_ERR_ARG, "top-k %d must be >= 0 (0 = off)", p->top_k); return NULL; }
    vq_sampler *s = calloc(1, sizeof *s);
    if (!s || !(s->c = malloc((size_t)vocab * sizeof(cand)))) {
        free(s); vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); return NULL;
    }
    s->p = *p; s->vocab = vocab;
    vq_rng_seed(&s->rng, p->seed);
    return s;
}

void vq_sampler_free(vq_sampler *s) { if (s) { free(s->c); free(s); } }

int vq_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}

static int by_logit_desc(const void *a, const void *b) {
    float x = ((const cand *)a)->logit, y = ((const cand *)b)->logit;
    if (x != y) return x > y ? -1 : 1;
    return ((const cand *)a)->id - ((const cand *)b)->id;   /* stable across qsort versions */
}

int vq_sample(vq_sampler *s, const float *logits) {
    if (s->p.temp <= 0.0f) return vq_argmax(logits, s->vocab);
    int n = s->vocab;
    for (int i = 0; i < n; i++) { s->c[i].logit = logits[i]; s->c[i].id = i; }
    qsort(s->c, (size_t)n, sizeof(cand), by_logit_desc);
    if (s->p.top_k > 0 && s->p.top_k < n) n = s->p.top_k;
    /* probabilities at temperature 1 for the top-p and min-p filters */
    double mx = s->c[0].logit, sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)s->c[i].logit - mx);
    if (s->p.top_p < 1.0f) {
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += exp((double)s->c[i].logit - mx) / sum;
            if (cum >= s->p.top_p) { n = i + 1; break; }
        }
    }
    if (s->p.min_p > 0.0f) {   /* keep tokens with p >= min_p * p_max; p_max term is exp(0) = 1 */
        int keep = 1;
        while (keep < n && exp((double)s->c[keep].logit - mx) >= s->p.min_p) keep++;
        n = keep;
    }
    double z = 0;
    for (int i = 0; i < n; i++) z += exp(((double)s->c[i].logit - mx) / s->p.temp);
    double r = vq_rng_uniform(&s->rng) * z, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += exp(((double)s->c[i].logit - mx) / s->p.temp);
        if (r < acc) return s->c[i].id;
    }
    return s->c[n - 1].id;
}

int vq_sampler_sample(vq_sampler *s, const float *logits) { return vq_sample(s, logits); }

vq_sampler_params vq_sampler_default_params(void) {
    return (vq_sampler_params){ .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = 0 };
}
