/* ops_cpu.c: the CPU row of the forward-pass contract (backend/ops.h): the kernels of kernels.h
 * on host memory, the store a vq_kv. Each op is the call forward.c made before the contract
 * existed, so the CPU pass computes the same bits through the table. */
#include <math.h>
#include <string.h>
#include "backend/ops.h"
#include "kernels/kernels.h"
#include "kv/kv.h"
#include "model/model.h"

static void *cpu_alloc(void *ctx, size_t bytes) { (void)ctx; return vq_aligned_alloc(bytes); }
static void cpu_free(void *ctx, void *buf) { (void)ctx; vq_aligned_free(buf); }
static vq_status cpu_download(void *ctx, void *dst, const void *buf, size_t bytes, vq_err *err) {
    (void)ctx; (void)err;
    if (dst != buf) memcpy(dst, buf, bytes);
    return VQ_OK;
}
static int cpu_supported(void *ctx, uint32_t type, int cols) { (void)ctx; return vq_matmul_supported(type, cols); }

static vq_status cpu_matmul(void *ctx, const vq_ops_mm *jobs, int njobs, const float *X, int n, int cols,
                            vq_err *err) {
    (void)ctx; (void)err;
    if (njobs == 1) {
        vq_matmul(jobs[0].Y, jobs[0].W, jobs[0].type, X, n, jobs[0].rows, cols);
        return VQ_OK;
    }
    vq_matmul_job j[4];
    for (int i = 0; i < njobs; i += 4) {   /* forward.c passes at most 3 */
        const int nj = VQ_MIN(4, njobs - i);
        for (int k = 0; k < nj; k++) j[k] = (vq_matmul_job){ jobs[i + k].Y, jobs[i + k].W, jobs[i + k].type, jobs[i + k].rows };
        vq_matmul_many(j, nj, X, n, cols);
    }
    return VQ_OK;
}

static vq_status cpu_embed(void *ctx, float *out, const void *W, uint32_t type, int dim, int row, float scale,
                           vq_err *err) {
    (void)ctx; (void)err;
    vq_get_row(W, type, dim, row, out);
    if (scale != 1.0f)
        for (int i = 0; i < dim; i++) out[i] *= scale;
    return VQ_OK;
}

static vq_status cpu_rmsnorm(void *ctx, float *out, const float *x, const float *w, int n, int dim, float eps,
                             vq_err *err) {
    (void)ctx; (void)err;
    for (size_t t = 0; t < (size_t)n; t++) vq_rmsnorm(out + t * dim, x + t * dim, w, dim, eps);
    return VQ_OK;
}

static vq_status cpu_rope(void *ctx, float *x, int n, const int *pos, int n_heads, int head_dim, int rot_dim,
                          const float *inv_freq, float mscale, int neox, vq_err *err) {
    (void)ctx; (void)err;
    for (int t = 0; t < n; t++)
        vq_rope(x + (size_t)t * n_heads * head_dim, n_heads, head_dim, rot_dim, pos[t], inv_freq, mscale, neox);
    return VQ_OK;
}

static vq_status cpu_add_bias(void *ctx, float *y, const float *b, int n, int dim, vq_err *err) {
    (void)ctx; (void)err;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < dim; i++) y[(size_t)t * dim + i] += b[i];
    return VQ_OK;
}

static vq_status cpu_add(void *ctx, float *y, const float *x, size_t count, vq_err *err) {
    (void)ctx; (void)err;
    for (size_t i = 0; i < count; i++) y[i] += x[i];
    return VQ_OK;
}

static vq_status cpu_scale(void *ctx, float *x, float a, size_t count, vq_err *err) {
    (void)ctx; (void)err;
    for (size_t i = 0; i < count; i++) x[i] *= a;
    return VQ_OK;
}

static vq_status cpu_glu(void *ctx, float *gate, const float *up, size_t count, int gelu, vq_err *err) {
    (void)ctx; (void)err;
    if (gelu) vq_geglu(gate, up, (int)count);
    else vq_swiglu(gate, up, (int)count);
    return VQ_OK;
}

static vq_status cpu_softcap(void *ctx, float *x, float cap, size_t count, vq_err *err) {
    (void)ctx; (void)err;
    for (size_t i = 0; i < count; i++) x[i] = cap * tanhf(x[i] / cap);
    return VQ_OK;
}

static vq_status cpu_kv_append(void *ctx, void *store, int layer, int pos0, int n, const float *k, const float *v,
                               vq_err *err) {
    (void)ctx;
    return vq_kv_append(store, layer, pos0, n, k, v, err);
}

static vq_status cpu_kv_attend(void *ctx, void *store, int layer, int n, const int *pos, const float *q, float *out,
                               vq_err *err) {
    (void)ctx;
    return vq_kv_attend(store, layer, n, pos, q, out, err);
}

const vq_ops vq_ops_cpu = {
    .name = "cpu", .host = 1, .max_batch = 0,
    .alloc = cpu_alloc, .free = cpu_free, .download = cpu_download,
    .matmul_supported = cpu_supported, .matmul = cpu_matmul, .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm, .rope = cpu_rope, .add_bias = cpu_add_bias, .add = cpu_add,
    .scale = cpu_scale, .glu = cpu_glu, .softcap = cpu_softcap,
    .kv_append = cpu_kv_append, .kv_attend = cpu_kv_attend,
};
