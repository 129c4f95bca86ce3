/* cmd_needle.c: `veloxquant needle`, passkey retrieval per KV arm: parses the options, runs
 * vq_needle (veloxquant.h), prints one progress line per trial on stderr and an accuracy table per
 * arm and ctx (and per depth) on stdout, or every trial as JSON. */
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

#define NEEDLE_DEFAULT_MODEL DEFAULT_MODEL
#define NEEDLE_DEFAULT_TEXT DEFAULT_TEXT
#define MAX_LIST 64

static const char *needle_help =
    "usage: veloxquant needle [options]\n"
    "Passkey retrieval: a random number is hidden at a chosen depth of filler text, behind the line\n"
    "\"The pass key is N. Remember it. N is the pass key.\"; the prompt ends \"What is the pass key?\n"
    "The pass key is\" and the model continues greedily. A trial is correct when N appears in the\n"
    "generated text. Every arm sees the same prompts. (docs/needle.md)\n"
    "options:\n"
    "  -m, --model FILE      GGUF or llama2.c model (default " NEEDLE_DEFAULT_MODEL ")\n"
    "      --tokenizer FILE  tokenizer for llama2.c checkpoints\n"
    "      --kv SPEC         KV cache arm, repeatable, run in the order given (default f16).\n"
    "                        Give f16 first: it is the uncompressed baseline; when it is absent it\n"
    "                        is put first anyway (a note on stderr says so)\n"
    "      --ctx LIST        whole context per trial in tokens: prompt (ctx - n-gen, filler cut to\n"
    "                        fit exactly) + answer (default 1024,4096,8192; at most the model's)\n"
    "      --depths LIST     where the needle sits: fraction of the filler tokens before it, each in\n"
    "                        [0, 1]; placed at the nearest sentence boundary (default 0,0.25,0.5,0.75,1)\n"
    "      --trials N        trials per (ctx, depth), each with its own number (default 2)\n"
    "      --digits N        digits of the number, 1..9 (default 5)\n"
    "      --n-gen N         answer tokens generated greedily (default digits + 3)\n"
    "      --filler KIND     classic: \"The grass is green. The sky is blue. ...\" repeated (default);\n"
    "                        text: consecutive sentences of --text FILE from a seed-chosen line\n"
    "      --text FILE       text for --filler text (default " NEEDLE_DEFAULT_TEXT ")\n"
    "      --format F        plain (default): the prompt as plain text; chat: inside the model's\n"
    "                        ChatML template, the answer primed with \"The pass key is\"\n"
    "  -s, --seed N          run seed: picks the numbers (and text offsets) (default 1)\n"
    "  -t, --threads N       threads\n"
    "  -b, --batch N         prefill chunk (default 64)\n"
    "      --print-prompt    print the first trial's prompt (first ctx and depth), decoded from its\n"
    "                        tokens, with its token counts on stderr, and run nothing\n"
    "      --json            every trial as JSON (ctx, depth, arm, number, generated text, correct)\n"
    "                        plus accuracy per arm x ctx and per arm x ctx x depth\n";

static int parse_double_list(const char *flag, const char *s, double *out) {
    if (!s || !*s) die("%s needs a comma-separated list", flag);
    int n = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_LIST) die("%s: more than %d items", flag, MAX_LIST);
        char *end;
        errno = 0;
        double v = strtod(tok, &end);
        if (errno || end == tok || *end || isnan(v)) die("%s: '%s' is not a number", flag, tok);
        if (v < 0 || v > 1) die("%s: depth %g is outside [0, 1]", flag, v);
        out[n++] = v;
    }
    if (!n) die("%s: '%s' has no items", flag, s);
    return n;
}

/* the generated text on one line, for the progress log */
static void print_oneline(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) fputc(*s == '\n' ? ' ' : *s, f);
    fputc('\'', f);
}

typedef struct prog { const char *const *specs; } prog;

static void on_trial(const vq_needle_outcome *t, long done, long total, void *user) {
    const prog *p = user;
    fprintf(stderr, "[%ld/%ld] ctx %d depth %.2f (at %.3f) trial %d %s: %s -> ", done, total, t->ctx, t->depth,
            t->depth_actual, t->trial, p->specs[t->spec_index], t->number);
    print_oneline(stderr, t->gen);
    fprintf(stderr, " %s (%.1f s)\n", t->correct ? "ok" : "MISS", t->seconds);
    fflush(stderr);
}

int cmd_needle(int argc, char **argv) {
    cli_set_prefix("needle");
    opts o;
    opts_init(&o, argv[1]);
    o.seed = 1;
    const char *text_path = NEEDLE_DEFAULT_TEXT;
    int ctxs[MAX_LIST] = { 1024, 4096, 8192 }, n_ctxs = 3;
    double depths[MAX_LIST] = { 0, 0.25, 0.5, 0.75, 1.0 }; int n_depths = 5;
    int trials = 2, digits = 5, n_gen = 0, print_prompt = 0;
    vq_needle_fill filler = VQ_NEEDLE_CLASSIC;
    vq_needle_fmt format = VQ_NEEDLE_PLAIN;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(needle_help, stdout); finish_stdout(); return 0; }
        else if (!strcmp(a, "--ctx")) { n_ctxs = parse_int_list(a, v, ctxs, MAX_LIST, 1, 1 << 24); i++; }
        else if (!strcmp(a, "--depths")) { n_depths = parse_double_list(a, v, depths); i++; }
        else if (!strcmp(a, "--trials")) { trials = (int)parse_long(a, v, 1, 100000); i++; }
        else if (!strcmp(a, "--digits")) { digits = (int)parse_long(a, v, 1, 9); i++; }
        else if (!strcmp(a, "--n-gen")) { n_gen = (int)parse_long(a, v, 1, 256); i++; }
        else if (!strcmp(a, "--filler")) {
            if (!v) die("--filler needs classic or text");
            if (!strcmp(v, "classic")) filler = VQ_NEEDLE_CLASSIC;
            else if (!strcmp(v, "text") || !strcmp(v, "wikitext")) filler = VQ_NEEDLE_TEXT;
            else die("--filler: '%s' is not classic or text", v);
            i++;
        }
        else if (!strcmp(a, "--text")) { if (!v) die("--text needs a file"); text_path = v; i++; }
        else if (!strcmp(a, "--format")) {
            if (!v) die("--format needs plain or chat");
            if (!strcmp(v, "plain")) format = VQ_NEEDLE_PLAIN;
            else if (!strcmp(v, "chat")) format = VQ_NEEDLE_CHAT;
            else die("--format: '%s' is not plain or chat", v);
            i++;
        }
        else if (!strcmp(a, "--print-prompt")) print_prompt = 1;
        else die("unknown option '%s' (see veloxquant needle --help)", a);
    }
    if (!n_gen) n_gen = digits + 3;

    /* arms: f16 first when it was not given; every arm parsed before the model is read */
    const char *specs[CLI_MAX_ARMS + 1]; int n_specs = 0, has_f16 = 0;
    for (int i = 0; i < o.n_kv; i++) has_f16 |= !strcmp(o.kv_list[i], "f16");
    if (!has_f16) {
        specs[n_specs++] = "f16";
        if (o.n_kv) fputs("needle: note: no f16 arm given; running f16 first as the uncompressed baseline\n", stderr);
    }
    for (int i = 0; i < o.n_kv; i++) specs[n_specs++] = o.kv_list[i];
    vq_kv_spec *parsed[CLI_MAX_ARMS + 1];
    vq_err err;
    for (int i = 0; i < n_specs; i++)
        if (!(parsed[i] = vq_kv_spec_parse(specs[i], &err))) die("%s", err.msg);

    char *text = NULL;
    if (filler == VQ_NEEDLE_TEXT) text = read_text(text_path, "--text", NULL);
    vq_model *m = load_model(&o);
    const char *model = vq_model_path(m);
    vq_needle_config cfg = {
        .ctxs = ctxs, .n_ctxs = n_ctxs, .depths = depths, .n_depths = n_depths,
        .specs = (const vq_kv_spec *const *)parsed, .n_specs = n_specs, .trials = trials, .batch = o.batch,
        .digits = digits, .n_gen = n_gen, .filler = filler, .filler_text = text, .format = format,
        .seed = o.seed, .kv_seed = 0x5eed,
    };
    if (print_prompt) {
        vq_needle_prompt_info pr;
        char *buf = vq_needle_first_prompt(m, &cfg, &pr, &err);
        if (!buf) die("%s", err.msg);
        printf("%s\n", buf);
        fprintf(stderr, "needle: %d prompt tokens (ctx %d - %d answer), number %s, needle at token %d (%d tokens), "
                        "%d of %d filler tokens before it (depth %.4f), longest filler sentence %d tokens\n",
                pr.n, ctxs[0], n_gen, pr.number, pr.needle_at, pr.needle_len, pr.filler_before, pr.filler_total,
                pr.filler_total ? (double)pr.filler_before / pr.filler_total : 0, pr.max_unit);
        vq_free(buf);
        free(text);
        for (int i = 0; i < n_specs; i++) vq_kv_spec_free(parsed[i]);
        vq_model_free(m);
        finish_stdout();
        return 0;
    }
    long total = (long)n_ctxs * n_depths * trials * n_specs;
    vq_needle_outcome *tr = calloc((size_t)total, sizeof *tr);
    if (!tr) die("out of memory for %ld trials", total);
    prog pg = { specs };
    double t0 = vq_clock_s();
    if (vq_needle(m, &cfg, tr, on_trial, &pg, &err)) die("%s", err.msg);
    double wall = vq_clock_s() - t0;

    /* tallies: [arm][ctx][depth] */
    int *ok = calloc((size_t)n_specs * n_ctxs * n_depths, sizeof(int));
    int *all = calloc((size_t)n_specs * n_ctxs * n_depths, sizeof(int));
    if (!ok || !all) die("out of memory");
#define IDX(a, c, d) (((a) * n_ctxs + (c)) * n_depths + (d))
    for (long i = 0; i < total; i++) {
        ok[IDX(tr[i].spec_index, tr[i].ctx_index, tr[i].depth_index)] += tr[i].correct;
        all[IDX(tr[i].spec_index, tr[i].ctx_index, tr[i].depth_index)]++;
    }
    const char *fmt_name = format == VQ_NEEDLE_CHAT ? "chat" : "plain";
    const char *fill_name = filler == VQ_NEEDLE_TEXT ? "text" : "classic";
    if (o.json) {
        json j;
        json_init(&j, stdout);
        json_obj(&j);
        json_kstr(&j, "model", model);
        json_kstr(&j, "format", fmt_name);
        json_kstr(&j, "filler", fill_name);
        if (text) json_kstr(&j, "text", text_path);
        json_kint(&j, "digits", digits);
        json_kint(&j, "n_gen", n_gen);
        json_kuint(&j, "seed", o.seed);
        json_kint(&j, "threads", vq_max_threads());
        json_knum(&j, "seconds", "%.1f", wall);
        json_newline(&j);
        json_key(&j, "trials");
        json_arr(&j);
        for (long i = 0; i < total; i++) {
            const vq_needle_outcome *t = &tr[i];
            json_newline(&j);
            json_obj(&j);
            json_kint(&j, "ctx", t->ctx);
            json_knum(&j, "depth", "%g", t->depth);
            json_knum(&j, "depth_actual", "%.4f", t->depth_actual);
            json_kint(&j, "trial", t->trial);
            json_kstr(&j, "arm", specs[t->spec_index]);
            json_kstr(&j, "number", t->number);
            json_kstr(&j, "generated", t->gen);
            json_kbool(&j, "correct", t->correct);
            json_kint(&j, "prompt_tokens", t->n_prompt);
            json_kint(&j, "needle_at", t->needle_at);
            json_knum(&j, "seconds", "%.2f", t->seconds);
            json_obj_end(&j);
        }
        json_arr_end(&j);
        json_newline(&j);
        json_key(&j, "accuracy");
        json_arr(&j);
        for (int a = 0; a < n_specs; a++)
            for (int c = 0; c < n_ctxs; c++) {
                int k = 0, n = 0;
                for (int d = 0; d < n_depths; d++) { k += ok[IDX(a, c, d)]; n += all[IDX(a, c, d)]; }
                json_newline(&j);
                json_obj(&j);
                json_kstr(&j, "arm", specs[a]);
                json_kint(&j, "ctx", ctxs[c]);
                json_kint(&j, "correct", k);
                json_kint(&j, "total", n);
                json_knum(&j, "accuracy", "%.4f", n ? (double)k / n : 0);
                json_obj_end(&j);
            }
        json_arr_end(&j);
        json_newline(&j);
        json_key(&j, "accuracy_by_depth");
        json_arr(&j);
        for (int a = 0; a < n_specs; a++)
            for (int c = 0; c < n_ctxs; c++)
                for (int d = 0; d < n_depths; d++) {
                    json_newline(&j);
                    json_obj(&j);
                    json_kstr(&j, "arm", specs[a]);
                    json_kint(&j, "ctx", ctxs[c]);
                    json_knum(&j, "depth", "%g", depths[d]);
                    json_kint(&j, "correct", ok[IDX(a, c, d)]);
                    json_kint(&j, "total", all[IDX(a, c, d)]);
                    json_obj_end(&j);
                }
        json_arr_end(&j);
        json_obj_end(&j);
        if (json_end(&j)) die("writing the output failed: %s", strerror(errno ? errno : EIO));
    } else {
        printf("needle: %s | format %s, filler %s, %d digits, %d trials x %d depths per ctx, greedy %d tokens, "
               "seed %llu | threads %d, %s | %.0f s\n", model, fmt_name, fill_name, digits, trials, n_depths, n_gen,
               (unsigned long long)o.seed, vq_max_threads(), vq_kernels_isa_name(), wall);
        int w = 4;
        for (int a = 0; a < n_specs; a++) if ((int)strlen(specs[a]) > w) w = (int)strlen(specs[a]);
        printf("\naccuracy per arm and ctx (correct/trials)\n%-*s", w, "arm");
        for (int c = 0; c < n_ctxs; c++) printf("  %13d", ctxs[c]);
        putchar('\n');
        for (int a = 0; a < n_specs; a++) {
            printf("%-*s", w, specs[a]);
            for (int c = 0; c < n_ctxs; c++) {
                int k = 0, n = 0;
                for (int d = 0; d < n_depths; d++) { k += ok[IDX(a, c, d)]; n += all[IDX(a, c, d)]; }
                char cell[32];
                snprintf(cell, sizeof cell, "%d/%d %3.0f%%", k, n, n ? 100.0 * k / n : 0);
                printf("  %13s", cell);
            }
            putchar('\n');
        }
        printf("\nper depth (correct/trials)\n%-*s  %6s", w, "arm", "ctx");
        for (int d = 0; d < n_depths; d++) printf("  %6.2f", depths[d]);
        putchar('\n');
        for (int a = 0; a < n_specs; a++)
            for (int c = 0; c < n_ctxs; c++) {
                printf("%-*s  %6d", w, specs[a], ctxs[c]);
                for (int d = 0; d < n_depths; d++) {
                    char cell[24];
                    snprintf(cell, sizeof cell, "%d/%d", ok[IDX(a, c, d)], all[IDX(a, c, d)]);
                    printf("  %6s", cell);
                }
                putchar('\n');
            }
    }
#undef IDX
    free(ok); free(all); free(tr); free(text);
    for (int i = 0; i < n_specs; i++) vq_kv_spec_free(parsed[i]);
    vq_model_free(m);
    finish_stdout();
    return 0;
}
