/* Shared helpers: status names, error formatting, per-thread error boxes, file mapping. */
#include <xxhash.h>
#include "core/fpguard.h"

#include "core/util.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *skv_status_str(int status)
{
    switch (status) {
    case SKV_OK: return "ok";
    case SKV_ERR_INVALID_ARG: return "invalid argument";
    case SKV_ERR_NOMEM: return "out of memory";
    case SKV_ERR_IO: return "I/O error";
    case SKV_ERR_FORMAT: return "malformed input";
    case SKV_ERR_UNSUPPORTED: return "unsupported";
    case SKV_ERR_MISMATCH: return "mismatch";
    case SKV_ERR_RANGE: return "limit exceeded";
    case SKV_ERR_INTERNAL: return "internal error";
    default: return "unknown status";
    }
}

const char *skv_version(void) { return SEQKV_VERSION_STRING; }

/* The symbolic names, indexed by -status. */
static const char *const status_names[] = {
    "SKV_OK", "SKV_ERR_INVALID_ARG", "SKV_ERR_NOMEM", "SKV_ERR_IO", "SKV_ERR_FORMAT",
    "SKV_ERR_UNSUPPORTED", "SKV_ERR_MISMATCH", "SKV_ERR_RANGE", "SKV_ERR_INTERNAL",
};

const char *skv_status_name(int status)
{
    int n = (int)(sizeof status_names / sizeof status_names[0]);
    return status <= 0 && status > -n ? status_names[-status] : "SKV_ERR_UNKNOWN";
}

/* ---- per-thread error boxes ------------------------------------------------ */

/* ---- the calling thread's last error (skv_last_error) ----------------------
 * Every message the library sets passes through here: skv_fail (the per-operation skv_err),
 * skv_errbox_vset (sessions, stores, a model's skv_ctx_create message) and the contexts' and
 * encoders' own messages (written with skv_fail). So the thread's last message is always
 * the one the failing call set, whichever handle (or buffer) also keeps it. */
static _Thread_local char tl_last_error[1024];

const char *skv_last_error(void) { return tl_last_error; }

void skv_err_note(const char *msg)
{
    if (msg != tl_last_error) snprintf(tl_last_error, sizeof tl_last_error, "%s", msg ? msg : "");
}

typedef struct errslot {
    pthread_t owner;
    struct errslot *next;
    char msg[512];
} errslot;

struct skv_errbox {
    pthread_mutex_t mu; /* guards the list; each slot's msg is written by its owner only */
    errslot *slots;
};

skv_errbox *skv_errbox_create(void)
{
    skv_errbox *b = calloc(1, sizeof *b);
    if (b && pthread_mutex_init(&b->mu, NULL)) {
        free(b);
        return NULL;
    }
    return b;
}

void skv_errbox_free(skv_errbox *b)
{
    if (!b) return;
    for (errslot *s = b->slots, *next; s; s = next) {
        next = s->next;
        free(s);
    }
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/* The calling thread's slot; created when `make` (NULL if that fails or !make). */
static errslot *own_slot(skv_errbox *b, int make)
{
    pthread_t self = pthread_self();
    errslot *s;
    pthread_mutex_lock(&b->mu);
    for (s = b->slots; s && !pthread_equal(s->owner, self); s = s->next) {}
    if (!s && make && (s = calloc(1, sizeof *s))) {
        s->owner = self;
        s->next = b->slots;
        b->slots = s;
    }
    pthread_mutex_unlock(&b->mu);
    return s;
}

int skv_errbox_vset(skv_errbox *b, int status, const char *fmt, va_list ap)
{
    errslot *s = b ? own_slot(b, 1) : NULL;
    if (s) {
        vsnprintf(s->msg, sizeof s->msg, fmt, ap);
        skv_err_note(s->msg);
    } else {
        vsnprintf(tl_last_error, sizeof tl_last_error, fmt, ap);
    }
    return status;
}

int skv_errbox_set(skv_errbox *b, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    skv_errbox_vset(b, status, fmt, ap);
    va_end(ap);
    return status;
}

void skv_errbox_clear(skv_errbox *b)
{
    errslot *s = b ? own_slot(b, 0) : NULL;
    if (s) s->msg[0] = 0;
}

const char *skv_errbox_get(skv_errbox *b)
{
    errslot *s = b ? own_slot(b, 0) : NULL;
    return s ? s->msg : "";
}

int skv_vfail(skv_err *err, int status, const char *fmt, va_list ap)
{
    char tmp[SKV_ERR_MSG]; /* formatted apart first: the arguments may point into err->msg */
    if (!err) {
        vsnprintf(tl_last_error, sizeof tl_last_error, fmt, ap);
        return status;
    }
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    memcpy(err->msg, tmp, sizeof tmp);
    err->status = status;
    skv_err_note(err->msg);
    return status;
}

int skv_fail(skv_err *err, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    skv_vfail(err, status, fmt, ap);
    va_end(ap);
    return status;
}

int skv_err_out(const skv_err *err, int rc, char *buf, size_t cap)
{
    if (buf && cap) snprintf(buf, cap, "%s", skv_err_msg(err));
    return rc;
}

int skv_mmap_open(const char *path, skv_mmap *m, skv_err *err)
{
    struct stat st;
    int fd;
    void *p;
    memset(m, 0, sizeof *m);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return skv_fail(err, SKV_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return skv_fail(err, SKV_ERR_IO, "'%s' is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        m->data = (const uint8_t *)"";
        return SKV_OK;
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return skv_fail(err, SKV_ERR_RANGE, "'%s' is too large to map", path);
    }
    p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return skv_fail(err, SKV_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
    m->data = p;
    m->size = (size_t)st.st_size;
    m->mapped = 1;
    return SKV_OK;
}

void skv_mmap_close(skv_mmap *m)
{
    if (!m) return;
    if (m->mapped && m->size) munmap((void *)(uintptr_t)m->data, m->size);
    memset(m, 0, sizeof *m);
}

double skv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void skv_digest_f32_update(void *xxh3_state, const float *x, size_t n)
{
    uint8_t buf[1024];
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < sizeof buf / 4 && i < n; k++, i++) skv_wrf32(buf + 4 * k, x[i]);
        XXH3_128bits_update(xxh3_state, buf, 4 * k);
    }
}

void skv_digest_finish(void *xxh3_state, uint8_t out[16])
{
    XXH128_canonical_t cn;
    XXH128_canonicalFromHash(&cn, XXH3_128bits_digest(xxh3_state));
    memcpy(out, cn.digest, 16);
    XXH3_freeState(xxh3_state);
}

#define BIG_PAGE ((size_t)2 << 20)

/* The mapping's start and length, kept just below the block skv_big_alloc returns (in a
 * page of the mapping's own). */
typedef struct big_head {
    void *base;
    size_t len;
} big_head;

/* Under AddressSanitizer the blocks come from calloc, so that ASan knows their exact
 * bounds (it does not watch the rest of a mapping). */
#if defined(__SANITIZE_ADDRESS__)
#define BIG_VIA_CALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BIG_VIA_CALLOC 1
#endif
#endif

#ifdef BIG_VIA_CALLOC
void *skv_big_alloc(size_t n) { return calloc(1, n ? n : 1); }
void skv_big_free(void *p) { free(p); }
#else
void *skv_big_alloc(size_t n)
{
    const size_t head = 4096;
    if (!n) n = 1; /* as calloc: a block to free, not NULL */
    /* huge pages over the whole block when rounding it up to them adds at most half of it
     * (a 1.6 MB KV cache of 800 positions gets one: on 4 KiB pages its first writes cost
     * 400 faults per MB, each ~15 us in a shadow-paged VM; a 1 MiB table stays on 4 KiB
     * pages), else over the whole 2 MiB pages inside it */
    size_t whole = n > SIZE_MAX - BIG_PAGE ? 0 : (n + BIG_PAGE - 1) / BIG_PAGE * BIG_PAGE;
    size_t huge = whole && whole - n <= n / 2 ? whole : n / BIG_PAGE * BIG_PAGE;
    size_t body = huge > n ? huge : (n + head - 1) / head * head, len = head + body + (huge ? BIG_PAGE : 0);
    if (body < n || len < body) return NULL;
    uint8_t *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    uintptr_t at = (uintptr_t)base + head;
    if (huge) at = (at + BIG_PAGE - 1) / BIG_PAGE * BIG_PAGE;
    uint8_t *p = (uint8_t *)at;
#ifdef MADV_HUGEPAGE
    const char *off = getenv("SEQKV_HUGEPAGES"); /* "0": leave the pages to the kernel's default */
    if (huge && !(off && !strcmp(off, "0"))) (void)madvise(p, huge, MADV_HUGEPAGE);
#endif
    big_head h = {base, len};
    memcpy(p - sizeof h, &h, sizeof h);
    return p;
}

void skv_big_free(void *p)
{
    big_head h;
    if (!p) return;
    memcpy(&h, (uint8_t *)p - sizeof h, sizeof h);
    munmap(h.base, h.len);
}
#endif
