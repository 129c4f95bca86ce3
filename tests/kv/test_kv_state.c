/* test_kv_state.c: the kv state stream (kv_state.c). A cache filled with seeded random rows is
 * written and read into a fresh cache of the same spec: what attention sees (vq_kv_read) and what
 * it computes (vq_kv_attend) are bit-identical, and so are both caches after more appends. Then the
 * reader's refusals: another spec, seed or dims (VQ_ERR_STATE), every truncation, flipped counts,
 * trailing bytes (VQ_ERR_FORMAT), each leaving the cache as it was.
 * Seed: VQ_TEST_SEED (default 20261201), printed. */
#include "kv/kv.h"
#include "../vq_test.h"
#include "../calib_fixture.h"

static uint64_t seed0 = 20261201;

typedef struct { uint8_t *p; size_t n, cap; } mem;
static int mem_put(void *user, const void *b, size_t n) {
    mem *m = user;
    if (m->n + n > m->cap) {
        m->cap = (m->n + n) * 2;
        m->p = realloc(m->p, m->cap);
    }
    memcpy(m->p + m->n, b, n);
    m->n += n;
    return 0;
}

static void fill(vq_kv *kv, const vq_kv_dims *D, int pos0, int n, uint64_t seed) {
    const size_t w = (size_t)D->n_kv_heads * D->head_dim;
    float *k = malloc(n * w * sizeof(float)), *v = malloc(n * w * sizeof(float));
    vq_rng r;
    vq_rng_seed(&r, seed);
    for (size_t i = 0; i < n * w; i++) { k[i] = (float)vq_rng_gauss(&r); v[i] = (float)vq_rng_gauss(&r); }
    vq_err e;
    for (int l = 0; l < D->n_layers; l++) CHECKF(vq_kv_append(kv, l, pos0, n, k, v, &e) == VQ_OK, "%s", e.msg);
    free(k); free(v);
}

/* every layer's decoded rows and one attention output of a and b: equal bit for bit */
static int same(vq_kv *a, vq_kv *b, const vq_kv_dims *D, int qpos) {
    const size_t w = (size_t)D->n_kv_heads * D->head_dim, qw = (size_t)D->n_heads * D->head_dim;
    int ok = 1;
    for (int l = 0; l < D->n_layers; l++) {
        int rows = vq_kv_rows(a, l);
        if (rows != vq_kv_rows(b, l)) return 0;
        float *ka = calloc(rows * w + 1, 4), *va = calloc(rows * w + 1, 4), *kb = calloc(rows * w + 1, 4),
              *vb = calloc(rows * w + 1, 4);
        int32_t *pa = calloc(rows + 1, 4), *pb = calloc(rows + 1, 4);
        vq_kv_read(a, l, ka, va, pa, NULL);
        vq_kv_read(b, l, kb, vb, pb, NULL);
        ok &= !memcmp(ka, kb, rows * w * 4) && !memcmp(va, vb, rows * w * 4) && !memcmp(pa, pb, rows * 4);
        float *q = malloc(qw * 4), *oa = malloc(qw * 4), *ob = malloc(qw * 4);
        for (size_t i = 0; i < qw; i++) q[i] = (float)((i * 37 % 11) - 5) * 0.25f;
        vq_kv_attend(a, l, 1, &qpos, q, oa, NULL);
        vq_kv_attend(b, l, 1, &qpos, q, ob, NULL);
        ok &= !memcmp(oa, ob, qw * 4);
        free(ka); free(va); free(kb); free(vb); free(pa); free(pb); free(q); free(oa); free(ob);
    }
    return ok;
}

static void round_trip(const char *spec, int rows) {
    vq_kv_dims D = { 3, 4, 2, 64, 96, NULL, 0, 0 };
    vq_err e;
    vq_kv *a = vq_kv_create_str(spec, &D, 7, &e), *b = vq_kv_create_str(spec, &D, 7, &e);
    CHECKF(a && b, "%s: %s", spec, e.msg);
    if (!a || !b) return;
    fill(a, &D, 0, rows / 2, seed0);
    fill(a, &D, rows / 2, rows - rows / 2, seed0 + 1);
    fill(b, &D, 0, 5, seed0 + 2);   /* b holds something else first: the read replaces it */
    mem m = { 0 };
    CHECK(vq_kv_state_write(a, mem_put, &m, &e) == VQ_OK);
    CHECKF(m.n == vq_kv_state_bytes(a) && m.n <= vq_kv_state_max_bytes(a), "%s: %zu bytes, counted %zu, "
           "max %zu", spec, m.n, vq_kv_state_bytes(a), vq_kv_state_max_bytes(a));
    vq_status st = vq_kv_state_read(b, m.p, m.n, rows, &e);
    CHECKF(st == VQ_OK, "%s rows %d: %s", spec, rows, e.msg);
    CHECKF(same(a, b, &D, rows - 1), "%s rows %d: read-back differs", spec, rows);
    CHECK(vq_kv_bytes(b) == vq_kv_bytes_tally(b) && vq_kv_bytes(a) == vq_kv_bytes(b));
    fill(a, &D, rows, 9, seed0 + 3);
    fill(b, &D, rows, 9, seed0 + 3);
    CHECKF(same(a, b, &D, rows + 8), "%s rows %d: after 9 more rows the caches differ", spec, rows);
    free(m.p);
    vq_kv_destroy(a);
    vq_kv_destroy(b);
}

/* a cache whose codes depend on a calibration (the key pre-transform): a round trip with the same
 * file, and a stream refused by a cache whose calib=FILE has the same path but other contents */
static void calibrated(void) {
    vq_kv_dims D = { 3, 4, 2, 64, 96, NULL, 0, 0 };
    char cal[64], spec[200];
    vq_t_tmpfile("vq_state_kx", cal, sizeof cal);
    vq_rng r;
    vq_rng_seed(&r, seed0 + 9);
    vq_t_calib_file(cal, D.n_layers, D.n_heads, D.n_kv_heads, D.head_dim, &r);
    snprintf(spec, sizeof spec, "turboquant_mse:k=4,v=4;kmean=1,kscale=0.25,sink=2,window=3,wprec=8;calib=%s", cal);
    round_trip(spec, 70);
    vq_err e;
    vq_kv *a = vq_kv_create_str(spec, &D, 7, &e);
    CHECKF(a != NULL, "%s: %s", spec, e.msg);
    if (!a) return;
    fill(a, &D, 0, 40, seed0);
    mem m = { 0 };
    CHECK(vq_kv_state_write(a, mem_put, &m, &e) == VQ_OK);
    vq_t_calib_file(cal, D.n_layers, D.n_heads, D.n_kv_heads, D.head_dim, &r);   /* new statistics, same path */
    vq_kv *b = vq_kv_create_str(spec, &D, 7, &e);
    CHECKF(b != NULL, "%s: %s", spec, e.msg);
    if (b) {
        vq_status st = vq_kv_state_read(b, m.p, m.n, -1, &e);
        CHECKF(st == VQ_ERR_STATE && strstr(e.msg, "calibration"), "a stream of another calibration: %s",
               st ? e.msg : "(read)");
        CHECK(vq_kv_rows(b, 0) == 0);
        vq_kv_destroy(b);
    }
    free(m.p);
    vq_kv_destroy(a);
    unlink(cal);
}

static void refusals(void) {
    const char *spec = "q4_0;window=4,sink=2,page=32";
    vq_kv_dims D = { 2, 2, 1, 64, 64, NULL, 0, 0 };
    vq_err e;
    vq_kv *a = vq_kv_create_str(spec, &D, 3, &e);
    fill(a, &D, 0, 45, seed0);
    mem m = { 0 };
    vq_kv_state_write(a, mem_put, &m, &e);

    vq_kv *other = vq_kv_create_str("q8_0;window=4,sink=2,page=32", &D, 3, &e);
    CHECK(vq_kv_state_read(other, m.p, m.n, -1, &e) == VQ_ERR_STATE && strstr(e.msg, "spec"));
    vq_kv_destroy(other);
    /* q4_0's key layouts (lanes: 16-row blocks, the default; rows: one row per block) are not
     * interchangeable: the normalized spec names the layout, so a stream of one is refused by the other */
    other = vq_kv_create_str("q4_0:layout=rows;window=4,sink=2,page=32", &D, 3, &e);
    CHECK(vq_kv_state_read(other, m.p, m.n, -1, &e) == VQ_ERR_STATE && strstr(e.msg, "layout=lanes") &&
          strstr(e.msg, "layout=rows"));
    vq_kv_destroy(other);
    /* turboquant_mse at 2 and 3 bits (lanes since issue 12; packed before it and with
     * layout=packed) and kivi's keys (lanes since issue 12, the default; rows before it and with
     * layout=rows) likewise: a stream of either layout is refused by the other, naming both */
    const struct { const char *w, *rd, *old; int rows; } lay[] = {
        { "turboquant_mse:k=3,v=3;page=32", "turboquant_mse:k=3,v=3,layout=packed;page=32", "layout=packed", 45 },
        { "turboquant_mse:bits=2,layout=packed", "turboquant_mse:bits=2", "layout=packed", 45 },
        { "kivi:residual=0;page=64", "kivi:residual=0,layout=rows;page=64", "layout=rows", 60 },
        { "kivi:bits=4,layout=rows;page=64", "kivi:bits=4;page=64", "layout=rows", 60 },
    };
    for (int i = 0; i < (int)(sizeof lay / sizeof lay[0]); i++) {
        vq_kv *w = vq_kv_create_str(lay[i].w, &D, 3, &e), *rd = vq_kv_create_str(lay[i].rd, &D, 3, &e);
        CHECKF(w && rd, "%s: %s", lay[i].rd, e.msg);
        if (!w || !rd) break;
        fill(w, &D, 0, lay[i].rows, seed0 + 5 + i / 2);
        mem t = { 0 };
        CHECK(vq_kv_state_write(w, mem_put, &t, &e) == VQ_OK);
        CHECKF(vq_kv_state_read(rd, t.p, t.n, -1, &e) == VQ_ERR_STATE && strstr(e.msg, "layout=lanes") &&
               strstr(e.msg, lay[i].old), "%s read by %s: %s", lay[i].w, lay[i].rd, e.msg);
        CHECK(vq_kv_rows(rd, 0) == 0);
        free(t.p);
        vq_kv_destroy(w);
        vq_kv_destroy(rd);
    }
    other = vq_kv_create_str(spec, &D, 4, &e);
    CHECK(vq_kv_state_read(other, m.p, m.n, -1, &e) == VQ_ERR_STATE && strstr(e.msg, "seed"));
    vq_kv_destroy(other);
    vq_kv_dims D2 = D;
    D2.n_kv_heads = 2;
    other = vq_kv_create_str(spec, &D2, 3, &e);
    CHECK(vq_kv_state_read(other, m.p, m.n, -1, &e) == VQ_ERR_STATE && strstr(e.msg, "kv heads"));
    vq_kv_destroy(other);
    D2 = D;
    D2.max_ctx = 40;   /* 45 rows do not fit */
    other = vq_kv_create_str(spec, &D2, 3, &e);
    CHECK(vq_kv_state_read(other, m.p, m.n, -1, &e) == VQ_ERR_STATE && strstr(e.msg, "max_ctx"));
    vq_kv_destroy(other);

    /* b holds 10 rows; each failed read must leave exactly those */
    vq_kv *b = vq_kv_create_str(spec, &D, 3, &e), *ref = vq_kv_create_str(spec, &D, 3, &e);
    fill(b, &D, 0, 10, seed0 + 9);
    fill(ref, &D, 0, 10, seed0 + 9);
    int bad_code = 0, bad_msg = 0, changed = 0;
    for (size_t len = 0; len < m.n; len++) {
        vq_status st = vq_kv_state_read(b, m.p, len, -1, &e);
        bad_code += st != VQ_ERR_FORMAT;
        bad_msg += !strstr(e.msg, "truncated");
    }
    changed += !same(b, ref, &D, 9);
    CHECKF(bad_code == 0 && bad_msg == 0, "truncations: %d not FORMAT, %d without 'truncated'", bad_code, bad_msg);
    uint8_t *x = malloc(m.n + 1);
    memcpy(x, m.p, m.n);
    x[m.n] = 0;
    CHECK(vq_kv_state_read(b, x, m.n + 1, -1, &e) == VQ_ERR_FORMAT && strstr(e.msg, "after the end"));
    CHECK(vq_kv_state_read(b, m.p, m.n, 44, &e) == VQ_ERR_FORMAT && strstr(e.msg, "session holds 44"));
    /* a position past vq_kv_append's range (INT32_MAX) is refused by name; the largest it takes
     * (INT32_MAX - 1) reads, and truncating such a cache works (fuzz_kv_state found the overflow) */
    {
        vq_kv *c = vq_kv_create_str(spec, &D, 3, &e);
        fill(c, &D, 0, 10, seed0 + 5);
        fill(c, &D, INT32_MAX - 1, 1, seed0 + 6);   /* the newest row: in the fp16 window */
        mem mc = { 0 };
        CHECK(vq_kv_state_write(c, mem_put, &mc, &e) == VQ_OK);
        CHECKF(vq_kv_state_read(b, mc.p, mc.n, -1, &e) == VQ_OK, "%s", e.msg);
        CHECK(vq_kv_truncate(b, 5) <= 5);
        int found = 0;
        for (size_t i = 0; i + 4 <= mc.n; i++) {   /* each layer's window holds the row once */
            int32_t p;
            memcpy(&p, mc.p + i, 4);
            if (p != INT32_MAX - 1) continue;
            found++;
            p = INT32_MAX;
            memcpy(mc.p + i, &p, 4);
            vq_status st = vq_kv_state_read(b, mc.p, mc.n, -1, &e);
            CHECKF(st == VQ_ERR_FORMAT && strstr(e.msg, "2^31-2"), "position INT32_MAX: %d %s", st, e.msg);
            p = INT32_MAX - 1;
            memcpy(mc.p + i, &p, 4);
        }
        CHECKF(found == D.n_layers, "the window position INT32_MAX - 1 appears %d times in the state", found);
        vq_kv_clear(b);
        fill(b, &D, 0, 10, seed0 + 9);
        free(mc.p);
        vq_kv_destroy(c);
    }
    /* every byte flipped in turn: a refusal or a cache that holds sane rows, never a crash */
    int ok = 0, refused = 0;
    for (size_t i = 0; i < m.n; i++) {
        memcpy(x, m.p, m.n);
        x[i] ^= 0x80;
        vq_status st = vq_kv_state_read(b, x, m.n, -1, &e);
        if (st) { refused++; changed += !same(b, ref, &D, 9); }
        else ok++;
        if (!st) {   /* put b back */
            vq_kv_clear(b);
            fill(b, &D, 0, 10, seed0 + 9);
        }
    }
    CHECKF(changed == 0, "%d failed reads changed the cache", changed);
    printf("flipped bytes: %d refused, %d read (code bytes are opaque)\n", refused, ok);
    free(x);
    free(m.p);
    vq_kv_destroy(a); vq_kv_destroy(b); vq_kv_destroy(ref);
}

int main(void) {
    if (getenv("VQ_TEST_SEED")) seed0 = strtoull(getenv("VQ_TEST_SEED"), NULL, 10);
    printf("seed %llu\n", (unsigned long long)seed0);
    const char *specs[] = { "f16", "f32", "q4_0:rotate=1;window=8", "turboquant_mse:k=4,v=4", "kivi",
                            "f16;sink=4", "turboquant_mse:k=4,v=4@0,-1=f16", "q4_0;window=4,sink=2,page=32",
                            "k=q8_0;v=q4_0;wprec=32,window=5,page=16", "q8_0:rotate=1",
                            "turboquant_mse:k=4,v=4;window=6,sink=3,wprec=8", "q4_0:rotate=1,layout=rows;window=16,wprec=8",
                            "k=q4_0:layout=rows;v=q8_0;page=16", "turboquant_mse:k=3,v=2;window=3",
                            "turboquant_mse:k=2,v=3,norm=f32;sink=2,page=32",
                            "turboquant_mse:bits=3,layout=packed", "kivi:k=3,v=4,residual=0",
                            "kvquant:k=3,v=4,outliers=0.02;sink=2",
                            "k=kvquant:bits=2,group=16,outliers=0.05;v=turboquant_mse:bits=3;window=5,page=32" };
    const int rows[] = { 0, 1, 3, 37, 70, 87 };
    for (size_t i = 0; i < VQ_ARRAY_LEN(specs); i++)
        for (size_t j = 0; j < VQ_ARRAY_LEN(rows); j++)
            round_trip(specs[i], rows[j]);
    refusals();
    calibrated();
    return vq_t_done();
}
