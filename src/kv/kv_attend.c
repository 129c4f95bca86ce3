/* kv_attend.c: attention computed from the packed codes. For each KV head, the query heads of its
 * GQA group (and a chunk of query rows) share one pass over the pages: the codec scores the K
 * codes, an online softmax in float32 turns scores into weights (causal by true position), the
 * codec accumulates V codes in its own domain, and finish maps back once per query head.
 * Rows still in the full-precision window are scored and summed directly. */
#include <immintrin.h>
#include <omp.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kv/kv_impl.h"
#include "codec/codec_vec.h"

#define QCHUNK 16   /* query rows per task: bounds scratch, lets prefill split across threads */

typedef struct task {
    const vq_kvg *kv;
    const vq_kv_layer *L;
    int layer, h, q0, nq, span;   /* span: the layer's attention span (0: unbounded) */
    int shared, reweight;      /* eviction: other tasks add to this head's scores; the policy reweights */
    const int *q_pos;
    const float *q;
    float *out;
    /* demote= (demote.c): a tier's pass writes its normalized output and log-sum-exp per query
     * vector to y, lse (its slot); the main pass then merges them (xy, xlse) into out exactly */
    float *y, *lse;
    const float *xy, *xlse;
} task;

/* Eviction's observer (kv->ev.attn): the softmax weights of every block as computed, with the
 * block's running max, so that once the pass ends they are rescaled to the final softmax
 * (w * exp(m_block - m) / l) and added to the layer's scores: no second pass over the codes. */
typedef struct obs {
    float *raw;                /* nv x ev.raw_cap weights, [j * cap + storage index] */
    float *bm;                 /* per block: nv running maxima */
    int *b0, *bn;              /* per block: first storage index, rows */
    int nblk, cap, nv;
} obs;

typedef struct sm {            /* online-softmax state of nv query vectors */
    int nv, G, acc_stride, d, span;
    float scale;
    float cap;                 /* attention soft-cap c (dims.softcap): score -> c tanh(score / c); 0: none */
    float *m, *l, *acc, *accw;
} sm;

/* ---- the softmax's two passes over a block of scores, scalar and SIMD ----
 * mask_max: S[r] = lo <= pos[r] <= qp ? S[r] * scale : -inf, returns the max (lo: the first
 * position a sliding-window layer still sees, INT32_MIN otherwise).
 * exp_sum:  S[r] = exp(S[r] - m) (-inf -> 0), returns the sum. expf on the SIMD paths is a
 * Cephes-style polynomial (about 2 ulp): the tests hold attention to 1e-5 of float64. */
/* S <- (S + off) * scale where visible (off: the key pre-transform's q·c, else 0), -inf elsewhere */
static float mask_max_scalar(float *S, const int32_t *pos, int n, int lo, int qp, float scale, float off) {
    float mx = -INFINITY;
    for (int r = 0; r < n; r++) {
        if (pos[r] <= qp && pos[r] >= lo) { S[r] = (S[r] + off) * scale; mx = S[r] > mx ? S[r] : mx; }
        else S[r] = -INFINITY;
    }
    return mx;
}
static float exp_sum_scalar(float *S, int n, float m) {
    float sum = 0;
    for (int r = 0; r < n; r++) {
        float w = S[r] == -INFINITY ? 0.0f : expf(S[r] - m);
        S[r] = w;
        sum += w;
    }
    return sum;
}
#define T2 __attribute__((target("avx2,fma,f16c")))
#define T5 __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))
T5 static float mask_max_512(float *S, const int32_t *pos, int n, int lo, int qp, float scale, float off) {
    __m512 mx = _mm512_set1_ps(-INFINITY), vs = _mm512_set1_ps(scale), ninf = mx, vo = _mm512_set1_ps(off);
    __m512i vq = _mm512_set1_epi32(qp), vlo = _mm512_set1_epi32(lo);
    for (int r = 0; r < n; r += 16) {
        __mmask16 t = n - r >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - r)) - 1);
        __m512 s = _mm512_maskz_loadu_ps(t, S + r);
        __m512i p = _mm512_maskz_loadu_epi32(t, pos + r);
        __mmask16 vis = _mm512_mask_cmpge_epi32_mask(_mm512_mask_cmple_epi32_mask(t, p, vq), p, vlo);
        s = _mm512_mask_mul_ps(ninf, vis, _mm512_add_ps(s, vo), vs);
        mx = _mm512_max_ps(mx, s);
        _mm512_mask_storeu_ps(S + r, t, s);
    }
    return _mm512_reduce_max_ps(mx);
}
T5 static __m512 exp512(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.3f);
    __mmask16 tiny = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_max_ps(x, lo);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_scalef_ps((__mmask16)~tiny, p, n);
}
T5 static float exp_sum_512(float *S, int n, float m) {
    __m512 sum = _mm512_setzero_ps(), vm = _mm512_set1_ps(m);
    for (int r = 0; r < n; r += 16) {
        __mmask16 t = n - r >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - r)) - 1);
        __m512 w = exp512(_mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), t, S + r), vm));
        sum = _mm512_add_ps(sum, w);
        _mm512_mask_storeu_ps(S + r, t, w);
    }
    return _mm512_reduce_add_ps(sum);
}
T2 static float mask_max_256(float *S, const int32_t *pos, int n, int lo, int qp, float scale, float off) {
    __m256 mx = _mm256_set1_ps(-INFINITY), vs = _mm256_set1_ps(scale), ninf = mx, vo = _mm256_set1_ps(off);
    __m256i vq = _mm256_set1_epi32(qp), vlo = _mm256_set1_epi32(lo);
    int r = 0;
    for (; r + 8 <= n; r += 8) {
        __m256 s = _mm256_mul_ps(_mm256_add_ps(_mm256_loadu_ps(S + r), vo), vs);
        __m256i p = _mm256_loadu_si256((const __m256i *)(pos + r));
        __m256 hide = _mm256_castsi256_ps(_mm256_or_si256(_mm256_cmpgt_epi32(p, vq), _mm256_cmpgt_epi32(vlo, p)));
        s = _mm256_blendv_ps(s, ninf, hide);
        mx = _mm256_max_ps(mx, s);
        _mm256_storeu_ps(S + r, s);
    }
    float t[8], m = -INFINITY;
    _mm256_storeu_ps(t, mx);
    for (int i = 0; i < 8; i++) m = t[i] > m ? t[i] : m;
    float tail = mask_max_scalar(S + r, pos + r, n - r, lo, qp, scale, off);
    return tail > m ? tail : m;
}
T2 static __m256 exp256(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3f);
    __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n through the exponent field: n >= -126 after the clamp */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}
T2 static float exp_sum_256(float *S, int n, float m) {
    __m256 sum = _mm256_setzero_ps(), vm = _mm256_set1_ps(m);
    int r = 0;
    for (; r + 8 <= n; r += 8) {
        __m256 w = exp256(_mm256_sub_ps(_mm256_loadu_ps(S + r), vm));
        sum = _mm256_add_ps(sum, w);
        _mm256_storeu_ps(S + r, w);
    }
    float t[8];
    _mm256_storeu_ps(t, sum);
    return ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7])) + exp_sum_scalar(S + r, n - r, m);
}

/* Soft-capping (Gemma 2): every visible score S[r] -> c tanh(S[r] / c), on the masked and scaled
 * block, whichever ISA masked it (one scalar pass: only soft-capped models pay for it); returns the
 * new max (tanh is monotonic, but the max is taken from the capped values themselves). */
static float softcap_max(float *S, int n, float c) {
    float mx = -INFINITY;
    for (int r = 0; r < n; r++)
        if (S[r] != -INFINITY) { S[r] = c * tanhf(S[r] / c); mx = S[r] > mx ? S[r] : mx; }
    return mx;
}

/* scores S[j*rows + r] -> weights in place; keeps m (running max), l (sum) and rescales the
 * accumulators whenever a query's max grows. Rows with pos > the query's position weigh 0.
 * pos: rows positions in order (pages) or a ring (window: pos_cap > 0, copied out first). */
/* off: per query, a constant added to every score of the block before scaling (coded rows under
 * the key pre-transform: q·c), or NULL */
static void softmax_update(sm *s, float *S, int rows, const int32_t *pos, const int *q_pos, const float *off) {
    const vq_isa isa = vq_cvec_isa();
    for (int j = 0; j < s->nv; j++) {
        const int qp = q_pos[j / s->G];
        const int lo = s->span > 0 && (int64_t)qp - s->span + 1 > INT32_MIN ? qp - s->span + 1 : INT32_MIN;
        const float o = off ? off[j] : 0.0f;
        float *Sj = S + (size_t)j * rows;
        float mx = isa == VQ_ISA_AVX512 ? mask_max_512(Sj, pos, rows, lo, qp, s->scale, o)
                 : isa == VQ_ISA_AVX2   ? mask_max_256(Sj, pos, rows, lo, qp, s->scale, o)
                                        : mask_max_scalar(Sj, pos, rows, lo, qp, s->scale, o);
        if (s->cap > 0 && mx != -INFINITY) mx = softcap_max(Sj, rows, s->cap);
        if (mx == -INFINITY) {   /* nothing visible in this block */
            memset(Sj, 0, (size_t)rows * sizeof(float));
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
        s->l[j] += isa == VQ_ISA_AVX512 ? exp_sum_512(Sj, rows, s->m[j])
                 : isa == VQ_ISA_AVX2   ? exp_sum_256(Sj, rows, s->m[j])
                                        : exp_sum_scalar(Sj, rows, s->m[j]);
    }
}

static size_t al64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Full-precision rows (the recent window, a ring, or the sink, start 0): scored, softmaxed and
 * summed directly into accw. Row r of the block is slot (start + r) % cap. */
static void obs_record(obs *ob, const sm *s, const float *S, int rows, int idx0) {
    if (!ob || idx0 < 0) return;
    for (int j = 0; j < s->nv; j++) {
        memcpy(ob->raw + (size_t)j * ob->cap + idx0, S + (size_t)j * rows, (size_t)rows * sizeof(float));
        ob->bm[(size_t)ob->nblk * s->nv + j] = s->m[j];
    }
    ob->b0[ob->nblk] = idx0;
    ob->bn[ob->nblk] = rows;
    ob->nblk++;
}

static void fp_block(sm *s, float *S, int32_t *wpos, const vq_kvg *kv, const task *t,
                     const void *kb, const void *vb, const int32_t *posb, int start, int cap,
                     int count, const int *qpos, obs *ob, int idx0) {
    const int d = kv->d, G = kv->G, nh = kv->qrow, nv = s->nv;
    const size_t rb = vq_kv_fp_row_bytes(kv), hoff = (size_t)t->h * vq_kv_fp_head_bytes(kv);
    const int f16 = kv->wprec == 16, q8 = kv->wprec == 8;
    float xr[VQ_KV_FP_MAX_D];   /* wprec=8: the row, decoded once for every query */
    for (int r = 0; r < count; r++) {
        const uint8_t *row = (const uint8_t *)kb + (size_t)((start + r) % cap) * rb + hoff;
        if (q8) vq_kv_fp_get(kv, row, xr);
        for (int j = 0; j < nv; j++) {
            const float *qrow = t->q + ((size_t)(t->q0 + j / G) * nh + (size_t)t->h * G + j % G) * d;
            S[(size_t)j * count + r] = q8 ? vq_cvec_dot(qrow, xr, d)
                                     : f16 ? vq_cvec_dot_f16(qrow, (const vq_f16 *)(const void *)row, d)
                                           : vq_cvec_dot(qrow, (const float *)(const void *)row, d);
        }
    }
    for (int r = 0; r < count; r++) wpos[r] = posb[(start + r) % cap];
    softmax_update(s, S, count, wpos, qpos, NULL);
    obs_record(ob, s, S, count, idx0);
    for (int r = 0; r < count; r++) {
        const uint8_t *row = (const uint8_t *)vb + (size_t)((start + r) % cap) * rb + hoff;
        int any = 0;
        for (int j = 0; j < nv && !any; j++) any = S[(size_t)j * count + r] != 0.0f;
        if (!any) continue;
        if (q8) vq_kv_fp_get(kv, row, xr);
        for (int j = 0; j < nv; j++) {
            float wt = S[(size_t)j * count + r];
            if (wt == 0.0f) continue;
            if (q8) vq_cvec_axpy(s->accw + (size_t)j * d, wt, xr, d);
            else if (f16) vq_cvec_axpy_f16(s->accw + (size_t)j * d, wt, (const vq_f16 *)(const void *)row, d);
            else vq_cvec_axpy(s->accw + (size_t)j * d, wt, (const float *)(const void *)row, d);
        }
    }
}

/* Bytes of one task's scratch for nv query vectors (every buffer 64-byte aligned). The full-
 * precision rows are taken in chunks of at most P rows, so P bounds the score buffer. */
static size_t obs_bytes(const vq_kvg *kv, int nv) {   /* the block table (the weights: ev.raw) */
    if (!kv->ev.attn) return 0;
    const int nblk = kv->ev.nblk;
    return al64((size_t)nblk * nv * sizeof(float)) + 2 * al64((size_t)nblk * sizeof(int));
}
static size_t task_bytes(const vq_kvg *kv, int nv) {
    const vq_codec_state *sk = &kv->st[VQ_SIDE_K][0], *sv = &kv->st[VQ_SIDE_V][0];
    const size_t qsb = al64(VQ_MAX(sk->qstate_bytes, 1));
    const int acc_stride = (int)(al64((size_t)sv->acc_floats * sizeof(float)) / sizeof(float));
    const int d = kv->d, smax = kv->P;
    return nv * qsb + al64(nv * sizeof(void *)) * 2 + al64((size_t)nv * smax * sizeof(float)) +
           2 * al64(nv * sizeof(float)) + (size_t)nv * acc_stride * sizeof(float) +
           al64((size_t)nv * d * sizeof(float)) + al64((size_t)d * sizeof(float)) +
           al64((size_t)smax * sizeof(int32_t)) + al64((size_t)nv * sizeof(float)) + obs_bytes(kv, nv);
}

/* The group's attention scratch: one slot per thread attention may use, made with the cache so
 * that decode never allocates (kv.c calls this at create). */
vq_status vq_kvg_scratch_init(vq_kvg *kv) {
    kv->n_slots = VQ_MAX(1, omp_get_max_threads());
    kv->ev.nv = QCHUNK * kv->G;
    /* blocks one pass meets: the pages, then the window and the sink in chunks of P rows */
    kv->ev.nblk = kv->page_cap + (kv->win_cap + kv->P - 1) / kv->P + (kv->S + kv->P - 1) / kv->P + 2;
    kv->slot_bytes = al64(task_bytes(kv, QCHUNK * kv->G)) + (kv->is_tier ? vq_kvg_tier_out_bytes(kv) : 0);
    kv->scratch = vq_aligned_alloc((size_t)kv->n_slots * kv->slot_bytes);
    kv->slot_busy = vq_aligned_alloc((size_t)kv->n_slots * sizeof(int));
    return kv->scratch && kv->slot_busy ? VQ_OK : VQ_ERR_NOMEM;
}

/* The observed weights, rescaled to the final softmax, into the layer's scores for this head
 * (summed over the group's query heads and the observed query rows). */
static void obs_fold(const vq_kvg *kv, const task *t, const sm *s, obs *ob, const int *qpos) {
    float *dst = t->L->ev_score + (size_t)t->h * kv->ev.cap;
    void (*rw)(const vq_pol_attn *, float *, const int *, const int *, int) =
        t->reweight ? kv->ev.cfg.pol->reweight : NULL;
    for (int j = 0; j < s->nv; j++) {
        const int qp = qpos[j / s->G];
        if (qp < kv->ev.obs_from || s->l[j] <= 0.0f) continue;
        float *raw = ob->raw + (size_t)j * ob->cap;
        /* with a demoted tier the softmax also runs over its rows: its sum joins the normalizer */
        const float xl = t->xlse ? t->xlse[j] : -INFINITY;
        const float inv = 1.0f / (xl == -INFINITY ? s->l[j] : s->l[j] + expf(xl - s->m[j]));
        for (int b = 0; b < ob->nblk; b++) {   /* to the final softmax, in place */
            const float mb = ob->bm[(size_t)b * s->nv + j];
            const float f = mb == -INFINITY ? 0.0f : expf(mb - s->m[j]) * inv;
            float *w = raw + ob->b0[b];
            for (int r = 0; r < ob->bn[b]; r++) w[r] *= f;
        }
        if (rw) {   /* the policy turns the weights into others (keyformer's Gumbel softmax) */
            const vq_pol_attn a = {.seed = kv->ev.seed, .layer = kv->gl[t->layer], .qp = qp,
                                   .hq = (vq_kvg_head0(kv, t->layer) + t->h) * s->G + j % s->G,   /* the cache's */
                                   .tau = kv->ev.cfg.tau};
            rw(&a, raw, ob->b0, ob->bn, ob->nblk);
        }
        for (int b = 0; b < ob->nblk; b++) {
            const float *w = raw + ob->b0[b];
            float *o = dst + ob->b0[b];
            if (t->shared) {
                for (int r = 0; r < ob->bn[b]; r++) {
#pragma omp atomic
                    o[r] += w[r];
                }
            } else {
                for (int r = 0; r < ob->bn[b]; r++) o[r] += w[r];
            }
        }
    }
}

static void run_task(const task *t, uint8_t *mem, float *raw) {
    const vq_kvg *kv = t->kv;
    const vq_kv_layer *L = t->L;
    const vq_codec_state *sk = vq_kvg_st(kv, VQ_SIDE_K, t->layer, t->h), *sv = vq_kvg_st(kv, VQ_SIDE_V, t->layer, t->h);
    const int d = kv->d, G = kv->G, nv = t->nq * G, nh = kv->qrow;
    const int wc = L->win_count, sc = L->sink_count, smax = kv->P;
    const size_t qsb = al64(VQ_MAX(sk->qstate_bytes, 1));
    const int acc_stride = (int)(al64((size_t)sv->acc_floats * sizeof(float)) / sizeof(float));
    uint8_t *p = mem + (kv->is_tier ? vq_kvg_tier_out_bytes(kv) : 0);
    uint8_t *qst = p; p += nv * qsb;
    const void **qptr = (const void **)(void *)p; p += al64(nv * sizeof(void *));
    float **accptr = (float **)(void *)p; p += al64(nv * sizeof(void *));
    float *S = (float *)(void *)p; p += al64((size_t)nv * smax * sizeof(float));
    sm s = {.nv = nv, .G = G, .acc_stride = acc_stride, .d = d, .span = t->span,
            .scale = 1.0f / sqrtf((float)d), .cap = kv->dims.softcap};
    s.m = (float *)(void *)p; p += al64(nv * sizeof(float));
    s.l = (float *)(void *)p; p += al64(nv * sizeof(float));
    s.acc = (float *)(void *)p; p += (size_t)nv * acc_stride * sizeof(float);
    s.accw = (float *)(void *)p; p += al64((size_t)nv * d * sizeof(float));
    float *tmp = (float *)(void *)p; p += al64((size_t)d * sizeof(float));
    int32_t *wpos = (int32_t *)(void *)p; p += al64((size_t)smax * sizeof(int32_t));
    float *qc = (float *)(void *)p; p += al64((size_t)nv * sizeof(float));   /* kmean=: q·c per query */
    obs ob0, *ob = NULL;
    if (kv->ev.attn && L->ev_score && raw) {
        ob0.raw = raw;
        ob0.bm = (float *)(void *)p; p += al64((size_t)kv->ev.nblk * nv * sizeof(float));
        ob0.b0 = (int *)(void *)p; p += al64((size_t)kv->ev.nblk * sizeof(int));
        ob0.bn = (int *)(void *)p;
        ob0.nblk = 0;
        ob0.cap = kv->ev.raw_cap;
        ob0.nv = nv;
        ob = &ob0;
    }
    /* what must start at zero (the slot is reused): query states, the accumulators */
    memset(qst, 0, nv * qsb);
    memset(s.acc, 0, (size_t)nv * acc_stride * sizeof(float));
    memset(s.accw, 0, (size_t)nv * d * sizeof(float));

    const int *qpos = t->q_pos + t->q0;
    int maxpos = INT32_MIN, minpos = INT32_MAX;
    for (int i = 0; i < t->nq; i++) { maxpos = VQ_MAX(maxpos, qpos[i]); minpos = VQ_MIN(minpos, qpos[i]); }
    /* a sliding-window layer: rows below every query's window are skipped a page at a time */
    const int64_t lo_min = t->span > 0 ? (int64_t)minpos - t->span + 1 : INT64_MIN;
    const float *kx = vq_kvg_kx(kv, t->layer, t->h);
    for (int j = 0; j < nv; j++) {
        const float *qrow = t->q + ((size_t)(t->q0 + j / G) * nh + (size_t)t->h * G + j % G) * d;
        if (kx) {   /* the coded keys are a ⊙ (k − c): q·k = (q ⊘ a)·k' + q·c */
            double c = 0;
            for (int i = 0; i < d; i++) { tmp[i] = qrow[i] * kx[2 * d + i]; c += (double)qrow[i] * kx[i]; }
            qc[j] = (float)c;
            qrow = tmp;
        }
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
        if (lo_min > INT32_MIN) {
            const int32_t *pp = (const int32_t *)(const void *)page;
            int32_t pmax = INT32_MIN;
            for (int r = 0; r < rows; r++) pmax = VQ_MAX(pmax, pp[r]);
            if (pmax < lo_min) continue;
        }
        sk->codec->score(sk, nv, qptr, page + kv->off_k[t->h], rows / kv->rpb[0], S);
        softmax_update(&s, S, rows, (const int32_t *)(const void *)page, qpos, kx ? qc : NULL);   /* + q·c */
        obs_record(ob, &s, S, rows, pg * kv->P);
        sv->codec->accumulate(sv, nv, S, page + kv->off_v[t->h], rows / kv->rpb[1], accptr);
    }

    for (int o = 0; o < sc; o += smax)
        fp_block(&s, S, wpos, kv, t, L->sink_k, L->sink_v, L->sink_pos, o, kv->S, VQ_MIN(smax, sc - o), qpos,
                 NULL, -1);
    for (int o = 0; o < wc; o += smax)
        fp_block(&s, S, wpos, kv, t, L->win_k, L->win_v, L->win_pos, L->win_start + o, kv->win_cap,
                 VQ_MIN(smax, wc - o), qpos, ob, L->n_coded + o);
    if (ob) obs_fold(kv, t, &s, ob, qpos);

    for (int j = 0; j < nv; j++) {
        float *o = t->y ? t->y + (size_t)j * d : t->out + ((size_t)(t->q0 + j / G) * nh + (size_t)t->h * G + j % G) * d;
        const float xl = t->xlse ? t->xlse[j] : -INFINITY;
        if (t->lse) t->lse[j] = s.l[j] > 0.0f ? s.m[j] + logf(s.l[j]) : -INFINITY;
        if (s.l[j] <= 0.0f) {   /* the query sees no row here: the tier's output, or zeros */
            if (xl == -INFINITY) memset(o, 0, (size_t)d * sizeof(float));
            else memcpy(o, t->xy + (size_t)j * d, (size_t)d * sizeof(float));
            continue;
        }
        sv->codec->finish(sv, s.acc + (size_t)j * acc_stride, tmp);
        const float *aw = s.accw + (size_t)j * d;
        if (xl == -INFINITY) {
            const float inv = 1.0f / s.l[j];
            for (int i = 0; i < d; i++) o[i] = (tmp[i] + aw[i]) * inv;
        } else {   /* (sum_main e^{s - m} v + e^{lse_tier} y_tier) / (l e^m + e^{lse_tier}), scaled by e^-M */
            const float M = s.m[j] > xl ? s.m[j] : xl, a = expf(s.m[j] - M), b = expf(xl - M);
            const float inv = 1.0f / (s.l[j] * a + b), *xy = t->xy + (size_t)j * d;
            for (int i = 0; i < d; i++) o[i] = ((tmp[i] + aw[i]) * a + xy[i] * b) * inv;
        }
    }
}

size_t vq_kvg_tier_out_bytes(const vq_kvg *kv) {
    const size_t nv = (size_t)QCHUNK * kv->G;
    return al64(nv * kv->d * sizeof(float)) + al64(nv * sizeof(float));
}

/* A free slot of a group's scratch (a tier's too: each task takes one of each, from separate
 * busy flags); only callers that attend on one cache from more threads than it has slots
 * (several layers at once) fall back to an allocation (NULL: out of memory). */
static uint8_t *slot_take(const vq_kvg *kv, int *slot) {
    *slot = -1;
    for (int j = 0; j < kv->n_slots && *slot < 0; j++)
        if (!__atomic_exchange_n(&kv->slot_busy[j], 1, __ATOMIC_ACQUIRE)) *slot = j;
    return *slot >= 0 ? kv->scratch + (size_t)*slot * kv->slot_bytes : vq_aligned_alloc(kv->slot_bytes);
}
static void slot_give(const vq_kvg *kv, int slot, uint8_t *mem) {
    if (slot >= 0) __atomic_store_n(&kv->slot_busy[slot], 0, __ATOMIC_RELEASE);
    else vq_aligned_free(mem);
}

/* Group layers local .. local + nloc - 1 (one cache layer: nloc = vh); layer is the cache's, for
 * messages. Arguments checked, n_q > 0. Every (local layer, KV head, query chunk) is one task, so a
 * cache layer split per head (heads=ada) still spreads its heads over the threads. */
vq_status vq_kvg_attend(const vq_kvg *kv, int local, int nloc, int layer, int span, int n_q,
                        const int *q_pos, const float *q, float *out, vq_err *err) {
    const int nchunks = (n_q + QCHUNK - 1) / QCHUNK, per = kv->H * nloc, ntasks = nchunks * per;
    double rows = 0;
    for (int l = local; l < local + nloc; l++)
        rows += kv->layers[l].n_coded + kv->layers[l].win_count + kv->layers[l].sink_count;
    /* demote= (never with heads=ada, so nloc is 1): the tier's pass first, when it holds rows,
     * merged by the main pass */
    const vq_kv_layer *TL = kv->dm.tier ? &kv->dm.tier->layers[local] : NULL;
    const int trows = TL ? TL->n_coded + TL->win_count + TL->sink_count : 0;
    rows += trows;
    const double work = (double)n_q * kv->G * kv->H * kv->d * rows;
    const int nthr = VQ_MAX(1, VQ_MIN(kv->n_slots, omp_get_max_threads()));
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthr) if (ntasks > 1 && work > 2e5)
    for (int i = 0; i < ntasks; i++) {
        const int l = local + (i % per) / kv->H;
        const size_t qoff = (size_t)vq_kvg_head0(kv, l) * kv->G * kv->d;   /* heads=ada: its query heads */
        task t = {.kv = kv, .L = &kv->layers[l], .layer = l, .span = span, .h = i % kv->H, .q0 = (i / per) * QCHUNK,
                  .q_pos = q_pos, .q = q + qoff, .out = out + qoff, .shared = nchunks > 1,
                  .reweight = kv->ev.attn && kv->ev.cfg.pol->reweight};
        t.nq = VQ_MIN(QCHUNK, n_q - t.q0);
        /* a free slot of the group's scratch; only callers that attend on one cache from more
         * threads than it has slots (several layers at once) fall back to an allocation */
        int slot;
        uint8_t *mem = slot_take(kv, &slot);
        const size_t rawn = (size_t)kv->ev.nv * kv->ev.raw_cap;
        float *raw = !kv->ev.raw ? NULL : slot >= 0 ? kv->ev.raw + (size_t)slot * rawn
                                                    : vq_aligned_alloc(rawn * sizeof(float));
        if (!mem || (kv->ev.raw && !raw)) {
            if (slot < 0) vq_aligned_free(raw);
            slot_give(kv, slot, mem);
#pragma omp atomic write
            failed = 1;
            continue;
        }
        int tslot = -1;
        uint8_t *tmem = trows ? slot_take(kv->dm.tier, &tslot) : NULL;
        if (tmem) {
            task tt = t;
            tt.kv = kv->dm.tier;
            tt.L = TL;
            tt.shared = tt.reweight = 0;
            tt.y = (float *)(void *)tmem;
            tt.lse = (float *)(void *)(tmem + al64((size_t)QCHUNK * kv->G * kv->d * sizeof(float)));
            run_task(&tt, tmem, NULL);
            t.xy = tt.y;
            t.xlse = tt.lse;
        }
        if (trows && !tmem) {
#pragma omp atomic write
            failed = 1;
        } else {
            run_task(&t, mem, raw);
        }
        if (tmem) slot_give(kv->dm.tier, tslot, tmem);
        if (slot < 0) vq_aligned_free(raw);
        slot_give(kv, slot, mem);
    }
    if (failed) return vq_err_set(err, VQ_ERR_NOMEM, "vq_kv_attend: layer %d: out of memory for "
                                  "scratch (n_q=%d)", layer, n_q);
    return VQ_OK;
}
