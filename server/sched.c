/* sched.c: the scheduler thread. It alone touches the model's sessions: N slots, each a session
 * with its own compressed cache. One step: admit queued requests into free slots (a slot whose
 * held tokens begin the request's is reused: truncated to the common prefix, only the rest is
 * prefilled), one prefill chunk for every slot still prefilling, then one step of every slot that
 * is decoding, their generators stepped together (vq_generator_step_batch: the weights read once
 * for all of them). The text, stop strings and limits are the generator's, as in
 * vq_session_generate, so greedy answers equal the CLI's.
 * Memory: a running request reserves vq_kv_spec_bytes at its longest length; an idle slot's
 * cache counts what it holds; together they stay within the budget, idle caches being dropped
 * (least recently used first) when a request needs the room. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

typedef struct slot {
    vq_session *s;
    vq_kv_spec *spec;          /* the spec the session was made with (a copy; NULL with no session) */
    srv_job *job;              /* running request, or NULL */
    int setup;                 /* job assigned, session not yet prepared */
    int fed;                   /* prompt tokens in the cache */
    int decoding;              /* the generator has taken a token: step it with the batch */
    vq_sampler *smp;
    vq_generator *gen;
    double last_used;
    size_t held;               /* kv bytes, published under the lock */
    int n_held;
} slot;

struct srv_sched {
    srv_config c;
    const vq_model *m;
    vq_kv_spec *spec_default;  /* a restored slot file's cache */
    int V;
    pthread_mutex_t mu;
    pthread_cond_t work, idle, ctl_cv;
    pthread_t th;
    int started, stop, draining;
    srv_job **queue; int qlen, qcap;
    slot *slots;
    float *logits;             /* n_slots x V */
    vq_generator **bg; vq_gen_step *bout; int *bslot;
    size_t reserved;
    long live_jobs;
    srv_stats st;
    struct {                   /* one slot file operation at a time */
        int pending, busy, slot, rc, n_tokens;
        const char *action, *path;
        size_t bytes;
        srv_error *e;
    } ctl;
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

srv_job *srv_job_create(void) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_cond_init(&j->cond, NULL);
    j->refs = 1;
    j->slot = -1;
    return j;
}

static void job_free(srv_job *j) {
    srv_req_free(&j->rq);
    free(j->tok);
    vq_kv_spec_free(j->spec);
    free(j->out);
    pthread_cond_destroy(&j->cond);
    free(j);
}

/* under the lock */
static void job_unref(srv_sched *s, srv_job *j) {
    if (--j->refs > 0) return;
    job_free(j);
    s->live_jobs--;
    pthread_cond_broadcast(&s->idle);
}

void srv_job_release(srv_sched *s, srv_job *j) {
    if (!s) { job_free(j); return; }
    pthread_mutex_lock(&s->mu);
    job_unref(s, j);
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_lock(srv_sched *s) { pthread_mutex_lock(&s->mu); }
void srv_sched_unlock(srv_sched *s) { pthread_mutex_unlock(&s->mu); }

void srv_sched_wait(srv_sched *s, srv_job *j, int ms) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += (long)ms * 1000000L;
    t.tv_sec += t.tv_nsec / 1000000000L;
    t.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&j->cond, &s->mu, &t);
}

void srv_sched_cancel(srv_sched *s, srv_job *j) {
    if (j->done || j->cancelled) return;
    j->cancelled = 1;
    pthread_cond_signal(&s->work);
}

int srv_sched_submit(srv_sched *s, srv_job *j, srv_error *e) {
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->draining)
        rc = srv_error_set(e, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
    else if (s->qlen >= s->qcap)
        rc = srv_error_set(e, 503, "server_error", NULL, "queue_full",
                           "the server is busy: %d requests are waiting already (--queue %d); retry later",
                           s->qlen, s->qcap);
    if (rc) {
        s->st.requests_rejected++;
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    j->refs++;
    j->t_submit = now_s();
    s->queue[s->qlen++] = j;
    s->live_jobs++;
    s->st.requests++;
    s->st.tokens_in += j->n_tok;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int srv_sched_draining(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    int d = s->draining;
    pthread_mutex_unlock(&s->mu);
    return d;
}

/* ---- output (under the lock) ---- */
static void out_append(srv_job *j, const char *p, size_t n) {
    if (!n) return;
    if (j->out_len + n + 1 > j->out_cap) {
        size_t nc = (j->out_len + n + 1) * 2;
        char *o = realloc(j->out, nc);
        if (!o) return;   /* the text is cut; the request still ends */
        j->out = o;
        j->out_cap = nc;
    }
    memcpy(j->out + j->out_len, p, n);
    j->out_len += n;
    j->out[j->out_len] = 0;
    pthread_cond_broadcast(&j->cond);
}

static void finish(srv_sched *s, slot *sl, srv_finish why, const char *msg) {
    srv_job *j = sl->job;
    j->finish = why;
    j->done = 1;
    j->t_done = now_s();
    if (msg) snprintf(j->err, sizeof j->err, "%s", msg);
    s->reserved -= j->reserve;
    s->st.tokens_out += j->n_gen;
    s->st.tokens_reused += j->n_reused;
    if (why == SRV_FIN_CANCEL) s->st.requests_cancelled++;
    else if (why == SRV_FIN_ERROR) s->st.requests_error++;
    else s->st.requests_ok++;
    pthread_cond_broadcast(&j->cond);
    if (s->c.verbose)
        fprintf(stderr, "serve: slot %d: %d prompt tokens (%d reused), %d generated, %s, %.3f s\n",
                (int)(sl - s->slots), j->n_tok, j->n_reused, j->n_gen,
                why == SRV_FIN_STOP ? "stop" : why == SRV_FIN_LENGTH ? "length" : why == SRV_FIN_CANCEL ? "cancelled" : "error",
                j->t_done - j->t_submit);
    sl->job = NULL;
    sl->decoding = 0;
    sl->last_used = now_s();
    vq_generator_free(sl->gen);
    sl->gen = NULL;
    vq_sampler_free(sl->smp);
    sl->smp = NULL;
    job_unref(s, j);
}

/* A generator's step for sl's request: its text to the client, its stop to the request's finish.
 * Under the lock. */
static void took(srv_sched *s, slot *sl, const vq_gen_step *o) {
    srv_job *j = sl->job;
    if (o->token >= 0 && ++j->n_gen == 1) j->t_first = now_s();
    out_append(j, o->text, o->n_text);
    switch (o->stop) {
    case VQ_STOP_NONE: sl->decoding = 1; return;
    case VQ_STOP_EOG: case VQ_STOP_STRING: finish(s, sl, SRV_FIN_STOP, NULL); return;
    default: finish(s, sl, SRV_FIN_LENGTH, NULL); return;   /* max_tokens, or the context is full */
    }
}

/* ---- admission (under the lock) ---- */
static int common_prefix(const slot *sl, const srv_job *j) {
    if (!sl->s || !vq_kv_spec_equal(sl->spec, j->spec)) return 0;   /* the whole spec, never a prefix of its text */
    const int *t = vq_session_tokens(sl->s);
    int n = vq_session_pos(sl->s), k = 0;
    while (k < n && k < j->n_tok && t[k] == j->tok[k]) k++;
    return k < j->n_tok ? k : j->n_tok - 1;   /* at least one token runs, for its logits */
}

static size_t held_idle(const srv_sched *s, int except) {
    size_t h = 0;
    for (int i = 0; i < s->c.n_slots; i++)
        if (i != except && !s->slots[i].job) h += s->slots[i].held;
    return h;
}

static void drop_cache(slot *sl) {
    vq_session_free(sl->s);
    sl->s = NULL;
    vq_kv_spec_free(sl->spec);
    sl->spec = NULL;
    sl->held = 0;
    sl->n_held = 0;
}

/* Drop idle caches (least recently used first, never keep) until extra more bytes fit. */
static int make_room(srv_sched *s, size_t extra, int keep) {
    while (s->reserved + extra + held_idle(s, keep) > s->c.kv_budget_bytes) {
        int v = -1;
        for (int i = 0; i < s->c.n_slots; i++)
            if (i != keep && !s->slots[i].job && s->slots[i].s && (v < 0 || s->slots[i].last_used < s->slots[v].last_used))
                v = i;
        if (v < 0) return 0;
        drop_cache(&s->slots[v]);
    }
    return 1;
}

static void admit(srv_sched *s) {
    int w = 0;
    for (int i = 0; i < s->qlen; i++) {   /* cancelled waiters leave the queue at once */
        srv_job *j = s->queue[i];
        if (j->cancelled) {
            j->done = 1;
            j->finish = SRV_FIN_CANCEL;
            s->st.requests_cancelled++;
            pthread_cond_broadcast(&j->cond);
            job_unref(s, j);
        } else {
            s->queue[w++] = j;
        }
    }
    s->qlen = w;
    while (s->qlen > 0) {
        srv_job *j = s->queue[0];
        int best = -1, best_k = -1;
        for (int i = 0; i < s->c.n_slots; i++) {
            slot *sl = &s->slots[i];
            if (sl->job) continue;
            int k = common_prefix(sl, j);
            /* the longest common prefix; then an empty slot (idle caches stay for their
             * conversations); then the least recently used */
            const slot *b = best >= 0 ? &s->slots[best] : NULL;
            if (!b || k > best_k ||
                (k == best_k && ((!sl->s && b->s) || (!sl->s == !b->s && sl->last_used < b->last_used)))) {
                best = i;
                best_k = k;
            }
        }
        if (best < 0) return;                             /* every slot is busy */
        if (!make_room(s, j->reserve, best)) return;      /* wait for running requests to end */
        memmove(s->queue, s->queue + 1, (size_t)(s->qlen - 1) * sizeof *s->queue);
        s->qlen--;
        slot *sl = &s->slots[best];
        sl->job = j;
        sl->setup = 1;
        j->slot = best;
        j->started = 1;
        j->t_start = now_s();
        s->reserved += j->reserve;
    }
}

/* ---- the slot's session for its new request (scheduler thread, no lock) ---- */
static const char *prepare(srv_sched *s, slot *sl, char *msg, size_t cap) {
    srv_job *j = sl->job;
    vq_err err;
    if (sl->s && !vq_kv_spec_equal(sl->spec, j->spec)) drop_cache(sl);
    int k = 0;
    if (sl->s) {
        k = common_prefix(sl, j);
        if (vq_session_truncate(sl->s, k, &err)) { snprintf(msg, cap, "%s", err.msg); drop_cache(sl); k = 0; }
    }
    if (!sl->s) {
        vq_session_params p = vq_session_default_params();
        p.n_ctx = s->c.n_ctx;
        p.n_batch = s->c.n_batch;
        p.kv_seed = s->c.kv_seed;
        p.allow_ctx_over_train = 1;
        sl->s = vq_session_create(s->m, j->spec, &p, &err);
        if (!sl->s) { snprintf(msg, cap, "%s", err.msg); return msg; }
        if (!(sl->spec = vq_kv_spec_dup(j->spec, &err))) { drop_cache(sl); snprintf(msg, cap, "%s", err.msg); return msg; }
    }
    vq_sampler_params sp = vq_sampler_default_params();
    sp.temp = (float)j->rq.temperature;
    sp.top_p = (float)j->rq.top_p;
    sp.top_k = j->rq.top_k;
    sp.min_p = (float)j->rq.min_p;
    sp.seed = j->seed;
    sl->smp = vq_sampler_create(&sp, s->V, &err);
    if (!sl->smp) { snprintf(msg, cap, "%s", err.msg); return msg; }
    vq_generate_params gp = vq_generate_default_params();
    gp.n_predict = j->max_tokens;
    gp.stop = (const char *const *)j->rq.stop;
    gp.n_stop = j->rq.n_stop;
    sl->gen = vq_generator_create(sl->s, sl->smp, &gp, &err);
    if (!sl->gen) { snprintf(msg, cap, "%s", err.msg); return msg; }
    sl->fed = k;
    sl->decoding = 0;
    j->n_reused = k;
    return NULL;
}

static void publish(srv_sched *s) {
    for (int i = 0; i < s->c.n_slots; i++) {
        slot *sl = &s->slots[i];
        sl->held = vq_session_kv_bytes(sl->s);
        sl->n_held = vq_session_pos(sl->s);
    }
}

/* ---- slot files (scheduler thread, under the lock: rare and short) ---- */
static void run_ctl(srv_sched *s) {
    srv_error *e = s->ctl.e;
    slot *sl = &s->slots[s->ctl.slot];
    vq_err err;
    int rc = 0;
    const char *a = s->ctl.action;
    if (sl->job) rc = srv_error_set(e, 409, "invalid_request_error", NULL, "slot_busy",
                                    "slot %d is serving a request; try again when it is idle", s->ctl.slot);
    else if (!strcmp(a, "erase")) drop_cache(sl);
    else if (!strcmp(a, "save")) {
        if (!sl->s || vq_session_pos(sl->s) == 0)
            rc = srv_error_set(e, 400, "invalid_request_error", NULL, "slot_empty", "slot %d holds no tokens to save", s->ctl.slot);
        else if (vq_session_save(sl->s, s->ctl.path, &err)) {
            if (err.code == VQ_ERR_STATE)   /* a documented limit (an evicting cache), not a failure */
                rc = srv_error_set(e, 501, "invalid_request_error", NULL, "not_implemented",
                                   "slot %d cannot be saved: %s", s->ctl.slot, err.msg);
            else
                rc = srv_error_set(e, 500, "server_error", NULL, NULL, "saving slot %d: %s", s->ctl.slot, err.msg);
        }
    } else {   /* restore */
        if (!sl->s) {
            vq_session_params p = vq_session_default_params();
            p.n_ctx = s->c.n_ctx;
            p.n_batch = s->c.n_batch;
            p.kv_seed = s->c.kv_seed;
            p.allow_ctx_over_train = 1;
            sl->spec = vq_kv_spec_dup(s->spec_default, &err);
            sl->s = sl->spec ? vq_session_create(s->m, sl->spec, &p, &err) : NULL;
            if (!sl->s) drop_cache(sl);
        }
        if (!sl->s)
            rc = srv_error_set(e, 500, "server_error", NULL, NULL, "slot %d: %s", s->ctl.slot, err.msg);
        else if (vq_session_load(sl->s, s->ctl.path, &err)) {
            rc = srv_error_set(e, err.code == VQ_ERR_IO ? 404 : 400, "invalid_request_error", "filename", NULL,
                               "restoring slot %d: %s", s->ctl.slot, err.msg);
            drop_cache(sl);
        } else {
            sl->last_used = now_s();
            publish(s);
            size_t mine = sl->held;
            sl->held = 0;
            if (!make_room(s, mine, s->ctl.slot)) {
                drop_cache(sl);
                rc = srv_error_set(e, 507, "server_error", NULL, "kv_budget_exceeded",
                                   "the restored cache holds %zu bytes, more than the KV budget leaves free", mine);
            }
        }
    }
    publish(s);
    s->ctl.rc = rc;
    s->ctl.n_tokens = sl->n_held;
    s->ctl.bytes = sl->held;
    s->ctl.pending = 0;
    pthread_cond_broadcast(&s->ctl_cv);
}

int srv_sched_slot_action(srv_sched *s, int slot_id, const char *action, const char *path,
                          int *n_tokens, size_t *bytes, srv_error *e) {
    pthread_mutex_lock(&s->mu);
    while (s->ctl.busy) pthread_cond_wait(&s->ctl_cv, &s->mu);
    s->ctl.busy = 1;
    s->ctl.pending = 1;
    s->ctl.slot = slot_id;
    s->ctl.action = action;
    s->ctl.path = path;
    s->ctl.e = e;
    pthread_cond_signal(&s->work);
    while (s->ctl.pending) pthread_cond_wait(&s->ctl_cv, &s->mu);
    int rc = s->ctl.rc;
    *n_tokens = s->ctl.n_tokens;
    *bytes = s->ctl.bytes;
    s->ctl.busy = 0;
    pthread_cond_broadcast(&s->ctl_cv);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* ---- the loop ---- */
static void *loop(void *arg) {
    srv_sched *s = arg;
    const int N = s->c.n_slots;
    char msg[512];
    vq_err err;
    /* OpenMP's thread count is per thread: the model runs here, so set it here */
    if (s->c.n_threads > 0) vq_set_threads(s->c.n_threads);
    int rr = 0;   /* the prefilling slot whose turn it is */
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->ctl.pending) run_ctl(s);
        /* cancelled requests (a client gone) give their slot and bytes back first, so the queue
         * behind them is admitted in this same pass */
        for (int i = 0; i < N; i++)
            if (s->slots[i].job && s->slots[i].job->cancelled) finish(s, &s->slots[i], SRV_FIN_CANCEL, NULL);
        admit(s);
        int active = 0;
        for (int i = 0; i < N; i++) active += s->slots[i].job != NULL;
        if (!active) {
            if (s->stop && s->qlen == 0) break;
            publish(s);
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);

        /* new requests: their sessions, then one prefill chunk for every slot still prefilling */
        for (int i = 0; i < N; i++) {
            slot *sl = &s->slots[i];
            if (!sl->job || !sl->setup) continue;
            sl->setup = 0;
            if (prepare(s, sl, msg, sizeof msg)) {
                pthread_mutex_lock(&s->mu);
                finish(s, sl, SRV_FIN_ERROR, msg);
                pthread_mutex_unlock(&s->mu);
            }
        }
        /* while some slot decodes, one prefill chunk per step (round robin), so a long prompt
         * arriving does not stall every stream; with none decoding, a chunk for each */
        int decoding = 0;
        for (int i = 0; i < N; i++) decoding += s->slots[i].job && s->slots[i].decoding;
        double t0 = now_s();
        long n_pre = 0;
        for (int q = 0; q < N; q++) {
            int i = (rr + q) % N;
            slot *sl = &s->slots[i];
            srv_job *j = sl->job;
            if (!j || sl->fed >= j->n_tok) continue;
            if (decoding && n_pre > 0) { rr = i; break; }
            int n = j->n_tok - sl->fed < s->c.n_batch ? j->n_tok - sl->fed : s->c.n_batch;
            int last = sl->fed + n == j->n_tok;
            vq_gen_step o;
            vq_status st = vq_session_decode(sl->s, j->tok + sl->fed, n, NULL, 0, &err);
            if (!st && last) st = vq_generator_step(sl->gen, &o, &err);   /* the first token */
            sl->fed += n;
            n_pre += n;
            pthread_mutex_lock(&s->mu);
            if (st) finish(s, sl, SRV_FIN_ERROR, err.msg);
            else if (last) took(s, sl, &o);
            pthread_mutex_unlock(&s->mu);
        }
        double t1 = now_s();
        int nb = 0;
        for (int i = 0; i < N; i++) {
            slot *sl = &s->slots[i];
            if (sl->job && sl->decoding) { s->bg[nb] = sl->gen; s->bslot[nb] = i; nb++; }
        }
        vq_status st = nb ? vq_generator_step_batch(s->bg, nb, s->logits, s->bout, &err) : VQ_OK;
        double t2 = now_s();
        pthread_mutex_lock(&s->mu);
        s->st.prefill_tokens += n_pre;
        s->st.prefill_s += n_pre ? t1 - t0 : 0;
        if (nb) {
            s->st.decode_steps++;
            s->st.decode_tokens += nb;
            s->st.decode_s += t2 - t1;
            double tps = nb / (t2 - t1 > 1e-9 ? t2 - t1 : 1e-9);
            s->st.decode_tps = s->st.decode_tps > 0 ? 0.8 * s->st.decode_tps + 0.2 * tps : tps;
        }
        for (int a = 0; a < nb; a++) {
            slot *sl = &s->slots[s->bslot[a]];
            if (!sl->job) continue;
            if (st) finish(s, sl, SRV_FIN_ERROR, err.msg);
            else took(s, sl, &s->bout[a]);
        }
        publish(s);
    }
    publish(s);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

srv_sched *srv_sched_create(const srv_config *c, const vq_kv_spec *spec_default, char *msg, size_t cap) {
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) { snprintf(msg, cap, "out of memory"); return NULL; }
    vq_err err;
    if (!(s->spec_default = vq_kv_spec_dup(spec_default, &err))) {
        snprintf(msg, cap, "%s", err.msg);
        free(s);
        return NULL;
    }
    s->c = *c;
    s->m = c->model;
    s->V = vq_model_n_vocab(c->model);
    s->qcap = c->queue_cap;
    s->queue = calloc((size_t)c->queue_cap, sizeof *s->queue);
    s->slots = calloc((size_t)c->n_slots, sizeof *s->slots);
    s->logits = malloc((size_t)c->n_slots * s->V * sizeof(float));
    s->bg = calloc((size_t)c->n_slots, sizeof *s->bg);
    s->bout = calloc((size_t)c->n_slots, sizeof *s->bout);
    s->bslot = calloc((size_t)c->n_slots, sizeof *s->bslot);
    if (!s->queue || !s->slots || !s->logits || !s->bg || !s->bout || !s->bslot) {
        snprintf(msg, cap, "out of memory for %d slots", c->n_slots);
        srv_sched_free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->idle, NULL);
    pthread_cond_init(&s->ctl_cv, NULL);
    s->st.budget = c->kv_budget_bytes;
    if (pthread_create(&s->th, NULL, loop, s)) {
        snprintf(msg, cap, "cannot start the scheduler thread");
        srv_sched_free(s);
        return NULL;
    }
    s->started = 1;
    return s;
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        s->draining = 1;
        pthread_cond_signal(&s->work);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->work);
        pthread_cond_destroy(&s->idle);
        pthread_cond_destroy(&s->ctl_cv);
    }
    for (int i = 0; s->slots && i < s->c.n_slots; i++) {
        vq_session_free(s->slots[i].s);
        vq_kv_spec_free(s->slots[i].spec);
        vq_generator_free(s->slots[i].gen);
        vq_sampler_free(s->slots[i].smp);
    }
    free(s->queue);
    free(s->slots);
    free(s->logits);
    free(s->bg);
    free(s->bout);
    free(s->bslot);
    vq_kv_spec_free(s->spec_default);
    free(s);
}

void srv_sched_drain(srv_sched *s, double timeout_s) {
    double end = now_s() + timeout_s;
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    while (s->live_jobs > 0 && now_s() < end) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 100000000L;
        t.tv_sec += t.tv_nsec / 1000000000L;
        t.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&s->idle, &s->mu, &t);
    }
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_stats(srv_sched *s, srv_stats *st) {
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    st->queued = s->qlen;
    st->n_slots = s->c.n_slots;
    st->reserved = s->reserved;
    st->active = 0;
    st->held = 0;
    st->slots_holding = 0;
    st->n_codecs = 0;
    for (int i = 0; i < s->c.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->job) st->active++;
        if (!sl->s) continue;
        st->slots_holding++;
        st->held += sl->held;
        int k = 0;
        const char *t = vq_kv_spec_text(sl->spec);
        while (k < st->n_codecs && strcmp(st->codec[k].spec, t)) k++;
        if (k == st->n_codecs) {
            if (k == SRV_MAX_CODECS) continue;
            st->n_codecs++;
            snprintf(st->codec[k].spec, sizeof st->codec[k].spec, "%s", t);
            st->codec[k].bytes = 0;
            st->codec[k].slots = 0;
        }
        st->codec[k].bytes += sl->held;
        st->codec[k].slots++;
    }
    pthread_mutex_unlock(&s->mu);
    st->rss = vq_rss_now_bytes();
}

int srv_sched_slots(srv_sched *s, srv_slot_info *out, int cap) {
    pthread_mutex_lock(&s->mu);
    int n = s->c.n_slots < cap ? s->c.n_slots : cap;
    for (int i = 0; i < n; i++) {
        slot *sl = &s->slots[i];
        out[i].busy = sl->job != NULL;
        out[i].n_tokens = sl->n_held;
        out[i].kv_bytes = sl->held;
        snprintf(out[i].spec, sizeof out[i].spec, "%s", sl->s ? vq_kv_spec_text(sl->spec) : "");
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}
