/* test_session_api.c: a parsed spec's byte count is the cache's own accounting (a session filled
 * to n_ctx holds exactly vq_kv_spec_bytes); the diagnostics of a session's cache (rows, pages,
 * codec per layer and side) agree with what was fed; bad arguments get messages. stories260K. */
#include "../vq_test.h"
#include "veloxquant.h"

static void check_spec(vq_model *m, const char *text, int n_ctx) {
    vq_err err;
    vq_kv_spec *spec = vq_kv_spec_parse(text, &err);
    CHECKF(spec != NULL, "%s: %s", text, err.msg);
    if (!spec) return;
    size_t want = 0;
    CHECKF(vq_kv_spec_bytes(spec, m, n_ctx, &want, &err) == VQ_OK, "%s: %s", text, err.msg);
    vq_session_params sp = vq_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_batch = 7;
    vq_session *s = vq_session_create(m, spec, &sp, &err);
    CHECKF(s != NULL, "%s: %s", text, err.msg);
    if (!s) { vq_kv_spec_free(spec); return; }
    int tok[4096];
    for (int i = 0; i < n_ctx; i++) tok[i] = 1 + (i * 37) % (vq_model_n_vocab(m) - 1);
    /* part-filled: vq_kv_spec_bytes_at(n_ctx, rows) is what the session holds at each fill */
    int fed = 0;
    for (int rows = 1; rows < n_ctx; rows = rows * 3 + 1) {
        CHECKF(vq_session_decode(s, tok + fed, rows - fed, NULL, 0, &err) == VQ_OK, "%s: %s", text, err.msg);
        fed = rows;
        size_t at = 0;
        CHECKF(vq_kv_spec_bytes_at(spec, m, n_ctx, rows, &at, &err) == VQ_OK, "%s: %s", text, err.msg);
        CHECKF(vq_session_kv_bytes(s) == at, "%s: after %d of %d rows held %zu != vq_kv_spec_bytes_at %zu",
               text, rows, n_ctx, vq_session_kv_bytes(s), at);
    }
    CHECKF(vq_session_decode(s, tok + fed, n_ctx - fed, NULL, 0, &err) == VQ_OK, "%s: %s", text, err.msg);
    size_t held = vq_session_kv_bytes(s);
    printf("%-36s n_ctx %4d: spec bytes %zu, held after %d rows %zu, %.3f bits/elem\n", text, n_ctx, want, n_ctx,
           held, vq_session_kv_bits(s));
    CHECKF(held == want, "%s: held %zu != vq_kv_spec_bytes %zu", text, held, want);
    CHECK(vq_session_pos(s) == n_ctx);
    for (int l = 0; l < vq_model_n_layers(m); l++) CHECK(vq_session_kv_rows(s, l) == n_ctx);
    CHECK(vq_session_kv_pages(s, 0) >= 0 && vq_session_kv_page_rows(s) > 0 && vq_session_kv_page_bytes(s) > 0);
    CHECK(vq_session_kv_rows(s, -1) == 0 && vq_session_kv_rows(s, vq_model_n_layers(m)) == 0);
    char buf[256];
    const char *k = vq_session_kv_codec(s, 0, 0, buf, sizeof buf);
    CHECKF(k[0] != 0, "%s: no codec name for layer 0 K", text);
    CHECK(vq_session_kv_codec(s, 99, 0, buf, sizeof buf)[0] == 0);
    /* the session is full: one more token is a range error naming the positions, nothing run */
    CHECK(vq_session_decode(s, tok, 1, NULL, 0, &err) == VQ_ERR_RANGE && strstr(err.msg, "positions"));
    CHECK(vq_session_pos(s) == n_ctx);
    vq_session_free(s);
    vq_kv_spec_free(spec);
}

int main(void) {
    char mp[1024], tp[1024];
    vq_t_shared("data/stories260K.bin", mp, sizeof mp);
    vq_t_shared("data/tok512.bin", tp, sizeof tp);
    vq_err err;
    vq_model_params mpar = vq_model_default_params();
    mpar.tokenizer_path = tp;
    vq_model *m = vq_model_load(mp, &mpar, &err);
    CHECKF(m != NULL, "%s", err.msg);
    if (!m) return vq_t_done();
    check_spec(m, "f16", 64);
    check_spec(m, "f32;window=8", 100);
    check_spec(m, "turboquant_mse:k=4,v=4", 96);
    check_spec(m, "turboquant_mse:k=3,v=2;sink=4,window=5", 77);
    check_spec(m, "qjl@0=f16", 50);
    check_spec(m, "f16;page=16", 300);
    /* bad arguments */
    vq_kv_spec *f16 = vq_kv_spec_parse("f16", &err);
    size_t b;
    CHECK(vq_kv_spec_bytes(f16, m, 0, &b, &err) == VQ_ERR_ARG && strstr(err.msg, "out of range"));
    CHECK(vq_kv_spec_bytes(NULL, m, 8, &b, &err) == VQ_ERR_ARG);
    CHECK(vq_kv_spec_bytes_at(f16, m, 8, 9, &b, &err) == VQ_ERR_ARG && strstr(err.msg, "outside 0..8"));
    CHECK(vq_kv_spec_bytes_at(f16, m, 8, -1, &b, &err) == VQ_ERR_ARG);
    size_t b8 = 0, b8_8 = 0;
    CHECK(vq_kv_spec_bytes(f16, m, 8, &b8, &err) == VQ_OK && vq_kv_spec_bytes_at(f16, m, 8, 8, &b8_8, &err) == VQ_OK);
    CHECK(b8 == b8_8);
    vq_kv_spec_free(f16);
    vq_model_free(m);
    return vq_t_done();
}
