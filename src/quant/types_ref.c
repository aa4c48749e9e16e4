/* Scalar reference kernels of the type table: f32, f16, bf16, q8_0, q4_0
 * rows (types.h).  These are the only implementations of these formats; the
 * AVX2 twins in types_avx2.c compute the same bits.
 *
 * q8_0 / q4_0: a row of n values is cut into blocks of 32; the last block may
 * be short (L = n % 32 values) and is then stored short: q8_0 2 + L bytes,
 * q4_0 2 + ceil(L/2) bytes.  Whole blocks are byte-identical to ggml's. */
#include "quant/types_kernels.h"
#include "core/fpguard.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "core/f16.h"
#include "quant/fbits.h"
#include "seqkv.h"

#define QK 32u /* values per q8_0 / q4_0 block */

static_assert(sizeof(float) == 4, "binary32 float required");

/* ---- binary16 ------------------------------------------------------------- */

int skv_f16enc_ref(const float *x, uint8_t *out, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = skv_f32_to_f16(x[i]);
        bad |= !skv_f16_finite(h);
        skv_wr16le(out + 2 * i, h);
    }
    return bad;
}

int skv_f16dec_ref(const uint8_t *in, float *y, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = skv_rd16le(in + 2 * i);
        bad |= !skv_f16_finite(h);
        y[i] = skv_f16_to_f32(h);
    }
    return bad;
}

/* ---- f32 ------------------------------------------------------------------ */

void skv_f32_to_float_ref(const void *src, float *dst, size_t n)
{
#if SKV_LITTLE_ENDIAN
    memcpy(dst, src, n * sizeof *dst);
#else
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++, p += 4)
        dst[i] = skv_bits_f32((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
#endif
}

int skv_f32_from_float_ref(const float *src, void *dst, size_t n)
{
    if (skv_any_nonfinite(src, n)) return SKV_ERR_INVALID_ARG;
#if SKV_LITTLE_ENDIAN
    memcpy(dst, src, n * sizeof *src);
#else
    uint8_t *out = dst;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = skv_f32_bits(src[i]);
        for (int k = 0; k < 4; k++) out[4 * i + (size_t)k] = (uint8_t)(u >> (8 * k));
    }
#endif
    return SKV_OK;
}

int skv_f32_check(const void *src, size_t n)
{
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++) /* exponent bits: byte 3 bits 0..6, byte 2 bit 7 */
        if ((p[4 * i + 3] & 0x7f) == 0x7f && (p[4 * i + 2] & 0x80)) return SKV_ERR_FORMAT;
    return SKV_OK;
}

/* ---- f16 / bf16 ----------------------------------------------------------- */

void skv_f16_to_float_ref(const void *src, float *dst, size_t n) { (void)skv_f16dec_ref(src, dst, n); }

/* Encoder status from the inf/NaN flag: a non-finite input, else an overflow. */
static int f16_status(int bad, const float *src, size_t n)
{
    if (!bad) return SKV_OK;
    return skv_any_nonfinite(src, n) ? SKV_ERR_INVALID_ARG : SKV_ERR_RANGE;
}

int skv_f16_from_float_ref(const float *src, void *dst, size_t n)
{
    return f16_status(skv_f16enc_ref(src, dst, n), src, n);
}

int skv_f16_from_float_avx2(const float *src, void *dst, size_t n)
{
    return f16_status(skv_f16enc_avx2(src, dst, n), src, n);
}

int skv_f16_check(const void *src, size_t n)
{
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++)
        if (!skv_f16_finite(skv_rd16le(p + 2 * i))) return SKV_ERR_FORMAT;
    return SKV_OK;
}

void skv_bf16_to_float_ref(const void *src, float *dst, size_t n)
{
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++) dst[i] = skv_bits_f32((uint32_t)skv_rd16le(p + 2 * i) << 16);
}

/* ---- q8_0 ------------------------------------------------------------------- */

size_t skv_q8_0_short_bytes(size_t L) { return 2 + L; }

/* Values in the block that starts at value i of a row of n. */
static size_t block_len(size_t i, size_t n) { return n - i < QK ? n - i : QK; }

/* A row of n values block by block: enc codes L <= 32 values into
 * bytes(L) bytes.  Non-finite input is refused before anything is written. */
static int encode_blocks(const float *src, uint8_t *out, size_t n, int (*enc)(const float *, size_t, uint8_t *),
                         size_t (*bytes)(size_t))
{
    int rc = SKV_OK;
    if (skv_any_nonfinite(src, n)) return SKV_ERR_INVALID_ARG;
    for (size_t i = 0; i < n && rc == SKV_OK; i += QK) {
        size_t L = block_len(i, n);
        rc = enc(src + i, L, out);
        out += bytes(L);
    }
    return rc;
}

/* roundf() for |v| <= 2^24 without a libm call: t = trunc(v) and v - t are
 * exact, so comparing the fraction with 1/2 rounds exactly (ties away). */
static inline int round_half_away(float v)
{
    int t = (int)v;
    float f = v - (float)t;
    return t + (f >= 0.5f) - (f <= -0.5f);
}

/* One block of L <= 32 values (ggml's q8_0 rounding: scale = amax/127,
 * q = round-half-away(x / scale) with the binary32 scale, stored fp16). */
static int q8_block_encode(const float *x, size_t L, uint8_t *out)
{
    float amax = 0.0f, d, id;
    uint16_t h;
    for (size_t j = 0; j < L; j++) {
        float a = fabsf(x[j]);
        if (a > amax) amax = a;
    }
    d = amax / 127.0f;
    h = skv_f32_to_f16(d);
    if (!skv_f16_finite(h)) return SKV_ERR_RANGE;
    memset(out, 0, skv_q8_0_short_bytes(L));
    if (h == 0) return SKV_OK; /* every value rounds to zero: canonical zero block */
    skv_wr16le(out, h);
    id = 1.0f / d;
    for (size_t j = 0; j < L; j++) {
        int q = round_half_away(x[j] * id);
        q = q > 127 ? 127 : (q < -127 ? -127 : q);
        out[2 + j] = (uint8_t)(int8_t)q;
    }
    return SKV_OK;
}

int skv_q8_0_from_float_ref(const float *src, void *dst, size_t n)
{
    return encode_blocks(src, dst, n, q8_block_encode, skv_q8_0_short_bytes);
}

void skv_q8_0_to_float_ref(const void *src, float *dst, size_t n)
{
    const uint8_t *in = src;
    for (size_t i = 0; i < n; i += QK) {
        size_t L = block_len(i, n);
        float s = skv_f16_to_f32(skv_rd16le(in));
        for (size_t j = 0; j < L; j++) dst[i + j] = (float)(int8_t)in[2 + j] * s;
        in += skv_q8_0_short_bytes(L);
    }
}

int skv_q8_0_check(const void *src, size_t n)
{
    const uint8_t *in = src;
    for (size_t i = 0; i < n; i += QK) {
        size_t L = block_len(i, n);
        if (!skv_f16_finite(skv_rd16le(in))) return SKV_ERR_FORMAT;
        in += skv_q8_0_short_bytes(L);
    }
    return SKV_OK;
}

/* ---- q4_0 -------------------------------------------------------------------
 * Nibble layout, h = ceil(L/2): value j < h is the low nibble of byte j,
 * value h + j the high nibble of byte j (ggml's for L = 32); an odd L leaves
 * the high nibble of the last byte zero. */

size_t skv_q4_0_short_bytes(size_t L) { return 2 + (L + 1) / 2; }

/* q[j] for one block (ggml's q4_0 rounding: scale = -m/8 where m is the first
 * value of largest magnitude, q = min(15, trunc(x/scale + 8.5))); returns the
 * fp16 scale, or 0x7c00 when it overflows. */
static uint16_t q4_block_quantize(const float *x, size_t L, uint8_t q[QK])
{
    float amax = 0.0f, mx = 0.0f, d, id;
    uint16_t h;
    for (size_t j = 0; j < L; j++) {
        float a = fabsf(x[j]);
        if (a > amax) {
            amax = a;
            mx = x[j];
        }
    }
    d = mx / -8.0f;
    h = skv_f32_to_f16(d);
    memset(q, 8, QK); /* zero block: scale +0, every nibble 8 (= 0) */
    if (!skv_f16_finite(h)) return 0x7c00u;
    if ((h & 0x7fffu) == 0) return 0;
    id = 1.0f / d;
    for (size_t j = 0; j < L; j++) {
        float t = x[j] * id + 8.5f;
        int v = (int)t; /* t in [0.49, 16.51]: truncation = floor */
        q[j] = (uint8_t)(v > 15 ? 15 : (v < 0 ? 0 : v));
    }
    return h;
}

static int q4_block_encode(const float *x, size_t L, uint8_t *out)
{
    size_t half = (L + 1) / 2;
    uint8_t q[QK];
    uint16_t h = q4_block_quantize(x, L, q);
    if (!skv_f16_finite(h)) return SKV_ERR_RANGE;
    skv_wr16le(out, h);
    for (size_t j = 0; j < half; j++) {
        uint8_t hi = (j + half < L) ? q[j + half] : 0;
        out[2 + j] = (uint8_t)(q[j] | (hi << 4));
    }
    return SKV_OK;
}

int skv_q4_0_from_float_ref(const float *src, void *dst, size_t n)
{
    return encode_blocks(src, dst, n, q4_block_encode, skv_q4_0_short_bytes);
}

void skv_q4_0_to_float_ref(const void *src, float *dst, size_t n)
{
    const uint8_t *in = src;
    for (size_t i = 0; i < n; i += QK) {
        size_t L = block_len(i, n), half = (L + 1) / 2;
        float s = skv_f16_to_f32(skv_rd16le(in));
        for (size_t j = 0; j < half; j++) {
            dst[i + j] = (float)((int)(in[2 + j] & 15) - 8) * s;
            if (j + half < L) dst[i + j + half] = (float)((int)(in[2 + j] >> 4) - 8) * s;
        }
        in += skv_q4_0_short_bytes(L);
    }
}

int skv_q4_0_check(const void *src, size_t n)
{
    const uint8_t *in = src;
    for (size_t i = 0; i < n; i += QK) {
        size_t L = block_len(i, n), half = (L + 1) / 2;
        if (!skv_f16_finite(skv_rd16le(in))) return SKV_ERR_FORMAT;
        if ((L & 1) && (in[2 + half - 1] >> 4)) return SKV_ERR_FORMAT; /* pad nibble */
        in += skv_q4_0_short_bytes(L);
    }
    return SKV_OK;
}
