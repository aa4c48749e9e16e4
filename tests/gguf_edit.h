/* gguf_edit.h - a GGUF copy of a model with one token's text changed (the same length,
 * the same weights), for the tests that a tokenizer changed under the same weights is
 * refused (tests/test_session.c, tests/test_store_tokens.c). Header-only (static). */
#ifndef SKV_TEST_GGUF_EDIT_H
#define SKV_TEST_GGUF_EDIT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"

/* Writes to path a copy of the GGUF file src (loaded as m) in which the first token from
 * id 300 on whose piece is 5..12 lowercase ASCII letters (stored as it renders) ends in 'Z'
 * instead: no such token exists, so the vocabulary stays valid. 0 on success. */
static int gguf_other_tokenizer(const char *src, const skv_model *m, const char *path)
{
    FILE *f = fopen(src, "rb");
    long len = -1;
    char *bytes = NULL, piece[64];
    int rc = -1;
    skv_model_info mi;
    if (f && !fseek(f, 0, SEEK_END) && (len = ftell(f)) > 0 && !fseek(f, 0, SEEK_SET) && (bytes = malloc((size_t)len)) &&
        fread(bytes, 1, (size_t)len, f) != (size_t)len)
        len = -1;
    if (f) fclose(f);
    if (len <= 0 || !bytes || skv_model_get_info(m, &mi)) return free(bytes), -1;
    for (int32_t id = 300; rc && id < mi.n_vocab; id++) {
        size_t pl = 0;
        int letters = 1;
        if (skv_token_piece(m, id, piece, sizeof piece, &pl) < 0 || pl < 5 || pl > 12) continue;
        for (size_t i = 0; i < pl; i++) letters &= piece[i] >= 'a' && piece[i] <= 'z';
        if (!letters) continue;
        uint8_t pat[20];
        for (int i = 0; i < 8; i++) pat[i] = (uint8_t)((uint64_t)pl >> (8 * i));
        memcpy(pat + 8, piece, pl);
        for (size_t at = 0; at + 8 + pl <= (size_t)len; at++)
            if (!memcmp(bytes + at, pat, 8 + pl)) {
                bytes[at + 8 + pl - 1] = 'Z';
                FILE *o = fopen(path, "wb");
                rc = o && fwrite(bytes, 1, (size_t)len, o) == (size_t)len ? 0 : -1;
                if (o && fclose(o)) rc = -1;
                break;
            }
    }
    free(bytes);
    return rc;
}

#endif
