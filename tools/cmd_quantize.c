/* cmd_quantize.c: `veloxquant quantize`: a model's weights re-coded into a reservoir file
 * (docs/reservoir-format.md), which every command then loads like a GGUF file, without copying. */
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmds.h"
#include "json.h"

static const char *quantize_help =
    "usage: veloxquant quantize -m IN -o OUT --weights SPEC [--json] [-v]\n"
    "Re-codes the weight matrices of a GGUF (or reservoir) file and writes a reservoir file: a\n"
    "versioned, checksummed file whose tensors are page-aligned, so that loading maps them with no\n"
    "copy and processes that load one file share its memory (docs/reservoir-format.md). The file is\n"
    "written atomically (a temp file beside OUT, then renamed).\n"
    "  -m, --model IN     source model (default " DEFAULT_MODEL ")\n"
    "  -o, --out OUT      the reservoir file to write (required)\n"
    "  -w, --weights SPEC TYPE[,CLASS=TYPE...] (required). TYPE: a weight type with a quantizer\n"
    "                     (q8_0, q4_0, q4_1, f16, f32, ...) or keep (the source's bytes). CLASS:\n"
    "                     embd, output, attn, ffn, or one matrix kind: attn_q, attn_k, attn_v,\n"
    "                     attn_output, ffn_gate, ffn_up, ffn_down; or, for some layers only,\n"
    "                     blk.L.CLASS or blk.A-B.CLASS (a layer class or group). A bare TYPE\n"
    "                     first sets every class; the last item naming a matrix sets its type.\n"
    "                     Norms and biases are copied; a matrix whose rows are not a multiple\n"
    "                     of the type's block is copied and listed.\n"
    "                     A tied output (no output.weight) gets its own tensor when output's type\n"
    "                     differs from embd's. Examples: q4_0,embd=q8_0,output=q8_0;\n"
    "                     keep,blk.0-1.ffn_down=tqw4 (only those two matrices re-coded)\n"
    "  -t, --threads N    threads for the conversion\n"
    "  -v, --verbose      one line per tensor (types, bytes, relative RMS error)\n"
    "      --json         the summary (and every tensor) as JSON\n";

/* SIGTERM, SIGINT, SIGHUP: blocked in every thread (set before OpenMP starts any, which inherit
 * the mask) and taken here, so the writer's temporary file (OUT.tmp.PID, src/formats/reservoir.c)
 * is removed before the process ends as the signal would have ended it. A signal after the rename
 * finds no temporary file: the output is then complete. */
static char tmp_path[PATH_MAX];
static sigset_t stop_sigs;

static void *on_stop(void *arg) {
    (void)arg;
    int sig = 0;
    if (sigwait(&stop_sigs, &sig)) return NULL;
    unlink(tmp_path);
    signal(sig, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &stop_sigs, NULL);
    raise(sig);
    _exit(128 + sig);
}

int cmd_quantize(int argc, char **argv) {
    opts o;
    opts_init(&o, argv[1]);
    const char *out = NULL;
    int verbose = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(quantize_help, stdout); finish_stdout(); return 0; }
        if (!strcmp(a, "-w")) { if (!v || !*v) die("%s needs a spec", a); o.weights = v; i++; continue; }
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-o") || !strcmp(a, "--out")) { if (!v || !*v) die("%s needs a file", a); out = v; i++; }
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) verbose = 1;
        else die("quantize: unknown option '%s' (see veloxquant quantize --help)", a);
    }
    if (!out) die("quantize: -o OUT is required (the reservoir file to write)");
    if (!o.weights) die("quantize: --weights SPEC is required (e.g. q8_0, or q4_0,embd=q8_0)");
    if (o.n_kv) die("quantize: --kv does not apply (quantize re-codes weights, not a cache)");
    if (o.copy_weights) die("quantize: --copy-weights does not apply");
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp.%ld", out, (long)getpid());
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGTERM);
    sigaddset(&stop_sigs, SIGINT);
    sigaddset(&stop_sigs, SIGHUP);
    pthread_t th;
    if (pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL) || pthread_create(&th, NULL, on_stop, NULL))
        die("quantize: cannot set up the signal handling thread");
    if (o.threads > 0) vq_set_threads(o.threads);
    check_regular_file(o.model, "-m");
    vq_quantize_info info;
    vq_err err;
    if (vq_quantize(o.model, out, o.weights, &info, &err)) die("quantize: %s", err.msg);
    if (o.json) {
        json j;
        json_init(&j, stdout);
        json_obj(&j);
        json_kstr(&j, "in", o.model);
        json_kstr(&j, "out", out);
        json_kstr(&j, "weights", info.weights);
        json_kint(&j, "tensors", info.n_tensors);
        json_kint(&j, "converted", info.n_converted);
        json_kint(&j, "kept", info.n_kept);
        json_kuint(&j, "src_bytes", info.src_bytes);
        json_kuint(&j, "out_bytes", info.out_bytes);
        json_kuint(&j, "file_bytes", info.file_bytes);
        json_knum(&j, "seconds", "%.3f", info.seconds);
        json_key(&j, "tensor");
        json_arr(&j);
        for (int i = 0; i < info.n_tensors; i++) {
            const vq_quantize_tensor *t = &info.t[i];
            json_obj(&j);
            json_kstr(&j, "name", t->name);
            json_kstr(&j, "src_type", t->src_type);
            json_kstr(&j, "type", t->dst_type);
            json_kuint(&j, "src_bytes", t->src_bytes);
            json_kuint(&j, "bytes", t->dst_bytes);
            json_knum(&j, "rel_rms", "%.6g", t->rel_rms);
            if (t->kept) json_kstr(&j, "kept", t->kept);
            json_obj_end(&j);
        }
        json_arr_end(&j);
        json_obj_end(&j);
        json_newline(&j);
    } else {
        if (verbose)
            for (int i = 0; i < info.n_tensors; i++) {
                const vq_quantize_tensor *t = &info.t[i];
                printf("  %-28s %-7s -> %-7s %10llu -> %10llu bytes  rel.rms %.5f%s%s\n", t->name, t->src_type,
                       t->dst_type, (unsigned long long)t->src_bytes, (unsigned long long)t->dst_bytes, t->rel_rms,
                       t->kept ? "  kept: " : "", t->kept ? t->kept : "");
            }
        for (int i = 0; i < info.n_tensors && !verbose; i++)
            if (info.t[i].kept) fprintf(stderr, "quantize: %s stays %s (%s)\n", info.t[i].name, info.t[i].src_type,
                                        info.t[i].kept);
        printf("quantize: %s -> %s: %d tensors (%d re-coded, %d as they were), %.2f MB -> %.2f MB of tensors, "
               "file %.2f MB, %.1f s\n  weights: %s\n", o.model, out, info.n_tensors, info.n_converted, info.n_kept,
               info.src_bytes / 1e6, info.out_bytes / 1e6, info.file_bytes / 1e6, info.seconds, info.weights);
    }
    vq_quantize_info_free(&info);
    finish_stdout();
    return 0;
}
