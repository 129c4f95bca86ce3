/* test_model_input.c: vq_model_open's input checks. The model and tokenizer paths must be regular
 * files, refused at once otherwise (a FIFO must not block, a directory says "is a directory");
 * non-finite or absurd float hyperparameters in a GGUF are refused at load, naming the key; an
 * unknown architecture, a mixture-of-experts file and an unknown rope scaling are refused by name.
 * alarm() turns a hang on the FIFO into a failure. */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include "model/model.h"
#include "../formats/gguf_writer.h"
#include "../vq_test.h"

static char dir[64] = "/tmp/vq_model_input.XXXXXX";

static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "test_model_input: blocked for 30 s (a FIFO opened without O_NONBLOCK?)\n";
    (void)!write(2, m, sizeof m - 1);
    _exit(1);
}

/* vq_model_open(path, tok) must fail with code, the message holding want and want2 */
static void refused(const char *path, const char *tok, vq_status code, const char *want, const char *want2) {
    vq_err e;
    vq_err_clear(&e);
    double t0 = vq_now_s();
    vq_model *m = vq_model_open(path, tok, &e);
    CHECKF(!m && e.code == code && strstr(e.msg, want) && (!want2 || strstr(e.msg, want2)),
           "open(%s, %s): want %s with \"%s\"%s%s, got %s: %s", path, tok ? tok : "-", vq_status_name(code),
           want, want2 ? " and " : "", want2 ? want2 : "", m ? "a model" : vq_status_name(e.code), e.msg);
    CHECKF(vq_now_s() - t0 < 2.0, "open(%s, %s) took %.2f s", path, tok ? tok : "-", vq_now_s() - t0);
    vq_model_free(m);
}

static void check_paths(void) {
    char fifo[128], sub[128];
    snprintf(fifo, sizeof fifo, "%s/fifo.bin", dir);
    snprintf(sub, sizeof sub, "%s/tok.d", dir);
    CHECKF(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    CHECK(mkdir(sub, 0700) == 0);
    refused(fifo, NULL, VQ_ERR_IO, fifo, "is a FIFO");
    refused(dir, "tok.bin", VQ_ERR_IO, dir, "is a directory");
    if (access("/dev/zero", R_OK) == 0) refused("/dev/zero", NULL, VQ_ERR_IO, "/dev/zero", "character device");

    /* the tokenizer of a llama2.c checkpoint: same rules (it is read into memory) */
    char mp[1024];
    snprintf(mp, sizeof mp, "%s/data/stories260K.bin", VQ_SHARED_DIR);
    if (access(mp, R_OK) != 0) {
        printf("note: %s absent: the tokenizer-path checks are skipped\n", mp);
    } else {
        refused(mp, fifo, VQ_ERR_IO, fifo, "is a FIFO");
        refused(mp, sub, VQ_ERR_IO, sub, "is a directory");
        if (access("/dev/zero", R_OK) == 0) refused(mp, "/dev/zero", VQ_ERR_IO, "/dev/zero", "character device");
    }
    unlink(fifo);
    rmdir(sub);
}

/* a metadata-only llama GGUF with one float hyperparameter: refused naming the key, or (valid)
 * accepted and stopped later at the missing tensors */
static void hparam(const char *key, uint32_t type, double val, int valid) {
    char path[128];
    snprintf(path, sizeof path, "%s/h.gguf", dir);
    tw_buf b = tw_llama_hparams(key, type, val);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b.p, 1, b.n, f) == b.n);
    if (f) fclose(f);
    free(b.p);
    vq_err e;
    vq_err_clear(&e);
    vq_model *m = vq_model_open(path, NULL, &e);
    if (valid)
        CHECKF(!m && strstr(e.msg, "token_embd.weight"), "%s = %g (%s) should pass the hyperparameter checks: %s",
               key, val, type == 12 ? "f64" : "f32", e.msg);
    else
        CHECKF(!m && e.code == VQ_ERR_FORMAT && strstr(e.msg, key) && strstr(e.msg, path),
               "%s = %g (%s) should be refused naming the key: %s", key, val, type == 12 ? "f64" : "f32", e.msg);
    vq_model_free(m);
    unlink(path);
}

static void check_hparams(void) {
    const char *rope = "llama.rope.freq_base", *eps = "llama.attention.layer_norm_rms_epsilon";
    hparam(NULL, 6, 0, 1);   /* both absent: the defaults are fine */
    const double bad_rope[] = { INFINITY, -INFINITY, NAN, 0.0, -10000.0, 1.0, 0.5, 1e13 };
    for (size_t i = 0; i < VQ_ARRAY_LEN(bad_rope); i++) {
        hparam(rope, 6, bad_rope[i], 0);
        hparam(rope, 12, bad_rope[i], 0);
    }
    hparam(rope, 12, 1e300, 0);   /* out of float32 range as float64 */
    const double good_rope[] = { 10000.0, 500000.0, 1e6, 1e12 };
    for (size_t i = 0; i < VQ_ARRAY_LEN(good_rope); i++) hparam(rope, 6, good_rope[i], 1);
    const double bad_eps[] = { NAN, INFINITY, -INFINITY, 0.0, -1e-5, 0.9, 1.0 };
    for (size_t i = 0; i < VQ_ARRAY_LEN(bad_eps); i++) {
        hparam(eps, 6, bad_eps[i], 0);
        hparam(eps, 12, bad_eps[i], 0);
    }
    const double good_eps[] = { 1e-5, 1e-6, 1e-12 };
    for (size_t i = 0; i < VQ_ARRAY_LEN(good_eps); i++) hparam(eps, 12, good_eps[i], 1);
}

/* a metadata-only GGUF of architecture arch with one extra key (u32 or string): refused with want */
static void arch_refused_t(const char *arch, const char *key, const char *sval, uint32_t uval, const char *tensor,
                           vq_status code, const char *want, const char *want2) {
    char path[128], k[128];
    snprintf(path, sizeof path, "%s/a.gguf", dir);
    tw_buf b = {0};
    tw_put(&b, "GGUF", 4);
    tw_u32(&b, 3);
    tw_u64(&b, tensor ? 1 : 0);
    tw_u64(&b, key ? 6 : 5);
    tw_key(&b, "general.architecture", 8); tw_str(&b, arch);
    const char *u[4] = { "embedding_length", "block_count", "feed_forward_length", "attention.head_count" };
    const uint32_t uv[4] = { 64, 2, 128, 8 };
    for (int i = 0; i < 4; i++) { snprintf(k, sizeof k, "%s.%s", arch, u[i]); tw_key(&b, k, 4); tw_u32(&b, uv[i]); }
    if (key && sval) { tw_key(&b, key, 8); tw_str(&b, sval); }
    else if (key) { tw_key(&b, key, 4); tw_u32(&b, uval); }
    if (tensor) {   /* one F32 tensor of 4 elements */
        tw_str(&b, tensor); tw_u32(&b, 1); tw_u64(&b, 4); tw_u32(&b, 0); tw_u64(&b, 0);
        while (b.n % 32) tw_u8(&b, 0);
        for (int i = 0; i < 4; i++) tw_f32(&b, 1.0f);
    }
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b.p, 1, b.n, f) == b.n);
    if (f) fclose(f);
    free(b.p);
    refused(path, NULL, code, want, want2);
    unlink(path);
}

static void arch_refused(const char *arch, const char *key, const char *sval, uint32_t uval, vq_status code,
                         const char *want, const char *want2) {
    arch_refused_t(arch, key, sval, uval, NULL, code, want, want2);
}

/* unknown architectures name themselves and the known rows; mixture-of-experts files and rope
 * scalings we do not implement are refused before any tensor is looked for */
static void check_arch(void) {
    arch_refused("mamba", NULL, NULL, 0, VQ_ERR_UNSUPPORTED, "architecture 'mamba' is not supported",
                 "known: llama, gemma3, gemma2, phi3, qwen2, qwen3");
    arch_refused("llama", "llama.expert_count", NULL, 8, VQ_ERR_UNSUPPORTED, "mixture-of-experts models are not supported",
                 NULL);
    arch_refused("qwen2", "qwen2.expert_count", NULL, 60, VQ_ERR_UNSUPPORTED, "mixture-of-experts", NULL);
    arch_refused("llama", "llama.rope.scaling.type", "longrope", 0, VQ_ERR_UNSUPPORTED, "longrope", NULL);
    arch_refused("llama", "llama.rope.scaling.type", "dynamic", 0, VQ_ERR_FORMAT, "llama.rope.scaling.type", "dynamic");
    arch_refused("llama", "llama.expert_count", NULL, 0, VQ_ERR_FORMAT, "token_embd.weight", NULL);   /* 0: dense */
    arch_refused_t("llama", NULL, NULL, 0, "blk.0.ffn_up_exps.weight", VQ_ERR_UNSUPPORTED, "mixture-of-experts",
                   "blk.0.ffn_up_exps.weight");
    arch_refused_t("qwen2", NULL, NULL, 0, "blk.3.ffn_gate_inp.weight", VQ_ERR_UNSUPPORTED, "mixture-of-experts", NULL);
    /* Phi-3 longrope needs both factor tables (one alone is refused before any tensor is looked
     * for); the scaling type 'longrope' (no converter writes it) stays refused; Gemma 2 without
     * sliding layers */
    arch_refused_t("phi3", NULL, NULL, 0, "rope_factors_long.weight", VQ_ERR_FORMAT, "longrope needs both",
                   "only rope_factors_long.weight");
    arch_refused_t("phi3", NULL, NULL, 0, "rope_factors_short.weight", VQ_ERR_FORMAT, "longrope needs both",
                   "only rope_factors_short.weight");
    arch_refused("phi3", "phi3.rope.scaling.type", "longrope", 0, VQ_ERR_UNSUPPORTED, "longrope", NULL);
    arch_refused("gemma2", "gemma2.attention.sliding_window", NULL, 0, VQ_ERR_UNSUPPORTED, "sliding_window = 0", NULL);
}

int main(void) {
    signal(SIGALRM, on_alarm);
    alarm(30);
    if (!mkdtemp(dir)) VQ_SKIP("cannot make a temp directory in /tmp");
    check_paths();
    check_hparams();
    check_arch();
    rmdir(dir);
    return vq_t_done();
}
