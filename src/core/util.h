/* Small shared helpers: error text, per-thread error boxes, checked arithmetic,
 * little-endian access. */
#ifndef SKV_UTIL_H
#define SKV_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "seqkv.h"

/* The error of one operation: its status and its message, owned inside (no separate
 * buffer and capacity to thread through). An internal function that can fail takes one
 * `skv_err *err` (NULL allowed: the message then reaches skv_last_error alone) and fails with
 *   return skv_fail(err, SKV_ERR_FORMAT, "tensor %s: offset past end", name);
 * A caller that wraps an inner message passes err itself: skv_fail formats before it
 * writes, so skv_fail(err, rc, "loading %s: %s", path, err->msg) is allowed.
 * The public functions that take an err buffer and its capacity hold one on the stack and
 * copy it out with skv_err_out; nothing below them takes a capacity (check_layers.sh). */
#define SKV_ERR_MSG 512
typedef struct skv_err {
    int status;             /* the status of the last skv_fail; SKV_OK if none */
    char msg[SKV_ERR_MSG];  /* its message, NUL-terminated; "" if none */
} skv_err;

/* Formats the message into err (and the thread's last error), sets err->status and returns
 * status. err may be NULL. */
int skv_fail(skv_err *err, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int skv_vfail(skv_err *err, int status, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
/* Empties err (NULL allowed): status SKV_OK, message "". */
static inline void skv_err_clear(skv_err *err)
{
    if (err) err->status = SKV_OK, err->msg[0] = 0;
}
/* The message of err ("" for NULL). */
static inline const char *skv_err_msg(const skv_err *err) { return err ? err->msg : ""; }
/* The public boundary: copies err's message into the caller's buffer (if buf and cap; ""
 * when none was set) and returns rc, so a public function reads
 *   skv_err e = {0};
 *   return skv_err_out(&e, model_load(path, tp, out, &e), err, errcap); */
int skv_err_out(const skv_err *err, int rc, char *buf, size_t cap);
/* Makes msg the calling thread's last error (skv_last_error, seqkv.h). skv_fail and
 * skv_errbox_vset call it; a message written any other way must be passed here. */
void skv_err_note(const char *msg);

/* The last-error message of a handle that several threads may share (skv_session,
 * skv_store): one slot per thread that has called it, so each thread reads the message of
 * its own last call and never another thread's. A thread writes only its own slot; the
 * list of slots is guarded by a mutex and lives until skv_errbox_free. */
typedef struct skv_errbox skv_errbox;
skv_errbox *skv_errbox_create(void);
void skv_errbox_free(skv_errbox *b);
/* Sets the calling thread's message and returns status (if no slot can be allocated the
 * message is lost: the status still tells the error). */
int skv_errbox_set(skv_errbox *b, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int skv_errbox_vset(skv_errbox *b, int status, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
/* Clears the calling thread's message (a call that succeeds leaves ""). */
void skv_errbox_clear(skv_errbox *b);
/* The calling thread's message: "" if none; valid until this thread's next call on the box. */
const char *skv_errbox_get(skv_errbox *b);

/* Checked size arithmetic: return 0 and leave *r untouched on overflow. */
static inline int skv_mul_ok(size_t a, size_t b, size_t *r)
{
    if (a && b > SIZE_MAX / a) return 0;
    *r = a * b;
    return 1;
}
static inline int skv_add_ok(size_t a, size_t b, size_t *r)
{
    if (b > SIZE_MAX - a) return 0;
    *r = a + b;
    return 1;
}

static inline uint16_t skv_rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t skv_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t skv_rd64(const uint8_t *p) { return skv_rd32(p) | ((uint64_t)skv_rd32(p + 4) << 32); }
static inline float skv_rdf32(const uint8_t *p)
{
    uint32_t u = skv_rd32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline void skv_wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void skv_wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline void skv_wr64(uint8_t *p, uint64_t v) { skv_wr32(p, (uint32_t)v); skv_wr32(p + 4, (uint32_t)(v >> 32)); }
static inline void skv_wrf32(uint8_t *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    skv_wr32(p, u);
}

/* The XXH3-128 digests of KV (docs/format.md section 3): n floats hashed as little-endian
 * binary32, so the digest is the same on any host. skv_digest_f32_update feeds a running
 * XXH3 state (an XXH3_state_t *, passed as void * to keep xxhash.h out of this header);
 * skv_digest_finish writes the canonical 16 bytes and frees the state. */
void skv_digest_f32_update(void *xxh3_state, const float *x, size_t n);
void skv_digest_finish(void *xxh3_state, uint8_t out[16]);

/* Read-only memory map of a whole file (falls back to reading into memory). */
typedef struct skv_mmap {
    const uint8_t *data;
    size_t size;
    int mapped; /* 1: munmap on close; 0: free */
} skv_mmap;
int skv_mmap_open(const char *path, skv_mmap *m, skv_err *err);
void skv_mmap_close(skv_mmap *m);

/* Monotonic clock in seconds. */
double skv_now(void);

/* n zeroed bytes for a large table or buffer, in a mapping of their own: backed lazily
 * (untouched pages cost nothing, as calloc's), given back to the system by skv_big_free
 * (the only way to release them), and aligned to 2 MiB with its 2 MiB pages advised to
 * transparent huge pages (MADV_HUGEPAGE) from 1.34 MiB up: all of it, rounded up, when that
 * adds at most half (a huge page is backed whole once touched; an 800-position KV cache of
 * the bundled model, 1.56 MiB, gets one), else the whole 2 MiB pages inside, the tail on
 * 4 KiB pages. Why: a 4 KiB page costs a fault on
 * first touch and a TLB entry on every random access, and on a virtual machine with
 * shadow paging both are dear (measured on the project's AMD EPYC VM: 36 MiB touched page
 * by page 135-145 ms, or 10-16 ms to populate and then 64 ms more on first access; on huge
 * pages 3-9 ms in all; docs/coder.md 4.8). Its own mapping, not malloc's: advice on memory
 * malloc recycles leaks huge pages into its heap (a server's RSS grew 4x). NULL when out
 * of memory (n = 0 gets a block, as from calloc). SEQKV_HUGEPAGES=0 in the environment
 * drops the advice (a kernel that compacts memory on such faults can stall them: measured
 * on a loaded Xeon, docs/coder.md 4.8). Under AddressSanitizer: calloc and free, so that
 * ASan checks the block's exact bounds. */
void *skv_big_alloc(size_t n);
void skv_big_free(void *p);

#endif
