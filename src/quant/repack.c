/* The packed weight layouts (repack.h): packing, unpacking and the packed gemm. */
#include "quant/repack.h"
#include "core/fpguard.h"

#include <string.h>

#include "quant/dot_int.h"
#include "quant/types.h"

/* A field of the (expanded) file block: nu units of us bytes at offset fo; unit u of
 * row i goes to po + (16 u + i) * us of the group's packed block. */
typedef struct { unsigned fo, nu, us, po; } pk_seg;

/* A file block to its expanded form (x, xbytes) and back (NULL: the same bytes). */
typedef void (*pk_xform_fn)(const uint8_t *in, uint8_t *out, unsigned fbytes);

/* A packed type: file block bytes, expanded block bytes (q4_k: the 12 scale bytes as
 * sc[8] and mn[8]), values per block, the two transforms, fields. */
typedef struct {
    uint32_t type;
    unsigned fbytes, xbytes, n;
    pk_xform_fn expand, compress;
    unsigned nseg;
    pk_seg seg[6];
} pk_kind;

/* q4_k / q5_k: d, dmin, sc[8], mn[8], then the rest of the file block (q5_k's qh, qs). */
static void k4_expand(const uint8_t *f, uint8_t *x, unsigned fbytes)
{
    memcpy(x, f, 4);
    skv_k4_scales8(f + 4, x + 4, x + 12);
    memcpy(x + 20, f + 16, fbytes - 16);
}

/* The inverse of k4_expand: the 6-bit scales and mins back into their 12 bytes. */
static void k4_compress(const uint8_t *x, uint8_t *f, unsigned fbytes)
{
    const uint8_t *sc = x + 4, *mn = x + 12;
    uint8_t *s = f + 4;
    memcpy(f, x, 4);
    for (unsigned j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
    memcpy(f + 16, x + 20, fbytes - 16);
}

/* iq4_xs: d, the 8 runs' 6-bit scales as bytes, qs[128]. */
static void iq4xs_expand(const uint8_t *f, uint8_t *x, unsigned fbytes)
{
    unsigned sh = (unsigned)f[2] | (unsigned)f[3] << 8;
    memcpy(x, f, 2);
    for (unsigned r = 0; r < 8; r++) x[2 + r] = (uint8_t)(((f[4 + r / 2] >> (4 * (r % 2))) & 15) | ((sh >> (2 * r)) & 3) << 4);
    memcpy(x + 10, f + 8, fbytes - 8);
}

static void iq4xs_compress(const uint8_t *x, uint8_t *f, unsigned fbytes)
{
    unsigned sh = 0;
    memcpy(f, x, 2);
    memset(f + 4, 0, 4);
    for (unsigned r = 0; r < 8; r++) {
        f[4 + r / 2] |= (uint8_t)((x[2 + r] & 15) << (4 * (r % 2)));
        sh |= (unsigned)(x[2 + r] >> 4 & 3) << (2 * r);
    }
    f[2] = (uint8_t)sh, f[3] = (uint8_t)(sh >> 8);
    memcpy(f + 8, x + 10, fbytes - 8);
}

/* q3_k: d, the 16 6-bit scales unpacked (less 32, as int8), hmask[32], qs[64]. */
static void q3k_expand(const uint8_t *f, uint8_t *x, unsigned fbytes)
{
    const uint8_t *q = f + 96;
    (void)fbytes;
    memcpy(x, f + 108, 2);
    for (unsigned s = 0; s < 16; s++) {
        int lo = s < 8 ? (q[s] & 15) : (q[s - 8] >> 4), hi = (q[8 + s % 4] >> (2 * (s / 4))) & 3;
        x[2 + s] = (uint8_t)((lo | hi << 4) - 32);
    }
    memcpy(x + 18, f, 96);
}

static void q3k_compress(const uint8_t *x, uint8_t *f, unsigned fbytes)
{
    uint8_t *q = f + 96;
    (void)fbytes;
    memset(q, 0, 12);
    for (unsigned s = 0; s < 16; s++) {
        unsigned v = (uint8_t)(x[2 + s] + 32);
        q[s % 8] |= (uint8_t)((v & 15) << (s < 8 ? 0 : 4));
        q[8 + s % 4] |= (uint8_t)((v >> 4 & 3) << (2 * (s / 4)));
    }
    memcpy(f, x + 18, 96);
    memcpy(f + 108, x, 2);
}

static const pk_kind k_kinds[] = {
    {SKV_GGML_Q4_0, 18, 18, 32, NULL, NULL, 2, {{0, 1, 2, 0}, {2, 4, 4, 32}}},
    {SKV_GGML_Q8_0, 34, 34, 32, NULL, NULL, 2, {{0, 1, 2, 0}, {2, 8, 4, 32}}},
    {SKV_GGML_Q4_1, 20, 20, 32, NULL, NULL, 3, {{0, 1, 2, 0}, {2, 1, 2, 32}, {4, 4, 4, 64}}},
    {SKV_GGML_Q5_0, 22, 22, 32, NULL, NULL, 3, {{0, 1, 2, 0}, {2, 1, 4, 32}, {6, 4, 4, 96}}},
    {SKV_GGML_Q5_1, 24, 24, 32, NULL, NULL, 4, {{0, 1, 2, 0}, {2, 1, 2, 32}, {4, 1, 4, 64}, {8, 4, 4, 128}}},
    {SKV_GGML_IQ4_NL, 18, 18, 32, NULL, NULL, 2, {{0, 1, 2, 0}, {2, 4, 4, 32}}},
    {SKV_GGML_Q4_K, 144, 148, 256, k4_expand, k4_compress, 5,
     {{0, 1, 2, 0}, {2, 1, 2, 32}, {4, 8, 1, 64}, {12, 4, 2, 192}, {20, 32, 4, 320}}},
    {SKV_GGML_Q6_K, 210, 210, 256, NULL, NULL, 4, {{208, 1, 2, 0}, {192, 16, 1, 32}, {0, 32, 4, 288}, {128, 16, 4, 2336}}},
    {SKV_GGML_Q5_K, 176, 180, 256, k4_expand, k4_compress, 6,
     {{0, 1, 2, 0}, {2, 1, 2, 32}, {4, 8, 1, 64}, {12, 4, 2, 192}, {20, 8, 4, 320}, {52, 32, 4, 832}}},
    {SKV_GGML_IQ4_XS, 136, 138, 256, iq4xs_expand, iq4xs_compress, 3, {{0, 1, 2, 0}, {2, 8, 1, 32}, {10, 32, 4, 160}}},
    {SKV_GGML_Q2_K, 84, 84, 256, NULL, NULL, 4, {{80, 1, 2, 0}, {82, 1, 2, 32}, {0, 16, 1, 64}, {16, 16, 4, 320}}},
    {SKV_GGML_Q3_K, 110, 114, 256, q3k_expand, q3k_compress, 4, {{0, 1, 2, 0}, {2, 16, 1, 32}, {18, 8, 4, 288}, {50, 16, 4, 800}}},
};

#define XMAX 180 /* the largest expanded block (q5_k) */

static const pk_kind *kind_of(uint32_t type)
{
    for (size_t i = 0; i < sizeof k_kinds / sizeof k_kinds[0]; i++)
        if (k_kinds[i].type == type) return &k_kinds[i];
    return NULL;
}

/* 16-bit floats (f16, bf16): 8-row groups of 16-byte chunks (repack.h), no expansion. */
static int is_half(uint32_t type) { return type == SKV_GGML_F16 || type == SKV_GGML_BF16; }

#define HALF_ROWS 8u
#define HALF_CHUNK 16u /* bytes: 8 values */

/* Rows r0 .. r0 + n - 1 of the 8-row group at g (K values a row) to or from the file
 * layout at f (row i at f + i * 2K). */
static void half_move(uint8_t *g, uint8_t *f, size_t K, size_t r0, size_t n, int to_packed)
{
    size_t nc = K / 8;
    for (size_t c = 0; c < nc; c++) /* the packed side in order: one stream */
        for (size_t i = 0; i < n; i++) {
            uint8_t *a = g + c * HALF_ROWS * HALF_CHUNK + (r0 + i) * HALF_CHUNK, *b = f + i * 2 * K + c * HALF_CHUNK;
            if (to_packed) memcpy(a, b, HALF_CHUNK);
            else memcpy(b, a, HALF_CHUNK);
        }
}

size_t skv_pack_row_bytes(uint32_t type, size_t K)
{
    const pk_kind *k = kind_of(type);
    if (is_half(type)) return K && K % 8 == 0 ? 2 * K : 0;
    if (!k || K == 0 || K % k->n || 8 * (K / k->n) * k->fbytes > SKV_PACK_BUF) return 0;
    return K / k->n * k->xbytes;
}

/* Copies n units of us (1, 2 or 4) bytes: unit i from src + i * ss to dst + i * ds. */
static void copy_units(uint8_t *dst, size_t ds, const uint8_t *src, size_t ss, unsigned us, size_t n)
{
    if (us == 1)
        for (size_t i = 0; i < n; i++) dst[i * ds] = src[i * ss];
    else if (us == 2)
        for (size_t i = 0; i < n; i++) memcpy(dst + i * ds, src + i * ss, 2);
    else
        for (size_t i = 0; i < n; i++) memcpy(dst + i * ds, src + i * ss, 4);
}

/* Moves the fields of the expanded blocks of rows r0 .. r0 + n - 1 (row r0 + i's at
 * x + i * xs) into (to_packed) or out of the packed block p of their group. */
static void move_fields(const pk_kind *k, uint8_t *x, size_t xs, uint8_t *p, size_t r0, size_t n, int to_packed)
{
    for (unsigned s = 0; s < k->nseg; s++) {
        const pk_seg *g = &k->seg[s];
        for (unsigned u = 0; u < g->nu; u++) {
            uint8_t *a = p + g->po + (16 * u + r0) * g->us, *e = x + g->fo + u * g->us;
            if (to_packed) copy_units(a, g->us, e, xs, g->us, n);
            else copy_units(e, xs, a, g->us, g->us, n);
        }
    }
}

void skv_pack_rows(uint32_t type, const void *src, size_t row_bytes, size_t K, size_t n_rows, void *dst)
{
    const pk_kind *k = kind_of(type);
    const uint8_t *s = src;
    uint8_t *d = dst, xb[SKV_PACK_ROWS * XMAX];
    if (is_half(type)) {
        for (size_t r = 0; r + HALF_ROWS <= n_rows; r += HALF_ROWS)
            half_move(d + r * 2 * K, (uint8_t *)(uintptr_t)(s + r * row_bytes), K, 0, HALF_ROWS, 1); /* read only */
        return;
    }
    if (!k) return; /* callers check skv_pack_row_bytes */
    size_t nb = K / k->n, gb = SKV_PACK_ROWS * k->xbytes;
    for (size_t r = 0; r + SKV_PACK_ROWS <= n_rows; r += SKV_PACK_ROWS)
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *f = s + r * row_bytes + b * k->fbytes;
            uint8_t *p = d + r * nb * k->xbytes + b * gb;
            if (!k->expand) {
                move_fields(k, (uint8_t *)(uintptr_t)f, row_bytes, p, 0, SKV_PACK_ROWS, 1); /* read only */
                continue;
            }
            for (size_t i = 0; i < SKV_PACK_ROWS; i++) k->expand(f + i * row_bytes, xb + k->xbytes * i, k->fbytes);
            move_fields(k, xb, k->xbytes, p, 0, SKV_PACK_ROWS, 1);
        }
}

void skv_unpack_group_rows(uint32_t type, const void *P, size_t K, size_t r0, size_t n, void *dst)
{
    const pk_kind *k = kind_of(type);
    const uint8_t *p = P;
    uint8_t *d = dst, xb[SKV_PACK_ROWS * XMAX];
    if (is_half(type)) { /* the group's 8-row halves */
        for (size_t i = r0; i < r0 + n;) {
            size_t h = i / HALF_ROWS, e = (h + 1) * HALF_ROWS < r0 + n ? (h + 1) * HALF_ROWS : r0 + n;
            half_move((uint8_t *)(uintptr_t)(p + h * HALF_ROWS * 2 * K), d + (i - r0) * 2 * K, K, i % HALF_ROWS,
                      e - i, 0); /* read only */
            i = e;
        }
        return;
    }
    if (!k) return;
    size_t nb = K / k->n, gb = SKV_PACK_ROWS * k->xbytes, frb = nb * k->fbytes;
    for (size_t b = 0; b < nb; b++) {
        uint8_t *pb = (uint8_t *)(uintptr_t)(p + b * gb); /* read only */
        if (!k->compress) {
            move_fields(k, d + b * k->fbytes, frb, pb, r0, n, 0);
            continue;
        }
        move_fields(k, xb, k->xbytes, pb, r0, n, 0);
        for (size_t i = 0; i < n; i++) k->compress(xb + k->xbytes * i, d + i * frb + b * k->fbytes, k->fbytes);
    }
}

/* The T = 1 kernel of a packed type at a level (dot_pack_x86.h), or NULL. */
typedef void (*pk_gemv_fn)(float *y, const void *W, size_t row_bytes, const void *qa, size_t K, size_t n_rows);

static pk_gemv_fn gemv_of(int level, uint32_t type)
{
#if defined(__x86_64__)
    static const struct {
        uint32_t type;
        pk_gemv_fn avx2, avx512;
    } k_gemv[] = {{SKV_GGML_Q4_0, skv_gemv_q4_0_pk_avx2, skv_gemv_q4_0_pk_avx512},
                  {SKV_GGML_Q4_K, skv_gemv_q4_k_pk_avx2, skv_gemv_q4_k_pk_avx512},
                  {SKV_GGML_Q5_K, skv_gemv_q5_k_pk_avx2, skv_gemv_q5_k_pk_avx512},
                  {SKV_GGML_Q6_K, skv_gemv_q6_k_pk_avx2, skv_gemv_q6_k_pk_avx512},
                  {SKV_GGML_IQ4_XS, skv_gemv_iq4_xs_pk_avx2, skv_gemv_iq4_xs_pk_avx512},
                  {SKV_GGML_Q8_0, skv_gemv_q8_0_pk_avx2, skv_gemv_q8_0_pk_avx512},
                  {SKV_GGML_Q4_1, skv_gemv_q4_1_pk_avx2, skv_gemv_q4_1_pk_avx512},
                  {SKV_GGML_Q5_0, skv_gemv_q5_0_pk_avx2, skv_gemv_q5_0_pk_avx512},
                  {SKV_GGML_Q5_1, skv_gemv_q5_1_pk_avx2, skv_gemv_q5_1_pk_avx512},
                  {SKV_GGML_IQ4_NL, skv_gemv_iq4_nl_pk_avx2, skv_gemv_iq4_nl_pk_avx512},
                  {SKV_GGML_Q2_K, skv_gemv_q2_k_pk_avx2, skv_gemv_q2_k_pk_avx512},
                  {SKV_GGML_Q3_K, skv_gemv_q3_k_pk_avx2, skv_gemv_q3_k_pk_avx512}};
    for (size_t i = 0; i < sizeof k_gemv / sizeof k_gemv[0]; i++)
        if (k_gemv[i].type == type && level >= SKV_DOT_AVX2)
            return level >= SKV_DOT_AVX512 ? k_gemv[i].avx512 : k_gemv[i].avx2;
#else
    (void)level, (void)type;
#endif
    return NULL;
}

void skv_gemm_packed(int level, uint32_t type, float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa,
                     size_t qa_stride, size_t K, size_t T, size_t n_rows)
{
    const pk_kind *k = kind_of(type);
    const uint8_t *w = W;
    uint8_t buf[SKV_PACK_BUF];
    pk_gemv_fn gv;
    skv_gemm_fn g;
    level = skv_dot_level(level);
    if (T == 1 && (gv = gemv_of(level, type))) {
        gv(y, W, row_bytes, qa, K, n_rows);
        return;
    }
#if defined(__x86_64__)
    if (T > 1 && level == SKV_DOT_AVX2) { /* tiles on the packed rows (dot_pack32_x86.h, dot_pack_x86.h) */
        static const struct {
            uint32_t type;
            skv_gemm_fn fn;
        } k_tiles[] = {{SKV_GGML_Q4_0, skv_gemm_q4_0_pk_avx2},   {SKV_GGML_Q4_1, skv_gemm_q4_1_pk_avx2},
                       {SKV_GGML_Q5_0, skv_gemm_q5_0_pk_avx2},   {SKV_GGML_Q5_1, skv_gemm_q5_1_pk_avx2},
                       {SKV_GGML_IQ4_NL, skv_gemm_iq4_nl_pk_avx2}, {SKV_GGML_Q8_0, skv_gemm_q8_0_pk_avx2},
                       {SKV_GGML_Q4_K, skv_gemm_q4_k_pk_avx2},   {SKV_GGML_Q5_K, skv_gemm_q5_k_pk_avx2}};
        for (size_t i = 0; i < sizeof k_tiles / sizeof k_tiles[0]; i++)
            if (k_tiles[i].type == type) {
                k_tiles[i].fn(y, ldy, W, row_bytes, qa, qa_stride, K, T, n_rows);
                return;
            }
    }
#endif
    g = skv_dot_gemm(level, type);
    if (!k || !g) return;
    for (size_t r = 0; r < n_rows; r += 8) { /* 8 rows back to the file layout, then the level's gemm */
        const uint8_t *grp = w + r / SKV_PACK_ROWS * SKV_PACK_ROWS * row_bytes;
#if defined(__x86_64__)
        if (type == SKV_GGML_Q4_0 && level >= SKV_DOT_AVX2)
            skv_gemv_unpack8_q4_0_pk_avx2(grp, K / 32, r % SKV_PACK_ROWS, buf);
        else if (type == SKV_GGML_IQ4_XS && level >= SKV_DOT_AVX2)
            skv_gemv_unpack8_iq4_xs_pk_avx2(grp, K / 256, r % SKV_PACK_ROWS, buf);
        else
#endif
            skv_unpack_group_rows(type, grp, K, r % SKV_PACK_ROWS, 8, buf);
        g(y + r, ldy, buf, K / k->n * k->fbytes, qa, qa_stride, K, T, 8);
    }
}
