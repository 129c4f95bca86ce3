/* test_wtypes_fixture.c: every quantized type's to_float against the `gguf` Python package's
 * numpy dequantize, bit for bit, on the random blocks of tests/fixtures/wtypes_gguf.bin (made by
 * tools/reference/make_wtype_fixtures.py; see tests/fixtures/README.md). Also: vq_get_row on the
 * same bytes, and that every type in the fixture is in the table and has a product. */
#include "kernels/kernels_impl.h"
#include "../vq_test.h"

static uint32_t u32le(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

int main(void) {
    const char *path = VQ_SOURCE_DIR "/tests/fixtures/wtypes_gguf.bin";
    vq_err err;
    size_t len = 0;
    uint8_t *buf = (uint8_t *)vq_read_file(path, &len, &err);
    CHECKF(buf != NULL, "cannot read %s: %s", path, err.msg);
    if (!buf) return vq_t_done();
    CHECK(len >= 12 && memcmp(buf, "VQWTFIX1", 8) == 0);
    uint32_t count = u32le(buf + 8);
    size_t at = 12;
    int seen = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (at + 12 > len) { CHECKF(0, "record %u truncated", i); break; }
        uint32_t type = u32le(buf + at), n = u32le(buf + at + 4), nb = u32le(buf + at + 8);
        at += 12;
        if (at + nb + (size_t)n * 4 > len) { CHECKF(0, "record %u (type %u) truncated", i, type); break; }
        const uint8_t *blocks = buf + at, *want = buf + at + nb;
        at += nb + (size_t)n * 4;
        const vq_wtype *t = vq_wtype_get(type);
        CHECKF(t != NULL, "type %u of the fixture is not in the table", type);
        if (!t) continue;
        CHECKF(vq_wtype_row_bytes(type, n) == nb, "%s: %u elements should be %u bytes, table says %zu",
               t->name, n, nb, vq_wtype_row_bytes(type, n));
        CHECKF(vq_matmul_supported(type, t->block), "%s: no product", t->name);
        float *got = malloc((size_t)n * 4);
        t->to_float(blocks, got, n);
        int bad = 0, first = -1;
        for (uint32_t j = 0; j < n; j++) {
            uint32_t a, b;
            memcpy(&a, got + j, 4);
            b = u32le(want + 4 * j);
            if (a != b) { bad++; if (first < 0) first = (int)j; }
        }
        if (bad) {
            float w; uint32_t wb = u32le(want + 4 * first); memcpy(&w, &wb, 4);
            CHECKF(0, "%s: %d of %u floats differ from gguf-py (first at %d: got %.9g, want %.9g)",
                   t->name, bad, n, first, got[first], w);
        } else {
            CHECK(1);
        }
        /* vq_get_row: the fixture read as rows of one block */
        int rows = (int)(n / (uint32_t)t->block), r = rows - 1;
        vq_get_row(blocks, type, t->block, r, got);
        CHECKF(memcmp(got, want + 4 * (size_t)r * t->block, (size_t)t->block * 4) == 0, "%s: vq_get_row", t->name);
        printf("%-7s %u elements: %s\n", t->name, n, bad ? "DIFFER" : "bit-exact");
        free(got);
        seen++;
    }
    CHECK(seen == 12 && at == len);
    free(buf);
    return vq_t_done();
}
