/* store/backend_redis_cluster.c without a server: the key slot (CRC16) against known
 * answers, the cluster URL, and hostile CLUSTER SLOTS and MOVED replies (fed through
 * hiredis's own reply reader, as they would arrive). The real cluster:
 * tests/test_store_redis_cluster.py. */
#include <hiredis/hiredis.h>
#include <string.h>

#include "store/backend_redis.h"
#include "test.h"

static void slot_known_answers(void)
{
    CHECK_EQ_INT(rb_cluster_slot("123456789"), 0x31C3 & 16383); /* CRC16/XMODEM's check value */
    CHECK_EQ_INT(rb_cluster_slot("foo"), 12182);                /* redis-cli CLUSTER KEYSLOT foo */
    CHECK_EQ_INT(rb_cluster_slot(""), 0);
}

static void cluster_url(void)
{
    redis_addr a;
    skv_err e = {0};
    CHECK(rb_parse_url("redis+cluster://h1:7000,10.0.0.2:7001/st?replicas=0&failover=5", &a, &e) == SKV_OK);
    CHECK(a.cluster && a.n_seed == 2 && a.n_sent == 0 && a.sent_port[1] == 7001 && !strcmp(a.sent_host[0], "h1"));
    CHECK(a.replicas == 0 && a.wait_ms == 2000 && a.failover == 5 && !strcmp(a.prefix, "st"));
    CHECK_EQ_INT(a.slot, rb_cluster_slot("st"));
    char top[64];
    rb_top(&a, top, sizeof top);
    CHECK_MSG(!strcmp(top, "{st}:skv2:"), "%s", top);
    CHECK(store_is_redis_url("redis+cluster://h:1/p"));
    const char *bad[] = {"redis+cluster://h:1/{p}", "redis+cluster://h:1/", "redis+cluster://h:1/a/b",
                         "redis+cluster://h:1/p?wait_ms=0", "redis+cluster:///p"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(rb_parse_url(bad[i], &a, &e) == SKV_ERR_INVALID_ARG && strstr(e.msg, "Redis URL"), "%s", bad[i]);
}

/* One reply parsed from RESP bytes (NULL when they are not a whole reply). */
static redisReply *resp(const char *bytes)
{
    redisReader *r = redisReaderCreate();
    void *out = NULL;
    if (redisReaderFeed(r, bytes, strlen(bytes)) != REDIS_OK || redisReaderGetReply(r, &out) != REDIS_OK) out = NULL;
    redisReaderFree(r);
    return out;
}

/* rb_cluster_owner on a reply given as RESP: its return, host and port. */
static int owner(const char *bytes, int slot, char *host, int *port)
{
    redisReply *r = resp(bytes);
    if (!r) return -2;
    *port = 0;
    host[0] = 0;
    int rc = rb_cluster_owner(r, slot, "asked", host, 16, port);
    freeReplyObject(r);
    return rc;
}

/* A CLUSTER SLOTS range 0..8191 served by host (hlen bytes) : port. */
#define SLOT0(hlen, host, port) "*3\r\n:0\r\n:8191\r\n*3\r\n$" hlen "\r\n" host "\r\n:" port "\r\n$2\r\nid\r\n"

static void slots_replies(void)
{
    char host[16];
    int port;
    const char *two = "*2\r\n" SLOT0("1", "h", "7000") "*3\r\n:8192\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:7001\r\n";
    CHECK(owner(two, 100, host, &port) == 0 && !strcmp(host, "h") && port == 7000);
    CHECK(owner(two, 9000, host, &port) == 0 && !strcmp(host, "127.0.0.1") && port == 7001);
    /* an empty host (or "?"): the node asked */
    CHECK(owner("*1\r\n" SLOT0("0", "", "7000"), 5, host, &port) == 0 && !strcmp(host, "asked"));
    CHECK(owner("*1\r\n" SLOT0("1", "?", "7000"), 5, host, &port) == 0 && !strcmp(host, "asked"));
    const char *hostile[] = {
        "*1\r\n" SLOT0("1", "h", "0"),                            /* port 0 */
        "*1\r\n" SLOT0("1", "h", "70000"),                        /* port out of range */
        "*1\r\n" SLOT0("20", "aaaaaaaaaaaaaaaaaaaa", "7000"),     /* host longer than the buffer */
        "*1\r\n*3\r\n:0\r\n:8191\r\n$3\r\nabc\r\n",               /* master not an array */
        "*1\r\n*2\r\n:0\r\n:8191\r\n",                            /* no master */
        "*1\r\n*3\r\n$1\r\n0\r\n:8191\r\n*2\r\n$1\r\nh\r\n:1\r\n", /* start not an integer */
        "*1\r\n*3\r\n:0\r\n:8191\r\n*1\r\n$1\r\nh\r\n",           /* master without a port */
        "*1\r\n*3\r\n:0\r\n:8191\r\n*2\r\n:5\r\n:7000\r\n",       /* host not a string */
        "*1\r\n" SLOT0("1", "h", "7000"),                         /* asked for a slot it does not cover */
        "-ERR This instance has cluster support disabled\r\n",
        "*0\r\n",
        ":3\r\n",
    };
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        int slot = i == 8 ? 9000 : 5; /* the slot no range covers */
        CHECK_MSG(owner(hostile[i], slot, host, &port) == -1, "reply %zu accepted: %s:%d", i, host, port);
    }
}

static void moved_replies(void)
{
    char host[16];
    int port = 0;
    CHECK(rb_parse_moved("MOVED 3999 127.0.0.1:6381", host, sizeof host, &port) == 0 && port == 6381 &&
          !strcmp(host, "127.0.0.1"));
    CHECK(rb_parse_moved("ASK 3999 ::1:6381", host, sizeof host, &port) == 0 && !strcmp(host, "::1"));
    const char *bad[] = {"MOVED", "MOVED 3999", "MOVED 3999 ", "MOVED 3999 h", "MOVED 3999 :6381",
                         "MOVED 3999 h:0", "MOVED 3999 h:65536", "MOVED 3999 h:12x", "MOVED 1 aaaaaaaaaaaaaaaaaaaa:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(rb_parse_moved(bad[i], host, sizeof host, &port) == -1, "%s accepted", bad[i]);
}

int main(void)
{
    TEST_BEGIN("test_redis_cluster");
    RUN(slot_known_answers);
    RUN(cluster_url);
    RUN(slots_replies);
    RUN(moved_replies);
    TEST_END();
}
