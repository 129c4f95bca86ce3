/* cli_api.c: the lab's public face (lab/vqlab.h): thin wrappers over the
 * lab code that take parsed specs and fill the public result structs. Nothing here prints; the
 * CLI (tools/) formats tables and JSON from these structs. */
#include "lab/vqlab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/bench.h"
#include "lab/bench_kernels.h"
#include "lab/kv_fidelity.h"
#include "lab/needle.h"
#include "session/lab_tap.h"

/* ---- throughput, bandwidth, resident memory ---- */
vq_status vq_bench_throughput(const vq_model *m, const vq_tput_params *p, vq_tput_sample *out,
                              vq_progress_cb cb, void *user, vq_err *err) {
    vq_err_clear(err);
    if (!m || !p || !out || p->n_ctxs < 1 || p->n_specs < 1 || p->reps < 1 || p->n_gen < 1)
        return vq_err_set(err, VQ_ERR_ARG, "bench: need a model, at least one ctx, arm, repeat and decode token");
    size_t ns = (size_t)p->reps * p->n_ctxs * p->n_specs;
    vq_bench_sample *smp = calloc(ns, sizeof *smp);
    if (!smp) return vq_err_set(err, VQ_ERR_NOMEM, "bench: out of memory for %zu samples", ns);
    vq_bench_params bp = { .ctxs = p->ctxs, .n_ctxs = p->n_ctxs, .specs = p->specs, .n_specs = p->n_specs,
                           .reps = p->reps, .n_gen = p->n_gen, .batch = p->batch, .text = p->text,
                           .n_text = p->n_text, .kv_seed = p->kv_seed, .fill = p->fill };
    vq_status s = vq_bench_run(m, &bp, smp, cb, user, err);
    for (size_t k = 0; k < ns; k++) {
        const vq_bench_sample *a = &smp[k];
        out[k] = (vq_tput_sample){ .ctx_index = a->ctx_index, .spec_index = a->spec_index, .rep = a->rep,
                                   .prefill_tps = a->prefill_tps, .decode_tps = a->decode_tps,
                                   .prefill_s = a->prefill_s, .decode_s = a->decode_s, .kv_bytes = a->kv_bytes,
                                   .rss_delta = a->rss_delta, .peak_rss = a->peak_rss, .load1 = a->load1,
                                   .fill_s = a->fill_s, .decode_cpu_s = a->decode_cpu_s };
    }
    free(smp);
    return s;
}

vq_status vq_bench_read_bandwidth(size_t bytes, int reps, double *gbps, vq_err *err) {
    vq_err_clear(err);
    if (reps < 1 || !gbps) return vq_err_set(err, VQ_ERR_ARG, "read bandwidth: reps %d must be >= 1", reps);
    if (vq_bench_read_bw(bytes, reps, gbps))
        return vq_err_set(err, VQ_ERR_NOMEM, "read bandwidth: no memory for a buffer of %zu bytes", bytes);
    return VQ_OK;
}

vq_status vq_bench_rss(const vq_model *m, const vq_kv_spec *spec, const int *tok, long n_tok,
                       const int *ctxs, int n_ctxs, int batch, int fill, uint64_t seed,
                       vq_rss_point *out, vq_rss_result *res, vq_err *err) {
    vq_err_clear(err);
    if (!m || !spec || !out || !res || n_ctxs < 1)
        return vq_err_set(err, VQ_ERR_ARG, "bench rss: need a model, a spec and at least one ctx");
    vq_bench_rss_point *pts = calloc((size_t)n_ctxs, sizeof *pts);
    if (!pts) return vq_err_set(err, VQ_ERR_NOMEM, "bench rss: out of memory");
    vq_bench_rss_result rr;
    vq_status s = vq_bench_rss_fill(m, spec, tok, n_tok, ctxs, n_ctxs, batch, fill, seed, pts, &rr, err);
    for (int c = 0; c < n_ctxs; c++)
        out[c] = (vq_rss_point){ pts[c].ctx, pts[c].kv_bytes, pts[c].kv_bits, pts[c].rss, pts[c].rss_trim };
    *res = (vq_rss_result){ rr.rss_base, rr.rss_end_trim, rr.kv_bytes_empty, rr.fill_s, rr.prefill_s };
    free(pts);
    return s;
}

/* ---- needle ---- */
static vq_needle_params needle_base(const vq_needle_config *c) {
    return (vq_needle_params){ .digits = c->digits, .n_gen = c->n_gen,
                               .filler = c->filler == VQ_NEEDLE_TEXT ? VQ_NEEDLE_FILLER_TEXT : VQ_NEEDLE_FILLER_CLASSIC,
                               .filler_text = c->filler_text,
                               .format = c->format == VQ_NEEDLE_CHAT ? VQ_NEEDLE_FMT_CHAT : VQ_NEEDLE_FMT_PLAIN,
                               .seed = c->seed };
}

typedef struct needle_fwd { vq_needle_outcome_cb cb; void *user; } needle_fwd;

static void outcome_of(const vq_needle_trial *t, vq_needle_outcome *o) {
    memset(o, 0, sizeof *o);
    o->ctx_index = t->ctx_index; o->depth_index = t->depth_index; o->spec_index = t->spec_index;
    o->trial = t->trial; o->ctx = t->ctx; o->depth = t->depth; o->depth_actual = t->depth_actual;
    o->n_prompt = t->n_prompt; o->needle_at = t->needle_at; o->n_gen = t->n_gen;
    memcpy(o->number, t->number, sizeof o->number);
    memcpy(o->gen, t->gen, sizeof o->gen);
    o->correct = t->correct;
    o->seconds = t->seconds;
}

static void needle_forward(const vq_needle_trial *t, long done, long total, void *user) {
    const needle_fwd *f = user;
    vq_needle_outcome o;
    outcome_of(t, &o);
    f->cb(&o, done, total, f->user);
}

vq_status vq_needle(const vq_model *m, const vq_needle_config *c, vq_needle_outcome *out,
                    vq_needle_outcome_cb cb, void *user, vq_err *err) {
    vq_err_clear(err);
    if (!m || !c || !out || c->n_specs < 1 || !c->specs)
        return vq_err_set(err, VQ_ERR_ARG, "needle: need a model and at least one parsed KV arm");
    const char **names = calloc((size_t)c->n_specs, sizeof *names);
    long total = (long)c->n_ctxs * c->n_depths * c->trials * c->n_specs;
    vq_needle_trial *tr = total > 0 ? calloc((size_t)total, sizeof *tr) : NULL;
    if (!names || (total > 0 && !tr)) {
        free(names); free(tr);
        return vq_err_set(err, VQ_ERR_NOMEM, "needle: out of memory for %ld trials", total);
    }
    for (int a = 0; a < c->n_specs; a++) names[a] = vq_kv_spec_text(c->specs[a]);
    vq_needle_run_params rp = { .ctxs = c->ctxs, .n_ctxs = c->n_ctxs, .depths = c->depths, .n_depths = c->n_depths,
                                .specs = names, .n_specs = c->n_specs, .parsed = c->specs, .trials = c->trials,
                                .batch = c->batch, .kv_seed = c->kv_seed, .base = needle_base(c) };
    needle_fwd fw = { cb, user };
    vq_status s = vq_needle_run(m, &rp, tr, cb ? needle_forward : NULL, &fw, err);
    for (long i = 0; !s && i < total; i++) outcome_of(&tr[i], &out[i]);
    free(tr);
    free(names);
    return s;
}

char *vq_needle_first_prompt(const vq_model *m, const vq_needle_config *c, vq_needle_prompt_info *info,
                             vq_err *err) {
    vq_err_clear(err);
    if (!m || !c || c->n_ctxs < 1 || c->n_depths < 1) {
        vq_err_set(err, VQ_ERR_ARG, "needle: need a model, a ctx and a depth");
        return NULL;
    }
    vq_needle_params q = needle_base(c);
    q.ctx = c->ctxs[0];
    q.depth = c->depths[0];
    q.seed = vq_needle_trial_seed(c->seed, q.ctx, 0, 0);
    vq_needle_prompt pr;
    if (vq_needle_build(m, &q, &pr, err)) return NULL;
    size_t need = vq_detokenize(m, pr.tok, pr.n, NULL, 0);
    char *buf = malloc(need + 1);
    if (!buf) {
        vq_needle_prompt_free(&pr);
        vq_err_set(err, VQ_ERR_NOMEM, "needle: out of memory");
        return NULL;
    }
    buf[vq_detokenize(m, pr.tok, pr.n, buf, need)] = 0;
    if (info) {
        *info = (vq_needle_prompt_info){ pr.n, pr.needle_at, pr.needle_len, pr.filler_total, pr.filler_before,
                                         pr.max_unit, { 0 } };
        memcpy(info->number, pr.number, sizeof info->number);
    }
    vq_needle_prompt_free(&pr);
    return buf;
}

/* ---- kv fidelity ---- */
vq_kvfid_capture *vq_kv_fidelity_capture(const vq_model *m, const int *tok, int n, vq_err *err) {
    vq_err_clear(err);
    if (!m || !tok) { vq_err_set(err, VQ_ERR_ARG, "kv-fidelity: no model or tokens"); return NULL; }
    return vq_kvfid_capture_run(m, tok, n, err);
}
void vq_kv_fidelity_capture_free(vq_kvfid_capture *c) { vq_kvfid_capture_free(c); }

static vq_kv_fidelity_stats stats_of(const vq_kvfid_layer *l) {
    return (vq_kv_fidelity_stats){ l->key_cos, l->val_cos, l->kl, l->rel_err };
}

vq_status vq_kv_fidelity_eval(const vq_kvfid_capture *c, const vq_kv_spec *spec, uint64_t seed,
                              vq_kv_fidelity_result *r, vq_err *err) {
    vq_err_clear(err);
    memset(r, 0, sizeof *r);
    if (!c || !spec) return vq_err_set(err, VQ_ERR_ARG, "kv-fidelity: no capture or spec");
    vq_kvfid_result in;
    vq_status s = vq_kvfid_eval_spec(c, spec, seed, &in, err);
    if (s) { vq_kvfid_result_free(&in); return s; }
    r->ok = in.ok;
    memcpy(r->why, in.why, sizeof r->why);
    memcpy(r->normalized, in.norm, sizeof r->normalized);
    r->bits = in.bits;
    r->code_bits = in.code_bits;
    r->bytes = in.bytes;
    if (in.ok) {
        r->layer = calloc((size_t)in.n_layers, sizeof *r->layer);
        if (!r->layer) { vq_kvfid_result_free(&in); return vq_err_set(err, VQ_ERR_NOMEM, "kv-fidelity: out of memory"); }
        r->n_layers = in.n_layers;
        for (int l = 0; l < in.n_layers; l++) r->layer[l] = stats_of(&in.layer[l]);
        r->mean = stats_of(&in.mean);
        r->worst = stats_of(&in.worst);
        memcpy(r->worst_layer, in.worst_layer, sizeof r->worst_layer);
    }
    vq_kvfid_result_free(&in);
    return VQ_OK;
}
void vq_kv_fidelity_result_free(vq_kv_fidelity_result *r) {
    if (!r) return;
    free(r->layer);
    r->layer = NULL;
    r->n_layers = 0;
}
int vq_kv_fidelity_default_specs(char (*out)[96], int cap) { return vq_kvfid_default_specs(out, cap); }

/* ---- bench-kernels ---- */
vq_status vq_bench_kernels_run(const vq_bench_kernels_params *p, vq_bench_kernels_result *r,
                               void (*progress)(const char *what, void *user), void *user, vq_err *err) {
    vq_err_clear(err);
    memset(r, 0, sizeof *r);
    if (!p || (p->n_specs > 0 && (!p->specs || !p->labels)))
        return vq_err_set(err, VQ_ERR_ARG, "bench-kernels: the arms need parsed specs and labels");
    vq_bk_result *in = calloc(1, sizeof *in);
    if (!in) return vq_err_set(err, VQ_ERR_NOMEM, "bench-kernels: out of memory");
    vq_bk_params bp = { .ns = p->ns, .n_ns = p->n_ns, .dims = p->dims, .n_dims = p->n_dims,
                        .specs = p->n_specs ? p->labels : NULL, .n_specs = p->n_specs,
                        .parsed = p->n_specs ? p->specs : NULL, .reps = p->reps, .threads = p->threads,
                        .pool_bytes = p->pool_bytes, .split = p->split, .seed = p->seed };
    vq_status s = vq_bench_kernels(&bp, in, progress, user, err);
    r->impl = in;
    if (s) return s;
    r->arms = calloc((size_t)VQ_MAX(in->n_arms, 1), sizeof *r->arms);
    if (!r->arms) return vq_err_set(err, VQ_ERR_NOMEM, "bench-kernels: out of memory");
    r->n_arms = in->n_arms;
    for (int i = 0; i < in->n_arms; i++) {
        const vq_bk_arm *a = &in->arms[i];
        vq_bk_arm_result *o = &r->arms[i];
        o->n = a->n; o->d = a->d; o->label = a->spec; o->ok = a->ok; o->pool = a->pool;
        o->kv_bytes = a->kv_bytes; o->bits = a->bits; o->code_bits = a->code_bits;
        memcpy(o->normalized, a->norm, sizeof o->normalized);
        memcpy(o->why, a->why, sizeof o->why);
        o->attend_s = a->attend_s; o->attend_wall_s = a->attend_wall_s; o->encode_rps = a->encode_rps;
        o->score_s = a->score_s; o->accum_s = a->accum_s;
    }
    r->n_specs = in->n_specs; r->reps = in->reps; r->threads = in->threads;
    r->pool_bytes = in->pool_bytes; r->copy_bytes = in->copy_bytes;
    r->copy_bps = in->copy_bps; r->copy_wall_bps = in->copy_wall_bps; r->read_bps = in->read_bps;
    r->load1_before = in->load1_before; r->load1_after = in->load1_after;
    memcpy(r->machine, in->machine, sizeof r->machine);
    memcpy(r->isa, in->isa, sizeof r->isa);
    return VQ_OK;
}

void vq_bench_kernels_result_free(vq_bench_kernels_result *r) {
    if (!r) return;
    if (r->impl) vq_bench_kernels_free(r->impl);
    free(r->impl);
    free(r->arms);
    memset(r, 0, sizeof *r);
}
