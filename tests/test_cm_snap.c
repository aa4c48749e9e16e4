/* Snapshots of a primed cm model (coder/cm_snap.c, docs/coder.md 4.8) and journaled
 * copies (skv_cm_journal), issue 16. Proves: a model read back from its snapshot codes the
 * same bytes as the model it was taken from (codec cm and cmv, sparse and dense tables);
 * a damaged, truncated or re-checksummed hostile snapshot is refused or loads a state that
 * codes safely, never a crash; another dictionary or version is refused; a journaled copy
 * codes exactly like a whole copy, also past the journal's capacity; a model coding in
 * place under its undo log codes like a copy and is bit for bit its old self after the
 * undo (its snapshot bytes), with the log's bounds refused; a model whose large tables
 * are the snapshot file's pages (mapped) codes like one in memory, hostile files refused
 * and a file rewritten under the mapping coded safely; through the library,
 * skv_cm_dict_save / _load round-trip, refuse damaged files with SKV_ERR_FORMAT, and a cmvd
 * session restores bit-exact after a load, also from two threads at once (the primed model
 * is used in place by one at a time). Model: the bundled models/kjv-4m.gguf. */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "coder/cm.h"
#include "coder/cm_snap.h"
#include "coder/cm_vocab.h"
#include "container/cmv_model.h"
#include "core/util.h"
#include "engine/model.h"
#include "seqkv.h"
#include "test.h"

static uint64_t rng_state = 0x2B7E151628AED2A6u;
static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Du;
}

/* V pieces "a".."zz..." with spaces now and then; no scores. */
static skv_cm_vocab *small_vocab(uint32_t V)
{
    char (*p)[8] = malloc(V * sizeof *p);
    const char **pp = malloc(V * sizeof *pp);
    size_t *len = malloc(V * sizeof *len);
    skv_cm_vocab *vb = NULL;
    for (uint32_t i = 0; i < V; i++) {
        len[i] = 1 + i % 3;
        for (size_t k = 0; k < len[i]; k++) p[i][k] = (char)(k == 0 && i % 5 == 0 ? ' ' : 'a' + (i / (k + 1)) % 11);
        pp[i] = p[i];
    }
    if (skv_cm_vocab_create(V, pp, len, NULL, &vb)) vb = NULL;
    free(p);
    free(pp);
    free(len);
    return vb;
}

/* Text-like ids: a small working set most of the time. */
static void fill_ids(int32_t *t, size_t n, uint32_t V)
{
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)((i % 4 ? rng() % 40 : rng()) % V);
}

/* Bytes of t[nd..nd+n) coded by cm (history t). */
static size_t code(skv_cm *cm, const int32_t *t, size_t nd, size_t n, uint8_t *buf, size_t cap)
{
    skv_rangecoder_enc e;
    size_t size = 0;
    int rc = SKV_OK;
    skv_rangecoder_enc_init(&e, buf, cap);
    for (size_t i = 0; i < n && !rc; i++) rc = skv_cm_encode(cm, &e, t, nd + i);
    if (!rc) rc = skv_rangecoder_enc_finish(&e, &size);
    if (rc) test_fail_at(__FILE__, __LINE__, "coding failed: %d", rc);
    return size;
}

/* The cmv model revision the model-level tests run with (each runs for both). */
static unsigned g_rev = SKV_CMV_REV;

static skv_cm *new_model(const skv_cm_vocab *vb, uint32_t V, unsigned bits)
{
    skv_cm *cm = NULL;
    int rc = vb ? skv_cm_create_vocab(vb, g_rev, bits, &cm) : skv_cm_create(V, &cm);
    return rc ? NULL : cm;
}

/* A primed model, its snapshot, and a model read back from it code the same bytes. */
static void snapshot_codes_the_same(const skv_cm_vocab *vb, uint32_t V, unsigned bits, size_t nd)
{
    size_t n = 600, cap = skv_cm_bound(n, V), len = 0;
    int32_t *t = malloc((nd + n) * sizeof *t);
    uint8_t *a = malloc(cap), *b = malloc(cap);
    skv_cm *p = new_model(vb, V, bits), *q = new_model(vb, V, bits);
    skv_cm_snap_id id = {vb ? vb->check : 0, 0x1234567890ABCDEFull, (uint32_t)nd};
    fill_ids(t, nd + n, V);
    CHECK(p && q);
    CHECK_EQ_INT(skv_cm_prime(p, t, nd), SKV_OK);
    size_t bound = skv_cm_snap_bound(p);
    uint8_t *snap = malloc(bound);
    CHECK_EQ_INT(skv_cm_snap_write(p, &id, snap, bound, &len), SKV_OK);
    CHECK_EQ_INT(skv_cm_snap_write(p, &id, snap, len - 1, &(size_t){0}), SKV_ERR_RANGE);
    CHECK_EQ_INT(skv_cm_snap_read(q, &id, snap, len), SKV_OK);
    size_t sa = code(p, t, nd, n, a, cap), sb = code(q, t, nd, n, b, cap);
    CHECK_MSG(sa == sb && !memcmp(a, b, sa), "V %u, dict %zu: %zu vs %zu bytes", V, nd, sa, sb);
    printf("# V %u, slot bits %u, dictionary %zu ids: snapshot %zu bytes (bound %zu)\n", V, bits, nd, len, bound);
    free(snap);
    free(t);
    free(a);
    free(b);
    skv_cm_free(p);
    skv_cm_free(q);
}

/* A snapshot read into a blank model (skv_cm_create_blank: the reader writes the reset
 * values of the gaps itself) gives the same state as one read into a reset model: the
 * same snapshot bytes back, the same coded bytes; a damaged one leaves it reset. The
 * blank model is allocated right after a primed one is freed, so its tables likely reuse
 * that memory (not zero pages): a gap left unwritten would show. */
static void blank_reads_the_same(const skv_cm_vocab *vb, unsigned bits, size_t nd)
{
    uint32_t V = vb->V;
    size_t n = 400, cap = skv_cm_bound(n, V), la = 0, lb = 0, lr = 0;
    int32_t *t = malloc((nd + n) * sizeof *t);
    uint8_t *a = malloc(cap), *b = malloc(cap);
    skv_cm *p = new_model(vb, V, bits), *junk = new_model(vb, V, bits), *q = NULL, *r = new_model(vb, V, bits);
    skv_cm_snap_id id = {vb->check, 99, (uint32_t)nd};
    fill_ids(t, nd + n, V);
    CHECK(t && a && b && p && junk && r);
    CHECK_EQ_INT(skv_cm_prime(p, t, nd), SKV_OK);
    CHECK_EQ_INT(skv_cm_prime(junk, t + n, nd), SKV_OK);
    size_t bound = skv_cm_snap_bound(p);
    uint8_t *sa = malloc(bound), *sb = malloc(bound), *sr = malloc(bound);
    CHECK(sa && sb && sr);
    CHECK_EQ_INT(skv_cm_snap_write(p, &id, sa, bound, &la), SKV_OK);
    skv_cm_free(junk);
    CHECK_EQ_INT(skv_cm_create_blank(vb, g_rev, bits, &q), SKV_OK);
    CHECK_EQ_INT(skv_cm_fresh(q), 2);
    /* sizing the snapshot first (what the library's loaders do) keeps the model blank: it
     * used to mark it written, and the reader then reset all its tables before loading */
    CHECK(skv_cm_snap_bound(q) == bound);
    CHECK_EQ_INT(skv_cm_fresh(q), 2);
    CHECK_EQ_INT(skv_cm_snap_read(q, &id, sa, la), SKV_OK);
    CHECK_EQ_INT(skv_cm_snap_write(q, &id, sb, bound, &lb), SKV_OK);
    CHECK_MSG(la == lb && !memcmp(sa, sb, la), "V %u: snapshot of the blank-read model differs", V);
    size_t ca = code(p, t, nd, n, a, cap), cb = code(q, t, nd, n, b, cap);
    CHECK_MSG(ca == cb && !memcmp(a, b, ca), "V %u: %zu vs %zu bytes", V, ca, cb);
    skv_cm_free(q);
    q = NULL;
    sa[la / 2] ^= 0x10; /* damaged: refused, and the blank model is left reset */
    CHECK_EQ_INT(skv_cm_create_blank(vb, g_rev, bits, &q), SKV_OK);
    CHECK_EQ_INT(skv_cm_snap_read(q, &id, sa, la), SKV_ERR_FORMAT);
    CHECK_EQ_INT(skv_cm_fresh(q), 1);
    CHECK_EQ_INT(skv_cm_snap_write(q, &id, sb, bound, &lb), SKV_OK);
    CHECK_EQ_INT(skv_cm_snap_write(r, &id, sr, bound, &lr), SKV_OK);
    CHECK_MSG(lb == lr && !memcmp(sb, sr, lr), "V %u: a refused snapshot left the blank model not reset", V);
    free(sa), free(sb), free(sr), free(t), free(a), free(b);
    skv_cm_free(p);
    skv_cm_free(q);
    skv_cm_free(r);
}

/* skv_cm_snap_write compares each element with skv_cm_reset_pattern (it made a reset copy
 * of the model before): the pattern is exactly what skv_cm_reset writes, section by
 * section, for both kinds; and writing a snapshot leaves a fresh model fresh. */
static void reset_pattern_is_the_reset(void)
{
    skv_cm_vocab *vb = small_vocab(300);
    skv_cm *ms[2] = {NULL, NULL};
    CHECK(vb);
    CHECK_EQ_INT(skv_cm_create(600, &ms[0]), SKV_OK);
    CHECK_EQ_INT(skv_cm_create_vocab(vb, g_rev, SKV_CMV_SLOT_BITS_MIN, &ms[1]), SKV_OK);
    for (int k = 0; k < 2; k++) {
        skv_cm_section sec[SKV_CM_MAX_SECTIONS];
        uint32_t pat[33];
        CHECK_EQ_INT(skv_cm_fresh(ms[k]), 1);
        int ns = skv_cm_section_shapes(ms[k], sec);
        CHECK(ns > 3);
        for (int j = 0; j < ns; j++) {
            size_t period = skv_cm_reset_pattern(sec[j].kind, pat), bad = 0;
            for (size_t i = 0; i < sec[j].n; i++) {
                uint32_t v = sec[j].size == 2 ? ((const uint16_t *)sec[j].p)[i] : ((const uint32_t *)sec[j].p)[i];
                bad += v != pat[i % period];
            }
            CHECK_MSG(!bad, "model %d section %d (kind %u): %zu elements differ from the pattern", k, j, sec[j].kind, bad);
        }
        size_t cap = skv_cm_snap_bound(ms[k]), len = 0;
        uint8_t *b = malloc(cap);
        skv_cm_snap_id id = {k ? vb->check : 0, 1, 1};
        CHECK(b);
        CHECK_EQ_INT(skv_cm_snap_write(ms[k], &id, b, cap, &len), SKV_OK);
        free(b);
        CHECK_EQ_INT(skv_cm_fresh(ms[k]), 1);
    }
    skv_cm_free(ms[0]);
    skv_cm_free(ms[1]);
    skv_cm_vocab_free(vb);
}

static void blank_models(void)
{
    skv_cm_vocab *vb = small_vocab(300), *vb2 = small_vocab(4096);
    CHECK(vb && vb2);
    blank_reads_the_same(vb, SKV_CMV_SLOT_BITS_MIN, 2000);
    blank_reads_the_same(vb2, SKV_CMV_DICT_SLOT_BITS, 20000);
    CHECK_EQ_INT(skv_cm_create_blank(NULL, g_rev, SKV_CMV_DICT_SLOT_BITS, &(skv_cm *){NULL}), SKV_ERR_INVALID_ARG);
    skv_cm_vocab_free(vb);
    skv_cm_vocab_free(vb2);
}

static void roundtrip_codes_the_same(void)
{
    skv_cm_vocab *vb = small_vocab(300), *vb2 = small_vocab(4096);
    CHECK(vb && vb2);
    snapshot_codes_the_same(NULL, 4096, SKV_CM_SLOT_BITS, 3000);
    snapshot_codes_the_same(NULL, 5, SKV_CM_SLOT_BITS, 1);
    snapshot_codes_the_same(vb, 300, SKV_CMV_SLOT_BITS_MIN, 2000);
    snapshot_codes_the_same(vb2, 4096, SKV_CMV_DICT_SLOT_BITS, 20000);
    skv_cm_vocab_free(vb);
    skv_cm_vocab_free(vb2);
}

/* A hostile snapshot of a small model: every outcome is a status; a loaded state codes. */
static void hostile_snapshots(void)
{
    skv_cm_vocab *vb = small_vocab(300);
    skv_cm *p = new_model(vb, 300, SKV_CMV_SLOT_BITS_MIN), *q = new_model(vb, 300, SKV_CMV_SLOT_BITS_MIN);
    int32_t t[1400];
    uint8_t out[4096];
    size_t len = 0;
    skv_cm_snap_id id = {vb ? vb->check : 0, 77, 1000}, other = id;
    fill_ids(t, 1400, 300);
    CHECK(p && q);
    CHECK_EQ_INT(skv_cm_prime(p, t, 1000), SKV_OK);
    size_t bound = skv_cm_snap_bound(p);
    uint8_t *snap = malloc(bound), *bad = malloc(bound);
    CHECK_EQ_INT(skv_cm_snap_write(p, &id, snap, bound, &len), SKV_OK);
    other.dict_id = 78;
    CHECK_EQ_INT(skv_cm_snap_read(q, &other, snap, len), SKV_ERR_MISMATCH);
    other = id, other.dict_n = 999;
    CHECK_EQ_INT(skv_cm_snap_read(q, &other, snap, len), SKV_ERR_MISMATCH);
    for (size_t k = 0; k < len && !test_cur_failed; k += 1 + k / 64) /* truncated */
        CHECK_EQ_INT(skv_cm_snap_read(q, &id, snap, k), SKV_ERR_FORMAT);
    for (int r = 0; r < 400 && !test_cur_failed; r++) { /* a flipped byte: the checksum */
        memcpy(bad, snap, len);
        bad[rng() % len] ^= (uint8_t)(1 + rng() % 255);
        CHECK_EQ_INT(skv_cm_snap_read(q, &id, bad, len), SKV_ERR_FORMAT);
    }
    memcpy(bad, snap, len);
    skv_wr32(bad + 4, 3);
    skv_wr64(bad + len - 8, XXH3_64bits(bad, len - 8));
    CHECK_EQ_INT(skv_cm_snap_read(q, &id, bad, len), SKV_ERR_UNSUPPORTED);
    for (int r = 0; r < 600 && !test_cur_failed; r++) { /* forged: a valid checksum over bad bytes */
        memcpy(bad, snap, len);
        size_t at = r < 200 ? rng() % (len < 200 ? len : 200) : rng() % (len - 8);
        bad[at] ^= (uint8_t)(1 + rng() % 255);
        if (r % 3 == 0) skv_wr32(bad + (rng() % (len - 12)) / 4 * 4, (uint32_t)rng());
        skv_wr64(bad + len - 8, XXH3_64bits(bad, len - 8));
        int rc = skv_cm_snap_read(q, &id, bad, len);
        CHECK_MSG(rc == SKV_OK || rc == SKV_ERR_FORMAT || rc == SKV_ERR_MISMATCH || rc == SKV_ERR_UNSUPPORTED,
                  "status %d", rc);
        if (rc == SKV_OK) code(q, t, 1000, 400, out, sizeof out); /* must not crash (ASan) */
    }
    free(snap);
    free(bad);
    skv_cm_free(p);
    skv_cm_free(q);
    skv_cm_vocab_free(vb);
}

/* Status of skv_cm_snap_read_fd_window over bytes b[0..len) written to a file, the reader
 * told the file holds `size` bytes. */
static int read_via_file(skv_cm *q, const skv_cm_snap_id *id, const uint8_t *b, size_t len, uint64_t size,
                         size_t window)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/seqkv_test_snapfd_%d", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, len, f) != len || fclose(f)) {
        test_fail_at(__FILE__, __LINE__, "cannot write %s", path);
        return -100;
    }
    FILE *r = fopen(path, "rb");
    int rc = r ? skv_cm_snap_read_fd_window(q, id, fileno(r), size, window) : -100;
    if (r) fclose(r);
    remove(path);
    return rc;
}

static uint8_t *state_of(skv_cm *cm, size_t *len);

/* The file reader (a small window refilled by read(2), the checksum verified at the end)
 * gives exactly the memory reader's state, for windows from 64 bytes (every run straddles
 * refills) up; and its status on damaged, truncated, lengthened, forged and foreign files
 * is the memory reader's, with the model left reset on every refusal (skv_cm_fresh). */
static void file_reader_is_the_memory_reader(void)
{
    skv_cm_vocab *vb = small_vocab(300);
    skv_cm *p = new_model(vb, 300, SKV_CMV_SLOT_BITS_MIN), *q = new_model(vb, 300, SKV_CMV_SLOT_BITS_MIN);
    int32_t t[1400];
    size_t len = 0, lp = 0, lq = 0;
    skv_cm_snap_id id = {vb ? vb->check : 0, 77, 1000}, other = id;
    fill_ids(t, 1400, 300);
    CHECK(p && q);
    CHECK_EQ_INT(skv_cm_prime(p, t, 1000), SKV_OK);
    size_t bound = skv_cm_snap_bound(p);
    uint8_t *snap = malloc(bound + 1), *bad = malloc(bound + 1), *sp = state_of(p, &lp);
    CHECK(snap && bad && sp);
    CHECK_EQ_INT(skv_cm_snap_write(p, &id, snap, bound, &len), SKV_OK);
    size_t windows[] = {64, 100, 4093, (size_t)1 << 18};
    for (int w = 0; w < 4 && !test_cur_failed; w++) {
        CHECK_EQ_INT(read_via_file(q, &id, snap, len, len, windows[w]), SKV_OK);
        uint8_t *sq = state_of(q, &lq);
        CHECK_MSG(lq == lp && !memcmp(sq, sp, lp), "window %zu: the state read differs", windows[w]);
        free(sq);
    }
    other.dict_id = 78;
    CHECK_EQ_INT(read_via_file(q, &other, snap, len, len, 100), SKV_ERR_MISMATCH);
    CHECK_EQ_INT(read_via_file(q, &id, snap, len, len + 1, 100), SKV_ERR_FORMAT);  /* shorter than said */
    memcpy(bad, snap, len), bad[len] = 0;
    CHECK_EQ_INT(read_via_file(q, &id, bad, len + 1, len + 1, 100), SKV_ERR_FORMAT); /* a byte more */
    for (size_t k = 0; k < len && !test_cur_failed; k += 1 + k / 16) /* truncated */
        CHECK_EQ_INT(read_via_file(q, &id, snap, k, k, 64 + k % 200), SKV_ERR_FORMAT);
    for (int i = 0; i < 300 && !test_cur_failed; i++) { /* a flipped byte, or forged: the same status */
        memcpy(bad, snap, len);
        size_t at = i < 100 ? rng() % (len < 120 ? len : 120) : rng() % len;
        bad[at] ^= (uint8_t)(1 + rng() % 255);
        if (i % 2) skv_wr64(bad + len - 8, XXH3_64bits(bad, len - 8));
        int mem = skv_cm_snap_read(q, &id, bad, len), fil = read_via_file(q, &id, bad, len, len, 64 + rng() % 300);
        CHECK_MSG(mem == fil, "byte %zu%s: memory reader %d, file reader %d", at, i % 2 ? " (forged)" : "", mem, fil);
        CHECK_MSG(fil == SKV_OK || skv_cm_fresh(q) == 1, "byte %zu: a refused file left the model not reset", at);
    }
    CHECK_EQ_INT(skv_cm_snap_read_fd(q, &id, -1, len), SKV_ERR_INVALID_ARG);
    free(snap), free(bad), free(sp);
    skv_cm_free(p);
    skv_cm_free(q);
    skv_cm_vocab_free(vb);
}

/* Version 2 (SKV_CM_SNAP_RAW): the header with its own checksum and one per section. */
#define RAW_NS 36
#define RAW_FIXED 96

/* Recomputes every checksum of a version 2 snapshot b[0..len) after a forgery. */
static void raw_reforge(uint8_t *b, size_t len)
{
    uint32_t ns = skv_rd32(b + RAW_NS);
    size_t hdr = RAW_FIXED + (size_t)ns * 16 + 8, at = hdr;
    for (uint32_t k = 0; k < ns && hdr <= len; k++) {
        uint8_t *e = b + RAW_FIXED + (size_t)k * 16;
        size_t n = (size_t)skv_rd32(e) * skv_rd32(e + 4);
        if (n > len - at) return;
        skv_wr64(e + 8, XXH3_64bits(b + at, n));
        at += n;
    }
    if (hdr <= len) skv_wr64(b + hdr - 8, XXH3_64bits(b, hdr - 8));
}

/* One model kind through version 2: the state read back (from memory and from a file, into
 * a blank and into a written model) is the state written and codes the same bytes;
 * truncated, lengthened, flipped, forged and foreign snapshots are refused with the status
 * of their fault and leave the model reset. */
static void raw_kind(const skv_cm_vocab *vb, uint32_t V, unsigned bits, size_t nd)
{
    size_t n = 400, cap = skv_cm_bound(n, V), len = 0, l1 = 0, lp = 0, lq = 0;
    int32_t *t = malloc((nd + n) * sizeof *t);
    uint8_t *a = malloc(cap), *b = malloc(cap);
    skv_cm *p = new_model(vb, V, bits), *q = new_model(vb, V, bits), *blank = NULL;
    skv_cm_snap_id id = {vb ? vb->check : 0, 0xABCDEF, (uint32_t)nd}, other = id;
    fill_ids(t, nd + n, V);
    CHECK(t && a && b && p && q);
    CHECK_EQ_INT(skv_cm_prime(p, t, nd), SKV_OK);
    size_t bound = skv_cm_snap_bound(p);
    uint8_t *snap = malloc(bound + 1), *bad = malloc(bound + 1), *v1 = malloc(bound), *sp = state_of(p, &lp);
    CHECK(snap && bad && v1 && sp);
    CHECK_EQ_INT(skv_cm_snap_write_version(p, &id, 9, snap, bound, &len), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_cm_snap_write_version(p, &id, SKV_CM_SNAP_RAW, snap, bound, &len), SKV_OK);
    CHECK_EQ_INT(skv_cm_snap_write_version(p, &id, SKV_CM_SNAP_RAW, snap, len - 1, &l1), SKV_ERR_RANGE);
    CHECK_EQ_INT(skv_cm_snap_write(p, &id, v1, bound, &l1), SKV_OK);
    CHECK_EQ_INT((int)skv_rd32(snap + 4), SKV_CM_SNAP_RAW);
    printf("# V %u, slot bits %u, dictionary %zu ids: version 2 %zu bytes, version 1 %zu\n", V, bits, nd, len, l1);
    if (vb) CHECK_EQ_INT(skv_cm_create_blank(vb, g_rev, bits, &blank), SKV_OK);
    skv_cm *into[3] = {q, blank, q};
    for (int k = 0; k < 3 && !test_cur_failed; k++) {
        if (!into[k]) continue;
        /* k 2: q has coded since its first read (a written model: read over it) */
        CHECK_EQ_INT(k == 1 ? read_via_file(into[k], &id, snap, len, len, 64) : skv_cm_snap_read(into[k], &id, snap, len),
                     SKV_OK);
        uint8_t *sq = state_of(into[k], &lq);
        CHECK_MSG(lq == lp && !memcmp(sq, sp, lp), "V %u, reader %d: the state read differs", V, k);
        free(sq);
        size_t sa = code(p, t, nd, n, a, cap), sb = code(into[k], t, nd, n, b, cap);
        CHECK_MSG(sa == sb && !memcmp(a, b, sa), "V %u, reader %d: %zu vs %zu bytes", V, k, sa, sb);
        CHECK_EQ_INT(skv_cm_snap_read(p, &id, v1, l1), SKV_OK); /* p back to the primed state */
    }
    CHECK_EQ_INT(read_via_file(q, &id, snap, len, len, 100), SKV_OK); /* from the file, into a written model */
    other.dict_id ^= 1;
    CHECK_EQ_INT(skv_cm_snap_read(q, &other, snap, len), SKV_ERR_MISMATCH);
    CHECK_EQ_INT(read_via_file(q, &other, snap, len, len, 100), SKV_ERR_MISMATCH);
    CHECK_EQ_INT(skv_cm_fresh(q), 1);
    CHECK_EQ_INT(read_via_file(q, &id, snap, len, len + 1, 100), SKV_ERR_FORMAT); /* shorter than said */
    memcpy(bad, snap, len), bad[len] = 0;
    CHECK_EQ_INT(skv_cm_snap_read(q, &id, bad, len + 1), SKV_ERR_FORMAT); /* a byte more */
    CHECK_EQ_INT(read_via_file(q, &id, bad, len + 1, len + 1, 100), SKV_ERR_FORMAT);
    for (size_t k = 0; k < len && !test_cur_failed; k += 1 + k / 4) /* truncated */
        CHECK_EQ_INT(skv_cm_snap_read(q, &id, snap, k), SKV_ERR_FORMAT);
    CHECK_EQ_INT(read_via_file(q, &id, snap, len / 2, len / 2, 100), SKV_ERR_FORMAT);
    memcpy(bad, snap, len);
    skv_wr32(bad + 4, 3); /* a version this build does not know is checked as version 1 (one
                           * checksum over every byte): under version 2's checksums, damaged */
    raw_reforge(bad, len);
    CHECK_EQ_INT(skv_cm_snap_read(q, &id, bad, len), SKV_ERR_FORMAT);
    uint32_t ns = skv_rd32(snap + RAW_NS);
    size_t hdr = RAW_FIXED + (size_t)ns * 16 + 8;
    for (int r = 0; r < 60 && !test_cur_failed; r++) { /* flipped: the checksums, in the header or a section */
        memcpy(bad, snap, len);
        size_t at = r < 30 ? rng() % hdr : hdr + rng() % (len - hdr);
        bad[at] ^= (uint8_t)(1 + rng() % 255);
        CHECK_MSG(skv_cm_snap_read(q, &id, bad, len) == SKV_ERR_FORMAT, "byte %zu flipped: not refused", at);
        if (r % 10 == 0) CHECK_EQ_INT(read_via_file(q, &id, bad, len, len, 100), SKV_ERR_FORMAT);
        CHECK_EQ_INT(skv_cm_fresh(q), 1);
    }
    /* forged: an element out of range in each 4-byte section, every checksum made right */
    skv_cm_section sec[SKV_CM_MAX_SECTIONS];
    int nsec = skv_cm_section_shapes(p, sec);
    CHECK_EQ_INT(nsec, (int)ns);
    size_t at = hdr;
    for (int k = 0; k < nsec && !test_cur_failed; k++) {
        size_t bytes = sec[k].n * sec[k].size;
        if (sec[k].size == 4 && sec[k].kind != SKV_CM_SEC_ANY) {
            memcpy(bad, snap, len);
            skv_wr32(bad + at + (rng() % sec[k].n) * 4, sec[k].kind == SKV_CM_SEC_POS ? 0xFFFFFFF0u : 0x7FFFFFFFu);
            raw_reforge(bad, len);
            CHECK_MSG(skv_cm_snap_read(q, &id, bad, len) == SKV_ERR_FORMAT, "section %d: a forged element loaded", k);
            CHECK_MSG(read_via_file(q, &id, bad, len, len, 100) == SKV_ERR_FORMAT, "section %d: forged, from a file", k);
            CHECK_EQ_INT(skv_cm_fresh(q), 1);
        }
        at += bytes;
    }
    CHECK(at == len);
    memcpy(bad, snap, len); /* a section entry that does not match the model's shape */
    skv_wr32(bad + RAW_FIXED, skv_rd32(bad + RAW_FIXED) - 1);
    raw_reforge(bad, len);
    CHECK_EQ_INT(skv_cm_snap_read(q, &id, bad, len), SKV_ERR_FORMAT);
    memcpy(bad, snap, len); /* more sections than a model has */
    skv_wr32(bad + RAW_NS, SKV_CM_MAX_SECTIONS + 1);
    CHECK_EQ_INT(skv_cm_snap_read(q, &id, bad, len), SKV_ERR_FORMAT);
    free(snap), free(bad), free(v1), free(sp), free(t), free(a), free(b);
    skv_cm_free(p);
    skv_cm_free(q);
    skv_cm_free(blank);
}

static void raw_snapshots(void)
{
    skv_cm_vocab *vb = small_vocab(300), *vb2 = small_vocab(4096);
    CHECK(vb && vb2);
    raw_kind(NULL, 600, SKV_CM_SLOT_BITS, 1500);
    raw_kind(vb, 300, SKV_CMV_SLOT_BITS_MIN, 2000);
    raw_kind(vb2, 4096, SKV_CMV_DICT_SLOT_BITS, 20000);
    skv_cm_vocab_free(vb);
    skv_cm_vocab_free(vb2);
}

/* Segments coded after journaled copies give the bytes of whole copies: short ones, one
 * past the journal's capacity, and after a copy from another source. */
static void journal_copies_code_the_same(void)
{
    skv_cm_vocab *vb = small_vocab(4096);
    size_t nd = 3000, seg[] = {500, 800, 1, 12000, 700, 300};
    size_t cap = skv_cm_bound(12000, 4096);
    int32_t *t = malloc((nd + 12000) * sizeof *t);
    uint8_t *a = malloc(cap), *b = malloc(cap);
    skv_cm *p = new_model(vb, 4096, SKV_CMV_DICT_SLOT_BITS), *p2 = NULL, *j = NULL, *f = NULL;
    CHECK(p);
    fill_ids(t, nd + 12000, 4096);
    CHECK_EQ_INT(skv_cm_prime(p, t, nd), SKV_OK);
    CHECK_EQ_INT(skv_cm_clone(p, &p2), SKV_OK);
    CHECK_EQ_INT(skv_cm_prime(p2, t, nd + 50), SKV_OK); /* another source */
    CHECK_EQ_INT(skv_cm_clone(p, &j), SKV_OK);
    CHECK_EQ_INT(skv_cm_journal(j, p), SKV_OK);
    CHECK_EQ_INT(skv_cm_journal(j, j), SKV_ERR_INVALID_ARG);
    for (size_t s = 0; s < sizeof seg / sizeof *seg && !test_cur_failed; s++) {
        if (s == 4) {
            CHECK_EQ_INT(skv_cm_copy(j, p2), SKV_OK);
            code(j, t, nd + 50, 100, a, cap);
        }
        for (size_t i = 0; i < seg[s]; i++) t[nd + i] = (int32_t)((rng() % 7 ? rng() % 60 : rng()) % 4096);
        if (s > 0) CHECK_EQ_INT(skv_cm_copy(j, p), SKV_OK);
        CHECK_EQ_INT(skv_cm_clone(p, &f), SKV_OK);
        size_t sa = code(j, t, nd, seg[s], a, cap), sb = code(f, t, nd, seg[s], b, cap);
        CHECK_MSG(sa == sb && !memcmp(a, b, sa), "segment %zu (%zu ids): %zu vs %zu bytes", s, seg[s], sa, sb);
        skv_cm_free(f);
        f = NULL;
    }
    free(t);
    free(a);
    free(b);
    skv_cm_free(p);
    skv_cm_free(p2);
    skv_cm_free(j);
    skv_cm_vocab_free(vb);
}

/* The snapshot bytes of cm (*len), for comparing whole states. */
static uint8_t *state_of(skv_cm *cm, size_t *len)
{
    skv_cm_snap_id id = {0, 1, (uint32_t)skv_cm_n_coded(cm)};
    size_t cap = skv_cm_snap_bound(cm);
    uint8_t *b = malloc(cap);
    if (!b || skv_cm_snap_write(cm, &id, b, cap, len)) test_fail_at(__FILE__, __LINE__, "snapshot failed");
    return b;
}

/* Segments coded in place under the undo log give the bytes of a copy, and the undo puts
 * the whole state back; the log's bounds are refused. */
static void undo_codes_the_same(void)
{
    skv_cm_vocab *vb = small_vocab(4096);
    size_t nd = 3000, seg[] = {500, 1, 800, 3000}, cap = skv_cm_bound(3000, 4096), l0 = 0, l1 = 0;
    int32_t *t = malloc((nd + 3001) * sizeof *t);
    uint8_t *a = malloc(cap), *b = malloc(cap);
    skv_cm *p = new_model(vb, 4096, SKV_CMV_DICT_SLOT_BITS), *f = NULL;
    CHECK(p);
    fill_ids(t, nd + 3001, 4096);
    CHECK_EQ_INT(skv_cm_prime(p, t, nd), SKV_OK);
    uint8_t *s0 = state_of(p, &l0);
    for (size_t s = 0; s < sizeof seg / sizeof *seg && !test_cur_failed; s++) {
        for (size_t i = 0; i < seg[s]; i++) t[nd + i] = (int32_t)((rng() % 7 ? rng() % 60 : rng()) % 4096);
        CHECK_EQ_INT(skv_cm_clone(p, &f), SKV_OK);
        CHECK_EQ_INT(skv_cm_undo_begin(p, seg[s]), SKV_OK);
        CHECK_EQ_INT(skv_cm_undo_begin(p, seg[s]), SKV_ERR_INVALID_ARG);
        CHECK_EQ_INT(skv_cm_prime(p, t, nd + 1), SKV_ERR_INVALID_ARG);
        size_t sa = code(p, t, nd, seg[s], a, cap), sb = code(f, t, nd, seg[s], b, cap);
        CHECK_MSG(sa == sb && !memcmp(a, b, sa), "segment %zu (%zu ids): %zu vs %zu bytes", s, seg[s], sa, sb);
        skv_rangecoder_enc e;
        skv_rangecoder_enc_init(&e, a, cap);
        CHECK_EQ_INT(skv_cm_encode(p, &e, t, nd + seg[s]), SKV_ERR_INVALID_ARG); /* one id past the bound */
        skv_cm_undo(p);
        uint8_t *s1 = state_of(p, &l1);
        CHECK_MSG(l1 == l0 && !memcmp(s0, s1, l0), "segment %zu: the state differs after the undo", s);
        free(s1);
        skv_cm_free(f);
        f = NULL;
    }
    CHECK_EQ_INT(skv_cm_undo_begin(p, (size_t)1 << 20), SKV_ERR_RANGE);
    free(s0);
    free(t);
    free(a);
    free(b);
    skv_cm_free(p);
    skv_cm_vocab_free(vb);
}

/* ---- mapped tables (skv_cm_snap_map_fd, skv_cm_map_tables) ----------------------- */

/* bytes b[0..len) as the file path; its open descriptor (at offset 0), or -1. */
static int file_of(const char *path, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, len, f) != len || fclose(f)) {
        test_fail_at(__FILE__, __LINE__, "cannot write %s", path);
        return -1;
    }
    return open(path, O_RDWR);
}

/* Status of mapping bytes b[0..len) of a file into a new blank mapped model (*out, or NULL
 * and freed when refused). */
static int map_bytes(const skv_cm_vocab *vb, unsigned bits, const skv_cm_snap_id *id, const uint8_t *b, size_t len,
                     uint64_t size, skv_cm **out)
{
    char path[64];
    skv_cm *q = NULL;
    snprintf(path, sizeof path, "/tmp/seqkv_test_snapmap_%d", (int)getpid());
    int fd = file_of(path, b, len), rc = -100;
    if (fd >= 0 && skv_cm_create_blank_mapped(vb, g_rev, bits, &q) == SKV_OK) rc = skv_cm_snap_map_fd(q, id, fd, size);
    if (fd >= 0) close(fd); /* the mapping outlives the descriptor and the name */
    remove(path);
    if (rc != SKV_OK) skv_cm_free(q), q = NULL;
    if (out) *out = q;
    else skv_cm_free(q);
    return rc;
}

/* A model whose slot tables, mpos and APM are the snapshot file's pages, read-only, codes
 * in place under its undo log exactly as a copy of the primed model does (segments of 1 to
 * 3,000 ids, encoded and decoded), and after each undo its state is the snapshot's again;
 * outside a log it refuses to code, prime or be copied into, while a clone of it codes like
 * the primed model; too long a segment for the overlay is SKV_ERR_RANGE; a reset leaves it
 * unusable. Refused: a damaged or forged file, a truncated one, version 1 (UNSUPPORTED: the
 * caller reads it instead), a model with tables of its own. A file rewritten in place
 * under the mapping (slot counts and match positions no model writes) is coded without a
 * read outside a table or the history (ASan/UBSan and Valgrind watch that). */
static void mapped_codes_the_same(void)
{
    skv_cm_vocab *vb = small_vocab(4096);
    const unsigned bits = SKV_CMV_DICT_SLOT_BITS;
    size_t nd = 3000, seg[] = {500, 1, 800, 3000}, cap = skv_cm_bound(3000, 4096), len = 0, l0 = 0, l1 = 0;
    int32_t *t = malloc((nd + 3001) * sizeof *t), *back = malloc((nd + 3001) * sizeof *back);
    uint8_t *a = malloc(cap), *b = malloc(cap);
    skv_cm *p = new_model(vb, 4096, bits), *q = NULL, *f = NULL;
    skv_cm_snap_id id = {vb ? vb->check : 0, 0x5EED, (uint32_t)nd};
    CHECK(vb && t && back && a && b && p);
    fill_ids(t, nd + 3001, 4096);
    CHECK_EQ_INT(skv_cm_prime(p, t, nd), SKV_OK);
    size_t bound = skv_cm_snap_bound(p);
    uint8_t *snap = malloc(bound), *bad = malloc(bound), *s0 = state_of(p, &l0);
    CHECK(snap && bad && s0);
    CHECK_EQ_INT(skv_cm_snap_write_version(p, &id, SKV_CM_SNAP_RAW, snap, bound, &len), SKV_OK);
    CHECK_EQ_INT(map_bytes(vb, bits, &id, snap, len, len, &q), SKV_OK);
    CHECK(q && skv_cm_mapped(q) && !skv_cm_mapped(p));
    if (!q) goto out;
    uint8_t *sq = state_of(q, &l1); /* the snapshot writer reads the mapped tables */
    CHECK_MSG(l1 == l0 && !memcmp(sq, s0, l0), "the mapped model's state is not the primed model's");
    free(sq);
    for (size_t s = 0; s < sizeof seg / sizeof *seg && !test_cur_failed; s++) {
        for (size_t i = 0; i < seg[s]; i++) t[nd + i] = (int32_t)((rng() % 7 ? rng() % 60 : rng()) % 4096);
        CHECK_EQ_INT(skv_cm_clone(p, &f), SKV_OK);
        CHECK_EQ_INT(skv_cm_undo_begin(q, seg[s]), SKV_OK);
        CHECK_EQ_INT(skv_cm_prime(q, t, nd + 1), SKV_ERR_INVALID_ARG);
        CHECK_EQ_INT(skv_cm_copy(q, p), SKV_ERR_INVALID_ARG);
        CHECK_EQ_INT(skv_cm_clone(q, &(skv_cm *){NULL}), SKV_ERR_INVALID_ARG); /* mid-log: not all in the tables */
        size_t sa = code(q, t, nd, seg[s], a, cap), sb = code(f, t, nd, seg[s], b, cap);
        CHECK_MSG(sa == sb && !memcmp(a, b, sa), "segment %zu (%zu ids): %zu vs %zu bytes", s, seg[s], sa, sb);
        skv_cm_undo(q);
        memcpy(back, t, nd * sizeof *back); /* decode the segment back in place */
        skv_rangecoder_dec d;
        CHECK_EQ_INT(skv_cm_undo_begin(q, seg[s]), SKV_OK);
        CHECK_EQ_INT(skv_rangecoder_dec_init(&d, a, sa), SKV_OK);
        for (size_t i = 0; i < seg[s] && !test_cur_failed; i++) CHECK_EQ_INT(skv_cm_decode(q, &d, back, nd + i), SKV_OK);
        CHECK_MSG(!memcmp(back + nd, t + nd, seg[s] * sizeof *t), "segment %zu decoded other ids", s);
        skv_cm_undo(q);
        sq = state_of(q, &l1);
        CHECK_MSG(l1 == l0 && !memcmp(sq, s0, l0), "segment %zu: the state differs after the undo", s);
        free(sq);
        skv_cm_free(f);
        f = NULL;
    }
    skv_rangecoder_enc e;
    skv_rangecoder_enc_init(&e, a, cap);
    CHECK_EQ_INT(skv_cm_encode(q, &e, t, nd), SKV_ERR_INVALID_ARG); /* outside a log: read-only */
    CHECK_EQ_INT(skv_cm_prime(q, t, nd + 1), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_cm_copy(q, p), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_cm_clone(q, &f), SKV_OK); /* a copy in memory of the file's state */
    size_t sa = code(f, t, nd, 500, a, cap);
    skv_cm_free(f);
    CHECK_EQ_INT(skv_cm_clone(p, &f), SKV_OK);
    size_t sb = code(f, t, nd, 500, b, cap);
    CHECK_MSG(sa == sb && !memcmp(a, b, sa), "a clone of the mapped model codes otherwise");
    skv_cm_free(f);
    CHECK_EQ_INT(skv_cm_undo_begin(q, 12000), SKV_ERR_RANGE); /* the overlay would pass 2^21 cells */
    CHECK_EQ_INT(skv_cm_map_tables(q, snap, len, (size_t[SKV_CM_MAX_SECTIONS]){0}), SKV_ERR_INVALID_ARG);
    skv_cm_reset(q); /* its tables are the file's: unusable after */
    CHECK_EQ_INT(skv_cm_undo_begin(q, 10), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_cm_encode(q, &e, t, 0), SKV_ERR_INVALID_ARG);
    skv_cm_free(q);
    q = NULL;

    /* refused files */
    CHECK_EQ_INT(map_bytes(vb, bits, &id, snap, len, len + 4, NULL), SKV_ERR_FORMAT); /* shorter than said */
    CHECK_EQ_INT(map_bytes(vb, bits, &id, snap, len / 2, len / 2, NULL), SKV_ERR_FORMAT);
    CHECK_EQ_INT(map_bytes(vb, bits, &id, snap, 40, 40, NULL), SKV_ERR_FORMAT);
    for (int i = 0; i < 12 && !test_cur_failed; i++) { /* a byte flipped anywhere, a section's checksum forged */
        memcpy(bad, snap, len);
        size_t at = i < 4 ? rng() % 400 : len - 1 - rng() % (len - 400);
        bad[at] ^= (uint8_t)(1 + rng() % 255);
        int rc = map_bytes(vb, bits, &id, bad, len, len, NULL);
        CHECK_MSG(rc == SKV_ERR_FORMAT || rc == SKV_ERR_MISMATCH || rc == SKV_ERR_UNSUPPORTED,
                  "byte %zu flipped: %d", at, rc);
    }
    skv_cm_snap_id other = id;
    other.dict_id++;
    CHECK_EQ_INT(map_bytes(vb, bits, &other, snap, len, len, NULL), SKV_ERR_MISMATCH);
    size_t l1v = 0;
    CHECK_EQ_INT(skv_cm_snap_write_version(p, &id, SKV_CM_SNAP_VERSION, bad, bound, &l1v), SKV_OK);
    CHECK_EQ_INT(map_bytes(vb, bits, &id, bad, l1v, l1v, NULL), SKV_ERR_UNSUPPORTED); /* version 1: read it */
    {
        char path[64];
        skv_cm *own = NULL;
        snprintf(path, sizeof path, "/tmp/seqkv_test_snapmap2_%d", (int)getpid());
        int fd = file_of(path, snap, len);
        CHECK_EQ_INT(skv_cm_create_blank(vb, g_rev, bits, &own), SKV_OK); /* tables of its own */
        if (fd >= 0 && own) CHECK_EQ_INT(skv_cm_snap_map_fd(own, &id, fd, len), SKV_ERR_INVALID_ARG);
        skv_cm_free(own);
        if (fd >= 0) close(fd);
        remove(path);
    }

    /* the file rewritten under the mapping: every slot count past the limit, every match
     * position far past the history */
    {
        char path[64];
        snprintf(path, sizeof path, "/tmp/seqkv_test_snapmap3_%d", (int)getpid());
        int fd = file_of(path, snap, len);
        CHECK_EQ_INT(fd >= 0 && skv_cm_create_blank_mapped(vb, g_rev, bits, &q) == SKV_OK ? skv_cm_snap_map_fd(q, &id, fd, len) : -100,
                     SKV_OK);
        size_t hdr = 96 + 13 * 16 + 8, junk_len = (((size_t)8 << bits) + (1u << SKV_CM_MATCH_BITS)) * 4;
        uint8_t *junk = malloc(junk_len);
        CHECK(junk);
        for (size_t k = 0; junk && k < junk_len; k += 4) skv_wr32(junk + k, k % 8 ? 0xFFFFFFFFu : 0x7FFFFC00u | (uint32_t)k);
        CHECK(fd >= 0 && junk && pwrite(fd, junk, junk_len, (off_t)hdr) == (ssize_t)junk_len);
        if (q && !test_cur_failed) {
            CHECK_EQ_INT(skv_cm_undo_begin(q, 800), SKV_OK);
            skv_rangecoder_enc_init(&e, a, cap);
            for (size_t i = 0; i < 800; i++) CHECK_EQ_INT(skv_cm_encode(q, &e, t, nd + i), SKV_OK);
            skv_cm_undo(q);
        }
        free(junk);
        skv_cm_free(q);
        q = NULL;
        if (fd >= 0) close(fd);
        remove(path);
    }
out:
    free(snap), free(bad), free(s0);
    free(t), free(back), free(a), free(b);
    skv_cm_free(p);
    skv_cm_vocab_free(vb);
}

/* ---- through the library: skv_cm_dict_save / _load ------------------------------ */

static skv_model *g_m;
static int32_t *g_text, *g_dict;
static size_t g_text_n, g_dict_n;

static int32_t *tokenize_part(const char *path, long off, size_t max, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *text = f ? malloc(max + 1) : NULL;
    size_t len = text && !fseek(f, off, SEEK_SET) ? fread(text, 1, max, f) : 0;
    if (f) fclose(f);
    int32_t *t = len ? malloc((len + 2) * sizeof *t) : NULL;
    if (t && skv_tokenize(g_m, text, len, 1, t, len + 2, n) != SKV_OK) free(t), t = NULL;
    free(text);
    return t;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b = NULL;
    long sz = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
    if (sz > 0 && !fseek(f, 0, SEEK_SET) && (b = malloc((size_t)sz)) && fread(b, 1, (size_t)sz, f) != (size_t)sz)
        free(b), b = NULL;
    if (f) fclose(f);
    *len = sz > 0 ? (size_t)sz : 0;
    return b;
}

static void spit(const char *path, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, len, f) == len);
    if (f) fclose(f);
}

/* Encodes the text as cmvd in segments of 512 and restores every segment, verified. */
static int cmvd_session_restores(void)
{
    skv_encoder_params ep = skv_encoder_default_params();
    skv_encoder *e = NULL;
    skv_session *s = NULL;
    skv_ctx_params cp = skv_ctx_default_params();
    skv_ctx *c = NULL;
    uint8_t *data = NULL;
    size_t size = 0, at = 0;
    int32_t out[512];
    ep.codec = SKV_CODEC_CMVD, ep.n_ctx = 512, ep.segment = 1, ep.skip_entropy = 1;
    ep.cm_dict = g_dict, ep.n_cm_dict = g_dict_n;
    cp.n_ctx = 512;
    int rc = skv_encoder_create(g_m, &ep, &e, NULL, 0);
    if (!rc) rc = skv_encoder_append(e, g_text, g_text_n, NULL);
    if (!rc) rc = skv_encoder_finish(e, &data, &size);
    if (!rc) rc = skv_session_open(data, size, &s, NULL, 0);
    if (!rc) rc = skv_ctx_create(g_m, &cp, &c);
    skv_restore_params rp = {.verify = 1, .cm_dict = g_dict, .n_cm_dict = g_dict_n};
    skv_session_info si = {0};
    if (!rc) skv_session_get_info(s, &si);
    for (uint32_t i = 0; !rc && i < si.n_segments; i++) {
        uint32_t nt = 0;
        skv_session_segment_info(s, i, &nt, NULL, NULL);
        rc = skv_session_restore_segment(s, g_m, i, c, &rp, out, 512);
        if (!rc && memcmp(out, g_text + at, nt * sizeof *out)) rc = SKV_ERR_INTERNAL;
        at += nt;
    }
    skv_ctx_free(c);
    skv_session_free(s);
    skv_encoder_free(e);
    free(data);
    return rc;
}

static void *restore_thread(void *u)
{
    *(int *)u = cmvd_session_restores();
    return NULL;
}

/* Two threads restore cmvd sessions at once (one primed model, taken in turn). */
static void library_two_threads(void)
{
    pthread_t th[2];
    int rc[2] = {-1, -1};
    for (int k = 0; k < 2; k++) CHECK(pthread_create(&th[k], NULL, restore_thread, &rc[k]) == 0);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    CHECK_EQ_INT(rc[0], SKV_OK);
    CHECK_EQ_INT(rc[1], SKV_OK);
}

/* 1 if a file "path.tmp.*" exists in path's directory (a temporary file left over). */
static int leftover_temp(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[64], pre[64];
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    snprintf(pre, sizeof pre, "%s.tmp.", slash + 1);
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, pre, strlen(pre))) found = 1;
    if (d) closedir(d);
    return found;
}

static void library_save_load(void)
{
    char path[64], err[256];
    size_t len = 0;
    char old_tmp[80];
    snprintf(path, sizeof path, "/tmp/test_cm_snap.%d.skvcm", (int)getpid());
    CHECK_EQ_INT(skv_cm_dict_load(g_m, g_dict, g_dict_n, path, err, sizeof err), SKV_ERR_IO);
    /* the temporary file is the call's own: a directory where a fixed "path.tmp" would go
     * (or another writer's file there) does not stop the save, and nothing is left over */
    snprintf(old_tmp, sizeof old_tmp, "%s.tmp", path);
    CHECK(mkdir(old_tmp, 0700) == 0);
    int saved = skv_cm_dict_save(g_m, g_dict, g_dict_n, path, err, sizeof err);
    rmdir(old_tmp);
    CHECK_MSG(saved == SKV_OK, "save beside a directory named %s: %s", old_tmp, err);
    CHECK_MSG(!leftover_temp(path), "a temporary file of %s was left", path);
    uint8_t *b = slurp(path, &len);
    CHECK(b && len > 100);
    CHECK_EQ_INT(skv_cm_dict_load(g_m, g_dict, g_dict_n, path, err, sizeof err), SKV_OK);
    CHECK_EQ_INT(skv_cm_dict_load(g_m, g_dict, g_dict_n - 1, path, err, sizeof err), SKV_ERR_MISMATCH);
    CHECK_EQ_INT(skv_cm_dict_load(g_m, g_text, g_text_n, path, err, sizeof err), SKV_ERR_MISMATCH);
    int32_t bad[2] = {1, 4096};
    CHECK_EQ_INT(skv_cm_dict_load(g_m, bad, 2, path, err, sizeof err), SKV_ERR_INVALID_ARG);
    b[len / 2] ^= 0x40;
    spit(path, b, len);
    CHECK_EQ_INT(skv_cm_dict_load(g_m, g_dict, g_dict_n, path, err, sizeof err), SKV_ERR_FORMAT);
    CHECK_MSG(strstr(err, "damaged") != NULL, "message: %s", err);
    spit(path, b, len / 3);
    CHECK_EQ_INT(skv_cm_dict_load(g_m, g_dict, g_dict_n, path, err, sizeof err), SKV_ERR_FORMAT);
    CHECK_EQ_INT(cmvd_session_restores(), SKV_OK);
    free(b);
    remove(path);
}

/* A snapshot written from a model primed here (not by the library) is what the library
 * codes with after _load: the session still restores bit-exact. Runs first in its
 * process so that the library has primed nothing yet. */
static void library_uses_a_loaded_snapshot(void)
{
    char path[64], err[256];
    skv_cm_vocab *vb = NULL;
    skv_cm *cm = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "/tmp/test_cm_snap.%d.a.skvcm", (int)getpid());
    CHECK_EQ_INT(skv_cm_vocab_of_tokenizer(g_m->tok, &vb), SKV_OK);
    CHECK_EQ_INT(skv_cm_create_vocab(vb, SKV_CMV_REV, SKV_CMV_DICT_SLOT_BITS, &cm), SKV_OK);
    CHECK_EQ_INT(skv_cm_prime(cm, g_dict, g_dict_n), SKV_OK);
    skv_cm_snap_id id = {skv_cm_model_check(vb, SKV_CMV_REV), skv_cmv_dict_id(g_dict, g_dict_n), (uint32_t)g_dict_n};
    size_t bound = skv_cm_snap_bound(cm);
    uint8_t *b = malloc(bound);
    CHECK_EQ_INT(skv_cm_snap_write(cm, &id, b, bound, &len), SKV_OK);
    spit(path, b, len);
    CHECK_EQ_INT(skv_cm_dict_load(g_m, g_dict, g_dict_n, path, err, sizeof err), SKV_OK);
    CHECK_EQ_INT(cmvd_session_restores(), SKV_OK);
    free(b);
    skv_cm_free(cm);
    skv_cm_vocab_free(vb);
    remove(path);
}

int main(void)
{
    char err[256];
    TEST_BEGIN("test_cm_snap");
    for (g_rev = SKV_CMV_REV; g_rev >= 1; g_rev--) { /* each cmv model revision (1: older files') */
        printf("# cmv model revision %u\n", g_rev);
        RUN(roundtrip_codes_the_same);
        RUN(reset_pattern_is_the_reset);
        RUN(blank_models);
        RUN(hostile_snapshots);
        RUN(file_reader_is_the_memory_reader);
        RUN(raw_snapshots);
        RUN(journal_copies_code_the_same);
        RUN(undo_codes_the_same);
        RUN(mapped_codes_the_same);
    }
    g_rev = SKV_CMV_REV;
    if (skv_model_load("models/kjv-4m.gguf", NULL, &g_m, err, sizeof err) != SKV_OK) {
        printf("FAIL test_cm_snap:<load>: %s\n", err);
        return 1;
    }
    g_text = tokenize_part("tests/data/model_ref/heldout.txt", 0, 4000, &g_text_n);
    g_dict = tokenize_part("tests/data/model_ref/heldout.txt", 30000, 20000, &g_dict_n);
    if (!g_text || !g_dict) {
        printf("FAIL test_cm_snap:<text>: cannot tokenize tests/data/model_ref/heldout.txt\n");
        return 1;
    }
    RUN(library_uses_a_loaded_snapshot);
    RUN(library_save_load);
    RUN(library_two_threads);
    free(g_text);
    free(g_dict);
    skv_model_free(g_m);
    TEST_END();
}
