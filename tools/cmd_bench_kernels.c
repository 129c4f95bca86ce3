/* cmd_bench_kernels.c: `veloxquant bench-kernels`: decode-attention time of one step and encode
 * rate per KV codec through the real store, against f16 and a measured memcpy ceiling: the human
 * table, or every raw repeat as JSON. */
#ifndef VQ_EXPERIMENTAL   /* the build may define it for every file */
#define VQ_EXPERIMENTAL
#endif
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "json.h"

static const char *bench_kernels_help =
    "usage: veloxquant bench-kernels [options]\n"
    "Decode-attention time of one step (1 KV head, GQA group of 3 query heads) and encode rate per\n"
    "KV codec, through the real store, against f16 and a measured memcpy ceiling.\n"
    "  --n LIST           rows in the cache (default 1024,4096,16384,65536)\n"
    "  --dims LIST        head_dim values (default 64,128)\n"
    "  --kv SPEC          an arm (repeatable; default: every codec + turboquant_mse:k=4,v=4, q4_0:rotate=1);\n"
    "                     f16 is always the first arm (the baseline)\n"
    "  --reps N           repeats, arms interleaved (default 5)\n"
    "  --pool-mb MB       each arm rotates over caches holding >= MB MiB (default 512)\n"
    "  --split            also time score and accumulate apart through the codec table\n"
    "  -t, --threads N    threads for attention (default 1: single-threaded)\n"
    "  -s, --seed N       data seed\n"
    "      --json         every raw repeat as JSON\n"
    "      --json-file F  also write the JSON to F (the table still goes to stdout); F is replaced\n"
    "                     only by a complete report\n";

typedef struct bk_stat { double med, min, max; } bk_stat;
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
/* median/min/max of the positive finite values (a failed or unmeasured repeat is 0) */
static bk_stat stat_of(const double *v, int n) {
    bk_stat s = { 0, 0, 0 };
    double *t = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!t) die("out of memory");
    int m = 0;
    for (int i = 0; v && i < n; i++) if (v[i] > 0 && isfinite(v[i])) t[m++] = v[i];
    if (m) {
        qsort(t, (size_t)m, sizeof *t, cmp_d);
        s.med = m % 2 ? t[m / 2] : 0.5 * (t[m / 2 - 1] + t[m / 2]);
        s.min = t[0];
        s.max = t[m - 1];
    }
    free(t);
    return s;
}

static void jarr(json *j, const char *k, const double *v, int n) {
    json_key(j, k);
    json_arr(j);
    for (int i = 0; v && i < n; i++) json_num(j, "%.9g", v[i]);
    json_arr_end(j);
}

static int print_json(FILE *f, const vq_bench_kernels_result *r) {
    int R = r->reps;
    json j;
    json_init(&j, f);
    json_obj(&j);
    json_kstr(&j, "machine", r->machine);
    json_kstr(&j, "isa", r->isa);
    json_kint(&j, "threads", r->threads);
    json_kint(&j, "group", VQ_BK_GROUP_SIZE);
    json_kint(&j, "reps", R);
    json_kuint(&j, "pool_bytes", r->pool_bytes);
    json_knum(&j, "load1_before", "%.2f", r->load1_before);
    json_knum(&j, "load1_after", "%.2f", r->load1_after);
    json_kuint(&j, "copy_bytes", r->copy_bytes);
    jarr(&j, "copy_bps", r->copy_bps, 2 * R);
    jarr(&j, "read_bps", r->read_bps, 2 * R);
    jarr(&j, "copy_wall_bps", r->copy_wall_bps, 2 * R);
    json_kstr(&j, "attend_clock", r->threads == 1 ? "thread_cpu" : "wall");
    json_key(&j, "arms");
    json_arr(&j);
    for (int i = 0; i < r->n_arms; i++) {
        const vq_bk_arm_result *a = &r->arms[i];
        json_newline(&j);
        json_obj(&j);
        json_kstr(&j, "kv", a->label);
        json_kint(&j, "n", a->n);
        json_kint(&j, "d", a->d);
        json_kbool(&j, "ok", a->ok);
        if (!a->ok) { json_kstr(&j, "why", a->why); json_obj_end(&j); continue; }
        json_kstr(&j, "normalized", a->normalized);
        json_kint(&j, "pool", a->pool);
        json_kuint(&j, "kv_bytes", a->kv_bytes);
        json_knum(&j, "bits_per_elem", "%.4f", a->bits);
        json_knum(&j, "code_bits", "%.4f", a->code_bits);
        jarr(&j, "attend_s", a->attend_s, R);
        jarr(&j, "attend_wall_s", a->attend_wall_s, R);
        jarr(&j, "encode_rows_per_s", a->encode_rps, R);
        if (a->score_s) {
            jarr(&j, "score_s", a->score_s, R);
            jarr(&j, "accumulate_s", a->accum_s, R);
        }
        json_obj_end(&j);
    }
    json_arr_end(&j);
    json_obj_end(&j);
    return json_end(&j);
}

static int print_table(FILE *f, const vq_bench_kernels_result *r) {
    int R = r->reps;
    bk_stat cp = stat_of(r->copy_bps, 2 * R), rd = stat_of(r->read_bps, 2 * R);
    fprintf(f, "machine: %s\nkernels %s, %d thread(s), GQA group %d (1 KV head, %d query heads, one decode step), "
               "%d repeats interleaved, each arm's pool of caches >= %.0f MiB\n",
            r->machine, r->isa, r->threads, VQ_BK_GROUP_SIZE, VQ_BK_GROUP_SIZE, R, r->pool_bytes / 1048576.0);
    bk_stat cw = stat_of(r->copy_wall_bps, 2 * R);
    fprintf(f, "clock: %s (us/step, GB/s, %%copy, encode, split); wall-clock us/step in the 'wall' column\n",
            r->threads == 1 ? "thread CPU time (descheduled time not counted; memory stalls are)" : "wall time");
    fprintf(f, "memcpy %.0f MiB: %.2f GB/s [%.2f, %.2f] by CPU time, %.2f GB/s by wall (bytes copied/s; the ceiling); "
               "read-only sweep %.2f GB/s [%.2f, %.2f]\n",
            r->copy_bytes / 1048576.0, cp.med / 1e9, cp.min / 1e9, cp.max / 1e9, cw.med / 1e9, rd.med / 1e9, rd.min / 1e9, rd.max / 1e9);
    fprintf(f, "load average (1 min): %.2f before, %.2f after\n", r->load1_before, r->load1_after);
    int has_split = r->n_arms && r->arms[0].score_s;
    int prev_n = -1, prev_d = -1;
    bk_stat base = { 0, 0, 0 };
    for (int i = 0; i < r->n_arms; i++) {
        const vq_bk_arm_result *a = &r->arms[i];
        if (a->n != prev_n || a->d != prev_d) {
            prev_n = a->n; prev_d = a->d;
            base = a->ok ? stat_of(a->attend_s, R) : (bk_stat){ 0, 0, 0 };   /* f16 is first */
            fprintf(f, "\nN = %d rows, head_dim %d (f16 spread: %.1f%% of its median)\n", a->n, a->d,
                    base.med > 0 ? 100 * (base.max - base.min) / base.med : 0);
            fprintf(f, "%-26s %6s %11s %6s | %-27s | %8s | %-20s | %7s %6s | %9s", "kv", "bits", "bytes/step", "pool",
                    "us/step med [min,max]", "wall us", "vs f16 med [lo,hi]", "GB/s", "%copy", "enc Mr/s");
            if (has_split) fprintf(f, " | %8s %8s", "score us", "acc us");
            fputc('\n', f);
        }
        if (!a->ok) {
            fprintf(f, "%-26s unsupported: %.100s\n", a->label, a->why);
            continue;
        }
        bk_stat t = stat_of(a->attend_s, R), e = stat_of(a->encode_rps, R), tw = stat_of(a->attend_wall_s, R);
        double gbs = (double)a->kv_bytes / t.med / 1e9;
        fprintf(f, "%-26s %6.2f %11zu %6d | %8.1f [%7.1f,%8.1f] | %8.1f | %5.2fx [%5.2f,%5.2f] | %7.2f %5.0f%% | %9.2f",
                a->label, a->bits, a->kv_bytes, a->pool, t.med * 1e6, t.min * 1e6, t.max * 1e6, tw.med * 1e6,
                base.med / t.med, base.min / t.max, base.max / t.min, gbs, 100 * gbs * 1e9 / cp.med, e.med / 1e6);
        if (a->score_s) {
            bk_stat ss = stat_of(a->score_s, R), sa = stat_of(a->accum_s, R);
            fprintf(f, " | %8.1f %8.1f", ss.med * 1e6, sa.med * 1e6);
        }
        fputc('\n', f);
    }
    /* the targets, stated against what was measured */
    fputc('\n', f);
    for (int i = 0; i < r->n_arms; i++) {
        const vq_bk_arm_result *a = &r->arms[i];
        if (!a->ok || strcmp(a->label, "turboquant_mse:k=4,v=4") || a->n < 16384) continue;
        const vq_bk_arm_result *b = &r->arms[i - i % r->n_specs];   /* f16: first arm of this (N, d) */
        if (!b->ok) continue;
        bk_stat t = stat_of(a->attend_s, R), tb = stat_of(b->attend_s, R);
        double gbs = (double)a->kv_bytes / t.med;
        fprintf(f, "target N=%d d=%d: turboquant_mse:k=4,v=4 %.2fx f16 (target >= 2.5: %s), %.0f%% of memcpy (target >= 60%%: %s)\n",
                a->n, a->d, tb.med / t.med, tb.med / t.med >= 2.5 ? "met" : "NOT met",
                100 * gbs / cp.med, gbs / cp.med >= 0.6 ? "met" : "NOT met");
    }
    return fflush(f) || ferror(f) ? -1 : 0;
}

static void bk_progress(const char *what, void *user) {
    (void)user;
    fprintf(stderr, "bench-kernels: %s\n", what);
}

int cmd_bench_kernels(int argc, char **argv) {
    opts o;
    opts_init(&o, argv[1]);
    int ns[16] = { 1024, 4096, 16384, 65536 }, n_ns = 4, dims[8] = { 64, 128 }, n_dims = 2, split = 0, reps = 5;
    long pool_mb = 512;
    const char *json_file = NULL;
    o.threads = 1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(bench_kernels_help, stdout); finish_stdout(); return 0; }
        else if (!strcmp(a, "--n")) { if (!v) die("--n needs a list"); n_ns = parse_int_list(a, v, ns, 16, 1, 1 << 22); i++; }
        else if (!strcmp(a, "--dims")) { if (!v) die("--dims needs a list"); n_dims = parse_int_list(a, v, dims, 8, 1, 4096); i++; }
        else if (!strcmp(a, "--reps")) { reps = (int)parse_long(a, v, 1, 1000); i++; }
        else if (!strcmp(a, "--pool-mb")) { pool_mb = parse_long(a, v, 1, 1 << 20); i++; }
        else if (!strcmp(a, "--split")) split = 1;
        else if (!strcmp(a, "--json-file")) { if (!v) die("%s needs a file", a); json_file = v; i++; }
        else die("bench-kernels: unknown option '%s' (see veloxquant bench-kernels --help)", a);
    }
    /* the arms: f16 first (the baseline), then each --kv once; every one parsed before any timing */
    const char *labels[CLI_MAX_ARMS + 1];
    vq_kv_spec *specs[CLI_MAX_ARMS + 1];
    int n_specs = 0;
    vq_err err;
    if (o.n_kv > 0) {
        labels[n_specs++] = "f16";
        for (int a = 0; a < o.n_kv; a++) {
            int dup = 0;
            for (int b = 0; b < n_specs; b++) dup |= !strcmp(labels[b], o.kv_list[a]);
            if (!dup) labels[n_specs++] = o.kv_list[a];
        }
        for (int a = 0; a < n_specs; a++)
            if (!(specs[a] = vq_kv_spec_parse(labels[a], &err))) die("%s", err.msg);
    }
    out_file *jf = json_file ? out_open(json_file) : NULL;
    vq_bench_kernels_params p = { .ns = ns, .n_ns = n_ns, .dims = dims, .n_dims = n_dims,
                                  .specs = (const vq_kv_spec *const *)specs, .labels = labels, .n_specs = n_specs,
                                  .reps = reps, .threads = o.threads, .pool_bytes = (size_t)pool_mb << 20,
                                  .split = split, .seed = o.seed ? o.seed : 0x5eed };
    vq_bench_kernels_result r;
    vq_status s = vq_bench_kernels_run(&p, &r, bk_progress, NULL, &err);
    if (s) { vq_bench_kernels_result_free(&r); die("%s", err.msg); }
    if (o.json ? print_json(stdout, &r) : print_table(stdout, &r))
        die("writing the output failed: %s", strerror(errno ? errno : EIO));
    if (jf) {
        if (print_json(out_stream(jf), &r)) die("%s: write failed: %s", json_file, strerror(errno ? errno : EIO));
        out_commit(jf);
    }
    vq_bench_kernels_result_free(&r);
    for (int a = 0; a < n_specs; a++) vq_kv_spec_free(specs[a]);
    finish_stdout();
    return 0;
}
