/* fuzz_reservoir.c: libFuzzer entry for the reservoir reader (formats/reservoir.h). The first
 * input byte picks the mode: even, the rest is opened as it is (the header, the checksums and the
 * alignment rules must refuse it, saying why); odd, every checksum is recomputed first, so that
 * mutations get past the CRCs into the GGUF body's parser and the layout checks. An accepted file
 * has everything it hands out touched (ASan sees any pointer that escapes the buffer), every tensor
 * page-aligned and inside the buffer, and its type in the layout tables.
 * Seeds: run with VQ_FUZZ_WRITE_SEEDS=DIR and the target writes small valid reservoirs there. */
#include "formats/reservoir.h"
#include "model/model.h"
#include "../formats/gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile uint64_t sink;
static void touch(const void *p, uint64_t n) {
    if (!n) return;
    const volatile uint8_t *b = p;
    sink += b[0] + b[n - 1];
}

static void write_seeds(const char *dir) {
    for (int nt = 0; nt <= TW_NT; nt += 3) {
        tw_opts o = { 3, 0, 0, nt };
        tw_layout L;
        tw_buf b = tw_build(&o, &L);
        vq_gguf *g = vq_gguf_open_mem(b.p, b.n, "seed", NULL);
        if (!g) abort();
        vq_res_tensor t[TW_NT];
        for (int i = 0; i < nt; i++) {
            const vq_gguf_tensor *s = vq_gguf_tensor_at(g, (uint64_t)i);
            t[i] = (vq_res_tensor){ TW_T[i].name, s->n_dims, {s->ne[0], s->ne[1], s->ne[2], s->ne[3]}, s->type,
                                    s->data, s->nbytes };
        }
        char path[1024];
        snprintf(path, sizeof path, "%s/tmp.vqr", dir);
        if (vq_reservoir_write(path, g, NULL, 0, t, (uint64_t)nt, NULL, NULL)) abort();
        vq_gguf_close(g);
        free(b.p);
        FILE *f = fopen(path, "rb");
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *p = malloc((size_t)n + 1);
        if (fread(p + 1, 1, (size_t)n, f) != (size_t)n) abort();
        fclose(f);
        remove(path);
        for (int mode = 0; mode < 2; mode++) {
            p[0] = (uint8_t)mode;
            snprintf(path, sizeof path, "%s/seed_t%d_m%d", dir, nt, mode);
            FILE *o2 = fopen(path, "wb");
            if (!o2 || fwrite(p, 1, (size_t)n + 1, o2) != (size_t)n + 1 || fclose(o2)) abort();
        }
        free(p);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *d = getenv("VQ_FUZZ_WRITE_SEEDS");
    if (d && *d) { write_seeds(d); exit(0); }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t n = size - 1;
    uint8_t *buf = malloc(n ? n : 1);   /* exactly n bytes, so ASan sees a read past the end */
    if (n) memcpy(buf, data + 1, n);
    vq_gguf_layout_fn lay = vq_model_layouts();
    if (data[0] & 1) vq_reservoir_fix_checksums(buf, n, lay);
    vq_err err;
    vq_gguf *g = vq_reservoir_open_mem(buf, n, "fuzz", lay, &err);
    if (!g) {
        if (err.code == VQ_OK || strncmp(err.msg, "fuzz: ", 6) != 0) abort();   /* failures must say why */
        free(buf);
        return 0;
    }
    for (uint64_t i = 0; i < vq_gguf_n_kv(g); i++) {
        const vq_gguf_kv *kv = vq_gguf_kv_at(g, i);
        touch(kv->key.ptr, kv->key.len);
        touch(kv->raw, kv->raw_len);
        if (kv->type == VQ_GGUF_STRING) touch(kv->str.ptr, kv->str.len);
        if (kv->type == VQ_GGUF_ARRAY && kv->arr_type == VQ_GGUF_STRING)
            for (uint64_t j = 0; j < kv->arr_len; j++) { vq_str e = vq_gguf_arr_str(kv, j); touch(e.ptr, e.len); }
    }
    for (uint64_t i = 0; i < vq_gguf_n_tensors(g); i++) {
        const vq_gguf_tensor *t = vq_gguf_tensor_at(g, i);
        touch(t->name.ptr, t->name.len);
        touch(t->data, t->nbytes);
        if ((const uint8_t *)t->data < buf || (const uint8_t *)t->data + t->nbytes > buf + n) abort();
        if (((const uint8_t *)t->data - buf) % VQ_RESERVOIR_PAGE) abort();   /* page-aligned in the file */
        uint32_t blk, by;
        if (!vq_ggml_type_layout(t->type, &blk, &by) && !lay(t->type, &blk, &by)) abort();
    }
    vq_gguf_close(g);
    free(buf);
    return 0;
}
