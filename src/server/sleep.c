/* --sleep-idle-seconds N (llama-server's): after N seconds with no request that needs the
 * model and nothing running or queued, the server sleeps: the slots (their KV and logits
 * buffers) and the RAM prompt cache are freed (the store's writer drains its queue first;
 * the model stays mapped, the store keeps every conversation). GET requests (/health,
 * /props with "is_sleeping", /models, /metrics, /slots) answer without waking it; the next
 * POST wakes it (the slots are made again) before it runs.
 *
 * Every request holds s->sleep_lock for reading while its handler runs (a stream's job then
 * runs in a slot, which the watcher sees busy); the watcher takes it for writing only when
 * no request is being handled, so the pool it frees is in no one's hands. With sleep off
 * (N = 0) none of this runs. */
#include "core/fpguard.h"
#include <errno.h>
#include <time.h>

#include "server/srv.h"

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void *watch(void *arg)
{
    srv *s = arg;
    const int64_t idle = (int64_t)s->p.sleep_idle_s * 1000;
    while (!atomic_load(&s->sleep_quit)) {
        struct timespec t = {0, 100 * 1000000L};
        nanosleep(&t, NULL);
        if (atomic_load(&s->sleeping) || now_ms() - atomic_load(&s->active_ms) < idle) continue;
        if (pthread_rwlock_trywrlock(&s->sleep_lock)) continue; /* a request is being handled */
        if (!atomic_load(&s->sleeping) && s->pool && !srv_pool_busy(s->pool) && !srv_pool_queued(s->pool) &&
            now_ms() - atomic_load(&s->active_ms) >= idle) {
            srv_pool_stop(s->pool);
            s->pool = NULL;
            atomic_store(&s->sleeping, 1);
            srv_log("idle for %d s: sleeping (slots and prompt cache freed; the next request wakes the server)",
                    s->p.sleep_idle_s);
        } else if (s->pool && (srv_pool_busy(s->pool) || srv_pool_queued(s->pool))) {
            atomic_store(&s->active_ms, now_ms()); /* a long job: idle counts from its end */
        }
        pthread_rwlock_unlock(&s->sleep_lock);
    }
    return NULL;
}

int srv_sleep_start(srv *s)
{
    atomic_store(&s->active_ms, now_ms());
    if (s->p.sleep_idle_s <= 0) return 0;
    if (pthread_rwlock_init(&s->sleep_lock, NULL)) return -1;
    s->sleep_on = 1;
    if (pthread_create(&s->sleep_th, NULL, watch, s)) {
        pthread_rwlock_destroy(&s->sleep_lock);
        s->sleep_on = 0;
        return -1;
    }
    return 0;
}

void srv_sleep_stop(srv *s)
{
    if (!s->sleep_on) return;
    atomic_store(&s->sleep_quit, 1);
    pthread_join(s->sleep_th, NULL);
    pthread_rwlock_destroy(&s->sleep_lock);
    s->sleep_on = 0;
}

int srv_sleep_enter(srv *s, int wakes)
{
    if (!s->sleep_on) return 0;
    pthread_rwlock_rdlock(&s->sleep_lock);
    if (wakes) atomic_store(&s->active_ms, now_ms());
    while (wakes && atomic_load(&s->sleeping)) {
        pthread_rwlock_unlock(&s->sleep_lock);
        pthread_rwlock_wrlock(&s->sleep_lock);
        int rc = 0;
        if (atomic_load(&s->sleeping)) {
            if (srv_pool_start(s, &s->pool)) {
                srv_pool_stop(s->pool); /* what was made */
                s->pool = NULL;
                rc = -1;
                srv_log("waking up: cannot create %d slots of %d positions", s->p.parallel, s->n_ctx);
            } else {
                atomic_store(&s->sleeping, 0);
                srv_log("woken up by a request");
            }
        }
        pthread_rwlock_unlock(&s->sleep_lock);
        if (rc) return -1;
        pthread_rwlock_rdlock(&s->sleep_lock);
    }
    return 0;
}

void srv_sleep_leave(srv *s, int wakes)
{
    if (!s->sleep_on) return;
    if (wakes) atomic_store(&s->active_ms, now_ms());
    pthread_rwlock_unlock(&s->sleep_lock);
}
