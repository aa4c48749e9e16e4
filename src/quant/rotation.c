/* The seeded orthogonal rotation of the tq schemes (docs/quant.md). */
#include "quant/quant_int.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "seqkv.h"

/* ---- rotation ---------------------------------------------------------------
 * R x: for each round r = 0 .. n_round-1
 *     v ^= sign_r                          (random +-1 diagonal)
 *     for each block b: v_b = FWHT(v_b) * (1 / sqrtf(len_b))
 *     if r < n_round-1: v'[i] = v[perm_r[i]]
 * With d a power of two this is one randomized Hadamard transform.  The
 * inverse runs the rounds backwards: unpermute, FWHT * 1/sqrtf(len), ^= sign.
 * tmp is d floats of scratch. */
static void blocks_fwht(const skv_quant_ctx *c, float *v)
{
    for (int b = 0; b < c->n_blk; b++) {
        float *w = v + c->blk_off[b];
        k_fwht(c, w, c->blk_len[b]);
        k_scale(c, w, c->blk_rs[b], w, c->blk_len[b]);
    }
}

void skv_quant_rotate_fwd(const skv_quant_ctx *c, float *v, float *tmp)
{
    size_t d = c->d;
    for (int r = 0; r < c->n_round; r++) {
        k_xorsign(c, v, c->sign + (size_t)r * d, d);
        blocks_fwht(c, v);
        if (r + 1 < c->n_round) {
            const uint32_t *p = c->perm + (size_t)r * d;
            for (size_t i = 0; i < d; i++) tmp[i] = v[p[i]];
            memcpy(v, tmp, d * sizeof *v);
        }
    }
}

void skv_quant_rotate_inv(const skv_quant_ctx *c, float *v, float *tmp)
{
    size_t d = c->d;
    for (int r = c->n_round - 1; r >= 0; r--) {
        if (r + 1 < c->n_round) {
            const uint32_t *p = c->perm + (size_t)r * d;
            for (size_t i = 0; i < d; i++) tmp[p[i]] = v[i];
            memcpy(v, tmp, d * sizeof *v);
        }
        blocks_fwht(c, v);
        k_xorsign(c, v, c->sign + (size_t)r * d, d);
    }
}

/* Fisher-Yates from the identity; j uniform in [0, i] by rejection. */
static void init_perm(uint32_t *pm, size_t d, uint64_t st)
{
    for (size_t j = 0; j < d; j++) pm[j] = (uint32_t)j;
    for (size_t i = d - 1; i > 0; i--) {
        uint64_t n = (uint64_t)i + 1, lim = UINT64_MAX - UINT64_MAX % n, u;
        uint32_t sw;
        do u = skv_quant_splitmix64(&st);
        while (u >= lim);
        sw = pm[i];
        pm[i] = pm[u % n];
        pm[u % n] = sw;
    }
}

/* Blocks = the powers of two in d's binary expansion, largest first; one
 * round if that is a single block, else ROT_ROUNDS with permutations. */
int skv_quant_rotation_init(skv_quant_ctx *c)
{
    size_t d = c->d;
    c->n_blk = 0;
    for (size_t bit = (size_t)1 << 30, off = 0; bit; bit >>= 1)
        if (d & bit) {
            c->blk_off[c->n_blk] = off;
            c->blk_len[c->n_blk] = bit;
            c->blk_rs[c->n_blk] = 1.0f / sqrtf((float)bit);
            c->n_blk++;
            off += bit;
        }
    c->n_round = c->n_blk == 1 ? 1 : ROT_ROUNDS;
    c->sign = malloc((size_t)c->n_round * d * sizeof *c->sign);
    if (!c->sign) return SKV_ERR_NOMEM;
    if (c->n_round > 1 && !(c->perm = malloc((size_t)(c->n_round - 1) * d * sizeof *c->perm)))
        return SKV_ERR_NOMEM;
    for (int r = 0; r < c->n_round; r++) {
        uint64_t st = c->seed ^ (TAG_SIGNS + (uint64_t)r), word = 0;
        uint32_t *sg = c->sign + (size_t)r * d;
        for (size_t j = 0; j < d; j++) {
            if ((j & 63) == 0) word = skv_quant_splitmix64(&st);
            sg[j] = ((word >> (j & 63)) & 1u) ? 0x80000000u : 0u;
        }
        if (r + 1 < c->n_round) /* no permutation after the last round */
            init_perm(c->perm + (size_t)r * d, d, c->seed ^ (TAG_PERM + (uint64_t)r));
    }
    return SKV_OK;
}

