/* veloxquant.c: the command-line tool. Parses arguments, calls the library, prints.
 * Commands: generate, perplexity, bench, info, tokenize. Each has --help. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec/codec.h"
#include "eval/eval.h"
#include "kernels/kernels.h"
#include "model/chat.h"
#include "eval/bench_kernels.h"
#include "eval/kv_fidelity.h"

#define DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

int vq_cmd_needle(int argc, char **argv);

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("veloxquant: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* ---- strict number parsing: the whole string, within range ---- */
static long parse_long(const char *flag, const char *s, long lo, long hi) {
    if (!s) die("%s needs a value", flag);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end) die("%s: '%s' is not an integer", flag, s);
    if (v < lo || v > hi) die("%s: %ld is out of range [%ld, %ld]", flag, v, lo, hi);
    return v;
}
static double parse_double(const char *flag, const char *s, double lo, double hi) {
    if (!s) die("%s needs a value", flag);
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || isnan(v)) die("%s: '%s' is not a number", flag, s);
    if (v < lo || v > hi) die("%s: %g is out of range [%g, %g]", flag, v, lo, hi);
    return v;
}

/* ---- options shared by the commands ---- */
typedef struct opts {
    const char *model, *tokenizer, *prompt, *file, *kv, *system, *mode, *split, *ctx_list;
    const char *kv_list[32]; int n_kv;   /* the arms: each --kv with every --kv-layers appended */
    const char *kv_raw[32]; int n_kv_raw; /* --kv as given */
    char kv_layers[1024];                 /* every --kv-layers value, each as "@LAYERS=SPEC" */
    char kv_full[32][2048];               /* storage of kv_list when --kv-layers is given */
    int n_predict, n_ctx, batch, threads, top_k, chat, verbose, json, reps, n_gen, max_paras;
    int show_special, bos_window, first_scored, no_bos;
    long max_tokens;
    double temp, top_p, min_p;
    uint64_t seed;
} opts;

static void defaults(opts *o) {
    memset(o, 0, sizeof *o);
    o->model = DEFAULT_MODEL;
    o->n_predict = 128; o->n_ctx = 2048; o->batch = 64; o->threads = 0;
    o->temp = 0.8; o->top_k = 40; o->top_p = 0.95; o->min_p = 0.05; o->seed = 0;
    o->mode = "decode"; o->split = "windows"; o->reps = 5; o->n_gen = 32;
    o->first_scored = 0;
}

/* kv_list = every --kv (or the commands' default f16 when --kv-layers comes alone) with the
 * --kv-layers overrides appended: "q4_0" + "--kv-layers 0,-1=f16" -> "q4_0@0,-1=f16". Rebuilt after
 * each of these options, so the order of --kv and --kv-layers does not matter. */
static void kv_arms(opts *o) {
    int n = o->n_kv_raw;
    if (n == 0 && !o->kv_layers[0]) return;
    for (int a = 0; a < (n ? n : 1); a++) {
        const char *base = n ? o->kv_raw[a] : "f16";
        int w = snprintf(o->kv_full[a], sizeof o->kv_full[a], "%s%s", base, o->kv_layers);
        if (w < 0 || (size_t)w >= sizeof o->kv_full[a])
            die("--kv '%s' with --kv-layers '%s' is longer than %zu characters", base, o->kv_layers + 1,
                sizeof o->kv_full[a] - 1);
        o->kv_list[a] = o->kv_full[a];
    }
    o->n_kv = n ? n : 1;
    o->kv = o->kv_list[0];
}

/* Returns 1 when argv[*i] was a shared option (consuming its value). */
static int common_opt(opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
#define TAKE() ((*i)++, v)
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!v) die("%s needs a file", a); o->model = TAKE(); return 1; }
    if (!strcmp(a, "--tokenizer")) { if (!v) die("%s needs a file", a); o->tokenizer = TAKE(); return 1; }
    if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { o->threads = (int)parse_long(a, TAKE(), 1, 1024); return 1; }
    if (!strcmp(a, "-b") || !strcmp(a, "--batch")) { o->batch = (int)parse_long(a, TAKE(), 1, 8192); return 1; }
    if (!strcmp(a, "--kv")) {
        if (!v) die("--kv needs a spec (e.g. f16)");
        if (o->n_kv_raw == (int)VQ_ARRAY_LEN(o->kv_raw)) die("--kv given more than %d times", (int)VQ_ARRAY_LEN(o->kv_raw));
        o->kv_raw[o->n_kv_raw++] = TAKE();
        o->kv_list[o->n_kv_raw - 1] = o->kv_raw[o->n_kv_raw - 1];
        o->n_kv = o->n_kv_raw;
        o->kv = o->kv_list[0];
        if (o->kv_layers[0]) kv_arms(o);
        return 1;
    }
    if (!strcmp(a, "--kv-layers")) {
        const char *cmd = argv[1];
        if (strcmp(cmd, "generate") && strcmp(cmd, "perplexity") && strcmp(cmd, "bench"))
            die("%s: --kv-layers is for generate, perplexity and bench (here, write the override into "
                "the --kv spec: SPEC@LAYERS=SPEC, docs/kv-spec.md)", cmd);
        if (!v || !strchr(v, '=') || v[0] == '@')
            die("--kv-layers needs LAYERS=SPEC, e.g. '0,-1=f16' or '0,1=q8_0@-1=f16' (got '%s')", v ? v : "");
        size_t used = strlen(o->kv_layers);
        int w = snprintf(o->kv_layers + used, sizeof o->kv_layers - used, "@%s", v);
        if (w < 0 || (size_t)w >= sizeof o->kv_layers - used)
            die("--kv-layers: the overrides together exceed %zu characters", sizeof o->kv_layers - 1);
        (*i)++;
        kv_arms(o);
        return 1;
    }
    if (!strcmp(a, "--json")) { o->json = 1; return 1; }
    if (!strcmp(a, "--seed") || !strcmp(a, "-s")) { o->seed = (uint64_t)parse_long(a, TAKE(), 0, LONG_MAX); return 1; }
#undef TAKE
    return 0;
}

static vq_model *load_model(const opts *o) {
    if (access(o->model, R_OK) != 0) {
        if (!strcmp(o->model, DEFAULT_MODEL))
            die("%s not found: run scripts/fetch_model.sh (or pass -m FILE)", o->model);
        die("%s: cannot read model file: %s", o->model, strerror(errno));
    }
    vq_err err; vq_err_clear(&err);
    vq_model *m = vq_model_open(o->model, o->tokenizer, &err);
    if (!m) die("%s", err.msg);
    if (o->threads > 0) omp_set_num_threads(o->threads);
    return m;
}

static char *read_text(const char *path) {
    vq_err err; vq_err_clear(&err);
    if (!strcmp(path, "-")) {   /* stdin */
        size_t cap = 1 << 16, n = 0;
        char *buf = malloc(cap + 1);
        size_t got;
        while (buf && (got = fread(buf + n, 1, cap - n, stdin)) > 0) {
            n += got;
            if (n == cap) { cap *= 2; buf = realloc(buf, cap + 1); }
        }
        if (!buf) die("out of memory reading stdin");
        buf[n] = 0;
        return buf;
    }
    char *t = vq_read_file(path, NULL, &err);
    if (!t) die("%s", err.msg);
    return t;
}

static int *tokenize_all(const vq_model *m, const char *text, int add_bos, int special, int *n_out) {
    vq_err err; vq_err_clear(&err);
    size_t len = strlen(text);
    int need = vq_tok_encode(m->tok, text, len, add_bos, special, NULL, 0, &err);
    if (need < 0) die("tokenize: %s", err.msg);
    int *ids = malloc(((size_t)need + 1) * sizeof(int));
    if (!ids) die("out of memory");
    vq_tok_encode(m->tok, text, len, add_bos, special, ids, need, &err);
    *n_out = need;
    return ids;
}

static void progress(long done, long total, void *user) {
    (void)user;
    if (!isatty(STDERR_FILENO)) return;
    int width = 40, fill = total ? (int)(width * done / total) : width;
    fprintf(stderr, "\r[%.*s%*s] %ld/%ld", fill, "========================================", width - fill, "", done, total);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

/* ---------------------------------------------------------------- generate */
static const char *generate_help =
    "usage: veloxquant generate [options]\n"
    "Generate text from a prompt, streaming tokens to stdout.\n"
    "  -m, --model FILE      GGUF or llama2.c model (default " DEFAULT_MODEL ")\n"
    "      --tokenizer FILE  tokenizer for llama2.c checkpoints (tok512.bin)\n"
    "  -p, --prompt TEXT     the prompt\n"
    "  -f, --file FILE       read the prompt from FILE ('-' = stdin)\n"
    "  -n, --n-predict N     tokens to generate (default 128)\n"
    "  -c, --ctx-size N      context size (default 2048)\n"
    "  -b, --batch N         prefill chunk (default 64)\n"
    "  -t, --threads N       threads (default: OpenMP's)\n"
    "      --temp T          temperature; 0 = greedy (default 0.8)\n"
    "      --top-k K         (default 40; 0 = off)\n"
    "      --top-p P         (default 0.95; 1 = off)\n"
    "      --min-p P         (default 0.05; 0 = off)\n"
    "  -s, --seed N          sampling seed (default 0)\n"
    "      --chat            wrap the prompt in the model's chat template (ChatML)\n"
    "      --system TEXT     system prompt for --chat (default: the template's)\n"
    "      --no-bos          do not prepend BOS even if the model asks for it\n"
    "      --kv SPEC         KV cache (default f16); see docs/kv-spec.md\n"
    "      --kv-layers L=SPEC  per-layer override, appended to every --kv as '@L=SPEC': layers L\n"
    "                        (comma list, a..b ranges, negative = from the end) use SPEC, e.g.\n"
    "                        --kv q4_0 --kv-layers 0,-1=f16 -> q4_0@0,-1=f16 (repeatable)\n"
    "      --verbose         print timings and KV cache bytes to stderr\n"
    "      --json            print a JSON summary instead of streaming text\n";

typedef struct { int json; } gen_user;
static int on_text(const char *bytes, size_t n, void *user) {
    if (!((gen_user *)user)->json) { fwrite(bytes, 1, n, stdout); fflush(stdout); }
    return 0;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static int cmd_generate(int argc, char **argv) {
    opts o; defaults(&o);
    o.kv = "f16";
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(generate_help, stdout); return 0; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!v) die("%s needs text", a); o.prompt = v; i++; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) die("%s needs a file", a); o.file = v; i++; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { o.n_predict = (int)parse_long(a, v, 0, 1 << 24); i++; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { o.n_ctx = (int)parse_long(a, v, 2, 1 << 24); i++; }
        else if (!strcmp(a, "--temp")) { o.temp = parse_double(a, v, 0, 100); i++; }
        else if (!strcmp(a, "--top-k")) { o.top_k = (int)parse_long(a, v, 0, 1 << 24); i++; }
        else if (!strcmp(a, "--top-p")) { o.top_p = parse_double(a, v, 1e-6, 1); i++; }
        else if (!strcmp(a, "--min-p")) { o.min_p = parse_double(a, v, 0, 0.999); i++; }
        else if (!strcmp(a, "--chat")) o.chat = 1;
        else if (!strcmp(a, "--system")) { if (!v) die("--system needs text"); o.system = v; i++; }
        else if (!strcmp(a, "--no-bos")) o.no_bos = 1;
        else if (!strcmp(a, "--verbose")) o.verbose = 1;
        else die("generate: unknown option '%s' (see veloxquant generate --help)", a);
    }
    if (o.prompt && o.file) die("give the prompt with -p or -f, not both");
    char *text = o.prompt ? strdup(o.prompt) : o.file ? read_text(o.file) : NULL;
    if (!text) die("no prompt: use -p TEXT, -f FILE or -f - (stdin)");
    vq_model *m = load_model(&o);
    vq_err err; vq_err_clear(&err);
    if (o.chat) {
        char *c = vq_chat_render(m->chat_template, o.system, text, &err);
        if (!c) die("%s", err.msg);
        free(text);
        text = c;
    }
    int add_bos = !o.no_bos && vq_tok_add_bos_default(m->tok) && vq_tok_bos(m->tok) >= 0;
    int n_prompt;
    int *prompt = tokenize_all(m, text, add_bos, o.chat, &n_prompt);
    if (n_prompt >= o.n_ctx)
        die("the prompt is %d tokens but the context size is %d: raise -c or shorten the prompt", n_prompt, o.n_ctx);
    /* everything that can fail on the arguments fails before anything is printed */
    vq_kv_spec *spec = vq_kv_spec_parse(o.kv, &err);
    if (!spec) die("%s", err.msg);
    vq_session_params sprm = vq_session_default_params();
    sprm.n_ctx = o.n_ctx;
    sprm.n_batch = o.batch;
    sprm.kv_seed = 0x5eed;
    sprm.allow_ctx_over_train = 1;
    vq_session *ses = vq_session_create(m, spec, &sprm, &err);
    if (!ses) die("%s", err.msg);
    vq_sampler_params smp_p = { (float)o.temp, o.top_k, (float)o.top_p, (float)o.min_p, o.seed };
    vq_sampler *smp = vq_sampler_create(&smp_p, vq_model_n_vocab(m), &err);
    if (!smp) die("%s", err.msg);
    vq_generate_params gp = vq_generate_default_params();
    gp.n_predict = o.n_predict;
    vq_generate_result gr;
    gen_user gu = { o.json };
    if (!o.json && !o.chat) {   /* echo the prompt as llama.cpp does */
        fputs(text, stdout);
        fflush(stdout);
    }
    vq_status s = o.n_predict > 0 ? vq_session_generate(ses, prompt, n_prompt, smp, &gp, on_text, &gu, &gr, &err)
                                  : VQ_OK;
    if (o.n_predict == 0) {   /* prefill only */
        double t0 = vq_now_s();
        s = vq_session_decode(ses, prompt, n_prompt, NULL, 0, &err);
        gr = (vq_generate_result){ .n_prompt = n_prompt, .t_prefill_s = vq_now_s() - t0, .stop = VQ_STOP_LENGTH };
    }
    if (s) die("%s", err.msg);
    struct { int n_prompt, n_gen; double t_prefill, t_decode; size_t kv_bytes; double kv_bits_per_elem; int stopped_eog; } st = {
        gr.n_prompt, gr.n_gen, gr.t_prefill_s, gr.t_decode_s, vq_session_kv_bytes(ses), vq_session_kv_bits(ses),
        gr.stop == VQ_STOP_EOG };
    vq_sampler_free(smp);
    vq_session_free(ses);
    vq_kv_spec_free(spec);
    if (!o.json) { putchar('\n'); fflush(stdout); }
    double pre_tps = st.n_prompt / VQ_MAX(st.t_prefill, 1e-9), dec_tps = (st.n_gen > 1 ? st.n_gen - 1 : 0) / VQ_MAX(st.t_decode, 1e-9);
    if (o.verbose || o.json) {
        FILE *f = o.json ? stdout : stderr;
        if (o.json) {
            fprintf(f, "{\"prompt_tokens\": %d, \"generated_tokens\": %d, \"prefill_tps\": %.2f, \"decode_tps\": %.2f, "
                       "\"kv\": ", st.n_prompt, st.n_gen, pre_tps, dec_tps);
            json_str(f, o.kv);
            fprintf(f, ", \"kv_bytes\": %zu, \"kv_bits_per_elem\": %.3f, \"stopped_eog\": %s}\n", st.kv_bytes,
                    st.kv_bits_per_elem, st.stopped_eog ? "true" : "false");
        } else {
            fprintf(f, "prompt %d tokens, %.1f tok/s | generated %d tokens, %.1f tok/s | kv %s: %zu bytes, %.3f bits/elem | threads %d, %s\n",
                    st.n_prompt, pre_tps, st.n_gen, dec_tps, o.kv, st.kv_bytes, st.kv_bits_per_elem,
                    omp_get_max_threads(), vq_isa_name(vq_kernels_isa()));
        }
    }
    free(prompt);
    free(text);
    vq_model_free(m);
    return 0;
}

/* -------------------------------------------------------------- perplexity */
static const char *ppl_help =
    "usage: veloxquant perplexity -f TEXT [options]\n"
    "Perplexity of a text over non-overlapping windows.\n"
    "  -m, --model FILE      model (default " DEFAULT_MODEL ")\n"
    "      --tokenizer FILE  tokenizer for llama2.c checkpoints\n"
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
    "      --kl              also report KL(first arm || arm) of the next-token distribution per arm\n"
    "      --kv SPEC         KV cache (default f16; repeat for several arms)\n"
    "      --kv-layers L=SPEC  per-layer override, appended to every --kv as '@L=SPEC': layers L\n"
    "                        (comma list, a..b ranges, negative = from the end) use SPEC, e.g.\n"
    "                        --kv q4_0 --kv-layers 0,-1=f16 -> q4_0@0,-1=f16 (repeatable)\n"
    "      --serial-arms     decode mode, several --kv: run the arms one after another (default:\n"
    "                        together, one batched forward per token, each arm its own cache;\n"
    "                        same figures, the weights read once for all arms; tok/s is then\n"
    "                        the pass's text tokens per second, shared by the arms)\n"
    "  -b, --batch N         prefill chunk (default 64)\n"
    "  -t, --threads N       threads\n"
    "      --json            machine-readable output\n";

static int cmd_perplexity(int argc, char **argv) {
    opts o; defaults(&o);
    o.n_ctx = 512;
    int serial = 0, kl = 0;
    const char *score = "all";
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(ppl_help, stdout); return 0; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) die("%s needs a file", a); o.file = v; i++; }
        else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) { o.n_ctx = (int)parse_long(a, v, 2, 1 << 20); i++; }
        else if (!strcmp(a, "--mode")) { if (!v) die("--mode needs decode or prefill"); o.mode = v; i++; }
        else if (!strcmp(a, "--max-tokens")) { o.max_tokens = parse_long(a, v, 2, LONG_MAX); i++; }
        else if (!strcmp(a, "--split")) { if (!v) die("--split needs windows or paragraphs"); o.split = v; i++; }
        else if (!strcmp(a, "--max-paragraphs")) { o.max_paras = (int)parse_long(a, v, 1, INT_MAX); i++; }
        else if (!strcmp(a, "--bos-per-window")) o.bos_window = 1;
        else if (!strcmp(a, "--first-scored")) { o.first_scored = (int)parse_long(a, v, 0, INT_MAX); i++; }
        else if (!strcmp(a, "--serial-arms")) serial = 1;
        else if (!strcmp(a, "--score")) { if (!v) die("--score needs all or second-half"); score = v; i++; }
        else if (!strcmp(a, "--kl")) kl = 1;
        else die("perplexity: unknown option '%s' (see veloxquant perplexity --help)", a);
    }
    if (!o.file) die("perplexity: no text: use -f FILE");
    vq_ppl_params pp = vq_ppl_default_params();
    if (!strcmp(o.mode, "decode")) pp.mode = VQ_PPL_DECODE;
    else if (!strcmp(o.mode, "prefill")) pp.mode = VQ_PPL_PREFILL;
    else die("--mode '%s' is unknown (known: decode, prefill)", o.mode);
    if (!strcmp(score, "all")) pp.score = VQ_PPL_SCORE_ALL;
    else if (!strcmp(score, "second-half")) pp.score = VQ_PPL_SCORE_SECOND_HALF;
    else die("--score '%s' is unknown (known: all, second-half)", score);
    int paragraphs = 0;
    if (!strcmp(o.split, "paragraphs")) paragraphs = 1;
    else if (strcmp(o.split, "windows")) die("--split '%s' is unknown (known: windows, paragraphs)", o.split);
    if (o.n_kv == 0) { o.kv_list[0] = "f16"; o.n_kv = 1; }
    vq_kv_spec *specs[32];
    for (int a = 0; a < o.n_kv; a++) {   /* a bad spec fails before any output */
        vq_err e; vq_err_clear(&e);
        if (!(specs[a] = vq_kv_spec_parse(o.kv_list[a], &e))) die("%s", e.msg);
    }
    char *text = read_text(o.file);
    vq_model *m = load_model(&o);
    pp.n_ctx = o.n_ctx; pp.n_batch = o.batch; pp.max_tokens = o.max_tokens; pp.first_scored = o.first_scored;
    pp.bos_per_window = o.bos_window; pp.max_paragraphs = o.max_paras; pp.kv_seed = 0x5eed;
    pp.split = paragraphs ? VQ_PPL_SPLIT_PARAGRAPHS : VQ_PPL_SPLIT_WINDOWS;
    pp.serial_arms = serial; pp.kl_vs_first = kl;
    const int batched = !serial && !paragraphs && pp.mode == VQ_PPL_DECODE && o.n_kv > 1;
    vq_ppl_result *res = calloc((size_t)o.n_kv, sizeof *res);
    if (!res) die("out of memory");
    vq_err err; vq_err_clear(&err);
    /* every figure is computed before anything is printed: a failure leaves no partial output */
    if (vq_perplexity_text(m, (const vq_kv_spec *const *)specs, o.n_kv, text, strlen(text), &pp, progress, NULL,
                           res, &err))
        die("%s", err.msg);
    if (o.json) {
        printf("{\"model\": ");
        json_str(stdout, vq_model_path(m));
        printf(", \"ctx\": %d, \"mode\": \"%s\", \"score\": \"%s\", \"arms_batched\": %s, \"arms\": [", o.n_ctx, o.mode,
               score, batched ? "true" : "false");
    }
    else printf("%-34s %9s %10s %10s %9s %12s %8s%s\n", "kv", "tokens", "mean_nll", "ppl", "tok/s", "kv bytes", "bits/el",
                kl ? "  KL vs arm 0" : "");
    for (int a = 0; a < o.n_kv; a++) {
        const vq_ppl_result *r = &res[a];
        double tps = r->n_tokens / VQ_MAX(r->seconds, 1e-9);
        if (o.json) {
            printf("%s{\"kv\": ", a ? ", " : "");
            json_str(stdout, o.kv_list[a]);
            printf(", \"scored\": %ld, \"mean_nll\": %.6f, \"ppl\": %.6f, \"tokens_per_s\": %.2f, \"seconds\": %.3f, "
                   "\"kv_bytes\": %zu, \"bits_per_elem\": %.4f",
                   r->n_scored, r->mean_nll, r->ppl, tps, r->seconds, r->kv_bytes, r->kv_bits);
            if (kl) printf(", \"kl_vs_first\": %.6g", r->kl_mean);
            if (paragraphs) printf(", \"paragraphs\": %ld", r->n_units);
            printf("}");
        } else {
            printf("%-34s %9ld %10.6f %10.4f %9.1f %12zu %8.3f", o.kv_list[a], r->n_scored, r->mean_nll, r->ppl, tps,
                   r->kv_bytes, r->kv_bits);
            if (kl) printf("  %.6g", r->kl_mean);
            putchar('\n');
            if (paragraphs) printf("paragraphs %ld\n", r->n_units);
        }
        fflush(stdout);
    }
    if (o.json) printf("]}\n");
    for (int a = 0; a < o.n_kv; a++) vq_kv_spec_free(specs[a]);
    free(res);
    free(text);
    vq_model_free(m);
    return 0;
}

/* ------------------------------------------------------------------- bench */
static const char *bench_help =
    "usage: veloxquant bench [options]\n"
    "Prefill and decode throughput at several context fills, KV arms interleaved (rep outermost),\n"
    "with the f16 arm's spread as the noise floor, the ratio to f16, peak RSS per arm, the cache's\n"
    "bytes, and the physical limit: read bandwidth measured in the same run / (KV bytes held +\n"
    "model file bytes) per decode token.\n"
    "  -m, --model FILE      model (default " DEFAULT_MODEL ")\n"
    "  -f, --file FILE       real text to prefill with (default ../shared/data/wikitext-2-raw-test.txt)\n"
    "      --ctx LIST        context fills, comma-separated (default 1024,4096,8192)\n"
    "      --kv SPEC         KV arm (repeatable; default f16; f16 is the baseline when present,\n"
    "                        else the first arm)\n"
    "      --kv-layers L=SPEC  per-layer override appended to every arm (the f16 one too) as\n"
    "                        '@L=SPEC', e.g. --kv q4_0 --kv-layers 0,-1=f16 -> q4_0@0,-1=f16\n"
    "      --reps N          repeats per arm (default 5; arms interleaved per repeat)\n"
    "      --gen N           decode tokens timed per repeat (default 32)\n"
    "      --bw-mb MB        read-bandwidth buffer (default 1024); --bw-reps N passes before and\n"
    "                        N after the run (default 5)\n"
    "  -b, --batch N         prefill chunk (default 64)\n"
    "  -t, --threads N       threads\n"
    "      --json            the report as JSON (every raw repeat + the summary)\n"
    "      --json-file F     also write the JSON to F (the table still goes to stdout)\n"
    "      --rss-only        honest memory: ONE --kv arm per process; load the model, warm it, read\n"
    "                        RSS, prefill real text through the cache reading RSS at each --ctx\n"
    "                        (default 8192); prints accounted bytes and measured RSS delta\n"
    "      --list-codecs     print the codec names of the table, one per line\n";

static void bench_command_line(int argc, char **argv, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < argc && o + 1 < n; i++) {
        int q = strpbrk(argv[i], " ;,\"'") != NULL;
        int w = snprintf(buf + o, n - o, "%s%s%s%s", i ? " " : "", q ? "'" : "", argv[i], q ? "'" : "");
        if (w < 0) break;
        o += (size_t)w;
    }
}

static int cmd_bench(int argc, char **argv) {
    opts o; defaults(&o);
    o.ctx_list = NULL;
    o.file = "../shared/data/wikitext-2-raw-test.txt";
    int rss_only = 0, bw_reps = 5;
    long bw_mb = 1024;
    const char *json_file = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(bench_help, stdout); return 0; }
        else if (!strcmp(a, "--list-codecs")) {
            for (int c = 0; vq_codec_at(c); c++) puts(vq_codec_at(c)->name);
            return 0;
        }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) die("%s needs a file", a); o.file = v; i++; }
        else if (!strcmp(a, "--ctx")) { if (!v) die("--ctx needs a list"); o.ctx_list = v; i++; }
        else if (!strcmp(a, "--reps")) { o.reps = (int)parse_long(a, v, 1, 1000); i++; }
        else if (!strcmp(a, "--gen")) { o.n_gen = (int)parse_long(a, v, 1, 100000); i++; }
        else if (!strcmp(a, "--bw-mb")) { bw_mb = parse_long(a, v, 1, 1 << 20); i++; }
        else if (!strcmp(a, "--bw-reps")) { bw_reps = (int)parse_long(a, v, 1, 1000); i++; }
        else if (!strcmp(a, "--json-file")) { if (!v) die("%s needs a file", a); json_file = v; i++; }
        else if (!strcmp(a, "--rss-only")) rss_only = 1;
        else die("bench: unknown option '%s' (see veloxquant bench --help)", a);
    }
    if (!o.ctx_list) o.ctx_list = rss_only ? "8192" : "1024,4096,8192";
    int ctxs[16], n_ctxs = 0;
    char *list = strdup(o.ctx_list), *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n_ctxs == 16) die("--ctx: at most 16 values");
        ctxs[n_ctxs++] = (int)parse_long("--ctx", t, 1, 1 << 20);
    }
    free(list);
    if (!n_ctxs) die("--ctx: empty list");
    if (o.n_kv == 0) { o.kv_list[0] = "f16"; o.n_kv = 1; }
    if (rss_only && o.n_kv != 1)
        die("bench --rss-only: give exactly one --kv (got %d): one arm per process, so no arm inherits another's freed memory", o.n_kv);
    char cmdline[2048], machine[512];
    bench_command_line(argc, argv, cmdline, sizeof cmdline);
    vq_cpu_describe(machine, sizeof machine);
    vq_model *m = load_model(&o);
    char *text = read_text(o.file);
    int n_tok;
    int *tok = tokenize_all(m, text, 0, 0, &n_tok);
    free(text);
    vq_err err; vq_err_clear(&err);
    if (rss_only) {
        vq_bench_rss_point pts[16];
        vq_bench_rss_result rr;
        if (vq_bench_rss_fill(m, o.kv_list[0], tok, n_tok, ctxs, n_ctxs, o.batch, 0x5eed, pts, &rr, &err))
            die("%s", err.msg);
        if (o.json) {
            printf("{\"command\": "); json_str(stdout, cmdline);
            printf(", \"machine\": "); json_str(stdout, machine);
            printf(", \"model\": "); json_str(stdout, m->path);
            printf(", \"kv\": "); json_str(stdout, o.kv_list[0]);
            printf(", \"threads\": %d, \"batch\": %d, \"rss_base\": %zu, \"rss_end_trim\": %zu, \"kv_bytes_empty\": %zu, "
                   "\"fill_s\": %.3f, \"peak_rss\": %zu, \"points\": [",
                   omp_get_max_threads(), o.batch, rr.rss_base, rr.rss_end_trim, rr.kv_bytes_empty, rr.fill_s,
                   vq_peak_rss_bytes());
            for (int c = 0; c < n_ctxs; c++)
                printf("%s{\"ctx\": %d, \"kv_bytes\": %zu, \"bits_per_elem\": %.4f, \"rss\": %zu, \"rss_delta\": %ld, "
                       "\"rss_trim\": %zu, \"rss_delta_trim\": %ld}",
                       c ? ", " : "", pts[c].ctx, pts[c].kv_bytes, pts[c].kv_bits, pts[c].rss,
                       (long)pts[c].rss - (long)rr.rss_base, pts[c].rss_trim, (long)pts[c].rss_trim - (long)rr.rss_base);
            printf("]}\n");
        } else {
            printf("kv %s: base RSS %.2f MB (model loaded and warmed, no cache); fill %.1f s\n", o.kv_list[0],
                   rr.rss_base / 1048576.0, rr.fill_s);
            printf("%6s %14s %14s %8s %16s %9s\n", "ctx", "kv bytes", "rss delta", "ratio", "delta after trim", "bits/el");
            for (int c = 0; c < n_ctxs; c++) {
                long d = (long)pts[c].rss - (long)rr.rss_base, dt = (long)pts[c].rss_trim - (long)rr.rss_base;
                printf("%6d %14zu %14ld %8.4f %16ld %9.3f\n", pts[c].ctx, pts[c].kv_bytes, d,
                       pts[c].kv_bytes ? (double)d / (double)pts[c].kv_bytes : 0, dt, pts[c].kv_bits);
            }
        }
        free(tok);
        vq_model_free(m);
        return 0;
    }
    vq_bench_params bp = { .ctxs = ctxs, .n_ctxs = n_ctxs, .specs = o.kv_list, .n_specs = o.n_kv, .reps = o.reps,
                           .n_gen = o.n_gen, .batch = o.batch, .text = tok, .n_text = n_tok, .kv_seed = 0x5eed };
    for (int a = 0; a < o.n_kv; a++) {   /* a bad spec fails before any timing */
        vq_kv_dims d = vq_model_kv_dims(m, 16);
        vq_kv *kv = vq_kv_create_str(o.kv_list[a], &d, 0x5eed, &err);
        if (!kv) die("%s", err.msg);
        vq_kv_destroy(kv);
    }
    size_t ns = (size_t)o.reps * n_ctxs * o.n_kv, bw_bytes = (size_t)bw_mb << 20;
    vq_bench_sample *smp = calloc(ns, sizeof *smp);
    double *bw = calloc(2 * (size_t)bw_reps, sizeof(double));
    if (!smp || !bw) die("out of memory");
    if (vq_bench_read_bw(bw_bytes, bw_reps, bw)) die("bench: no memory for the %ld MiB bandwidth buffer (--bw-mb)", bw_mb);
    if (vq_bench_run(m, &bp, smp, progress, NULL, &err)) die("%s", err.msg);
    /* the run's peak: the largest per-sample peak (each sample resets VmHWM), so the bandwidth
     * buffer is not in it; VmHWM itself when the kernel refused the reset */
    size_t peak = 0;
    for (size_t k = 0; k < ns; k++) peak = VQ_MAX(peak, smp[k].peak_rss);
    if (!peak) peak = vq_peak_rss_bytes();
    if (vq_bench_read_bw(bw_bytes, bw_reps, bw + bw_reps)) die("bench: no memory for the %ld MiB bandwidth buffer", bw_mb);
    vq_bench_report_in ri = { .command = cmdline, .machine = machine, .model_path = m->path,
                              .isa = vq_isa_name(vq_kernels_isa()), .model_bytes = m->file_bytes,
                              .threads = omp_get_max_threads(), .p = &bp, .samples = smp, .bw_gbps = bw,
                              .n_bw = 2 * bw_reps, .bw_bytes = bw_bytes, .peak_rss = peak };
    vq_bench_report(stdout, &ri, o.json);
    if (json_file) {
        FILE *jf = fopen(json_file, "w");
        if (!jf) die("%s: cannot write: %s", json_file, strerror(errno));
        vq_bench_report(jf, &ri, 1);
        if (fclose(jf)) die("%s: write failed: %s", json_file, strerror(errno));
    }
    free(bw);
    free(smp);
    free(tok);
    vq_model_free(m);
    return 0;
}

/* -------------------------------------------------------------- info/tokenize */
static int cmd_info(int argc, char **argv) {
    opts o; defaults(&o);
    for (int i = 2; i < argc; i++) {
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            puts("usage: veloxquant info [-m FILE] [--tokenizer FILE]\nPrint the model's configuration.");
            return 0;
        }
        die("info: unknown option '%s'", argv[i]);
    }
    vq_model *m = load_model(&o);
    const vq_model_config *c = &m->cfg;
    char machine[512];
    vq_cpu_describe(machine, sizeof machine);
    printf("model       %s (%zu bytes)\narch        %s\ndim         %d\nhidden      %d\nlayers      %d\n"
           "heads       %d (kv %d, head_dim %d)\nvocab       %d\ntrain ctx   %d\nrope        base %g, dims %d, %s\n"
           "rms eps     %g\nweights     %s (layer 0 q), embeddings %s\nmachine     %s\n",
           m->path, m->file_bytes, c->arch, c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
           c->head_dim, c->vocab_size, c->train_ctx, c->rope_base, c->rope_dim, c->rope_neox ? "neox" : "adjacent pairs",
           c->norm_eps, vq_wtype_get(m->layers[0].wq.type)->name, vq_wtype_get(m->tok_embd.type)->name, machine);
    vq_model_free(m);
    return 0;
}

static int cmd_tokenize(int argc, char **argv) {
    opts o; defaults(&o);
    int special = 0, bos = -1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            puts("usage: veloxquant tokenize [-m FILE] (-p TEXT | -f FILE) [--special] [--bos|--no-bos]\n"
                 "Print the token ids of a text, one per line with its piece.");
            return 0;
        }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!v) die("%s needs text", a); o.prompt = v; i++; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) die("%s needs a file", a); o.file = v; i++; }
        else if (!strcmp(a, "--special")) special = 1;
        else if (!strcmp(a, "--bos")) bos = 1;
        else if (!strcmp(a, "--no-bos")) bos = 0;
        else die("tokenize: unknown option '%s'", a);
    }
    char *text = o.prompt ? strdup(o.prompt) : o.file ? read_text(o.file) : NULL;
    if (!text) die("tokenize: use -p TEXT or -f FILE");
    vq_model *m = load_model(&o);
    if (bos < 0) bos = vq_tok_add_bos_default(m->tok);
    int n;
    int *ids = tokenize_all(m, text, bos, special, &n);
    for (int i = 0; i < n; i++) {
        char buf[256];
        size_t nb = vq_tok_piece(m->tok, i ? ids[i - 1] : -1, ids[i], 1, buf, sizeof buf - 1);
        buf[nb] = 0;
        printf("%d\t", ids[i]);
        json_str(stdout, buf);
        putchar('\n');
    }
    free(ids);
    free(text);
    vq_model_free(m);
    return 0;
}


/* ---------------------------------------------------- bench-kernels / kv-fidelity (src/eval) */
static const char *bench_kernels_help =
    "usage: veloxquant bench-kernels [options]\n"
    "Decode-attention time of one step (1 KV head, GQA group of 3 query heads) and encode rate per\n"
    "KV codec, through the real store, against f16 and a measured memcpy ceiling.\n"
    "  --n LIST           rows in the cache (default 1024,4096,16384,65536)\n"
    "  --dims LIST        head_dim values (default 64,128)\n"
    "  --kv SPEC          an arm (repeatable; default: every codec + turboquant_mse:k=4,v=4, q4_0:rotate=1);\n"
    "                     f16 is always the first arm (the baseline)\n"
    "  --reps N           repeats, arms interleaved (default 5)\n"
    "  --pool-mb MB       each arm rotates over caches holding >= MB MiB (default 512)\n"
    "  --split            also time score and accumulate apart through the codec table\n"
    "  -t, --threads N    threads for attention (default 1: single-threaded)\n"
    "  -s, --seed N       data seed\n"
    "      --json         every raw repeat as JSON\n"
    "      --json-file F  also write the JSON to F (the table still goes to stdout)\n";

static int parse_int_list(const char *flag, const char *s, int *out, int cap, long lo, long hi) {
    int n = 0;
    char *list = strdup(s), *save = NULL;
    if (!list) die("out of memory");
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == cap) die("%s: at most %d values", flag, cap);
        out[n++] = (int)parse_long(flag, t, lo, hi);
    }
    free(list);
    if (!n) die("%s: empty list", flag);
    return n;
}

static void bk_progress(const char *what, void *user) {
    (void)user;
    fprintf(stderr, "bench-kernels: %s\n", what);
}

static int cmd_bench_kernels(int argc, char **argv) {
    opts o; defaults(&o);
    int ns[16] = { 1024, 4096, 16384, 65536 }, n_ns = 4, dims[8] = { 64, 128 }, n_dims = 2, split = 0;
    long pool_mb = 512;
    const char *json_file = NULL;
    o.threads = 1;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(bench_kernels_help, stdout); return 0; }
        else if (!strcmp(a, "--n")) { if (!v) die("--n needs a list"); n_ns = parse_int_list(a, v, ns, 16, 1, 1 << 22); i++; }
        else if (!strcmp(a, "--dims")) { if (!v) die("--dims needs a list"); n_dims = parse_int_list(a, v, dims, 8, 1, 4096); i++; }
        else if (!strcmp(a, "--reps")) { o.reps = (int)parse_long(a, v, 1, 1000); i++; }
        else if (!strcmp(a, "--pool-mb")) { pool_mb = parse_long(a, v, 1, 1 << 20); i++; }
        else if (!strcmp(a, "--split")) split = 1;
        else if (!strcmp(a, "--json-file")) { if (!v) die("%s needs a file", a); json_file = v; i++; }
        else die("bench-kernels: unknown option '%s' (see veloxquant bench-kernels --help)", a);
    }
    vq_bk_params p = { ns, n_ns, dims, n_dims, o.kv_list, o.n_kv, o.reps, o.threads,
                       (size_t)pool_mb << 20, split, o.seed ? o.seed : 0x5eed };
    vq_bk_result r;
    vq_err err; vq_err_clear(&err);
    vq_status s = vq_bench_kernels(&p, &r, bk_progress, NULL, &err);
    if (s) { vq_bench_kernels_free(&r); die("%s", err.msg); }
    vq_bench_kernels_print(stdout, &r, o.json);
    if (json_file) {
        FILE *jf = fopen(json_file, "w");
        if (!jf) { vq_bench_kernels_free(&r); die("%s: cannot write: %s", json_file, strerror(errno)); }
        vq_bench_kernels_print(jf, &r, 1);
        fclose(jf);
    }
    vq_bench_kernels_free(&r);
    return 0;
}

static const char *kv_fidelity_help =
    "usage: veloxquant kv-fidelity -m FILE -f TEXT --kv SPEC... [options]\n"
    "Runs the model over the first N tokens with an f32 cache, capturing every layer's q, k, v after\n"
    "RoPE; then, per KV spec, feeds those rows to a cache of that spec (layer by layer) and reports\n"
    "key cosine, attention-weight KL vs exact, attention-output relative error and bits per element.\n"
    "  -m, --model FILE   model (default " DEFAULT_MODEL ")\n"
    "      --tokenizer F  tokenizer for llama2.c checkpoints\n"
    "  -f, --file TEXT    text file (default ../shared/data/wikitext-2-raw-test.txt)\n"
    "      --kv SPEC      a spec to measure (repeatable; default: every codec)\n"
    "      --tokens N     tokens (default 512)\n"
    "      --per-layer    print every layer\n"
    "  -t, --threads N    threads\n"
    "  -s, --seed N       cache seed\n"
    "      --json         every layer of every spec as JSON\n";

static int cmd_kv_fidelity(int argc, char **argv) {
    opts o; defaults(&o);
    o.file = "../shared/data/wikitext-2-raw-test.txt";
    int n_tokens = 512, per_layer = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(kv_fidelity_help, stdout); return 0; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) die("%s needs a file", a); o.file = v; i++; }
        else if (!strcmp(a, "--tokens")) { n_tokens = (int)parse_long(a, v, 2, 1 << 16); i++; }
        else if (!strcmp(a, "--per-layer")) per_layer = 1;
        else die("kv-fidelity: unknown option '%s' (see veloxquant kv-fidelity --help)", a);
    }
    vq_model *m = load_model(&o);
    char *text = read_text(o.file);
    int n_tok;
    int *tok = tokenize_all(m, text, vq_tok_add_bos_default(m->tok), 0, &n_tok);
    free(text);
    if (n_tok < n_tokens) die("kv-fidelity: %s has %d tokens, --tokens asks for %d", o.file, n_tok, n_tokens);
    vq_err err; vq_err_clear(&err);
    vq_kvfid_capture *cap = vq_kvfid_capture_run(m, tok, n_tokens, &err);
    if (!cap) die("%s", err.msg);
    vq_kvfid_report(stdout, m, cap, o.kv_list, o.n_kv, o.seed ? o.seed : 1, per_layer, o.json);
    vq_kvfid_capture_free(cap);
    free(tok);
    vq_model_free(m);
    return 0;
}

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
    "  needle       passkey retrieval: a number hidden at a depth of filler text, per KV arm\n";

int main(int argc, char **argv) {
    if (argc < 2) { fputs(main_help, stderr); return 2; }
    const char *c = argv[1];
    if (!strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help")) { fputs(main_help, stdout); return 0; }
    if (!strcmp(c, "--version")) { printf("veloxquant %d.%d.%d\n", VQ_VERSION_MAJOR, VQ_VERSION_MINOR, VQ_VERSION_PATCH); return 0; }
    if (!strcmp(c, "generate")) return cmd_generate(argc, argv);
    if (!strcmp(c, "perplexity")) return cmd_perplexity(argc, argv);
    if (!strcmp(c, "bench")) return cmd_bench(argc, argv);
    if (!strcmp(c, "info")) return cmd_info(argc, argv);
    if (!strcmp(c, "tokenize")) return cmd_tokenize(argc, argv);
    if (!strcmp(c, "bench-kernels")) return cmd_bench_kernels(argc, argv);
    if (!strcmp(c, "kv-fidelity")) return cmd_kv_fidelity(argc, argv);
    if (!strcmp(c, "needle")) return vq_cmd_needle(argc, argv);
    fprintf(stderr, "veloxquant: unknown command '%s'\n%s", c, main_help);
    return 2;
}
