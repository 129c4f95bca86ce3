/* cmd_bench_share.c: `veloxquant bench-share`: K processes decoding one model at once, and what
 * they hold of its weights (Pss of the mapping), beside the baseline that copies at load. */
#ifndef VQ_EXPERIMENTAL   /* the build may define it for every file */
#define VQ_EXPERIMENTAL
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "json.h"

static const char *share_help =
    "usage: veloxquant bench-share [-m MODEL] [-k N] [--decode N] [--copy-weights] [--json]\n"
    "Starts N processes that each load MODEL (a GGUF or reservoir file) and decode (1 thread, f16\n"
    "cache); while all N decode, reads each one's /proc/PID/smaps: Rss and Pss of the weights'\n"
    "mapping, and the process totals (smaps_rollup). Pss splits a shared page among the processes\n"
    "that map it, so N processes holding the weights once sum to about the file's size. With\n"
    "--copy-weights each process reads the file into its own memory instead (the baseline).\n"
    "  -m, --model FILE   model (default " DEFAULT_MODEL ")\n"
    "      --tokenizer F  tokenizer for llama2.c checkpoints\n"
    "  -k, --procs N      processes (default 4, at most 16)\n"
    "      --decode N     decode steps each runs before the reading (default 32)\n"
    "      --copy-weights the baseline: copy the weights at load instead of mapping them\n"
    "      --json         the figures as JSON\n";

int cmd_bench_share(int argc, char **argv) {
    opts o;
    opts_init(&o, argv[1]);
    long k = 4, dec = 32;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(share_help, stdout); finish_stdout(); return 0; }
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-k") || !strcmp(a, "--procs")) { k = parse_long(a, v, 1, VQ_SHARE_MAX); i++; }
        else if (!strcmp(a, "--decode")) { dec = parse_long(a, v, 1, 100000); i++; }
        else die("bench-share: unknown option '%s' (see veloxquant bench-share --help)", a);
    }
    if (o.n_kv || o.weights) die("bench-share: --kv and --weights do not apply (f16 cache, the file's weights)");
    check_regular_file(o.model, "-m");
    vq_bench_share_params p = { o.model, o.tokenizer, (int)k, (int)dec, o.copy_weights };
    vq_bench_share_result r;
    vq_err err;
    if (vq_bench_share(&p, &r, &err)) die("%s", err.msg);
    double fmb = r.file_bytes / 1e6, map_mb = r.total_map_pss_kb * 1024 / 1e6;
    if (o.json) {
        json j;
        json_init(&j, stdout);
        json_obj(&j);
        json_kstr(&j, "model", o.model);
        json_kstr(&j, "mode", o.copy_weights ? "copy" : "mmap");
        json_kuint(&j, "file_bytes", r.file_bytes);
        json_kint(&j, "procs", r.n_procs);
        json_kuint(&j, "total_map_pss_kb", r.total_map_pss_kb);
        json_knum(&j, "map_pss_over_file", "%.4f", map_mb / fmb);
        json_kuint(&j, "total_pss_kb", r.total_pss_kb);
        json_kuint(&j, "total_rss_kb", r.total_rss_kb);
        json_key(&j, "proc");
        json_arr(&j);
        for (int i = 0; i < r.n_procs; i++) {
            json_obj(&j);
            json_kint(&j, "pid", r.proc[i].pid);
            json_kuint(&j, "map_rss_kb", r.proc[i].map_rss_kb);
            json_kuint(&j, "map_pss_kb", r.proc[i].map_pss_kb);
            json_kuint(&j, "rss_kb", r.proc[i].rss_kb);
            json_kuint(&j, "pss_kb", r.proc[i].pss_kb);
            json_obj_end(&j);
        }
        json_arr_end(&j);
        json_obj_end(&j);
        json_newline(&j);
    } else {
        printf("bench-share: %s (%.2f MB), %d processes, weights %s\n", o.model, fmb, r.n_procs,
               o.copy_weights ? "copied at load (baseline)" : "mapped");
        printf("  proc  pid      weights Rss MB  weights Pss MB  process Rss MB  process Pss MB\n");
        for (int i = 0; i < r.n_procs; i++)
            printf("  %4d  %-7d  %14.2f  %14.2f  %14.2f  %14.2f\n", i, r.proc[i].pid,
                   r.proc[i].map_rss_kb * 1024 / 1e6, r.proc[i].map_pss_kb * 1024 / 1e6,
                   r.proc[i].rss_kb * 1024 / 1e6, r.proc[i].pss_kb * 1024 / 1e6);
        printf("  total weights Pss %.2f MB = %.3fx the file; total process Pss %.2f MB, Rss %.2f MB\n", map_mb,
               map_mb / fmb, r.total_pss_kb * 1024 / 1e6, r.total_rss_kb * 1024 / 1e6);
    }
    finish_stdout();
    return 0;
}
