/* bench_cuda_fwd.c: decode speed of the one forward pass on the CUDA row (f16 KV store on the
 * device) and on the CPU row (f16 vq_kv cache, every core), same model, same tokens, same run.
 * Not a test and not in any library (bench/cuda, like bench_cuda_attn).
 *   bench_cuda_fwd MODEL[@WEIGHTS] [--prompt P] [--tokens N] [--reps R] [--cpu 0|1]
 * Each arm: P tokens decoded one at a time (untimed), then N decode steps timed, logits fetched
 * to the host after every step (what a generate loop needs); arms interleaved R times; the
 * median and range of tokens/s are printed, the weights' bytes per token read at that rate (GB/s),
 * and one CSV line (arm, model, weights, tok/s). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
static void die(const char *what, const vq_err *e) { fprintf(stderr, "%s: %s\n", what, e->msg); exit(1); }
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: bench_cuda_fwd MODEL[@WEIGHTS] [--prompt P] [--tokens N] [--reps R] [--cpu 0|1]\n"); return 2; }
    int P = 16, N = 128, R = 3, cpu = 1;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--prompt")) P = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens")) N = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) R = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--cpu")) cpu = atoi(argv[i + 1]);
    }
    if (R > 15) R = 15;
    char path[1024];
    snprintf(path, sizeof path, "%s", argv[1]);
    char *at = strchr(path, '@');
    if (at) *at++ = 0;
    vq_err err = {0};
    vq_model *m = vq_model_open(path, NULL, &err);
    if (!m) die(path, &err);
    if (at) {
        vq_wspec w;
        if (vq_wspec_parse(at, &w, &err) || vq_model_requantize(m, &w, &err)) die("weights", &err);
    }
    const vq_model_config *c = &m->cfg;
    const int V = c->vocab_size;
    vq_kv_dims dims = vq_model_kv_dims(m, P + N);
    vq_cuda_row *row = vq_cuda_row_create(&err);
    if (!row) die("cuda row", &err);
    const double t0 = vq_now_s();
    if (vq_model_tensors(m, mirror, row)) return 1;
    const double t_up = vq_now_s() - t0;
    vq_cuda_kvs *kvs = vq_cuda_kvs_create(dims.n_layers, dims.n_heads, dims.n_kv_heads, dims.head_dim, P + N, dims.span,
                                          dims.softcap, NULL, &err);
    if (!kvs) die("cuda store", &err);
    vq_fwd *fg = vq_fwd_create_ops(m, 1, P + N, &vq_ops_cuda, row, &err);
    if (!fg) die("cuda row", &err);
    vq_fwd *fc = vq_fwd_create(m, 1, P + N, &err);
    vq_kv *kv = vq_kv_create_str("f16", &dims, 1, &err);
    if (!fc || !kv) die("cpu", &err);
    char dev[256] = "?";
    vq_cuda_device_name(dev, sizeof dev, &err);
    printf("model %s%s%s: %s, %d layers, dim %d, ff %d, heads %d/%d x %d, vocab %d; weights on the device %.1f MiB "
           "(upload %.2f s); device %s; CPU threads %d\n", path, at ? "@" : "", at ? at : "", c->arch, c->n_layers, c->dim,
           c->hidden_dim, c->n_heads, c->n_kv_heads, c->head_dim, V, vq_cuda_row_bytes(row) / 1048576.0, t_up, dev,
           omp_get_max_threads());
    int *tok = malloc((size_t)(P + N) * sizeof(int));
    vq_rng rng;
    vq_rng_seed(&rng, 32035);
    for (int i = 0; i < P + N; i++) tok[i] = (int)(vq_rng_u64(&rng) % (uint64_t)V);
    float *lg = malloc((size_t)V * sizeof(float));
    double tg[15], tc[15];
    for (int r = 0; r < R; r++)
        for (int arm = 0; arm < 1 + cpu; arm++) {
            if (arm == 0) vq_cuda_kvs_clear(kvs);
            else vq_kv_clear(kv);
            double ts = 0;
            for (int i = 0; i < P + N; i++) {
                if (i == P) ts = vq_now_s();
                vq_status s = arm == 0 ? vq_forward_store(m, fg, kvs, &tok[i], 1, i, lg, 1, &err)
                                       : vq_forward(m, fc, kv, &tok[i], 1, i, lg, 1, &err);
                if (s) die(arm == 0 ? "cuda forward" : "cpu forward", &err);
            }
            const double tps = N / (vq_now_s() - ts);
            if (arm == 0) tg[r] = tps; else tc[r] = tps;
        }
    qsort(tg, (size_t)R, sizeof(double), cmpd);
    printf("cuda: %.1f tok/s median [%.1f, %.1f] over %d reps of %d tokens after %d\n", tg[R / 2], tg[0], tg[R - 1], R, N, P);
    /* the weights on the device, all read once per token when the output matrix is the tied
     * embedding (an untied embedding table is read one row a token: then this over-counts) */
    const double wb = (double)vq_cuda_row_bytes(row);
    printf("cuda: weights %.1f MB per token%s -> %.1f GB/s at the median\n", wb / 1e6,
           m->output.data == m->tok_embd.data ? "" : " (untied embedding: over-counted)", wb * tg[R / 2] / 1e9);
    if (cpu) {
        qsort(tc, (size_t)R, sizeof(double), cmpd);
        printf("cpu:  %.1f tok/s median [%.1f, %.1f]; cuda / cpu %.2fx\n", tc[R / 2], tc[0], tc[R - 1], tg[R / 2] / tc[R / 2]);
    }
    printf("csv,%s,%s,%d,%d,%.2f,%.2f\n", path, at ? at : "file", P, N, tg[R / 2], cpu ? tc[R / 2] : 0.0);
    free(tok); free(lg);
    vq_kv_destroy(kv); vq_fwd_destroy(fc); vq_fwd_destroy(fg); vq_cuda_kvs_destroy(kvs); vq_cuda_row_destroy(row);
    vq_model_free(m);
    return 0;
}
