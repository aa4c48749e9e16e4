/* Connection fairness (docs/server.md "Limits"): every open connection is in a table with
 * its phase and deadline, and a reaper thread shuts down the ones that miss it, so a slow
 * client (slowloris) cannot hold a connection by trickling bytes: libmicrohttpd's idle
 * timeout restarts at every byte, these deadlines do not.
 *
 *   connect / reply sent --> HEADERS (SRV_HEADER_DEADLINE_S; a reserved connection
 *                            SRV_RESERVE_DEADLINE_S) --> BODY (SRV_BODY_DEADLINE_S)
 *                            --> BUSY (no deadline: the handler and the reply run)
 *
 * libmicrohttpd admits SRV_MAX_CONNECTIONS + SRV_RESERVED_CONNECTIONS, at most
 * SRV_MAX_CONN_PER_CLIENT from one address; a connection opened while SRV_MAX_CONNECTIONS
 * are open is a reserved one, which answers /health and 503 to everything else, so
 * /health stays answerable when the ordinary connections are all taken.
 *
 * The table's lock is held while the reaper shuts a socket down and while a closed
 * connection leaves the table (before libmicrohttpd closes its descriptor), so the reaper
 * never touches a descriptor number that was reused. */
#include <errno.h>
#include "core/fpguard.h"
#include <microhttpd.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "server/srv.h"

struct srv_conn {
    int fd;
    int phase;          /* SRV_CONN_* */
    int reserve;        /* admitted beyond SRV_MAX_CONNECTIONS */
    int64_t deadline;   /* ms (CLOCK_MONOTONIC) for HEADERS and BODY */
    srv_conn *prev, *next;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_conn head;      /* circular list */
    size_t n;
    int running, stop;
    pthread_t reaper;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static atomic_ullong g_reaped, g_reserve_refused;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t headers_deadline(const srv_conn *c)
{
    return now_ms() + 1000 * (c->reserve ? SRV_RESERVE_DEADLINE_S : SRV_HEADER_DEADLINE_S);
}

void srv_conn_phase(srv_conn *c, int phase)
{
    if (!c) return;
    pthread_mutex_lock(&g.mu);
    c->phase = phase;
    if (phase == SRV_CONN_HEADERS) c->deadline = headers_deadline(c);
    else if (phase == SRV_CONN_BODY) c->deadline = now_ms() + 1000 * SRV_BODY_DEADLINE_S;
    pthread_mutex_unlock(&g.mu);
}

int srv_conn_reserved(const srv_conn *c) { return c && c->reserve; }

void srv_conn_note_refused(void) { atomic_fetch_add(&g_reserve_refused, 1); }

void srv_conn_started(struct MHD_Connection *mc, void **ctx)
{
    const union MHD_ConnectionInfo *fi = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    srv_conn *c = calloc(1, sizeof *c);
    *ctx = c;
    if (!c) return;
    c->fd = fi ? fi->connect_fd : -1;
    pthread_mutex_lock(&g.mu);
    c->reserve = ++g.n > SRV_MAX_CONNECTIONS;
    c->phase = SRV_CONN_HEADERS;
    c->deadline = headers_deadline(c);
    c->next = g.head.next, c->prev = &g.head;
    g.head.next->prev = c, g.head.next = c;
    pthread_mutex_unlock(&g.mu);
}

void srv_conn_closed(void **ctx)
{
    srv_conn *c = *ctx;
    *ctx = NULL;
    if (!c) return;
    pthread_mutex_lock(&g.mu);
    c->prev->next = c->next, c->next->prev = c->prev;
    g.n--;
    pthread_mutex_unlock(&g.mu);
    free(c);
}

srv_conn *srv_conn_of(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

/* Shuts down every connection past its deadline; caller holds g.mu. */
static void reap(int64_t now)
{
    for (srv_conn *c = g.head.next; c != &g.head; c = c->next)
        if (c->phase != SRV_CONN_BUSY && now > c->deadline && c->fd >= 0) {
            shutdown(c->fd, SHUT_RDWR); /* its thread sees the end of the stream and closes it */
            c->deadline = INT64_MAX;
            atomic_fetch_add(&g_reaped, 1);
        }
}

static void *reaper(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g.mu);
    while (!g.stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 200 * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g.cv, &g.mu, &until);
        reap(now_ms());
    }
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

int srv_conns_start(void)
{
    pthread_mutex_lock(&g.mu);
    g.head.next = g.head.prev = &g.head;
    g.n = 0, g.stop = 0;
    int rc = pthread_create(&g.reaper, NULL, reaper, NULL);
    g.running = rc == 0;
    pthread_mutex_unlock(&g.mu);
    return rc ? -1 : 0;
}

void srv_conns_stop(void)
{
    pthread_mutex_lock(&g.mu);
    int running = g.running;
    g.stop = 1, g.running = 0;
    pthread_cond_signal(&g.cv);
    pthread_mutex_unlock(&g.mu);
    if (running) pthread_join(g.reaper, NULL);
}

void srv_conns_stats(srv_conns_stats_t *st)
{
    pthread_mutex_lock(&g.mu);
    st->open = g.n;
    pthread_mutex_unlock(&g.mu);
    st->reaped = atomic_load(&g_reaped);
    st->reserve_refused = atomic_load(&g_reserve_refused);
}
