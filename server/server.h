/* server.h: `veloxquant serve`, an OpenAI-compatible HTTP server on the public session API. The
 * server is a client of libveloxquant like the CLI (it includes veloxquant.h and nothing of src/),
 * plus libmicrohttpd (HTTP) and cJSON (JSON). Three parts:
 *   request.c  a request body -> a validated srv_req (a pure function; tests/fuzz/fuzz_server.c)
 *   sched.c    the scheduler thread: owns the N slot sessions, admission against the KV budget,
 *              chunked prefill, one vq_decode_batch per step over every decoding slot
 *   http.c     the HTTP endpoints, server-sent events, metrics, SIGTERM drain
 * tools/cmd_serve.c parses the flags and calls srv_run. docs/serve.md describes the endpoints. */
#ifndef VQ_SERVER_H
#define VQ_SERVER_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "veloxquant.h"

/* ---- configuration (tools/cmd_serve.c fills it) ---- */
typedef struct srv_config {
    const vq_model *model;
    const char *model_name;    /* the id /v1/models reports and "model" may name */
    const char *host;          /* IPv4 address to bind, e.g. "127.0.0.1" */
    int port;                  /* 0: any free port (printed on stdout) */
    int n_slots;               /* conversations decoded at once */
    int n_ctx;                 /* positions per slot */
    int n_batch;               /* prefill chunk */
    int n_threads;             /* the scheduler's OpenMP threads (0: OpenMP's default) */
    int queue_cap;             /* requests that may wait for a slot or for budget */
    int max_conns;             /* concurrent HTTP connections */
    size_t kv_budget_bytes;    /* KV memory all slots together may hold or reserve */
    const char *kv_default;    /* spec of requests that name none */
    const char *slot_dir;      /* where slot files go (NULL: slot save/restore is off) */
    const char *calib_dir;     /* calibration files a request's kv may name (NULL: none) */
    uint64_t kv_seed;          /* every slot's cache seed (the CLI's generate uses 0x5eed) */
    size_t max_body;           /* bytes of a request body; larger: 413 */
    int idle_timeout_s;        /* a connection silent this long is closed (slow or broken clients) */
    int header_timeout_s;      /* a request's headers and body must arrive within this (trickling clients) */
    int max_conns_per_client;  /* concurrent connections from one IP address */
    int verbose;               /* a line per request on stderr */
} srv_config;

/* Runs until SIGTERM or SIGINT, then stops accepting, finishes the requests in flight and returns
 * 0. A failure to start returns nonzero with msg filled. */
int srv_run(const srv_config *c, char *msg, size_t cap);

/* ---- a parsed request (request.c) ---- */
#define SRV_MAX_STOP 4
typedef struct srv_msg { char *role, *content; } srv_msg;
typedef struct srv_req {
    int chat;                  /* /v1/chat/completions (messages) or /v1/completions (prompt) */
    char *model;               /* NULL when absent */
    srv_msg *msgs; int n_msgs, msgs_cap;   /* msgs_cap: entries allocated */
    char *prompt;
    int max_tokens;            /* 0: absent (the rest of the context) */
    double temperature, top_p, min_p;
    int top_k;
    int has_seed; uint64_t seed;
    char *stop[SRV_MAX_STOP]; int n_stop;
    int stream, include_usage;
    char *kv;                  /* our extension: the KV spec text (NULL: the server's default) */
    vq_kv_spec *spec;          /* kv parsed (NULL when kv is NULL) */
} srv_req;

/* An error as the OpenAI API reports one: {"error":{"message","type","param","code"}}. */
typedef struct srv_error {
    int http;                  /* 400, 404, 413, 503, ... */
    char message[640];
    const char *type;          /* "invalid_request_error", "server_error", ... */
    char param[48];            /* "" when none */
    const char *code;          /* NULL when none */
} srv_error;

int  srv_error_set(srv_error *e, int http, const char *type, const char *param, const char *code,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The error as a malloc'd JSON body. */
char *srv_error_json(const srv_error *e);

/* Parse and validate len bytes of a request body (need not be NUL-terminated). Returns 0 with
 * *r filled (srv_req_free it), or an HTTP status with e filled and nothing to free. Touches no
 * model and no global state; the only file it may read is a calibration file of calib_dir that
 * "kv" names by its plain name (calib_dir NULL: none). */
int  srv_req_parse(const char *body, size_t len, int chat, const char *calib_dir, srv_req *r, srv_error *e);
void srv_req_free(srv_req *r);
/* A slot file's name: 1..128 of [A-Za-z0-9._-], not starting with '.'. Returns 1 when valid. */
int  srv_filename_ok(const char *name);

/* ---- text helpers (request.c) ---- */
/* Length of the longest prefix of s[0..n) that does not end inside a UTF-8 character. */
size_t srv_utf8_complete(const char *s, size_t n);
/* s[0..n) with every invalid UTF-8 sequence replaced by U+FFFD, NUL-terminated (malloc'd). */
char *srv_utf8_clean(const char *s, size_t n);

/* ---- the scheduler (sched.c) ---- */
typedef struct srv_sched srv_sched;
typedef enum srv_finish { SRV_FIN_NONE = 0, SRV_FIN_STOP, SRV_FIN_LENGTH, SRV_FIN_CANCEL, SRV_FIN_ERROR } srv_finish;

/* A request on its way through the scheduler (srv_job_create; refs counts its holders). HTTP threads and the scheduler share it; the fields
 * under "shared" are read and written under the scheduler's lock only. */
typedef struct srv_job {
    /* set by the HTTP thread before submitting, read-only after */
    srv_req rq;
    int *tok; int n_tok;           /* the prompt's tokens */
    int max_tokens;
    vq_kv_spec *spec;              /* owned (rq.spec moved here, or a copy of the default) */
    size_t reserve;                /* vq_kv_spec_bytes at n_tok + max_tokens */
    uint64_t seed;
    double t_submit;
    /* shared */
    char *out; size_t out_len, out_cap;   /* text made so far (stop strings cut) */
    size_t out_taken;              /* bytes the HTTP side has sent */
    int n_gen, n_reused, slot;
    srv_finish finish;
    char err[512];
    int started, done, cancelled, refs;
    double t_start, t_first, t_done;
    pthread_cond_t cond;           /* signalled when out grows or the job is done */
} srv_job;

/* Counters /metrics prints (a snapshot taken under the lock). */
#define SRV_MAX_CODECS 16
typedef struct srv_stats {
    long requests, requests_ok, requests_rejected, requests_cancelled, requests_error;
    long tokens_in, tokens_out, tokens_reused, prefill_tokens;
    double prefill_s, decode_s;
    long decode_steps, decode_tokens;
    double decode_tps;             /* tokens per second of the last steps (aggregate over slots) */
    int active, queued, n_slots, slots_holding;
    size_t budget, reserved, held;  /* bytes: budget, reserved by running requests, held by idle slots */
    int n_codecs;
    struct { char spec[VQ_KV_SPEC_MAX_LEN + 1]; size_t bytes; int slots; } codec[SRV_MAX_CODECS];
    size_t rss;
} srv_stats;

/* Per slot, for GET /slots. */
typedef struct srv_slot_info { int busy, n_tokens; size_t kv_bytes; char spec[VQ_KV_SPEC_MAX_LEN + 1]; } srv_slot_info;

srv_job   *srv_job_create(void);   /* zeroed, refs 1 (the caller's) */
/* spec_default: what a restored slot file's cache is made with (copied) */
srv_sched *srv_sched_create(const srv_config *c, const vq_kv_spec *spec_default, char *msg, size_t cap);
void       srv_sched_free(srv_sched *s);   /* stops the thread; call when nothing is in flight */
/* Queue a job (refs becomes 2: the scheduler's and the caller's). 0, or 503 with e filled when
 * the queue is full or the server is draining. */
int  srv_sched_submit(srv_sched *s, srv_job *j, srv_error *e);
/* The caller's side: lock, wait (with a timeout), unlock, and release its reference. */
void srv_sched_lock(srv_sched *s);
void srv_sched_unlock(srv_sched *s);
void srv_sched_wait(srv_sched *s, srv_job *j, int ms);   /* under the lock */
void srv_sched_cancel(srv_sched *s, srv_job *j);         /* under the lock */
void srv_job_release(srv_sched *s, srv_job *j);          /* takes the lock itself */
void srv_sched_stats(srv_sched *s, srv_stats *st);
int  srv_sched_slots(srv_sched *s, srv_slot_info *out, int cap);
/* Stop taking new jobs; wait until every queued and running one has finished and every job has
 * been released (at most timeout_s). */
void srv_sched_drain(srv_sched *s, double timeout_s);
int  srv_sched_draining(srv_sched *s);
/* Slot file operations, run on the scheduler thread: action "save", "restore" or "erase".
 * Returns 0 with info filled (tokens, bytes), or an HTTP status with e filled. */
int  srv_sched_slot_action(srv_sched *s, int slot, const char *action, const char *path,
                           int *n_tokens, size_t *bytes, srv_error *e);
#endif
