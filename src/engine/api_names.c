/* The public calls' earlier names (include/seqkv.h "Compatibility names",
 * docs/api-history.md): each forwards to the call's prefixed name, so the old symbols
 * stay in the library's ABI. Nothing else belongs here. */
#include "core/fpguard.h"

#include "seqkv.h"

int skv_prefill(skv_ctx *c, const int32_t *tokens, size_t n, int logits_mode, float *logits)
{
    return skv_ctx_prefill(c, tokens, n, logits_mode, logits);
}

int skv_decode(skv_ctx *c, int32_t token, float *logits) { return skv_ctx_decode(c, token, logits); }

int skv_decode_multi(skv_ctx *const *ctxs, const int32_t *tokens, size_t n, float *logits)
{
    return skv_ctx_decode_multi(ctxs, tokens, n, logits);
}

int skv_tokenize(const skv_model *m, const char *text, size_t len, int add_special, int32_t *out, size_t cap,
                 size_t *n_out)
{
    return skv_model_tokenize(m, text, len, add_special, out, cap, n_out);
}

int skv_token_piece(const skv_model *m, int32_t token, char *buf, size_t cap, size_t *len)
{
    return skv_model_token_piece(m, token, buf, cap, len);
}

int skv_token_text(const skv_model *m, int32_t token, const char **text, size_t *len)
{
    return skv_model_token_text(m, token, text, len);
}

int skv_detokenize(const skv_model *m, const int32_t *tokens, size_t n, int flags, char *text, size_t cap,
                   size_t *len)
{
    return skv_model_detokenize(m, tokens, n, flags, text, cap, len);
}
