/* probq_kern.h - the streaming passes of skv_probq_freqs as a kernel table
 * (internal to src/coder). The scalar twins live in probq.c; probq_avx2.c has
 * AVX2 versions that compute the same integers (every pass is integer
 * arithmetic except the two IEEE binary32 operations of the log2 step, which
 * SIMD lanes round exactly as scalar code does; sums are of integers, so
 * their order does not matter). tests/test_probq.c compares the two. */
#ifndef SKV_PROBQ_KERN_H
#define SKV_PROBQ_KERN_H

#include <stddef.h>
#include <stdint.h>

#define SKV_PROBQ_NBUCKET 240 /* buckets of w: 1/8 octave (probq.c) */

extern const uint32_t skv_probq_exp2_hi[256];
extern const uint32_t skv_probq_exp2_lo[256];

typedef struct skv_probq_kern {
    /* the largest order-preserving key, or 0 if a logit is NaN or infinite */
    uint32_t (*max_key)(const float *logits, size_t n);
    /* w[i] = exp2_fix(log2_fix(logits[i], max)); returns sum w */
    uint64_t (*weights)(const float *logits, size_t n, float max, uint32_t *w);
    /* sum floor(w[i] * m / 2^35), m < 2^32 */
    uint64_t (*scaled_sum)(const uint32_t *w, size_t n, uint64_t m);
    /* the same, and the bucket histogram of w into hist[0] (hist: 4 x NBUCKET scratch) */
    uint64_t (*scaled_sum_hist)(const uint32_t *w, size_t n, uint64_t m, uint32_t (*hist)[SKV_PROBQ_NBUCKET]);
} skv_probq_kern;

/* The AVX2 table, or NULL when this build or CPU has none. */
const skv_probq_kern *skv_probq_kern_avx2(void);

#endif
