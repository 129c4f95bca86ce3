/* test_json.c: the CLI's JSON writer (tools/json.c): commas and nesting, string escapes, invalid
 * UTF-8 replaced by U+FFFD, non-finite numbers as null, write errors reported. */
#include "../vq_test.h"
#include "json.h"

#include <math.h>

/* The document written by fn into a memory stream. */
static char *doc(void (*fn)(json *), int *rc) {
    static char buf[4096];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    json j;
    json_init(&j, f);
    fn(&j);
    *rc = json_end(&j);
    fclose(f);
    return buf;
}

static void nested(json *j) {
    json_obj(j);
    json_kint(j, "a", 1);
    json_key(j, "b");
    json_arr(j);
    json_int(j, 2);
    json_obj(j);
    json_obj_end(j);
    json_arr(j);
    json_arr_end(j);
    json_str(j, "x");
    json_arr_end(j);
    json_kbool(j, "c", 0);
    json_key(j, "d");
    json_null(j);
    json_knum(j, "e", "%.3f", 1.5);
    json_kuint(j, "f", 18446744073709551615ull);
    json_obj_end(j);
}
static void nonfinite(json *j) {
    json_arr(j);
    json_num(j, "%.2f", NAN);
    json_num(j, "%g", INFINITY);
    json_num(j, "%g", -INFINITY);
    json_num(j, "%.1f", -0.25);
    json_arr_end(j);
}
static void unclosed(json *j) { json_obj(j); json_kint(j, "a", 1); }
static void dangling_key(json *j) { json_obj(j); json_key(j, "a"); json_obj_end(j); }

static void esc(const char *in, size_t n, const char *want) {
    char out[256];
    json_escape(in, n, out, sizeof out);
    CHECKF(!strcmp(out, want), "escape of %zu bytes gave '%s', want '%s'", n, out, want);
}

int main(void) {
    int rc;
    const char *d = doc(nested, &rc);
    CHECKF(rc == 0 && !strcmp(d, "{\"a\": 1, \"b\": [2, {}, [], \"x\"], \"c\": false, \"d\": null, \"e\": 1.500, "
                                  "\"f\": 18446744073709551615}\n"), "got %s", d);
    d = doc(nonfinite, &rc);
    CHECKF(rc == 0 && !strcmp(d, "[null, null, null, -0.2]\n") , "got %s", d);
    doc(unclosed, &rc);
    CHECK(rc == -1);
    doc(dangling_key, &rc);
    CHECK(rc == -1);

    esc("plain", 5, "plain");
    esc("q\"b\\s/", 6, "q\\\"b\\\\s/");
    esc("\n\t\r\b\f\x01\x1f\x7f", 8, "\\n\\t\\r\\b\\f\\u0001\\u001f\\u007f");
    esc("a\0b", 3, "a\\u0000b");                                /* an embedded NUL is kept, escaped */
    esc("h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 12, "h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");   /* valid UTF-8 as is */
    esc("\xff", 1, "\xef\xbf\xbd");                             /* not a UTF-8 byte */
    esc("\x80x", 2, "\xef\xbf\xbdx");                           /* stray continuation */
    esc("\xc3", 1, "\xef\xbf\xbd");                             /* cut short */
    esc("\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd");             /* overlong '/' */
    esc("\xe0\x80\xaf", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");   /* overlong, 3 bytes */
    esc("\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");   /* UTF-16 surrogate */
    esc("\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");   /* above U+10FFFF */
    esc("\xe2\x82", 2, "\xef\xbf\xbd\xef\xbf\xbd");             /* 3-byte sequence cut at 2 */

    /* a failed write is reported */
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        json j;
        json_init(&j, full);
        json_obj(&j);
        json_kstr(&j, "a", "b");
        json_obj_end(&j);
        CHECK(json_end(&j) == -1);
        fclose(full);
    }
    return vq_t_done();
}
