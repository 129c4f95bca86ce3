/* test_cuda_kvstate.c: a GPU session's KV cache in the CPU cache's code layouts (docs/cuda.md
 * "Coded KV caches on the GPU"), and state files between the GPU and the CPU.
 *
 * Part 1, every machine (no GPU): the door the state files go through (kv.h plain rows): for
 * f16, q8_0, q4_0:rotate=1, turboquant_mse:bits=4 and a per-layer mix, a CPU cache fed seeded
 * rows (3 blocks and 12 more rows), its rows taken out as plain arrays and put into an empty cache
 * of the same spec and seed: the two caches' state streams are equal byte for byte; the specs a
 * device store does not hold (sink, window, eviction, wprec) are refused by name. The GPU store's
 * allocation (computed, vq_cuda_kvs_layer_bytes) against the CPU cache's accounting at 32768 rows
 * for the Llama-3.2-1B and Llama-3-8B KV shapes: printed, and at most the CPU's.
 * Part 2, with a CUDA device and a model (VQ_CUDA_FWD_MODELS or the first argument; else exit 77
 * after part 1): for each spec, a GPU session decodes T seeded tokens (40: two coded blocks and 8
 * fp16 rows), saves a state; a CPU session of the same model, spec and seed loads it and saves
 * again: the two files are equal byte for byte (the codes went GPU -> file -> CPU -> file
 * unchanged); a second GPU session loads the CPU's file, and both GPU sessions decode 8 more
 * tokens: their logits are equal bit for bit (the same codes, the same kernels). The CPU session
 * decodes the same 8: relative RMS of its logits against the GPU's printed (sanity threshold
 * 1e-2: same codes, float32 in another order on both sides; not a derived bound). Printed: the
 * GPU store's resident bytes per token against the CPU cache's accounting at the same rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../vq_test.h"
#include "core/core.h"
#include "codec/codec.h"
#include "kv/kv.h"
#include "veloxquant.h"
#include "backend/cuda/vq_cuda.h"

static int collect(void *user, const void *p, size_t n) {
    uint8_t **b = user;
    size_t *len = (size_t *)(b + 1);
    uint8_t *nb = realloc(*b, *len + n);
    if (!nb) return 1;
    memcpy(nb + *len, p, n);
    *b = nb;
    *len += n;
    return 0;
}
typedef struct { uint8_t *buf; size_t len; } blob;
static blob stream_of(const vq_kv *kv) {
    blob b = {0};
    vq_err e = {0};
    if (vq_kv_state_write(kv, collect, &b, &e)) fprintf(stderr, "state write: %s\n", e.msg);
    return b;
}

static void part1(uint64_t seed) {
    const char *specs[] = {"f16", "q8_0", "q4_0:rotate=1", "turboquant_mse:bits=4", "q8_0@0=f16@2=turboquant_mse:bits=4"};
    vq_kv_dims dims;
    memset(&dims, 0, sizeof dims);
    dims.n_layers = 3;
    dims.n_heads = 8;
    dims.n_kv_heads = 2;
    dims.head_dim = 128;
    dims.max_ctx = 512;
    dims.max_append = 1;
    const int rows = 60, w = dims.n_kv_heads * dims.head_dim;
    float *k = malloc(sizeof(float) * rows * w), *v = malloc(sizeof(float) * rows * w);
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    for (int i = 0; i < rows * w; i++) { k[i] = (float)vq_rng_gauss(&rng); v[i] = (float)vq_rng_gauss(&rng); }
    for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++) {
        vq_err e = {0};
        vq_kv *a = vq_kv_create_str(specs[si], &dims, 7, &e), *b = vq_kv_create_str(specs[si], &dims, 7, &e);
        CHECKF(a && b, "%s: %s", specs[si], e.msg);
        if (!a || !b) continue;
        CHECKF(vq_kv_plain_check(a, &e) == VQ_OK, "%s: %s", specs[si], e.msg);
        for (int l = 0; l < dims.n_layers; l++)
            for (int t = 0; t < rows; t++) CHECK(vq_kv_append(a, l, t, 1, k + (size_t)t * w, v + (size_t)t * w, &e) == VQ_OK);
        int ok = 1;
        for (int l = 0; l < dims.n_layers; l++) {
            int nw, nc = vq_kv_plain_rows(a, l, &nw);
            CHECKF(nc + nw == rows, "%s layer %d: %d + %d rows", specs[si], l, nc, nw);
            const vq_codec_state *sk = vq_kv_codec_state(a, l, 0), *sv = vq_kv_codec_state(a, l, 1);
            vq_kv_plain p = { nc, nw, NULL, NULL, 0, 0, NULL, NULL };
            p.k_head = (size_t)(nc / sk->rows_per_block) * sk->block_bytes;
            p.v_head = (size_t)(nc / sv->rows_per_block) * sv->block_bytes;
            p.k = malloc(p.k_head * dims.n_kv_heads + 1);
            p.v = malloc(p.v_head * dims.n_kv_heads + 1);
            p.win_k = malloc(2 * (size_t)nw * w + 2);
            p.win_v = malloc(2 * (size_t)nw * w + 2);
            if (vq_kv_plain_get(a, l, &p, &e) || vq_kv_plain_put(b, l, &p, &e)) {
                fprintf(stderr, "%s layer %d: %s\n", specs[si], l, e.msg);
                ok = 0;
            }
            free(p.k); free(p.v); free(p.win_k); free(p.win_v);
        }
        CHECK(ok);
        blob sa = stream_of(a), sb = stream_of(b);
        CHECKF(sa.len == sb.len && sa.len > 0 && !memcmp(sa.buf, sb.buf, sa.len), "%s: streams of %zu and %zu bytes differ",
               specs[si], sa.len, sb.len);
        CHECK(vq_kv_bytes(a) == vq_kv_bytes(b) && vq_kv_bytes_tally(b) == vq_kv_bytes(b));
        printf("  part 1: %-36s %zu-byte stream equal after the plain rows' round trip\n", specs[si], sa.len);
        free(sa.buf); free(sb.buf);
        vq_kv_destroy(a); vq_kv_destroy(b);
    }
    const char *refused[][2] = {{"q8_0;sink=4", "sink="}, {"q8_0;window=16", "window="}, {"q4_0;wprec=32", "wprec="},
                                {"q8_0;evict=h2o,budget=64", "evict="}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        vq_err e = {0};
        vq_kv *a = vq_kv_create_str(refused[i][0], &dims, 7, &e);
        CHECKF(a != NULL, "%s: %s", refused[i][0], e.msg);
        if (!a) continue;
        CHECKF(vq_kv_plain_check(a, &e) == VQ_ERR_UNSUPPORTED && strstr(e.msg, refused[i][1]), "%s: '%s'", refused[i][0], e.msg);
        vq_kv_destroy(a);
    }
    free(k); free(v);
}

/* What a GPU store holds (vq_cuda_kvs_layer_bytes: the allocation, computed without a device)
 * against the CPU cache's accounting (vq_kv_bytes_at) at 32768 rows, for two real shapes: coded
 * rows only (no f16 copy of them; the fp16 rows are the partial block's 16): the GPU's bytes are
 * at most the CPU's (which adds 4 B of position per row and its pages' tables). */
static void resident(void) {
    const char *specs[] = {"f16", "q8_0", "q4_0:rotate=1", "turboquant_mse:bits=4"};
    const struct { const char *name; int L, Hq, H, d; } shapes[] = {{"llama3.2-1b", 16, 32, 8, 64}, {"llama3-8b", 32, 32, 8, 128}};
    const int ctx = 32768;
    for (int si = 0; si < 2; si++)
        for (int k = 0; k < 4; k++) {
            vq_kv_dims D;
            memset(&D, 0, sizeof D);
            D.n_layers = shapes[si].L;
            D.n_heads = shapes[si].Hq;
            D.n_kv_heads = shapes[si].H;
            D.head_dim = shapes[si].d;
            D.max_ctx = ctx;
            D.max_append = 1;
            vq_err e = {0};
            vq_kv *kv = vq_kv_create_str(specs[k], &D, 1, &e);
            CHECKF(kv != NULL, "%s: %s", specs[k], e.msg);
            if (!kv) continue;
            size_t gpu = 0;
            for (int l = 0; l < D.n_layers; l++)
                gpu += vq_cuda_kvs_layer_bytes(vq_kv_codec_state(kv, l, 0), vq_kv_codec_state(kv, l, 1), D.n_heads,
                                               D.n_kv_heads, D.head_dim, ctx);
            const size_t cpu = vq_kv_bytes_at(kv, ctx);
            CHECKF(gpu <= cpu, "%s %s: GPU store %zu bytes > CPU accounting %zu", shapes[si].name, specs[k], gpu, cpu);
            printf("  resident, %-11s %-22s ctx %d: GPU store %7.1f MiB (%6.0f B/token), CPU %7.1f MiB (%6.0f B/token), "
                   "GPU/CPU %.4f\n", shapes[si].name, specs[k], ctx, gpu / 1048576.0, (double)gpu / ctx, cpu / 1048576.0,
                   (double)cpu / ctx, (double)gpu / (double)cpu);
            vq_kv_destroy(kv);
        }
}

static int decode(vq_session *s, const int *tok, int n, float *logits, int nv) {
    vq_err e = {0};
    (void)nv;
    for (int i = 0; i < n; i++)   /* one token a call: the CPU session then appends as the GPU's does */
        if (vq_session_decode(s, tok + i, 1, i == n - 1 ? logits : NULL, 0, &e)) {
            fprintf(stderr, "decode: %s\n", e.msg);
            return 1;
        }
    return 0;
}

static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = 0;
        if (x == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void part2(const char *path, uint64_t seed) {
    const char *specs[] = {"f16", "q8_0", "q4_0:rotate=1", "turboquant_mse:bits=4"};
    vq_err e = {0};
    vq_model_params mp = vq_model_default_params();
    vq_model *mc = vq_model_load(path, NULL, &e);
    mp.device = "cuda";
    vq_model *mg = mc ? vq_model_load(path, &mp, &e) : NULL;
    if (!mc || !mg) { fprintf(stderr, "%s: %s\n", path, e.msg); CHECK(0); vq_model_free(mc); return; }
    const int nv = vq_model_n_vocab(mc), T = 40, T2 = 8;
    int tok[48];
    vq_rng rng;
    vq_rng_seed(&rng, seed);
    for (int i = 0; i < T + T2; i++) tok[i] = 1 + (int)(vq_rng_u64(&rng) % (uint64_t)(nv - 1));
    float *lg = malloc(sizeof(float) * nv), *lg2 = malloc(sizeof(float) * nv), *lc = malloc(sizeof(float) * nv);
    char fg[256], fc[256];
    snprintf(fg, sizeof fg, "/tmp/vq_kvstate_%d_gpu.state", (int)getpid());
    snprintf(fc, sizeof fc, "/tmp/vq_kvstate_%d_cpu.state", (int)getpid());
    for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++) {
        vq_kv_spec *spec = vq_kv_spec_parse(specs[si], &e);
        vq_session_params sp = vq_session_default_params();
        sp.n_ctx = 256;
        sp.kv_seed = 11;
        vq_session *g = vq_session_create(mg, spec, &sp, &e), *c = g ? vq_session_create(mc, spec, &sp, &e) : NULL;
        vq_session *g2 = c ? vq_session_create(mg, spec, &sp, &e) : NULL;
        if (!g || !c || !g2) { fprintf(stderr, "%s: %s\n", specs[si], e.msg); CHECK(0); goto next; }
        CHECK(decode(g, tok, T, NULL, nv) == 0);
        CHECKF(vq_session_save(g, fg, &e) == VQ_OK, "%s: gpu save: %s", specs[si], e.msg);
        CHECKF(vq_session_load(c, fg, &e) == VQ_OK, "%s: cpu load: %s", specs[si], e.msg);
        CHECKF(vq_session_save(c, fc, &e) == VQ_OK, "%s: cpu save: %s", specs[si], e.msg);
        CHECKF(same_file(fg, fc), "%s: the GPU's state file and the CPU's after loading it differ", specs[si]);
        CHECKF(vq_session_load(g2, fc, &e) == VQ_OK, "%s: gpu load: %s", specs[si], e.msg);
        CHECK(decode(g, tok + T, T2, lg, nv) == 0 && decode(g2, tok + T, T2, lg2, nv) == 0 && decode(c, tok + T, T2, lc, nv) == 0);
        double d2 = 0, r2 = 0;
        int exact = 1;
        for (int i = 0; i < nv; i++) {
            exact &= lg[i] == lg2[i];
            d2 += ((double)lg[i] - lc[i]) * ((double)lg[i] - lc[i]);
            r2 += (double)lc[i] * lc[i];
        }
        CHECKF(exact, "%s: a GPU session loaded from the CPU's file decodes other logits", specs[si]);
        const double rel = sqrt(d2 / (r2 > 0 ? r2 : 1));
        CHECKF(rel <= 1e-2, "%s: cpu vs gpu logits after the load: relative RMS %.3g", specs[si], rel);
        printf("  part 2: %-24s files equal: %s; gpu/gpu-loaded logits bit-equal: %s; cpu vs gpu rel RMS %.2e; "
               "GPU store %zu bytes for %d rows (%.1f per row), CPU cache %zu bytes at %d rows (%.1f per row)\n",
               specs[si], same_file(fg, fc) ? "yes" : "NO", exact ? "yes" : "NO", rel, vq_session_kv_bytes(g), sp.n_ctx,
               (double)vq_session_kv_bytes(g) / sp.n_ctx, vq_session_kv_bytes(c), vq_session_pos(c),
               (double)vq_session_kv_bytes(c) / vq_session_pos(c));
    next:
        vq_session_free(g); vq_session_free(g2); vq_session_free(c);
        vq_kv_spec_free(spec);
    }
    unlink(fg);
    unlink(fc);
    free(lg); free(lg2); free(lc);
    vq_model_free(mg);
    vq_model_free(mc);
}

int main(int argc, char **argv) {
    const uint64_t seed = vq_t_seed(32035);
    printf("test_cuda_kvstate: seed %llu\n", (unsigned long long)seed);
    part1(seed);
    resident();
    if (vq_t_fail) return vq_t_done();
    const char *env = getenv("VQ_CUDA_FWD_MODELS");
    char path[1024] = "";
    if (argc > 1) snprintf(path, sizeof path, "%s", argv[1]);
    else if (env && *env) { snprintf(path, sizeof path, "%s", env); char *c = strchr(path, ':'); if (c) *c = 0; }
    if (vq_cuda_device_count() == 0) { vq_t_done(); VQ_SKIP("part 1 passed; no CUDA device for part 2"); }
    if (!*path) { vq_t_done(); VQ_SKIP("part 1 passed; no model for part 2: VQ_CUDA_FWD_MODELS or an argument"); }
    char *at = strchr(path, '@');
    if (at) *at = 0;   /* PATH@WEIGHTS of test_cuda_forward: the file as written here */
    part2(path, seed);
    return vq_t_done();
}
