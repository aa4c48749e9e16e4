/* The token-id coders of the cm family as payloads (docs/format.md 2.4, 2.6): codec cm
 * (cmcodec.c) and codecs cmv / cmvd (cmvcodec.c), with the process's cache of vocabulary
 * side information and primed models, and the primed models' snapshots (docs/coder.md 4.8).
 *
 * They know ids, not models: a vocabulary is named by its tokenizer's fingerprint and its
 * side information built, on first use of that fingerprint, by a callback of the caller
 * (the container builds it from a model's tokenizer: container/cmv_model.h). So the coder
 * depends on core only, and a store or a test can code ids without an engine. */
#ifndef SKV_CMVCODEC_H
#define SKV_CMVCODEC_H

#include <stddef.h>
#include <stdint.h>

#include "coder/cm_vocab.h"
#include "core/util.h"

#define SKV_CMV_DICT_MAX ((size_t)1 << 24) /* ids of a dictionary (format: u32 length) */

/* A vocabulary as the cmv coders see it. */
typedef struct skv_cmv_src {
    uint8_t fp[16];  /* the tokenizer's fingerprint: names the vocabulary in the caches */
    uint32_t n_vocab;
    /* builds its side information (a new one, skv_cm_vocab_create) the first time fp is
     * seen by this process; SKV_ERR_NOMEM */
    int (*build)(const void *user, skv_cm_vocab **out);
    const void *user;
} skv_cmv_src;

/* Told once when the first `at` ids of a decode are final in the caller's array (a
 * restore prefills them while the decode goes on, container/restore.c). */
typedef struct skv_id_notify {
    size_t at;
    void (*ready)(void *user);
    void *user;
} skv_id_notify;

/* ---- cmcodec.c: codec cm ---- */
/* The payload of the n ids tok[] (< V) into *buf (realloc'ed to *cap as needed), *len
 * bytes. SKV_ERR_NOMEM, SKV_ERR_INTERNAL (bound violated). */
int skv_cm_payload(const int32_t *tok, size_t n, uint32_t V, uint8_t **buf, size_t *cap, size_t *len);
/* The n ids of payload p[0..len) into tok (each < V by construction); SKV_ERR_FORMAT
 * (corrupt) or SKV_ERR_NOMEM with a message. */
int skv_cm_payload_decode(const uint8_t *p, size_t len, size_t n, uint32_t V, int32_t *tok, skv_err *err);

/* ---- cmvcodec.c: codecs cmv and cmvd ---- */
/* XXH3-64 of n ids as little-endian u32: how a cmvd payload names its dictionary. */
uint64_t skv_cmv_dict_id(const int32_t *dict, size_t n);
/* A dictionary of 1..2^24 ids < V, copied to *copy (SKV_ERR_INVALID_ARG with a message). */
int skv_cmv_dict_copy(uint32_t V, const int32_t *dict, size_t n, int32_t **copy, skv_err *err);
/* Builds (once per process) the vocabulary's side information. SKV_ERR_NOMEM. */
int skv_cmv_prepare(const skv_cmv_src *v);
/* The payload of the n ids tok[] under v, primed by dict[0..n_dict) when n_dict > 0
 * (codec cmvd). SKV_ERR_NOMEM, SKV_ERR_INVALID_ARG (an id >= V in dict). */
int skv_cmv_payload(const skv_cmv_src *v, const int32_t *dict, size_t n_dict, const int32_t *tok, size_t n,
                    uint8_t **buf, size_t *cap, size_t *len);
/* The n ids of a cmv (with_dict 0) or cmvd payload p[0..len) into tok; SKV_ERR_MISMATCH
 * when it needs another vocabulary or dictionary than (v, dict), SKV_ERR_FORMAT when it is
 * corrupt. nf: NULL, or called when tok[0..nf->at) hold their final ids. */
int skv_cmv_payload_decode(const skv_cmv_src *v, const uint8_t *p, size_t len, size_t n, int with_dict,
                           const int32_t *dict, size_t n_dict, int32_t *tok, const skv_id_notify *nf, skv_err *err);

/* The dictionary a cmvd payload p[0..len) names: its id and length (SKV_ERR_FORMAT when
 * the payload is shorter than its header). */
int skv_cmv_payload_dict(const uint8_t *p, size_t len, uint64_t *id, uint32_t *n);

/* Primed models of codec cmvd (docs/store.md "Dictionaries", docs/coder.md 4.8): whether
 * this process holds (v, dictionary id, n) primed already; a snapshot's bytes (a store
 * record) or file loaded into the cache; the primed model's snapshot in cm_snap.h's format
 * `version` (primed first if need be; *buf to free), or written to a file (atomically). */
int skv_cmv_dict_have(const skv_cmv_src *v, uint64_t id, size_t n);
int skv_cmv_dict_load_mem(const skv_cmv_src *v, const int32_t *dict, size_t n, const uint8_t *buf, size_t len,
                          skv_err *err);
int skv_cmv_dict_load_file(const skv_cmv_src *v, const int32_t *dict, size_t n, const char *path, skv_err *err);
int skv_cmv_dict_snapshot(const skv_cmv_src *v, const int32_t *dict, size_t n, uint32_t version, uint8_t **buf,
                          size_t *len, skv_err *err);
int skv_cmv_dict_save_file(const skv_cmv_src *v, const int32_t *dict, size_t n, const char *path, skv_err *err);
/* 1 when the file at path is a snapshot in the format skv_cmv_dict_save_file writes (an
 * older one is read, then better rewritten), else 0 (unreadable, or older). */
int skv_cmv_snap_file_current(const char *path);
/* How many dictionaries this process has primed (walked) so far (tests: loaded, not primed). */
size_t skv_cmv_primings(void);
/* How many segments were coded on a kept blank model (no dictionary) instead of a fresh one. */
size_t skv_cmv_blank_uses(void);

#endif
