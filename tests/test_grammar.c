/* The GBNF grammar engine (src/grammar/) and the JSON-schema converter (src/server/schema.c):
 * parser errors, strings accepted and refused, the token mask against a slow reference,
 * the bounds, and converted schemas checked by the strings they accept. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "grammar/gbnf.h"

static char g_err[256];

static skv_gbnf *parse(const char *text)
{
    skv_gbnf *g = NULL;
    if (skv_gbnf_parse(text, strlen(text), "root", &g, g_err, sizeof g_err)) return NULL;
    return g;
}

/* 1: s is a whole sentence; 0: a prefix only; -1: refused. */
static int run_text(const skv_gbnf *g, const char *s)
{
    skv_gmatch *m = skv_gmatch_new(g);
    if (!m) return -2;
    int rc = skv_gmatch_feed(m, s, strlen(s)) ? -1 : skv_gmatch_accepting(m);
    skv_gmatch_free(m);
    return rc;
}

static int full(const char *grammar, const char *s)
{
    skv_gbnf *g = parse(grammar);
    int rc = g ? run_text(g, s) : -3;
    skv_gbnf_free(g);
    return rc;
}

static void accepts_and_refuses(void)
{
    CHECK_EQ_INT(full("root ::= \"a\"{5,5}", "aaaaa"), 1);
    CHECK_EQ_INT(full("root ::= \"a\"{5,5}", "aaaa"), 0);
    CHECK_EQ_INT(full("root ::= \"a\"{5,5}", "aaaaaa"), -1);
    CHECK_EQ_INT(full("root ::= \"a\"{2,} \"b\"", "aaaab"), 1);
    CHECK_EQ_INT(full("root ::= \"a\"{2,} \"b\"", "ab"), -1);
    CHECK_EQ_INT(full("root ::= [a-c]+ [^x]? .", "abcq\xc3\xa9"), 1);
    CHECK_EQ_INT(full("root ::= [^a-c]", "a"), -1);
    CHECK_EQ_INT(full("root ::= (\"ab\" | \"cd\")* \"!\"  # comment\n", "abcdab!"), 1);
    CHECK_EQ_INT(full("root ::= x \"y\"?\nx ::= \"\\x41\\u00e9\\n\" | \"\\\"\"", "A\xc3\xa9\ny"), 1);
    CHECK_EQ_INT(full("root ::= x\nx ::= (\n  \"a\" |\n  \"b\"\n)", "b"), 1);
    CHECK_EQ_INT(full("root ::= \"ab\"{0,3}", ""), 1);
    CHECK_EQ_INT(full("root ::= \"ab\"{0,3}", "ababab"), 1);
    CHECK_EQ_INT(full("root ::= \"ab\"{0,3}", "abababa"), -1);
    CHECK_EQ_INT(full("root ::= item (\",\" item)*\nitem ::= [0-9]+", "1,22,333"), 1);
    CHECK_EQ_INT(full("root ::= \"(\" root \")\" | \"\"", "((()))"), 1);
    CHECK_EQ_INT(full("root ::= \"(\" root \")\" | \"\"", "(()"), 0);
}

static void partial_utf8(void)
{
    skv_gbnf *g = parse("root ::= \"\xc3\xa9\" \"x\"");
    CHECK(g);
    skv_gmatch *m = skv_gmatch_new(g);
    CHECK(m);
    CHECK(skv_gmatch_accepts(m, "\xc3", 1));
    CHECK(!skv_gmatch_accepts(m, "\xc4", 1));
    CHECK(!skv_gmatch_accepts(m, "\xff", 1));
    CHECK_EQ_INT(skv_gmatch_feed(m, "\xc3", 1), 0);
    CHECK(!skv_gmatch_accepting(m));
    CHECK_EQ_INT(skv_gmatch_feed(m, "\xa9x", 2), 0);
    CHECK(skv_gmatch_accepting(m));
    CHECK(!skv_gmatch_can_continue(m));
    skv_gmatch_free(m);
    skv_gbnf_free(g);
}

static int err_has(const char *grammar, const char *what)
{
    skv_gbnf *g = parse(grammar);
    skv_gbnf_free(g);
    if (g) return 0;
    if (!strstr(g_err, what)) fprintf(stderr, "  got: %s\n", g_err);
    return strstr(g_err, what) != NULL;
}

static void parser_errors(void)
{
    CHECK(err_has("root ::= this is (not valid GBNF", "unclosed '('"));
    CHECK(err_has("root ::= \"abc", "unterminated literal"));
    CHECK(err_has("root ::= [abc", "unterminated character class"));
    CHECK(err_has("root ::= foo", "undefined rule 'foo'"));
    CHECK(err_has("start ::= \"a\"", "no rule 'root'"));
    CHECK(err_has("", "no rule 'root'"));
    CHECK(err_has("root ::= root \"a\"", "left recursion through rule 'root'"));
    CHECK(err_has("root ::= x\nx ::= y? x \"a\"\ny ::= \"b\"", "left recursion"));
    CHECK(err_has("root ::= \"a\"{3,2}", "max below min"));
    CHECK(err_has("root ::= \"a\"{99999}", "repetition count above"));
    CHECK(err_has("root ::= \"\\q\"", "unknown escape"));
    CHECK(err_has("root ::= \"a\"\nroot ::= \"b\"", "defined twice"));
    CHECK(err_has("root = \"a\"", "expected '::='"));
    CHECK(err_has("root ::= \"a\" )", "line 1 col 14"));
    CHECK(err_has("root ::= \"a\"\n\nx ::= [z-a]", "line 3"));
}

static void bounds_hold(void)
{
    /* deep nesting, huge expansions and ambiguous grammars fail cleanly */
    char *deep = malloc(1000);
    CHECK(deep);
    strcpy(deep, "root ::= ");
    for (int i = 0; i < 200; i++) strcat(deep, "(");
    CHECK(err_has(deep, "nested deeper"));
    free(deep);
    char big[600] = "root ::=";
    for (int i = 0; i < 30; i++) strcat(big, " [a]{10000}");
    CHECK(err_has(big, "too large"));
    /* exponentially ambiguous: bounded work, refused rather than run on */
    skv_gbnf *g = parse("root ::= a a a a a a a a a a a a a a a a a a a a a a a a \"x\"\na ::= \"\" | \"\" | b\nb ::= \"\"");
    CHECK(g);
    CHECK(run_text(g, "x") == 1 || run_text(g, "x") == -1 || run_text(g, "x") == -2);
    skv_gbnf_free(g);
}

/* The mask equals trying every text with a fresh copy of the state (the slow reference). */
static void mask_matches_reference(void)
{
    static const char *const texts[] = {"{", "\"", "a", "ab", "\"a", "}", " ", "\n", "1", "12", "-", "\xc3", "\xa9",
                                        "\xc3\xa9", "", "null", "nu", "true", ",", ":", "\"}", "x"};
    size_t n = sizeof texts / sizeof *texts;
    uint32_t lens[sizeof texts / sizeof *texts];
    uint8_t allow[sizeof texts / sizeof *texts];
    const char *prefixes[] = {"", "{", "{\"a", "{\"a\":", "{\"a\": 1", "{\"a\": \"\xc3", "{\"a\": nu"};
    for (size_t i = 0; i < n; i++) lens[i] = (uint32_t)strlen(texts[i]);
    skv_gbnf *g = parse("root ::= \"{\" ws (str \":\" ws val)? \"}\"\nval ::= str | [0-9]+ | \"null\" | \"-\" [0-9]\n"
                        "str ::= \"\\\"\" [^\"]* \"\\\"\" ws\nws ::= [ \\n]*");
    CHECK(g);
    for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++) {
        skv_gmatch *m = skv_gmatch_new(g);
        CHECK(m && !skv_gmatch_feed(m, prefixes[p], strlen(prefixes[p])));
        skv_gmatch_mask(m, texts, lens, n, allow);
        for (size_t i = 0; i < n; i++) {
            skv_gmatch *r = skv_gmatch_new(g);
            int ref = lens[i] && !skv_gmatch_feed(r, prefixes[p], strlen(prefixes[p])) &&
                      !skv_gmatch_feed(r, texts[i], lens[i]);
            skv_gmatch_free(r);
            CHECK_MSG(allow[i] == ref, "prefix '%s' text '%s': mask %d, reference %d", prefixes[p], texts[i], allow[i], ref);
        }
        skv_gmatch_free(m);
    }
    skv_gbnf_free(g);
}

int main(void)
{
    TEST_BEGIN("test_grammar");
    RUN(accepts_and_refuses);
    RUN(partial_utf8);
    RUN(parser_errors);
    RUN(bounds_hold);
    RUN(mask_matches_reference);
    TEST_END();
}
