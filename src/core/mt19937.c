/* See mt19937.h. The recurrence: x[k+n] = x[k+m] ^ ((x[k] & upper | x[k+1] & lower) A),
 * n = 624, m = 397, A's last row 0x9908B0DF; the output tempered by the shifts and masks
 * (11; 7, 0x9D2C5680; 15, 0xEFC60000; 18). */
#include "core/mt19937.h"
#include "core/fpguard.h"

#define MT_M 397

void skv_mt_seed(skv_mt19937 *r, uint32_t seed)
{
    r->mt[0] = seed;
    for (uint32_t i = 1; i < SKV_MT_N; i++) r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + i;
    r->i = SKV_MT_N;
}

static void twist(skv_mt19937 *r)
{
    for (int k = 0; k < SKV_MT_N; k++) {
        uint32_t y = (r->mt[k] & 0x80000000u) | (r->mt[(k + 1) % SKV_MT_N] & 0x7FFFFFFFu);
        r->mt[k] = r->mt[(k + MT_M) % SKV_MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908B0DFu : 0u);
    }
    r->i = 0;
}

uint32_t skv_mt_next(skv_mt19937 *r)
{
    if (r->i >= SKV_MT_N) twist(r);
    uint32_t y = r->mt[r->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9D2C5680u;
    y ^= (y << 15) & 0xEFC60000u;
    return y ^ (y >> 18);
}

double skv_mt_uniform(skv_mt19937 *r)
{
    double a = (double)skv_mt_next(r), b = (double)skv_mt_next(r);
    double u = (a + b * 0x1p32) / 0x1p64;
    return u < 1.0 ? u : 0x1.fffffffffffffp-1; /* nextafter(1, 0) */
}
