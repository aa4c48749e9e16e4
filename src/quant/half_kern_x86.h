/* The 16-bit float weight kernels of types_avx2.c, one source for binary16 (f16) and
 * bfloat16 (bf16): included once per type with
 *   HK(name)      the name of a function of this type (skv_f16_name, skv_bf16_name),
 *   HK_LOAD8(p)   the 8 values at p (const uint16_t *) as a __m256, exactly,
 *   HK_TO_F32(v)  one value as a float, exactly.
 * Every output is the canonical dot of its row (engine/ops.h: 8 lanes, fma over j
 * ascending, the reduce8 tree, then the tail in order), so each type's kernels give the
 * bits of its reference conversion followed by the f32 product. */

/* Eight rows at once: per row the operations of the canonical dot on the converted row. */
static void HK(matvec8)(float *y, const void *W, size_t row_bytes, size_t K, const float *x)
{
    size_t n8 = K & ~(size_t)7, j;
    const uint16_t *w[8];
    __m256 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        w[i] = row_at(W, row_bytes, (size_t)i);
        acc[i] = _mm256_setzero_ps();
    }
    for (j = 0; j < n8; j += 8) {
        __m256 xv = _mm256_loadu_ps(x + j);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) acc[i] = _mm256_fmadd_ps(HK_LOAD8(w[i] + j), xv, acc[i]);
    }
    _mm256_storeu_ps(y, skv_reduce8_avx2(acc));
    if (n8 != K)
        for (int i = 0; i < 8; i++)
            for (j = n8; j < K; j++) y[i] = fmaf(HK_TO_F32(w[i][j]), x[j], y[i]);
}

static float HK(matvec1)(const uint16_t *w, size_t K, const float *x)
{
    size_t n8 = K & ~(size_t)7, j;
    __m256 acc = _mm256_setzero_ps();
    for (j = 0; j < n8; j += 8) acc = _mm256_fmadd_ps(HK_LOAD8(w + j), _mm256_loadu_ps(x + j), acc);
    float sum = skv_hsum8_avx2(acc);
    for (; j < K; j++) sum = fmaf(HK_TO_F32(w[j]), x[j], sum);
    return sum;
}

void HK(matvec_avx2)(float *y, const void *W, size_t row_bytes, size_t K, const float *x, size_t n_rows)
{
    size_t r = 0;
    for (; r + 8 <= n_rows; r += 8) HK(matvec8)(y + r, row_at(W, row_bytes, r), row_bytes, K, x);
    for (; r < n_rows; r++) y[r] = HK(matvec1)(row_at(W, row_bytes, r), K, x);
}

/* Tile of R rows x TT tokens of y = W x: R*TT <= 16 accumulators, each the canonical dot
 * chain of its output (8 lanes, fma over j ascending, the reduce8 tree, then the tail).
 * Each weight vector is converted in registers once and used for all TT tokens. */
static inline __attribute__((always_inline)) void HK(tile)(float *y, size_t ldy, const void *W, size_t rb, size_t K,
                                                           const float *x, size_t ldx, const int R, const int TT)
{
    __m256 acc[16];
    float o[16];
    const uint16_t *w[8];
    size_t n8 = K & ~(size_t)7, j;
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) acc[i] = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) w[r] = row_at(W, rb, (size_t)r);
    for (j = 0; j < n8; j += 8) {
        __m256 wv[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) wv[r] = HK_LOAD8(w[r] + j);
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)t * ldx + j);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[t * R + r] = _mm256_fmadd_ps(wv[r], xv, acc[t * R + r]);
        }
    }
    _mm256_storeu_ps(o, skv_reduce8_avx2(acc));
    if (R * TT > 8) _mm256_storeu_ps(o + 8, skv_reduce8_avx2(acc + 8));
    for (int t = 0; t < TT; t++)
        for (int r = 0; r < R; r++) {
            float s = o[t * R + r];
            for (size_t k = n8; k < K; k++) s = fmaf(HK_TO_F32(w[r][k]), x[(size_t)t * ldx + k], s);
            y[(size_t)t * ldy + (size_t)r] = s;
        }
}

/* Rows r0.. of a token group of TT tokens: tiles of R rows, then single rows. The first
 * group (pf) prefetches the rows of the next tile: the weights come from L3 or memory
 * once per call, in short runs the hardware prefetcher does not pick up. */
static inline __attribute__((always_inline)) void HK(rows)(float *y, size_t ldy, const void *W, size_t rb, size_t K,
                                                           const float *x, size_t ldx, size_t n_rows, const int R,
                                                           const int TT, int pf)
{
    size_t r = 0;
    for (; r + (size_t)R <= n_rows; r += (size_t)R) {
        if (pf) prefetch_span(W, (r + (size_t)R) * rb, (size_t)R * rb);
        HK(tile)(y + r, ldy, row_at(W, rb, r), rb, K, x, ldx, R, TT);
    }
    for (; r < n_rows; r++) HK(tile)(y + r, ldy, row_at(W, rb, r), rb, K, x, ldx, 1, TT);
}

void HK(matmul_tiles_avx2)(float *y, size_t ldy, const void *W, size_t row_bytes, size_t K, const float *x,
                               size_t ldx, size_t T, size_t n_rows)
{
    size_t t = 0;
    for (; t + 4 <= T; t += 4) HK(rows)(y + t * ldy, ldy, W, row_bytes, K, x + t * ldx, ldx, n_rows, 3, 4, t == 0);
    for (; t + 2 <= T; t += 2) HK(rows)(y + t * ldy, ldy, W, row_bytes, K, x + t * ldx, ldx, n_rows, 4, 2, t == 0);
    if (t < T) HK(matvec_avx2)(y + t * ldy, W, row_bytes, K, x + t * ldx, n_rows);
}
