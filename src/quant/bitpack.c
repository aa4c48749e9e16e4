/* Bit streams of b-bit fields, b = 1..4, LSB-first (quant_int.h). */
#include "quant/quant_int.h"
#include "core/fpguard.h"

#include <string.h>

#include "quant/fbits.h"

/* Fast path from a byte boundary: 8 fields of b <= 4 bits are exactly b
 * bytes.  SWAR: with the 8 index bytes in a little-endian word, merge
 * neighbouring fields pairwise three times (bytes -> 16-bit -> 32-bit ->
 * 64-bit lanes); unpacking runs the same steps backwards. */
static inline uint64_t load8_le(const uint8_t *p)
{
    uint64_t x = 0;
#if SKV_LITTLE_ENDIAN
    memcpy(&x, p, sizeof x);
#else
    for (int k = 0; k < 8; k++) x |= (uint64_t)p[k] << (8 * k);
#endif
    return x;
}

static inline void store8_le(uint8_t *p, uint64_t x)
{
#if SKV_LITTLE_ENDIAN
    memcpy(p, &x, sizeof x);
#else
    for (int k = 0; k < 8; k++) p[k] = (uint8_t)(x >> (8 * k));
#endif
}

static inline uint64_t swar_pack8(uint64_t x, unsigned b)
{
    x = (x | x >> (8 - b)) & 0x00FF00FF00FF00FFull;
    x = (x | x >> (16 - 2 * b)) & 0x0000FFFF0000FFFFull;
    return (x | x >> (32 - 4 * b)) & ((1ull << (8 * b)) - 1);
}

static inline uint64_t swar_unpack8(uint64_t g, unsigned b)
{
    uint64_t m32 = ((1ull << (4 * b)) - 1) * 0x0000000100000001ull;
    uint64_t m16 = ((1ull << (2 * b)) - 1) * 0x0001000100010001ull;
    uint64_t m8 = ((1ull << b) - 1) * 0x0101010101010101ull;
    g = (g | g << (32 - 4 * b)) & m32;
    g = (g | g << (16 - 2 * b)) & m16;
    return (g | g << (8 - b)) & m8;
}

static inline size_t put_groups(uint8_t **pp, const uint8_t *v, size_t count, unsigned b)
{
    size_t i = 0;
    uint8_t *p = *pp;
    for (; i + 8 <= count; i += 8) {
        uint64_t g = swar_pack8(load8_le(v + i), b);
        for (unsigned k = 0; k < b; k++) *p++ = (uint8_t)(g >> (8 * k));
    }
    *pp = p;
    return i;
}

static inline size_t get_groups(const uint8_t **pp, uint8_t *v, size_t count, unsigned b)
{
    size_t i = 0;
    const uint8_t *p = *pp;
    for (; i + 8 <= count; i += 8) {
        uint64_t g = 0;
        for (unsigned k = 0; k < b; k++) g |= (uint64_t)*p++ << (8 * k);
        store8_le(v + i, swar_unpack8(g, b));
    }
    *pp = p;
    return i;
}

void skv_bitw_put(skv_bitw *w, const uint8_t *v, size_t count, int b)
{
    size_t i = 0;
    if (w->n == 0) {
        switch (b) {
        case 1: i = put_groups(&w->p, v, count, 1); break;
        case 2: i = put_groups(&w->p, v, count, 2); break;
        case 3: i = put_groups(&w->p, v, count, 3); break;
        default: i = put_groups(&w->p, v, count, 4); break;
        }
    }
    for (; i < count; i++) {
        w->acc |= (uint32_t)v[i] << w->n;
        w->n += b;
        while (w->n >= 8) {
            *w->p++ = (uint8_t)w->acc;
            w->acc >>= 8;
            w->n -= 8;
        }
    }
}

void skv_bitw_flush(skv_bitw *w)
{
    if (w->n > 0) *w->p++ = (uint8_t)w->acc; /* pad bits are zero */
    w->acc = 0;
    w->n = 0;
}

void skv_bitr_get(skv_bitr *r, uint8_t *v, size_t count, int b)
{
    uint32_t mask = (1u << b) - 1u;
    size_t i = 0;
    if (r->n == 0) {
        switch (b) {
        case 1: i = get_groups(&r->p, v, count, 1); break;
        case 2: i = get_groups(&r->p, v, count, 2); break;
        case 3: i = get_groups(&r->p, v, count, 3); break;
        default: i = get_groups(&r->p, v, count, 4); break;
        }
    }
    for (; i < count; i++) {
        while (r->n < b) {
            r->acc |= (uint32_t)*r->p++ << r->n;
            r->n += 8;
        }
        v[i] = (uint8_t)(r->acc & mask);
        r->acc >>= b;
        r->n -= b;
    }
}

