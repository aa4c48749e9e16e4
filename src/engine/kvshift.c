/* Exact RoPE re-rotation of cached K by a position delta (kvshift.h). */
#include "engine/kvshift.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdlib.h>

#include "core/detmath.h"
#include "engine/model.h"

#define SHIFT_MAX_POS (1 << 24)

/* The engine's table entry (forward.c rope_tables): cos / sin of pair i at position p. */
typedef struct rope_src {
    const double *freq;
    double scale, ms;
} rope_src;

static void rope_cs(const rope_src *r, size_t p, size_t i, float *c, float *s)
{
    double a = (double)p * r->scale * r->freq[i], sn, cs;
    skv_det_sincos(a, &sn, &cs);
    *c = (float)(cs * r->ms);
    *s = (float)(sn * r->ms);
}

/* The global RoPE source (windowed layers with their own base: see skv_kv_shift). */
static rope_src global_rope(const skv_model *m)
{
    rope_src r = {m->rope_freq, m->rope_scale, m->ap.rope_mscale};
    return r;
}

/* The engine's rotation of the pair (x, y): rope_ref's float operations exactly. */
static void rot_f(float x, float y, float c, float s, float *u, float *v)
{
    *u = x * c - y * s;
    *v = x * s + y * c;
}

/* The pre-RoPE pair the engine rotated into (u, v) at (c, s): the double inverse rounded to
 * float, then the neighbours within one ulp tried in turn for one whose float rotation gives
 * (u, v) bit for bit (float rotation is not injective, so such a pair is the engine's input
 * in all but rare ties, which differ by an ulp). */
static void unrot(float u, float v, float c, float s, float *x, float *y)
{
    double det = (double)c * c + (double)s * s;
    float x0 = (float)(((double)u * c + (double)v * s) / det), y0 = (float)(((double)v * c - (double)u * s) / det);
    *x = x0, *y = y0;
    for (int k = 0; k < 9; k++) {
        float xc = k % 3 == 0 ? x0 : nextafterf(x0, k % 3 == 1 ? -INFINITY : INFINITY);
        float yc = k / 3 == 0 ? y0 : nextafterf(y0, k / 3 == 1 ? -INFINITY : INFINITY), ru, rv;
        rot_f(xc, yc, c, s, &ru, &rv);
        if (ru == u && rv == v) {
            *x = xc, *y = yc;
            return;
        }
    }
}

/* One pair (*u, *v) rotated at (c1, s1), moved to (c2, s2). */
static void shift_engine(float *u, float *v, float c1, float s1, float c2, float s2)
{
    float x, y;
    unrot(*u, *v, c1, s1, &x, &y);
    rot_f(x, y, c2, s2, u, v);
}

static void shift_direct(float *u, float *v, const rope_src *r, size_t p, size_t q, size_t i)
{
    double sn, cs, a = ((double)q - (double)p) * r->scale * r->freq[i];
    skv_det_sincos(a, &sn, &cs);
    double x = *u, y = *v;
    *u = (float)(x * cs - y * sn);
    *v = (float)(x * sn + y * cs);
}

/* cos / sin of every (position, pair) of the run at p0.. and at q0.. for one RoPE source:
 * [4][n][np] (c1, s1, c2, s2). */
static float *shift_tables(const rope_src *r, size_t n, size_t np, size_t p0, size_t q0)
{
    float *t = malloc(4 * n * np * sizeof *t);
    if (!t) return NULL;
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < np; i++) {
            size_t o = k * np + i;
            rope_cs(r, p0 + k, i, t + o, t + n * np + o);
            rope_cs(r, q0 + k, i, t + 2 * n * np + o, t + 3 * n * np + o);
        }
    return t;
}

/* Shifts one head's rows [n][hd] of a layer from positions p0.. to q0... */
static void shift_rows(const skv_model *m, const rope_src *r, const float *tab, float *k, size_t n, size_t p0,
                       size_t q0, int method)
{
    size_t hd = (size_t)m->info.head_dim, np = (size_t)m->info.rope_dim / 2, nn = n * np;
    int neox = m->arch->rope == SKV_ROPE_NEOX;
    for (size_t t = 0; t < n; t++)
        for (size_t i = 0; i < np; i++) {
            float *u = k + t * hd + (neox ? i : 2 * i), *v = neox ? u + np : u + 1;
            size_t o = t * np + i;
            if (method == SKV_SHIFT_DIRECT) shift_direct(u, v, r, p0 + t, q0 + t, i);
            else shift_engine(u, v, tab[o], tab[nn + o], tab[2 * nn + o], tab[3 * nn + o]);
        }
}

int skv_kv_shift(const skv_model *m, float *kv, size_t n, int p_from, int p_to, int method)
{
    if (!m || (!kv && n) || p_from < 0 || p_to < 0) return SKV_ERR_INVALID_ARG;
    if ((size_t)p_from + n > SHIFT_MAX_POS || (size_t)p_to + n > SHIFT_MAX_POS) return SKV_ERR_RANGE;
    if (p_from == p_to || !n) return SKV_OK;
    size_t hd = (size_t)m->info.head_dim, nh = (size_t)m->info.n_head_kv, np = (size_t)m->info.rope_dim / 2;
    rope_src rs[2] = {global_rope(m), global_rope(m)};
    float *tab[2] = {shift_tables(&rs[0], n, np, (size_t)p_from, (size_t)p_to), NULL};
    if (m->ap.rope_freq_swa) {
        rs[1] = (rope_src){m->ap.rope_freq_swa, m->ap.rope_scale_swa, m->ap.rope_mscale};
        tab[1] = shift_tables(&rs[1], n, np, (size_t)p_from, (size_t)p_to);
    }
    if (!tab[0] || (m->ap.rope_freq_swa && !tab[1])) {
        free(tab[0]), free(tab[1]);
        return SKV_ERR_NOMEM;
    }
    for (int l = 0; l < m->info.n_layer; l++) {
        int w = m->ap.rope_freq_swa && skv_layer_windowed(m, l); /* its own base (forward.c rope_rows) */
        for (size_t h = 0; h < nh; h++) /* kind 0 (K) of layer l: [nh][n][hd] */
            shift_rows(m, &rs[w], tab[w], kv + ((size_t)l * 2 * nh + h) * n * hd, n, (size_t)p_from, (size_t)p_to,
                       method);
    }
    free(tab[0]), free(tab[1]);
    return SKV_OK;
}
