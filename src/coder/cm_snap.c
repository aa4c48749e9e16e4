/* cm_snap.c - snapshots of a cm model's state (see cm_snap.h, docs/coder.md 4.8).
 *
 * Runs: a section is walked against the reset values of its kind (skv_cm_reset_pattern:
 * no reference model is made); elements that equal the reset value are skipped (gap), the others are written (len). A literal run
 * absorbs equal stretches shorter than RUN_JOIN elements, so a dense table costs about its
 * own size and a sparse one (a small dictionary) a fraction of it. */
#include "coder/cm_snap.h"
#include "core/fpguard.h"

#include <errno.h>
#include <pthread.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/util.h"
#include "seqkv.h"

#define SNAP_MAGIC 0x43564b53u /* "SKVC" */
#define SNAP_HDR (4 + 4 + 4 + 4 + 8 + 8 + 4 + 4 + 4 * SKV_CM_N_SCALARS)
#define RUN_JOIN 3
#define SEC2 16 /* version 2's section entry: u32 elements | u32 element bytes | u64 XXH3-64 */

static uint64_t raw_len(const skv_cm_section *sec, int ns, uint64_t *hdr);

static inline uint32_t elem_get(const skv_cm_section *s, size_t i)
{
    return s->size == 2 ? ((const uint16_t *)s->p)[i] : ((const uint32_t *)s->p)[i];
}

size_t skv_cm_snap_bound(skv_cm *cm)
{
    skv_cm_section sec[SKV_CM_MAX_SECTIONS];
    int ns = skv_cm_section_shapes(cm, sec); /* sizes only: a blank model stays blank */
    size_t b = SNAP_HDR + 8;
    uint64_t hdr = 0, raw = raw_len(sec, ns, &hdr);
    /* version 1's worst case: every other element differs, a run of 1 per 2 elements */
    for (int k = 0; k < ns; k++) b += 12 + sec[k].n / 2 * 8 + 8 + sec[k].n * sec[k].size;
    return raw > b ? (size_t)raw : b;
}

typedef struct wbuf {
    uint8_t *p;
    size_t cap, len;
    int full;
} wbuf;

static void put32(wbuf *w, uint32_t v)
{
    if (w->cap - w->len < 4) {
        w->full = 1;
        return;
    }
    skv_wr32(w->p + w->len, v);
    w->len += 4;
}

static void put_elems(wbuf *w, const skv_cm_section *s, size_t at, size_t n)
{
    if (w->cap - w->len < n * s->size) {
        w->full = 1;
        return;
    }
    for (size_t i = 0; i < n; i++, w->len += s->size) {
        if (s->size == 2) skv_wr16(w->p + w->len, (uint16_t)elem_get(s, at + i));
        else skv_wr32(w->p + w->len, elem_get(s, at + i));
    }
}

/* The reset values of a section (element i resets to v[i % period]). */
typedef struct reset_ref {
    uint32_t v[33];
    size_t period;
} reset_ref;

static inline uint32_t ref_get(const reset_ref *r, size_t i) { return r->period == 1 ? r->v[0] : r->v[i % r->period]; }

/* End of the literal run starting at i (an element differing from the reset value). */
static size_t run_end(const skv_cm_section *s, const reset_ref *ref, size_t i)
{
    size_t same = 0, j = i;
    while (j < s->n && same < RUN_JOIN) {
        same = elem_get(s, j) == ref_get(ref, j) ? same + 1 : 0;
        j++;
    }
    return same >= RUN_JOIN ? j - same : j;
}

static void write_section(wbuf *w, const skv_cm_section *s)
{
    size_t at_runs = w->len, runs = 0, i = 0;
    reset_ref ref;
    ref.period = skv_cm_reset_pattern(s->kind, ref.v);
    put32(w, (uint32_t)s->n);
    put32(w, s->size);
    put32(w, 0);
    while (!w->full) {
        size_t j = i;
        while (j < s->n && elem_get(s, j) == ref_get(&ref, j)) j++;
        if (j == s->n) break;
        size_t e = run_end(s, &ref, j);
        put32(w, (uint32_t)(j - i));
        put32(w, (uint32_t)(e - j));
        put_elems(w, s, j, e - j);
        runs++;
        i = e;
    }
    if (!w->full) skv_wr32(w->p + at_runs + 8, (uint32_t)runs);
}

static void write_header(wbuf *w, skv_cm *cm, const skv_cm_snap_id *id, int ns, uint32_t version)
{
    uint32_t sc[SKV_CM_N_SCALARS];
    put32(w, SNAP_MAGIC);
    put32(w, version);
    put32(w, skv_cm_n_vocab(cm));
    put32(w, skv_cm_slot_bits(cm));
    put32(w, (uint32_t)id->vocab_check), put32(w, (uint32_t)(id->vocab_check >> 32));
    put32(w, (uint32_t)id->dict_id), put32(w, (uint32_t)(id->dict_id >> 32));
    put32(w, id->dict_n);
    put32(w, (uint32_t)ns);
    skv_cm_get_scalars(cm, sc);
    for (int k = 0; k < SKV_CM_N_SCALARS; k++) put32(w, sc[k]);
}

/* Version 2's length for these sections: header, entries, its checksum, the elements. */
static uint64_t raw_len(const skv_cm_section *sec, int ns, uint64_t *hdr)
{
    uint64_t b = SNAP_HDR + (uint64_t)ns * SEC2 + 8;
    *hdr = b;
    for (int k = 0; k < ns; k++) b += (uint64_t)sec[k].n * sec[k].size;
    return b;
}

/* Version 2: the header, then every section's elements as they are (docs/coder.md 4.8). */
static int write_raw(skv_cm *cm, const skv_cm_snap_id *id, const skv_cm_section *sec, int ns, uint8_t *dst, size_t cap,
                     size_t *len)
{
    uint64_t hdr = 0, need = raw_len(sec, ns, &hdr);
    if (need > cap) return SKV_ERR_RANGE;
    wbuf w = {dst, (size_t)hdr, 0, 0}, d = {dst, (size_t)need, (size_t)hdr, 0};
    write_header(&w, cm, id, ns, SKV_CM_SNAP_RAW);
    for (int k = 0; k < ns; k++) {
        size_t at = d.len;
        put_elems(&d, &sec[k], 0, sec[k].n);
        put32(&w, (uint32_t)sec[k].n);
        put32(&w, sec[k].size);
        uint64_t h = XXH3_64bits(dst + at, d.len - at);
        put32(&w, (uint32_t)h), put32(&w, (uint32_t)(h >> 32));
    }
    if (w.full || d.full || w.len + 8 != hdr || d.len != need) return SKV_ERR_INTERNAL;
    skv_wr64(dst + w.len, XXH3_64bits(dst, w.len));
    *len = (size_t)need;
    return SKV_OK;
}

int skv_cm_snap_write_version(skv_cm *cm, const skv_cm_snap_id *id, uint32_t version, uint8_t *dst, size_t cap,
                              size_t *len)
{
    skv_cm_section sec[SKV_CM_MAX_SECTIONS];
    if (!cm || !id || (!dst && cap) || !len || (version != SKV_CM_SNAP_VERSION && version != SKV_CM_SNAP_RAW))
        return SKV_ERR_INVALID_ARG;
    int ns = skv_cm_section_shapes(cm, sec); /* only read: a fresh model stays fresh */
    if (version == SKV_CM_SNAP_RAW) return write_raw(cm, id, sec, ns, dst, cap, len);
    wbuf w = {dst, cap, 0, 0};
    write_header(&w, cm, id, ns, SKV_CM_SNAP_VERSION);
    for (int k = 0; k < ns && !w.full; k++) write_section(&w, &sec[k]);
    if (w.full || w.cap - w.len < 8) return SKV_ERR_RANGE;
    skv_wr64(w.p + w.len, XXH3_64bits(w.p, w.len));
    *len = w.len + 8;
    return SKV_OK;
}

int skv_cm_snap_write(skv_cm *cm, const skv_cm_snap_id *id, uint8_t *dst, size_t cap, size_t *len)
{
    return skv_cm_snap_write_version(cm, id, SKV_CM_SNAP_VERSION, dst, cap, len);
}

/* ---- reading ------------------------------------------------------------------ */

/* The bytes not yet parsed: p[at..len). In memory the window is the whole snapshot (less
 * its checksum); from a file (skv_cm_snap_read_fd) it is a small buffer that `more`
 * refills, so no buffer of the snapshot's size is made. */
typedef struct rbuf {
    const uint8_t *p;
    size_t len, at;
    int (*more)(struct rbuf *r); /* NULL in memory; else tops the window up: 0 if nothing came */
} rbuf;

/* At least k (<= a window) unread bytes, refilling if need be. */
static int have(rbuf *r, size_t k)
{
    while (r->len - r->at < k)
        if (!r->more || !r->more(r)) return 0;
    return 1;
}

/* The next u32, or 0 with *ok cleared past the end. */
static uint32_t get32(rbuf *r, int *ok)
{
    if (!have(r, 4)) {
        *ok = 0;
        return 0;
    }
    r->at += 4;
    return skv_rd32(r->p + r->at - 4);
}

static int read_run(rbuf *r, skv_cm *cm, const skv_cm_section *s, size_t *i, int blank)
{
    int ok = 1;
    uint32_t gap = get32(r, &ok), n = get32(r, &ok);
    if (!ok || n == 0 || gap > s->n - *i || n > s->n - *i - gap || (!r->more && (r->len - r->at) / s->size < n))
        return SKV_ERR_FORMAT;
    if (blank) skv_cm_fill_reset(cm, s, *i, gap);
    *i += gap;
    while (n > 0) { /* in pieces of what the window holds (all of it in memory) */
        if (!have(r, s->size)) return SKV_ERR_FORMAT;
        size_t k = (r->len - r->at) / s->size;
        k = k < n ? k : n;
        if (skv_cm_load_run(cm, s, *i, r->p + r->at, k)) return SKV_ERR_FORMAT;
        r->at += k * s->size;
        *i += k;
        n -= (uint32_t)k;
    }
    return SKV_OK;
}

/* blank: cm's tables hold no values yet, so the gaps get their reset values here. */
static int read_section(rbuf *r, skv_cm *cm, const skv_cm_section *s, int blank)
{
    int ok = 1;
    uint32_t n = get32(r, &ok), size = get32(r, &ok), runs = get32(r, &ok);
    size_t i = 0;
    if (!ok || n != s->n || size != s->size || runs > s->n) return SKV_ERR_FORMAT;
    for (uint32_t k = 0; k < runs; k++) {
        int rc = read_run(r, cm, s, &i, blank);
        if (rc) return rc;
    }
    if (blank) skv_cm_fill_reset(cm, s, i, s->n - i);
    return SKV_OK;
}

/* The header against cm and id; the scalars are set on cm. */
static int read_header(rbuf *r, skv_cm *cm, const skv_cm_snap_id *id, uint32_t version, uint32_t *ns)
{
    int ok = 1;
    uint32_t magic = get32(r, &ok), ver = get32(r, &ok), V = get32(r, &ok), bits = get32(r, &ok), sc[SKV_CM_N_SCALARS];
    uint64_t vc = get32(r, &ok), dict;
    vc |= (uint64_t)get32(r, &ok) << 32;
    dict = get32(r, &ok);
    dict |= (uint64_t)get32(r, &ok) << 32;
    uint32_t dn = get32(r, &ok);
    *ns = get32(r, &ok);
    for (int k = 0; k < SKV_CM_N_SCALARS; k++) sc[k] = get32(r, &ok);
    if (!ok || magic != SNAP_MAGIC) return SKV_ERR_FORMAT;
    if (ver != version) return SKV_ERR_UNSUPPORTED;
    if (V != skv_cm_n_vocab(cm) || bits != skv_cm_slot_bits(cm) || vc != id->vocab_check || dict != id->dict_id ||
        dn != id->dict_n)
        return SKV_ERR_MISMATCH;
    if (sc[0] != dn) return SKV_ERR_FORMAT; /* primed by exactly the dictionary's ids */
    return skv_cm_set_scalars(cm, sc);
}

/* Header and sections from r (the checksum is the caller's); r must end exactly there. */
static int parse(rbuf *r, skv_cm *cm, const skv_cm_snap_id *id)
{
    skv_cm_section sec[SKV_CM_MAX_SECTIONS];
    uint32_t ns = 0;
    int blank = skv_cm_fresh(cm) == 2;
    if (blank) skv_cm_blank_apm(cm); /* unwritten: this version's runs skip reset values */
    int rc = read_header(r, cm, id, SKV_CM_SNAP_VERSION, &ns);
    if (blank && rc == SKV_OK) skv_cm_prefault(cm); /* its tables are not faulted in yet */
    if (rc == SKV_OK && ns != (uint32_t)skv_cm_sections(cm, sec)) rc = SKV_ERR_FORMAT;
    for (uint32_t k = 0; rc == SKV_OK && k < ns; k++) rc = read_section(r, cm, &sec[k], blank);
    if (rc == SKV_OK && (r->at != r->len || (r->more && r->more(r)))) rc = SKV_ERR_FORMAT;
    return rc;
}

/* ---- version 2: the elements as they are, filled by two threads --------------------- */

#define RAW_CHUNK ((size_t)1 << 18) /* read, hashed and checked while in L2 */
#define RAW_HDR_MAX (SNAP_HDR + SKV_CM_MAX_SECTIONS * SEC2 + 8)
#define RAW_NS_AT 36 /* the section count's offset in the header */

/* Where a version 2 snapshot's bytes come from: memory, or the file fd from offset base. */
typedef struct raw_src {
    const uint8_t *mem;
    int fd;
    uint64_t base;
} raw_src;

static int src_get(const raw_src *r, uint8_t *dst, size_t n, uint64_t off)
{
    if (r->mem) {
        memcpy(dst, r->mem + off, n);
        return 0;
    }
    while (n > 0) {
        ssize_t k = pread(r->fd, dst, n, (off_t)(r->base + off));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1; /* shorter than its size said, or unreadable */
        dst += k, n -= (size_t)k, off += (uint64_t)k;
    }
    return 0;
}

/* One worker's share: sections take[0..n_take), each hashed and checked as it arrives. */
typedef struct raw_job {
    skv_cm *cm;
    const skv_cm_section *sec;
    const uint64_t *sum, *off;
    const raw_src *src;
    int take[SKV_CM_MAX_SECTIONS], n_take, rc;
} raw_job;

static int raw_section(const raw_job *j, int k)
{
    const skv_cm_section *s = &j->sec[k];
    size_t bytes = s->n * s->size;
    XXH3_state_t *x = XXH3_createState();
    int rc = x && XXH3_64bits_reset(x) == XXH_OK ? SKV_OK : SKV_ERR_NOMEM;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint8_t *d = s->p; /* the file's elements are the table's: read straight into it */
    int in_place = j->src->mem && d == j->src->mem + j->off[k]; /* a mapped table (skv_cm_snap_map_fd): checked only */
    for (size_t o = 0; rc == SKV_OK && o < bytes; o += RAW_CHUNK) {
        size_t n = bytes - o < RAW_CHUNK ? bytes - o : RAW_CHUNK;
        if (!in_place && src_get(j->src, d + o, n, j->off[k] + o)) rc = SKV_ERR_FORMAT;
        else if (XXH3_64bits_update(x, d + o, n) != XXH_OK) rc = SKV_ERR_NOMEM;
        else if (!in_place) rc = skv_cm_check_run(j->cm, s, o / s->size, n / s->size);
        /* a mapped table is not: the model reads any element of one safely (cm.h), and
         * the checksum above is what says the file is intact */
    }
#else
    uint8_t *b = malloc(RAW_CHUNK); /* through a buffer, converted by skv_cm_load_run */
    if (!b) rc = SKV_ERR_NOMEM;
    for (size_t o = 0; rc == SKV_OK && o < bytes; o += RAW_CHUNK) {
        size_t n = bytes - o < RAW_CHUNK ? bytes - o : RAW_CHUNK;
        if (src_get(j->src, b, n, j->off[k] + o)) rc = SKV_ERR_FORMAT;
        else if (XXH3_64bits_update(x, b, n) != XXH_OK) rc = SKV_ERR_NOMEM;
        else rc = skv_cm_load_run(j->cm, s, o / s->size, b, n / s->size);
    }
    free(b);
#endif
    if (rc == SKV_OK && XXH3_64bits_digest(x) != j->sum[k]) rc = SKV_ERR_FORMAT;
    XXH3_freeState(x);
    return rc;
}

static void *raw_main(void *arg)
{
    raw_job *j = arg;
    for (int i = 0; i < j->n_take && j->rc == SKV_OK; i++) j->rc = raw_section(j, j->take[i]);
    return NULL;
}

/* Two threads where the host has two processors (each faults in, copies, hashes and checks
 * its half of ~36 MiB: about half the time of one on the project's VMs). */
static int raw_workers(void)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(_SC_NPROCESSORS_ONLN)
    return sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 2 : 1;
#else
    return 1; /* skv_cm_load_run marks the model written: one thread */
#endif
}

static int raw_fill(skv_cm *cm, const skv_cm_section *sec, int ns, const uint64_t *sum, uint64_t hdr,
                    const raw_src *src)
{
    uint64_t off[SKV_CM_MAX_SECTIONS], load[2] = {0, 0};
    raw_job j[2];
    int two_workers = raw_workers() > 1; /* once: sysconf reads a file under /sys each call */
    for (int w = 0; w < 2; w++) j[w] = (raw_job){.cm = cm, .sec = sec, .sum = sum, .off = off, .src = src};
    for (int k = 0; k < ns; k++) { /* each section to the worker with less so far */
        size_t b = sec[k].n * sec[k].size;
        int w = two_workers && load[1] < load[0];
        off[k] = hdr, hdr += b;
        j[w].take[j[w].n_take++] = k, load[w] += b;
    }
    pthread_t th;
    int two = j[1].n_take > 0 && pthread_create(&th, NULL, raw_main, &j[1]) == 0;
    raw_main(&j[0]);
    if (two) pthread_join(th, NULL);
    else raw_main(&j[1]);
    return j[0].rc ? j[0].rc : j[1].rc;
}

/* The header of a version 2 snapshot of `size` bytes from src, checked (its checksum, then
 * against cm and id; the scalars set): cm's sections, their checksums and where the
 * elements begin (*hdr). */
static int raw_layout(skv_cm *cm, const skv_cm_snap_id *id, const raw_src *src, uint64_t size,
                      skv_cm_section sec[SKV_CM_MAX_SECTIONS], uint64_t sum[SKV_CM_MAX_SECTIONS], uint64_t *hdr_out)
{
    uint8_t h[RAW_HDR_MAX];
    uint64_t hdr = 0;
    if (size < SNAP_HDR + 8 || src_get(src, h, SNAP_HDR, 0)) return SKV_ERR_FORMAT;
    uint32_t ns = skv_rd32(h + RAW_NS_AT);
    size_t hlen = SNAP_HDR + (size_t)ns * SEC2 + 8;
    if (ns > SKV_CM_MAX_SECTIONS || size < hlen || src_get(src, h + SNAP_HDR, hlen - SNAP_HDR, SNAP_HDR) ||
        XXH3_64bits(h, hlen - 8) != skv_rd64(h + hlen - 8))
        return SKV_ERR_FORMAT; /* the header's checksum first: a damaged byte may read as another dictionary */
    rbuf r = {h, SNAP_HDR, 0, NULL};
    int rc = read_header(&r, cm, id, SKV_CM_SNAP_RAW, &ns);
    if (rc) return rc;
    if (ns != (uint32_t)skv_cm_sections(cm, sec) || raw_len(sec, (int)ns, &hdr) != size || hdr != hlen)
        return SKV_ERR_FORMAT;
    for (uint32_t k = 0; k < ns; k++) {
        const uint8_t *e = h + SNAP_HDR + (size_t)k * SEC2;
        if (skv_rd32(e) != sec[k].n || skv_rd32(e + 4) != sec[k].size) return SKV_ERR_FORMAT;
        sum[k] = skv_rd64(e + 8);
    }
    *hdr_out = hdr;
    return SKV_OK;
}

/* A version 2 snapshot of `size` bytes from src into cm (reset by the caller on error). */
static int raw_read(skv_cm *cm, const skv_cm_snap_id *id, const raw_src *src, uint64_t size)
{
    skv_cm_section sec[SKV_CM_MAX_SECTIONS];
    uint64_t sum[SKV_CM_MAX_SECTIONS], hdr = 0;
    int rc = raw_layout(cm, id, src, size, sec, sum, &hdr);
    return rc ? rc : raw_fill(cm, sec, skv_cm_section_shapes(cm, sec), sum, hdr, src);
}

/* The version of the snapshot whose first 8 bytes are b (0 when the magic is wrong). */
static uint32_t snap_version(const uint8_t b[8]) { return skv_rd32(b) == SNAP_MAGIC ? skv_rd32(b + 4) : 0; }

int skv_cm_snap_read(skv_cm *cm, const skv_cm_snap_id *id, const uint8_t *src, size_t len)
{
    if (!cm || !id || (!src && len)) return SKV_ERR_INVALID_ARG;
    int rc = SKV_OK;
    if (!skv_cm_fresh(cm)) skv_cm_reset(cm); /* a new model is reset already (36 MiB not written twice) */
    if (len >= 8 && snap_version(src) == SKV_CM_SNAP_RAW) {
        raw_src rs = {src, -1, 0};
        if ((rc = raw_read(cm, id, &rs, len))) skv_cm_reset(cm);
        return rc;
    }
    if (len < SNAP_HDR + 8 || skv_rd32(src) != SNAP_MAGIC || XXH3_64bits(src, len - 8) != skv_rd64(src + len - 8))
        rc = SKV_ERR_FORMAT;
    rbuf r = {src, rc ? 0 : len - 8, 0, NULL};
    if (rc == SKV_OK) rc = parse(&r, cm, id);
    if (rc) skv_cm_reset(cm); /* a blank model or a partly loaded one: reset whole */
    return rc;
}

/* A file's window: the rbuf first, so that `more` finds the rest. */
typedef struct rfile {
    rbuf r;
    int fd, io_err;
    uint8_t *win;
    size_t cap;
    uint64_t left;  /* bytes before the checksum not yet read */
    XXH3_state_t *x; /* of every byte read so far */
} rfile;

/* Moves the unread bytes to the front and reads up to a window's worth after them. */
static int file_more(rbuf *r)
{
    rfile *f = (rfile *)r;
    size_t keep = r->len - r->at, want = f->cap - keep;
    if (!f->left || !want) return 0;
    memmove(f->win, r->p + r->at, keep);
    if (want > f->left) want = (size_t)f->left;
    size_t got = 0;
    while (got < want) {
        ssize_t k = read(f->fd, f->win + keep + got, want - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            f->io_err = 1; /* shorter than its size said, or unreadable */
            break;
        }
        got += (size_t)k;
    }
    XXH3_64bits_update(f->x, f->win + keep, got);
    f->left -= got;
    r->p = f->win, r->at = 0, r->len = keep + got;
    return got > 0;
}

int skv_cm_snap_read_fd_window(skv_cm *cm, const skv_cm_snap_id *id, int fd, uint64_t size, size_t window)
{
    if (!cm || !id || fd < 0 || window < 64) return SKV_ERR_INVALID_ARG;
    if (!skv_cm_fresh(cm)) skv_cm_reset(cm);
    if (size < SNAP_HDR + 8) return SKV_ERR_FORMAT;
    uint8_t head[8];
    off_t base = lseek(fd, 0, SEEK_CUR);
    raw_src rs = {NULL, fd, base < 0 ? 0 : (uint64_t)base};
    if (base >= 0 && !src_get(&rs, head, 8, 0) && snap_version(head) == SKV_CM_SNAP_RAW) {
        int rc = raw_read(cm, id, &rs, size);
        if (rc) skv_cm_reset(cm);
        return rc;
    }
    rfile f = {{NULL, 0, 0, file_more}, fd, 0, malloc(window), window, size - 8, XXH3_createState()};
    uint8_t sum[8];
    int rc = f.win && f.x && XXH3_64bits_reset(f.x) == XXH_OK ? SKV_OK : SKV_ERR_NOMEM;
    if (rc == SKV_OK) {
        f.r.p = f.win;
        rc = have(&f.r, 4) && skv_rd32(f.r.p) == SNAP_MAGIC ? parse(&f.r, cm, id) : SKV_ERR_FORMAT;
        /* the checksum decides: a damaged byte may read as another dictionary or version */
        while (!f.io_err && file_more(&f.r)) f.r.at = f.r.len;
        size_t got = 0;
        while (!f.io_err && got < 8) {
            ssize_t k = read(fd, sum + got, 8 - got);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) f.io_err = 1;
            else got += (size_t)k;
        }
        if (f.io_err || f.left || XXH3_64bits_digest(f.x) != skv_rd64(sum)) rc = SKV_ERR_FORMAT;
    }
    XXH3_freeState(f.x);
    free(f.win);
    if (rc) skv_cm_reset(cm);
    return rc;
}

int skv_cm_snap_read_fd(skv_cm *cm, const skv_cm_snap_id *id, int fd, uint64_t size)
{
    return skv_cm_snap_read_fd_window(cm, id, fd, size, (size_t)1 << 18);
}

int skv_cm_snap_map_fd(skv_cm *cm, const skv_cm_snap_id *id, int fd, uint64_t size)
{
    if (!cm || !id || fd < 0) return SKV_ERR_INVALID_ARG;
#if defined(__linux__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (size < SNAP_HDR + 8 || size > SIZE_MAX) return SKV_ERR_FORMAT;
    /* the page cache's pages themselves: no copy, and none of the ~36 MiB of fresh memory
     * whose clearing was most of a read (docs/coder.md 4.8). Not MAP_POPULATE: one thread
     * would map every page (~1.5 ms); the two threads that hash the sections below fault
     * in their own halves as they go. */
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) return SKV_ERR_UNSUPPORTED;
    raw_src rs = {map, -1, 0};
    skv_cm_section sec[SKV_CM_MAX_SECTIONS];
    uint64_t sum[SKV_CM_MAX_SECTIONS], hdr = 0;
    int rc = snap_version(map) == SKV_CM_SNAP_RAW ? raw_layout(cm, id, &rs, size, sec, sum, &hdr) : SKV_ERR_UNSUPPORTED;
    size_t off[SKV_CM_MAX_SECTIONS], at = (size_t)hdr;
    int ns = skv_cm_section_shapes(cm, sec);
    for (int k = 0; k < ns; k++) off[k] = at, at += sec[k].n * sec[k].size; /* raw_layout checked the total */
    if (rc == SKV_OK && (rc = skv_cm_map_tables(cm, map, (size_t)size, off)) == SKV_OK) /* cm owns it now */
        return raw_fill(cm, sec, skv_cm_sections(cm, sec), sum, hdr, &rs);
    munmap(map, (size_t)size);
    return rc;
#else
    (void)size;
    return SKV_ERR_UNSUPPORTED; /* the tables are host-order copies there: skv_cm_snap_read_fd */
#endif
}
