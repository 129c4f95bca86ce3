/* reservoir.h: VeloxQuant's own model file, made by `veloxquant quantize` (docs/reservoir-format.md).
 * A 4096-byte header page, then a GGUF v3 body whose tensor data are page-aligned, so that every
 * tensor is used straight from a read-only mapping: no copy, no repacking at load, and K
 * processes that map one file share its pages. The header and the metadata carry CRC-32s (of
 * the header, of the body's metadata and tensor infos, and of every tensor), all checked at open.
 * The body may hold VeloxQuant's own weight types (layouts from the caller's table). */
#ifndef VQ_RESERVOIR_H
#define VQ_RESERVOIR_H
#include "formats/gguf.h"

#define VQ_RESERVOIR_MAGIC "VQRESRV\n"     /* 8 bytes */
#define VQ_RESERVOIR_VERSION 1u
#define VQ_RESERVOIR_PAGE 4096u            /* header size, body offset and tensor alignment */

/* 1 when the first bytes (n of them) are a reservoir's magic */
int vq_reservoir_sniff(const void *p, size_t n);

/* Map and check a reservoir file; returns its body as a GGUF handle (metadata, tensors pointing
 * into the mapping), which vq_gguf_close frees. Errors: VQ_ERR_IO, VQ_ERR_FORMAT (bad magic,
 * truncated, a checksum that does not match, a misaligned tensor: the message names it),
 * VQ_ERR_UNSUPPORTED (another version). copy = 1: read the file into anonymous memory instead
 * of mapping it (the baseline of the sharing measurement: every process holds its own copy). */
vq_gguf *vq_reservoir_open(const char *path, vq_gguf_layout_fn extra, int copy, vq_err *err);
/* The same checks on a buffer (the fuzz target); the buffer is borrowed, not freed. */
vq_gguf *vq_reservoir_open_mem(const void *buf, size_t len, const char *name, vq_gguf_layout_fn extra,
                               vq_err *err);
/* Recompute the header's and the metadata's checksums and the tensor CRC array of a buffer in
 * place (for the fuzz target, so that mutations reach the body's parser); 0 when done. */
int vq_reservoir_fix_checksums(void *buf, size_t len, vq_gguf_layout_fn extra);

/* ---- writing ---- */
typedef struct vq_res_tensor {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
    const void *data;
    uint64_t nbytes;          /* as the type's layout gives for ne */
} vq_res_tensor;

/* A string kv the writer adds to the copied metadata. */
typedef struct vq_res_kv { const char *key, *value; } vq_res_kv;

/* Write a reservoir atomically (temp file beside path, fsync, rename, fsync of the folder): the
 * metadata of src copied entry by entry (general.alignment and veloxquant.reservoir.* replaced),
 * the extra string kvs, then the tensors in the given order. src may be NULL (no metadata).
 * Returns the file's size in *bytes when non-NULL. */
vq_status vq_reservoir_write(const char *path, const vq_gguf *src, const vq_res_kv *extra, int n_extra,
                             const vq_res_tensor *t, uint64_t n_t, uint64_t *bytes, vq_err *err);
#endif
