/* test_fwd_ops.c: the forward pass's backend contract (backend/ops.h) on the CPU, no device
 * needed. A "device-like" row made of the CPU row's ops with host = 0 (its logits go through
 * the row's own buffer and download, as a GPU row's do) must give the CPU row's logits bit for
 * bit, for decode steps and a batched prefill; the pass must refuse what only host rows do (the
 * tap, vq_forward on a row that keeps its own store), a batch over the row's max_batch, and a
 * model matrix the row lacks, naming it. Model: stories260K (../shared; skips without it). */
#include <stdlib.h>
#include <string.h>
#include "../vq_test.h"
#include "backend/ops.h"
#include "kv/kv.h"
#include "model/model.h"

static vq_status copy_down(void *ctx, void *dst, const void *buf, size_t bytes, vq_err *err) {
    (void)ctx; (void)err;
    memcpy(dst, buf, bytes);
    return VQ_OK;
}
static int no_f32(void *ctx, uint32_t type, int cols) { (void)ctx; (void)cols; return type != 0; }
static void tap(void *u, int l, int n, const int *pos, const float *q, const float *k, const float *v) {
    (void)u; (void)l; (void)n; (void)pos; (void)q; (void)k; (void)v;
}

typedef struct { size_t n, bytes; const void *embd; int saw_embd; } tally;
static int count(void *u, const void *data, size_t bytes) {
    tally *t = u;
    t->n++;
    t->bytes += bytes;
    t->saw_embd += data == t->embd;
    return 0;
}

int main(void) {
    char mp[1024], tp[1024];
    vq_t_shared("data/stories260K.bin", mp, sizeof mp);
    vq_t_shared("data/tok512.bin", tp, sizeof tp);
    vq_err err = {0};
    vq_model *m = vq_model_open(mp, tp, &err);
    CHECKF(m != NULL, "%s", err.msg);
    if (!m) return vq_t_done();
    const int V = m->cfg.vocab_size, P = 24;
    vq_ops dev = vq_ops_cpu;
    dev.name = "hostdev";
    dev.host = 0;
    dev.download = copy_down;

    vq_kv_dims dims = vq_model_kv_dims(m, P);
    vq_kv *kc = vq_kv_create_str("f16", &dims, 1, &err), *kd = vq_kv_create_str("f16", &dims, 1, &err);
    vq_fwd *fc = vq_fwd_create(m, 8, P, &err), *fd = vq_fwd_create_ops(m, 8, P, &dev, NULL, &err);
    CHECKF(kc && kd && fc && fd, "%s", err.msg);
    if (!(kc && kd && fc && fd)) return vq_t_done();
    float *lc = malloc((size_t)8 * V * sizeof(float)), *ld = malloc((size_t)8 * V * sizeof(float));
    int toks[P];
    for (int i = 0; i < P; i++) toks[i] = (7 * i + 3) % V;
    /* a batched prefill of 8, then decode steps */
    CHECK(vq_forward(m, fc, kc, toks, 8, 0, lc, 8, &err) == VQ_OK);
    CHECK(vq_forward_store(m, fd, kd, toks, 8, 0, ld, 8, &err) == VQ_OK);
    CHECKF(!memcmp(lc, ld, (size_t)8 * V * sizeof(float)), "prefill logits differ between the rows");
    int same = 1;
    for (int p = 8; p < P; p++) {
        CHECK(vq_forward(m, fc, kc, &toks[p], 1, p, lc, 1, &err) == VQ_OK);
        CHECK(vq_forward_store(m, fd, kd, &toks[p], 1, p, ld, 1, &err) == VQ_OK);
        same &= !memcmp(lc, ld, (size_t)V * sizeof(float));
    }
    CHECKF(same, "decode logits differ between the rows");

    /* what a row that is not host memory refuses */
    vq_err e = {0};
    CHECK(vq_forward(m, fd, kd, toks, 1, P - 1, ld, 1, &e) == VQ_ERR_ARG && strstr(e.msg, "vq_forward_store"));
    vq_fwd_set_tap(fd, tap, NULL);
    CHECK(vq_forward_store(m, fd, kd, toks, 1, P - 1, ld, 1, &e) == VQ_ERR_ARG && strstr(e.msg, "tap"));
    vq_fwd_set_tap(fd, NULL, NULL);
    vq_ops one = dev;
    one.max_batch = 1;
    CHECK(vq_fwd_create_ops(m, 2, P, &one, NULL, &e) == NULL && e.code == VQ_ERR_ARG && strstr(e.msg, "at most 1"));
    vq_ops lacks = dev;
    lacks.matmul_supported = no_f32;   /* stories260K is float32: the first matrix asked is named */
    CHECK(vq_fwd_create_ops(m, 1, P, &lacks, NULL, &e) == NULL && e.code == VQ_ERR_ARG &&
          strstr(e.msg, "backend hostdev: no matmul for output.weight"));
    printf("refusal: %s\n", e.msg);

    /* every buffer the pass reads is listed once by vq_model_tensors */
    tally t = {0, 0, m->tok_embd.data, 0};
    CHECK(vq_model_tensors(m, count, &t) == 0);
    const int per_layer = 9 + (m->layers[0].rope_inv_freq != NULL);   /* 2 norms, 7 matrices, rope */
    CHECKF(t.n == (size_t)(1 + (m->output.data != m->tok_embd.data) + 1 + m->cfg.n_layers * per_layer),
           "%zu buffers listed", t.n);
    CHECK(t.saw_embd == 1);
    printf("vq_model_tensors: %zu buffers, %zu bytes\n", t.n, t.bytes);
    free(lc); free(ld);
    vq_fwd_destroy(fc); vq_fwd_destroy(fd);
    vq_kv_destroy(kc); vq_kv_destroy(kd);
    vq_model_free(m);
    return vq_t_done();
}
