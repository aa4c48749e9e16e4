/* The process-wide log callback (seqkv.h "Logging").
 *
 * The pair (fn, user) is one unit: it is swapped and read under a mutex, so a message
 * never reaches one callback with another's user pointer. The callback itself runs
 * outside the lock, so it may log, call skv_set_log, or block without stalling other
 * threads' calls into the library beyond their own messages. */
#include "core/log.h"
#include "core/fpguard.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static skv_log_fn log_fn;
static void *log_user;

void skv_set_log(skv_log_fn fn, void *user)
{
    pthread_mutex_lock(&log_mu);
    log_fn = fn;
    log_user = fn ? user : NULL;
    pthread_mutex_unlock(&log_mu);
}

void skv_log(int level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    pthread_mutex_lock(&log_mu);
    skv_log_fn fn = log_fn;
    void *user = log_user;
    pthread_mutex_unlock(&log_mu);
    if (!fn) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fn(user, level, msg);
}
