/* request.c: a request body becomes a validated srv_req, or an OpenAI-shaped error naming the
 * field that was wrong. Strict: unknown fields, wrong types and out-of-range values are refused,
 * since a silently ignored parameter gives a client output it did not ask for. Pure: no model,
 * no globals (the libFuzzer target tests/fuzz/fuzz_server.c runs it on arbitrary bytes). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

int srv_error_set(srv_error *e, int http, const char *type, const char *param, const char *code,
                  const char *fmt, ...) {
    e->http = http;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return http;
}

char *srv_error_json(const srv_error *e) {
    cJSON *root = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(root, "error");
    char *msg = srv_utf8_clean(e->message, strlen(e->message));
    cJSON_AddStringToObject(o, "message", msg ? msg : "error");
    free(msg);
    cJSON_AddStringToObject(o, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(o, "param", e->param);
    else cJSON_AddNullToObject(o, "param");
    if (e->code) cJSON_AddStringToObject(o, "code", e->code);
    else cJSON_AddNullToObject(o, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* ---- UTF-8 ---- */
/* Length of the valid sequence at s[0..n), 0 when invalid, -1 when it is a valid but cut prefix. */
static int utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    int len;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; min = 0x10000; }
    else return 0;
    unsigned cp = c & (0x3f >> (len - 1));
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return -1;
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
        /* decide overlong and surrogate forms as soon as the second byte shows them */
        if (i == 1) {
            if (len == 3 && c == 0xe0 && s[1] < 0xa0) return 0;
            if (len == 3 && c == 0xed && s[1] >= 0xa0) return 0;
            if (len == 4 && c == 0xf0 && s[1] < 0x90) return 0;
            if (len == 4 && c == 0xf4 && s[1] >= 0x90) return 0;
        }
    }
    if (cp < min || cp > 0x10ffff) return 0;
    return len;
}

size_t srv_utf8_complete(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int k = utf8_seq((const unsigned char *)s + i, n - i);
        if (k < 0) return i;   /* a character the next token may finish */
        i += k ? (size_t)k : 1;
    }
    return n;
}

char *srv_utf8_clean(const char *s, size_t n) {
    char *o = malloc(n * 3 + 1);
    if (!o) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n;) {
        int k = utf8_seq((const unsigned char *)s + i, n - i);
        if (k > 0 && !(k == 1 && s[i] == 0)) { memcpy(o + j, s + i, (size_t)k); j += (size_t)k; i += (size_t)k; }
        else { memcpy(o + j, "\xef\xbf\xbd", 3); j += 3; i++; }
    }
    o[j] = 0;
    return o;
}

int srv_filename_ok(const char *name) {
    size_t n = strlen(name);
    if (n < 1 || n > 128 || name[0] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* ---- parsing ---- */
#define BAD(param, ...) srv_error_set(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

static const char *type_name(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "invalid";
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

static int get_number(const cJSON *v, const char *name, double lo, double hi, double *out, srv_error *e) {
    if (!cJSON_IsNumber(v)) return BAD(name, "'%s' must be a number, not %s", name, type_name(v));
    double x = v->valuedouble;
    if (!isfinite(x) || x < lo || x > hi) return BAD(name, "'%s' is %g; it must be in %g..%g", name, x, lo, hi);
    *out = x;
    return 0;
}

static int get_int(const cJSON *v, const char *name, double lo, double hi, double *out, srv_error *e) {
    if (!cJSON_IsNumber(v)) return BAD(name, "'%s' must be an integer, not %s", name, type_name(v));
    double x = v->valuedouble;
    if (!isfinite(x) || x != floor(x)) return BAD(name, "'%s' must be an integer (got %g)", name, x);
    if (x < lo || x > hi) return BAD(name, "'%s' is %.0f; it must be in %.0f..%.0f", name, x, lo, hi);
    *out = x;
    return 0;
}

static int get_bool(const cJSON *v, const char *name, int *out, srv_error *e) {
    if (!cJSON_IsBool(v)) return BAD(name, "'%s' must be true or false, not %s", name, type_name(v));
    *out = cJSON_IsTrue(v);
    return 0;
}

/* message content: a string, or an array of {"type":"text","text":...} parts joined */
static int get_content(const cJSON *v, int i, char **out, srv_error *e) {
    if (cJSON_IsString(v)) { *out = dup_str(v->valuestring); return *out ? 0 : BAD("messages", "out of memory"); }
    if (!cJSON_IsArray(v))
        return BAD("messages", "messages[%d].content must be a string or an array of text parts, not %s", i, type_name(v));
    size_t len = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, v) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type"), *x = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsObject(p) || !cJSON_IsString(t) || strcmp(t->valuestring, "text") || !cJSON_IsString(x) ||
            cJSON_GetArraySize(p) != 2)
            return BAD("messages", "messages[%d].content: every part must be {\"type\":\"text\",\"text\":STRING} "
                       "(this server reads text only)", i);
        len += strlen(x->valuestring);
    }
    char *s = malloc(len + 1);
    if (!s) return BAD("messages", "out of memory");
    size_t at = 0;
    cJSON_ArrayForEach(p, v) {
        const char *x = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        size_t n = strlen(x);
        memcpy(s + at, x, n);
        at += n;
    }
    s[at] = 0;
    *out = s;
    return 0;
}

static int get_messages(const cJSON *v, srv_req *r, srv_error *e) {
    if (!cJSON_IsArray(v)) return BAD("messages", "'messages' must be an array, not %s", type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n < 1) return BAD("messages", "'messages' is empty: give at least one message");
    if (n > 4096) return BAD("messages", "'messages' has %d entries (at most 4096)", n);
    r->msgs = calloc((size_t)n, sizeof *r->msgs);
    if (!r->msgs) return BAD("messages", "out of memory");
    r->msgs_cap = n;
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, v) {
        if (!cJSON_IsObject(m)) return BAD("messages", "messages[%d] must be an object, not %s", i, type_name(m));
        const cJSON *f;
        int have_content = 0;
        cJSON_ArrayForEach(f, m) {
            if (!strcmp(f->string, "role")) {
                if (!cJSON_IsString(f)) return BAD("messages", "messages[%d].role must be a string, not %s", i, type_name(f));
                const char *ro = f->valuestring;
                if (strcmp(ro, "system") && strcmp(ro, "user") && strcmp(ro, "assistant"))
                    return BAD("messages", "messages[%d].role '%.64s' is not system, user or assistant", i, ro);
                if (r->msgs[i].role) return BAD("messages", "messages[%d] has role twice", i);
                if (!(r->msgs[i].role = dup_str(ro))) return BAD("messages", "out of memory");
            } else if (!strcmp(f->string, "content")) {
                if (have_content++) return BAD("messages", "messages[%d] has content twice", i);
                if (get_content(f, i, &r->msgs[i].content, e)) return e->http;
            } else if (!strcmp(f->string, "name")) {
                if (!cJSON_IsString(f)) return BAD("messages", "messages[%d].name must be a string", i);
            } else {
                return BAD("messages", "messages[%d] has an unknown field '%.64s' (known: role, content, name)", i, f->string);
            }
        }
        if (!r->msgs[i].role) return BAD("messages", "messages[%d] has no role", i);
        if (!r->msgs[i].content) return BAD("messages", "messages[%d] has no content", i);
        r->n_msgs = ++i;
    }
    return 0;
}

static int get_stop(const cJSON *v, srv_req *r, srv_error *e) {
    if (cJSON_IsNull(v)) return 0;
    const cJSON *items[SRV_MAX_STOP];
    int n = 0;
    if (cJSON_IsString(v)) items[n++] = v;
    else if (cJSON_IsArray(v)) {
        const cJSON *x;
        cJSON_ArrayForEach(x, v) {
            if (n == SRV_MAX_STOP) return BAD("stop", "'stop' has more than %d strings", SRV_MAX_STOP);
            if (!cJSON_IsString(x)) return BAD("stop", "'stop' must hold strings, not %s", type_name(x));
            items[n++] = x;
        }
    } else {
        return BAD("stop", "'stop' must be a string or an array of strings, not %s", type_name(v));
    }
    for (int i = 0; i < n; i++) {
        size_t L = strlen(items[i]->valuestring);
        if (L == 0) return BAD("stop", "stop string %d is empty", i);
        if (L > 256) return BAD("stop", "stop string %d is %zu bytes (at most 256)", i, L);
        if (!(r->stop[i] = dup_str(items[i]->valuestring))) return BAD("stop", "out of memory");
        r->n_stop = i + 1;
    }
    return 0;
}

/* calib= may name only a file of the operator's --calib-dir (vq_kv_spec_parse_confined) */
static int get_kv(const cJSON *v, const char *calib_dir, srv_req *r, srv_error *e) {
    if (!cJSON_IsString(v)) return BAD("kv", "'kv' must be a KV spec string (e.g. \"q8_0\"), not %s", type_name(v));
    vq_err err;
    r->spec = vq_kv_spec_parse_confined(v->valuestring, calib_dir, &err);
    if (!r->spec) return BAD("kv", "'kv': %s", err.msg);
    if (!(r->kv = dup_str(v->valuestring))) return BAD("kv", "out of memory");
    return 0;
}

static int parse_fields(const cJSON *root, int chat, const char *calib_dir, srv_req *r, srv_error *e) {
    if (!cJSON_IsObject(root)) return BAD(NULL, "the body must be a JSON object, not %s", type_name(root));
    double x;
    int have_input = 0, have_max = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, root) {
        const char *k = f->string;
        /* a key given twice: cJSON keeps both; the second would silently win or lose */
        for (const cJSON *g = root->child; g != f; g = g->next)
            if (!strcmp(g->string, k)) return BAD(k, "field '%.64s' is given twice", k);
        if (!strcmp(k, "model")) {
            if (!cJSON_IsString(f)) return BAD(k, "'model' must be a string, not %s", type_name(f));
            if (!(r->model = dup_str(f->valuestring))) return BAD(k, "out of memory");
        } else if (chat && !strcmp(k, "messages")) {
            if (get_messages(f, r, e)) return e->http;
            have_input = 1;
        } else if (!chat && !strcmp(k, "prompt")) {
            const cJSON *p = f;
            if (cJSON_IsArray(f)) {   /* the API takes a list of prompts; one is served here */
                if (cJSON_GetArraySize(f) != 1)
                    return BAD(k, "'prompt' as an array must hold exactly one string (got %d items)", cJSON_GetArraySize(f));
                p = f->child;
            }
            if (!cJSON_IsString(p)) return BAD(k, "'prompt' must be a string, not %s", type_name(p));
            if (!(r->prompt = dup_str(p->valuestring))) return BAD(k, "out of memory");
            have_input = 1;
        } else if (!strcmp(k, "max_tokens") || (chat && !strcmp(k, "max_completion_tokens"))) {
            if (cJSON_IsNull(f)) continue;
            if (have_max++) return BAD(k, "give max_tokens or max_completion_tokens, not both");
            if (get_int(f, k, 1, 1 << 24, &x, e)) return e->http;
            r->max_tokens = (int)x;
        } else if (!strcmp(k, "temperature")) {
            if (cJSON_IsNull(f)) continue;
            if (get_number(f, k, 0, 2, &r->temperature, e)) return e->http;
        } else if (!strcmp(k, "top_p")) {
            if (cJSON_IsNull(f)) continue;
            if (get_number(f, k, 0, 1, &r->top_p, e)) return e->http;
            if (r->top_p <= 0) return BAD(k, "'top_p' must be above 0 (1: off)");
        } else if (!strcmp(k, "top_k")) {
            if (get_int(f, k, 0, 1 << 20, &x, e)) return e->http;
            r->top_k = (int)x;
        } else if (!strcmp(k, "min_p")) {
            if (get_number(f, k, 0, 0.999, &r->min_p, e)) return e->http;
        } else if (!strcmp(k, "seed")) {
            if (cJSON_IsNull(f)) continue;
            /* doubles hold integers exactly up to 2^53 */
            if (get_int(f, k, -9007199254740992.0, 9007199254740992.0, &x, e)) return e->http;
            r->has_seed = 1;
            r->seed = (uint64_t)(int64_t)x;
        } else if (!strcmp(k, "stop")) {
            if (get_stop(f, r, e)) return e->http;
        } else if (!strcmp(k, "stream")) {
            if (cJSON_IsNull(f)) continue;
            if (get_bool(f, k, &r->stream, e)) return e->http;
        } else if (!strcmp(k, "stream_options")) {
            if (cJSON_IsNull(f)) continue;
            if (!cJSON_IsObject(f)) return BAD(k, "'stream_options' must be an object, not %s", type_name(f));
            const cJSON *o;
            cJSON_ArrayForEach(o, f) {
                if (strcmp(o->string, "include_usage"))
                    return BAD(k, "stream_options has an unknown field '%.64s' (known: include_usage)", o->string);
                if (get_bool(o, "stream_options.include_usage", &r->include_usage, e)) return e->http;
            }
        } else if (!strcmp(k, "n")) {
            if (cJSON_IsNull(f)) continue;
            if (get_int(f, k, 1, 1, &x, e)) return e->http;
        } else if (!strcmp(k, "user")) {
            if (!cJSON_IsString(f)) return BAD(k, "'user' must be a string, not %s", type_name(f));
        } else if (!strcmp(k, "kv")) {
            if (get_kv(f, calib_dir, r, e)) return e->http;
        } else {
            return BAD(k, "unknown field '%.64s' (this server takes: model, %s, max_tokens%s, temperature, "
                       "top_p, top_k, min_p, seed, stop, stream, stream_options, n, user, kv)",
                       k, chat ? "messages" : "prompt", chat ? ", max_completion_tokens" : "");
        }
    }
    if (!have_input) return BAD(chat ? "messages" : "prompt", "'%s' is required", chat ? "messages" : "prompt");
    return 0;
}

int srv_req_parse(const char *body, size_t len, int chat, const char *calib_dir, srv_req *r, srv_error *e) {
    memset(r, 0, sizeof *r);
    r->chat = chat;
    r->temperature = 1.0;
    r->top_p = 1.0;
    if (len == 0) return BAD(NULL, "the request has no body: send a JSON object");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= body && at <= body + len ? (size_t)(at - body) : 0;
        return BAD(NULL, "the body is not valid JSON (near byte %zu)", off);
    }
    size_t used = end && end >= body && end <= body + len ? (size_t)(end - body) : len;
    for (size_t i = used; i < len; i++)
        if (body[i] != ' ' && body[i] != '\t' && body[i] != '\r' && body[i] != '\n' && body[i] != 0) {
            cJSON_Delete(root);
            return BAD(NULL, "the body has bytes after the JSON value (at byte %zu)", i);
        }
    int rc = parse_fields(root, chat, calib_dir, r, e);
    cJSON_Delete(root);
    if (rc) srv_req_free(r);
    return rc;
}

void srv_req_free(srv_req *r) {
    if (!r) return;
    for (int i = 0; i < r->msgs_cap; i++) {
        free(r->msgs[i].role);
        free(r->msgs[i].content);
    }
    free(r->msgs);
    free(r->model);
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->kv);
    vq_kv_spec_free(r->spec);
    memset(r, 0, sizeof *r);
}
