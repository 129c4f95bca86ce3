/* cli.c: the commands' shared parts (cli.h). */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *g_prefix;

void cli_set_prefix(const char *command) { g_prefix = command; }

void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    if (g_prefix) fprintf(stderr, "veloxquant %s: error: ", g_prefix);
    else fputs("veloxquant: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* ---- strict number parsing: the whole string, within range ---- */
long parse_long(const char *flag, const char *s, long lo, long hi) {
    if (!s) die("%s needs a value", flag);
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end) die("%s: '%s' is not an integer", flag, s);
    if (v < lo || v > hi) die("%s: %ld is out of range [%ld, %ld]", flag, v, lo, hi);
    return v;
}
double parse_double(const char *flag, const char *s, double lo, double hi) {
    if (!s) die("%s needs a value", flag);
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || isnan(v)) die("%s: '%s' is not a number", flag, s);
    if (v < lo || v > hi) die("%s: %g is out of range [%g, %g]", flag, v, lo, hi);
    return v;
}
int parse_int_list(const char *flag, const char *s, int *out, int cap, long lo, long hi) {
    if (!s || !*s) die("%s needs a comma-separated list", flag);
    /* strtok would pass over an empty item ("1,,2", ",1", "1,"): a typo, not a shorter list */
    size_t L = strlen(s);
    if (s[0] == ',' || s[L - 1] == ',' || strstr(s, ",,"))
        die("%s: '%s' has an empty item (a ',' at an end or ',,')", flag, s);
    int n = 0;
    char *list = strdup(s), *save = NULL;
    if (!list) die("out of memory");
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == cap) die("%s: at most %d values", flag, cap);
        out[n++] = (int)parse_long(flag, t, lo, hi);
    }
    free(list);
    if (!n) die("%s: '%s' has no items", flag, s);
    return n;
}

/* ---- shared options ---- */
void opts_init(opts *o, const char *command) {
    memset(o, 0, sizeof *o);
    o->model = DEFAULT_MODEL;
    o->batch = 64;
    o->command = command;
}

int common_opt(opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
#define TAKE() ((*i)++, v)
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!v) die("%s needs a file", a); o->model = TAKE(); return 1; }
    if (!strcmp(a, "--tokenizer")) { if (!v) die("%s needs a file", a); o->tokenizer = TAKE(); return 1; }
    if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { o->threads = (int)parse_long(a, TAKE(), 1, 1024); return 1; }
    if (!strcmp(a, "-b") || !strcmp(a, "--batch")) { o->batch = (int)parse_long(a, TAKE(), 1, 8192); return 1; }
    if (!strcmp(a, "--kv")) {
        if (!v) die("--kv needs a spec (e.g. f16)");
        if (o->n_kv_raw == CLI_MAX_ARMS) die("--kv given more than %d times", CLI_MAX_ARMS);
        o->kv_raw[o->n_kv_raw++] = TAKE();
        o->kv_list[o->n_kv_raw - 1] = o->kv_raw[o->n_kv_raw - 1];
        o->n_kv = o->n_kv_raw;
        o->kv = o->kv_list[0];
        return 1;
    }
    if (!strcmp(a, "--kv-layers")) {
        const char *cmd = o->command;
        if (strcmp(cmd, "generate") && strcmp(cmd, "perplexity") && strcmp(cmd, "bench"))
            die("%s: --kv-layers is for generate, perplexity and bench (here, write the override into "
                "the --kv spec: SPEC@LAYERS=SPEC, docs/kv-spec.md)", cmd);
        if (!v || !*v) die("--kv-layers needs LAYERS=SPEC, e.g. '0,-1=f16' or '0,1=q8_0@-1=f16'");
        if (o->n_kv_layers == CLI_MAX_ARMS) die("--kv-layers given more than %d times", CLI_MAX_ARMS);
        o->kv_layers[o->n_kv_layers++] = TAKE();   /* checked by parse_specs, on the spec value */
        return 1;
    }
    if (!strcmp(a, "--device") || !strcmp(a, "-dev")) {
        const char *cmd = o->command;
        if (strcmp(cmd, "generate") && strcmp(cmd, "perplexity") && strcmp(cmd, "bench") && strcmp(cmd, "serve"))
            die("%s: %s is for generate, perplexity, bench and serve", cmd, a);
        if (!v || !*v) die("%s needs a device: cpu, cuda or cuda:N", a);
        o->device = TAKE();   /* checked by the library: vq_kv_spec_check_device, vq_model_load */
        return 1;
    }
    if (!strcmp(a, "--json")) { o->json = 1; return 1; }
    if (!strcmp(a, "--weights")) { if (!v || !*v) die("%s needs a spec (e.g. q8_0 or q4_0,embd=q8_0)", a); o->weights = TAKE(); return 1; }
    if (!strcmp(a, "--copy-weights")) { o->copy_weights = 1; return 1; }
    if (!strcmp(a, "--seed") || !strcmp(a, "-s")) { o->seed = (uint64_t)parse_long(a, TAKE(), 0, LONG_MAX); return 1; }
#undef TAKE
    return 0;
}

void parse_specs(opts *o, vq_kv_spec **specs) {
    if (o->n_kv == 0 && o->n_kv_layers) { o->kv_list[0] = "f16"; o->n_kv = 1; }
    for (int a = 0; a < o->n_kv; a++) {
        vq_err err;
        specs[a] = vq_kv_spec_parse(o->kv_list[a], &err);
        if (!specs[a]) die("%s", err.msg);
        for (int k = 0; k < o->n_kv_layers; k++) {
            vq_kv_spec *w = vq_kv_spec_with_layers(specs[a], o->kv_layers[k], &err);
            if (!w) die("--kv-layers: %s", err.msg);   /* names the value and the --kv it met */
            vq_kv_spec_free(specs[a]);
            specs[a] = w;
        }
        if (o->device && vq_kv_spec_check_device(specs[a], o->device, &err)) {   /* before anything is loaded */
            if (err.code == VQ_ERR_ARG) die("--device: %s", err.msg);
            die("--kv %s: %s", vq_kv_spec_given(specs[a]), err.msg);
        }
        if (o->n_kv_layers) {   /* the label names the spec made: "q4_0@0,-1=f16" */
            snprintf(o->kv_label[a], sizeof o->kv_label[a], "%s", vq_kv_spec_given(specs[a]));
            o->kv_list[a] = o->kv_label[a];
        }
    }
    o->kv = o->n_kv ? o->kv_list[0] : o->kv;
}
void free_specs(vq_kv_spec **specs, int n) {
    for (int a = 0; a < n; a++) vq_kv_spec_free(specs[a]);
}

/* ---- files ---- */
/* Open path for reading as a regular file: O_NONBLOCK so a FIFO cannot hold us at open, fstat to
 * refuse anything but a regular file before a byte is read. Returns the fd and fills *st. */
static int open_regular(const char *path, const char *what, struct stat *st) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) die("%s %s: cannot open: %s", what, path, strerror(errno));
    if (fstat(fd, st) != 0) { int e = errno; close(fd); die("%s %s: cannot stat: %s", what, path, strerror(e)); }
    if (S_ISDIR(st->st_mode)) { close(fd); die("%s %s: is a directory, not a file", what, path); }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        die("%s %s: not a regular file (a FIFO, socket or device is not read; give a file, or '-' for stdin)",
            what, path);
    }
    return fd;
}

void check_regular_file(const char *path, const char *what) {
    struct stat st;
    close(open_regular(path, what, &st));
}

static void check_nul(const char *what, const char *path, const char *buf, size_t n) {
    const char *z = memchr(buf, 0, n);
    if (z) die("%s %s: contains a NUL byte at offset %zu (text must not contain NUL bytes)", what, path,
               (size_t)(z - buf));
}

char *read_text(const char *path, const char *what, size_t *len) {
    int fd;
    size_t cap;
    const char *arg = path;
    if (!strcmp(path, "-")) { fd = STDIN_FILENO; cap = (size_t)1 << 16; path = "(stdin)"; }
    else {
        struct stat st;
        fd = open_regular(arg, what, &st);
        if ((uint64_t)st.st_size > CLI_MAX_TEXT_BYTES)
            die("%s %s: %lld bytes is more than the %zu MiB a text may have", what, path, (long long)st.st_size,
                CLI_MAX_TEXT_BYTES >> 20);
        /* a regular file never blocks; back to blocking reads so EAGAIN cannot appear */
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        cap = (size_t)st.st_size + 1;
    }
    size_t n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) die("out of memory reading %s", path);
    for (;;) {
        if (n == cap) {
            if (cap > CLI_MAX_TEXT_BYTES) die("%s %s: more than the %zu MiB a text may have", what, path, CLI_MAX_TEXT_BYTES >> 20);
            cap = cap * 2 > CLI_MAX_TEXT_BYTES ? CLI_MAX_TEXT_BYTES + 1 : cap * 2;   /* one byte past the limit tells */
            char *nb = realloc(buf, cap + 1);
            if (!nb) die("out of memory reading %s", path);
            buf = nb;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0) {
            if (errno == EINTR) continue;
            die("%s %s: read error: %s", what, path, strerror(errno));
        }
        if (got == 0) break;
        n += (size_t)got;
        if (n > CLI_MAX_TEXT_BYTES) die("%s %s: more than the %zu MiB a text may have", what, path, CLI_MAX_TEXT_BYTES >> 20);
    }
    if (fd != STDIN_FILENO) close(fd);
    buf[n] = 0;
    check_nul(what, path, buf, n);
    if (len) *len = n;
    return buf;
}

vq_model *load_model(const opts *o) {
    /* The path goes to the library as given: its message says what is wrong (missing, a directory,
     * not a model). Only the default model gets a hint on how to fetch it. */
    if (!strcmp(o->model, DEFAULT_MODEL) && access(o->model, F_OK) != 0)
        die("%s not found: run scripts/fetch_model.sh (or pass -m FILE)", o->model);
    if (o->tokenizer) check_regular_file(o->tokenizer, "--tokenizer");
    vq_model_params p = vq_model_default_params();
    p.tokenizer_path = o->tokenizer;
    p.n_threads = o->threads;
    p.weights = o->weights;
    p.copy_weights = o->copy_weights;
    p.device = o->device;
    vq_err err;
    vq_model *m = vq_model_load(o->model, &p, &err);
    if (!m) die("%s", err.msg);
    return m;
}

int *tokenize_all(const vq_model *m, const char *text, size_t len, int add_bos, int special, int *n_out) {
    vq_err err;
    int need = vq_tokenize(m, text, len, add_bos, special, NULL, 0, &err);
    if (need < 0) die("tokenize: %s", err.msg);
    int *ids = malloc(((size_t)need + 1) * sizeof(int));
    if (!ids) die("out of memory");
    if (vq_tokenize(m, text, len, add_bos, special, ids, need, &err) < 0) die("tokenize: %s", err.msg);
    *n_out = need;
    return ids;
}

void progress(long done, long total, void *user) {
    (void)user;
    if (!isatty(STDERR_FILENO)) return;
    int width = 40, fill = total ? (int)(width * done / total) : width;
    fprintf(stderr, "\r[%.*s%*s] %ld/%ld", fill, "========================================", width - fill, "", done, total);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

/* ---- output ---- */
void finish_stdout(void) {
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout))
        die("writing the output failed: %s", errno ? strerror(errno) : "write error");
}

int write_stdout(const char *s, size_t n) {
    errno = 0;
    if ((n && fwrite(s, 1, n, stdout) != n) || fflush(stdout) != 0) {
        if (!errno) errno = EIO;
        return -1;
    }
    return 0;
}

struct out_file {
    char *path, *tmp;    /* tmp: NULL when written in place */
    FILE *f;
};
static out_file *g_pending;   /* removed at exit unless committed */

static void remove_pending(void) {
    if (g_pending && g_pending->tmp) unlink(g_pending->tmp);
}

out_file *out_open(const char *path) {
    out_file *o = calloc(1, sizeof *o);
    if (!o || !(o->path = strdup(path))) die("out of memory");
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode)) die("%s: is a directory, not a file to write", path);
        /* a device or a pipe: written in place (renaming over it would replace the node) */
        o->f = fopen(path, "w");
        if (!o->f) die("%s: cannot write: %s", path, strerror(errno));
        return o;
    }
    size_t n = strlen(path) + 16;
    o->tmp = malloc(n);
    if (!o->tmp) die("out of memory");
    snprintf(o->tmp, n, "%s.XXXXXX", path);
    int fd = mkstemp(o->tmp);
    if (fd < 0) die("%s: cannot write there (a temp file beside it failed: %s)", path, strerror(errno));
    (void)fchmod(fd, 0644);
    o->f = fdopen(fd, "w");
    if (!o->f) { int e = errno; unlink(o->tmp); die("%s: cannot write: %s", path, strerror(e)); }
    if (!g_pending) atexit(remove_pending);
    g_pending = o;
    return o;
}

FILE *out_stream(out_file *o) { return o->f; }

void out_commit(out_file *o) {
    errno = 0;
    int bad = fflush(o->f) != 0 || ferror(o->f);
    int e = errno;
    if (!bad && o->tmp && fsync(fileno(o->f)) != 0) { bad = 1; e = errno; }
    if (fclose(o->f) != 0 && !bad) { bad = 1; e = errno; }
    if (bad) die("%s: write failed: %s%s", o->path, e ? strerror(e) : "write error",
                 o->tmp ? " (the file was left as it was)" : "");
    if (o->tmp && rename(o->tmp, o->path) != 0) die("%s: cannot replace it: %s", o->path, strerror(errno));
    if (g_pending == o) g_pending = NULL;
    free(o->tmp);
    free(o->path);
    free(o);
}

void command_line(int argc, char **argv, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < argc && o + 1 < n; i++) {
        int q = strpbrk(argv[i], " ;,\"'") != NULL;
        int w = snprintf(buf + o, n - o, "%s%s%s%s", i ? " " : "", q ? "'" : "", argv[i], q ? "'" : "");
        if (w < 0) break;
        o += (size_t)w;
    }
}
