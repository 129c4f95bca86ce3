/* cmd_calibrate.c: `veloxquant calibrate`: per-layer, per-head q/k/v statistics of a model on a
 * calibration text, written to a calibration file (docs/calibration-format.md) that KV specs use
 * with calib=FILE (tq_split ranks RoPE pairs with it). */
#ifndef VQ_EXPERIMENTAL   /* the build may define it for every file */
#define VQ_EXPERIMENTAL
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "json.h"

#define DEFAULT_CALIB_TEXT "../shared/data/calibration-moby-dick.txt"

static const char *calibrate_help =
    "usage: veloxquant calibrate -m MODEL -f TEXT -o FILE [options]\n"
    "Runs the model over the text in windows of --ctx tokens (each from position 0) and writes, per\n"
    "layer and head, the statistics of q, k, v after RoPE: per-channel means and second moments and\n"
    "each RoPE pair's query x key energy, and each KV head's Q-Filter for evict=qfilters\n"
    "(docs/calibration-format.md). The file is written atomically\n"
    "and records the model (name, layers, heads, head_dim, config hash).\n"
    "  -m, --model FILE   model (default " DEFAULT_MODEL ")\n"
    "      --tokenizer F  tokenizer for llama2.c checkpoints\n"
    "  -f, --file TEXT    calibration text (default " DEFAULT_CALIB_TEXT ")\n"
    "  -o, --out FILE     the calibration file to write (required)\n"
    "      --tokens N     tokens of the text to use (default 16384; fewer if the text is shorter)\n"
    "      --ctx N        window length (default 1024)\n"
    "  -t, --threads N    threads\n"
    "      --json         the summary as JSON\n";

int cmd_calibrate(int argc, char **argv) {
    opts o;
    opts_init(&o, argv[1]);
    o.file = DEFAULT_CALIB_TEXT;
    const char *out = NULL;
    long n_tokens = 16384, ctx = 1024;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(calibrate_help, stdout); finish_stdout(); return 0; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) die("%s needs a file", a); o.file = v; i++; }
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) { if (!v || !*v) die("%s needs a file", a); out = v; i++; }
        else if (!strcmp(a, "--tokens")) { n_tokens = parse_long(a, v, 2, 1 << 22); i++; }
        else if (!strcmp(a, "--ctx")) { ctx = parse_long(a, v, 2, 1 << 20); i++; }
        else die("calibrate: unknown option '%s' (see veloxquant calibrate --help)", a);
    }
    if (!out) die("calibrate: -o FILE is required (where the calibration is written)");
    if (o.n_kv) die("calibrate: --kv does not apply (the statistics come from an f32 cache)");
    vq_model *m = load_model(&o);
    size_t len = 0;
    char *text = read_text(o.file, "calibration text", &len);
    int n_tok;
    int *tok = tokenize_all(m, text, len, vq_token_add_bos(m), 0, &n_tok);
    free(text);
    if (n_tok < 2) die("calibrate: %s has %d tokens (need >= 2)", o.file, n_tok);
    if (n_tok > n_tokens) n_tok = (int)n_tokens;
    vq_calibrate_info info;
    vq_err err;
    if (vq_calibrate(m, tok, n_tok, (int)ctx, out, &info, &err)) die("%s", err.msg);
    if (o.json) {
        json j;
        json_init(&j, stdout);
        json_obj(&j);
        json_kstr(&j, "model", vq_model_path(m));
        json_kstr(&j, "out", out);
        json_kint(&j, "tokens", info.n_tokens);
        json_kint(&j, "windows", info.n_windows);
        json_kuint(&j, "file_bytes", info.file_bytes);
        char h[24];
        snprintf(h, sizeof h, "%016llx", (unsigned long long)info.config_hash);
        json_kstr(&j, "config_hash", h);
        json_obj_end(&j);
        json_newline(&j);
    } else {
        printf("calibrate: %s: %ld tokens in %d windows of <= %ld -> %s (%zu bytes, config hash %016llx)\n",
               vq_model_path(m), info.n_tokens, info.n_windows, ctx, out, info.file_bytes,
               (unsigned long long)info.config_hash);
    }
    finish_stdout();
    free(tok);
    vq_model_free(m);
    return 0;
}
