/* The T = 1 kernels of the packed layouts (quant/repack.h) of q2_k and q3_k, whose
 * values are 2-bit fields (q3_k: plus a bit of hmask); include after dot_pack_x86.h,
 * whose helpers they use.  Per block of a 16-row group:
 *
 *   q2_k  1344 = 16x84:   d[16] 0 | dmin[16] 32 | scales[16][16] u8 64 | qs: 16 chunks 320
 *   q3_k  1824 = 16x114:  d[16] 0 | sc[16][16] s8 32 | hmask: 8 chunks 288 | qs: 16 chunks 800
 *
 * (q2_k's scale bytes as in the file, scale in the low nibble and min in the high one;
 * q3_k's 6-bit scales unpacked, less 32.)  The 32 values of chunk j (groups 2j, 2j+1)
 * are the bit pair 2 (j % 4) of qs bytes 32 (j / 4) .. + 31, i.e. of qs chunks
 * 8 (j / 4) + k for k < 8, and for q3_k bit j of hmask chunk k as bit 2 (u = q + 4).
 * Each lane (a row) sums every 16-value group exactly, scales it and runs dot.c's
 * chain: fma(d * dx, isum, acc), then q2_k's fma(-dmin * dx, imin, acc). */
#ifndef SKV_DOT_PACK2_X86_H
#define SKV_DOT_PACK2_X86_H

#define PK2_INLINE static inline __attribute__((always_inline))

/* Byte l = bit j of byte l of hm as bit 2 (the 16-bit shifts carry no other bit onto
 * bit 2: left by at most 2, right by at most 5). */
static inline __m256i bit2(__m256i hm, int j)
{
    __m256i v = j <= 2 ? _mm256_slli_epi16(hm, 2 - j) : _mm256_srli_epi16(hm, j - 2);
    return _mm256_and_si256(v, _mm256_set1_epi8(4));
}

/* Half h of group gi = 2j + kk of a block: sum_l u[l] a[l] (u <= 7: the four chunks'
 * maddubs pairs sum in int16 exactly). */
PK2_INLINE __m256i pk2_group_sum(const uint8_t *g, const __m256i hm[8], const int8_t *qs, int h, int j, int kk,
                                  const int q3)
{
    const size_t qo = q3 ? 800 : 320;
    __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int k = 4 * kk; k < 4 * kk + 4; k++) {
        __m256i v = ld32(g + qo + 64 * (8 * (j / 4) + k) + 32 * h);
        __m256i u = _mm256_and_si256(_mm256_srli_epi16(v, 2 * (j % 4)), _mm256_set1_epi8(3));
        if (q3) u = _mm256_or_si256(u, bit2(hm[k], j));
        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(u, bcast4(qs + 32 * j + 4 * k)));
    }
    return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

PK2_INLINE void pk2_group(float *y, const uint8_t *g, const skv_act256 *a, size_t nb, const int q3)
{
    const size_t gb = q3 ? 1824 : 1344;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (size_t b = 0; b < nb; b++, g += gb) {
        for (int h = 0; h < 2; h++) {
            __m256i is = _mm256_setzero_si256(), mi = _mm256_setzero_si256(), hm[8];
            if (q3) /* the hmask chunks, loaded once per block half */
                for (int k = 0; k < 8; k++) hm[k] = ld32(g + 288 + 64 * k + 32 * h);
#pragma GCC unroll 16 /* constant shifts and offsets: a rolled loop computes them at run time */
            for (int gi = 0; gi < 16; gi++) {
                __m256i p = pk2_group_sum(g, hm, a[b].qs, h, gi / 2, gi % 2, q3);
                if (gi % 4 == 0) pk_prefetch_part(g, gb, 4 * h + gi / 4, 8);
                if (q3) {
                    p = _mm256_sub_epi32(p, _mm256_set1_epi32(4 * a[b].bsum[gi]));
                    is = _mm256_add_epi32(is, _mm256_mullo_epi32(p, s8x8(g + 32 + 16 * gi + 8 * h)));
                    continue;
                }
                __m256i sc = u8x8(g + 64 + 16 * gi + 8 * h);
                is = _mm256_add_epi32(is, _mm256_mullo_epi32(p, _mm256_and_si256(sc, _mm256_set1_epi32(15))));
                mi = _mm256_add_epi32(mi, _mm256_mullo_epi32(_mm256_srli_epi32(sc, 4), _mm256_set1_epi32(a[b].bsum[gi])));
            }
            acc[h] = fma_scaled(acc[h], half_scales(g + 16 * h), a[b].d, is);
            if (!q3)
                acc[h] = fma_scaled(acc[h], _mm256_xor_ps(half_scales(g + 32 + 16 * h), _mm256_set1_ps(-0.0f)), a[b].d, mi);
        }
    }
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
}

#if SKV_DOT_VNNI
/* ---- AVX-512: the 16 rows in the lanes of a zmm register ---- */

static inline __m512i bit2z(__m512i hm, int j)
{
    __m512i v = j <= 2 ? _mm512_slli_epi16(hm, 2 - j) : _mm512_srli_epi16(hm, j - 2);
    return _mm512_and_si512(v, _mm512_set1_epi8(4));
}

PK2_INLINE __m512i pkz2_group_sum(const uint8_t *g, const __m512i hm[8], const int8_t *qs, int j, int kk, const int q3)
{
    const size_t qo = q3 ? 800 : 320;
    __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 4 * kk; k < 4 * kk + 4; k++) {
        __m512i u = _mm512_and_si512(_mm512_srli_epi16(ld64(g + qo + 64 * (8 * (j / 4) + k)), 2 * (j % 4)),
                                     _mm512_set1_epi8(3));
        if (q3) u = _mm512_or_si512(u, bit2z(hm[k], j));
        s = DPZ(s, u, bc4(qs + 32 * j + 4 * k));
    }
    return s;
}

PK2_INLINE void pkz2_group(float *y, const uint8_t *g, const skv_act256 *a, size_t nb, const int q3)
{
    const size_t gb = q3 ? 1824 : 1344;
    __m512 acc = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++, g += gb) {
        __m512i is = _mm512_setzero_si512(), mi = _mm512_setzero_si512(), hm[8];
        if (q3)
            for (int k = 0; k < 8; k++) hm[k] = ld64(g + 288 + 64 * k);
#pragma GCC unroll 16
        for (int gi = 0; gi < 16; gi++) {
            __m512i p = pkz2_group_sum(g, hm, a[b].qs, gi / 2, gi % 2, q3);
            if (gi % 4 == 0) pk_prefetch_part(g, gb, gi / 4, 4);
            if (q3) {
                p = _mm512_sub_epi32(p, _mm512_set1_epi32(4 * a[b].bsum[gi]));
                is = _mm512_add_epi32(is, _mm512_mullo_epi32(p, s8x16(g + 32 + 16 * gi)));
                continue;
            }
            __m512i sc = u8x16(g + 64 + 16 * gi);
            is = _mm512_add_epi32(is, _mm512_mullo_epi32(p, _mm512_and_si512(sc, _mm512_set1_epi32(15))));
            mi = _mm512_add_epi32(mi, _mm512_mullo_epi32(_mm512_srli_epi32(sc, 4), _mm512_set1_epi32(a[b].bsum[gi])));
        }
        __m512 dx = _mm512_set1_ps(a[b].d);
        acc = _mm512_fmadd_ps(_mm512_mul_ps(scales16(g), dx), _mm512_cvtepi32_ps(is), acc);
        if (!q3) {
            __m512 dm = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(scales16(g + 32)), _mm512_set1_epi32((int)0x80000000u)));
            acc = _mm512_fmadd_ps(_mm512_mul_ps(dm, dx), _mm512_cvtepi32_ps(mi), acc);
        }
    }
    _mm512_storeu_ps(y, acc);
}
#define PK2_GROUP pkz2_group
#else
#define PK2_GROUP pk2_group
#endif

/* The entry points (dot_pack_x86.h's SKV_PK_GEMV). */
static void PK_GROUP(q2_k)(float *y, const uint8_t *g, const skv_act256 *a, size_t nb) { PK2_GROUP(y, g, a, nb, 0); }
static void PK_GROUP(q3_k)(float *y, const uint8_t *g, const skv_act256 *a, size_t nb) { PK2_GROUP(y, g, a, nb, 1); }
SKV_PK_GEMV(q2_k, skv_act256, 256)
SKV_PK_GEMV(q3_k, skv_act256, 256)

#endif
