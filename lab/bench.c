/* bench.c: prefill and decode throughput at given context fills, for several KV arms, with the
 * arms interleaved per repeat and the input text rotated per repeat (BENCHMARKING.md); the
 * memory-bandwidth sweep that gives the physical limit; the one-arm resident-memory fill. Both
 * fills have a fast mode (fill > 0) whose cache repeats the rows of a real fill-token prefill. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lab/eval.h"

/* VmHWM is reset by writing "5" to clear_refs (Linux >= 4.0); returns 0 when that is refused. */
static int peak_rss_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

/* CPU seconds of the whole process (every thread): on a loaded machine CPU time per token moves
 * less than wall time (a thread waiting for a core is not billed; passive OpenMP waits do not spin). */
static double cpu_s(void) {
    struct timespec t;
    return clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) ? 0 : (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double load1(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) { if (fscanf(f, "%lf", &l) != 1) l = -1; fclose(f); }
    return l;
}

/* Fast fill's source: a session of spec that prefills text[0..fill) for real; *next gets its
 * greedy next token (the first decode input of every sample of the arm). */
static vq_session *fill_source(const vq_model *m, const vq_bench_params *p, int a, float *logits, int *next,
                               vq_err *err) {
    vq_session_params sp = vq_session_default_params();
    sp.n_ctx = VQ_MAX(2, p->fill);
    sp.n_batch = VQ_MAX(1, p->batch);
    sp.kv_seed = p->kv_seed;
    sp.allow_ctx_over_train = 1;
    vq_session *src = vq_session_create(m, p->specs[a], &sp, err);
    if (src && vq_session_decode(src, p->text, p->fill, logits, 0, err)) { vq_session_free(src); return NULL; }
    if (src) *next = argmax(logits, vq_model_n_vocab(m));
    return src;
}

vq_status vq_bench_run(const vq_model *m, const vq_bench_params *p, vq_bench_sample *out,
                       vq_progress_cb cb, void *user, vq_err *err) {
    int max_ctx = 0;
    for (int c = 0; c < p->n_ctxs; c++) max_ctx = VQ_MAX(max_ctx, p->ctxs[c]);
    if (p->fill < 0) return vq_err_set(err, VQ_ERR_ARG, "bench: fill %d must be >= 0", p->fill);
    if (p->fill > 0 && p->n_text < p->fill)
        return vq_err_set(err, VQ_ERR_RANGE, "bench: %ld text tokens, fill needs %d", p->n_text, p->fill);
    if (!p->fill && p->n_text < max_ctx + p->n_gen)
        return vq_err_set(err, VQ_ERR_RANGE, "bench: %ld text tokens, need %d", p->n_text, max_ctx + p->n_gen);
    const int V = vq_model_n_vocab(m);
    float *logits = malloc((size_t)V * sizeof(float));
    vq_session **src = calloc((size_t)p->n_specs, sizeof *src);   /* fast fill: one per arm, made once */
    int *src_next = calloc((size_t)p->n_specs, sizeof *src_next);
    if (!logits || !src || !src_next) { free(logits); free(src); free(src_next); return vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); }
    vq_status s = VQ_OK;
    long k = 0, total = (long)p->reps * p->n_ctxs * p->n_specs;
    for (int r = 0; r < p->reps && !s; r++)
        for (int c = 0; c < p->n_ctxs && !s; c++)
            for (int a = 0; a < p->n_specs && !s; a++, k++) {
                int ctx = p->ctxs[c];
                if (p->fill && !src[a] && !(src[a] = fill_source(m, p, a, logits, &src_next[a], err))) { s = err->code; break; }
                long span = p->n_text - ctx - p->n_gen;
                long off = span > 0 ? ((long)r * 7919 + (long)c * 104729 + a * 31) % span : 0;
                const int *tok = p->text + off;
                vq_bench_sample *o = &out[k];
                memset(o, 0, sizeof *o);
                o->load1 = load1();
                int hwm = peak_rss_reset();
                long rss0 = (long)vq_rss_now_bytes();
                /* a session per sample: the product's decode path, eviction schedule included (a
                 * step when the prompt ends, then every N decode steps, inside the timed regions) */
                vq_session_params sp = vq_session_default_params();
                sp.n_ctx = ctx + p->n_gen;
                sp.n_batch = VQ_MAX(1, p->batch);
                sp.kv_seed = p->kv_seed;
                sp.allow_ctx_over_train = 1;
                vq_session *ss = vq_session_create(m, p->specs[a], &sp, err);
                if (!ss) { s = err->code; break; }
                int next = 0;
                double t0 = vq_clock_s();
                if (p->fill) {   /* the cache repeats the source's rows; nothing to time but decode */
                    s = vq_lab_session_fill_repeat(ss, src[a], ctx, err);
                    next = src_next[a];
                } else {
                    s = vq_session_decode(ss, tok, ctx, logits, 0, err);
                    next = argmax(logits, V);
                }
                double t1 = vq_clock_s(), c1 = cpu_s();
                for (int g = 0; g < p->n_gen && !s; g++) {
                    s = vq_session_decode(ss, &next, 1, logits, 0, err);
                    next = argmax(logits, V);
                }
                double t2 = vq_clock_s(), c2 = cpu_s();
                o->decode_cpu_s = c2 - c1;
                o->ctx_index = c; o->spec_index = a; o->rep = r;
                if (p->fill) o->fill_s = t1 - t0;
                else {
                    o->prefill_s = t1 - t0;
                    o->prefill_tps = ctx / (t1 - t0);
                }
                o->decode_s = t2 - t1;
                o->decode_tps = p->n_gen / (t2 - t1);
                o->kv_bytes = vq_session_kv_bytes(ss);
                o->rss_delta = (long)vq_rss_now_bytes() - rss0;
                o->peak_rss = hwm ? vq_rss_peak_bytes() : 0;
                vq_session_free(ss);
                if (cb) cb(k + 1, total, user);
            }
    for (int a = 0; a < p->n_specs; a++) vq_session_free(src[a]);
    free(src);
    free(src_next);
    free(logits);
    return s;
}

int vq_bench_read_bw(size_t bytes, int reps, double *gbps) {
    size_t n = VQ_MAX(bytes / sizeof(uint64_t), (size_t)64) & ~(size_t)7;
    uint64_t *buf = vq_aligned_alloc(n * sizeof(uint64_t));
    if (!buf) return -1;
    for (size_t i = 0; i < n; i++) buf[i] = i * 0x9e3779b97f4a7c15ull;   /* real pages, not the zero page */
    volatile uint64_t sink = 0;
    for (int r = -1; r < reps; r++) {     /* pass -1 warms the threads and the TLB, untimed */
        double t0 = vq_now_s();
        uint64_t acc = 0;
#pragma omp parallel for reduction(^ : acc) schedule(static)
        for (size_t i = 0; i < n; i += 8) {
            const uint64_t *x = buf + i;
            acc ^= (x[0] + x[1]) ^ (x[2] + x[3]) ^ (x[4] + x[5]) ^ (x[6] + x[7]);
        }
        double t1 = vq_now_s();
        sink ^= acc;
        if (r >= 0) gbps[r] = (double)(n * sizeof(uint64_t)) / VQ_MAX(t1 - t0, 1e-9) / 1e9;
    }
    (void)sink;
    vq_aligned_free(buf);
    return 0;
}

vq_status vq_bench_rss_fill(const vq_model *m, const vq_kv_spec *spec, const int *tok, long n_tok,
                            const int *ctxs, int n_ctxs, int batch, int fill, uint64_t seed,
                            vq_bench_rss_point *out, vq_bench_rss_result *res, vq_err *err) {
    memset(res, 0, sizeof *res);
    if (fill < 0) return vq_err_set(err, VQ_ERR_ARG, "bench rss: fill %d must be >= 0", fill);
    if (n_ctxs < 1) return vq_err_set(err, VQ_ERR_ARG, "bench rss: no ctx given");
    for (int c = 0; c < n_ctxs; c++)
        if (ctxs[c] < 1 || (c && ctxs[c] <= ctxs[c - 1]))
            return vq_err_set(err, VQ_ERR_ARG, "bench rss: ctx list must be ascending and positive (ctx[%d] = %d)", c, ctxs[c]);
    int max_ctx = ctxs[n_ctxs - 1];
    if (n_tok < (fill ? fill : max_ctx))
        return vq_err_set(err, VQ_ERR_RANGE, "bench rss: %ld text tokens, need %d", n_tok, fill ? fill : max_ctx);
    batch = VQ_MAX(1, batch);
    vq_fwd *f = vq_lab_fwd_create(m, batch, max_ctx, err);
    float *logits = malloc((size_t)vq_model_n_vocab(m) * sizeof(float));
    if (!f || !logits) { vq_lab_fwd_free(f); free(logits); return err->code ? err->code : vq_err_set(err, VQ_ERR_NOMEM, "out of memory"); }
    vq_status s = VQ_OK;
    /* Warm-up: one forward with logits through a tiny cache of the same spec, so every weight
     * page (tied embeddings included) and the codec's code are resident before the baseline. */
    {
        vq_kv *w = vq_lab_kv_for_model(m, spec, 16, seed, err);
        if (!w) s = err->code;
        else s = vq_lab_forward(m, f, w, tok, VQ_MIN(8, batch), 0, logits, 0, err);
        vq_lab_kv_free(w);
    }
    /* Fast fill: the source cache prefills its fill tokens for real before the baseline, so its
     * few rows stay in rss_base and every delta is the measured cache's alone. */
    vq_kv *src = NULL;
    if (!s && fill) {
        src = vq_lab_kv_for_model(m, spec, fill, seed, err);
        if (!src) s = err->code;
        double tp = vq_now_s();
        for (int i = 0; !s && i < fill; i += batch) {
            int nb = VQ_MIN(batch, fill - i);
            s = vq_lab_forward(m, f, src, tok + i, nb, i, NULL, 1, err);
        }
        res->prefill_s = vq_now_s() - tp;
    }
    vq_kv *kv = NULL;
    if (!s) {
        malloc_trim(0);   /* freed warm-up memory goes back to the OS: the cache must fault in its own */
        res->rss_base = vq_rss_bytes();
        kv = vq_lab_kv_for_model(m, spec, max_ctx, seed, err);
        if (!kv) s = err->code;
        else res->kv_bytes_empty = vq_lab_kv_bytes(kv);
    }
    double t0 = vq_now_s();
    for (int i = 0, c = 0; !s && c < n_ctxs;) {
        if (src) {   /* rows i..ctx-1 repeat the source's (an evicting spec is refused there) */
            s = vq_lab_kv_fill_repeat(m, kv, i, ctxs[c], src, batch, err);
            i = ctxs[c];
        } else {
            int nb = VQ_MIN(batch, ctxs[c] - i);
            /* an evicting spec: a step after each chunk (a prompt) */
            s = vq_lab_forward(m, f, kv, tok + i, nb, i, NULL, 1, err);
            i += nb;
        }
        if (!s && i == ctxs[c]) {
            out[c] = (vq_bench_rss_point){ ctxs[c], vq_lab_kv_bytes(kv), vq_lab_kv_bits(kv), vq_rss_bytes(), 0 };
            malloc_trim(0);
            out[c].rss_trim = vq_rss_bytes();
            c++;
        }
    }
    res->fill_s = vq_now_s() - t0;
    if (!s) { malloc_trim(0); res->rss_end_trim = vq_rss_bytes(); }
    vq_lab_kv_free(kv);
    vq_lab_kv_free(src);
    free(logits);
    vq_lab_fwd_free(f);
    return s;
}
