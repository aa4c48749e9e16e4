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

/* Eight rows of the packed layout (quant/repack.h: chunk c of 8 values at P + 64 c, row i
 * at + 8 i; K a multiple of 8): matvec8's operations, the weights one stream. */
static void HK(matvec8_packed)(float *y, const uint16_t *P, size_t K, const float *x)
{
    __m256 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    for (size_t j = 0; j < K; j += 8) {
        __m256 xv = _mm256_loadu_ps(x + j);
        const uint16_t *c = P + 8 * j;
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) acc[i] = _mm256_fmadd_ps(HK_LOAD8(c + 8 * i), xv, acc[i]);
    }
    _mm256_storeu_ps(y, skv_reduce8_avx2(acc));
}

/* n_rows (a multiple of 8) packed rows, one token. */
void HK(matvec_packed_avx2)(float *y, const void *P, size_t K, const float *x, size_t n_rows)
{
    const uint16_t *p = P;
    for (size_t r = 0; r < n_rows; r += 8) HK(matvec8_packed)(y + r, p + r * K, K, x);
}

/* Rows 4h .. 4h + 3 of the packed 8-row group G (the 64-byte half h of every chunk) x TT
 * tokens (TT <= 3: 12 accumulators, 3 tokens, 1 weight vector): each output the canonical
 * chain of its row and token, as matvec8. pf: prefetch 2 lines a chunk, pf bytes ahead
 * of the group's stream (NULL: none). The two halves of a group take two passes (each
 * uses every byte of its lines): in the file layout's 3-row tiles, 4 streams. */
static inline __attribute__((always_inline)) void HK(half4)(float *y, size_t ldy, const uint16_t *G, size_t K,
                                                            const float *x, size_t ldx, int h, const int TT,
                                                            const uint8_t *pf)
{
    __m256 acc[12];
#pragma GCC unroll 12
    for (int i = 0; i < 4 * TT; i++) acc[i] = _mm256_setzero_ps();
    for (size_t j = 0; j < K; j += 8) {
        const uint16_t *c = G + 8 * j + 32 * (size_t)h;
        __m256 xv[3];
        if (pf) {
            _mm_prefetch((const char *)(pf + 16 * j), _MM_HINT_T0);
            _mm_prefetch((const char *)(pf + 16 * j + 64), _MM_HINT_T0);
        }
#pragma GCC unroll 3
        for (int t = 0; t < TT; t++) xv[t] = _mm256_loadu_ps(x + (size_t)t * ldx + j);
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            __m256 w = HK_LOAD8(c + 8 * p);
#pragma GCC unroll 3
            for (int t = 0; t < TT; t++) acc[4 * t + p] = _mm256_fmadd_ps(w, xv[t], acc[4 * t + p]);
        }
    }
    for (int t = 0; t < TT; t++) {
        __m256 a[8] = {acc[4 * t], acc[4 * t + 1], acc[4 * t + 2], acc[4 * t + 3]}; /* lanes 4-7 unused */
        float o[8];
        _mm256_storeu_ps(o, skv_reduce8_avx2(a));
        memcpy(y + (size_t)t * ldy + 4 * (size_t)h, o, 4 * sizeof(float));
    }
}

/* y[t*ldy + r] for T tokens on packed rows (n_rows a multiple of 8): per 8-row group, tiles
 * of 3 tokens (then 2, 1), the first prefetching the group's stream 2 KiB ahead. */
void HK(matmul_tiles_packed_avx2)(float *y, size_t ldy, const void *P, size_t K, const float *x, size_t ldx, size_t T,
                                  size_t n_rows)
{
    for (size_t r = 0; r < n_rows; r += 8) {
        const uint16_t *G = (const uint16_t *)P + r * K;
        for (size_t t = 0; t < T;) {
            size_t tt = T - t < 3 ? T - t : 3;
            const uint8_t *pf = t ? NULL : (const uint8_t *)G + 2048;
            float *yt = y + t * ldy + r;
            const float *xt = x + t * ldx;
            for (int h = 0; h < 2; h++) {
                if (tt == 3) HK(half4)(yt, ldy, G, K, xt, ldx, h, 3, h ? NULL : pf);
                else if (tt == 2) HK(half4)(yt, ldy, G, K, xt, ldx, h, 2, h ? NULL : pf);
                else HK(half4)(yt, ldy, G, K, xt, ldx, h, 1, h ? NULL : pf);
            }
            t += tt;
        }
    }
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
