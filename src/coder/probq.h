/* probq.h - deterministic quantisation of logits to coder frequencies.
 *
 * skv_probq_freqs() is THE function that turns a model's next-token logits
 * into the integer frequencies the range coder uses. Encoder and decoder
 * call it on the logits they each computed; if those are bit-identical, so
 * are the frequencies, on every C11 platform with IEEE binary32 floats:
 * after two exactly-rounded float operations per logit (subtract the max,
 * multiply by log2(e) * 2^16) everything is integer arithmetic. No libm, no
 * float reduction, no dependence on n's alignment or on threads.
 * docs/coder.md is the bit-exact specification; the summary:
 *
 *   m     = the largest logit
 *   e_i   = floor(-((l_i - m) * K)), clamped to 2^21   K = 0x1.715476p+16f
 *           (-log2 of the probability ratio to the max, 16 fraction bits)
 *   w_i   ~ 2^31 * 2^(-e_i / 2^16), from two 256-entry tables, 0 at 2^21
 *   S     = sum w_i, R = 2^total_bits - n
 *   m1    = floor(R * 2^35 / S);   L = R - sum floor(w_i * m1 / 2^35)
 *   m2    = floor(L * 2^35 / S);   D = L - sum floor(w_i * m2 / 2^35)
 *   base  = floor(D / n), D -= base * n
 *   f_i   = 1 + base + floor(w_i m1 / 2^35) + floor(w_i m2 / 2^35)
 *           + (1 if i is among the D largest logits, ties by lowest index)
 *
 * Guarantees: every f_i >= 1; sum f_i == 2^total_bits exactly; a larger
 * logit never gets a smaller frequency; equal logits get equal frequencies
 * except for the final +1 (lowest index first). The floor of 1 costs about
 * (number of symbols with p < 2^-total_bits) / 2^total_bits / ln 2 bits
 * per coded symbol (docs/coder.md has measurements).
 *
 * All functions use caller-provided buffers: no allocation, reentrant.
 */
#ifndef SKV_PROBQ_H
#define SKV_PROBQ_H

#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"

#define SKV_PROBQ_BITS_MIN 16
#define SKV_PROBQ_BITS_MAX 28
#define SKV_PROBQ_BITS_DEFAULT 24
#define SKV_PROBQ_E_MAX ((uint32_t)1 << 21) /* e clamp: ratio 2^-32, weight 0 */

/* Quantises logits[0..n) to freq_out[0..n) summing to 2^total_bits, and
 * when cum_out is not NULL writes cum_out[0..n] (cum_out[0] = 0,
 * cum_out[n] = 2^total_bits). Errors: SKV_ERR_INVALID_ARG for NULL
 * pointers, n == 0, total_bits outside [16, 28] or a NaN/Inf logit;
 * SKV_ERR_RANGE if n > 2^total_bits. freq_out/cum_out contents are
 * unspecified on error. O(n): about seven streaming passes. */
int skv_probq_freqs(const float *logits, size_t n, unsigned total_bits,
                    uint32_t *freq_out, uint32_t *cum_out);

/* skv_probq_freqs computed by the scalar passes only (the SIMD paths must
 * give the same bits; tests compare them). */
int skv_probq_freqs_ref(const float *logits, size_t n, unsigned total_bits,
                        uint32_t *freq_out, uint32_t *cum_out);

/* The decoder's lookup without building the table: the symbol whose
 * interval [lo, lo + freq) of skv_probq_freqs' cumulative frequencies holds
 * target, found by the same passes and a final pass that stops there.
 * w and scratch: n entries each, caller's work space (contents unspecified
 * after). Errors as skv_probq_freqs, and SKV_ERR_RANGE for a target >=
 * 2^total_bits. */
typedef struct skv_probq_sym {
    uint32_t sym, lo, freq;
} skv_probq_sym;
int skv_probq_decode(const float *logits, size_t n, unsigned total_bits, uint32_t target,
                     uint32_t *w, uint32_t *scratch, skv_probq_sym *out);

/* cum[0] = 0, cum[i + 1] = cum[i] + freq[i] for i < n. SKV_ERR_RANGE if the
 * sum exceeds 2^32 - 1. */
int skv_probq_cum(const uint32_t *freq, size_t n, uint32_t *cum);

/* Decoder's symbol lookup by binary search, O(log n): the largest i < n
 * with cum[i] <= target, i.e. the symbol whose [cum[i], cum[i+1]) holds
 * target when target < cum[n] and all freqs >= 1. A target >= cum[n]
 * (impossible after a successful get_freq) yields n - 1, whose interval
 * does not hold it, so the coder's dec_update rejects it. n >= 1. */
size_t skv_probq_find(const uint32_t *cum, size_t n, uint32_t target);

/* -log2(freq / 2^total_bits) in bits, for reporting (uses libm; never feeds
 * the coder). freq == 0 gives +infinity. */
double skv_probq_cost_bits(uint32_t freq, unsigned total_bits);

/* The fixed-point exp2 of the spec: 2^31 * 2^(-e / 65536) to within 1 unit
 * plus the final shift's rounding, for e < 2^21 (computed exactly as in
 * docs/coder.md); 0 for e >= 2^21. Non-increasing in e. Exposed for tests. */
uint32_t skv_probq_exp2_fix(uint32_t e);

/* The spec's per-logit step: e = floor(-((logit - max) * K)) clamped to
 * 2^21, for finite logit <= max. Exposed for tests and other references. */
uint32_t skv_probq_log2_fix(float logit, float max);

#endif
