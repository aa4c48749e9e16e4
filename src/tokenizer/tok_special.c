/* tok_special.c - special tokens: the bos/eos/unk/pad ids and add_* flags
 * with llama.cpp's defaults, and llama.cpp's load-time type fix-ups that
 * depend on token texts. */
#include "tokenizer/tok_int.h"
#include "core/fpguard.h"

/* Texts llama.cpp always treats as control tokens (llama-vocab.cpp, "auto-detect
 * special tokens by text" and the workarounds after it). The end-of-turn/FIM
 * detection there marks only the first match found for each role; we mark
 * every match. */
static const char *const force_control[] = {
    /* end-of-generation / end-of-turn / end-of-message */
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[",
    /* fill-in-the-middle */
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
    "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
    "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
    "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
};

/* Texts that become user-defined tokens whatever the file says (gpt-oss). */
static const char *const force_user[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

static int has(const skv_tokenizer *t, const char *text) { return tok_find_str(t, text) >= 0; }

void tok_fixup_attrs(skv_tokenizer *t)
{
    int32_t end_id, s_id;
    for (size_t i = 0; i < sizeof force_control / sizeof force_control[0]; i++) {
        int32_t id = tok_find_str(t, force_control[i]);
        if (id >= 0) t->attr[id] |= A_CONTROL;
    }
    for (size_t i = 0; i < sizeof force_user / sizeof force_user[0]; i++) {
        int32_t id = tok_find_str(t, force_user[i]);
        if (id >= 0) t->attr[id] = A_USER;
    }
    /* o200k_harmony / solar-open: "<|end|>" is not end-of-generation */
    end_id = tok_find_str(t, "<|end|>");
    if (end_id >= 0) {
        int has_call = has(t, "<|call|>") || has(t, "<|calls|>");
        if ((has(t, "<|return|>") && has_call) || (has_call && has(t, "<|flush|>"))) t->attr[end_id] = A_USER;
    }
    /* gemma4 / paddleocr: "</s>" is a normal token */
    s_id = tok_find_str(t, "</s>");
    if (s_id >= 0 && has(t, "<|tool_response>")) t->attr[s_id] = A_NORMAL;
}

static int resolve_special(int32_t *dst, int32_t v, int32_t dflt, size_t n_vocab, const char *what,
                           skv_err *err)
{
    if (v == SKV_TOKEN_DEFAULT) v = (dflt >= 0 && (size_t)dflt < n_vocab) ? dflt : -1;
    if (v < -1 || (v >= 0 && (size_t)v >= n_vocab))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "%s %d out of range (vocabulary of %zu tokens)",
                        what, (int)v, n_vocab);
    *dst = v;
    return SKV_OK;
}

static int resolve_flag(int *dst, int v, int dflt, const char *what, skv_err *err)
{
    if (v < -1 || v > 1)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "%s must be -1, 0 or 1, not %d", what, v);
    *dst = v < 0 ? dflt : v;
    return SKV_OK;
}

int tok_setup_specials(skv_tokenizer *t, const skv_tokenizer_desc *d, const pre_entry *pre,
                       skv_err *err)
{
    int spm = t->kind == SKV_TOKENIZER_SPM;
    int rc;
    if ((rc = resolve_special(&t->bos, d->bos_id, spm ? 1 : 11, t->n_vocab, "bos_id", err)) ||
        (rc = resolve_special(&t->eos, d->eos_id, spm ? 2 : 11, t->n_vocab, "eos_id", err)) ||
        (rc = resolve_special(&t->unk, d->unk_id, spm ? 0 : -1, t->n_vocab, "unk_id", err)) ||
        (rc = resolve_special(&t->pad, d->pad_id, -1, t->n_vocab, "pad_id", err)) ||
        (rc = resolve_flag(&t->add_bos, d->add_bos, spm ? 1 : pre->add_bos, "add_bos", err)) ||
        (rc = resolve_flag(&t->add_eos, d->add_eos, 0, "add_eos", err)) ||
        (rc = resolve_flag(&t->add_space_prefix, d->add_space_prefix, spm, "add_space_prefix", err)))
        return rc;
    if (t->add_bos && t->bos < 0)
        return skv_fail(err, SKV_ERR_FORMAT, "add_bos is true, but there is no bos token");
    if (t->add_eos && t->eos < 0)
        return skv_fail(err, SKV_ERR_FORMAT, "add_eos is true, but there is no eos token");
    return SKV_OK;
}
