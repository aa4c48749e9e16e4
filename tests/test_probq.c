/* Tests for src/probq: the frequency invariants (>= 1, exact sum, monotone
 * in the logit), bit-equality with a slow reference written straight from
 * the spec (full sort for the final +1), closeness to softmax against the
 * best any floor-respecting quantiser can do, the fixed-point exp2 against
 * libm, error paths, a known-answer hash that pins the spec, and a round
 * trip through the range coder. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coder/probq.h"
#include "seqkv.h"
#include "coder/rangecoder.h"
#include "test.h"

static uint64_t rng_state = 0x243F6A8885A308D3u;

static uint64_t rng(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static double urand(void) { return ((double)(rng() >> 11) + 0.5) / 9007199254740992.0; }
static double gauss(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

/* ---- logit generators --------------------------------------------------- */

enum { GEN_GAUSS, GEN_LM, GEN_TIES, GEN_UNIFORM, GEN_WILD, GEN_COUNT };

/* LM-like: a Gaussian bulk and a short head of plausible tokens. */
static void gen_logits(float *l, size_t n, int kind, double scale)
{
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case GEN_GAUSS: l[i] = (float)(scale * gauss()); break;
        case GEN_LM: l[i] = (float)(2.5 * gauss() + ((rng() % 1000) == 0 ? scale : 0.0)); break;
        case GEN_TIES: l[i] = (float)(rng() % 7) * 0.75f - 2.0f; break;
        case GEN_UNIFORM: l[i] = 1.25f; break;
        default: { /* any finite float: huge, tiny, subnormal, signed zeros */
            uint32_t u;
            do { u = (uint32_t)rng(); } while ((u & 0x7F800000u) == 0x7F800000u);
            if (rng() % 4 == 0) u &= 0x807FFFFFu; /* subnormal or zero */
            memcpy(&l[i], &u, sizeof u);
        }
        }
    }
}

/* ---- the reference: the spec of docs/coder.md, written plainly ---------- */

typedef struct { float logit; size_t idx; } ranked;

static int cmp_ranked(const void *pa, const void *pb) /* logit desc, index asc */
{
    const ranked *a = pa, *b = pb;
    if (a->logit > b->logit) return -1;
    if (a->logit < b->logit) return 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int ref_freqs(const float *l, size_t n, unsigned bits, uint32_t *freq)
{
    uint64_t total = (uint64_t)1 << bits, s = 0, r, m1, m2, a = 0, b = 0, lft, d, base;
    uint32_t *w = malloc(n * sizeof *w);
    ranked *rk = malloc(n * sizeof *rk);
    float max = l[0];
    int mismatch = 0;
    if (!w || !rk) { free(w); free(rk); return SKV_ERR_NOMEM; }
    for (size_t i = 1; i < n; i++) if (l[i] > max) max = l[i];
    for (size_t i = 0; i < n; i++) {
        float dd = l[i] - max;
        float p = dd * 0x1.715476p+16f;
        uint32_t e = p > -2097152.0f ? (uint32_t)(-p) : (1u << 21);
        mismatch |= e != skv_probq_log2_fix(l[i], max);
        w[i] = skv_probq_exp2_fix(e);
        s += w[i];
    }
    r = total - n;
    m1 = (r << 35) / s;
    for (size_t i = 0; i < n; i++) a += ((uint64_t)w[i] * m1) >> 35;
    lft = r - a;
    m2 = (lft << 35) / s;
    for (size_t i = 0; i < n; i++) b += ((uint64_t)w[i] * m2) >> 35;
    d = lft - b;
    base = d / n;
    d %= n;
    for (size_t i = 0; i < n; i++) {
        freq[i] = (uint32_t)(1 + base + (((uint64_t)w[i] * m1) >> 35) + (((uint64_t)w[i] * m2) >> 35));
        rk[i].logit = l[i];
        rk[i].idx = i;
    }
    qsort(rk, n, sizeof *rk, cmp_ranked);
    for (size_t j = 0; j < d; j++) freq[rk[j].idx]++;
    free(w);
    free(rk);
    return mismatch ? SKV_ERR_MISMATCH : SKV_OK;
}

/* ---- property checks ----------------------------------------------------- */

static int cmp_by_logit(const void *pa, const void *pb) /* ascending */
{
    const ranked *a = pa, *b = pb;
    return a->logit < b->logit ? -1 : a->logit > b->logit;
}

/* freq >= 1, sum == 2^bits, cum consistent, and a larger logit never has a
 * smaller freq. Returns a description of the first violation or NULL. */
static const char *check_props(const float *l, size_t n, unsigned bits, const uint32_t *f,
                               const uint32_t *cum)
{
    uint64_t sum = 0;
    ranked *rk = malloc(n * sizeof *rk);
    uint32_t prev_max = 0, group_max = 0;
    const char *bad = NULL;
    if (!rk) return "nomem";
    for (size_t i = 0; i < n; i++) {
        if (f[i] == 0) bad = "freq 0";
        if (cum && cum[i] != sum) bad = "cum mismatch";
        sum += f[i];
        rk[i].logit = l[i];
        rk[i].idx = i;
    }
    if (sum != ((uint64_t)1 << bits)) bad = "sum != total";
    if (cum && cum[n] != sum) bad = "cum[n] mismatch";
    qsort(rk, n, sizeof *rk, cmp_by_logit);
    for (size_t i = 0; i < n && !bad; i++) {
        if (i > 0 && rk[i].logit > rk[i - 1].logit) { prev_max = group_max > prev_max ? group_max : prev_max; group_max = 0; }
        if (f[rk[i].idx] < prev_max) bad = "not monotone";
        if (f[rk[i].idx] > group_max) group_max = f[rk[i].idx];
    }
    free(rk);
    return bad;
}

/* KL(p || q) in bits, p = softmax(l) in double, q = f / 2^bits; also the
 * entropy and the KL of the best real-valued q with q_i >= 2^-bits
 * ("water-filling": q_i = max(2^-bits, c p_i)), the floor's own cost. */
static int cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return a < b ? -1 : a > b;
}

static void kl_stats(const float *l, size_t n, unsigned bits, const uint32_t *f, double *kl,
                     double *h, double *kl_opt)
{
    double *p = malloc(n * sizeof *p), *ps = malloc(n * sizeof *ps), s = 0, mx = -INFINITY;
    double t = ldexp(1.0, (int)bits), c = 1.0;
    *kl = *h = *kl_opt = 0;
    if (!p || !ps) { free(p); free(ps); *kl = INFINITY; return; }
    for (size_t i = 0; i < n; i++) if (l[i] > mx) mx = l[i];
    for (size_t i = 0; i < n; i++) { p[i] = exp((double)l[i] - mx); s += p[i]; }
    for (size_t i = 0; i < n; i++) {
        p[i] /= s;
        if (p[i] > 0) {
            *h -= p[i] * log2(p[i]);
            *kl += p[i] * log2(p[i] * t / f[i]);
        }
    }
    memcpy(ps, p, n * sizeof *p);
    qsort(ps, n, sizeof *ps, cmp_double);
    for (int it = 0; it < 200; it++) { /* fixed point for c */
        size_t k = 0;
        double tail = 0, cn;
        while (k < n && c * ps[k] < 1 / t) tail += ps[k++];
        cn = (1 - (double)k / t) / (1 - tail);
        if (cn == c) break;
        c = cn;
    }
    for (size_t i = 0; i < n; i++) {
        double q = c * p[i] < 1 / t ? 1 / t : c * p[i];
        if (p[i] > 0) *kl_opt += p[i] * log2(p[i] / q);
    }
    free(p);
    free(ps);
}

/* ---- cases -------------------------------------------------------------- */

static void matches_reference_and_properties(void)
{
    static const size_t sizes[] = {1, 2, 3, 5, 17, 255, 512, 1000, 4096, 32000, 150000};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        float *l = malloc(n * sizeof *l);
        uint32_t *f = malloc(n * sizeof *f), *g = malloc(n * sizeof *g), *cum = malloc((n + 1) * sizeof *cum);
        CHECK(l && f && g && cum);
        for (int kind = 0; kind < GEN_COUNT; kind++) {
            for (unsigned bits = 16; bits <= 28; bits += (n > 5000 ? 4 : 1)) {
                const char *bad;
                if (n > (1u << bits)) continue;
                gen_logits(l, n, kind, 1.0 + (double)(rng() % 12));
                CHECK_EQ_INT(skv_probq_freqs(l, n, bits, f, cum), SKV_OK);
                bad = check_props(l, n, bits, f, cum);
                CHECK_MSG(!bad, "n %zu kind %d bits %u: %s", n, kind, bits, bad);
                CHECK_EQ_INT(ref_freqs(l, n, bits, g), SKV_OK);
                CHECK_MSG(memcmp(f, g, n * sizeof *f) == 0, "n %zu kind %d bits %u: differs from reference",
                          n, kind, bits);
                /* deterministic, and cum_out == NULL takes the other selection path */
                memset(g, 0, n * sizeof *g);
                CHECK_EQ_INT(skv_probq_freqs(l, n, bits, g, NULL), SKV_OK);
                CHECK(memcmp(f, g, n * sizeof *f) == 0);
            }
        }
        free(l);
        free(f);
        free(g);
        free(cum);
    }
}

/* Many near-equal logits: the boundary bucket holds hundreds to thousands of
 * distinct keys, which exercises every selection path (sort of few, member
 * list radix, full radix without scratch). */
static void selection_paths_match_reference(void)
{
    static const size_t sizes[] = {300, 3000, 70000};
    for (size_t si = 0; si < 3; si++) {
        size_t n = sizes[si];
        float *l = malloc(n * sizeof *l);
        uint32_t *f = malloc(n * sizeof *f), *g = malloc(n * sizeof *g), *cum = malloc((n + 1) * sizeof *cum);
        CHECK(l && f && g && cum);
        for (int trial = 0; trial < 6; trial++) {
            double spread = trial < 3 ? 1e-3 : 1e-6;
            for (size_t i = 0; i < n; i++) l[i] = (float)(4.0 + spread * gauss());
            if (trial % 3 == 2) for (size_t i = 0; i < n; i += 3) l[i] = 4.0f; /* plus exact ties */
            CHECK_EQ_INT(skv_probq_freqs(l, n, 24, f, cum), SKV_OK);
            CHECK_EQ_INT(skv_probq_freqs(l, n, 24, g, NULL), SKV_OK);
            CHECK(memcmp(f, g, n * sizeof *f) == 0);
            CHECK_EQ_INT(ref_freqs(l, n, 24, g), SKV_OK);
            CHECK_MSG(memcmp(f, g, n * sizeof *f) == 0, "n %zu trial %d", n, trial);
            CHECK(!check_props(l, n, 24, f, cum));
        }
        free(l);
        free(f);
        free(g);
        free(cum);
    }
}

/* Close to softmax. With f = n / 2^bits (the mass the floor may need):
 * - KL(p || q) <= -log2(1 - f) (+ 2e-5): q_i >= p_i (1 - f) for every i;
 * - KL exceeds the least KL any quantiser with q_i >= 2^-bits can reach
 *   (real-valued water-filling, q_i = max(2^-bits, c p_i)) by at most
 *   5% of f / ln 2 (+ 1e-6): the price of giving every symbol its 1 up
 *   front instead of only to those below the floor (measured <= 2.1%);
 * - for vocabularies that fit (n <= 2^(bits-8)) KL < 0.01 bits. */
static void close_to_softmax(void)
{
    static const size_t sizes[] = {512, 4096, 32000, 150000};
    for (size_t si = 0; si < 4; si++) {
        size_t n = sizes[si];
        float *l = malloc(n * sizeof *l);
        uint32_t *f = malloc(n * sizeof *f);
        CHECK(l && f);
        for (int kind = GEN_GAUSS; kind <= GEN_LM; kind++) {
            for (unsigned bits = 16; bits <= 28; bits += 4) {
                double kl, h, opt, frac = (double)n / ldexp(1.0, (int)bits);
                double floor_lin = frac / log(2.0), floor_bound = -log2(1.0 - frac);
                if (n > (1u << bits)) continue;
                gen_logits(l, n, kind, kind == GEN_GAUSS ? 3.0 : 18.0);
                CHECK_EQ_INT(skv_probq_freqs(l, n, bits, f, NULL), SKV_OK);
                kl_stats(l, n, bits, f, &kl, &h, &opt);
                CHECK_MSG(kl <= opt + 0.05 * floor_lin + 1e-6, "n %zu bits %u: KL %.3g vs optimum %.3g",
                          n, bits, kl, opt);
                CHECK_MSG(kl <= floor_bound + 2e-5, "n %zu bits %u: KL %.3g > bound %.3g", n, bits, kl, floor_bound);
                if (n <= (1u << (bits - 8))) CHECK_MSG(kl < 0.01, "n %zu bits %u: KL %.3g", n, bits, kl);
            }
        }
        free(l);
        free(f);
    }
}

/* The floor's cost at total 2^24 on LM-like distributions (a 2.5-sigma
 * Gaussian bulk, a head 18 nats up): < 0.5% of the coded bits for 32k-150k
 * vocabularies when the model spends >= 3 bits per token (docs/coder.md). */
static void floor_cost_at_2_24(void)
{
    static const size_t sizes[] = {32000, 50257, 128256, 151936};
    for (size_t si = 0; si < 4; si++) {
        size_t n = sizes[si];
        float *l = malloc(n * sizeof *l);
        uint32_t *f = malloc(n * sizeof *f);
        double kl, h, opt;
        CHECK(l && f);
        gen_logits(l, n, GEN_LM, 18.0);
        CHECK_EQ_INT(skv_probq_freqs(l, n, 24, f, NULL), SKV_OK);
        kl_stats(l, n, 24, f, &kl, &h, &opt);
        CHECK_MSG(kl < 0.005 * 3.0, "n %zu: floor costs %.4f bits per token", n, kl);
        free(l);
        free(f);
    }
}

static void exp2_fix_against_libm(void)
{
    uint32_t prev = UINT32_MAX;
    CHECK_EQ_INT(skv_probq_exp2_fix(0), 1u << 31);
    CHECK_EQ_INT(skv_probq_exp2_fix(65536), 1u << 30);
    CHECK_EQ_INT(skv_probq_exp2_fix(SKV_PROBQ_E_MAX), 0);
    CHECK_EQ_INT(skv_probq_exp2_fix(UINT32_MAX), 0);
    for (uint32_t e = 0; e <= SKV_PROBQ_E_MAX; e++) {
        uint32_t w = skv_probq_exp2_fix(e);
        double exact = ldexp(exp2(-(double)(e & 0xFFFF) / 65536.0), 31 - (int)(e >> 16));
        CHECK_MSG(w <= prev, "not monotone at e=%u", e);
        if (e < SKV_PROBQ_E_MAX) CHECK_MSG(fabs((double)w - exact) <= 2.0, "e=%u: %u vs %.3f", e, w, exact);
        prev = w;
    }
}

static void log2_fix_spec(void)
{
    CHECK_EQ_INT(skv_probq_log2_fix(3.0f, 3.0f), 0);
    CHECK_EQ_INT(skv_probq_log2_fix(2.0f, 3.0f), 94548); /* floor(1 * K) */
    CHECK_EQ_INT(skv_probq_log2_fix(-FLT_MAX, FLT_MAX), SKV_PROBQ_E_MAX); /* d = -inf */
    CHECK_EQ_INT(skv_probq_log2_fix(-30.0f, 0.0f), SKV_PROBQ_E_MAX); /* 30 K > 2^21: clamp */
    CHECK_EQ_INT(skv_probq_log2_fix(0.0f, 1e-30f), 0);
    CHECK_EQ_INT(skv_probq_log2_fix(-0.0f, 0.0f), 0);
    /* 22 K = 2080066.140625 rounds to 2080066.125 in binary32 */
    CHECK_EQ_INT(skv_probq_log2_fix(-22.0f, 0.0f), 2080066);
    /* (-1.1 - 0.3) rounds to -1.4000001 in binary32, times K to -132367.86 */
    CHECK_EQ_INT(skv_probq_log2_fix(-1.1f, 0.3f), 132367);
}

static void errors(void)
{
    float l[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    uint32_t f[8], cum[9];
    const float bad[] = {NAN, INFINITY, -INFINITY};
    CHECK_EQ_INT(skv_probq_freqs(NULL, 8, 24, f, cum), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_probq_freqs(l, 8, 24, NULL, cum), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_probq_freqs(l, 0, 24, f, cum), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_probq_freqs(l, 8, 15, f, cum), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_probq_freqs(l, 8, 29, f, cum), SKV_ERR_INVALID_ARG);
    for (size_t b = 0; b < 3; b++) {
        for (size_t pos = 0; pos < 8; pos++) {
            float x[8];
            memcpy(x, l, sizeof x);
            x[pos] = bad[b];
            CHECK_EQ_INT(skv_probq_freqs(x, 8, 24, f, cum), SKV_ERR_INVALID_ARG);
        }
    }
    {   /* NaN payloads and negative NaN */
        float x[8];
        uint32_t u = 0xFFC00001u;
        memcpy(x, l, sizeof x);
        memcpy(&x[3], &u, sizeof u);
        CHECK_EQ_INT(skv_probq_freqs(x, 8, 24, f, cum), SKV_ERR_INVALID_ARG);
    }
    {   /* n > total */
        size_t n = (1u << 16) + 1;
        float *x = calloc(n, sizeof *x);
        uint32_t *g = malloc(n * sizeof *g);
        CHECK(x && g);
        CHECK_EQ_INT(skv_probq_freqs(x, n, 16, g, NULL), SKV_ERR_RANGE);
        CHECK_EQ_INT(skv_probq_freqs(x, n - 1, 16, g, NULL), SKV_OK); /* n == total: all ones */
        for (size_t i = 0; i + 1 < n; i++) CHECK(g[i] == 1);
        free(x);
        free(g);
    }
}

static void small_cases(void)
{
    float one = -3.5f, two[2] = {0.0f, 0.0f}, skew[2] = {100.0f, -100.0f};
    uint32_t f[2], cum[3];
    CHECK_EQ_INT(skv_probq_freqs(&one, 1, 24, f, cum), SKV_OK);
    CHECK(f[0] == (1u << 24) && cum[0] == 0 && cum[1] == (1u << 24));
    CHECK_EQ_INT(skv_probq_freqs(two, 2, 16, f, cum), SKV_OK);
    CHECK(f[0] == 32768 && f[1] == 32768);
    two[1] = -0.0f; /* -0 == +0 */
    CHECK_EQ_INT(skv_probq_freqs(two, 2, 16, f, cum), SKV_OK);
    CHECK(f[0] == 32768 && f[1] == 32768);
    CHECK_EQ_INT(skv_probq_freqs(skew, 2, 20, f, cum), SKV_OK);
    CHECK(f[0] == (1u << 20) - 1 && f[1] == 1);
    {   /* uniform over 150000 at 2^24: freqs differ by at most 1, larger first */
        size_t n = 150000;
        float *l = malloc(n * sizeof *l);
        uint32_t *g = malloc(n * sizeof *g);
        CHECK(l && g);
        for (size_t i = 0; i < n; i++) l[i] = 0.25f;
        CHECK_EQ_INT(skv_probq_freqs(l, n, 24, g, NULL), SKV_OK);
        for (size_t i = 0; i < n; i++) {
            CHECK(g[i] == (1u << 24) / n || g[i] == (1u << 24) / n + 1);
            if (i > 0) CHECK(g[i] <= g[i - 1]);
        }
        free(l);
        free(g);
    }
}

/* n up to 2^20 at 2^24 and at 2^28. */
static void large_vocab(void)
{
    size_t n = (size_t)1 << 20;
    float *l = malloc(n * sizeof *l);
    uint32_t *f = malloc(n * sizeof *f), *cum = malloc((n + 1) * sizeof *cum);
    CHECK(l && f && cum);
    gen_logits(l, n, GEN_GAUSS, 4.0);
    for (unsigned bits = 24; bits <= 28; bits += 4) {
        CHECK_EQ_INT(skv_probq_freqs(l, n, bits, f, cum), SKV_OK);
        CHECK(!check_props(l, n, bits, f, cum));
    }
    free(l);
    free(f);
    free(cum);
}

/* Pins the spec: FNV-1a of the freqs of fixed, exactly representable logits.
 * Any change to the quantiser that changes a single frequency fails here. */
static void known_answer(void)
{
    enum { N = 50000 };
    static float l[N];
    static uint32_t f[N];
    uint64_t h = 0xcbf29ce484222325u, x = 12345;
    for (size_t i = 0; i < N; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        l[i] = (float)((int32_t)(x >> 40) % 6000) / 256.0f; /* exact: k / 2^8 */
    }
    l[777] = 40.0f;
    for (unsigned bits = 16; bits <= 28; bits += 4) {
        CHECK_EQ_INT(skv_probq_freqs(l, N, bits, f, NULL), SKV_OK);
        for (size_t i = 0; i < N; i++) {
            for (int b = 0; b < 4; b++) { h ^= (f[i] >> (8 * b)) & 0xFF; h *= 0x100000001b3u; }
        }
    }
    CHECK_MSG(h == 0xe772ff52e4d698a2ull, "hash %016llx", (unsigned long long)h);
}

static void find_and_cum(void)
{
    uint32_t freq[1000] = {0}, cum[1001];
    CHECK_EQ_INT(skv_probq_cum(freq, 0, cum), SKV_OK);
    CHECK_EQ_INT(cum[0], 0);
    for (int trial = 0; trial < 50; trial++) {
        size_t n = 1 + (size_t)(rng() % 1000);
        for (size_t i = 0; i < n; i++) freq[i] = 1 + (uint32_t)(rng() % (trial % 2 ? 3 : 100000));
        CHECK_EQ_INT(skv_probq_cum(freq, n, cum), SKV_OK);
        for (int k = 0; k < 2000; k++) {
            uint32_t t = (uint32_t)(rng() % cum[n]);
            size_t s = skv_probq_find(cum, n, t);
            CHECK(s < n && cum[s] <= t && t < cum[s + 1]);
        }
        for (size_t s = 0; s < n; s++) {
            CHECK_EQ_INT(skv_probq_find(cum, n, cum[s]), s);
            CHECK_EQ_INT(skv_probq_find(cum, n, cum[s + 1] - 1), s);
        }
        CHECK_EQ_INT(skv_probq_find(cum, n, cum[n]), n - 1);
        CHECK_EQ_INT(skv_probq_find(cum, n, UINT32_MAX), n - 1);
    }
    freq[0] = UINT32_MAX;
    freq[1] = 1;
    CHECK_EQ_INT(skv_probq_cum(freq, 2, cum), SKV_ERR_RANGE);
}

/* skv_token_bits' scalar twin: the same algorithm written one value at a time, in plain C
 * (exp by the polynomial, lane j sums the values i = j mod 16 in double, the fixed tree). */
static float ref_exp_le0(float x)
{
    volatile float shift = 12582912.0f; /* volatile: the shift stays two IEEE operations */
    if (!(x >= -87.0f)) x = -87.0f;
    float kf = (x * 1.44269504088896341f + shift) - shift;
    float r = x - kf * 0.693359375f;
    r = r + kf * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3333519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    return p * ldexpf(1.0f, (int)kf);
}

static double ref_token_bits(const float *l, int V, int32_t tok)
{
    float mx = l[0];
    double acc[16] = {0};
    for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < V; i++) acc[i % 16] += (double)ref_exp_le0(l[i] - mx);
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return log2(acc[0]) - (double)(l[tok] - mx) * 1.44269504088896340736;
}

/* skv_token_bits (what the store prices tokens with): bit-identical to its scalar twin for
 * vocabularies that do and do not fill its 16 lanes, logits spread over +-120 (clamped
 * terms included), and within 1e-5 bits of skv_token_surprisal's double softmax. */
static void token_bits_twin(void)
{
    int sizes[] = {1, 7, 16, 33, 512, 4096, 32003};
    uint64_t seed = 99;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        int V = sizes[k];
        float *l = malloc((size_t)V * sizeof *l);
        CHECK(l);
        for (int spread = 0; spread < 2; spread++) {
            for (int i = 0; i < V; i++) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                double u = (double)(seed >> 11) / 9007199254740992.0;
                l[i] = (float)((u - 0.5) * (spread ? 240.0 : 16.0));
            }
            if (spread && V > 40) l[V / 3] = NAN; /* a NaN logit: defined, the same in both forms */
            for (int t = 0; t < V; t += V / 5 + 1) {
                double a = skv_token_bits(l, V, t), b = ref_token_bits(l, V, t);
                CHECK_MSG(memcmp(&a, &b, sizeof a) == 0, "V %d token %d: %.17g != %.17g", V, t, a, b);
                double c = skv_token_surprisal(l, V, t);
                CHECK_MSG(isnan(c) || fabs(a - c) < 1e-5 * (1 + fabs(c)), "V %d token %d: %.9g vs softmax %.9g", V, t,
                          a, c); /* a NaN logit makes the double softmax NaN */
            }
        }
        free(l);
    }
}

static void cost_bits(void)
{
    CHECK(skv_probq_cost_bits(1u << 24, 24) == 0.0);
    CHECK(skv_probq_cost_bits(1, 24) == 24.0);
    CHECK(skv_probq_cost_bits(1u << 23, 24) == 1.0);
    CHECK(fabs(skv_probq_cost_bits(3, 2) - (2.0 - log2(3.0))) < 1e-12);
    CHECK(isinf(skv_probq_cost_bits(0, 24)));
}

/* The model-coder loop in miniature: per step fresh logits, probq, code the
 * token; the decoder rebuilds the same freqs and finds the token. The size
 * matches the sum of -log2(freq/total). */
static void coder_roundtrip(void)
{
    enum { V = 4096, T = 3000 };
    static float l[V];
    static uint32_t f[V], cum[V + 1], toks[T];
    uint8_t *buf = malloc(skv_rangecoder_bound(T, 24));
    uint64_t seed = rng_state;
    skv_rangecoder_enc e;
    skv_rangecoder_dec d;
    size_t size = 0;
    double ideal = 0;
    CHECK(buf);
    skv_rangecoder_enc_init(&e, buf, skv_rangecoder_bound(T, 24));
    for (size_t t = 0; t < T; t++) {
        gen_logits(l, V, GEN_LM, 12.0);
        CHECK_EQ_INT(skv_probq_freqs(l, V, 24, f, cum), SKV_OK);
        toks[t] = (uint32_t)skv_probq_find(cum, V, (uint32_t)(rng() % (1u << 24))); /* sample */
        ideal += skv_probq_cost_bits(f[toks[t]], 24);
        CHECK_EQ_INT(skv_rangecoder_enc_put_pow2(&e, cum[toks[t]], f[toks[t]], 24), SKV_OK);
    }
    CHECK_EQ_INT(skv_rangecoder_enc_finish(&e, &size), SKV_OK);
    CHECK(size <= (size_t)ceil(ideal / 8 * 1.001) + 2);
    rng_state = seed; /* replay the same logits */
    CHECK_EQ_INT(skv_rangecoder_dec_init(&d, buf, size), SKV_OK);
    for (size_t t = 0; t < T; t++) {
        uint32_t target = 0;
        size_t s;
        gen_logits(l, V, GEN_LM, 12.0);
        CHECK_EQ_INT(skv_probq_freqs(l, V, 24, f, cum), SKV_OK);
        (void)rng(); /* the encoder's sampling draw */
        CHECK_EQ_INT(skv_rangecoder_dec_get_freq_pow2(&d, 24, &target), SKV_OK);
        s = skv_probq_find(cum, V, target);
        CHECK_EQ_INT(s, toks[t]);
        CHECK_EQ_INT(skv_rangecoder_dec_update(&d, cum[s], f[s]), SKV_OK);
    }
    CHECK_EQ_INT(skv_rangecoder_dec_finish(&d), SKV_OK);
    free(buf);
}

/* The SIMD passes give the scalar passes' bits (sizes with every tail length,
 * every generator, including subnormals, -0 and logits far below the max), and
 * skv_probq_decode finds exactly the symbol, interval start and frequency that
 * the full table and skv_probq_find give, for random targets and both ends. */
static void simd_and_decode_match_scalar(void)
{
    static const size_t sizes[] = {1, 7, 8, 9, 15, 16, 31, 100, 4096, 4099, 32001};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        float *l = malloc(n * sizeof *l);
        uint32_t *f = malloc(n * sizeof *f), *g = malloc(n * sizeof *g), *cum = malloc((n + 1) * sizeof *cum);
        uint32_t *w = malloc(n * sizeof *w), *sc = malloc(n * sizeof *sc);
        CHECK(l && f && g && cum && w && sc);
        for (int kind = 0; kind < GEN_COUNT; kind++) {
            for (int rep = 0; rep < 4; rep++) {
                unsigned bits = 16 + (unsigned)(rng() % 13);
                if (n > (1u << bits)) bits = 24;
                gen_logits(l, n, kind, 1.0 + (double)(rng() % 40));
                CHECK_EQ_INT(skv_probq_freqs(l, n, bits, f, cum), SKV_OK);
                CHECK_EQ_INT(skv_probq_freqs_ref(l, n, bits, g, NULL), SKV_OK);
                CHECK_MSG(memcmp(f, g, n * sizeof *f) == 0, "n %zu kind %d bits %u: SIMD != scalar", n, kind, bits);
                for (int t = 0; t < 8; t++) {
                    uint32_t target = t == 0 ? 0 : t == 1 ? (uint32_t)((1u << bits) - 1) : (uint32_t)(rng() >> 40) & ((1u << bits) - 1);
                    size_t sym = skv_probq_find(cum, n, target);
                    skv_probq_sym q = {0, 0, 0};
                    CHECK_EQ_INT(skv_probq_decode(l, n, bits, target, w, sc, &q), SKV_OK);
                    CHECK_MSG(q.sym == sym && q.lo == cum[sym] && q.freq == f[sym], "n %zu kind %d target %u", n, kind,
                              target);
                }
                CHECK_EQ_INT(skv_probq_decode(l, n, bits, 1u << bits, w, sc, &(skv_probq_sym){0, 0, 0}), SKV_ERR_RANGE);
            }
        }
        l[n / 2] = NAN;
        CHECK_EQ_INT(skv_probq_decode(l, n, 24, 0, w, sc, &(skv_probq_sym){0, 0, 0}), SKV_ERR_INVALID_ARG);
        l[n / 2] = -INFINITY;
        CHECK_EQ_INT(skv_probq_freqs(l, n, 24, f, NULL), SKV_ERR_INVALID_ARG);
        free(l);
        free(f);
        free(g);
        free(cum);
        free(w);
        free(sc);
    }
}

int main(void)
{
    TEST_BEGIN("test_probq");
    (void)test_stories_path; /* unused here; silences -Wunused-function */
    RUN(matches_reference_and_properties);
    RUN(selection_paths_match_reference);
    RUN(simd_and_decode_match_scalar);
    RUN(close_to_softmax);
    RUN(floor_cost_at_2_24);
    RUN(exp2_fix_against_libm);
    RUN(log2_fix_spec);
    RUN(errors);
    RUN(small_cases);
    RUN(large_vocab);
    RUN(known_answer);
    RUN(find_and_cum);
    RUN(cost_bits);
    RUN(token_bits_twin);
    RUN(coder_roundtrip);
    TEST_END();
}
