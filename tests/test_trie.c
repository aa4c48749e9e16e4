/* Radix trie (src/store/trie.c) against a trivial model: a list of stored sequences.
 * No LMDB, no model: the in-memory node storage. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "store/trie.h"

#define MAXLEN 48
#if defined(__SANITIZE_ADDRESS__)
#define N_OPS 2500 /* a sanitizer build is ~10x slower */
#else
#define N_OPS 6000
#endif

typedef struct {
    int32_t tok[MAXLEN];
    size_t n;
    uint64_t end;
} seq;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)((rng_state >> 11) % n);
}

/* A surprisal that depends on the whole prefix (as a model's would). */
static void surprisals(const int32_t *t, size_t n, float *s)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ (uint64_t)(uint32_t)t[i]) * 1099511628211ull;
        s[i] = (float)((h >> 40) % 1000) / 64.0f;
    }
}

static double prefix_bits(const int32_t *t, size_t n)
{
    float s[MAXLEN];
    double b = 0;
    surprisals(t, n, s);
    for (size_t i = 0; i < n; i++) b += s[i];
    return b;
}

static size_t lcp(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* A random sequence sharing a prefix with a stored one most of the time. */
static void make_seq(const seq *stored, size_t n_stored, seq *out)
{
    size_t keep = 0;
    if (n_stored && rnd(10) < 8) {
        const seq *s = &stored[rnd((uint32_t)n_stored)];
        keep = rnd((uint32_t)s->n + 1);
        memcpy(out->tok, s->tok, keep * sizeof *out->tok);
    }
    size_t extra = rnd(6);
    if (keep + extra == 0) extra = 1;
    if (keep + extra > MAXLEN) extra = MAXLEN - keep;
    for (size_t i = 0; i < extra; i++) out->tok[keep + i] = (int32_t)rnd(4) * 1000 + 7; /* small alphabet */
    out->n = keep + extra;
    if (out->n == 0) out->tok[out->n++] = 7;
}

/* The trie's view: concatenated spans of the path to each session's end node. */
static int path_equals(const skv_trie_io *io, const seq *s)
{
    skv_trie_path p;
    if (skv_trie_path_to(io, s->end, &p)) return 0;
    size_t k = 0;
    int ok = 1;
    for (size_t i = 0; i < p.n && ok; i++)
        for (uint32_t j = 0; j < p.nodes[i].len && ok; j++) ok = k < s->n && p.nodes[i].tokens[j] == s->tok[k++];
    ok = ok && k == s->n && p.matched == s->n;
    skv_trie_path_free(&p);
    return ok;
}

typedef struct {
    size_t n_end_total, n_nodes;
} walk_count;

static int count_visit(void *user, const skv_trie_node *n, const int32_t *seqv)
{
    walk_count *w = user;
    (void)seqv;
    w->n_end_total += n->n_end;
    w->n_nodes++;
    return 0;
}

static void test_random_ops(void)
{
    skv_trie_mem *mem;
    skv_trie_io io;
    seq *stored = calloc(4096, sizeof *stored);
    size_t n_stored = 0;
    uint64_t clock = 0;
    skv_err err = {0};
    CHECK(stored);
    CHECK(skv_trie_mem_create(&mem) == SKV_OK);
    skv_trie_mem_io(mem, &io);
    for (int op = 0; op < N_OPS; op++) {
        uint32_t kind = rnd(10);
        if (kind < 5 || n_stored == 0) { /* insert */
            if (n_stored == 4096) continue;
            seq *s = &stored[n_stored];
            float sur[MAXLEN];
            make_seq(stored, n_stored, s);
            surprisals(s->tok, s->n, sur);
            int rc = skv_trie_insert(&io, s->tok, s->n, sur, ++clock, &s->end);
            CHECK_MSG(rc == SKV_OK, "insert op %d: %d", op, rc);
            n_stored++;
        } else if (kind < 8) { /* remove */
            size_t i = rnd((uint32_t)n_stored);
            CHECK_MSG(skv_trie_remove(&io, stored[i].end) == SKV_OK, "remove op %d", op);
            stored[i] = stored[--n_stored];
        } else { /* lookup */
            seq q;
            skv_trie_path p;
            size_t best = 0;
            make_seq(stored, n_stored, &q);
            for (size_t i = 0; i < n_stored; i++) {
                size_t l = lcp(stored[i].tok, stored[i].n, q.tok, q.n);
                if (l > best) best = l;
            }
            CHECK(skv_trie_match(&io, q.tok, q.n, &p) == SKV_OK);
            uint32_t got = p.matched;
            double bits = p.bits, want = prefix_bits(q.tok, best);
            skv_trie_path_free(&p);
            CHECK_MSG(got == best, "op %d: matched %u, model says %zu", op, got, best);
            CHECK_MSG(fabs(bits - want) <= 1e-6 * (1 + want), "op %d: d_T %.6f vs %.6f", op, bits, want);
        }
        /* end ids never move (a split keeps the lower part's id, a merge the child's), so
         * a session record can keep its end node id */
        if (op % 50 == 0 || kind >= 5) {
            for (size_t i = 0; i < n_stored; i++) {
                skv_trie_path p;
                CHECK(skv_trie_match(&io, stored[i].tok, stored[i].n, &p) == SKV_OK);
                CHECK_MSG(p.matched == stored[i].n && p.last_used == p.nodes[p.n - 1].len,
                          "op %d: stored sequence %zu does not end at a node boundary", op, i);
                uint64_t id = p.nodes[p.n - 1].id;
                skv_trie_path_free(&p);
                CHECK_MSG(id == stored[i].end, "op %d: session %zu's end node moved", op, i);
            }
        }
        if (op % 200 == 0) {
            walk_count w = {0};
            CHECK_MSG(skv_trie_check(&io, &err) == SKV_OK, "op %d: %s", op, err.msg);
            CHECK(skv_trie_walk(&io, count_visit, &w) == SKV_OK);
            CHECK_EQ_INT(w.n_end_total, n_stored);
            CHECK_EQ_INT(w.n_nodes, skv_trie_mem_n_nodes(mem));
            for (size_t i = 0; i < n_stored; i++) CHECK_MSG(path_equals(&io, &stored[i]), "op %d: path %zu", op, i);
        }
    }
    while (n_stored) { /* empty it: nothing may remain */
        CHECK(skv_trie_remove(&io, stored[n_stored - 1].end) == SKV_OK);
        n_stored--;
        for (size_t i = 0; i < n_stored; i++) {
            skv_trie_path p;
            CHECK(skv_trie_match(&io, stored[i].tok, stored[i].n, &p) == SKV_OK);
            uint64_t id = p.nodes[p.n - 1].id;
            skv_trie_path_free(&p);
            CHECK(id == stored[i].end);
        }
    }
    CHECK_EQ_INT(skv_trie_mem_n_nodes(mem), 0);
    skv_trie_mem_free(mem);
    free(stored);
}

/* A split in the middle of an edge and the merge that undoes it. */
static void test_split_merge(void)
{
    skv_trie_mem *mem;
    skv_trie_io io;
    int32_t a[] = {1, 2, 3, 4, 5, 6}, b[] = {1, 2, 3, 9};
    float s[6] = {0, 1, 2, 3, 4, 5};
    uint64_t ea, eb, ea2;
    skv_trie_path p;
    CHECK(skv_trie_mem_create(&mem) == SKV_OK);
    skv_trie_mem_io(mem, &io);
    CHECK(skv_trie_insert(&io, a, 6, s, 1, &ea) == SKV_OK);
    CHECK_EQ_INT(skv_trie_mem_n_nodes(mem), 1);
    CHECK(skv_trie_insert(&io, b, 4, s, 2, &eb) == SKV_OK);
    CHECK_EQ_INT(skv_trie_mem_n_nodes(mem), 3); /* [1 2 3] -> [4 5 6], [9] */
    CHECK(skv_trie_match(&io, a, 6, &p) == SKV_OK);
    CHECK_EQ_INT(p.n, 2);
    CHECK_EQ_INT(p.nodes[0].len, 3);
    CHECK_EQ_INT(p.nodes[0].refcount, 2);
    CHECK_EQ_INT(p.nodes[0].n_end, 0);
    CHECK_EQ_INT(p.nodes[1].id, ea); /* the lower part keeps the id */
    CHECK(fabs(p.bits - 15.0) < 1e-9);
    skv_trie_path_free(&p);
    CHECK(skv_trie_match(&io, b, 3, &p) == SKV_OK); /* ends at the split point */
    CHECK(p.matched == 3 && fabs(p.bits - 3.0) < 1e-9);
    skv_trie_path_free(&p);
    CHECK(skv_trie_insert(&io, a, 3, s, 3, &ea2) == SKV_OK); /* a session ending at the upper node */
    CHECK(skv_trie_remove(&io, eb) == SKV_OK);
    CHECK_EQ_INT(skv_trie_mem_n_nodes(mem), 2); /* upper keeps a session: no merge */
    CHECK(skv_trie_remove(&io, ea2) == SKV_OK);
    CHECK_EQ_INT(skv_trie_mem_n_nodes(mem), 1); /* merged back into one edge */
    CHECK(skv_trie_match(&io, a, 6, &p) == SKV_OK);
    CHECK(p.n == 1 && p.nodes[0].len == 6 && p.nodes[0].id == ea && p.nodes[0].parent == SKV_TRIE_ROOT);
    skv_trie_path_free(&p);
    CHECK(skv_trie_check(&io, NULL) == SKV_OK);
    CHECK(skv_trie_remove(&io, ea) == SKV_OK);
    CHECK_EQ_INT(skv_trie_mem_n_nodes(mem), 0);
    CHECK(skv_trie_remove(&io, ea) != SKV_OK); /* gone */
    skv_trie_mem_free(mem);
}

static void test_codec(void)
{
    skv_trie_node n, d;
    skv_err err = {0};
    CHECK(skv_trie_node_alloc(&n, 5) == SKV_OK);
    n.id = 77;
    n.parent = 3;
    n.depth = 20;
    n.refcount = 4;
    n.n_end = 1;
    n.hits = 1234567890123ull;
    n.last_access = 99;
    n.d_end = 123.456;
    n.flags = SKV_TRIE_MAT;
    n.kv_bytes = 4096;
    for (int i = 0; i < 5; i++) {
        n.tokens[i] = 100 * i + 1;
        n.surprisal[i] = 0.25f * (float)i;
    }
    size_t sz = skv_trie_node_size(5);
    uint8_t *buf = malloc(sz);
    CHECK(buf);
    skv_trie_node_encode(&n, buf);
    CHECK(skv_trie_node_decode(buf, sz, &d, &err) == SKV_OK);
    CHECK(d.id == n.id && d.parent == n.parent && d.depth == n.depth && d.len == 5 && d.refcount == 4 &&
          d.n_end == 1 && d.hits == n.hits && d.last_access == 99 && d.d_end == n.d_end && d.flags == n.flags &&
          d.kv_bytes == 4096);
    CHECK(memcmp(d.tokens, n.tokens, 5 * 4) == 0 && memcmp(d.surprisal, n.surprisal, 5 * 4) == 0);
    skv_trie_node_clear(&d);
    for (size_t i = 0; i < sz; i++) { /* every corrupted byte is rejected */
        buf[i] ^= 0x20;
        int rc = skv_trie_node_decode(buf, sz, &d, &err);
        buf[i] ^= 0x20;
        CHECK_MSG(rc == SKV_ERR_FORMAT || rc == SKV_ERR_UNSUPPORTED, "byte %zu flipped: %d", i, rc);
    }
    CHECK(skv_trie_node_decode(buf, sz - 1, &d, &err) == SKV_ERR_FORMAT);
    CHECK(skv_trie_node_decode(buf, 10, &d, &err) == SKV_ERR_FORMAT);
    free(buf);
    skv_trie_node_clear(&n);
}

/* ---- deep chains (issue 13 item 8) ------------------------------------- */

#define CHAIN 40000

typedef struct {
    skv_trie_io io;
    int check_rc, walk_rc;
    size_t visited;
    skv_err err;
} chain_arg;

static int chain_visit(void *user, const skv_trie_node *n, const int32_t *prefix)
{
    chain_arg *a = user;
    a->visited += prefix[n->depth - 1] == n->tokens[n->len - 1];
    return 0;
}

static void *chain_main(void *p)
{
    chain_arg *a = p;
    a->check_rc = skv_trie_check(&a->io, &a->err);
    a->walk_rc = skv_trie_walk(&a->io, chain_visit, a);
    return NULL;
}

/* Runs check + walk on a thread with a 1 MiB stack: one C frame per path node would
 * overflow it long before CHAIN nodes. */
static int run_small_stack(chain_arg *a)
{
    pthread_attr_t at;
    pthread_t th;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 1u << 20);
    int rc = pthread_create(&th, &at, chain_main, a);
    pthread_attr_destroy(&at);
    return rc ? rc : pthread_join(th, NULL);
}

/* Node i (1..CHAIN) = one token at depth i, child of node i-1; a session ends at each. */
static int build_chain(skv_trie_io *io)
{
    skv_trie_node nd;
    int rc = skv_trie_node_alloc(&nd, 1);
    double d = 0;
    for (uint32_t i = 1; !rc && i <= CHAIN; i++) {
        uint64_t id;
        if ((rc = io->new_id(io->user, &id))) break;
        nd.id = id;
        nd.parent = i - 1;
        nd.depth = i;
        nd.tokens[0] = (int32_t)(i % 7);
        nd.surprisal[0] = 0.5f;
        d += 0.5;
        nd.d_end = d;
        nd.refcount = CHAIN - i + 1;
        nd.n_end = 1;
        if (!(rc = io->put_node(io->user, &nd))) rc = io->put_child(io->user, i - 1, nd.tokens[0], id);
    }
    skv_trie_node_clear(&nd);
    return rc;
}

static void test_deep_chain(void)
{
    skv_trie_mem *mem;
    chain_arg a = {0};
    CHECK(skv_trie_mem_create(&mem) == SKV_OK);
    skv_trie_mem_io(mem, &a.io);
    CHECK(build_chain(&a.io) == SKV_OK);
    CHECK(run_small_stack(&a) == 0);
    CHECK_MSG(a.check_rc == SKV_OK, "%d %s", a.check_rc, a.err.msg);
    CHECK(a.walk_rc == SKV_OK);
    CHECK_EQ_INT(a.visited, CHAIN);
    /* a damaged link from the deepest node back to the first: an error, never a loop */
    CHECK(a.io.put_child(a.io.user, CHAIN, 3, 1) == SKV_OK);
    a.err.msg[0] = 0;
    CHECK(run_small_stack(&a) == 0);
    CHECK_MSG(a.check_rc == SKV_ERR_INTERNAL && strstr(a.err.msg, "inconsistent"), "%d %s", a.check_rc, a.err.msg);
    CHECK(a.walk_rc != SKV_OK);
    skv_trie_mem_free(mem);
}

/* A damaged parent link that loops (the deepest node's parent set to itself through a
 * node below it) or skips depth: skv_trie_path_to refuses it at once, with memory bounded
 * by the path (it used to loop 2^24 nodes deep: gigabytes, found by fuzz_store). */
static void test_path_to_loops(void)
{
    skv_trie_mem *mem;
    skv_trie_io io;
    skv_trie_path p;
    skv_trie_node nd;
    CHECK(skv_trie_mem_create(&mem) == SKV_OK);
    skv_trie_mem_io(mem, &io);
    CHECK(build_chain(&io) == SKV_OK);
    CHECK_EQ_INT(skv_trie_path_to(&io, CHAIN, &p), SKV_OK);
    CHECK_EQ_INT(p.n, CHAIN);
    CHECK_EQ_INT(p.matched, CHAIN);
    skv_trie_path_free(&p);
    CHECK_EQ_INT(io.get_node(io.user, 5, &nd), SKV_OK); /* node 5's parent: the deepest node */
    nd.parent = CHAIN;
    CHECK_EQ_INT(io.put_node(io.user, &nd), SKV_OK);
    CHECK_EQ_INT(skv_trie_path_to(&io, CHAIN, &p), SKV_ERR_FORMAT);
    CHECK(p.n == 0 && p.nodes == NULL);
    nd.parent = 3; /* skips a node: node 3 ends at depth 3, not 4 */
    CHECK_EQ_INT(io.put_node(io.user, &nd), SKV_OK);
    CHECK_EQ_INT(skv_trie_path_to(&io, 5, &p), SKV_ERR_FORMAT);
    nd.parent = 4; /* repaired */
    CHECK_EQ_INT(io.put_node(io.user, &nd), SKV_OK);
    CHECK_EQ_INT(skv_trie_path_to(&io, CHAIN, &p), SKV_OK);
    skv_trie_path_free(&p);
    skv_trie_node_clear(&nd);
    skv_trie_mem_free(mem);
}

int main(void)
{
    TEST_BEGIN("test_trie");
    RUN(test_path_to_loops);
    RUN(test_codec);
    RUN(test_split_merge);
    RUN(test_random_ops);
    RUN(test_deep_chain);
    TEST_END();
}
