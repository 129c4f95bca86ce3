/* test_bench_fill.c: bench's fast fill (vq_lab_session_fill_repeat, vq_lab_kv_fill_repeat; `bench
 * --fill`). On SmolLM2, for each arm the benchmarks measure, a cache filled to depth D by repeating
 * a real P-token prefill holds exactly the bytes and rows of a real D-token prefill of the same
 * codec; its positions are 0..D-1, each once; decode continues at D; an f16 fill's row p is the
 * source's row p mod P bit for bit; the resident-memory fill reports the same bytes either way; an
 * evicting spec and a depth past n_ctx are refused and leave the session as it was. The tokens are
 * a fixed seeded draw (printed): bytes and positions do not depend on their values. */
#include "lab/eval.h"
#include "session/session_impl.h"
#include "../vq_test.h"

#define D 300    /* not a multiple of a code block (32), a page (256, 64) or P */
#define P 40
#define SEED 0xf111ull

static vq_session *mk(const vq_model *m, const vq_kv_spec *spec, int n_ctx) {
    vq_session_params sp = vq_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_batch = 64;
    sp.kv_seed = 7;
    vq_err err;
    vq_session *s = vq_session_create(m, spec, &sp, &err);
    if (!s) fprintf(stderr, "session: %s\n", err.msg);
    return s;
}

/* the positions a layer holds are exactly 0..n-1 */
static int positions_are(vq_session *s, int layer, int n) {
    vq_kv *kv = vq_session_kv(s);
    const int r = vq_kv_rows(kv, layer);
    const vq_model_info mi = vq_model_get_info(s->m);
    const size_t w = (size_t)mi.n_kv_heads * mi.head_dim;
    float *k = malloc((size_t)r * w * sizeof(float)), *v = malloc((size_t)r * w * sizeof(float));
    int32_t *pos = malloc((size_t)r * sizeof(int32_t));
    char *seen = calloc((size_t)n, 1);
    vq_err err;
    int ok = r == n && k && v && pos && seen && vq_kv_read(kv, layer, k, v, pos, &err) == VQ_OK;
    for (int i = 0; ok && i < r; i++) {
        ok = pos[i] >= 0 && pos[i] < n && !seen[pos[i]];
        if (ok) seen[pos[i]] = 1;
    }
    free(seen); free(pos); free(v); free(k);
    return ok;
}

/* f16: the row at position p of dst equals the row at position p % period of src, bit for bit */
static int rows_repeat(vq_session *dst, vq_session *src, int layer, int period) {
    const vq_model_info mi = vq_model_get_info(dst->m);
    const size_t w = (size_t)mi.n_kv_heads * mi.head_dim;
    const int rd = vq_kv_rows(dst->kv, layer), rs = vq_kv_rows(src->kv, layer);
    float *kd = malloc((size_t)rd * w * 2 * sizeof(float)), *ks = malloc((size_t)rs * w * 2 * sizeof(float));
    int32_t *pd = malloc((size_t)rd * sizeof(int32_t)), *ps = malloc((size_t)rs * sizeof(int32_t));
    vq_err err;
    int ok = kd && ks && pd && ps && rs == period && vq_kv_read(dst->kv, layer, kd, kd + (size_t)rd * w, pd, &err) == VQ_OK &&
             vq_kv_read(src->kv, layer, ks, ks + (size_t)rs * w, ps, &err) == VQ_OK;
    for (int i = 0; ok && i < rd; i++) {
        int j = 0;
        while (j < rs && ps[j] != pd[i] % period) j++;
        ok = j < rs && !memcmp(kd + (size_t)i * w, ks + (size_t)j * w, w * sizeof(float)) &&
             !memcmp(kd + ((size_t)rd + i) * w, ks + ((size_t)rs + j) * w, w * sizeof(float));
    }
    free(ps); free(pd); free(ks); free(kd);
    return ok;
}

int main(void) {
    char mp[512];
    vq_t_model(mp, sizeof mp);
    vq_err err;
    vq_model *m = vq_model_load(mp, NULL, &err);
    if (!m) VQ_SKIP("%s does not load: %s", mp, err.msg);
    const vq_model_info mi = vq_model_get_info(m);
    printf("seed 0x%llx, D %d, P %d, %d layers\n", (unsigned long long)SEED, D, P, mi.n_layers);
    int tok[D + 8];
    vq_rng rng;
    vq_rng_seed(&rng, SEED);
    for (int i = 0; i < D + 8; i++) tok[i] = (int)(vq_rng_u64(&rng) % (uint64_t)(mi.n_vocab - 1)) + 1;
    float *logits = malloc((size_t)mi.n_vocab * sizeof(float));
    CHECK(logits != NULL);

    const char *arms[] = { "f16", "q8_0", "q4_0:rotate=1", "turboquant_mse:bits=4",
                           "turboquant_mse:k=4,v=4,layout=packed;sink=4,window=64,wprec=8,page=64" };
    for (size_t a = 0; a < sizeof arms / sizeof *arms; a++) {
        vq_kv_spec *spec = vq_kv_spec_parse(arms[a], &err);
        CHECKF(spec != NULL, "%s: %s", arms[a], err.msg);
        if (!spec) continue;
        vq_session *real = mk(m, spec, D + 8), *src = mk(m, spec, P), *fill = mk(m, spec, D + 8),
                   *self = mk(m, spec, D + 8);
        CHECK(real && src && fill && self);
        if (!real || !src || !fill || !self) goto next;
        CHECKF(vq_session_decode(real, tok, D, NULL, 0, &err) == VQ_OK, "%s", err.msg);
        CHECKF(vq_session_decode(src, tok, P, NULL, 0, &err) == VQ_OK, "%s", err.msg);
        CHECKF(vq_session_decode(self, tok, P, NULL, 0, &err) == VQ_OK, "%s", err.msg);
        CHECKF(vq_lab_session_fill_repeat(fill, src, D, &err) == VQ_OK, "%s: %s", arms[a], err.msg);
        CHECKF(vq_lab_session_fill_repeat(self, self, D, &err) == VQ_OK, "%s: %s", arms[a], err.msg);
        /* the bytes and rows of a real prefill of D tokens */
        CHECKF(vq_session_kv_bytes(fill) == vq_session_kv_bytes(real) && vq_session_kv_bytes(self) == vq_session_kv_bytes(real),
               "%s: fill %zu, self %zu, real %zu bytes", arms[a], vq_session_kv_bytes(fill), vq_session_kv_bytes(self),
               vq_session_kv_bytes(real));
        CHECK(vq_session_pos(fill) == D && vq_session_pos(self) == D);
        for (int l = 0; l < mi.n_layers; l++)
            CHECKF(vq_session_kv_rows(fill, l) == D && vq_session_kv_rows(self, l) == D, "%s layer %d: %d, %d rows",
                   arms[a], l, vq_session_kv_rows(fill, l), vq_session_kv_rows(self, l));
        CHECKF(positions_are(fill, 0, D) && positions_are(fill, mi.n_layers - 1, D) && positions_are(self, 0, D),
               "%s: positions", arms[a]);
        int tok_ok = 1;
        for (int p = 0; p < D; p++) tok_ok &= vq_session_tokens(fill)[p] == tok[p % P] && vq_session_tokens(self)[p] == tok[p % P];
        CHECK(tok_ok);
        if (!strcmp(arms[a], "f16"))
            CHECKF(rows_repeat(fill, src, 0, P) && rows_repeat(fill, src, mi.n_layers - 1, P), "f16 rows are not src's repeated");
        /* positions continue: one decode step at D, in both */
        CHECKF(vq_session_decode(fill, &tok[D], 1, logits, 0, &err) == VQ_OK, "%s", err.msg);
        CHECKF(vq_session_decode(real, &tok[D], 1, logits, 0, &err) == VQ_OK, "%s", err.msg);
        CHECK(vq_session_pos(fill) == D + 1 && positions_are(fill, 0, D + 1));
        CHECKF(vq_session_kv_bytes(fill) == vq_session_kv_bytes(real), "%s after a decode step: %zu vs %zu", arms[a],
               vq_session_kv_bytes(fill), vq_session_kv_bytes(real));
        /* refusals leave the session as it was */
        CHECK(vq_lab_session_fill_repeat(fill, src, D + 9, &err) == VQ_ERR_RANGE && vq_session_pos(fill) == D + 1);
        CHECK(vq_lab_session_fill_repeat(fill, src, D, &err) == VQ_ERR_RANGE);
    next:
        vq_session_free(self); vq_session_free(fill); vq_session_free(src); vq_session_free(real);
        vq_kv_spec_free(spec);
    }

    /* an evicting spec: refused, nothing appended */
    {
        vq_kv_spec *ev = vq_kv_spec_parse("f16;evict=h2o,budget=128", &err);
        CHECKF(ev != NULL, "%s", err.msg);
        vq_session *src = ev ? mk(m, ev, P) : NULL, *dst = ev ? mk(m, ev, D) : NULL;
        CHECK(src && dst);
        if (src && dst) {
            CHECK(vq_session_decode(src, tok, P, NULL, 0, &err) == VQ_OK);
            CHECK(vq_lab_session_fill_repeat(dst, src, D - 8, &err) == VQ_ERR_ARG);
            printf("evicting spec: %s\n", err.msg);
            CHECK(vq_session_pos(dst) == 0 && vq_session_kv_rows(dst, 0) == 0);
        }
        vq_session_free(dst); vq_session_free(src);
        vq_kv_spec_free(ev);
    }

    /* the resident-memory fill: the same bytes with and without --fill */
    {
        vq_kv_spec *q4 = vq_kv_spec_parse("q4_0:rotate=1", &err);
        int ctxs[2] = { 100, D };
        vq_bench_rss_point real[2], fast[2];
        vq_bench_rss_result rr, rf;
        CHECKF(vq_bench_rss_fill(m, q4, tok, D, ctxs, 2, 64, 0, 7, real, &rr, &err) == VQ_OK, "%s", err.msg);
        CHECKF(vq_bench_rss_fill(m, q4, tok, D, ctxs, 2, 64, P, 7, fast, &rf, &err) == VQ_OK, "%s", err.msg);
        for (int c = 0; c < 2; c++)
            CHECKF(real[c].kv_bytes == fast[c].kv_bytes && real[c].kv_bytes > 0, "ctx %d: %zu vs %zu", ctxs[c],
                   real[c].kv_bytes, fast[c].kv_bytes);
        CHECK(rf.prefill_s > 0 && rr.prefill_s == 0);
        vq_kv_spec_free(q4);
    }
    free(logits);
    vq_model_free(m);
    return vq_t_done();
}
