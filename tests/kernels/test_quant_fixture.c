/* test_quant_fixture.c: from_float of Q8_0 / Q4_0 / Q4_1 against the `gguf` Python package's numpy
 * quantizer, byte for byte, on the rows of tests/fixtures/quant_gguf.bin (made by
 * tools/reference/make_quant_fixtures.py; see tests/fixtures/README.md). */
#include "kernels/kernels_impl.h"
#include "../vq_test.h"

static uint32_t u32le(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

int main(void) {
    const char *path = VQ_SOURCE_DIR "/tests/fixtures/quant_gguf.bin";
    vq_err err;
    size_t len = 0;
    uint8_t *buf = (uint8_t *)vq_read_file(path, &len, &err);
    CHECKF(buf != NULL, "cannot read %s: %s", path, err.msg);
    if (!buf) return vq_t_done();
    CHECK(len >= 12 && memcmp(buf, "VQQFIX01", 8) == 0);
    uint32_t count = u32le(buf + 8);
    size_t at = 12;
    int seen = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (at + 12 > len) { CHECKF(0, "record %u truncated", i); break; }
        uint32_t type = u32le(buf + at), n = u32le(buf + at + 4), nb = u32le(buf + at + 8);
        at += 12;
        if (at + (size_t)n * 4 + nb > len) { CHECKF(0, "record %u (type %u) truncated", i, type); break; }
        float *x = malloc((size_t)n * 4);
        for (uint32_t j = 0; j < n; j++) { uint32_t u = u32le(buf + at + 4 * j); memcpy(x + j, &u, 4); }
        const uint8_t *want = buf + at + (size_t)n * 4;
        at += (size_t)n * 4 + nb;
        const vq_wtype *t = vq_wtype_get(type);
        CHECKF(t && t->from_float, "type %u: not in the table or no from_float", type);
        if (!t || !t->from_float) { free(x); continue; }
        CHECK(vq_wtype_row_bytes(type, n) == nb);
        uint8_t *got = malloc(nb);
        t->from_float(x, got, n);
        int bad = 0, first = -1;
        for (uint32_t j = 0; j < nb; j++)
            if (got[j] != want[j]) { bad++; if (first < 0) first = (int)j; }
        CHECKF(bad == 0, "%s: %d of %u bytes differ from gguf-py's quantize (first at byte %d, block %d)",
               t->name, bad, nb, first, first < 0 ? -1 : first / (int)t->block_bytes);
        seen++;
        free(got); free(x);
    }
    CHECKF(seen == 3, "the fixture should hold Q8_0, Q4_0 and Q4_1, held %d records", seen);
    free(buf);
    return vq_t_done();
}
