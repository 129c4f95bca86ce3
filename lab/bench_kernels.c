/* bench_kernels.c: decode-attention (one step, GQA group of 3) and encode speed per KV codec,
 * measured through the real store (the door's vq_lab_kv_append / _attend), arms interleaved per repeat,
 * inputs rotated over a pool of caches whose bytes exceed the LLC, with a memcpy ceiling. */
#include <math.h>
#include <stdio.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lab/vqlab.h"
#include "session/lab_tap.h"
#include "lab/bench_kernels.h"

#define BK_NQ 16          /* distinct query sets, rotated with the caches */
#define BK_MAX_POOL 65536

static const char *const bk_extras[] = { "turboquant_mse:k=4,v=4", "q4_0:rotate=1" };

/* CPU time of the calling thread: on a loaded machine, time spent descheduled is not counted
 * (memory stalls are). The primary clock when single-threaded; wall time is kept beside it. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double load1(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    double l = -1;
    if (f) { if (fscanf(f, "%lf", &l) != 1) l = -1; fclose(f); }
    return l;
}

static int has_spec(char **s, int n, const char *x) {
    for (int i = 0; i < n; i++) if (!strcmp(s[i], x)) return 1;
    return 0;
}

/* f16 first (the baseline), then the given specs, or every table row plus the extras. */
static vq_status make_specs(const vq_bk_params *p, vq_bk_result *r, vq_err *err) {
    int n_codecs = 0;
    while (vq_codec_name(n_codecs)) n_codecs++;
    int cap = 2 + (p->n_specs ? p->n_specs : n_codecs + (int)VQ_ARRAY_LEN(bk_extras));
    char **s = calloc((size_t)cap, sizeof *s);
    if (!s) return vq_err_set(err, VQ_ERR_NOMEM, "bench-kernels: out of memory");
    int n = 0;
    if (p->parsed) {   /* the caller's list as it is (it put the baseline first and dropped repeats) */
        for (int i = 0; i < p->n_specs; i++) s[n++] = strdup(p->specs[i]);
        for (int i = 0; i < n; i++) if (!s[i]) return vq_err_set(err, VQ_ERR_NOMEM, "bench-kernels: out of memory");
        r->specs = (const char **)s;
        r->n_specs = n;
        return VQ_OK;
    }
    s[n++] = strdup("f16");
    if (p->n_specs) {
        for (int i = 0; i < p->n_specs; i++) if (!has_spec(s, n, p->specs[i])) s[n++] = strdup(p->specs[i]);
    } else {
        for (int i = 0; i < n_codecs; i++)   /* rows needing calib=FILE only when asked for */
            if (!vq_lab_codec_needs_calib(i) && !has_spec(s, n, vq_codec_name(i))) s[n++] = strdup(vq_codec_name(i));
        for (size_t i = 0; i < VQ_ARRAY_LEN(bk_extras); i++)
            if (!has_spec(s, n, bk_extras[i])) s[n++] = strdup(bk_extras[i]);
    }
    for (int i = 0; i < n; i++) if (!s[i]) return vq_err_set(err, VQ_ERR_NOMEM, "bench-kernels: out of memory");
    r->specs = (const char **)s;
    r->n_specs = n;
    return VQ_OK;
}

/* memcpy and read-only sweeps over buffers of copy_bytes (larger than the LLC). */
static void measure_copy(vq_bk_result *r, int from, int reps, void *a, void *b) {
    size_t n = r->copy_bytes;
    for (int i = 0; i < reps; i++) {
        double w0 = vq_now_s(), t0 = cpu_s();
        memcpy(b, a, n);
        double t1 = cpu_s(), w1 = vq_now_s();
        const uint64_t *u = a;
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t j = 0; j + 4 <= n / 8; j += 4) { s0 += u[j]; s1 += u[j + 1]; s2 += u[j + 2]; s3 += u[j + 3]; }
        double t2 = cpu_s();
        volatile uint64_t sink = s0 ^ s1 ^ s2 ^ s3;
        (void)sink;
        r->copy_bps[from + i] = (double)n / (t1 - t0);
        r->copy_wall_bps[from + i] = (double)n / (w1 - w0);
        r->read_bps[from + i] = (double)n / (t2 - t1);
        memset(a, i + 1, 4096);   /* the next copy is not of identical bytes */
    }
}

typedef struct bk_pool {
    vq_kv **kv;
    int n;
} bk_pool;

/* Score (prep_query + score over the K codes) and accumulate (over the V codes + finish) apart,
 * through the codec table on pools of encoded blocks, 256-row chunks as the store's pages. */
static vq_status split_config(const vq_bk_params *p, vq_bk_arm *arms, bk_pool *pools, int na, int N,
                              int d, const float *K, const float *V, const float *Q, vq_err *err) {
    uint8_t **kb = calloc((size_t)na, sizeof *kb), **vb = calloc((size_t)na, sizeof *vb);
    int *np = calloc((size_t)na, sizeof *np);
    vq_status s = VQ_OK;
    if (!kb || !vb || !np) { s = vq_err_set(err, VQ_ERR_NOMEM, "bench-kernels: out of memory"); goto out; }
    for (int a = 0; a < na && !s; a++) {
        if (!arms[a].ok) continue;
        vq_lab_codec hk, hv;
        vq_lab_kv_codec(pools[a].kv[0], 0, 0, &hk);
        vq_lab_kv_codec(pools[a].kv[0], 0, 1, &hv);
        const vq_lab_codec *sk = &hk, *sv = &hv;
        size_t per = (size_t)(N / sk->rows_per_block) * sk->block_bytes + (size_t)(N / sv->rows_per_block) * sv->block_bytes;
        np[a] = (int)VQ_MIN(BK_MAX_POOL, VQ_MAX((size_t)p->reps, (p->pool_bytes + per - 1) / VQ_MAX(per, 1)));
        kb[a] = vq_aligned_alloc((size_t)np[a] * (N / sk->rows_per_block) * sk->block_bytes + 64);
        vb[a] = vq_aligned_alloc((size_t)np[a] * (N / sv->rows_per_block) * sv->block_bytes + 64);
        if (!kb[a] || !vb[a]) { s = vq_err_set(err, VQ_ERR_NOMEM, "bench-kernels: split pool of %d x %zu bytes", np[a], per); break; }
        #pragma omp parallel for schedule(dynamic, 4) num_threads(omp_get_num_procs())
        for (int i = 0; i < np[a]; i++) {
            size_t off = (size_t)((i * 7919L) % N) * d;
            int nbk = N / sk->rows_per_block, nbv = N / sv->rows_per_block;
            uint8_t *kp = kb[a] + (size_t)i * nbk * sk->block_bytes, *vp = vb[a] + (size_t)i * nbv * sv->block_bytes;
            for (int b = 0; b < nbk; b++) sk->encode(sk->st, K + off + (size_t)b * sk->rows_per_block * d, kp + (size_t)b * sk->block_bytes);
            for (int b = 0; b < nbv; b++) sv->encode(sv->st, V + off + (size_t)b * sv->rows_per_block * d, vp + (size_t)b * sv->block_bytes);
        }
    }
    if (s) goto out;
    const int G = VQ_BK_GROUP, CH = 256;
    int maxrows = CH, maxacc = d;
    for (int a = 0; a < na; a++) {
        if (!arms[a].ok) continue;
        vq_lab_codec hk, hv;
        vq_lab_kv_codec(pools[a].kv[0], 0, 0, &hk);
        vq_lab_kv_codec(pools[a].kv[0], 0, 1, &hv);
        const vq_lab_codec *sk = &hk, *sv = &hv;
        maxrows = VQ_MAX(maxrows, VQ_MAX(sk->rows_per_block, sv->rows_per_block));
        maxacc = VQ_MAX(maxacc, sv->acc_floats);
    }
    float *scores = vq_aligned_alloc(sizeof(float) * G * maxrows), *w = vq_aligned_alloc(sizeof(float) * G * maxrows);
    float *acc = vq_aligned_alloc(sizeof(float) * G * (maxacc + 16)), *o = vq_aligned_alloc(sizeof(float) * G * d);
    if (!scores || !w || !acc || !o) { s = vq_err_set(err, VQ_ERR_NOMEM, "bench-kernels: out of memory"); goto out2; }
    for (int i = 0; i < G * maxrows; i++) w[i] = 1.0f / (1 + i % 97);
    for (int rep = 0; rep < p->reps; rep++)
        for (int a = 0; a < na; a++) {
            if (!arms[a].ok) continue;
            vq_lab_codec hk, hv;
            vq_lab_kv_codec(pools[a].kv[0], 0, 0, &hk);
            vq_lab_kv_codec(pools[a].kv[0], 0, 1, &hv);
            const vq_lab_codec *sk = &hk, *sv = &hv;
            int ck = VQ_MAX(1, CH / sk->rows_per_block), cv = VQ_MAX(1, CH / sv->rows_per_block);
            int nbk = N / sk->rows_per_block, nbv = N / sv->rows_per_block;
            size_t qsb = (sk->qstate_bytes + 63) & ~(size_t)63;
            uint8_t *qs = vq_aligned_alloc(qsb * G + 64);
            if (!qs) { s = vq_err_set(err, VQ_ERR_NOMEM, "bench-kernels: out of memory"); goto out2; }
            const void *qp[VQ_BK_GROUP];
            float *accp[VQ_BK_GROUP];
            for (int h = 0; h < G; h++) { qp[h] = qs + h * qsb; accp[h] = acc + (size_t)h * (sv->acc_floats + 16); }
            double ts = 0, tv = 0;
            for (int i = 0; i < np[a]; i++) {
                const float *q = Q + (size_t)((i + rep) % BK_NQ) * G * d;
                const uint8_t *kp = kb[a] + (size_t)i * nbk * sk->block_bytes, *vp = vb[a] + (size_t)i * nbv * sv->block_bytes;
                double t0 = cpu_s();
                for (int h = 0; h < G; h++) sk->prep_query(sk->st, q + h * d, qs + h * qsb);
                for (int b = 0; b < nbk; b += ck)
                    sk->score(sk->st, G, qp, kp + (size_t)b * sk->block_bytes, VQ_MIN(ck, nbk - b), scores);
                double t1 = cpu_s();
                memset(acc, 0, sizeof(float) * G * (sv->acc_floats + 16));
                for (int b = 0; b < nbv; b += cv)
                    sv->accumulate(sv->st, G, w, vp + (size_t)b * sv->block_bytes, VQ_MIN(cv, nbv - b), accp);
                for (int h = 0; h < G; h++) sv->finish(sv->st, accp[h], o + h * d);
                double t2 = cpu_s();
                ts += t1 - t0;
                tv += t2 - t1;
            }
            vq_aligned_free(qs);
            arms[a].score_s[rep] = ts / np[a];
            arms[a].accum_s[rep] = tv / np[a];
        }
out2:
    vq_aligned_free(scores); vq_aligned_free(w); vq_aligned_free(acc); vq_aligned_free(o);
out:
    for (int a = 0; kb && vb && a < na; a++) { vq_aligned_free(kb[a]); vq_aligned_free(vb[a]); }
    free(kb); free(vb); free(np);
    return s;
}

/* One (N, d): build every arm's pool (interleaved, appends timed), time one decode step per
 * cache per repeat (arms interleaved), then optionally the split. */
/* A cache for arm a: from the parsed spec when the caller gave them, else from the text. */
static vq_kv *arm_kv(const vq_bk_params *p, const vq_bk_arm *arms, int a, int N, int d, vq_err *err) {
    /* one cache layer of one KV head serving a GQA group of VQ_BK_GROUP queries */
    if (p->parsed) return vq_lab_kv_create(p->parsed[a], 1, VQ_BK_GROUP, 1, d, N, 0.0f, p->seed + a, err);
    vq_kv_spec *s = vq_kv_spec_parse(arms[a].spec, err);
    vq_kv *kv = s ? vq_lab_kv_create(s, 1, VQ_BK_GROUP, 1, d, N, 0.0f, p->seed + a, err) : NULL;
    vq_kv_spec_free(s);
    return kv;
}

static vq_status run_config(const vq_bk_params *p, vq_bk_arm *arms, int na, int N, int d,
                            vq_bk_progress cb, void *user, vq_err *err) {
    const int G = VQ_BK_GROUP;
    vq_status s = VQ_OK;
    float *K = malloc(sizeof(float) * 2 * (size_t)N * d), *V = malloc(sizeof(float) * 2 * (size_t)N * d);
    float *Q = malloc(sizeof(float) * BK_NQ * G * d), *O = malloc(sizeof(float) * G * d);
    bk_pool *pools = calloc((size_t)na, sizeof *pools);
    double *enc_t = calloc((size_t)na * p->reps, sizeof(double)), *enc_rows = calloc((size_t)na * p->reps, sizeof(double));
    if (!K || !V || !Q || !O || !pools || !enc_t || !enc_rows) { s = vq_err_set(err, VQ_ERR_NOMEM, "bench-kernels: out of memory (N=%d d=%d)", N, d); goto out; }
    vq_rng rng;
    vq_rng_seed(&rng, p->seed ^ ((uint64_t)N << 20) ^ (uint64_t)d);
    for (size_t i = 0; i < 2 * (size_t)N * d; i++) { K[i] = (float)vq_rng_gauss(&rng); V[i] = (float)vq_rng_gauss(&rng); }
    for (int i = 0; i < BK_NQ * G * d; i++) Q[i] = (float)vq_rng_gauss(&rng);
    /* first cache of each arm: its bytes size the pool */
    int maxp = 0;
    for (int a = 0; a < na; a++) {
        vq_err e; vq_err_clear(&e);
        vq_kv *kv = arm_kv(p, arms, a, N, d, &e);
        if (kv && vq_lab_kv_append(kv, 0, 0, N, K, V, &e) != VQ_OK) { vq_lab_kv_free(kv); kv = NULL; }
        if (!kv) { arms[a].ok = 0; snprintf(arms[a].why, sizeof arms[a].why, "%.250s", e.msg); continue; }
        arms[a].ok = 1;
        arms[a].kv_bytes = vq_lab_kv_bytes(kv);
        arms[a].bits = vq_lab_kv_bits(kv);
        {
            vq_lab_codec hk, hv;
            vq_lab_kv_codec(kv, 0, 0, &hk);
            vq_lab_kv_codec(kv, 0, 1, &hv);
            const vq_lab_codec *sk = &hk, *sv = &hv;
            arms[a].code_bits = 4.0 * ((double)sk->block_bytes / sk->rows_per_block +
                                       (double)sv->block_bytes / sv->rows_per_block) / d;
        }
        snprintf(arms[a].norm, sizeof arms[a].norm, "%s", vq_lab_kv_spec_text(kv));
        size_t pb = arms[a].kv_bytes;
        arms[a].pool = (int)VQ_MIN(BK_MAX_POOL, VQ_MAX((size_t)p->reps, (p->pool_bytes + pb - 1) / pb));
        pools[a].kv = calloc((size_t)arms[a].pool, sizeof(vq_kv *));
        if (!pools[a].kv) { vq_lab_kv_free(kv); s = vq_err_set(err, VQ_ERR_NOMEM, "bench-kernels: out of memory"); goto out; }
        vq_lab_kv_free(kv);
        maxp = VQ_MAX(maxp, arms[a].pool);
    }
    if (cb) { char m[128]; snprintf(m, sizeof m, "N=%d d=%d: building pools (up to %d caches per arm)", N, d, maxp); cb(m, user); }
    /* the first reps caches of every arm: appended one at a time, arms interleaved, timed */
    for (int i = 0; i < p->reps && !s; i++)
        for (int a = 0; a < na; a++) {
            if (!arms[a].ok) continue;
            size_t off = (size_t)((i * 7919L) % N) * d;
            vq_kv *kv = arm_kv(p, arms, a, N, d, err);
            if (!kv) { s = err->code; break; }
            double t0 = cpu_s();
            s = vq_lab_kv_append(kv, 0, 0, N, K + off, V + off, err);
            double t1 = cpu_s();
            pools[a].kv[pools[a].n++] = kv;
            if (s) break;
            enc_t[(size_t)a * p->reps + i] = t1 - t0;
            enc_rows[(size_t)a * p->reps + i] = N;
        }
    /* the rest of the pools: untimed, on every core (only their memory matters) */
    long total = 0;
    for (int a = 0; a < na; a++) if (arms[a].ok) total += arms[a].pool - p->reps;
    int fail = 0;
    vq_err ferr; vq_err_clear(&ferr);
    #pragma omp parallel for schedule(dynamic, 4) num_threads(omp_get_num_procs())
    for (long t = 0; t < (s ? 0 : total); t++) {
        int a = 0;
        long i = t;
        while (!arms[a].ok || i >= arms[a].pool - p->reps) { if (arms[a].ok) i -= arms[a].pool - p->reps; a++; }
        i += p->reps;
        size_t off = (size_t)((i * 7919L) % N) * d;
        vq_err e; vq_err_clear(&e);
        vq_kv *kv = arm_kv(p, arms, a, N, d, &e);
        if (kv && vq_lab_kv_append(kv, 0, 0, N, K + off, V + off, &e) != VQ_OK) { vq_lab_kv_free(kv); kv = NULL; }
        pools[a].kv[i] = kv;
        if (!kv) {
            #pragma omp critical(vq_bk_fail)
            { if (!fail) { fail = 1; ferr = e; } }
        }
    }
    for (int a = 0; a < na; a++)   /* count the contiguous built prefix (all of it unless a failure) */
        while (arms[a].ok && pools[a].n < arms[a].pool && pools[a].kv[pools[a].n]) pools[a].n++;
    for (int a = 0; a < na; a++)   /* a failure leaves gaps: free what lies past the prefix */
        for (int i = pools[a].n + 1; arms[a].ok && i < arms[a].pool; i++) vq_lab_kv_free(pools[a].kv[i]);
    if (!s && fail) { *err = ferr; s = ferr.code ? ferr.code : VQ_ERR_NOMEM; }
    if (s) goto out;
    for (int a = 0; a < na; a++)
        for (int r = 0; arms[a].ok && r < p->reps; r++)
            arms[a].encode_rps[r] = enc_rows[(size_t)a * p->reps + r] / enc_t[(size_t)a * p->reps + r];
    if (cb) { char m[128]; snprintf(m, sizeof m, "N=%d d=%d: timing attention", N, d); cb(m, user); }
    for (int rep = 0; rep < p->reps && !s; rep++)
        for (int a = 0; a < na; a++) {
            if (!arms[a].ok) continue;
            int pos = N;
            double w0 = vq_now_s(), t0 = cpu_s();
            for (int i = 0; i < pools[a].n && !s; i++)
                s = vq_lab_kv_attend(pools[a].kv[i], 0, 1, &pos, Q + (size_t)((i + rep) % BK_NQ) * G * d, O, err);
            double t1 = cpu_s(), w1 = vq_now_s();
            if (s) break;
            arms[a].attend_s[rep] = ((p->threads == 1 ? t1 - t0 : w1 - w0)) / pools[a].n;
            arms[a].attend_wall_s[rep] = (w1 - w0) / pools[a].n;
        }
    if (s) goto out;
    if (p->split) {
        for (int a = 0; a < na; a++)   /* free the store pools but the first (its codec states) */
            for (; pools[a].n > 1; pools[a].n--) vq_lab_kv_free(pools[a].kv[pools[a].n - 1]);
        if (cb) { char m[128]; snprintf(m, sizeof m, "N=%d d=%d: score/accumulate apart", N, d); cb(m, user); }
        s = split_config(p, arms, pools, na, N, d, K, V, Q, err);
    }
out:
    for (int a = 0; pools && a < na; a++) {
        for (int i = 0; i < pools[a].n; i++) vq_lab_kv_free(pools[a].kv[i]);
        free(pools[a].kv);
    }
    free(pools); free(K); free(V); free(Q); free(O); free(enc_t); free(enc_rows);
    return s;
}

vq_status vq_bench_kernels(const vq_bk_params *p, vq_bk_result *r, vq_bk_progress cb, void *user,
                           vq_err *err) {
    memset(r, 0, sizeof *r);
    if (p->reps < 1 || p->n_ns < 1 || p->n_dims < 1 || p->threads < 1)
        return vq_err_set(err, VQ_ERR_ARG, "bench-kernels: reps %d, %d sizes, %d dims, threads %d: each must be >= 1",
                          p->reps, p->n_ns, p->n_dims, p->threads);
    vq_status s = make_specs(p, r, err);
    if (s) return s;
    r->reps = p->reps;
    r->threads = p->threads;
    r->pool_bytes = p->pool_bytes;
    r->copy_bytes = VQ_MAX(p->pool_bytes, (size_t)64 << 20);
    vq_cpu_description(r->machine, sizeof r->machine);
    snprintf(r->isa, sizeof r->isa, "%s", vq_kernels_isa_name());
    r->load1_before = load1();
    r->n_arms = p->n_ns * p->n_dims * r->n_specs;
    r->arms = calloc((size_t)r->n_arms, sizeof *r->arms);
    r->copy_bps = calloc(2 * (size_t)p->reps, sizeof(double));
    r->read_bps = calloc(2 * (size_t)p->reps, sizeof(double));
    r->copy_wall_bps = calloc(2 * (size_t)p->reps, sizeof(double));
    if (!r->arms || !r->copy_bps || !r->read_bps || !r->copy_wall_bps) return vq_err_set(err, VQ_ERR_NOMEM, "bench-kernels: out of memory");
    for (int i = 0; i < r->n_arms; i++) {
        vq_bk_arm *a = &r->arms[i];
        a->n = p->ns[i / (p->n_dims * r->n_specs)];
        a->d = p->dims[(i / r->n_specs) % p->n_dims];
        a->spec = r->specs[i % r->n_specs];
        a->attend_s = calloc((size_t)p->reps, sizeof(double));
        a->attend_wall_s = calloc((size_t)p->reps, sizeof(double));
        a->encode_rps = calloc((size_t)p->reps, sizeof(double));
        if (p->split) { a->score_s = calloc((size_t)p->reps, sizeof(double)); a->accum_s = calloc((size_t)p->reps, sizeof(double)); }
        if (!a->attend_s || !a->attend_wall_s || !a->encode_rps || (p->split && (!a->score_s || !a->accum_s)))
            return vq_err_set(err, VQ_ERR_NOMEM, "bench-kernels: out of memory");
    }
    int saved_threads = omp_get_max_threads();
    omp_set_num_threads(p->threads);
    void *ca = malloc(r->copy_bytes), *cbuf = malloc(r->copy_bytes);
    if (!ca || !cbuf) { free(ca); free(cbuf); omp_set_num_threads(saved_threads);
        return vq_err_set(err, VQ_ERR_NOMEM, "bench-kernels: memcpy buffers of %zu bytes", r->copy_bytes); }
    memset(ca, 1, r->copy_bytes);
    memset(cbuf, 2, r->copy_bytes);
    if (cb) cb("memcpy ceiling (before)", user);
    measure_copy(r, 0, p->reps, ca, cbuf);
    free(cbuf);   /* not held while the pools are */
    for (int ni = 0; ni < p->n_ns && !s; ni++)
        for (int di = 0; di < p->n_dims && !s; di++) {
            vq_bk_arm *arms = &r->arms[(ni * p->n_dims + di) * r->n_specs];
            s = run_config(p, arms, r->n_specs, p->ns[ni], p->dims[di], cb, user, err);
        }
    cbuf = malloc(r->copy_bytes);
    if (cbuf) {
        memset(cbuf, 2, r->copy_bytes);
        if (cb) cb("memcpy ceiling (after)", user);
        measure_copy(r, p->reps, p->reps, ca, cbuf);
    }
    free(ca); free(cbuf);
    r->load1_after = load1();
    omp_set_num_threads(saved_threads);
    return s;
}

void vq_bench_kernels_free(vq_bk_result *r) {
    for (int i = 0; r->arms && i < r->n_arms; i++) {
        free(r->arms[i].attend_s); free(r->arms[i].attend_wall_s); free(r->arms[i].encode_rps);
        free(r->arms[i].score_s); free(r->arms[i].accum_s);
    }
    free(r->arms);
    for (int i = 0; r->specs && i < r->n_specs; i++) free((void *)r->specs[i]);
    free(r->specs);
    free(r->copy_bps); free(r->read_bps); free(r->copy_wall_bps);
    memset(r, 0, sizeof *r);
}
