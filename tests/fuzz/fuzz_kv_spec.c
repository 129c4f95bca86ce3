/* fuzz_kv_spec.c: libFuzzer entry for the KV spec parser (codecs, store keys, eviction keys,
 * per-layer overrides). A refused text must say why (VQ_ERR_ARG or VQ_ERR_NOMEM, a message;
 * a calib=FILE that cannot be opened or read may also be VQ_ERR_IO / VQ_ERR_FORMAT); an
 * accepted one must normalize to a text that parses to itself, and a small cache made from it
 * must take rows, attend, run an eviction step and keep its byte count equal to its tally. */
#include "kv/kv.h"
#include "veloxquant.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 600) return 0;
    char text[601];
    memcpy(text, data, size);
    text[size] = 0;
    vq_err err;
    vq_kv_spec *s = vq_kv_spec_parse(text, &err);
    if (!s) {
        int file = strstr(text, "calib") && (err.code == VQ_ERR_IO || err.code == VQ_ERR_FORMAT) &&
                   strstr(err.msg, "calibration file");
        if ((err.code != VQ_ERR_ARG && err.code != VQ_ERR_NOMEM && !file) || !err.msg[0]) abort();
        return 0;
    }
    vq_kv_spec *t = vq_kv_spec_parse(vq_kv_spec_text(s), &err);
    if (!t || strcmp(vq_kv_spec_text(t), vq_kv_spec_text(s))) abort();
    vq_kv_spec_free(t);
    vq_kv_dims d = {.n_layers = 3, .n_heads = 2, .n_kv_heads = 1, .head_dim = 64, .max_ctx = 80};
    vq_kv *kv = vq_kv_create(s, &d, 7, &err);
    vq_kv_spec_free(s);
    if (!kv) {   /* e.g. a layer override outside 3 layers, page sizes: said why */
        if (!err.msg[0]) abort();
        return 0;
    }
    float k[64 * 8], v[64 * 8], q[128], o[128];
    for (int i = 0; i < 64 * 8; i++) { k[i] = (float)((i * 37) % 17) / 8.0f - 1.0f; v[i] = (float)((i * 11) % 13) / 6.0f - 1.0f; }
    for (int i = 0; i < 128; i++) q[i] = (float)(i % 7) / 3.0f - 1.0f;
    for (int p = 0; p < 72; p += 8) {
        vq_kv_evict_begin(kv, p, 8);
        for (int l = 0; l < 3; l++) {
            if (vq_kv_append(kv, l, p, 8, k, v, &err)) abort();
            int qp = p + 7;
            if (vq_kv_attend(kv, l, 1, &qp, q, o, &err)) abort();
        }
        vq_kv_evict_end(kv, p, 8);
        if (vq_kv_bytes(kv) != vq_kv_bytes_tally(kv)) abort();
    }
    vq_kv_evict_now(kv, 72);
    if (vq_kv_bytes(kv) != vq_kv_bytes_tally(kv)) abort();
    vq_kv_destroy(kv);
    return 0;
}
