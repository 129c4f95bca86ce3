/* codec_params.h: the codec tests' parser of "key=value,key=value" into vq_codec_param (at most
 * max pairs; tokens without '=' skipped). The library's own spec parser (kv_spec.c) reads whole
 * KV specs; the tests hand single codecs their parameters. */
#ifndef VQ_TEST_CODEC_PARAMS_H
#define VQ_TEST_CODEC_PARAMS_H
#include <stdio.h>
#include <string.h>
#include "codec/codec.h"

static inline int vq_t_codec_params(const char *s, vq_codec_param *p, int max) {
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok && n < max; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = 0;
        snprintf(p[n].key, sizeof p[n].key, "%s", tok);
        snprintf(p[n].val, sizeof p[n].val, "%s", eq + 1);
        n++;
    }
    return n;
}
#endif
