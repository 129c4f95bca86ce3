/* test_cuda_forward.c: the one forward pass (model/forward.c) on the CUDA row of the backend
 * contract (vq_ops_cuda, f16 KV store on the device) against the same pass on the CPU row (an f16
 * vq_kv cache), decoding a prompt one token at a time: the next-token logits at every position.
 * Models: the paths in VQ_CUDA_FWD_MODELS (':'-separated) or the arguments, each PATH or
 * PATH@WEIGHTS (weights re-coded at load, e.g. @q4_0); none given, or no CUDA
 * device: exit 77. The prompt is seeded random token ids (seed printed).
 *
 * What is checked: every GPU logit finite; the difference's RMS over the logits' RMS at each
 * position below 1e-3, a sanity threshold (NOT a derived bound) for float32 products summed in
 * another order. Both sides compute with the same weights and float activations: for quantized
 * weights the CPU side runs the same model with its matrices decoded to f32 at load (`@f32` on
 * top; a Q4_0/Q8_0/Q4_1/K-quant weight is exact or within an ulp in f32), since the CPU's
 * quantized kernels round each 32-value block of activations to 8 bits (2^-8 of the block's
 * largest value) and the GPU's do not; that difference (about 2e-2 relative here) is printed
 * against the CPU's quantized path but not checked. Printed: the worst relative RMS, the largest
 * absolute difference, and how many positions agree on the top token. Also checked: the refusals (a
 * batch of 2 tokens, the tap and arms paths are the CPU row's, vq_forward on a device row). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../vq_test.h"
#include "core/core.h"
#include "kv/kv.h"
#include "model/model.h"
#include "backend/ops.h"
#include "backend/cuda/vq_cuda.h"

static int mirror(void *user, const void *data, size_t bytes) {
    vq_err e = {0};
    if (vq_cuda_row_mirror(user, data, bytes, &e)) { fprintf(stderr, "mirror: %s\n", e.msg); return 1; }
    return 0;
}

static int quantized(const vq_model *m) {
    const uint32_t t = m->layers[0].wq.type;
    return !(t == 0 || t == 1 || t == 30);
}

/* a model argument: PATH or PATH@WEIGHTS (a --weights spec applied at load: vq_model_requantize) */
static vq_model *open_model(const char *arg, vq_err *err) {
    char path[1024];
    snprintf(path, sizeof path, "%s", arg);
    char *at = strchr(path, '@');
    if (at) *at++ = 0;
    vq_model *m = vq_model_open(path, NULL, err);
    if (m && at) {
        vq_wspec w;
        if (vq_wspec_parse(at, &w, err) || vq_model_requantize(m, &w, err)) { vq_model_free(m); return NULL; }
    }
    return m;
}

/* the same model with every matrix decoded to f32: the CPU reference for quantized weights */
static vq_model *open_f32(const char *arg, vq_err *err) {
    vq_model *m = open_model(arg, err);
    vq_wspec w;
    if (m && (vq_wspec_parse("f32", &w, err) || vq_model_requantize(m, &w, err))) { vq_model_free(m); return NULL; }
    return m;
}

static void run_model(const char *path, uint64_t seed) {
    vq_err err = {0};
    vq_model *m = open_model(path, &err);
    if (!m) { fprintf(stderr, "%s: %s\n", path, err.msg); CHECK(0); return; }
    const int quant = quantized(m);
    vq_model *mr = quant ? open_f32(path, &err) : m;   /* the CPU reference's weights */
    if (!mr) { fprintf(stderr, "%s@f32: %s\n", path, err.msg); CHECK(0); vq_model_free(m); return; }
    const vq_model_config *c = &m->cfg;
    const int P = 32, V = c->vocab_size;
    printf("model %s: %s, %d layers, dim %d, heads %d/%d x %d, vocab %d, wq type %u\n", path, c->arch, c->n_layers,
           c->dim, c->n_heads, c->n_kv_heads, c->head_dim, V, m->layers[0].wq.type);
    vq_kv_dims dims = vq_model_kv_dims(m, P);
    vq_kv *kv = vq_kv_create_str("f16", &dims, seed, &err);
    vq_kv *kvq = quant ? vq_kv_create_str("f16", &dims, seed, &err) : NULL;
    vq_fwd *fc = vq_fwd_create(mr, 1, P, &err);
    vq_fwd *fq = quant ? vq_fwd_create(m, 1, P, &err) : NULL;
    vq_cuda_row *row = vq_cuda_row_create(&err);
    if (!kv || !fc || !row || (quant && (!kvq || !fq))) { fprintf(stderr, "setup: %s\n", err.msg); CHECK(0); exit(1); }
    if (vq_model_tensors(m, mirror, row)) { CHECK(0); exit(1); }
    vq_cuda_kvs *kvs = vq_cuda_kvs_create(dims.n_layers, dims.n_heads, dims.n_kv_heads, dims.head_dim, P, dims.span,
                                          dims.softcap, NULL, &err);
    if (!kvs) { printf("  refused by the cuda store: %s\n", err.msg); CHECK(strstr(err.msg, "backend cuda") != NULL); goto done; }
    {
        vq_fwd *fg = vq_fwd_create_ops(m, 1, P, &vq_ops_cuda, row, &err);
        if (!fg) { printf("  refused by the cuda row: %s\n", err.msg); CHECK(strstr(err.msg, "backend cuda") != NULL); vq_cuda_kvs_destroy(kvs); goto done; }
        printf("  device: %.1f MiB of weights mirrored, %.1f MiB of KV store\n", vq_cuda_row_bytes(row) / 1048576.0,
               vq_cuda_kvs_bytes(kvs) / 1048576.0);
        /* refusals */
        {
            vq_err e = {0};
            CHECK(vq_fwd_create_ops(m, 2, P, &vq_ops_cuda, row, &e) == NULL && e.code == VQ_ERR_ARG);
            int t0 = 1;
            CHECK(vq_forward(m, fg, kv, &t0, 1, 0, NULL, 0, &e) == VQ_ERR_ARG && strstr(e.msg, "vq_forward_store"));
        }
        vq_rng rng;
        vq_rng_seed(&rng, seed);
        float *lc = malloc((size_t)V * sizeof(float)), *lg = malloc((size_t)V * sizeof(float));
        float *lq = malloc((size_t)V * sizeof(float));
        const double thr = 1e-3;
        double worst_rel = 0, worst_abs = 0, worst_q = 0;
        int agree = 0, nonfinite = 0;
        for (int p = 0; p < P; p++) {
            const int tok = (int)(vq_rng_u64(&rng) % (uint64_t)V);
            vq_status s1 = vq_forward(mr, fc, kv, &tok, 1, p, lc, 1, &err);
            if (s1) { fprintf(stderr, "cpu forward: %s\n", err.msg); CHECK(0); break; }
            if (quant && vq_forward(m, fq, kvq, &tok, 1, p, lq, 1, &err)) {
                fprintf(stderr, "cpu forward (quantized kernels): %s\n", err.msg); CHECK(0); break;
            }
            vq_status s2 = vq_forward_store(m, fg, kvs, &tok, 1, p, lg, 1, &err);
            if (s2) { fprintf(stderr, "cuda forward: %s\n", err.msg); CHECK(0); break; }
            double d2 = 0, r2 = 0, mx = 0, q2 = 0;
            int ac = 0, ag = 0;
            for (int i = 0; i < V; i++) {
                if (!isfinite(lg[i])) nonfinite++;
                const double d = (double)lg[i] - lc[i];
                d2 += d * d;
                r2 += (double)lc[i] * lc[i];
                if (fabs(d) > mx) mx = fabs(d);
                if (quant) q2 += ((double)lg[i] - lq[i]) * ((double)lg[i] - lq[i]);
                if (lc[i] > lc[ac]) ac = i;
                if (lg[i] > lg[ag]) ag = i;
            }
            const double rel = sqrt(d2 / (r2 > 0 ? r2 : 1));
            if (rel > worst_rel) worst_rel = rel;
            if (quant && sqrt(q2 / (r2 > 0 ? r2 : 1)) > worst_q) worst_q = sqrt(q2 / (r2 > 0 ? r2 : 1));
            if (mx > worst_abs) worst_abs = mx;
            agree += ac == ag;
            CHECKF(rel <= thr, "position %d: relative RMS difference %.3e over %.0e", p, rel, thr);
        }
        CHECKF(nonfinite == 0, "%d non-finite GPU logits", nonfinite);
        printf("  %d positions: worst relative RMS difference %.3e (threshold %.0e), largest |difference| %.4g, "
               "top token agrees at %d/%d%s\n", P, worst_rel, thr, worst_abs, agree, P,
               quant ? " (CPU reference: the weights decoded to f32)" : "");
        if (quant) printf("  against the CPU's quantized kernels (8-bit activations; not checked): worst relative RMS %.3e\n", worst_q);
        free(lc); free(lg); free(lq);
        vq_fwd_destroy(fg);
        vq_cuda_kvs_destroy(kvs);
    }
done:
    vq_cuda_row_destroy(row);
    vq_fwd_destroy(fc);
    vq_fwd_destroy(fq);
    vq_kv_destroy(kv);
    vq_kv_destroy(kvq);
    if (mr != m) vq_model_free(mr);
    vq_model_free(m);
}

int main(int argc, char **argv) {
    if (vq_cuda_device_count() == 0) VQ_SKIP("no CUDA device (cudaGetDeviceCount gives none): GPU tests skipped");
    const char *env = getenv("VQ_CUDA_FWD_MODELS");
    if (argc < 2 && !(env && *env)) VQ_SKIP("no model: set VQ_CUDA_FWD_MODELS or pass model paths");
    char name[256];
    vq_err err = {0};
    if (!vq_cuda_device_name(name, sizeof name, &err)) printf("device: %s\n", name);
    const uint64_t seed = vq_t_seed(32034);
    for (int i = 1; i < argc; i++) run_model(argv[i], seed);
    if (argc < 2) {
        char buf[4096];
        snprintf(buf, sizeof buf, "%s", env);
        for (char *p = strtok(buf, ":"); p; p = strtok(NULL, ":")) run_model(p, seed);
    }
    return vq_t_done();
}
