/* cmd_perplexity.c: `veloxquant perplexity`: perplexity of a text per KV arm. Every arm is run
 * before anything is printed, so a failure leaves no partial table or JSON on stdout. */
#ifndef VQ_EXPERIMENTAL   /* the build may define it for every file */
#define VQ_EXPERIMENTAL
#endif
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "json.h"

static const char *ppl_help =
    "usage: veloxquant perplexity -f TEXT [options]\n"
    "Perplexity of a text over non-overlapping windows.\n"
    "  -m, --model FILE      model (default " DEFAULT_MODEL ")\n"
    "      --tokenizer FILE  tokenizer for llama2.c checkpoints\n"
    "      --weights SPEC    re-code the weights in memory at load (e.g. q4_0,embd=q8_0; see\n"
    "                        veloxquant quantize --help); --copy-weights reads the file into memory\n"
    "  -f, --file FILE       the text ('-' = stdin)\n"
    "      --ctx N           window length in tokens (default 512)\n"
    "      --mode M          decode (one token at a time: every prediction reads the KV cache;\n"
    "                        default) or prefill (chunks of -b tokens)\n"
    "      --max-tokens N    score only the first N tokens of the text (default: all)\n"
    "      --split S         windows (default) or paragraphs (blank-line separated, each BOS + text\n"
    "                        cut at --ctx: the llama2.c reference convention)\n"
    "      --max-paragraphs N  paragraph mode: only the first N paragraphs\n"
    "      --bos-per-window  start every window with BOS\n"
    "      --score S         all (default: every prediction in a window) or second-half (only\n"
    "                        positions >= ctx/2, as llama.cpp's llama-perplexity scores: compare 1:1)\n"
    "      --first-scored P  score only window positions >= P (overrides --score)\n"
    "      --first-window N  start at the text's window N (0-based; the offset is N x --ctx tokens)\n"
    "      --windows N       score at most N windows (from --first-window; llama-perplexity's --chunks)\n"
    "      --kl              also report KL(first arm || arm) of the next-token distribution per arm\n"
    "      --kv SPEC         KV cache (default f16; repeat for several arms)\n"
    "      --kv-layers L=SPEC  per-layer override, appended to every --kv as '@L=SPEC': layers L\n"
    "                        (comma list, a..b ranges, negative = from the end) use SPEC, e.g.\n"
    "                        --kv q4_0 --kv-layers 0,-1=f16 -> q4_0@0,-1=f16 (repeatable)\n"
    "      --serial-arms     decode mode, several --kv: run the arms one after another (default:\n"
    "                        together, one batched forward per token, each arm its own cache;\n"
    "                        same figures, the weights read once for all arms; tok/s is then\n"
    "                        the pass's text tokens per second, shared by the arms)\n"
    CLI_DEVICE_HELP
    "  -b, --batch N         prefill chunk (default 64)\n"
    "  -t, --threads N       threads\n"
    "      --json            machine-readable output, with every window's figures per arm\n"
    "Context compression as kvpress measures it (prefill 1024 tokens, compress once, score the next\n"
    "255): --mode prefill --ctx 1280 -b 1024 --first-scored 1024 (docs/eviction.md).\n";

typedef struct ppl_args {
    int n_ctx, paragraphs, max_paras, bos_window, first_scored, second_half, serial, decode, kl;
    long max_tokens, first_window, n_windows;
} ppl_args;

/* every window's figures per arm (window_cb), for --json: n records of n_arms results */
typedef struct win_log {
    int n_arms;
    long n, cap;
    long *index;
    vq_ppl_result *r;
    int oom;
} win_log;

static void log_window(long index, const vq_ppl_result *per_arm, int n_arms, void *user) {
    win_log *w = user;
    if (w->oom) return;
    if (w->n == w->cap) {
        long cap = w->cap ? 2 * w->cap : 64;
        long *ix = realloc(w->index, (size_t)cap * sizeof *ix);
        if (ix) w->index = ix;
        vq_ppl_result *r = ix ? realloc(w->r, (size_t)cap * (size_t)n_arms * sizeof *r) : NULL;
        if (!ix || !r) { w->oom = 1; return; }
        w->r = r;
        w->cap = cap;
    }
    w->index[w->n] = index;
    memcpy(w->r + (size_t)w->n * n_arms, per_arm, (size_t)n_arms * sizeof *per_arm);
    w->n++;
}

int cmd_perplexity(int argc, char **argv) {
    opts o;
    opts_init(&o, argv[1]);
    ppl_args pa = { .n_ctx = 512, .decode = 1 };
    const char *mode = "decode", *split = "windows", *score = "all";
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(ppl_help, stdout); finish_stdout(); return 0; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) die("%s needs a file", a); o.file = v; i++; }
        else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) { pa.n_ctx = (int)parse_long(a, v, 2, 1 << 20); i++; }
        else if (!strcmp(a, "--mode")) { if (!v) die("--mode needs decode or prefill"); mode = v; i++; }
        else if (!strcmp(a, "--max-tokens")) { pa.max_tokens = parse_long(a, v, 2, LONG_MAX); i++; }
        else if (!strcmp(a, "--split")) { if (!v) die("--split needs windows or paragraphs"); split = v; i++; }
        else if (!strcmp(a, "--max-paragraphs")) { pa.max_paras = (int)parse_long(a, v, 1, INT_MAX); i++; }
        else if (!strcmp(a, "--bos-per-window")) pa.bos_window = 1;
        else if (!strcmp(a, "--score")) { if (!v) die("--score needs all or second-half"); score = v; i++; }
        else if (!strcmp(a, "--first-scored")) { pa.first_scored = (int)parse_long(a, v, 0, INT_MAX); i++; }
        else if (!strcmp(a, "--first-window")) { pa.first_window = parse_long(a, v, 0, LONG_MAX); i++; }
        else if (!strcmp(a, "--windows")) { pa.n_windows = parse_long(a, v, 1, LONG_MAX); i++; }
        else if (!strcmp(a, "--serial-arms")) pa.serial = 1;
        else if (!strcmp(a, "--kl")) pa.kl = 1;
        else die("perplexity: unknown option '%s' (see veloxquant perplexity --help)", a);
    }
    if (!o.file) die("perplexity: no text: use -f FILE");
    if (!strcmp(mode, "decode")) pa.decode = 1;
    else if (!strcmp(mode, "prefill")) pa.decode = 0;
    else die("--mode '%s' is unknown (known: decode, prefill)", mode);
    if (!strcmp(split, "paragraphs")) pa.paragraphs = 1;
    else if (strcmp(split, "windows")) die("--split '%s' is unknown (known: windows, paragraphs)", split);
    if (pa.paragraphs && (pa.first_window || pa.n_windows))
        die("--first-window and --windows apply to --split windows (paragraphs: --max-paragraphs)");
    if (!strcmp(score, "second-half")) pa.second_half = 1;
    else if (strcmp(score, "all")) die("--score '%s' is unknown (known: all, second-half)", score);
    if (o.n_kv == 0) { o.kv_list[0] = "f16"; o.n_kv = 1; }
    vq_kv_spec *specs[CLI_MAX_ARMS];
    parse_specs(&o, specs);   /* a bad spec fails before the model is read */
    size_t len = 0;
    char *text = read_text(o.file, "text file", &len);
    vq_model *m = load_model(&o);
    /* every figure is computed before anything is printed: a failure leaves no partial output */
    vq_ppl_params pp = vq_ppl_default_params();
    pp.n_ctx = pa.n_ctx;
    pp.mode = pa.decode ? VQ_PPL_DECODE : VQ_PPL_PREFILL;
    pp.score = pa.second_half ? VQ_PPL_SCORE_SECOND_HALF : VQ_PPL_SCORE_ALL;
    pp.n_batch = o.batch;
    pp.max_tokens = pa.max_tokens;
    pp.first_scored = pa.first_scored;
    pp.bos_per_window = pa.bos_window;
    pp.kv_seed = 0x5eed;
    pp.kl_vs_first = pa.kl;
    pp.split = pa.paragraphs ? VQ_PPL_SPLIT_PARAGRAPHS : VQ_PPL_SPLIT_WINDOWS;
    pp.max_paragraphs = pa.max_paras;
    pp.serial_arms = pa.serial;
    pp.first_window = pa.first_window;
    pp.n_windows = pa.n_windows;
    win_log wl = { .n_arms = o.n_kv };
    if (o.json) { pp.window_cb = log_window; pp.window_user = &wl; }
    const int batched = !pa.serial && !pa.paragraphs && pa.decode && o.n_kv > 1;
    vq_ppl_result res[CLI_MAX_ARMS];
    memset(res, 0, sizeof res);
    vq_err err;
    int failed = vq_perplexity_text(m, (const vq_kv_spec *const *)specs, o.n_kv, text, len, &pp, progress, NULL,
                                    res, &err) != VQ_OK;
    char msg[sizeof err.msg];
    snprintf(msg, sizeof msg, "%s", failed ? err.msg : "");
    if (!failed && wl.oom) {
        failed = 1;
        snprintf(msg, sizeof msg, "perplexity: out of memory for the per-window figures");
    }
    for (int a = 0; !failed && a < o.n_kv; a++)
        if (res[a].n_scored < 1) {   /* an empty text or one without paragraphs: no figure at all */
            failed = 1;
            snprintf(msg, sizeof msg, "perplexity: %s: no token was scored (%s)", o.file,
                     pa.paragraphs ? "the text has no paragraph of two or more tokens" : "the text is too short");
        }
    char model_path[1024], device[32];
    snprintf(model_path, sizeof model_path, "%s", vq_model_path(m));
    snprintf(device, sizeof device, "%s", vq_model_device(m));
    free(text);
    free_specs(specs, o.n_kv);
    vq_model_free(m);
    if (failed) {
        free(wl.index);
        free(wl.r);
        die("%s", msg);
    }

    json j;
    json_init(&j, stdout);
    if (o.json) {
        json_obj(&j);
        json_kstr(&j, "model", model_path);
        json_kstr(&j, "device", device);
        json_kint(&j, "ctx", pa.n_ctx);
        json_kstr(&j, "mode", mode);
        json_kstr(&j, "score", score);
        json_kbool(&j, "arms_batched", batched);
        json_kint(&j, "first_window", pa.first_window);
        json_kint(&j, "first_scored", pa.first_scored);
        json_key(&j, "arms");
        json_arr(&j);
    } else printf("%-34s %9s %10s %10s %9s %12s %8s%s\n", "kv", "tokens", "mean_nll", "ppl", "tok/s", "kv bytes", "bits/el",
                  pa.kl ? "  KL vs arm 0" : "");
    for (int a = 0; a < o.n_kv; a++) {
        const vq_ppl_result *r = &res[a];
        double nll = r->mean_nll;
        double tps = r->seconds > 0 ? r->n_tokens / r->seconds : 0;
        if (o.json) {
            json_obj(&j);
            json_kstr(&j, "kv", o.kv_list[a]);
            json_kint(&j, "scored", r->n_scored);
            json_knum(&j, "mean_nll", "%.6f", nll);
            json_knum(&j, "ppl", "%.6f", r->ppl);
            json_knum(&j, "tokens_per_s", "%.2f", tps);
            json_knum(&j, "seconds", "%.3f", r->seconds);
            json_kuint(&j, "kv_bytes", r->kv_bytes);
            json_knum(&j, "bits_per_elem", "%.4f", r->kv_bits);
            if (pa.kl) json_knum(&j, "kl_vs_first", "%.6g", r->kl_mean);
            if (pa.paragraphs) json_kint(&j, "paragraphs", r->n_units);
            json_key(&j, pa.paragraphs ? "per_paragraph" : "windows");   /* each window's own figures */
            json_arr(&j);
            for (long w = 0; w < wl.n; w++) {
                const vq_ppl_result *x = &wl.r[(size_t)w * o.n_kv + a];
                json_obj(&j);
                json_kint(&j, "index", wl.index[w]);
                json_kint(&j, "tokens", x->n_tokens);
                json_kint(&j, "scored", x->n_scored);
                json_knum(&j, "nll_sum", "%.6f", x->nll_sum);
                json_knum(&j, "mean_nll", "%.6f", x->mean_nll);
                json_knum(&j, "ppl", "%.6f", x->ppl);
                json_obj_end(&j);
            }
            json_arr_end(&j);
            json_obj_end(&j);
        } else {
            printf("%-34s %9ld %10.6f %10.4f %9.1f %12zu %8.3f", o.kv_list[a], r->n_scored, nll, r->ppl, tps,
                   r->kv_bytes, r->kv_bits);
            if (pa.kl) printf("  %.6g", r->kl_mean);
            putchar('\n');
            if (pa.paragraphs) printf("paragraphs %ld\n", r->n_units);
        }
    }
    free(wl.index);
    free(wl.r);
    if (o.json) {
        json_arr_end(&j);
        json_obj_end(&j);
        if (json_end(&j)) die("writing the output failed: %s", strerror(errno ? errno : EIO));
    }
    finish_stdout();
    return 0;
}
