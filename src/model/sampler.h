/* sampler.h: next-token choice from logits: greedy, or temperature with top-k, top-p and min-p
 * filters (in llama.cpp's order: top-k, top-p, min-p on the untempered distribution, then
 * temperature), drawn from the portable seeded RNG so a seed reproduces a run on any machine. */
#ifndef VQ_SAMPLER_H
#define VQ_SAMPLER_H
#include "core/core.h"

typedef struct vq_sampler_params {
    float temp;     /* <= 0: greedy (argmax) */
    int top_k;      /* <= 0: off */
    float top_p;    /* >= 1: off */
    float min_p;    /* <= 0: off */
    uint64_t seed;
} vq_sampler_params;

typedef struct vq_sampler vq_sampler;
vq_sampler *vq_sampler_create(const vq_sampler_params *p, int vocab, vq_err *err);
void        vq_sampler_free(vq_sampler *s);
int         vq_sample(vq_sampler *s, const float *logits);
int         vq_argmax(const float *x, int n);
#endif
