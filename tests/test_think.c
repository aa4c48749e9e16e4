/* A chat reply's thoughts split from its content (src/server/think.c): the split of known
 * replies, the template's markers, a prompt that opens the block, and the property streams
 * rely on: the pieces a stream sends as the text grows byte by byte (each split of a prefix,
 * only what it decided) add up to the final split, for every reply below. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "server/srv.h"

/* The final split of t as two strings (malloc'ed into r and c). */
static void split_final(int marker, int opened, const char *t, char **r, char **c)
{
    srv_think_parts p;
    size_t n = strlen(t);
    srv_think_split(marker, opened, t, n, 1, &p);
    *r = calloc(1, p.r1 - p.r0 + 1), *c = calloc(1, p.c1 - p.c0 + 1);
    memcpy(*r, t + p.r0, p.r1 - p.r0);
    memcpy(*c, t + p.c0, p.c1 - p.c0);
}

static int split_is(int marker, int opened, const char *t, const char *want_r, const char *want_c)
{
    char *r, *c;
    split_final(marker, opened, t, &r, &c);
    int ok = !strcmp(r, want_r) && !strcmp(c, want_c);
    if (!ok) fprintf(stderr, "split of \"%s\": reasoning \"%s\" content \"%s\"\n", t, r, c);
    free(r), free(c);
    return ok;
}

static void known_replies(void)
{
    CHECK(split_is(0, 0, "<think>abc</think>xyz", "abc", "xyz"));
    CHECK(split_is(0, 0, "  <think>\n a b \n</think>\n\nHi there", "a b", "Hi there"));
    CHECK(split_is(0, 0, "Hi <think>x</think> y", "", "Hi <think>x</think> y")); /* not at the start: content */
    CHECK(split_is(0, 0, "<think>never closed  ", "never closed", ""));
    CHECK(split_is(0, 0, "<think>\n\n</think>\n\nAnswer", "", "Answer")); /* an empty block (thinking off) */
    CHECK(split_is(0, 0, "<thi", "", "<thi"));                            /* a marker's start that never came */
    CHECK(split_is(0, 0, "", "", ""));
    CHECK(split_is(0, 0, "plain reply", "", "plain reply"));
    CHECK(split_is(0, 1, "reasoned</think>answer", "reasoned", "answer")); /* the prompt opened it */
    CHECK(split_is(0, 1, "all thought", "all thought", ""));
    CHECK(split_is(0, 1, "a </thin b", "a </thin b", ""));
    CHECK(split_is(0, 0, "<think>x</think>y</think>z", "x", "y</think>z")); /* the first close ends it */
    CHECK(split_is(2, 0, "<|START_THINKING|>plan<|END_THINKING|>do", "plan", "do"));
    CHECK(split_is(3, 0, "[THINK]hm[/THINK] ok", "hm", "ok"));
    CHECK(split_is(-1, 0, "<think>abc</think>xyz", "", "<think>abc</think>xyz")); /* no markers: no split */
    CHECK(split_is(0, 0, "<think>caf\xc3\xa9 \xe2\x9c\x93</think>\xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x9c\x93",
                   "\xf0\x9f\x98\x80"));
}

static void markers_of_templates(void)
{
    CHECK_EQ_INT(srv_think_marker("{{ '<think>\\n' }}"), 0);
    CHECK_EQ_INT(srv_think_marker("{% if x %}<seed:think>{% endif %}"), 1);
    CHECK_EQ_INT(srv_think_marker("<|START_THINKING|>"), 2);
    CHECK_EQ_INT(srv_think_marker("[THINK]"), 3);
    CHECK_EQ_INT(srv_think_marker("{{ bos_token }}<|im_start|>"), -1);
    CHECK_EQ_INT(srv_think_marker(NULL), -1);
    const char *p = "<|im_start|>assistant\n<think>\n";
    CHECK(srv_think_opened(0, p, strlen(p)));
    p = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    CHECK(!srv_think_opened(0, p, strlen(p)));
    CHECK(!srv_think_opened(-1, p, strlen(p)));
    CHECK_EQ_INT(srv_think_format("deepseek-legacy"), SRV_REASON_LEGACY);
    CHECK_EQ_INT(srv_think_format("auto"), SRV_REASON_AUTO);
    CHECK_EQ_INT(srv_think_format("Deepseek"), -1);
    CHECK_EQ_INT(srv_think_format(NULL), -1);
}

/* Appends t[from, to) to a string of cap bytes. */
static void append(char *a, size_t cap, const char *t, size_t from, size_t to)
{
    size_t n = strlen(a);
    if (to > from && n + (to - from) < cap) memcpy(a + n, t + from, to - from), a[n + to - from] = 0;
}

/* The stream of t (a split per prefix, then the final one) adds up to the final split, and
 * a piece once sent is never taken back (what is decided stays decided). */
static int stream_adds_up(int marker, int opened, const char *t)
{
    size_t n = strlen(t), rs = 0, cs = 0;
    char r[512] = "", c[512] = "", *fr, *fc;
    srv_think_parts p;
    for (size_t k = 0; k <= n + 1; k++) {
        srv_think_split(marker, opened, t, k <= n ? k : n, k > n, &p);
        if (p.r0 > p.r1 || p.c0 > p.c1 || p.r1 > n || p.c1 > n) return 0;
        if ((rs && p.r0 > rs) || (cs && p.c0 > cs)) return 0; /* a start moved past what was sent */
        size_t from = rs > p.r0 ? rs : p.r0;
        if (p.r1 > from) append(r, sizeof r, t, from, p.r1), rs = p.r1;
        from = cs > p.c0 ? cs : p.c0;
        if (p.c1 > from) append(c, sizeof c, t, from, p.c1), cs = p.c1;
    }
    split_final(marker, opened, t, &fr, &fc);
    int ok = !strcmp(r, fr) && !strcmp(c, fc);
    if (!ok) fprintf(stderr, "stream of \"%s\": \"%s\" + \"%s\", final \"%s\" + \"%s\"\n", t, r, c, fr, fc);
    free(fr), free(fc);
    return ok;
}

static void streams_add_up(void)
{
    static const char *const replies[] = {
        "<think>abc</think>xyz", "  <think>\n a b \n</think>\n\nHi there", "Hi <think>x</think> y",
        "<think>never closed  ", "<think>\n\n</think>\n\nAnswer", "<thi", "", " ", "plain reply", "<", "</think>",
        "<think>a </thin b</think> c", "<think>a <think> b</think>c", "<think>x</think>y</think>z", "<think></think>",
        "<think>  spaced   out  </think>   then   text  ", "reasoned</think>answer", "all thought", "a </thin b",
        "<think>caf\xc3\xa9</think>\xf0\x9f\x98\x80", "\n<think>\n", "<think>\n</think", "<think> </think> ",
    };
    for (size_t i = 0; i < sizeof replies / sizeof *replies; i++)
        for (int opened = 0; opened <= 1; opened++)
            for (int marker = -1; marker <= 0; marker++)
                CHECK_MSG(stream_adds_up(marker, opened, replies[i]), "reply %zu (opened %d, marker %d)", i, opened, marker);
    CHECK(stream_adds_up(2, 0, "<|START_THINKING|>plan <|END_THI<|END_THINKING|> do"));
    CHECK(stream_adds_up(3, 1, "hm [/THIN [/THINK]ok"));
}

/* The thinking budget over a reply the "model" writes piece by piece (each piece one token;
 * a forced token writes "#"): budget 2 with a 2-token forced close, so each thought gets
 * two of the model's tokens and then "##"; a second thought later in the reply is budgeted
 * again; one the model closes itself is left alone; a prompt that opened the block counts
 * from the reply's start. */
static char *run_budget(const char *const *pieces, int opened, int budget)
{
    static char text[512];
    int32_t force[2] = {7, 8};
    srv_job j = {0};
    j.think_mark = 1, j.think_opened = opened, j.think_budget = budget, j.think_force = force, j.n_force = 2;
    j.text = text, text[0] = 0;
    for (size_t p = 0; pieces[p] && strlen(text) < 400;) {
        int32_t tok = -1;
        if (srv_think_budget_next(&j, &tok)) strcat(text, "#");
        else strcat(text, pieces[p++]);
        j.len = strlen(text);
    }
    return text;
}

static void budget_per_thought(void)
{
    static const char *const two[] = {"<think>", "a", "b", "c", "d", "</think>", "x", "<think>", "e", "f", "g", "</think>", "y", NULL};
    CHECK_MSG(!strcmp(run_budget(two, 0, 2), "<think>ab##cd</think>x<think>ef##g</think>y"), "%s", run_budget(two, 0, 2));
    static const char *const short_[] = {"<think>", "a", "</think>", "x", "<th", "ink>", "b", "c", "d", NULL};
    CHECK_MSG(!strcmp(run_budget(short_, 0, 2), "<think>a</think>x<think>bc##d"), "%s", run_budget(short_, 0, 2));
    static const char *const opened[] = {"a", "b", "c", "</think>", "<think>", "d", "e", "f", NULL};
    CHECK_MSG(!strcmp(run_budget(opened, 1, 2), "ab##c</think><think>de##f"), "%s", run_budget(opened, 1, 2));
    CHECK_MSG(!strcmp(run_budget(opened, 1, 0), "##abc</think><think>##def"), "%s", run_budget(opened, 1, 0));
    CHECK_MSG(!strcmp(run_budget(two, 0, -1), "<think>abcd</think>x<think>efg</think>y"), "%s", run_budget(two, 0, -1));
}

int main(void)
{
    TEST_BEGIN("test_think");
    RUN(known_replies);
    RUN(markers_of_templates);
    RUN(streams_add_up);
    RUN(budget_per_thought);
    TEST_END();
}
