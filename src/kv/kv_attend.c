/* kv_attend.c: attention computed from the packed codes. For each KV head, the query heads of its
 * GQA group (and a chunk of query rows) share one pass over the pages: the codec scores the K
 * codes, an online softmax in float32 turns scores into weights (causal by true position), the
 * codec accumulates V codes in its own domain, and finish maps back once per query head.
 * Rows still in the full-precision window are scored and summed directly. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kv/kv_impl.h"
#include "codec/codec_vec.h"

#define QCHUNK 16   /* query rows per task: bounds scratch, lets prefill split across threads */

typedef struct task {
    const vq_kv *kv;
    const vq_kv_layer *L;
    int layer, h, q0, nq;
    const int *q_pos;
    const float *q;
    float *out;
} task;

typedef struct sm {            /* online-softmax state of nv query vectors */
    int nv, G, acc_stride, d;
    float scale;
    float *m, *l, *acc, *accw;
} sm;

/* scores S[j*rows + r] -> weights in place; keeps m (running max), l (sum) and rescales the
 * accumulators whenever a query's max grows. Rows with pos > the query's position weigh 0. */
static void softmax_update(sm *s, float *S, int rows, const int32_t *pos, int pos_start,
                           int pos_cap, const int *q_pos) {
    for (int j = 0; j < s->nv; j++) {
        const int qp = q_pos[j / s->G];
        float *Sj = S + (size_t)j * rows;
        float mx = -INFINITY;
        for (int r = 0; r < rows; r++) {
            int32_t p = pos_cap ? pos[(pos_start + r) % pos_cap] : pos[r];
            if (p <= qp) { Sj[r] *= s->scale; if (Sj[r] > mx) mx = Sj[r]; }
            else Sj[r] = -INFINITY;
        }
        if (mx == -INFINITY) {   /* nothing visible in this block */
            for (int r = 0; r < rows; r++) Sj[r] = 0.0f;
            continue;
        }
        if (mx > s->m[j]) {
            float f = expf(s->m[j] - mx);   /* m = -inf the first time: f = 0, acc is 0 anyway */
            if (f != 1.0f) {
                float *a = s->acc + (size_t)j * s->acc_stride, *aw = s->accw + (size_t)j * s->d;
                for (int i = 0; i < s->acc_stride; i++) a[i] *= f;
                for (int i = 0; i < s->d; i++) aw[i] *= f;
                s->l[j] *= f;
            }
            s->m[j] = mx;
        }
        float sum = 0, m = s->m[j];
        for (int r = 0; r < rows; r++) {
            float w = Sj[r] == -INFINITY ? 0.0f : expf(Sj[r] - m);
            Sj[r] = w;
            sum += w;
        }
        s->l[j] += sum;
    }
}

static size_t al64(size_t n) { return (n + 63) & ~(size_t)63; }

static int run_task(const task *t) {
    const vq_kv *kv = t->kv;
    const vq_kv_layer *L = t->L;
    const vq_codec_state *sk = &kv->st[VQ_SIDE_K][t->layer], *sv = &kv->st[VQ_SIDE_V][t->layer];
    const int d = kv->d, G = kv->G, nv = t->nq * G, nh = kv->dims.n_heads;
    const int wc = L->win_count, smax = VQ_MAX(kv->P, wc);
    const size_t qsb = al64(VQ_MAX(sk->qstate_bytes, 1));
    const int acc_stride = (int)(al64((size_t)sv->acc_floats * sizeof(float)) / sizeof(float));
    size_t need = nv * qsb + al64(nv * sizeof(void *)) * 2 + al64((size_t)nv * smax * sizeof(float)) +
                  2 * al64(nv * sizeof(float)) + (size_t)nv * acc_stride * sizeof(float) +
                  al64((size_t)nv * d * sizeof(float)) + al64((size_t)d * sizeof(float));
    uint8_t *mem = vq_aligned_alloc(need);
    if (!mem) return 1;
    uint8_t *p = mem;
    uint8_t *qst = p; p += nv * qsb;
    const void **qptr = (const void **)(void *)p; p += al64(nv * sizeof(void *));
    float **accptr = (float **)(void *)p; p += al64(nv * sizeof(void *));
    float *S = (float *)(void *)p; p += al64((size_t)nv * smax * sizeof(float));
    sm s = {.nv = nv, .G = G, .acc_stride = acc_stride, .d = d, .scale = 1.0f / sqrtf((float)d)};
    s.m = (float *)(void *)p; p += al64(nv * sizeof(float));
    s.l = (float *)(void *)p; p += al64(nv * sizeof(float));
    s.acc = (float *)(void *)p; p += (size_t)nv * acc_stride * sizeof(float);
    s.accw = (float *)(void *)p; p += al64((size_t)nv * d * sizeof(float));
    float *tmp = (float *)(void *)p;

    const int *qpos = t->q_pos + t->q0;
    int maxpos = INT32_MIN;
    for (int i = 0; i < t->nq; i++) maxpos = VQ_MAX(maxpos, qpos[i]);
    for (int j = 0; j < nv; j++) {
        const float *qrow = t->q + ((size_t)(t->q0 + j / G) * nh + (size_t)t->h * G + j % G) * d;
        sk->codec->prep_query(sk, qrow, qst + j * qsb);
        qptr[j] = qst + j * qsb;
        accptr[j] = s.acc + (size_t)j * acc_stride;
        s.m[j] = -INFINITY;
        s.l[j] = 0.0f;
    }

    for (int pg = 0; pg < L->n_pages; pg++) {
        int rows = VQ_MIN(kv->P, L->n_coded - pg * kv->P);
        if (rows <= 0 || L->page_minpos[pg] > maxpos) continue;
        const uint8_t *page = L->pages[pg];
        sk->codec->score(sk, nv, qptr, page + kv->off_k[t->h], rows / kv->rpb[0], S);
        softmax_update(&s, S, rows, (const int32_t *)(const void *)page, 0, 0, qpos);
        sv->codec->accumulate(sv, nv, S, page + kv->off_v[t->h], rows / kv->rpb[1], accptr);
    }

    if (wc > 0) {
        const size_t w = (size_t)kv->H * d, hoff = (size_t)t->h * d;
        const int f16 = kv->wprec == 16;
        for (int r = 0; r < wc; r++) {
            size_t row = (size_t)((L->win_start + r) % kv->win_cap) * w + hoff;
            for (int j = 0; j < nv; j++) {
                const float *qrow = t->q + ((size_t)(t->q0 + j / G) * nh + (size_t)t->h * G + j % G) * d;
                S[(size_t)j * wc + r] = f16 ? vq_cvec_dot_f16(qrow, (const vq_f16 *)L->win_k + row, d)
                                            : vq_cvec_dot(qrow, (const float *)L->win_k + row, d);
            }
        }
        softmax_update(&s, S, wc, L->win_pos, L->win_start, kv->win_cap, qpos);
        for (int r = 0; r < wc; r++) {
            size_t row = (size_t)((L->win_start + r) % kv->win_cap) * w + hoff;
            for (int j = 0; j < nv; j++) {
                float wt = S[(size_t)j * wc + r];
                if (wt == 0.0f) continue;
                if (f16) vq_cvec_axpy_f16(s.accw + (size_t)j * d, wt, (const vq_f16 *)L->win_v + row, d);
                else vq_cvec_axpy(s.accw + (size_t)j * d, wt, (const float *)L->win_v + row, d);
            }
        }
    }

    for (int j = 0; j < nv; j++) {
        float *o = t->out + ((size_t)(t->q0 + j / G) * nh + (size_t)t->h * G + j % G) * d;
        if (s.l[j] <= 0.0f) {   /* the query sees no row: output zeros */
            memset(o, 0, (size_t)d * sizeof(float));
            continue;
        }
        sv->codec->finish(sv, s.acc + (size_t)j * acc_stride, tmp);
        const float inv = 1.0f / s.l[j], *aw = s.accw + (size_t)j * d;
        for (int i = 0; i < d; i++) o[i] = (tmp[i] + aw[i]) * inv;
    }
    vq_aligned_free(mem);
    return 0;
}

vq_status vq_kv_attend(vq_kv *kv, int layer, int n_q, const int *q_pos, const float *q,
                       float *out, vq_err *err) {
    vq_err_clear(err);
    if (!kv) return vq_err_set(err, VQ_ERR_ARG, "vq_kv_attend: kv is NULL");
    if (layer < 0 || layer >= kv->dims.n_layers)
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_attend: layer %d outside 0..%d", layer,
                          kv->dims.n_layers - 1);
    if (n_q < 0 || (n_q > 0 && (!q_pos || !q || !out)))
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_attend: layer %d: bad arguments n_q=%d", layer, n_q);
    if (n_q == 0) return VQ_OK;
    const vq_kv_layer *L = &kv->layers[layer];
    const int nchunks = (n_q + QCHUNK - 1) / QCHUNK, ntasks = nchunks * kv->H;
    const double work = (double)n_q * kv->dims.n_heads * kv->d * (L->n_coded + L->win_count);
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) if (ntasks > 1 && work > 2e5)
    for (int i = 0; i < ntasks; i++) {
        task t = {.kv = kv, .L = L, .layer = layer, .h = i % kv->H, .q0 = (i / kv->H) * QCHUNK,
                  .q_pos = q_pos, .q = q, .out = out};
        t.nq = VQ_MIN(QCHUNK, n_q - t.q0);
        if (run_task(&t)) {
#pragma omp atomic write
            failed = 1;
        }
    }
    if (failed) return vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_attend: layer %d: out of memory for "
                                  "scratch (n_q=%d)", layer, n_q);
    return VQ_OK;
}
