/* Tests for src/rangecoder: round trips under random and extreme
 * distributions, coded size against the ideal, byte equality with an
 * independent reference encoder (LZMA-style carry cache instead of in-place
 * carry propagation), bounded output, hostile input, error paths, and a
 * known-answer vector that pins the byte format. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coder/rangecoder.h"
#include "test.h"

/* ---- helpers ---------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t rng(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static uint32_t rng_below(uint64_t n) { return (uint32_t)(rng() % n); }

/* A model: nsym symbols with freq[i] >= 1 summing to total; cum[nsym + 1]. */
typedef struct {
    uint32_t *freq, *cum;
    size_t nsym;
    uint32_t total;
    unsigned bits; /* total == 2^bits, or 0 */
} model;

static void model_free(model *m)
{
    free(m->freq);
    free(m->cum);
    memset(m, 0, sizeof *m);
}

static int model_finish(model *m)
{
    uint64_t c = 0;
    m->cum = malloc((m->nsym + 1) * sizeof *m->cum);
    if (!m->cum) return 0;
    for (size_t i = 0; i < m->nsym; i++) { m->cum[i] = (uint32_t)c; c += m->freq[i]; }
    m->cum[m->nsym] = (uint32_t)c;
    m->total = (uint32_t)c;
    m->bits = 0;
    for (unsigned b = 0; b <= 31; b++)
        if (c == ((uint64_t)1 << b)) m->bits = b;
    return c == m->total;
}

/* Random frequencies: each symbol gets 1 + a share of total - nsym drawn
 * with weights w^skew (skew spreads the mass over orders of magnitude). */
static int model_random(model *m, size_t nsym, uint64_t total, double skew)
{
    double *w = malloc(nsym * sizeof *w), s = 0;
    uint64_t rest = total - nsym, given = 0;
    m->nsym = nsym;
    m->freq = malloc(nsym * sizeof *m->freq);
    if (!w || !m->freq) { free(w); return 0; }
    for (size_t i = 0; i < nsym; i++) { w[i] = pow((double)(rng() >> 11) / 9007199254740992.0, skew); s += w[i]; }
    for (size_t i = 0; i < nsym; i++) {
        uint64_t f = (uint64_t)((double)rest * (w[i] / s));
        if (f > rest - given) f = rest - given;
        m->freq[i] = (uint32_t)(1 + f);
        given += f;
    }
    m->freq[rng_below(nsym)] += (uint32_t)(rest - given);
    free(w);
    return model_finish(m);
}

/* Symbol with cum <= t < cum + freq, by binary search. */
static size_t model_find(const model *m, uint32_t t)
{
    size_t lo = 0, hi = m->nsym;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->cum[mid] <= t) lo = mid; else hi = mid;
    }
    return lo;
}

/* Draws a symbol from the model's own distribution. */
static uint32_t model_draw(const model *m) { return (uint32_t)model_find(m, rng_below(m->total)); }

static double model_cost(const model *m, const uint32_t *syms, size_t n)
{
    double bits = 0;
    for (size_t i = 0; i < n; i++) bits += log2((double)m->total / m->freq[syms[i]]);
    return bits;
}

static int encode_syms(const model *m, const uint32_t *syms, size_t n, int pow2,
                       uint8_t *dst, size_t cap, size_t *size)
{
    skv_rangecoder_enc e;
    skv_rangecoder_enc_init(&e, dst, cap);
    for (size_t i = 0; i < n; i++) {
        uint32_t s = syms[i];
        int st = pow2 ? skv_rangecoder_enc_put_pow2(&e, m->cum[s], m->freq[s], m->bits)
                      : skv_rangecoder_enc_put(&e, m->cum[s], m->freq[s], m->total);
        if (st != SKV_OK) return st;
    }
    return skv_rangecoder_enc_finish(&e, size);
}

/* Decodes n symbols; returns the first error. out may be NULL. */
static int decode_syms(const model *m, const uint8_t *src, size_t size, size_t n, int pow2,
                       uint32_t *out)
{
    skv_rangecoder_dec d;
    int st = skv_rangecoder_dec_init(&d, src, size);
    for (size_t i = 0; i < n && st == SKV_OK; i++) {
        uint32_t t = 0;
        size_t s;
        st = pow2 ? skv_rangecoder_dec_get_freq_pow2(&d, m->bits, &t)
                  : skv_rangecoder_dec_get_freq(&d, m->total, &t);
        if (st != SKV_OK) break;
        if (t >= m->total) return SKV_ERR_INTERNAL; /* must never happen */
        s = model_find(m, t);
        st = skv_rangecoder_dec_update(&d, m->cum[s], m->freq[s]);
        if (out) out[i] = (uint32_t)s;
    }
    return st != SKV_OK ? st : skv_rangecoder_dec_finish(&d);
}

/* ---- reference encoder ------------------------------------------------ */
/* Same arithmetic, but carries are resolved LZMA-style: the last emitted
 * byte is held back in `cache` with a count of 0xFF bytes behind it, and
 * low keeps its carry bit (low < 2^57) until the next shift. It never
 * rewrites output, so byte equality with the real encoder checks the
 * in-place carry propagation. */
typedef struct {
    uint8_t *out;
    size_t pos, cap;
    uint64_t low, range, pending, carries, deep_carries; /* deep: through >= 2 FFs */
    unsigned cache;
    int have_cache;
} ref_enc;

static void ref_emit(ref_enc *r, unsigned byte)
{
    if (r->pos < r->cap) r->out[r->pos] = (uint8_t)byte;
    r->pos++;
}

static void ref_resolve(ref_enc *r, unsigned carry)
{
    if (carry) r->carries++;
    if (carry && r->pending >= 2) r->deep_carries++;
    if (r->have_cache) ref_emit(r, r->cache + carry);
    for (; r->pending; r->pending--) ref_emit(r, (0xFF + carry) & 0xFF);
}

static void ref_shift(ref_enc *r)
{
    unsigned carry = (unsigned)(r->low >> 56), top = (unsigned)(r->low >> 48) & 0xFF;
    if (carry || top != 0xFF) {
        ref_resolve(r, carry);
        r->cache = top;
        r->have_cache = 1;
    } else {
        r->pending++;
    }
    r->low = (r->low & (((uint64_t)1 << 48) - 1)) << 8;
}

static void ref_put(ref_enc *r, uint32_t cum, uint32_t freq, uint64_t total)
{
    uint64_t q = r->range / total;
    r->low += q * cum;
    r->range = q * freq;
    while (r->range < ((uint64_t)1 << 48)) { ref_shift(r); r->range <<= 8; }
}

static void ref_finish(ref_enc *r)
{
    const uint64_t top = (uint64_t)1 << 56, bot = (uint64_t)1 << 48;
    uint64_t v = ((r->low + top - 1) / top) * top; /* low may carry: < 2^57 */
    int nbytes = 0;
    if (v >= r->low + r->range) { v = ((r->low + bot - 1) / bot) * bot; nbytes = 1; }
    r->low = v;
    while (nbytes-- > 0) ref_shift(r);
    ref_resolve(r, (unsigned)(r->low >> 56));
}

/* ---- cases ------------------------------------------------------------ */

static void roundtrip_random(void)
{
    /* (alphabet, total) pairs, totals 2^16..2^28 and non-powers of two. */
    static const struct { size_t nsym; uint64_t total; double skew; } cfg[] = {
        {2, 1u << 16, 1}, {7, 1000003, 2}, {256, 1u << 16, 1}, {300, 1u << 20, 4},
        {4096, 1u << 24, 3}, {32000, 1u << 24, 6}, {150000, 1u << 24, 8},
        {150000, 1u << 28, 8}, {1000, 1u << 28, 12}, {5, 4294967295u, 1},
        {65536, 4294967295u, 5}, {3, 3, 1},
    };
    enum { N = 20000 };
    uint32_t *syms = malloc(N * sizeof *syms), *back = malloc(N * sizeof *back);
    uint8_t *buf = NULL;
    CHECK(syms && back);
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        model m = {0};
        size_t cap, size = 0, ideal_bytes;
        double ideal;
        CHECK(model_random(&m, cfg[c].nsym, cfg[c].total, cfg[c].skew));
        for (size_t i = 0; i < N; i++) syms[i] = model_draw(&m);
        ideal = model_cost(&m, syms, N);
        cap = skv_rangecoder_bound(N, 32);
        buf = realloc(buf, cap);
        CHECK(buf);
        for (int pow2 = 0; pow2 <= (m.bits ? 1 : 0); pow2++) {
            CHECK_EQ_INT(encode_syms(&m, syms, N, pow2, buf, cap, &size), SKV_OK);
            /* within 0.1% of the ideal, plus 2 bytes */
            ideal_bytes = (size_t)ceil(ideal / 8.0 * 1.001) + 2;
            CHECK_MSG(size <= ideal_bytes, "cfg %zu: %zu bytes > %zu (ideal %.1f bits)", c, size,
                      ideal_bytes, ideal);
            CHECK_MSG(8.0 * (double)size >= ideal - 8, "cfg %zu: %zu bytes below the entropy", c, size);
            memset(back, 0xAB, N * sizeof *back);
            CHECK_EQ_INT(decode_syms(&m, buf, size, N, pow2, back), SKV_OK);
            CHECK(memcmp(syms, back, N * sizeof *syms) == 0);
        }
        model_free(&m);
    }
    free(buf);
    free(syms);
    free(back);
}

/* One symbol holds all but a sliver of the mass; rare symbols appear. */
static void roundtrip_extreme_skew(void)
{
    enum { N = 200000 };
    static const unsigned bits[] = {16, 24, 28};
    uint32_t *syms = malloc(N * sizeof *syms), *back = malloc(N * sizeof *back);
    uint8_t *buf = malloc(skv_rangecoder_bound(N, 28));
    CHECK(syms && back && buf);
    for (size_t b = 0; b < 3; b++) {
        model m = {0};
        size_t size = 0;
        double ideal;
        m.nsym = 1000;
        m.freq = malloc(m.nsym * sizeof *m.freq);
        CHECK(m.freq);
        for (size_t i = 0; i < m.nsym; i++) m.freq[i] = 1;
        m.freq[17] = (1u << bits[b]) - (uint32_t)(m.nsym - 1);
        CHECK(model_finish(&m));
        for (size_t i = 0; i < N; i++) syms[i] = (rng() % 997 == 0) ? rng_below(m.nsym) : 17;
        ideal = model_cost(&m, syms, N);
        CHECK_EQ_INT(encode_syms(&m, syms, N, 1, buf, skv_rangecoder_bound(N, 28), &size), SKV_OK);
        CHECK_MSG(size <= (size_t)ceil(ideal / 8.0 * 1.001) + 2, "bits %u: %zu bytes, ideal %.1f bits",
                  bits[b], size, ideal);
        CHECK_EQ_INT(decode_syms(&m, buf, size, N, 1, back), SKV_OK);
        CHECK(memcmp(syms, back, N * sizeof *syms) == 0);
        model_free(&m);
    }
    free(buf);
    free(syms);
    free(back);
}

/* Uniform over 150k symbols (total 2^24 and 2^28 are not multiples). */
static void roundtrip_uniform_150k(void)
{
    enum { N = 50000, V = 150000 };
    uint32_t *syms = malloc(N * sizeof *syms), *back = malloc(N * sizeof *back);
    uint8_t *buf = malloc(skv_rangecoder_bound(N, 28));
    CHECK(syms && back && buf);
    for (unsigned bits = 24; bits <= 28; bits += 4) {
        model m = {0};
        size_t size = 0;
        double ideal;
        m.nsym = V;
        m.freq = malloc(V * sizeof *m.freq);
        CHECK(m.freq);
        for (size_t i = 0; i < V; i++) m.freq[i] = ((1u << bits) / V) + (i < (1u << bits) % V);
        CHECK(model_finish(&m));
        CHECK_EQ_INT(m.bits, bits);
        for (size_t i = 0; i < N; i++) syms[i] = rng_below(V);
        ideal = model_cost(&m, syms, N);
        CHECK_EQ_INT(encode_syms(&m, syms, N, 1, buf, skv_rangecoder_bound(N, 28), &size), SKV_OK);
        CHECK(size <= (size_t)ceil(ideal / 8.0 * 1.001) + 2);
        CHECK_EQ_INT(decode_syms(&m, buf, size, N, 1, back), SKV_OK);
        CHECK(memcmp(syms, back, N * sizeof *syms) == 0);
        model_free(&m);
    }
    free(buf);
    free(syms);
    free(back);
}

/* Byte equality with the reference encoder over many random streams. One
 * stream in three is steered so that long FF runs build up and then carry:
 * it repeatedly codes the 1-wide slice that holds a fixed point P (P has
 * zero low bits, so low = P - small ends in ...FF FF FF), then one random
 * symbol, which lands above P about half the time and ripples a carry
 * through the whole run. */
static void matches_reference_encoder(void)
{
    enum { N = 3000, CAP = N * 5 + 16 };
    uint8_t *a = malloc(CAP), *b = malloc(CAP);
    uint32_t (*trip)[3] = malloc(N * sizeof *trip);
    uint64_t deep_carries = 0, carries = 0;
    CHECK(a && b && trip);
    for (int trial = 0; trial < 300; trial++) {
        skv_rangecoder_enc e;
        ref_enc r = {0};
        size_t size = 0;
        int steer = trial % 3 == 0, run = 0;
        uint64_t off = (uint64_t)1 << 55; /* P - low */
        skv_rangecoder_enc_init(&e, a, CAP);
        r.out = b;
        r.cap = CAP;
        r.range = (uint64_t)1 << 56;
        for (int i = 0; i < N; i++) {
            uint32_t total = (uint32_t)(2 + rng_below(trial % 2 ? 0xFFFFFFFDu : (1u << 20)));
            uint32_t freq = 1 + rng_below(total), cum = rng_below((uint64_t)total - freq + 1);
            uint64_t q = r.range / total, range;
            if (steer && run > 0) { /* the slice holding P */
                cum = (uint32_t)(off / q < total ? off / q : total - 1);
                freq = 1;
                run--;
            } else if (steer) {
                run = 3 + (int)rng_below(40);
            }
            off -= q * cum; /* wraps when P fell out: reset below */
            range = q * freq;
            for (; range < ((uint64_t)1 << 48); range <<= 8) off <<= 8;
            if (off >= range) off = range / 2;
            CHECK_EQ_INT(skv_rangecoder_enc_put(&e, cum, freq, total), SKV_OK);
            ref_put(&r, cum, freq, total);
            CHECK(r.range == range);
            trip[i][0] = cum, trip[i][1] = freq, trip[i][2] = total;
        }
        CHECK_EQ_INT(skv_rangecoder_enc_finish(&e, &size), SKV_OK);
        ref_finish(&r);
        CHECK_EQ_INT(size, r.pos);
        CHECK_MSG(memcmp(a, b, size) == 0, "trial %d differs from the reference", trial);
        if (trial % 10 == 0) { /* and it decodes */
            skv_rangecoder_dec d;
            uint32_t t = 0;
            CHECK_EQ_INT(skv_rangecoder_dec_init(&d, a, size), SKV_OK);
            for (int i = 0; i < N; i++) {
                CHECK_EQ_INT(skv_rangecoder_dec_get_freq(&d, trip[i][2], &t), SKV_OK);
                CHECK(t >= trip[i][0] && t - trip[i][0] < trip[i][1]);
                CHECK_EQ_INT(skv_rangecoder_dec_update(&d, trip[i][0], trip[i][1]), SKV_OK);
            }
            CHECK_EQ_INT(skv_rangecoder_dec_finish(&d), SKV_OK);
        }
        carries += r.carries;
        deep_carries += r.deep_carries;
    }
    CHECK_MSG(carries > 1000 && deep_carries > 1000, "carries %llu, through FF runs %llu",
              (unsigned long long)carries, (unsigned long long)deep_carries);
    free(trip);
    free(a);
    free(b);
}

/* put_pow2(bits) and put(1 << bits) write identical streams. */
static void pow2_equals_generic(void)
{
    enum { N = 2000, CAP = N * 5 + 16 };
    uint8_t *a = malloc(CAP), *b = malloc(CAP);
    CHECK(a && b);
    for (unsigned bits = 0; bits <= 31; bits++) {
        skv_rangecoder_enc ea, eb;
        size_t sa = 0, sb = 0;
        uint32_t total = 1u << bits;
        skv_rangecoder_enc_init(&ea, a, CAP);
        skv_rangecoder_enc_init(&eb, b, CAP);
        for (int i = 0; i < N; i++) {
            uint32_t freq = 1 + rng_below(total), cum = rng_below((uint64_t)total - freq + 1);
            CHECK_EQ_INT(skv_rangecoder_enc_put(&ea, cum, freq, total), SKV_OK);
            CHECK_EQ_INT(skv_rangecoder_enc_put_pow2(&eb, cum, freq, bits), SKV_OK);
        }
        CHECK_EQ_INT(skv_rangecoder_enc_finish(&ea, &sa), SKV_OK);
        CHECK_EQ_INT(skv_rangecoder_enc_finish(&eb, &sb), SKV_OK);
        CHECK(sa == sb && memcmp(a, b, sa) == 0);
    }
    free(a);
    free(b);
}

/* Raw bits of every width 0..32 interleaved with modelled symbols. */
static void raw_bits_roundtrip(void)
{
    enum { N = 5000 };
    uint32_t vals[N], widths[N], back;
    uint8_t buf[N * 5 + 16];
    skv_rangecoder_enc e;
    skv_rangecoder_dec d;
    size_t size = 0;
    double ideal = 0;
    skv_rangecoder_enc_init(&e, buf, sizeof buf);
    for (int i = 0; i < N; i++) {
        widths[i] = (uint32_t)(i % 33);
        vals[i] = widths[i] == 32 ? (uint32_t)rng() : rng_below((uint64_t)1 << widths[i]);
        ideal += widths[i];
        CHECK_EQ_INT(skv_rangecoder_enc_put_bits(&e, vals[i], widths[i]), SKV_OK);
        CHECK_EQ_INT(skv_rangecoder_enc_put(&e, 2, 3, 10), SKV_OK); /* a symbol in between */
        ideal += log2(10.0 / 3.0);
    }
    CHECK_EQ_INT(skv_rangecoder_enc_finish(&e, &size), SKV_OK);
    CHECK(size <= (size_t)ceil(ideal / 8.0 * 1.001) + 2);
    CHECK_EQ_INT(skv_rangecoder_dec_init(&d, buf, size), SKV_OK);
    for (int i = 0; i < N; i++) {
        uint32_t t = 0;
        CHECK_EQ_INT(skv_rangecoder_dec_get_bits(&d, widths[i], &back), SKV_OK);
        CHECK_EQ_INT(back, vals[i]);
        CHECK_EQ_INT(skv_rangecoder_dec_get_freq(&d, 10, &t), SKV_OK);
        CHECK(t >= 2 && t < 5);
        CHECK_EQ_INT(skv_rangecoder_dec_update(&d, 2, 3), SKV_OK);
    }
    CHECK_EQ_INT(skv_rangecoder_dec_finish(&d), SKV_OK);
    /* value out of range for its width */
    skv_rangecoder_enc_init(&e, buf, sizeof buf);
    CHECK_EQ_INT(skv_rangecoder_enc_put_bits(&e, 8, 3), SKV_ERR_INVALID_ARG);
    skv_rangecoder_enc_init(&e, buf, sizeof buf);
    CHECK_EQ_INT(skv_rangecoder_enc_put_bits(&e, 0, 33), SKV_ERR_INVALID_ARG);
}

/* No symbols, or only certain ones: zero bytes, and decodable. */
static void empty_and_certain(void)
{
    uint8_t buf[8] = {0};
    skv_rangecoder_enc e;
    skv_rangecoder_dec d;
    size_t size = 99;
    uint32_t t;
    skv_rangecoder_enc_init(&e, NULL, 0);
    CHECK_EQ_INT(skv_rangecoder_enc_finish(&e, &size), SKV_OK);
    CHECK_EQ_INT(size, 0);
    skv_rangecoder_enc_init(&e, buf, sizeof buf);
    for (int i = 0; i < 1000; i++) CHECK_EQ_INT(skv_rangecoder_enc_put(&e, 0, 77, 77), SKV_OK);
    CHECK_EQ_INT(skv_rangecoder_enc_finish(&e, &size), SKV_OK);
    CHECK_EQ_INT(size, 0);
    CHECK_EQ_INT(skv_rangecoder_dec_init(&d, NULL, 0), SKV_OK);
    for (int i = 0; i < 1000; i++) {
        CHECK_EQ_INT(skv_rangecoder_dec_get_freq(&d, 77, &t), SKV_OK);
        CHECK_EQ_INT(skv_rangecoder_dec_update(&d, 0, 77), SKV_OK);
    }
    CHECK_EQ_INT(skv_rangecoder_dec_finish(&d), SKV_OK);
}

/* For every capacity below the needed size the encoder fails with
 * SKV_ERR_RANGE and never writes past the capacity; at the exact size it
 * succeeds with the same bytes. bound() covers every stream. */
static void bounded_output(void)
{
    enum { N = 400, GUARD = 64 };
    model m = {0};
    uint32_t syms[N];
    uint8_t ref[4 * N + 16], buf[4 * N + 16 + GUARD];
    size_t need = 0, size;
    CHECK(model_random(&m, 50, 1u << 24, 6));
    for (size_t i = 0; i < N; i++) syms[i] = model_draw(&m);
    CHECK_EQ_INT(encode_syms(&m, syms, N, 1, ref, sizeof ref, &need), SKV_OK);
    CHECK(need > 10 && need <= skv_rangecoder_bound(N, 24));
    for (size_t cap = 0; cap <= need; cap++) {
        memset(buf, 0xCD, sizeof buf);
        int st = encode_syms(&m, syms, N, 1, buf, cap, &size);
        for (size_t i = cap; i < sizeof buf; i++) CHECK_MSG(buf[i] == 0xCD, "cap %zu: wrote at %zu", cap, i);
        if (cap < need) {
            CHECK_EQ_INT(st, SKV_ERR_RANGE);
        } else {
            CHECK_EQ_INT(st, SKV_OK);
            CHECK(size == need && memcmp(buf, ref, need) == 0);
        }
    }
    model_free(&m);
    /* bound: worst case symbols (freq 1 of 2^bits) never exceed it */
    for (unsigned bits = 1; bits <= 32; bits += 3) {
        static uint8_t big[20000];
        skv_rangecoder_enc e;
        size_t n = 4000, bound = skv_rangecoder_bound(n, bits);
        CHECK(bound <= sizeof big);
        skv_rangecoder_enc_init(&e, big, bound);
        for (size_t i = 0; i < n; i++) {
            uint32_t v = bits == 32 ? (uint32_t)rng() : rng_below((uint64_t)1 << bits);
            CHECK_EQ_INT(skv_rangecoder_enc_put_bits(&e, v, bits), SKV_OK);
        }
        CHECK_EQ_INT(skv_rangecoder_enc_finish(&e, &size), SKV_OK);
        CHECK(size <= bound && size + 8 >= n * bits / 8);
    }
    CHECK(skv_rangecoder_bound(UINT64_MAX, 8) == SIZE_MAX);
    CHECK(skv_rangecoder_bound(10, 33) == SIZE_MAX);
}

static void invalid_args_and_sticky_errors(void)
{
    uint8_t buf[64];
    skv_rangecoder_enc e;
    skv_rangecoder_dec d;
    size_t size;
    uint32_t t;
    skv_rangecoder_enc_init(&e, buf, sizeof buf);
    CHECK_EQ_INT(skv_rangecoder_enc_put(&e, 0, 0, 10), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_rangecoder_enc_put(&e, 0, 1, 10), SKV_ERR_INVALID_ARG); /* sticky */
    CHECK_EQ_INT(skv_rangecoder_enc_finish(&e, &size), SKV_ERR_INVALID_ARG);
    skv_rangecoder_enc_init(&e, buf, sizeof buf);
    CHECK_EQ_INT(skv_rangecoder_enc_put(&e, 9, 2, 10), SKV_ERR_INVALID_ARG);
    skv_rangecoder_enc_init(&e, buf, sizeof buf);
    CHECK_EQ_INT(skv_rangecoder_enc_put(&e, 0, 1, 0), SKV_ERR_INVALID_ARG);
    skv_rangecoder_enc_init(&e, buf, sizeof buf);
    CHECK_EQ_INT(skv_rangecoder_enc_put(&e, 0xFFFFFFFFu, 1, 0xFFFFFFFFu), SKV_ERR_INVALID_ARG);
    skv_rangecoder_enc_init(&e, buf, sizeof buf);
    CHECK_EQ_INT(skv_rangecoder_enc_put_pow2(&e, 0, 1, 33), SKV_ERR_INVALID_ARG);
    skv_rangecoder_enc_init(&e, buf, sizeof buf);
    CHECK_EQ_INT(skv_rangecoder_enc_put_pow2(&e, 4, 1, 2), SKV_ERR_INVALID_ARG);
    skv_rangecoder_enc_init(&e, buf, sizeof buf);
    CHECK_EQ_INT(skv_rangecoder_enc_put(&e, 3, 4, 10), SKV_OK);
    CHECK_EQ_INT(skv_rangecoder_enc_finish(&e, &size), SKV_OK);
    CHECK_EQ_INT(skv_rangecoder_enc_put(&e, 3, 4, 10), SKV_ERR_INVALID_ARG); /* after finish */
    CHECK_EQ_INT(skv_rangecoder_enc_finish(&e, &size), SKV_ERR_INVALID_ARG);

    CHECK_EQ_INT(skv_rangecoder_dec_init(&d, buf, 3), SKV_OK);
    CHECK_EQ_INT(skv_rangecoder_dec_update(&d, 0, 1), SKV_ERR_INVALID_ARG); /* no get_freq */
    CHECK_EQ_INT(skv_rangecoder_dec_get_freq(&d, 10, &t), SKV_ERR_INVALID_ARG); /* sticky */
    CHECK_EQ_INT(skv_rangecoder_dec_init(&d, buf, 3), SKV_OK);
    CHECK_EQ_INT(skv_rangecoder_dec_get_freq(&d, 0, &t), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_rangecoder_dec_init(&d, buf, 3), SKV_OK);
    CHECK_EQ_INT(skv_rangecoder_dec_get_freq_pow2(&d, 33, &t), SKV_ERR_INVALID_ARG);
    /* update with an interval that does not hold the target */
    CHECK_EQ_INT(skv_rangecoder_dec_init(&d, buf, 3), SKV_OK);
    CHECK_EQ_INT(skv_rangecoder_dec_get_freq(&d, 10, &t), SKV_OK);
    CHECK(t >= 3 && t < 7);
    CHECK_EQ_INT(skv_rangecoder_dec_update(&d, t == 3 ? 4 : 0, 1), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_rangecoder_dec_init(&d, buf, 3), SKV_OK);
    CHECK_EQ_INT(skv_rangecoder_dec_get_freq(&d, 10, &t), SKV_OK);
    CHECK_EQ_INT(skv_rangecoder_dec_update(&d, 3, 8), SKV_ERR_INVALID_ARG); /* cum+freq > total */
    CHECK_EQ_INT(skv_rangecoder_dec_init(&d, buf, 3), SKV_OK);
    CHECK_EQ_INT(skv_rangecoder_dec_get_freq(&d, 10, &t), SKV_OK);
    CHECK_EQ_INT(skv_rangecoder_dec_finish(&d), SKV_ERR_INVALID_ARG); /* pending get_freq */
}

/* A stream whose value lies in the unused slice [r * total, range) is
 * rejected with SKV_ERR_FORMAT, not decoded to an out-of-range target. */
static void target_past_total_is_format_error(void)
{
    static const uint8_t ff[7] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
    skv_rangecoder_dec d;
    uint32_t t = 0;
    /* range = 2^56, total = 3: r * 3 = 2^56 - 1, code = 2^56 - 1 is past it */
    CHECK_EQ_INT(skv_rangecoder_dec_init(&d, ff, sizeof ff), SKV_OK);
    CHECK_EQ_INT(skv_rangecoder_dec_get_freq(&d, 3, &t), SKV_ERR_FORMAT);
    CHECK_EQ_INT(skv_rangecoder_dec_get_freq(&d, 3, &t), SKV_ERR_FORMAT); /* sticky */
    CHECK_EQ_INT(skv_rangecoder_dec_finish(&d), SKV_ERR_FORMAT);
}

/* Truncated, extended, bit-flipped and random streams: decoding never reads
 * outside src (ASan), never yields a symbol out of range, and ends in
 * SKV_OK (garbage symbols) or a clean error. Truncation or extension by two
 * or more bytes is always caught by dec_finish. */
static void hostile_streams(void)
{
    enum { N = 3000 };
    model m = {0};
    uint32_t syms[N], back[N];
    uint8_t enc[N * 4];
    size_t size = 0;
    int ok = 0, errs = 0;
    CHECK(model_random(&m, 700, 1u << 20, 5));
    for (size_t i = 0; i < N; i++) syms[i] = model_draw(&m);
    CHECK_EQ_INT(encode_syms(&m, syms, N, 1, enc, sizeof enc, &size), SKV_OK);
    for (size_t cut = 1; cut <= size; cut++) { /* exact-size copies: ASan sees overreads */
        uint8_t *p = malloc(size - cut + 1);
        int st;
        CHECK(p);
        memcpy(p, enc, size - cut);
        st = decode_syms(&m, p, size - cut, N, 1, back);
        if (cut >= 2) CHECK_MSG(st != SKV_OK, "truncated by %zu accepted", cut);
        CHECK(st == SKV_OK || st == SKV_ERR_FORMAT);
        free(p);
    }
    for (size_t extra = 2; extra < 40; extra++) {
        uint8_t *p = malloc(size + extra);
        CHECK(p);
        memcpy(p, enc, size);
        for (size_t i = 0; i < extra; i++) p[size + i] = (uint8_t)rng();
        CHECK_EQ_INT(decode_syms(&m, p, size + extra, N, 1, back), SKV_ERR_FORMAT);
        free(p);
    }
    for (int trial = 0; trial < 300; trial++) {
        uint8_t *p = malloc(size);
        size_t len = trial % 2 ? size : (size_t)rng_below(size + 1);
        int st;
        CHECK(p);
        memcpy(p, enc, size);
        if (trial % 3 == 0) for (size_t i = 0; i < len; i++) p[i] = (uint8_t)rng();
        else p[rng_below(size)] ^= (uint8_t)(1u << rng_below(8));
        for (size_t i = 0; i < N; i++) back[i] = 0xFFFFFFFFu;
        st = decode_syms(&m, p, len, N, 1, back);
        CHECK(st == SKV_OK || st == SKV_ERR_FORMAT);
        for (size_t i = 0; i < N && back[i] != 0xFFFFFFFFu; i++) CHECK(back[i] < m.nsym);
        if (st == SKV_OK) ok++; else errs++;
        free(p);
    }
    CHECK(ok + errs == 300);
    model_free(&m);
}

/* Pins the byte format: a fixed symbol list must give these exact bytes
 * (also in docs/coder.md, where a big-integer Python model of the spec
 * reproduces them). */
static void known_answer(void)
{
    static const uint32_t sym[][3] = { /* cum, freq, total */
        {0, 1, 2}, {1, 1, 2}, {5, 3, 10}, {0, 65535, 65536}, {65535, 1, 65536},
        {123456, 1, 1u << 24}, {7, 1, 8}, {0xFFFFFFF0u, 15, 0xFFFFFFFFu}, {1, 1, 3},
    };
    static const uint8_t expect[] = {0x73, 0x33, 0x0C, 0xF1, 0x0A, 0x22, 0x38, 0x3C, 0xBF, 0x06};
    uint8_t buf[64];
    skv_rangecoder_enc e;
    size_t size = 0;
    skv_rangecoder_enc_init(&e, buf, sizeof buf);
    for (size_t i = 0; i < sizeof sym / sizeof sym[0]; i++)
        CHECK_EQ_INT(skv_rangecoder_enc_put(&e, sym[i][0], sym[i][1], sym[i][2]), SKV_OK);
    CHECK_EQ_INT(skv_rangecoder_enc_finish(&e, &size), SKV_OK);
    if (size != sizeof expect || memcmp(buf, expect, size) != 0) {
        char hex[200] = {0};
        for (size_t i = 0; i < size && i < 60; i++) snprintf(hex + 3 * i, 4, "%02X ", buf[i]);
        CHECK_MSG(0, "got %zu bytes: %s", size, hex);
    }
}

int main(void)
{
    TEST_BEGIN("test_rangecoder");
    (void)test_stories_path; /* unused here; silences -Wunused-function */
    RUN(roundtrip_random);
    RUN(roundtrip_extreme_skew);
    RUN(roundtrip_uniform_150k);
    RUN(matches_reference_encoder);
    RUN(pow2_equals_generic);
    RUN(raw_bits_roundtrip);
    RUN(empty_and_certain);
    RUN(bounded_output);
    RUN(invalid_args_and_sticky_errors);
    RUN(target_past_total_is_format_error);
    RUN(hostile_streams);
    RUN(known_answer);
    TEST_END();
}
