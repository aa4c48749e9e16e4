/* The CLI's words about codecs, all read from the library's codec table (skv_codec_at):
 * --codec's help, the lists in usage errors, inspect's line. A codec added to the table
 * shows up here without an edit. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

#define HELP_WIDTH 54 /* columns of help text after the options' column (cli_opt.c HELP_COL) */

/* Appends s to buf[*len..cap) (cut at the end of the buffer). */
static void put(char *buf, size_t cap, size_t *len, const char *s)
{
    int k = *len < cap ? snprintf(buf + *len, cap - *len, "%s", s) : 0;
    *len += k > 0 ? (size_t)k : 0;
    if (cap && *len >= cap) *len = cap - 1; /* cut: the rest is dropped */
}

/* "name: help" word-wrapped at HELP_WIDTH, continuation lines indented by two spaces. */
static void put_wrapped(char *buf, size_t cap, size_t *len, const char *name, const char *help)
{
    size_t col = strlen(name) + 2;
    char word[128];
    put(buf, cap, len, name);
    put(buf, cap, len, ":");
    for (const char *p = help; *p;) {
        size_t n = strcspn(p, " ");
        snprintf(word, sizeof word, "%.*s", (int)(n < sizeof word ? n : sizeof word - 1), p);
        if (col + 1 + n > HELP_WIDTH) put(buf, cap, len, "\n  "), col = 2;
        else put(buf, cap, len, " "), col++;
        put(buf, cap, len, word);
        col += n;
        p += n + (p[n] == ' ');
    }
}

const char *cli_codec_help(char *buf, size_t cap, const char *lead)
{
    size_t len = 0;
    const skv_codec_desc *d;
    buf[0] = 0;
    put(buf, cap, &len, lead);
    for (size_t i = 0; (d = skv_codec_at(i)); i++) {
        if (len) put(buf, cap, &len, "\n");
        put_wrapped(buf, cap, &len, d->name, d->help);
    }
    return buf;
}

const char *cli_codec_names(char *buf, size_t cap, unsigned need, unsigned without)
{
    size_t len = 0;
    const skv_codec_desc *d;
    buf[0] = 0;
    for (size_t i = 0; (d = skv_codec_at(i)); i++) {
        if ((d->flags & need) != need || (d->flags & without)) continue;
        if (len) put(buf, cap, &len, " ");
        put(buf, cap, &len, d->name);
    }
    return buf;
}

int cli_codec_has(int codec, unsigned flags)
{
    const skv_codec_desc *d = skv_codec_desc_of(codec);
    return d && (d->flags & flags) == flags;
}
