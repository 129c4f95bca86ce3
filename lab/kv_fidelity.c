/* kv_fidelity.c: per-layer fidelity of KV codecs on a real model's rows: key/value cosine, KL of
 * the attention weights against exact, attention-output relative error, bits per element. Rows are
 * captured once (f32 cache, tap after RoPE) and replayed through each codec's store in decode order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/vqlab.h"
#include "session/lab_tap.h"
#include "lab/kv_fidelity.h"

#define KF_CHUNK 64

static void tap(void *user, int layer, int n, const int *pos, const float *q, const float *k,
                const float *v) {
    vq_kvfid_capture *c = user;
    size_t wq = (size_t)c->n_heads * c->hd, wk = (size_t)c->n_kv * c->hd;
    for (int i = 0; i < n; i++) {
        if (pos[i] < 0 || pos[i] >= c->n || layer < 0 || layer >= c->n_layers) continue;
        memcpy(c->q[layer] + pos[i] * wq, q + i * wq, wq * sizeof(float));
        memcpy(c->k[layer] + pos[i] * wk, k + i * wk, wk * sizeof(float));
        memcpy(c->v[layer] + pos[i] * wk, v + i * wk, wk * sizeof(float));
    }
}

void vq_kvfid_capture_free(vq_kvfid_capture *c) {
    if (!c) return;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->q) free(c->q[l]);
        if (c->k) free(c->k[l]);
        if (c->v) free(c->v[l]);
        if (c->o) free(c->o[l]);
    }
    free(c->q); free(c->k); free(c->v); free(c->o);
    free(c);
}

vq_kvfid_capture *vq_kvfid_capture_run(const vq_model *m, const int *tok, int n, vq_err *err) {
    if (n < 1) { vq_err_set(err, VQ_ERR_ARG, "kv-fidelity: %d tokens (need >= 1)", n); return NULL; }
    vq_kvfid_capture *c = calloc(1, sizeof *c);
    if (!c) { vq_err_set(err, VQ_ERR_NOMEM, "kv-fidelity: out of memory"); return NULL; }
    const vq_model_info mi = vq_model_get_info(m);
    c->n = n; c->n_layers = mi.n_layers; c->n_heads = mi.n_heads;
    c->n_kv = mi.n_kv_heads; c->hd = mi.head_dim;
    c->softcap = vq_lab_model_attn_softcap(m);
    size_t wq = (size_t)c->n_heads * c->hd, wk = (size_t)c->n_kv * c->hd;
    c->q = calloc((size_t)c->n_layers, sizeof(float *)); c->k = calloc((size_t)c->n_layers, sizeof(float *));
    c->v = calloc((size_t)c->n_layers, sizeof(float *)); c->o = calloc((size_t)c->n_layers, sizeof(float *));
    int bad = !c->q || !c->k || !c->v || !c->o;
    for (int l = 0; !bad && l < c->n_layers; l++) {
        c->q[l] = calloc((size_t)n * wq, sizeof(float)); c->o[l] = calloc((size_t)n * wq, sizeof(float));
        c->k[l] = calloc((size_t)n * wk, sizeof(float)); c->v[l] = calloc((size_t)n * wk, sizeof(float));
        bad = !c->q[l] || !c->k[l] || !c->v[l] || !c->o[l];
    }
    if (bad) { vq_kvfid_capture_free(c); vq_err_set(err, VQ_ERR_NOMEM, "kv-fidelity: out of memory for %d tokens", n); return NULL; }
    /* an f32 session whose forward the tap watches, chunks of KF_CHUNK tokens */
    vq_session_params sp = vq_session_default_params();
    sp.n_ctx = n;
    sp.n_batch = KF_CHUNK;
    sp.kv_seed = 1;
    sp.allow_ctx_over_train = 1;
    vq_kv_spec *f32 = vq_kv_spec_parse("f32", err);
    vq_session *ss = f32 ? vq_session_create(m, f32, &sp, err) : NULL;
    vq_status s = ss ? VQ_OK : (err->code ? err->code : VQ_ERR_NOMEM);
    if (!s) vq_lab_session_set_tap(ss, tap, c);
    if (!s) s = vq_session_decode(ss, tok, n, NULL, 0, err);
    /* exact outputs: the same rows in a 1-layer f32 cache, every query causal */
    int *pos = malloc(sizeof(int) * (size_t)n);
    if (!s && !pos) s = vq_err_set(err, VQ_ERR_NOMEM, "kv-fidelity: out of memory");
    for (int i = 0; !s && i < n; i++) pos[i] = i;
    /* unbounded: kv-fidelity measures full causal attention */
    for (int l = 0; l < c->n_layers && !s; l++) {
        vq_kv *r = vq_lab_kv_create(f32, 1, c->n_heads, c->n_kv, c->hd, n, c->softcap, 1, err);
        if (!r) { s = err->code; break; }
        s = vq_lab_kv_append(r, 0, 0, n, c->k[l], c->v[l], err);
        if (!s) s = vq_lab_kv_attend(r, 0, n, pos, c->q[l], c->o[l], err);
        vq_lab_kv_free(r);
    }
    free(pos);
    vq_session_free(ss);
    vq_kv_spec_free(f32);
    if (s) { vq_kvfid_capture_free(c); return NULL; }
    return c;
}

static double cosine(const float *a, const float *b, int d) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < d; i++) { ab += (double)a[i] * b[i]; aa += (double)a[i] * a[i]; bb += (double)b[i] * b[i]; }
    if (aa == 0 && bb == 0) return 1;
    if (aa == 0 || bb == 0) return 0;
    return ab / sqrt(aa * bb);
}

/* KL(p || p_hat) for one query over rows 0..t: p from exact keys K, p_hat from khat (both rows by
 * position, stride w floats, this KV head at offset off). sc: 2 x (t+1) doubles of scratch. */
static double kl_one(const float *q, const float *K, const float *khat, size_t w, size_t off, int d,
                     int t, double *sc) {
    double *s = sc, *sh = sc + t + 1, mx = -INFINITY, mh = -INFINITY, scale = 1.0 / sqrt((double)d);
    for (int j = 0; j <= t; j++) {
        s[j] = vq_lab_dot_f32(q, K + j * w + off, d) * scale;
        sh[j] = vq_lab_dot_f32(q, khat + j * w + off, d) * scale;
        mx = fmax(mx, s[j]);
        mh = fmax(mh, sh[j]);
    }
    double z = 0, zh = 0;
    for (int j = 0; j <= t; j++) { z += exp(s[j] - mx); zh += exp(sh[j] - mh); }
    double lz = mx + log(z), lzh = mh + log(zh), kl = 0;
    for (int j = 0; j <= t; j++) {
        double lp = s[j] - lz, lph = sh[j] - lzh;
        kl += exp(lp) * (lp - lph);
    }
    return kl > 0 ? kl : 0;   /* rounding can give -1e-17 */
}

/* Decoded rows of the cache put back in position order (rows at positions >= n are ignored). */
static vq_status read_by_pos(vq_kv *kv, int layer, const vq_kvfid_capture *c, float *kr, float *vr,
                             int32_t *pos, float *kh, float *vh, vq_err *err) {
    vq_status s = vq_lab_kv_read(kv, layer, kr, vr, pos, err);
    if (s) return s;
    size_t w = (size_t)c->n_kv * c->hd;
    int rows = vq_lab_kv_rows(kv, layer);
    for (int i = 0; i < rows; i++) {
        if (pos[i] < 0 || pos[i] >= c->n) continue;
        memcpy(kh + (size_t)pos[i] * w, kr + (size_t)i * w, w * sizeof(float));
        memcpy(vh + (size_t)pos[i] * w, vr + (size_t)i * w, w * sizeof(float));
    }
    return VQ_OK;
}

static vq_status eval_layer(const vq_kvfid_capture *c, int l, const vq_kv_spec *spec, uint64_t seed,
                            vq_kvfid_result *r, vq_err *err) {
    const int n = c->n, d = c->hd, nh = c->n_heads, H = c->n_kv, G = nh / H;
    const size_t w = (size_t)H * d, wq = (size_t)nh * d;
    vq_err e; vq_err_clear(&e);
    vq_kv *kv = vq_lab_kv_create(spec, 1, nh, H, d, n, c->softcap, seed + 1000003ull * (uint64_t)l, &e);
    int cl = 0;          /* the cache layer the rows go to */
    size_t fixed0 = 0;   /* a whole-model cache: the other layers' share of its fixed bytes */
    if (!kv) {   /* a spec with calib=FILE (or per-layer overrides) needs the model's layer count: a
                  * cache of every layer, only layer l filled */
        vq_err e2; vq_err_clear(&e2);
        kv = vq_lab_kv_create(spec, c->n_layers, nh, H, d, n, c->softcap, seed + 1000003ull * (uint64_t)l, &e2);
        if (kv) {
            cl = l;
            fixed0 = vq_lab_kv_bytes(kv) / (size_t)c->n_layers * (size_t)(c->n_layers - 1);
        }
    }
    if (!kv) {   /* unusable here (e.g. head_dim): reported, not fatal */
        r->ok = 0;
        snprintf(r->why, sizeof r->why, "%.250s", e.msg);
        return VQ_OK;
    }
    vq_lab_codec ck, cv;   /* the codes' geometry, K and V */
    vq_lab_kv_codec(kv, cl, 0, &ck);
    vq_lab_kv_codec(kv, cl, 1, &cv);
    const int rk = ck.rows_per_block, rv = cv.rows_per_block;
    const size_t bk = ck.block_bytes, bv = cv.block_bytes;
    /* keys a query sees change after it ran only when rows wait in a window or a multi-row block */
    int dynamic = vq_lab_kv_window_rows(kv) > 0 || rk > 1 || rv > 1;
    float *kr = malloc(sizeof(float) * n * w), *vr = malloc(sizeof(float) * n * w);
    float *kh = calloc((size_t)n * w, sizeof(float)), *vh = calloc((size_t)n * w, sizeof(float));
    float *oh = malloc(sizeof(float) * n * wq);
    int32_t *pos = malloc(sizeof(int32_t) * n);
    double *sc = malloc(sizeof(double) * 2 * (n + 1) * (size_t)nh), *klq = calloc((size_t)n * nh, sizeof(double));
    vq_status s = (kr && vr && kh && vh && oh && pos && sc && klq) ? VQ_OK : vq_err_set(err, VQ_ERR_NOMEM, "kv-fidelity: out of memory");
    const float *Q = c->q[l], *K = c->k[l], *V = c->v[l];
    for (int t = 0; t < n && !s; t++) {
        s = vq_lab_kv_append(kv, cl, t, 1, K + t * w, V + t * w, err);
        if (!s) s = vq_lab_kv_attend(kv, cl, 1, &t, Q + t * wq, oh + t * wq, err);
        if (!s && dynamic) {
            s = read_by_pos(kv, cl, c, kr, vr, pos, kh, vh, err);
            #pragma omp parallel for schedule(static)
            for (int h = 0; h < nh; h++)
                klq[(size_t)t * nh + h] = kl_one(Q + t * wq + (size_t)h * d, K, kh, w, (size_t)(h / G) * d, d, t,
                                                 sc + (size_t)h * 2 * (n + 1));
        }
    }
    if (!s) s = read_by_pos(kv, cl, c, kr, vr, pos, kh, vh, err);   /* the stored state after all rows */
    if (!s && !dynamic) {
        #pragma omp parallel for schedule(dynamic, 1)
        for (int h = 0; h < nh; h++)
            for (int t = 0; t < n; t++)
                klq[(size_t)t * nh + h] = kl_one(Q + t * wq + (size_t)h * d, K, kh, w, (size_t)(h / G) * d, d, t,
                                                 sc + (size_t)h * 2 * (n + 1));
    }
    if (!s) {
        double kc = 0, vc = 0, kl = 0, re = 0;
        for (int t = 0; t < n; t++)
            for (int h = 0; h < H; h++) {
                kc += cosine(K + t * w + h * d, kh + t * w + h * d, d);
                vc += cosine(V + t * w + h * d, vh + t * w + h * d, d);
            }
        for (int t = 0; t < n; t++)
            for (int h = 0; h < nh; h++) {
                const float *o = c->o[l] + t * wq + h * d, *x = oh + t * wq + h * d;
                double num = 0, den = 0;
                for (int i = 0; i < d; i++) { num += (double)(o[i] - x[i]) * (o[i] - x[i]); den += (double)o[i] * o[i]; }
                re += den > 0 ? sqrt(num / den) : sqrt(num);
                kl += klq[(size_t)t * nh + h];
            }
        vq_kvfid_layer *L = &r->layer[l];
        L->key_cos = kc / ((double)n * H);
        L->val_cos = vc / ((double)n * H);
        L->kl = kl / ((double)n * nh);
        L->rel_err = re / ((double)n * nh);
        if (l == 0) {
            r->bytes = vq_lab_kv_bytes(kv) - fixed0;
            r->bits = cl || fixed0 ? (double)r->bytes * 8.0 / ((double)n * H * d * 2) : vq_lab_kv_bits(kv);
            r->code_bits = 4.0 * ((double)bk / rk + (double)bv / rv) / d;
            snprintf(r->norm, sizeof r->norm, "%s", vq_lab_kv_spec_text(kv));
        }
    }
    free(kr); free(vr); free(kh); free(vh); free(oh); free(pos); free(sc); free(klq);
    vq_lab_kv_free(kv);
    return s;
}

vq_status vq_kvfid_eval(const vq_kvfid_capture *c, const char *spec, uint64_t seed,
                        vq_kvfid_result *r, vq_err *err) {
    memset(r, 0, sizeof *r);
    vq_err e;
    vq_kv_spec *ps = vq_kv_spec_parse(spec, &e);
    if (!ps) {   /* an unknown spec is reported like an unusable one, not fatal */
        snprintf(r->spec, sizeof r->spec, "%s", spec);
        snprintf(r->why, sizeof r->why, "%.250s", e.msg);
        return VQ_OK;
    }
    vq_status s = vq_kvfid_eval_spec(c, ps, seed, r, err);
    snprintf(r->spec, sizeof r->spec, "%s", spec);
    vq_kv_spec_free(ps);
    return s;
}

vq_status vq_kvfid_eval_spec(const vq_kvfid_capture *c, const vq_kv_spec *spec, uint64_t seed,
                             vq_kvfid_result *r, vq_err *err) {
    memset(r, 0, sizeof *r);
    snprintf(r->spec, sizeof r->spec, "%s", vq_kv_spec_text(spec));
    if (c->n_kv < 1 || c->n_heads % c->n_kv)
        return vq_err_set(err, VQ_ERR_ARG, "kv-fidelity: %d query heads not a multiple of %d KV heads", c->n_heads, c->n_kv);
    r->layer = calloc((size_t)c->n_layers, sizeof *r->layer);
    if (!r->layer) return vq_err_set(err, VQ_ERR_NOMEM, "kv-fidelity: out of memory");
    r->n_layers = c->n_layers;
    r->ok = 1;
    for (int l = 0; l < c->n_layers && r->ok; l++) {
        vq_status s = eval_layer(c, l, spec, seed, r, err);
        if (s) return s;
    }
    if (!r->ok) return VQ_OK;
    r->worst = r->layer[0];
    for (int l = 0; l < c->n_layers; l++) {
        const vq_kvfid_layer *L = &r->layer[l];
        r->mean.key_cos += L->key_cos / c->n_layers;
        r->mean.val_cos += L->val_cos / c->n_layers;
        r->mean.kl += L->kl / c->n_layers;
        r->mean.rel_err += L->rel_err / c->n_layers;
        if (L->key_cos < r->worst.key_cos) { r->worst.key_cos = L->key_cos; r->worst_layer[0] = l; }
        if (L->val_cos < r->worst.val_cos) { r->worst.val_cos = L->val_cos; r->worst_layer[1] = l; }
        if (L->kl > r->worst.kl) { r->worst.kl = L->kl; r->worst_layer[2] = l; }
        if (L->rel_err > r->worst.rel_err) { r->worst.rel_err = L->rel_err; r->worst_layer[3] = l; }
    }
    return VQ_OK;
}

void vq_kvfid_result_free(vq_kvfid_result *r) {
    free(r->layer);
    r->layer = NULL;
}

static const char *const kf_extras[] = { "turboquant_mse:k=2,v=2", "turboquant_mse:k=3,v=3",
                                         "turboquant_mse:k=4,v=4", "q4_0:rotate=1" };

int vq_kvfid_default_specs(char (*out)[96], int cap) {
    int n = 0;
    const char *first = "f32";
    if (n < cap) snprintf(out[n++], 96, "%s", first);
    for (int i = 0; vq_codec_name(i) && n < cap; i++) {
        const char *nm = vq_codec_name(i);
        if (strcmp(nm, first) && !vq_lab_codec_needs_calib(i)) snprintf(out[n++], 96, "%s", nm);
    }
    for (size_t i = 0; i < VQ_ARRAY_LEN(kf_extras) && n < cap; i++) snprintf(out[n++], 96, "%s", kf_extras[i]);
    return n;
}
