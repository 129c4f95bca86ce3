/* fuzz_calib.c: libFuzzer entry for the calibration file reader (codec/calib.c). Any input is
 * parsed; an accepted one must serialize back to exactly the same bytes (nothing the reader
 * let through is lost or invented), and its statistics are all read (ASan/UBSan see any count
 * the reader got wrong). A refused one must say why. (Version 3 added the per-layer attention
 * cosines, attn_cos: the seeds carry values of both signs, the reader bounds them to -1..1.)
 * Seeds: run with VQ_FUZZ_WRITE_SEEDS=DIR and the target writes small valid files there and exits
 * (scripts/fuzz.sh does this before fuzzing). */
#include "codec/calib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void write_seeds(const char *dir) {
    const int dims[3][6] = { { 2, 2, 1, 8, 8, 0 }, { 3, 4, 2, 16, 8, 1 }, { 1, 1, 1, 4, 4, 0 } };
    for (int s = 0; s < 3; s++) {
        vq_calib c;
        memset(&c, 0, sizeof c);
        snprintf(c.model, sizeof c.model, "seed-%d", s);
        c.n_layers = dims[s][0]; c.n_heads = dims[s][1]; c.n_kv_heads = dims[s][2];
        c.head_dim = dims[s][3]; c.rope_dim = dims[s][4]; c.rope_neox = dims[s][5];
        c.config_hash = vq_calib_config_hash(c.model);
        c.n_tokens = 100;
        if (vq_calib_alloc(&c, NULL)) abort();
        size_t kv = (size_t)c.n_layers * c.n_kv_heads * c.head_dim, q = (size_t)c.n_layers * c.n_heads * c.head_dim;
        for (size_t i = 0; i < kv; i++) { c.k_mean[i] = (float)i - 3; c.k_sq[i] = (float)i; c.v_sq[i] = 1; }
        for (size_t i = 0; i < kv / 2; i++) c.pair_energy[i] = (float)(i * i);
        for (size_t i = 0; i < q; i++) { c.q_mean[i] = -(float)i; c.q_sq[i] = 2; }
        for (int l = 0; l < c.n_layers; l++) c.attn_cos[l] = 0.9f - 0.4f * (float)l;   /* version 3: -1..1 */
        char path[1024];
        snprintf(path, sizeof path, "%s/seed%d.vqc", dir, s);
        vq_err err;
        if (vq_calib_write(&c, path, &err)) { fprintf(stderr, "%s\n", err.msg); abort(); }
        vq_calib_free(&c);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *d = getenv("VQ_FUZZ_WRITE_SEEDS");
    if (d && *d) { write_seeds(d); exit(0); }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    vq_calib c;
    vq_err err;
    vq_status s = vq_calib_parse(data, size, &c, &err);
    if (s) {
        if (!err.msg[0]) abort();   /* a refusal says why */
        return 0;
    }
    uint8_t *buf;
    size_t len;
    if (vq_calib_serialize(&c, &buf, &len, &err) || len != size || memcmp(buf, data, size)) abort();
    free(buf);
    double sum = 0;
    size_t kv = (size_t)c.n_layers * c.n_kv_heads * c.head_dim, q = (size_t)c.n_layers * c.n_heads * c.head_dim;
    for (size_t i = 0; i < kv / 2; i++) sum += c.pair_energy[i];
    for (size_t i = 0; i < kv; i++) sum += c.k_mean[i] + c.k_sq[i] + c.v_sq[i];
    for (size_t i = 0; i < q; i++) sum += c.q_mean[i] + c.q_sq[i];
    for (int p = 0; p < c.head_dim / 2; p++)
        if (vq_calib_pair_ch(&c, p, 1) >= c.head_dim) abort();
    if (sum != sum) abort();   /* every value was checked finite */
    vq_calib_check(&c, "fuzz", c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, NULL, 0, &err);
    vq_calib_free(&c);
    return 0;
}
