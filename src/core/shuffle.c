/* Byte planes of 4-byte values (shuffle.h). The x86-64 path moves 16 values at a time with
 * SSE2 (part of every x86-64 CPU, so no dispatch): unpacking bytes, then 16-bit pairs, of
 * the four planes interleaves them, and the same unpacks applied twice to 16 whole values
 * gather the planes back. The tail, and every other CPU, take the scalar loop. */
#include "core/fpguard.h"
#include "core/shuffle.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

void skv_shuffle4_ref(const uint8_t *in, uint8_t *out, size_t n, int inverse)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < 4; j++) {
            if (inverse) out[4 * i + j] = in[j * n + i];
            else out[j * n + i] = in[4 * i + j];
        }
}

#if defined(__SSE2__)
/* 16 values from the four planes (a: byte 0 of each, ...) to 64 bytes in value order. */
static void interleave16(const uint8_t *in, size_t n, size_t i, uint8_t *out)
{
    __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(in + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(in + n + i));
    __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(in + 2 * n + i));
    __m128i d = _mm_loadu_si128((const __m128i *)(const void *)(in + 3 * n + i));
    __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b); /* a0 b0 a1 b1 ... */
    __m128i cd_lo = _mm_unpacklo_epi8(c, d), cd_hi = _mm_unpackhi_epi8(c, d);
    __m128i *o = (__m128i *)(void *)(out + 4 * i);
    _mm_storeu_si128(o, _mm_unpacklo_epi16(ab_lo, cd_lo)); /* a0 b0 c0 d0 a1 b1 c1 d1 ... */
    _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(ab_lo, cd_lo));
    _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(ab_hi, cd_hi));
    _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(ab_hi, cd_hi));
}

/* 16 values (64 bytes) to 16 bytes of each plane: three rounds of byte unpacks, each
 * interleaving the bytes of two vectors, transpose the 16 x 4 bytes (after them w0 holds
 * planes 0 and 1 of values 0-7, w1 planes 2 and 3; w2, w3 the same of values 8-15), and
 * the 64-bit unpacks put each plane's two halves together. */
static void planes16(const uint8_t *in, size_t n, size_t i, uint8_t *out)
{
    const __m128i *p = (const __m128i *)(const void *)(in + 4 * i);
    __m128i v0 = _mm_loadu_si128(p), v1 = _mm_loadu_si128(p + 1), v2 = _mm_loadu_si128(p + 2),
            v3 = _mm_loadu_si128(p + 3);
    __m128i t0 = _mm_unpacklo_epi8(v0, v1), t1 = _mm_unpackhi_epi8(v0, v1);
    __m128i t2 = _mm_unpacklo_epi8(v2, v3), t3 = _mm_unpackhi_epi8(v2, v3);
    __m128i u0 = _mm_unpacklo_epi8(t0, t1), u1 = _mm_unpackhi_epi8(t0, t1);
    __m128i u2 = _mm_unpacklo_epi8(t2, t3), u3 = _mm_unpackhi_epi8(t2, t3);
    __m128i w0 = _mm_unpacklo_epi8(u0, u1), w1 = _mm_unpackhi_epi8(u0, u1);
    __m128i w2 = _mm_unpacklo_epi8(u2, u3), w3 = _mm_unpackhi_epi8(u2, u3);
    _mm_storeu_si128((__m128i *)(void *)(out + i), _mm_unpacklo_epi64(w0, w2));
    _mm_storeu_si128((__m128i *)(void *)(out + n + i), _mm_unpackhi_epi64(w0, w2));
    _mm_storeu_si128((__m128i *)(void *)(out + 2 * n + i), _mm_unpacklo_epi64(w1, w3));
    _mm_storeu_si128((__m128i *)(void *)(out + 3 * n + i), _mm_unpackhi_epi64(w1, w3));
}
#endif

void skv_shuffle4(const uint8_t *in, uint8_t *out, size_t n, int inverse)
{
    size_t i = 0;
#if defined(__SSE2__)
    for (; i + 16 <= n; i += 16) {
        if (inverse) interleave16(in, n, i, out);
        else planes16(in, n, i, out);
    }
#endif
    for (; i < n; i++)
        for (size_t j = 0; j < 4; j++) {
            if (inverse) out[4 * i + j] = in[j * n + i];
            else out[j * n + i] = in[4 * i + j];
        }
}
