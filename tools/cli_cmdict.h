/* cli_cmdict.h - --cm-dict TEXT for compress and restore (codec cmvd): the dictionary's
 * ids and its primed model, both cached next to TEXT so that a call neither tokenizes
 * TEXT again nor primes the model again (docs/coder.md 4.8). */
#ifndef SKV_CLI_CMDICT_H
#define SKV_CLI_CMDICT_H

#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"

/* TEXT's ids (BOS first) and m's primed model loaded into the library's cache; NULL after
 * a message. Caches: TEXT.skvids (the ids, keyed by the model and TEXT's bytes) and
 * TEXT.skvcm (skv_cm_dict_save's snapshot); either is rebuilt when stale or damaged, and
 * failing to write one only costs the next call the work. */
int32_t *cli_cm_dict(skv_model *m, const char *path, size_t *n);

#endif
