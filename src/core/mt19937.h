/* The 32-bit Mersenne Twister (Matsumoto and Nishimura, 1998) with the initialisation and
 * output of C++'s std::mt19937, and libstdc++'s uniform double from it: the generator and
 * draw llama.cpp's sampler uses, so a seeded sampling in seqkv serve picks what
 * llama-server picks from the same distribution. Known answer (the C++ standard,
 * [rand.predef]): the 10000th output of a generator seeded 5489 is 4123659995. */
#ifndef SKV_MT19937_H
#define SKV_MT19937_H

#include <stdint.h>

#define SKV_MT_N 624

typedef struct skv_mt19937 {
    uint32_t mt[SKV_MT_N];
    int i;
} skv_mt19937;

void skv_mt_seed(skv_mt19937 *r, uint32_t seed);
uint32_t skv_mt_next(skv_mt19937 *r);
/* std::uniform_real_distribution<double>(0, 1) as libstdc++ draws it: two outputs,
 * (a + b * 2^32) / 2^64, kept below 1. */
double skv_mt_uniform(skv_mt19937 *r);

#endif
