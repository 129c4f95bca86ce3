/* test_kv_ring.c: a sliding-window layer's ring (Gemma 3's local layers keep only their window).
 * Two caches of one spec and seed take the same rows in chunks of 1..97; in one (ring on, the
 * default) a layer with span W frees its pages once no later query can see them, in the other
 * (vq_kv_set_ring(kv, 0)) every row stays and only the mask hides the old ones. For every codec:
 *   - each chunk's queries (at the chunk's own positions, as a forward pass asks) get from the ring
 *     cache float64 attention over the full cache's decoded rows in their window, to 1e-5, in the
 *     span layer and in the unbounded one;
 *   - the ring layer holds at most S + W + P + max_append - 2 rows, the tally stays equal to the
 *     layout, and within vq_kv_bytes_at's bound; the ring really freed rows and bytes;
 *   - truncation back to the last chunk's start matches the full cache's; back past what the ring
 *     freed it returns 0 and empties the cache (the caller must run the tokens again);
 *   - a session-mode state stream of the ring cache reads back (rows = positions) and attends alike;
 *     read into a cache whose layer is unbounded (it lacks rows that layer sees) it is refused.
 * Seed: VQ_TEST_SEED (default 0x21a9), printed. */
#include "../vq_test.h"
#include "kv/kv.h"
#include "kv_ref.h"

typedef struct { uint8_t *p; size_t n, cap; } mem;
static int mem_put(void *user, const void *b, size_t n) {
    mem *m = user;
    if (m->n + n > m->cap) {
        m->cap = (m->n + n) * 2;
        m->p = realloc(m->p, m->cap);
    }
    memcpy(m->p + m->n, b, n);
    m->n += n;
    return 0;
}

/* attention of n_q queries at positions qp in every layer of the ring cache a, against float64
 * attention over the rows the full cache b holds in each query's window: 1e-5, as test_kv_span;
 * b itself too. (Not bit for bit: a ring that freed a partly filled page starts its pages at other
 * positions, and the online softmax then rescales at other rows.) */
static double worst_err(vq_kv *a, vq_kv *b, const int *span, int NL, int NH, int H, int d, int n_q,
                        const int *qp, const float *q, float *oa, double *ref) {
    vq_err e;
    double worst = 0;
    for (int l = 0; l < NL; l++) {
        const int rows = vq_kv_rows(b, l);
        float *k = malloc(sizeof(float) * ((size_t)rows * H * d + 1)), *v = malloc(sizeof(float) * ((size_t)rows * H * d + 1));
        int32_t *pos = malloc(sizeof(int32_t) * ((size_t)rows + 1));
        int ok = vq_kv_read(b, l, k, v, pos, &e) == VQ_OK;
        windowed_ref(rows, k, v, pos, H, NH, d, n_q, qp, q, span[l], ref);
        for (int c = 0; c < 2 && ok; c++) {
            ok = vq_kv_attend(c ? b : a, l, n_q, qp, q, oa, &e) == VQ_OK;
            worst = fmax(worst, rel_err(n_q, NH, d, oa, ref));
        }
        if (!ok) worst = INFINITY;
        free(k); free(v); free(pos);
    }
    return worst;
}

static void run(vq_rng *rng, const char *spec, int NH, int H, int d, int W, int n) {
    const int A = 97, w = H * d, qw = NH * d, NL = 2;
    int span[2] = { W, 0 };
    vq_kv_dims dims = {.n_layers = NL, .n_heads = NH, .n_kv_heads = H, .head_dim = d, .max_ctx = n,
                       .span = span, .max_append = A};
    vq_err err;
    const uint64_t seed = vq_rng_u64(rng);
    vq_kv *kr = vq_kv_create_str(spec, &dims, seed, &err), *kf = vq_kv_create_str(spec, &dims, seed, &err);
    CHECKF(kr && kf, "%s: %s", spec, err.msg);
    if (!kr || !kf) return;
    vq_kv_set_ring(kf, 0);
    const int P = vq_kv_page_rows(kr);
    float *k = malloc(sizeof(float) * (size_t)A * w), *v = malloc(sizeof(float) * (size_t)A * w);
    float *q = malloc(sizeof(float) * (size_t)A * qw), *oa = malloc(sizeof(float) * (size_t)A * qw);
    double *ref = malloc(sizeof(double) * (size_t)A * qw), worst = 0;
    int qp[97], at = 0, last0 = 0, ok_rows = 1, ok_bytes = 1, max_held = 0;
    while (at < n) {
        int c = 1 + (int)(vq_rng_u64(rng) % A);
        c = c < n - at ? c : n - at;
        fill_uniform(rng, k, (size_t)c * w, 1);
        fill_uniform(rng, v, (size_t)c * w, 1);
        for (int l = 0; l < NL; l++) {
            CHECK(vq_kv_append(kr, l, at, c, k, v, &err) == VQ_OK);
            CHECK(vq_kv_append(kf, l, at, c, k, v, &err) == VQ_OK);
        }
        const int nq = c < 8 ? c : 8;   /* the chunk's first, last and some between */
        for (int i = 0; i < nq; i++) qp[i] = at + (nq > 1 ? (int)((long)i * (c - 1) / (nq - 1)) : 0);
        fill_uniform(rng, q, (size_t)nq * qw, 2);
        worst = fmax(worst, worst_err(kr, kf, span, NL, NH, H, d, nq, qp, q, oa, ref));
        last0 = at;
        at += c;
        const int held = vq_kv_rows(kr, 0);
        max_held = held > max_held ? held : max_held;
        ok_rows &= held <= 4 + W + P + A - 2 && vq_kv_rows(kr, 1) == at && vq_kv_rows(kf, 0) == at;
        ok_bytes &= vq_kv_bytes(kr) == vq_kv_bytes_tally(kr) && vq_kv_bytes_tally(kr) <= vq_kv_bytes_at(kr, at);
    }
    CHECKF(worst < 1e-5, "'%s' NH%d H%d d%d span %d: rel err %.3g against float64 over the window", spec, NH,
           H, d, W, worst);
    CHECKF(ok_rows, "'%s' span %d: the ring held %d rows (bound %d) or a layer lost rows", spec, W,
           max_held, 4 + W + P + A - 2);
    CHECKF(ok_bytes, "'%s' span %d: tally, layout and bytes_at disagree", spec, W);
    CHECKF(vq_kv_ring_dropped(kr) > 0 && vq_kv_ring_dropped(kf) == 0 && vq_kv_rows(kr, 0) < n,
           "'%s' span %d: the ring freed %ld rows (full cache %ld), holds %d of %d", spec, W,
           vq_kv_ring_dropped(kr), vq_kv_ring_dropped(kf), vq_kv_rows(kr, 0), n);
    CHECKF(vq_kv_bytes_tally(kr) < vq_kv_bytes_tally(kf), "'%s': ring %zu bytes, full %zu", spec,
           vq_kv_bytes_tally(kr), vq_kv_bytes_tally(kf));

    /* a session-mode state stream of the ring cache: reads back and attends alike */
    mem m = {0};
    CHECK(vq_kv_state_write(kr, mem_put, &m, &err) == VQ_OK);
    vq_kv *kc = vq_kv_create_str(spec, &dims, seed, &err);
    CHECK(kc && vq_kv_state_read(kc, m.p, m.n, n, &err) == VQ_OK);
    for (int i = 0; i < 4; i++) qp[i] = n - 4 + i;
    fill_uniform(rng, q, 4 * (size_t)qw, 2);
    CHECKF(kc && worst_err(kc, kf, span, NL, NH, H, d, 4, qp, q, oa, ref) < 1e-5, "'%s': the ring's state "
           "read back attends differently", spec);
    /* the same stream into a cache whose layer 0 is unbounded: it lacks rows that layer's next
     * query sees, so it is refused */
    int span0[2] = { 0, 0 };
    vq_kv_dims d0 = dims;
    d0.span = span0;
    vq_kv *kd = vq_kv_create_str(spec, &d0, seed, &err);
    vq_status st = vq_kv_state_read(kd, m.p, m.n, n, &err);
    CHECKF(st == VQ_ERR_FORMAT && strstr(err.msg, "layer 0"), "'%s': a stream lacking rows an unbounded "
           "layer sees was read (%d: %s)", spec, st, err.msg);
    vq_kv_destroy(kd);
    vq_kv_destroy(kc);
    free(m.p);

    /* truncation: to the last chunk's start, as the full cache; past the ring's freed rows, to 0 */
    int tr = vq_kv_truncate(kr, last0), tf = vq_kv_truncate(kf, last0);
    CHECKF(tr == tf, "'%s': truncate to %d: ring %d, full cache %d", spec, last0, tr, tf);
    qp[0] = tr;
    CHECKF(worst_err(kr, kf, span, NL, NH, H, d, 1, qp, q, oa, ref) < 1e-5, "'%s': after truncation to %d "
           "attention differs", spec, tr);
    const int back = 2 * W;
    CHECKF(vq_kv_truncate(kr, back) == 0 && vq_kv_rows(kr, 0) == 0 && vq_kv_rows(kr, 1) == 0,
           "'%s': truncate to %d past the ring kept rows (%d, %d)", spec, back, vq_kv_rows(kr, 0),
           vq_kv_rows(kr, 1));
    CHECK(vq_kv_truncate(kf, back) > 0);   /* the full cache can */
    vq_kv_destroy(kr);
    vq_kv_destroy(kf);
    free(k); free(v); free(q); free(oa); free(ref);
}

int main(void) {
    vq_rng rng;
    vq_rng_seed(&rng, vq_t_seed(0x21a9));
    const char *specs[] = { "f32", "f16", "q8_0", "q4_0:rotate=1;window=8", "turboquant_mse:k=4,v=4",
                            "kivi:residual=16", "f16;page=64", "turboquant_mse:k=3,v=3;sink=4",
                            "q4_0:rotate=1,layout=rows;page=32" };
    for (size_t i = 0; i < VQ_ARRAY_LEN(specs); i++) {
        run(&rng, specs[i], 4, 1, 256, 512, 1800);   /* Gemma 3 270M: 4 query heads, 1 KV head, 256 wide */
        run(&rng, specs[i], 9, 3, 64, 37, 900);
    }
    return vq_t_done();
}
