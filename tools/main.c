/* main.c: the veloxquant command-line tool: picks the command (tools/cmd_<command>.c). Every
 * command parses its flags, calls the library through veloxquant.h and prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "veloxquant.h"

static const char *main_help =
    "usage: veloxquant <command> [options]   (veloxquant <command> --help for each)\n"
    "VeloxQuant: LLM inference on the CPU with a really compressed KV cache.\n"
    "commands:\n"
    "  generate     generate text from a prompt\n"
    "  perplexity   perplexity of a text (decode or prefill mode, several KV arms)\n"
    "  bench        prefill/decode throughput at several context fills\n"
    "  info         print a model's configuration\n"
    "  tokenize     print the token ids of a text\n"
    "  bench-kernels  decode-attention and encode speed per KV codec (vs f16, vs memcpy)\n"
    "  kv-fidelity  per-layer key cosine, attention KL and output error of KV codecs on real rows\n"
    "  needle       passkey retrieval: a number hidden at a depth of filler text, per KV arm\n"
    "  tasks        RULER-style tasks (keyed needles, variable tracking, common words), per KV arm\n"
    "  evict-corr   Spearman correlation of eviction policies' scores with later queries' attention\n"
    "  calibrate    per-layer, per-head q/k/v statistics of a model on a text (for calib=FILE)\n"
    "  calib-layers a calibration's layers ranked by q.k energy: which layers get more key bits\n"
    "  quantize     re-code a model's weights into a reservoir file (page-aligned, shared, zero-copy)\n"
    "  bench-share  K processes decoding one model: what each holds of its weights (Pss), vs copying\n"
    "  serve        an OpenAI-compatible HTTP server: many conversations, compressed caches, batched decode\n";

static const struct { const char *name; int (*run)(int, char **); } commands[] = {
    { "generate", cmd_generate },   { "perplexity", cmd_perplexity },       { "bench", cmd_bench },
    { "info", cmd_info },           { "tokenize", cmd_tokenize },           { "bench-kernels", cmd_bench_kernels },
    { "kv-fidelity", cmd_kv_fidelity }, { "needle", cmd_needle },       { "serve", cmd_serve },
    { "tasks", cmd_tasks },
    { "evict-corr", cmd_evict_corr },   { "calibrate", cmd_calibrate },
    { "calib-layers", cmd_calib_layers },
    { "quantize", cmd_quantize },       { "bench-share", cmd_bench_share },
};

/* OpenMP's default wait (libgomp: a thread spins 300000 times before it sleeps) collapses when
 * other processes compete for the cores: a thread spins away its time slice waiting for one that
 * was preempted (`generate -n 64 -t 2` on a busy 2-core machine: over 20 s instead of 1-3 s). A
 * passive wait (sleep at once) avoids that but halves the idle speed (a wake-up per barrier); a
 * short spin (1000, then sleep) keeps the idle speed and does not collapse: measured in
 * docs/experiments/2026-12-07-wait-policy.md, llama.cpp's OpenMP build alike. libgomp reads
 * OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it is loaded, before main; so when the user set
 * neither, the CLI sets GOMP_SPINCOUNT and executes itself again (once: the variable is set then). */
static void omp_wait_default(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("GOMP_SPINCOUNT", "1000", 1)) return;
    execv("/proc/self/exe", argv);
    unsetenv("GOMP_SPINCOUNT");   /* no /proc: OpenMP's own default stays */
}

int main(int argc, char **argv) {
    omp_wait_default(argv);
    if (argc < 2) { fputs(main_help, stderr); return 2; }
    const char *c = argv[1];
    if (!strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help")) {
        fputs(main_help, stdout);
        return fflush(stdout) || ferror(stdout) ? 1 : 0;
    }
    if (!strcmp(c, "--version")) {
        printf("veloxquant %s\n", vq_version_string());
        return fflush(stdout) || ferror(stdout) ? 1 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(c, commands[i].name)) return commands[i].run(argc, argv);
    fprintf(stderr, "veloxquant: unknown command '%s'\n%s", c, main_help);
    return 2;
}
