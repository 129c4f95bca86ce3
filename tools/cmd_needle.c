/* cmd_needle.c: `veloxquant needle`, passkey retrieval per KV arm: parses the options, runs
 * vq_needle_run (src/eval/needle.h), prints one progress line per trial on stderr and an accuracy
 * table per arm and ctx (and per depth) on stdout, or every trial as JSON. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval/needle.h"
#include "kernels/kernels.h"

int vq_cmd_needle(int argc, char **argv);

#define NEEDLE_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define NEEDLE_DEFAULT_TEXT "../shared/data/wikitext-2-raw-test.txt"
#define MAX_LIST 64

static const char *needle_help =
    "usage: veloxquant needle [options]\n"
    "Passkey retrieval: a random number is hidden at a chosen depth of filler text, behind the line\n"
    "\"The pass key is N. Remember it. N is the pass key.\"; the prompt ends \"What is the pass key?\n"
    "The pass key is\" and the model continues greedily. A trial is correct when N appears in the\n"
    "generated text. Every arm sees the same prompts. (docs/needle.md)\n"
    "options:\n"
    "  -m, --model FILE      GGUF model (default " NEEDLE_DEFAULT_MODEL ")\n"
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

static void ndie(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void ndie(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("veloxquant needle: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static long nparse_long(const char *flag, const char *s, long lo, long hi) {
    if (!s) ndie("%s needs a value", flag);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end) ndie("%s: '%s' is not an integer", flag, s);
    if (v < lo || v > hi) ndie("%s: %ld is out of range [%ld, %ld]", flag, v, lo, hi);
    return v;
}

/* "a,b,c" -> items (each strictly parsed); returns the count. */
static int parse_int_list(const char *flag, const char *s, int *out, long lo, long hi) {
    if (!s || !*s) ndie("%s needs a comma-separated list", flag);
    int n = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_LIST) ndie("%s: more than %d items", flag, MAX_LIST);
        out[n++] = (int)nparse_long(flag, tok, lo, hi);
    }
    if (!n) ndie("%s: '%s' has no items", flag, s);
    return n;
}
static int parse_double_list(const char *flag, const char *s, double *out) {
    if (!s || !*s) ndie("%s needs a comma-separated list", flag);
    int n = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_LIST) ndie("%s: more than %d items", flag, MAX_LIST);
        char *end;
        errno = 0;
        double v = strtod(tok, &end);
        if (errno || end == tok || *end || isnan(v)) ndie("%s: '%s' is not a number", flag, tok);
        if (v < 0 || v > 1) ndie("%s: depth %g is outside [0, 1]", flag, v);
        out[n++] = v;
    }
    if (!n) ndie("%s: '%s' has no items", flag, s);
    return n;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p == '\r') fputs("\\r", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

/* the generated text on one line, for the progress log */
static void print_oneline(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) fputc(*s == '\n' ? ' ' : *s, f);
    fputc('\'', f);
}

typedef struct prog { const char *const *specs; } prog;

static void on_trial(const vq_needle_trial *t, long done, long total, void *user) {
    const prog *p = user;
    fprintf(stderr, "[%ld/%ld] ctx %d depth %.2f (at %.3f) trial %d %s: %s -> ", done, total, t->ctx, t->depth,
            t->depth_actual, t->trial, p->specs[t->spec_index], t->number);
    print_oneline(stderr, t->gen);
    fprintf(stderr, " %s (%.1f s)\n", t->correct ? "ok" : "MISS", t->seconds);
    fflush(stderr);
}

int vq_cmd_needle(int argc, char **argv) {
    const char *model = NEEDLE_DEFAULT_MODEL, *text_path = NEEDLE_DEFAULT_TEXT;
    const char *specs_in[MAX_LIST]; int n_specs_in = 0;
    int ctxs[MAX_LIST] = { 1024, 4096, 8192 }, n_ctxs = 3;
    double depths[MAX_LIST] = { 0, 0.25, 0.5, 0.75, 1.0 }; int n_depths = 5;
    int trials = 2, digits = 5, n_gen = 0, threads = 0, batch = 64, json = 0, print_prompt = 0;
    vq_needle_filler filler = VQ_NEEDLE_FILLER_CLASSIC;
    vq_needle_format format = VQ_NEEDLE_FMT_PLAIN;
    uint64_t seed = 1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(needle_help, stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!v) ndie("%s needs a file", a); model = v; i++; }
        else if (!strcmp(a, "--kv")) {
            if (!v) ndie("--kv needs a spec (e.g. f16)");
            if (n_specs_in == MAX_LIST - 1) ndie("--kv given more than %d times", MAX_LIST - 1);
            specs_in[n_specs_in++] = v; i++;
        }
        else if (!strcmp(a, "--ctx")) { n_ctxs = parse_int_list(a, v, ctxs, 1, 1 << 24); i++; }
        else if (!strcmp(a, "--depths")) { n_depths = parse_double_list(a, v, depths); i++; }
        else if (!strcmp(a, "--trials")) { trials = (int)nparse_long(a, v, 1, 100000); i++; }
        else if (!strcmp(a, "--digits")) { digits = (int)nparse_long(a, v, 1, 9); i++; }
        else if (!strcmp(a, "--n-gen")) { n_gen = (int)nparse_long(a, v, 1, 256); i++; }
        else if (!strcmp(a, "--filler")) {
            if (!v) ndie("--filler needs classic or text");
            if (!strcmp(v, "classic")) filler = VQ_NEEDLE_FILLER_CLASSIC;
            else if (!strcmp(v, "text") || !strcmp(v, "wikitext")) filler = VQ_NEEDLE_FILLER_TEXT;
            else ndie("--filler: '%s' is not classic or text", v);
            i++;
        }
        else if (!strcmp(a, "--text")) { if (!v) ndie("--text needs a file"); text_path = v; i++; }
        else if (!strcmp(a, "--format")) {
            if (!v) ndie("--format needs plain or chat");
            if (!strcmp(v, "plain")) format = VQ_NEEDLE_FMT_PLAIN;
            else if (!strcmp(v, "chat")) format = VQ_NEEDLE_FMT_CHAT;
            else ndie("--format: '%s' is not plain or chat", v);
            i++;
        }
        else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) { seed = (uint64_t)nparse_long(a, v, 0, LONG_MAX); i++; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { threads = (int)nparse_long(a, v, 1, 1024); i++; }
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch")) { batch = (int)nparse_long(a, v, 1, 8192); i++; }
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--print-prompt")) print_prompt = 1;
        else ndie("unknown option '%s' (see veloxquant needle --help)", a);
    }
    if (!n_gen) n_gen = digits + 3;

    /* arms: f16 first when it was not given */
    const char *specs[MAX_LIST]; int n_specs = 0, has_f16 = 0;
    for (int i = 0; i < n_specs_in; i++) has_f16 |= !strcmp(specs_in[i], "f16");
    if (!has_f16) {
        specs[n_specs++] = "f16";
        if (n_specs_in) fputs("needle: note: no f16 arm given; running f16 first as the uncompressed baseline\n", stderr);
    }
    for (int i = 0; i < n_specs_in; i++) specs[n_specs++] = specs_in[i];

    char *text = NULL;
    vq_err err; vq_err_clear(&err);
    if (filler == VQ_NEEDLE_FILLER_TEXT) {
        text = vq_read_file(text_path, NULL, &err);
        if (!text) ndie("--text: %s", err.msg);
    }
    if (access(model, R_OK) != 0) {
        if (!strcmp(model, NEEDLE_DEFAULT_MODEL)) ndie("%s not found: run scripts/fetch_model.sh (or pass -m FILE)", model);
        ndie("%s: cannot read model file: %s", model, strerror(errno));
    }
    vq_model *m = vq_model_open(model, NULL, &err);
    if (!m) ndie("%s", err.msg);
    if (threads > 0) omp_set_num_threads(threads);

    vq_needle_run_params rp = {
        .ctxs = ctxs, .n_ctxs = n_ctxs, .depths = depths, .n_depths = n_depths,
        .specs = specs, .n_specs = n_specs, .trials = trials, .batch = batch, .kv_seed = 0x5eed,
        .base = { .digits = digits, .n_gen = n_gen, .filler = filler, .filler_text = text,
                  .format = format, .seed = seed },
    };
    if (print_prompt) {
        vq_needle_params q = rp.base;
        q.ctx = ctxs[0]; q.depth = depths[0]; q.seed = vq_needle_trial_seed(seed, q.ctx, 0, 0);
        vq_needle_prompt pr;
        if (vq_needle_build(m, &q, &pr, &err)) ndie("%s", err.msg);
        size_t need = vq_tok_decode(m->tok, pr.tok, pr.n, NULL, 0);
        char *buf = malloc(need + 1);
        if (!buf) ndie("out of memory");
        buf[vq_tok_decode(m->tok, pr.tok, pr.n, buf, need)] = 0;
        printf("%s\n", buf);
        fprintf(stderr, "needle: %d prompt tokens (ctx %d - %d answer), number %s, needle at token %d (%d tokens), "
                        "%d of %d filler tokens before it (depth %.4f), longest filler sentence %d tokens\n",
                pr.n, q.ctx, q.n_gen, pr.number, pr.needle_at, pr.needle_len, pr.filler_before, pr.filler_total,
                pr.filler_total ? (double)pr.filler_before / pr.filler_total : 0, pr.max_unit);
        free(buf);
        vq_needle_prompt_free(&pr);
        free(text);
        vq_model_free(m);
        return 0;
    }
    long total = (long)n_ctxs * n_depths * trials * n_specs;
    vq_needle_trial *tr = calloc((size_t)total, sizeof *tr);
    if (!tr) ndie("out of memory for %ld trials", total);
    prog pg = { specs };
    double t0 = vq_now_s();
    vq_status s = vq_needle_run(m, &rp, tr, on_trial, &pg, &err);
    if (s) { free(tr); free(text); vq_model_free(m); ndie("%s", err.msg); }
    double wall = vq_now_s() - t0;

    /* tallies: [arm][ctx][depth] */
    int *ok = calloc((size_t)n_specs * n_ctxs * n_depths, sizeof(int));
    int *all = calloc((size_t)n_specs * n_ctxs * n_depths, sizeof(int));
    if (!ok || !all) ndie("out of memory");
#define IDX(a, c, d) (((a) * n_ctxs + (c)) * n_depths + (d))
    for (long i = 0; i < total; i++) {
        ok[IDX(tr[i].spec_index, tr[i].ctx_index, tr[i].depth_index)] += tr[i].correct;
        all[IDX(tr[i].spec_index, tr[i].ctx_index, tr[i].depth_index)]++;
    }
    const char *fmt_name = format == VQ_NEEDLE_FMT_CHAT ? "chat" : "plain";
    const char *fill_name = filler == VQ_NEEDLE_FILLER_TEXT ? "text" : "classic";
    if (json) {
        printf("{\"model\": ");
        json_str(stdout, model);
        printf(", \"format\": \"%s\", \"filler\": \"%s\", ", fmt_name, fill_name);
        if (text) { printf("\"text\": "); json_str(stdout, text_path); printf(", "); }
        printf("\"digits\": %d, \"n_gen\": %d, \"seed\": %llu, \"threads\": %d, \"seconds\": %.1f,\n \"trials\": [\n",
               digits, n_gen, (unsigned long long)seed, omp_get_max_threads(), wall);
        for (long i = 0; i < total; i++) {
            const vq_needle_trial *t = &tr[i];
            printf("  {\"ctx\": %d, \"depth\": %g, \"depth_actual\": %.4f, \"trial\": %d, \"arm\": ", t->ctx, t->depth,
                   t->depth_actual, t->trial);
            json_str(stdout, specs[t->spec_index]);
            printf(", \"number\": \"%s\", \"generated\": ", t->number);
            json_str(stdout, t->gen);
            printf(", \"correct\": %s, \"prompt_tokens\": %d, \"needle_at\": %d, \"seconds\": %.2f}%s\n",
                   t->correct ? "true" : "false", t->n_prompt, t->needle_at, t->seconds, i + 1 < total ? "," : "");
        }
        printf(" ],\n \"accuracy\": [\n");
        for (int a = 0; a < n_specs; a++)
            for (int c = 0; c < n_ctxs; c++) {
                int k = 0, n = 0;
                for (int d = 0; d < n_depths; d++) { k += ok[IDX(a, c, d)]; n += all[IDX(a, c, d)]; }
                printf("  {\"arm\": ");
                json_str(stdout, specs[a]);
                printf(", \"ctx\": %d, \"correct\": %d, \"total\": %d, \"accuracy\": %.4f}%s\n", ctxs[c], k, n,
                       (double)k / n, a + 1 < n_specs || c + 1 < n_ctxs ? "," : "");
            }
        printf(" ],\n \"accuracy_by_depth\": [\n");
        for (int a = 0; a < n_specs; a++)
            for (int c = 0; c < n_ctxs; c++)
                for (int d = 0; d < n_depths; d++) {
                    printf("  {\"arm\": ");
                    json_str(stdout, specs[a]);
                    printf(", \"ctx\": %d, \"depth\": %g, \"correct\": %d, \"total\": %d}%s\n", ctxs[c], depths[d],
                           ok[IDX(a, c, d)], all[IDX(a, c, d)],
                           a + 1 < n_specs || c + 1 < n_ctxs || d + 1 < n_depths ? "," : "");
                }
        printf(" ]}\n");
    } else {
        printf("needle: %s | format %s, filler %s, %d digits, %d trials x %d depths per ctx, greedy %d tokens, "
               "seed %llu | threads %d, %s | %.0f s\n", model, fmt_name, fill_name, digits, trials, n_depths, n_gen,
               (unsigned long long)seed, omp_get_max_threads(), vq_isa_name(vq_kernels_isa()), wall);
        int w = 4;
        for (int a = 0; a < n_specs; a++) w = VQ_MAX(w, (int)strlen(specs[a]));
        printf("\naccuracy per arm and ctx (correct/trials)\n%-*s", w, "arm");
        for (int c = 0; c < n_ctxs; c++) printf("  %13d", ctxs[c]);
        putchar('\n');
        for (int a = 0; a < n_specs; a++) {
            printf("%-*s", w, specs[a]);
            for (int c = 0; c < n_ctxs; c++) {
                int k = 0, n = 0;
                for (int d = 0; d < n_depths; d++) { k += ok[IDX(a, c, d)]; n += all[IDX(a, c, d)]; }
                char cell[32];
                snprintf(cell, sizeof cell, "%d/%d %3.0f%%", k, n, 100.0 * k / n);
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
    vq_model_free(m);
    return 0;
}
