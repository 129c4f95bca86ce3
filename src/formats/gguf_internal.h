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
    const uint8_t *map_base;    /* when mapped: the whole mapping (base may lie inside it) */
    uint64_t map_size;
    vq_gguf_layout_fn extra_layout;   /* types beyond ggml's (reservoir bodies only), or NULL */
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
/* Parse a GGUF body at map + off (len bytes) inside a read-only mapping of map_size bytes.
 * own = 1: on success the handle owns the mapping (vq_gguf_close unmaps it); on failure NULL,
 * and the mapping stays the caller's. own = 0: borrowed. extra: non-ggml types' layouts, or NULL. */
vq_gguf *vq_gguf_parse_mapped(const uint8_t *map, uint64_t map_size, uint64_t off, uint64_t len,
                              const char *name, vq_gguf_layout_fn extra, int own, vq_err *err);
/* Map a regular file read-only (copy = 0), or read it into private anonymous memory (copy = 1);
 * the file must have at least min bytes (too_short names what it is too short for). NULL with
 * err set on failure. munmap((void *)p, *size) frees either. */
const uint8_t *vq_gguf_map_file(const char *path, int copy, uint64_t min, const char *too_short,
                                uint64_t *size, vq_err *err);
const char *vq_gguf_show(vq_str s, char *buf, size_t n);   /* escaped, bounded, for messages */
#endif
