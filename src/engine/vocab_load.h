/* vocab_load - a tokenizer from the tokenizer.ggml.* keys of a GGUF file.
 *
 * The model loader (model.c) builds its tokenizer here, and so can anyone who
 * has only a vocabulary: llama.cpp's models/ggml-vocab-*.gguf files carry the
 * tokenizer keys and no tensors. Which keys are read and what their absence
 * means: docs/tokenizer.md ("Loading from GGUF"). */
#ifndef SKV_VOCAB_LOAD_H
#define SKV_VOCAB_LOAD_H

#include <stddef.h>

#include "engine/gguf.h"
#include "tokenizer/tokenizer.h"
#include "core/util.h"

/* Builds the tokenizer that g's tokenizer.ggml.* keys describe; tensors and
 * architecture keys are not looked at. *out is NULL on failure; the message
 * (when err is not NULL) says what is missing or refused. */
int skv_vocab_from_gguf(const skv_gguf *g, skv_tokenizer **out, skv_err *err);

/* Opens the GGUF file at path and builds its tokenizer as above; the file is
 * closed again before returning (the tokenizer keeps copies). */
int skv_vocab_load(const char *path, skv_tokenizer **out, skv_err *err);

#endif
