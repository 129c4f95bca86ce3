/* bench_share.c: do K processes that load one model file hold its weights once? Each child
 * loads the model itself (after fork: nothing is inherited), decodes, reports ready and keeps
 * decoding; while all K decode, the parent reads every child's /proc/PID/smaps (the weights'
 * mapping: Rss and Pss) and smaps_rollup (the process's totals), then stops them. With
 * copy_weights the children read the file into anonymous memory instead (the baseline: a loader
 * that copies), whose mapping is the anonymous one of the file's size. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lab/eval.h"
#include "lab/vqlab.h"

static void child(const vq_bench_share_params *p, int ready_fd, int go_fd) {
    vq_model_params mp = vq_model_default_params();
    mp.tokenizer_path = p->tokenizer_path;
    mp.n_threads = 1;
    mp.copy_weights = p->copy_weights;
    vq_err err;
    vq_model *m = vq_model_load(p->model_path, &mp, &err);
    vq_kv_spec *spec = m ? vq_kv_spec_parse("f16", &err) : NULL;
    vq_session_params sp = vq_session_default_params();
    sp.n_ctx = 256;
    vq_session *s = spec ? vq_session_create(m, spec, &sp, &err) : NULL;
    int n_vocab = m ? vq_model_n_vocab(m) : 0;
    float *logits = s ? malloc((size_t)n_vocab * sizeof *logits) : NULL;
    if (!logits) {
        char c = 'E';
        if (write(ready_fd, &c, 1) < 0) _exit(3);
        _exit(2);
    }
    int tok = 1, steps = 0;
    char c = 'R';
    for (;;) {
        if (vq_session_pos(s) >= sp.n_ctx - 1 && vq_session_truncate(s, 0, &err)) _exit(4);
        if (vq_session_decode(s, &tok, 1, logits, 0, &err)) _exit(5);
        int best = 0;   /* greedy: the weights are read whatever the token */
        for (int i = 1; i < n_vocab; i++) if (logits[i] > logits[best]) best = i;
        tok = best;
        if (++steps == p->n_decode && write(ready_fd, &c, 1) != 1) _exit(6);
        if (steps >= p->n_decode) {   /* go on decoding until the parent closes the pipe */
            struct pollfd pf = { go_fd, POLLIN, 0 };
            if (poll(&pf, 1, 0) > 0) break;
        }
    }
    _exit(0);
}

#define COPY_NAME "[anon:vq-weights-copy]"   /* formats/gguf.c names the copy so */

/* sums of Rss and Pss (kB) over the VMAs named `path` (a file, or COPY_NAME); for COPY_NAME on a
 * kernel without VMA names, the unnamed read-only anonymous VMA of exactly anon_bytes
 * (page-rounded): formats/gguf.c makes the copy read-only, so it is not merged with others */
static int read_smaps(pid_t pid, const char *path, uint64_t anon_bytes, uint64_t *rss, uint64_t *pss) {
    char fn[64], line[PATH_MAX + 256];
    snprintf(fn, sizeof fn, "/proc/%d/smaps", (int)pid);
    FILE *f = fopen(fn, "r");
    if (!f) return -1;
    int in = 0;
    *rss = *pss = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        unsigned long long off;
        char dev[16];
        unsigned long ino;
        int n = 0;
        if (sscanf(line, "%lx-%lx %7s %llx %15s %lu %n", &lo, &hi, perms, &off, dev, &ino, &n) == 6) {
            char *name = line + n;
            name[strcspn(name, "\n")] = 0;
            in = !strcmp(name, path) || (!strcmp(path, COPY_NAME) && !*name && anon_bytes && !strcmp(perms, "r--p") &&
                                          hi - lo == ((anon_bytes + 4095) & ~(uint64_t)4095));
            continue;
        }
        unsigned long long v;
        if (in && sscanf(line, "Rss: %llu kB", &v) == 1) *rss += v;
        if (in && sscanf(line, "Pss: %llu kB", &v) == 1) *pss += v;
    }
    fclose(f);
    return 0;
}

static int read_rollup(pid_t pid, uint64_t *rss, uint64_t *pss) {
    char fn[64], line[256];
    snprintf(fn, sizeof fn, "/proc/%d/smaps_rollup", (int)pid);
    FILE *f = fopen(fn, "r");
    if (!f) return -1;
    *rss = *pss = 0;
    unsigned long long v;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "Rss: %llu kB", &v) == 1) *rss = v;
        if (sscanf(line, "Pss: %llu kB", &v) == 1) *pss = v;
    }
    fclose(f);
    return 0;
}

vq_status vq_bench_share(const vq_bench_share_params *p, vq_bench_share_result *r, vq_err *err) {
    vq_err_clear(err);
    memset(r, 0, sizeof *r);
    if (!p || !p->model_path || p->n_procs < 1 || p->n_procs > VQ_SHARE_MAX || p->n_decode < 1)
        return vq_err_set(err, VQ_ERR_ARG, "bench-share: need a model, 1..%d processes and >= 1 decode step",
                          VQ_SHARE_MAX);
    char real[PATH_MAX];
    if (!realpath(p->model_path, real)) return vq_err_set(err, VQ_ERR_IO, "%s: %s", p->model_path, strerror(errno));
    struct stat sb;
    if (stat(real, &sb)) return vq_err_set(err, VQ_ERR_IO, "%s: %s", real, strerror(errno));
    r->file_bytes = (uint64_t)sb.st_size;
    r->n_procs = p->n_procs;
    pid_t pid[VQ_SHARE_MAX];
    int ready[VQ_SHARE_MAX], go[VQ_SHARE_MAX], n = 0;
    vq_status s = VQ_OK;
    fflush(NULL);
    for (; n < p->n_procs; n++) {
        int a[2], b[2];
        if (pipe(a)) { s = vq_err_set(err, VQ_ERR_IO, "pipe: %s", strerror(errno)); break; }
        if (pipe(b)) { close(a[0]); close(a[1]); s = vq_err_set(err, VQ_ERR_IO, "pipe: %s", strerror(errno)); break; }
        pid[n] = fork();
        if (pid[n] < 0) {
            close(a[0]); close(a[1]); close(b[0]); close(b[1]);
            s = vq_err_set(err, VQ_ERR_IO, "fork: %s", strerror(errno));
            break;
        }
        if (pid[n] == 0) {
            close(a[0]);
            close(b[1]);
            for (int j = 0; j < n; j++) { close(ready[j]); close(go[j]); }
            child(p, a[1], b[0]);
        }
        close(a[1]);
        close(b[0]);
        ready[n] = a[0];
        go[n] = b[1];
    }
    /* every child decodes n_decode steps, then says so; wait for all (2 minutes at most) */
    for (int i = 0; i < n && !s; i++) {
        struct pollfd pf = { ready[i], POLLIN, 0 };
        char c = 0;
        if (poll(&pf, 1, 120000) <= 0 || read(ready[i], &c, 1) != 1 || c != 'R')
            s = vq_err_set(err, VQ_ERR_IO, "bench-share: process %d did not get ready (%s)", i,
                           c == 'E' ? "it could not load the model" : "no answer in 120 s");
    }
    for (int i = 0; i < n && !s; i++) {   /* all are decoding now */
        vq_bench_share_proc *q = &r->proc[i];
        q->pid = (int)pid[i];
        if (read_smaps(pid[i], p->copy_weights ? COPY_NAME : real, p->copy_weights ? r->file_bytes : 0,
                       &q->map_rss_kb, &q->map_pss_kb) ||
            read_rollup(pid[i], &q->rss_kb, &q->pss_kb))
            s = vq_err_set(err, VQ_ERR_IO, "bench-share: cannot read /proc/%d/smaps", (int)pid[i]);
        r->total_map_pss_kb += q->map_pss_kb;
        r->total_pss_kb += q->pss_kb;
        r->total_rss_kb += q->rss_kb;
    }
    for (int i = 0; i < n; i++) { close(go[i]); close(ready[i]); }
    for (int i = 0; i < n; i++) {
        int st;
        if (s) kill(pid[i], SIGTERM);
        if (waitpid(pid[i], &st, 0) == pid[i] && !s && (!WIFEXITED(st) || WEXITSTATUS(st)))
            s = vq_err_set(err, VQ_ERR_IO, "bench-share: process %d ended with status %d", i, st);
    }
    return s;
}
