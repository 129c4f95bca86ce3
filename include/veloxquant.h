/* veloxquant.h: the public API of libveloxquant.
 *
 * Stable part: status codes, model loading, tokenization, generation, the KV cache boundary.
 * Experimental part (below the fence): may change between versions. */
#ifndef VELOXQUANT_H
#define VELOXQUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VQ_VERSION_MAJOR 0
#define VQ_VERSION_MINOR 1
#define VQ_VERSION_PATCH 0

typedef enum vq_status {
    VQ_OK = 0,
    VQ_ERR_IO,          /* a file could not be opened, read or mapped */
    VQ_ERR_FORMAT,      /* a file's contents are corrupt, truncated or inconsistent */
    VQ_ERR_UNSUPPORTED, /* valid input we do not handle (tensor type, architecture) */
    VQ_ERR_ARG,         /* a bad argument: unknown name, out-of-range value, malformed spec */
    VQ_ERR_NOMEM,       /* an allocation failed */
    VQ_ERR_RANGE,       /* a size limit was hit (e.g. prompt longer than the context) */
} vq_status;

const char *vq_status_name(vq_status s);

#ifdef __cplusplus
}
#endif
#endif
