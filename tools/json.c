/* json.c: the CLI's JSON writer (json.h). */
#include "json.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

void json_init(json *j, FILE *f) {
    memset(j, 0, sizeof *j);
    j->f = f;
}

static void put(json *j, const char *s, size_t n) {
    if (n && fwrite(s, 1, n, j->f) != n) j->failed = 1;
}
static void puts_(json *j, const char *s) { put(j, s, strlen(s)); }

/* Before any value: the comma that separates it from the previous one at this level. */
static void sep(json *j) {
    if (j->after_key) { j->after_key = 0; return; }
    if (j->depth > 0 && j->count[j->depth - 1]++ > 0) puts_(j, ", ");
}

static void open_(json *j, const char *c) {
    sep(j);
    puts_(j, c);
    if (j->depth == JSON_MAX_DEPTH) { j->failed = 1; return; }
    j->count[j->depth++] = 0;
}
static void close_(json *j, const char *c) {
    if (j->depth == 0 || j->after_key) j->failed = 1;
    else j->depth--;
    j->after_key = 0;
    puts_(j, c);
}
void json_obj(json *j) { open_(j, "{"); }
void json_obj_end(json *j) { close_(j, "}"); }
void json_arr(json *j) { open_(j, "["); }
void json_arr_end(json *j) { close_(j, "]"); }

/* Length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 when the bytes there are not one
 * (stray continuation byte, overlong form, surrogate, above U+10FFFF, cut short). */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

/* Escape one chunk: calls emit for every piece of output. */
typedef void (*emit_fn)(void *ctx, const char *s, size_t n);
static void escape(const char *s, size_t n, emit_fn emit, void *ctx) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c < 0x80) {
            char buf[8];
            switch (c) {
            case '"': emit(ctx, "\\\"", 2); break;
            case '\\': emit(ctx, "\\\\", 2); break;
            case '\n': emit(ctx, "\\n", 2); break;
            case '\t': emit(ctx, "\\t", 2); break;
            case '\r': emit(ctx, "\\r", 2); break;
            case '\b': emit(ctx, "\\b", 2); break;
            case '\f': emit(ctx, "\\f", 2); break;
            default:
                if (c < 0x20 || c == 0x7F) { snprintf(buf, sizeof buf, "\\u%04x", c); emit(ctx, buf, 6); }
                else { buf[0] = (char)c; emit(ctx, buf, 1); }
            }
            i++;
            continue;
        }
        size_t L = utf8_len(p + i, n - i);
        if (L) { emit(ctx, s + i, L); i += L; }
        else { emit(ctx, "\xEF\xBF\xBD", 3); i++; }   /* U+FFFD for the one bad byte */
    }
}

static void emit_file(void *ctx, const char *s, size_t n) { put(ctx, s, n); }

void json_strn(json *j, const char *s, size_t n) {
    sep(j);
    if (!s) { puts_(j, "null"); return; }
    puts_(j, "\"");
    escape(s, n, emit_file, j);
    puts_(j, "\"");
}
void json_str(json *j, const char *s) {
    if (!s) { sep(j); puts_(j, "null"); return; }
    json_strn(j, s, strlen(s));
}

void json_key(json *j, const char *k) {
    if (j->after_key) j->failed = 1;   /* two keys in a row */
    json_str(j, k);
    puts_(j, ": ");
    j->after_key = 1;
}

void json_int(json *j, long long v) {
    sep(j);
    if (fprintf(j->f, "%lld", v) < 0) j->failed = 1;
}
void json_uint(json *j, unsigned long long v) {
    sep(j);
    if (fprintf(j->f, "%llu", v) < 0) j->failed = 1;
}
void json_num(json *j, const char *fmt, double v) {
    sep(j);
    if (!isfinite(v)) { puts_(j, "null"); return; }
    char buf[64];
    int w = snprintf(buf, sizeof buf, fmt, v);
    if (w <= 0 || (size_t)w >= sizeof buf) { j->failed = 1; return; }
    puts_(j, buf);
}
void json_bool(json *j, int v) { sep(j); puts_(j, v ? "true" : "false"); }
void json_null(json *j) { sep(j); puts_(j, "null"); }
void json_newline(json *j) { puts_(j, "\n"); }

void json_kstr(json *j, const char *k, const char *s) { json_key(j, k); json_str(j, s); }
void json_kint(json *j, const char *k, long long v) { json_key(j, k); json_int(j, v); }
void json_kuint(json *j, const char *k, unsigned long long v) { json_key(j, k); json_uint(j, v); }
void json_knum(json *j, const char *k, const char *fmt, double v) { json_key(j, k); json_num(j, fmt, v); }
void json_kbool(json *j, const char *k, int v) { json_key(j, k); json_bool(j, v); }

int json_end(json *j) {
    if (j->depth != 0 || j->after_key) j->failed = 1;
    puts_(j, "\n");
    if (fflush(j->f) != 0 || ferror(j->f)) j->failed = 1;
    return j->failed ? -1 : 0;
}

typedef struct membuf { char *out; size_t n, cap; } membuf;
static void emit_mem(void *ctx, const char *s, size_t n) {
    membuf *m = ctx;
    for (size_t i = 0; i < n; i++, m->n++)
        if (m->n < m->cap) m->out[m->n] = s[i];
}
size_t json_escape(const char *s, size_t n, char *out, size_t cap) {
    membuf m = { out, 0, cap };
    escape(s, n, emit_mem, &m);
    if (cap) out[m.n < cap ? m.n : cap - 1] = 0;
    return m.n;
}
