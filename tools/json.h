/* json.h: the one JSON writer of the CLI. Values go straight to a FILE*; the writer puts the
 * commas and the ": " after keys, so callers cannot get them wrong. Strings come out as valid
 * UTF-8 whatever the bytes were (an invalid byte becomes U+FFFD, control characters are escaped);
 * a non-finite number becomes null. Write errors are remembered and reported by json_end. */
#ifndef VQ_TOOLS_JSON_H
#define VQ_TOOLS_JSON_H
#include <stdio.h>
#include <stddef.h>

#define JSON_MAX_DEPTH 32

typedef struct json {
    FILE *f;
    int depth;
    int count[JSON_MAX_DEPTH];   /* values written so far at each open level */
    int after_key;               /* a key was written: the next value needs no comma */
    int failed;                  /* a write failed (or the nesting was misused) */
} json;

void json_init(json *j, FILE *f);
void json_obj(json *j);                           /* { */
void json_obj_end(json *j);                       /* } */
void json_arr(json *j);                           /* [ */
void json_arr_end(json *j);                       /* ] */
void json_key(json *j, const char *k);
void json_str(json *j, const char *s);            /* NULL: null */
void json_strn(json *j, const char *s, size_t n);
void json_int(json *j, long long v);
void json_uint(json *j, unsigned long long v);
void json_num(json *j, const char *fmt, double v); /* fmt: one printf conversion, e.g. "%.3f" */
void json_bool(json *j, int v);
void json_null(json *j);
void json_newline(json *j);                       /* layout only: a line break before the next value */
/* Shorthands: a key and its value. */
void json_kstr(json *j, const char *k, const char *s);
void json_kint(json *j, const char *k, long long v);
void json_kuint(json *j, const char *k, unsigned long long v);
void json_knum(json *j, const char *k, const char *fmt, double v);
void json_kbool(json *j, const char *k, int v);
/* Ends the document (a newline, flush). Returns 0, or -1 when any write failed or an object or
 * array is still open. */
int json_end(json *j);

/* The bytes of s written as a JSON string body (no quotes) would be; for tests. */
size_t json_escape(const char *s, size_t n, char *out, size_t cap);
#endif
