/* lab_tap.c: the functions of the lab's door (session/lab_tap.h): a forward tap on a session, a
 * decode that leaves the eviction step undone, the policy's scores, the model's config hash, a
 * cache and a forward apart from any session (by opaque handle), the dot kernel, the codec rows'
 * calibration need, and bench's fast fill (a cache grown by repeating a real prefill's rows). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "session/lab_tap.h"
#include "session/session_impl.h"
#include "codec/codec.h"
#include "codec/calib.h"
#include "kernels/kernels.h"

void vq_lab_session_set_tap(vq_session *s, vq_lab_tap tap, void *user) {
    if (s) vq_fwd_set_tap(s->f, tap, user);
}

void vq_lab_session_set_attn_tap(vq_session *s, vq_lab_attn_tap tap, void *user) {
    if (s) vq_fwd_set_attn_tap(s->f, tap, user);
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
    if (vq_session_cpu_only(s, "eviction scores", err)) return err ? err->code : VQ_ERR_UNSUPPORTED;
    return vq_kv_evict_scores(s->kv, layer, scores, pos, err);
}

uint64_t vq_lab_model_config_hash(const vq_model *m) { return m ? vq_model_config_hash(m, NULL, 0) : 0; }
float vq_lab_model_attn_softcap(const vq_model *m) { return m ? m->cfg.attn_softcap : 0.0f; }

/* ---- a cache apart from any session, a forward apart from it ---- */
vq_kv *vq_lab_kv_create(const vq_kv_spec *spec, int n_layers, int n_heads, int n_kv_heads, int head_dim,
                        int max_ctx, float softcap, uint64_t seed, vq_err *err) {
    const vq_kv_dims d = {n_layers, n_heads, n_kv_heads, head_dim, max_ctx, NULL, 0, softcap};
    return vq_kv_create(spec, &d, seed, err);
}

vq_kv *vq_lab_kv_for_model(const vq_model *m, const vq_kv_spec *spec, int max_ctx, uint64_t seed, vq_err *err) {
    if (!m) { vq_err_set(err, VQ_ERR_ARG, "vq_lab_kv_for_model: no model"); return NULL; }
    const vq_kv_dims d = vq_model_kv_dims(m, max_ctx);
    return vq_kv_create(spec, &d, seed, err);
}

void vq_lab_kv_free(vq_kv *kv) { vq_kv_destroy(kv); }
vq_status vq_lab_kv_append(vq_kv *kv, int layer, int pos0, int n, const float *k, const float *v, vq_err *err) {
    return vq_kv_append(kv, layer, pos0, n, k, v, err);
}
vq_status vq_lab_kv_attend(vq_kv *kv, int layer, int n_q, const int *q_pos, const float *q, float *out,
                           vq_err *err) {
    return vq_kv_attend(kv, layer, n_q, q_pos, q, out, err);
}
vq_status vq_lab_kv_read(const vq_kv *kv, int layer, float *k, float *v, int32_t *pos, vq_err *err) {
    return vq_kv_read(kv, layer, k, v, pos, err);
}
int vq_lab_kv_rows(const vq_kv *kv, int layer) { return vq_kv_rows(kv, layer); }
int vq_lab_kv_window_rows(const vq_kv *kv) { return vq_kv_window_rows(kv); }
size_t vq_lab_kv_bytes(const vq_kv *kv) { return vq_kv_bytes(kv); }
double vq_lab_kv_bits(const vq_kv *kv) { return vq_kv_bits_per_elem(kv); }
const char *vq_lab_kv_spec_text(const vq_kv *kv) { return vq_kv_spec_str(kv); }

int vq_lab_kv_codec(const vq_kv *kv, int layer, int side, vq_lab_codec *out) {
    const vq_codec_state *st = kv && (side == 0 || side == 1) ? vq_kv_codec_state(kv, layer, side ? VQ_SIDE_V : VQ_SIDE_K)
                                                              : NULL;   /* NULL for a bad layer */
    memset(out, 0, sizeof *out);
    if (!st) return -1;
    *out = (vq_lab_codec){.st = st, .rows_per_block = st->rows_per_block, .acc_floats = st->acc_floats,
                          .block_bytes = st->block_bytes, .qstate_bytes = st->qstate_bytes,
                          .encode = st->codec->encode, .prep_query = st->codec->prep_query,
                          .score = st->codec->score, .accumulate = st->codec->accumulate,
                          .finish = st->codec->finish};
    return 0;
}

vq_fwd *vq_lab_fwd_create(const vq_model *m, int max_batch, int n_ctx, vq_err *err) {
    return vq_fwd_create(m, max_batch, n_ctx, err);
}
void vq_lab_fwd_free(vq_fwd *f) { vq_fwd_destroy(f); }

vq_status vq_lab_forward(const vq_model *m, vq_fwd *f, vq_kv *kv, const int *tokens, int n, int pos0,
                         float *logits, int evict, vq_err *err) {
    if (evict) vq_kv_evict_begin(kv, pos0, n);
    vq_status s = vq_forward(m, f, kv, tokens, n, pos0, logits, 1, err);
    if (!s && evict) vq_kv_evict_end(kv, pos0, n);
    return s;
}

float vq_lab_dot_f32(const float *a, const float *b, int n) { return vq_dot_f32(a, b, n); }

int vq_lab_codec_needs_calib(int i) {
    const vq_codec *c = i >= 0 && i < vq_codec_count() ? vq_codec_at(i) : NULL;
    return c ? c->needs_calib != 0 : 0;
}

/* ---- the calibration file ---- */
static void to_calib(const vq_lab_calib *c, vq_calib *o) {
    memset(o, 0, sizeof *o);
    snprintf(o->model, sizeof o->model, "%s", c->model);
    o->config_hash = c->config_hash;
    o->n_layers = c->n_layers;
    o->n_heads = c->n_heads;
    o->n_kv_heads = c->n_kv_heads;
    o->head_dim = c->head_dim;
    o->rope_dim = c->rope_dim;
    o->rope_neox = c->rope_neox;
    o->n_tokens = c->n_tokens;
    o->pair_energy = c->pair_energy;
    o->k_mean = c->k_mean;
    o->k_sq = c->k_sq;
    o->v_sq = c->v_sq;
    o->q_mean = c->q_mean;
    o->q_sq = c->q_sq;
    o->q_filter = c->q_filter;
    o->attn_cos = c->attn_cos;
    o->vi_sub_k = c->vi_sub_k;
    o->vi_sub_v = c->vi_sub_v;
    o->vi_seed = c->vi_seed;
    o->vi_vnorm = c->vi_vnorm;
    o->vi_smooth = c->vi_smooth;
    o->vi_cb_k = c->vi_cb_k;
    o->vi_cb_v = c->vi_cb_v;
    o->has_lowrank = c->has_lowrank;
    o->k_eig = c->k_eig;
    o->k_basis = c->k_basis;
    o->k_dec = c->k_dec;
    o->v_eig = c->v_eig;
    o->v_basis = c->v_basis;
}

vq_status vq_lab_vi_train_head(const float *k, const float *v, int n, int d, int sub_k, int sub_v,
                               double alpha, int vnorm, uint64_t rot_seed, uint64_t seed, float *smooth, float *cb_k,
                               float *cb_v, vq_err *err) {
    return vq_vi_train_head(k, v, n, d, sub_k, sub_v, alpha, vnorm, rot_seed, seed, smooth, cb_k, cb_v, err);
}

vq_status vq_lab_calib_write(const vq_lab_calib *c, const char *path, size_t *file_bytes, vq_err *err) {
    if (!c || !path) return vq_err_set(err, VQ_ERR_ARG, "vq_lab_calib_write: no calibration or path");
    vq_calib o;   /* the caller's arrays, borrowed */
    to_calib(c, &o);
    vq_status s = vq_calib_write(&o, path, err);
    if (!s && file_bytes) *file_bytes = vq_calib_file_bytes(&o);
    return s;
}

vq_status vq_lab_calib_read(const char *path, vq_lab_calib *out, vq_err *err) {
    memset(out, 0, sizeof *out);
    vq_calib c;
    vq_status s = vq_calib_read(path, &c, err);
    if (s) return s;
    /* the arrays move to out (vq_lab_calib_free frees them as vq_calib_free would) */
    snprintf(out->model, sizeof out->model, "%s", c.model);
    out->config_hash = c.config_hash;
    out->n_layers = c.n_layers;
    out->n_heads = c.n_heads;
    out->n_kv_heads = c.n_kv_heads;
    out->head_dim = c.head_dim;
    out->rope_dim = c.rope_dim;
    out->rope_neox = c.rope_neox;
    out->n_tokens = c.n_tokens;
    out->pair_energy = c.pair_energy;
    out->k_mean = c.k_mean;
    out->k_sq = c.k_sq;
    out->v_sq = c.v_sq;
    out->q_mean = c.q_mean;
    out->q_sq = c.q_sq;
    out->q_filter = c.q_filter;
    out->attn_cos = c.attn_cos;
    out->vi_sub_k = c.vi_sub_k;
    out->vi_sub_v = c.vi_sub_v;
    out->vi_seed = c.vi_seed;
    out->vi_vnorm = c.vi_vnorm;
    out->vi_smooth = c.vi_smooth;
    out->vi_cb_k = c.vi_cb_k;
    out->vi_cb_v = c.vi_cb_v;
    out->has_lowrank = c.has_lowrank;
    out->k_eig = c.k_eig;
    out->k_basis = c.k_basis;
    out->k_dec = c.k_dec;
    out->v_eig = c.v_eig;
    out->v_basis = c.v_basis;
    return VQ_OK;
}

void vq_lab_calib_free(vq_lab_calib *c) {
    if (!c) return;
    vq_calib o;
    to_calib(c, &o);
    vq_calib_free(&o);
    memset(c, 0, sizeof *c);
}

int vq_lab_calib_pair_ch(const vq_lab_calib *c, int p, int which) {
    vq_calib o = {.head_dim = c->head_dim, .rope_neox = c->rope_neox};
    return vq_calib_pair_ch(&o, p, which);
}

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
    if (vq_session_cpu_only(dst, "fill (--fill)", err)) return err ? err->code : VQ_ERR_UNSUPPORTED;
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
