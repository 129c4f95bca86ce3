/* test_state.c: vq_session_save / vq_session_load on real models (stories260K from ../shared,
 * SmolLM2-135M from models/). For each spec: decode a prompt whose length leaves a code block
 * partly filled, save, load into a fresh session, then (a) the next token's logits equal, bit for
 * bit, those of the session that never stopped, (b) 16 greedy tokens are the same; then the same
 * after a generate that left a pending token. Then every refusal, each with its status code, a
 * message naming the problem, and the session left as it was: another model, spec, kv_seed, too
 * small an n_ctx, every truncation of a small file, flipped bytes, bad magic, a newer version, a
 * missing path, a directory, a FIFO; and saves that fail (/dev/full, a full disk simulated with
 * RLIMIT_FSIZE, a read-only folder) leave an existing state file byte-identical.
 * Seed: VQ_TEST_SEED (default 1201), used for the kv seed and the prompt's start; printed. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "session/session_impl.h"
#include "../vq_test.h"

static uint64_t seed0 = 1201;
static char dir[64];

static char *path_in(const char *name) {
    static char buf[8][256];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) { *n = 0; return NULL; }
    fseek(f, 0, SEEK_END);
    long L = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)L + 1);
    *n = fread(b, 1, (size_t)L, f);
    fclose(f);
    return b;
}
static void spit(const char *path, const uint8_t *b, size_t n) {
    unlink(path);   /* a new file: ext4 flushes a file truncated and rewritten in place on close */
    FILE *f = fopen(path, "wb");
    if (n) fwrite(b, 1, n, f);
    fclose(f);
}

static vq_session *mk(const vq_model *m, const char *spec, int n_ctx, uint64_t seed) {
    vq_err e;
    vq_kv_spec *sp = vq_kv_spec_parse(spec, &e);
    if (!sp) return NULL;
    vq_session_params p = vq_session_default_params();
    p.n_ctx = n_ctx;
    p.kv_seed = seed;
    vq_session *s = vq_session_create(m, sp, &p, &e);
    vq_kv_spec_free(sp);
    return s;
}

/* the prompt: a text's tokens, starting a seeded number of tokens in */
static int prompt(const vq_model *m, int n, int *out) {
    static const char *text = "Once upon a time there was a little girl named Lily. She loved to play "
        "outside in the park with her friends, and every day she would run to the big old tree by the "
        "pond and look at the ducks. One day she saw a small bird that could not fly, and she wanted to "
        "help it, so she took it home and gave it water and seeds until it was strong again.";
    int ids[512];
    int k = vq_tokenize(m, text, strlen(text), 1, 0, ids, 512, NULL);
    int off = (int)(seed0 % 8);
    if (k < n + off) return 0;
    out[0] = ids[0];   /* BOS */
    memcpy(out + 1, ids + 1 + off, (size_t)(n - 1) * sizeof(int));
    return n;
}

static int greedy(vq_session *s, vq_sampler *g, int n) {
    vq_generate_params gp = vq_generate_default_params();
    gp.n_predict = n;
    vq_err e;
    vq_generate_result r;
    vq_status st = vq_session_generate(s, NULL, 0, g, &gp, NULL, NULL, &r, &e);
    CHECKF(st == VQ_OK, "generate: %s", e.msg);
    return r.n_gen;
}

static int same_tokens(const vq_session *a, const vq_session *b) {
    return a->n_tok == b->n_tok && a->pos == b->pos &&
           !memcmp(a->tokens, b->tokens, (size_t)a->n_tok * sizeof(int));
}

/* save -> load -> same next logits and same greedy continuation, then after a pending token */
static void resume(const vq_model *m, const char *name, const char *spec, int n_prompt) {
    vq_err e;
    const uint64_t kseed = seed0 * 7 + 3;
    const double t0 = vq_now_s();
    vq_session *a = mk(m, spec, 256, kseed), *b = mk(m, spec, 256, kseed);
    if (!a || !b) {
        printf("SKIP %-10s %-36s (this model's head_dim %d does not take it)\n", name, spec, m->cfg.head_dim);
        vq_session_free(a); vq_session_free(b);
        return;
    }
    const int V = m->cfg.vocab_size;
    int ids[256];
    CHECK(prompt(m, n_prompt, ids) == n_prompt);
    CHECK(vq_session_decode(a, ids, n_prompt, NULL, 0, &e) == VQ_OK);
    char *p1 = path_in("resume.vqs");
    vq_status st = vq_session_save(a, p1, &e);
    CHECKF(st == VQ_OK, "%s %s save: %s", name, spec, e.msg);
    size_t fsz;
    free(slurp(p1, &fsz));
    st = vq_session_load(b, p1, &e);
    CHECKF(st == VQ_OK, "%s %s load: %s", name, spec, e.msg);
    CHECKF(same_tokens(a, b) && b->have_logits && !memcmp(a->logits, b->logits, V * sizeof(float)),
           "%s %s: loaded session holds other tokens or logits", name, spec);
    CHECKF(vq_session_kv_bytes(a) == vq_session_kv_bytes(b), "%s %s: kv bytes %zu vs %zu", name, spec,
           vq_session_kv_bytes(a), vq_session_kv_bytes(b));

    float *la = malloc(V * sizeof(float)), *lb = malloc(V * sizeof(float));
    int next = ids[n_prompt / 2];
    CHECK(vq_session_decode(a, &next, 1, la, 0, &e) == VQ_OK);
    CHECK(vq_session_decode(b, &next, 1, lb, 0, &e) == VQ_OK);
    CHECKF(!memcmp(la, lb, V * sizeof(float)), "%s %s: next-token logits differ after load", name, spec);

    vq_sampler_params sp = vq_sampler_default_params();
    sp.temp = 0;
    vq_sampler *g = vq_sampler_create(&sp, V, &e);
    int na = greedy(a, g, 16), nb = greedy(b, g, 16);
    CHECKF(na == nb && same_tokens(a, b), "%s %s: 16 greedy tokens differ after load", name, spec);
    CHECK(a->n_tok == a->pos + 1);   /* generate leaves its last token pending */

    /* a pending token: save, load into a session that holds something else (b), go on */
    char *p2 = path_in("pending.vqs");
    CHECK(vq_session_save(a, p2, &e) == VQ_OK);
    CHECK(vq_session_decode(b, ids, 3, NULL, 0, &e) == VQ_OK);
    st = vq_session_load(b, p2, &e);
    CHECKF(st == VQ_OK && same_tokens(a, b), "%s %s: load with a pending token: %s", name, spec, e.msg);
    na = greedy(a, g, 8);
    nb = greedy(b, g, 8);
    CHECKF(na == nb && same_tokens(a, b), "%s %s: greedy tokens differ after a load with a pending "
           "token", name, spec);
    /* after a truncate (page smallest positions stay as they were, rows re-run) */
    CHECK(vq_session_truncate(a, n_prompt - 7, &e) == VQ_OK);
    CHECK(vq_session_save(a, p2, &e) == VQ_OK);
    st = vq_session_load(b, p2, &e);
    CHECKF(st == VQ_OK && same_tokens(a, b), "%s %s: load after a truncate: %s", name, spec, e.msg);
    CHECK(vq_session_decode(a, &next, 1, la, 0, &e) == VQ_OK);
    CHECK(vq_session_decode(b, &next, 1, lb, 0, &e) == VQ_OK);
    CHECKF(!memcmp(la, lb, V * sizeof(float)), "%s %s: logits differ after truncate, save, load", name, spec);
    printf("%-10s %-36s prompt %2d: state %7zu bytes, kv %7zu bytes; resumed bit-identical (%.2f s)\n",
           name, spec, n_prompt, fsz, vq_session_kv_bytes(b), vq_now_s() - t0);
    free(la); free(lb);
    vq_sampler_free(g);
    vq_session_free(a); vq_session_free(b);
}

/* A failed load must leave s as it was: same tokens, same logits, same next-token logits. */
typedef struct snap { int pos, n_tok, have; int *tok; float *lg; } snap;
static snap take_snap(const vq_session *s) {
    const int V = s->m->cfg.vocab_size;
    snap z = { s->pos, s->n_tok, s->have_logits, malloc((s->n_tok + 1) * sizeof(int)), malloc(V * 4) };
    memcpy(z.tok, s->tokens, s->n_tok * sizeof(int));
    memcpy(z.lg, s->logits, V * 4);
    return z;
}
static int unchanged(const vq_session *s, const snap *z) {
    return s->pos == z->pos && s->n_tok == z->n_tok && s->have_logits == z->have &&
           !memcmp(s->tokens, z->tok, z->n_tok * sizeof(int)) &&
           !memcmp(s->logits, z->lg, s->m->cfg.vocab_size * 4);
}

static void expect(vq_session *s, const char *path, vq_status code, const char *needle, const char *what) {
    vq_err e;
    snap z = take_snap(s);
    vq_status st = vq_session_load(s, path, &e);
    CHECKF(st == code && strstr(e.msg, needle), "%s: got %s '%s', want %s with '%s'", what,
           vq_status_name(st), e.msg, vq_status_name(code), needle);
    CHECKF(unchanged(s, &z), "%s: the failed load changed the session", what);
    free(z.tok); free(z.lg);
}

static void refusals(const vq_model *st260, const vq_model *smol) {
    const vq_model *m = st260 ? st260 : smol;
    vq_err e;
    const uint64_t ks = seed0;
    int ids[64];
    vq_session *a = mk(m, "f16", 256, ks), *b = mk(m, "f16", 256, ks);
    CHECK(prompt(m, 24, ids) == 24);
    CHECK(vq_session_decode(a, ids, 24, NULL, 0, &e) == VQ_OK);
    CHECK(vq_session_decode(b, ids, 5, NULL, 0, &e) == VQ_OK);   /* b holds its own state throughout */
    char *good = path_in("good.vqs");
    CHECK(vq_session_save(a, good, &e) == VQ_OK);

    if (st260 && smol) {   /* another model: stories260K's state into SmolLM2, and back */
        vq_session *o = mk(smol, "f16", 256, ks);
        expect(o, good, VQ_ERR_STATE, "another model", "other model");
        char *sp = path_in("smol.vqs");
        CHECK(vq_session_decode(o, ids, 4, NULL, 0, &e) == VQ_OK && vq_session_save(o, sp, &e) == VQ_OK);
        expect(b, sp, VQ_ERR_STATE, "n_layers", "other model (SmolLM2 into stories260K)");
        vq_session_free(o);
    }
    vq_session *o = mk(m, "f32", 256, ks);
    expect(o, good, VQ_ERR_STATE, "kv spec", "other spec");
    vq_session_free(o);
    o = mk(m, "f16", 256, ks + 1);
    expect(o, good, VQ_ERR_STATE, "kv_seed", "other kv_seed");
    vq_session_free(o);
    o = mk(m, "f16", 16, ks);
    expect(o, good, VQ_ERR_STATE, "n_ctx 16", "n_ctx too small");
    vq_session_free(o);
    o = mk(m, "f16", 512, ks);   /* a larger context takes it (the same layout) */
    CHECKF(vq_session_load(o, good, &e) == VQ_OK && same_tokens(a, o), "load into n_ctx 512: %s", e.msg);
    vq_session_free(o);

    /* a small file: every truncation, then single flipped bytes */
    vq_session *t = mk(m, "f16", 256, ks);
    CHECK(vq_session_decode(t, ids, 3, NULL, 0, &e) == VQ_OK);
    char *small = path_in("small.vqs"), *cut = path_in("cut.vqs");
    CHECK(vq_session_save(t, small, &e) == VQ_OK);
    size_t n;
    uint8_t *f = slurp(small, &n);
    snap z = take_snap(b);
    int wrong = 0, changed = 0;
    for (size_t len = 0; len < n; len++) {
        spit(cut, f, len);
        vq_status st = vq_session_load(b, cut, &e);
        if (st != VQ_ERR_FORMAT || !strstr(e.msg, "truncated") || !strstr(e.msg, cut)) {
            if (wrong++ < 3) fprintf(stderr, "truncated to %zu: %s %s\n", len, vq_status_name(st), e.msg);
        }
        changed += !unchanged(b, &z);
    }
    CHECKF(wrong == 0 && changed == 0, "%zu truncations: %d wrong answers, %d changed the session", n,
           wrong, changed);
    printf("truncation: all %zu lengths of a %zu-byte state refused as truncated\n", n, n);
    const size_t at[] = { 0, 7, 8, 11, 12, 20, 60, 100, 127, 128, 140, n / 3, n / 2, n - 300, n - 5, n - 1 };
    for (size_t i = 0; i < VQ_ARRAY_LEN(at); i++) {
        f[at[i]] ^= 0x10;
        spit(cut, f, n);
        f[at[i]] ^= 0x10;
        char what[64];
        snprintf(what, sizeof what, "byte %zu flipped", at[i]);
        expect(b, cut, VQ_ERR_FORMAT, at[i] < 8 ? "magic" : at[i] < 12 ? "version" : "checksum", what);
    }
    memcpy(f, "VQSTATX\x1a", 8);
    spit(cut, f, n);
    expect(b, cut, VQ_ERR_FORMAT, "bad magic", "wrong magic");
    memcpy(f, "VQSTATE\x1a", 8);
    uint32_t v = 2;
    memcpy(f + 8, &v, 4);
    spit(cut, f, n);
    expect(b, cut, VQ_ERR_FORMAT, "newer version", "newer version");
    free(f);

    /* paths that are not state files */
    expect(b, path_in("missing.vqs"), VQ_ERR_IO, "missing.vqs", "nonexistent path");
    expect(b, dir, VQ_ERR_IO, "directory", "a directory");
    char *fifo = path_in("fifo");
    CHECK(mkfifo(fifo, 0600) == 0);
    alarm(20);   /* a load that blocked on the FIFO would end the test here */
    expect(b, fifo, VQ_ERR_IO, "FIFO", "a FIFO");
    alarm(0);
    CHECKF(unchanged(b, &z), "b changed");
    free(z.tok); free(z.lg);

    /* saves that fail leave the file there byte-identical (and no temp file behind) */
    size_t n0, n1;
    uint8_t *before = slurp(good, &n0);
    CHECK(vq_session_save(b, "/dev/full", &e) == VQ_ERR_IO && strstr(e.msg, "/dev/full"));
    struct stat sb;
    CHECK(stat("/dev/full", &sb) == 0 && S_ISCHR(sb.st_mode));
    signal(SIGXFSZ, SIG_IGN);   /* a full disk, as the writer sees it: writes past the limit fail */
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 1024;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    vq_status st = vq_session_save(a, good, &e);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECKF(st == VQ_ERR_IO && strstr(e.msg, good), "save on a full disk: %s %s", vq_status_name(st), e.msg);
    uint8_t *after = slurp(good, &n1);
    CHECKF(n0 == n1 && !memcmp(before, after, n0), "a failed save changed the existing file");
    free(after);
    if (geteuid() != 0) {
        CHECK(chmod(dir, 0555) == 0);
        st = vq_session_save(b, good, &e);
        chmod(dir, 0755);
        CHECKF(st == VQ_ERR_IO && strstr(e.msg, good), "save into a read-only folder: %s", e.msg);
        after = slurp(good, &n1);
        CHECKF(n0 == n1 && !memcmp(before, after, n0), "a failed save changed the existing file");
        free(after);
    } else {
        printf("read-only folder: not checked (running as root, which writes anyway)\n");
    }
    DIR *d = opendir(dir);
    int tmps = 0;
    for (struct dirent *de; d && (de = readdir(d));) tmps += strstr(de->d_name, ".tmp-") != NULL;
    if (d) closedir(d);
    CHECKF(tmps == 0, "%d temporary files left behind", tmps);
    free(before);
    vq_session_free(t);
    vq_session_free(a);
    vq_session_free(b);
}

static void rm_dir(void) {
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));)
        if (de->d_name[0] != '.') unlink(path_in(de->d_name));
    if (d) closedir(d);
    rmdir(dir);
}

int main(void) {
    if (getenv("VQ_TEST_SEED")) seed0 = strtoull(getenv("VQ_TEST_SEED"), NULL, 10);
    printf("seed %llu\n", (unsigned long long)seed0);
    char mp[1024], tp[1024], sp[1024];
    snprintf(mp, sizeof mp, "%s/data/stories260K.bin", VQ_SHARED_DIR);
    snprintf(tp, sizeof tp, "%s/data/tok512.bin", VQ_SHARED_DIR);
    snprintf(sp, sizeof sp, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", VQ_MODELS_DIR);
    int have260 = access(mp, R_OK) == 0 && access(tp, R_OK) == 0, havesmol = access(sp, R_OK) == 0;
    if (!have260 && !havesmol) VQ_SKIP("neither %s nor %s is there", mp, sp);
    if (!have260) printf("note: %s absent, stories260K cases not run\n", mp);
    if (!havesmol) printf("note: %s absent (scripts/fetch_model.sh), SmolLM2 cases not run\n", sp);
    snprintf(dir, sizeof dir, "/tmp/vq_state_XXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    vq_err e;
    vq_model_params mpar = vq_model_default_params();
    vq_model *s260 = NULL, *smol = NULL;
    if (have260) {
        mpar.tokenizer_path = tp;
        s260 = vq_model_load(mp, &mpar, &e);
        CHECKF(s260 != NULL, "%s", e.msg);
    }
    if (havesmol) {
        mpar.tokenizer_path = NULL;
        smol = vq_model_load(sp, &mpar, &e);
        CHECKF(smol != NULL, "%s", e.msg);
    }
    static const char *specs[] = { "f16", "f32", "q4_0:rotate=1;window=8", "turboquant_mse:k=4,v=4",
                                   "kivi", "f16;sink=4", "turboquant_mse:k=4,v=4@0,-1=f16" };
    /* 45 rows: q4_0's 32-row blocks with an 8-row window leave 13 rows not yet coded; 4-bit
     * TurboQuant's key blocks and KIVI's groups leave theirs partly filled as well */
    for (size_t i = 0; s260 && i < VQ_ARRAY_LEN(specs); i++)
        if (strcmp(specs[i], "kivi")) resume(s260, "stories260K", specs[i], 45);
    for (size_t i = 0; smol && i < VQ_ARRAY_LEN(specs); i++) resume(smol, "SmolLM2", specs[i], 45);
    if (smol) resume(smol, "SmolLM2", "q4_0;window=4,sink=2,page=32", 77);   /* several pages */
    double t1 = vq_now_s();
    refusals(s260, smol);
    printf("refusals: %.2f s\n", vq_now_s() - t1);
    vq_model_free(s260);
    vq_model_free(smol);
    rm_dir();
    return vq_t_done();
}
