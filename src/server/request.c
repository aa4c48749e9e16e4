/* The request path without the socket: a request (method, url, the two auth headers, the
 * ?action= argument and the raw body) is routed, its API key checked, its body parsed
 * under SRV_MAX_BODY and SRV_MAX_JSON_DEPTH, and its handler run. Replies go through the
 * request's sink: libmicrohttpd's (http.c) in the server, a recording one in
 * fuzz/fuzz_http.c. Replies use llama-server's error envelope
 * {"error":{"code","message","type"}} with the HTTP status equal to code. */
#include <stdarg.h>
#include "core/fpguard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

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

int srv_reply_text(srv_req *r, int code, const char *type, char *text)
{
    if (!text) return -1;
    return r->sink->text(r, code, type, text);
}

int srv_reply_stream(srv_req *r, srv_job *j) { return r->sink->stream(r, j); }

/* The reply to a request whose working memory was refused (srv_mem_take): 413 over its own
 * limit, 503 over the server's total; built outside the scope, so it cannot be refused. */
static int mem_refused(srv_req *r)
{
    srv_mem_scope *sc = srv_mem_current();
    const size_t mib = 1u << 20;
    if (!sc) return srv_reply_text(r, 500, "application/json", strdup("{\"error\":{\"code\":500,"
                                   "\"message\":\"out of memory\",\"type\":\"server_error\"}}"));
    if (sc->refused == 413)
        return srv_reply_error(r, 413, "the request needs more than %zu MiB of working memory (the per-request limit; "
                               "send a smaller body or prompt)", srv_mem_request_limit() / mib);
    if (sc->refused == 503)
        return srv_reply_error(r, 503, "server busy: its working memory (--mem-budget %zu MiB) is in use by other "
                               "requests; retry", srv_mem_total() / mib);
    return srv_reply_error(r, 500, "out of memory");
}

int srv_reply_json(srv_req *r, int code, json_t *obj)
{
    char *text = srv_json_text(obj, NULL, 1);
    json_decref(obj);
    if (!text) return mem_refused(r);
    return srv_reply_text(r, code, "application/json", text);
}

int srv_reply_error(srv_req *r, int code, const char *fmt, ...)
{
    char msg[512];
    srv_mem_scope *cur = srv_mem_current();
    /* a handler that failed after its memory was refused reports the refusal */
    if (cur && cur->refused && code != cur->refused && (code == 400 || code == 500)) return mem_refused(r);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_mem_scope *sc = srv_mem_bind(NULL); /* an error reply is small and never refused */
    json_t *e = json_pack("{s:{s:i,s:s,s:s}}", "error", "code", code, "message", msg, "type", srv_error_type(code));
    int rc = srv_reply_json(r, code, e);
    srv_mem_bind(sc);
    return rc;
}

int srv_reply_ctx_error(srv_req *r, size_t n_prompt, const char *msg)
{
    srv_mem_scope *sc = srv_mem_bind(NULL); /* small, never refused */
    json_t *e = json_pack("{s:{s:i,s:s,s:s,s:I,s:i}}", "error", "code", 400, "message", msg, "type",
                          "exceed_context_size_error", "n_prompt_tokens", (json_int_t)n_prompt, "n_ctx", r->s->n_ctx);
    int rc = srv_reply_json(r, 400, e);
    srv_mem_bind(sc);
    return rc;
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

/* 1 when got equals want[0..n) (constant time in n). */
static int same_key(const char *want, size_t n, const char *got)
{
    size_t m = strlen(got);
    unsigned diff = (unsigned)(n != m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned)(want[i] ^ (i < m ? got[i] : 0));
    return diff == 0;
}

/* The presented key against each configured one ('\n'-separated; empty entries never
 * match), every one compared in full. */
static int key_ok(const srv_req *r)
{
    const char *h = r->auth;
    const char *got = h && !strncmp(h, "Bearer ", 7) ? h + 7 : r->x_api_key;
    int ok = 0;
    if (!got || !*got) return 0;
    for (const char *k = r->s->p.api_key; *k;) {
        size_t n = strcspn(k, "\r\n");
        ok |= n > 0 && same_key(k, n, got);
        k += n;
        k += strspn(k, "\r\n");
    }
    return ok;
}

/* 1 = r->body holds the request's object; otherwise the reply (an error) was sent.
 * empty_ok: an absent body reads as {} (POST /slots/{id}?action=erase). */
static int parse_body(srv_req *r, int empty_ok)
{
    json_error_t e;
    if (r->too_big) return srv_reply_error(r, 413, "request body larger than %u bytes", SRV_MAX_BODY);
    if (!r->len && empty_ok) return (r->body = json_object()) ? 1 : srv_reply_error(r, 500, "out of memory");
    if (!r->len) return srv_reply_error(r, 400, "empty request body: a JSON object is expected");
    if (!depth_ok(r->data, r->len, SRV_MAX_JSON_DEPTH))
        return srv_reply_error(r, 400, "JSON nested deeper than %d levels", SRV_MAX_JSON_DEPTH);
    r->body = json_loadb(r->data, r->len, 0, &e);
    if (!r->body && srv_mem_current() && srv_mem_current()->refused) return mem_refused(r);
    if (!r->body) return srv_reply_error(r, 400, "invalid JSON at line %d column %d: %s", e.line, e.column, e.text);
    if (!json_is_object(r->body)) return srv_reply_error(r, 400, "the request body must be a JSON object");
    return 1;
}

int srv_dispatch_refused(srv_req *r)
{
    atomic_fetch_add(&r->s->m.n_requests, 1);
    return mem_refused(r);
}

int srv_dispatch(srv_req *r)
{
    srv_route rt;
    int rc;
    atomic_fetch_add(&r->s->m.n_requests, 1);
    const char *pre = r->s->p.api_prefix;
    size_t pn = pre ? strlen(pre) : 0;
    if (pn && !r->inner) { /* --api-prefix: every route lives under it (llama-server's) */
        if (strncmp(r->url, pre, pn) || (r->url[pn] != '/' && r->url[pn])) return srv_reply_error(r, 404, "File Not Found");
        r->url += pn;
        if (!*r->url) r->url = "/";
    }
    if (!srv_route_find(r->s, r->method, r->url, &rt)) return srv_reply_error(r, 404, "File Not Found");
    if (!rt.open && r->s->p.api_key && !key_ok(r)) return srv_reply_error(r, 401, "Invalid API Key");
    if (!rt.early && !atomic_load(&r->s->ready)) return srv_reply_error(r, 503, "Loading model");
    int wakes = !strcmp(r->method, "POST");
    if (srv_sleep_enter(r->s, wakes)) return srv_reply_error(r, 503, "the server could not wake up (see its log)");
    rc = strcmp(r->method, "POST") || rt.raw ? 1 : parse_body(r, rt.empty_ok);
    if (rc == 1) rc = rt.fn(r);
    srv_sleep_leave(r->s, wakes);
    json_decref(r->body); /* also a parsed body that was refused (not an object) */
    r->body = NULL;
    return rc;
}
