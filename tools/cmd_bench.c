/* cmd_bench.c: `veloxquant bench`: prefill and decode throughput per KV arm and context fill,
 * with the physical limit (read bandwidth / bytes per decode token), or with --rss-only the
 * resident memory of one arm's cache. The report: per arm and context the median [min, max] of
 * decode and prefill tokens/s, the baseline arm's spread as the noise floor, the ratio to the
 * baseline (BENCHMARKING.md rules 1, 6, 7, 11); a text table or JSON with every raw repeat. */
#ifndef VQ_EXPERIMENTAL   /* the build may define it for every file */
#define VQ_EXPERIMENTAL
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "json.h"

static const char *bench_help =
    "usage: veloxquant bench [options]\n"
    "Prefill and decode throughput at several context fills, KV arms interleaved (rep outermost),\n"
    "with the f16 arm's spread as the noise floor, the ratio to f16, peak RSS per arm, the cache's\n"
    "bytes, and the physical limit: read bandwidth measured in the same run / (KV bytes held +\n"
    "model file bytes) per decode token.\n"
    "  -m, --model FILE      model (default " DEFAULT_MODEL ")\n"
    "  -f, --file FILE       real text to prefill with (default " DEFAULT_TEXT ")\n"
    "      --ctx LIST        context fills, comma-separated (default 1024,4096,8192)\n"
    "      --kv SPEC         KV arm (repeatable; default f16; f16 is the baseline when present,\n"
    "                        else the first arm)\n"
    "      --kv-layers L=SPEC  per-layer override appended to every arm (the f16 one too) as\n"
    "                        '@L=SPEC', e.g. --kv q4_0 --kv-layers 0,-1=f16 -> q4_0@0,-1=f16\n"
    "      --reps N          repeats per arm (default 5; arms interleaved per repeat)\n"
    "      --gen N           decode tokens timed per repeat (default 32)\n"
    "      --bw-mb MB        read-bandwidth buffer (default 1024); --bw-reps N passes before and\n"
    "                        N after the run (default 5)\n"
    CLI_DEVICE_HELP
    "  -b, --batch N         prefill chunk (default 64)\n"
    "  -t, --threads N       threads\n"
    "      --json            the report as JSON (every raw repeat + the summary)\n"
    "      --json-file F     also write the JSON to F (the table still goes to stdout); F is\n"
    "                        replaced only by a complete report\n"
    "      --rss-only        honest memory: ONE --kv arm per process; load the model, warm it, read\n"
    "                        RSS, prefill real text through the cache reading RSS at each --ctx\n"
    "                        (default 8192); prints accounted bytes and measured RSS delta\n"
    "      --fill[=P]        fast fill for long contexts (P default 512): each arm prefills P real\n"
    "                        tokens once, and every cache is filled to --ctx by appending those rows\n"
    "                        again (decoded, through the store, at increasing true positions, so\n"
    "                        every codec encodes and counts them as it would); no prefill is timed.\n"
    "                        Cache contents repeat a real P-token prefill; speed and bytes do not\n"
    "                        depend on the values; quality is not measured. Not for evicting specs.\n"
    "                        With --rss-only the source cache is made before the RSS baseline\n"
    "      --list-codecs     print the codec names of the table, one per line\n";

/* ---- the throughput report ---- */
typedef struct stat3 { double med, min, max; } stat3;

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

typedef struct report_in {
    const char *command, *machine, *model_path, *isa;
    size_t model_bytes;       /* weight bytes read per token (the model file: an upper bound) */
    int threads;
    const vq_tput_params *p;
    const char *const *labels;            /* the arms as given */
    const vq_tput_sample *samples;        /* reps * n_ctxs * n_specs, run order */
    const double *bw_gbps; int n_bw;
    size_t bw_bytes;
    size_t peak_rss;
} report_in;

/* Everything the table and the JSON summary show for one (ctx, arm). */
typedef struct cell {
    stat3 dec, pre;                   /* pre: prefill tok/s, or with --fill the fill's seconds */
    stat3 cpu;                        /* decode CPU ms per token (every thread) */
    double cpu_vs;                    /* baseline's CPU median / this arm's (> 1: cheaper) */
    size_t kv_bytes, peak_rss;
    double vs_med, vs_lo, vs_hi;      /* ratio of decode medians to the baseline, [min/max, max/min] */
    double noise;                     /* baseline's (max - min) / median at this ctx */
    double bytes_per_tok, max_tps, frac;
} cell;

static void cell_fill(const report_in *in, int c, int a, double bw, cell *o) {
    const vq_tput_params *p = in->p;
    double *d = malloc((size_t)p->reps * sizeof(double) * 3), *q = d ? d + p->reps : NULL, *u = d ? q + p->reps : NULL;
    memset(o, 0, sizeof *o);
    if (!d) die("out of memory");
    int n = 0;
    long ns = (long)p->reps * p->n_ctxs * p->n_specs;
    for (long k = 0; k < ns; k++) {
        const vq_tput_sample *s = &in->samples[k];
        if (s->ctx_index != c || s->spec_index != a) continue;
        d[n] = s->decode_tps; q[n] = p->fill ? s->fill_s : s->prefill_tps;
        u[n] = 1e3 * s->decode_cpu_s / p->n_gen; n++;
        o->kv_bytes = s->kv_bytes;
        if (s->peak_rss > o->peak_rss) o->peak_rss = s->peak_rss;
    }
    o->dec = stats(d, n);
    o->pre = stats(q, n);
    o->cpu = stats(u, n);
    o->bytes_per_tok = (double)o->kv_bytes + (double)in->model_bytes;
    o->max_tps = bw * 1e9 / o->bytes_per_tok;
    o->frac = o->dec.med / o->max_tps;
    free(d);
}

/* Writes the report; returns 0, or -1 when a write failed. */
static int report(FILE *f, const report_in *in, int as_json) {
    const vq_tput_params *p = in->p;
    int base = 0;
    for (int a = 0; a < p->n_specs; a++)
        if (!strcmp(in->labels[a], "f16")) { base = a; break; }
    double *bwv = malloc((size_t)(in->n_bw > 0 ? in->n_bw : 1) * sizeof(double));
    cell *cells = calloc((size_t)p->n_ctxs * p->n_specs, sizeof(cell));
    if (!bwv || !cells) die("out of memory");
    memcpy(bwv, in->bw_gbps, (size_t)in->n_bw * sizeof(double));
    stat3 bw = stats(bwv, in->n_bw);
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
            o->cpu_vs = o->cpu.med > 0 ? b->cpu.med / o->cpu.med : 0;
        }
    }
    double lmin = 1e30, lmax = -1;
    long ns = (long)p->reps * p->n_ctxs * p->n_specs;
    for (long k = 0; k < ns; k++) {
        if (in->samples[k].load1 < lmin) lmin = in->samples[k].load1;
        if (in->samples[k].load1 > lmax) lmax = in->samples[k].load1;
    }
    int rc = 0;
    if (as_json) {
        json j;
        json_init(&j, f);
        json_obj(&j);
        json_kstr(&j, "command", in->command);
        json_kstr(&j, "machine", in->machine);
        json_kstr(&j, "model", in->model_path);
        json_kuint(&j, "model_bytes", in->model_bytes);
        json_kuint(&j, "weight_bytes_per_token", in->model_bytes);
        json_kstr(&j, "weight_bytes_note", "model file bytes (upper bound of the weights one decode step reads)");
        json_kint(&j, "threads", in->threads);
        json_kstr(&j, "isa", in->isa);
        json_kuint(&j, "peak_rss", in->peak_rss);
        json_kint(&j, "gen", p->n_gen);
        json_kint(&j, "batch", p->batch);
        json_kint(&j, "reps", p->reps);
        json_kint(&j, "fill", p->fill);
        if (p->fill)
            json_kstr(&j, "fill_note", "cache contents repeat a real fill-token prefill; speed and bytes do not depend "
                                       "on the values; quality is not measured");
        json_kstr(&j, "baseline", in->labels[base]);
        json_knum(&j, "load1_min", "%.2f", lmin);
        json_knum(&j, "load1_max", "%.2f", lmax);
        json_key(&j, "ctxs");
        json_arr(&j);
        for (int c = 0; c < p->n_ctxs; c++) json_int(&j, p->ctxs[c]);
        json_arr_end(&j);
        json_key(&j, "arms");
        json_arr(&j);
        for (int a = 0; a < p->n_specs; a++) json_str(&j, in->labels[a]);
        json_arr_end(&j);
        json_key(&j, "bandwidth");
        json_obj(&j);
        json_kstr(&j, "kind", "read-only sweep, OpenMP threads as decode");
        json_kuint(&j, "buffer_bytes", in->bw_bytes);
        json_knum(&j, "median_gbps", "%.3f", bw.med);
        json_knum(&j, "min_gbps", "%.3f", bw.min);
        json_knum(&j, "max_gbps", "%.3f", bw.max);
        json_key(&j, "samples_gbps");
        json_arr(&j);
        for (int i = 0; i < in->n_bw; i++) json_num(&j, "%.3f", in->bw_gbps[i]);
        json_arr_end(&j);
        json_obj_end(&j);
        json_key(&j, "samples");
        json_arr(&j);
        for (long k = 0; k < ns; k++) {
            const vq_tput_sample *s = &in->samples[k];
            json_newline(&j);
            json_obj(&j);
            json_kstr(&j, "kv", in->labels[s->spec_index]);
            json_kint(&j, "ctx", p->ctxs[s->ctx_index]);
            json_kint(&j, "rep", s->rep);
            json_knum(&j, "prefill_tps", "%.3f", s->prefill_tps);
            json_knum(&j, "decode_tps", "%.3f", s->decode_tps);
            json_knum(&j, "prefill_s", "%.6f", s->prefill_s);
            json_knum(&j, "decode_s", "%.6f", s->decode_s);
            json_knum(&j, "decode_cpu_s", "%.6f", s->decode_cpu_s);
            if (p->fill) json_knum(&j, "fill_s", "%.6f", s->fill_s);
            json_kuint(&j, "kv_bytes", s->kv_bytes);
            json_kint(&j, "rss_delta", s->rss_delta);
            json_kuint(&j, "peak_rss", s->peak_rss);
            json_knum(&j, "load1", "%.2f", s->load1);
            json_obj_end(&j);
        }
        json_arr_end(&j);
        json_newline(&j);
        json_key(&j, "summary");
        json_arr(&j);
        for (int c = 0; c < p->n_ctxs; c++)
            for (int a = 0; a < p->n_specs; a++) {
                const cell *o = &cells[c * p->n_specs + a];
                json_newline(&j);
                json_obj(&j);
                json_kstr(&j, "kv", in->labels[a]);
                json_kint(&j, "ctx", p->ctxs[c]);
                const struct { const char *k; stat3 s; } ts[2] = { { "decode_tps", o->dec },
                                                                   { p->fill ? "fill_s" : "prefill_tps", o->pre } };
                for (int t = 0; t < 2; t++) {
                    json_key(&j, ts[t].k);
                    json_obj(&j);
                    json_knum(&j, "median", "%.3f", ts[t].s.med);
                    json_knum(&j, "min", "%.3f", ts[t].s.min);
                    json_knum(&j, "max", "%.3f", ts[t].s.max);
                    json_obj_end(&j);
                }
                json_key(&j, "vs_baseline");
                json_obj(&j);
                json_knum(&j, "median", "%.4f", o->vs_med);
                json_knum(&j, "lo", "%.4f", o->vs_lo);
                json_knum(&j, "hi", "%.4f", o->vs_hi);
                json_obj_end(&j);
                json_key(&j, "decode_cpu_ms_per_token");
                json_obj(&j);
                json_knum(&j, "median", "%.3f", o->cpu.med);
                json_knum(&j, "min", "%.3f", o->cpu.min);
                json_knum(&j, "max", "%.3f", o->cpu.max);
                json_obj_end(&j);
                json_knum(&j, "cpu_vs_baseline", "%.4f", o->cpu_vs);
                json_knum(&j, "noise_floor", "%.4f", o->noise);
                json_kuint(&j, "kv_bytes", o->kv_bytes);
                json_knum(&j, "bytes_per_token", "%.0f", o->bytes_per_tok);
                json_knum(&j, "max_tps", "%.3f", o->max_tps);
                json_knum(&j, "fraction_of_max", "%.4f", o->frac);
                json_kuint(&j, "peak_rss", o->peak_rss);
                json_obj_end(&j);
            }
        json_arr_end(&j);
        json_obj_end(&j);
        rc = json_end(&j);
    } else {
        fprintf(f, "machine: %s\nmodel: %s (%zu bytes), threads %d, kernels %s, %d repeats interleaved, %d decode "
                   "tokens each, load avg %.2f-%.2f\n",
                in->machine, in->model_path, in->model_bytes, in->threads, in->isa, p->reps, p->n_gen, lmin, lmax);
        fprintf(f, "read bandwidth %.2f GB/s median [%.2f, %.2f] over %d passes of %.0f MiB; physical limit = "
                   "bandwidth / (KV bytes held + model file bytes) per decode token\n",
                bw.med, bw.min, bw.max, in->n_bw, in->bw_bytes / 1048576.0);
        if (p->fill)
            fprintf(f, "fast fill: cache contents repeat a real %d-token prefill; speed and bytes do not depend on "
                       "the values; quality is not measured\n", p->fill);
        fprintf(f, "%-26s %5s | %-25s | %-22s | %6s | %-19s | %8s %5s | %9s %8s | %8s %7s\n", "kv", "ctx",
                "decode tok/s med [min,max]", "vs baseline [lo,hi]", "noise",
                p->fill ? "fill s med [min,max]" : "prefill tok/s med", "limit", "frac", "kv MB", "peak MB",
                "cpu ms/t", "cpu vs");
        for (int c = 0; c < p->n_ctxs; c++)
            for (int a = 0; a < p->n_specs; a++) {
                const cell *o = &cells[c * p->n_specs + a];
                fprintf(f, p->fill ? "%-26s %5d | %7.2f [%6.2f,%7.2f] | %5.3fx [%5.3f,%5.3f] | %5.1f%% | %7.1f [%4.1f,%4.1f] | "
                                   "%8.2f %4.0f%% | %9.2f %8.1f | %8.1f %6.3fx\n"
                                 : "%-26s %5d | %7.1f [%6.1f,%7.1f] | %5.3fx [%5.3f,%5.3f] | %5.1f%% | %7.1f [%4.0f,%4.0f] | "
                           "%8.1f %4.0f%% | %9.2f %8.1f | %8.1f %6.3fx\n",
                        in->labels[a], p->ctxs[c], o->dec.med, o->dec.min, o->dec.max, o->vs_med, o->vs_lo, o->vs_hi,
                        100 * o->noise, o->pre.med, o->pre.min, o->pre.max, o->max_tps, 100 * o->frac,
                        o->kv_bytes / 1048576.0, o->peak_rss / 1048576.0, o->cpu.med, o->cpu_vs);
            }
        fprintf(f, "baseline %s; noise = baseline's (max-min)/median at that ctx: a ratio inside 1 +- noise is no "
                   "result. peak = VmHWM over each arm's own runs; whole run %.1f MB (the bandwidth buffer not included). cpu ms/t = "
                   "process CPU time per decode token, all threads (median); cpu vs = baseline's / this arm's (> 1: cheaper)\n",
                in->labels[base], in->peak_rss / 1048576.0);
        rc = fflush(f) || ferror(f) ? -1 : 0;
    }
    free(cells);
    free(bwv);
    return rc;
}

/* ---- --rss-only ---- */
static void rss_report(const opts *o, int o_fill, const char *cmdline, const char *machine, const char *model_path,
                       const vq_rss_point *pts, int n, const vq_rss_result *rr) {
    if (o->json) {
        json j;
        json_init(&j, stdout);
        json_obj(&j);
        json_kstr(&j, "command", cmdline);
        json_kstr(&j, "machine", machine);
        json_kstr(&j, "model", model_path);
        json_kstr(&j, "kv", o->kv_list[0]);
        json_kint(&j, "threads", vq_max_threads());
        json_kint(&j, "batch", o->batch);
        json_kuint(&j, "rss_base", rr->rss_base);
        json_kuint(&j, "rss_end_trim", rr->rss_end_trim);
        json_kuint(&j, "kv_bytes_empty", rr->kv_bytes_empty);
        json_knum(&j, "fill_s", "%.3f", rr->fill_s);
        json_kint(&j, "fill", o_fill);
        if (o_fill) json_knum(&j, "source_prefill_s", "%.3f", rr->prefill_s);
        json_kuint(&j, "peak_rss", vq_rss_peak_bytes());
        json_key(&j, "points");
        json_arr(&j);
        for (int c = 0; c < n; c++) {
            json_obj(&j);
            json_kint(&j, "ctx", pts[c].ctx);
            json_kuint(&j, "kv_bytes", pts[c].kv_bytes);
            json_knum(&j, "bits_per_elem", "%.4f", pts[c].kv_bits);
            json_kuint(&j, "rss", pts[c].rss);
            json_kint(&j, "rss_delta", (long long)pts[c].rss - (long long)rr->rss_base);
            json_kuint(&j, "rss_trim", pts[c].rss_trim);
            json_kint(&j, "rss_delta_trim", (long long)pts[c].rss_trim - (long long)rr->rss_base);
            json_obj_end(&j);
        }
        json_arr_end(&j);
        json_obj_end(&j);
        if (json_end(&j)) die("writing the output failed: %s", strerror(errno ? errno : EIO));
        return;
    }
    printf("kv %s: base RSS %.2f MB (model loaded and warmed, no cache); fill %.1f s\n", o->kv_list[0],
           rr->rss_base / 1048576.0, rr->fill_s);
    if (o_fill)
        printf("fast fill: cache contents repeat a real %d-token prefill (%.1f s, its source cache in the base); "
               "bytes do not depend on the values\n", o_fill, rr->prefill_s);
    printf("%6s %14s %14s %8s %16s %9s\n", "ctx", "kv bytes", "rss delta", "ratio", "delta after trim", "bits/el");
    for (int c = 0; c < n; c++) {
        long d = (long)pts[c].rss - (long)rr->rss_base, dt = (long)pts[c].rss_trim - (long)rr->rss_base;
        printf("%6d %14zu %14ld %8.4f %16ld %9.3f\n", pts[c].ctx, pts[c].kv_bytes, d,
               pts[c].kv_bytes ? (double)d / (double)pts[c].kv_bytes : 0, dt, pts[c].kv_bits);
    }
}

int cmd_bench(int argc, char **argv) {
    opts o;
    opts_init(&o, argv[1]);
    o.file = DEFAULT_TEXT;
    int rss_only = 0, bw_reps = 5, reps = 5, n_gen = 32, fill = 0;
    long bw_mb = 1024;
    const char *json_file = NULL, *ctx_list = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(bench_help, stdout); finish_stdout(); return 0; }
        else if (!strcmp(a, "--list-codecs")) {
            for (int c = 0; vq_codec_name(c); c++) puts(vq_codec_name(c));
            finish_stdout();
            return 0;
        }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) die("%s needs a file", a); o.file = v; i++; }
        else if (!strcmp(a, "--ctx")) { if (!v) die("--ctx needs a list"); ctx_list = v; i++; }
        else if (!strcmp(a, "--reps")) { reps = (int)parse_long(a, v, 1, 1000); i++; }
        else if (!strcmp(a, "--gen")) { n_gen = (int)parse_long(a, v, 1, 100000); i++; }
        else if (!strcmp(a, "--bw-mb")) { bw_mb = parse_long(a, v, 1, 1 << 20); i++; }
        else if (!strcmp(a, "--bw-reps")) { bw_reps = (int)parse_long(a, v, 1, 1000); i++; }
        else if (!strcmp(a, "--json-file")) { if (!v) die("%s needs a file", a); json_file = v; i++; }
        else if (!strcmp(a, "--rss-only")) rss_only = 1;
        else if (!strcmp(a, "--fill")) fill = 512;
        else if (!strncmp(a, "--fill=", 7)) fill = (int)parse_long("--fill", a + 7, 1, 1 << 20);
        else die("bench: unknown option '%s' (see veloxquant bench --help)", a);
    }
    if (!ctx_list) ctx_list = rss_only ? "8192" : "1024,4096,8192";
    int ctxs[16];
    int n_ctxs = parse_int_list("--ctx", ctx_list, ctxs, 16, 1, 1 << 20);
    if (o.n_kv == 0) { o.kv_list[0] = "f16"; o.n_kv = 1; }
    if (rss_only && o.n_kv != 1)
        die("bench --rss-only: give exactly one --kv (got %d): one arm per process, so no arm inherits another's freed memory", o.n_kv);
    if (rss_only && json_file) die("bench --rss-only: --json-file is for the throughput report (use --json)");
    if (o.device && (rss_only || fill))
        die("bench --device %s: %s runs on the CPU's cache only (not on a device yet)", o.device,
            rss_only ? "--rss-only" : "--fill");
    vq_kv_spec *specs[CLI_MAX_ARMS];
    parse_specs(&o, specs);   /* a bad spec fails before any timing */
    out_file *jf = json_file ? out_open(json_file) : NULL;   /* and an unwritable --json-file too */
    char cmdline[2048], machine[512];
    command_line(argc, argv, cmdline, sizeof cmdline);
    vq_cpu_description(machine, sizeof machine);
    vq_model *m = load_model(&o);
    size_t len = 0;
    char *text = read_text(o.file, "text file", &len);
    int n_tok;
    int *tok = tokenize_all(m, text, len, 0, 0, &n_tok);
    free(text);
    vq_err err;
    if (rss_only) {
        vq_rss_point pts[16];
        vq_rss_result rr;
        if (vq_bench_rss(m, specs[0], tok, n_tok, ctxs, n_ctxs, o.batch, fill, 0x5eed, pts, &rr, &err))
            die("%s", err.msg);
        rss_report(&o, fill, cmdline, machine, vq_model_path(m), pts, n_ctxs, &rr);
        free(tok);
        free_specs(specs, o.n_kv);
        vq_model_free(m);
        finish_stdout();
        return 0;
    }
    vq_tput_params bp = { .ctxs = ctxs, .n_ctxs = n_ctxs, .specs = (const vq_kv_spec *const *)specs, .n_specs = o.n_kv,
                          .reps = reps, .n_gen = n_gen, .batch = o.batch, .text = tok, .n_text = n_tok,
                          .kv_seed = 0x5eed, .fill = fill };
    size_t ns = (size_t)reps * n_ctxs * o.n_kv, bw_bytes = (size_t)bw_mb << 20;
    vq_tput_sample *smp = calloc(ns, sizeof *smp);
    double *bw = calloc(2 * (size_t)bw_reps, sizeof(double));
    if (!smp || !bw) die("out of memory");
    if (vq_bench_read_bandwidth(bw_bytes, bw_reps, bw, &err))
        die("bench: no memory for the %ld MiB bandwidth buffer (--bw-mb)", bw_mb);
    if (vq_bench_throughput(m, &bp, smp, progress, NULL, &err)) die("%s", err.msg);
    /* the run's peak: the largest per-sample peak (each sample resets VmHWM), so the bandwidth
     * buffer is not in it; VmHWM itself when the kernel refused the reset */
    size_t peak = 0;
    for (size_t k = 0; k < ns; k++) if (smp[k].peak_rss > peak) peak = smp[k].peak_rss;
    if (!peak) peak = vq_rss_peak_bytes();
    if (vq_bench_read_bandwidth(bw_bytes, bw_reps, bw + bw_reps, &err))
        die("bench: no memory for the %ld MiB bandwidth buffer", bw_mb);
    vq_model_info mi = vq_model_get_info(m);
    report_in ri = { .command = cmdline, .machine = machine, .model_path = vq_model_path(m),
                     .isa = vq_kernels_isa_name(), .model_bytes = mi.file_bytes, .threads = vq_max_threads(),
                     .p = &bp, .labels = o.kv_list, .samples = smp, .bw_gbps = bw, .n_bw = 2 * bw_reps,
                     .bw_bytes = bw_bytes, .peak_rss = peak };
    if (report(stdout, &ri, o.json)) die("writing the output failed: %s", strerror(errno ? errno : EIO));
    if (jf) {
        if (report(out_stream(jf), &ri, 1)) die("%s: write failed: %s", json_file, strerror(errno ? errno : EIO));
        out_commit(jf);
    }
    free(bw);
    free(smp);
    free(tok);
    free_specs(specs, o.n_kv);
    vq_model_free(m);
    finish_stdout();
    return 0;
}
