/* fuzz_gguf.c: libFuzzer entry for the GGUF reader. Parses the input as a GGUF buffer and, when
 * it opens, touches everything the reader hands out (keys, strings, array elements, first and last
 * byte of every tensor), so ASan sees any pointer or length that escapes the buffer. */
#include "formats/gguf.h"

#include <stdlib.h>
#include <string.h>

static volatile uint64_t sink;

static void touch(const void *p, uint64_t n) {
    if (!n) return;
    const volatile uint8_t *b = p;
    sink += b[0] + b[n - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    vq_err err;
    vq_gguf *g = vq_gguf_open_mem(data, size, "fuzz", &err);
    if (!g) {
        if (err.code == VQ_OK || strncmp(err.msg, "fuzz: ", 6) != 0) abort();   /* failures must say why */
        return 0;
    }
    for (uint64_t i = 0; i < vq_gguf_n_kv(g); i++) {
        const vq_gguf_kv *kv = vq_gguf_kv_at(g, i);
        touch(kv->key.ptr, kv->key.len);
        char *key = malloc(kv->key.len + 1);
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = 0;
        const vq_gguf_kv *found = vq_gguf_find(g, key);
        if (found != kv && strlen(key) == kv->key.len) abort();   /* every key finds itself */
        uint32_t u32; uint64_t u64; float f; int b; vq_str s; const vq_gguf_kv *arr;
        vq_gguf_get_u32(g, key, &u32, &err);
        vq_gguf_get_u64(g, key, &u64, &err);
        vq_gguf_get_f32(g, key, &f, &err);
        vq_gguf_get_bool(g, key, &b, &err);
        if (vq_gguf_get_str(g, key, &s, &err) == VQ_OK) touch(s.ptr, s.len);
        vq_gguf_get_arr(g, key, VQ_GGUF_STRING, &arr, &err);
        free(key);
        if (kv->type == VQ_GGUF_STRING) touch(kv->str.ptr, kv->str.len);
        if (kv->type != VQ_GGUF_ARRAY) continue;
        for (uint64_t j = 0; j < kv->arr_len; j++) {
            if (kv->arr_type == VQ_GGUF_STRING) {
                vq_str e = vq_gguf_arr_str(kv, j);
                touch(e.ptr, e.len);
            } else if (kv->arr_type != VQ_GGUF_ARRAY) {
                sink += (uint64_t)vq_gguf_arr_int(kv, j) + vq_gguf_arr_uint(kv, j) + (vq_gguf_arr_float(kv, j) > 0);
            }
        }
    }
    for (uint64_t i = 0; i < vq_gguf_n_tensors(g); i++) {
        const vq_gguf_tensor *t = vq_gguf_tensor_at(g, i);
        touch(t->name.ptr, t->name.len);
        touch(t->data, t->nbytes);
        if ((const uint8_t *)t->data < data || (const uint8_t *)t->data + t->nbytes > data + size) abort();
        uint64_t nel = 1;
        for (int d = 0; d < 4; d++) {
            if (t->ne[d] == 0) abort();
            nel *= t->ne[d];
        }
        uint32_t blk, by;
        if (!vq_ggml_type_layout(t->type, &blk, &by) || nel / blk * by != t->nbytes) abort();
    }
    vq_gguf_close(g);
    return 0;
}
