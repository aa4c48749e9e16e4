/* The server's working memory (docs/server.md "Limits"): what grows with a request (its
 * body, jansson's values, token arrays, the tokenizer's scratch, a chat render's arena,
 * reply text) is charged to the request's scope and to one server-wide total before it is
 * allocated. A charge over the request's limit fails with 413, over the total with 503:
 * the memory is never touched, so the server's peak is bounded by configuration.
 *
 * jansson allocates through srv_json_malloc / srv_json_free (installed once): each block
 * carries a 16-byte header with its size and the tag of the scope that was bound to the
 * allocating thread. The total always counts it; the scope is credited back only when the
 * same scope frees it on its own thread (a value freed later, by another thread, leaves the
 * scope's count high: conservative, never low). */
#include <jansson.h>
#include <malloc.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

typedef struct mem_hdr {
    size_t size;  /* bytes of the block, header included */
    uint64_t tag; /* the scope that paid for it, 0: none */
} mem_hdr;
_Static_assert(sizeof(mem_hdr) == 16, "the header keeps malloc's 16-byte alignment");

static atomic_size_t g_used;                          /* bytes charged, all scopes */
static size_t g_total = SRV_MEM_TOTAL, g_request = SRV_MEM_REQUEST;
static atomic_ullong g_next_tag;
static _Thread_local srv_mem_scope *tl_scope;         /* the scope of this thread's request */

void srv_mem_configure(size_t total)
{
    /* one heap arena per connection thread would let freed, untrimmed memory pile up in
     * each; a few shared arenas keep it reusable by every request */
    mallopt(M_ARENA_MAX, SRV_MALLOC_ARENAS);
    g_total = total;
    g_request = total < SRV_MEM_REQUEST ? total : SRV_MEM_REQUEST;
}

size_t srv_mem_total(void) { return g_total; }
size_t srv_mem_request_limit(void) { return g_request; }
size_t srv_mem_in_use(void) { return atomic_load(&g_used); }

void srv_mem_scope_init(srv_mem_scope *sc)
{
    *sc = (srv_mem_scope){.tag = atomic_fetch_add(&g_next_tag, 1) + 1, .limit = g_request};
}

srv_mem_scope *srv_mem_bind(srv_mem_scope *sc)
{
    srv_mem_scope *old = tl_scope;
    tl_scope = sc;
    return old;
}

srv_mem_scope *srv_mem_current(void) { return tl_scope; }

/* Charges n bytes to sc (NULL: the thread's scope, if any) and to the total. 0, or the
 * HTTP status of the refusal (413: the request's limit; 503: the total), also kept in
 * sc->refused. Memory charged outside any scope is counted, never refused. */
int srv_mem_take(srv_mem_scope *sc, size_t n)
{
    if (!sc) sc = tl_scope;
    if (!sc) {
        atomic_fetch_add(&g_used, n);
        return 0;
    }
    if (n > sc->limit - sc->used || sc->used > sc->limit) return sc->refused = 413;
    size_t cur = atomic_load(&g_used);
    do {
        if (n > g_total || cur > g_total - n) return sc->refused = 503;
    } while (!atomic_compare_exchange_weak(&g_used, &cur, cur + n));
    sc->used += n;
    if (sc->used > sc->peak) sc->peak = sc->used;
    return 0;
}

void srv_mem_give(srv_mem_scope *sc, size_t n)
{
    if (!sc) sc = tl_scope;
    if (sc) sc->used = sc->used > n ? sc->used - n : 0;
    atomic_fetch_sub(&g_used, n);
}

/* What a malloc of n bytes takes from the heap: glibc's chunk (an 8-byte size word, 16-byte
 * granules, 32 bytes at least). jansson makes many small blocks (a number: 24 bytes asked,
 * 48 taken with our header), so counting what was asked would undercount by a fifth. */
static size_t chunk_bytes(size_t n)
{
    size_t c = (n + 8 + 15) & ~(size_t)15;
    return c < 32 ? 32 : c;
}

static void *json_alloc(size_t n)
{
    mem_hdr *h;
    if (n > SIZE_MAX / 2) return NULL;
    size_t cost = chunk_bytes(n + sizeof *h);
    if (srv_mem_take(NULL, cost)) return NULL;
    if (!(h = malloc(n + sizeof *h))) {
        srv_mem_give(NULL, cost);
        return NULL;
    }
    *h = (mem_hdr){cost, tl_scope ? tl_scope->tag : 0};
    return h + 1;
}

static void json_release(void *p)
{
    if (!p) return;
    mem_hdr *h = (mem_hdr *)p - 1;
    srv_mem_scope *sc = tl_scope && h->tag == tl_scope->tag ? tl_scope : NULL;
    if (sc) sc->used = sc->used > h->size ? sc->used - h->size : 0;
    atomic_fetch_sub(&g_used, h->size);
    free(h);
}

void srv_mem_install_json(void) { json_set_alloc_funcs(json_alloc, json_release); }

int srv_mem_hold(srv_mem_scope *sc, size_t n)
{
    if (!sc) sc = tl_scope;
    if (!sc) return 0; /* nothing to give it back at the end: not charged */
    int rc = srv_mem_take(sc, n);
    if (!rc) sc->held += n;
    return rc;
}

/* A request that used much memory hands its freed heap back to the system: glibc keeps
 * freed blocks in the thread's own arena, where the other threads' requests cannot reuse
 * them, and the budget would bound the live bytes but not the resident ones. */
void srv_mem_scope_end(srv_mem_scope *sc)
{
    srv_mem_give(sc, sc->held);
    sc->held = 0;
    if (sc->peak >= SRV_MEM_TRIM_AFTER) malloc_trim(0);
}

/* o as compact JSON text in plain malloc'ed memory (json_dumps' result would belong to the
 * allocator above). hold: charged to the thread's scope until the request ends (a reply
 * libmicrohttpd sends after the handler returns); 0 for text freed at once. NULL when out
 * of memory or refused. */
char *srv_json_text(const json_t *o, size_t *len, int hold)
{
    size_t n = o ? json_dumpb(o, NULL, 0, JSON_COMPACT) : 0;
    char *t = n && !(hold && srv_mem_hold(NULL, n + 1)) ? malloc(n + 1) : NULL;
    if (!t || json_dumpb(o, t, n, JSON_COMPACT) != n) {
        free(t);
        return NULL;
    }
    t[n] = 0;
    if (len) *len = n;
    return t;
}
