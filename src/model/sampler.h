/* sampler.h: next-token choice from logits: greedy, or temperature with top-k, top-p and min-p
 * filters (in llama.cpp's order: top-k, top-p, min-p on the untempered distribution, then
 * temperature), drawn from the portable seeded RNG so a seed reproduces a run on any machine. */
#ifndef VQ_SAMPLER_H
#define VQ_SAMPLER_H
#include "core/core.h"

/* vq_sampler_params, vq_sampler_create/free/sample are public (veloxquant.h). */
int         vq_sample(vq_sampler *s, const float *logits);
int         vq_argmax(const float *x, int n);
#endif
