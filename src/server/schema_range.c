/* Integer ranges (JSON schema minimum/maximum on integers) as GBNF: the range is split by
 * sign and by number of digits, and each same-length range [A, B] by its first differing
 * digit (A's digit then anything up to 9s, the digits between, B's digit then 0s up to B).
 * An open side stops at 16 digits, as llama.cpp's integral-part. */
#include "core/fpguard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/schema_int.h"

#define OPEN_MAX 9999999999999999LL /* 16 digits */

static int all_of(const char *s, char d)
{
    for (; *s; s++)
        if (*s != d) return 0;
    return 1;
}

static char *same_len(sc *c, const char *a, const char *b);

/* digit d followed by the range [a_rest, b_rest] of the remaining digits */
static char *digit_then(sc *c, char d, const char *a, const char *b)
{
    char *r = same_len(c, a, b), *o = r ? sc_strf(c, "[%c] %s", d, r) : NULL;
    free(r);
    return o;
}

/* [A, B], A <= B, both n digits (leading zeros allowed inside the recursion). */
static char *same_len(sc *c, const char *a, const char *b)
{
    size_t n = strlen(a), i = 0;
    if (!n) return sc_strf(c, "%s", "\"\"");
    while (i < n && a[i] == b[i]) i++;
    if (i == n) return sc_strf(c, "\"%s\"", a);
    char pre[24] = "", nines[24], zeros[24], *lo = NULL, *mid = NULL, *hi = NULL;
    size_t r = n - i - 1;
    if (i) snprintf(pre, sizeof pre, "\"%.*s\" ", (int)i, a);
    if (!r) return sc_strf(c, "%s[%c-%c]", pre, a[i], b[i]);
    memset(nines, '9', r), nines[r] = 0, memset(zeros, '0', r), zeros[r] = 0;
    char mlo = all_of(a + i + 1, '0') ? a[i] : (char)(a[i] + 1), mhi = all_of(b + i + 1, '9') ? b[i] : (char)(b[i] - 1);
    if (mlo != a[i]) lo = digit_then(c, a[i], a + i + 1, nines);
    if (mlo <= mhi) mid = sc_strf(c, "[%c-%c] [0-9]{%zu}", mlo, mhi, r);
    if (mhi != b[i]) hi = digit_then(c, b[i], zeros, b + i + 1);
    char *o = sc_strf(c, "%s(%s%s%s%s%s)", pre, lo ? lo : "", lo && (mid || hi) ? " | " : "", mid ? mid : "",
                      mid && hi ? " | " : "", hi ? hi : "");
    free(lo), free(mid), free(hi);
    return o;
}

static char *join(sc *c, char *x, char *y)
{
    char *o = !x ? y : !y ? x : sc_strf(c, "%s | %s", x, y);
    if (x && y) free(x), free(y);
    return o;
}

/* [x, y], 0 <= x <= y: one alternative per number of digits. */
static char *nonneg(sc *c, long long x, long long y)
{
    char *o = NULL;
    long long p = 1;
    for (int len = 1; len <= 19 && x <= y; len++, p *= 10) {
        long long top = len == 19 ? y : p * 10 - 1, hi = y < top ? y : top;
        if (x > hi) continue;
        char a[24], b[24];
        snprintf(a, sizeof a, "%lld", x), snprintf(b, sizeof b, "%lld", hi);
        o = join(c, o, same_len(c, a, b));
        x = hi + 1;
        if (len == 19 || hi == y) break;
    }
    return o;
}

char *sc_int_range(sc *c, int has_min, long long min, int has_max, long long max)
{
    long long lo = has_min ? min : -OPEN_MAX, hi = has_max ? max : OPEN_MAX;
    if (lo < -OPEN_MAX * 100 || hi > OPEN_MAX * 100) return sc_fail(c, "json schema: integer bounds beyond 18 digits"), NULL;
    if (!has_max && lo > OPEN_MAX) hi = lo; /* a huge minimum: that number (and no more digits) */
    char *neg = NULL, *pos = NULL;
    if (lo < 0) {
        char *m = nonneg(c, hi < 0 ? -hi : 1, -lo);
        neg = m ? sc_strf(c, "\"-\" (%s)", m) : NULL;
        free(m);
    }
    if (hi >= 0) pos = nonneg(c, lo > 0 ? lo : 0, hi);
    return join(c, neg, pos);
}
