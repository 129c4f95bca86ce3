/* lab_tap.c: the functions of the lab's door (session/lab_tap.h): a forward tap on a session, a
 * decode that leaves the eviction step undone, the policy's scores, the model's config hash, and
 * bench's fast fill (a cache grown by repeating a real prefill's rows). */
#include <stdlib.h>
#include <string.h>

#include "session/lab_tap.h"
#include "session/session_impl.h"

void vq_lab_session_set_tap(vq_session *s, vq_lab_tap tap, void *user) {
    if (s) vq_fwd_set_tap(s->f, tap, user);
}

vq_status vq_lab_session_observe(vq_session *s, const int *tokens, int n, vq_err *err) {
    vq_err_clear(err);
    if (!s || n < 0 || (n > 0 && !tokens)) return vq_err_set(err, VQ_ERR_ARG, "vq_lab_session_observe: bad arguments");
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->m->cfg.vocab_size)
            return vq_err_set(err, VQ_ERR_ARG, "token %d (id %d) is outside the vocabulary", i, tokens[i]);
    if ((long)s->n_tok + n > s->n_ctx)
        return vq_err_set(err, VQ_ERR_RANGE, "%d tokens do not fit: the session holds %d of %d positions",
                          n, s->n_tok, s->n_ctx);
    vq_status st = vq_session_flush(s, err);
    return st ? st : vq_session_run(s, tokens, n, NULL, 0, 0, err);
}

vq_status vq_lab_session_evict_scores(const vq_session *s, int layer, float *scores, int32_t *pos,
                                      vq_err *err) {
    if (!s) return vq_err_set(err, VQ_ERR_ARG, "vq_lab_session_evict_scores: no session");
    return vq_kv_evict_scores(s->kv, layer, scores, pos, err);
}

uint64_t vq_lab_model_config_hash(const vq_model *m) { return m ? vq_model_config_hash(m, NULL, 0) : 0; }
float vq_lab_model_attn_softcap(const vq_model *m) { return m ? m->cfg.attn_softcap : 0.0f; }

/* ---- bench's fast fill ---- */
typedef struct pos_ix { int32_t pos; int ix; } pos_ix;
static int cmp_pos(const void *a, const void *b) {
    const pos_ix *x = a, *y = b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

vq_status vq_lab_kv_fill_repeat(const vq_model *m, vq_kv *dst, int from, int to, const vq_kv *src, int chunk,
                                vq_err *err) {
    vq_err_clear(err);
    if (!m || !dst || !src || from < 0 || to < from || chunk < 1)
        return vq_err_set(err, VQ_ERR_ARG, "fill: bad arguments (from %d, to %d, chunk %d)", from, to, chunk);
    if (vq_kv_evicting(dst) || vq_kv_evicting(src))
        return vq_err_set(err, VQ_ERR_ARG, "fill: the spec evicts rows, and a fill runs no attention, so the "
                                           "policy's scores would be made up (measure it with a real prefill)");
    const vq_kv_dims d = vq_model_kv_dims(m, 1);
    const size_t w = (size_t)d.n_kv_heads * d.head_dim;
    vq_status st = VQ_OK;
    for (int l = 0; l < d.n_layers && !st && to > from; l++) {
        const int r = vq_kv_rows(src, l);
        if (r < 1) return vq_err_set(err, VQ_ERR_STATE, "fill: the source cache holds no rows in layer %d", l);
        const int nb_max = VQ_MIN(chunk, to - from);
        float *k = malloc(((size_t)r + nb_max) * w * 2 * sizeof(float));
        int32_t *pos = malloc((size_t)r * sizeof(int32_t));
        pos_ix *ord = malloc((size_t)r * sizeof(pos_ix));
        if (!k || !pos || !ord) st = vq_err_set(err, VQ_ERR_NOMEM, "fill: out of memory for %d rows", r);
        float *v = k ? k + (size_t)r * w : NULL, *ck = v ? v + (size_t)r * w : NULL, *cv = ck ? ck + (size_t)nb_max * w : NULL;
        if (!st) st = vq_kv_read(src, l, k, v, pos, err);
        if (!st) {
            for (int i = 0; i < r; i++) ord[i] = (pos_ix){ pos[i], i };
            qsort(ord, (size_t)r, sizeof *ord, cmp_pos);   /* storage order puts the window and sinks last */
        }
        for (int p = from; !st && p < to;) {
            const int nb = VQ_MIN(nb_max, to - p);
            for (int i = 0; i < nb; i++) {
                const int ix = ord[(p + i) % r].ix;
                memcpy(ck + (size_t)i * w, k + (size_t)ix * w, w * sizeof(float));
                memcpy(cv + (size_t)i * w, v + (size_t)ix * w, w * sizeof(float));
            }
            st = vq_kv_append(dst, l, p, nb, ck, cv, err);
            p += nb;
        }
        free(ord);
        free(pos);
        free(k);
    }
    return st;
}

vq_status vq_lab_session_fill_repeat(vq_session *dst, const vq_session *src, int depth, vq_err *err) {
    vq_err_clear(err);
    if (!dst || !src) return vq_err_set(err, VQ_ERR_ARG, "fill: no session");
    if (dst->m != src->m) return vq_err_set(err, VQ_ERR_ARG, "fill: the two sessions hold different models");
    if (dst->n_tok != dst->pos || src->n_tok != src->pos)
        return vq_err_set(err, VQ_ERR_STATE, "fill: a session holds a pending token (run it first)");
    if (src->pos < 1) return vq_err_set(err, VQ_ERR_STATE, "fill: the source session holds no tokens");
    if (depth < dst->pos || depth > dst->n_ctx)
        return vq_err_set(err, VQ_ERR_RANGE, "fill: depth %d is outside %d..%d (the session's position and n_ctx)",
                          depth, dst->pos, dst->n_ctx);
    const int from = dst->pos, period = src->pos;
    vq_status st = vq_lab_kv_fill_repeat(dst->m, dst->kv, from, depth, src->kv, dst->n_batch, err);
    if (st) {   /* the rows appended so far go (a coded block whole or not at all: maybe a few more) */
        int kept = vq_kv_truncate(dst->kv, from);
        dst->pos = dst->n_tok = kept < 0 ? 0 : kept;
        if (kept < 0) vq_kv_clear(dst->kv);
        dst->have_logits = 0;
        return st;
    }
    for (int p = from; p < depth; p++) dst->tokens[p] = src->tokens[p % period];
    dst->pos = dst->n_tok = depth;
    dst->have_logits = 0;
    return VQ_OK;
}
