/* kv_spec.c: parses cache spec strings ("f16", "turboquant_mse:k=4,v=3,window=64",
 * "k=turboquant_mse:bits=4;v=q8_0") into one codec + parameters per side plus the store's keys.
 * The grammar is documented in kv.h and docs/kv-spec.md; errors list every codec and parameter. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kv/kv_impl.h"
#include "codec/calib.h"

static const char *STORE_HELP =
    "store keys (any codec): window=0..1048576 (full-precision recent rows), sink=0..65536 "
    "(full-precision first rows: positions < sink, the attention sink), wprec=8|16|32 (window and "
    "sink precision, default 16; 8: q8_0 blocks of 32, 8.5 bits, head_dim % 32 == 0), page=1..65536 (rows per page, default 256), calib=FILE (a "
    "calibration file of `veloxquant calibrate`, for codecs that use one, e.g. tq_split; the "
    "path may not contain ',', ';' or '@'); kmean=0|1 (keys coded about the calibration's mean key: "
    "exact for attention, needs calib=), kscale=0..1 (keys scaled per channel by (query energy / key "
    "variance)^A before coding, queries by the inverse: 0.25 is the optimum for rotated codecs; needs "
    "calib=); with evict=: demote=CODEC[:params] re-codes the rows an "
    "eviction step drops with that codec instead of dropping them (k=B,v=B inside it set its bits, "
    "e.g. demote=turboquant_mse:k=2,v=2)";

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
                      "sink=S, wprec=8|16|32, page=N, calib=FILE, kmean=0|1, kscale=0..1; eviction: evict=POLICY,budget=B[,sinks=,recent=,every=,...][;demote=CODEC[:params]]. Grammar: codec[:key=val,...][;k=codec:..;v=codec:..] "
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

/* ---- the eviction keys: declared by the policy tables (kv_policy.c), parsed here ---- */
static int key_index(const vq_pol_key *keys, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (!strcmp(key, keys[i].name)) return i;
    return -1;
}
static int is_evict_key(const char *key) {
    return key_index(vq_pol_keys, VQ_PK_N, key) >= 0 || key_index(vq_alloc_keys, VQ_AK_N, key) >= 0;
}

static int num(const char *s, double lo, double hi, double *out) {
    char *end = NULL;
    double x = strtod(s, &end);
    if (end == s || *end || !isfinite(x) || x < lo || x > hi) return 0;
    *out = x;
    return 1;
}
static int inum(const char *s, int lo, int hi, int *out) {
    double x;
    if (!num(s, lo, hi, &x) || x != floor(x) || strchr(s, '.') || strchr(s, 'e') || strchr(s, 'E')) return 0;
    *out = (int)x;
    return 1;
}

/* where a policy key's value goes */
static int *ikey(vq_evict_cfg *ev, int i) {
    return i == VQ_PK_SINKS ? &ev->sinks : i == VQ_PK_RECENT ? &ev->recent : i == VQ_PK_EVERY ? &ev->every
         : i == VQ_PK_OBS ? &ev->obs : i == VQ_PK_POOL ? &ev->pool : i == VQ_PK_CHUNK ? &ev->chunk
         : i == VQ_PK_POOLFN ? &ev->poolfn : i == VQ_PK_NORM ? &ev->norm : i == VQ_PK_VNORM ? &ev->vnorm : NULL;
}
static double *rkey(vq_evict_cfg *ev, int i) {
    return i == VQ_PK_SLOPE ? &ev->slope : i == VQ_PK_TAU ? &ev->tau : i == VQ_PK_SQUEEZE ? &ev->squeeze
         : i == VQ_PK_BETA ? &ev->beta : NULL;
}

/* a mode key's value ('m': one of the names of k->range, "max|avg") -> its index, -1: none */
static int mode_index(const vq_pol_key *k, const char *val) {
    const char *r = k->range;
    for (int i = 0; *r; i++) {
        const char *e = strchr(r, '|');
        const size_t n = e ? (size_t)(e - r) : strlen(r);
        if (strlen(val) == n && !strncmp(r, val, n)) return i;
        if (!e) break;
        r = e + 1;
    }
    return -1;
}
/* the name of a mode key's value i (into out) */
static const char *mode_name(const vq_pol_key *k, int i, char *out, size_t cap) {
    const char *r = k->range;
    for (int j = 0; j < i && r; j++) { r = strchr(r, '|'); if (r) r++; }
    if (!r) r = "?";
    const char *e = strchr(r, '|');
    snprintf(out, cap, "%.*s", (int)(e ? (size_t)(e - r) : strlen(r)), r);
    return out;
}

/* the rows of the policy table that declare optional key i: "snapkv, pyramidkv" */
static void key_owners(int i, char *out, size_t cap) {
    size_t o = 0;
    out[0] = 0;
    for (int p = 0; vq_kv_policy_at(p) && o < cap; p++)
        if (vq_kv_policy_at(p)->keys & (1u << i)) {
            int w = snprintf(out + o, cap - o, "%s%s", o ? ", " : "", vq_kv_policy_at(p)->name);
            if (w > 0) o += (size_t)w;
        }
}

/* an allocator key (heads=, floor=) */
static vq_status alloc_key(vq_evict_cfg *ev, int i, const char *val, char *msg, size_t cap) {
    const vq_pol_key *k = &vq_alloc_keys[i];
    const unsigned bit = 1u << i;
    if (ev->ada_seen & bit) { snprintf(msg, cap, "eviction key '%s' given twice", k->name); return VQ_ERR_ARG; }
    ev->ada_seen |= bit;
    if (k->kind == 'a') {
        ev->alloc = vq_kv_alloc_find(val);
        if (!ev->alloc) {
            snprintf(msg, cap, "heads=%s is neither ada (rows per KV head, budgets allocated across a "
                     "layer's heads) nor shared (the default: a row is kept for every head or none)", val);
            return VQ_ERR_ARG;
        }
        return VQ_OK;
    }
    if (!num(val, k->lo, k->hi, &ev->floor)) {   /* floor=, the one other allocator key */
        snprintf(msg, cap, "%s=%s is out of range (%s)", k->name, val, k->range);
        return VQ_ERR_ARG;
    }
    return VQ_OK;
}

static vq_status evict_key(vq_evict_cfg *ev, const char *key, const char *val, char *msg, size_t cap) {
    const int a = key_index(vq_alloc_keys, VQ_AK_N, key);
    if (a >= 0) return alloc_key(ev, a, val, msg, cap);
    const int i = key_index(vq_pol_keys, VQ_PK_N, key);
    if (i < 0) { snprintf(msg, cap, "'%s' is not an eviction key", key); return VQ_ERR_ARG; }
    if (ev->seen & (1u << i)) { snprintf(msg, cap, "eviction key '%s' given twice", key); return VQ_ERR_ARG; }
    ev->seen |= 1u << i;
    const vq_pol_key *k = &vq_pol_keys[i];
    double x = 0;
    int ok = 1;
    switch (k->kind) {
    case 'p':
        ev->pol = vq_kv_policy_find(val);
        if (!ev->pol) {
            char names[200];
            size_t o = 0;
            names[0] = 0;
            for (int p = 0; vq_kv_policy_at(p) && o < sizeof names; p++) {
                int w = snprintf(names + o, sizeof names - o, "%s%s", p ? ", " : "", vq_kv_policy_at(p)->name);
                if (w > 0) o += (size_t)w;
            }
            snprintf(msg, cap, "unknown eviction policy '%s' (policies: %s)", val, names);
            return VQ_ERR_ARG;
        }
        break;
    case 'b':   /* an integer: rows; with a '.' (or below 1): a ratio of the positions seen */
        if (strchr(val, '.') || strchr(val, 'e') || strchr(val, 'E')) {
            ok = num(val, 1e-6, 1.0, &x);
            ev->budget_ratio = 1;
        } else {
            int t = 0;
            ok = inum(val, (int)k->lo, (int)k->hi, &t);
            x = t;
            ev->budget_ratio = 0;
        }
        ev->budget = x;
        if (!ok) {
            snprintf(msg, cap, "budget=%s is neither a row count (1..16777216) nor a ratio "
                     "(0 < r <= 1, written with a '.', e.g. 0.5)", val);
            return VQ_ERR_ARG;
        }
        break;
    case 'i': ok = inum(val, (int)k->lo, (int)k->hi, ikey(ev, i)); break;
    case 'o': ok = inum(val, (int)k->lo, (int)k->hi, ikey(ev, i)) && (*ikey(ev, i) & 1); break;
    case 'r': ok = num(val, k->lo, k->hi, rkey(ev, i)); break;
    case 'm': ok = (*ikey(ev, i) = mode_index(k, val)) >= 0; break;
    }
    if (!ok) {
        snprintf(msg, cap, "%s=%s is out of range (%s)", key, val, k->range);
        return VQ_ERR_ARG;
    }
    return VQ_OK;
}

/* after every key of a part: defaults, and keys that need evict= or another policy */
static vq_status evict_check(vq_evict_cfg *ev, char *msg, size_t cap) {
    if (!ev->seen && !ev->ada_seen) return VQ_OK;
    if (!ev->pol) {
        snprintf(msg, cap, "eviction keys (budget=, sinks=, recent=, every=, ...) need evict=POLICY");
        return VQ_ERR_ARG;
    }
    if (!(ev->seen & (1u << VQ_PK_BUDGET))) {
        snprintf(msg, cap, "evict=%s needs budget= (rows per layer, e.g. budget=512, or a ratio of "
                 "the positions seen, e.g. budget=0.5)", ev->pol->name);
        return VQ_ERR_ARG;
    }
    for (int i = VQ_PK_OBS; i < VQ_PK_N; i++)   /* the optional keys: only the rows that declare them */
        if ((ev->seen & (1u << i)) && !(ev->pol->keys & (1u << i))) {
            char who[120];
            key_owners(i, who, sizeof who);
            snprintf(msg, cap, "%s= does not apply to evict=%s (only to %s)", vq_pol_keys[i].name, ev->pol->name, who);
            return VQ_ERR_ARG;
        }
    for (int i = VQ_PK_SINKS; i < VQ_PK_N; i++)
        if (!(ev->seen & (1u << i))) {
            if (ikey(ev, i)) *ikey(ev, i) = (int)vq_pol_keys[i].def;
            else *rkey(ev, i) = vq_pol_keys[i].def;
        }
    if (!ev->alloc) ev->alloc = vq_kv_alloc_at(0);   /* heads=shared */
    if ((ev->ada_seen & (1u << VQ_AK_FLOOR)) && !(ev->alloc->keys & (1u << VQ_AK_FLOOR))) {
        snprintf(msg, cap, "floor= applies only with heads=ada (the per-head budgets' safeguard)");
        return VQ_ERR_ARG;
    }
    if (!(ev->ada_seen & (1u << VQ_AK_FLOOR))) ev->floor = vq_alloc_keys[VQ_AK_FLOOR].def;   /* AdaKV's alpha */
    return VQ_OK;
}

/* ";evict=..." as the normalized spec writes it (every key a reparse needs, in table order) */
static int evict_print(const vq_evict_cfg *ev, char *out, size_t cap) {
    if (!ev->pol) { if (cap) out[0] = 0; return 0; }
    char b[40];
    if (ev->budget_ratio) snprintf(b, sizeof b, "%.6g", ev->budget);
    else snprintf(b, sizeof b, "%d", (int)ev->budget);
    if (ev->budget_ratio && !strchr(b, '.')) snprintf(b, sizeof b, "%.1f", ev->budget);
    int o = snprintf(out, cap, ";evict=%s,budget=%s,sinks=%d,recent=%d,every=%d", ev->pol->name, b,
                     ev->sinks, ev->recent, ev->every);
    if (o < 0 || (size_t)o >= cap) return o;
    for (int i = VQ_PK_OBS; i < VQ_PK_N && (size_t)o < cap; i++)
        if (ev->pol->keys & (1u << i)) {
            vq_evict_cfg c = *ev;
            const double x = ikey(&c, i) ? *ikey(&c, i) : *rkey(&c, i);
            /* the keys added with kvpress's variants print only when not at their default (so
             * the text of every spec written before them is unchanged): equal texts still mean
             * equal values */
            if (i >= VQ_PK_POOLFN && x == vq_pol_keys[i].def) continue;
            char mn[16];
            o += vq_pol_keys[i].kind == 'r' ? snprintf(out + o, cap - (size_t)o, ",%s=%.6g", vq_pol_keys[i].name, x)
               : vq_pol_keys[i].kind == 'm' ? snprintf(out + o, cap - (size_t)o, ",%s=%s", vq_pol_keys[i].name,
                                                       mode_name(&vq_pol_keys[i], (int)x, mn, sizeof mn))
                                            : snprintf(out + o, cap - (size_t)o, ",%s=%d", vq_pol_keys[i].name, (int)x);
        }
    if ((size_t)o < cap && ev->alloc && ev->alloc != vq_kv_alloc_at(0)) {
        o += snprintf(out + o, cap - (size_t)o, ",heads=%s", ev->alloc->name);
        if ((size_t)o < cap && (ev->alloc->keys & (1u << VQ_AK_FLOOR)))
            o += snprintf(out + o, cap - (size_t)o, ",floor=%.6g", ev->floor);
    }
    return o;
}

static size_t evict_help(char *buf, size_t n) {
    size_t o = 0;
    int w = snprintf(buf + VQ_MIN(o, n), n > o ? n - o : 0,
                     "eviction keys (any codec): evict=POLICY, budget=N rows per layer or a ratio "
                     "0<r<=1 of the positions seen (written with a '.'), sinks=S first positions "
                     "always kept (default 4), recent=R last positions always kept (default 32), "
                     "every=N decode steps between eviction steps (default 16; one step also when "
                     "a prompt ends); snapkv/pyramidkv/chunkkv: obs=W (default 32); snapkv/pyramidkv: "
                     "pool=K odd (default 7); chunkkv: chunk=C rows per chunk (default 10); squeeze: "
                     "squeeze=0..1 (default 0.5; needs calib=FILE); "
                     "pyramidkv: slope=0..1 (default 0.5), beta=B >= 1 (PyramidKV's published schedule, "
                     "kvpress: beta=20; not given: the slope one); snapkv/pyramidkv/squeeze: poolfn=max|avg (default max; "
                     "avg: kvpress's); h2o: acc=sum|mean (default sum; mean: kvpress's observed attention); "
                     "expected_attention_prompt: vnorm=on|off (default on); keyformer: tau=T (default 1); "
                     "heads=ada (rows per KV head, AdaKV budgets across a layer's heads; default "
                     "heads=shared) with floor=0..1 (default 0.2: each head keeps >= floor * budget)\n");
    if (w > 0) o += (size_t)w;
    for (int i = 0; vq_kv_policy_at(i); i++) {
        w = snprintf(buf + VQ_MIN(o, n), n > o ? n - o : 0, "evict=%s: %s\n", vq_kv_policy_at(i)->name,
                     vq_kv_policy_at(i)->help);
        if (w > 0) o += (size_t)w;
    }
    return o;
}

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
    o += evict_help(buf + VQ_MIN(o, n), n > o ? n - o : 0);
    return o;   /* length needed (snprintf style) */
}

static int is_store_key(const char *k) {
    return !strcmp(k, "window") || !strcmp(k, "sink") || !strcmp(k, "wprec") || !strcmp(k, "page") ||
           !strcmp(k, "calib") || !strcmp(k, "kmean") || !strcmp(k, "kscale") || is_evict_key(k);
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
    if (is_evict_key(key)) {
        if (evict_key(&o->ev, key, val, m, sizeof m)) return spec_err(err, spec, m);
        return VQ_OK;
    }
    if (!strcmp(key, "calib")) {
        if (o->calib[0]) goto twice;
        if (strlen(val) >= sizeof o->calib) {
            snprintf(m, sizeof m, "calib=%.40s...: path longer than %d bytes", val, VQ_KV_CALIB_MAX - 1);
            return spec_err(err, spec, m);
        }
        snprintf(o->calib, sizeof o->calib, "%s", val);
        return VQ_OK;
    }
    if (!strcmp(key, "kscale")) {
        char *end = NULL;
        errno = 0;
        double a = strtod(val, &end);
        if (errno || end == val || *end || !(a >= 0.0 && a <= 1.0)) {
            snprintf(m, sizeof m, "kscale=%.40s is not a number in 0..1 (the exponent of query energy / "
                     "key variance; 0.25 for rotated codecs)", val);
            return spec_err(err, spec, m);
        }
        if (o->store_seen & 16) goto twice;
        o->store_seen |= 16;
        o->kscale = a;
        return VQ_OK;
    }
    if (!strcmp(key, "window")) {
        if (!parse_int(val, 0, 1048576, &x)) goto bad;
        if (o->window >= 0) goto twice;
        o->window = x;
    } else if (!strcmp(key, "sink")) {
        if (!parse_int(val, 0, 65536, &x)) goto bad;
        if (o->store_seen & 1) goto twice;
        o->store_seen |= 1;
        o->sink = x;
    } else if (!strcmp(key, "kmean")) {
        if (!parse_int(val, 0, 1, &x)) goto bad;
        if (o->store_seen & 8) goto twice;
        o->store_seen |= 8;
        o->kmean = x;
    } else if (!strcmp(key, "wprec")) {
        if (!parse_int(val, 8, 32, &x) || (x != 8 && x != 16 && x != 32)) goto bad;
        if (o->store_seen & 2) goto twice;
        o->store_seen |= 2;
        o->wprec = x;
    } else {
        if (!parse_int(val, 1, 65536, &x)) goto bad;
        if (o->store_seen & 4) goto twice;
        o->store_seen |= 4;
        o->page = x;
    }
    return VQ_OK;
bad:
    snprintf(m, sizeof m, "%s=%s is out of range or not an integer (%s)", key, val,
             !strcmp(key, "window") ? "0..1048576" : !strcmp(key, "sink") ? "0..65536"
             : !strcmp(key, "wprec") ? "8, 16 or 32" : !strcmp(key, "kmean") ? "0 or 1" : "1..65536");
    return spec_err(err, spec, m);
twice:
    snprintf(m, sizeof m, "store key '%s' given twice (each key once)", key);
    return spec_err(err, spec, m);
}

static vq_status parse_part(char *part, vq_kv_parsed *o, int *seen, const char *spec, vq_err *err);

/* demote=CODEC[:params]: a side-less codec part of its own (k=/v=/bits= set the tier's bits),
 * parsed as one into a scratch spec; store keys have no place inside it. */
static vq_status parse_demote(char *body, vq_kv_parsed *o, const char *spec, vq_err *err) {
    char m[240];
    while (isspace((unsigned char)*body)) body++;
    if (o->dm.codec) return spec_err(err, spec, "demote= given twice");
    if (!*body) return spec_err(err, spec, "demote= needs a codec (e.g. demote=turboquant_mse:k=2,v=2)");
    if ((body[0] == 'k' || body[0] == 'v' || body[0] == 'K' || body[0] == 'V') && body[1] == '=') {
        snprintf(m, sizeof m, "demote=%.60s: the demoted tier takes one codec for both sides (its "
                 "k=B,v=B set the bits, e.g. demote=turboquant_mse:k=2,v=2)", body);
        return spec_err(err, spec, m);
    }
    char name[64];
    size_t nl = strcspn(body, ":");
    snprintf(name, sizeof name, "%.*s", (int)VQ_MIN(nl, sizeof name - 1), body);
    if (!vq_codec_find(name)) {
        snprintf(m, sizeof m, "demote=: unknown codec '%s'", name);
        return spec_err(err, spec, m);
    }
    for (const char *q = body[nl] ? body + nl + 1 : body + nl; *q;) {   /* no store key inside */
        size_t kl = strcspn(q, "=,");
        char key[40];
        snprintf(key, sizeof key, "%.*s", (int)VQ_MIN(kl, sizeof key - 1), q);
        if (is_store_key(key)) {
            snprintf(m, sizeof m, "'%s=' inside demote=%s: the demoted tier takes codec parameters "
                     "only (store and eviction keys go in a part of their own)", key, name);
            return spec_err(err, spec, m);
        }
        q += strcspn(q, ",");
        if (*q) q++;
    }
    vq_kv_parsed *t = calloc(1, sizeof *t);
    if (!t) return vq_err_set(err, VQ_ERR_NOMEM, "kv spec: out of memory");
    t->window = -1;
    int seen[2] = {0, 0};
    vq_status st = parse_part(body, t, seen, spec, err);
    if (!st) {
        o->dm.codec = t->codec[0];
        memcpy(o->dm.p, t->p, sizeof o->dm.p);
        memcpy(o->dm.np, t->np, sizeof o->dm.np);
    }
    free(t);
    return st;
}

/* One part: [k=|v=]codec[:key=val,...] or a store-only part key=val,... (sides: -1 both) */
static vq_status parse_part(char *part, vq_kv_parsed *o, int *seen, const char *spec, vq_err *err) {
    char m[200];
    while (isspace((unsigned char)*part)) part++;
    if (!strncmp(part, "demote=", 7)) return parse_demote(part + 7, o, spec, err);
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
            snprintf(m, sizeof m, "'%s' is not a store key (window, sink, wprec, page, calib, kmean, kscale, evict, budget, sinks, recent, every, obs, pool, slope, tau, chunk, squeeze, poolfn, beta, acc, vnorm) and no codec precedes it", key);
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
            if (o->bits_seen) return spec_err(err, spec, "'bits=' given twice");
            o->bits_seen = 1;
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

/* What the tokenizer below would pass over in silence: an empty part (";;", a ';' at either end),
 * an empty parameter list or item ("f16:", "k=4,,v=4", a ',' at either end) and whitespace next
 * to a delimiter (" f16", "f16; window=4"). Each is a typo whose spec would run as something the
 * writer did not mean, so it is refused, naming the place. NULL when the text is clean. */
static const char *untidy(const char *t, size_t *at) {
    static const char *DELIM = ";:,=";
    size_t n = strlen(t);
    for (size_t i = 0; i <= n; i++) {
        char c = t[i], prev = i ? t[i - 1] : 0;
        *at = i;
        if (isspace((unsigned char)c) && (i == 0 || i + 1 == n || strchr(DELIM, t[i + 1]) || strchr(DELIM, prev)))
            return "whitespace at the start or end of the spec or beside ';', ':', ',' or '='";
        if (c == ';' && (i == 0 || i + 1 == n || t[i + 1] == ';')) return "an empty part (';' at an end or ';;')";
        if (c == ':' && (i + 1 == n || t[i + 1] == ';' || t[i + 1] == ',')) return "':' with no parameter after it";
        if (c == ',' && (i == 0 || i + 1 == n || strchr(";:,", prev) || t[i + 1] == ';' || t[i + 1] == ','))
            return "an empty item in a ',' list";
    }
    return NULL;
}

vq_status vq_kv_part_parse(const char *spec, vq_kv_parsed *o, vq_err *err) {
    memset(o, 0, sizeof *o);
    o->window = -1;
    o->wprec = 16;
    o->page = 256;
    if (!spec || !*spec) return spec_err(err, spec ? spec : "(null)", "empty spec");
    size_t at = 0;
    const char *why = untidy(spec, &at);
    if (why) {
        char m[160];
        snprintf(m, sizeof m, "%s (at character %zu)", why, at + 1);
        return spec_err(err, spec, m);
    }
    char buf[VQ_KV_SPEC_MAX];
    if (strlen(spec) >= sizeof buf) return spec_err(err, "(too long)", "spec longer than 2047 characters");
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
    char m[240];
    if ((o->kmean || o->kscale > 0) && !o->calib[0])
        return spec_err(err, spec, "kmean= and kscale= need calib=FILE (the mean key and the query and key "
                        "energies come from a calibration: veloxquant calibrate -m MODEL -f TEXT -o FILE)");
    if (evict_check(&o->ev, m, sizeof m)) return spec_err(err, spec, m);
    if (o->dm.codec && !o->ev.pol)
        return spec_err(err, spec, "demote= needs evict=POLICY,budget=B (the demoted tier holds the "
                        "rows an eviction step would drop)");
    if (o->dm.codec && o->ev.alloc->per_head)
        return spec_err(err, spec, "demote= with heads=ada is not built (the demoted tier holds whole rows "
                        "of every KV head; heads=ada drops rows per head): use heads=shared with demote=, or "
                        "heads=ada without it");
    return VQ_OK;
}

/* ---- the normalized text --------------------------------------------------------------------- */
/* "codec[:params]" when both sides agree, else "k=..;v=..", then the store keys when any differs
 * from its default. */
void vq_kv_normalize(char *out, size_t cap, const vq_codec_state *st_k, const vq_codec_state *st_v,
                     const vq_kv_parsed *sp, int R, int wprec, int P, int S) {
    char side[2][200];
    const vq_codec_state *st2[2] = { st_k, st_v };
    for (int s = 0; s < 2; s++) {
        const vq_codec_state *st = st2[s];
        char given[160] = "";
        const char *params = st->params;
        if (!params[0]) {   /* codec left params empty: echo what was given */
            size_t o = 0;
            for (int i = 0; i < sp->np[s] && o < sizeof given; i++)
                o += (size_t)snprintf(given + o, sizeof given - o, "%s%s=%s", i ? "," : "",
                                      sp->p[s][i].key, sp->p[s][i].val);
            params = given;
        }
        snprintf(side[s], sizeof side[s], "%s%s%s", st->codec->name, params[0] ? ":" : "", params);
    }
    int o;
    if (!strcmp(side[0], side[1])) o = snprintf(out, cap, "%s", side[0]);
    else o = snprintf(out, cap, "k=%s;v=%s", side[0], side[1]);
    if (o < 0 || (size_t)o >= cap) return;
    /* the store part unless every value is the default a reparse would give (the window's is the
     * codecs' fp_window: "kivi;window=0" must say window=0) */
    const int R0 = VQ_MAX(st_k->fp_window, st_v->fp_window);
    if (R > 0 || R != R0 || P != 256 || S > 0 || wprec != 16) {
        int q = snprintf(out + o, cap - (size_t)o, ";window=%d,wprec=%d,page=%d", R, wprec, P);
        if (q > 0 && (size_t)(o + q) < cap && S > 0)
            q += snprintf(out + o + q, cap - (size_t)(o + q), ",sink=%d", S);
        if (q > 0) o += q;
    }
    if ((size_t)o < cap) {
        int e = evict_print(&sp->ev, out + o, cap - (size_t)o);
        if (e > 0) o += e;
    }
    if (sp->dm.codec && (size_t)o < cap) {
        int e = snprintf(out + o, cap - (size_t)o, ";demote=%s", sp->dm.norm);
        if (e > 0) o += e;
    }
    if ((sp->kmean || sp->kscale > 0) && (size_t)o < cap) {
        int e = sp->kscale > 0 ? snprintf(out + o, cap - (size_t)o, ";kmean=%d,kscale=%g", sp->kmean, sp->kscale)
                               : snprintf(out + o, cap - (size_t)o, ";kmean=%d", sp->kmean);
        if (e > 0) o += e;
    }
    if (sp->calib[0] && (size_t)o < cap) snprintf(out + o, cap - (size_t)o, ";calib=%s", sp->calib);
}

/* ---- the full spec: base + per-layer overrides, parsed once ----------------------------------- */
static const char *OVR_FORM = "form: BASE@LAYERS=SPEC[@LAYERS=SPEC...], LAYERS = comma-separated "
                              "layer numbers or ranges a..b, negative = from the end (e.g. "
                              "'q4_0@0,-1=f16')";
static vq_status ovr_err(vq_err *err, const char *spec, const char *clause, const char *what) {
    return vq_err_set(err, VQ_ERR_ARG, "kv spec '%.160s': layer override '@%.100s': %s; %s", spec,
                      clause, what, OVR_FORM);
}

/* One layer number as written ("3", "-1"); 0 when malformed. */
static int parse_layer_num(const char *s, int *out) {
    while (isspace((unsigned char)*s)) s++;
    char *end = NULL;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s) return 0;
    while (isspace((unsigned char)*end)) end++;
    if (*end || x < -(1L << 20) || x > (1L << 20)) return 0;
    *out = (int)x;
    return 1;
}

/* LAYERS text of a clause -> items (a..b as written). */
static vq_status parse_items(char *list, vq_kv_clause *c, const char *spec, vq_err *err) {
    char m[240];
    int cap = 1;
    for (const char *q = list; *q; q++) cap += *q == ',';
    c->items = calloc((size_t)cap, sizeof *c->items);
    if (!c->items) return vq_err_set(err, VQ_ERR_NOMEM, "kv spec: out of memory");
    char *p = list;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        vq_kv_item *it = &c->items[c->n_items];
        snprintf(it->tok, sizeof it->tok, "%s", p);
        char *dots = strstr(p, "..");
        int ok;
        if (dots) {
            *dots = 0;
            ok = parse_layer_num(p, &it->a) && parse_layer_num(dots + 2, &it->b);
        } else {
            ok = parse_layer_num(p, &it->a);
            it->b = it->a;
        }
        if (!ok) {
            snprintf(m, sizeof m, "'%s' is not a layer number or range a..b", it->tok);
            return ovr_err(err, spec, c->given, m);
        }
        c->n_items++;
        if (!comma) break;
        p = comma + 1;
    }
    return VQ_OK;
}

/* A spec from an untrusted sender (vq_kv_spec_parse_confined): calib= may only name a file of the
 * operator's folder, by its plain name; every refusal (no folder, a path, a name with other
 * characters, a file that is missing, not a regular file or not a calibration file) gets the one
 * message below, so the answer tells nothing about the host's files. */
typedef struct calib_conf { const char *dir; } calib_conf;

static vq_status confine_calib(vq_kv_parsed *sp, const calib_conf *conf, vq_err *err) {
    const char *n = sp->calib;
    int ok = conf->dir && conf->dir[0] && n[0] != '.' && strlen(n) <= 128;
    for (const char *q = n; ok && *q; q++)
        ok = isalnum((unsigned char)*q) || *q == '.' || *q == '_' || *q == '-';
    char path[VQ_KV_CALIB_MAX];
    if (ok) {
        int w = snprintf(path, sizeof path, "%s/%s", conf->dir, n);
        ok = w > 0 && (size_t)w < sizeof path;
    }
    vq_calib cal;
    memset(&cal, 0, sizeof cal);
    if (ok) ok = vq_calib_read(path, &cal, NULL) == VQ_OK;   /* regular files only (vq_read_file) */
    vq_calib_free(&cal);
    if (!ok)
        return vq_err_set(err, VQ_ERR_ARG, "calib=: not a calibration file this server offers (a request "
                          "may name one of the operator's calibration folder by its plain name)");
    snprintf(sp->calib, sizeof sp->calib, "%s", path);
    return VQ_OK;
}

/* ---- demote=: the tier codec's normalized text: "codec:params"; k=/v= where only the bits differ ---- */
static int next_tok(const char **s, char *key, size_t kc, char *val, size_t vc) {
    if (!**s) return 0;
    size_t n = strcspn(*s, ","), e = strcspn(*s, "=");
    if (e > n) e = n;
    snprintf(key, kc, "%.*s", (int)e, *s);
    snprintf(val, vc, "%.*s", e < n ? (int)(n - e - 1) : 0, e < n ? *s + e + 1 : "");
    *s += n + ((*s)[n] ? 1 : 0);
    return 1;
}

/* both sides' canonical texts, token by token: the same keys in the same order, only bits= may
 * differ (written k=,v=); 0 when they do not line up that way */
static int merge_sides(const char *a, const char *b, char *out, size_t cap) {
    char ka[40], va[72], kb[40], vb[72];
    size_t o = 0;
    out[0] = 0;
    for (;;) {
        int ha = next_tok(&a, ka, sizeof ka, va, sizeof va), hb = next_tok(&b, kb, sizeof kb, vb, sizeof vb);
        if (!ha && !hb) return 1;
        if (ha != hb || strcmp(ka, kb) || (strcmp(va, vb) && strcmp(ka, "bits"))) return 0;
        int w = strcmp(va, vb) ? snprintf(out + o, cap - o, "%sk=%s,v=%s", o ? "," : "", va, vb)
                               : snprintf(out + o, cap - o, "%s%s=%s", o ? "," : "", ka, va);
        if (w < 0 || (size_t)w >= cap - o) return 0;
        o += (size_t)w;
    }
}

/* the parameters as given (a codec whose canonical texts do not line up): bits per side as k=/v= */
static void given_params(const vq_kv_demote *dm, char *out, size_t cap) {
    const char *bk = vq_codec_param_get(dm->p[0], dm->np[0], "bits");
    const char *bv = vq_codec_param_get(dm->p[1], dm->np[1], "bits");
    size_t o = 0;
    out[0] = 0;
    if (bk && bv && !strcmp(bk, bv)) o += (size_t)snprintf(out, cap, "bits=%s", bk);
    else {
        if (bk) o += (size_t)snprintf(out, cap, "k=%s", bk);
        if (bv && o < cap) o += (size_t)snprintf(out + o, cap - o, "%sv=%s", o ? "," : "", bv);
    }
    for (int i = 0; i < dm->np[0] && o < cap; i++)
        if (strcmp(dm->p[0][i].key, "bits"))
            o += (size_t)snprintf(out + o, cap - o, "%s%s=%s", o ? "," : "", dm->p[0][i].key, dm->p[0][i].val);
}

void vq_kv_demote_print(vq_kv_demote *dm, const vq_codec_state *sk, const vq_codec_state *sv) {
    char par[160];
    if (!strcmp(sk->params, sv->params)) snprintf(par, sizeof par, "%s", sk->params);
    else if (!merge_sides(sk->params, sv->params, par, sizeof par)) given_params(dm, par, sizeof par);
    if (!sk->params[0] && !sv->params[0]) given_params(dm, par, sizeof par);   /* codec printed none */
    snprintf(dm->norm, sizeof dm->norm, "%s%s%s", dm->codec->name, par[0] ? ":" : "", par);
}

/* The spec parser's check: both sides of the tier codec configured once at head_dim d0 (errors
 * name demote=), and its normalized text. */
static vq_status demote_probe(vq_kv_parsed *sp, const vq_codec_ctx *ctx, int d0, vq_err *err) {
    vq_codec_state st[2];
    memset(st, 0, sizeof st);
    vq_status rc = VQ_OK;
    vq_err e;
    vq_err_clear(&e);
    for (int s = 0; s < 2 && !rc; s++) {
        st[s].codec = sp->dm.codec;
        st[s].side = s;
        st[s].ctx = *ctx;
        rc = st[s].codec->init(&st[s], d0, s, sp->dm.p[s], sp->dm.np[s], 1, &e);
    }
    if (rc) vq_err_set(err, rc, "kv spec: demote=%s: %s", sp->dm.codec->name, e.msg);
    else vq_kv_demote_print(&sp->dm, &st[0], &st[1]);
    for (int s = 0; s < 2; s++)
        if (st[s].codec && st[s].codec->fini) st[s].codec->fini(&st[s]);
    return rc;
}

/* Check one plain spec's codecs and parameters by configuring each side once (head_dim 64, the
 * smallest every codec takes), and make its normalized text. */
static vq_status probe_clause(vq_kv_clause *c, const char *plain, const calib_conf *conf, vq_err *err) {
    if (vq_kv_part_parse(plain, &c->sp, err)) return err ? err->code : VQ_ERR_ARG;
    if (conf && c->sp.calib[0] && confine_calib(&c->sp, conf, err)) return VQ_ERR_ARG;
    vq_codec_state st[2];
    memset(st, 0, sizeof st);
    int fpw = 0;
    vq_status rc = VQ_OK;
    /* calib=FILE: parsing is the validation, so a missing or corrupt file fails here (the dims
     * are checked by vq_kv_create, which knows the model); the probe runs at the file's head_dim */
    vq_calib cal;
    memset(&cal, 0, sizeof cal);
    if (c->sp.calib[0] && vq_calib_read(c->sp.calib, &cal, err)) return err ? err->code : VQ_ERR_IO;
    const vq_codec_ctx pctx = { .calib = c->sp.calib[0] ? &cal : NULL,
                                .calib_path = c->sp.calib[0] ? c->sp.calib : NULL,
                                .n_kv_heads = cal.n_kv_heads, .n_heads = cal.n_heads };
    const int d0 = c->sp.calib[0] ? cal.head_dim : 64;
    for (int s = 0; s < 2 && !rc; s++) {
        st[s].codec = c->sp.codec[s];
        st[s].side = s;
        st[s].ctx = pctx;
        rc = st[s].codec->init(&st[s], d0, s, c->sp.p[s], c->sp.np[s], 1, err);
        if (rc && !c->sp.calib[0]) {
            /* an error about d=64 itself would be wrong to report here: retry at 128 */
            vq_codec_state t;
            memset(&t, 0, sizeof t);
            t.codec = c->sp.codec[s];
            t.side = s;
            if (!t.codec->init(&t, 128, s, c->sp.p[s], c->sp.np[s], 1, NULL)) {
                if (st[s].codec->fini) st[s].codec->fini(&st[s]);
                st[s] = t;
                vq_err_clear(err);
                rc = VQ_OK;
            } else if (t.codec->fini) {
                t.codec->fini(&t);   /* the contract: fini also after a failed init */
            }
        }
        if (!rc) fpw = VQ_MAX(fpw, st[s].fp_window);
    }
    if (!rc && c->sp.dm.codec) {   /* the demoted tier's codec, configured the same way */
        rc = demote_probe(&c->sp, &pctx, d0, err);
        if (rc && !c->sp.calib[0] && !demote_probe(&c->sp, &pctx, 128, NULL)) {
            vq_err_clear(err);
            rc = VQ_OK;
        }
    }
    if (!rc) {
        int rpb0 = st[0].rows_per_block, rpb1 = st[1].rows_per_block;
        int a = rpb0, b = rpb1;
        while (b) { int t = a % b; a = b; b = t; }
        long rpbs = (long)rpb0 / a * rpb1;
        int P = (int)((c->sp.page + rpbs - 1) / rpbs * rpbs);
        vq_kv_normalize(c->norm, sizeof c->norm, &st[0], &st[1], &c->sp,
                        c->sp.window >= 0 ? c->sp.window : fpw, c->sp.wprec, P, c->sp.sink);
        /* a cut normalized text would make two different specs equal (vq_kv_spec_equal) */
        if (strlen(c->norm) >= sizeof c->norm - 1)
            rc = vq_err_set(err, VQ_ERR_ARG, "kv spec '%.80s...': the normalized clause is longer than "
                            "%zu characters", plain, sizeof c->norm - 2);
    }
    for (int s = 0; s < 2; s++)
        if (st[s].codec && st[s].codec->fini) st[s].codec->fini(&st[s]);
    vq_calib_free(&cal);
    return rc;
}

void vq_kv_spec_free(vq_kv_spec *s) {
    if (!s) return;
    for (int i = 0; s->c && i < s->n; i++) free(s->c[i].items);
    free(s->c);
    free(s);
}

const char *vq_kv_spec_text(const vq_kv_spec *s) { return s ? s->text : ""; }

/* The normalized text spells out every value the cache is built from and parsing refuses a spec
 * whose normalized text would be cut (probe_clause, the override join), so two specs are equal
 * exactly when their texts are. */
int vq_kv_spec_equal(const vq_kv_spec *a, const vq_kv_spec *b) {
    if (!a || !b) return a == b;
    return !strcmp(a->text, b->text);
}

int vq_kv_spec_keeps_rows(const vq_kv_spec *s, int n) {
    for (int i = 0; s && i < s->n; i++) {
        const vq_evict_cfg *ev = &s->c[i].sp.ev;
        if (!ev->pol) continue;
        /* the smallest budget any layer gets (pyramidkv's top layer: budget * (1 - slope)) */
        const double low = ev->budget * (ev->pol->min_budget ? ev->pol->min_budget(ev) : 1.0);
        if (ev->budget_ratio ? low < 1.0 : low < n) return 0;
    }
    return 1;
}

vq_kv_spec *vq_kv_spec_dup(const vq_kv_spec *s, vq_err *err) {
    vq_err_clear(err);
    if (!s) { vq_err_set(err, VQ_ERR_ARG, "vq_kv_spec_dup: no spec"); return NULL; }
    vq_kv_spec *d = calloc(1, sizeof *d);
    if (d) d->c = calloc((size_t)s->n, sizeof *d->c);
    if (!d || !d->c) goto nomem;
    memcpy(d->given, s->given, sizeof d->given);
    memcpy(d->text, s->text, sizeof d->text);
    d->n = s->n;
    for (int i = 0; i < s->n; i++) {
        d->c[i] = s->c[i];
        d->c[i].items = NULL;
        if (s->c[i].n_items) {
            d->c[i].items = malloc((size_t)s->c[i].n_items * sizeof *d->c[i].items);
            if (!d->c[i].items) goto nomem;
            memcpy(d->c[i].items, s->c[i].items, (size_t)s->c[i].n_items * sizeof *d->c[i].items);
        }
    }
    return d;
nomem:
    vq_kv_spec_free(d);
    vq_err_set(err, VQ_ERR_NOMEM, "kv spec: out of memory");
    return NULL;
}

/* An override's layer list, normalized: items joined by ','. */
static void layers_text(const vq_kv_clause *c, char *lay, size_t cap) {
    size_t lo = 0;
    lay[0] = 0;
    for (int i = 0; i < c->n_items && lo < cap; i++) {
        const vq_kv_item *it = &c->items[i];
        lo += (size_t)(it->a == it->b ? snprintf(lay + lo, cap - lo, "%s%d", i ? "," : "", it->a)
                                      : snprintf(lay + lo, cap - lo, "%s%d..%d", i ? "," : "", it->a, it->b));
    }
}

static vq_kv_spec *spec_parse(const char *text, const calib_conf *conf, vq_err *err) {
    vq_err_clear(err);
    if (!text || !*text) {
        vq_kv_parsed sp;
        vq_kv_part_parse(text, &sp, err);
        return NULL;
    }
    if (strlen(text) > VQ_KV_SPEC_MAX_LEN) {
        vq_err_set(err, VQ_ERR_ARG, "kv spec '%.80s...': longer than %d characters", text,
                   VQ_KV_SPEC_MAX_LEN);
        return NULL;
    }
    vq_kv_spec *s = calloc(1, sizeof *s);
    char *buf = strdup(text), **clause = NULL;
    int nc = 1;
    for (const char *p = text; *p; p++) nc += *p == '@';
    if (s) s->c = calloc((size_t)nc, sizeof *s->c);
    if (!s || !buf || !s->c) {
        vq_err_set(err, VQ_ERR_NOMEM, "kv spec: out of memory");
        goto fail;
    }
    snprintf(s->given, sizeof s->given, "%s", text);
    s->n = nc;
    clause = calloc((size_t)nc, sizeof *clause);
    if (!clause) { vq_err_set(err, VQ_ERR_NOMEM, "kv spec: out of memory"); goto fail; }
    clause[0] = buf;
    for (int c = 1; c < nc; c++) {
        char *at = strchr(clause[c - 1], '@');
        *at = 0;
        clause[c] = at + 1;
    }
    for (int c = 0; c < nc; c++) snprintf(s->c[c].given, sizeof s->c[c].given, "%s", clause[c]);
    if (nc > 1) {
        char *b = clause[0];
        while (isspace((unsigned char)*b)) b++;
        if (!*b) {
            vq_err_set(err, VQ_ERR_ARG, "kv spec '%.160s': no base spec before the first '@' (the "
                       "spec of the layers no override names); %s", text, OVR_FORM);
            goto fail;
        }
    }
    vq_err e;
    vq_err_clear(&e);
    if (probe_clause(&s->c[0], clause[0], conf, &e)) {
        vq_err_set(err, e.code ? e.code : VQ_ERR_ARG, "%s", e.msg);
        goto fail;
    }
    size_t o = (size_t)snprintf(s->text, sizeof s->text, "%s", s->c[0].norm);
    for (int c = 1; c < nc; c++) {
        char *eq = strchr(clause[c], '=');
        if (!eq) { ovr_err(err, text, s->c[c].given, "no '=' between the layers and their spec"); goto fail; }
        *eq = 0;
        char *sp = eq + 1, *t = clause[c];   /* the spec after '=' as written (vq_kv_part_parse refuses spaces) */
        while (isspace((unsigned char)*t)) t++;
        if (!sp[strspn(sp, " \t\n\v\f\r")]) { ovr_err(err, text, s->c[c].given, "no spec after '='"); goto fail; }
        if (!*t) { ovr_err(err, text, s->c[c].given, "no layers before '='"); goto fail; }
        if (parse_items(clause[c], &s->c[c], text, err)) goto fail;
        vq_err_clear(&e);
        if (probe_clause(&s->c[c], sp, conf, &e)) {
            vq_err_set(err, e.code ? e.code : VQ_ERR_ARG, "kv spec '%.160s': layer override "
                       "'@%.100s': %s", text, s->c[c].given, e.msg);
            goto fail;
        }
        char lay[512];
        layers_text(&s->c[c], lay, sizeof lay);
        int w = snprintf(s->text + o, sizeof s->text - o, "@%s=%s", lay, s->c[c].norm);
        if (w < 0 || (size_t)w >= sizeof s->text - o) {
            vq_err_set(err, VQ_ERR_ARG, "kv spec '%.160s': the normalized spec is longer than %d "
                       "characters", text, VQ_KV_SPEC_MAX_LEN);
            goto fail;
        }
        o += (size_t)w;
    }
    free(buf);
    free(clause);
    return s;
fail:
    free(buf);
    free(clause);
    vq_kv_spec_free(s);
    return NULL;
}

vq_kv_spec *vq_kv_spec_parse(const char *text, vq_err *err) { return spec_parse(text, NULL, err); }

vq_kv_spec *vq_kv_spec_parse_confined(const char *text, const char *calib_dir, vq_err *err) {
    const calib_conf conf = { calib_dir };
    return spec_parse(text, &conf, err);
}

/* ---- new specs from a spec: the only place spec text is composed ------------------------------ */
/* Every composition starts from the normalized text (it carries what parsing resolved, e.g. a
 * confined calib= path) and is parsed again, so the result is checked like any spec. */

const char *vq_kv_spec_given(const vq_kv_spec *s) { return s ? s->given : ""; }
int vq_kv_spec_n_overrides(const vq_kv_spec *s) { return s ? s->n - 1 : 0; }

int vq_kv_spec_evicts(const vq_kv_spec *s) {
    for (int i = 0; s && i < s->n; i++)
        if (s->c[i].sp.ev.pol) return 1;
    return 0;
}

vq_kv_spec *vq_kv_spec_with_layers(const vq_kv_spec *base, const char *overrides, vq_err *err) {
    vq_err_clear(err);
    if (!base || !overrides || !overrides[strspn(overrides, " \t\n\v\f\r")]) {
        vq_err_set(err, VQ_ERR_ARG, "layer overrides: none given (LAYERS=SPEC, e.g. '0,-1=f16'; %s)", OVR_FORM);
        return NULL;
    }
    char text[VQ_KV_SPEC_MAX];
    int w = snprintf(text, sizeof text, "%s@%s", base->text, overrides);
    if (w < 0 || (size_t)w >= sizeof text) {
        vq_err_set(err, VQ_ERR_ARG, "kv spec '%.80s' with the layer overrides '%.80s' is longer than %d "
                   "characters", base->given, overrides, VQ_KV_SPEC_MAX_LEN);
        return NULL;
    }
    vq_err e;
    vq_kv_spec *s = spec_parse(text, NULL, &e);
    if (!s) {   /* the parser's message, with the overrides and the base as the caller wrote them */
        vq_err_set(err, e.code, "layer overrides '%.160s' on '%.160s': %s", overrides, base->given, e.msg);
        return NULL;
    }
    /* the text as the caller wrote it, for labels (what was parsed is the normalized base's) */
    w = snprintf(s->given, sizeof s->given, "%s@%s", base->given, overrides);
    if (w < 0 || (size_t)w >= sizeof s->given) snprintf(s->given, sizeof s->given, "%s", s->text);
    return s;
}

size_t vq_kv_spec_layers_text(const vq_kv_spec *s, const int *layers, int n, char *buf, size_t cap) {
    if (cap) buf[0] = 0;
    if (!layers || n < 1 || (s && s->n > 1)) return 0;
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        if (layers[i] < 0) {
            if (cap) buf[0] = 0;
            return 0;
        }
        char t[16];
        const int w = snprintf(t, sizeof t, "%s%d", i ? "," : "", layers[i]);
        if (o + (size_t)w < cap) memcpy(buf + o, t, (size_t)w + 1);
        o += (size_t)w;
    }
    const char *spec = s ? s->given : "SPEC";
    const size_t ls = strlen(spec);
    if (o + 1 + ls < cap) {
        buf[o] = '=';
        memcpy(buf + o + 1, spec, ls + 1);
    } else if (cap) buf[VQ_MIN(o, cap - 1)] = 0;
    return o + 1 + ls;
}

vq_kv_spec *vq_kv_spec_with_eviction(const vq_kv_spec *s, const char *policy, int budget, vq_err *err) {
    vq_err_clear(err);
    if (!s || (policy && (!policy[0] || strpbrk(policy, ",;@=:") || budget < 1))) {
        vq_err_set(err, VQ_ERR_ARG, "vq_kv_spec_with_eviction: no spec, or a bad policy name or budget (%d)", budget);
        return NULL;
    }
    char text[VQ_KV_SPEC_MAX];
    size_t o = 0;
    for (int c = 0; c < s->n && o < sizeof text; c++) {
        const vq_kv_clause *cl = &s->c[c];
        char lay[512] = "", ev[512];
        if (c > 0) layers_text(cl, lay, sizeof lay);
        /* the clause's eviction part is exactly what normalizing printed for it; without eviction
         * its demoted tier goes too (it holds the rows eviction drops) */
        char clause[sizeof cl->norm];
        snprintf(clause, sizeof clause, "%s", cl->norm);
        int el = evict_print(&cl->sp.ev, ev, sizeof ev);
        char *cut = el > 0 && (size_t)el < sizeof ev ? strstr(clause, ev) : NULL;
        if (cut) memmove(cut, cut + el, strlen(cut + el) + 1);
        if (!policy && cl->sp.dm.codec) {
            snprintf(ev, sizeof ev, ";demote=%s", cl->sp.dm.norm);
            if ((cut = strstr(clause, ev))) memmove(cut, cut + strlen(ev), strlen(cut + strlen(ev)) + 1);
        }
        int w = snprintf(text + o, sizeof text - o, "%s%s%s%s", c ? "@" : "", lay, c ? "=" : "", clause);
        if (w < 0) break;
        o += (size_t)w;
        if (policy && o < sizeof text) {
            w = snprintf(text + o, sizeof text - o, ";evict=%s,budget=%d", policy, budget);
            if (w < 0) break;
            o += (size_t)w;
        }
    }
    if (o >= sizeof text) {
        vq_err_set(err, VQ_ERR_ARG, "kv spec '%.80s' with eviction %s is longer than %d characters", s->given,
                   policy ? policy : "removed", VQ_KV_SPEC_MAX_LEN);
        return NULL;
    }
    return spec_parse(text, NULL, err);
}
