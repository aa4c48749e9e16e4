/* cm.h - a cheap adaptive context-mixing model over token ids, coded with the range coder.
 *
 * The model of codec "cm" (docs/format.md section 2.4, docs/coder.md section 4): it
 * predicts the next token id from the ids before it, with no weights and no knowledge of
 * the vocabulary beyond its size, so a restore decodes the ids in microseconds per token
 * and leaves the real model ONE batched prefill to regenerate the KV.
 *
 * ============================ READ ME FIRST ============================
 *  1. An id is coded as B = ceil(log2 V) binary decisions, most significant bit first,
 *     down a binary tree (node 1 = root, child = 2 node + bit). A bit whose 1-branch
 *     holds only ids >= V is certain (0) and is not coded: a decoder can only ever
 *     produce ids < V, whatever the bytes.
 *  2. Each coded bit is predicted by hashed context slots of orders 0..4 (the last k ids
 *     and the tree node) and by a match model (the id that followed the last occurrence
 *     of the last 3 ids), mixed in the logistic domain by a small adaptive mixer (codec
 *     cmv, skv_cm_create_vocab: three text contexts and a static prior more, a second
 *     mixer, then an APM; docs/coder.md 4.6; model revision 2 adds run models, a third
 *     mixer and a final one, 4.9; revision 3 checked slots, recency and age, 4.10). Everything is integer arithmetic (no float anywhere): the coded
 *     bytes are identical on every machine and compiler.
 *  3. Encoder and decoder must see the same calls: reset, then the tokens of one stream
 *     in order (i = 0, 1, 2, ...). The history is the caller's token array itself
 *     (tok[0..i) must be the ids coded before), so nothing grows with the stream.
 *  4. Memory is fixed by the format constants below (about 5.3 MiB; cmv of revision 3 up
 *     to 2.5 MiB more for its recency state), not by the input.
 *  5. One thread at a time per model; models are independent.
 * =======================================================================
 */
#ifndef SKV_CM_H
#define SKV_CM_H

#include <stddef.h>
#include <stdint.h>

#include "coder/rangecoder.h"
#include "seqkv.h"

/* Format constants: changing one changes the coded bytes. */
#define SKV_CM_ORDERS 5       /* context orders 0..4 */
#define SKV_CM_SLOT_BITS 18   /* log2 of the slots per order */
#define SKV_CM_MATCH_BITS 16  /* log2 of the match model's position table */
#define SKV_CM_MATCH_MIN 3    /* ids a match hashes (its minimum length) */
#define SKV_CM_PROB_BITS 16   /* each bit is coded as put_pow2(..., 16) */
#define SKV_CMV_SLOT_BITS 18     /* codec cmv */
#define SKV_CMV_DICT_SLOT_BITS 20 /* codec cmv with a dictionary (more contexts to keep) */
#define SKV_CMV_SLOT_BITS_MIN 16
#define SKV_CMV_SLOT_BITS_MAX 22
#define SKV_CM_MAX_VOCAB ((uint32_t)1 << 24)
/* cmv's model revisions (docs/coder.md 4.9, 4.10): 1, the model of files written before
 * 2026-12-05; 2 adds run models and two mixers; 3 checked 2-way slot buckets and recency and
 * age inputs. Encoders write SKV_CMV_REV; decoders read every revision (a file names its
 * revision through its model check, skv_cm_model_check). */
#define SKV_CMV_REV 3

typedef struct skv_cm skv_cm;
struct skv_cm_vocab; /* coder/cm_vocab.h */

/* A model for ids < n_vocab (1..2^24). SKV_ERR_INVALID_ARG, SKV_ERR_NOMEM. The model
 * starts reset. */
int skv_cm_create(uint32_t n_vocab, skv_cm **out);
/* Codec cmv: the same model with the vocabulary's side information (ids ordered by their
 * text, a static prior, contexts over the text; docs/coder.md 4.6). vb must outlive the
 * model. rev: the model revision, 1..SKV_CMV_REV. slot_bits: log2 of the slots per table,
 * SKV_CMV_SLOT_BITS_MIN..MAX (a format constant of the codec: 18 for cmv, 20 for cmv
 * primed by a dictionary). */
int skv_cm_create_vocab(const struct skv_cm_vocab *vb, unsigned rev, unsigned slot_bits, skv_cm **out);
/* The model's revision (1 for codec cm). */
unsigned skv_cm_rev(const skv_cm *cm);
void skv_cm_free(skv_cm *cm);
/* Back to the initial state (a new stream). */
void skv_cm_reset(skv_cm *cm);

/* Codes tok[i] given tok[0..i), i = the number of ids coded since the reset (else
 * SKV_ERR_INVALID_ARG); tok[i] < n_vocab. Range coder errors are passed on. */
int skv_cm_encode(skv_cm *cm, skv_rangecoder_enc *e, const int32_t *tok, size_t i);
/* Decodes tok[i] (always < n_vocab) given tok[0..i). SKV_ERR_FORMAT on a corrupt stream
 * (the range coder's check), SKV_ERR_INVALID_ARG as for encode. */
int skv_cm_decode(skv_cm *cm, skv_rangecoder_dec *d, int32_t *tok, size_t i);

/* Priming (a dictionary, docs/coder.md 4.7): the model learns tok[n_coded..n) as if they
 * had been coded, without output; a stream coded next continues at i = n, tok[0..n) being
 * the dictionary. SKV_ERR_INVALID_ARG for an id >= n_vocab. */
int skv_cm_prime(skv_cm *cm, const int32_t *tok, size_t n);
/* dst takes src's whole state (same n_vocab and vocabulary): a primed model is built once
 * and copied before each stream instead of primed again. */
int skv_cm_copy(skv_cm *dst, const skv_cm *src);
/* Makes later skv_cm_copy(cm, src) calls cheap: cm keeps a journal of the table elements
 * it writes (4 MiB), and a copy from the same src as the last one rewrites only those
 * (whole tables when the journal overflowed). src must not change between such copies
 * (a primed model is read-only). same: NULL, or a model whose state cm holds now (just
 * cloned or copied from it). SKV_ERR_NOMEM. */
int skv_cm_journal(skv_cm *cm, const skv_cm *same);
/* A new model holding src's state (SKV_ERR_NOMEM). */
int skv_cm_clone(const skv_cm *src, skv_cm **out);
/* In-place use (a primed model coding a segment without a copy of its ~36 MiB): from
 * skv_cm_undo_begin(cm, n_ids) cm logs the old value of every table element it writes and
 * keeps its small state (mixers, match reliabilities, scalars), for at most n_ids ids coded
 * (more: SKV_ERR_INVALID_ARG from encode / decode; priming is refused); skv_cm_undo(cm)
 * puts it all back, so cm is again bit for bit the model of the begin. SKV_ERR_RANGE when
 * n_ids ids could need more than 2^21 log entries (copy the model instead), SKV_ERR_NOMEM.
 * A reset or a copy into cm ends the log without undoing. */
int skv_cm_undo_begin(skv_cm *cm, size_t n_ids);
void skv_cm_undo(skv_cm *cm);
/* Codec cm only (a model from skv_cm_create): the model becomes a reset model for ids <
 * n_vocab, as skv_cm_create(n_vocab) would make, without new tables (a kept model reused
 * for a stream of another vocabulary size). SKV_ERR_INVALID_ARG for a cmv model or
 * n_vocab outside 1..2^24 (the model is then unchanged). Ends an undo log or a journal
 * as skv_cm_reset does. A model at the reset state (skv_cm_fresh 1) keeps its tables
 * (their reset values do not depend on the vocabulary): only the small state is reset. */
int skv_cm_set_vocab(skv_cm *cm, uint32_t n_vocab);

/* ---- state snapshot (coder/cm_snap.c, docs/coder.md 4.8) ---------------------------- */

/* One table of a model's state: n elements of `size` bytes (2 or 4, host order) at p, and
 * what a valid element is (a snapshot reader checks every element it loads). */
enum {
    SKV_CM_SEC_ANY = 0,
    SKV_CM_SEC_SLOT = 1,
    SKV_CM_SEC_POS = 2,
    SKV_CM_SEC_WEIGHT = 3,
    SKV_CM_SEC_RUN = 4,  /* rev 2's run models: (coded value + 1) | count << 24, reset 0 */
    SKV_CM_SEC_FINAL = 5 /* rev 2's final mixer: weights, reset 1/3 */
};
typedef struct skv_cm_section {
    void *p;
    size_t n;
    unsigned size, kind;
} skv_cm_section;
#define SKV_CM_MAX_SECTIONS 20
#define SKV_CM_N_SCALARS 14
/* The model's tables (slot tables, match positions and reliabilities, mixers, APM), in a
 * fixed order that depends only on (vocabulary or not, slot_bits); returns their count. */
int skv_cm_sections(skv_cm *cm, skv_cm_section sec[SKV_CM_MAX_SECTIONS]);
/* The same list for their sizes only (nothing may be written through it): unlike
 * skv_cm_sections it leaves skv_cm_fresh as it was, so sizing a snapshot before reading
 * it into a blank model keeps the model blank. */
int skv_cm_section_shapes(skv_cm *cm, skv_cm_section sec[SKV_CM_MAX_SECTIONS]);
/* The per-stream scalars (ids coded, hashes, text state, the match) as u32 values. */
void skv_cm_get_scalars(const skv_cm *cm, uint32_t v[SKV_CM_N_SCALARS]);
/* Sets them back; SKV_ERR_FORMAT when they cannot come from a model (a match pointing past
 * the ids coded, a predicted id >= n_vocab). */
int skv_cm_set_scalars(skv_cm *cm, const uint32_t v[SKV_CM_N_SCALARS]);
/* The reset values of a section of kind `kind`: element i of a reset model is
 * pat[i % period]; returns the period (1, or 33 for the APM's knots). */
size_t skv_cm_reset_pattern(unsigned kind, uint32_t pat[33]);
/* Checks a loaded element of a section of kind `kind` (SKV_CM_SEC_*): 1 if valid. */
int skv_cm_valid(const skv_cm *cm, unsigned kind, uint32_t v);
/* n little-endian elements at src into section s (from skv_cm_sections(cm)) at elements
 * at..at+n (the caller keeps them inside the section), each checked as skv_cm_valid does;
 * SKV_ERR_FORMAT if one is not (some are then written: reset the model). */
int skv_cm_load_run(skv_cm *cm, const skv_cm_section *s, size_t at, const uint8_t *src, size_t n);
/* Elements at..at+n of section s (from skv_cm_sections, which marked the model written),
 * already in place in host order, checked as skv_cm_load_run checks what it loads:
 * SKV_ERR_FORMAT if one is not valid (reset the model then). Only reads the model:
 * threads may check disjoint ranges at once. */
int skv_cm_check_run(const skv_cm *cm, const skv_cm_section *s, size_t at, size_t n);
/* Faults the large tables in at once (a blank model leaves that to its reader: on huge
 * pages one fault per 2 MiB, done by the thread that fills them). */
void skv_cm_prefault(skv_cm *cm);
/* 1 while the tables are as skv_cm_reset left them (nothing coded, primed, copied or
 * loaded since, or only coded under an undo log that skv_cm_undo has undone), so a reader
 * need not reset again; 2 for a blank model. */
int skv_cm_fresh(const skv_cm *cm);
/* A cmv model whose large tables (slot tables, mpos, rev 2's run table) are allocated but not written (the
 * rest as after skv_cm_reset): only for skv_cm_snap_read, which writes each element of
 * them once (the reset value into a gap, the file's into a run; not 32 MiB of reset values
 * then the runs over them) and resets the model whole on failure. */
int skv_cm_create_blank(const struct skv_cm_vocab *vb, unsigned rev, unsigned slot_bits, skv_cm **out);
/* Mapped tables (codec cmv, docs/coder.md 4.8): a blank model without its large tables
 * (slot tables, mpos, rev 2's run table, APM), whose snapshot reader hands it a read-only mapping of the file
 * (len bytes; off[k]: where section k of skv_cm_section_shapes' order lies, in host order,
 * its elements checked by the reader) with skv_cm_map_tables: the slot tables, mpos, the
 * run table and the APM are then the mapping's bytes, and the model owns it (munmap on free). Such a
 * model is read-only but under an undo log (skv_cm_undo_begin): there every element of
 * those tables it writes is kept in an overlay sized for the ids allowed (at most 2^21
 * cells: SKV_ERR_RANGE past that, copy the model instead) and dropped by the undo, with
 * the same coded bytes as a model in memory. Outside a log, encode, decode, prime and
 * copies into it are SKV_ERR_INVALID_ARG; a copy or clone from it reads the file's
 * tables; skv_cm_reset makes it unusable (everything then SKV_ERR_INVALID_ARG). A file
 * changed in place under the mapping gives wrong predictions, never a read outside a
 * table or the history; one truncated under it, SIGBUS, as for any mapped file.
 * skv_cm_map_tables: SKV_ERR_INVALID_ARG for a model not made by
 * skv_cm_create_blank_mapped or a section outside [map, map + len) or misaligned. */
int skv_cm_create_blank_mapped(const struct skv_cm_vocab *vb, unsigned rev, unsigned slot_bits, skv_cm **out);
int skv_cm_map_tables(skv_cm *cm, void *map, size_t len, const size_t off[SKV_CM_MAX_SECTIONS]);
int skv_cm_mapped(const skv_cm *cm);
/* Elements at..at+n of section s get their reset value (the APM's are left as they are). */
void skv_cm_fill_reset(skv_cm *cm, const skv_cm_section *s, size_t at, size_t n);
/* A blank model (skv_cm_create_blank: fresh 2) leaves its APM unwritten, since a version 2
 * snapshot writes every element of it; a reader that does not (version 1, whose runs skip
 * reset values) calls this first (while skv_cm_fresh is still 2) to give it its reset values. */
void skv_cm_blank_apm(skv_cm *cm);
/* n_vocab, slot_bits, ids coded since the reset. */
uint32_t skv_cm_n_vocab(const skv_cm *cm);
unsigned skv_cm_slot_bits(const skv_cm *cm);
size_t skv_cm_n_coded(const skv_cm *cm);

/* Bytes that always hold the stream of n ids < n_vocab; SIZE_MAX on overflow. */
size_t skv_cm_bound(uint64_t n, uint32_t n_vocab);

/* Whole streams: the n ids of tok (each < n_vocab) into dst[0..cap), *size bytes; and
 * back (n ids from exactly size bytes, dec_finish included). A fresh model each call. */
int skv_cm_encode_tokens(const int32_t *tok, size_t n, uint32_t n_vocab, uint8_t *dst, size_t cap, size_t *size);
int skv_cm_decode_tokens(const uint8_t *src, size_t size, size_t n, uint32_t n_vocab, int32_t *tok);

/* The same for codec cmv (n_vocab = vb->V) under model revision rev. */
int skv_cmv_encode_tokens(const struct skv_cm_vocab *vb, unsigned rev, const int32_t *tok, size_t n, uint8_t *dst,
                          size_t cap, size_t *size);
int skv_cmv_decode_tokens(const struct skv_cm_vocab *vb, unsigned rev, const uint8_t *src, size_t size, size_t n,
                          int32_t *tok);

#endif
