/* adakv.c: heads=ada, AdaKV's per-head budgets (Feng et al., arXiv 2407.11550) on top of any
 * eviction policy. The store normally shares a row across a layer's KV heads (a page holds every
 * head's codes for it), so a row goes for all heads or none. With heads=ada a group keeps each KV
 * head of a cache layer as a local layer of its own (kv.c: vh local layers per cache layer, one
 * head each), so pages, window, sink rows, positions, page skipping, compaction and scores exist
 * per (layer, head) with the code unchanged. The allocator (the top H * B (block, head) pairs of a
 * layer by score, each head kept at least floor * B rows) is the heads=ada row of kv_policy.c's
 * allocator table, its keys (heads=, floor=) are parsed by kv_spec.c and the eviction step that
 * applies it is evict.c's; this file holds the router's per-head append and read-back. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kv/kv_impl.h"

/* ---- the router's per-head paths ---- */
/* Rows of every KV head: checked whole first (nothing is stored when any element is bad or any
 * head is full), then each head's columns appended to its local layer (k + h * d, rows xs apart).
 * A failure after that (out of memory) leaves the earlier heads with the rows, as a failed append
 * of a later layer does; the session truncates back to its position either way. */
vq_status vq_ada_append(vq_kvg *g, int local, int layer, int pos0, int n, const float *k, const float *v,
                        int ring, vq_err *err) {
    for (int h = 0; h < g->vh; h++) {
        const int rows = vq_kvg_rows(g, local + h);
        if ((int64_t)rows + n > g->dims.max_ctx)
            return vq_err_set(err, VQ_ERR_RANGE, "vq_kv_append: layer %d KV head %d holds %d rows, +%d "
                              "exceeds max_ctx %d", layer, h, rows, n, g->dims.max_ctx);
    }
    vq_status rc = vq_kvg_check_rows(g, layer, pos0, n, k, v, err);
    for (int h = 0; !rc && h < g->vh; h++)
        rc = vq_kvg_append(g, local + h, pos0, n, k + (size_t)h * g->d, v + (size_t)h * g->d, ring, err);
    return rc;
}

/* vq_kv_read of a per-head layer: the heads' rows interleaved back into rows of every head, which
 * needs them to hold the same positions in the same order (before any eviction step has told them
 * apart, or with a budget covering every row); else VQ_ERR_STATE pointing at vq_kv_read_head. */
vq_status vq_ada_read(const vq_kvg *g, int local, int layer, float *k, float *v, int32_t *pos, vq_err *err) {
    const int rows = vq_kvg_rows(g, local), d = g->d, vh = g->vh;
    for (int h = 1; h < vh; h++)
        if (vq_kvg_rows(g, local + h) != rows)
            return vq_err_set(err, VQ_ERR_STATE, "vq_kv_read: layer %d: its KV heads hold different rows (KV "
                              "head 0 %d, head %d %d; heads=ada): read each with vq_kv_read_head", layer, rows,
                              h, vq_kvg_rows(g, local + h));
    float *hk = malloc(((size_t)rows * d + 1) * sizeof(float)), *hv = malloc(((size_t)rows * d + 1) * sizeof(float));
    int32_t *hp = malloc(((size_t)rows + 1) * sizeof(int32_t));
    vq_status st = hk && hv && hp ? VQ_OK : vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_read: out of memory");
    for (int h = 0; !st && h < vh; h++) {
        st = vq_kvg_read(g, local + h, hk, hv, h ? hp : pos, err);
        for (int r = 0; !st && h && r < rows; r++)
            if (hp[r] != pos[r])
                st = vq_err_set(err, VQ_ERR_STATE, "vq_kv_read: layer %d: KV head %d holds position %d where "
                                "head 0 holds %d (heads=ada): read each with vq_kv_read_head", layer, h, hp[r],
                                pos[r]);
        for (int r = 0; !st && r < rows; r++) {
            memcpy(k + ((size_t)r * vh + h) * d, hk + (size_t)r * d, (size_t)d * sizeof(float));
            memcpy(v + ((size_t)r * vh + h) * d, hv + (size_t)r * d, (size_t)d * sizeof(float));
        }
    }
    free(hk); free(hv); free(hp);
    return st;
}
