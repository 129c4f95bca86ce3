/* cmd_tasks.c: `veloxquant tasks`, RULER-style synthetic tasks per KV arm: parses the options, runs
 * vq_tasks_run (lab/vqlab.h), prints one progress line per trial on stderr and a score table per
 * task, arm and ctx on stdout, or every trial as JSON. */
#ifndef VQ_EXPERIMENTAL   /* the build may define it for every file */
#define VQ_EXPERIMENTAL
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "json.h"

#define MAX_LIST 64

static const char *tasks_help =
    "usage: veloxquant tasks [options]\n"
    "RULER-style synthetic tasks (docs/tasks.md), each prompt answered greedily by every KV arm; a\n"
    "trial scores the fraction of its answers found in the generated text (case-insensitive).\n"
    "  niah_single      one \"special magic number\" for a key hidden in filler; asked for it\n"
    "  niah_multikey    four keys with a number each; asked for one of them\n"
    "  niah_multivalue  four numbers for one key; asked for all four\n"
    "  vt               variable tracking: VAR A = N, VAR B = VAR A, ... (5 names) in noise; all names\n"
    "  cwe              common words: a numbered word list; the 10 most frequent words\n"
    "options:\n"
    "  -m, --model FILE      GGUF model (default " DEFAULT_MODEL ")\n"
    "      --task LIST       tasks, comma-separated (default niah_single,niah_multikey,niah_multivalue,vt,cwe)\n"
    "      --kv SPEC         KV cache arm, repeatable, in the order given (default f16; f16 is put\n"
    "                        first when absent, as the uncompressed baseline)\n"
    "      --ctx LIST        context per trial in tokens: prompt (at most ctx - n-gen) + answer\n"
    "                        (default 1024,2048,4096; at most the model's)\n"
    "      --trials N        prompts per task and ctx, each from its own seed (default 4)\n"
    "      --n-gen N         answer tokens (default per task: 16 niah, 48 multivalue, 32 vt, 64 cwe)\n"
    "      --filler KIND     needles' filler: classic (RULER's noise sentences, default) or text\n"
    "      --text FILE       text for --filler text (default " DEFAULT_TEXT ")\n"
    "      --format F        plain (default) or chat (inside the model's chat template)\n"
    "  -s, --seed N          run seed (default 1)\n"
    "  -t, --threads N       threads\n"
    "  -b, --batch N         prefill chunk (default 64)\n"
    "      --print-prompt    print the first prompt (first task, first ctx) and its answers, run nothing\n"
    "      --json            every trial as JSON, plus the mean score per task x arm x ctx\n";

static void print_oneline(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) fputc(*s == '\n' ? ' ' : *s, f);
    fputc('\'', f);
}

typedef struct prog { const char *const *specs; } prog;

static void on_trial(const vq_task_outcome *o, long done, long total, void *user) {
    const prog *p = user;
    fprintf(stderr, "[%ld/%ld] %s ctx %d trial %d %s: ", done, total, vq_task_name(o->kind), o->ctx, o->trial,
            p->specs[o->spec_index]);
    print_oneline(stderr, o->gen);
    fprintf(stderr, " score %.2f (%.1f s)\n", o->score, o->seconds);
    fflush(stderr);
}

int cmd_tasks(int argc, char **argv) {
    cli_set_prefix("tasks");
    opts o;
    opts_init(&o, argv[1]);
    o.seed = 1;
    const char *text_path = DEFAULT_TEXT;
    int ctxs[MAX_LIST] = { 1024, 2048, 4096 }, n_ctxs = 3;
    vq_task_kind kinds[VQ_TASK_N] = { VQ_TASK_NIAH_SINGLE, VQ_TASK_NIAH_MULTIKEY, VQ_TASK_NIAH_MULTIVALUE, VQ_TASK_VT,
                                      VQ_TASK_CWE };
    int n_kinds = VQ_TASK_N, trials = 4, n_gen = 0, chat = 0, use_text = 0, print_prompt = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(tasks_help, stdout); finish_stdout(); return 0; }
        else if (!strcmp(a, "--ctx")) { n_ctxs = parse_int_list(a, v, ctxs, MAX_LIST, 1, 1 << 24); i++; }
        else if (!strcmp(a, "--trials")) { trials = (int)parse_long(a, v, 1, 100000); i++; }
        else if (!strcmp(a, "--n-gen")) { n_gen = (int)parse_long(a, v, 1, 512); i++; }
        else if (!strcmp(a, "--task")) {
            if (!v || !*v) die("--task needs a comma-separated list of tasks");
            char buf[512];
            snprintf(buf, sizeof buf, "%s", v);
            n_kinds = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int k = vq_task_find(t);
                if (k < 0) die("--task: '%s' is not a task (niah_single, niah_multikey, niah_multivalue, vt, cwe)", t);
                for (int j = 0; j < n_kinds; j++)
                    if (kinds[j] == (vq_task_kind)k) die("--task: '%s' is listed twice", t);
                kinds[n_kinds++] = (vq_task_kind)k;
            }
            if (!n_kinds) die("--task: '%s' has no tasks", v);
            i++;
        }
        else if (!strcmp(a, "--filler")) {
            if (!v) die("--filler needs classic or text");
            if (!strcmp(v, "classic")) use_text = 0;
            else if (!strcmp(v, "text")) use_text = 1;
            else die("--filler: '%s' is not classic or text", v);
            i++;
        }
        else if (!strcmp(a, "--text")) { if (!v) die("--text needs a file"); text_path = v; i++; }
        else if (!strcmp(a, "--format")) {
            if (!v) die("--format needs plain or chat");
            if (!strcmp(v, "plain")) chat = 0;
            else if (!strcmp(v, "chat")) chat = 1;
            else die("--format: '%s' is not plain or chat", v);
            i++;
        }
        else if (!strcmp(a, "--print-prompt")) print_prompt = 1;
        else die("unknown option '%s' (see veloxquant tasks --help)", a);
    }
    const char *specs[CLI_MAX_ARMS + 1]; int n_specs = 0, has_f16 = 0;
    for (int i = 0; i < o.n_kv; i++) has_f16 |= !strcmp(o.kv_list[i], "f16");
    if (!has_f16) {
        specs[n_specs++] = "f16";
        if (o.n_kv) fputs("tasks: note: no f16 arm given; running f16 first as the uncompressed baseline\n", stderr);
    }
    for (int i = 0; i < o.n_kv; i++) specs[n_specs++] = o.kv_list[i];
    vq_kv_spec *parsed[CLI_MAX_ARMS + 1];
    vq_err err;
    for (int i = 0; i < n_specs; i++)
        if (!(parsed[i] = vq_kv_spec_parse(specs[i], &err))) die("%s", err.msg);
    char *text = use_text ? read_text(text_path, "--text", NULL) : NULL;
    vq_model *m = load_model(&o);
    const char *model = vq_model_path(m);
    if (print_prompt) {
        vq_task_params p = { .kind = kinds[0], .ctx = ctxs[0], .n_gen = n_gen ? n_gen : vq_task_default_n_gen(kinds[0]),
                             .seed = vq_task_trial_seed(o.seed, kinds[0], ctxs[0], 0), .filler_text = text,
                             .chat = chat };
        vq_task_prompt pr;
        if (vq_task_build(m, &p, &pr, &err)) die("%s", err.msg);
        size_t need = vq_detokenize(m, pr.tok, pr.n, NULL, 0);
        char *s = malloc(need + 1);
        if (!s) die("out of memory");
        vq_detokenize(m, pr.tok, pr.n, s, need + 1);
        s[need] = 0;
        printf("%s\n", s);
        free(s);
        fprintf(stderr, "tasks: %s, %d prompt tokens (ctx %d - %d answer), answers:", vq_task_name(kinds[0]), pr.n,
                ctxs[0], p.n_gen);
        for (int i = 0; i < pr.n_answers; i++) fprintf(stderr, " %s", pr.answers[i]);
        fputc('\n', stderr);
        vq_task_prompt_free(&pr);
    } else {
        long total = (long)n_kinds * n_ctxs * trials * n_specs;
        vq_task_outcome *out = calloc((size_t)total, sizeof *out);
        double *sum = calloc((size_t)n_kinds * n_specs * n_ctxs, sizeof(double));
        if (!out || !sum) die("out of memory for %ld trials", total);
        vq_tasks_config cfg = { .kinds = kinds, .n_kinds = n_kinds, .ctxs = ctxs, .n_ctxs = n_ctxs,
                                .specs = (const vq_kv_spec *const *)parsed, .n_specs = n_specs, .trials = trials,
                                .batch = o.batch, .n_gen = n_gen, .filler_text = text, .chat = chat,
                                .seed = o.seed, .kv_seed = 0x5eed };
        prog pg = { specs };
        double t0 = vq_clock_s();
        if (vq_tasks_run(m, &cfg, out, on_trial, &pg, &err)) die("%s", err.msg);
        double wall = vq_clock_s() - t0;
#define IDX(k, a, c) (((k) * n_specs + (a)) * n_ctxs + (c))
        for (long i = 0; i < total; i++) {
            int k = 0;
            while (kinds[k] != out[i].kind) k++;
            sum[IDX(k, out[i].spec_index, out[i].ctx_index)] += out[i].score;
        }
        if (o.json) {
            json j;
            json_init(&j, stdout);
            json_obj(&j);
            json_kstr(&j, "model", model);
            json_kstr(&j, "format", chat ? "chat" : "plain");
            json_kstr(&j, "filler", text ? "text" : "classic");
            if (text) json_kstr(&j, "text", text_path);
            json_kuint(&j, "seed", o.seed);
            json_kint(&j, "trials", trials);
            json_kint(&j, "threads", vq_max_threads());
            json_knum(&j, "seconds", "%.1f", wall);
            json_newline(&j);
            json_key(&j, "runs");
            json_arr(&j);
            for (long i = 0; i < total; i++) {
                const vq_task_outcome *t = &out[i];
                json_newline(&j);
                json_obj(&j);
                json_kstr(&j, "task", vq_task_name(t->kind));
                json_kint(&j, "ctx", t->ctx);
                json_kint(&j, "trial", t->trial);
                json_kstr(&j, "arm", specs[t->spec_index]);
                json_key(&j, "answers");
                json_arr(&j);
                for (int q = 0; q < t->n_answers; q++) json_str(&j, t->answers[q]);
                json_arr_end(&j);
                json_kstr(&j, "generated", t->gen);
                json_knum(&j, "score", "%.4f", t->score);
                json_kint(&j, "prompt_tokens", t->n_prompt);
                json_knum(&j, "seconds", "%.2f", t->seconds);
                json_obj_end(&j);
            }
            json_arr_end(&j);
            json_newline(&j);
            json_key(&j, "scores");
            json_arr(&j);
            for (int k = 0; k < n_kinds; k++)
                for (int a = 0; a < n_specs; a++)
                    for (int c = 0; c < n_ctxs; c++) {
                        json_newline(&j);
                        json_obj(&j);
                        json_kstr(&j, "task", vq_task_name(kinds[k]));
                        json_kstr(&j, "arm", specs[a]);
                        json_kint(&j, "ctx", ctxs[c]);
                        json_kint(&j, "trials", trials);
                        json_knum(&j, "score", "%.4f", sum[IDX(k, a, c)] / trials);
                        json_obj_end(&j);
                    }
            json_arr_end(&j);
            json_obj_end(&j);
            if (json_end(&j)) die("writing the output failed: %s", strerror(errno ? errno : EIO));
        } else {
            printf("tasks: %s | format %s, filler %s, %d trials per task and ctx, seed %llu | threads %d, %s | %.0f s\n",
                   model, chat ? "chat" : "plain", text ? "text" : "classic", trials, (unsigned long long)o.seed,
                   vq_max_threads(), vq_kernels_isa_name(), wall);
            int w = 4;
            for (int a = 0; a < n_specs; a++) if ((int)strlen(specs[a]) > w) w = (int)strlen(specs[a]);
            printf("\nmean score (%% of answers found) per task, arm and ctx\n%-16s %-*s", "task", w, "arm");
            for (int c = 0; c < n_ctxs; c++) printf("  %7d", ctxs[c]);
            putchar('\n');
            for (int k = 0; k < n_kinds; k++)
                for (int a = 0; a < n_specs; a++) {
                    printf("%-16s %-*s", vq_task_name(kinds[k]), w, specs[a]);
                    for (int c = 0; c < n_ctxs; c++) printf("  %6.1f%%", 100.0 * sum[IDX(k, a, c)] / trials);
                    putchar('\n');
                }
        }
#undef IDX
        free(out); free(sum);
    }
    free(text);
    for (int i = 0; i < n_specs; i++) vq_kv_spec_free(parsed[i]);
    vq_model_free(m);
    finish_stdout();
    return 0;
}
