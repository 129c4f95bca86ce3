/* http.c: the HTTP side of `veloxquant serve` on libmicrohttpd (a thread per connection): routes,
 * request bodies (size-limited), OpenAI-shaped responses and server-sent-event streams, the
 * Prometheus metrics, slot files, and the SIGTERM drain. A request is parsed and validated here
 * (request.c), tokenized and admitted by budget, then handed to the scheduler (sched.c); the
 * connection's thread waits for its text and watches its socket, so a client that goes away
 * cancels its request (and frees its slot) within a step. */
#define _GNU_SOURCE   /* POLLRDHUP: the peer closed its side */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server.h"

/* A connection's deadline (--header-timeout): from its start, or from its last response on a
 * kept-alive connection, its next request's headers and body must have arrived by `deadline`, or
 * the reaper thread shuts its socket down (libmicrohttpd then closes it). A connection answering
 * a request (the model at work, a stream) has none. Lives from MHD's STARTED notification to its
 * CLOSED one, which comes before the socket is closed, so fd stays valid while listed. */
typedef struct watch {
    struct watch *prev, *next;
    int fd, reading, shut;
    double deadline;
} watch;

typedef struct server {
    srv_config c;
    srv_sched *sched;
    vq_kv_spec *spec_default;  /* requests that name no kv get a copy (never its text re-parsed) */
    long created;
    pthread_mutex_t mu;        /* the counters below */
    long n_id, http_2xx, http_4xx, http_5xx;
    long inflight;             /* requests begun whose response is not yet sent (the drain waits) */
    pthread_mutex_t wmu;       /* the watch list */
    pthread_cond_t wcv;
    watch *watches;
    int reaper_stop;
} server;

typedef struct conn_ctx {
    char *body; size_t len, cap;
    int too_big;
} conn_ctx;

/* ---- responses ---- */
static void count_status(server *S, int http) {
    pthread_mutex_lock(&S->mu);
    if (http < 300) S->http_2xx++;
    else if (http < 500) S->http_4xx++;
    else S->http_5xx++;
    pthread_mutex_unlock(&S->mu);
}

static enum MHD_Result send_text(server *S, struct MHD_Connection *c, int http, const char *type, char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(text); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)http, r);
    MHD_destroy_response(r);
    count_status(S, http);
    return ok;
}

static enum MHD_Result send_json(server *S, struct MHD_Connection *c, int http, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) return MHD_NO;
    return send_text(S, c, http, "application/json", s);
}

static enum MHD_Result send_error(server *S, struct MHD_Connection *c, const srv_error *e) {
    char *s = srv_error_json(e);
    if (!s) return MHD_NO;
    if (S->c.verbose) fprintf(stderr, "serve: %d: %s\n", e->http, e->message);
    return send_text(S, c, e->http, "application/json", s);
}

static enum MHD_Result fail(server *S, struct MHD_Connection *c, int http, const char *type, const char *param,
                            const char *code, const char *msg) {
    srv_error e;
    srv_error_set(&e, http, type, param, code, "%s", msg);
    return send_error(S, c, &e);
}

/* ---- the client's socket: gone or not (a request it no longer waits for is cancelled) ----
 * The end of the client's input (POLLRDHUP) is either a close or a half-close (shutdown of its
 * sending side after a complete request, which still waits for the answer): the two look alike
 * until something is written. A stream writes every second (text or a keep-alive), so there an
 * end of input counts as gone; a non-streamed request counts only a reset or error (what a write
 * to a closed client brings), so a half-closed client gets its answer. */
static int client_gone(int fd, int eof_is_gone) {
    if (fd < 0) return 0;
    struct pollfd p = { .fd = fd, .events = POLLRDHUP };
    if (poll(&p, 1, 0) <= 0) return 0;
    return (p.revents & ((eof_is_gone ? POLLRDHUP : 0) | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* ---- deadlines for a request's headers and body (the watch list) ---- */
static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* reading 1: the next request must arrive within `in` seconds; 0: answering, no deadline */
static void watch_set(server *S, struct MHD_Connection *c, int reading, double in) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    watch *w = ci ? ci->socket_context : NULL;
    if (!w) return;
    pthread_mutex_lock(&S->wmu);
    w->reading = reading;
    w->deadline = mono_s() + in;
    pthread_mutex_unlock(&S->wmu);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **sc, enum MHD_ConnectionNotificationCode toe) {
    server *S = cls;
    watch *w = *sc;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        if (!(w = calloc(1, sizeof *w))) return;   /* unwatched: the idle timeout still ends it */
        w->fd = conn_fd(c);
        w->reading = 1;
        w->deadline = mono_s() + S->c.header_timeout_s;
        pthread_mutex_lock(&S->wmu);
        w->next = S->watches;
        if (S->watches) S->watches->prev = w;
        S->watches = w;
        pthread_mutex_unlock(&S->wmu);
        *sc = w;
        return;
    }
    if (!w) return;
    pthread_mutex_lock(&S->wmu);
    if (w->prev) w->prev->next = w->next;
    else S->watches = w->next;
    if (w->next) w->next->prev = w->prev;
    pthread_mutex_unlock(&S->wmu);
    free(w);
    *sc = NULL;
}

/* Every 250 ms: shut down the sockets whose request is late (the connection's thread sees the
 * end of its input and closes it, freeing its place for honest clients). */
static void *reaper(void *arg) {
    server *S = arg;
    pthread_mutex_lock(&S->wmu);
    while (!S->reaper_stop) {
        double t = mono_s();
        for (watch *w = S->watches; w; w = w->next)
            if (w->reading && !w->shut && w->fd >= 0 && t > w->deadline) {
                shutdown(w->fd, SHUT_RDWR);
                w->shut = 1;
                if (S->c.verbose) fprintf(stderr, "serve: a request's headers or body came too slowly (--header-timeout %d): closed\n", S->c.header_timeout_s);
            }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&S->wcv, &S->wmu, &ts);
    }
    pthread_mutex_unlock(&S->wmu);
    return NULL;
}

/* ---- completion JSON ---- */
static const char *finish_name(srv_finish f) { return f == SRV_FIN_LENGTH ? "length" : "stop"; }

static cJSON *usage_json(const srv_job *j) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_tok);
    cJSON_AddNumberToObject(u, "completion_tokens", j->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", j->n_tok + j->n_gen);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", j->n_reused);   /* reused from the slot's cache */
    return u;
}

/* our extension: where the request ran and how long each phase took */
static cJSON *timings_json(const srv_job *j) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "kv", vq_kv_spec_text(j->spec));
    cJSON_AddNumberToObject(t, "slot", j->slot);
    cJSON_AddNumberToObject(t, "reused_tokens", j->n_reused);
    cJSON_AddNumberToObject(t, "prefilled_tokens", j->n_tok - j->n_reused);
    cJSON_AddNumberToObject(t, "kv_reserved_bytes", (double)j->reserve);
    cJSON_AddNumberToObject(t, "queue_s", j->started ? j->t_start - j->t_submit : 0);
    cJSON_AddNumberToObject(t, "first_token_s", j->n_gen ? j->t_first - j->t_submit : 0);
    cJSON_AddNumberToObject(t, "total_s", j->done ? j->t_done - j->t_submit : 0);
    return t;
}

static cJSON *head_json(server *S, const char *id, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", S->c.model_name);
    return o;
}

/* one streamed chunk: text (may be NULL), finish (NONE: not the last) */
static char *chunk_json(server *S, const srv_job *j, const char *id, const char *text, int role, srv_finish fin) {
    int chat = j->rq.chat;
    cJSON *o = head_json(S, id, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c0 = cJSON_CreateObject();
    cJSON_AddItemToArray(ch, c0);
    cJSON_AddNumberToObject(c0, "index", 0);
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(c0, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (text) cJSON_AddStringToObject(d, "content", text);
    } else {
        cJSON_AddStringToObject(c0, "text", text ? text : "");
        cJSON_AddNullToObject(c0, "logprobs");
    }
    if (fin) {
        cJSON_AddStringToObject(c0, "finish_reason", finish_name(fin));
        cJSON_AddItemToObject(o, "usage", usage_json(j));
        cJSON_AddItemToObject(o, "timings", timings_json(j));
    } else {
        cJSON_AddNullToObject(c0, "finish_reason");
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* ---- streams ---- */
typedef struct stream {
    server *S;
    srv_job *j;
    int fd, phase;             /* 0: role chunk next (chat), 1: text, 2: [DONE] next, 3: ended */
    char id[48];
    char *pend; size_t pend_len, pend_off;   /* bytes formatted, not yet handed to MHD */
} stream;

static void stream_put(stream *st, const char *json) {
    size_t n = strlen(json);
    char *p = malloc(n + 8);
    if (!p) return;
    memcpy(p, "data: ", 6);
    memcpy(p + 6, json, n);
    memcpy(p + 6 + n, "\n\n", 2);
    free(st->pend);
    st->pend = p;
    st->pend_len = n + 8;
    st->pend_off = 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream *st = cls;
    srv_sched *sc = st->S->sched;
    srv_job *j = st->j;
    while (st->pend_off >= st->pend_len) {
        if (st->phase == 3) return MHD_CONTENT_READER_END_OF_STREAM;
        if (st->phase == 0) {
            char *s = chunk_json(st->S, j, st->id, "", 1, SRV_FIN_NONE);
            if (!s) return MHD_CONTENT_READER_END_WITH_ERROR;
            stream_put(st, s);
            free(s);
            st->phase = 1;
            continue;
        }
        if (st->phase == 2) {
            free(st->pend);
            st->pend = strdup("data: [DONE]\n\n");
            st->pend_len = st->pend ? strlen(st->pend) : 0;
            st->pend_off = 0;
            st->phase = 3;
            continue;
        }
        /* phase 1: wait for text or the end, watching the socket; a request that waits long (in
         * the queue, or behind other prompts' prefill) gets an SSE comment every second, which
         * clients ignore and which keeps the connection from looking idle (--idle-timeout) */
        srv_sched_lock(sc);
        int waited = 0, keepalive = 0;
        for (;;) {
            size_t have = j->out_len - j->out_taken;
            size_t ok = j->done ? have : srv_utf8_complete(j->out + j->out_taken, have);
            if (ok > 0 || j->done) break;
            srv_sched_wait(sc, j, 20);
            if (!j->done && client_gone(st->fd, 1)) {
                srv_sched_cancel(sc, j);
                srv_sched_unlock(sc);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            if (++waited >= 50) { keepalive = 1; break; }
        }
        if (keepalive) {
            srv_sched_unlock(sc);
            free(st->pend);
            st->pend = strdup(": keep-alive\n\n");
            st->pend_len = st->pend ? strlen(st->pend) : 0;
            st->pend_off = 0;
            continue;
        }
        size_t have = j->out_len - j->out_taken;
        size_t ok = j->done ? have : srv_utf8_complete(j->out + j->out_taken, have);
        char *text = ok ? srv_utf8_clean(j->out + j->out_taken, ok) : NULL;
        j->out_taken += ok;
        int done = j->done && j->out_taken == j->out_len;
        srv_finish fin = j->finish;
        char err[512];
        snprintf(err, sizeof err, "%s", j->err);
        srv_sched_unlock(sc);
        if (done && (fin == SRV_FIN_ERROR || fin == SRV_FIN_CANCEL)) {
            srv_error e;
            srv_error_set(&e, 500, "server_error", NULL, NULL, "generation failed: %s",
                          fin == SRV_FIN_CANCEL ? "cancelled" : err);
            char *s = srv_error_json(&e);
            if (s) stream_put(st, s);
            free(s);
            free(text);
            st->phase = 2;
            continue;
        }
        if (text && !done) {
            char *s = chunk_json(st->S, j, st->id, text, 0, SRV_FIN_NONE);
            if (s) stream_put(st, s);
            free(s);
        } else if (done) {   /* the last text rides with finish_reason and usage */
            char *s = chunk_json(st->S, j, st->id, text ? text : (j->rq.chat ? NULL : ""), 0, fin);
            if (s) stream_put(st, s);
            free(s);
            st->phase = 2;
        }
        free(text);
    }
    size_t n = st->pend_len - st->pend_off;
    if (n > max) n = max;
    memcpy(buf, st->pend + st->pend_off, n);
    st->pend_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream *st = cls;
    srv_sched *sc = st->S->sched;
    srv_sched_lock(sc);
    srv_sched_cancel(sc, st->j);   /* a no-op when it is done; else the client went away */
    srv_sched_unlock(sc);
    srv_job_release(sc, st->j);
    free(st->pend);
    free(st);
}

/* ---- completions ---- */
static enum MHD_Result completion(server *S, struct MHD_Connection *c, conn_ctx *x, int chat) {
    srv_error e;
    srv_job *j = srv_job_create();
    if (!j) return fail(S, c, 500, "server_error", NULL, NULL, "out of memory");
    if (srv_req_parse(x->body, x->len, chat, S->c.calib_dir, &j->rq, &e)) { srv_job_release(NULL, j); return send_error(S, c, &e); }
    srv_req *rq = &j->rq;
    const vq_model *m = S->c.model;
    if (rq->model && strcmp(rq->model, S->c.model_name)) {
        srv_error_set(&e, 404, "invalid_request_error", "model", "model_not_found",
                      "model '%.200s' is not served here (GET /v1/models lists '%s')", rq->model, S->c.model_name);
        srv_job_release(NULL, j);
        return send_error(S, c, &e);
    }
    /* the prompt: messages through the chat template, or the text as it is */
    vq_err err;
    char *text = NULL;
    vq_chat_message *ms = NULL;
    if (chat) {
        ms = calloc((size_t)rq->n_msgs, sizeof *ms);
        for (int i = 0; ms && i < rq->n_msgs; i++) ms[i] = (vq_chat_message){ rq->msgs[i].role, rq->msgs[i].content };
        text = ms ? vq_chat_apply(m, ms, rq->n_msgs, 1, 1, &err) : NULL;   /* a bad conversation is a 400 */
        if (!text) {
            srv_error_set(&e, 400, "invalid_request_error", "messages", NULL, "messages: %s", ms ? err.msg : "out of memory");
            free(ms);
            srv_job_release(NULL, j);
            return send_error(S, c, &e);
        }
    }
    const char *p = chat ? text : rq->prompt;
    size_t plen = strlen(p);
    int add_bos = vq_token_add_bos(m) && vq_token_bos(m) >= 0;
    /* chat: only the template's markers are special tokens, a message's "<|im_end|>" is text */
    int need = chat ? vq_chat_tokenize(m, ms, rq->n_msgs, 1, 1, add_bos, 0, NULL, 0, &err)
                    : vq_tokenize(m, p, plen, add_bos, 0, NULL, 0, &err);
    if (need > 0 && (j->tok = malloc((size_t)need * sizeof(int))))
        j->n_tok = chat ? vq_chat_tokenize(m, ms, rq->n_msgs, 1, 1, add_bos, 0, j->tok, need, &err)
                        : vq_tokenize(m, p, plen, add_bos, 0, j->tok, need, &err);
    free(ms);
    vq_free(text);
    const char *param = chat ? "messages" : "prompt";
    int rc = 0;
    if (need < 0 || j->n_tok != need)
        rc = srv_error_set(&e, 400, "invalid_request_error", param, NULL, "the prompt cannot be tokenized: %s", err.msg);
    else if (j->n_tok < 1)
        rc = srv_error_set(&e, 400, "invalid_request_error", param, NULL, "the prompt is empty (no tokens)");
    else if (j->n_tok >= S->c.n_ctx)
        rc = srv_error_set(&e, 400, "invalid_request_error", param, "context_length_exceeded",
                           "the prompt is %d tokens but a slot's context holds %d (--ctx): shorten the prompt",
                           j->n_tok, S->c.n_ctx);
    else if (rq->max_tokens > S->c.n_ctx - j->n_tok)
        rc = srv_error_set(&e, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                           "max_tokens is %d but the prompt's %d tokens leave %d of the context's %d",
                           rq->max_tokens, j->n_tok, S->c.n_ctx - j->n_tok, S->c.n_ctx);
    if (rc) { srv_job_release(NULL, j); return send_error(S, c, &e); }
    j->max_tokens = rq->max_tokens ? rq->max_tokens : S->c.n_ctx - j->n_tok;
    /* the cache: its spec, and the bytes it holds at the request's longest length */
    if (rq->spec) { j->spec = rq->spec; rq->spec = NULL; }
    else j->spec = vq_kv_spec_dup(S->spec_default, &err);
    if (!j->spec || vq_kv_spec_bytes_batch(j->spec, m, S->c.n_ctx, S->c.n_batch, j->n_tok + j->max_tokens, &j->reserve, &err)) {
        srv_error_set(&e, 400, "invalid_request_error", "kv", "invalid_kv_spec", "'kv': %s", err.msg);
        srv_job_release(NULL, j);
        return send_error(S, c, &e);
    }
    if (j->reserve > S->c.kv_budget_bytes) {
        srv_error_set(&e, 400, "invalid_request_error", "max_tokens", "kv_budget_exceeded",
                      "this request needs %zu bytes of KV cache (%d tokens of %s) but the server's whole "
                      "budget is %zu bytes (--kv-budget): lower max_tokens or use a smaller KV spec",
                      j->reserve, j->n_tok + j->max_tokens, vq_kv_spec_text(j->spec), S->c.kv_budget_bytes);
        srv_job_release(NULL, j);
        return send_error(S, c, &e);
    }
    j->seed = rq->has_seed ? rq->seed : (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)j << 7);
    char id[48];
    pthread_mutex_lock(&S->mu);
    long nid = ++S->n_id;
    pthread_mutex_unlock(&S->mu);
    snprintf(id, sizeof id, "%s-%ld%06ld", chat ? "chatcmpl" : "cmpl", S->created, nid);
    if (srv_sched_submit(S->sched, j, &e)) { srv_job_release(NULL, j); return send_error(S, c, &e); }
    int fd = conn_fd(c);

    if (rq->stream) {
        stream *st = calloc(1, sizeof *st);
        if (!st) { srv_sched_lock(S->sched); srv_sched_cancel(S->sched, j); srv_sched_unlock(S->sched); srv_job_release(S->sched, j); return MHD_NO; }
        st->S = S;
        st->j = j;
        st->fd = fd;
        st->phase = chat ? 0 : 1;
        snprintf(st->id, sizeof st->id, "%s", id);
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
        if (!r) { stream_free(st); return MHD_NO; }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ok = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        count_status(S, 200);
        return ok;
    }
    /* not streamed: wait here (this connection's thread), watching the socket */
    srv_sched_lock(S->sched);
    while (!j->done) {
        srv_sched_wait(S->sched, j, 20);
        if (!j->done && client_gone(fd, 0)) { srv_sched_cancel(S->sched, j); break; }
    }
    while (!j->done) srv_sched_wait(S->sched, j, 20);
    char *out = srv_utf8_clean(j->out ? j->out : "", j->out_len);
    srv_finish fin = j->finish;
    char errmsg[512];
    snprintf(errmsg, sizeof errmsg, "%s", j->err);
    srv_sched_unlock(S->sched);
    if (fin == SRV_FIN_CANCEL || fin == SRV_FIN_ERROR || !out) {
        free(out);
        srv_job_release(S->sched, j);
        if (fin == SRV_FIN_CANCEL) return MHD_NO;   /* nobody is there to read a reply */
        return fail(S, c, 500, "server_error", NULL, NULL, out ? errmsg : "out of memory");
    }
    cJSON *o = head_json(S, id, chat ? "chat.completion" : "text_completion");
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c0 = cJSON_CreateObject();
    cJSON_AddItemToArray(ch, c0);
    cJSON_AddNumberToObject(c0, "index", 0);
    if (chat) {
        cJSON *msg = cJSON_AddObjectToObject(c0, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        cJSON_AddStringToObject(msg, "content", out);
    } else {
        cJSON_AddStringToObject(c0, "text", out);
    }
    cJSON_AddNullToObject(c0, "logprobs");
    cJSON_AddStringToObject(c0, "finish_reason", finish_name(fin));
    cJSON_AddItemToObject(o, "usage", usage_json(j));
    cJSON_AddItemToObject(o, "timings", timings_json(j));
    free(out);
    srv_job_release(S->sched, j);
    return send_json(S, c, 200, o);
}

/* ---- metrics (Prometheus text format 0.0.4) ---- */
static void prom_label(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') fputc('\\', f);
        if (*s == '\n') { fputs("\\n", f); continue; }
        fputc(*s, f);
    }
}

static enum MHD_Result metrics(server *S, struct MHD_Connection *c) {
    srv_stats st;
    srv_sched_stats(S->sched, &st);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return fail(S, c, 500, "server_error", NULL, NULL, "out of memory");
#define M(name, type, help, fmt, val) fprintf(f, "# HELP veloxquant_" name " " help "\n# TYPE veloxquant_" name " " type "\nveloxquant_" name " " fmt "\n", val)
    M("requests_total", "counter", "Completion requests accepted into the queue.", "%ld", st.requests);
    M("requests_finished_total", "counter", "Completion requests that ended with stop or length.", "%ld", st.requests_ok);
    M("requests_cancelled_total", "counter", "Requests whose client went away.", "%ld", st.requests_cancelled);
    M("requests_failed_total", "counter", "Requests that failed in the model.", "%ld", st.requests_error);
    M("requests_rejected_total", "counter", "Requests refused with 503 (queue full or draining).", "%ld", st.requests_rejected);
    pthread_mutex_lock(&S->mu);
    fprintf(f, "# HELP veloxquant_http_responses_total HTTP responses by status class.\n"
               "# TYPE veloxquant_http_responses_total counter\n"
               "veloxquant_http_responses_total{class=\"2xx\"} %ld\n"
               "veloxquant_http_responses_total{class=\"4xx\"} %ld\n"
               "veloxquant_http_responses_total{class=\"5xx\"} %ld\n", S->http_2xx, S->http_4xx, S->http_5xx);
    pthread_mutex_unlock(&S->mu);
    M("prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", "%ld", st.tokens_in);
    M("prompt_tokens_reused_total", "counter", "Prompt tokens served from a slot's cache (prefix reuse), not prefilled.", "%ld", st.tokens_reused);
    M("prefill_tokens_total", "counter", "Tokens run through prefill.", "%ld", st.prefill_tokens);
    M("prefill_seconds_total", "counter", "Seconds spent in prefill.", "%.6f", st.prefill_s);
    M("completion_tokens_total", "counter", "Tokens generated.", "%ld", st.tokens_out);
    M("decode_steps_total", "counter", "Batched decode steps (one forward pass each).", "%ld", st.decode_steps);
    M("decode_tokens_total", "counter", "Tokens decoded in batched steps.", "%ld", st.decode_tokens);
    M("decode_seconds_total", "counter", "Seconds spent in batched decode steps.", "%.6f", st.decode_s);
    M("decode_tokens_per_second", "gauge", "Aggregate decode tokens per second over the last steps (moving average).", "%.3f", st.decode_tps);
    M("slots", "gauge", "Slots (conversations decoded at once).", "%d", st.n_slots);
    M("slots_active", "gauge", "Slots serving a request.", "%d", st.active);
    M("slots_holding_cache", "gauge", "Slots holding a cache (active or kept for prefix reuse).", "%d", st.slots_holding);
    M("requests_queued", "gauge", "Requests waiting for a slot or for KV budget.", "%d", st.queued);
    M("kv_budget_bytes", "gauge", "The KV budget (--kv-budget).", "%zu", st.budget);
    M("kv_reserved_bytes", "gauge", "KV bytes reserved by running requests (each at its longest length).", "%zu", st.reserved);
    M("kv_idle_held_bytes", "gauge", "KV bytes held by idle slots' caches (dropped when room is needed).", "%zu", st.held);
    fprintf(f, "# HELP veloxquant_kv_held_bytes KV bytes the slots' caches hold now, by KV spec.\n"
               "# TYPE veloxquant_kv_held_bytes gauge\n");
    for (int i = 0; i < st.n_codecs; i++) {
        fputs("veloxquant_kv_held_bytes{kv=\"", f);
        prom_label(f, st.codec[i].spec);
        fprintf(f, "\"} %zu\n", st.codec[i].bytes);
    }
    M("process_resident_bytes", "gauge", "Resident memory of the process (RSS).", "%zu", st.rss);
#undef M
    fclose(f);
    return send_text(S, c, 200, "text/plain; version=0.0.4; charset=utf-8", buf);
}

/* ---- slots ---- */
static enum MHD_Result slots_list(server *S, struct MHD_Connection *c) {
    srv_slot_info *in = calloc((size_t)S->c.n_slots, sizeof *in);
    if (!in) return fail(S, c, 500, "server_error", NULL, NULL, "out of memory");
    int n = srv_sched_slots(S->sched, in, S->c.n_slots);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", i);
        cJSON_AddBoolToObject(o, "busy", in[i].busy);
        cJSON_AddNumberToObject(o, "n_tokens", in[i].n_tokens);
        cJSON_AddNumberToObject(o, "kv_bytes", (double)in[i].kv_bytes);
        cJSON_AddStringToObject(o, "kv", in[i].spec);
        cJSON_AddItemToArray(a, o);
    }
    free(in);
    return send_json(S, c, 200, a);
}

static enum MHD_Result slot_action(server *S, struct MHD_Connection *c, const char *ids, conn_ctx *x) {
    char *end = NULL;
    errno = 0;
    long id = strtol(ids, &end, 10);
    if (!*ids || *end || errno || id < 0 || id >= S->c.n_slots) {
        srv_error e;
        srv_error_set(&e, 404, "invalid_request_error", NULL, NULL, "no slot '%.32s' (slots are 0..%d)", ids, S->c.n_slots - 1);
        return send_error(S, c, &e);
    }
    const char *action = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "action");
    if (!action || (strcmp(action, "save") && strcmp(action, "restore") && strcmp(action, "erase")))
        return fail(S, c, 400, "invalid_request_error", "action", NULL, "give ?action=save, restore or erase");
    char path[4096] = "";
    cJSON *body = NULL;
    const char *fname = NULL;
    if (strcmp(action, "erase")) {
        if (!S->c.slot_dir)
            return fail(S, c, 400, "invalid_request_error", NULL, "slot_files_off",
                        "slot files are off: start the server with --slot-save-path DIR");
        /* cJSON ends a string at an escaped NUL: "a\u0000b" would be the name "a" */
        if ((x->len && memchr(x->body, 0, x->len)) || (x->len >= 6 && memmem(x->body, x->len, "\\u0000", 6)))
            return fail(S, c, 400, "invalid_request_error", "filename", NULL,
                        "the body holds a NUL character (\\u0000): a filename cannot contain one");
        body = x->len ? cJSON_ParseWithLength(x->body, x->len) : NULL;
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(body, "filename");
        if (!cJSON_IsObject(body) || !cJSON_IsString(fn) || cJSON_GetArraySize(body) != 1) {
            cJSON_Delete(body);
            return fail(S, c, 400, "invalid_request_error", "filename", NULL,
                        "the body must be {\"filename\": NAME} and nothing else");
        }
        fname = fn->valuestring;
        if (!srv_filename_ok(fname)) {
            cJSON_Delete(body);
            return fail(S, c, 400, "invalid_request_error", "filename", NULL,
                        "the filename must be 1..128 of A-Z a-z 0-9 . _ - and not start with '.' "
                        "(it names a file in --slot-save-path)");
        }
        snprintf(path, sizeof path, "%s/%s", S->c.slot_dir, fname);
        struct stat st;
        if (!lstat(path, &st) && !S_ISREG(st.st_mode)) {
            srv_error e;
            srv_error_set(&e, 400, "invalid_request_error", "filename", NULL,
                          "'%s' in --slot-save-path is a %s, not a slot file: choose another name", fname,
                          S_ISDIR(st.st_mode) ? "directory" : S_ISLNK(st.st_mode) ? "symbolic link" : "special file");
            cJSON_Delete(body);
            return send_error(S, c, &e);
        }
    }
    srv_error e;
    int n_tokens = 0;
    size_t bytes = 0;
    int rc = srv_sched_slot_action(S->sched, (int)id, action, path, &n_tokens, &bytes, &e);
    if (rc) { cJSON_Delete(body); return send_error(S, c, &e); }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id_slot", (double)id);
    cJSON_AddStringToObject(o, "action", action);
    if (fname) cJSON_AddStringToObject(o, "filename", fname);
    cJSON_AddNumberToObject(o, "n_tokens", n_tokens);
    cJSON_AddNumberToObject(o, "kv_bytes", (double)bytes);
    cJSON_Delete(body);
    return send_json(S, c, 200, o);
}

/* ---- routing ---- */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **cc) {
    server *S = cls;
    conn_ctx *x = *cc;
    if (!x) {
        if (!(x = calloc(1, sizeof *x))) return MHD_NO;
        *cc = x;
        pthread_mutex_lock(&S->mu);
        S->inflight++;
        pthread_mutex_unlock(&S->mu);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > S->c.max_body) {   /* refused before the body is read */
            x->too_big = 1;
            watch_set(S, c, 0, 0);
            srv_error e;
            srv_error_set(&e, 413, "invalid_request_error", NULL, "body_too_large",
                          "the body is %s bytes; at most %zu are taken", cl, S->c.max_body);
            return send_error(S, c, &e);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!x->too_big) {
            if (x->len + *upload_size > S->c.max_body) {
                x->too_big = 1;
                free(x->body);
                x->body = NULL;
            } else {
                if (x->len + *upload_size + 1 > x->cap) {
                    size_t nc = (x->len + *upload_size + 1) * 2;
                    char *b = realloc(x->body, nc);
                    if (!b) return MHD_NO;
                    x->body = b;
                    x->cap = nc;
                }
                memcpy(x->body + x->len, upload, *upload_size);
                x->len += *upload_size;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    watch_set(S, c, 0, 0);   /* the whole request is here: answering has no deadline */
    if (x->too_big) {
        srv_error e;
        srv_error_set(&e, 413, "invalid_request_error", NULL, "body_too_large", "the body exceeds %zu bytes", S->c.max_body);
        return send_error(S, c, &e);
    }
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/v1/completions")) {
        if (!post) return fail(S, c, 405, "invalid_request_error", NULL, NULL, "use POST");
        return completion(S, c, x, url[4] == 'c' && url[5] == 'h');
    }
    if (!strcmp(url, "/health")) {
        if (!get) return fail(S, c, 405, "invalid_request_error", NULL, NULL, "use GET");
        int d = srv_sched_draining(S->sched);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "status", d ? "shutting down" : "ok");
        return send_json(S, c, d ? 503 : 200, o);
    }
    if (!strcmp(url, "/v1/models")) {
        if (!get) return fail(S, c, 405, "invalid_request_error", NULL, NULL, "use GET");
        cJSON *o = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON_AddStringToObject(m, "id", S->c.model_name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", (double)S->created);
        cJSON_AddStringToObject(m, "owned_by", "veloxquant");
        cJSON_AddNumberToObject(m, "n_ctx", S->c.n_ctx);
        cJSON_AddStringToObject(m, "kv", vq_kv_spec_text(S->spec_default));
        cJSON_AddItemToArray(d, m);
        return send_json(S, c, 200, o);
    }
    if (!strcmp(url, "/metrics")) {
        if (!get) return fail(S, c, 405, "invalid_request_error", NULL, NULL, "use GET");
        return metrics(S, c);
    }
    if (!strcmp(url, "/slots")) {
        if (!get) return fail(S, c, 405, "invalid_request_error", NULL, NULL, "use GET");
        return slots_list(S, c);
    }
    if (!strncmp(url, "/slots/", 7)) {
        if (!post) return fail(S, c, 405, "invalid_request_error", NULL, NULL, "use POST");
        return slot_action(S, c, url + 7, x);
    }
    srv_error e;
    srv_error_set(&e, 404, "invalid_request_error", NULL, NULL,
                  "no endpoint %.16s %.200s (POST /v1/chat/completions, POST /v1/completions, GET /v1/models, "
                  "GET /health, GET /metrics, GET /slots, POST /slots/ID?action=save|restore|erase)", method, url);
    return send_error(S, c, &e);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **cc, enum MHD_RequestTerminationCode why) {
    server *S = cls;
    conn_ctx *x = *cc;
    /* a kept-alive connection's next request: the idle timeout ends a silent one, this a trickler */
    watch_set(S, c, 1, (double)S->c.idle_timeout_s + S->c.header_timeout_s);
    if (!x) return;
    pthread_mutex_lock(&S->mu);
    S->inflight--;
    pthread_mutex_unlock(&S->mu);
    free(x->body);
    free(x);
    *cc = NULL;
}

static void stop_reaper(server *S, pthread_t th) {
    pthread_mutex_lock(&S->wmu);
    S->reaper_stop = 1;
    pthread_cond_signal(&S->wcv);
    pthread_mutex_unlock(&S->wmu);
    pthread_join(th, NULL);
}

int srv_run(const srv_config *cfg, char *msg, size_t cap) {
    server S = { .c = *cfg, .created = (long)time(NULL) };
    if (S.c.header_timeout_s <= 0) S.c.header_timeout_s = 30;
    if (S.c.max_conns_per_client <= 0) S.c.max_conns_per_client = S.c.max_conns;
    pthread_mutex_init(&S.mu, NULL);
    pthread_mutex_init(&S.wmu, NULL);
    pthread_cond_init(&S.wcv, NULL);
    vq_err err;
    S.spec_default = vq_kv_spec_parse(cfg->kv_default, &err);
    if (!S.spec_default) { snprintf(msg, cap, "--kv: %s", err.msg); return 1; }
    size_t one;
    if (vq_kv_spec_bytes_batch(S.spec_default, cfg->model, cfg->n_ctx, cfg->n_batch, 1, &one, &err)) {
        snprintf(msg, cap, "--kv: %s", err.msg);
        vq_kv_spec_free(S.spec_default);
        return 1;
    }
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port) };
    if (inet_pton(AF_INET, cfg->host, &sa.sin_addr) != 1) {
        snprintf(msg, cap, "--host '%s' is not an IPv4 address (e.g. 127.0.0.1 or 0.0.0.0)", cfg->host);
        vq_kv_spec_free(S.spec_default);
        return 1;
    }
    /* SIGTERM/SIGINT are taken by sigwait below: block them before any thread starts */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    S.sched = srv_sched_create(&S.c, S.spec_default, msg, cap);
    if (!S.sched) { vq_kv_spec_free(S.spec_default); return 1; }
    pthread_t reaper_th;
    if (pthread_create(&reaper_th, NULL, reaper, &S)) {
        snprintf(msg, cap, "cannot start the connection reaper thread");
        srv_sched_free(S.sched);
        vq_kv_spec_free(S.spec_default);
        return 1;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
        (cfg->verbose ? MHD_USE_ERROR_LOG : 0),
        (uint16_t)cfg->port, NULL, NULL, on_request, &S,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_conns,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(cfg->idle_timeout_s > 0 ? cfg->idle_timeout_s : 60),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)S.c.max_conns_per_client,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, &S,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, &S,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
        MHD_OPTION_END);
    if (!d) {
        snprintf(msg, cap, "cannot listen on %s:%d: %s", cfg->host, cfg->port, strerror(errno ? errno : EADDRINUSE));
        stop_reaper(&S, reaper_th);
        srv_sched_free(S.sched);
        vq_kv_spec_free(S.spec_default);
        return 1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : cfg->port;
    printf("veloxquant serve: listening on http://%s:%d  model %s, kv %s, %d slots of %d tokens, "
           "kv budget %zu bytes, queue %d\n", cfg->host, port, cfg->model_name, vq_kv_spec_text(S.spec_default),
           cfg->n_slots, cfg->n_ctx, cfg->kv_budget_bytes, cfg->queue_cap);
    fflush(stdout);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "veloxquant serve: %s: no new connections; finishing the requests in flight\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT");
    MHD_socket ls = MHD_quiesce_daemon(d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    srv_sched_drain(S.sched, 600);
    /* the last responses are queued but maybe not sent: wait for their connections to finish */
    for (int i = 0; i < 30000; i++) {
        pthread_mutex_lock(&S.mu);
        long n = S.inflight;
        pthread_mutex_unlock(&S.mu);
        if (n <= 0) break;
        usleep(10000);
    }
    MHD_stop_daemon(d);
    stop_reaper(&S, reaper_th);
    srv_sched_free(S.sched);
    vq_kv_spec_free(S.spec_default);
    pthread_mutex_destroy(&S.mu);
    fprintf(stderr, "veloxquant serve: stopped\n");
    return 0;
}
