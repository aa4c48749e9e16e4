/* The cm-family coders for a model (cmv_model.h), and the public skv_cm_dict_* calls over
 * them (seqkv.h): the model gives the coders a vocabulary, nothing else. */
#include <stdlib.h>
#include "core/fpguard.h"

#include "container/cmv_model.h"
#include "core/util.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

#define PIECE_MAX 256

int skv_cm_vocab_of_tokenizer(const struct skv_tokenizer *tk, skv_cm_vocab **out)
{
    uint32_t V = (uint32_t)skv_tokenizer_n_vocab(tk);
    /* the pieces packed end to end (a few bytes each: ~20 KB for 4K ids, not V x 256 bytes
     * of fresh pages), placed once the blob stops moving */
    size_t cap = (size_t)V * 8 + PIECE_MAX, used = 0;
    char *blob = malloc(cap);
    const char **p = malloc((size_t)V * sizeof *p);
    size_t *len = malloc((size_t)V * sizeof *len);
    float *sc = malloc((size_t)V * sizeof *sc);
    int rc = blob && p && len && sc ? SKV_OK : SKV_ERR_NOMEM;
    for (uint32_t i = 0; rc == SKV_OK && i < V; i++) {
        if (cap - used < PIECE_MAX) {
            char *nb = realloc(blob, cap * 2);
            if (!nb) {
                rc = SKV_ERR_NOMEM;
                break;
            }
            blob = nb, cap *= 2;
        }
        /* a piece longer than PIECE_MAX counts as empty (as it always has: the side
         * information is part of what cmv / cmvd files are coded with) */
        if (skv_tokenizer_piece(tk, (int32_t)i, blob + used, PIECE_MAX, &len[i]) < 0) len[i] = 0;
        used += len[i];
        sc[i] = skv_tokenizer_token_score(tk, (int32_t)i);
    }
    for (size_t i = 0, at = 0; rc == SKV_OK && i < V; at += len[i], i++) p[i] = blob + at;
    if (rc == SKV_OK) rc = skv_cm_vocab_create(V, p, len, sc, out);
    free(blob);
    free(p);
    free(len);
    free(sc);
    return rc;
}

static int build_of_model(const void *m, skv_cm_vocab **out)
{
    return skv_cm_vocab_of_tokenizer(skv_model_tokenizer(m), out);
}

int skv_cmv_src_of(skv_model *m, skv_cmv_src *src)
{
    if (!m) return SKV_ERR_INVALID_ARG;
    *src = (skv_cmv_src){.n_vocab = (uint32_t)skv_model_info_of(m)->n_vocab, .build = build_of_model, .user = m};
    return skv_model_tokenizer_fingerprint(m, src->fp);
}

int skv_cm_dict_prepare(skv_model *m)
{
    skv_cmv_src v;
    int rc = skv_cmv_src_of(m, &v);
    return rc ? rc : skv_cmv_prepare(&v);
}

static int skv_cm_dict_load_e(skv_model *m, const int32_t *dict, size_t n, const char *path, skv_err *err)
{
    skv_cmv_src v;
    int rc = skv_cmv_src_of(m, &v);
    if (rc) return skv_fail(err, rc, "cannot fingerprint the model's tokenizer");
    return skv_cmv_dict_load_file(&v, dict, n, path, err);
}

int skv_cm_dict_load(skv_model *m, const int32_t *dict, size_t n, const char *path, char *err, size_t cap)
{
    skv_err e = {0};
    return skv_err_out(&e, skv_cm_dict_load_e(m, dict, n, path, &e), err, cap);
}

static int skv_cm_dict_save_e(skv_model *m, const int32_t *dict, size_t n, const char *path, skv_err *err)
{
    skv_cmv_src v;
    int rc = skv_cmv_src_of(m, &v);
    if (rc) return skv_fail(err, rc, "cannot fingerprint the model's tokenizer");
    return skv_cmv_dict_save_file(&v, dict, n, path, err);
}

int skv_cm_dict_save(skv_model *m, const int32_t *dict, size_t n, const char *path, char *err, size_t cap)
{
    skv_err e = {0};
    return skv_err_out(&e, skv_cm_dict_save_e(m, dict, n, path, &e), err, cap);
}

int skv_cm_dict_file_current(const char *path) { return skv_cmv_snap_file_current(path); }
