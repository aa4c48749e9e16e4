/* cli_cmdict.c - --cm-dict TEXT: cached ids and primed model (see cli_cmdict.h).
 *
 * In the cache directory ($XDG_CACHE_HOME/seqkv, else ~/.cache/seqkv), named by the XXH3-64
 * of TEXT's bytes and the tokenizer's fingerprint (skv_model_tokenizer_fingerprint: the ids
 * of a text and the primed model depend on nothing else; H = 16 hex digits, F = the first
 * 16 of the fingerprint's), so any copy of the same text, and every model sharing the
 * tokenizer, shares them, and nothing is written beside it:
 * cm-H-F.skvids: "SKVI" | u32 version 2 | u8 tokenizer fingerprint[16] | u64 XXH3-64 of
 *                TEXT | u32 n | u32 ids[n] | u64 XXH3-64 of every byte before it
 *                (little-endian; version 1, of older builds, held the model's fingerprint
 *                and is not read: its name differs, so it is simply never found)
 * cm-H-F.skvcm:  skv_cm_dict_save's snapshot of the primed model (docs/coder.md 4.8,
 *                version 2; a version 1 file of older builds is read, then rewritten)
 * Both are written through a temporary file of the writing process's own and a rename. */
#include "cli_cmdict.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "cli.h"
#include "core/util.h"

#define IDS_MAGIC 0x49564b53u /* "SKVI" */
#define IDS_HDR 36u
#define IDS_VERSION 2

static void wr32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(v >> (8 * k));
}
static uint32_t rd32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static void wr64(uint8_t *p, uint64_t v) { wr32(p, (uint32_t)v), wr32(p + 4, (uint32_t)(v >> 32)); }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static char *side_path(const char *path, const char *ext)
{
    size_t n = strlen(path) + strlen(ext) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s%s", path, ext);
    return s;
}

/* mkdir -p of the cache directory (0700); 0 if it exists or was made. */
static int make_dirs(char *dir)
{
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        int bad = mkdir(dir, 0700) && errno != EEXIST;
        *p = '/';
        if (bad) return -1;
    }
    return mkdir(dir, 0700) && errno != EEXIST ? -1 : 0;
}

/* "DIR/cm-H-F" (no extension) in the cache directory, made if need be; NULL when caching is
 * off (SEQKV_NO_CM_CACHE set and not "0") or there is no usable directory. */
static char *cache_base(const uint8_t fp[16], uint64_t key)
{
    const char *off = getenv("SEQKV_NO_CM_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[4096];
    if (off && *off && strcmp(off, "0")) return NULL;
    int n = xdg && *xdg == '/' ? snprintf(dir, sizeof dir, "%s/seqkv", xdg)
            : home && *home    ? snprintf(dir, sizeof dir, "%s/.cache/seqkv", home)
                               : -1;
    if (n < 0 || (size_t)n >= sizeof dir - 64 || make_dirs(dir)) return NULL;
    char *s = malloc((size_t)n + 64);
    if (!s) return NULL;
    int at = snprintf(s, (size_t)n + 64, "%s/cm-%016llx-", dir, (unsigned long long)key);
    for (int i = 0; i < 8; i++) at += snprintf(s + at, (size_t)n + 64 - (size_t)at, "%02x", fp[i]);
    return s;
}

/* The ids cli_cm_dict returned from a mapping of their cache file (little-endian hosts):
 * the mapping, for cli_cm_dict_free. One at a time: a process holds one dictionary. */
static void *g_ids_map;
static size_t g_ids_map_len;
static int32_t *g_ids_big; /* or the skv_big_alloc array it returned */

static int from_map(const int32_t *ids)
{
    return g_ids_map && (const uint8_t *)ids == (const uint8_t *)g_ids_map + IDS_HDR;
}

/* The cached ids if the cache is intact and for (fp, key); else NULL. On a little-endian
 * Linux host the file is mapped read-only and the ids are its own bytes (no copy into
 * fresh memory); else read straight into the array the caller keeps (huge pages:
 * skv_big_alloc). Checksummed either way. */
static int32_t *ids_load(const char *cache, const uint8_t fp[16], uint64_t key, size_t *n)
{
#if defined(__linux__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    int fd = g_ids_map ? -1 : open(cache, O_RDONLY | O_CLOEXEC);
    struct stat fs;
    if (fd >= 0 && !fstat(fd, &fs) && S_ISREG(fs.st_mode) && fs.st_size >= IDS_HDR + 4 + 8 &&
        (uint64_t)fs.st_size <= (uint64_t)SIZE_MAX) {
        size_t len = (size_t)fs.st_size;
        uint8_t *b = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        close(fd);
        if (b == MAP_FAILED) return NULL;
        uint32_t k = rd32(b + 32);
        if (rd32(b) == IDS_MAGIC && rd32(b + 4) == IDS_VERSION && !memcmp(b + 8, fp, 16) && rd64(b + 24) == key &&
            k >= 1 && (uint64_t)len == IDS_HDR + 4 * (uint64_t)k + 8 && XXH3_64bits(b, len - 8) == rd64(b + len - 8)) {
            g_ids_map = b, g_ids_map_len = len, *n = k;
            return (int32_t *)(void *)(b + IDS_HDR); /* 4-byte aligned: the header is 36 bytes */
        }
        munmap(b, len);
        return NULL;
    }
    if (fd >= 0) close(fd);
#endif
    FILE *f = fopen(cache, "rb");
    uint8_t h[IDS_HDR], tail[9];
    int32_t *ids = NULL;
    struct stat st;
    if (!f) return NULL;
    if (!fstat(fileno(f), &st) && fread(h, 1, IDS_HDR, f) == IDS_HDR && rd32(h) == IDS_MAGIC && rd32(h + 4) == IDS_VERSION &&
        !memcmp(h + 8, fp, 16) && rd64(h + 24) == key && rd32(h + 32) >= 1 &&
        (uint64_t)st.st_size == IDS_HDR + 4 * (uint64_t)rd32(h + 32) + 8 && /* before allocating what it says */
        (ids = skv_big_alloc((size_t)rd32(h + 32) * sizeof *ids)) != NULL) {
        size_t k = rd32(h + 32);
        XXH3_state_t *x = XXH3_createState();
        int ok = x && XXH3_64bits_reset(x) == XXH_OK && XXH3_64bits_update(x, h, IDS_HDR) == XXH_OK &&
                 fread(ids, 4, k, f) == k && XXH3_64bits_update(x, ids, 4 * k) == XXH_OK &&
                 fread(tail, 1, sizeof tail, f) == 8 && XXH3_64bits_digest(x) == rd64(tail);
        XXH3_freeState(x);
        for (size_t i = 0; ok && i < k; i++) ids[i] = (int32_t)rd32((const uint8_t *)&ids[i]); /* the file is little-endian */
        if (!ok) skv_big_free(ids), ids = NULL;
        else *n = k;
    }
    fclose(f);
    return ids;
}

/* A new file of this process's own beside path ("path.tmp.PID.N", created exclusively, so
 * two seqkv processes filling the same cache never write one temporary file together). */
static FILE *own_temp(const char *path, char **tmp)
{
    size_t tn = strlen(path) + 40;
    int fd = -1;
    if (!(*tmp = malloc(tn))) return NULL;
    for (unsigned k = 0; fd < 0 && k < 64; k++) {
        snprintf(*tmp, tn, "%s.tmp.%ld.%u", path, (long)getpid(), k);
        fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (fd >= 0 && !f) close(fd), remove(*tmp);
    return f;
}

static void ids_save(const char *cache, const uint8_t fp[16], uint64_t key, const int32_t *ids, size_t n)
{
    size_t len = IDS_HDR + 4 * n + 8;
    uint8_t *b = n <= UINT32_MAX ? malloc(len) : NULL;
    char *tmp = NULL;
    FILE *f = b ? own_temp(cache, &tmp) : NULL;
    if (f) {
        wr32(b, IDS_MAGIC), wr32(b + 4, IDS_VERSION), memcpy(b + 8, fp, 16), wr64(b + 24, key), wr32(b + 32, (uint32_t)n);
        for (size_t i = 0; i < n; i++) wr32(b + IDS_HDR + 4 * i, (uint32_t)ids[i]);
        wr64(b + len - 8, XXH3_64bits(b, len - 8));
        int ok = fwrite(b, 1, len, f) == len;
        if (fclose(f) || !ok || rename(tmp, cache)) remove(tmp);
    }
    free(tmp);
    free(b);
}

/* The primed model: BASE.skvcm loaded when valid, else primed and (re)written; with no
 * cache (base NULL) primed only. A valid file of the older format (version 1: runs,
 * parsed by one thread) is rewritten as version 2 (read by two threads in about a third
 * of the time) from the model it gave. */
static void primed_cache(skv_model *m, const char *base, const int32_t *ids, size_t n)
{
    char err[512] = "", *snap = base ? side_path(base, ".skvcm") : NULL;
    int rc = snap ? skv_cm_dict_load(m, ids, n, snap, err, sizeof err) : SKV_ERR_IO;
    if (rc == SKV_ERR_FORMAT) fprintf(stderr, "seqkv: note: %s; rebuilding it\n", err);
    if (snap && (rc != SKV_OK || !skv_cm_dict_file_current(snap))) skv_cm_dict_save(m, ids, n, snap, err, sizeof err);
    free(snap);
}

/* XXH3-64 of the file's bytes: a regular file mapped (its page cache's pages, no buffer:
 * a fresh 256 KiB one cost ~1 ms of page faults on the project's VMs), anything else read
 * in pieces (when the ids are cached, the text is never held whole); -1 after a message. */
static int file_key(const char *path, uint64_t *key)
{
#if defined(__linux__)
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat fs;
    if (fd >= 0 && !fstat(fd, &fs) && S_ISREG(fs.st_mode) && fs.st_size > 0 &&
        (uint64_t)fs.st_size <= (uint64_t)SIZE_MAX) {
        void *b = mmap(NULL, (size_t)fs.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        close(fd);
        if (b != MAP_FAILED) {
            *key = XXH3_64bits(b, (size_t)fs.st_size);
            munmap(b, (size_t)fs.st_size);
            return 0;
        }
    } else if (fd >= 0) {
        close(fd);
    }
#endif
    FILE *f = fopen(path, "rb");
    XXH3_state_t *x = f ? XXH3_createState() : NULL;
    char *buf = x ? malloc(1 << 18) : NULL;
    int rc = buf && XXH3_64bits_reset(x) == XXH_OK ? 0 : -1;
    size_t got;
    while (!rc && (got = fread(buf, 1, 1 << 18, f)) > 0) rc = XXH3_64bits_update(x, buf, got) == XXH_OK ? 0 : -1;
    if (!f) cli_error("cannot open '%s': %s", path, strerror(errno));
    else if (rc || ferror(f)) cli_error("error reading '%s': %s", path, buf ? strerror(errno) : "out of memory");
    else *key = XXH3_64bits_digest(x);
    rc = f && !rc && !ferror(f) ? 0 : -1;
    if (f) fclose(f);
    XXH3_freeState(x);
    free(buf);
    return rc;
}

static void *prepare_main(void *m)
{
    (void)skv_cm_dict_prepare(m); /* a failure is met again, and reported, where it is needed */
    return NULL;
}

const int32_t *cli_cm_dict(skv_model *m, const char *path, size_t *n, int no_cache)
{
    size_t len = 0;
    uint8_t fp[16];
    char *text = NULL, *base = NULL, *cache = NULL;
    int32_t *ids = NULL;
    uint64_t key = 0;
    pthread_t th; /* the vocabulary's side information while the text is hashed and the ids read */
    int prep = pthread_create(&th, NULL, prepare_main, m) == 0;
    int cached = !no_cache && strcmp(path, "-") && skv_model_tokenizer_fingerprint(m, fp) == SKV_OK;
    if (cached && file_key(path, &key)) {
        if (prep) pthread_join(th, NULL);
        return NULL;
    }
    if (cached && (base = cache_base(fp, key))) cache = side_path(base, ".skvids");
    if (cache) ids = ids_load(cache, fp, key, n);
    if (!ids && (text = cli_read_file(path, &len)) != NULL) {
        if (cached && XXH3_64bits(text, len) != key) { /* changed since hashed: cache under what was read */
            free(base), free(cache);
            key = XXH3_64bits(text, len);
            base = cache_base(fp, key), cache = base ? side_path(base, ".skvids") : NULL;
        }
        int32_t *t = cli_text_tokens(m, path, text, len, 0, n);
        if (t && cache && *n) ids_save(cache, fp, key, t, *n);
        if (t && (ids = skv_big_alloc(*n * sizeof *ids)) != NULL) memcpy(ids, t, *n * sizeof *ids); /* as cached ones */
        else if (t) cli_error("out of memory for the dictionary's %zu ids", *n);
        free(t);
    }
    if (prep) pthread_join(th, NULL);
    if (ids && *n && base) primed_cache(m, base, ids, *n);
    free(text);
    free(base);
    free(cache);
    if (ids && !from_map(ids)) g_ids_big = ids;
    return ids;
}

void cli_cm_dict_free(const int32_t *ids)
{
    if (!ids) return;
    if (from_map(ids)) {
        munmap(g_ids_map, g_ids_map_len);
        g_ids_map = NULL;
    } else if (ids == g_ids_big) {
        skv_big_free(g_ids_big);
        g_ids_big = NULL;
    }
}
