/* The session store on Redis (src/store/backend_redis*.c), against a real redis-server
 * that this test starts on a private unix socket (tests/redis_harness.h):
 *   - the store's calls through a unix:// URL: put, get (bit-exact, verified), match, ls,
 *     rm, stats; reopen from another handle;
 *   - two processes putting and getting concurrently sessions that share prefixes: every
 *     shared prefix stored once (the trie's positions equal an in-memory trie's), every
 *     restore verified against a fresh run;
 *   - redis-server SIGKILLed and restarted (append-only file, fsync always) during puts:
 *     the puts in flight fail with a message, every acknowledged session restores
 *     verified, the same handle carries on;
 *   - connections dropped by the server (CLIENT KILL): a clear error at most, then work;
 *   - maxmemory with allkeys-lru evicting under load: no wrong restore ever (each get is
 *     verified or a clear miss), misses counted in stats, puts and gets keep working;
 *     maxmemory with noeviction: a clear "full" error, nothing half-written. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_harness.h"
#include "seqkv.h"
#include "store/trie.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"

static skv_model *g_m;
static int32_t *g_text;
static size_t g_n_text;
static char g_root[256];

typedef struct {
    char name[32];
    int32_t tok[256];
    size_t n;
} sess;

static skv_ctx *new_ctx(void)
{
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    p.n_ctx = 256;
    return skv_ctx_create(g_m, &p, &c) == SKV_OK ? c : NULL;
}

static int fresh_digest(const int32_t *t, size_t n, uint8_t d[16])
{
    skv_ctx *c = new_ctx();
    int rc = c ? skv_prefill(c, t, n, SKV_LOGITS_NONE, NULL) : SKV_ERR_NOMEM;
    if (!rc) rc = skv_ctx_kv_digest(c, (int)n, d);
    skv_ctx_free(c);
    return rc;
}

/* Session k of writer w: one of three openings (20..40 tokens of the text), then its own
 * continuation; names differ per writer, prefixes are shared across writers. */
static void make_sess(sess *s, int w, int k)
{
    size_t open = 20 + 10 * (size_t)(k % 3), own = 12 + (size_t)(k % 5) * 4;
    snprintf(s->name, sizeof s->name, "w%d-%d", w, k);
    memcpy(s->tok, g_text + 50 * (size_t)(k % 3), open * sizeof *s->tok);
    memcpy(s->tok + open, g_text + 600 + 97 * (size_t)k + 13 * (size_t)w, own * sizeof *s->tok);
    s->n = open + own;
}

/* get: SKV_OK with the tokens and KV of a fresh run, or the store's error; a restore
 * that "succeeds" with anything else is SKV_ERR_MISMATCH (a wrong restore). */
static int check_get(skv_store *st, const sess *s)
{
    skv_ctx *c = new_ctx();
    int32_t tok[256];
    size_t n = 0;
    uint8_t want[16], got[16];
    int rc = c ? skv_store_get(st, s->name, c, SKV_STORE_VERIFY, tok, 256, &n, NULL) : SKV_ERR_NOMEM;
    if (rc) {
        skv_ctx_free(c);
        return rc;
    }
    if ((rc = skv_ctx_kv_digest(c, (int)n, got)) == SKV_OK && (rc = fresh_digest(s->tok, s->n, want)) == SKV_OK &&
        (n != s->n || memcmp(tok, s->tok, n * sizeof *tok) || memcmp(got, want, 16)))
        rc = SKV_ERR_MISMATCH + 1000; /* distinct from the store's own MISMATCH */
    skv_ctx_free(c);
    return rc;
}

static void url_of(const redis_srv *r, const char *prefix, char *url, size_t cap)
{
    snprintf(url, cap, "unix://%.300s?prefix=%.16s", r->sock, prefix);
}

static int start(redis_srv *r, const char *name, const char *const *extra)
{
    snprintf(r->dir, sizeof r->dir, "%.200s/%.40s", g_root, name);
    return redis_start(r, extra);
}

static skv_store *open_url(const char *url, int64_t budget)
{
    skv_store_params p = skv_store_default_params();
    skv_store *st = NULL;
    char err[512];
    p.budget = budget;
    if (skv_store_open(url, g_m, SKV_STORE_CREATE, &p, &st, err, sizeof err) != SKV_OK)
        fprintf(stderr, "open %s: %s\n", url, err);
    return st;
}

/* ---- basic calls ----------------------------------------------------------- */

static int count_ls(void *u, const skv_store_session_info *si)
{
    (void)si;
    ++*(int *)u;
    return 0;
}

static void test_basic(void)
{
    redis_srv r = {0};
    char url[400];
    sess s[6];
    if (start(&r, "basic", NULL)) SKIP("redis-server would not start");
    url_of(&r, "basic", url, sizeof url);
    skv_store *st = open_url(url, 64 << 20);
    CHECK(st != NULL);
    for (int k = 0; st && k < 6; k++) {
        make_sess(&s[k], 0, k);
        CHECK_MSG(skv_store_put(st, s[k].name, s[k].tok, s[k].n, NULL) == SKV_OK, "put: %s", skv_store_last_error(st));
    }
    skv_store_put_report pr;
    CHECK_MSG(skv_store_put(st, s[0].name, s[0].tok, s[0].n, &pr) == SKV_OK && pr.existed, "a retried put: a no-op");
    CHECK_MSG(skv_store_put(st, s[0].name, s[1].tok, s[1].n, NULL) == SKV_ERR_INVALID_ARG, "duplicate name refused");
    skv_store *st2 = open_url(url, -1); /* another handle (as another process would) */
    CHECK(st2 != NULL);
    for (int k = 0; st2 && k < 6; k++) CHECK_MSG(check_get(st2, &s[k]) == SKV_OK, "get %d: %s", k, skv_store_last_error(st2));
    skv_store_match_result mr;
    CHECK(st2 && skv_store_match(st2, s[3].tok, s[3].n, &mr) == SKV_OK && mr.n_matched == s[3].n);
    CHECK(skv_store_remove(st, s[1].name) == SKV_OK);
    CHECK(check_get(st2, &s[1]) == SKV_ERR_INVALID_ARG);
    int n_ls = 0;
    CHECK(skv_store_list(st2, count_ls, &n_ls) == SKV_OK && n_ls == 5);
    skv_store_stats stt;
    CHECK(skv_store_get_stats(st2, &stt) == SKV_OK);
    CHECK(stt.n_sessions == 5 && stt.unique_positions < stt.session_tokens && stt.disk_bytes > 0);
    CHECK(stt.kv_misses == 0 && stt.node_misses == 0);
    skv_store_gc_report g;
    CHECK_MSG(skv_store_gc(st2, &g) == SKV_OK, "gc: %s", skv_store_last_error(st2));
    skv_store_model sm;
    char err[256];
    CHECK_MSG(skv_store_model_info(url, &sm, err, sizeof err) == SKV_OK, "%s", err);
    skv_store_close(st);
    skv_store_close(st2);
    char bad[400];
    snprintf(bad, sizeof bad, "unix://%s/none.sock?prefix=x", r.dir);
    CHECK(open_url(bad, -1) == NULL);
    redis_kill(&r);
}

/* ---- two writers ------------------------------------------------------------- */

enum { N_PER = 10 };

/* Writer w: puts its sessions, and after each put restores one of its own and one of the
 * other writer's (when stored yet); returns the number of wrong or failed restores. */
static int writer(const char *url, int w)
{
    skv_store *st = open_url(url, 64 << 20);
    int bad = st ? 0 : 100;
    for (int k = 0; st && k < N_PER; k++) {
        sess s, o;
        make_sess(&s, w, k);
        int rc = skv_store_put(st, s.name, s.tok, s.n, NULL);
        if (rc) fprintf(stderr, "writer %d put %s: %s\n", w, s.name, skv_store_last_error(st));
        bad += rc != SKV_OK;
        bad += check_get(st, &s) != SKV_OK;
        make_sess(&o, 1 - w, k / 2);
        rc = check_get(st, &o);
        bad += rc != SKV_OK && rc != SKV_ERR_INVALID_ARG; /* not there yet: fine; wrong: never */
    }
    skv_store_close(st);
    return bad;
}

static int count_pos(void *u, const skv_trie_node *n, const int32_t *seq)
{
    (void)seq;
    *(uint64_t *)u += n->len;
    return 0;
}

/* Positions of an in-memory trie of the same sessions: what "stored once" means. */
static uint64_t expected_positions(void)
{
    skv_trie_mem *m;
    skv_trie_io io;
    float sur[256] = {0};
    uint64_t end, pos = 0;
    if (skv_trie_mem_create(&m)) return 0;
    skv_trie_mem_io(m, &io);
    for (int w = 0; w < 2; w++)
        for (int k = 0; k < N_PER; k++) {
            sess s;
            make_sess(&s, w, k);
            skv_trie_insert(&io, s.tok, s.n, sur, 1, &end);
        }
    skv_trie_walk(&io, count_pos, &pos);
    skv_trie_mem_free(m);
    return pos;
}

static void test_two_writers(void)
{
    redis_srv r = {0};
    char url[400];
    pid_t pid[2];
    int status, bad = 0;
    if (start(&r, "two", NULL)) SKIP("redis-server would not start");
    url_of(&r, "two", url, sizeof url);
    skv_store_close(open_url(url, 64 << 20)); /* created once, before the writers race */
    for (int w = 0; w < 2; w++)
        if ((pid[w] = fork()) == 0) {
            int b = writer(url, w);
            _exit(b > 100 ? 100 : b);
        }
    for (int w = 0; w < 2; w++) {
        waitpid(pid[w], &status, 0);
        bad += WIFEXITED(status) ? WEXITSTATUS(status) : 100;
    }
    CHECK_MSG(bad == 0, "%d failed or wrong restores in the writers", bad);
    skv_store *st = open_url(url, -1);
    skv_store_stats stt;
    CHECK(st && skv_store_get_stats(st, &stt) == SKV_OK);
    CHECK_EQ_INT(stt.n_sessions, 2 * N_PER);
    CHECK_EQ_INT(stt.unique_positions, expected_positions());
    for (int w = 0; st && w < 2; w++)
        for (int k = 0; k < N_PER; k++) {
            sess s;
            make_sess(&s, w, k);
            CHECK_MSG(check_get(st, &s) == SKV_OK, "%s: %s", s.name, skv_store_last_error(st));
        }
    printf("two writers: %d sessions, %llu unique positions of %llu, %llu bytes in Redis\n", 2 * N_PER,
           (unsigned long long)stt.unique_positions, (unsigned long long)stt.session_tokens,
           (unsigned long long)stt.disk_bytes);
    skv_store_close(st);
    redis_kill(&r);
}

/* ---- two threads on one handle ------------------------------------------------ */

typedef struct {
    skv_store *st;
    int w, failed;
} thread_job;

static void *put_thread(void *arg)
{
    thread_job *j = arg;
    for (int k = 0; k < N_PER; k++) {
        sess s;
        make_sess(&s, j->w, k);
        if (skv_store_put(j->st, s.name, s.tok, s.n, NULL) != SKV_OK) {
            fprintf(stderr, "thread %d put %s: %s\n", j->w, s.name, skv_store_last_error(j->st));
            j->failed++;
        }
    }
    return NULL;
}

/* Two threads putting through ONE handle at once (a server's store writer beside a slot
 * save): the model runs of a put share the handle's work context, so the handle runs one
 * write transaction at a time; every session restores verified and bit-exact. */
static void test_two_threads(void)
{
    redis_srv r = {0};
    char url[400];
    if (start(&r, "threads", NULL)) SKIP("redis-server would not start");
    url_of(&r, "threads", url, sizeof url);
    skv_store *st = open_url(url, 64 << 20);
    CHECK(st != NULL);
    thread_job job[2] = {{st, 0, 0}, {st, 1, 0}};
    pthread_t th[2];
    for (int w = 0; st && w < 2; w++) CHECK(pthread_create(&th[w], NULL, put_thread, &job[w]) == 0);
    for (int w = 0; st && w < 2; w++) pthread_join(th[w], NULL);
    CHECK_EQ_INT(job[0].failed + job[1].failed, 0);
    for (int w = 0; st && w < 2; w++)
        for (int k = 0; k < N_PER; k++) {
            sess s;
            make_sess(&s, w, k);
            CHECK_MSG(check_get(st, &s) == SKV_OK, "%s: %s", s.name, skv_store_last_error(st));
        }
    skv_store_close(st);
    redis_kill(&r);
}

/* ---- redis-server killed and restarted during puts ---------------------------- */

enum { N_KILL = 24 };

/* Puts N_KILL sessions, each retried until it is acknowledged; writes the index of each
 * acknowledged one to fd, and counts failures without a message (must stay 0). */
static int kill_writer(const char *url, int fd)
{
    skv_store *st = NULL;
    int silent = 0, errors = 0;
    for (int tries = 0; !st && tries < 200; tries++)
        if (!(st = open_url(url, 64 << 20))) redis_sleep_ms(50);
    for (int k = 0; st && k < N_KILL; k++) {
        sess s;
        make_sess(&s, 0, k);
        for (int tries = 0; tries < 400; tries++) {
            int rc = skv_store_put(st, s.name, s.tok, s.n, NULL);
            if (rc == SKV_ERR_INVALID_ARG && strstr(skv_store_last_error(st), "exists")) rc = SKV_OK; /* ack lost */
            if (rc == SKV_OK) break;
            errors++;
            silent += !skv_store_last_error(st)[0];
            redis_sleep_ms(25);
        }
        if (write(fd, &k, sizeof k) != sizeof k) break;
    }
    skv_store_close(st);
    fprintf(stderr, "kill writer: %d failed puts (each with a message), %d without\n", errors, silent);
    return st ? silent : 100;
}

static void test_kill_restart(void)
{
    const char *aof[] = {"--appendonly", "yes", "--appendfsync", "always", NULL};
    redis_srv r = {0};
    char url[400];
    int fds[2], k, acked = -1, status, kills = 0;
    if (start(&r, "kill", aof)) SKIP("redis-server would not start");
    url_of(&r, "kill", url, sizeof url);
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        _exit(kill_writer(url, fds[1]));
    }
    close(fds[1]);
    while (read(fds[0], &k, sizeof k) == sizeof k) {
        acked = k;
        if (k % 6 == 2 && kills < 3) { /* in the middle of the next put */
            redis_sleep_ms(5 + 7 * kills);
            redis_kill(&r);
            kills++;
            redis_sleep_ms(150);
            CHECK(redis_start(&r, aof) == 0);
        }
    }
    waitpid(pid, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer: every failure has a message");
    CHECK_EQ_INT(acked, N_KILL - 1);
    CHECK(kills == 3);
    skv_store *st = open_url(url, -1);
    CHECK(st != NULL);
    for (int i = 0; st && i < N_KILL; i++) {
        sess s;
        make_sess(&s, 0, i);
        CHECK_MSG(check_get(st, &s) == SKV_OK, "%s after restarts: %s", s.name, skv_store_last_error(st));
    }
    skv_store_close(st);
    redis_kill(&r);
}

/* ---- connections dropped ------------------------------------------------------- */

static void test_conn_drop(void)
{
    redis_srv r = {0};
    char url[400];
    int clear = 0, ok = 0;
    if (start(&r, "drop", NULL)) SKIP("redis-server would not start");
    url_of(&r, "drop", url, sizeof url);
    skv_store *st = open_url(url, 64 << 20);
    CHECK(st != NULL);
    for (int k = 0; st && k < 8; k++) {
        sess s;
        make_sess(&s, 1, k);
        redis_int(&r, "CLIENT KILL TYPE normal SKIPME yes"); /* drops the store's pooled connection */
        int rc = skv_store_put(st, s.name, s.tok, s.n, NULL);
        if (rc) {
            CHECK_MSG(rc == SKV_ERR_IO && strstr(skv_store_last_error(st), "Redis"), "%d: %s", rc,
                      skv_store_last_error(st));
            clear++;
            rc = skv_store_put(st, s.name, s.tok, s.n, NULL); /* the next call reconnects */
        }
        CHECK_MSG(rc == SKV_OK, "put after a drop: %s", skv_store_last_error(st));
        redis_int(&r, "CLIENT KILL TYPE normal SKIPME yes");
        rc = check_get(st, &s);
        if (rc == SKV_ERR_IO) rc = check_get(st, &s);
        ok += rc == SKV_OK;
        CHECK_MSG(rc == SKV_OK, "get after a drop: %d %s", rc, skv_store_last_error(st));
    }
    printf("connection drops: 16, %d calls failed with a clear error, %d/8 restores verified\n", clear, ok);
    skv_store_close(st);
    redis_kill(&r);
}

/* ---- persistence ------------------------------------------------------------------ */

static char g_warn[1024];

static void on_log(void *user, int level, const char *msg)
{
    (void)user;
    if (level == SKV_LOG_WARN) snprintf(g_warn, sizeof g_warn, "%s", msg);
}

/* A Redis without an append-only file: creating a store is refused with the settings to
 * use, SEQKV_REDIS_VOLATILE=1 creates it anyway, opening it later warns; with AOF on, no
 * warning. */
static void test_durability(void)
{
    const char *noaof[] = {"--appendonly", "no", NULL};
    redis_srv r = {0};
    char url[400], err[1024];
    skv_store *st = NULL;
    sess s;
    if (start(&r, "dur", noaof)) SKIP("redis-server would not start");
    url_of(&r, "dur", url, sizeof url);
    unsetenv("SEQKV_REDIS_VOLATILE");
    CHECK(skv_store_open(url, g_m, SKV_STORE_CREATE, NULL, &st, err, sizeof err) == SKV_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err, "appendonly yes") && strstr(err, "SEQKV_REDIS_VOLATILE=1"), "%s", err);
    setenv("SEQKV_REDIS_VOLATILE", "1", 1);
    CHECK_MSG(skv_store_open(url, g_m, SKV_STORE_CREATE, NULL, &st, err, sizeof err) == SKV_OK, "%s", err);
    make_sess(&s, 1, 0);
    CHECK(st && skv_store_put(st, s.name, s.tok, s.n, NULL) == SKV_OK);
    skv_store_close(st);
    unsetenv("SEQKV_REDIS_VOLATILE");
    g_warn[0] = 0;
    skv_set_log(on_log, NULL);
    CHECK_MSG(skv_store_open(url, g_m, 0, NULL, &st, err, sizeof err) == SKV_OK, "%s", err);
    CHECK_MSG(strstr(g_warn, "append-only") != NULL, "no warning: '%s'", g_warn);
    skv_store_close(st);
    redis_int(&r, "CONFIG SET appendonly yes");
    redis_sleep_ms(200); /* the rewrite that turns AOF on runs in the background */
    g_warn[0] = 0;
    CHECK_MSG(skv_store_open(url, g_m, 0, NULL, &st, err, sizeof err) == SKV_OK, "%s", err);
    CHECK_MSG(g_warn[0] == 0, "a warning with appendonly yes: %s", g_warn);
    skv_set_log(NULL, NULL);
    skv_store_close(st);
    redis_kill(&r);
}

/* ---- maxmemory ------------------------------------------------------------------ */

enum { N_LRU = 80 };

static void test_maxmemory_lru(void)
{
    const char *lru[] = {"--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru", NULL};
    redis_srv r = {0};
    char url[400];
    int verified = 0, missed = 0, wrong = 0, put_fail = 0;
    if (start(&r, "lru", lru)) SKIP("redis-server would not start");
    url_of(&r, "lru", url, sizeof url);
    skv_store *st = open_url(url, 64 << 20);
    CHECK(st != NULL);
    for (int k = 0; st && k < N_LRU; k++) {
        sess s, o;
        make_sess(&s, 2, k);
        int rc = skv_store_put(st, s.name, s.tok, s.n, NULL);
        if (rc) {
            put_fail++;
            CHECK_MSG(skv_store_last_error(st)[0], "put failure without a message");
        }
        make_sess(&o, 2, (k * 7) % (k + 1));
        rc = check_get(st, &o);
        if (rc == SKV_OK) verified++;
        else if ((rc == SKV_ERR_IO || rc == SKV_ERR_INVALID_ARG) && skv_store_last_error(st)[0]) missed++;
        else {
            wrong++;
            fprintf(stderr, "get %s under eviction: %d %s\n", o.name, rc, skv_store_last_error(st));
        }
    }
    skv_store_stats stt;
    CHECK(st && skv_store_get_stats(st, &stt) == SKV_OK);
    redisContext *c = redis_connect(&r);
    redisReply *rep = c ? redisCommand(c, "INFO stats") : NULL;
    const char *ev = rep && rep->type == REDIS_REPLY_STRING ? strstr(rep->str, "evicted_keys:") : NULL;
    long long n_ev = ev ? atoll(ev + 13) : -1;
    if (rep) freeReplyObject(rep);
    redisFree(c);
    CHECK_MSG(n_ev > 0, "Redis evicted keys under maxmemory (%lld)", n_ev);
    CHECK_EQ_INT(wrong, 0);
    CHECK(stt.kv_misses + stt.node_misses > 0 || missed > 0);
    /* recovery without repair: a new session stores and restores */
    sess s;
    make_sess(&s, 3, 1);
    CHECK_MSG(st && skv_store_put(st, s.name, s.tok, s.n, NULL) == SKV_OK, "put after eviction: %s",
              skv_store_last_error(st));
    int rc = check_get(st, &s);
    CHECK_MSG(rc == SKV_OK || rc == SKV_ERR_IO, "get after eviction: %d", rc);
    printf("allkeys-lru 3mb: %d puts (%d failed), %d gets verified, %d clear misses, 0 wrong; Redis evicted %lld "
           "keys; store counted %llu KV misses, %llu node misses\n", N_LRU, put_fail, verified, missed, n_ev,
           (unsigned long long)stt.kv_misses, (unsigned long long)stt.node_misses);
    skv_store_close(st);
    redis_kill(&r);
}

static void test_maxmemory_noeviction(void)
{
    const char *full[] = {"--maxmemory", "4mb", "--maxmemory-policy", "noeviction", NULL};
    redis_srv r = {0};
    char url[400];
    int fails = 0, stored = 0;
    char ok[200] = {0};
    if (start(&r, "full", full)) SKIP("redis-server would not start");
    url_of(&r, "full", url, sizeof url);
    skv_store *st = open_url(url, 64 << 20);
    CHECK(st != NULL);
    for (int k = 0; st && k < 200 && fails < 3; k++) {
        sess s;
        make_sess(&s, 4, k);
        if (skv_store_put(st, s.name, s.tok, s.n, NULL) == SKV_OK) {
            stored++;
            ok[k] = 1;
            continue;
        }
        fails++;
        CHECK_MSG(strstr(skv_store_last_error(st), "full") != NULL, "%s", skv_store_last_error(st));
    }
    CHECK(fails > 0);
    for (int k = 0; st && k < 200; k++) { /* everything acknowledged is whole */
        sess s;
        if (!ok[k]) continue;
        make_sess(&s, 4, k);
        CHECK_MSG(check_get(st, &s) == SKV_OK || strstr(skv_store_last_error(st), "full"), "%s: %s", s.name,
                  skv_store_last_error(st));
    }
    printf("noeviction 4mb: %d sessions stored, then 'full' errors\n", stored);
    skv_store_close(st);
    redis_kill(&r);
}

int main(void)
{
    char err[512];
    TEST_BEGIN("test_store_redis");
    if (!redis_available()) {
        int need = getenv("SEQKV_REQUIRE_REDIS") && atoi(getenv("SEQKV_REQUIRE_REDIS"));
        printf("%s test_store_redis: redis-server is not installed (scripts/install-deps.sh)\n", need ? "FAIL" : "SKIP");
        return need;
    }
    if (skv_model_load(MODEL, NULL, &g_m, err, sizeof err) != SKV_OK) {
        printf("FAIL test_store_redis:setup: %s\n", err);
        return 1;
    }
    FILE *f = fopen("tests/data/model_ref/heldout.txt", "rb");
    char *text = malloc(20001);
    size_t len = f ? fread(text, 1, 20000, f) : 0;
    if (f) fclose(f);
    text[len] = 0;
    g_text = malloc(20000 * sizeof *g_text);
    if (skv_tokenize(g_m, text, len, 1, g_text, 20000, &g_n_text) || g_n_text < 4000) {
        printf("FAIL test_store_redis:setup: cannot tokenize the held-out text\n");
        return 1;
    }
    free(text);
    signal(SIGPIPE, SIG_IGN);
    snprintf(g_root, sizeof g_root, "/tmp/seqkv_test_redis_%d", (int)getpid());
    mkdir(g_root, 0700);
    const char *only = getenv("SEQKV_REDIS_CASE"); /* one case by name, for debugging */
#define RUN_IF(fn) \
    if (!only || !strcmp(only, #fn)) RUN(fn)
    RUN_IF(test_basic);
    RUN_IF(test_two_writers);
    RUN_IF(test_two_threads);
    RUN_IF(test_kill_restart);
    RUN_IF(test_conn_drop);
    RUN_IF(test_durability);
    RUN_IF(test_maxmemory_lru);
    RUN_IF(test_maxmemory_noeviction);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_root);
    skv_model_free(g_m);
    free(g_text);
    TEST_END();
}
