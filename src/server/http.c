/* libmicrohttpd glue: one thread per connection (a streamed reply blocks in its reader
 * until the slot has produced the next piece), request bodies collected under
 * SRV_MAX_BODY and charged to the request's working memory (mem.c) before they are
 * stored, then the request goes down the socket-free path (request.c: routes, API key,
 * JSON, handlers) with this file's sink sending the replies. A declared Content-Length over
 * the limit is answered 413 before any of the body is read; a reserved connection
 * (conns.c) answers /health and 503 to the rest as soon as its headers are in. */
#include <arpa/inet.h>
#include <errno.h>
#include "core/fpguard.h"
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "server/srv.h"

typedef struct conn_st {
    char *body;
    size_t len, cap;
    int too_big;
    int refused;        /* the body's memory was refused: 413 / 503, nothing stored */
    srv_mem_scope mem;  /* this request's working memory */
} conn_st;

typedef struct stream_st {
    srv *s;
    srv_job *j;
    int state;
    size_t sent;
    char *buf;
    size_t len, pos;
} stream_st;

static int mhd_queue(const srv *s, struct MHD_Connection *c, int code, struct MHD_Response *resp, const char *type)
{
    if (!resp) return -1;
    const char *origin = srv_cors_origin(&s->p, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"));
    if (type) MHD_add_response_header(resp, "Content-Type", type);
    if (origin) MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)code, resp);
    MHD_destroy_response(resp);
    return ok == MHD_YES ? 0 : -1;
}

static int mhd_text(srv_req *r, int code, const char *type, char *text)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) free(text);
    else if (r->reply_header.name) MHD_add_response_header(resp, r->reply_header.name, r->reply_header.value);
    return mhd_queue(r->s, r->conn, code, resp, type);
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

static int mhd_stream(srv_req *r, srv_job *j)
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
    return mhd_queue(r->s, r->conn, 200, resp, "text/event-stream");
}

/* 0 when the client has closed its end: its socket reads as at the end without blocking. */
static int mhd_alive(void *arg)
{
    const srv_req *r = arg;
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    char b;
    if (!i) return 1;
    ssize_t n = recv(i->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return !(n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR));
}

/* /cors-proxy's reply: the upstream's status, headers and body as they come (proxy.c),
 * read with the client's socket to look at. */
typedef struct proxy_st {
    srv_proxy *px;
    srv_req peek; /* only .conn is used, by mhd_alive */
} proxy_st;

static ssize_t proxy_read(void *cls, uint64_t pos, char *out, size_t max)
{
    proxy_st *p = cls;
    int end;
    size_t n = srv_proxy_read(p->px, out, max, &end, mhd_alive, &p->peek);
    (void)pos;
    return n ? (ssize_t)n : end > 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void proxy_free(void *cls)
{
    proxy_st *p = cls;
    srv_proxy_close(p->px);
    free(p);
}

typedef struct {
    struct MHD_Response *resp;
    char type[256]; /* the upstream's Content-Type ("": none) */
} proxy_hdrs;

static void proxy_header(void *u, const char *name, const char *value)
{
    proxy_hdrs *h = u;
    if (!strcasecmp(name, "Content-Type")) snprintf(h->type, sizeof h->type, "%s", value);
    else MHD_add_response_header(h->resp, name, value);
}

static int mhd_proxy(srv_req *r, srv_proxy *px)
{
    int status = srv_proxy_status(px);
    proxy_st *p = malloc(sizeof *p);
    proxy_hdrs h = {p ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, proxy_read, p, proxy_free) : NULL,
                    ""};
    if (!h.resp) {
        free(p);
        srv_proxy_close(px);
        return -1;
    }
    *p = (proxy_st){px, {.conn = r->conn}};
    srv_proxy_headers(px, proxy_header, &h);
    return mhd_queue(r->s, r->conn, status, h.resp, h.type[0] ? h.type : NULL);
}

/* A reply made as it is sent (agent.c): read with the client's socket to look at. */
typedef struct source_st {
    srv_source src;
    srv_req peek; /* only .conn is used, by mhd_alive */
} source_st;

static ssize_t source_read(void *cls, uint64_t pos, char *out, size_t max)
{
    source_st *s = cls;
    int end = 0;
    (void)pos;
    size_t n = s->src.read(s->src.cls, out, max, &end, mhd_alive, &s->peek);
    return n ? (ssize_t)n : end > 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void source_free(void *cls)
{
    source_st *s = cls;
    s->src.close(s->src.cls);
    free(s);
}

static int mhd_source(srv_req *r, int code, const char *type, srv_source src)
{
    source_st *s = malloc(sizeof *s);
    if (!s) {
        src.close(src.cls);
        return srv_reply_error(r, 500, "out of memory");
    }
    *s = (source_st){src, {.conn = r->conn}};
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, source_read, s, source_free);
    if (!resp) {
        source_free(s);
        return -1;
    }
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    return mhd_queue(r->s, r->conn, code, resp, type);
}

static const srv_sink mhd_sink = {mhd_text, mhd_stream, mhd_alive, mhd_proxy, mhd_source};

/* The request's headers into an array (for /cors-proxy, which forwards some, and /tools). */
typedef struct {
    srv_header *v;
    size_t n, cap;
} header_list;

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    header_list *l = cls;
    (void)kind;
    if (l->n < l->cap && key && value) l->v[l->n++] = (srv_header){key, value};
    return MHD_YES;
}

/* Grows the body buffer to cap bytes, charged first; 0 or a refusal (413, 503, 500). */
static int body_room(conn_st *cs, size_t cap)
{
    if (cap <= cs->cap) return 0;
    int rc = srv_mem_hold(&cs->mem, cap - cs->cap);
    char *b = rc ? NULL : realloc(cs->body, cap);
    if (!b) return rc ? rc : 500;
    cs->body = b, cs->cap = cap;
    return 0;
}

static void body_add(conn_st *cs, const char *data, size_t n)
{
    if (cs->too_big || cs->refused || cs->len + n > SRV_MAX_BODY) {
        cs->too_big |= !cs->refused;
        return;
    }
    if (cs->len + n + 1 > cs->cap) {
        size_t cap = (cs->len + n + 1) * 2;
        if ((cs->refused = body_room(cs, cap < SRV_MAX_BODY + 1 ? cap : SRV_MAX_BODY + 1))) return;
    }
    memcpy(cs->body + cs->len, data, n);
    cs->len += n;
}

/* The first call of a request (its headers are in): a reserved connection that does not
 * ask for /health, or a declared body over the limit or the memory left, is answered at
 * once (libmicrohttpd then closes the connection without reading the body). 1 = go on. */
/* A CORS preflight (OPTIONS, any url, no key: browsers send none) as llama-server answers it. */
static int preflight(const srv *s, struct MHD_Connection *c)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return -1;
    MHD_add_response_header(resp, "Access-Control-Allow-Credentials", s->p.cors_no_credentials ? "false" : "true");
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", srv_cors_methods(&s->p));
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", srv_cors_headers(&s->p));
    return mhd_queue(s, c, 200, resp, "text/html");
}

static int early_reply(srv *s, struct MHD_Connection *c, conn_st *cs, const char *url, const char *method)
{
    srv_req r = {.s = s, .conn = c, .method = "GET", .url = url, .sink = &mhd_sink};
    srv_conn *sc = srv_conn_of(c);
    if (!strcmp(method, "OPTIONS")) return preflight(s, c) ? -1 : 0;
    if (srv_conn_reserved(sc) && strcmp(url, "/health") && strcmp(url, "/v1/health")) {
        srv_conn_note_refused();
        return srv_reply_error(&r, 503, "server at its connection limit (%d open); retry", SRV_MAX_CONNECTIONS) ? -1 : 0;
    }
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    char *end = NULL;
    unsigned long long cl = v ? strtoull(v, &end, 10) : 0;
    if (v && (end == v || *end || cl > SRV_MAX_BODY))
        return srv_reply_error(&r, 413, "request body larger than %u bytes", SRV_MAX_BODY) ? -1 : 0;
    int rc = cl ? body_room(cs, (size_t)cl + 1) : 0;
    if (rc == 413 || rc == 503) return srv_reply_error(&r, rc, rc == 503 ? "server busy: its working memory "
                                                       "(--mem-budget) is in use by other requests; retry"
                                                       : "request body larger than the per-request memory limit") ? -1 : 0;
    srv_conn_phase(sc, SRV_CONN_BODY);
    return 1;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *up, size_t *up_size, void **con_cls)
{
    conn_st *cs = *con_cls;
    (void)version;
    if (!cs) {
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        srv_mem_scope_init(&cs->mem);
        *con_cls = cs;
        srv_mem_scope *prev = srv_mem_bind(&cs->mem);
        int go = early_reply(cls, c, cs, url, method);
        srv_mem_bind(prev);
        return go >= 0 ? MHD_YES : MHD_NO;
    }
    if (*up_size) {
        body_add(cs, up, *up_size);
        *up_size = 0;
        return cs->too_big ? MHD_NO : MHD_YES; /* a body over the limit without a Content-Length
                                                 * (chunked): closed, not read on */
    }
    srv_conn_phase(srv_conn_of(c), SRV_CONN_BUSY);
    srv_req r = {.s = cls, .conn = c, .method = method, .url = url, .data = cs->body, .len = cs->len,
                 .too_big = cs->too_big, .sink = &mhd_sink};
    r.auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    r.x_api_key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    r.action = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "action");
    srv_header hv[SRV_PROXY_MAX_HEADERS];
    header_list hl = {hv, 0, SRV_PROXY_MAX_HEADERS};
    if (!strcmp(url, "/cors-proxy") || !strcmp(url, "/tools")) {
        if (url[1] == 'c') r.proxy_url = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "url");
        MHD_get_connection_values(c, MHD_HEADER_KIND, collect_header, &hl);
        r.headers = hv, r.n_headers = hl.n;
    }
    srv_mem_scope *prev = srv_mem_bind(&cs->mem);
    cs->mem.refused = cs->refused;
    int rc = cs->refused ? srv_dispatch_refused(&r) : srv_dispatch(&r);
    srv_mem_bind(prev);
    return rc == 0 ? MHD_YES : MHD_NO;
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode tc)
{
    conn_st *cs = *con_cls;
    (void)cls, (void)tc;
    srv_conn_phase(srv_conn_of(c), SRV_CONN_HEADERS); /* keep-alive: the next request's deadline */
    if (cs) {
        free(cs->body);
        srv_mem_scope_end(&cs->mem);
    }
    free(cs);
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **ctx, enum MHD_ConnectionNotificationCode code)
{
    (void)cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) srv_conn_started(c, ctx);
    else srv_conn_closed(ctx);
}

int srv_http_start(srv *s, void **daemon, int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->p.port)};
    if (inet_pton(AF_INET, s->p.host, &a.sin_addr) != 1) {
        srv_log("--host %s: not an IPv4 address", s->p.host);
        return -1;
    }
    if (srv_conns_start()) {
        srv_log("cannot start the connection reaper thread");
        return -1;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL, on_access, s,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(SRV_MAX_CONNECTIONS + SRV_RESERVED_CONNECTIONS), MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)s->p.max_conns_per_client, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SRV_CONN_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SRV_CONN_MEMORY, MHD_OPTION_NOTIFY_COMPLETED, on_done, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_END);
    if (!d) {
        srv_conns_stop();
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
    if (daemon) srv_conns_stop();
}
