/* bench_report.c: the throughput report of `veloxquant bench`: per arm and context the median
 * [min, max] of decode and prefill tokens/s, the baseline arm's spread as the noise floor, the
 * ratio to the baseline, and the physical limit (bytes one decode step reads / measured read
 * bandwidth). Text table or JSON with every raw repeat (BENCHMARKING.md rules 1, 6, 7, 11). */
#include <stdlib.h>
#include <string.h>

#include "eval/eval.h"

typedef struct { double med, min, max; } stat3;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static stat3 stats(double *v, int n) {
    stat3 s = { 0, 0, 0 };
    if (n <= 0) return s;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    s.min = v[0]; s.max = v[n - 1];
    s.med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return s;
}

static void jstr(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* Everything the table and the JSON summary show for one (ctx, arm). */
typedef struct cell {
    stat3 dec, pre;
    size_t kv_bytes, peak_rss;
    double vs_med, vs_lo, vs_hi;      /* ratio of decode medians to the baseline, [min/max, max/min] */
    double noise;                     /* baseline's (max - min) / median at this ctx */
    double bytes_per_tok, max_tps, frac;
} cell;

static void cell_fill(const vq_bench_report_in *in, int c, int a, double bw, cell *o) {
    const vq_bench_params *p = in->p;
    double *d = malloc((size_t)p->reps * sizeof(double) * 2), *q = d ? d + p->reps : NULL;
    memset(o, 0, sizeof *o);
    if (!d) return;
    int n = 0;
    long ns = (long)p->reps * p->n_ctxs * p->n_specs;
    for (long k = 0; k < ns; k++) {
        const vq_bench_sample *s = &in->samples[k];
        if (s->ctx_index != c || s->spec_index != a) continue;
        d[n] = s->decode_tps; q[n] = s->prefill_tps; n++;
        o->kv_bytes = s->kv_bytes;
        o->peak_rss = VQ_MAX(o->peak_rss, s->peak_rss);
    }
    o->dec = stats(d, n);
    o->pre = stats(q, n);
    o->bytes_per_tok = (double)o->kv_bytes + (double)in->model_bytes;
    o->max_tps = bw * 1e9 / o->bytes_per_tok;
    o->frac = o->dec.med / o->max_tps;
    free(d);
}

void vq_bench_report(FILE *f, const vq_bench_report_in *in, int json) {
    const vq_bench_params *p = in->p;
    int base = 0;
    for (int a = 0; a < p->n_specs; a++)
        if (!strcmp(p->specs[a], "f16")) { base = a; break; }
    double *bwv = malloc((size_t)VQ_MAX(in->n_bw, 1) * sizeof(double));
    if (!bwv) return;
    memcpy(bwv, in->bw_gbps, (size_t)in->n_bw * sizeof(double));
    stat3 bw = stats(bwv, in->n_bw);
    cell *cells = calloc((size_t)p->n_ctxs * p->n_specs, sizeof(cell));
    if (!cells) { free(bwv); return; }
    for (int c = 0; c < p->n_ctxs; c++) {
        cell *b = &cells[c * p->n_specs + base];
        cell_fill(in, c, base, bw.med, b);
        for (int a = 0; a < p->n_specs; a++) {
            cell *o = &cells[c * p->n_specs + a];
            if (a != base) cell_fill(in, c, a, bw.med, o);
            o->noise = b->dec.med > 0 ? (b->dec.max - b->dec.min) / b->dec.med : 0;
            o->vs_med = b->dec.med > 0 ? o->dec.med / b->dec.med : 0;
            o->vs_lo = b->dec.max > 0 ? o->dec.min / b->dec.max : 0;
            o->vs_hi = b->dec.min > 0 ? o->dec.max / b->dec.min : 0;
        }
    }
    double lmin = 1e30, lmax = -1;
    long ns = (long)p->reps * p->n_ctxs * p->n_specs;
    for (long k = 0; k < ns; k++) { lmin = VQ_MIN(lmin, in->samples[k].load1); lmax = VQ_MAX(lmax, in->samples[k].load1); }
    if (json) {
        fputs("{\"command\": ", f); jstr(f, in->command);
        fputs(", \"machine\": ", f); jstr(f, in->machine);
        fputs(", \"model\": ", f); jstr(f, in->model_path);
        fprintf(f, ", \"model_bytes\": %zu, \"weight_bytes_per_token\": %zu, \"weight_bytes_note\": "
                   "\"model file bytes (upper bound of the weights one decode step reads)\", \"threads\": %d, "
                   "\"isa\": \"%s\", \"peak_rss\": %zu, \"gen\": %d, \"batch\": %d, \"reps\": %d, \"baseline\": ",
                in->model_bytes, in->model_bytes, in->threads, in->isa, in->peak_rss, p->n_gen, p->batch, p->reps);
        jstr(f, p->specs[base]);
        fprintf(f, ", \"load1_min\": %.2f, \"load1_max\": %.2f, \"ctxs\": [", lmin, lmax);
        for (int c = 0; c < p->n_ctxs; c++) fprintf(f, "%s%d", c ? ", " : "", p->ctxs[c]);
        fputs("], \"arms\": [", f);
        for (int a = 0; a < p->n_specs; a++) { if (a) fputs(", ", f); jstr(f, p->specs[a]); }
        fprintf(f, "], \"bandwidth\": {\"kind\": \"read-only sweep, OpenMP threads as decode\", \"buffer_bytes\": %zu, "
                   "\"median_gbps\": %.3f, \"min_gbps\": %.3f, \"max_gbps\": %.3f, \"samples_gbps\": [",
                in->bw_bytes, bw.med, bw.min, bw.max);
        for (int i = 0; i < in->n_bw; i++) fprintf(f, "%s%.3f", i ? ", " : "", in->bw_gbps[i]);
        fputs("]}, \"samples\": [", f);
        for (long k = 0; k < ns; k++) {
            const vq_bench_sample *s = &in->samples[k];
            fprintf(f, "%s\n  {\"kv\": ", k ? "," : "");
            jstr(f, p->specs[s->spec_index]);
            fprintf(f, ", \"ctx\": %d, \"rep\": %d, \"prefill_tps\": %.3f, \"decode_tps\": %.3f, \"prefill_s\": %.6f, "
                       "\"decode_s\": %.6f, \"kv_bytes\": %zu, \"rss_delta\": %ld, \"peak_rss\": %zu, \"load1\": %.2f}",
                    p->ctxs[s->ctx_index], s->rep, s->prefill_tps, s->decode_tps, s->prefill_s, s->decode_s,
                    s->kv_bytes, s->rss_delta, s->peak_rss, s->load1);
        }
        fputs("],\n \"summary\": [", f);
        for (int c = 0; c < p->n_ctxs; c++)
            for (int a = 0; a < p->n_specs; a++) {
                const cell *o = &cells[c * p->n_specs + a];
                fprintf(f, "%s\n  {\"kv\": ", c || a ? "," : "");
                jstr(f, p->specs[a]);
                fprintf(f, ", \"ctx\": %d, \"decode_tps\": {\"median\": %.3f, \"min\": %.3f, \"max\": %.3f}, "
                           "\"prefill_tps\": {\"median\": %.3f, \"min\": %.3f, \"max\": %.3f}, "
                           "\"vs_baseline\": {\"median\": %.4f, \"lo\": %.4f, \"hi\": %.4f}, \"noise_floor\": %.4f, "
                           "\"kv_bytes\": %zu, \"bytes_per_token\": %.0f, \"max_tps\": %.3f, \"fraction_of_max\": %.4f, "
                           "\"peak_rss\": %zu}",
                        p->ctxs[c], o->dec.med, o->dec.min, o->dec.max, o->pre.med, o->pre.min, o->pre.max,
                        o->vs_med, o->vs_lo, o->vs_hi, o->noise, o->kv_bytes, o->bytes_per_tok, o->max_tps,
                        o->frac, o->peak_rss);
            }
        fputs("]}\n", f);
    } else {
        fprintf(f, "machine: %s\nmodel: %s (%zu bytes), threads %d, kernels %s, %d repeats interleaved, %d decode "
                   "tokens each, load avg %.2f-%.2f\n",
                in->machine, in->model_path, in->model_bytes, in->threads, in->isa, p->reps, p->n_gen, lmin, lmax);
        fprintf(f, "read bandwidth %.2f GB/s median [%.2f, %.2f] over %d passes of %.0f MiB; physical limit = "
                   "bandwidth / (KV bytes held + model file bytes) per decode token\n",
                bw.med, bw.min, bw.max, in->n_bw, in->bw_bytes / 1048576.0);
        fprintf(f, "%-26s %5s | %-25s | %-22s | %6s | %-19s | %8s %5s | %9s %8s\n", "kv", "ctx",
                "decode tok/s med [min,max]", "vs baseline [lo,hi]", "noise", "prefill tok/s med",
                "limit", "frac", "kv MB", "peak MB");
        for (int c = 0; c < p->n_ctxs; c++)
            for (int a = 0; a < p->n_specs; a++) {
                const cell *o = &cells[c * p->n_specs + a];
                fprintf(f, "%-26s %5d | %7.1f [%6.1f,%7.1f] | %5.3fx [%5.3f,%5.3f] | %5.1f%% | %7.1f [%4.0f,%4.0f] | "
                           "%8.1f %4.0f%% | %9.2f %8.1f\n",
                        p->specs[a], p->ctxs[c], o->dec.med, o->dec.min, o->dec.max, o->vs_med, o->vs_lo, o->vs_hi,
                        100 * o->noise, o->pre.med, o->pre.min, o->pre.max, o->max_tps, 100 * o->frac,
                        o->kv_bytes / 1048576.0, o->peak_rss / 1048576.0);
            }
        fprintf(f, "baseline %s; noise = baseline's (max-min)/median at that ctx: a ratio inside 1 +- noise is no "
                   "result. peak = VmHWM over each arm's own runs; whole run %.1f MB (the bandwidth buffer not included)\n",
                p->specs[base], in->peak_rss / 1048576.0);
    }
    free(cells);
    free(bwv);
}
