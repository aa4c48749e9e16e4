/* The grammar recognizer's cost (src/grammar/): the time of one token mask (every token
 * text of a vocabulary tried on the recognizer, as the server does on a refusal) at each
 * state of a sample reply, for two everyday grammars, and the cost of a grammar built to
 * be expensive (nested ambiguous repetitions), which SKV_GBNF_MAX_WORK must stop.
 *
 * The vocabulary is built from a text (the 256 single bytes, then the text's words with and
 * without a leading space, then their pieces of 2-6 bytes, then pairs of words with a
 * leading space, in order of first appearance, up to N texts): a stand-in for a BPE vocabulary of that size, whose masks cost the same
 * kind of walk. Time: CPU time of the process (single-threaded), per mask.
 * Usage: bench_grammar TEXT [N...] > grammar.md (N: vocabulary sizes; default 32000 128000). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "grammar/gbnf.h"

/* a JSON value (the shape of llama.cpp's grammars/json.gbnf, written here) */
static const char k_json[] = "root ::= object\n"
                             "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
                             "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
                             "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
                             "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
                             "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,15})? ws\n"
                             "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
static const char k_json_text[] = "{\"name\": \"Lily\", \"age\": 7, \"friends\": [\"Tom\", \"Sue\"], "
                                  "\"story\": \"Once upon a time, Lily found a shiny red ball in the park.\", \"happy\": true}";

/* a list of short lines, each "- " then words */
static const char k_list[] = "root ::= item{1,8}\nitem ::= \"- \" [A-Za-z] [a-z ,.']{0,60} \"\\n\"\n";
static const char k_list_text[] = "- Lily went to the park.\n- She saw a dog, a cat and a bird.\n- They played all day.\n";

/* built to cost: every character may end or continue any of three nested repetitions */
static const char k_costly[] = "root ::= (a | b | c)*\na ::= (. | . .)+ root?\nb ::= (. . | .)+ \"x\"?\nc ::= .* .\n";
static const char k_costly_text[] = "abcdefghijklmnop";

typedef struct {
    char **t;
    uint32_t *len;
    size_t n, cap;
} vocab_b;

static int vb_has(const vocab_b *v, const char *s, size_t n)
{
    for (size_t i = v->n; i-- > 0 && i + 4096 > v->n;) /* recent entries: cheap and good enough */
        if (v->len[i] == n && !memcmp(v->t[i], s, n)) return 1;
    return 0;
}

static void vb_add(vocab_b *v, const char *s, size_t n)
{
    if (v->n >= v->cap || !n || n > 32 || vb_has(v, s, n)) return;
    v->t[v->n] = malloc(n);
    memcpy(v->t[v->n], s, n);
    v->len[v->n++] = (uint32_t)n;
}

static vocab_b vocab_build(const char *text, size_t tn, size_t want)
{
    vocab_b v = {calloc(want, sizeof(char *)), calloc(want, sizeof(uint32_t)), 0, want};
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        vb_add(&v, &c, 1);
    }
    for (int pass = 0; pass < 3 && v.n < want; pass++) {
        for (size_t i = 0, prev = SIZE_MAX; i < tn && v.n < want;) {
            while (i < tn && !((text[i] | 32) >= 'a' && (text[i] | 32) <= 'z')) i++;
            size_t j = i;
            while (j < tn && (text[j] | 32) >= 'a' && (text[j] | 32) <= 'z') j++;
            if (j > i && pass == 0) {
                vb_add(&v, text + i, j - i);
                if (i > 0 && text[i - 1] == ' ') vb_add(&v, text + i - 1, j - i + 1);
            }
            for (size_t a = i; pass == 1 && a < j; a++)
                for (size_t l = 2; l <= 6 && a + l <= j; l++) vb_add(&v, text + a, l);
            if (pass == 2 && j > i && prev != SIZE_MAX && prev > 0 && text[prev - 1] == ' ' && i > prev) vb_add(&v, text + prev - 1, j - prev + 1);
            prev = j > i ? i : prev;
            i = j;
        }
    }
    return v;
}

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Masks at each character state of text (up to 400): a row of the table. */
static void run_grammar(const char *name, const char *gbnf, const char *text, const skv_gvocab *gv, size_t nv)
{
    skv_gbnf *g = NULL;
    skv_err err = {0};
    if (skv_gbnf_parse(gbnf, strlen(gbnf), "root", &g, &err)) {
        fprintf(stderr, "bench_grammar: %s: %s\n", name, err.msg);
        exit(1);
    }
    skv_gmatch *m = skv_gmatch_new(g);
    uint8_t *allow = malloc(nv);
    double ms[400];
    size_t n = 0, n_exh = 0, allowed = 0, tl = strlen(text);
    for (size_t at = 0; at <= tl && n < 400; at++) {
        double t0 = cpu_now();
        skv_gmatch_mask(m, gv, allow);
        ms[n++] = 1e3 * (cpu_now() - t0);
        n_exh += (size_t)skv_gmatch_exhausted(m);
        for (size_t i = 0; i < nv; i++) allowed += allow[i];
        if (at < tl && skv_gmatch_feed(m, text + at, 1)) break;
    }
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += ms[i];
    qsort(ms, n, sizeof *ms, cmp_d);
    printf("| %zu | %s | %zu | %.0f | %.3f | %.3f | %.3f | %zu |\n", nv, name, n, (double)allowed / (double)n, sum / (double)n,
           ms[n / 2], ms[n - 1], n_exh);
    free(allow);
    skv_gmatch_free(m);
    skv_gbnf_free(g);
}

int main(int argc, char **argv)
{
    size_t tn = 0;
    char *text = argc > 1 ? bench_slurp(argv[1], 0, &tn) : NULL;
    if (!text) {
        fprintf(stderr, "usage: bench_grammar TEXT [N...] > grammar.md\n");
        return 2;
    }
    size_t sizes[8] = {32000, 128000}, ns = 2;
    if (argc > 2) ns = 0;
    for (int i = 2; i < argc && ns < 8; i++) sizes[ns++] = (size_t)strtoul(argv[i], NULL, 10);
    printf("| vocab | grammar | states | allowed (mean) | mask ms (mean) | p50 | max | exhausted |\n");
    printf("|---:|---|---:|---:|---:|---:|---:|---:|\n");
    for (size_t k = 0; k < ns; k++) {
        vocab_b v = vocab_build(text, tn, sizes[k]);
        skv_gvocab *gv = skv_gvocab_new((const char *const *)v.t, v.len, v.n);
        run_grammar("json", k_json, k_json_text, gv, v.n);
        run_grammar("list", k_list, k_list_text, gv, v.n);
        run_grammar("costly", k_costly, k_costly_text, gv, v.n);
        skv_gvocab_free(gv);
        for (size_t i = 0; i < v.n; i++) free(v.t[i]);
        free(v.t), free(v.len);
    }
    free(text);
    return 0;
}
