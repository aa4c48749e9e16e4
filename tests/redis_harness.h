/* A private redis-server for tests: started on a unix socket in a temporary directory
 * (no TCP port, no persistence unless asked), killed at the end. Tests that need it skip
 * with a clear message when redis-server is not installed (scripts/install-deps.sh
 * installs it) and fail under SEQKV_REQUIRE_REDIS=1. */
#ifndef SKV_REDIS_HARNESS_H
#define SKV_REDIS_HARNESS_H

#include <errno.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct redis_srv {
    pid_t pid;
    char dir[256], sock[300];
} redis_srv;

__attribute__((unused)) static int redis_available(void)
{
    return system("command -v redis-server >/dev/null 2>&1") == 0;
}

__attribute__((unused)) static void redis_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A connection to the server (NULL if it does not answer). */
__attribute__((unused)) static redisContext *redis_connect(const redis_srv *r)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectUnixWithTimeout(r->sock, tv);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    return c;
}

/* One command's reply as an integer (INT64_MIN on failure). */
__attribute__((unused)) static long long redis_int(const redis_srv *r, const char *cmd)
{
    redisContext *c = redis_connect(r);
    long long v = -1;
    redisReply *rep = c ? redisCommand(c, cmd) : NULL;
    if (rep && rep->type == REDIS_REPLY_INTEGER) v = rep->integer;
    if (rep) freeReplyObject(rep);
    redisFree(c);
    return v;
}

/* Starts redis-server in r->dir (made if absent) with extra arguments (NULL-terminated);
 * waits until it answers PING. 0 on success. */
__attribute__((unused)) static int redis_start(redis_srv *r, const char *const *extra)
{
    const char *argv[32] = {"redis-server", "--port", "0", "--unixsocket", r->sock, "--unixsocketperm", "700",
                            "--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--dir", r->dir,
                            "--logfile", "redis.log"};
    int n = 17;
    mkdir(r->dir, 0700);
    snprintf(r->sock, sizeof r->sock, "%s/redis.sock", r->dir);
    argv[4] = r->sock;
    for (int i = 0; extra && extra[i] && n < 31; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    r->pid = fork();
    if (r->pid < 0) return -1;
    if (r->pid == 0) {
        execvp("redis-server", (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) { /* up to 10 s */
        redisContext *c = redis_connect(r);
        if (c) {
            redisReply *rep = redisCommand(c, "PING");
            int ok = rep && rep->type == REDIS_REPLY_STATUS;
            if (rep) freeReplyObject(rep);
            redisFree(c);
            if (ok) return 0;
        }
        redis_sleep_ms(50);
    }
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
    return -1;
}

/* SIGKILL, as a crash would (no shutdown save). */
__attribute__((unused)) static void redis_kill(redis_srv *r)
{
    if (r->pid <= 0) return;
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
    r->pid = 0;
    unlink(r->sock);
}

#endif
