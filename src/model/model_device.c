/* model_device.c: a model bound to a device row (backend/ops.h "devices"): every buffer the forward
 * pass reads is copied to the device once (vq_model_tensors), so sessions of the model run the one
 * forward pass on that row with a store of the row's. The model's host side (the mapped file, the
 * tokenizer) stays as it is. */
#include <stdio.h>
#include <string.h>
#include "backend/ops.h"
#include "model/model.h"

typedef struct { const vq_device *d; void *ctx; vq_err *err; } mirror_arg;

static int mirror_one(void *user, const void *data, size_t bytes) {
    mirror_arg *a = user;
    return a->d->mirror(a->ctx, data, bytes, a->err) != VQ_OK;
}

vq_status vq_model_to_device(vq_model *m, const char *device, vq_err *err) {
    const vq_device *d = NULL;
    int ix = 0;
    vq_status st = vq_device_find(device, &d, &ix, err);
    if (st || !d) return st;   /* the CPU: nothing to do */
    if (m->dev) return vq_err_set(err, VQ_ERR_ARG, "model %s is already on device %s", m->path, m->dev_name);
    void *ctx = d->open(ix, err);
    if (!ctx) return err && err->code ? err->code : VQ_ERR_IO;
    /* what the row refuses, before anything is copied: a matrix type without a kernel (the pass
     * checks every matrix when it is made), an attention shape the row's store has no kernel for */
    const vq_kv_dims dims = vq_model_kv_dims(m, 1);
    vq_fwd *probe = vq_fwd_create_ops(m, 1, 2, d->ops, ctx, err);
    void *store = probe ? d->store_create(ctx, dims.n_layers, dims.n_heads, dims.n_kv_heads, dims.head_dim, 1, dims.span,
                                          dims.softcap, NULL, err)
                        : NULL;
    vq_fwd_destroy(probe);
    if (!store) {
        if (err && err->code == VQ_ERR_ARG) err->code = VQ_ERR_UNSUPPORTED;   /* valid model the row lacks */
        d->close(ctx);
        return err && err->code ? err->code : VQ_ERR_UNSUPPORTED;
    }
    d->store_free(store);
    mirror_arg a = { d, ctx, err };
    if (vq_model_tensors(m, mirror_one, &a)) {
        d->close(ctx);
        return err && err->code ? err->code : VQ_ERR_IO;
    }
    m->dev = d;
    m->dev_ctx = ctx;
    snprintf(m->dev_name, sizeof m->dev_name, "%s:%d", d->name, ix);
    return VQ_OK;
}

void vq_model_device_release(vq_model *m) {
    if (m && m->dev) m->dev->close(m->dev_ctx);
    if (m) { m->dev = NULL; m->dev_ctx = NULL; m->dev_name[0] = 0; }
}
