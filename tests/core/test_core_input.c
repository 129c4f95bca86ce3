/* test_core_input.c: the core's input handling. vq_open_regular / vq_read_file refuse anything but
 * a regular file without blocking (a FIFO with no writer, a directory, /dev/zero), say what the path
 * is, and cap what is read into memory (VQ_READ_FILE_MAX, named in the message); vq_err_set turns
 * control bytes of the formatted message into '?' (veloxquant.h promises it). A regression that
 * blocks on the FIFO would hang: alarm() turns that into a failure within seconds. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/core.h"
#include "../vq_test.h"

static char dir[256];

static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "test_core_input: blocked for 20 s (a FIFO opened without O_NONBLOCK?)\n";
    (void)!write(2, m, sizeof m - 1);
    _exit(1);
}

static void check_refused(const char *path, const char *want, vq_status code) {
    vq_err e;
    vq_err_clear(&e);
    size_t len = 123;
    char *p = vq_read_file(path, &len, &e);
    CHECKF(p == NULL && e.code == code && strstr(e.msg, path) && strstr(e.msg, want),
           "vq_read_file(%s): want %s with \"%s\", got %s: %s", path, vq_status_name(code), want,
           vq_status_name(e.code), e.msg);
    free(p);
    vq_err_clear(&e);
    uint64_t sz;
    int fd = vq_open_regular(path, &sz, &e);
    if (code == VQ_ERR_RANGE) {   /* the size limit is vq_read_file's, not vq_open_regular's */
        CHECKF(fd >= 0, "vq_open_regular(%s): %s", path, e.msg);
        if (fd >= 0) close(fd);
    } else {
        CHECKF(fd < 0 && e.code == VQ_ERR_IO && strstr(e.msg, want), "vq_open_regular(%s): %s", path, e.msg);
    }
}

int main(void) {
    signal(SIGALRM, on_alarm);
    alarm(20);
    snprintf(dir, sizeof dir, "/tmp/vq_core_input.XXXXXX");
    if (!mkdtemp(dir)) VQ_SKIP("cannot make a temp directory in /tmp");
    char fifo[300], big[300], small[300], empty[300];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(big, sizeof big, "%s/big", dir);
    snprintf(small, sizeof small, "%s/small.txt", dir);
    snprintf(empty, sizeof empty, "%s/empty", dir);

    /* a regular file reads whole, NUL-terminated; an empty one gives 0 bytes, not an error */
    FILE *f = fopen(small, "wb");
    CHECK(f != NULL);
    if (f) { fputs("hello\nworld", f); fclose(f); }
    f = fopen(empty, "wb");
    if (f) fclose(f);
    vq_err e;
    size_t len = 0;
    char *p = vq_read_file(small, &len, &e);
    CHECKF(p && len == 11 && memcmp(p, "hello\nworld", 12) == 0, "read %s: %s", small, p ? "" : e.msg);
    free(p);
    p = vq_read_file(empty, &len, &e);
    CHECKF(p && len == 0 && p[0] == 0, "read empty: %s", p ? "" : e.msg);
    free(p);

    /* a FIFO without a writer: refused at once (the alarm catches a hang) */
    CHECKF(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    double t0 = vq_now_s();
    check_refused(fifo, "is a FIFO", VQ_ERR_IO);
    CHECKF(vq_now_s() - t0 < 2.0, "refusing the FIFO took %.2f s", vq_now_s() - t0);
    /* a directory says so */
    check_refused(dir, "is a directory", VQ_ERR_IO);
    /* /dev/zero would read forever: a character device is not a regular file */
    if (access("/dev/zero", R_OK) == 0) check_refused("/dev/zero", "character device", VQ_ERR_IO);
    /* absent: the OS's reason */
    char absent[300];
    snprintf(absent, sizeof absent, "%s/absent", dir);
    check_refused(absent, "No such file", VQ_ERR_IO);

    /* over the limit: a sparse file one byte past VQ_READ_FILE_MAX (no disk used, nothing read) */
    int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int made = fd >= 0 && ftruncate(fd, (off_t)VQ_READ_FILE_MAX + 1) == 0;
    if (fd >= 0) close(fd);
    if (made) check_refused(big, VQ_READ_FILE_MAX_TEXT " limit", VQ_ERR_RANGE);
    else printf("note: cannot make a sparse file in %s: the size-limit check is skipped\n", dir);
    /* at the limit exactly would be read: only the arithmetic of the limit is checked here */
    CHECK(VQ_READ_FILE_MAX == 1073741824ull && strcmp(VQ_READ_FILE_MAX_TEXT, "1 GiB") == 0);

    /* vq_err_set: control bytes (all of 0x01..0x1f, and 0x7f) become '?'; UTF-8 bytes stay */
    vq_err_clear(&e);
    const char *evil = "/tmp/a\nFAKE: ok\x1b[31m\r\t\x7f\xce\xb3.bin";
    vq_err_set(&e, VQ_ERR_IO, "%s: cannot open", evil);
    CHECKF(strcmp(e.msg, "/tmp/a?FAKE: ok?[31m???\xce\xb3.bin: cannot open") == 0, "sanitized: %s", e.msg);
    int ctl = 0;
    for (const char *c = e.msg; *c; c++) ctl += (unsigned char)*c < 0x20 || (unsigned char)*c == 0x7f;
    CHECK(ctl == 0);
    char all[40];
    for (int i = 0; i < 31; i++) all[i] = (char)(i + 1);
    all[31] = 0x7f;
    all[32] = 0;
    vq_err_set(&e, VQ_ERR_ARG, "[%s]", all);
    CHECKF(strlen(e.msg) == 34 && strspn(e.msg + 1, "?") == 32, "all control bytes: %s", e.msg);
    /* and through a real path: the file layer's message quotes the path sanitized */
    char nl[300];
    snprintf(nl, sizeof nl, "%s/bad\nname\x1b[0m", dir);
    p = vq_read_file(nl, &len, &e);
    CHECKF(!p && strstr(e.msg, "/bad?name?[0m: cannot open") && !strchr(e.msg, '\n') && !strchr(e.msg, 0x1b),
           "message for a path with control bytes: %s", e.msg);
    free(p);
    CHECK(vq_err_set(NULL, VQ_ERR_ARG, "no err: %s", "\n") == VQ_ERR_ARG);

    unlink(fifo); unlink(big); unlink(small); unlink(empty);
    rmdir(dir);
    return vq_t_done();
}
