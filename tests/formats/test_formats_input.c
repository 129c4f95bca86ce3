/* test_formats_input.c: the GGUF and llama2.c readers refuse anything but a regular file, without
 * blocking: a FIFO with no writer (opening it blocking would wait for one forever), a directory
 * ("is a directory"), a character device (/dev/zero). alarm() turns a hang into a failure. */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include "formats/gguf.h"
#include "formats/llama2c.h"
#include "../vq_test.h"

static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "test_formats_input: blocked for 20 s (a FIFO opened without O_NONBLOCK?)\n";
    (void)!write(2, m, sizeof m - 1);
    _exit(1);
}

static void check_path(const char *path, const char *want) {
    vq_err e;
    double t0 = vq_now_s();
    vq_gguf *g = vq_gguf_open(path, &e);
    CHECKF(!g && e.code == VQ_ERR_IO && strstr(e.msg, path) && strstr(e.msg, want),
           "vq_gguf_open(%s): want \"%s\", got: %s", path, want, g ? "(opened)" : e.msg);
    vq_gguf_close(g);
    vq_l2c *l = vq_l2c_open(path, &e);
    CHECKF(!l && e.code == VQ_ERR_IO && strstr(e.msg, want), "vq_l2c_open(%s): want \"%s\", got: %s", path,
           want, l ? "(opened)" : e.msg);
    vq_l2c_close(l);
    vq_l2c_vocab *v = vq_l2c_vocab_load(path, 512, &e);   /* the tokenizer .bin: read into memory */
    CHECKF(!v && e.code == VQ_ERR_IO && strstr(e.msg, want), "vq_l2c_vocab_load(%s): want \"%s\", got: %s",
           path, want, v ? "(loaded)" : e.msg);
    vq_l2c_vocab_free(v);
    CHECKF(vq_now_s() - t0 < 2.0, "%s: refusing took %.2f s", path, vq_now_s() - t0);
}

int main(void) {
    signal(SIGALRM, on_alarm);
    alarm(20);
    char dir[64] = "/tmp/vq_formats_input.XXXXXX", fifo[128];
    if (!mkdtemp(dir)) VQ_SKIP("cannot make a temp directory in /tmp");
    snprintf(fifo, sizeof fifo, "%s/model.gguf", dir);
    CHECKF(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    check_path(fifo, "is a FIFO");
    check_path(dir, "is a directory");
    if (access("/dev/zero", R_OK) == 0) check_path("/dev/zero", "character device");
    unlink(fifo);
    rmdir(dir);
    return vq_t_done();
}
