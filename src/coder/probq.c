/* probq.c - deterministic logits -> frequencies (see probq.h, docs/coder.md).
 *
 * Passes over the vocabulary (n = vocabulary size, T = 2^total_bits):
 *   0. reject NaN/Inf, find the max logit (as an order-preserving key)
 *   1. w_i = exp2_fix(log2_fix(l_i, max)) into freq_out, S = sum w_i
 *   2. A = sum floor(w_i m1 / 2^35)                 -> leftover L
 *   3. B = sum floor(w_i m2 / 2^35), histogram of w -> leftover D
 *   4. (D > 0) the D-th largest logit: one pass over the boundary bucket
 *      (rarely three more: a radix select when it is big and cum_out NULL)
 *   5. write f_i (and cum) over w_i
 * Every step is integer arithmetic except the two float operations in
 * log2_fix, which are single IEEE binary32 operations with one rounding each.
 * The selection in 3-4 is an implementation detail: only its result (the D
 * largest logits, ties by lowest index) is specified, and the test compares
 * it with a full sort.
 *
 * Bounds used below (S >= 2^31 because the max logit has w = 2^31, and
 * S <= n 2^31 <= 2^59):
 *   m1 = floor(R 2^35 / S) <= R 2^4 < 2^32;   w m1 <= R 2^35 < 2^63
 *   L  < S / 2^35 + n <= n 17/16 < 2^29;        L 2^35 < 2^64
 *   w m2 <= L 2^35 < 2^64;  D < n 17/16, so base = floor(D / n) <= 1.
 */
#include "coder/probq.h"
#include "core/fpguard.h"

#include "coder/probq_kern.h"
#include "core/cpu.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if FLT_RADIX != 2 || FLT_MANT_DIG != 24 || FLT_MAX_EXP != 128
#error "probq needs IEEE 754 binary32 float"
#endif
_Static_assert(sizeof(float) == sizeof(uint32_t), "float must be 32 bits");

#define PROBQ_SHIFT 35 /* fraction bits of the normalisation multipliers */

/* log2(e) * 2^16 rounded to binary32: 94548.4609375, bits 0x47B8AA3B. */
static const float probq_k = 0x1.715476p+16f;

/* exp2_hi[j] = round(2^31 * 2^(-j / 256)), exp2_lo[k] = round(2^31 *
 * 2^(-k / 65536)), rounded to nearest from the exact values (no entry is
 * within 1e-9 of a tie). Generated with 60-digit decimal arithmetic; the
 * SHA-256 of both tables as 512 little-endian uint32 (hi then lo) is
 * b81d0ac7c767b97f6326bafaecba66a40763fe93ed92a74e34403a8bbad3895a. */
const uint32_t skv_probq_exp2_hi[256] = {
    0x80000000u, 0x7fa765adu, 0x7f4f08aeu, 0x7ef6e8dau, 0x7e9f0606u, 0x7e476009u,
    0x7deff6b6u, 0x7d98c9e6u, 0x7d41d96eu, 0x7ceb2523u, 0x7c94acdeu, 0x7c3e7073u,
    0x7be86fbau, 0x7b92aa88u, 0x7b3d20b6u, 0x7ae7d21au, 0x7a92be8bu, 0x7a3de5dfu,
    0x79e947efu, 0x7994e492u, 0x7940bb9eu, 0x78ecccecu, 0x78991854u, 0x78459dacu,
    0x77f25cceu, 0x779f5590u, 0x774c87ccu, 0x76f9f359u, 0x76a7980fu, 0x765575c8u,
    0x76038c5bu, 0x75b1dba2u, 0x75606374u, 0x750f23abu, 0x74be1c20u, 0x746d4cacu,
    0x741cb528u, 0x73cc556du, 0x737c2d55u, 0x732c3cbau, 0x72dc8374u, 0x728d015du,
    0x723db650u, 0x71eea226u, 0x719fc4b9u, 0x71511de4u, 0x7102ad80u, 0x70b47368u,
    0x70666f76u, 0x7018a185u, 0x6fcb096fu, 0x6f7da710u, 0x6f307a41u, 0x6ee382deu,
    0x6e96c0c3u, 0x6e4a33c9u, 0x6dfddbccu, 0x6db1b8a8u, 0x6d65ca38u, 0x6d1a1057u,
    0x6cce8ae1u, 0x6c8339b2u, 0x6c381ca6u, 0x6bed3399u, 0x6ba27e65u, 0x6b57fce9u,
    0x6b0daeffu, 0x6ac39485u, 0x6a79ad56u, 0x6a2ff94fu, 0x69e6784du, 0x699d2a2cu,
    0x69540ec9u, 0x690b2601u, 0x68c26fb1u, 0x6879ebb6u, 0x683199edu, 0x67e97a34u,
    0x67a18c68u, 0x6759d065u, 0x6712460bu, 0x66caed35u, 0x6683c5c3u, 0x663ccf92u,
    0x65f60a7fu, 0x65af766au, 0x6569132fu, 0x6522e0adu, 0x64dcdec3u, 0x64970d4fu,
    0x64516c2eu, 0x640bfb41u, 0x63c6ba64u, 0x6381a978u, 0x633cc85bu, 0x62f816ebu,
    0x62b39509u, 0x626f4292u, 0x622b1f66u, 0x61e72b65u, 0x61a3666du, 0x615fd05eu,
    0x611c6919u, 0x60d9307bu, 0x60962665u, 0x60534ab7u, 0x60109d51u, 0x5fce1e12u,
    0x5f8bccdbu, 0x5f49a98cu, 0x5f07b405u, 0x5ec5ec26u, 0x5e8451d0u, 0x5e42e4e3u,
    0x5e01a53fu, 0x5dc092c7u, 0x5d7fad59u, 0x5d3ef4d7u, 0x5cfe6923u, 0x5cbe0a1cu,
    0x5c7dd7a4u, 0x5c3dd19cu, 0x5bfdf7e5u, 0x5bbe4a61u, 0x5b7ec8f2u, 0x5b3f7377u,
    0x5b0049d4u, 0x5ac14beau, 0x5a82799au, 0x5a43d2c6u, 0x5a055751u, 0x59c7071cu,
    0x5988e209u, 0x594ae7fbu, 0x590d18d3u, 0x58cf7474u, 0x5891fac1u, 0x5854ab9bu,
    0x581786e6u, 0x57da8c83u, 0x579dbc57u, 0x57611642u, 0x57249a29u, 0x56e847efu,
    0x56ac1f75u, 0x567020a0u, 0x56344b52u, 0x55f89f70u, 0x55bd1cdbu, 0x5581c378u,
    0x55469329u, 0x550b8bd4u, 0x54d0ad5au, 0x5495f7a1u, 0x545b6a8bu, 0x542105fdu,
    0x53e6c9dau, 0x53acb607u, 0x5372ca68u, 0x533906e0u, 0x52ff6b55u, 0x52c5f7aau,
    0x528cabc3u, 0x52538786u, 0x521a8ad7u, 0x51e1b59au, 0x51a907b4u, 0x5170810bu,
    0x51382182u, 0x50ffe8feu, 0x50c7d765u, 0x508fec9cu, 0x50582888u, 0x50208b0eu,
    0x4fe91413u, 0x4fb1c37cu, 0x4f7a9930u, 0x4f439514u, 0x4f0cb70cu, 0x4ed5ff00u,
    0x4e9f6cd4u, 0x4e69006eu, 0x4e32b9b4u, 0x4dfc988cu, 0x4dc69cddu, 0x4d90c68bu,
    0x4d5b157eu, 0x4d25899cu, 0x4cf022cau, 0x4cbae0efu, 0x4c85c3f1u, 0x4c50cbb8u,
    0x4c1bf829u, 0x4be7492bu, 0x4bb2bea5u, 0x4b7e587eu, 0x4b4a169cu, 0x4b15f8e6u,
    0x4ae1ff43u, 0x4aae299bu, 0x4a7a77d4u, 0x4a46e9d6u, 0x4a137f88u, 0x49e038d0u,
    0x49ad1598u, 0x497a15c4u, 0x4947393fu, 0x49147feeu, 0x48e1e9bau, 0x48af768au,
    0x487d2646u, 0x484af8d6u, 0x4818ee22u, 0x47e70611u, 0x47b5408cu, 0x47839d7bu,
    0x47521cc6u, 0x4720be55u, 0x46ef8210u, 0x46be67e0u, 0x468d6faeu, 0x465c9961u,
    0x462be4e2u, 0x45fb521au, 0x45cae0f2u, 0x459a9152u, 0x456a6323u, 0x453a564du,
    0x450a6abbu, 0x44daa054u, 0x44aaf702u, 0x447b6eadu, 0x444c0740u, 0x441cc0a3u,
    0x43ed9ac0u, 0x43be957fu, 0x438fb0cbu, 0x4360ec8du, 0x433248aeu, 0x4303c518u,
    0x42d561b4u, 0x42a71e6cu, 0x4278fb2bu, 0x424af7dau, 0x421d1462u, 0x41ef50aeu,
    0x41c1aca7u, 0x41942839u, 0x4166c34cu, 0x41397dccu, 0x410c57a2u, 0x40df50b8u,
    0x40b268fau, 0x4085a051u, 0x4058f6a8u, 0x402c6be9u,
};
const uint32_t skv_probq_exp2_lo[256] = {
    0x80000000u, 0x7fffa747u, 0x7fff4e8eu, 0x7ffef5d6u, 0x7ffe9d1eu, 0x7ffe4466u,
    0x7ffdebaeu, 0x7ffd92f7u, 0x7ffd3a3fu, 0x7ffce188u, 0x7ffc88d2u, 0x7ffc301bu,
    0x7ffbd765u, 0x7ffb7eafu, 0x7ffb25f9u, 0x7ffacd43u, 0x7ffa748eu, 0x7ffa1bd9u,
    0x7ff9c324u, 0x7ff96a6fu, 0x7ff911bbu, 0x7ff8b907u, 0x7ff86053u, 0x7ff8079fu,
    0x7ff7aeecu, 0x7ff75639u, 0x7ff6fd86u, 0x7ff6a4d3u, 0x7ff64c21u, 0x7ff5f36fu,
    0x7ff59abdu, 0x7ff5420bu, 0x7ff4e959u, 0x7ff490a8u, 0x7ff437f7u, 0x7ff3df46u,
    0x7ff38696u, 0x7ff32de6u, 0x7ff2d536u, 0x7ff27c86u, 0x7ff223d6u, 0x7ff1cb27u,
    0x7ff17278u, 0x7ff119c9u, 0x7ff0c11au, 0x7ff0686cu, 0x7ff00fbeu, 0x7fefb710u,
    0x7fef5e62u, 0x7fef05b5u, 0x7feead08u, 0x7fee545bu, 0x7fedfbaeu, 0x7feda302u,
    0x7fed4a56u, 0x7fecf1aau, 0x7fec98feu, 0x7fec4053u, 0x7febe7a7u, 0x7feb8efcu,
    0x7feb3652u, 0x7feadda7u, 0x7fea84fdu, 0x7fea2c53u, 0x7fe9d3a9u, 0x7fe97affu,
    0x7fe92256u, 0x7fe8c9adu, 0x7fe87104u, 0x7fe8185bu, 0x7fe7bfb3u, 0x7fe7670bu,
    0x7fe70e63u, 0x7fe6b5bcu, 0x7fe65d14u, 0x7fe6046du, 0x7fe5abc6u, 0x7fe5531fu,
    0x7fe4fa79u, 0x7fe4a1d3u, 0x7fe4492du, 0x7fe3f087u, 0x7fe397e2u, 0x7fe33f3cu,
    0x7fe2e697u, 0x7fe28df3u, 0x7fe2354eu, 0x7fe1dcaau, 0x7fe18406u, 0x7fe12b62u,
    0x7fe0d2beu, 0x7fe07a1bu, 0x7fe02178u, 0x7fdfc8d5u, 0x7fdf7033u, 0x7fdf1790u,
    0x7fdebeeeu, 0x7fde664cu, 0x7fde0dabu, 0x7fddb509u, 0x7fdd5c68u, 0x7fdd03c7u,
    0x7fdcab26u, 0x7fdc5286u, 0x7fdbf9e6u, 0x7fdba146u, 0x7fdb48a6u, 0x7fdaf007u,
    0x7fda9767u, 0x7fda3ec8u, 0x7fd9e62au, 0x7fd98d8bu, 0x7fd934edu, 0x7fd8dc4fu,
    0x7fd883b1u, 0x7fd82b13u, 0x7fd7d276u, 0x7fd779d9u, 0x7fd7213cu, 0x7fd6c8a0u,
    0x7fd67003u, 0x7fd61767u, 0x7fd5becbu, 0x7fd56630u, 0x7fd50d94u, 0x7fd4b4f9u,
    0x7fd45c5eu, 0x7fd403c3u, 0x7fd3ab29u, 0x7fd3528fu, 0x7fd2f9f5u, 0x7fd2a15bu,
    0x7fd248c2u, 0x7fd1f028u, 0x7fd1978fu, 0x7fd13ef7u, 0x7fd0e65eu, 0x7fd08dc6u,
    0x7fd0352eu, 0x7fcfdc96u, 0x7fcf83ffu, 0x7fcf2b67u, 0x7fced2d0u, 0x7fce7a39u,
    0x7fce21a3u, 0x7fcdc90cu, 0x7fcd7076u, 0x7fcd17e0u, 0x7fccbf4bu, 0x7fcc66b5u,
    0x7fcc0e20u, 0x7fcbb58bu, 0x7fcb5cf6u, 0x7fcb0462u, 0x7fcaabceu, 0x7fca533au,
    0x7fc9faa6u, 0x7fc9a213u, 0x7fc9497fu, 0x7fc8f0ecu, 0x7fc8985au, 0x7fc83fc7u,
    0x7fc7e735u, 0x7fc78ea3u, 0x7fc73611u, 0x7fc6dd7fu, 0x7fc684eeu, 0x7fc62c5du,
    0x7fc5d3ccu, 0x7fc57b3cu, 0x7fc522abu, 0x7fc4ca1bu, 0x7fc4718bu, 0x7fc418fcu,
    0x7fc3c06cu, 0x7fc367ddu, 0x7fc30f4eu, 0x7fc2b6bfu, 0x7fc25e31u, 0x7fc205a3u,
    0x7fc1ad15u, 0x7fc15487u, 0x7fc0fbfau, 0x7fc0a36cu, 0x7fc04adfu, 0x7fbff253u,
    0x7fbf99c6u, 0x7fbf413au, 0x7fbee8aeu, 0x7fbe9022u, 0x7fbe3796u, 0x7fbddf0bu,
    0x7fbd8680u, 0x7fbd2df5u, 0x7fbcd56au, 0x7fbc7ce0u, 0x7fbc2456u, 0x7fbbcbccu,
    0x7fbb7342u, 0x7fbb1ab9u, 0x7fbac230u, 0x7fba69a7u, 0x7fba111eu, 0x7fb9b896u,
    0x7fb9600du, 0x7fb90786u, 0x7fb8aefeu, 0x7fb85676u, 0x7fb7fdefu, 0x7fb7a568u,
    0x7fb74ce1u, 0x7fb6f45bu, 0x7fb69bd4u, 0x7fb6434eu, 0x7fb5eac9u, 0x7fb59243u,
    0x7fb539beu, 0x7fb4e139u, 0x7fb488b4u, 0x7fb4302fu, 0x7fb3d7abu, 0x7fb37f27u,
    0x7fb326a3u, 0x7fb2ce1fu, 0x7fb2759cu, 0x7fb21d18u, 0x7fb1c495u, 0x7fb16c13u,
    0x7fb11390u, 0x7fb0bb0eu, 0x7fb0628cu, 0x7fb00a0au, 0x7fafb189u, 0x7faf5908u,
    0x7faf0087u, 0x7faea806u, 0x7fae4f85u, 0x7fadf705u, 0x7fad9e85u, 0x7fad4605u,
    0x7faced85u, 0x7fac9506u, 0x7fac3c87u, 0x7fabe408u, 0x7fab8b89u, 0x7fab330bu,
    0x7faada8du, 0x7faa820fu, 0x7faa2991u, 0x7fa9d114u, 0x7fa97897u, 0x7fa9201au,
    0x7fa8c79du, 0x7fa86f21u, 0x7fa816a4u, 0x7fa7be28u,
};

/* ---- the per-logit steps ----------------------------------------------- */

static inline uint32_t probq_exp2(uint32_t e)
{
    uint32_t ip = e >> 16, f = e & 0xFFFFu;
    uint64_t v;
    if (e >= SKV_PROBQ_E_MAX) return 0;
    /* 2^31 * 2^-(f / 2^16) = exp2_hi[f >> 8] * exp2_lo[f & 255] / 2^31 */
    v = ((uint64_t)skv_probq_exp2_hi[f >> 8] * skv_probq_exp2_lo[f & 0xFFu] +
         ((uint64_t)1 << 30)) >> 31; /* in (2^30, 2^31] */
    /* round to nearest (ties up) when shifting right by ip <= 31 */
    return (uint32_t)((v + (((uint64_t)1 << ip) >> 1)) >> ip);
}

static inline uint32_t probq_log2(float logit, float max)
{
    /* Two binary32 operations, each rounded to nearest-even; assigning to a
     * float discards any excess precision (C11 5.2.4.2.2). */
    float d = logit - max;  /* <= 0, or -inf on overflow */
    float p = d * probq_k;  /* <= 0, or -inf */
    if (!(p > -2097152.0f)) return SKV_PROBQ_E_MAX; /* -2^21: weight 0 */
    return (uint32_t)(-p); /* truncation = floor, -p in [0, 2^21) */
}

uint32_t skv_probq_exp2_fix(uint32_t e) { return probq_exp2(e); }
uint32_t skv_probq_log2_fix(float logit, float max) { return probq_log2(logit, max); }

/* Order-preserving map of a finite float to uint32 (-0 taken as +0), so that
 * logit order == key order and the max / selection are integer compares. */
static inline uint32_t probq_key(float x)
{
    uint32_t u, neg;
    memcpy(&u, &x, sizeof u);
    u = u == 0x80000000u ? 0 : u;
    neg = (uint32_t)0 - (u >> 31); /* all ones for negatives */
    return u ^ (neg | 0x80000000u);
}

static inline float probq_unkey(uint32_t k)
{
    uint32_t u = (k & 0x80000000u) ? (k ^ 0x80000000u) : ~k;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- the passes ---------------------------------------------------------- */

/* Pass 0: the largest key, or 0 if some logit is NaN or infinite (0 is the
 * key of no finite float: it is the key of the NaN 0xFFFFFFFF). */
static uint32_t probq_max_key(const float *logits, size_t n)
{
    uint32_t kmax = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u, k = probq_key(logits[i]);
        memcpy(&u, &logits[i], sizeof u);
        bad |= (u & 0x7F800000u) == 0x7F800000u;
        kmax = k > kmax ? k : kmax;
    }
    return bad ? 0 : kmax;
}

/* Pass 1: weights into w[], returns their sum. */
static uint64_t probq_weights(const float *logits, size_t n, float max, uint32_t *w)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) {
        w[i] = probq_exp2(probq_log2(logits[i], max));
        s += w[i];
    }
    return s;
}

/* Pass 2: sum floor(w_i * m / 2^35). */
static uint64_t probq_scaled_sum(const uint32_t *w, size_t n, uint64_t m)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += ((uint64_t)w[i] * m) >> PROBQ_SHIFT;
    return s;
}

/* ---- the final +1: the D largest logits, ties by lowest index ------------
 * Only the result is specified; this is one fast way to get it. Symbols are
 * first bucketed by w (1/8 octave: a monotone function of w, hence of the
 * logit). The buckets above the one holding the D-th largest symbol are
 * taken whole; inside that bucket the exact order is by logit key: found by
 * sorting up to PROBQ_FEW members, or by a radix select over the keys. A
 * bucket is a w interval [lo, hi], so later passes test membership with two
 * integer compares. */

#define PROBQ_NBUCKET SKV_PROBQ_NBUCKET
#define PROBQ_FEW 256

static inline unsigned probq_ilog2(uint32_t w) /* floor(log2 w), w >= 1 */
{
#if defined(__GNUC__)
    return 31u - (unsigned)__builtin_clz(w);
#else
    unsigned l = 0;
    while (w >>= 1) l++;
    return l;
#endif
}

/* w < 16: bucket w; else 16 + 8 (L - 4) + the 3 bits below the top one,
 * L = floor(log2 w). Non-decreasing in w; 2^31 -> 232. */
static inline uint32_t probq_bucket(uint32_t w)
{
    unsigned l;
    if (w < 16) return w;
    l = probq_ilog2(w);
    return 16 + 8 * (l - 4) + ((w >> (l - 3)) & 7u);
}

static void probq_bucket_range(uint32_t b, uint32_t *lo, uint32_t *hi)
{
    unsigned l, t;
    if (b < 16) { *lo = *hi = b; return; }
    l = 4 + (b - 16) / 8;
    t = (b - 16) % 8;
    *lo = (uint32_t)(8 + t) << (l - 3);
    *hi = *lo + (((uint32_t)1 << (l - 3)) - 1);
}

typedef struct {
    uint32_t lo, hi; /* w range of the boundary bucket; w > hi gets +1 */
    uint32_t kappa;  /* inside it: keys > kappa get +1 ... */
    uint64_t take;   /* ... and the first `take` (by index) equal to kappa */
} probq_sel;

/* Pass 3 (fused with the scaled sum): bucket histogram, four interleaved
 * copies so that runs of equal buckets do not serialise on one counter. */
static uint64_t probq_scaled_sum_hist(const uint32_t *w, size_t n, uint64_t m,
                                      uint32_t (*hist)[PROBQ_NBUCKET])
{
    uint64_t s = 0;
    size_t i = 0;
    memset(hist, 0, 4 * sizeof *hist);
    for (; i + 4 <= n; i += 4) {
        for (int j = 0; j < 4; j++) {
            s += ((uint64_t)w[i + j] * m) >> PROBQ_SHIFT;
            hist[j][probq_bucket(w[i + j])]++;
        }
    }
    for (; i < n; i++) {
        s += ((uint64_t)w[i] * m) >> PROBQ_SHIFT;
        hist[0][probq_bucket(w[i])]++;
    }
    for (int b = 0; b < PROBQ_NBUCKET; b++) hist[0][b] += hist[1][b] + hist[2][b] + hist[3][b];
    return s;
}

static inline int probq_in(uint32_t w, const probq_sel *sel)
{
    return w - sel->lo <= sel->hi - sel->lo;
}

/* Radix select among the keys in the boundary bucket: the need-th largest
 * (11 + 11 + 10 bits, one pass per level). Sets kappa and take. */
static void probq_select_radix(const float *logits, const uint32_t *w, size_t n,
                               uint64_t need, probq_sel *sel)
{
    static const unsigned width[3] = {11, 11, 10};
    uint32_t hist[2048], prefix = 0;
    unsigned done = 0; /* key bits fixed so far */
    for (int lv = 0; lv < 3; lv++) {
        uint32_t nb = (uint32_t)1 << width[lv], b;
        unsigned low = 32 - done - width[lv];
        memset(hist, 0, nb * sizeof *hist);
        for (size_t i = 0; i < n; i++) {
            uint32_t k;
            if (!probq_in(w[i], sel)) continue;
            k = probq_key(logits[i]);
            if (done == 0 || (k >> (32 - done)) == prefix) hist[(k >> low) & (nb - 1)]++;
        }
        for (b = nb - 1; hist[b] < need; b--) need -= hist[b];
        prefix = (prefix << width[lv]) | b;
        done += width[lv];
    }
    sel->kappa = prefix;
    sel->take = need;
}

/* Radix select over a list of member indices (in index order), compacting
 * the list to the chosen sub-bucket at each level. */
static void probq_select_list(const float *logits, uint32_t *list, size_t count,
                              uint64_t need, probq_sel *sel)
{
    static const unsigned width[3] = {11, 11, 10};
    uint32_t hist[2048], prefix = 0;
    unsigned done = 0;
    for (int lv = 0; lv < 3; lv++) {
        uint32_t nb = (uint32_t)1 << width[lv], b;
        unsigned low = 32 - done - width[lv];
        size_t kept = 0;
        memset(hist, 0, nb * sizeof *hist);
        for (size_t j = 0; j < count; j++) hist[(probq_key(logits[list[j]]) >> low) & (nb - 1)]++;
        for (b = nb - 1; hist[b] < need; b--) need -= hist[b];
        for (size_t j = 0; j < count; j++)
            if (((probq_key(logits[list[j]]) >> low) & (nb - 1)) == b) list[kept++] = list[j];
        count = kept;
        prefix = (prefix << width[lv]) | b;
        done += width[lv];
    }
    sel->kappa = prefix;
    sel->take = need;
}

/* The boundary bucket holds the need-th largest: find kappa/take in it.
 * scratch (n entries, may be NULL) holds the member list when there are
 * more than PROBQ_FEW members. */
static void probq_select_in_bucket(const float *logits, const uint32_t *w, size_t n,
                                   uint32_t *scratch, uint64_t need, probq_sel *sel)
{
    uint32_t few[PROBQ_FEW], kmin = UINT32_MAX, kmax = 0;
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t k;
        if (!probq_in(w[i], sel)) continue;
        k = probq_key(logits[i]);
        kmin = k < kmin ? k : kmin;
        kmax = k > kmax ? k : kmax;
        if (count < PROBQ_FEW) few[count] = k;
        if (scratch) scratch[count] = (uint32_t)i;
        count++;
    }
    if (count < need) { /* impossible: the histogram counted these; the */
        sel->kappa = UINT32_MAX; /* final sum check then reports INTERNAL */
        sel->take = 0;
    } else if (kmin == kmax) { /* all tied (e.g. uniform logits): index order */
        sel->kappa = kmin;
        sel->take = need;
    } else if (count <= PROBQ_FEW) {
        /* insertion sort, descending; then kappa = the need-th key */
        for (size_t i = 1; i < count; i++) {
            uint32_t k = few[i];
            size_t j = i;
            for (; j > 0 && few[j - 1] < k; j--) few[j] = few[j - 1];
            few[j] = k;
        }
        sel->kappa = few[need - 1];
        sel->take = 0;
        for (size_t i = 0; i < need; i++) sel->take += few[i] == sel->kappa;
    } else if (scratch) {
        probq_select_list(logits, scratch, count, need, sel);
    } else {
        probq_select_radix(logits, w, n, need, sel);
    }
}

static void probq_select(const float *logits, const uint32_t *w, size_t n, uint32_t *scratch,
                         const uint32_t *hist, uint64_t d, probq_sel *sel)
{
    uint32_t b = PROBQ_NBUCKET - 1;
    for (; hist[b] < d; b--) d -= hist[b];
    probq_bucket_range(b, &sel->lo, &sel->hi);
    probq_select_in_bucket(logits, w, n, scratch, d, sel);
}

/* ---- the plan: everything but the final pass ---------------------------- */

static const skv_probq_kern probq_ref = {probq_max_key, probq_weights, probq_scaled_sum,
                                         probq_scaled_sum_hist};

static const skv_probq_kern *probq_kern_native(void)
{
    const skv_probq_kern *k = skv_probq_kern_avx2();
    return k ? k : &probq_ref;
}

typedef struct {
    uint64_t base, m1, m2; /* f_i = 1 + base + floor(w m1 / 2^35) + floor(w m2 / 2^35) (+1) */
    probq_sel sel;
    uint64_t taken;        /* boundary-bucket ties given +1 so far (final pass state) */
} probq_plan;

static int probq_args(const float *logits, size_t n, unsigned total_bits, const uint32_t *w)
{
    if (!logits || !w || n == 0 || total_bits < SKV_PROBQ_BITS_MIN || total_bits > SKV_PROBQ_BITS_MAX)
        return SKV_ERR_INVALID_ARG;
    return n > ((uint64_t)1 << total_bits) ? SKV_ERR_RANGE : SKV_OK;
}

/* Passes 0-4: w[] and the plan. scratch (n entries) may be NULL. */
static int probq_plan_make(const skv_probq_kern *k, const float *logits, size_t n, unsigned total_bits,
                           uint32_t *w, uint32_t *scratch, probq_plan *pl)
{
    uint32_t hist[4][PROBQ_NBUCKET], kmax;
    uint64_t r, s, l, d;
    int rc = probq_args(logits, n, total_bits, w);
    if (rc) return rc;
    if ((kmax = k->max_key(logits, n)) == 0) return SKV_ERR_INVALID_ARG;
    pl->sel = (probq_sel){UINT32_MAX, UINT32_MAX, 0, 0}; /* nobody gets +1 */
    pl->taken = 0;
    s = k->weights(logits, n, probq_unkey(kmax), w); /* 2^31 <= s <= 2^59 */
    r = ((uint64_t)1 << total_bits) - n;
    pl->m1 = (r << PROBQ_SHIFT) / s;
    l = r - k->scaled_sum(w, n, pl->m1);
    pl->m2 = (l << PROBQ_SHIFT) / s;
    d = l - k->scaled_sum_hist(w, n, pl->m2, hist);
    pl->base = d / n;
    d -= pl->base * n;
    if (d > 0) probq_select(logits, w, n, scratch, hist[0], d, &pl->sel);
    return SKV_OK;
}

/* The final pass's f_i (advances the plan's tie counter). */
static inline uint32_t probq_f(probq_plan *pl, const float *logits, size_t i, uint32_t w)
{
    uint64_t f = 1 + pl->base + (((uint64_t)w * pl->m1) >> PROBQ_SHIFT) + (((uint64_t)w * pl->m2) >> PROBQ_SHIFT);
    if (w > pl->sel.hi) {
        f++;
    } else if (w >= pl->sel.lo) { /* the boundary bucket */
        uint32_t k = probq_key(logits[i]);
        if (k > pl->sel.kappa || (k == pl->sel.kappa && pl->taken < pl->sel.take)) {
            pl->taken += k == pl->sel.kappa;
            f++;
        }
    }
    return (uint32_t)f;
}

static int probq_freqs_with(const skv_probq_kern *k, const float *logits, size_t n, unsigned total_bits,
                            uint32_t *freq_out, uint32_t *cum_out)
{
    probq_plan pl;
    uint64_t cum = 0;
    int rc = probq_plan_make(k, logits, n, total_bits, freq_out, cum_out, &pl);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        freq_out[i] = probq_f(&pl, logits, i, freq_out[i]);
        if (cum_out) cum_out[i] = (uint32_t)cum;
        cum += freq_out[i];
    }
    if (cum_out) cum_out[n] = (uint32_t)cum;
    return cum == ((uint64_t)1 << total_bits) ? SKV_OK : SKV_ERR_INTERNAL;
}

int skv_probq_freqs(const float *logits, size_t n, unsigned total_bits, uint32_t *freq_out, uint32_t *cum_out)
{
    return probq_freqs_with(probq_kern_native(), logits, n, total_bits, freq_out, cum_out);
}

int skv_probq_freqs_ref(const float *logits, size_t n, unsigned total_bits, uint32_t *freq_out, uint32_t *cum_out)
{
    return probq_freqs_with(&probq_ref, logits, n, total_bits, freq_out, cum_out);
}

int skv_probq_decode(const float *logits, size_t n, unsigned total_bits, uint32_t target, uint32_t *w,
                     uint32_t *scratch, skv_probq_sym *out)
{
    probq_plan pl;
    uint64_t cum = 0;
    int rc = probq_plan_make(probq_kern_native(), logits, n, total_bits, w, scratch, &pl);
    if (rc) return rc;
    if (!out) return SKV_ERR_INVALID_ARG;
    for (size_t i = 0; i < n; i++) { /* stops at the symbol: on average half a pass */
        uint32_t f = probq_f(&pl, logits, i, w[i]);
        if (target - cum < f) { /* target >= cum here */
            out->sym = (uint32_t)i;
            out->lo = (uint32_t)cum;
            out->freq = f;
            return SKV_OK;
        }
        cum += f;
    }
    return SKV_ERR_RANGE; /* target >= 2^total_bits */
}

int skv_probq_cum(const uint32_t *freq, size_t n, uint32_t *cum)
{
    uint64_t c = 0;
    if (!freq || !cum) return SKV_ERR_INVALID_ARG;
    for (size_t i = 0; i < n; i++) {
        cum[i] = (uint32_t)c;
        c += freq[i];
        if (c > UINT32_MAX) return SKV_ERR_RANGE;
    }
    cum[n] = (uint32_t)c;
    return SKV_OK;
}

size_t skv_probq_find(const uint32_t *cum, size_t n, uint32_t target)
{
    size_t lo = 0, len = n; /* answer in [lo, lo + len) */
    while (len > 1) {
        size_t half = len / 2;
        if (cum[lo + half] <= target) lo += half;
        len -= half;
    }
    return lo;
}

double skv_probq_cost_bits(uint32_t freq, unsigned total_bits)
{
    if (freq == 0) return HUGE_VAL;
    return (double)total_bits - log2((double)freq);
}

/* exp(x) for x <= 0 in float arithmetic, the same bits on every machine: x clamped to
 * -87 (NaN too) (exp(-87) is 1.6e-38, still normal: nothing below it matters beside the maximum's
 * 1), x = k ln2 + r with k rounded to nearest by the 1.5 * 2^23 shift (exact for |k| < 2^22),
 * exp(r) by Cephes' degree-6 polynomial, 2^k from its exponent bits. Plain IEEE operations
 * (no contraction), so a compiler that vectorizes the loop gives the same values. */
static inline float exp_le0(float x)
{
    const float shift = 12582912.0f; /* 1.5 * 2^23 */
    x = x >= -87.0f ? x : -87.0f; /* NaN too (a NaN logit): no int conversion of NaN below */
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
    int32_t bits = ((int32_t)kf + 127) * (1 << 23);
    float two;
    memcpy(&two, &bits, sizeof two);
    return p * two;
}

#define BITS_LANES 16

/* exp_le0 on 4 lanes at once (GCC/Clang vector extensions: the same IEEE operations per
 * lane as the scalar form, which does the tail) */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f exp_le0_v4(v4f x)
{
    const v4f lo = {-87.0f, -87.0f, -87.0f, -87.0f}, shift = {12582912.0f, 12582912.0f, 12582912.0f, 12582912.0f};
    v4i keep = x >= lo; /* all ones where x >= -87; NaN lanes take -87 as the scalar form */
    x = (v4f)(((v4i)x & keep) | ((v4i)lo & ~keep));
    v4f kf = (x * 1.44269504088896341f + shift) - shift;
    v4f r = x - kf * 0.693359375f;
    r = r + kf * 2.12194440e-4f;
    v4f p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3333519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    v4i bits = (__builtin_convertvector(kf, v4i) + 127) * (1 << 23);
    return p * (v4f)bits;
}

/* acc[j] += exp(l[j] - mx) for the 16 lanes, the double sums per lane. */
static inline void bits_block(const float *l, float mx, double *acc)
{
    for (int q = 0; q < BITS_LANES; q += 4) {
        v4f x;
        memcpy(&x, l + q, sizeof x);
        v4f e = exp_le0_v4(x - mx);
        for (int j = 0; j < 4; j++) acc[q + j] += (double)e[j];
    }
}

double skv_token_bits(const float *logits, int n_vocab, int32_t token)
{
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double acc[BITS_LANES] = {0};
    int i = 0;
    for (; i + BITS_LANES <= n_vocab; i += BITS_LANES) bits_block(logits + i, mx, acc);
    for (int j = 0; i < n_vocab; i++, j++) acc[j] += (double)exp_le0(logits[i] - mx);
    for (int w = BITS_LANES / 2; w >= 1; w /= 2) /* a fixed tree over the lanes */
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return log2(acc[0]) - (double)(logits[token] - mx) * 1.44269504088896340736;
}

/* The public report helper (seqkv.h): what a token costs under the model's exact softmax,
 * beside what it costs under the quantized frequencies above (skv_probq_cost_bits). */
double skv_token_surprisal(const float *logits, int n_vocab, int32_t token)
{
    double mx = logits[0], z = 0.0;
    for (int i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < n_vocab; i++) z += exp((double)logits[i] - mx);
    return (log(z) - ((double)logits[token] - mx)) / log(2.0);
}
