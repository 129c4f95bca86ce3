/* gguf_internal.h: the vq_gguf handle as gguf.c (parsing) and gguf_access.c (lookups, getters)
 * share it. Not for other layers: they use gguf.h. */
#ifndef VQ_GGUF_INTERNAL_H
#define VQ_GGUF_INTERNAL_H
#include "formats/gguf.h"

typedef struct vq_gguf_index { uint64_t *slot; uint64_t mask; } vq_gguf_index;  /* slot = item+1, 0 empty */

struct vq_gguf {
    char *name;                 /* path or buffer name, for messages */
    const uint8_t *base;        /* the mapping or the caller's buffer */
    uint64_t size;
    int mapped;
    uint32_t version;
    uint64_t alignment, data_off;
    uint64_t n_kv, n_tensors;
    vq_gguf_kv *kvs;
    vq_gguf_tensor *tensors;
    vq_gguf_index kv_index, t_index;
};

uint64_t vq_gguf_hash(const char *p, uint64_t len);
int64_t vq_gguf_index_find(const vq_gguf_index *ix, const char *name,
                           const vq_str *(*name_of)(const void *, uint64_t), const void *items);
const vq_str *vq_gguf_kv_name(const void *items, uint64_t i);
const vq_str *vq_gguf_tensor_name(const void *items, uint64_t i);
const char *vq_gguf_show(vq_str s, char *buf, size_t n);   /* escaped, bounded, for messages */
#endif
