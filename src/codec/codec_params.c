/* codec_params.c: parameter helpers shared by codec rows: lookup, the unknown-key check and
 * integer parsing with a range, all with messages that name the codec, key, value and range. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codec/codec.h"

const char *vq_codec_param_get(const vq_codec_param *p, int np, const char *key) {
    for (int i = 0; i < np; i++)
        if (strcmp(p[i].key, key) == 0) return p[i].val;
    return NULL;
}

vq_status vq_codec_params_check(const vq_codec *c, const vq_codec_param *p, int np,
                                const char *allowed, vq_err *err) {
    for (int i = 0; i < np; i++) {
        size_t kl = strlen(p[i].key);
        const char *a = allowed;
        int ok = 0;
        while (a && *a) {
            const char *e = strchr(a, ',');
            size_t l = e ? (size_t)(e - a) : strlen(a);
            if (l == kl && kl > 0 && strncmp(a, p[i].key, l) == 0) { ok = 1; break; }
            a = e ? e + 1 : NULL;
        }
        if (!ok)
            return vq_err_set(err, VQ_ERR_ARG, "codec %s: unknown parameter '%s'; allowed: %s",
                              c->name, p[i].key, c->params_help[0] ? c->params_help : "(none)");
    }
    return VQ_OK;
}

vq_status vq_codec_param_int(const vq_codec *c, const vq_codec_param *p, int np, const char *key,
                             int lo, int hi, int def, int *out, vq_err *err) {
    const char *v = vq_codec_param_get(p, np, key);
    if (!v) { *out = def; return VQ_OK; }
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return vq_err_set(err, VQ_ERR_ARG, "codec %s: %s=%s is not an integer in %d..%d (%s)",
                          c->name, key, v, lo, hi, c->params_help);
    *out = (int)x;
    return VQ_OK;
}
