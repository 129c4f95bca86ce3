/* test_session_numeric.c: a model whose weights hold NaN makes decoding fail with VQ_ERR_NUMERIC
 * (never garbage tokens, never a "bad argument" from the cache the NaN would reach). A copy of
 * stories260K.bin is written to a temp file with one NaN patched in:
 *   - in layer 0's attention norm: every K/V row is NaN, caught in the forward before the cache;
 *   - in the final norm: the K/V rows stay finite and the logits are NaN, caught by the session.
 * The unpatched copy decodes fine (the control). */
#include <unistd.h>
#include "veloxquant.h"
#include "model/model.h"   /* where the weights lie in the file: offsets of the mapped tensors */
#include "../vq_test.h"

static const char *spec_text = "f16";

/* decode "Once upon a time"-like tokens from a model file; returns the status */
static vq_status decode_file(const char *path, const char *tok, vq_err *e) {
    vq_model_params mp = vq_model_default_params();
    mp.tokenizer_path = tok;
    vq_model *m = vq_model_load(path, &mp, e);
    if (!m) return e->code;
    vq_kv_spec *sp = vq_kv_spec_parse(spec_text, e);
    vq_session_params p = vq_session_default_params();
    p.n_ctx = 64;
    vq_session *s = sp ? vq_session_create(m, sp, &p, e) : NULL;
    vq_status st = e->code;
    if (s) {
        int toks[4] = { 1, 403, 407, 261 };
        float *logits = malloc(sizeof(float) * (size_t)vq_model_n_vocab(m));
        st = vq_session_decode(s, toks, 4, logits, 0, e);
        if (st == VQ_OK) st = vq_session_decode(s, toks + 1, 1, logits, 0, e);   /* one more step */
        free(logits);
    }
    vq_session_free(s);
    vq_kv_spec_free(sp);
    vq_model_free(m);
    return st;
}

/* write a copy of data (len bytes) with a NaN at byte offset off (off < 0: unpatched) */
static int write_copy(const char *path, const unsigned char *data, size_t len, long off) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(data, 1, len, f) == len;
    if (ok && off >= 0) {
        float nan = NAN;
        ok = fseek(f, off, SEEK_SET) == 0 && fwrite(&nan, sizeof nan, 1, f) == 1;
    }
    return fclose(f) == 0 && ok;
}

int main(void) {
    char mp[1024], tp[1024];
    vq_t_shared("data/stories260K.bin", mp, sizeof mp);
    vq_t_shared("data/tok512.bin", tp, sizeof tp);
    vq_err e;
    size_t len;
    unsigned char *data = (unsigned char *)vq_read_file(mp, &len, &e);
    CHECKF(data != NULL, "read %s: %s", mp, e.msg);
    if (!data) return vq_t_done();
    /* offsets of layer 0's attention norm and of the final norm: from the loaded model's pointers
     * into the mapping (llama2.c: the weights start right after the 28-byte header) */
    vq_model *m = vq_model_open(mp, tp, &e);
    CHECKF(m != NULL, "load: %s", e.msg);
    if (!m) { free(data); return vq_t_done(); }
    const char *base = (const char *)m->tok_embd.data - 28;
    long off_att = (long)((const char *)m->layers[0].attn_norm - base);
    long off_fin = (long)((const char *)m->out_norm - base);
    vq_model_free(m);
    CHECKF(off_att > 28 && off_fin > off_att && (size_t)off_fin + 4 <= len, "offsets %ld, %ld of %zu", off_att,
           off_fin, len);

    char dir[64] = "/tmp/vq_session_numeric.XXXXXX", path[128];
    if (!mkdtemp(dir)) VQ_SKIP("cannot make a temp directory in /tmp");
    snprintf(path, sizeof path, "%s/nan.bin", dir);
    const long offs[3] = { -1, off_att, off_fin };
    const char *what[3] = { "unpatched copy", "NaN in layer 0's attention norm", "NaN in the final norm" };
    for (int i = 0; i < 3; i++) {
        CHECKF(write_copy(path, data, len, offs[i]), "write %s", path);
        vq_err_clear(&e);
        vq_status st = decode_file(path, tp, &e);
        printf("%s: %s%s%s\n", what[i], vq_status_name(st), st ? ": " : "", st ? e.msg : "");
        if (i == 0) CHECKF(st == VQ_OK, "%s: %s", what[i], e.msg);
        else CHECKF(st == VQ_ERR_NUMERIC && strstr(e.msg, "non-finite"), "%s: want VQ_ERR_NUMERIC, got %s: %s",
                    what[i], vq_status_name(st), e.msg);
    }
    CHECK(strstr(vq_status_name(VQ_ERR_NUMERIC), "non-finite") != NULL);
    unlink(path);
    rmdir(dir);
    free(data);
    return vq_t_done();
}
