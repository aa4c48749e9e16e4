/* cli_cmdict.h - --cm-dict TEXT for compress and restore (codec cmvd): the dictionary's
 * ids and its primed model, both cached in $XDG_CACHE_HOME/seqkv (else ~/.cache/seqkv),
 * named by TEXT's hash and the model, so that a call neither tokenizes TEXT again nor
 * primes the model again (docs/coder.md 4.8). */
#ifndef SKV_CLI_CMDICT_H
#define SKV_CLI_CMDICT_H

#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"

/* TEXT's ids (BOS first) and m's primed model loaded into the library's cache; NULL after
 * a message. Caches: cm-H-F.skvids (the ids, keyed by the tokenizer and TEXT's bytes) and
 * cm-H-F.skvcm (skv_cm_dict_save's snapshot); either is rebuilt when stale or damaged, and
 * failing to write one (or to make the directory) only costs the next call the work.
 * no_cache (--no-cm-cache), or SEQKV_NO_CM_CACHE set to anything but "0": no cache read
 * or written (TEXT tokenized and the model primed in this process). */
const int32_t *cli_cm_dict(skv_model *m, const char *path, size_t *n, int no_cache);
/* Frees what cli_cm_dict returned (a read-only mapping of the cached ids, or skv_big_alloc
 * memory). */
void cli_cm_dict_free(const int32_t *ids);

/* The option row of both commands. */
#define CLI_OPT_NO_CM_CACHE(off)                                                                                    \
    {"no-cm-cache", 0, CLI_FLAG, NULL, 0, 0, off,                                                                   \
     "with --cm-dict: neither read nor write the dictionary's caches (its ids and\n"                                \
     "primed model, kept in $XDG_CACHE_HOME/seqkv or ~/.cache/seqkv; also\n"                                        \
     "SEQKV_NO_CM_CACHE=1): TEXT is tokenized and the model primed in this call"}

#endif
