/* test_kv_decode_ref.c: the codec attention path inside a real model. stories260K decodes greedily
 * with each codec (every row of the codec table, default parameters, plus per-side and per-layer
 * override specs) and, step by step on the same tokens, with the same spec where attention is
 * computed over the DECODED rows in float64 (vq_kv_set_ref_attend): logits and greedy tokens must
 * match.
 *
 * Why the reference arm is kept on the codec arm's own rows: two caches run independently drift
 * apart, and the drift says nothing about the attention path. The arms' layer outputs differ in the
 * last bits (float32 kernels vs float64), a K/V element lands on the other side of a quantizer
 * boundary in one of them, the caches then hold different codes, and a 5-layer model amplifies a
 * code step over the following tokens. Measured on AVX2 (EPYC): turboquant_rvq's caches first differ
 * after the prompt, layer 1 K at position 2, from inputs 3e-8 (4 float ulps) apart, and the logits
 * then differ by 0.089; rabitq first differs at position 114 (inputs 5e-7 apart), 0.033 by position
 * 200; even f16 differs in 173 rows by the end. Which elements cross depends on the ISA's rounding,
 * so the old cross-run tolerance passed on AVX-512 and failed on AVX2 without any kernel being wrong.
 * So after every step the reference cache is made identical to the codec cache: truncated to the
 * step's first position and given the codec arm's own K/V rows (the forward tap's, after RoPE) for
 * the step, and the two caches' decoded contents are checked bit for bit. Each step's logits then
 * compare codec attention with float64 attention over the very codes the codec arm holds; only the
 * step's own new rows (layers >= 1) are computed by each arm from its own hidden state and may still
 * cross a boundary: such steps are counted and printed, and held to the greedy-token check only. */
#include <omp.h>
#include "lab/eval.h"
#include "session/session_impl.h"
#include "codec/codec.h"
#include "../vq_test.h"

#define N_CTX 256
#define N_POS 200          /* positions in all (prompt + generated), as llama2.c's run -n 200 */
#define ATT_TOL 1e-4       /* same cache: codec attention vs float64, relative to max |output| */
/* Same codes on both sides: what differs is float32 arithmetic in the codec kernels vs float64, held
 * per layer to ATT_TOL of the attention output's scale. Through rmsnorm'd residual layers a relative
 * perturbation reaches the logits with gain O(1) per layer, so with L layers the logits are held to
 * L * ATT_TOL of their own scale (max |logit|, about 10-20 here). Measured: at most 3.2e-5 of it
 * over every spec here (f32, whose rows are stored exact, 4.4e-7): "same-code logits" below. */
#define LOGIT_REL_TOL(n_layers) ((n_layers) * ATT_TOL)

/* The codec arm's forward tap: each layer's queries (to re-ask the cache after the forward) and its
 * K/V rows by position (to give the reference arm exactly the rows the codec arm appended). */
typedef struct capture {
    int n, pos[8], kvw;
    float *q[16], *k[16], *v[16];
    size_t qw;
    double err;
} capture;
static void tap(void *user, int layer, int n, const int *pos, const float *q, const float *k, const float *v) {
    capture *c = user;
    if (layer >= 16 || n > 8) return;
    c->n = n;
    memcpy(c->pos, pos, sizeof(int) * (size_t)n);
    memcpy(c->q[layer], q, sizeof(float) * c->qw * (size_t)n);
    for (int i = 0; i < n; i++) {
        if (pos[i] < 0 || pos[i] >= N_CTX) continue;
        memcpy(c->k[layer] + (size_t)pos[i] * c->kvw, k + (size_t)i * c->kvw, sizeof(float) * (size_t)c->kvw);
        memcpy(c->v[layer] + (size_t)pos[i] * c->kvw, v + (size_t)i * c->kvw, sizeof(float) * (size_t)c->kvw);
    }
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) b = x[i] > x[b] ? i : b;
    return b;
}

typedef struct arm { vq_kv *kv; vq_fwd *f; float *logits; capture *cap; } arm;

static int arm_open(arm *a, const vq_model *m, const char *spec, int ref, const char **why) {
    static vq_err err;
    vq_kv_dims d = vq_model_kv_dims(m, N_CTX);
    a->kv = vq_kv_create_str(spec, &d, 7, &err);
    a->f = NULL;
    a->logits = NULL;
    a->cap = NULL;
    if (!a->kv) { *why = err.msg; return 0; }
    vq_kv_set_ref_attend(a->kv, ref);
    a->f = vq_fwd_create(m, 7, N_CTX, &err);
    a->logits = malloc(sizeof(float) * (size_t)m->cfg.vocab_size);
    CHECKF(a->f && a->logits, "fwd: %s", err.msg);
    return a->f && a->logits;
}
static void arm_close(arm *a) {
    vq_fwd_destroy(a->f);
    vq_kv_destroy(a->kv);
    free(a->logits);
}
/* after a forward: each layer's attention for the captured queries, codec path vs float64 */
static void check_layers(arm *a, const vq_model *m) {
    capture *c = a->cap;
    const size_t nw = c->qw * (size_t)c->n;
    float *o1 = malloc(sizeof(float) * nw), *o2 = malloc(sizeof(float) * nw);
    vq_err err;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        vq_kv_set_ref_attend(a->kv, 0);
        vq_status s1 = vq_kv_attend(a->kv, l, c->n, c->pos, c->q[l], o1, &err);
        vq_kv_set_ref_attend(a->kv, 1);
        vq_status s2 = vq_kv_attend(a->kv, l, c->n, c->pos, c->q[l], o2, &err);
        vq_kv_set_ref_attend(a->kv, 0);
        CHECKF(s1 == VQ_OK && s2 == VQ_OK, "attend: %s", err.msg);
        double mx = 1, e = 0;
        for (size_t i = 0; i < nw; i++) mx = fmax(mx, fabs((double)o2[i]));
        for (size_t i = 0; i < nw; i++) e = fmax(e, fabs((double)o1[i] - o2[i]) / mx);
        c->err = fmax(c->err, e);
    }
    free(o1);
    free(o2);
}

/* Rows of every layer of two caches, decoded: how many rows at positions >= from differ (bit for
 * bit, positions included), and the largest element difference (*maxd); -1 when the row counts
 * differ. */
typedef struct readbuf { float *ka, *va, *kb, *vb; int32_t *pa, *pb; } readbuf;
static int rows_differing(const vq_kv *a, const vq_kv *b, int n_layers, int kvw, int from, readbuf *rb,
                          double *maxd) {
    int bad = 0;
    *maxd = 0;
    vq_err err;
    for (int l = 0; l < n_layers; l++) {
        int n = vq_kv_rows(a, l);
        if (n != vq_kv_rows(b, l)) return -1;
        if (vq_kv_read(a, l, rb->ka, rb->va, rb->pa, &err) || vq_kv_read(b, l, rb->kb, rb->vb, rb->pb, &err)) {
            CHECKF(0, "vq_kv_read: %s", err.msg);
            return -1;
        }
        for (int r = 0; r < n; r++) {
            if (rb->pa[r] < from) continue;
            size_t o = (size_t)r * kvw, w = sizeof(float) * (size_t)kvw;
            bad += rb->pa[r] != rb->pb[r] || memcmp(rb->ka + o, rb->kb + o, w) || memcmp(rb->va + o, rb->vb + o, w);
            for (int e = 0; e < kvw; e++)
                *maxd = fmax(*maxd, fmax(fabs((double)rb->ka[o + e] - rb->kb[o + e]),
                                         fabs((double)rb->va[o + e] - rb->vb[o + e])));
        }
    }
    return bad;
}

/* Make R's cache hold exactly the codec arm's rows: drop R's rows from position p0 on (a coded
 * block goes whole, so fewer may stay) and append A's tapped rows up to `end`. */
static int sync_ref(vq_kv *r, const capture *c, int n_layers, int p0, int end) {
    vq_err err;
    int kept = vq_kv_truncate(r, p0);
    CHECKF(kept >= 0 && kept <= p0, "truncate to %d: %d", p0, kept);
    if (kept < 0) return 0;
    for (int l = 0; l < n_layers; l++) {
        const size_t o = (size_t)kept * c->kvw;
        vq_status s = vq_kv_append(r, l, kept, end - kept, c->k[l] + o, c->v[l] + o, &err);
        CHECKF(s == VQ_OK, "append layer %d rows %d..%d: %s", l, kept, end - 1, err.msg);
        if (s) return 0;
    }
    return 1;
}

/* One spec: codec arm A, reference arm R kept on A's rows, and an f32 cache F (printed only), all
 * fed A's tokens. */
static void run_spec(const vq_model *m, const char *spec, const int *prompt, int n_prompt, int *n_run) {
    arm A, R, F;
    const char *why = NULL;
    if (!arm_open(&A, m, spec, 0, &why)) {
        printf("SKIP %-40s cannot run on stories260K (head_dim %d): %s\n", spec, m->cfg.head_dim, why);
        arm_close(&A);
        return;
    }
    int ok = arm_open(&R, m, spec, 1, &why) && arm_open(&F, m, "f32", 0, &why);
    CHECKF(ok, "%s: %s", spec, why ? why : "");
    if (!ok) { arm_close(&A); return; }
    const int L = m->cfg.n_layers, V = m->cfg.vocab_size;
    capture cap = { .qw = (size_t)m->cfg.n_heads * m->cfg.head_dim, .kvw = m->cfg.n_kv_heads * m->cfg.head_dim };
    capture rcap = cap;   /* the reference arm's own new rows, before they reach its cache */
    for (int l = 0; l < L && l < 16; l++) {
        capture *cs[2] = { &cap, &rcap };
        for (int j = 0; j < 2; j++) {
            cs[j]->q[l] = malloc(sizeof(float) * cap.qw * 8);
            cs[j]->k[l] = calloc((size_t)N_CTX * cap.kvw, sizeof(float));
            cs[j]->v[l] = calloc((size_t)N_CTX * cap.kvw, sizeof(float));
        }
    }
    readbuf rb;
    const size_t rbn = (size_t)N_CTX * cap.kvw;
    rb.ka = malloc(sizeof(float) * rbn); rb.va = malloc(sizeof(float) * rbn);
    rb.kb = malloc(sizeof(float) * rbn); rb.vb = malloc(sizeof(float) * rbn);
    rb.pa = malloc(sizeof(int32_t) * N_CTX); rb.pb = malloc(sizeof(int32_t) * N_CTX);
    A.cap = &cap;
    vq_fwd_set_tap(A.f, tap, &cap);
    vq_fwd_set_tap(R.f, tap, &rcap);
    int flips = 0, steps = 0, pos = 0, tok = -1, crossed = 0, unsynced = 0;
    double dsame = 0, dcross = 0, df32 = 0;
    const int *feed = prompt;
    int n_feed = n_prompt;
    vq_err err;
    while (pos + n_feed <= N_POS) {
        int fail = 0, new_differ = 0;
        for (int i = 0; i < n_feed && !fail; i += 7) {
            const int nb = n_feed - i < 7 ? n_feed - i : 7, p0 = pos + i, last = i + nb == n_feed;
            arm *arms[3] = { &A, &R, &F };
            for (int a = 0; a < 3 && !fail; a++) {
                vq_status s = vq_forward(m, arms[a]->f, arms[a]->kv, feed + i, nb, p0,
                                         last ? arms[a]->logits : NULL, 1, &err);
                CHECKF(s == VQ_OK, "%s: forward: %s", spec, err.msg);
                fail = s != VQ_OK;
            }
            if (fail) break;
            check_layers(&A, m);
            /* The rows this step appended: each arm made its own from its own hidden state (layer 0's
             * are equal: no attention before them). A row crossed a quantizer boundary when the
             * stored rows differ by more than their inputs do (twice: rounding of exact codecs). */
            double din = 0, ddec;
            for (int l = 0; l < L; l++)
                for (size_t e = (size_t)p0 * cap.kvw; e < (size_t)(p0 + nb) * cap.kvw; e++)
                    din = fmax(din, fmax(fabs((double)cap.k[l][e] - rcap.k[l][e]),
                                         fabs((double)cap.v[l][e] - rcap.v[l][e])));
            int nd = rows_differing(A.kv, R.kv, L, cap.kvw, p0, &rb, &ddec);
            new_differ += nd < 0 || ddec > 2 * din;
            fail = !sync_ref(R.kv, &cap, L, p0, p0 + nb);
            int d = fail ? -1 : rows_differing(A.kv, R.kv, L, cap.kvw, 0, &rb, &ddec);
            unsynced += d != 0;
        }
        if (fail) break;
        pos += n_feed;
        int ta = argmax(A.logits, V), tr = argmax(R.logits, V);
        double dl = 0, mx = 0;
        for (int i = 0; i < V; i++) {
            dl = fmax(dl, fabs((double)A.logits[i] - R.logits[i]));
            mx = fmax(mx, fabs((double)R.logits[i]));
            df32 = fmax(df32, fabs((double)A.logits[i] - F.logits[i]));
        }
        if (new_differ) {   /* a new row crossed a quantizer boundary in one arm only */
            crossed++;
            dcross = fmax(dcross, dl);
        } else {
            dsame = fmax(dsame, dl / mx);
            CHECKF(dl <= LOGIT_REL_TOL(L) * mx, "%s pos %d: same codes, max |logit diff| codec path vs "
                   "float64 %.3g > %.3g (%d x %.0e of max |logit| %.3g)", spec, pos, dl,
                   LOGIT_REL_TOL(L) * mx, L, ATT_TOL, mx);
        }
        if (ta != tr) {   /* only a near-tie may flip: the two top logits within the tolerance */
            flips++;
            double gap = fabs((double)A.logits[ta] - A.logits[tr]);
            CHECKF(gap <= 2 * LOGIT_REL_TOL(L) * mx, "%s pos %d: codec path picks %d, reference %d, logit gap %.3g "
                   "(not a tie)", spec, pos, ta, tr, gap);
        }
        steps++;
        tok = ta;
        feed = &tok;
        n_feed = 1;
    }
    CHECKF(pos == N_POS, "%s: stopped at position %d", spec, pos);
    CHECKF(unsynced == 0, "%s: %d steps where the reference cache's rows differ from the codec "
           "cache's after the sync", spec, unsynced);
    CHECKF(flips == 0, "%s: %d of %d greedy tokens differ from the reference path", spec, flips, steps);
    CHECKF(cap.err <= ATT_TOL, "%s: attention from codes vs float64 over the same decoded rows: %.3g "
           "(relative) > %.3g", spec, cap.err, ATT_TOL);
    printf("%-42s steps %3d flips %d | attention vs float64 %.1e | same-code logits %.1e of max "
           "(%d steps; %d with a new row crossing, max %.1e) | vs f32 run %.1e | bits/elem %.2f\n",
           spec, steps, flips, cap.err, dsame, steps - crossed, crossed, dcross, df32,
           vq_kv_bits_per_elem(A.kv));
    for (int l = 0; l < L && l < 16; l++) {
        free(cap.q[l]); free(cap.k[l]); free(cap.v[l]);
        free(rcap.q[l]); free(rcap.k[l]); free(rcap.v[l]);
    }
    free(rb.ka); free(rb.va); free(rb.kb); free(rb.vb); free(rb.pa); free(rb.pb);
    (*n_run)++;
    arm_close(&A);
    arm_close(&R);
    arm_close(&F);
}

int main(void) {
    char mp[1024], tp[1024];
    vq_t_shared("data/stories260K.bin", mp, sizeof mp);
    vq_t_shared("data/tok512.bin", tp, sizeof tp);
    vq_err err; vq_err_clear(&err);
    omp_set_num_threads(1);   /* a tiny model: threads only add spin-waits on a loaded CI box */
    vq_model *m = vq_model_open(mp, tp, &err);
    CHECKF(m != NULL, "load: %s", err.msg);
    if (!m) return vq_t_done();
    CHECK(m->cfg.head_dim == 8 && m->cfg.n_layers == 5);
    const char *prompt_text = "Once upon a time";
    int prompt[64];
    int np = vq_tok_encode(m->tok, prompt_text, strlen(prompt_text), 1, 0, prompt, 64, &err);
    CHECKF(np > 1 && np < 64, "tokenize: %s", err.msg);
    if (np <= 1 || np >= 64) { vq_model_free(m); return vq_t_done(); }

    int n_run = 0, n_codecs = vq_codec_count();
    for (int i = 0; i < n_codecs; i++)   /* rows that need calib=FILE: test_kv_codecs, test_tq_split */
        if (!vq_codec_at(i)->needs_calib) run_spec(m, vq_codec_at(i)->name, prompt, np, &n_run);
    const char *extra[] = {
        "turboquant_mse:k=4,v=3",                  /* per-side bits */
        "k=turboquant_mse:bits=3;v=f16",           /* per-side codecs */
        "f16;window=8",                            /* full-precision window in front of codes */
        "turboquant_mse:k=4,v=4@0,-1=f16",         /* per-layer overrides */
        "qjl@1..3=polar;window=4@-1=turboquant_rvq",
    };
    for (size_t i = 0; i < VQ_ARRAY_LEN(extra); i++) run_spec(m, extra[i], prompt, np, &n_run);
    vq_model_free(m);
    /* a test none of whose cases could run has tested nothing: CTest's skip, not a pass */
    if (n_run == 0 && vq_t_fail == 0) VQ_SKIP("no spec can run on stories260K's head_dim (all skipped above)");
    /* most of the table runs at head_dim 8 (those needing 32/64-multiples skip, printed above) */
    CHECKF(n_run >= (int)VQ_ARRAY_LEN(extra) + 5, "only %d specs ran", n_run);
    return vq_t_done();
}
