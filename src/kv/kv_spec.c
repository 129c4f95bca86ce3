/* kv_spec.c: parses cache spec strings ("f16", "turboquant_mse:k=4,v=3,window=64",
 * "k=turboquant_mse:bits=4;v=q8_0") into one codec + parameters per side plus the store's keys.
 * The grammar is documented in kv.h and docs/kv-spec.md; errors list every codec and parameter. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kv/kv_impl.h"

static const char *STORE_HELP =
    "store keys (any codec): window=0..1048576 (full-precision recent rows), sink=0..65536 "
    "(full-precision first rows: positions < sink, the attention sink), wprec=16|32 (window and "
    "sink precision, default 16), page=1..65536 (rows per page, default 256)";

/* Every codec with its parameters, then the store keys (for CLIs and docs). */
size_t vq_kv_spec_help(char *buf, size_t n) {
    size_t o = 0;
    if (n) buf[0] = 0;
    for (int i = 0; vq_codec_at(i); i++) {
        const vq_codec *c = vq_codec_at(i);
        int w = snprintf(buf + VQ_MIN(o, n), n > o ? n - o : 0, "%s: %s\n", c->name, c->params_help);
        if (w > 0) o += (size_t)w;
    }
    int w = snprintf(buf + VQ_MIN(o, n), n > o ? n - o : 0, "%s\n", STORE_HELP);
    if (w > 0) o += (size_t)w;
    return o;   /* length needed (snprintf style) */
}

/* Errors name the problem, every codec, and the store keys; a codec's own parameter list comes
 * with errors about that codec (its init), the full list from vq_kv_spec_help(). */
static vq_status spec_err(vq_err *err, const char *spec, const char *what) {
    char names[300];
    size_t o = 0;
    names[0] = 0;
    for (int i = 0; vq_codec_at(i) && o < sizeof names; i++) {
        int w = snprintf(names + o, sizeof names - o, "%s%s", i ? ", " : "", vq_codec_at(i)->name);
        if (w > 0) o += (size_t)w;
    }
    return vq_err_set(err, VQ_ERR_ARG, "kv spec '%.80s': %s. Codecs: %s. Store keys: window=R, "
                      "sink=S, wprec=16|32, page=N. Grammar: codec[:key=val,...][;k=codec:..;v=codec:..] "
                      "(docs/kv-spec.md; parameters of every codec: vq_kv_spec_help)", spec, what, names);
}

static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end = NULL;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi) return 0;
    *out = (int)x;
    return 1;
}

static int is_store_key(const char *k) {
    return !strcmp(k, "window") || !strcmp(k, "sink") || !strcmp(k, "wprec") || !strcmp(k, "page");
}

static vq_status add_param(vq_kv_parsed *o, int side, const char *key, const char *val,
                           const char *spec, vq_err *err) {
    if (o->np[side] >= VQ_KV_MAX_PARAMS) return spec_err(err, spec, "too many parameters");
    for (int i = 0; i < o->np[side]; i++)
        if (!strcmp(o->p[side][i].key, key)) {
            char m[160];
            snprintf(m, sizeof m, "parameter '%s' given twice for the %s side", key,
                     side == VQ_SIDE_K ? "K" : "V");
            return spec_err(err, spec, m);
        }
    vq_codec_param *p = &o->p[side][o->np[side]++];
    snprintf(p->key, sizeof p->key, "%s", key);
    snprintf(p->val, sizeof p->val, "%s", val);
    return VQ_OK;
}

static vq_status store_key(vq_kv_parsed *o, const char *key, const char *val, const char *spec,
                           vq_err *err) {
    char m[200];
    int x = 0;
    if (!strcmp(key, "window")) {
        if (!parse_int(val, 0, 1048576, &x)) goto bad;
        if (o->window >= 0 && o->window != x) goto twice;
        o->window = x;
    } else if (!strcmp(key, "sink")) {
        if (!parse_int(val, 0, 65536, &x)) goto bad;
        o->sink = x;
    } else if (!strcmp(key, "wprec")) {
        if (!parse_int(val, 16, 32, &x) || (x != 16 && x != 32)) goto bad;
        o->wprec = x;
    } else {
        if (!parse_int(val, 1, 65536, &x)) goto bad;
        o->page = x;
    }
    return VQ_OK;
bad:
    snprintf(m, sizeof m, "%s=%s is out of range or not an integer (%s)", key, val,
             !strcmp(key, "window") ? "0..1048576" : !strcmp(key, "sink") ? "0..65536"
             : !strcmp(key, "wprec") ? "16 or 32" : "1..65536");
    return spec_err(err, spec, m);
twice:
    snprintf(m, sizeof m, "window given twice with different values");
    return spec_err(err, spec, m);
}

/* One part: [k=|v=]codec[:key=val,...] or a store-only part key=val,... (sides: -1 both) */
static vq_status parse_part(char *part, vq_kv_parsed *o, int *seen, const char *spec, vq_err *err) {
    char m[200];
    while (isspace((unsigned char)*part)) part++;
    int side = -1;
    if ((part[0] == 'k' || part[0] == 'v' || part[0] == 'K' || part[0] == 'V') && part[1] == '=') {
        side = (part[0] == 'k' || part[0] == 'K') ? VQ_SIDE_K : VQ_SIDE_V;
        part += 2;
    }
    char *colon = strchr(part, ':');
    char *eq = strchr(part, '=');
    char *params = NULL;
    if (side < 0 && eq && (!colon || eq < colon)) {
        params = part;                        /* store-only part */
    } else {
        if (colon) { *colon = 0; params = colon + 1; }
        const vq_codec *c = vq_codec_find(part);
        if (!c) {
            snprintf(m, sizeof m, "unknown codec '%s'", part);
            return spec_err(err, spec, m);
        }
        for (int s = 0; s < 2; s++) {
            if (side >= 0 && s != side) continue;
            if (seen[s]) {
                snprintf(m, sizeof m, "the %s side is given a codec twice", s ? "V" : "K");
                return spec_err(err, spec, m);
            }
            seen[s] = 1;
            o->codec[s] = c;
        }
        if (side < 0) side = 2;   /* params apply to both */
    }
    if (!params) return VQ_OK;
    char *save = NULL;
    for (char *kv = strtok_r(params, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*kv)) kv++;
        if (!*kv) continue;
        char *e = strchr(kv, '=');
        if (!e || e == kv || !e[1]) {
            snprintf(m, sizeof m, "'%s' is not key=value", kv);
            return spec_err(err, spec, m);
        }
        *e = 0;
        const char *key = kv, *val = e + 1;
        vq_status st;
        if (is_store_key(key)) {
            st = store_key(o, key, val, spec, err);
        } else if (side == -1) {
            snprintf(m, sizeof m, "'%s' is not a store key (window, sink, wprec, page) and no codec precedes it", key);
            return spec_err(err, spec, m);
        } else if (side == 2 && (!strcmp(key, "k") || !strcmp(key, "v"))) {
            int s = key[0] == 'k' ? VQ_SIDE_K : VQ_SIDE_V;
            if (o->side_bits[s]) {
                snprintf(m, sizeof m, "'%s=' given twice", key);
                return spec_err(err, spec, m);
            }
            o->side_bits[s] = 1;
            st = VQ_OK;
            for (int i = 0; i < o->np[s]; i++)   /* overrides an earlier bits= */
                if (!strcmp(o->p[s][i].key, "bits")) {
                    snprintf(o->p[s][i].val, sizeof o->p[s][i].val, "%s", val);
                    st = (vq_status)-1;
                }
            st = st == VQ_OK ? add_param(o, s, "bits", val, spec, err) : VQ_OK;
        } else if (side == 2 && !strcmp(key, "bits")) {
            /* bits= for both sides; an explicit k=/v= (added before or after) wins */
            st = VQ_OK;
            for (int s = 0; s < 2 && !st; s++)
                if (!vq_codec_param_get(o->p[s], o->np[s], "bits"))
                    st = add_param(o, s, "bits", val, spec, err);
        } else if (side == 2) {
            st = add_param(o, VQ_SIDE_K, key, val, spec, err);
            if (!st) st = add_param(o, VQ_SIDE_V, key, val, spec, err);
        } else {
            if (!strcmp(key, "k") || !strcmp(key, "v")) {
                snprintf(m, sizeof m, "'%s=' inside a per-side part: use bits=", key);
                return spec_err(err, spec, m);
            }
            st = add_param(o, side, key, val, spec, err);
        }
        if (st) return st;
    }
    return VQ_OK;
}

vq_status vq_kv_spec_parse(const char *spec, vq_kv_parsed *o, vq_err *err) {
    memset(o, 0, sizeof *o);
    o->window = -1;
    o->wprec = 16;
    o->page = 256;
    if (!spec || !*spec) return spec_err(err, spec ? spec : "(null)", "empty spec");
    char buf[512];
    if (strlen(spec) >= sizeof buf) return spec_err(err, "(too long)", "spec longer than 511 characters");
    snprintf(buf, sizeof buf, "%s", spec);
    int seen[2] = {0, 0};
    char *save = NULL;
    for (char *part = strtok_r(buf, ";", &save); part; part = strtok_r(NULL, ";", &save)) {
        vq_status st = parse_part(part, o, seen, spec, err);
        if (st) return st;
    }
    if (!seen[0] || !seen[1])
        return spec_err(err, spec, !seen[0] && !seen[1] ? "no codec named"
                                   : !seen[0] ? "no codec for the K side (k=...)"
                                              : "no codec for the V side (v=...)");
    return VQ_OK;
}
