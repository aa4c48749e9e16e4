/* bench_cm - bits of the cheap token codecs on real text and real vocabularies (issue 16).
 *
 * For each text, with the vocabulary of a GGUF file (a model or llama.cpp's vocab-only
 * files), the text is tokenized (BOS first when the vocabulary adds one), cut into
 * segments of SEG ids (default 800, as `seqkv compress --segment -c 800`), and each
 * segment is coded alone by: codec tokens (zstd -19 of LEB128 ids, its exact payload),
 * codec cm and codec cmv. Every cm / cmv stream is decoded back and compared. Prints one
 * markdown row per (vocabulary, text): payload bits per id and the ratio to tokens, and
 * the coder's CPU time per id (encode + decode).
 * -r REV: cmv's model revision (default the one encoders write; 1 = the model before
 * 2026-12-05).
 * Usage: bench_cm [-s SEG] [-m MAX_BYTES] [-d DICT_BYTES] [-r REV] VOCAB.gguf[,NAME] TEXT[,NAME]... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include "coder/cm.h"
#include "coder/cm_vocab.h"
#include "container/cmv_model.h"
#include "engine/vocab_load.h"
#include "tokenizer/tokenizer.h"

static size_t g_seg = 800, g_max = 24000;
static unsigned g_rev = SKV_CMV_REV; /* -r: the cmv / cmvd model revision (coder.md 4.9) */

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static size_t tokens_bytes(const int32_t *t, size_t n)
{
    uint8_t *raw = malloc(n * 4 + 1), *z;
    size_t len = 0, zb;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)t[i];
        do raw[len++] = (uint8_t)((v & 127) | (v > 127 ? 128 : 0));
        while ((v >>= 7));
    }
    zb = ZSTD_compressBound(len);
    z = malloc(zb);
    size_t r = ZSTD_compress(z, zb, raw, len, 19);
    free(raw);
    free(z);
    return ZSTD_isError(r) ? 0 : r;
}

/* Bytes of one segment under cm (vb NULL) or cmv; decodes and compares. */
static size_t cm_bytes(const skv_cm_vocab *vb, uint32_t V, const int32_t *t, size_t n, double *cpu)
{
    size_t cap = skv_cm_bound(n, V), size = 0;
    uint8_t *buf = malloc(cap);
    int32_t *back = malloc(n * sizeof *back);
    double t0 = cpu_now();
    int rc = vb ? skv_cmv_encode_tokens(vb, g_rev, t, n, buf, cap, &size) : skv_cm_encode_tokens(t, n, V, buf, cap, &size);
    if (!rc) rc = vb ? skv_cmv_decode_tokens(vb, g_rev, buf, size, n, back) : skv_cm_decode_tokens(buf, size, n, V, back);
    *cpu += cpu_now() - t0;
    if (rc || memcmp(back, t, n * sizeof *t)) {
        fprintf(stderr, "bench_cm: round trip FAILED (rc %d)\n", rc);
        exit(1);
    }
    free(buf);
    free(back);
    return size;
}

/* A dictionary: its ids and a model primed on them (copied before each segment). */
typedef struct {
    int32_t *d;
    size_t n;
    skv_cm *primed, *work;
} dict;

/* Bytes of one segment coded after the dictionary (D ++ segment as the history). */
static size_t dict_bytes(dict *dc, uint32_t V, const int32_t *t, size_t n, double *cpu)
{
    size_t cap = skv_cm_bound(n, V), size = 0;
    uint8_t *buf = malloc(cap);
    int32_t *h = malloc((dc->n + n) * sizeof *h);
    skv_rangecoder_enc e;
    skv_rangecoder_dec d;
    int rc = SKV_OK;
    memcpy(h, dc->d, dc->n * sizeof *h);
    memcpy(h + dc->n, t, n * sizeof *t);
    double t0 = cpu_now();
    skv_cm_copy(dc->work, dc->primed);
    skv_rangecoder_enc_init(&e, buf, cap);
    for (size_t i = 0; i < n && !rc; i++) rc = skv_cm_encode(dc->work, &e, h, dc->n + i);
    if (!rc) rc = skv_rangecoder_enc_finish(&e, &size);
    memset(h + dc->n, 0, n * sizeof *h);
    skv_cm_copy(dc->work, dc->primed);
    if (!rc) rc = skv_rangecoder_dec_init(&d, buf, size);
    for (size_t i = 0; i < n && !rc; i++) rc = skv_cm_decode(dc->work, &d, h, dc->n + i);
    *cpu += cpu_now() - t0;
    if (rc || memcmp(h + dc->n, t, n * sizeof *t)) {
        fprintf(stderr, "bench_cm: dictionary round trip FAILED (rc %d)\n", rc);
        exit(1);
    }
    free(buf);
    free(h);
    return size;
}

static skv_cm_vocab *side_info(const skv_tokenizer *tk)
{
    skv_cm_vocab *vb = NULL;
    if (skv_cm_vocab_of_tokenizer(tk, &vb)) fprintf(stderr, "bench_cm: vocab side info failed\n");
    return vb;
}

static const char *name_of(char *arg)
{
    char *c = strchr(arg, ',');
    if (!c) return arg;
    *c = 0;
    return c + 1;
}

/* max bytes of path from byte off, tokenized (BOS first); exits on failure. */
static int32_t *read_ids(const skv_tokenizer *tk, const char *path, long off, size_t max, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *text = malloc(max + 1);
    size_t len = f && !fseek(f, off, SEEK_SET) ? fread(text, 1, max, f) : 0;
    if (f) fclose(f);
    int32_t *t = malloc((len + 2) * sizeof *t);
    if (!len || skv_tokenizer_encode(tk, text, len, 1, t, len + 2, n)) {
        fprintf(stderr, "bench_cm: cannot read or tokenize %s\n", path);
        exit(1);
    }
    free(text);
    return t;
}

static size_t g_dict_max = 16000;

static void dict_open(dict *dc, const skv_cm_vocab *vb, const skv_tokenizer *tk, const char *path, long off)
{
    dc->d = read_ids(tk, path, off, g_dict_max, &dc->n);
    if (skv_cm_create_vocab(vb, g_rev, SKV_CMV_DICT_SLOT_BITS, &dc->primed) ||
        skv_cm_create_vocab(vb, g_rev, SKV_CMV_DICT_SLOT_BITS, &dc->work) ||
        skv_cm_prime(dc->primed, dc->d, dc->n)) {
        fprintf(stderr, "bench_cm: cannot prime\n");
        exit(1);
    }
}

static void dict_close(dict *dc)
{
    skv_cm_free(dc->primed);
    skv_cm_free(dc->work);
    free(dc->d);
}

/* arg: TEXT,NAME,DICT,DICT_OFFSET */
static void one_text(const skv_tokenizer *tk, const skv_cm_vocab *vb, const char *vname, char *arg)
{
    char *dpath = strchr(arg, ',') ? strchr(strchr(arg, ',') + 1, ',') : NULL;
    if (dpath) *dpath++ = 0;
    char *doff = dpath ? strchr(dpath, ',') : NULL;
    if (doff) *doff++ = 0;
    const char *tname = name_of(arg);
    size_t n = 0;
    int32_t *t = read_ids(tk, arg, 0, g_max, &n);
    dict dc = {0};
    size_t b_dict = 0;
    double c_dict = 0;
    if (dpath) dict_open(&dc, vb, tk, dpath, doff ? atol(doff) : 0);
    uint32_t V = (uint32_t)skv_tokenizer_n_vocab(tk);
    size_t b_tok = 0, b_cm = 0, b_cmv = 0;
    double c_cm = 0, c_cmv = 0;
    for (size_t at = 0; at < n; at += g_seg) {
        size_t k = n - at < g_seg ? n - at : g_seg;
        b_tok += tokens_bytes(t + at, k);
        b_cm += cm_bytes(NULL, V, t + at, k, &c_cm);
        b_cmv += cm_bytes(vb, V, t + at, k, &c_cmv);
        if (dpath) b_dict += dict_bytes(&dc, V, t + at, k, &c_dict);
    }
    double bt = 8.0 * (double)b_tok / (double)n;
    printf("| %s | %u | %s | %zu | %.2f | %.2f (%.3f) | %.2f (%.3f) | %.2f (%.3f) | %zu | %.1f | %.1f | %.1f |\n", vname,
           V, tname, n, bt, 8.0 * (double)b_cm / (double)n, (double)b_cm / (double)b_tok,
           8.0 * (double)b_cmv / (double)n, (double)b_cmv / (double)b_tok, 8.0 * (double)b_dict / (double)n,
           (double)b_dict / (double)b_tok, dc.n, 1e6 * c_cm / (double)n, 1e6 * c_cmv / (double)n,
           1e6 * c_dict / (double)n);
    fflush(stdout);
    if (dpath) dict_close(&dc);
    free(t);
}

int main(int argc, char **argv)
{
    int a = 1;
    for (; a + 1 < argc && argv[a][0] == '-'; a += 2) {
        if (!strcmp(argv[a], "-s")) g_seg = (size_t)atol(argv[a + 1]);
        else if (!strcmp(argv[a], "-m")) g_max = (size_t)atol(argv[a + 1]);
        else if (!strcmp(argv[a], "-d")) g_dict_max = (size_t)atol(argv[a + 1]);
        else if (!strcmp(argv[a], "-r")) g_rev = (unsigned)atoi(argv[a + 1]);
    }
    if (a + 1 >= argc || !g_seg) {
        fprintf(stderr, "usage: bench_cm [-s SEG] [-m MAX_BYTES] [-d DICT_BYTES] [-r REV] VOCAB.gguf[,NAME] TEXT[,NAME]...\n");
        return 2;
    }
    const char *vname = name_of(argv[a]);
    skv_tokenizer *tk = NULL;
    skv_err err = {0};
    if (skv_vocab_load(argv[a], &tk, &err)) {
        fprintf(stderr, "bench_cm: %s: %s\n", argv[a], err.msg);
        return 1;
    }
    skv_cm_vocab *vb = side_info(tk);
    if (!vb) return 1;
    for (int i = a + 1; i < argc; i++) one_text(tk, vb, vname, argv[i]);
    skv_cm_vocab_free(vb);
    skv_tokenizer_free(tk);
    return 0;
}
