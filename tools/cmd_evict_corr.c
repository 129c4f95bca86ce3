/* cmd_evict_corr.c: `veloxquant evict-corr`: per layer, Spearman's rank correlation of each
 * eviction policy's scores with the attention later queries really pay (vq_evict_correlation). */
#ifndef VQ_EXPERIMENTAL   /* the build may define it for every file */
#define VQ_EXPERIMENTAL
#endif
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"

static const char *evict_corr_help =
    "usage: veloxquant evict-corr -f TEXT --kv SPEC... [options]\n"
    "For each --kv spec (a codec with an eviction policy, e.g. 'f16;evict=knorm,budget=1.0'; the\n"
    "budget must keep every row), runs the text's first --at tokens, reads the policy's scores, and\n"
    "correlates them (Spearman, per layer) with the attention the next --future tokens' queries pay\n"
    "to those rows (measured by an evict=h2o cache of the same codec).\n"
    "  -m, --model FILE   model (default " DEFAULT_MODEL ")\n"
    "      --tokenizer F  tokenizer for llama2.c checkpoints\n"
    "  -f, --file TEXT    text file (default " DEFAULT_TEXT ")\n"
    "      --kv SPEC      a spec (repeatable)\n"
    "      --at N         tokens before the scores are read (default 384)\n"
    "      --future N     tokens whose attention is the truth (default 128)\n"
    "      --per-layer    print every layer\n"
    "  -t, --threads N    threads\n";

#define MAX_SPECS 64

int cmd_evict_corr(int argc, char **argv) {
    opts o;
    opts_init(&o, argv[1]);
    o.file = DEFAULT_TEXT;
    int at = 384, future = 128, per_layer = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(evict_corr_help, stdout); finish_stdout(); return 0; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) die("%s needs a file", a); o.file = v; i++; }
        else if (!strcmp(a, "--at")) { at = (int)parse_long(a, v, 2, 1 << 20); i++; }
        else if (!strcmp(a, "--future")) { future = (int)parse_long(a, v, 1, 1 << 20); i++; }
        else if (!strcmp(a, "--per-layer")) per_layer = 1;
        else die("evict-corr: unknown option '%s' (see veloxquant evict-corr --help)", a);
    }
    if (o.n_kv < 1) die("evict-corr: give at least one --kv SPEC with an eviction policy");
    if (o.n_kv > MAX_SPECS) die("evict-corr: at most %d --kv", MAX_SPECS);
    vq_kv_spec *specs[MAX_SPECS];
    vq_err err;
    for (int i = 0; i < o.n_kv; i++)
        if (!(specs[i] = vq_kv_spec_parse(o.kv_list[i], &err))) die("%s", err.msg);
    vq_model *m = load_model(&o);
    size_t len = 0;
    char *text = read_text(o.file, "text file", &len);
    int n_tok;
    int *tok = tokenize_all(m, text, len, vq_token_add_bos(m), 0, &n_tok);
    free(text);
    const int NL = vq_model_n_layers(m);
    double *rho = malloc(sizeof(double) * (size_t)o.n_kv * NL);
    if (!rho) die("evict-corr: out of memory");
    if (vq_evict_correlation(m, (const vq_kv_spec *const *)specs, o.n_kv, tok, n_tok, at, future, rho, &err))
        die("%s", err.msg);
    printf("Spearman(policy score after %d tokens, attention of the next %d queries), per layer\n", at, future);
    printf("%-60s %8s %8s %8s\n", "spec", "mean", "min", "max");
    for (int a = 0; a < o.n_kv; a++) {
        double s = 0, mn = 1e9, mx = -1e9;
        for (int l = 0; l < NL; l++) {
            double r = rho[(size_t)a * NL + l];
            s += r; mn = r < mn ? r : mn; mx = r > mx ? r : mx;
        }
        printf("%-60s %8.4f %8.4f %8.4f\n", vq_kv_spec_text(specs[a]), s / NL, mn, mx);
        if (per_layer)
            for (int l = 0; l < NL; l++) printf("    layer %2d %8.4f\n", l, rho[(size_t)a * NL + l]);
    }
    free(rho);
    free(tok);
    for (int i = 0; i < o.n_kv; i++) vq_kv_spec_free(specs[i]);
    vq_model_free(m);
    finish_stdout();
    return 0;
}
