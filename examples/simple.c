/* simple.c: the smallest complete program on libveloxquant: load a model, tokenize a prompt, make
 * one session with a KV cache spec, generate greedily, print the text. It includes only the
 * public header and builds against the installed library:
 *   cc -o simple simple.c $(pkg-config --cflags --libs veloxquant)
 *   ./simple -m models/SmolLM2-135M-Instruct.Q4_1.gguf -p "The history of the printing press"
 * It prints what `veloxquant generate --temp 0` prints for the same model, prompt, -n and -c: the
 * prompt, then the continuation, then a newline (tests/lib/check_examples.sh compares the two). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <veloxquant.h>

static const char usage[] =
    "usage: simple -m MODEL [options]\n"
    "Greedy generation from a prompt with libveloxquant.\n"
    "  -m, --model FILE     GGUF file or llama2.c checkpoint (required)\n"
    "  --tokenizer FILE     tokenizer .bin (llama2.c checkpoints only)\n"
    "  -p, --prompt TEXT    prompt (default \"Once upon a time\")\n"
    "  -n, --n-predict N    tokens to generate, 1..1048576 (default 64)\n"
    "  -c, --ctx-size N     context in tokens (default: 2048, at most the model's training context)\n"
    "  --kv SPEC            KV cache spec, e.g. f16, q4_0:rotate=1 (default f16)\n"
    "  -h, --help           this text\n";

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("simple: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* The value of the option at argv[*i] (which then moves past it). */
static const char *value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) die("%s needs a value (see simple --help)", argv[*i]);
    return argv[++*i];
}

/* A whole-string integer in lo..hi; anything else is an error naming the flag. */
static int parse_int(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        die("%s needs a whole number in %ld..%ld, got '%s'", flag, lo, hi, v);
    return (int)x;
}

/* Generated text arrives in pieces (possibly part of a UTF-8 character); print them as they come. */
static int print_text(const char *bytes, size_t n, void *user) {
    (void)user;
    fwrite(bytes, 1, n, stdout);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL, *prompt = "Once upon a time", *kv = "f16";
    int n_predict = 64, n_ctx = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage, stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = value(argc, argv, &i);
        else if (!strcmp(a, "--tokenizer")) tok_path = value(argc, argv, &i);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = value(argc, argv, &i);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
            n_predict = parse_int(a, value(argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
            n_ctx = parse_int(a, value(argc, argv, &i), 2, 1 << 24);
        else if (!strcmp(a, "--kv")) kv = value(argc, argv, &i);
        else die("unknown option '%s' (see simple --help)", a);
    }
    if (!model_path) die("no model: give -m FILE (see simple --help)");

    vq_err err;
    vq_model_params mp = vq_model_default_params();
    mp.tokenizer_path = tok_path;
    vq_model *m = vq_model_load(model_path, &mp, &err);
    if (!m) die("%s", err.msg);

    /* The first call asks how many tokens the prompt needs; the second fills them. add_bos -1: as
     * the model file asks; special-token text stays plain text in a plain prompt. */
    size_t len = strlen(prompt);
    int n_prompt = vq_tokenize(m, prompt, len, -1, 0, NULL, 0, &err);
    if (n_prompt < 0) die("%s", err.msg);
    int *ids = malloc((size_t)(n_prompt > 0 ? n_prompt : 1) * sizeof *ids);
    if (!ids) die("out of memory");
    if (vq_tokenize(m, prompt, len, -1, 0, ids, n_prompt, &err) != n_prompt) die("%s", err.msg);

    /* The spec is parsed (and validated) once; a session is a model + a cache made from it. */
    vq_kv_spec *spec = vq_kv_spec_parse(kv, &err);
    if (!spec) die("--kv: %s", err.msg);
    vq_session_params sp = vq_session_default_params();
    sp.n_ctx = n_ctx;
    vq_session *s = vq_session_create(m, spec, &sp, &err);
    vq_kv_spec_free(spec);   /* the session keeps nothing of the spec */
    if (!s) die("%s", err.msg);

    vq_sampler_params smp_p = vq_sampler_default_params();
    smp_p.temp = 0;   /* greedy: the same text on every machine */
    vq_sampler *smp = vq_sampler_create(&smp_p, vq_model_n_vocab(m), &err);
    if (!smp) die("%s", err.msg);

    vq_generate_params gp = vq_generate_default_params();
    gp.n_predict = n_predict;
    vq_generate_result res;
    fputs(prompt, stdout);   /* echo the prompt, as llama.cpp and veloxquant generate do */
    vq_status st = vq_session_generate(s, ids, n_prompt, smp, &gp, print_text, NULL, &res, &err);
    putchar('\n');
    if (st) die("%s", err.msg);
    fprintf(stderr, "simple: prompt %d tokens, generated %d (stop: %s), kv %s: %zu bytes\n",
            res.n_prompt, res.n_gen, vq_stop_reason_name(res.stop), vq_session_kv_spec_text(s),
            vq_session_kv_bytes(s));

    vq_sampler_free(smp);
    vq_session_free(s);
    free(ids);
    vq_model_free(m);
    return 0;
}
