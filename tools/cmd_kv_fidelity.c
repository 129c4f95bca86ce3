/* cmd_kv_fidelity.c: `veloxquant kv-fidelity`: per-layer key/value cosine, attention KL and
 * output error of KV codecs on a real model's rows (captured once with an f32 cache). */
#ifndef VQ_EXPERIMENTAL   /* the build may define it for every file */
#define VQ_EXPERIMENTAL
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "json.h"

static const char *kv_fidelity_help =
    "usage: veloxquant kv-fidelity -m FILE -f TEXT --kv SPEC... [options]\n"
    "Runs the model over the first N tokens with an f32 cache, capturing every layer's q, k, v after\n"
    "RoPE; then, per KV spec, feeds those rows to a cache of that spec (layer by layer) and reports\n"
    "key cosine, attention-weight KL vs exact, attention-output relative error and bits per element.\n"
    "  -m, --model FILE   model (default " DEFAULT_MODEL ")\n"
    "      --tokenizer F  tokenizer for llama2.c checkpoints\n"
    "  -f, --file TEXT    text file (default " DEFAULT_TEXT ")\n"
    "      --kv SPEC      a spec to measure (repeatable; default: every codec)\n"
    "      --tokens N     tokens (default 512)\n"
    "      --per-layer    print every layer\n"
    "  -t, --threads N    threads\n"
    "  -s, --seed N       cache seed\n"
    "      --json         every layer of every spec as JSON\n";

#define MAX_SPECS 64

static void jstats(json *j, const char *k, const vq_kv_fidelity_stats *s, int layer) {
    if (k) json_key(j, k);
    json_obj(j);
    if (layer >= 0) json_kint(j, "layer", layer);
    json_knum(j, "key_cos", "%.8f", s->key_cos);
    json_knum(j, "val_cos", "%.8f", s->val_cos);
    json_knum(j, "kl", "%.8g", s->kl);
    json_knum(j, "rel_err", "%.8g", s->rel_err);
    json_obj_end(j);
}

int cmd_kv_fidelity(int argc, char **argv) {
    opts o;
    opts_init(&o, argv[1]);
    o.file = DEFAULT_TEXT;
    int n_tokens = 512, per_layer = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (common_opt(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(kv_fidelity_help, stdout); finish_stdout(); return 0; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) die("%s needs a file", a); o.file = v; i++; }
        else if (!strcmp(a, "--tokens")) { n_tokens = (int)parse_long(a, v, 2, 1 << 16); i++; }
        else if (!strcmp(a, "--per-layer")) per_layer = 1;
        else die("kv-fidelity: unknown option '%s' (see veloxquant kv-fidelity --help)", a);
    }
    /* the arms (given, or the defaults), every one parsed before the model runs */
    char defs[MAX_SPECS][96];
    const char *names[MAX_SPECS];
    int n_specs = o.n_kv;
    if (n_specs == 0) {
        n_specs = vq_kv_fidelity_default_specs(defs, MAX_SPECS);
        for (int i = 0; i < n_specs; i++) names[i] = defs[i];
    } else {
        for (int i = 0; i < n_specs; i++) names[i] = o.kv_list[i];
    }
    vq_kv_spec *specs[MAX_SPECS];
    vq_err err;
    for (int i = 0; i < n_specs; i++)
        if (!(specs[i] = vq_kv_spec_parse(names[i], &err))) die("%s", err.msg);
    vq_model *m = load_model(&o);
    size_t len = 0;
    char *text = read_text(o.file, "text file", &len);
    int n_tok;
    int *tok = tokenize_all(m, text, len, vq_token_add_bos(m), 0, &n_tok);
    free(text);
    if (n_tok < n_tokens) die("kv-fidelity: %s has %d tokens, --tokens asks for %d", o.file, n_tok, n_tokens);
    vq_kvfid_capture *cap = vq_kv_fidelity_capture(m, tok, n_tokens, &err);
    if (!cap) die("%s", err.msg);
    uint64_t seed = o.seed ? o.seed : 1;
    vq_model_info mi = vq_model_get_info(m);
    json j;
    json_init(&j, stdout);
    if (o.json) {
        json_obj(&j);
        json_kstr(&j, "model", vq_model_path(m));
        json_kint(&j, "tokens", n_tokens);
        json_kint(&j, "layers", mi.n_layers);
        json_kint(&j, "heads", mi.n_heads);
        json_kint(&j, "kv_heads", mi.n_kv_heads);
        json_kint(&j, "head_dim", mi.head_dim);
        json_kuint(&j, "seed", seed);
        json_key(&j, "specs");
        json_arr(&j);
    } else {
        printf("model %s, %d tokens, %d layers, %d q heads / %d kv heads, head_dim %d\n"
               "key cos: mean cos(k_hat, k) over rows and KV heads (stored state after all rows);\n"
               "KL: mean over query positions and heads of KL(softmax(qk/sqrt d) || softmax(q k_hat/sqrt d)), causal, nats;\n"
               "rel err: mean |o - o_hat| / |o|, o_hat from vq_kv_attend (decode order) vs the f32 cache. "
               "(worst layer in parentheses)\n"
               "bits: vq_kv_bits_per_elem of a 1-layer cache of these rows (fixed costs, window, unfilled page count); "
               "code: the codecs' block bytes only\n",
               vq_model_path(m), n_tokens, mi.n_layers, mi.n_heads, mi.n_kv_heads, mi.head_dim);
        printf("%-28s %6s %6s | %-18s | %-18s | %-20s | %-18s\n", "kv", "bits", "code", "key cos (worst L)",
               "val cos (worst L)", "KL (worst L)", "rel err (worst L)");
    }
    for (int i = 0; i < n_specs; i++) {
        vq_kv_fidelity_result r;
        if (vq_kv_fidelity_eval(cap, specs[i], seed, &r, &err)) die("%s: %s", names[i], err.msg);
        if (o.json) {
            json_newline(&j);
            json_obj(&j);
            json_kstr(&j, "kv", names[i]);
            json_kbool(&j, "ok", r.ok);
            if (!r.ok) json_kstr(&j, "why", r.why);
            else {
                json_kstr(&j, "normalized", r.normalized);
                json_knum(&j, "bits_per_elem", "%.4f", r.bits);
                json_knum(&j, "code_bits", "%.4f", r.code_bits);
                json_kuint(&j, "bytes", r.bytes);
                jstats(&j, "mean", &r.mean, -1);
                json_key(&j, "layers");
                json_arr(&j);
                for (int l = 0; l < r.n_layers; l++) jstats(&j, NULL, &r.layer[l], l);
                json_arr_end(&j);
            }
            json_obj_end(&j);
        } else if (!r.ok) {
            printf("%-28s unsupported: %.100s\n", names[i], r.why);
        } else {
            printf("%-28s %6.2f %6.2f | %.5f (%.5f L%-2d) | %.5f (%.5f L%-2d) | %.2e (%.2e L%-2d) | %.4f (%.4f L%-2d)\n", names[i], r.bits, r.code_bits,
                   r.mean.key_cos, r.worst.key_cos, r.worst_layer[0], r.mean.val_cos, r.worst.val_cos, r.worst_layer[1],
                   r.mean.kl, r.worst.kl, r.worst_layer[2], r.mean.rel_err, r.worst.rel_err, r.worst_layer[3]);
            for (int l = 0; per_layer && l < r.n_layers; l++)
                printf("    layer %-2d %23s | %.5f            | %.5f            | %.2e             | %.4f\n", l, "",
                       r.layer[l].key_cos, r.layer[l].val_cos, r.layer[l].kl, r.layer[l].rel_err);
        }
        if (fflush(stdout)) die("writing the output failed: %s", strerror(errno));
        vq_kv_fidelity_result_free(&r);
    }
    if (o.json) {
        json_arr_end(&j);
        json_obj_end(&j);
        if (json_end(&j)) die("writing the output failed: %s", strerror(errno ? errno : EIO));
    }
    vq_kv_fidelity_capture_free(cap);
    for (int i = 0; i < n_specs; i++) vq_kv_spec_free(specs[i]);
    free(tok);
    vq_model_free(m);
    finish_stdout();
    return 0;
}
