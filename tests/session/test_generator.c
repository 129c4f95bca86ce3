/* test_generator.c: the step-by-step generator (vq_generator_*) on stories260K. Tokens chosen by
 * the test (vq_generator_take) check the text rules exactly: a stop string split across tokens is
 * held back and never printed, the bytes of a UTF-8 character cut between tokens are held back
 * until it is whole, a length or end-of-generation stop hands out what was held, a full context
 * stops; then the sampler's steps equal vq_session_generate, and a batched step equals single
 * steps. */
#include "../vq_test.h"
#include "veloxquant.h"

static vq_model *M;

static vq_session *new_session(int n_ctx) {
    vq_err err;
    vq_kv_spec *spec = vq_kv_spec_parse("f16", &err);
    vq_session_params sp = vq_session_default_params();
    sp.n_ctx = n_ctx;
    vq_session *s = vq_session_create(M, spec, &sp, &err);
    CHECKF(s != NULL, "%s", err.msg);
    vq_kv_spec_free(spec);
    return s;
}

/* add_bos 0: an answer's tokens; its leading space is the tokenizer's own (sentencepiece) */
static int tokenize(const char *text, int add_bos, int *out, int cap) {
    vq_err err;
    if (!add_bos && text[0] == ' ') text++;
    int n = vq_tokenize(M, text, strlen(text), add_bos, 0, out, cap, &err);
    CHECKF(n > 0 && n <= cap, "tokenize '%s': %d %s", text, n, err.msg);
    return n;
}

typedef struct run {
    char text[4096];
    size_t len;
    int n_steps, n_tok;
    vq_stop_reason stop;
    int held_cut_utf8;     /* a step's text ended inside a UTF-8 character */
    int printed_at_step[64];
} run;

static int utf8_cut_at_end(const char *t, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned c = (unsigned char)t[n - k];
        if ((c & 0xC0) == 0x80) continue;
        size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return len > k;
    }
    return 0;
}

static void add(run *r, const vq_gen_step *o) {
    if (o->n_text && r->len + o->n_text < sizeof r->text) {
        memcpy(r->text + r->len, o->text, o->n_text);
        r->len += o->n_text;
        r->text[r->len] = 0;
        if (!o->stop && utf8_cut_at_end(o->text, o->n_text)) r->held_cut_utf8 = 1;
    }
    if (r->n_steps < 64) r->printed_at_step[r->n_steps] = (int)r->len;
    r->n_steps++;
    r->n_tok += o->token >= 0;
    r->stop = o->stop;
}

/* Decode prompt, then take the tokens ids[0..n) one by one (each run before the next is taken)
 * until the generator stops. */
static run take_all(const char *prompt, const int *ids, int n, const vq_generate_params *gp, int n_ctx) {
    run r = { .stop = VQ_STOP_NONE };
    vq_err err;
    vq_session *s = new_session(n_ctx);
    int pt[64];
    int np = tokenize(prompt, 1, pt, 64);
    CHECKF(vq_session_decode(s, pt, np, NULL, 0, &err) == VQ_OK, "%s", err.msg);
    vq_generator *g = vq_generator_create(s, NULL, gp, &err);
    CHECKF(g != NULL, "%s", err.msg);
    float *lg = malloc((size_t)vq_model_n_vocab(M) * sizeof(float));
    for (int i = 0; i < n && r.stop == VQ_STOP_NONE; i++) {
        if (i > 0) CHECKF(vq_session_decode(s, NULL, 0, lg, 0, &err) == VQ_OK, "%s", err.msg);
        vq_gen_step o;
        CHECKF(vq_generator_take(g, ids[i], &o, &err) == VQ_OK, "take %d: %s", i, err.msg);
        CHECK(o.token == ids[i] || o.stop == VQ_STOP_CONTEXT);
        add(&r, &o);
    }
    if (r.stop != VQ_STOP_NONE) {   /* a stopped generator refuses more */
        vq_gen_step o;
        CHECK(vq_generator_take(g, ids[0], &o, &err) == VQ_ERR_ARG && o.stop == VQ_STOP_NONE);
    }
    free(lg);
    vq_generator_free(g);
    vq_session_free(s);
    return r;
}

/* The text of ids[0..k) as generation prints it after the prompt "Once upon a time,". */
static size_t spell(const int *ids, int k, char *buf, size_t cap) {
    int pt[64];
    int np = tokenize("Once upon a time,", 1, pt, 64);
    size_t l = 0;
    for (int i = 0, prev = pt[np - 1]; i < k; prev = ids[i++])
        l += vq_token_piece(M, prev, ids[i], 0, buf + l, cap - l);
    buf[l] = 0;
    return l;
}

static void test_stop_strings(void) {
    const char *answer = " there was a little girl named Lily. She loved to play";
    int ids[64];
    int n = tokenize(answer, 0, ids, 64);
    vq_generate_params gp = vq_generate_default_params();
    gp.n_predict = 0;
    /* no stop string: everything, as the tokens spell it */
    run r = take_all("Once upon a time,", ids, n, &gp, 128);
    CHECKF(!strcmp(r.text, answer), "'%s'", r.text);
    CHECK(r.stop == VQ_STOP_CONTEXT || r.stop == VQ_STOP_NONE);
    /* a stop string that spans tokens: text up to it, nothing of it, ever */
    const char *stops[] = { "zebra", "tle girl na" };
    gp.stop = stops;
    gp.n_stop = 2;
    r = take_all("Once upon a time,", ids, n, &gp, 128);
    CHECKF(!strcmp(r.text, " there was a lit"), "'%s'", r.text);
    CHECK(r.stop == VQ_STOP_STRING);
    CHECK(!strstr(r.text, "tle"));
    /* held back while it could still begin the stop string: the step before the stop had printed
     * only what the stop step then completed */
    char sofar[256];
    size_t made = spell(ids, r.n_steps - 1, sofar, sizeof sofar);
    CHECKF(r.n_steps > 1 && r.printed_at_step[r.n_steps - 2] <= 16 && made > 16, "printed %d of %zu bytes before the stop",
           r.printed_at_step[r.n_steps - 2], made);
    /* a stop string that never completes is handed out at the length stop */
    const char *st2[] = { "Lily. She hated" };
    gp.stop = st2;
    gp.n_stop = 1;
    gp.n_predict = n;
    r = take_all("Once upon a time,", ids, n, &gp, 128);
    CHECKF(!strcmp(r.text, answer), "'%s'", r.text);
    CHECK(r.stop == VQ_STOP_LENGTH && r.n_tok == n);
    /* length: n_predict tokens, then stop; the held-back tail comes out */
    const char *st3[] = { "girl X" };
    gp.stop = st3;
    gp.n_predict = 5;   /* " there was a little girl" ends in a prefix of the stop string */
    char want[256];
    size_t wl = spell(ids, 5, want, sizeof want);
    r = take_all("Once upon a time,", ids, n, &gp, 128);
    CHECK(r.stop == VQ_STOP_LENGTH && r.n_tok == 5);
    CHECKF(r.len == wl && !memcmp(r.text, want, wl), "'%s' != '%.*s'", r.text, (int)wl, want);
}

static void test_eog_and_context(void) {
    const char *answer = " there was a little girl";
    int ids[64];
    int n = tokenize(answer, 0, ids, 63);
    int eos = vq_token_eos(M);
    CHECK(eos >= 0 && vq_token_is_eog(M, eos));
    ids[n] = eos;
    vq_generate_params gp = vq_generate_default_params();
    gp.n_predict = 0;
    const char *stops[] = { "girl!" };   /* holds "girl" back until the end */
    gp.stop = stops;
    gp.n_stop = 1;
    run r = take_all("Once upon a time,", ids, n + 1, &gp, 128);
    CHECK(r.stop == VQ_STOP_EOG && r.n_tok == n + 1);
    CHECKF(!strcmp(r.text, answer), "'%s'", r.text);   /* the end token prints nothing */
    /* show_special: the end token's text is printed before the stop */
    gp.show_special = 1;
    gp.n_stop = 0;
    r = take_all("Once upon a time,", ids, n + 1, &gp, 128);
    CHECK(r.stop == VQ_STOP_EOG && r.n_tok == n + 1);
    CHECK(!strncmp(r.text, answer, strlen(answer)));
    /* context: a session of 8 positions holds 6 prompt tokens and 2 generated */
    gp = vq_generate_default_params();
    gp.n_predict = 0;
    int pt[64];
    int np = tokenize("Once upon a time,", 1, pt, 64);
    r = take_all("Once upon a time,", ids, n, &gp, np + 2);
    CHECKF(r.stop == VQ_STOP_CONTEXT && r.n_tok == 2, "stop %s after %d tokens", vq_stop_reason_name(r.stop), r.n_tok);
}

/* A character of two or more bytes whose bytes come from different tokens. */
static void test_utf8(void) {
    static const char *cands[] = { "\xc3\xa9", "\xe2\x80\x94", "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x98\x80" };
    int done = 0;
    for (size_t c = 0; c < sizeof cands / sizeof *cands && !done; c++) {
        char answer[64];
        snprintf(answer, sizeof answer, " a%s b", cands[c]);
        int ids[64];
        int n = tokenize(answer, 0, ids, 64);
        /* only when the character is cut between tokens */
        int cut = 0;
        char buf[64];
        for (int k = 1; k < n; k++) {
            size_t l = spell(ids, k, buf, sizeof buf);
            if (utf8_cut_at_end(buf, l)) cut = 1;
        }
        if (!cut) continue;
        done = 1;
        vq_generate_params gp = vq_generate_default_params();
        gp.n_predict = 0;
        run r = take_all("Once upon a time,", ids, n, &gp, 128);
        CHECKF(!strcmp(r.text, answer), "'%s' != '%s'", r.text, answer);
        CHECKF(!r.held_cut_utf8, "a step handed out part of a character (%s)", answer);
        /* the length stop hands out a cut character as it is */
        for (int k = 1; k < n; k++) {
            size_t l = spell(ids, k, buf, sizeof buf);
            if (!utf8_cut_at_end(buf, l)) continue;
            gp.n_predict = k;
            r = take_all("Once upon a time,", ids, n, &gp, 128);
            CHECK(r.stop == VQ_STOP_LENGTH && r.len == l && !memcmp(r.text, buf, l));
            break;
        }
    }
    CHECKF(done, "no candidate character is cut between stories260K's tokens");
}

static int collect(const char *b, size_t n, void *u) {
    run *r = u;
    if (r->len + n < sizeof r->text) { memcpy(r->text + r->len, b, n); r->len += n; r->text[r->len] = 0; }
    return 0;
}

/* The sampler's steps are vq_session_generate's loop; batched steps equal single steps. */
static void test_steps_equal_generate(void) {
    vq_err err;
    int pt[64];
    int np = tokenize("Once upon a time", 1, pt, 64);
    vq_sampler_params spp = vq_sampler_default_params();
    spp.temp = 0;
    vq_sampler *smp = vq_sampler_create(&spp, vq_model_n_vocab(M), &err);
    const char *stops[] = { "park." };
    vq_generate_params gp = vq_generate_default_params();
    gp.n_predict = 120;
    gp.stop = stops;
    gp.n_stop = 1;
    run a = { 0 };
    vq_generate_result res;
    vq_session *s1 = new_session(256);
    CHECK(vq_session_generate(s1, pt, np, smp, &gp, collect, &a, &res, &err) == VQ_OK);
    /* the same by steps, two generators stepped in one batch (one with another prompt) */
    vq_session *s2 = new_session(256), *s3 = new_session(256);
    int qt[64];
    int nq = tokenize("Lily and Ben", 1, qt, 64);
    CHECK(vq_session_decode(s2, pt, np, NULL, 0, &err) == VQ_OK);
    CHECK(vq_session_decode(s3, qt, nq, NULL, 0, &err) == VQ_OK);
    vq_sampler *smp3 = vq_sampler_create(&spp, vq_model_n_vocab(M), &err);
    vq_generator *g[2] = { vq_generator_create(s2, smp, &gp, &err), vq_generator_create(s3, smp3, &gp, &err) };
    run b = { .stop = VQ_STOP_NONE }, c = { .stop = VQ_STOP_NONE };
    float *lg = malloc(2 * (size_t)vq_model_n_vocab(M) * sizeof(float));
    vq_gen_step o[2];
    CHECK(vq_generator_step(g[0], &o[0], &err) == VQ_OK && vq_generator_step(g[1], &o[1], &err) == VQ_OK);
    add(&b, &o[0]);
    add(&c, &o[1]);
    while (b.stop == VQ_STOP_NONE && c.stop == VQ_STOP_NONE) {
        CHECKF(vq_generator_step_batch(g, 2, lg, o, &err) == VQ_OK, "%s", err.msg);
        add(&b, &o[0]);
        add(&c, &o[1]);
    }
    while (b.stop == VQ_STOP_NONE) {
        CHECK(vq_generator_step(g[0], &o[0], &err) == VQ_OK);
        add(&b, &o[0]);
    }
    CHECKF(a.len == b.len && !memcmp(a.text, b.text, a.len), "generate '%s'\n steps '%s'", a.text, b.text);
    CHECKF(res.stop == b.stop && res.n_gen == b.n_tok, "%s %d / %s %d", vq_stop_reason_name(res.stop), res.n_gen,
           vq_stop_reason_name(b.stop), b.n_tok);
    CHECK(vq_session_pos(s1) == vq_session_pos(s2));
    /* the other generator's text equals its own generate */
    run d = { 0 };
    vq_session *s4 = new_session(256);
    gp.n_predict = c.n_tok;
    CHECK(vq_session_generate(s4, qt, nq, smp3, &gp, collect, &d, &res, &err) == VQ_OK);
    CHECKF(d.len == c.len && !memcmp(d.text, c.text, d.len), "generate '%s'\n batch '%s'", d.text, c.text);
    /* errors: two generators on one session, a stopped generator, an empty stop string */
    vq_generator *g2 = vq_generator_create(s2, smp, NULL, &err);
    vq_generator *same[2] = { g2, g2 };
    CHECK(vq_generator_step_batch(same, 2, NULL, o, &err) == VQ_ERR_ARG);
    CHECK(vq_generator_step(g[0], &o[0], &err) == VQ_ERR_ARG && strstr(err.msg, "stopped"));
    const char *empty[] = { "" };
    gp.stop = empty;
    CHECK(vq_generator_create(s2, smp, &gp, &err) == NULL && err.code == VQ_ERR_ARG);
    CHECK(vq_generator_take(g2, -1, &o[0], &err) == VQ_ERR_ARG);
    vq_generator_free(g2);
    vq_generator_free(g[0]);
    vq_generator_free(g[1]);
    vq_generator_free(NULL);
    free(lg);
    vq_sampler_free(smp);
    vq_sampler_free(smp3);
    vq_session_free(s1);
    vq_session_free(s2);
    vq_session_free(s3);
    vq_session_free(s4);
}

int main(void) {
    char mp[1024], tp[1024];
    vq_t_shared("data/stories260K.bin", mp, sizeof mp);
    vq_t_shared("data/tok512.bin", tp, sizeof tp);
    vq_err err;
    vq_model_params mpar = vq_model_default_params();
    mpar.tokenizer_path = tp;
    M = vq_model_load(mp, &mpar, &err);
    CHECKF(M != NULL, "%s", err.msg);
    if (!M) return vq_t_done();
    test_stop_strings();
    test_eog_and_context();
    test_utf8();
    test_steps_equal_generate();
    vq_model_free(M);
    return vq_t_done();
}
