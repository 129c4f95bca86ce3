/* cmd_calibrate.c: `veloxquant calibrate`: per-layer, per-head q/k/v statistics of a model on a
 * calibration text, written to a calibration file (docs/calibration-format.md) that KV specs use
 * with calib=FILE (tq_split ranks RoPE pairs with it; lowrank projects on its axes). */
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
    "each RoPE pair's query x key energy, each KV head's Q-Filter for evict=qfilters, and each\n"
    "KV head's key and value projections for the lowrank codec (docs/calibration-format.md,\n"
    "version 4; docs/codecs-lowrank.md). The file is written atomically\n"
    "and records the model (name, layers, heads, head_dim, config hash).\n"
    "  -m, --model FILE   model (default " DEFAULT_MODEL ")\n"
    "      --tokenizer F  tokenizer for llama2.c checkpoints\n"
    "  -f, --file TEXT    calibration text (default " DEFAULT_CALIB_TEXT ")\n"
    "  -o, --out FILE     the calibration file to write (required)\n"
    "      --tokens N     tokens of the text to use (default 16384; fewer if the text is shorter)\n"
    "      --ctx N        window length (default 1024)\n"
    "      --vecinfer K,V also train the VecInfer codebooks (codec vecinfer): sub-vectors of K key and\n"
    "                     V value coordinates (1, 2, 4 or 8: 4/K and 4/V bits per element), 16 entries\n"
    "                     each, k-means on the first --vecinfer-rows rows of each layer (file version 5)\n"
    "      --vecinfer-rows N  rows per layer for that k-means (default 8192)\n"
    "      --vecinfer-alpha A key smoothing lambda = (channel max |k|)^A, 0 < A <= 1 (default 0.5;\n"
    "                     1 is the paper's: 0.5 gave lower perplexity, docs/codecs-vecinfer.md)\n"
    "      --vecinfer-vnorm  train the value codebooks on unit-norm rows: the codec then keeps each\n"
    "                     value row's norm in fp16 (+16 bits a row; codec parameter vnorm=1)\n"
    "  -t, --threads N    threads\n"
    "      --json         the summary as JSON\n";

int cmd_calibrate(int argc, char **argv) {
    opts o;
    opts_init(&o, argv[1]);
    o.file = DEFAULT_CALIB_TEXT;
    const char *out = NULL;
    long n_tokens = 16384, ctx = 1024, vi_rows = 8192;
    int vi_k = 0, vi_v = 0;
    double vi_alpha = 0.5;
    int vi_vnorm = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(calibrate_help, stdout); finish_stdout(); return 0; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) die("%s needs a file", a); o.file = v; i++; }
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) { if (!v || !*v) die("%s needs a file", a); out = v; i++; }
        else if (!strcmp(a, "--tokens")) { n_tokens = parse_long(a, v, 2, 1 << 22); i++; }
        else if (!strcmp(a, "--ctx")) { ctx = parse_long(a, v, 2, 1 << 20); i++; }
        else if (!strcmp(a, "--vecinfer-vnorm")) vi_vnorm = 1;
        else if (!strcmp(a, "--vecinfer-alpha")) {
            char *end = NULL;
            vi_alpha = v ? strtod(v, &end) : 0.0;
            if (!v || end == v || *end || !(vi_alpha > 0 && vi_alpha <= 1)) die("%s needs a number in (0, 1], got '%s'", a, v ? v : "");
            i++;
        }
        else if (!strcmp(a, "--vecinfer-rows")) { vi_rows = parse_long(a, v, 16, 1 << 20); i++; }
        else if (!strcmp(a, "--vecinfer")) {
            char tail = 0;
            if (!v || sscanf(v, "%d,%d%c", &vi_k, &vi_v, &tail) != 2 || vi_k < 1 || vi_v < 1)
                die("%s needs K,V (sub-vector lengths of keys and values: 1, 2, 4 or 8), got '%s'", a, v ? v : "");
            i++;
        }
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
    if (vq_calibrate_vi(m, tok, n_tok, (int)ctx, vi_k, vi_v, (int)vi_rows, vi_alpha, vi_vnorm, out, &info, &err)) die("%s", err.msg);
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

static const char *calib_layers_help =
    "usage: veloxquant calib-layers FILE [--top N] [--spec SPEC] [--json]\n"
    "Ranks a calibration file's layers by query x key energy (the sum over KV heads and RoPE pairs\n"
    "of the pair energy): the layers where a key codec's error moves the scores most, so where more\n"
    "key bits help most (docs/lowbit-keys.md, \"Per-layer budgets from calibration\").\n"
    "  --top N      the N highest layers as a --kv-layers value (default: a fifth of the layers)\n"
    "  --spec SPEC  the KV spec those layers get (checked); without it the value ends in =SPEC\n"
    "  --json       the table and the value as JSON\n"
    "e.g. veloxquant calib-layers smollm2.vqc --top 6 --spec 'k=kvquant:bits=3,qweight=1;v=turboquant_mse:bits=4;calib=smollm2.vqc'\n";

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int cmd_calib_layers(int argc, char **argv) {
    const char *file = NULL, *spec = NULL;
    long top = -1;
    int as_json = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(calib_layers_help, stdout); finish_stdout(); return 0; }
        else if (!strcmp(a, "--top")) { top = parse_long(a, v, 1, 4096); i++; }
        else if (!strcmp(a, "--spec")) { if (!v || !*v) die("%s needs a KV spec", a); spec = v; i++; }
        else if (!strcmp(a, "--json")) as_json = 1;
        else if (a[0] == '-' && a[1]) die("calib-layers: unknown option '%s' (see veloxquant calib-layers --help)", a);
        else if (file) die("calib-layers: one calibration file, got '%s' and '%s'", file, a);
        else file = a;
    }
    if (!file) die("calib-layers: a calibration FILE is required (one of `veloxquant calibrate`)");
    vq_err err;
    vq_kv_spec *ks = NULL;
    if (spec) {   /* checked like any --kv (a per-layer override's spec is a full spec) */
        ks = vq_kv_spec_parse(spec, &err);
        if (!ks) die("calib-layers: --spec: %s", err.msg);
        if (vq_kv_spec_n_overrides(ks))
            die("calib-layers: --spec '%s' holds a per-layer override of its own ('@'): give one spec", spec);
    }
    vq_calib_layers cl;
    if (vq_calib_layers_read(file, &cl, &err)) die("%s", err.msg);
    const int L = cl.n_layers;
    if (top < 0) top = L >= 5 ? L / 5 : 1;
    if (top > L) die("calib-layers: --top %ld is more than the file's %d layers", top, L);
    double total = 0;
    for (int l = 0; l < L; l++) total += cl.energy[l];
    int *sel = malloc(sizeof(int) * (size_t)top);
    if (!sel) die("calib-layers: out of memory");
    memcpy(sel, cl.rank, sizeof(int) * (size_t)top);
    qsort(sel, (size_t)top, sizeof(int), cmp_int);
    /* the --kv-layers value, composed by the spec API (no spec text is pasted here) */
    const size_t vcap = vq_kv_spec_layers_text(ks, sel, (int)top, NULL, 0) + 1;
    char *val = malloc(vcap);
    if (!val || vcap < 2) die("calib-layers: out of memory");
    vq_kv_spec_layers_text(ks, sel, (int)top, val, vcap);
    vq_kv_spec_free(ks);
    int *rank_of = malloc(sizeof(int) * (size_t)L);
    if (!rank_of) die("calib-layers: out of memory");
    for (int r = 0; r < L; r++) rank_of[cl.rank[r]] = r + 1;
    if (as_json) {
        json j;
        json_init(&j, stdout);
        json_obj(&j);
        json_kstr(&j, "file", file);
        json_kstr(&j, "model", cl.model);
        json_kint(&j, "n_layers", L);
        json_kint(&j, "tokens", cl.n_tokens);
        json_key(&j, "layers");
        json_arr(&j);
        for (int l = 0; l < L; l++) {
            json_obj(&j);
            json_kint(&j, "layer", l);
            json_knum(&j, "energy", "%.6g", cl.energy[l]);
            json_knum(&j, "share", "%.6f", total > 0 ? cl.energy[l] / total : 0.0);
            json_kint(&j, "rank", rank_of[l]);
            json_obj_end(&j);
        }
        json_arr_end(&j);
        json_key(&j, "top");
        json_arr(&j);
        for (long i = 0; i < top; i++) json_int(&j, sel[i]);
        json_arr_end(&j);
        json_kstr(&j, "kv_layers", val);
        json_obj_end(&j);
        json_newline(&j);
    } else {
        printf("calibration %s: model %s, %d layers, %d KV heads, head_dim %d, %ld tokens\n", file, cl.model, L,
               cl.n_kv_heads, cl.head_dim, cl.n_tokens);
        printf("rank  layer  q.k energy   share\n");
        for (int r = 0; r < L; r++) {
            int l = cl.rank[r];
            printf("%4d  %5d  %10.4g  %5.1f%%%s\n", r + 1, l, cl.energy[l], total > 0 ? 100.0 * cl.energy[l] / total : 0.0,
                   r < top ? "  *" : "");
        }
        printf("top %ld layers (*), as a --kv-layers value:\n--kv-layers '%s'\n", top, val);
    }
    finish_stdout();
    free(sel);
    free(val);
    free(rank_of);
    vq_calib_layers_free(&cl);
    return 0;
}
