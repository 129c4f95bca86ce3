/* device.c: the table of device rows (backend/ops.h "devices"). The CUDA row is in it whether or
 * not this build has CUDA (VQ_HAVE_CUDA, set by CMake with VQ_CUDA on): without it the row keeps
 * its name and the reason, so `--device cuda` is refused by name, never run on the CPU instead. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "backend/ops.h"
#include "core/core.h"

#ifdef VQ_HAVE_CUDA
extern const vq_device vq_device_cuda;   /* backend/cuda/cuda_row.cu */
#else
static const vq_device vq_device_cuda = {
    .name = "cuda",
    .store_spec = "f16",   /* what any store holds; codes where the row's store_check says */
    .why = "this build has no CUDA backend (configured with VQ_CUDA=OFF, or VQ_CUDA=AUTO found no nvcc; "
           "docs/cuda.md)",
};
#endif

static const vq_device *const rows[] = { &vq_device_cuda };

vq_status vq_device_parse(const char *text, const vq_device **dev, int *index, vq_err *err) {
    *dev = NULL;
    *index = 0;
    if (!text || !*text || !strcmp(text, "cpu") || !strcmp(text, "none")) return VQ_OK;
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const vq_device *d = rows[r];
        const size_t n = strlen(d->name);
        if (strncasecmp(text, d->name, n)) continue;
        const char *p = text + n;
        if (*p == ':') p++;
        else if (*p && !isdigit((unsigned char)*p)) continue;
        if (!*p && p[-1] == ':') break;
        long ix = 0;
        if (*p) {
            char *end = NULL;
            if (!isdigit((unsigned char)*p)) break;
            ix = strtol(p, &end, 10);
            if (*end || ix > 1024) break;
        }
        *dev = d;
        *index = (int)ix;
        return VQ_OK;
    }
    return vq_err_set(err, VQ_ERR_ARG, "device '%s': not a device (cpu, cuda or cuda:N)", text);
}

vq_status vq_device_find(const char *text, const vq_device **dev, int *index, vq_err *err) {
    vq_status st = vq_device_parse(text, dev, index, err);
    const vq_device *d = *dev;
    if (st || !d) return st;
    *dev = NULL;
    if (!d->ops) return vq_err_set(err, VQ_ERR_UNSUPPORTED, "device %s: %s", text, d->why);
    char why[256] = "";
    const int have = d->count(why, sizeof why);
    if (have == 0) return vq_err_set(err, VQ_ERR_UNSUPPORTED, "device %s: no %s device is usable here: %s", text, d->name, why);
    if (*index >= have)
        return vq_err_set(err, VQ_ERR_ARG, "device %s: this machine has %d %s device%s (%s:0..%d)", text, have, d->name,
                          have == 1 ? "" : "s", d->name, have - 1);
    *dev = d;
    return VQ_OK;
}
