/* Fuzz target for the session store's trie (src/store/trie.c), model-based.
 *
 * Input byte 0 selects the mode:
 *   even: the rest is a node record: decoding must not crash; a record it accepts must
 *         re-encode to exactly the same bytes (one canonical form per node).
 *   odd:  the rest is a program of trie operations over a 4-token alphabet (so prefixes
 *         collide all the time), run against the in-memory node storage and a trivial
 *         model, a list of the inserted sequences:
 *           op & 3 == 0, 1: insert the sequence given by the next bytes (length 1..16);
 *           op & 3 == 2:    remove the session (op >> 2) mod count;
 *           op & 3 == 3:    match the next sequence: the matched length must equal the
 *                           longest common prefix with any stored sequence.
 *         After every insert and remove a local check must hold: the session's own path
 *         (matched again: whole after an insert; after a remove, as long as the longest
 *         common prefix with a session still stored, as for a match) has consistent
 *         nodes (len >= 1, depths adding up, refcount >= n_end + the next node's
 *         refcount, a node where no session ends has >= 2 children, the inserted
 *         session's end node is its path's last). The whole-trie skv_trie_check runs
 *         after every CHECK_EVERY-th insert or remove and at the end of the program.
 *         A match runs on the storage with its writing callbacks replaced by aborts (it
 *         must not write, so the trie is unchanged and needs no check). At the end every
 *         stored sequence must be found whole. Any violation aborts.
 *         Why not the whole check after every write (until 2026-12-02): it walks the
 *         whole trie, so a program's cost grew with the square of its length. A fault
 *         that breaks an invariant stays in the trie until an operation happens to
 *         repair it, so the next whole check (at most CHECK_EVERY writes later, or the
 *         end) still sees it, and the local check sees at once the path the operation
 *         changed; the input that shows a fault is the same, only the abort comes a few
 *         operations later. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/trie.h"

#define MAXS 64
#define MAXL 16
#define CHECK_EVERY 16 /* writes between two whole-trie checks */

typedef struct {
    int32_t tok[MAXL];
    size_t n;
    uint64_t end;
} seq;

static size_t lcp(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

static void fuzz_record(const uint8_t *data, size_t size)
{
    skv_trie_node n;
    memset(&n, 0, sizeof n);
    if (skv_trie_node_decode(data, size, &n, NULL) == SKV_OK) {
        size_t sz = skv_trie_node_size(n.len);
        uint8_t *again = malloc(sz);
        if (!again) abort();
        skv_trie_node_encode(&n, again);
        if (sz != size || memcmp(again, data, size)) abort();
        free(again);
    }
    skv_trie_node_clear(&n);
}

/* Reads a sequence: a length byte, then one byte per token (2 bits used). */
static size_t read_seq(const uint8_t **p, const uint8_t *end, int32_t *tok)
{
    if (*p >= end) return 0;
    size_t n = 1 + **p % MAXL;
    (*p)++;
    for (size_t i = 0; i < n; i++) tok[i] = *p < end ? (int32_t)(*(*p)++ & 3) : 0;
    return n;
}

/* The writing callbacks of the read-only view that match runs on. */
static int no_put_node(void *u, const skv_trie_node *n) { (void)u, (void)n; abort(); }
static int no_del(void *u, uint64_t id) { (void)u, (void)id; abort(); }
static int no_put_child(void *u, uint64_t p, int32_t t, uint64_t c) { (void)u, (void)p, (void)t, (void)c; abort(); }
static int no_del_child(void *u, uint64_t p, int32_t t) { (void)u, (void)p, (void)t; abort(); }
static int no_new_id(void *u, uint64_t *id) { (void)u, (void)id; abort(); }
static int no_split(void *u, skv_trie_node *a, skv_trie_node *b, uint32_t k) { (void)u, (void)a, (void)b, (void)k; abort(); }
static int no_merge(void *u, const skv_trie_node *a, skv_trie_node *b) { (void)u, (void)a, (void)b; abort(); }
static int no_drop(void *u, const skv_trie_node *n) { (void)u, (void)n; abort(); }

static skv_trie_io read_only(const skv_trie_io *io)
{
    skv_trie_io r = *io;
    r.put_node = no_put_node, r.del_node = no_del, r.put_child = no_put_child, r.del_child = no_del_child;
    r.new_id = no_new_id, r.kv_split = no_split, r.kv_merge = no_merge, r.kv_drop = no_drop;
    return r;
}

/* Children of a node (a callback of io.children). */
static int count_child(void *cu, int32_t tok, uint64_t child)
{
    (void)tok, (void)child;
    ++*(size_t *)cu;
    return 0;
}

/* The local invariants of the nodes on a path (what skv_trie_check checks of them). */
static void check_path(const skv_trie_io *io, const skv_trie_path *path)
{
    uint32_t depth = 0;
    for (size_t k = 0; k < path->n; k++) {
        const skv_trie_node *nd = &path->nodes[k];
        size_t kids = 0;
        depth += nd->len;
        if (nd->len < 1 || nd->depth != depth || nd->refcount < 1 || nd->refcount < nd->n_end) abort();
        if (k + 1 < path->n && nd->refcount < nd->n_end + path->nodes[k + 1].refcount) abort();
        if (!nd->n_end && (io->children(io->user, nd->id, count_child, &kids) || kids < 2)) abort();
    }
}

/* The longest common prefix of tok[0..n) with any stored sequence. */
static size_t best_lcp(const seq *s, size_t count, const int32_t *tok, size_t n)
{
    size_t best = 0;
    for (size_t k = 0; k < count; k++) {
        size_t l = lcp(tok, n, s[k].tok, s[k].n);
        best = l > best ? l : best;
    }
    return best;
}

/* Matches tok[0..n) on the read-only view: `want` tokens must match, on a consistent
 * path; end_id (0: none) must then be the path's last node, matched whole. */
static void check_local(const skv_trie_io *ro, const int32_t *tok, size_t n, size_t want, uint64_t end_id)
{
    skv_trie_path path;
    memset(&path, 0, sizeof path);
    if (skv_trie_match(ro, tok, n, &path) || path.matched != want) abort();
    check_path(ro, &path);
    if (end_id && (!path.n || path.nodes[path.n - 1].id != end_id || path.last_used != path.nodes[path.n - 1].len))
        abort();
    skv_trie_path_free(&path);
}

static void fuzz_program(const uint8_t *p, const uint8_t *end)
{
    static seq s[MAXS];
    size_t count = 0, writes = 0;
    float surprisal[MAXL];
    skv_trie_mem *mem;
    skv_trie_io io;
    skv_err err = {0};
    for (int i = 0; i < MAXL; i++) surprisal[i] = 1.0f;
    if (skv_trie_mem_create(&mem)) abort();
    skv_trie_mem_io(mem, &io);
    skv_trie_io ro = read_only(&io);
    for (uint64_t clock = 1; p < end; clock++) {
        uint8_t op = *p++;
        int32_t tok[MAXL];
        size_t n;
        int wrote = 0;
        skv_trie_path path;
        memset(&path, 0, sizeof path);
        switch (op & 3) {
        case 0:
        case 1:
            if (count == MAXS || !(n = read_seq(&p, end, tok))) break;
            if (skv_trie_insert(&io, tok, n, surprisal, clock, &s[count].end)) abort();
            memcpy(s[count].tok, tok, n * sizeof *tok);
            s[count++].n = n;
            check_local(&ro, tok, n, n, s[count - 1].end);
            wrote = 1;
            break;
        case 2:
            if (!count) break;
            {
                size_t k = (size_t)(op >> 2) % count;
                seq gone = s[k];
                if (skv_trie_remove(&io, s[k].end)) abort();
                s[k] = s[--count];
                check_local(&ro, gone.tok, gone.n, best_lcp(s, count, gone.tok, gone.n), 0);
            }
            wrote = 1;
            break;
        default:
            if (!(n = read_seq(&p, end, tok))) break;
            if (skv_trie_match(&ro, tok, n, &path)) abort();
            if (path.matched != best_lcp(s, count, tok, n)) abort();
            skv_trie_path_free(&path);
        }
        if (wrote && ++writes % CHECK_EVERY == 0 && skv_trie_check(&io, &err)) abort();
    }
    if (writes % CHECK_EVERY && skv_trie_check(&io, &err)) abort();
    for (size_t k = 0; k < count; k++) {
        skv_trie_path path;
        memset(&path, 0, sizeof path);
        if (skv_trie_match(&ro, s[k].tok, s[k].n, &path) || path.matched != s[k].n) abort();
        skv_trie_path_free(&path);
    }
    skv_trie_mem_free(mem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (data[0] & 1) fuzz_program(data + 1, data + size);
    else fuzz_record(data + 1, size - 1);
    return 0;
}
