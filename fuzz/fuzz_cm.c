/* Fuzz target for the context-mixing token model (src/coder/cm.c).
 *
 * Input: 4 header bytes, then a body.
 *   h[0..1]: vocabulary size 1..65536 (h[3] bit 0: times 256, up to 2^24)
 *   h[2]:    ids to decode, 1..256
 * (a) The body is decoded as a cm stream of that many ids: every call must return
 *     SKV_OK or SKV_ERR_FORMAT, and every decoded id must be < V.
 * (b) Whatever was decoded (or the body's bytes as ids when decoding failed) is encoded
 *     and decoded back: any difference aborts. Encoding into one byte less than the
 *     stream needs must fail with SKV_ERR_RANGE without writing outside (ASan).
 * (c) Every 64th input of a process (the first included; every 8th in the replay of
 *     make test, tests/fuzz_replay.c), the same through
 *     skv_cm_decode_tokens / skv_cm_encode_tokens (a fresh model per call): every status,
 *     id, size and byte must equal (a) and (b)'s.
 *
 * Speed (each change measured, docs/reliability.md "Making the slow targets fast"): a
 * model is 5.3 MiB of tables, and making one costs about 6.5 CPU ms under ASan (its pages
 * mapped and faulted in anew, unmapped at free). (a) and (b) therefore code with the
 * streaming API (skv_cm_decode / skv_cm_encode from a reset model, as the one-shot calls
 * do inside) on models kept across inputs, one per vocabulary size for the last KEEP
 * sizes. A kept model is at the reset state between streams: each stream is coded under
 * an undo log (skv_cm_undo_begin, then skv_cm_undo), which puts back only the elements
 * the stream wrote instead of rewriting the 5.3 MiB a reset writes; every 32nd input (the
 * 17th of each 32; every 8th until 2026-12-02, 10% of the time) goes back with
 * skv_cm_reset after each stream instead, so both ways back are fuzzed (the reset is the
 * same stores whatever the input: how often it runs adds no new path). (c) is the proof
 * that a kept model codes exactly as a fresh one, whatever it coded before and however
 * it got back (an undo or a reset that left state from an
 * earlier stream makes the next compared input of that size differ). (c) makes four fresh
 * models (26 CPU ms): at every 64th input it runs about as often per CPU second as it did
 * at every 8th before the kept models. (c) and the resets are chosen by a count, not by
 * the input's bytes: a byte would be kept by most mutations, so the cost would follow the
 * corpus. A finding of (c) can depend on the inputs before it (replay the run's corpus in
 * order). A new vocabulary size takes the oldest kept model through skv_cm_set_vocab
 * (a reset with the new size: 5.3 MiB written, not a new model mapped and faulted in);
 * the custom mutator below keeps the header in 7 of 8 mutations (libFuzzer's own
 * mutations of the whole input changed it in about one input of 5).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coder/cm.h"

#define MAXN 256
#define HDR 4
#define KEEP 16 /* models kept, one per vocabulary size (85 MiB) */
#define RESET_EVERY 32
#ifdef FUZZ_NAME /* the replay of make test: a cheap process, compare more */
#define COMPARE_EVERY 8
#else
#define COMPARE_EVERY 64
#endif

typedef struct {
    skv_cm *cm;
    uint32_t V;
} kept_model;

static int use_reset; /* this input goes back to the reset state by skv_cm_reset */

/* A model for V at the reset state: a kept one (every stream leaves it there), else the
 * oldest kept one given V by skv_cm_set_vocab (its tables reused: the same state as a
 * new model, which (c) checks), else a new one. */
static skv_cm *model_for(uint32_t V)
{
    static kept_model kept[KEEP];
    static unsigned next;
    for (int k = 0; k < KEEP; k++)
        if (kept[k].cm && kept[k].V == V) return kept[k].cm;
    kept_model *m = &kept[next++ % KEEP];
    m->V = V;
    if (m->cm && skv_cm_set_vocab(m->cm, V) != SKV_OK) abort(); /* V is in 1..2^24 */
    if (!m->cm && skv_cm_create(V, &m->cm) != SKV_OK) m->cm = NULL;
    return m->cm;
}

/* A kept model for a stream of n ids: under an undo log unless this input resets. */
static skv_cm *stream_begin(uint32_t V, size_t n)
{
    skv_cm *cm = model_for(V);
    if (cm && !use_reset && skv_cm_undo_begin(cm, n) != SKV_OK) abort(); /* n <= 256: small log */
    return cm;
}

/* Back to the reset state after a stream, by undo or by reset. */
static void stream_end(skv_cm *cm)
{
    if (use_reset) skv_cm_reset(cm);
    else skv_cm_undo(cm);
}

/* skv_cm_decode_tokens on a kept model. */
static int decode_kept(const uint8_t *src, size_t size, size_t n, uint32_t V, int32_t *tok)
{
    skv_cm *cm = stream_begin(V, n);
    skv_rangecoder_dec d;
    if (!cm) return SKV_ERR_NOMEM;
    int rc = skv_rangecoder_dec_init(&d, src, size);
    for (size_t i = 0; i < n && rc == SKV_OK; i++) rc = skv_cm_decode(cm, &d, tok, i);
    if (rc == SKV_OK && skv_rangecoder_dec_finish(&d)) rc = SKV_ERR_FORMAT;
    stream_end(cm);
    return rc == SKV_ERR_INVALID_ARG ? SKV_ERR_FORMAT : rc;
}

/* skv_cm_encode_tokens on a kept model. */
static int encode_kept(const int32_t *tok, size_t n, uint32_t V, uint8_t *dst, size_t cap, size_t *size)
{
    skv_cm *cm = stream_begin(V, n);
    skv_rangecoder_enc e;
    int rc = SKV_OK;
    if (!cm) return SKV_ERR_NOMEM;
    skv_rangecoder_enc_init(&e, dst, cap);
    for (size_t i = 0; i < n && rc == SKV_OK; i++) rc = skv_cm_encode(cm, &e, tok, i);
    if (rc == SKV_OK) rc = skv_rangecoder_enc_finish(&e, size);
    stream_end(cm);
    return rc;
}

/* (c) for (b): the one-shot calls give the same stream, ids and tight-buffer failure. */
static void compare_encode(const int32_t *t, size_t n, uint32_t V, const uint8_t *stream, size_t size)
{
    size_t cap = skv_cm_bound(n, V), s1 = 0, s2 = 0;
    uint8_t *buf = malloc(cap);
    int32_t back[MAXN];
    if (!buf) return;
    if (skv_cm_encode_tokens(t, n, V, buf, cap, &s1) != SKV_OK || s1 != size || memcmp(buf, stream, size)) abort();
    if (skv_cm_decode_tokens(buf, size, n, V, back) != SKV_OK || memcmp(back, t, n * sizeof *t)) abort();
    if (size > 0 && skv_cm_encode_tokens(t, n, V, buf, size - 1, &s2) != SKV_ERR_RANGE) abort();
    free(buf);
}

static void check_roundtrip(const int32_t *t, size_t n, uint32_t V, int compare)
{
    size_t cap = skv_cm_bound(n, V), size = 0;
    uint8_t *buf = malloc(cap), *tight;
    int32_t back[MAXN];
    if (!buf) return;
    if (encode_kept(t, n, V, buf, cap, &size) != SKV_OK) abort();
    if (decode_kept(buf, size, n, V, back) != SKV_OK || memcmp(back, t, n * sizeof *t)) abort();
    if (size > 0 && (tight = malloc(size - 1 ? size - 1 : 1)) != NULL) {
        size_t s2 = 0;
        if (encode_kept(t, n, V, tight, size - 1, &s2) != SKV_ERR_RANGE) abort();
        free(tight);
    }
    if (compare) compare_encode(t, n, V, buf, size);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int32_t tok[MAXN], tok1[MAXN];
    if (size < HDR) return 0;
    uint32_t V = ((uint32_t)data[0] | (uint32_t)data[1] << 8) + 1;
    if (data[3] & 1) V = V * 256 > SKV_CM_MAX_VOCAB ? SKV_CM_MAX_VOCAB : V * 256;
    size_t n = (size_t)data[2] + 1;
    static unsigned count;
    use_reset = count % RESET_EVERY == RESET_EVERY / 2;
    int compare = count++ % COMPARE_EVERY == 0;
    int rc = decode_kept(data + HDR, size - HDR, n, V, tok);
    if (rc != SKV_OK && rc != SKV_ERR_FORMAT && rc != SKV_ERR_NOMEM) abort();
    for (size_t i = 0; rc == SKV_OK && i < n; i++)
        if (tok[i] < 0 || (uint32_t)tok[i] >= V) abort();
    if (compare && rc != SKV_ERR_NOMEM && (skv_cm_decode_tokens(data + HDR, size - HDR, n, V, tok1) != rc ||
                    (rc == SKV_OK && memcmp(tok1, tok, n * sizeof *tok))))
        abort();
    for (size_t i = 0; rc != SKV_OK && i < n; i++) tok[i] = size > HDR ? (int32_t)(data[HDR + i % (size - HDR)] % V) : 0;
    check_roundtrip(tok, n, V, compare);
    return 0;
}

/* libFuzzer's mutation of a byte range (weak: absent in the replay of make test, which
 * never mutates). */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size) __attribute__((weak));
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

/* 7 of 8 mutations change only the body, so that most inputs keep their parent's
 * vocabulary size and its kept model; the 8th mutates the whole input (every input stays
 * reachable, the header included). */
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    if (!LLVMFuzzerMutate) return size;
    if (seed % 8 != 0 && size > HDR && max_size > HDR)
        return HDR + LLVMFuzzerMutate(data + HDR, size - HDR, max_size - HDR);
    return LLVMFuzzerMutate(data, size, max_size);
}
