/* skv_token_text (seqkv.h): a token's entry in the vocabulary as written there, control
 * tokens included ("<s>"), for what shows a prompt as llama.cpp prints it with its special
 * tokens (the server's "prompt" fields). */
#include "engine/model.h"
#include "core/fpguard.h"

#include "seqkv.h"
#include "tokenizer/tokenizer.h"

int skv_token_text(const skv_model *m, int32_t token, const char **text, size_t *len)
{
    if (!m || !text || !len) return SKV_ERR_INVALID_ARG;
    if (token < 0 || token >= m->info.n_vocab) return SKV_ERR_RANGE;
    *text = skv_tokenizer_token_text(m->tok, token, len);
    return *text ? SKV_OK : SKV_ERR_RANGE;
}
