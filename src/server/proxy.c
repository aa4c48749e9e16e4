/* GET and POST /cors-proxy?url=URL: llama-server's CORS proxy for its web UI (--ui-mcp-proxy,
 * off by default: 403), which lets a page reach a remote server (an MCP server) that sends
 * no CORS headers. The request goes to URL (http or https, redirects followed, only to
 * http or https) with the POST body as is and only the headers the client names
 * explicitly: "X-Llama-Server-Proxy-Header-NAME: V" is sent as "NAME: V"; nothing else of
 * the client's (its Authorization, X-Api-Key, cookies) is forwarded. The reply comes back
 * streamed with the upstream status and headers, less those this server sets itself
 * (length, transfer encoding, connection, server, CORS).
 *
 * One libcurl transfer per request, on its own thread, hands the body over through a
 * bounded buffer (SRV_PROXY_BUF): memory per request is bounded whatever the upstream
 * sends (and charged to the request's working memory, --mem-budget), and a slow client
 * slows the transfer instead of filling memory. A client that hangs up stops the transfer
 * within a second (libcurl's progress callback), also while the upstream sends nothing:
 * the reply's reader looks at the client's socket every SRV_PROXY_POLL_MS. */
#include "core/fpguard.h"
#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "server/srv.h"

#define SRV_PROXY_BUF (64u << 10)       /* body bytes in flight between the transfer and the client */
#define SRV_PROXY_HEADERS (64u << 10)   /* the upstream reply's header bytes kept */
#define SRV_PROXY_CONNECT_S 30          /* connecting to the target */
#define SRV_PROXY_WAIT_S 600            /* the upstream's headers, as llama-server's read timeout */
#define SRV_PROXY_REDIRECTS 10
#define SRV_PROXY_POLL_MS 200         /* how often a wait for the upstream looks at the client */
static const char k_prefix[] = "x-llama-server-proxy-header-";

struct srv_proxy {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                   /* the transfer thread and the reply */
    CURL *h;
    struct curl_slist *req_headers;
    char *body;                 /* the POST body (copy), or NULL for GET */
    size_t body_len;
    /* the upstream reply */
    int status;                 /* 0 until its headers are in */
    char *hdr;                  /* "Name: value\n" lines of the final reply */
    size_t hdr_len;
    char ring[SRV_PROXY_BUF];
    size_t head, n;
    int done;                   /* the transfer ended */
    CURLcode result;
    char err[CURL_ERROR_SIZE];
    int gone;                   /* the client hung up: stop */
};

static void proxy_unref(srv_proxy *px)
{
    pthread_mutex_lock(&px->mu);
    int last = --px->refs == 0;
    pthread_mutex_unlock(&px->mu);
    if (!last) return;
    if (px->h) curl_easy_cleanup(px->h);
    curl_slist_free_all(px->req_headers);
    free(px->body);
    free(px->hdr);
    pthread_cond_destroy(&px->cv);
    pthread_mutex_destroy(&px->mu);
    free(px);
}

/* Headers the reply gets from this server, not from upstream (llama-server strips the same). */
static int own_header(const char *line, size_t n)
{
    static const char *const own[] = {"content-length:", "transfer-encoding:", "connection:", "keep-alive:",
                                      "server:", "access-control-"};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        size_t k = strlen(own[i]);
        if (n >= k && !strncasecmp(line, own[i], k)) return 1;
    }
    return 0;
}

/* The headers of every reply in a redirect chain arrive here; a status line starts a new
 * set, so the kept lines are the final reply's (at most SRV_PROXY_HEADERS bytes of them:
 * the rest are dropped). Trailers after the body are dropped too. */
static size_t on_header(char *p, size_t size, size_t nitems, void *u)
{
    srv_proxy *px = u;
    size_t n = size * nitems, len = n;
    while (len && (p[len - 1] == '\n' || p[len - 1] == '\r')) len--;
    pthread_mutex_lock(&px->mu);
    if (px->status) {
        /* trailers: the reply's headers were handed on already */
    } else if (len >= 5 && !strncmp(p, "HTTP/", 5)) {
        px->hdr_len = 0;
    } else if (len && memchr(p, ':', len) && !memchr(p, '\n', len) && !own_header(p, len) &&
               px->hdr_len + len + 1 <= SRV_PROXY_HEADERS) {
        char *h = realloc(px->hdr, px->hdr_len + len + 2);
        if (h) {
            memcpy(h + px->hdr_len, p, len);
            px->hdr_len += len;
            h[px->hdr_len++] = '\n';
            h[px->hdr_len] = 0;
            px->hdr = h;
        }
    }
    pthread_mutex_unlock(&px->mu);
    return n;
}

/* With mu held: the reply's headers are in (the first body byte, or the end). */
static void headers_in(srv_proxy *px)
{
    long code = 0;
    if (px->status) return;
    curl_easy_getinfo(px->h, CURLINFO_RESPONSE_CODE, &code);
    px->status = code >= 100 && code <= 599 ? (int)code : 502;
    pthread_cond_broadcast(&px->cv);
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *u)
{
    srv_proxy *px = u;
    size_t n = size * nmemb, at = 0;
    pthread_mutex_lock(&px->mu);
    headers_in(px);
    while (at < n && !px->gone) {
        while (px->n == SRV_PROXY_BUF && !px->gone) pthread_cond_wait(&px->cv, &px->mu);
        while (at < n && px->n < SRV_PROXY_BUF) {
            size_t tail = (px->head + px->n) % SRV_PROXY_BUF, room = SRV_PROXY_BUF - px->n;
            size_t k = n - at < room ? n - at : room;
            if (k > SRV_PROXY_BUF - tail) k = SRV_PROXY_BUF - tail;
            memcpy(px->ring + tail, p + at, k);
            px->n += k, at += k;
        }
        pthread_cond_broadcast(&px->cv);
    }
    int gone = px->gone;
    pthread_mutex_unlock(&px->mu);
    return gone ? 0 : n; /* 0: libcurl stops the transfer */
}

static int on_progress(void *u, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    srv_proxy *px = u;
    (void)a, (void)b, (void)c, (void)d;
    pthread_mutex_lock(&px->mu);
    int gone = px->gone;
    pthread_mutex_unlock(&px->mu);
    return gone; /* nonzero aborts */
}

static void *transfer(void *u)
{
    srv_proxy *px = u;
    CURLcode rc = curl_easy_perform(px->h);
    pthread_mutex_lock(&px->mu);
    px->result = rc;
    if (rc == CURLE_OK) headers_in(px); /* a reply without a body */
    px->done = 1;
    pthread_cond_broadcast(&px->cv);
    pthread_mutex_unlock(&px->mu);
    proxy_unref(px);
    return NULL;
}

size_t srv_proxy_read(srv_proxy *px, char *out, size_t max, int *end, int (*alive)(void *), void *a)
{
    size_t got = 0;
    pthread_mutex_lock(&px->mu);
    /* an upstream that sends nothing more: the client is looked at every SRV_PROXY_POLL_MS */
    while (!px->n && !px->done && !px->gone) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += SRV_PROXY_POLL_MS * 1000000L;
        dl.tv_sec += dl.tv_nsec / 1000000000L, dl.tv_nsec %= 1000000000L;
        if (pthread_cond_timedwait(&px->cv, &px->mu, &dl) && alive && !px->n && !px->done) {
            pthread_mutex_unlock(&px->mu);
            int here = alive(a);
            pthread_mutex_lock(&px->mu);
            if (!here) px->gone = 1, pthread_cond_broadcast(&px->cv);
        }
    }
    while (got < max && px->n) {
        size_t k = px->n < max - got ? px->n : max - got;
        if (k > SRV_PROXY_BUF - px->head) k = SRV_PROXY_BUF - px->head;
        memcpy(out + got, px->ring + px->head, k);
        px->head = (px->head + k) % SRV_PROXY_BUF, px->n -= k, got += k;
    }
    pthread_cond_broadcast(&px->cv);
    *end = got ? 0 : px->gone ? -1 : px->done ? (px->result == CURLE_OK ? 1 : -1) : 0;
    pthread_mutex_unlock(&px->mu);
    return got;
}

void srv_proxy_close(srv_proxy *px)
{
    pthread_mutex_lock(&px->mu);
    px->gone = 1;
    pthread_cond_broadcast(&px->cv);
    pthread_mutex_unlock(&px->mu);
    proxy_unref(px);
}

int srv_proxy_status(const srv_proxy *px) { return px->status; }

void srv_proxy_headers(srv_proxy *px, void (*fn)(void *u, const char *name, const char *value), void *u)
{
    pthread_mutex_lock(&px->mu); /* (no header is added once the status is known) */
    for (char *line = px->hdr; line && *line;) {
        char *nl = strchr(line, '\n'), *colon = strchr(line, ':');
        *nl = 0;
        if (colon && colon < nl) {
            *colon = 0;
            const char *v = colon + 1;
            while (*v == ' ' || *v == '\t') v++;
            fn(u, line, v);
            *colon = ':';
        }
        *nl = '\n';
        line = nl + 1;
    }
    pthread_mutex_unlock(&px->mu);
}

/* The client's explicit proxy headers ("X-Llama-Server-Proxy-Header-NAME: V" as "NAME: V";
 * Accept-Encoding, Transfer-Encoding, Content-Length and Host are the transfer's own). */
static int add_header(srv_proxy *px, const char *name, const char *value)
{
    static const char *const skip[] = {"accept-encoding", "transfer-encoding", "content-length", "host"};
    size_t k = sizeof k_prefix - 1;
    if (strncasecmp(name, k_prefix, k) || !name[k]) return 0;
    name += k;
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (!strcasecmp(name, skip[i])) return 0;
    size_t n = strlen(name) + strlen(value) + 3;
    char *line = malloc(n);
    if (!line) return -1;
    snprintf(line, n, "%s: %s", name, value);
    struct curl_slist *l = curl_slist_append(px->req_headers, line);
    free(line);
    if (!l) return -1;
    px->req_headers = l;
    return 0;
}

/* The target: http(s) with a host and no password, as llama-server checks it; "" or why not. */
static const char *check_url(const char *url)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *pass = NULL;
    const char *why = "";
    if (!u || curl_url_set(u, CURLUPART_URL, url, 0)) {
        why = "the target URL does not parse";
    } else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) || (strcmp(scheme, "http") && strcmp(scheme, "https"))) {
        why = "the target URL's scheme must be http or https";
    } else if (curl_url_get(u, CURLUPART_HOST, &host, 0) || !*host) {
        why = "the target URL has no host";
    } else if (!curl_url_get(u, CURLUPART_PASSWORD, &pass, 0)) {
        why = "authentication in the target URL is not supported";
    }
    curl_free(scheme), curl_free(host), curl_free(pass);
    curl_url_cleanup(u);
    return why;
}

static srv_proxy *proxy_new(srv_req *r, const char *url)
{
    srv_proxy *px = calloc(1, sizeof *px);
    if (!px) return NULL;
    pthread_mutex_init(&px->mu, NULL);
    pthread_cond_init(&px->cv, NULL);
    px->refs = 1;
    int bad = !(px->h = curl_easy_init());
    for (size_t i = 0; !bad && i < r->n_headers; i++) bad = add_header(px, r->headers[i].name, r->headers[i].value) != 0;
    /* libcurl's own defaults that a forwarded request must not carry */
    if (!bad && !strcmp(r->method, "POST")) {
        struct curl_slist *l = curl_slist_append(px->req_headers, "Expect:");
        if (l) px->req_headers = l;
        for (struct curl_slist *h = px->req_headers; l && h; h = h->next)
            if (!strncasecmp(h->data, "content-type:", 13)) l = NULL;
        if (l && (l = curl_slist_append(px->req_headers, "Content-Type:"))) px->req_headers = l;
        if (r->len && !(px->body = malloc(r->len))) bad = 1;
        if (!bad && r->len) memcpy(px->body, r->data, r->len);
        px->body_len = r->len;
    }
    if (bad) {
        proxy_unref(px);
        return NULL;
    }
    CURL *h = px->h;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, (long)SRV_PROXY_REDIRECTS);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)SRV_PROXY_CONNECT_S);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, px->req_headers);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, px);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, px);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, px);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, px->err);
    if (!strcmp(r->method, "POST")) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, px->body ? px->body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)px->body_len);
    }
    return px;
}

int srv_rt_cors_proxy(srv_req *r)
{
    if (!r->s->p.ui_mcp_proxy)
        return srv_reply_error(r, 403, "the CORS proxy is off: start the server with --ui-mcp-proxy to use it");
    if (!r->sink->proxy) return srv_reply_error(r, 501, "no CORS proxy on this path");
    const char *url = r->proxy_url, *why = url ? check_url(url) : "missing the url argument (/cors-proxy?url=...)";
    if (*why) return srv_reply_error(r, 400, "%s", why);
    /* the transfer's buffer, the reply's headers and the body's copy, from the request's
     * working memory (given back when the reply is done) */
    int mrc = srv_mem_hold(NULL, sizeof(srv_proxy) + SRV_PROXY_HEADERS + r->len);
    if (mrc) return srv_reply_error(r, mrc, mrc == 413 ? "the proxied request needs more working memory than one "
                                                         "request may have (send a smaller body)"
                                                       : "server busy: its working memory (--mem-budget) is in "
                                                         "use by other requests; retry");
    srv_proxy *px = proxy_new(r, url);
    pthread_t t;
    if (!px) return srv_reply_error(r, 500, "out of memory");
    px->refs = 2;
    if (pthread_create(&t, NULL, transfer, px)) {
        px->refs = 1;
        proxy_unref(px);
        return srv_reply_error(r, 500, "cannot start the proxy transfer");
    }
    pthread_detach(t);
    /* the upstream's headers, looking every SRV_PROXY_POLL_MS whether the client is still there */
    int gone = 0;
    pthread_mutex_lock(&px->mu);
    for (int waited = 0; !px->status && !px->done && !gone && waited < SRV_PROXY_WAIT_S * 1000;
         waited += SRV_PROXY_POLL_MS) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += SRV_PROXY_POLL_MS * 1000000L;
        dl.tv_sec += dl.tv_nsec / 1000000000L, dl.tv_nsec %= 1000000000L;
        if (pthread_cond_timedwait(&px->cv, &px->mu, &dl) && r->sink->alive && !r->sink->alive((void *)r)) gone = 1;
    }
    int status = px->status, failed = !status;
    char err[CURL_ERROR_SIZE + 64];
    snprintf(err, sizeof err, "proxy error: %s", px->err[0] ? px->err : px->done ? curl_easy_strerror(px->result)
                                                                                  : "no reply in time");
    pthread_mutex_unlock(&px->mu);
    if (failed || gone) {
        srv_proxy_close(px);
        return gone ? -1 : srv_reply_error(r, 502, "%s", err); /* gone: nobody to answer */
    }
    return r->sink->proxy(r, px); /* takes px */
}

int srv_proxy_init(void)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}
