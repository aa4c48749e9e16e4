/* draft.h - cheap deterministic draft models for speculative restore.
 *
 * A draft proposes the tokens most likely to follow a token history; the session
 * restorer (session.c) verifies a whole block of proposals with one batched forward
 * pass and keeps the prefix the arithmetic decoder confirms. A draft only changes how
 * fast a restore runs, never what it produces: any proposal is safe.
 *
 * The n-gram draft: the history is the tokens accepted so far in this segment. For
 * each order o in 1..SKV_DRAFT_MAX_ORDER a hashed table remembers where the most
 * recent occurrence of each o-token context ended. A proposal looks up the current
 * suffix from the longest order down, checks the match for real (no false positives
 * from hash collisions) and copies the tokens that followed that earlier occurrence
 * (continuing into the copy itself for periodic text). Deterministic: the same history
 * gives the same proposal on every machine. O(1) per pushed token, O(max) per proposal.
 */
#ifndef SKV_DRAFT_H
#define SKV_DRAFT_H

#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"

#define SKV_DRAFT_MAX_ORDER 4
#define SKV_DRAFT_MATCH_CAP 32 /* longest match length reported */

typedef struct skv_draft skv_draft;

/* A draft for histories of at most cap tokens (a segment's length). */
int skv_draft_create(size_t cap, skv_draft **out);
void skv_draft_free(skv_draft *d);
/* Forgets the history (keeps the memory). */
void skv_draft_reset(skv_draft *d);
/* Appends an accepted token. SKV_ERR_RANGE past cap, SKV_ERR_INVALID_ARG for a negative id. */
int skv_draft_push(skv_draft *d, int32_t tok);
/* Tokens in the history. */
size_t skv_draft_len(const skv_draft *d);
/* Writes up to max proposed next tokens to out and returns how many (0: no context
 * of the history has been seen before). match_len (optional) receives how many
 * trailing tokens of the history the copied occurrence matches (1..SKV_DRAFT_MATCH_CAP;
 * 0 with no proposal): the longer, the likelier the proposal is right. */
size_t skv_draft_propose(const skv_draft *d, int32_t *out, size_t max, unsigned *match_len);

#endif
