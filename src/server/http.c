/* libmicrohttpd glue: one thread per connection (a streamed reply blocks in its reader
 * until the slot has produced the next piece), request bodies collected under
 * SRV_MAX_BODY, the API key checked, JSON parsed under SRV_MAX_JSON_DEPTH, then the
 * route's handler runs. Replies use llama-server's error envelope
 * {"error":{"code","message","type"}} with the HTTP status equal to code. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/fpguard.h"
#include "server/srv.h"

typedef struct conn_st {
    char *body;
    size_t len, cap;
    int too_big;
} conn_st;

typedef struct stream_st {
    srv *s;
    srv_job *j;
    int state;
    size_t sent;
    char *buf;
    size_t len, pos;
} stream_st;

const char *srv_error_type(int code)
{
    switch (code) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 501: return "not_supported_error";
    case 503: return "unavailable_error";
    default: return code >= 500 ? "server_error" : "invalid_request_error";
    }
}

static int queue(srv_req *r, int code, struct MHD_Response *resp, const char *type)
{
    if (!resp) return -1;
    MHD_add_response_header(resp, "Content-Type", type);
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
    enum MHD_Result ok = MHD_queue_response(r->conn, (unsigned)code, resp);
    MHD_destroy_response(resp);
    return ok == MHD_YES ? 0 : -1;
}

int srv_reply_text(srv_req *r, int code, const char *type, char *text)
{
    if (!text) return -1;
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) free(text);
    return queue(r, code, resp, type);
}

int srv_reply_json(srv_req *r, int code, json_t *obj)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!text) return srv_reply_text(r, 500, "application/json", strdup("{\"error\":{\"code\":500,"
                                     "\"message\":\"out of memory\",\"type\":\"server_error\"}}"));
    return srv_reply_text(r, code, "application/json", text);
}

int srv_reply_error(srv_req *r, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:{s:i,s:s,s:s}}", "error", "code", code, "message", msg, "type", srv_error_type(code));
    return srv_reply_json(r, code, e);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    stream_st *st = cls;
    (void)pos;
    while (st->pos == st->len) {
        free(st->buf);
        st->buf = srv_reply_stream_next(st->s, st->j, &st->state, &st->sent, &st->len);
        st->pos = 0;
        if (!st->buf) return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = st->len - st->pos < max ? st->len - st->pos : max;
    memcpy(out, st->buf + st->pos, n);
    st->pos += n;
    return (ssize_t)n;
}

/* The connection is finished or gone: a job still running is cancelled (a finished one
 * is not: its conversation still goes back into the store). */
static void stream_free(void *cls)
{
    stream_st *st = cls;
    pthread_mutex_lock(&st->j->mu);
    if (!st->j->done) atomic_store(&st->j->cancel, 1);
    pthread_mutex_unlock(&st->j->mu);
    srv_job_unref(st->j);
    free(st->buf);
    free(st);
}

int srv_reply_stream(srv_req *r, srv_job *j)
{
    stream_st *st = calloc(1, sizeof *st);
    if (!st) {
        srv_job_unref(j);
        return srv_reply_error(r, 500, "out of memory");
    }
    st->s = r->s;
    st->j = j;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
    if (!resp) {
        stream_free(st);
        return -1;
    }
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    return queue(r, 200, resp, "text/event-stream");
}

static void body_add(conn_st *cs, const char *data, size_t n)
{
    if (cs->too_big || cs->len + n > SRV_MAX_BODY) {
        cs->too_big = 1;
        return;
    }
    if (cs->len + n + 1 > cs->cap) {
        size_t cap = (cs->len + n + 1) * 2;
        char *b = realloc(cs->body, cap < SRV_MAX_BODY + 1 ? cap : SRV_MAX_BODY + 1);
        if (!b) {
            cs->too_big = 1;
            return;
        }
        cs->body = b;
        cs->cap = cap < SRV_MAX_BODY + 1 ? cap : SRV_MAX_BODY + 1;
    }
    memcpy(cs->body + cs->len, data, n);
    cs->len += n;
}

/* 1 when no array/object nesting in b goes deeper than max (strings skipped). */
static int depth_ok(const char *b, size_t n, int max)
{
    int d = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = b[i];
        if (in_str) {
            if (ch == '\\') i++;
            else if (ch == '"') in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else if (ch == '[' || ch == '{') {
            if (++d > max) return 0;
        } else if (ch == ']' || ch == '}') {
            d--;
        }
    }
    return 1;
}

/* Constant-time comparison of the presented key with the configured one. */
static int key_ok(const srv *s, struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    const char *got = h && !strncmp(h, "Bearer ", 7) ? h + 7 : x;
    const char *want = s->p.api_key;
    if (!got) return 0;
    size_t n = strlen(want), m = strlen(got);
    unsigned diff = (unsigned)(n != m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned)(want[i] ^ (i < m ? got[i] : 0));
    return diff == 0;
}

static int parse_body(srv_req *r, conn_st *cs)
{
    json_error_t e;
    if (cs->too_big) return srv_reply_error(r, 413, "request body larger than %u bytes", SRV_MAX_BODY);
    if (!cs->len) return srv_reply_error(r, 400, "empty request body: a JSON object is expected");
    if (!depth_ok(cs->body, cs->len, SRV_MAX_JSON_DEPTH))
        return srv_reply_error(r, 400, "JSON nested deeper than %d levels", SRV_MAX_JSON_DEPTH);
    r->body = json_loadb(cs->body, cs->len, 0, &e);
    if (!r->body) return srv_reply_error(r, 400, "invalid JSON at line %d column %d: %s", e.line, e.column, e.text);
    if (!json_is_object(r->body)) return srv_reply_error(r, 400, "the request body must be a JSON object");
    return 1;
}

static int dispatch(srv_req *r, conn_st *cs)
{
    int open = 0, early = 0, rc;
    srv_handler h = srv_route_find(r->method, r->url, &open, &early);
    atomic_fetch_add(&r->s->m.n_requests, 1);
    if (!h) return srv_reply_error(r, 404, "File Not Found");
    if (!open && r->s->p.api_key && !key_ok(r->s, r->conn)) return srv_reply_error(r, 401, "Invalid API Key");
    if (!early && !atomic_load(&r->s->ready)) return srv_reply_error(r, 503, "Loading model");
    rc = strcmp(r->method, "POST") ? 1 : parse_body(r, cs);
    if (rc == 1) rc = h(r);
    json_decref(r->body); /* also a parsed body that was refused (not an object) */
    return rc;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *up, size_t *up_size, void **con_cls)
{
    conn_st *cs = *con_cls;
    (void)version;
    if (!cs) {
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        *con_cls = cs;
        return MHD_YES;
    }
    if (*up_size) {
        body_add(cs, up, *up_size);
        *up_size = 0;
        return MHD_YES;
    }
    srv_req r = {.s = cls, .conn = c, .method = method, .url = url};
    return dispatch(&r, cs) == 0 ? MHD_YES : MHD_NO;
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode tc)
{
    conn_st *cs = *con_cls;
    (void)cls, (void)c, (void)tc;
    if (cs) free(cs->body);
    free(cs);
    *con_cls = NULL;
}

int srv_http_start(srv *s, void **daemon, int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->p.port)};
    if (inet_pton(AF_INET, s->p.host, &a.sin_addr) != 1) {
        srv_log("--host %s: not an IPv4 address", s->p.host);
        return -1;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL, on_access, s,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a, MHD_OPTION_CONNECTION_LIMIT, (unsigned)SRV_MAX_CONNECTIONS,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SRV_CONN_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)SRV_CONN_MEMORY, MHD_OPTION_NOTIFY_COMPLETED, on_done, s, MHD_OPTION_END);
    if (!d) {
        srv_log("cannot listen on %s:%d (in use? try another --port)", s->p.host, s->p.port);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *port = info ? (int)info->port : s->p.port;
    *daemon = d;
    return 0;
}

void srv_http_stop(void *daemon)
{
    if (daemon) MHD_stop_daemon(daemon);
}
