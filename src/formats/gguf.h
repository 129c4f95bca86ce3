/* gguf.h: a validating, zero-copy reader for GGUF v2/v3 model files.
 * The file is mapped read-only; strings, arrays and tensor data point into the mapping.
 * Every offset, size, count and dimension is checked before use: a truncated, corrupt or
 * hostile file yields VQ_ERR_FORMAT with a message naming the file and the field. */
#ifndef VQ_GGUF_H
#define VQ_GGUF_H
#include "core/core.h"

/* metadata value types, numbered as in the GGUF specification */
typedef enum vq_gguf_type {
    VQ_GGUF_UINT8 = 0, VQ_GGUF_INT8 = 1, VQ_GGUF_UINT16 = 2, VQ_GGUF_INT16 = 3,
    VQ_GGUF_UINT32 = 4, VQ_GGUF_INT32 = 5, VQ_GGUF_FLOAT32 = 6, VQ_GGUF_BOOL = 7,
    VQ_GGUF_STRING = 8, VQ_GGUF_ARRAY = 9, VQ_GGUF_UINT64 = 10, VQ_GGUF_INT64 = 11,
    VQ_GGUF_FLOAT64 = 12,
} vq_gguf_type;

typedef struct vq_str { const char *ptr; uint64_t len; } vq_str;   /* not NUL-terminated */

typedef struct vq_gguf_kv {
    vq_str key;
    vq_gguf_type type;
    /* scalars */
    union { uint64_t u; int64_t i; double f; int b; } val;   /* ints widened, floats as double */
    vq_str str;                    /* when type == STRING */
    /* arrays: elements of arr_type, arr_len of them; numeric data at arr_data (unaligned,
     * little-endian, packed); string arrays are read with vq_gguf_arr_str */
    vq_gguf_type arr_type;
    uint64_t arr_len;
    const uint8_t *arr_data;
    /* string arrays only: arr_len strings, indexed at open (vq_gguf_arr_str reads this) */
    const vq_str *arr_str;
    /* the entry's bytes as stored (key length through the end of the value), so that a writer
     * can copy it verbatim (the reservoir writer copies a model's metadata this way) */
    const uint8_t *raw;
    uint64_t raw_len;
} vq_gguf_kv;

typedef struct vq_gguf_tensor {
    vq_str name;
    uint32_t n_dims;
    uint64_t ne[4];          /* ne[0] is the contiguous (row) dimension, as in ggml; unused = 1 */
    uint32_t type;           /* ggml type id (kernels/wtype_ids.h names them) */
    uint64_t offset;         /* relative to the data section */
    uint64_t nbytes;
    const void *data;        /* into the mapping, aligned to the file's alignment */
} vq_gguf_tensor;

typedef struct vq_gguf vq_gguf;

/* Errors: VQ_ERR_IO (open/mmap), VQ_ERR_FORMAT (corrupt, truncated, inconsistent),
 * VQ_ERR_UNSUPPORTED (GGUF v1, big-endian files, a tensor type outside the layout table),
 * VQ_ERR_NOMEM. docs/formats.md lists every check. */
vq_gguf *vq_gguf_open(const char *path, vq_err *err);                   /* mmap a file */
vq_gguf *vq_gguf_open_mem(const void *buf, size_t len, const char *name, vq_err *err); /* borrow */
/* copy = 1: read the file into private anonymous memory instead of mapping it (the baseline of
 * the sharing measurement, as a loader that copies weights would hold them) */
vq_gguf *vq_gguf_open_ex(const char *path, int copy, vq_err *err);
void     vq_gguf_close(vq_gguf *g);

uint32_t vq_gguf_version(const vq_gguf *g);
uint64_t vq_gguf_n_kv(const vq_gguf *g);
const vq_gguf_kv *vq_gguf_kv_at(const vq_gguf *g, uint64_t i);
const vq_gguf_kv *vq_gguf_find(const vq_gguf *g, const char *key);    /* NULL when absent */
/* i-th string of a string array (caller checked kv->arr_type == STRING and i < arr_len;
 * otherwise an empty string is returned) */
vq_str vq_gguf_arr_str(const vq_gguf_kv *kv, uint64_t i);

/* typed getters: return 0 and fill *out, or a status with err naming the key (absent / wrong type).
 * Integer getters accept any integer type whose value fits. */
vq_status vq_gguf_get_u32(const vq_gguf *g, const char *key, uint32_t *out, vq_err *err);
vq_status vq_gguf_get_f32(const vq_gguf *g, const char *key, float *out, vq_err *err);
vq_status vq_gguf_get_str(const vq_gguf *g, const char *key, vq_str *out, vq_err *err);
vq_status vq_gguf_get_bool(const vq_gguf *g, const char *key, int *out, vq_err *err);

uint64_t vq_gguf_n_tensors(const vq_gguf *g);
const vq_gguf_tensor *vq_gguf_tensor_at(const vq_gguf *g, uint64_t i);
const vq_gguf_tensor *vq_gguf_find_tensor(const vq_gguf *g, const char *name);
const char *vq_gguf_path(const vq_gguf *g);

int vq_str_eq(vq_str s, const char *c);   /* 1 when equal */

/* ---- additions (additive; the declarations above keep their meaning) ---- */
/* Tensor types: every ggml type whose block layout we know is accepted by the reader (its nbytes
 * computed from the table); a type outside the table makes open fail with VQ_ERR_UNSUPPORTED.
 * Which types a layer can compute with is that layer's business. */
const char *vq_ggml_type_name(uint32_t type);                 /* "Q4_1"; NULL when unknown */
int vq_ggml_type_layout(uint32_t type, uint32_t *block, uint32_t *bytes); /* 1 when known */
const char *vq_gguf_type_name(vq_gguf_type t);               /* "uint32"; "?" when invalid */

/* Layouts of tensor types that are not ggml's (VeloxQuant's own weight types, which only a
 * reservoir file may hold: formats/reservoir.h). The caller (the model layer) answers from the
 * weight-type table; 1 when known. */
typedef int (*vq_gguf_layout_fn)(uint32_t type, uint32_t *block, uint32_t *bytes);

uint64_t vq_gguf_alignment(const vq_gguf *g);     /* general.alignment, default 32 */
uint64_t vq_gguf_data_offset(const vq_gguf *g);   /* file offset of the data section */
size_t   vq_gguf_size(const vq_gguf *g);          /* bytes of the file / buffer */

vq_status vq_gguf_get_u64(const vq_gguf *g, const char *key, uint64_t *out, vq_err *err);
/* array of elem type (VQ_GGUF_ARRAY: any nested array); err names key, type and length */
vq_status vq_gguf_get_arr(const vq_gguf *g, const char *key, vq_gguf_type elem,
                          const vq_gguf_kv **out, vq_err *err);
/* i-th element of a numeric array (caller checked i < arr_len): integers (and bool) widened,
 * floats as double; 0 when the array is not numeric or i is out of range */
int64_t  vq_gguf_arr_int(const vq_gguf_kv *kv, uint64_t i);
uint64_t vq_gguf_arr_uint(const vq_gguf_kv *kv, uint64_t i);
double   vq_gguf_arr_float(const vq_gguf_kv *kv, uint64_t i);
#endif
