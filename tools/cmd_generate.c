/* cmd_generate.c: `veloxquant generate`: a prompt through a session, sampled text streamed to
 * stdout (or a JSON summary). Generation stops at the first write that fails (a closed pipe, a
 * full disk) and the command then fails. */
#ifndef VQ_EXPERIMENTAL   /* the build may define it for every file */
#define VQ_EXPERIMENTAL
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "json.h"

static const char *generate_help =
    "usage: veloxquant generate [options]\n"
    "Generate text from a prompt, streaming tokens to stdout.\n"
    "  -m, --model FILE      GGUF or llama2.c model (default " DEFAULT_MODEL ")\n"
    "      --tokenizer FILE  tokenizer for llama2.c checkpoints (tok512.bin)\n"
    "      --weights SPEC    re-code the weights in memory at load (e.g. q4_0,embd=q8_0; see\n"
    "                        veloxquant quantize --help); --copy-weights reads the file into memory\n"
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
    "      --chat            wrap the prompt in the model's chat template (ChatML,\n"
    "                        Llama 3, Gemma, Phi-3); the prompt's text stays plain text\n"
    "      --system TEXT     system prompt for --chat (default: the template's)\n"
    "      --no-bos          do not prepend BOS even if the model asks for it\n"
    "      --kv SPEC         KV cache (default f16); see docs/kv-spec.md\n"
    "      --kv-layers L=SPEC  per-layer override, appended to every --kv as '@L=SPEC': layers L\n"
    "                        (comma list, a..b ranges, negative = from the end) use SPEC, e.g.\n"
    "                        --kv q4_0 --kv-layers 0,-1=f16 -> q4_0@0,-1=f16 (repeatable)\n"
    CLI_DEVICE_HELP
    "      --verbose         print timings and KV cache bytes to stderr\n"
    "      --json            print a JSON summary instead of streaming text\n";

typedef struct gen_out { int json, write_errno; } gen_out;

/* Streams the text; a failed write stops generation (returning nonzero) and is reported after. */
static int on_text(const char *bytes, size_t n, void *user) {
    gen_out *g = user;
    if (g->json) return 0;
    if (write_stdout(bytes, n)) { g->write_errno = errno; return 1; }
    return 0;
}

int cmd_generate(int argc, char **argv) {
    opts o;
    opts_init(&o, argv[1]);
    o.kv = "f16";
    int n_predict = 128, n_ctx = 2048, top_k = 40, chat = 0, no_bos = 0, verbose = 0;
    double temp = 0.8, top_p = 0.95, min_p = 0.05;
    const char *system = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(generate_help, stdout); finish_stdout(); return 0; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!v) die("%s needs text", a); o.prompt = v; i++; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) die("%s needs a file", a); o.file = v; i++; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { n_predict = (int)parse_long(a, v, 0, 1 << 24); i++; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { n_ctx = (int)parse_long(a, v, 2, 1 << 24); i++; }
        else if (!strcmp(a, "--temp")) { temp = parse_double(a, v, 0, 100); i++; }
        else if (!strcmp(a, "--top-k")) { top_k = (int)parse_long(a, v, 0, 1 << 24); i++; }
        else if (!strcmp(a, "--top-p")) { top_p = parse_double(a, v, 1e-6, 1); i++; }
        else if (!strcmp(a, "--min-p")) { min_p = parse_double(a, v, 0, 0.999); i++; }
        else if (!strcmp(a, "--chat")) chat = 1;
        else if (!strcmp(a, "--system")) { if (!v) die("--system needs text"); system = v; i++; }
        else if (!strcmp(a, "--no-bos")) no_bos = 1;
        else if (!strcmp(a, "--verbose")) verbose = 1;
        else die("generate: unknown option '%s' (see veloxquant generate --help)", a);
    }
    if (o.prompt && o.file) die("give the prompt with -p or -f, not both");
    /* one cache: a second --kv would be ignored (and never validated) */
    if (o.n_kv_raw > 1) die("generate runs one KV cache: --kv given %d times (perplexity and bench compare several)", o.n_kv_raw);
    if (system && !chat) die("--system needs --chat (the system message goes through the chat template)");
    /* everything that can fail on the arguments fails before anything is printed */
    vq_err err;
    if (o.n_kv == 0) { o.kv_list[0] = o.kv; o.n_kv = 1; }
    vq_kv_spec *spec;
    parse_specs(&o, &spec);
    size_t len = 0;
    char *text = o.prompt ? strdup(o.prompt) : o.file ? read_text(o.file, "prompt file", &len) : NULL;
    if (!text) die("no prompt: use -p TEXT, -f FILE or -f - (stdin)");
    vq_model *m = load_model(&o);
    len = strlen(text);
    int add_bos = !no_bos && vq_token_add_bos(m) && vq_token_bos(m) >= 0;
    int n_prompt;
    int *prompt;
    if (chat) {   /* the template's markers are special tokens; the prompt's text is plain text */
        vq_chat_message msgs[2] = { { "system", system }, { "user", text } };
        const vq_chat_message *ms = system ? msgs : msgs + 1;
        int nm = system ? 2 : 1, defsys = !system;
        n_prompt = vq_chat_tokenize(m, ms, nm, 1, defsys, add_bos, 0, NULL, 0, &err);
        if (n_prompt < 0) die("%s", err.msg);
        prompt = malloc(((size_t)n_prompt + 1) * sizeof *prompt);
        if (!prompt) die("out of memory");
        if (vq_chat_tokenize(m, ms, nm, 1, defsys, add_bos, 0, prompt, n_prompt, &err) < 0) die("%s", err.msg);
    } else {
        prompt = tokenize_all(m, text, len, add_bos, 0, &n_prompt);
    }
    if (n_prompt >= n_ctx)
        die("the prompt is %d tokens but the context size is %d: raise -c or shorten the prompt", n_prompt, n_ctx);
    vq_session_params sprm = vq_session_default_params();
    sprm.n_ctx = n_ctx;
    sprm.n_batch = o.batch;
    sprm.kv_seed = 0x5eed;
    sprm.allow_ctx_over_train = 1;
    vq_session *ses = vq_session_create(m, spec, &sprm, &err);
    if (!ses) die("%s", err.msg);
    vq_sampler_params smp_p = { (float)temp, top_k, (float)top_p, (float)min_p, o.seed };
    vq_sampler *smp = vq_sampler_create(&smp_p, vq_model_n_vocab(m), &err);
    if (!smp) die("%s", err.msg);
    vq_generate_params gp = vq_generate_default_params();
    gp.n_predict = n_predict;
    vq_generate_result gr;
    gen_out go = { o.json, 0 };
    if (!o.json && !chat && write_stdout(text, len))   /* echo the prompt as llama.cpp does */
        die("writing the output failed: %s", strerror(errno));
    vq_status s;
    if (n_predict > 0) s = vq_session_generate(ses, prompt, n_prompt, smp, &gp, on_text, &go, &gr, &err);
    else {   /* prefill only */
        double t0 = vq_clock_s();
        s = vq_session_decode(ses, prompt, n_prompt, NULL, 0, &err);
        gr = (vq_generate_result){ .n_prompt = n_prompt, .t_prefill_s = vq_clock_s() - t0, .stop = VQ_STOP_LENGTH };
    }
    if (go.write_errno) die("writing the output failed: %s", strerror(go.write_errno));
    if (s) die("%s", err.msg);
    size_t kv_bytes = vq_session_kv_bytes(ses);
    double kv_bits = vq_session_kv_bits(ses);
    vq_sampler_free(smp);
    vq_session_free(ses);
    vq_kv_spec_free(spec);
    if (!o.json && write_stdout("\n", 1)) die("writing the output failed: %s", strerror(errno));
    /* decode tok/s counts the tokens after the first (the first comes from the prefill's logits);
     * with none decoded it is 0, not a ratio of nothing */
    int n_dec = gr.n_gen > 1 ? gr.n_gen - 1 : 0;
    double pre_tps = gr.n_prompt > 0 && gr.t_prefill_s > 0 ? gr.n_prompt / gr.t_prefill_s : 0;
    double dec_tps = n_dec > 0 && gr.t_decode_s > 0 ? n_dec / gr.t_decode_s : 0;
    if (o.json) {
        json j;
        json_init(&j, stdout);
        json_obj(&j);
        json_kint(&j, "prompt_tokens", gr.n_prompt);
        json_kint(&j, "generated_tokens", gr.n_gen);
        json_knum(&j, "prefill_tps", "%.2f", pre_tps);
        json_knum(&j, "decode_tps", "%.2f", dec_tps);
        json_kstr(&j, "kv", o.kv);
        json_kstr(&j, "device", vq_model_device(m));
        json_kuint(&j, "kv_bytes", kv_bytes);
        json_knum(&j, "kv_bits_per_elem", "%.3f", kv_bits);
        json_kbool(&j, "stopped_eog", gr.stop == VQ_STOP_EOG);
        json_obj_end(&j);
        if (json_end(&j)) die("writing the output failed: %s", strerror(errno ? errno : EIO));
    } else if (verbose) {
        fprintf(stderr, "prompt %d tokens, %.1f tok/s | generated %d tokens, %.1f tok/s | kv %s: %zu bytes, %.3f bits/elem | device %s | threads %d, %s\n",
                gr.n_prompt, pre_tps, gr.n_gen, dec_tps, o.kv, kv_bytes, kv_bits, vq_model_device(m), vq_max_threads(),
                vq_kernels_isa_name());
    }
    free(prompt);
    free(text);
    vq_model_free(m);
    finish_stdout();
    return 0;
}
