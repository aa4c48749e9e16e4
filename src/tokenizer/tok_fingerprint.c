/* tok_fingerprint.c - a 128-bit fingerprint of everything that makes text into ids and
 * ids into text: the kind and pre-tokenizer, every token's text, score and attributes, the
 * merges in rank order with their results, the special ids and the add flags. Whatever
 * else the tokenizer holds (hash slots, byte tables, the user-defined trie) is built
 * from these. Two tokenizers with equal fingerprints encode and render alike. */
#include "tokenizer/tok_int.h"
#include "core/fpguard.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "seqkv.h"

static void put_u64(XXH3_state_t *st, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    XXH3_128bits_update(st, b, 8);
}

/* The merge pairs by rank (a rank no pair holds stays 0). */
static int merges_by_rank(const skv_tokenizer *t, uint64_t **out)
{
    *out = NULL;
    if (!t->n_merges || !t->merges.key) return SKV_OK;
    uint64_t *pair = calloc(t->n_merges, sizeof *pair);
    if (!pair) return SKV_ERR_NOMEM;
    for (size_t i = 0; i <= t->merges.mask; i++)
        if (t->merges.key[i] && t->merges.val[i] < t->n_merges) pair[t->merges.val[i]] = t->merges.key[i] - 1;
    *out = pair;
    return SKV_OK;
}

int skv_tokenizer_fingerprint(const skv_tokenizer *t, uint8_t out[16])
{
    uint64_t *pair = NULL;
    if (!t || !out) return SKV_ERR_INVALID_ARG;
    XXH3_state_t *st = XXH3_createState();
    if (!st || merges_by_rank(t, &pair)) {
        XXH3_freeState(st);
        return SKV_ERR_NOMEM;
    }
    XXH3_128bits_reset(st);
    put_u64(st, (uint64_t)t->kind);
    put_u64(st, (uint64_t)t->pretok);
    put_u64(st, (uint64_t)t->ignore_merges);
    put_u64(st, t->n_vocab);
    for (size_t i = 0; i < t->n_vocab; i++) {
        uint32_t bits;
        memcpy(&bits, &t->score[i], 4);
        put_u64(st, t->off[i + 1] - t->off[i]);
        XXH3_128bits_update(st, t->blob + t->off[i], t->off[i + 1] - t->off[i]);
        put_u64(st, (uint64_t)bits << 8 | t->attr[i]);
    }
    put_u64(st, t->n_merges);
    for (size_t i = 0; i < t->n_merges; i++) {
        put_u64(st, pair ? pair[i] : 0);
        put_u64(st, (uint64_t)(uint32_t)(t->merge_res ? t->merge_res[i] : -1));
    }
    const int32_t spec[] = {t->bos, t->eos, t->unk, t->pad, t->add_bos, t->add_eos, t->add_space_prefix};
    for (size_t i = 0; i < sizeof spec / sizeof *spec; i++) put_u64(st, (uint64_t)(uint32_t)spec[i]);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
    memcpy(out, c.digest, 16);
    XXH3_freeState(st);
    free(pair);
    return SKV_OK;
}
