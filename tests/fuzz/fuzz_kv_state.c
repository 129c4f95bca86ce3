/* fuzz_kv_state.c: libFuzzer entry for the kv state reader (kv/kv_state.c). A small two-group
 * cache (2 layers, 2 query heads, 1 KV head, head_dim 64, max_ctx 64; q4_0 with a window, a sink
 * and 16-row pages, layer 1 f16 with a window and a sink in q8_0 blocks (wprec=8); layer 0 a
 * sliding window of 20 whose ring frees pages) reads the
 * input as a kv stream; when it is accepted, everything
 * that uses the cache's contents runs on it (read-back, attention, more appends, truncate, a
 * write that must give back the same bytes), so ASan/UBSan see any count the reader let through.
 * A failed read must say why and leave the cache as it was.
 * Seeds: run with VQ_FUZZ_WRITE_SEEDS=DIR and the target writes valid streams of several fill
 * levels there and exits (scripts/fuzz.sh does this before fuzzing). */
#include "kv/kv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *SPEC = "q4_0;window=4,sink=2,page=16@1=f16;window=3,sink=1,wprec=8";
static const int SPANS[2] = { 20, 0 };   /* layer 0 slides (a ring of 16-row pages), layer 1 sees all */
static const vq_kv_dims DIMS = { 2, 2, 1, 64, 64, SPANS, 0, 0 };
static vq_kv *kv;

typedef struct { uint8_t *p; size_t n, cap; } mem;
static int mem_put(void *user, const void *b, size_t n) {
    mem *m = user;
    if (m->n + n > m->cap) {
        m->cap = (m->n + n) * 2;
        m->p = realloc(m->p, m->cap);
        if (!m->p) abort();
    }
    memcpy(m->p + m->n, b, n);
    m->n += n;
    return 0;
}

/* n rows at positions pos0.. for every layer, from a fixed pattern */
static void fill(vq_kv *c, int pos0, int n) {
    const int w = DIMS.n_kv_heads * DIMS.head_dim;
    float *k = malloc((size_t)n * w * sizeof(float) + 4), *v = malloc((size_t)n * w * sizeof(float) + 4);
    for (int i = 0; i < n * w; i++) {
        k[i] = (float)((i * 7919 + pos0 * 31) % 2001 - 1000) / 250.0f;
        v[i] = (float)((i * 104729 + pos0 * 17) % 1999 - 999) / 333.0f;
    }
    for (int l = 0; l < DIMS.n_layers; l++)
        if (vq_kv_append(c, l, pos0, n, k, v, NULL)) abort();
    free(k);
    free(v);
}

static mem stream_of(vq_kv *c) {
    mem m = { 0 };
    if (vq_kv_state_write(c, mem_put, &m, NULL)) abort();
    return m;
}

static void write_seeds(const char *dir) {
    const int rows[] = { 0, 1, 2, 5, 9, 23, 40, 64 };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        vq_kv *c = vq_kv_create_str(SPEC, &DIMS, 1, NULL);
        if (!c) abort();
        for (int at = 0, step = i % 2 ? 7 : rows[i]; at < rows[i]; at += step)   /* odd: chunks, the ring frees */
            fill(c, at, rows[i] - at < step ? rows[i] - at : step);
        mem m = stream_of(c);
        char path[1024];
        snprintf(path, sizeof path, "%s/kv-%02d-rows", dir, rows[i]);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(m.p, 1, m.n, f) != m.n || fclose(f)) { perror(path); exit(1); }
        free(m.p);
        vq_kv_destroy(c);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *seeds = getenv("VQ_FUZZ_WRITE_SEEDS");
    if (seeds) {
        write_seeds(seeds);
        exit(0);
    }
    vq_err err;
    kv = vq_kv_create_str(SPEC, &DIMS, 1, &err);
    if (!kv) { fprintf(stderr, "fuzz_kv_state: %s\n", err.msg); abort(); }
    return 0;
}

static volatile float sink;

/* everything that reads the contents: decoded rows, attention, appends, truncate */
static void exercise(vq_kv *c) {
    const int w = DIMS.n_kv_heads * DIMS.head_dim, qw = DIMS.n_heads * DIMS.head_dim;
    float *k = malloc(64 * w * sizeof(float)), *v = malloc(64 * w * sizeof(float));
    int32_t pos[64];
    float q[2 * 128], out[2 * 128];
    for (int i = 0; i < 2 * qw; i++) q[i] = (float)(i % 13 - 6) * 0.1f;
    int qpos[2] = { 0, 1 << 20 };
    int rows = 0;
    for (int l = 0; l < DIMS.n_layers; l++) {
        if (vq_kv_rows(c, l) > 64) abort();
        if (vq_kv_read(c, l, k, v, pos, NULL)) abort();
        if (vq_kv_attend(c, l, 2, qpos, q, out, NULL)) abort();
        sink += out[0] + out[2 * qw - 1];
        rows = vq_kv_rows(c, l) > rows ? vq_kv_rows(c, l) : rows;
    }
    if (vq_kv_bytes(c) != vq_kv_bytes_tally(c)) abort();
    int room = 64;
    for (int l = 0; l < DIMS.n_layers; l++) room = 64 - vq_kv_rows(c, l) < room ? 64 - vq_kv_rows(c, l) : room;
    if (room > 0) fill(c, rows, room < 7 ? room : 7);
    for (int l = 0; l < DIMS.n_layers; l++)
        if (vq_kv_attend(c, l, 2, qpos, q, out, NULL)) abort();
    vq_kv_truncate(c, rows / 2);
    if (vq_kv_bytes(c) != vq_kv_bytes_tally(c)) abort();
    free(k);
    free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mem before = stream_of(kv);
    vq_err err;
    vq_status st = vq_kv_state_read(kv, data, size, -1, &err);
    if (st) {
        if (strncmp(err.msg, "kv state", 8) != 0 && st != VQ_ERR_NOMEM) abort();   /* must say why */
        mem now = stream_of(kv);   /* and change nothing */
        if (now.n != before.n || memcmp(now.p, before.p, now.n)) abort();
        free(now.p);
        free(before.p);
        return 0;
    }
    free(before.p);
    /* what was accepted is what the cache holds, max_ctx aside (a stream from a cache with another
     * max_ctx is read when its rows fit): written again it gives the same bytes */
    mem again = stream_of(kv);
    uint32_t sl;
    memcpy(&sl, data + 12, 4);
    const size_t at_max_ctx = 16 + (size_t)sl + 16;
    if (again.n != size || memcmp(again.p, data, at_max_ctx) ||
        memcmp(again.p + at_max_ctx + 4, data + at_max_ctx + 4, size - at_max_ctx - 4)) abort();
    free(again.p);
    /* the stricter session form (rows 0..n-1) agrees or refuses, and never crashes */
    vq_kv_state_read(kv, data, size, vq_kv_rows(kv, 0), &err);
    vq_kv_state_read(kv, data, size, vq_kv_rows(kv, 1), &err);   /* the ring layer may hold fewer */
    exercise(kv);
    return 0;
}
