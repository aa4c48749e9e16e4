/* The engine as the layers above it (container, store, server) see it beyond the public
 * API: accessors instead of the model's struct, which stays private to src/engine/
 * (engine/model.h; scripts/check_layers.sh enforces it). */
#ifndef SKV_ENGINE_H
#define SKV_ENGINE_H

#include <stdint.h>

#include "core/util.h"
#include "seqkv.h"

struct skv_tokenizer;

/* The model's hyper-parameters, read in place (skv_model_get_info copies them). */
const skv_model_info *skv_model_info_of(const skv_model *m);
/* The model's tokenizer (owned by the model). */
const struct skv_tokenizer *skv_model_tokenizer(const skv_model *m);
/* The GGUF's tokenizer.chat_template as a NUL-terminated copy (free it), or NULL when the
 * model has none (a llama2.c model, or a GGUF without the key) or memory ran out. */
char *skv_model_chat_template(const skv_model *m);

/* The model's fill-in-the-middle tokens (prefix, suffix, middle, repository, file
 * separator: the GGUF's tokenizer.ggml.fim_*_token_id; -1 when absent or out of the
 * vocabulary): a mask of the missing ones of the first three (bit 0 prefix, 1 suffix, 2
 * middle), 0 when the model can infill (the last two are optional). */
int skv_model_fim_tokens(const skv_model *m, int32_t ids[5]);

/* 1 once the fingerprint is computed (skv_model_fingerprint returns at once), else 0. */
int skv_model_fingerprint_ready(skv_model *m);
/* Sets c's last error (skv_ctx_last_error) to msg and returns status: for library calls
 * that report on a context they fill (restores). */
int skv_ctx_set_error(skv_ctx *c, int status, const char *msg);
/* skv_kvdump_check_model with the message in err (an encoder's own). */
int skv_kvdump_check_model_e(const skv_kvdump *d, skv_model *m, skv_err *err);

#endif
