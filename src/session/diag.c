/* diag.c: what a parsed spec costs, and the experimental diagnostics of a session's cache
 * (veloxquant.h): page layout, rows, the codec serving a layer, the float64 reference switch.
 * Each forwards to the kv layer, which owns the numbers. */
#include <stdio.h>
#include <string.h>

#include "session/session_impl.h"
#include "codec/codec.h"

vq_status vq_kv_spec_bytes_at(const vq_kv_spec *s, const vq_model *m, int n_ctx, int n_rows, size_t *bytes,
                             vq_err *err) {
    return vq_kv_spec_bytes_batch(s, m, n_ctx, 0, n_rows, bytes, err);
}

vq_status vq_kv_spec_bytes_batch(const vq_kv_spec *s, const vq_model *m, int n_ctx, int n_batch, int n_rows,
                                 size_t *bytes, vq_err *err) {
    vq_err_clear(err);
    if (n_batch < 0 || n_batch > 4096)
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_spec_bytes: batch size %d is out of range (0..4096)", n_batch);
    if (!s || !m || !bytes) return vq_err_set(err, VQ_ERR_ARG, "vq_kv_spec_bytes: no spec, model or result");
    if (n_ctx < 1 || n_ctx > (1 << 24))
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_spec_bytes: context %d is out of range (1..16777216)", n_ctx);
    if (n_rows < 0 || n_rows > n_ctx)
        return vq_err_set(err, VQ_ERR_ARG, "vq_kv_spec_bytes_at: %d rows is outside 0..%d (the context)", n_rows, n_ctx);
    /* the accounting is the cache's own: make one (no rows, so no pages) and ask it; the page
     * size follows the context, so the context is the session's, not the row count */
    vq_kv_dims dims = vq_model_kv_dims(m, n_ctx);
    dims.max_append = VQ_MIN(n_ctx, n_batch ? n_batch : VQ_SESSION_BATCH_DEFAULT);   /* as vq_session_create */
    vq_kv *kv = vq_kv_create(s, &dims, 0, err);
    if (!kv) return err ? err->code : VQ_ERR_ARG;
    *bytes = vq_kv_bytes_at(kv, n_rows);
    vq_kv_destroy(kv);
    return VQ_OK;
}

vq_status vq_kv_spec_bytes(const vq_kv_spec *s, const vq_model *m, int n_ctx, size_t *bytes, vq_err *err) {
    return vq_kv_spec_bytes_at(s, m, n_ctx, n_ctx, bytes, err);
}

void vq_session_set_ref_attention(vq_session *s, int on) {
    if (s && s->kv) vq_kv_set_ref_attend(s->kv, on);   /* a device store has no reference path */
}
/* the page figures describe the CPU's cache: 0 for a session whose cache is on a device */
int vq_session_kv_page_rows(const vq_session *s) { return s && s->kv ? vq_kv_page_rows(s->kv) : 0; }
size_t vq_session_kv_page_bytes(const vq_session *s) { return s && s->kv ? vq_kv_page_bytes(s->kv) : 0; }
static int layer_ok(const vq_session *s, int layer) { return s && s->kv && layer >= 0 && layer < s->m->cfg.n_layers; }
int vq_session_kv_pages(const vq_session *s, int layer) { return layer_ok(s, layer) ? vq_kv_pages(s->kv, layer) : 0; }
int vq_session_kv_rows(const vq_session *s, int layer) { return layer_ok(s, layer) ? vq_kv_rows(s->kv, layer) : 0; }
int vq_session_kv_window_rows(const vq_session *s) { return s && s->kv ? vq_kv_window_rows(s->kv) : 0; }

const char *vq_session_kv_codec(const vq_session *s, int layer, int side, char *buf, size_t cap) {
    if (!buf || !cap) return "";
    buf[0] = 0;
    if (!layer_ok(s, layer) || (side != VQ_SIDE_K && side != VQ_SIDE_V)) return buf;
    const vq_codec_state *st = vq_kv_codec_state(s->kv, layer, side);
    if (!st || !st->codec) return buf;
    snprintf(buf, cap, "%s%s%s", st->codec->name, st->params[0] ? ":" : "", st->params);
    return buf;
}
