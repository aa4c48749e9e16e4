/* cm_vocab.h - what the vocabulary itself tells the cm model (codec cmv, docs/coder.md 4.6).
 *
 * Built once per vocabulary from the tokens' rendered bytes and, when the vocabulary has
 * them, its scores (SentencePiece: unigram log-probabilities; higher = more frequent). No
 * weights and no training text: it gives the model
 *   - an order of the ids: sorted by their bytes, so a node of the id tree is a range of
 *     tokens sharing a prefix of text, and contexts over the text generalise across ids;
 *   - a static prior for ids never seen in the stream: a Zipf law over the score rank
 *     (or over the id when the scores say nothing: BPE ids grow with the merge rank);
 *   - per id, the bytes that end it and a hash of its last word fragment, so the model
 *     can use the text before a token as context.
 * Everything is integer arithmetic over comparisons of bytes and floats: the same on
 * every machine. Immutable once built: any number of cm models may share one. */
#ifndef SKV_CM_VOCAB_H
#define SKV_CM_VOCAB_H

#include <stddef.h>
#include <stdint.h>

typedef struct skv_cm_vocab {
    uint32_t V;
    unsigned B;          /* bits of a coded value: ceil(log2 V), at least 1 */
    uint32_t *code;      /* [V] id -> coded value (the rank of its bytes) */
    uint32_t *id;        /* [V] coded value -> id */
    uint16_t *prior;     /* [2^B] tree node -> P(bit = 1) in 12 bits under the prior */
    uint32_t *last4;     /* [V] the last (up to) 4 bytes of the id's text, last byte lowest */
    uint8_t *nlast;      /* [V] how many bytes last4 holds (0..4) */
    uint32_t *frag;      /* [V] hash of the text after the id's last word boundary */
    uint8_t *boundary;   /* [V] 1 if the id's text holds a word boundary (space, newline) */
    uint64_t check;      /* a hash of all the above: files name the vocabulary they need */
} skv_cm_vocab;

/* n ids; piece[i] / len[i]: id i's rendered bytes (len 0 allowed: control tokens);
 * score: NULL or n floats (NaN ranks last). SKV_ERR_INVALID_ARG, SKV_ERR_NOMEM. */
int skv_cm_vocab_create(uint32_t n, const char *const *piece, const size_t *len, const float *score,
                        skv_cm_vocab **out);
void skv_cm_vocab_free(skv_cm_vocab *v);
/* What a cmv / cmvd file and a primed model's snapshot name as their model: the side
 * information and the model revision (cm.h SKV_CMV_REV) together. Revision 1: v->check
 * (files written before revisions existed); revision r > 1: XXH64 of v->check as 8
 * little-endian bytes, seed r. */
uint64_t skv_cm_model_check(const skv_cm_vocab *v, unsigned rev);

#endif
