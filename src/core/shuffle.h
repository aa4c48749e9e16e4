/* Byte planes of 4-byte values (the store's KV blobs, store_kv.c): all first bytes, then
 * all second bytes, ... so that f32 exponents and high mantissa bytes sit together and
 * compress. Pure data movement: the SIMD path and the scalar reference give the same bytes
 * (tests/test_shuffle.c). */
#ifndef SKV_CORE_SHUFFLE_H
#define SKV_CORE_SHUFFLE_H

#include <stddef.h>
#include <stdint.h>

/* out[j * n + i] = in[4 i + j] (planes), or with inverse out[4 i + j] = in[j * n + i]. */
void skv_shuffle4(const uint8_t *in, uint8_t *out, size_t n, int inverse);
void skv_shuffle4_ref(const uint8_t *in, uint8_t *out, size_t n, int inverse);

#endif
