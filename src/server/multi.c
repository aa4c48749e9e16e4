/* Several completions for one request: llama-server's batch prompts (/completion with a
 * list of prompts: a list of results) and OpenAI's n (one object, n choices). The jobs
 * run on whichever slots are free, in parallel; the reply waits for all of them or, with
 * "stream", interleaves their events as they come (as llama-server: each marked with its
 * index, one [DONE] at the end; the usage chunk, when asked for, once, summed). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/fpguard.h"

#include "server/srv.h"

/* Merges the OpenAI replies of jobs 1..n-1 into job 0's: their choice as choices[i] and
 * their token counts into usage. */
static json_t *oai_merged(const srv *s, srv_job **jobs, size_t n)
{
    json_t *o = srv_reply_final(s, jobs[0]);
    json_t *choices = json_object_get(o, "choices"), *usage = json_object_get(o, "usage");
    for (size_t i = 1; o && i < n; i++) {
        json_t *oi = srv_reply_final(s, jobs[i]);
        json_t *c = json_array_get(json_object_get(oi, "choices"), 0), *u = json_object_get(oi, "usage");
        json_object_set_new(c, "index", json_integer((json_int_t)i));
        json_array_append(choices, c);
        static const char *keys[] = {"prompt_tokens", "completion_tokens", "total_tokens"};
        for (size_t k = 0; usage && k < 3; k++)
            json_object_set_new(usage, keys[k], json_integer(json_integer_value(json_object_get(usage, keys[k])) +
                                                             json_integer_value(json_object_get(u, keys[k]))));
        json_decref(oi);
    }
    return o;
}

static json_t *llama_list(const srv *s, srv_job **jobs, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        json_t *o = srv_reply_final(s, jobs[i]);
        json_object_set_new(o, "index", json_integer((json_int_t)i));
        json_array_append_new(a, o);
    }
    return a;
}

/* ---- streamed ---- */
typedef struct mstream {
    const srv *s;
    srv_job *jobs[SRV_MAX_CHOICES];
    int state[SRV_MAX_CHOICES], ended[SRV_MAX_CHOICES];
    size_t sent[SRV_MAX_CHOICES];
    size_t n, next, n_ended;
    json_t *usage; /* the first usage chunk, its counts summed over the jobs */
    char *buf;     /* events ready for the client */
    size_t len, pos;
    int finished;  /* the closing events are in buf */
} mstream;

static void ms_append(mstream *m, const char *t, size_t n)
{
    char *b = realloc(m->buf, m->len + n + 1);
    if (!b) return;
    memcpy(b + m->len, t, n);
    m->buf = b, m->len += n;
}

/* "data: JSON\n\n" into buf; an OpenAI chunk carries the request's one id (job 0's). */
static void ms_event(mstream *m, json_t *o)
{
    size_t n = 0;
    if (o && m->jobs[0]->fmt != SRV_FMT_LLAMA && json_object_get(o, "id"))
        json_object_set_new(o, "id", json_string(m->jobs[0]->id));
    char *t = o ? srv_json_text(o, &n, 0) : NULL;
    if (t) ms_append(m, "data: ", 6), ms_append(m, t, n), ms_append(m, "\n\n", 2);
    free(t);
}

/* Adds a usage chunk's counts to the one kept (the first is kept whole). */
static void ms_usage(mstream *m, json_t *o)
{
    static const char *keys[] = {"prompt_tokens", "completion_tokens", "total_tokens"};
    json_t *u = json_object_get(o, "usage"), *mine = json_object_get(m->usage, "usage");
    if (!m->usage) {
        m->usage = json_incref(o);
        return;
    }
    for (size_t k = 0; k < 3; k++)
        json_object_set_new(mine, keys[k], json_integer(json_integer_value(json_object_get(mine, keys[k])) +
                                                        json_integer_value(json_object_get(u, keys[k]))));
}

/* Job i's events ("data: JSON\n\n" blocks) into buf, marked with index i: the choices' index
 * (OpenAI) or the object's (llama-server's); its [DONE], keep-alives and usage held back. */
static void ms_take(mstream *m, size_t i, const char *ev, size_t len)
{
    const char *at = ev, *end = ev + len;
    while (at < end) {
        const char *stop = strstr(at, "\n\n");
        size_t bl = stop ? (size_t)(stop - at) : (size_t)(end - at);
        if (bl > 6 && !memcmp(at, "data: ", 6) && !(bl == 12 && !memcmp(at + 6, "[DONE]", 6))) {
            json_error_t je;
            json_t *o = json_loadb(at + 6, bl - 6, 0, &je), *ch = json_object_get(o, "choices"), *c;
            size_t k;
            if (json_is_array(ch) && !json_array_size(ch) && json_object_get(o, "usage")) {
                ms_usage(m, o);
            } else if (json_is_object(o)) {
                json_array_foreach(ch, k, c) json_object_set_new(c, "index", json_integer((json_int_t)i));
                if (!ch && !json_object_get(o, "error")) json_object_set_new(o, "index", json_integer((json_int_t)i));
                ms_event(m, o);
            }
            json_decref(o);
        }
        at += bl + (stop ? 2 : 0);
    }
}

/* Waits up to ms milliseconds for job j to have news (its condition variable). */
static void ms_wait(srv_job *j, int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L, until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&j->mu);
    if (!j->done) pthread_cond_timedwait(&j->cv, &j->mu, &until);
    pthread_mutex_unlock(&j->mu);
}

/* One event of a job with news, round robin; 0 when none had any. */
static int ms_step(mstream *m)
{
    for (size_t k = 0; k < m->n; k++) {
        size_t i = (m->next + k) % m->n, len = 0;
        if (m->ended[i] || !srv_reply_stream_ready(m->jobs[i], m->state[i], m->sent[i])) continue;
        char *ev = srv_reply_stream_next(m->s, m->jobs[i], &m->state[i], &m->sent[i], &len);
        m->next = (i + 1) % m->n;
        if (!ev) {
            m->ended[i] = 1, m->n_ended++;
            return 1;
        }
        ms_take(m, i, ev, len);
        free(ev);
        return 1;
    }
    return 0;
}

static size_t ms_read(void *cls, char *out, size_t max, int *end, int (*alive)(void *), void *a)
{
    mstream *m = cls;
    int idle_ms = 0;
    *end = 0;
    while (m->pos == m->len) {
        free(m->buf);
        m->buf = NULL, m->len = m->pos = 0;
        if (m->finished) return *end = 1, 0;
        if (m->n_ended == m->n) { /* the held-back usage, then one [DONE] (OpenAI's formats) */
            ms_event(m, m->usage);
            if (m->jobs[0]->fmt != SRV_FMT_LLAMA) ms_append(m, "data: [DONE]\n\n", 14);
            m->finished = 1;
            continue;
        }
        if (ms_step(m)) continue;
        if (alive && !alive(a)) return *end = -1, 0;
        size_t w = 0;
        while (m->ended[w]) w++;
        ms_wait(m->jobs[w], 10); /* the others are looked at again within 10 ms */
        if ((idle_ms += 10) >= SRV_KEEPALIVE_S * 1000) ms_append(m, ": keep-alive\n\n", 14), idle_ms = 0;
    }
    return srv_source_copy(out, max, m->buf, m->len, &m->pos);
}

/* The connection is finished or gone: jobs still running are cancelled. */
static void ms_close(void *cls)
{
    mstream *m = cls;
    for (size_t i = 0; i < m->n; i++) {
        pthread_mutex_lock(&m->jobs[i]->mu);
        if (!m->jobs[i]->done) atomic_store(&m->jobs[i]->cancel, 1);
        pthread_mutex_unlock(&m->jobs[i]->mu);
        srv_job_unref(m->jobs[i]);
    }
    json_decref(m->usage);
    free(m->buf);
    free(m);
}

/* jobs[0..n), all submitted, as one stream. */
static int stream_many(srv_req *r, srv_job **jobs, size_t n)
{
    mstream *m = r->sink->source ? calloc(1, sizeof *m) : NULL;
    if (!m) {
        for (size_t i = 0; i < n; i++) atomic_store(&jobs[i]->cancel, 1), srv_job_unref(jobs[i]);
        return r->sink->source ? srv_reply_error(r, 500, "out of memory") : srv_reply_error(r, 501, "no streamed replies here");
    }
    m->s = r->s, m->n = n;
    memcpy(m->jobs, jobs, n * sizeof *jobs);
    return r->sink->source(r, 200, "text/event-stream", (srv_source){ms_read, ms_close, m});
}

int srv_run_many(srv_req *r, srv_job **jobs, size_t n)
{
    size_t sub = 0;
    int code = 0, rc;
    while (sub < n && !(code = srv_pool_submit(r->s->pool, jobs[sub]))) sub++;
    for (size_t i = 0; code && i < sub; i++) atomic_store(&jobs[i]->cancel, 1); /* one did not fit: none runs on */
    if (!code && jobs[0]->stream) return stream_many(r, jobs, n);
    for (size_t i = 0; i < sub; i++) srv_job_wait(jobs[i], r->sink->alive, r);
    const srv_job *bad = NULL;
    for (size_t i = 0; i < sub && !bad; i++) bad = jobs[i]->status ? jobs[i] : NULL;
    if (code == 503) rc = srv_reply_error(r, 503, "all %d slots busy and %d requests queued: retry later",
                                          r->s->p.parallel, SRV_QUEUE_MAX);
    else if (code) rc = srv_reply_error(r, 400, "no slot with that id_slot");
    else if (bad) rc = srv_reply_error(r, bad->status, "generation failed: %s", bad->err);
    else rc = srv_reply_json(r, 200, jobs[0]->fmt == SRV_FMT_LLAMA ? llama_list(r->s, jobs, n) : oai_merged(r->s, jobs, n));
    for (size_t i = 0; i < n; i++) srv_job_unref(jobs[i]);
    return rc;
}
