/* test_calib.c: the calibration file (codec/calib.c): a serialize/parse round trip is exact; the
 * file written atomically reads back the same; every single flipped byte and every truncation is
 * refused with VQ_ERR_FORMAT (the two CRC-32s cover every byte); a non-finite or negative second
 * moment is refused even with valid CRCs; a missing file, a directory and a model of other dims
 * are clear errors naming what was wrong. Version 4 (the low-rank bases): the round trip is
 * exact, a version 3 file still reads (has_lowrank 0) and writes back its own bytes, a negative
 * eigenvalue or NaN basis entry with valid CRCs is refused naming the array, versions 2 and 5
 * are refused naming the versions this build reads. */
#include <sys/stat.h>
#include <zlib.h>
#include "codec/calib.h"
#include "../vq_test.h"
#include "../calib_fixture.h"

static void put_crc(uint8_t *buf, size_t len) {
    uint32_t bc = (uint32_t)crc32(0, buf + 128, (uInt)(len - 4 - 128));
    memcpy(buf + len - 4, &bc, 4);
}

/* version 4: the low-rank arrays */
static void check_v4(vq_rng *rng) {
    vq_calib c, r;
    vq_err err;
    vq_t_calib_make(&c, 2, 4, 2, 8, rng);
    uint8_t *buf, *buf2;
    size_t len, len2;
    CHECK(c.has_lowrank && vq_calib_serialize(&c, &buf, &len, &err) == VQ_OK);
    CHECK(len == vq_calib_file_bytes(&c));
    uint32_t ver;
    memcpy(&ver, buf + 8, 4);
    CHECK(ver == 4);
    CHECK(vq_calib_parse(buf, len, &r, &err) == VQ_OK && r.has_lowrank == 1);
    CHECK(memcmp(r.k_basis, c.k_basis, sizeof(float) * 2 * 2 * 64) == 0 && memcmp(r.v_eig, c.v_eig, sizeof(float) * 2 * 2 * 8) == 0);
    CHECK(vq_calib_serialize(&r, &buf2, &len2, &err) == VQ_OK && len2 == len && memcmp(buf, buf2, len) == 0);
    free(buf2);
    vq_calib_free(&r);
    /* the last array is v_basis: its last float, then v_eig's first (before k_basis... order: k_eig,
     * k_basis, v_eig, v_basis) */
    const size_t vb = len - 4 - 4 * (size_t)2 * 2 * 64, ve = vb - 4 * (size_t)2 * 2 * 8;
    float nan = NAN, neg = -1.0f, keep;
    memcpy(&keep, buf + vb, 4);
    memcpy(buf + vb, &nan, 4);
    put_crc(buf, len);
    CHECK(vq_calib_parse(buf, len, &r, &err) == VQ_ERR_FORMAT);
    CHECKF(strstr(err.msg, "v_basis[0]") != NULL, "message: %s", err.msg);
    memcpy(buf + vb, &keep, 4);
    memcpy(buf + ve, &neg, 4);
    put_crc(buf, len);
    CHECK(vq_calib_parse(buf, len, &r, &err) == VQ_ERR_FORMAT);
    CHECKF(strstr(err.msg, "v_eig[0]") != NULL, "message: %s", err.msg);
    for (uint32_t v = 2; v <= 6; v += 4) {   /* other versions: refused naming what this build reads */
        memcpy(buf + 8, &v, 4);
        uint32_t hc = (uint32_t)crc32(0, buf, 124);
        memcpy(buf + 124, &hc, 4);
        CHECK(vq_calib_parse(buf, len, &r, &err) == VQ_ERR_FORMAT);
        CHECKF(strstr(err.msg, "versions 3..5") != NULL, "message: %s", err.msg);
    }
    {   /* version 5 promises a VecInfer section after the version 4 bytes: without it, refused */
        uint32_t v = 5;
        memcpy(buf + 8, &v, 4);
        uint32_t hc = (uint32_t)crc32(0, buf, 124);
        memcpy(buf + 124, &hc, 4);
        CHECK(vq_calib_parse(buf, len, &r, &err) == VQ_ERR_FORMAT);
        CHECKF(strstr(err.msg, "VecInfer") != NULL, "message: %s", err.msg);
    }
    free(buf);
    /* version 3: no low-rank arrays; reads back as such, writes its own bytes */
    c.has_lowrank = 0;
    CHECK(vq_calib_serialize(&c, &buf, &len, &err) == VQ_OK);
    memcpy(&ver, buf + 8, 4);
    CHECK(ver == 3 && len == vq_calib_file_bytes(&c));
    CHECK(vq_calib_parse(buf, len, &r, &err) == VQ_OK && r.has_lowrank == 0 && r.k_basis == NULL);
    CHECK(vq_calib_serialize(&r, &buf2, &len2, &err) == VQ_OK && len2 == len && memcmp(buf, buf2, len) == 0);
    free(buf2);
    free(buf);
    vq_calib_free(&r);
    c.has_lowrank = 1;
    vq_calib_free(&c);
}

static void fill(vq_calib *c, vq_rng *rng) {
    memset(c, 0, sizeof *c);
    snprintf(c->model, sizeof c->model, "test-model");
    c->config_hash = vq_calib_config_hash("arch=test layers=3");
    c->n_layers = 3; c->n_heads = 4; c->n_kv_heads = 2; c->head_dim = 8; c->rope_dim = 8;
    c->n_tokens = 1234;
    if (vq_calib_alloc(c, NULL)) { fprintf(stderr, "alloc failed\n"); exit(1); }
    size_t kv = 3 * 2, q = 3 * 4;
    for (size_t i = 0; i < kv * 4; i++) c->pair_energy[i] = (float)vq_rng_uniform(rng);
    for (size_t i = 0; i < kv * 8; i++) {
        c->k_mean[i] = (float)vq_rng_uniform(rng) - 0.5f;
        c->k_sq[i] = (float)vq_rng_uniform(rng);
        c->v_sq[i] = (float)vq_rng_uniform(rng);
        c->q_filter[i] = (float)vq_rng_uniform(rng) - 0.5f;
    }
    for (size_t i = 0; i < q * 8; i++) {
        c->q_mean[i] = (float)vq_rng_uniform(rng) - 0.5f;
        c->q_sq[i] = (float)vq_rng_uniform(rng);
    }
    for (int l = 0; l < 3; l++) c->attn_cos[l] = (float)(2.0 * vq_rng_uniform(rng) - 1.0);
}

static int same(const vq_calib *a, const vq_calib *b) {
    size_t kv = (size_t)a->n_layers * a->n_kv_heads * a->head_dim, q = (size_t)a->n_layers * a->n_heads * a->head_dim;
    return !strcmp(a->model, b->model) && a->config_hash == b->config_hash && a->n_layers == b->n_layers &&
           a->n_heads == b->n_heads && a->n_kv_heads == b->n_kv_heads && a->head_dim == b->head_dim &&
           a->rope_dim == b->rope_dim && a->rope_neox == b->rope_neox && a->n_tokens == b->n_tokens &&
           !memcmp(a->pair_energy, b->pair_energy, kv / 2 * 4) && !memcmp(a->k_mean, b->k_mean, kv * 4) &&
           !memcmp(a->k_sq, b->k_sq, kv * 4) && !memcmp(a->v_sq, b->v_sq, kv * 4) &&
           !memcmp(a->q_mean, b->q_mean, q * 4) && !memcmp(a->q_sq, b->q_sq, q * 4) &&
           !memcmp(a->q_filter, b->q_filter, kv * 4) && !memcmp(a->attn_cos, b->attn_cos, (size_t)a->n_layers * 4);
}

int main(void) {
    vq_rng rng;
    vq_rng_seed(&rng, vq_t_seed(777));
    vq_calib c, r;
    fill(&c, &rng);
    uint8_t *buf;
    size_t len;
    vq_err err;
    CHECK(vq_calib_serialize(&c, &buf, &len, &err) == VQ_OK);
    CHECK(len == vq_calib_file_bytes(&c));
    CHECK(vq_calib_parse(buf, len, &r, &err) == VQ_OK);
    CHECK(same(&c, &r));
    vq_calib_free(&r);

    /* every flipped byte, every truncation: refused as a format error */
    int flip_ok = 0, trunc_ok = 0, other = 0;
    for (size_t i = 0; i < len; i++) {
        buf[i] ^= 0x5A;
        vq_status s = vq_calib_parse(buf, len, &r, &err);
        if (s == VQ_OK) { flip_ok++; vq_calib_free(&r); }
        else if (s != VQ_ERR_FORMAT) other++;
        buf[i] ^= 0x5A;
    }
    for (size_t n = 0; n < len; n++) {
        vq_status s = vq_calib_parse(buf, n, &r, &err);
        if (s == VQ_OK) { trunc_ok++; vq_calib_free(&r); }
        else if (s != VQ_ERR_FORMAT) other++;
    }
    CHECKF(flip_ok == 0, "%d flipped bytes accepted", flip_ok);
    CHECKF(trunc_ok == 0, "%d truncations accepted", trunc_ok);
    CHECKF(other == 0, "%d errors were not VQ_ERR_FORMAT", other);
    /* a longer file is refused too */
    uint8_t *longer = calloc(1, len + 1);
    memcpy(longer, buf, len);
    CHECK(vq_calib_parse(longer, len + 1, &r, &err) == VQ_ERR_FORMAT);
    free(longer);

    /* a NaN statistic with CRCs made valid: still refused, naming the array */
    float nan = NAN;
    memcpy(buf + 128 + 4 * 3, &nan, 4);   /* pair_energy[3] */
    uint32_t bc = (uint32_t)crc32(0, buf + 128, (uInt)(len - 4 - 128));
    memcpy(buf + len - 4, &bc, 4);
    CHECK(vq_calib_parse(buf, len, &r, &err) == VQ_ERR_FORMAT);
    CHECKF(strstr(err.msg, "pair_energy[3]") != NULL, "message: %s", err.msg);
    float neg = -1.0f;
    memcpy(buf + 128 + 4 * 3, &neg, 4);
    bc = (uint32_t)crc32(0, buf + 128, (uInt)(len - 4 - 128));
    memcpy(buf + len - 4, &bc, 4);
    CHECK(vq_calib_parse(buf, len, &r, &err) == VQ_ERR_FORMAT);
    /* a layer cosine outside -1..1 (attn_cos, the last array) with the CRC made valid: refused */
    float over = 1.5f, fine = 1.0f;
    memcpy(buf + 128 + 4 * 3, &fine, 4);   /* pair_energy[3] valid again */
    memcpy(buf + len - 4 - 4, &over, 4);   /* attn_cos[2] */
    bc = (uint32_t)crc32(0, buf + 128, (uInt)(len - 4 - 128));
    memcpy(buf + len - 4, &bc, 4);
    CHECKF(vq_calib_parse(buf, len, &r, &err) == VQ_ERR_FORMAT && strstr(err.msg, "attn_cos[2]"), "%s", err.msg);
    memcpy(buf + len - 4 - 4, &c.attn_cos[2], 4);
    /* a byte after the model name's NUL with the header CRC made valid: refused (the writer pads
     * with NULs, so such a file would not read back to its own bytes; fuzz_calib found it) */
    float one = 1.0f;
    memcpy(buf + 128 + 4 * 3, &one, 4);
    bc = (uint32_t)crc32(0, buf + 128, (uInt)(len - 4 - 128));
    memcpy(buf + len - 4, &bc, 4);
    CHECK(vq_calib_parse(buf, len, &r, &err) == VQ_OK);
    vq_calib_free(&r);
    buf[16 + 63 - 1] = 8;
    uint32_t hc = (uint32_t)crc32(0, buf, 124);
    memcpy(buf + 124, &hc, 4);
    CHECK(vq_calib_parse(buf, len, &r, &err) == VQ_ERR_FORMAT);
    CHECKF(strstr(err.msg, "NUL-padded") != NULL, "message: %s", err.msg);
    buf[16 + 63 - 1] = 0;
    /* n_tokens 0 and 2^64-1 with the header CRC made valid: refused naming the field (issue 31) */
    const uint64_t bad_n[2] = { 0, UINT64_MAX };
    for (int k = 0; k < 2; k++) {
        memcpy(buf + 112, &bad_n[k], 8);
        hc = (uint32_t)crc32(0, buf, 124);
        memcpy(buf + 124, &hc, 4);
        CHECKF(vq_calib_parse(buf, len, &r, &err) == VQ_ERR_FORMAT && strstr(err.msg, "n_tokens"),
               "n_tokens %llu: %s", (unsigned long long)bad_n[k], err.msg);
    }
    /* rope_dim 0 in a file consistent with it (no pair energies, both CRCs valid): refused */
    {
        vq_calib z = c;
        z.rope_dim = 0;
        size_t zl = vq_calib_file_bytes(&z), n_pair = len - zl;   /* pair_energy is the first array */
        uint8_t *zb = malloc(zl);
        memcpy(zb, buf, 128);
        memcpy(zb + 128, buf + 128 + n_pair, zl - 128 - 4);
        uint32_t zero = 0;
        memcpy(zb + 104, &zero, 4);
        uint64_t nt = 1234;
        memcpy(zb + 112, &nt, 8);
        hc = (uint32_t)crc32(0, zb, 124);
        memcpy(zb + 124, &hc, 4);
        bc = (uint32_t)crc32(0, zb + 128, (uInt)(zl - 4 - 128));
        memcpy(zb + zl - 4, &bc, 4);
        CHECKF(vq_calib_parse(zb, zl, &r, &err) == VQ_ERR_FORMAT, "rope_dim 0: %s", err.msg);
        free(zb);
    }
    free(buf);

    /* files: atomic write, read back, errors */
    char dir[] = "/tmp/vq_calib_testXXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/c.vqc", dir);
    CHECK(vq_calib_write(&c, path, &err) == VQ_OK);
    CHECK(vq_calib_read(path, &r, &err) == VQ_OK);
    CHECK(same(&c, &r));
    vq_calib_free(&r);
    CHECK(vq_calib_write(&c, path, &err) == VQ_OK);   /* replaces a regular file */
    CHECK(vq_calib_write(&c, dir, &err) == VQ_ERR_IO);   /* never over a directory */
    CHECK(vq_calib_read(dir, &r, &err) != VQ_OK);
    CHECKF(strstr(err.msg, "directory") != NULL, "message: %s", err.msg);
    char missing[300];
    snprintf(missing, sizeof missing, "%s/none.vqc", dir);
    CHECK(vq_calib_read(missing, &r, &err) == VQ_ERR_IO);
    CHECKF(strstr(err.msg, "none.vqc") != NULL, "message: %s", err.msg);

    /* the model check: dims, name, hash */
    CHECK(vq_calib_check(&c, path, 3, 4, 2, 8, "test-model", c.config_hash, &err) == VQ_OK);
    CHECK(vq_calib_check(&c, path, 3, 4, 2, 8, NULL, 0, &err) == VQ_OK);
    CHECK(vq_calib_check(&c, path, 3, 4, 2, 16, NULL, 0, &err) == VQ_ERR_STATE);
    CHECKF(strstr(err.msg, "head_dim") != NULL, "message: %s", err.msg);
    CHECK(vq_calib_check(&c, path, 30, 4, 2, 8, NULL, 0, &err) == VQ_ERR_STATE);
    CHECKF(strstr(err.msg, "layers") != NULL, "message: %s", err.msg);
    CHECK(vq_calib_check(&c, path, 3, 4, 1, 8, NULL, 0, &err) == VQ_ERR_STATE);
    CHECK(vq_calib_check(&c, path, 3, 4, 2, 8, "other", 0, &err) == VQ_ERR_STATE);
    CHECK(vq_calib_check(&c, path, 3, 4, 2, 8, NULL, c.config_hash ^ 1, &err) == VQ_ERR_STATE);
    CHECKF(strstr(err.msg, "config hash") != NULL, "message: %s", err.msg);
    unlink(path);
    rmdir(dir);
    vq_calib_free(&c);
    check_v4(&rng);
    return vq_t_done();
}
