/* Fuzz target for the grammar engine (src/grammar/) and the JSON-schema converter
 * (src/server/schema*.c).
 *
 * The input is a grammar, then optionally a byte 0x01 and a text to run through it. A
 * grammar that starts with '{' is a JSON schema, converted first (its GBNF must then
 * parse: the converter returns only grammars our parser takes). The text is fed a few bytes
 * at a time; each piece is checked against accepts() and the mask of a small vocabulary
 * against single tries. Any refusal is fine; a crash, a sanitizer report, a leak, an empty
 * error message, a converter grammar our parser refuses or a mask that disagrees is a bug. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf.h"
#include "server/schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const k_vocab[] = {"{", "}", "\"", "a", "ab", " ", "\n", "0", "12", "-", ":", ",", "[", "]",
                                      "null", "true", "\xc3", "\xa9", "\xc3\xa9", "\xf0\x9f", "x", "."};
#define N_VOCAB (sizeof k_vocab / sizeof *k_vocab)

static void check_mask(skv_gmatch *m)
{
    uint32_t lens[N_VOCAB];
    uint8_t allow[N_VOCAB];
    for (size_t i = 0; i < N_VOCAB; i++) lens[i] = (uint32_t)strlen(k_vocab[i]);
    skv_gvocab *v = skv_gvocab_new(k_vocab, lens, N_VOCAB);
    if (!v) return;
    skv_gmatch_mask(m, v, allow);
    skv_gvocab_free(v);
    if (skv_gmatch_exhausted(m)) return; /* past the call's budget, the rest is refused */
    for (size_t i = 0; i < N_VOCAB; i++)
        if (allow[i] != skv_gmatch_accepts(m, k_vocab[i], lens[i])) abort();
}

static void run_text(const skv_gbnf *g, const uint8_t *t, size_t n)
{
    skv_gmatch *m = skv_gmatch_new(g);
    if (!m) return;
    check_mask(m);
    for (size_t at = 0; at < n;) {
        size_t k = 1 + t[at] % 4;
        k = k < n - at ? k : n - at;
        int ok = skv_gmatch_accepts(m, (const char *)t + at, k);
        if ((skv_gmatch_feed(m, (const char *)t + at, k) == 0) != ok) abort();
        if (!ok) break;
        at += k;
        check_mask(m);
    }
    (void)skv_gmatch_accepting(m);
    (void)skv_gmatch_can_continue(m);
    skv_gmatch_free(m);
}

static char *schema_grammar(const uint8_t *data, size_t n)
{
    json_error_t je;
    skv_err err = {0};
    json_t *j = json_loadb((const char *)data, n, JSON_DECODE_ANY, &je);
    char *g = j ? srv_schema_to_gbnf(j, &err) : NULL;
    if (j && !g && !err.msg[0]) abort();
    json_decref(j);
    return g;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *sep = memchr(data, 1, size);
    size_t gl = sep ? (size_t)(sep - data) : size;
    char *text = NULL;
    skv_err err = {0};
    skv_gbnf *g = NULL;
    int schema = gl && data[0] == '{';
    if (schema && !(text = schema_grammar(data, gl))) return 0;
    const char *src = schema ? text : (const char *)data;
    size_t len = schema ? strlen(text) : gl;
    if (skv_gbnf_parse(src, len, "root", &g, &err)) {
        if (!err.msg[0] || schema) abort(); /* the converter checks its grammars */
    } else {
        run_text(g, sep ? sep + 1 : data, sep ? size - gl - 1 : 0);
        skv_gbnf_free(g);
    }
    free(text);
    return 0;
}
