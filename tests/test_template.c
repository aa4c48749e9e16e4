/* Chat templates (src/server/template*.c, docs/templates.md).
 *
 * 1. llama.cpp's own chat-template tests: tests/data/templates/NN.case, extracted from
 *    its tests/test-chat-template.cpp by scripts/extract_chat_tests.py. Each case is
 *    rendered like llama.cpp's Jinja path (the fixed conversation, add_generation_prompt,
 *    the case's bos/eos, a leading system message merged into the next one when the
 *    template ignores it) and must equal llama.cpp's expected rendering byte for byte.
 * 2. The named built-ins (--chat-template NAME) against llama.cpp's built-in formatter's
 *    rendering of the same conversation (the cases' expected_builtin).
 * 3. Semantics, errors with positions, and the limits on hostile templates. */
#include <dirent.h>
#include <stdint.h>

#include "test.h"
#include "seqkv.h"
#include "server/template.h"

#define CASE_DIR "tests/data/templates"
#define MAX_MSGS 16

typedef struct {
    char file[64];
    char *buf;                     /* the file; sections point into it (NUL-terminated) */
    const char *name, *tmpl, *expected, *expected_builtin, *bos, *eos;
    size_t tmpl_len;
    int jinja;
    skv_tmpl_msg msgs[MAX_MSGS];
    size_t n_msgs;
} fixture;

static fixture fx[64];
static size_t n_fx;
static size_t cur_fx;

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    if (b) b[n] = 0, *len = (size_t)n;
    fclose(f);
    return b;
}

static void fixture_field(fixture *x, const char *key, const char *val, size_t n)
{
    if (!strcmp(key, "name")) x->name = val;
    else if (!strcmp(key, "template")) x->tmpl = val, x->tmpl_len = n;
    else if (!strcmp(key, "expected")) x->expected = val;
    else if (!strcmp(key, "expected_builtin")) x->expected_builtin = val;
    else if (!strcmp(key, "bos")) x->bos = val;
    else if (!strcmp(key, "eos")) x->eos = val;
    else if (!strcmp(key, "jinja")) x->jinja = val[0] == '1';
    else if (!strcmp(key, "role") && x->n_msgs < MAX_MSGS) x->msgs[x->n_msgs].role = val;
    else if (!strcmp(key, "content") && x->n_msgs < MAX_MSGS) x->msgs[x->n_msgs++].content = val;
}

/* Sections "@KEY LEN\n" + LEN bytes + "\n"; each value is NUL-terminated in place. */
static int fixture_load(fixture *x, const char *path)
{
    size_t len, i = 0;
    x->buf = read_file(path, &len);
    if (!x->buf) return 0;
    while (i < len) {
        char key[32];
        unsigned long n;
        int used;
        if (sscanf(x->buf + i, "@%31s %lu%n", key, &n, &used) != 2) return 0;
        i += (size_t)used + 1;
        if (n > len - i) return 0;
        x->buf[i + n] = 0;
        fixture_field(x, key, x->buf + i, n);
        i += n + 1;
    }
    return x->name && x->tmpl && x->expected;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void fixtures_load(void)
{
    DIR *d = opendir(CASE_DIR);
    char *names[64];
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && n < 64)
        if (strstr(e->d_name, ".case")) names[n++] = strdup(e->d_name);
    if (d) closedir(d);
    qsort(names, n, sizeof names[0], cmp_str);
    for (size_t i = 0; i < n; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", CASE_DIR, names[i]);
        snprintf(fx[n_fx].file, sizeof fx[n_fx].file, "%s", names[i]);
        if (fixture_load(&fx[n_fx], path)) n_fx++;
        free(names[i]);
    }
}

/* Renders template src with fixture x's conversation as llama.cpp's Jinja path does. */
static int render_fixture(const fixture *x, const char *src, size_t len, char **out,
                          skv_tmpl_error *err)
{
    skv_tmpl *t;
    int st = skv_tmpl_parse(src, len, NULL, &t, err);
    if (st != SKV_OK) return st;
    skv_tmpl_var think = {.name = "enable_thinking", .kind = SKV_TMPL_VAR_BOOL, .b = 1};
    skv_tmpl_input in = {.msgs = x->msgs, .n_msgs = x->n_msgs, .add_generation_prompt = 1,
                         .bos_token = x->bos, .eos_token = x->eos, .vars = &think, .n_vars = 1};
    st = skv_tmpl_render_chat(t, &in, out, NULL, err);
    skv_tmpl_free(t);
    return st;
}

/* the first differing byte, for the failure message */
static size_t first_diff(const char *a, const char *b)
{
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    return i;
}

static int n_jinja, n_jinja_pass;

static void llama_cpp_case(void)
{
    const fixture *x = &fx[cur_fx];
    char *out = NULL;
    skv_tmpl_error err;
    if (!x->jinja) SKIP("%s: llama.cpp marks it unsupported by its Jinja engine too", x->name);
    n_jinja++;
    int st = render_fixture(x, x->tmpl, x->tmpl_len, &out, &err);
    CHECK_MSG(st == SKV_OK, "%s: %s at %d:%d", x->name, err.msg, err.line, err.col);
    size_t d = first_diff(out, x->expected);
    int same = strcmp(out, x->expected) == 0;
    if (!same) test_fail_at(__FILE__, __LINE__, "%s: differs at byte %zu: got \"%.40s\" want \"%.40s\"",
                            x->name, d, out + d, x->expected + d);
    free(out);
    n_jinja_pass += same;
}

static void llama_cpp_cases(void)
{
    char name[128];
    for (cur_fx = 0; cur_fx < n_fx; cur_fx++) {
        snprintf(name, sizeof name, "llama_cpp_%s", fx[cur_fx].file);
        test_run_case(name, llama_cpp_case);
    }
}


/* ---- 2. built-ins against llama.cpp's built-in formatter ---- */
static const struct { const char *builtin, *fixture_name; } builtin_cases[] = {
    {"chatml", "teknium/OpenHermes-2.5-Mistral-7B"},
    {"llama2", "mistralai/Mistral-7B-Instruct-v0.2 (NOTE"},
    {"llama3", "Llama-3"},
    {"mistral-v7", "mistralai/Mistral-Large-Instruct-2411"},
    {"gemma", "google/gemma-7b-it"},
    {"phi3", "Phi-3-mini"},
    {"phi4", "phi-4"},
    {"monarch", "mlabonne/AlphaMonarch-7B"},
    {"vicuna", "eachadea/vicuna-13b-1.1"},
    {"bailing", "inclusionAI/Ling-lite"},
    {"command-r", "CohereForAI/c4ai-command-r-plus"},
};

static const fixture *fixture_named(const char *prefix)
{
    for (size_t i = 0; i < n_fx; i++)
        if (strncmp(fx[i].name, prefix, strlen(prefix)) == 0) return &fx[i];
    return NULL;
}

static void builtins_match_llama_cpp(void)
{
    for (size_t i = 0; i < sizeof builtin_cases / sizeof builtin_cases[0]; i++) {
        const char *src = skv_tmpl_builtin(builtin_cases[i].builtin);
        const fixture *x = fixture_named(builtin_cases[i].fixture_name);
        char *out = NULL;
        skv_tmpl_error err;
        CHECK_MSG(src && x, "%s: no built-in or no fixture", builtin_cases[i].builtin);
        int st = render_fixture(x, src, strlen(src), &out, &err);
        CHECK_MSG(st == SKV_OK, "%s: %s", builtin_cases[i].builtin, err.msg);
        size_t d = first_diff(out, x->expected_builtin);
        int same = strcmp(out, x->expected_builtin) == 0;
        if (!same) test_fail_at(__FILE__, __LINE__, "%s: differs at byte %zu: \"%.30s\"",
                                builtin_cases[i].builtin, d, out + d);
        free(out);
        if (!same) return;
    }
}

static char *render_src(const char *src, const skv_tmpl_msg *msgs, size_t n, int *status,
                        skv_tmpl_error *err)
{
    skv_tmpl *t;
    char *out = NULL;
    *status = skv_tmpl_parse(src, strlen(src), NULL, &t, err);
    if (*status != SKV_OK) return NULL;
    skv_tmpl_input in = {.msgs = msgs, .n_msgs = n, .add_generation_prompt = 1,
                         .bos_token = "<s>", .eos_token = "</s>"};
    *status = skv_tmpl_render_chat(t, &in, &out, NULL, err);
    skv_tmpl_free(t);
    return out;
}

static const skv_tmpl_msg two[] = {{"user", "Hi"}, {"assistant", "Yo"}};

static void builtin_zephyr_and_simple(void)
{
    int st;
    skv_tmpl_error err;
    char *z = render_src(skv_tmpl_builtin("zephyr"), two, 2, &st, &err);
    CHECK(z && strcmp(z, "<|user|>\nHi<|endoftext|>\n<|assistant|>\nYo<|endoftext|>\n<|assistant|>\n") == 0);
    free(z);
    char *s = render_src(skv_tmpl_builtin("simple"), two, 2, &st, &err);
    CHECK(s && strcmp(s, "User: Hi\nAssistant: Yo\nAssistant:") == 0);
    free(s);
    CHECK(skv_tmpl_builtin("no-such-template") == NULL);
    size_t n = 0;
    while (skv_tmpl_builtin_name(n)) n++;
    CHECK(n >= 12);
}

/* ---- 3. semantics ---- */
static const struct { const char *src, *want; } semantics[] = {
    {"{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}", "2"},
    {"{% for m in messages %}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.revindex0 }},{% endfor %}", "1TrueFalse1,2FalseTrue0,"},
    {"{{ messages[-1].content }}{{ messages[1:][0]['role'] }}{{ 'abcdef'[1:4] }}{{ 'abc'[::-1] }}", "Yoassistantbcdcba"},
    /* steps, and steps too large to add to an index (fuzz_template, 2026-12-06: signed overflow) */
    {"{{ 'abcdef'[::2] }}{{ 'abcdef'[::-2] }}{{ 'abcdef'[1:-1:9223372036854775807] }}{{ 'abcdef'[4:0:-9223372036854775807] }}"
     "{{ [1, 2, 3][::9223372036854775807] }}", "acefdbbe[1]"},
    {"{{ [1, 2, 3] | join('-') }} {{ 'a,b'.split(',') }} {{ ' x '.strip() }}|{{ 'Hi There'|lower }}", "1-2-3 ['a', 'b'] x|hi there"},
    {"{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}", "['Hi']"},
    {"{{ {'a': [1, 2.5, none, true]} | tojson }}", "{\"a\": [1, 2.5, null, true]}"},
    {"{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 ~ 'x' }}", "3 -4 2 1024 3.5 1x"},
    /* ~ joins text whatever its operands (a list ~ anything read the other as a list: a crash, fuzz_template) */
    {"{{ [1] ~ 'x' }}|{{ [1] ~ [2] }}|{{ [1] + [2] }}|{{ 'a' ~ [none] }}", "[1]x|[1][2]|[1, 2]|a[None]"},
    {"{% macro f(a, b='d') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(2, b='e') }}", "[1d][2e]"},
    {"{% if x is not defined and 'i' in 'hi' and 3 is odd %}ok{% endif %}", "ok"},
    {"{{ 'yes' if messages|length > 1 else 'no' }}{{ undefined_thing | default('dflt') }}", "yesdflt"},
    {"a  {%- if true -%}  b  {%- endif -%}  c", "abc"},
    {"x\n  {% if true %}\ny{% endif %}\nz", "x\nyz"}, /* lstrip_blocks + trim_blocks */
    {"{% set x %}in{{ 1 }}{% endset %}{{ x }}{% for k, v in {'p': 1}.items() %}{{ k }}={{ v }}{% endfor %}", "in1p=1"},
    {"{% filter trim %}  in{{ 1 }}  {% endfilter %}|{% filter trim | upper %} a b {% endfilter %}|"
     "{% filter replace('x', 'y') %}xx{% endfilter %}", "in1|A B|yy"},
    /* llama.cpp's engine: a string plus none or undefined is the string (firefunction-v2's template) */
    {"{{ 'a' + none }}|{{ undefined_thing + 'b' }}|{{ 'c' + x_undefined + 'd' }}", "a|b|cd"},
    {"{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", "02"},
    {"{# comment #}{{ 'user'.title() }}{{ none }}{{ 'a' * 3 }}{% for x in [] %}1{% else %}empty{% endfor %}", "UserNoneaaaempty"},
};

static void semantics_match_jinja(void)
{
    for (size_t i = 0; i < sizeof semantics / sizeof semantics[0]; i++) {
        int st;
        skv_tmpl_error err;
        char *out = render_src(semantics[i].src, two, 2, &st, &err);
        CHECK_MSG(out, "case %zu: %s at %d:%d", i, err.msg, err.line, err.col);
        int same = strcmp(out, semantics[i].want) == 0;
        if (!same) test_fail_at(__FILE__, __LINE__, "case %zu: got \"%s\" want \"%s\"", i, out, semantics[i].want);
        free(out);
        if (!same) return;
    }
}

static void errors_have_positions(void)
{
    int st;
    skv_tmpl_error err;
    CHECK(render_src("ok\n  {% if %}", two, 2, &st, &err) == NULL);
    CHECK_EQ_INT(st, SKV_ERR_FORMAT);
    CHECK_EQ_INT(err.line, 2);
    CHECK(render_src("{% for x in y %}", two, 2, &st, &err) == NULL && st == SKV_ERR_FORMAT);
    CHECK(strstr(err.msg, "missing end tag"));
    CHECK(render_src("{{ 'x' ", two, 2, &st, &err) == NULL && st == SKV_ERR_FORMAT);
    CHECK(render_src("a\n{{ raise_exception('roles must alternate') }}", two, 2, &st, &err) == NULL);
    CHECK(st == SKV_ERR_FORMAT && strstr(err.msg, "roles must alternate") && err.line == 2);
    CHECK(render_src("{{ 1 + 'a' }}", two, 2, &st, &err) == NULL && st == SKV_ERR_FORMAT);
    CHECK(render_src("{{ 9223372036854775807 + 1 }}", two, 2, &st, &err) == NULL && st == SKV_ERR_FORMAT);
    CHECK(render_src("{{ x | nosuchfilter }}", two, 2, &st, &err) == NULL && strstr(err.msg, "nosuchfilter"));
}

/* The `tools` global and a message's structured fields (tool_calls, tool_call_id) come as
 * JSON text: they render as Jinja values, and broken or hostile JSON is an error, never a
 * crash or a silent drop. */
static char *render_tools(const char *src, const char *tools, const char *const *fields, int *st, skv_tmpl_error *err)
{
    skv_tmpl *t;
    char *out = NULL;
    static const skv_tmpl_msg msgs[] = {{"user", "Hi"}, {"assistant", ""}, {"tool", "21C"}};
    *st = skv_tmpl_parse(src, strlen(src), NULL, &t, err);
    if (*st != SKV_OK) return NULL;
    skv_tmpl_input in = {.msgs = msgs, .n_msgs = 3, .tools_json = tools, .msg_fields = fields};
    *st = skv_tmpl_render(t, &in, &out, NULL, err);
    skv_tmpl_free(t);
    return out;
}

static void structured_inputs_render(void)
{
    static const char src[] = "{% for t in tools %}[{{ t.function.name }}:{{ t.function.parameters | tojson }}]"
                              "{% endfor %}{% for m in messages %}{{ m.role }}"
                              "{% for c in m.tool_calls %}({{ c.function.name }} {{ c.function.arguments.city }} "
                              "{{ c.id }}){% endfor %}{% if m.tool_call_id %}<{{ m.tool_call_id }}>{% endif %}|"
                              "{% endfor %}{{ tools is defined }}";
    const char *fields[] = {NULL,
                            "{\"tool_calls\": [{\"id\": \"c\\u00e91\", \"type\": \"function\", \"function\": "
                            "{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\", \"n\": -2.5e1}}}]}",
                            "{\"tool_call_id\": \"c1\"}"};
    int st;
    skv_tmpl_error err;
    char *out = render_tools(src, "[{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": "
                             "{\"type\": \"object\", \"required\": [\"city\"], \"x\": [true, null, 3]}}}]",
                             fields, &st, &err);
    CHECK(out && strcmp(out, "[w:{\"type\": \"object\", \"required\": [\"city\"], \"x\": [true, null, 3]}]"
                             "user|assistant(w Paris c\xc3\xa9" "1)|tool<c1>|True") == 0);
    free(out);
    out = render_tools(src, NULL, NULL, &st, &err);
    CHECK(out && strcmp(out, "user|assistant|tool|False") == 0);
    free(out);
    static const char *const bad[] = {"[", "[1,]", "{\"a\" 1}", "\"\\ud800\"", "\"\\x\"", "[1] 2", "\"a\nb\"",
                                      "nul", "--1", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        out = render_tools(src, bad[i], NULL, &st, &err);
        CHECK(!out && st == SKV_ERR_FORMAT && strstr(err.msg, "structured template input"));
        free(out);
    }
    char deep[400];
    memset(deep, '[', sizeof deep - 1), deep[sizeof deep - 1] = 0;
    out = render_tools(src, deep, NULL, &st, &err);
    CHECK(!out && st == SKV_ERR_FORMAT && strstr(err.msg, "nested too deeply"));
    const char *not_object[] = {NULL, "[1]", NULL};
    out = render_tools(src, NULL, not_object, &st, &err);
    CHECK(!out && st == SKV_ERR_FORMAT);
    free(out);
}

static void hostile_templates_are_bounded(void)
{
    int st;
    skv_tmpl_error err;
    char deep[4096];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof deep, "{{ ");
    for (int i = 0; i < 1000; i++) deep[n++] = '(';
    deep[n] = 0;
    CHECK(render_src(deep, two, 2, &st, &err) == NULL && st == SKV_ERR_FORMAT);
    CHECK(render_src("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                     two, 2, &st, &err) == NULL && st == SKV_ERR_RANGE);
    CHECK(render_src("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", two, 2, &st, &err) == NULL);
    CHECK_EQ_INT(st, SKV_ERR_RANGE);
    CHECK(render_src("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}", two, 2,
                     &st, &err) == NULL && st == SKV_ERR_RANGE);
    CHECK(render_src("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
                     two, 2, &st, &err) == NULL && st == SKV_ERR_RANGE);
    CHECK(render_src("{% set l = [] %}{{ l.append(l) }}{{ l == [l] }}{{ l }}", two, 2, &st, &err) == NULL);
    CHECK_EQ_INT(st, SKV_ERR_RANGE); /* a list holding itself: printed to a bounded depth */
}

static void fixtures_present(void)
{
    CHECK_MSG(n_fx >= 30, "only %zu fixtures in " CASE_DIR, n_fx);
}

int main(void)
{
    TEST_BEGIN("test_template");
    fixtures_load();
    RUN(fixtures_present);
    llama_cpp_cases();
    RUN(builtins_match_llama_cpp);
    RUN(builtin_zephyr_and_simple);
    RUN(semantics_match_jinja);
    RUN(errors_have_positions);
    RUN(structured_inputs_render);
    RUN(hostile_templates_are_bounded);
    fprintf(stderr, "llama.cpp chat-template cases: %d/%d passed\n", n_jinja_pass, n_jinja);
    for (size_t i = 0; i < n_fx; i++) free(fx[i].buf);
    TEST_END();
}
