/* test_kv_decode_ref.c: the codec attention path inside a real model. stories260K decodes greedily
 * with each codec (every row of the codec table, default parameters, plus per-side and per-layer
 * override specs) and, in lockstep on the same tokens, with the same spec where attention is
 * computed over the DECODED rows in float64 (vq_kv_set_ref_attend): the greedy tokens must match.
 * The two runs' caches differ slightly (a row's rounding at a quantization boundary can go either
 * way), so their logits are held only to LOGIT_TOL; the exact check is per layer and step inside
 * the codec run: codec attention vs float64 attention over the same cache's decoded rows. */
#include <omp.h>
#include "eval/eval.h"
#include "codec/codec.h"
#include "../vq_test.h"

#define N_CTX 256
#define N_POS 200          /* positions in all (prompt + generated), as llama2.c's run -n 200 */
#define LOGIT_TOL 3e-2     /* codec run vs reference run, max |logit diff| (measured <= 6e-3: f16) */
#define ATT_TOL 1e-4       /* same cache: codec attention vs float64, relative to max |output| */

/* the codec run's queries per layer, captured by the forward tap, to re-ask the cache after */
typedef struct capture { int n, pos[8]; float *q[16]; size_t qw; double err; } capture;
static void tap(void *user, int layer, int n, const int *pos, const float *q, const float *k, const float *v) {
    (void)k; (void)v;
    capture *c = user;
    if (layer >= 16 || n > 8) return;
    c->n = n;
    memcpy(c->pos, pos, sizeof(int) * (size_t)n);
    memcpy(c->q[layer], q, sizeof(float) * c->qw * (size_t)n);
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
    a->f = vq_fwd_create(m, 7, &err);
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

static int arm_run(arm *a, const vq_model *m, const int *tok, int n, int pos0) {
    vq_err err;
    for (int i = 0; i < n; i += 7) {
        int nb = n - i < 7 ? n - i : 7;
        vq_status s = vq_forward(m, a->f, a->kv, tok + i, nb, pos0 + i, i + nb == n ? a->logits : NULL, 1, &err);
        CHECKF(s == VQ_OK, "forward: %s", err.msg);
        if (s) return 0;
        if (a->cap) check_layers(a, m);
    }
    return 1;
}

/* One spec: codec path, reference path and an f32 cache, all fed the codec path's tokens. */
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
    capture cap = { .qw = (size_t)m->cfg.n_heads * m->cfg.head_dim };
    for (int l = 0; l < m->cfg.n_layers && l < 16; l++) cap.q[l] = malloc(sizeof(float) * cap.qw * 8);
    A.cap = &cap;
    vq_fwd_set_tap(A.f, tap, &cap);
    const int V = m->cfg.vocab_size;
    int flips = 0, steps = 0, pos = 0, tok = -1;
    double dref = 0, df32 = 0;
    const int *feed = prompt;
    int n_feed = n_prompt;
    while (pos + n_feed <= N_POS) {
        if (!arm_run(&A, m, feed, n_feed, pos) || !arm_run(&R, m, feed, n_feed, pos) ||
            !arm_run(&F, m, feed, n_feed, pos))
            break;
        pos += n_feed;
        int ta = argmax(A.logits, V), tr = argmax(R.logits, V);
        for (int i = 0; i < V; i++) {
            dref = fmax(dref, fabs((double)A.logits[i] - R.logits[i]));
            df32 = fmax(df32, fabs((double)A.logits[i] - F.logits[i]));
        }
        if (ta != tr) {   /* only a near-tie may flip: the two top logits within the tolerance */
            flips++;
            double gap = fabs((double)A.logits[ta] - A.logits[tr]);
            CHECKF(gap <= 2 * LOGIT_TOL, "%s pos %d: codec path picks %d, reference %d, logit gap %.3g "
                   "(not a tie)", spec, pos, ta, tr, gap);
        }
        steps++;
        tok = ta;
        feed = &tok;
        n_feed = 1;
    }
    CHECKF(pos == N_POS, "%s: stopped at position %d", spec, pos);
    CHECKF(flips == 0, "%s: %d of %d greedy tokens differ from the reference path", spec, flips, steps);
    CHECKF(dref <= LOGIT_TOL, "%s: max |logit diff| codec path vs float64 over decoded rows %.3g > %.3g",
           spec, dref, LOGIT_TOL);
    CHECKF(cap.err <= ATT_TOL, "%s: attention from codes vs float64 over the same decoded rows: %.3g "
           "(relative) > %.3g", spec, cap.err, ATT_TOL);
    printf("%-42s steps %3d flips %d | attention vs float64 %.1e | logits vs ref run %.1e, vs f32 run "
           "%.1e | bits/elem %.2f\n", spec, steps, flips, cap.err, dref, df32, vq_kv_bits_per_elem(A.kv));
    for (int l = 0; l < m->cfg.n_layers && l < 16; l++) free(cap.q[l]);
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
    for (int i = 0; i < n_codecs; i++) run_spec(m, vq_codec_at(i)->name, prompt, np, &n_run);
    const char *extra[] = {
        "turboquant_mse:k=4,v=3",                  /* per-side bits */
        "k=turboquant_mse:bits=3;v=f16",           /* per-side codecs */
        "f16;window=8",                            /* full-precision window in front of codes */
        "turboquant_mse:k=4,v=4@0,-1=f16",         /* per-layer overrides */
        "qjl@1..3=polar;window=4@-1=turboquant_rvq",
    };
    for (size_t i = 0; i < VQ_ARRAY_LEN(extra); i++) run_spec(m, extra[i], prompt, np, &n_run);
    /* most of the table runs at head_dim 8 (those needing 32/64-multiples skip, printed above) */
    CHECKF(n_run >= (int)VQ_ARRAY_LEN(extra) + 5, "only %d specs ran", n_run);
    vq_model_free(m);
    return vq_t_done();
}
