/* CORS as llama-server answers it (--cors-origins, --cors-methods, --cors-headers,
 * --cors-credentials): which origin a reply names in Access-Control-Allow-Origin, and the
 * preflight's headers. Origins:
 *   "*" (the default)  any origin; with credentials allowed the request's Origin is echoed
 *                      (a browser refuses "*" with credentials), else "*"
 *   "localhost"        the request's Origin echoed only when its host is localhost,
 *                      127.0.0.1 or [::1] (any scheme and port); no header otherwise
 *   "A,B,..."          the Origin echoed when it is one of the list (llama-server sends the
 *                      list itself, which a browser accepts only when it is one origin) */
#include "core/fpguard.h"
#include <string.h>
#include <strings.h>

#include "server/srv.h"

/* The host of "scheme://host[:port][/...]" ("[v6]" without its brackets) into h; 0 or -1. */
static int origin_host(const char *origin, char *h, size_t cap)
{
    const char *p = strstr(origin, "://");
    if (!p) return -1;
    p += 3;
    size_t n;
    if (*p == '[') {
        const char *e = strchr(++p, ']');
        if (!e) return -1;
        n = (size_t)(e - p);
        if (e[1] && e[1] != ':' && e[1] != '/') return -1;
    } else {
        n = strcspn(p, ":/?#");
    }
    if (n == 0 || n >= cap) return -1;
    memcpy(h, p, n);
    h[n] = 0;
    return 0;
}

int srv_origin_is_localhost(const char *origin)
{
    char h[256];
    if (!origin || origin_host(origin, h, sizeof h)) return 0;
    return !strcasecmp(h, "localhost") || !strcmp(h, "127.0.0.1") || !strcmp(h, "::1");
}

/* 1 when origin is one of the comma-separated list (spaces around entries ignored). */
static int origin_listed(const char *list, const char *origin)
{
    size_t n = strlen(origin);
    for (const char *p = list; *p;) {
        p += strspn(p, " ,");
        size_t k = strcspn(p, ",");
        size_t m = k;
        while (m && p[m - 1] == ' ') m--;
        if (m && m == n && !memcmp(p, origin, n)) return 1;
        p += k;
    }
    return 0;
}

const char *srv_cors_origin(const skv_server_params *p, const char *origin)
{
    const char *list = p->cors_origins && *p->cors_origins ? p->cors_origins : "*";
    if (!strcmp(list, "*")) return p->cors_no_credentials || !origin ? "*" : origin;
    if (!origin) return NULL;
    if (!strcmp(list, "localhost")) return srv_origin_is_localhost(origin) ? origin : NULL;
    return origin_listed(list, origin) ? origin : NULL;
}

const char *srv_cors_methods(const skv_server_params *p)
{
    return p->cors_methods && *p->cors_methods ? p->cors_methods : "GET, POST, DELETE, OPTIONS";
}

const char *srv_cors_headers(const skv_server_params *p)
{
    return p->cors_headers && *p->cors_headers ? p->cors_headers : "*";
}
