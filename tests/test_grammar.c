/* The GBNF grammar engine (src/grammar/) and the JSON-schema converter (src/server/schema.c):
 * parser errors, strings accepted and refused, the token mask against a slow reference,
 * the bounds, and converted schemas checked by the strings they accept. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "seqkv.h"
#include "grammar/gbnf.h"
#include "server/schema.h"

static skv_err g_err;

static skv_gbnf *parse(const char *text)
{
    skv_gbnf *g = NULL;
    if (skv_gbnf_parse(text, strlen(text), "root", &g, &g_err)) return NULL;
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
    CHECK(!skv_gmatch_accepts(m, "\xf0", 1));     /* a 4-byte form cannot be U+00E9 */
    skv_gbnf *brace = parse("root ::= \"{\"");
    skv_gmatch *mb = brace ? skv_gmatch_new(brace) : NULL;
    CHECK(mb && !skv_gmatch_accepts(mb, "\xf0", 1) && !skv_gmatch_accepts(mb, "\xc1\xbb", 2)); /* overlong '{' */
    CHECK(!skv_gmatch_accepts(mb, "\xe0\x81\xbb", 3));
    skv_gmatch_free(mb);
    skv_gbnf_free(brace);
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
    if (!strstr(g_err.msg, what)) fprintf(stderr, "  got: %s\n", g_err.msg);
    return strstr(g_err.msg, what) != NULL;
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
    /* 40,000 rules in a chain (then too many): linear, no deep recursion */
    size_t cap = 60001 * 24;
    char *chain = malloc(cap), *at = chain;
    CHECK(chain);
    at += sprintf(at, "root ::= r0\n");
    for (int i = 0; i < 40000; i++) at += sprintf(at, "r%d ::= \"x\" r%d\n", i, i + 1);
    sprintf(at, "r40000 ::= \"y\"\n");
    skv_gbnf *ch = parse(chain);
    CHECK_MSG(ch, "%s", g_err.msg);
    skv_gbnf_free(ch);
    at = chain + sprintf(chain, "root ::=");
    for (int i = 0; i < 66000; i++) at += sprintf(at, " (\"x\")"); /* a group is a rule */
    CHECK(err_has(chain, "too many rules"));
    free(chain);
}

/* A grammar too costly to follow is refused for its cost, said apart from a refusal by
 * the grammar: at the start (3^24 ways to expand), or after some characters (nested
 * ambiguous repetitions with recursion: the stacks multiply with each character), or when
 * a whole mask runs past the call's budget. */
static void costly_refused_for_cost(void)
{
    skv_gbnf *g = parse("root ::= a a a a a a a a a a a a a a a a a a a a a a a a \"x\"\na ::= \"\" | \"\" | b\nb ::= \"\"");
    CHECK(g);
    skv_gmatch *m = skv_gmatch_new(g);
    CHECK(m);
    CHECK(skv_gmatch_feed(m, "x", 1) == -1 && skv_gmatch_exhausted(m));
    CHECK(!skv_gmatch_accepts(m, "x", 1) && skv_gmatch_exhausted(m));
    CHECK(!skv_gmatch_accepting(m) && !skv_gmatch_can_continue(m));
    skv_gmatch_free(m);
    skv_gbnf_free(g);

    g = parse("root ::= (a | b | c)*\na ::= (. | . .)+ root?\nb ::= (. . | .)+ \"x\"?\nc ::= .* .\n");
    CHECK(g);
    m = skv_gmatch_new(g);
    CHECK(m);
    const char *text = "abcdefghijklmnopqrstuvwxyz";
    size_t at = 0;
    for (; text[at] && !skv_gmatch_feed(m, text + at, 1); at++) CHECK(!skv_gmatch_exhausted(m));
    CHECK_MSG(text[at] && at >= 5, "the costly grammar took %zu characters", at); /* some, never all */
    CHECK(skv_gmatch_exhausted(m));
    CHECK(skv_gmatch_feed(m, "a", 1) == -1 && skv_gmatch_exhausted(m)); /* the state did not change */
    /* a mask past the call's budget: 20,000 texts of 1-3 letters, from a state near the cap */
    skv_gmatch_free(m);
    m = skv_gmatch_new(g);
    CHECK(m && !skv_gmatch_feed(m, text, at - 4)); /* 3 more characters stay under the cap per character */
    enum { NV = 20000 };
    char(*vt)[4] = malloc(NV * sizeof *vt);
    const char **texts = malloc(NV * sizeof *texts);
    uint32_t *lens = malloc(NV * sizeof *lens);
    uint8_t *allow = malloc(NV);
    CHECK(vt && texts && lens && allow);
    for (int i = 0; i < NV; i++) {
        int n = 1 + i % 3;
        for (int k = 0, x = i; k < n; k++, x /= 26) vt[i][k] = (char)('a' + x % 26);
        texts[i] = vt[i], lens[i] = (uint32_t)n;
    }
    skv_gvocab *v = skv_gvocab_new(texts, lens, NV);
    CHECK(v);
    skv_gmatch_mask(m, v, allow);
    CHECK(skv_gmatch_exhausted(m));
    /* the same vocabulary on an everyday grammar: within the budget */
    skv_gbnf *easy = parse("root ::= [a-z ]+");
    skv_gmatch *e = easy ? skv_gmatch_new(easy) : NULL;
    CHECK(e);
    skv_gmatch_mask(e, v, allow);
    CHECK(!skv_gmatch_exhausted(e));
    for (int i = 0; i < NV; i++) CHECK(allow[i]);
    CHECK(skv_gmatch_feed(e, "1", 1) == -1 && !skv_gmatch_exhausted(e)); /* refused by the grammar */
    skv_gmatch_free(e), skv_gbnf_free(easy);
    skv_gvocab_free(v);
    free(vt), free(texts), free(lens), free(allow);
    skv_gmatch_free(m);
    skv_gbnf_free(g);
}

/* Many parse stacks at once (the hash table that merges equal ones grows, rehashing): 600
 * alternatives after a common first character, some equal, then the mask against tries. */
static void many_stacks(void)
{
    char *gr = malloc(600 * 24 + 64), *at = gr;
    CHECK(gr);
    at += sprintf(at, "root ::= ");
    for (int i = 0; i < 600; i++) at += sprintf(at, "%s\"a\" \"%d\"", i ? " | " : "", i % 500);
    skv_gbnf *g = parse(gr);
    free(gr);
    CHECK(g);
    skv_gmatch *m = skv_gmatch_new(g);
    CHECK(m && !skv_gmatch_feed(m, "a", 1));
    static const char *const texts[] = {"0", "1", "49", "499", "500", "5", "50", "x", "4999"};
    enum { N = sizeof texts / sizeof *texts };
    uint32_t lens[N];
    uint8_t allow[N];
    static const uint8_t want[N] = {1, 1, 1, 1, 0, 1, 1, 0, 0};
    for (int i = 0; i < N; i++) lens[i] = (uint32_t)strlen(texts[i]);
    skv_gvocab *v = skv_gvocab_new(texts, lens, N);
    CHECK(v);
    skv_gmatch_mask(m, v, allow);
    CHECK(!skv_gmatch_exhausted(m));
    for (int i = 0; i < N; i++) CHECK_MSG(allow[i] == want[i], "'%s': %d", texts[i], allow[i]);
    CHECK(!skv_gmatch_feed(m, "49", 2) && skv_gmatch_can_continue(m) && skv_gmatch_accepting(m));
    CHECK(!skv_gmatch_feed(m, "9", 1) && !skv_gmatch_can_continue(m));
    skv_gvocab_free(v);
    skv_gmatch_free(m);
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
        skv_gvocab *v = skv_gvocab_new(texts, lens, n);
        CHECK(v);
        skv_gmatch_mask(m, v, allow);
        skv_gvocab_free(v);
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

/* ---- JSON schemas ---- */
static char *gbnf_of(const char *schema_json)
{
    json_error_t je;
    json_t *j = json_loads(schema_json, JSON_DECODE_ANY, &je);
    char *g = j ? srv_schema_to_gbnf(j, &g_err) : NULL;
    json_decref(j);
    return g;
}

/* 1 accepted whole, 0 a prefix, -1 refused, -5 conversion failed (g_err.msg), -6 GBNF refused. */
static int schema_run(const char *schema_json, const char *input)
{
    char *text = gbnf_of(schema_json);
    if (!text) return -5;
    skv_gbnf *g = parse(text);
    if (!g) fprintf(stderr, "  %s\n%s\n", g_err.msg, text);
    int rc = g ? run_text(g, input) : -6;
    skv_gbnf_free(g);
    free(text);
    return rc;
}

static void schema_accepts(void)
{
    CHECK_EQ_INT(schema_run("{\"const\": \"42\"}", "\"42\""), 1);
    CHECK_EQ_INT(schema_run("{\"const\": \"42\"}", "42"), -1);
    CHECK_EQ_INT(schema_run("{\"items\": [{\"type\": \"integer\"}]}", "[ -3000 ]"), 1);
    CHECK_EQ_INT(schema_run("{\"items\": [{\"type\": \"integer\"}]}", "[1,2]"), -1);
    CHECK_EQ_INT(schema_run("{}", "{\"a\": [1, \"x\\n\", null, {\"b\": true}], \"c\": -1.5e3}"), 1);
    CHECK_EQ_INT(schema_run("{}", "1"), -1);
    const char *obj = "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\"}, \"b\": {\"type\": \"integer\", "
                      "\"minimum\": -5, \"maximum\": 120}}, \"required\": [\"a\"]}";
    CHECK_EQ_INT(schema_run(obj, "{\"a\": \"x\"}"), 1);
    CHECK_EQ_INT(schema_run(obj, "{ \"a\":\"x\", \"b\": 120 }"), 1);
    CHECK_EQ_INT(schema_run(obj, "{\"b\": 1}"), -1);
    CHECK_EQ_INT(schema_run(obj, "{\"a\": \"x\", \"b\": 121}"), -1);
    CHECK_EQ_INT(schema_run(obj, "{\"a\": \"x\", \"b\": -6}"), -1);
    const char *arr = "{\"type\": \"array\", \"items\": {\"type\": \"boolean\"}, \"minItems\": 1, \"maxItems\": 2}";
    CHECK_EQ_INT(schema_run(arr, "[true, false]"), 1);
    CHECK_EQ_INT(schema_run(arr, "[]"), -1);
    CHECK_EQ_INT(schema_run(arr, "[true,false,true]"), -1);
    CHECK_EQ_INT(schema_run("{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}", "\"ab\""), 1);
    CHECK_EQ_INT(schema_run("{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}", "\"a\""), -1);
    CHECK_EQ_INT(schema_run("{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}", "\"abcd\""), -1);
    const char *pat = "{\"type\": \"string\", \"pattern\": \"^[A-Z]{2}\\\\d+(-x|\\\\.y)?$\"}";
    CHECK_EQ_INT(schema_run(pat, "\"AB12-x\""), 1);
    CHECK_EQ_INT(schema_run(pat, "\"AB1.y\""), 1);
    CHECK_EQ_INT(schema_run(pat, "\"A1\""), -1);
    CHECK_EQ_INT(schema_run("{\"type\": \"string\", \"pattern\": \"^caf\u00e9+[\u00e0-\u00ff]$\"}", "\"caf\xc3\xa9\xc3\xa9\xc3\xbf\""), 1);
    const char *ref = "{\"$defs\": {\"n\": {\"type\": \"integer\"}}, \"type\": \"object\", \"properties\": {\"v\": "
                      "{\"$ref\": \"#/$defs/n\"}}, \"required\": [\"v\"]}";
    CHECK_EQ_INT(schema_run(ref, "{\"v\": 3}"), 1);
    const char *rec = "{\"$defs\": {\"t\": {\"type\": \"object\", \"properties\": {\"c\": {\"type\": \"array\", \"items\": "
                      "{\"$ref\": \"#/$defs/t\"}}}}}, \"$ref\": \"#/$defs/t\"}";
    CHECK_EQ_INT(schema_run(rec, "{\"c\": [{\"c\": []}, {}]}"), 1);
    CHECK_EQ_INT(schema_run("{\"anyOf\": [{\"type\": \"null\"}, {\"type\": \"number\"}]}", "1.5e3"), 1);
    CHECK_EQ_INT(schema_run("{\"type\": [\"null\", \"number\"]}", "null"), 1);
    CHECK_EQ_INT(schema_run("{\"anyOf\": [{\"type\": \"null\"}, {\"type\": \"number\"}]}", "\"x\""), -1);
    CHECK_EQ_INT(schema_run("{\"enum\": [\"a\", 1, null]}", "null"), 1);
    CHECK_EQ_INT(schema_run("{\"enum\": [\"a\", 1, null]}", "2"), -1);
    const char *add = "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"additionalProperties\": "
                      "{\"type\": \"string\"}}";
    CHECK_EQ_INT(schema_run(add, "{\"a\": 1, \"zz\": \"q\"}"), 1);
    CHECK_EQ_INT(schema_run(add, "{\"zz\": 1}"), -1);
    CHECK_EQ_INT(schema_run("{\"type\": \"string\", \"format\": \"date\"}", "\"2024-01-31\""), 1);
    CHECK_EQ_INT(schema_run("{\"allOf\": [{\"properties\": {\"a\": {\"type\": \"null\"}}}, {\"properties\": {\"b\": "
                            "{\"type\": \"null\"}}}]}", "{\"a\": null, \"b\": null}"), 1);
}

/* Integer bounds: every integer of -300..1300 accepted exactly when inside the range. */
static void schema_integer_ranges(void)
{
    static const struct { const char *bounds; long lo, hi; } k[] = {
        {"\"minimum\": -13, \"maximum\": 207", -13, 207}, {"\"minimum\": 5, \"maximum\": 5", 5, 5},
        {"\"minimum\": 0, \"maximum\": 1000", 0, 1000},   {"\"minimum\": 97", 97, 1000000},
        {"\"exclusiveMaximum\": 10", -1000000, 9},        {"\"minimum\": 100, \"maximum\": 1199", 100, 1199},
    };
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        char schema[200], num[32];
        snprintf(schema, sizeof schema, "{\"type\": \"integer\", %s}", k[i].bounds);
        char *text = gbnf_of(schema);
        skv_gbnf *g = text ? parse(text) : NULL;
        CHECK_MSG(g, "%s: %s", schema, g_err.msg);
        for (long v = -300; v <= 1300; v++) {
            snprintf(num, sizeof num, "%ld", v);
            int want = v >= k[i].lo && v <= k[i].hi;
            CHECK_MSG((run_text(g, num) == 1) == want, "%s: %ld %s", schema, v, want ? "refused" : "accepted");
        }
        skv_gbnf_free(g);
        free(text);
    }
}

static int schema_err(const char *schema_json, const char *what)
{
    char *g = gbnf_of(schema_json);
    free(g);
    if (!g && !strstr(g_err.msg, what)) fprintf(stderr, "  got: %s\n", g_err.msg);
    return !g && strstr(g_err.msg, what);
}

static void schema_refusals(void)
{
    CHECK(schema_err("{\"type\": \"hiccup\"}", "unrecognized \"type\""));
    CHECK(schema_err("{\"type\": 123}", "\"type\" must be"));
    CHECK(schema_err("123", "must be an object"));
    CHECK(schema_err("{\"not\": {}}", "\"not\" is not supported"));
    CHECK(schema_err("{\"type\": \"array\", \"uniqueItems\": true}", "uniqueItems"));
    CHECK(schema_err("{\"type\": \"number\", \"minimum\": 1}", "minimum/maximum"));
    CHECK(schema_err("{\"type\": \"string\", \"format\": \"email\"}", "format \"email\""));
    CHECK(schema_err("{\"$ref\": \"https://x/y.json\"}", "$ref"));
    CHECK(schema_err("{\"type\": \"string\", \"pattern\": \"abc\"}", "anchored"));
    CHECK(schema_err("{\"type\": \"string\", \"pattern\": \"^(?=x)a$\"}", "group syntax"));
    CHECK(schema_err("{\"type\": \"string\", \"pattern\": \"^a*?$\"}", "lazy"));
    CHECK(schema_err("{\"type\": \"string\", \"pattern\": \"^[z-a]$\"}", "upside down"));
    CHECK(schema_err("{\"type\": \"array\", \"items\": {}, \"minItems\": 3, \"maxItems\": 2}", "minItems above"));
}

/* The text for a representative schema, rule by rule (llama.cpp's shapes and names). */
static void schema_text(void)
{
    char *t = gbnf_of("{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}, \"s\": {\"const\": \"a\"}}, "
                      "\"required\": [\"n\"]}");
    CHECK(t);
    CHECK_MSG(strstr(t, "root ::= \"{\" space n-kv ( \",\" space ( s-kv ) )? space \"}\"\n"), "%s", t);
    CHECK_MSG(strstr(t, "n-kv ::= \"\\\"n\\\"\" space \":\" space integer\n"), "%s", t);
    CHECK_MSG(strstr(t, "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"), "%s", t);
    CHECK_MSG(strstr(t, "integral-part ::= [0] | [1-9] [0-9]{0,15}\n"), "%s", t);
    free(t);
}

/* The mask over a real vocabulary (stories260K's 512 token texts, byte tokens included)
 * equals the slow reference (a fresh recognizer per token), at prefixes of a JSON text. */
static void mask_on_model_vocab(void)
{
    char path[1024], err[256];
    skv_model *model = NULL;
    skv_model_info info;
    if (!test_stories_path(path, sizeof path, "stories260K.gguf")) SKIP("no ../shared/models/stories260K");
    CHECK_MSG(skv_model_load(path, NULL, &model, err, sizeof err) == 0, "%s", err);
    skv_model_get_info(model, &info);
    int n = info.n_vocab;
    char **texts = calloc((size_t)n, sizeof *texts);
    uint32_t *lens = calloc((size_t)n, sizeof *lens);
    uint8_t *allow = calloc((size_t)n, 1);
    for (int i = 0; i < n; i++) {
        char piece[256];
        size_t len = 0;
        if (skv_token_piece(model, i, piece, sizeof piece, &len)) len = 0;
        texts[i] = malloc(len + 1);
        memcpy(texts[i], piece, len);
        lens[i] = (uint32_t)len;
    }
    char *gtext = gbnf_of("{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"n\": {\"type\": "
                          "\"integer\", \"minimum\": 0, \"maximum\": 99}}, \"required\": [\"name\", \"n\"]}");
    skv_gbnf *g = gtext ? parse(gtext) : NULL;
    skv_gvocab *vocab = skv_gvocab_new((const char *const *)texts, lens, (size_t)n);
    CHECK(g && vocab);
    const char *prefixes[] = {"", "{", "{ \"name\"", "{\"name\": \"J\xc3", "{\"name\": \"Jo\\", "{\"name\": \"x\", \"n\": 4"};
    int mismatches = 0, allowed = 0;
    for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++) {
        skv_gmatch *m = skv_gmatch_new(g);
        CHECK_MSG(m && !skv_gmatch_feed(m, prefixes[p], strlen(prefixes[p])), "prefix %zu", p);
        skv_gmatch_mask(m, vocab, allow);
        for (int i = 0; i < n; i++) {
            skv_gmatch *r = skv_gmatch_new(g);
            int ref = lens[i] && !skv_gmatch_feed(r, prefixes[p], strlen(prefixes[p])) && !skv_gmatch_feed(r, texts[i], lens[i]);
            skv_gmatch_free(r);
            mismatches += allow[i] != ref;
            allowed += allow[i];
        }
        skv_gmatch_free(m);
    }
    CHECK_MSG(!mismatches, "%d tokens where the mask and the reference differ", mismatches);
    CHECK_MSG(allowed > 6, "only %d tokens allowed in all", allowed);
    for (int i = 0; i < n; i++) free(texts[i]);
    free(texts), free(lens), free(allow), free(gtext);
    skv_gbnf_free(g);
    skv_gvocab_free(vocab);
    skv_model_free(model);
}

int main(void)
{
    TEST_BEGIN("test_grammar");
    RUN(accepts_and_refuses);
    RUN(partial_utf8);
    RUN(parser_errors);
    RUN(bounds_hold);
    RUN(costly_refused_for_cost);
    RUN(many_stacks);
    RUN(mask_matches_reference);
    RUN(mask_on_model_vocab);
    RUN(schema_accepts);
    RUN(schema_integer_ranges);
    RUN(schema_refusals);
    RUN(schema_text);
    TEST_END();
}
