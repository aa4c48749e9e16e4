/* The vocabulary as the server shows it: skv_model_token_text (seqkv.h), a token's entry as the
 * vocabulary writes it, control tokens included ("<s>"), for a prompt printed as llama.cpp
 * prints it; and the fill-in-the-middle tokens (engine/engine.h) /infill needs. */
#include "engine/model.h"
#include "core/fpguard.h"

#include "seqkv.h"
#include "core/util.h"
#include "engine/engine.h"
#include "engine/gguf.h"
#include "tokenizer/tokenizer.h"

int skv_model_token_text(const skv_model *m, int32_t token, const char **text, size_t *len)
{
    if (!m || !text || !len) return skv_fail(NULL, SKV_ERR_INVALID_ARG, "token_text: NULL model, text or len");
    if (token < 0 || token >= m->info.n_vocab || !(*text = skv_tokenizer_token_text(m->tok, token, len)))
        return skv_fail(NULL, SKV_ERR_RANGE, "token_text: token id %d is outside the vocabulary [0, %d)", token,
                        m->info.n_vocab);
    return SKV_OK;
}

int skv_model_fim_tokens(const skv_model *m, int32_t ids[5])
{
    static const char *keys[5] = {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
                                  "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_rep_token_id",
                                  "tokenizer.ggml.fim_sep_token_id"};
    int missing = 0;
    for (int i = 0; i < 5; i++) {
        int64_t v = -1;
        if (!m->gguf || skv_gguf_get_int(m->gguf, keys[i], &v) || v < 0 || v >= m->info.n_vocab) v = -1;
        ids[i] = (int32_t)v;
        missing |= (v < 0 && i < 3) << i;
    }
    return missing;
}
