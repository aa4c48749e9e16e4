/* Fuzz target for the cm model's snapshot reader (src/coder/cm_snap.c, docs/coder.md 4.8).
 *
 * Input: the bytes of a snapshot. The model they are read into follows the input's own
 * header, so that mutations get past the kind checks: vocabulary check 0 is codec cm
 * (n_vocab from the header, folded into 1..4096, slot bits 18), anything else codec cmv
 * over a fixed 300-id vocabulary (slot bits 16; the vocabulary's real check replaces the
 * header's in the identity the reader is given, so the header still has to name it); the
 * dictionary id and length the reader is given are the header's too.
 * Oracle:
 *   - skv_cm_snap_read returns SKV_OK, SKV_ERR_FORMAT, SKV_ERR_MISMATCH or
 *     SKV_ERR_UNSUPPORTED, never anything else, and never reads outside the input (ASan);
 *   - a loaded state codes 64 ids and decodes them back exactly (every table index the
 *     hostile state can reach stays inside its table: ASan / UBSan);
 *   - its snapshot, read into a second model, gives the same snapshot bytes (write after
 *     read is the identity on what was loaded);
 *   - under an undo log (skv_cm_undo_begin), coding 64 ids then skv_cm_undo leaves the
 *     model's snapshot bytes as they were;
 *   - every 4th input (every one in the replay of make test), the file reader
 *     (skv_cm_snap_read_fd_window, a window of 64..1087 bytes chosen by the input's size,
 *     from a temporary file) returns the memory reader's status and, when it loads,
 *     the same state (the same snapshot bytes written back); for codec cmv the mapped
 *     reader (skv_cm_snap_map_fd) loads what the memory reader loads (version 1 aside),
 *     with the same state, and whatever it loads codes and decodes back under its undo
 *     log (mapped_reader_agrees).
 * Models are kept across inputs (a reset per input, not a new 3-5 MiB model).
 * Seeds (fuzz/corpus/cmsnap/): built by this file with -DCMSNAP_SEEDS (a main that writes
 * valid snapshots of primed models of both kinds, and damaged ones; version 1, and version 2
 * of the cmv kind; cmv ones for each model revision: cmv_* 1, cmv2_* 2, cmv3_* 3). Build:
 * cc -std=c11 -D_GNU_SOURCE -DCMSNAP_SEEDS -Iinclude -Isrc fuzz/fuzz_cmsnap.c build/libseqkv.a
 * -llmdb -lhiredis -lzstd -lxxhash -lpthread -lm, run with the corpus directory. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coder/cm.h"
#include "coder/cm_snap.h"
#include "coder/cm_vocab.h"

#define NV 300
#define NT 64

static skv_cm_vocab *vocab(void)
{
    static skv_cm_vocab *vb;
    static char p[NV][4];
    const char *pp[NV];
    size_t len[NV];
    if (vb) return vb;
    for (uint32_t i = 0; i < NV; i++) {
        len[i] = 1 + i % 3;
        for (size_t k = 0; k < len[i]; k++) p[i][k] = (char)(k == 0 && i % 7 == 0 ? ' ' : 'a' + (i * 5 + k) % 23);
        pp[i] = p[i];
    }
    if (skv_cm_vocab_create(NV, pp, len, NULL, &vb)) vb = NULL;
    return vb;
}

static uint32_t rd32(const uint8_t *b) { return b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24; }
static uint64_t rd64(const uint8_t *b) { return rd32(b) | (uint64_t)rd32(b + 4) << 32; }

/* The cmv model revision of the input (the one its header's model check names, else 1). */
static unsigned g_rev = 1;

/* A reset model of the kind (cmv of revision g_rev, or cm for V ids), kept across inputs.
 * slot 0/1: two models. */
static skv_cm *model_of(int cmv, uint32_t V, int slot)
{
    static skv_cm *kept[1 + SKV_CMV_REV][2];
    static uint32_t kept_v[2];
    skv_cm **m = &kept[cmv ? g_rev : 0][slot];
    if (*m && (cmv || kept_v[slot] == V)) {
        if (!skv_cm_fresh(*m)) skv_cm_reset(*m); /* a model the last input left reset stays so */
        return *m;
    }
    skv_cm_free(*m);
    *m = NULL;
    if (cmv ? skv_cm_create_vocab(vocab(), g_rev, SKV_CMV_SLOT_BITS_MIN, m) : skv_cm_create(V, m)) *m = NULL;
    if (!cmv) kept_v[slot] = V;
    return *m;
}

/* Codes ids t[n0..n0+NT) (history t) and decodes them back; aborts on a difference. */
static void code_back(skv_cm *cm, int32_t *t, size_t n0, uint32_t V, const uint8_t *snap, size_t len, int cmv)
{
    skv_cm *d = model_of(cmv, V, 1);
    skv_cm_snap_id id = {cmv ? skv_cm_model_check(vocab(), g_rev) : 0, rd64(snap + 24), rd32(snap + 32)};
    uint8_t buf[4096];
    size_t size = 0;
    int32_t back[NT];
    skv_rangecoder_enc e;
    skv_rangecoder_dec dd;
    if (!d || skv_cm_snap_read(d, &id, snap, len) != SKV_OK) abort(); /* read once: reads again */
    skv_rangecoder_enc_init(&e, buf, sizeof buf);
    for (size_t i = 0; i < NT; i++)
        if (skv_cm_encode(cm, &e, t, n0 + i)) abort();
    if (skv_rangecoder_enc_finish(&e, &size) || skv_rangecoder_dec_init(&dd, buf, size)) abort();
    memcpy(back, t + n0, sizeof back);
    for (size_t i = 0; i < NT; i++)
        if (skv_cm_decode(d, &dd, t, n0 + i) || t[n0 + i] != back[i]) abort();
}

/* Snapshot of cm (*len bytes) into buffer k of three kept across inputs: the bound is about
 * twice the tables (10 MiB and more), and a fresh allocation per snapshot was mapped,
 * faulted in and unmapped by ASan each time. */
static uint8_t *snap_of(skv_cm *cm, const skv_cm_snap_id *id, size_t *len, int k)
{
    static uint8_t *buf[3];
    static size_t have[3];
    size_t cap = skv_cm_snap_bound(cm);
    if (have[k] < cap) {
        free(buf[k]);
        have[k] = (buf[k] = malloc(cap)) ? cap : 0;
    }
    if (!buf[k] || skv_cm_snap_write(cm, id, buf[k], cap, len)) abort();
    return buf[k];
}

/* The history a loaded state codes after: n0 ids (what the state says it has seen), then NT. */
static int32_t *history(size_t n0, uint32_t V, const uint8_t *data, size_t size)
{
    int32_t *t = malloc((n0 + NT) * sizeof *t);
    for (size_t i = 0; t && i < n0 + NT; i++) t[i] = (int32_t)((data[i % size] + i * 7) % V);
    return t;
}

static void loaded(skv_cm *cm, const skv_cm_snap_id *id, uint32_t V, int cmv, const uint8_t *data, size_t size)
{
    size_t n0 = skv_cm_n_coded(cm), l1 = 0, l2 = 0;
    if (n0 > 100000) return; /* a history that long costs memory, not coverage */
    int32_t *t = history(n0, V, data, size);
    uint8_t *s1 = snap_of(cm, id, &l1, 0);
    skv_cm *q = model_of(cmv, V, 1);
    if (!t || !q || skv_cm_snap_read(q, id, s1, l1)) abort();
    uint8_t *s2 = snap_of(q, id, &l2, 1);
    if (l1 != l2 || memcmp(s1, s2, l1)) abort();
    if (skv_cm_undo_begin(cm, NT) == SKV_OK) {
        code_back(cm, t, n0, V, s1, l1, cmv);
        skv_cm_undo(cm);
        s2 = snap_of(cm, id, &l2, 1);
        if (l1 != l2 || memcmp(s1, s2, l1)) abort();
    }
    free(t);
}

#ifdef FUZZ_NAME /* the replay of make test: compare every input */
#define FILE_EVERY 1
#else
#define FILE_EVERY 4
#endif

/* Codec cmv: the mapped reader (skv_cm_snap_map_fd) over the same file. It checks the
 * checksums but not the elements of the tables it maps (a model reads any value there
 * safely), so: what the memory reader loads (rc), it loads too, version 1 aside (refused:
 * UNSUPPORTED), with the same state; and whatever it loads, elements out of range under
 * forged checksums included, codes NT ids under its undo log and decodes them back. */
static void mapped_reader_agrees(int fd, const uint8_t *data, size_t size, const skv_cm_snap_id *id, skv_cm *cm, int rc)
{
    skv_cm *q = NULL;
    if (skv_cm_create_blank_mapped(vocab(), g_rev, SKV_CMV_SLOT_BITS_MIN, &q)) return;
    int rm = skv_cm_snap_map_fd(q, id, fd, size);
    if (rm != SKV_OK && rm != SKV_ERR_FORMAT && rm != SKV_ERR_MISMATCH && rm != SKV_ERR_UNSUPPORTED) abort();
    if (rc == SKV_OK && rm != SKV_OK && !(rm == SKV_ERR_UNSUPPORTED && rd32(data + 4) != SKV_CM_SNAP_RAW)) abort();
    size_t n0 = rm == SKV_OK ? skv_cm_n_coded(q) : 0, l1 = 0, l2 = 0;
    if (rm == SKV_OK && rc == SKV_OK) {
        uint8_t *s1 = snap_of(cm, id, &l1, 0), *s2 = snap_of(q, id, &l2, 1);
        if (l1 != l2 || memcmp(s1, s2, l1)) abort();
    }
    int32_t *t = rm == SKV_OK && n0 <= 100000 ? history(n0, NV, data, size) : NULL;
    if (t) {
        uint8_t buf[4096];
        int32_t back[NT];
        skv_rangecoder_enc e;
        skv_rangecoder_dec d;
        size_t len = 0;
        skv_rangecoder_enc_init(&e, buf, sizeof buf);
        if (skv_cm_undo_begin(q, NT)) abort();
        for (size_t i = 0; i < NT; i++)
            if (skv_cm_encode(q, &e, t, n0 + i)) abort();
        skv_cm_undo(q);
        memcpy(back, t + n0, sizeof back);
        if (skv_rangecoder_enc_finish(&e, &len) || skv_rangecoder_dec_init(&d, buf, len) || skv_cm_undo_begin(q, NT))
            abort();
        for (size_t i = 0; i < NT; i++)
            if (skv_cm_decode(q, &d, t, n0 + i) || t[n0 + i] != back[i]) abort();
        skv_cm_undo(q);
        free(t);
    }
    skv_cm_free(q);
}

/* The memory reader's status rc (and, when it loaded, cm's state) against the file
 * reader's on the same bytes, through a temporary file kept across inputs. */
static void file_reader_agrees(const uint8_t *data, size_t size, const skv_cm_snap_id *id, skv_cm *cm, int rc,
                               int cmv, uint32_t V)
{
    static FILE *f;
    if (!f && !(f = tmpfile())) return; /* no temporary file: nothing to compare */
    int fd = fileno(f);
    if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size || lseek(fd, 0, SEEK_SET) != 0) abort();
    skv_cm *q = model_of(cmv, V, 1);
    if (!q) return;
    int rf = skv_cm_snap_read_fd_window(q, id, fd, size, 64 + size % 1024);
    if (rf != rc) abort();
    if (rc == SKV_OK) {
        size_t l1 = 0, l2 = 0;
        uint8_t *s1 = snap_of(cm, id, &l1, 0), *s2 = snap_of(q, id, &l2, 1);
        if (l1 != l2 || memcmp(s1, s2, l1)) abort();
    }
    if (cmv) mapped_reader_agrees(fd, data, size, id, cm, rc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 40 || !vocab()) return 0;
    int cmv = rd64(data + 16) != 0;
    g_rev = 1; /* the revision the input's model check names (else 1, refused as a mismatch) */
    for (unsigned r = SKV_CMV_REV; cmv && r > 1 && g_rev == 1; r--)
        if (rd64(data + 16) == skv_cm_model_check(vocab(), r)) g_rev = r;
    uint32_t hv = rd32(data + 8), V = cmv ? NV : hv >= 1 && hv <= 4096 ? hv : 1 + hv % 4096;
    skv_cm_snap_id id = {cmv ? skv_cm_model_check(vocab(), g_rev) : 0, rd64(data + 24), rd32(data + 32)};
    skv_cm *cm = model_of(cmv, V, 0);
    if (!cm) return 0;
    int rc = skv_cm_snap_read(cm, &id, data, size);
    static unsigned count;
    if (rc != SKV_OK && rc != SKV_ERR_FORMAT && rc != SKV_ERR_MISMATCH && rc != SKV_ERR_UNSUPPORTED) abort();
    if (count++ % FILE_EVERY == 0) file_reader_agrees(data, size, &id, cm, rc, cmv, V);
    if (rc == SKV_OK) loaded(cm, &id, V, cmv, data, size);
    return 0;
}

#ifdef CMSNAP_SEEDS
#include <xxhash.h>

/* Writes seed files into the directory argv[1]: valid snapshots and damaged copies. */
static void seed(const char *dir, const char *name, const uint8_t *b, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) abort();
    fclose(f);
}

static void seeds_of(const char *dir, const char *tag, int cmv, uint32_t V, size_t nd)
{
    skv_cm *cm = model_of(cmv, V, 0);
    int32_t *t = malloc(nd * sizeof *t);
    char name[64];
    size_t len = 0;
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < nd; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, t[i] = (int32_t)((i % 3 ? x % 20 : x) % V);
    if (skv_cm_prime(cm, t, nd)) abort();
    skv_cm_snap_id id = {cmv ? skv_cm_model_check(vocab(), g_rev) : 0, 0x5eed0000u + nd, (uint32_t)nd};
    uint8_t *b = snap_of(cm, &id, &len, 2);
    snprintf(name, sizeof name, "%s_valid", tag);
    seed(dir, name, b, len);
    uint8_t *f = malloc(len); /* forged: an element out of range under a valid checksum */
    memcpy(f, b, len);
    for (int k = 0; k < 4; k++) f[len - 40 + k] = 0xff, f[len / 3 + k] = 0xff;
    uint64_t h = XXH3_64bits(f, len - 8);
    for (int k = 0; k < 8; k++) f[len - 8 + k] = (uint8_t)(h >> (8 * k));
    snprintf(name, sizeof name, "%s_forged", tag);
    seed(dir, name, f, len);
    free(f);
    b[len / 2] ^= 4;
    snprintf(name, sizeof name, "%s_flipped", tag);
    seed(dir, name, b, len);
    snprintf(name, sizeof name, "%s_truncated", tag);
    seed(dir, name, b, len * 2 / 3);
    free(t);
}

/* Version 2 (SKV_CM_SNAP_RAW) seeds of the cmv kind: valid, and forged (a slot element out
 * of range under checksums made right: the header's and its section's). */
static void raw_seeds(const char *dir)
{
    skv_cm *cm = model_of(1, NV, 0);
    int32_t t[60];
    for (int i = 0; i < 60; i++) t[i] = (int32_t)((i * 37 + 11) % NV);
    if (!cm || skv_cm_prime(cm, t, 60)) abort();
    skv_cm_snap_id id = {skv_cm_model_check(vocab(), g_rev), 0x5eed0000u + 60, 60};
    size_t cap = skv_cm_snap_bound(cm), len = 0;
    uint8_t *b = malloc(cap);
    if (!b || skv_cm_snap_write_version(cm, &id, SKV_CM_SNAP_RAW, b, cap, &len)) abort();
    char name[64];
    snprintf(name, sizeof name, g_rev == 1 ? "cmv_raw_valid" : "cmv%u_raw_valid", g_rev);
    seed(dir, name, b, len);
    uint32_t ns = rd32(b + 36), n0 = rd32(b + 96), s0 = rd32(b + 100);
    size_t hdr = 96 + (size_t)ns * 16 + 8;
    b[hdr + 4 * 1000 + 1] = 0xff; /* section 0 (slots): a count past the model's cap */
    uint64_t h = XXH3_64bits(b + hdr, (size_t)n0 * s0);
    for (int k = 0; k < 8; k++) b[104 + k] = (uint8_t)(h >> (8 * k));
    h = XXH3_64bits(b, hdr - 8);
    for (int k = 0; k < 8; k++) b[hdr - 8 + k] = (uint8_t)(h >> (8 * k));
    snprintf(name, sizeof name, g_rev == 1 ? "cmv_raw_forged" : "cmv%u_raw_forged", g_rev);
    seed(dir, name, b, len);
    free(b);
}

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    seeds_of(argv[1], "cm_v5", 0, 5, 40);
    seeds_of(argv[1], "cm_v600", 0, 600, 120);
    seeds_of(argv[1], "cmv", 1, NV, 60);
    raw_seeds(argv[1]);
    for (g_rev = 2; g_rev <= SKV_CMV_REV; g_rev++) { /* the same for each later model revision */
        char tag[16];
        snprintf(tag, sizeof tag, "cmv%u", g_rev);
        seeds_of(argv[1], tag, 1, NV, 60);
        raw_seeds(argv[1]);
    }
    return 0;
}
#endif
