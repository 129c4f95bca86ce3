/* runtime.c: the library's small runtime face (veloxquant.h, "runtime"): threads, clock, resident
 * memory, the machine and the kernel variant chosen, the codec table's names; and the model
 * details `info` prints. Product, not measurement: the server and the CLI both use it, so it lives
 * here rather than in the lab (lab/). Each forwards to the layer that owns the work. */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "session/session_impl.h"
#include "codec/codec.h"
#include "kernels/kernels.h"

void vq_cpu_description(char *buf, size_t cap) {
    if (buf && cap) vq_cpu_describe(buf, cap);
}
const char *vq_kernels_isa_name(void) { return vq_isa_name(vq_kernels_isa()); }
int vq_max_threads(void) { return omp_get_max_threads(); }
void vq_set_threads(int n) {
    if (n >= 1) omp_set_num_threads(n);
}
size_t vq_rss_now_bytes(void) { return vq_rss_bytes(); }
size_t vq_rss_peak_bytes(void) { return vq_peak_rss_bytes(); }
double vq_clock_s(void) { return vq_now_s(); }
const char *vq_codec_name(int i) {
    const vq_codec *c = i >= 0 && i < vq_codec_count() ? vq_codec_at(i) : NULL;
    return c ? c->name : NULL;
}

vq_model_details vq_model_get_details(const vq_model *m) {
    vq_model_details d;
    memset(&d, 0, sizeof d);
    if (!m) return d;
    d.norm_eps = m->cfg.norm_eps;
    d.rope_dim = m->cfg.rope_dim;
    d.rope_neox = m->cfg.rope_neox;
    const vq_wtype *wq = m->cfg.n_layers > 0 ? vq_wtype_get(m->layers[0].wq.type) : NULL;
    const vq_wtype *we = vq_wtype_get(m->tok_embd.type);
    snprintf(d.weight_type, sizeof d.weight_type, "%s", wq ? wq->name : "?");
    snprintf(d.embd_type, sizeof d.embd_type, "%s", we ? we->name : "?");
    return d;
}
