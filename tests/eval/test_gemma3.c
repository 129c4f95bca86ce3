/* test_gemma3.c: Gemma 3 270M (Q4_K_M, models/gemma-3-270m-q4_k_m.gguf from scripts/fetch_gemma.sh)
 * against an independent numpy float64 forward pass (tests/fixtures/gemma3_logits.txt, made by
 * tools/reference/gemma3_numpy.py; tests/fixtures/README.md says how). The fixture's 'window' case
 * is 700 WikiText-2 tokens: positions 512 and 699 depend on the sliding-window layers seeing only
 * the last 512 tokens. Also: the architecture read from the file, the tokenizer against the
 * fixture's ids (a SentencePiece BPE written independently in the numpy script), the chat turns,
 * and every KV codec running at head_dim 256 with one KV head. The logits are checked twice: through
 * an f32 cache, and through one of 64-row pages whose sliding-window rings free rows mid-case. */
#include "logits_fixture.h"

/* Same tolerances as SmolLM2's (test_smollm2.c): our matmuls quantize activations to int8 per block
 * of 32, as llama.cpp does, so logits agree with float64 to a tolerance, not bit for bit. */
#define LOGIT_TOL 0.80
#define LOGIT_MEAN_TOL 0.15
#define GREEDY_MARGIN 0.5

static const char *const PROMPTS[3] = {
    "The capital of France is",
    "In 1905, Albert Einstein published four groundbreaking papers that changed our understanding of space, "
    "time, mass and energy, and his explanation of the photoelectric effect later earned him the Nobel Prize in "
    "Physics.",
    "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
};

/* the fixture's first three 'ids' lines are the prompts' ids from the numpy script's tokenizer */
static void check_tokenizer(const vq_model *m, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char *line = malloc(1 << 22);
    int c = 0, ids[512];
    while (c < 3 && fgets(line, 1 << 22, f)) {
        if (strncmp(line, "ids ", 4)) continue;
        char *p = line + 4;
        int n = (int)strtol(p, &p, 10), ok = n > 0 && n <= 512;
        vq_err err;
        int got = vq_tokenize(m, PROMPTS[c], strlen(PROMPTS[c]), -1, 1, ids, 512, &err);
        ok = ok && got == n;
        for (int i = 0; ok && i < n; i++) ok = ids[i] == (int)strtol(p, &p, 10);
        CHECKF(ok, "prompt %d: our tokens differ from the reference's (%d vs %d ids)", c, got, n);
        c++;
    }
    CHECK(c == 3);
    free(line);
    fclose(f);
}

static void check_chat(const vq_model *m) {
    vq_chat_message msgs[4] = { { "system", "Be brief." }, { "user", "Hi" }, { "assistant", "Hello!" },
                                { "user", "Capital of France?" } };
    vq_err err;
    char *s = vq_chat_apply(m, msgs, 4, 1, 1, &err);
    const char *want = "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
                       "<start_of_turn>user\nCapital of France?<end_of_turn>\n<start_of_turn>model\n";
    CHECKF(s && !strcmp(s, want), "chat: got \"%s\"", s ? s : err.msg);
    vq_free(s);
    s = vq_chat_apply(m, msgs + 1, 1, 1, 1, &err);
    CHECKF(s && !strcmp(s, "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"), "chat: got \"%s\"",
           s ? s : err.msg);
    vq_free(s);
    vq_chat_message late[2] = { { "user", "Hi" }, { "system", "x" } };
    s = vq_chat_apply(m, late, 2, 1, 1, &err);
    CHECKF(!s && strstr(err.msg, "system"), "a late system message was accepted");
    vq_free(s);
    /* the end-of-turn token ends generation */
    int eot[4];
    CHECK(vq_tokenize(m, "<end_of_turn>", 13, 0, 1, eot, 4, &err) == 1 && vq_token_is_eog(m, eot[0]));
}

/* every codec at head_dim 256 with one KV head: prefill + 8 decode steps, finite logits; f16 and q8_0
 * pick the f32 cache's greedy tokens (the prompt's continuation has clear margins in the fixture) */
static void check_codecs(const vq_model *m, int sanitized) {
    const char *specs[] = { "f32", "f16", "q8_0", "q4_0", "q4_0:rotate=1", "turboquant_mse:k=4,v=4",
                            "turboquant_mse:k=3,v=3", "turboquant_prod:k=4,v=4", "turboquant_rvq", "kivi", "qjl",
                            "polar", "rabitq", "f16@0,-1=q8_0" };
    int want[9] = { 0 };
    vq_err err;
    int prompt[16];
    int np = vq_tokenize(m, PROMPTS[0], strlen(PROMPTS[0]), -1, 0, prompt, 16, &err);
    CHECK(np > 1 && np <= 16);
    const int V = m->cfg.vocab_size;
    float *lg = malloc(sizeof(float) * (size_t)V);
    /* a sanitizer build runs 4 of them: the f32 baseline, f16, q8_0 and 4-bit turboquant (lanes) */
    for (size_t i = 0; i < VQ_ARRAY_LEN(specs); i++) {
        if (sanitized && i > 2 && i != 5) continue;
        vq_kv_spec *sp = vq_kv_spec_parse(specs[i], &err);
        CHECKF(sp != NULL, "%s: %s", specs[i], err.msg);
        if (!sp) continue;
        vq_session_params p = vq_session_default_params();
        p.n_ctx = 64;
        vq_session *s = vq_session_create(m, sp, &p, &err);
        CHECKF(s != NULL, "%s at head_dim 256: %s", specs[i], err.msg);
        int tok[9], finite = 1;
        vq_status st = s ? vq_session_decode(s, prompt, np, lg, 0, &err) : VQ_ERR_ARG;
        for (int t = 0; !st && t < 9; t++) {
            for (int j = 0; j < V; j++) finite &= isfinite(lg[j]) != 0;
            tok[t] = vq_argmax(lg, V);
            if (t < 8) st = vq_session_decode(s, tok + t, 1, lg, 0, &err);
        }
        CHECKF(!st && finite, "%s: %s", specs[i], st ? err.msg : "non-finite logits");
        if (!st && i == 0) memcpy(want, tok, sizeof want);
        if (!st && (i == 1 || i == 2))
            CHECKF(!memcmp(tok, want, sizeof want), "%s: greedy tokens differ from the f32 cache's", specs[i]);
        printf("kv %-24s %zu bytes after %d tokens, greedy %d %d %d %d ...\n", specs[i], s ? vq_session_kv_bytes(s) : 0,
               np + 8, tok[0], tok[1], tok[2], tok[3]);
        vq_session_free(s);
        vq_kv_spec_free(sp);
    }
    free(lg);
}

/* A session's ring against the reservation a server makes: with batch B, a Gemma session holds no
 * more than vq_kv_spec_bytes_batch(B, rows) after any call, and far less than the rows would take
 * without the ring (the global layers' share); the default-batch bound is vq_kv_spec_bytes_at. */
static void check_ring_reserve(const vq_model *m) {
    const int n_ctx = 1400, B[2] = { 0, 200 };
    vq_err err;
    vq_kv_spec *sp = vq_kv_spec_parse("q8_0", &err);
    CHECKF(sp != NULL, "%s", err.msg);
    int *ids = malloc(sizeof(int) * n_ctx);
    vq_rng r;
    vq_rng_seed(&r, 0x6e3a);
    for (int i = 0; i < n_ctx; i++) ids[i] = 1000 + (int)(vq_rng_u64(&r) % 20000);
    for (int b = 0; b < 2 && sp; b++) {
        vq_session_params p = vq_session_default_params();
        p.n_ctx = n_ctx;
        p.n_batch = B[b];
        vq_session *s = vq_session_create(m, sp, &p, &err);
        CHECKF(s != NULL, "%s", err.msg);
        int ok = 1, at = 0;
        size_t worst_room = (size_t)-1, full = 0;
        while (s && at < 1300) {   /* calls of 1..250 tokens: several prefill chunks, then decode steps */
            int n = at < 1000 ? 1 + (int)(vq_rng_u64(&r) % 250) : 1;
            n = n < 1300 - at ? n : 1300 - at;
            if (vq_session_decode(s, ids + at, n, NULL, 0, &err)) { ok = 0; break; }
            at += n;
            size_t bound, def;
            ok &= vq_kv_spec_bytes_batch(sp, m, n_ctx, B[b], at, &bound, &err) == VQ_OK;
            ok &= vq_kv_spec_bytes_at(sp, m, n_ctx, at, &def, &err) == VQ_OK;
            ok &= B[b] != 0 || def == bound;
            ok &= vq_session_kv_bytes(s) <= bound;
            worst_room = bound - vq_session_kv_bytes(s) < worst_room ? bound - vq_session_kv_bytes(s) : worst_room;
            full = bound;
        }
        CHECKF(ok, "batch %d: the session held more than vq_kv_spec_bytes_batch at %d tokens (%s)", B[b], at, err.msg);
        printf("ring, batch %d: %zu bytes held after %d tokens, bound %zu (tightest slack %zu)\n", B[b],
               s ? vq_session_kv_bytes(s) : 0, at, full, worst_room);
        vq_session_free(s);
    }
    /* the ring shows in the reservation: one more 256-row page per layer costs all 18 layers while
     * rows are few (34 -> 290), only the 3 global layers once the rings are full (1034 -> 1290) */
    size_t b0 = 0, b1 = 0, b2 = 0, b3 = 0;
    CHECK(vq_kv_spec_bytes_at(sp, m, n_ctx, 34, &b0, &err) == VQ_OK && vq_kv_spec_bytes_at(sp, m, n_ctx, 290, &b1, &err) == VQ_OK);
    CHECK(vq_kv_spec_bytes_at(sp, m, n_ctx, 1034, &b2, &err) == VQ_OK && vq_kv_spec_bytes_at(sp, m, n_ctx, 1290, &b3, &err) == VQ_OK);
    CHECKF((b3 - b2) * 6 == b1 - b0, "a page of rows costs %zu bytes early and %zu late (want 1/6 of it: 3 of 18 "
           "layers grow)", b1 - b0, b3 - b2);
    vq_kv_spec_free(sp);
    free(ids);
}

int main(void) {
    char mp[1024], fx[1024];
    vq_t_gemma(mp, sizeof mp);
    vq_err err;
    vq_err_clear(&err);
    vq_model *m = vq_model_open(mp, NULL, &err);
    CHECKF(m != NULL, "load: %s", err.msg);
    if (!m) return vq_t_done();
    const vq_model_config *c = &m->cfg;
    CHECK(!strcmp(c->arch, "gemma3") && c->n_layers == 18 && c->dim == 640 && c->n_heads == 4 && c->n_kv_heads == 1 &&
          c->head_dim == 256 && c->hidden_dim == 2048 && c->vocab_size == 262144 && c->rope_neox == 1 &&
          c->ffn_gelu == 1 && c->swa_window == 512 && c->rope_base == 1e6f && c->rope_base_swa == 1e4f);
    for (int l = 0; l < c->n_layers; l++)   /* every 6th layer is global */
        CHECKF(m->span[l] == (l % 6 == 5 ? 0 : 512) && m->layers[l].q_norm && m->layers[l].post_ffn_norm,
               "layer %d: span %d", l, m->span[l]);
    snprintf(fx, sizeof fx, "%s/tests/fixtures/gemma3_logits.txt", VQ_SOURCE_DIR);
    check_tokenizer(m, fx);
    check_chat(m);
    const vq_t_logit_tol tol = { LOGIT_TOL, LOGIT_MEAN_TOL, GREEDY_MARGIN, 1024, NULL, 0 };
    /* 64-row pages and 64-token chunks, as a session feeds them: the sliding layers' rings free pages
     * from position 576 on, inside the 700-token case, so its position 699 is computed from the ring
     * (with the default 256-row pages the first would go at 768) */
    const vq_t_logit_tol ring = { LOGIT_TOL, LOGIT_MEAN_TOL, GREEDY_MARGIN, 1024, "f32;page=64", 64 };
    const int sanitized = getenv("VQ_SANITIZER_BUILD") != NULL;
    if (sanitized) printf("sanitizer build: the reference logits are left to the Release run\n");
    else {
        vq_t_check_logits(m, fx, &tol);
        long freed = vq_t_check_logits(m, fx, &ring);
        CHECKF(freed > 0, "the sliding-window rings freed no rows in the 700-token case");
        printf("kv f32;page=64: the rings freed %ld rows\n", freed);
    }
    check_codecs(m, sanitized);
    if (!sanitized) check_ring_reserve(m);
    vq_model_free(m);
    return vq_t_done();
}
