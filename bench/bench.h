/* Helpers shared by the bench/ programs (header-only: each bench is one C file). */
#ifndef SKV_BENCH_H
#define SKV_BENCH_H

#include <stdio.h>
#include <stdlib.h>

/* The first max bytes of a file (the whole file when max is 0), NUL-terminated; *n
 * receives the length. NULL when the file cannot be read. */
static inline char *bench_slurp(const char *path, size_t max, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *b = NULL;
    long len;
    if (!f) return NULL;
    if (!max && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) max = (size_t)len;
    if (max && (b = malloc(max + 1))) {
        *n = fread(b, 1, max, f);
        b[*n] = 0;
    }
    fclose(f);
    return b;
}

#endif
