/* The cm-family token-id coders (coder/cmvcodec.h) for a model: its tokenizer's
 * fingerprint names the vocabulary, its tokenizer's pieces and scores build the side
 * information. What the container, the store and the public skv_cm_dict_* calls use. */
#ifndef SKV_CMV_MODEL_H
#define SKV_CMV_MODEL_H

#include "coder/cmvcodec.h"
#include "seqkv.h"

struct skv_tokenizer;

/* m's vocabulary as the coders see it (the tokenizer's fingerprint computed if need be:
 * a pass over the vocabulary, once per model). src refers to m: it lives as long as m. */
int skv_cmv_src_of(skv_model *m, skv_cmv_src *src);
/* The cm side information of a tokenizer's vocabulary (a new one; skv_cm_vocab_free it). */
int skv_cm_vocab_of_tokenizer(const struct skv_tokenizer *tk, skv_cm_vocab **out);

#endif
