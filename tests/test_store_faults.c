/* Fault injection in the session store (docs/reliability.md "Fault injection").
 *
 * Two hooks, both armed only around the one store call under test:
 *   - allocations: the binary is linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc
 *     (Makefile, the rule at its end), so every allocation of the library's code (store,
 *     trie, engine) goes through __wrap_*: the k-th one after arming fails (returns NULL),
 *     for k = 0, 1, 2, ... until the call makes no more. The wrappers also record the
 *     largest request (put's logits buffer is bounded: item 9).
 *   - writes: LMDB (a shared library) writes with pwrite / writev and syncs with
 *     fdatasync / fsync; this binary defines those symbols, so LMDB's calls land here: the
 *     k-th one fails with ENOSPC or EIO, or writes only half (a short write).
 * Plus the real thing: a store on a small tmpfs (ENOSPC; needs root, else skipped) and a
 * store with a small LMDB map (MDB_MAP_FULL).
 *
 * After every injected failure: the call returned a status with a message, the store
 * reopens, every committed session restores verified with its tokens, no session
 * appeared or vanished except by a call that succeeded, and gc passes. */
#include <errno.h>
#include <sys/mman.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "seqkv.h"
#include "store/trie.h"
#include "test.h"

#define MODEL "models/kjv-4m.gguf"
#define EXPORT __attribute__((visibility("default")))

/* ---- allocation hook ---------------------------------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t sz);
void *__real_realloc(void *p, size_t n);

static atomic_long g_alloc_fail = -1; /* index of the allocation to fail; -1: none */
static atomic_long g_alloc_n;         /* allocations since arming */
static atomic_size_t g_alloc_max;     /* largest request since arming */

static int alloc_fails(size_t n)
{
    size_t m = atomic_load(&g_alloc_max);
    while (n > m && !atomic_compare_exchange_weak(&g_alloc_max, &m, n)) {}
    long k = atomic_fetch_add(&g_alloc_n, 1);
    return atomic_load(&g_alloc_fail) == k;
}

EXPORT void *__wrap_malloc(size_t n) { return alloc_fails(n) ? NULL : __real_malloc(n); }
EXPORT void *__wrap_calloc(size_t n, size_t sz) { return alloc_fails(n * sz) ? NULL : __real_calloc(n, sz); }
EXPORT void *__wrap_realloc(void *p, size_t n) { return alloc_fails(n) ? NULL : __real_realloc(p, n); }
/* the library's large blocks (skv_big_alloc: anonymous mappings of their own) fail in turn
 * too; the build's _FILE_OFFSET_BITS=64 makes its mmap calls mmap64 */
void *__real_mmap64(void *a, size_t n, int prot, int fl, int fd, off_t off);
EXPORT void *__wrap_mmap64(void *a, size_t n, int prot, int fl, int fd, off_t off)
{
    if ((fl & MAP_ANONYMOUS) && alloc_fails(n)) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return __real_mmap64(a, n, prot, fl, fd, off);
}

/* ---- write hook (interposes LMDB's calls) -------------------------------- */

enum { IO_ENOSPC, IO_EIO, IO_SHORT };
static atomic_long g_io_fail = -1, g_io_n;
static int g_io_mode;

static int io_fails(void)
{
    long k = atomic_fetch_add(&g_io_n, 1);
    return atomic_load(&g_io_fail) == k;
}

EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (io_fails()) {
        if (g_io_mode == IO_SHORT && n > 1) return syscall(SYS_pwrite64, fd, buf, n / 2, off);
        errno = g_io_mode == IO_EIO ? EIO : ENOSPC;
        return -1;
    }
    return syscall(SYS_pwrite64, fd, buf, n, off);
}

EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    if (io_fails()) {
        if (g_io_mode == IO_SHORT && cnt > 0 && iov[0].iov_len > 1) return syscall(SYS_write, fd, iov[0].iov_base, iov[0].iov_len / 2);
        errno = g_io_mode == IO_EIO ? EIO : ENOSPC;
        return -1;
    }
    return syscall(SYS_writev, fd, iov, cnt);
}

EXPORT int fdatasync(int fd)
{
    if (io_fails()) {
        errno = EIO;
        return -1;
    }
    return (int)syscall(SYS_fdatasync, fd);
}

EXPORT int fsync(int fd)
{
    if (io_fails()) {
        errno = EIO;
        return -1;
    }
    return (int)syscall(SYS_fsync, fd);
}

static void arm(long alloc_k, long io_k, int mode)
{
    atomic_store(&g_alloc_n, 0);
    atomic_store(&g_alloc_max, 0);
    atomic_store(&g_io_n, 0);
    g_io_mode = mode;
    atomic_store(&g_alloc_fail, alloc_k);
    atomic_store(&g_io_fail, io_k);
}

static void disarm(void)
{
    atomic_store(&g_alloc_fail, -1);
    atomic_store(&g_io_fail, -1);
}

/* ---- sessions and checks ------------------------------------------------ */

static skv_model *g_m;
static int32_t g_text[20000];
static size_t g_n_text;
static char g_root[256];

#define N_SES 5 /* s0..s3 committed in the baseline; s4 is the one put adds */

typedef struct {
    char name[16];
    int32_t tok[128];
    size_t n;
} sess;
static sess g_s[N_SES];

static void make_sessions(void)
{
    for (int i = 0; i < N_SES; i++) {
        snprintf(g_s[i].name, sizeof g_s[i].name, "s%d", i);
        size_t shared = 20 + (size_t)(i % 3) * 7, n = 36 + (size_t)i * 5;
        memcpy(g_s[i].tok, g_text, shared * sizeof(int32_t));
        memcpy(g_s[i].tok + shared, g_text + 200 + 61 * i, (n - shared) * sizeof(int32_t));
        g_s[i].n = n;
    }
}

static void rm_rf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

static int copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[65536];
    size_t n;
    int rc = a && b ? 0 : -1;
    while (!rc && (n = fread(buf, 1, sizeof buf, a)) > 0) rc = fwrite(buf, 1, n, b) == n ? 0 : -1;
    if (a) fclose(a);
    if (b && fclose(b)) rc = -1;
    return rc;
}

/* The baseline store (s0..s3, KV partly materialised) copied to dir. */
static int fresh_copy(const char *dir)
{
    char a[600], b[600];
    rm_rf(dir);
    mkdir(dir, 0777);
    snprintf(a, sizeof a, "%s/base/data.mdb", g_root);
    snprintf(b, sizeof b, "%s/data.mdb", dir);
    return copy_file(a, b);
}

static skv_ctx *g_ctx; /* made before any fault is armed */

static int get_verified(skv_store *st, const sess *s)
{
    int32_t tok[256];
    size_t n = 0;
    skv_store_get_report r;
    int rc = skv_store_get(st, s->name, g_ctx, SKV_STORE_VERIFY, tok, 256, &n, &r);
    if (!rc && (n != s->n || memcmp(tok, s->tok, n * sizeof *tok) || !r.verified)) rc = SKV_ERR_MISMATCH;
    return rc;
}

static int count_cb(void *u, const skv_store_session_info *si)
{
    (void)si;
    (*(int *)u)++;
    return 0;
}

/* The store in dir holds exactly the sessions of mask (bit i = s_i), each whole, and
 * passes gc. Returns 0 or a description of the first problem in why. */
static int store_ok(const char *dir, unsigned mask, const skv_store_params *p, char *why, size_t cap)
{
    skv_store *st;
    skv_store_gc_report g;
    int n_listed = 0, rc = skv_store_open(dir, g_m, 0, p, &st, why, cap);
    if (rc) return rc;
    for (int i = 0; i < N_SES && !rc; i++) {
        if (!(mask >> i & 1)) continue;
        if ((rc = get_verified(st, &g_s[i])))
            snprintf(why, cap, "session %.15s: %d %.400s", g_s[i].name, rc, skv_store_last_error(st));
    }
    if (!rc && (rc = skv_store_list(st, count_cb, &n_listed)) == 0 && n_listed != __builtin_popcount(mask)) {
        snprintf(why, cap, "%d sessions listed, %d expected", n_listed, __builtin_popcount(mask));
        rc = SKV_ERR_MISMATCH;
    }
    if (!rc && (rc = skv_store_gc(st, &g))) snprintf(why, cap, "gc: %d %.400s", rc, skv_store_last_error(st));
    skv_store_close(st);
    return rc;
}

/* ---- the operations under test ----------------------------------------- */

enum { OP_PUT, OP_GET, OP_RM, OP_GC, N_OPS };
static const char *const op_name[N_OPS] = {"put", "get", "rm", "gc"};

/* Runs op on st; *mask_after receives the sessions it leaves on success. */
static int run_op(skv_store *st, int op, unsigned *mask_after)
{
    skv_store_gc_report g;
    *mask_after = 0xf;
    switch (op) {
    case OP_PUT: *mask_after = 0x1f; return skv_store_put(st, g_s[4].name, g_s[4].tok, g_s[4].n, NULL);
    case OP_GET: return get_verified(st, &g_s[1]);
    case OP_RM: *mask_after = 0xd; return skv_store_remove(st, g_s[1].name);
    default: return skv_store_gc(st, &g);
    }
}

typedef struct {
    int calls, failed, problems;
    char first[600];
} sweep;

/* One injected run: fault at allocation alloc_k or write io_k; 1 = the op never reached it. */
static int inject(int op, long alloc_k, long io_k, int mode, sweep *sw)
{
    char dir[300], why[600] = "";
    skv_store *st;
    skv_store_params p = skv_store_default_params();
    unsigned after;
    snprintf(dir, sizeof dir, "%s/run", g_root);
    if (fresh_copy(dir)) return -1;
    p.budget = op == OP_GC ? 20000 : -1; /* gc: demotes (and the put before it materialised) */
    if (skv_store_open(dir, g_m, 0, &p, &st, why, sizeof why)) return -1;
    arm(alloc_k, io_k, mode);
    int rc = run_op(st, op, &after);
    long used = alloc_k >= 0 ? atomic_load(&g_alloc_n) : atomic_load(&g_io_n);
    disarm();
    const char *msg = skv_store_last_error(st);
    sw->calls++;
    if (rc) sw->failed++;
    if (rc && (rc > 0 || !msg[0]) && !sw->first[0])
        snprintf(sw->first, sizeof sw->first, "%s fault %ld: status %d without a message", op_name[op],
                 alloc_k >= 0 ? alloc_k : io_k, rc);
    skv_store_close(st);
    if (store_ok(dir, rc ? 0xf : after, NULL, why, sizeof why)) {
        sw->problems++;
        if (!sw->first[0])
            snprintf(sw->first, sizeof sw->first, "%s, fault %ld (rc %d): %.400s", op_name[op],
                     alloc_k >= 0 ? alloc_k : io_k, rc, why);
    }
    return used <= (alloc_k >= 0 ? alloc_k : io_k);
}

/* Every allocation of each operation fails in turn (beyond the 64th every (1 + k/16)-th,
 * but every one for gc: a failed node decode in its retier pass freed an unset node --
 * found 2026-12-04 when the library's large blocks moved to mappings of their own and the
 * strided indices moved; malloc, calloc, realloc and anonymous mmap all count). */
static void test_alloc_faults(void)
{
    for (int op = 0; op < N_OPS; op++) {
        sweep sw = {0};
        for (long k = 0; k < 100000; k += op == OP_GC || k < 64 ? 1 : 1 + k / 16) {
            int r = inject(op, k, -1, 0, &sw);
            CHECK(r >= 0);
            if (r == 1) break;
        }
        fprintf(stderr, "alloc faults, %s: %d runs, %d failed cleanly, %d problems\n", op_name[op], sw.calls,
                sw.failed, sw.problems);
        CHECK_MSG(sw.problems == 0 && !sw.first[0], "%s", sw.first);
        CHECK(sw.failed > 0);
    }
}

/* Every write / sync of each operation fails in turn, in each manner. */
static void test_write_faults(void)
{
    static const char *const mode_name[3] = {"ENOSPC", "EIO", "short"};
    for (int mode = 0; mode < 3; mode++)
        for (int op = 0; op < N_OPS; op++) {
            sweep sw = {0};
            for (long k = 0; k < 10000; k++) {
                int r = inject(op, -1, k, mode, &sw);
                CHECK(r >= 0);
                if (r == 1) break;
            }
            fprintf(stderr, "write faults (%s), %s: %d runs, %d failed cleanly, %d problems\n", mode_name[mode],
                    op_name[op], sw.calls, sw.failed, sw.problems);
            CHECK_MSG(sw.problems == 0 && !sw.first[0], "%s", sw.first);
            CHECK(op == OP_GET || sw.failed > 0);
        }
}

/* Puts s_0.. (then more sessions) until the store refuses one; returns the committed mask. */
static unsigned fill_until_full(skv_store *st, int *rc_out, char *msg, size_t cap)
{
    unsigned mask = 0;
    int rc = 0;
    for (int i = 0; i < N_SES && !rc; i++)
        if (!(rc = skv_store_put(st, g_s[i].name, g_s[i].tok, g_s[i].n, NULL))) mask |= 1u << i;
    snprintf(msg, cap, "%s", skv_store_last_error(st));
    *rc_out = rc;
    return mask;
}

/* A small LMDB map: MDB_MAP_FULL is a clear error; a bigger map continues. */
static void test_map_full(void)
{
    char dir[300], err[512], why[600];
    skv_store *st;
    skv_store_params p = skv_store_default_params();
    int rc;
    snprintf(dir, sizeof dir, "%s/mapfull", g_root);
    rm_rf(dir);
    p.map_size = 256 << 10;
    p.budget = 64 << 20;
    CHECK(skv_store_open(dir, g_m, SKV_STORE_CREATE, &p, &st, err, sizeof err) == SKV_OK);
    unsigned mask = fill_until_full(st, &rc, err, sizeof err);
    skv_store_close(st);
    CHECK_MSG(rc == SKV_ERR_RANGE && strstr(err, "map_size"), "%d %s", rc, err);
    CHECK(mask != 0x1f);
    CHECK_MSG(store_ok(dir, mask, &p, why, sizeof why) == 0 || strstr(why, "full"), "%s", why);
    p.map_size = 64 << 20;
    CHECK(skv_store_open(dir, g_m, 0, &p, &st, err, sizeof err) == SKV_OK);
    for (int i = 0; i < N_SES; i++)
        if (!(mask >> i & 1)) CHECK(skv_store_put(st, g_s[i].name, g_s[i].tok, g_s[i].n, NULL) == SKV_OK);
    skv_store_close(st);
    CHECK_MSG(store_ok(dir, 0x1f, &p, why, sizeof why) == 0, "%s", why);
}

/* A real ENOSPC: the store on a 512 KiB tmpfs; after growing it, all is well. */
static void test_real_enospc(void)
{
    char dir[400], mnt[300], err[512], why[600];
    skv_store *st;
    skv_store_params p = skv_store_default_params();
    int rc;
    snprintf(mnt, sizeof mnt, "%s/tmpfs", g_root);
    mkdir(mnt, 0777);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=512k")) SKIP("cannot mount a tmpfs (not root?): %s", strerror(errno));
    snprintf(dir, sizeof dir, "%s/store", mnt);
    p.budget = 64 << 20;
    rc = skv_store_open(dir, g_m, SKV_STORE_CREATE, &p, &st, err, sizeof err);
    unsigned mask = 0;
    if (!rc) {
        mask = fill_until_full(st, &rc, err, sizeof err);
        skv_store_close(st);
    }
    int grown = mount("tmpfs", mnt, "tmpfs", MS_REMOUNT, "size=16m") == 0;
    int ok = grown && !store_ok(dir, mask, NULL, why, sizeof why);
    umount2(mnt, MNT_DETACH);
    CHECK_MSG(rc == SKV_ERR_IO && (strstr(err, "no space") || strstr(err, "disk is full")), "%d %s", rc, err);
    CHECK(grown);
    CHECK_MSG(ok, "after growing the file system: %s", why);
}

/* Item 9: put's largest allocation is bounded, not n x n_vocab floats of logits. */
static void test_put_logits_bounded(void)
{
    char dir[300], err[512];
    skv_store *st;
    skv_model_info info;
    int32_t tok[1000];
    size_t n = 1000;
    CHECK(skv_model_get_info(g_m, &info) == SKV_OK && g_n_text >= n && (size_t)info.n_ctx_train >= n);
    memcpy(tok, g_text, sizeof tok);
    snprintf(dir, sizeof dir, "%s/logits", g_root);
    rm_rf(dir);
    CHECK(skv_store_open(dir, g_m, SKV_STORE_CREATE, NULL, &st, err, sizeof err) == SKV_OK);
    CHECK(skv_store_put(st, "warm", tok, 8, NULL) == SKV_OK); /* creates put's context */
    arm(-1, -1, 0);
    int rc = skv_store_put(st, "long", tok, n, NULL);
    size_t biggest = atomic_load(&g_alloc_max);
    disarm();
    skv_store_close(st);
    CHECK(rc == SKV_OK);
    size_t all_rows = n * (size_t)info.n_vocab * sizeof(float);
    CHECK_MSG(biggest <= (size_t)(5u << 20) && biggest < all_rows, "largest allocation %zu bytes (all rows: %zu)",
              biggest, all_rows);
}

/* The trie walk / check grows its token-prefix buffer with the depth: a check of a
 * shallow trie asked for 4 MiB at once (the depth bound), which made every gc check and
 * the trie fuzzer (a check after every operation) slow. A 3,000-deep path still checks. */
static void test_trie_check_bounded(void)
{
    static int32_t tok[3000];
    float sur[3000];
    skv_trie_mem *mem;
    skv_trie_io io;
    uint64_t end;
    skv_err err = {0};
    for (int i = 0; i < 3000; i++) tok[i] = i % 7, sur[i] = 1.0f;
    CHECK(skv_trie_mem_create(&mem) == SKV_OK);
    skv_trie_mem_io(mem, &io);
    CHECK(skv_trie_insert(&io, tok, 12, sur, 1, &end) == SKV_OK);
    CHECK(skv_trie_insert(&io, tok, 5, sur, 2, &end) == SKV_OK);
    arm(-1, -1, 0);
    int rc = skv_trie_check(&io, &err);
    size_t biggest = atomic_load(&g_alloc_max);
    disarm();
    CHECK_MSG(rc == SKV_OK && biggest <= 65536, "check %d, largest allocation %zu bytes", rc, biggest);
    CHECK(skv_trie_insert(&io, tok, 3000, sur, 3, &end) == SKV_OK);
    CHECK_MSG(skv_trie_check(&io, &err) == SKV_OK, "deep path: %s", err.msg);
    skv_trie_mem_free(mem);
}

int main(void)
{
    char err[512], dir[300];
    TEST_BEGIN("test_store_faults");
    FILE *f = fopen("tests/data/model_ref/heldout.txt", "rb");
    static char text[20001];
    size_t len = f ? fread(text, 1, 20000, f) : 0;
    if (f) fclose(f);
    if (skv_model_load(MODEL, NULL, &g_m, err, sizeof err) ||
        skv_tokenize(g_m, text, len, 1, g_text, 20000, &g_n_text) || g_n_text < 1200) {
        printf("FAIL test_store_faults:setup: %s\n", err);
        return 1;
    }
    make_sessions();
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = 256;
    if (skv_ctx_create(g_m, &cp, &g_ctx)) return 1;
    snprintf(g_root, sizeof g_root, "/tmp/seqkv_test_faults_%d", (int)getpid());
    rm_rf(g_root);
    mkdir(g_root, 0777);
    skv_store *st;
    skv_store_params p = skv_store_default_params();
    p.budget = 150000; /* some nodes materialised, some not */
    snprintf(dir, sizeof dir, "%s/base", g_root);
    if (skv_store_open(dir, g_m, SKV_STORE_CREATE, &p, &st, err, sizeof err)) return 1;
    for (int i = 0; i < 4; i++)
        if (skv_store_put(st, g_s[i].name, g_s[i].tok, g_s[i].n, NULL)) return 1;
    skv_store_close(st);
    RUN(test_put_logits_bounded);
    RUN(test_trie_check_bounded);
    RUN(test_map_full);
    RUN(test_real_enospc);
    RUN(test_write_faults);
    RUN(test_alloc_faults);
    rm_rf(g_root);
    skv_ctx_free(g_ctx);
    skv_model_free(g_m);
    TEST_END();
}
