/* Radix trie over token ids (the probabilistic language trie of docs/store.md).
 *
 * The algorithms (longest-prefix match, insert with node split, remove with merge,
 * iteration) run over a small node-storage interface, skv_trie_io, so they can be
 * tested without LMDB and without a model: skv_trie_mem_* is an in-memory store for
 * tests and benchmarks; src/store.c implements the interface over LMDB.
 *
 * Node record (one per compressed edge; the root is virtual, id 0, never stored):
 *
 *            parent (id P, ends at depth D_P, cumulative surprisal d_P)
 *               |
 *               |  child key (P, tokens[0]) -> id
 *               v
 *   +----------------------------------------------------------------+
 *   | id | parent P | depth D = D_P + len | len                       |
 *   | tokens[0..len)      the span: positions D-len .. D-1           |
 *   | surprisal[0..len)   -log2 p(token | all earlier tokens), bits   |
 *   | d_end = d_P + sum(surprisal)   d_T of any match ending here    |
 *   | refcount  sessions whose path passes through or ends here       |
 *   | n_end     sessions ending exactly here                          |
 *   | hits, last_access    access statistics (store clock)            |
 *   | flags: SKV_TRIE_MAT (span's KV materialised), kv_bytes          |
 *   +----------------------------------------------------------------+
 *
 * Invariants (checked by skv_trie_check):
 *   - every stored node has len >= 1 and is reachable from the root by child keys;
 *   - children of one node start with distinct tokens (the child key is unique);
 *   - a node with n_end == 0 has at least two children (else it is merged away);
 *   - refcount = n_end + sum of the children's refcounts, and is >= 1.
 */
#ifndef SKV_TRIE_H
#define SKV_TRIE_H

#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"
#include "core/util.h"

#define SKV_TRIE_ROOT 0u
enum { SKV_TRIE_MAT = 1 };

typedef struct skv_trie_node {
    uint64_t id, parent;
    uint32_t depth;       /* tokens from the root to the end of this span */
    uint32_t len;         /* span length, >= 1 */
    uint32_t refcount, n_end;
    uint64_t hits, last_access;
    double d_end;         /* cumulative surprisal at the span's end, bits */
    uint32_t flags;       /* SKV_TRIE_* */
    uint64_t kv_bytes;    /* stored bytes of the materialised KV (0 if token-only) */
    int32_t *tokens;      /* len (owned) */
    float *surprisal;     /* len (owned) */
} skv_trie_node;

void skv_trie_node_clear(skv_trie_node *n); /* frees the arrays, zeroes the struct */
int skv_trie_node_alloc(skv_trie_node *n, uint32_t len);
int skv_trie_node_copy(skv_trie_node *dst, const skv_trie_node *src);

/* Node record codec (little-endian, XXH3-64 checksum; layout in trie.c). */
size_t skv_trie_node_size(uint32_t len);
void skv_trie_node_encode(const skv_trie_node *n, uint8_t *out); /* skv_trie_node_size bytes */
/* Decodes and validates a record; out is allocated (clear it). SKV_ERR_FORMAT on damage. */
int skv_trie_node_decode(const uint8_t *p, size_t size, skv_trie_node *out, skv_err *err);

/* Node storage. get_node / get_child return SKV_OK, 1 (absent) or a negative status.
 * get_node fills an allocated copy (the caller clears it). children() calls cb for each
 * child of parent in token order until cb returns nonzero. The kv_* hooks keep
 * materialised KV consistent when nodes split, merge or disappear (may be NULL):
 *   kv_split(upper, lower, k): lower held the span's KV; upper now holds its first k
 *     positions and lower the rest (both nodes already carry their new spans);
 *   kv_merge(upper, merged): merged = upper's span followed by the lower's; called
 *     before upper is deleted; set merged->flags / kv_bytes;
 *   kv_drop(node): node is deleted. */
typedef struct skv_trie_io {
    void *user;
    int (*get_node)(void *user, uint64_t id, skv_trie_node *out);
    int (*put_node)(void *user, const skv_trie_node *n);
    int (*del_node)(void *user, uint64_t id);
    int (*get_child)(void *user, uint64_t parent, int32_t tok, uint64_t *child);
    int (*put_child)(void *user, uint64_t parent, int32_t tok, uint64_t child);
    int (*del_child)(void *user, uint64_t parent, int32_t tok);
    int (*children)(void *user, uint64_t parent, int (*cb)(void *cu, int32_t tok, uint64_t child), void *cu);
    int (*new_id)(void *user, uint64_t *id);
    int (*kv_split)(void *user, skv_trie_node *upper, skv_trie_node *lower, uint32_t k);
    int (*kv_merge)(void *user, const skv_trie_node *upper, skv_trie_node *merged);
    int (*kv_drop)(void *user, const skv_trie_node *n);
} skv_trie_io;

/* The longest stored prefix of tokens: the nodes on its path from the root (copies,
 * owned), the last one possibly matched only in part. */
typedef struct skv_trie_path {
    skv_trie_node *nodes;
    size_t n, cap;
    uint32_t last_used;  /* tokens of nodes[n-1] that matched (== its len unless partial) */
    uint32_t matched;    /* total tokens matched */
    double bits;         /* d_T of the matched prefix, bits */
} skv_trie_path;

void skv_trie_path_free(skv_trie_path *p);
int skv_trie_match(const skv_trie_io *io, const int32_t *tokens, size_t n, skv_trie_path *out);
/* The path of the node end_id (root excluded), from the root down. */
int skv_trie_path_to(const skv_trie_io *io, uint64_t end_id, skv_trie_path *out);

/* Inserts a session's tokens (n >= 1): splits a node where the match ends inside it,
 * adds a leaf for the unmatched rest, bumps refcount (and hits, last_access = clock) of
 * every node on the path and n_end of the last. surprisal[i] is read for positions not
 * yet stored only (i >= the matched length). *end_id receives the session's end node. */
int skv_trie_insert(const skv_trie_io *io, const int32_t *tokens, size_t n, const float *surprisal,
                    uint64_t clock, uint64_t *end_id);
/* Removes one session ending at end_id: decrements refcounts, deletes nodes no session
 * needs and merges a single-child node where no session ends into its child. */
int skv_trie_remove(const skv_trie_io *io, uint64_t end_id);
/* Adds 1 to hits and sets last_access on every node of a path. */
int skv_trie_touch(const skv_trie_io *io, uint64_t end_id, uint64_t clock);

/* Depth-first walk in token order; cb gets each node and the token prefix ending at it
 * (seq[0..node->depth)); returns nonzero to stop. */
typedef int (*skv_trie_visit_fn)(void *user, const skv_trie_node *n, const int32_t *seq);
int skv_trie_walk(const skv_trie_io *io, skv_trie_visit_fn cb, void *user);
/* Verifies the invariants above over the whole trie (SKV_ERR_INTERNAL + message). */
int skv_trie_check(const skv_trie_io *io, skv_err *err);

/* In-memory node storage (tests, benchmarks). */
typedef struct skv_trie_mem skv_trie_mem;
int skv_trie_mem_create(skv_trie_mem **out);
void skv_trie_mem_free(skv_trie_mem *m);
void skv_trie_mem_io(skv_trie_mem *m, skv_trie_io *io);
size_t skv_trie_mem_n_nodes(const skv_trie_mem *m);

/* Internal, for benchmarks (src/store.c): stores sessions in one transaction without
 * running the model: the given per-token surprisals, no KV, an all-zero digest (such
 * sessions do not verify). */
int skv_store__put_tokens(skv_store *st, size_t n_sessions, const char *const *names, const int32_t *const *tokens,
                          const size_t *lens, const float *const *surprisal);

#endif
