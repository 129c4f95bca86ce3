/* chat.c: a multi-turn chat on ONE session, as a chat program should drive libveloxquant. Each
 * turn renders only the new user message with the model's chat template and feeds only its
 * tokens: the earlier turns, the assistant's replies included, are already in the session's KV
 * cache (vq_session_generate leaves every generated token there), so nothing is prefilled twice
 * and a turn costs its own length, not the conversation's. It includes only the public header:
 *   cc -o chat chat.c $(pkg-config --cflags --libs veloxquant)
 *   ./chat -m models/SmolLM2-135M-Instruct.Q4_1.gguf -p "Name a fruit." -p "And its colour?"
 * Without -p it reads one user message per line from stdin. The replies go to stdout; per turn a
 * line on stderr says how many tokens were prefilled and how many the session held before:
 *   turn 2: prefilled 14 tokens (new text 14 tokens), session held 57 before, 81 after, ... */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <veloxquant.h>

#define MAX_TURNS 64

static const char usage[] =
    "usage: chat -m MODEL [options]\n"
    "A multi-turn chat on one session with libveloxquant (the model needs a chat template).\n"
    "  -m, --model FILE     GGUF file with a chat template (required)\n"
    "  --tokenizer FILE     tokenizer .bin (llama2.c checkpoints only)\n"
    "  -p, --prompt TEXT    one user turn; repeat for more turns (default: one per stdin line)\n"
    "  -n, --n-predict N    most tokens per reply, 1..1048576 (default 128)\n"
    "  -c, --ctx-size N     context in tokens, for the whole conversation (default 2048)\n"
    "  --kv SPEC            KV cache spec (default f16)\n"
    "  --system TEXT        system prompt (default: the template's own, if any)\n"
    "  --temp T             sampling temperature, 0 = greedy (default 0)\n"
    "  -s, --seed N         sampler seed (default 0)\n"
    "  -h, --help           this text\n";

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("chat: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static const char *value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) die("%s needs a value (see chat --help)", argv[*i]);
    return argv[++*i];
}

static long parse_long(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        die("%s needs a whole number in %ld..%ld, got '%s'", flag, lo, hi, v);
    return x;
}

static int print_text(const char *bytes, size_t n, void *user) {
    (void)user;
    fwrite(bytes, 1, n, stdout);
    fflush(stdout);
    return 0;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *r = malloc(n);
    if (!r) die("out of memory");
    return memcpy(r, s, n);
}

/* The text the template puts after an assistant message's content, e.g. "<|im_end|>\n" for
 * ChatML: rendered once around a marker, so the program needs no knowledge of the template. */
static char *assistant_close(const vq_model *m) {
    static const char mark[] = "\x01vq-reply\x01";
    vq_chat_message msg = { "assistant", mark };
    vq_err err;
    char *t = vq_chat_apply(m, &msg, 1, 0, 0, &err);
    if (!t) die("%s", err.msg);
    char *p = strstr(t, mark);
    if (!p) die("the chat template dropped the assistant's text");
    char *close = dup_str(p + strlen(mark));
    vq_free(t);
    return close;
}

/* Tokens of text, malloc'd; *n gets the count. add_bos -1: as the model file asks. */
static int *tokenize(const vq_model *m, const char *text, int add_bos, int *n) {
    vq_err err;
    size_t len = strlen(text);
    int need = vq_tokenize(m, text, len, add_bos, 1, NULL, 0, &err);
    if (need < 0) die("%s", err.msg);
    int *ids = malloc((size_t)(need > 0 ? need : 1) * sizeof *ids);
    if (!ids) die("out of memory");
    if (vq_tokenize(m, text, len, add_bos, 1, ids, need, &err) != need) die("%s", err.msg);
    *n = need;
    return ids;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL, *kv = "f16", *system = NULL;
    const char *turns[MAX_TURNS];
    int n_turns = 0, n_predict = 128, n_ctx = 2048;
    double temp = 0;
    unsigned long long seed = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage, stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = value(argc, argv, &i);
        else if (!strcmp(a, "--tokenizer")) tok_path = value(argc, argv, &i);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (n_turns == MAX_TURNS) die("at most %d turns with -p", MAX_TURNS);
            turns[n_turns++] = value(argc, argv, &i);
        }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
            n_predict = (int)parse_long(a, value(argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
            n_ctx = (int)parse_long(a, value(argc, argv, &i), 2, 1 << 24);
        else if (!strcmp(a, "--kv")) kv = value(argc, argv, &i);
        else if (!strcmp(a, "--system")) system = value(argc, argv, &i);
        else if (!strcmp(a, "--temp")) {
            const char *v = value(argc, argv, &i);
            char *end;
            temp = strtod(v, &end);
            if (!*v || *end || !(temp >= 0 && temp <= 100))
                die("--temp needs a number in 0..100, got '%s'", v);
        }
        else if (!strcmp(a, "-s") || !strcmp(a, "--seed"))
            seed = (unsigned long long)parse_long(a, value(argc, argv, &i), 0, 0x7fffffffL);
        else die("unknown option '%s' (see chat --help)", a);
    }
    if (!model_path) die("no model: give -m FILE (see chat --help)");

    vq_err err;
    vq_model_params mp = vq_model_default_params();
    mp.tokenizer_path = tok_path;
    vq_model *m = vq_model_load(model_path, &mp, &err);
    if (!m) die("%s", err.msg);
    if (!vq_model_chat_template(m)) die("%s has no chat template (chat needs one)", model_path);
    char *close = assistant_close(m);

    vq_kv_spec *spec = vq_kv_spec_parse(kv, &err);
    if (!spec) die("--kv: %s", err.msg);
    vq_session_params sp = vq_session_default_params();
    sp.n_ctx = n_ctx;
    vq_session *s = vq_session_create(m, spec, &sp, &err);
    vq_kv_spec_free(spec);
    if (!s) die("%s", err.msg);
    vq_sampler_params smp_p = vq_sampler_default_params();
    smp_p.temp = (float)temp;
    smp_p.seed = seed;
    vq_sampler *smp = vq_sampler_create(&smp_p, vq_model_n_vocab(m), &err);
    if (!smp) die("%s", err.msg);
    vq_generate_params gp = vq_generate_default_params();
    gp.n_predict = n_predict;

    vq_stop_reason last_stop = VQ_STOP_NONE;
    char line[8192];
    for (int turn = 1;; turn++) {
        const char *user;
        if (n_turns > 0) {
            if (turn > n_turns) break;
            user = turns[turn - 1];
        } else {
            if (!fgets(line, sizeof line, stdin)) break;
            line[strcspn(line, "\r\n")] = 0;
            if (!line[0]) { turn--; continue; }
            user = line;
        }

        /* The new text: the close of the previous reply, then the user message and the assistant
         * header. A reply that ended with the model's end-of-turn token already holds that token
         * (and it is where the close begins); a reply cut short gets the whole close. */
        vq_chat_message msgs[2];
        int n_msgs = 0;
        if (turn == 1 && system) msgs[n_msgs++] = (vq_chat_message){ "system", system };
        msgs[n_msgs++] = (vq_chat_message){ "user", user };
        const char *c = "";
        if (turn > 1) {
            c = close;
            int pos = vq_session_pos(s);
            char eog[64];
            size_t ne = 0;
            if (last_stop == VQ_STOP_EOG && pos > 0)
                ne = vq_token_piece(m, -1, vq_session_tokens(s)[pos - 1], 1, eog, sizeof eog);
            if (ne > 0 && ne < sizeof eog && !strncmp(c, eog, ne)) c += ne;
        }
        /* the close is the template's text (special tokens on); the messages go through
         * vq_chat_tokenize, so special-token text a user types stays plain text */
        int n_close, n_msg;
        int *close_ids = tokenize(m, c, 0, &n_close);
        n_msg = vq_chat_tokenize(m, msgs, n_msgs, 1, turn == 1, turn == 1 ? -1 : 0, 0, NULL, 0, &err);
        if (n_msg < 0) die("%s", err.msg);
        int n_new = n_close + n_msg;
        int *ids = malloc((size_t)(n_new > 0 ? n_new : 1) * sizeof *ids);
        if (!ids) die("out of memory");
        memcpy(ids, close_ids, (size_t)n_close * sizeof *ids);
        if (vq_chat_tokenize(m, msgs, n_msgs, 1, turn == 1, turn == 1 ? -1 : 0, 0, ids + n_close, n_msg, &err) != n_msg)
            die("%s", err.msg);
        free(close_ids);

        int held = vq_session_pos(s);
        printf("> %s\n", user);
        fflush(stdout);
        vq_generate_result res;
        vq_status st = vq_session_generate(s, ids, n_new, smp, &gp, print_text, NULL, &res, &err);
        putchar('\n');
        fflush(stdout);
        if (st) die("turn %d: %s", turn, err.msg);
        fprintf(stderr, "turn %d: prefilled %d tokens (new text %d tokens), session held %d before, "
                "%d after, generated %d (stop: %s)\n", turn, res.n_prompt, n_new, held,
                vq_session_pos(s), res.n_gen, vq_stop_reason_name(res.stop));
        last_stop = res.stop;
        free(ids);
    }

    free(close);
    vq_sampler_free(smp);
    vq_session_free(s);
    vq_model_free(m);
    return 0;
}
