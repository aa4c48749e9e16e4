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
 *         After every insert and remove skv_trie_check must hold; a match runs on the
 *         storage with its writing callbacks replaced by aborts (it must not write, so
 *         the trie is unchanged and needs no check), and an operation that does nothing
 *         (an insert into a full model, a remove from an empty one, an empty match)
 *         leaves the trie untouched and is not checked again: the check walks the whole
 *         trie, so checking after every byte made a program's cost grow with the square
 *         of its length. At the end every stored sequence must be found whole. Any
 *         violation aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/trie.h"

#define MAXS 64
#define MAXL 16

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
    if (skv_trie_node_decode(data, size, &n, NULL, 0) == SKV_OK) {
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

static void fuzz_program(const uint8_t *p, const uint8_t *end)
{
    static seq s[MAXS];
    size_t count = 0;
    float surprisal[MAXL];
    skv_trie_mem *mem;
    skv_trie_io io;
    char err[256];
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
            wrote = 1;
            break;
        case 2:
            if (!count) break;
            {
                size_t k = (size_t)(op >> 2) % count;
                if (skv_trie_remove(&io, s[k].end)) abort();
                s[k] = s[--count];
            }
            wrote = 1;
            break;
        default:
            if (!(n = read_seq(&p, end, tok))) break;
            if (skv_trie_match(&ro, tok, n, &path)) abort();
            size_t best = 0;
            for (size_t k = 0; k < count; k++) {
                size_t l = lcp(tok, n, s[k].tok, s[k].n);
                best = l > best ? l : best;
            }
            if (path.matched != best) abort();
            skv_trie_path_free(&path);
        }
        if (wrote && skv_trie_check(&io, err, sizeof err)) abort();
    }
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
