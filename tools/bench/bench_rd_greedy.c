/* kv-rd's greedy match length: how many tokens a greedy continuation from the restored
 * cache agrees with the greedy continuation from the exact cache before the first
 * difference (at most w->g_len = min(RD_GREEDY, the window's positions from P on)). Both start by running the text's token at position P
 * over the stored prefix (positions 0 .. P-1), then feed their own argmax. */
#include <stdlib.h>

#include "bench_rd.h"

static int32_t argmax(const float *l, size_t V)
{
    size_t am = 0;
    for (size_t i = 1; i < V; i++) am = l[i] > l[am] ? i : am;
    return (int32_t)am;
}

int rd_greedy(rd_window *w, skv_ctx *c, int32_t *out)
{
    size_t V = (size_t)w->mi.n_vocab;
    float *lg = malloc(V * sizeof *lg);
    int rc = lg && !skv_ctx_truncate(c, (int)w->P) && !skv_decode(c, w->win[w->P], lg) ? 0 : -1;
    for (int i = 0; !rc && i < w->g_len; i++) {
        out[i] = argmax(lg, V);
        if (i + 1 < w->g_len && skv_decode(c, out[i], lg)) rc = -1;
    }
    free(lg);
    return rc;
}

int rd_greedy_match(const rd_window *w, const int32_t *got)
{
    int m = 0;
    while (m < w->g_len && w->greedy[m] == got[m]) m++;
    return m;
}
