/* Radix trie over token ids: algorithms over skv_trie_io, the node record codec, and an
 * in-memory node storage. See trie.h for the node diagram and invariants, docs/store.md
 * for how the store uses it.
 *
 * Node record (little-endian, 80 + 8 * len bytes):
 *
 *   0    u32  magic "SKVN"
 *   4    u8   version (1)      5  u8 flags      6  u16 reserved (0)
 *   8    u64  id               16 u64 parent id (0 = root)
 *   24   u32  depth            28 u32 len (1 .. depth)
 *   32   u32  refcount         36 u32 n_end
 *   40   u64  hits             48 u64 last_access
 *   56   f64  d_end (bits)     64 u64 kv_bytes
 *   72   u32  tokens[len]
 *   ..   f32  surprisal[len]
 *   ..   u64  XXH3-64 of every byte before it
 *
 * Split of node N (span a..b) at k, N keeping its id so its children's keys stay valid:
 *
 *     P --(t_a)--> N[a..b)          P --(t_a)--> U[a..a+k) --(t_{a+k})--> N[a+k..b)
 *                    |        =>                                          |
 *                 children                                             children
 *
 * Merge is the inverse: U (no session ends there, one child) folds into its child.
 */
#include <math.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "store/trie.h"
#include "core/util.h"

#define NODE_MAGIC 0x4e564b53u /* "SKVN" */
#define NODE_VERSION 1
#define NODE_HDR 72u
#define NODE_MAX_LEN (1u << 24)

/* ---- node helpers ------------------------------------------------------- */

void skv_trie_node_clear(skv_trie_node *n)
{
    if (!n) return;
    free(n->tokens);
    free(n->surprisal);
    memset(n, 0, sizeof *n);
}

int skv_trie_node_alloc(skv_trie_node *n, uint32_t len)
{
    memset(n, 0, sizeof *n);
    n->len = len;
    n->tokens = malloc((size_t)(len ? len : 1) * sizeof *n->tokens);
    n->surprisal = malloc((size_t)(len ? len : 1) * sizeof *n->surprisal);
    if (!n->tokens || !n->surprisal) {
        skv_trie_node_clear(n);
        return SKV_ERR_NOMEM;
    }
    return SKV_OK;
}

int skv_trie_node_copy(skv_trie_node *dst, const skv_trie_node *src)
{
    int rc = skv_trie_node_alloc(dst, src->len);
    if (rc) return rc;
    int32_t *t = dst->tokens;
    float *s = dst->surprisal;
    *dst = *src;
    dst->tokens = t;
    dst->surprisal = s;
    memcpy(t, src->tokens, (size_t)src->len * sizeof *t);
    memcpy(s, src->surprisal, (size_t)src->len * sizeof *s);
    return SKV_OK;
}

/* ---- codec -------------------------------------------------------------- */

size_t skv_trie_node_size(uint32_t len) { return NODE_HDR + (size_t)len * 8u + 8u; }

void skv_trie_node_encode(const skv_trie_node *n, uint8_t *p)
{
    size_t sz = skv_trie_node_size(n->len);
    uint64_t dbits;
    memset(p, 0, NODE_HDR);
    skv_wr32(p, NODE_MAGIC);
    p[4] = NODE_VERSION;
    p[5] = (uint8_t)n->flags;
    skv_wr64(p + 8, n->id);
    skv_wr64(p + 16, n->parent);
    skv_wr32(p + 24, n->depth);
    skv_wr32(p + 28, n->len);
    skv_wr32(p + 32, n->refcount);
    skv_wr32(p + 36, n->n_end);
    skv_wr64(p + 40, n->hits);
    skv_wr64(p + 48, n->last_access);
    memcpy(&dbits, &n->d_end, 8);
    skv_wr64(p + 56, dbits);
    skv_wr64(p + 64, n->kv_bytes);
    for (uint32_t i = 0; i < n->len; i++) {
        skv_wr32(p + NODE_HDR + 4u * i, (uint32_t)n->tokens[i]);
        skv_wrf32(p + NODE_HDR + 4u * n->len + 4u * i, n->surprisal[i]);
    }
    skv_wr64(p + sz - 8, XXH3_64bits(p, sz - 8));
}

static int decode_header(const uint8_t *p, size_t size, uint32_t *len, skv_err *err)
{
    if (size < skv_trie_node_size(1))
        return skv_fail(err, SKV_ERR_FORMAT, "trie node record truncated (%zu bytes)", size);
    if (skv_rd32(p) != NODE_MAGIC) return skv_fail(err, SKV_ERR_FORMAT, "trie node record: bad magic");
    if (p[4] != NODE_VERSION)
        return skv_fail(err, SKV_ERR_UNSUPPORTED, "trie node record version %u (this build reads %d)",
                        p[4], NODE_VERSION);
    *len = skv_rd32(p + 28);
    if (*len < 1 || *len > NODE_MAX_LEN || size != skv_trie_node_size(*len))
        return skv_fail(err, SKV_ERR_FORMAT, "trie node record: span length %u does not fit %zu bytes",
                        *len, size);
    if (XXH3_64bits(p, size - 8) != skv_rd64(p + size - 8))
        return skv_fail(err, SKV_ERR_FORMAT, "trie node record: checksum mismatch");
    return SKV_OK;
}

int skv_trie_node_decode(const uint8_t *p, size_t size, skv_trie_node *out, skv_err *err)
{
    uint32_t len = 0;
    uint64_t dbits;
    int rc = decode_header(p, size, &len, err);
    if (rc) return rc;
    if ((rc = skv_trie_node_alloc(out, len))) return skv_fail(err, rc, "out of memory");
    out->flags = p[5];
    out->id = skv_rd64(p + 8);
    out->parent = skv_rd64(p + 16);
    out->depth = skv_rd32(p + 24);
    out->refcount = skv_rd32(p + 32);
    out->n_end = skv_rd32(p + 36);
    out->hits = skv_rd64(p + 40);
    out->last_access = skv_rd64(p + 48);
    dbits = skv_rd64(p + 56);
    memcpy(&out->d_end, &dbits, 8);
    out->kv_bytes = skv_rd64(p + 64);
    int bad = out->depth < len || out->id == SKV_TRIE_ROOT || out->id == out->parent ||
              (out->flags & ~(uint32_t)SKV_TRIE_MAT) || !isfinite(out->d_end) || out->d_end < 0;
    for (uint32_t i = 0; i < len && !bad; i++) {
        uint32_t t = skv_rd32(p + NODE_HDR + 4u * i);
        float s = skv_rdf32(p + NODE_HDR + 4u * len + 4u * i);
        bad = t > INT32_MAX || !isfinite(s) || s < 0;
        out->tokens[i] = (int32_t)t;
        out->surprisal[i] = s;
    }
    if (bad) {
        skv_trie_node_clear(out);
        return skv_fail(err, SKV_ERR_FORMAT, "trie node record: field out of range");
    }
    return SKV_OK;
}

/* ---- paths -------------------------------------------------------------- */

void skv_trie_path_free(skv_trie_path *p)
{
    for (size_t i = 0; i < p->n; i++) skv_trie_node_clear(&p->nodes[i]);
    free(p->nodes);
    memset(p, 0, sizeof *p);
}

/* Appends a node to the path, taking ownership of its arrays (freed if it fails). */
static int path_push(skv_trie_path *p, skv_trie_node *n)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;
        skv_trie_node *nb = realloc(p->nodes, cap * sizeof *nb);
        if (!nb) {
            skv_trie_node_clear(n);
            return SKV_ERR_NOMEM;
        }
        p->nodes = nb;
        p->cap = cap;
    }
    p->nodes[p->n++] = *n;
    memset(n, 0, sizeof *n);
    return SKV_OK;
}

static int get_node_req(const skv_trie_io *io, uint64_t id, skv_trie_node *out)
{
    int rc = io->get_node(io->user, id, out);
    return rc == 1 ? SKV_ERR_FORMAT : rc; /* a referenced node must exist */
}

int skv_trie_match(const skv_trie_io *io, const int32_t *tokens, size_t n, skv_trie_path *out)
{
    uint64_t cur = SKV_TRIE_ROOT, child;
    size_t pos = 0;
    int rc = SKV_OK;
    memset(out, 0, sizeof *out);
    while (pos < n) {
        skv_trie_node nd;
        if ((rc = io->get_child(io->user, cur, tokens[pos], &child)) == 1) {
            rc = SKV_OK; /* no edge starts with this token */
            break;
        }
        if (rc || (rc = get_node_req(io, child, &nd))) break;
        uint32_t l = 0;
        while (l < nd.len && pos + l < n && nd.tokens[l] == tokens[pos + l]) l++;
        if (l == 0 || nd.parent != cur) { /* the child key promised tokens[pos] */
            skv_trie_node_clear(&nd);
            rc = SKV_ERR_FORMAT;
            break;
        }
        double bits = out->bits;
        if (l == nd.len) bits = nd.d_end;
        else for (uint32_t i = 0; i < l; i++) bits += nd.surprisal[i];
        int full = l == nd.len;
        if ((rc = path_push(out, &nd))) break;
        out->last_used = l;
        out->bits = bits;
        pos += l;
        if (!full) break;
        cur = child;
    }
    out->matched = (uint32_t)pos;
    if (rc) skv_trie_path_free(out);
    return rc;
}

/* The walk up from end_id checks that each parent ends where its child starts (depth =
 * the child's depth less its span, at least 1 token): depths strictly decrease, so a
 * damaged parent link that loops is refused at once, and the path holds at most as many
 * nodes as the store has (a loop used to be caught only after 2^24 nodes: gigabytes,
 * found by fuzz_store on 2026-12-04). */
int skv_trie_path_to(const skv_trie_io *io, uint64_t end_id, skv_trie_path *out)
{
    int rc = SKV_OK;
    uint64_t id = end_id;
    uint32_t want = 0; /* the depth the next node up must end at */
    memset(out, 0, sizeof *out);
    while (id != SKV_TRIE_ROOT && !rc) {
        skv_trie_node nd;
        if ((rc = get_node_req(io, id, &nd))) break;
        id = nd.parent;
        if (nd.len < 1 || nd.depth < nd.len || (out->n && nd.depth != want)) {
            skv_trie_node_clear(&nd);
            rc = SKV_ERR_FORMAT;
        } else {
            want = nd.depth - nd.len;
            rc = path_push(out, &nd);
        }
    }
    if (!rc && want != 0) rc = SKV_ERR_FORMAT; /* the root ends at depth 0 */
    if (rc) {
        skv_trie_path_free(out);
        return rc;
    }
    for (size_t i = 0; i < out->n / 2; i++) { /* root first */
        skv_trie_node t = out->nodes[i];
        out->nodes[i] = out->nodes[out->n - 1 - i];
        out->nodes[out->n - 1 - i] = t;
    }
    if (out->n) {
        out->last_used = out->nodes[out->n - 1].len;
        out->matched = out->nodes[out->n - 1].depth;
        out->bits = out->nodes[out->n - 1].d_end;
    }
    return SKV_OK;
}

/* ---- insert ------------------------------------------------------------- */

/* Splits path->nodes[last] after its first k tokens (0 < k < len). The path's last entry
 * becomes the new upper node; the stored lower part keeps the old id. */
static int split_last(const skv_trie_io *io, skv_trie_path *path, uint32_t k, double d_before)
{
    skv_trie_node *low = &path->nodes[path->n - 1], up;
    int rc;
    if ((rc = skv_trie_node_alloc(&up, k))) return rc;
    if ((rc = io->new_id(io->user, &up.id))) goto out;
    up.parent = low->parent;
    up.depth = low->depth - low->len + k;
    memcpy(up.tokens, low->tokens, k * sizeof *up.tokens);
    memcpy(up.surprisal, low->surprisal, k * sizeof *up.surprisal);
    up.d_end = d_before;
    for (uint32_t i = 0; i < k; i++) up.d_end += up.surprisal[i];
    up.refcount = low->refcount;
    up.hits = low->hits;
    up.last_access = low->last_access;
    up.flags = low->flags;
    low->len -= k;
    memmove(low->tokens, low->tokens + k, low->len * sizeof *low->tokens);
    memmove(low->surprisal, low->surprisal + k, low->len * sizeof *low->surprisal);
    low->parent = up.id;
    if (io->kv_split && (rc = io->kv_split(io->user, &up, low, k))) goto out;
    if ((rc = io->put_child(io->user, up.parent, up.tokens[0], up.id))) goto out;
    if ((rc = io->put_child(io->user, up.id, low->tokens[0], low->id))) goto out;
    if ((rc = io->put_node(io->user, low))) goto out;
    skv_trie_node_clear(low);
    *low = up; /* the path now ends at the upper node (written by the caller) */
    return SKV_OK;
out:
    skv_trie_node_clear(&up);
    return rc;
}

static int add_leaf(const skv_trie_io *io, skv_trie_path *path, const int32_t *tokens, size_t n,
                    const float *surprisal)
{
    uint32_t m = path->matched, len = (uint32_t)(n - m);
    skv_trie_node leaf;
    int rc = skv_trie_node_alloc(&leaf, len);
    if (rc) return rc;
    if ((rc = io->new_id(io->user, &leaf.id))) goto out;
    leaf.parent = path->n ? path->nodes[path->n - 1].id : SKV_TRIE_ROOT;
    leaf.depth = (uint32_t)n;
    memcpy(leaf.tokens, tokens + m, len * sizeof *leaf.tokens);
    memcpy(leaf.surprisal, surprisal + m, len * sizeof *leaf.surprisal);
    leaf.d_end = path->bits;
    for (uint32_t i = 0; i < len; i++) leaf.d_end += leaf.surprisal[i];
    if ((rc = io->put_child(io->user, leaf.parent, leaf.tokens[0], leaf.id))) goto out;
    path->last_used = len;
    path->matched = (uint32_t)n;
    path->bits = leaf.d_end;
    return path_push(path, &leaf);
out:
    skv_trie_node_clear(&leaf);
    return rc;
}

int skv_trie_insert(const skv_trie_io *io, const int32_t *tokens, size_t n, const float *surprisal,
                    uint64_t clock, uint64_t *end_id)
{
    skv_trie_path path;
    int rc;
    if (n < 1 || n > NODE_MAX_LEN) return SKV_ERR_INVALID_ARG;
    if ((rc = skv_trie_match(io, tokens, n, &path))) return rc;
    if (path.n && path.last_used < path.nodes[path.n - 1].len) {
        double before = path.n > 1 ? path.nodes[path.n - 2].d_end : 0.0;
        if ((rc = split_last(io, &path, path.last_used, before))) goto out;
    }
    if (path.matched < n && (rc = add_leaf(io, &path, tokens, n, surprisal))) goto out;
    for (size_t i = 0; i < path.n; i++) {
        skv_trie_node *nd = &path.nodes[i];
        nd->refcount++;
        nd->hits++;
        nd->last_access = clock;
        if (i + 1 == path.n) nd->n_end++;
        if ((rc = io->put_node(io->user, nd))) goto out;
    }
    *end_id = path.nodes[path.n - 1].id;
out:
    skv_trie_path_free(&path);
    return rc;
}

/* ---- remove ------------------------------------------------------------- */

typedef struct {
    int n;
    uint64_t first;
} kid_count;

static int count_cb(void *cu, int32_t tok, uint64_t child)
{
    kid_count *k = cu;
    (void)tok;
    if (k->n++ == 0) k->first = child;
    return k->n >= 2;
}

static int count_children(const skv_trie_io *io, uint64_t id, kid_count *k)
{
    k->n = 0;
    k->first = 0;
    return io->children(io->user, id, count_cb, k);
}

/* Folds x (no session ends there, exactly one child) into that child. */
static int merge_into_child(const skv_trie_io *io, const skv_trie_node *x, uint64_t child_id)
{
    skv_trie_node c, m;
    int rc = get_node_req(io, child_id, &c);
    if (rc) return rc;
    if ((rc = skv_trie_node_alloc(&m, x->len + c.len))) goto out;
    memcpy(m.tokens, x->tokens, x->len * sizeof *m.tokens);
    memcpy(m.tokens + x->len, c.tokens, c.len * sizeof *m.tokens);
    memcpy(m.surprisal, x->surprisal, x->len * sizeof *m.surprisal);
    memcpy(m.surprisal + x->len, c.surprisal, c.len * sizeof *m.surprisal);
    m.id = c.id;
    m.parent = x->parent;
    m.depth = c.depth;
    m.d_end = c.d_end;
    m.refcount = c.refcount;
    m.n_end = c.n_end;
    m.hits = x->hits > c.hits ? x->hits : c.hits;
    m.last_access = x->last_access > c.last_access ? x->last_access : c.last_access;
    m.flags = x->flags & c.flags;
    m.kv_bytes = c.kv_bytes;
    if (io->kv_merge && (rc = io->kv_merge(io->user, x, &m))) goto out;
    if ((rc = io->del_child(io->user, x->id, c.tokens[0]))) goto out;
    if ((rc = io->put_child(io->user, x->parent, x->tokens[0], c.id))) goto out;
    if ((rc = io->del_node(io->user, x->id))) goto out;
    rc = io->put_node(io->user, &m);
out:
    skv_trie_node_clear(&m);
    skv_trie_node_clear(&c);
    return rc;
}

static int delete_node(const skv_trie_io *io, const skv_trie_node *nd)
{
    int rc = SKV_OK;
    if (io->kv_drop && (rc = io->kv_drop(io->user, nd))) return rc;
    if ((rc = io->del_child(io->user, nd->parent, nd->tokens[0]))) return rc;
    return io->del_node(io->user, nd->id);
}

int skv_trie_remove(const skv_trie_io *io, uint64_t end_id)
{
    skv_trie_path path;
    int rc = skv_trie_path_to(io, end_id, &path);
    if (rc) return rc;
    if (!path.n || path.nodes[path.n - 1].n_end == 0) {
        rc = SKV_ERR_FORMAT; /* no session ends there */
        goto out;
    }
    path.nodes[path.n - 1].n_end--;
    for (size_t i = 0; i < path.n; i++) {
        if (path.nodes[i].refcount == 0) { rc = SKV_ERR_FORMAT; goto out; }
        path.nodes[i].refcount--;
    }
    size_t keep = path.n; /* nodes[0..keep) survive */
    while (keep > 0 && path.nodes[keep - 1].refcount == 0) {
        if ((rc = delete_node(io, &path.nodes[keep - 1]))) goto out;
        keep--;
    }
    for (size_t i = 0; i < keep; i++)
        if ((rc = io->put_node(io->user, &path.nodes[i]))) goto out;
    if (keep > 0 && path.nodes[keep - 1].n_end == 0) {
        kid_count k;
        if ((rc = count_children(io, path.nodes[keep - 1].id, &k)) < 0) goto out;
        rc = k.n == 1 ? merge_into_child(io, &path.nodes[keep - 1], k.first) : SKV_OK;
    }
out:
    skv_trie_path_free(&path);
    return rc < 0 ? rc : SKV_OK;
}

int skv_trie_touch(const skv_trie_io *io, uint64_t end_id, uint64_t clock)
{
    skv_trie_path path;
    int rc = skv_trie_path_to(io, end_id, &path);
    for (size_t i = 0; !rc && i < path.n; i++) {
        path.nodes[i].hits++;
        path.nodes[i].last_access = clock;
        rc = io->put_node(io->user, &path.nodes[i]);
    }
    skv_trie_path_free(&path);
    return rc;
}

/* ---- walk and check ----------------------------------------------------- */

typedef struct {
    int32_t *tok;
    uint64_t *id;
    size_t n, cap;
} kid_list;

/* Doubles the capacity of two parallel arrays (token, node id), first to `first`.
 * Either array may have moved even on failure; *cap changes only on success. */
static int grow_pairs(int32_t **tok, uint64_t **id, size_t *cap, size_t first)
{
    size_t c = *cap ? *cap * 2 : first;
    int32_t *t = realloc(*tok, c * sizeof *t);
    if (!t) return SKV_ERR_NOMEM;
    *tok = t;
    uint64_t *d = realloc(*id, c * sizeof *d);
    if (!d) return SKV_ERR_NOMEM;
    *id = d;
    *cap = c;
    return SKV_OK;
}

static int list_cb(void *cu, int32_t tok, uint64_t child)
{
    kid_list *l = cu;
    if (l->n == l->cap && grow_pairs(&l->tok, &l->id, &l->cap, 8)) return SKV_ERR_NOMEM;
    l->tok[l->n] = tok;
    l->id[l->n++] = child;
    return 0;
}

/* The walk is iterative: an explicit stack of frames, one per node of the current path
 * (a recursion per node overflowed the C stack on long chains). Each frame holds its
 * node, its children's (token, id) list and the sum of the refcounts of the children
 * visited so far. Depth bound: a node's depth must be its parent's depth + its span
 * (len >= 1), so depths strictly increase along the stack and a path is refused beyond
 * WALK_MAX_DEPTH tokens: no damaged child link (even one pointing back up) can loop.
 *
 *   stack[0]      root (virtual; depth 0)
 *   stack[1..n)   the path being visited; stack[n-1] is expanded child by child
 */
#define WALK_MAX_DEPTH (1u << 20)

typedef struct {
    skv_trie_node nd; /* zeroed for the root frame */
    kid_list kids;
    size_t next;      /* next child to visit */
    uint64_t below;   /* sum of the visited children's refcounts */
} walk_frame;

typedef struct {
    const skv_trie_io *io;
    skv_trie_visit_fn cb;
    void *user;
    int32_t *seq;     /* the token prefix of the current path (grown to at most WALK_MAX_DEPTH) */
    size_t seq_cap;
    skv_err *err;     /* NULL: a plain walk, no invariant checks */
    walk_frame *st;
    size_t n, cap;
} walker;

static int frame_push(walker *w, skv_trie_node *nd)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        walk_frame *nb = realloc(w->st, cap * sizeof *nb);
        if (!nb) return SKV_ERR_NOMEM;
        w->st = nb;
        w->cap = cap;
    }
    walk_frame *f = &w->st[w->n];
    memset(f, 0, sizeof *f);
    f->nd = *nd;
    memset(nd, 0, sizeof *nd);
    int rc = w->io->children(w->io->user, f->nd.id, list_cb, &f->kids);
    w->n++; /* pushed even on failure, so the frame is freed with the stack */
    return rc < 0 ? rc : SKV_OK;
}

static void frame_free(walk_frame *f)
{
    skv_trie_node_clear(&f->nd);
    free(f->kids.tok);
    free(f->kids.id);
}

/* Checks a child's record against its parent frame (always: the walk relies on it). */
static int child_ok(walker *w, const walk_frame *pf, const skv_trie_node *nd, int32_t key)
{
    double want = pf->nd.d_end;
    for (uint32_t j = 0; j < nd->len; j++) want += nd->surprisal[j];
    if (nd->parent != pf->nd.id || nd->tokens[0] != key || nd->depth != pf->nd.depth + nd->len ||
        fabs(nd->d_end - want) > 1e-6 * (1.0 + want))
        return skv_fail(w->err, SKV_ERR_INTERNAL, "node %llu: parent/key/depth/d_end inconsistent",
                        (unsigned long long)nd->id);
    if (nd->depth > WALK_MAX_DEPTH)
        return skv_fail(w->err, SKV_ERR_FORMAT, "node %llu: path deeper than %u tokens",
                        (unsigned long long)nd->id, WALK_MAX_DEPTH);
    return SKV_OK;
}

/* The invariants of a node whose subtree is done (check only). */
static int node_done_ok(walker *w, const walk_frame *f)
{
    const skv_trie_node *nd = &f->nd;
    if (nd->refcount != nd->n_end + f->below || nd->refcount == 0)
        return skv_fail(w->err, SKV_ERR_INTERNAL, "node %llu: refcount %u != %u ending + %llu below",
                        (unsigned long long)nd->id, nd->refcount, nd->n_end, (unsigned long long)f->below);
    if (nd->n_end == 0 && f->kids.n < 2)
        return skv_fail(w->err, SKV_ERR_INTERNAL, "node %llu: no session ends there and %zu child(ren)",
                        (unsigned long long)nd->id, f->kids.n);
    return SKV_OK;
}

/* Grows the prefix buffer to hold depth tokens (depth <= WALK_MAX_DEPTH, by child_ok):
 * a walk of a shallow trie allocates little, not 4 MiB each time. */
static int seq_reserve(walker *w, size_t depth)
{
    size_t cap = w->seq_cap ? w->seq_cap : 256;
    while (cap < depth) cap *= 2;
    if (cap == w->seq_cap) return SKV_OK;
    int32_t *ns = realloc(w->seq, cap * sizeof *ns);
    if (!ns) return SKV_ERR_NOMEM;
    w->seq = ns;
    w->seq_cap = cap;
    return SKV_OK;
}

/* One step: visit the top frame's next child, or finish the top frame. 1 = done. */
static int walk_step(walker *w, int *stop)
{
    walk_frame *f = &w->st[w->n - 1];
    if (f->next == f->kids.n || *stop) {
        int rc = w->n > 1 && w->err && !*stop ? node_done_ok(w, f) : SKV_OK;
        uint32_t refs = f->nd.refcount;
        frame_free(f);
        if (--w->n == 0 || rc) return rc ? rc : 1;
        w->st[w->n - 1].below += refs;
        return SKV_OK;
    }
    skv_trie_node nd;
    size_t i = f->next++;
    int rc = w->io->get_node(w->io->user, f->kids.id[i], &nd);
    if (rc == 1)
        return skv_fail(w->err, SKV_ERR_FORMAT, "node %llu: a child of node %llu, but missing",
                        (unsigned long long)f->kids.id[i], (unsigned long long)f->nd.id);
    if (!rc && ((rc = child_ok(w, f, &nd, f->kids.tok[i])) || (rc = seq_reserve(w, nd.depth))))
        skv_trie_node_clear(&nd);
    if (rc) return rc;
    memcpy(w->seq + f->nd.depth, nd.tokens, nd.len * sizeof *w->seq);
    if (w->cb && w->cb(w->user, &nd, w->seq)) *stop = 1;
    rc = frame_push(w, &nd);
    skv_trie_node_clear(&nd);
    return rc;
}

static int walk_run(walker *w)
{
    skv_trie_node root = {0};
    int rc, stop = 0;
    if ((rc = seq_reserve(w, 1)) != SKV_OK) return rc;
    rc = frame_push(w, &root);
    while (!rc && w->n) rc = walk_step(w, &stop);
    while (w->n) frame_free(&w->st[--w->n]);
    free(w->st);
    free(w->seq);
    return rc < 0 ? rc : SKV_OK;
}

int skv_trie_walk(const skv_trie_io *io, skv_trie_visit_fn cb, void *user)
{
    walker w = {.io = io, .cb = cb, .user = user};
    return walk_run(&w);
}

int skv_trie_check(const skv_trie_io *io, skv_err *err)
{
    skv_err dummy = {0};
    walker w = {.io = io, .err = err ? err : &dummy};
    return walk_run(&w);
}

/* ---- in-memory node storage --------------------------------------------- */

typedef struct mem_slot {
    skv_trie_node node;   /* node.len == 0: free slot (or the root) */
    int32_t *kid_tok;     /* sorted */
    uint64_t *kid_id;
    size_t n_kids, cap_kids;
} mem_slot;

struct skv_trie_mem {
    mem_slot *slots; /* indexed by id; slot 0 is the root */
    size_t n_slots, n_nodes;
    uint64_t next_id;
};

int skv_trie_mem_create(skv_trie_mem **out)
{
    skv_trie_mem *m = calloc(1, sizeof *m);
    if (!m || !(m->slots = calloc(16, sizeof *m->slots))) {
        free(m);
        return SKV_ERR_NOMEM;
    }
    m->n_slots = 16;
    m->next_id = 1;
    *out = m;
    return SKV_OK;
}

void skv_trie_mem_free(skv_trie_mem *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n_slots; i++) {
        skv_trie_node_clear(&m->slots[i].node);
        free(m->slots[i].kid_tok);
        free(m->slots[i].kid_id);
    }
    free(m->slots);
    free(m);
}

size_t skv_trie_mem_n_nodes(const skv_trie_mem *m) { return m->n_nodes; }

static mem_slot *mem_slot_of(skv_trie_mem *m, uint64_t id)
{
    return id < m->n_slots ? &m->slots[id] : NULL;
}

static int mem_get_node(void *u, uint64_t id, skv_trie_node *out)
{
    mem_slot *s = mem_slot_of(u, id);
    if (!s || id == SKV_TRIE_ROOT || s->node.len == 0) return 1;
    return skv_trie_node_copy(out, &s->node);
}

static int mem_put_node(void *u, const skv_trie_node *n)
{
    mem_slot *s = mem_slot_of(u, n->id);
    skv_trie_node cp;
    if (!s || n->id == SKV_TRIE_ROOT || n->len == 0) return SKV_ERR_INVALID_ARG;
    if (skv_trie_node_copy(&cp, n)) return SKV_ERR_NOMEM;
    if (s->node.len == 0) ((skv_trie_mem *)u)->n_nodes++;
    skv_trie_node_clear(&s->node);
    s->node = cp;
    return SKV_OK;
}

static int mem_del_node(void *u, uint64_t id)
{
    mem_slot *s = mem_slot_of(u, id);
    if (!s || s->node.len == 0) return SKV_ERR_INVALID_ARG;
    skv_trie_node_clear(&s->node);
    ((skv_trie_mem *)u)->n_nodes--;
    return SKV_OK;
}

/* Index of the first child with token >= tok. */
static size_t kid_find(const mem_slot *s, int32_t tok)
{
    size_t lo = 0, hi = s->n_kids;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->kid_tok[mid] < tok) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int mem_get_child(void *u, uint64_t parent, int32_t tok, uint64_t *child)
{
    mem_slot *s = mem_slot_of(u, parent);
    if (!s) return 1;
    size_t i = kid_find(s, tok);
    if (i == s->n_kids || s->kid_tok[i] != tok) return 1;
    *child = s->kid_id[i];
    return SKV_OK;
}

static int mem_put_child(void *u, uint64_t parent, int32_t tok, uint64_t child)
{
    mem_slot *s = mem_slot_of(u, parent);
    if (!s) return SKV_ERR_INVALID_ARG;
    size_t i = kid_find(s, tok);
    if (i < s->n_kids && s->kid_tok[i] == tok) {
        s->kid_id[i] = child;
        return SKV_OK;
    }
    if (s->n_kids == s->cap_kids && grow_pairs(&s->kid_tok, &s->kid_id, &s->cap_kids, 2)) return SKV_ERR_NOMEM;
    memmove(s->kid_tok + i + 1, s->kid_tok + i, (s->n_kids - i) * sizeof *s->kid_tok);
    memmove(s->kid_id + i + 1, s->kid_id + i, (s->n_kids - i) * sizeof *s->kid_id);
    s->kid_tok[i] = tok;
    s->kid_id[i] = child;
    s->n_kids++;
    return SKV_OK;
}

static int mem_del_child(void *u, uint64_t parent, int32_t tok)
{
    mem_slot *s = mem_slot_of(u, parent);
    size_t i = s ? kid_find(s, tok) : 0;
    if (!s || i == s->n_kids || s->kid_tok[i] != tok) return SKV_ERR_INVALID_ARG;
    memmove(s->kid_tok + i, s->kid_tok + i + 1, (s->n_kids - i - 1) * sizeof *s->kid_tok);
    memmove(s->kid_id + i, s->kid_id + i + 1, (s->n_kids - i - 1) * sizeof *s->kid_id);
    s->n_kids--;
    return SKV_OK;
}

static int mem_children(void *u, uint64_t parent, int (*cb)(void *, int32_t, uint64_t), void *cu)
{
    mem_slot *s = mem_slot_of(u, parent);
    for (size_t i = 0; s && i < s->n_kids; i++) {
        int r = cb(cu, s->kid_tok[i], s->kid_id[i]);
        if (r) return r;
    }
    return SKV_OK;
}

static int mem_new_id(void *u, uint64_t *id)
{
    skv_trie_mem *m = u;
    if (m->next_id >= m->n_slots) {
        size_t n = m->n_slots * 2;
        mem_slot *ns = realloc(m->slots, n * sizeof *ns);
        if (!ns) return SKV_ERR_NOMEM;
        memset(ns + m->n_slots, 0, (n - m->n_slots) * sizeof *ns);
        m->slots = ns;
        m->n_slots = n;
    }
    *id = m->next_id++;
    return SKV_OK;
}

void skv_trie_mem_io(skv_trie_mem *m, skv_trie_io *io)
{
    *io = (skv_trie_io){
        .user = m,
        .get_node = mem_get_node,
        .put_node = mem_put_node,
        .del_node = mem_del_node,
        .get_child = mem_get_child,
        .put_child = mem_put_child,
        .del_child = mem_del_child,
        .children = mem_children,
        .new_id = mem_new_id,
    };
}
