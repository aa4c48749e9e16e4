/* cm.c - the context-mixing token model of codec "cm" (see cm.h, docs/coder.md section 4).
 *
 * Per token (position i, history tok[0..i)):
 *   hashes h[k] of the last k ids (k = 0..4; missing ids before the stream start hash as 0)
 *   match: the id that followed the last occurrence of the last 3 ids, if >= 3 ids agree
 * Per coded bit (tree node n at depth d):
 *   inputs  st[k] = stretch(p of slot(order k, h[k], n)),  st[5] = match input,  st[6] = bias
 *   mix     p = squash(sum w[set][j] st[j] / 2^16),  set = (d, highest order seen, match on)
 *   code    bit under p (16-bit probability, put_pow2(..., 16))
 *   learn   slots move toward the bit at rate 1/(n + 1.5) (n = their count, capped),
 *           the mixer's weights by gradient descent on the coding cost.
 * All arithmetic is integer; right shifts of signed values go through asr() (floor),
 * which C defines for every sign. */
#include "coder/cm.h"
#include "core/fpguard.h"

#include "coder/cm_vocab.h"
#include "core/util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define CM_TEXT_SLOTS 3               /* with a vocabulary: last byte, last 3 bytes, word fragment */
#define CM_SLOTS (SKV_CM_ORDERS + CM_TEXT_SLOTS)
#define CM_INPUTS (CM_SLOTS + 3)      /* slots, match, bias, prior */
#define CM_MAX_DEPTH 24               /* B <= 24 */
#define CM_SETS (CM_MAX_DEPTH * SKV_CM_ORDERS * 2)
#define CM_MATCH_CTX 32               /* min(len, 15) * 2 + expected bit */
#define CM_MATCH_VERIFY 32            /* longest match length measured */
#define CM_LIMIT 255               /* slot count cap: the slowest adaptation rate */
#define CM_MIX_LR 24                /* mixer learning rate (x 2^-18 per unit of err * st) */
#define CMV_LIMIT 60                  /* cmv: faster adaptation (measured: primed models adapt to the segment) */
#define CMV_MIX_LR 24
#define CMV_SETS2 ((size_t)CM_MAX_DEPTH * 256)
#define CMV_APM_BITS 14
#define CMV_APM_RATE 6
#define CMV_APM_N ((size_t)33 << CMV_APM_BITS)
#define CM_W_INIT (1 << 14)           /* initial weight: 0.25 */
#define CM_W_MAX (1 << 22)
#define CM_SLOT_INIT ((uint32_t)1 << 31) /* p = 1/2, count 0 */
#define CM_JOUR_CAP ((size_t)1 << 20)   /* journal entries; past them the next copy is whole */
#define CM_JOUR_MPOS CM_SLOTS             /* journal table numbers: slots 0..7, then these */
#define CM_JOUR_APM (CM_SLOTS + 1)
#define CM_JOUR_RUN (CM_SLOTS + 2)        /* rev 2: the run models' table (index r << run_bits | x) */
#define CM_RUN 4                          /* rev 2: run models of orders 1..4 */
#define CM_RUN_CTX 64                     /* a run model's reliabilities: min(count, 31) * 2 + expected bit */
#define CM_RUN_COUNT_MAX 127
#define CM_RUN_SALT 0x5BD1E995u
#define CMV_SETS3 ((size_t)CM_MAX_DEPTH * 64) /* rev 2's third mixer: (depth, runs on, order-1 count) */
#define CM_X_MAX (CM_RUN + 2)             /* the first two mixers' extra inputs: rev 2's 4 runs; rev 3's recency and age */
#define CMV_WIDE_MAX (CM_INPUTS + CM_X_MAX) /* the third mixer's inputs: every input of the first two */
#define CMV_WX_N(nx) ((size_t)CM_SETS * (nx) + CMV_SETS2 * (nx) + CMV_SETS3 * (CM_INPUTS + (nx)))
/* rev 3 (docs/coder.md 4.10): checked slots, recency and age inputs */
#define CM3_CHK_MASK 0x3FC0u              /* slot format p (18 bits) << 14 | check (8) << 6 | count (6) */
#define CM3_COUNT_MASK 63u
#define CM_REC_W 64                       /* the recency window: the last 64 ids */
#define CM_AGE_W 1024                     /* ages above 1024 ids count as none */
#define CM_REC_CTX 256                    /* recency reliabilities: depth class (4) x count classes (8 x 8) */
#define CM_AGE_Q 22                       /* age classes: 0 none, then half octaves 1..21 */
#define CM_AGE_CTX (8 * CM_AGE_Q * CM_AGE_Q) /* age reliabilities: min(depth, 7) x classes x classes */
#define CM_REC_MAX_DEPTH 18               /* recency state for the nodes of depth 1..18 */
#define CM_MSM_N (CM_MATCH_CTX + CM_RUN * CM_RUN_CTX + CM_REC_CTX + CM_AGE_CTX)
#define CMV_FSETS (CM_MAX_DEPTH * 4)      /* rev 2's final mixer: (depth, match on, order 1 seen) */
#define CMV_FIN_INIT 21845                /* its initial weights: 1/3 each (the mean of the three) */
#define CMV_FIN_LR 1
#define CM_UNDO_MAX ((size_t)1 << 21)   /* undo entries (16 MiB of log); longer segments are copied */
#define CM_OVL_MAX_BITS 21              /* a mapped model's overlay: at most 2^21 cells (16 MiB) */

struct skv_cm {
    uint32_t V;
    unsigned B;                       /* bits of an id */
    const skv_cm_vocab *vb;           /* NULL: codec cm; else codec cmv (docs/coder.md 4.6) */
    unsigned rev;                     /* cmv's model revision: 1; 2 with n_run run models (4.9); 3 (4.10) */
    int n_run;
    int n_x, wide;                    /* rev 2+: extra inputs of the first two mixers (4, rev 3: 6), the third's */
    int fmt3;                         /* rev 3: slot format with a check, 2-way buckets */
    uint32_t cmask;                   /* a slot's count bits: 1023, rev 3 63 */
    size_t wx_n;
    int n_slots, n_in;                /* slot tables used, mixer inputs used */
    unsigned slot_bits;               /* log2 of the slots per table */
    uint32_t limit, mix_lr;           /* slot count cap, mixer rate: CM_* (cm) or CMV_* (cmv) */
    uint32_t *slot[CM_SLOTS];         /* [2^SLOT_BITS]: p (22 bits) << 10 | count (10 bits) */
    uint32_t *mpos;                   /* [2^MATCH_BITS]: position after the hashed ids, 0 = none */
    uint32_t msm[CM_MSM_N];           /* match reliability, slot format; rev 2: then the run models'
                                       * (rsm, CM_RUN_CTX each); rev 3: then recency's and age's */
    uint32_t *rsm;                    /* msm + CM_MATCH_CTX */
    uint32_t *recm, *agem;            /* rev 3: rsm + CM_RUN * CM_RUN_CTX, recm + CM_REC_CTX */
    size_t n_msm;                     /* elements of msm in use */
    uint32_t *run;                    /* rev 2: [CM_RUN << run_bits]: (coded value + 1) | count << 24, 0 = none */
    unsigned run_bits;
    int32_t *wx;                      /* rev 2+ (CMV_WX_N(n_x)): the extra inputs' weights in the first
                                       * two mixers (wr1 [CM_SETS][n_x], wr2 [CMV_SETS2][n_x]), the
                                       * third mixer (w3 [CMV_SETS3][wide]) */
    int32_t *wr1, *wr2, *w3;
    int32_t wf[CMV_FSETS][3];         /* rev 2: the final mixer of the three mixers' outputs */
    int32_t w[CM_SETS][CM_INPUTS];    /* mixer weights, 16.16 fixed point */
    int16_t stretch[4096];            /* stretch(p12) = ln(p / (1 - p)) * 256, in [-2047, 2047] */
    uint16_t rate[CM_LIMIT + 1];      /* 2^17 / (2 n + 3) */
    size_t n_coded;
    /* the current token */
    uint32_t hash[CM_SLOTS];
    uint32_t text4, frag;             /* last 4 bytes of the text, hash of its last word fragment */
    uint32_t mptr, mlen;              /* predicted id tok[mptr] while mlen > 0 */
    int32_t mtok;
    /* the current bit */
    uint32_t idx[CM_SLOTS];
    int32_t st[CMV_WIDE_MAX];         /* inputs; rev 2: the runs' at CM_INPUTS.., rev 3: then recency, age */
    uint32_t sv[CM_SLOTS];            /* rev 3: the current bit's slot values (a stale bucket entry: reset) */
    int set, mctx;
    uint32_t p;                       /* P(bit = 1) in 16 bits, in [22, 65514] */
    int32_t (*w2)[CM_INPUTS];         /* cmv: a second mixer, set by (depth, last byte) */
    int set2;
    int32_t dot1, dot2;               /* the two mixers' outputs (logistic domain) */
    /* rev 2: per token, each run model's predicted coded value (-1: none), count, element;
     * per bit, its reliability context (-1: not used), the third and final mixers' sets */
    int32_t rpred[CM_RUN];
    uint32_t rcnt[CM_RUN], ridx[CM_RUN];
    int rctx[CM_RUN];
    int set3, fset;
    int32_t dot3;
    /* rev 3: recency state, a function of the ids tok[i - CM_AGE_W .. i) (rebuilt from them
     * whenever the model is not at wpos + 1: after a copy, an undo, a load): per tree node
     * of depth 1..wd, how many of the last CM_REC_W ids lie below it, and 1 + the position
     * of the last id below it (0: none) */
    uint8_t *wcnt;
    uint32_t *wlast;
    unsigned wd;
    size_t wpos;                      /* the position the state is for; SIZE_MAX: none */
    int recx, agex;                   /* the current bit's recency and age contexts (-1: not used) */
    uint16_t *apm;                    /* cmv: [2^CMV_APM_BITS][33] refined P(1) by order-1 context */
    uint32_t apm_at, apm_f, p_mix;    /* the knot pair used, its weight, the mixer's p */
    /* journal (skv_cm_journal): the table elements written since the model was copied from
     * jsrc, table << 24 | index, so that the next copy from jsrc rewrites only those */
    uint32_t *jour;
    size_t jn;
    int jover;                        /* more writes than the journal holds */
    const skv_cm *jsrc;
    /* undo log (skv_cm_undo_begin): tag (as the journal's) and old value of every table
     * element written since the begin, and the small state saved whole */
    uint32_t *utag, *uold;
    size_t un, ucap, ubase, umax;     /* entries, capacity, ids coded at the begin, ids allowed */
    int uon, fresh;                   /* undo log on; tables as skv_cm_reset left them */
    int ufresh;                       /* fresh at the undo log's begin; 0 once anything is
                                       * written outside the log (skv_cm_undo restores fresh) */
    uint8_t *usave;
    /* mapped tables (skv_cm_map_tables): slot[k], mpos and apm point into a read-only
     * mapping of a snapshot file that the model owns; they are only ever written under an
     * undo log, and then into the overlay: an open-addressed table of (key, value) cells,
     * key = (table << 24 | index) + 1 (0: empty; tables numbered as the journal's),
     * holding every element written or about to be since the log's begin, sized at the
     * begin (<= 1/2 full for the ids allowed) and emptied by the undo. sp[k]: the cell or
     * table element of the current bit's slot k. */
    void *map;
    size_t map_len;
    struct cm_cell {
        uint32_t key, val;
    } *ovl;
    size_t ovl_cap;                   /* cells allocated */
    unsigned ovl_bits;                /* log2 of the cells in use while the log is on */
    int ovl_on, dead;                 /* overlay in use; a mapped model reset (unusable) */
    uint32_t *sp[CM_SLOTS];
};

/* squash(d) = 65536 / (1 + e^(-d / 256)) at d = 32 j - 2048, rounded; interpolated between. */
static const uint16_t squash_knots[129] = {
    22,    25,    28,    32,    36,    41,    47,    53,    60,    68,    77,    87,    98,    111,   126,   143,
    162,   184,   208,   236,   267,   302,   342,   387,   439,   497,   562,   636,   720,   815,   922,   1042,
    1179,  1333,  1506,  1701,  1921,  2168,  2446,  2758,  3108,  3500,  3938,  4427,  4971,  5577,  6249,  6992,
    7812,  8714,  9702,  10782, 11955, 13226, 14595, 16062, 17625, 19282, 21025, 22849, 24743, 26695, 28693, 30723,
    32768, 34813, 36843, 38841, 40793, 42687, 44511, 46254, 47911, 49474, 50941, 52310, 53581, 54754, 55834, 56822,
    57724, 58544, 59287, 59959, 60565, 61109, 61598, 62036, 62428, 62778, 63090, 63368, 63615, 63835, 64030, 64203,
    64357, 64494, 64614, 64721, 64816, 64900, 64974, 65039, 65097, 65149, 65194, 65234, 65269, 65300, 65328, 65352,
    65374, 65393, 65410, 65425, 65438, 65449, 65459, 65468, 65476, 65483, 65489, 65495, 65500, 65504, 65508, 65511,
    65514};

/* floor(x / 2^s) for any sign. */
static inline int64_t asr(int64_t x, unsigned s) { return x >= 0 ? x >> s : -((-x - 1) >> s) - 1; }

static inline int32_t clamp32(int64_t x, int32_t lo, int32_t hi) { return x < lo ? lo : x > hi ? hi : (int32_t)x; }

/* P(1) in 16 bits of the logistic-domain value d (clamped to [-2047, 2047]). */
static uint32_t squash16(int32_t d)
{
    uint32_t u = (uint32_t)(clamp32(d, -2047, 2047) + 2048), j = u >> 5, f = u & 31;
    return squash_knots[j] + (((uint32_t)(squash_knots[j + 1] - squash_knots[j]) * f) >> 5);
}

/* stretch = the inverse of squash on 12-bit probabilities: the smallest d whose squash
 * reaches p (2047 above the last). */
static void init_tables(skv_cm *cm)
{
    int32_t d = -2047;
    for (uint32_t p = 0; p < 4096; p++) {
        while (d < 2047 && (squash16(d) >> 4) < p) d++;
        cm->stretch[p] = (int16_t)d;
    }
    for (uint32_t n = 0; n <= CM_LIMIT; n++) cm->rate[n] = (uint16_t)((1u << 17) / (2 * n + 3));
}

/* Faults in the pages of a large table with one call (the kernel maps and zeroes them in
 * a batch) instead of one page fault per page on first touch. The tables are on huge
 * pages where the kernel grants them (skv_big_alloc): 18 of 2 MiB for the 36 MiB of a
 * cmvd model instead of ~9,000 of 4 KiB. An optimisation only: without the call
 * (another OS, an old kernel) the pages fault in as they are touched. */
static void prefault(void *p, size_t bytes)
{
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    uintptr_t pg = 4096, a = ((uintptr_t)p + pg - 1) & ~(pg - 1), e = ((uintptr_t)p + bytes) & ~(pg - 1);
    if (e > a) (void)madvise((void *)a, e - a, MADV_POPULATE_WRITE);
#else
    (void)p, (void)bytes;
#endif
}

static void prefault_tables(skv_cm *cm)
{
    if (cm->map) return; /* read-only: the page cache's pages */
    for (int k = 0; k < cm->n_slots; k++) prefault(cm->slot[k], sizeof(uint32_t) << cm->slot_bits);
    prefault(cm->mpos, sizeof(uint32_t) << SKV_CM_MATCH_BITS);
    if (cm->run) prefault(cm->run, sizeof(uint32_t) * CM_RUN << cm->run_bits);
    if (cm->apm) prefault(cm->apm, CMV_APM_N * sizeof *cm->apm);
}

void skv_cm_prefault(skv_cm *cm) { prefault_tables(cm); }

/* A model with its tables allocated but not reset; populate: fault them in now; !tables:
 * without the slot tables, mpos and the APM (skv_cm_map_tables gives them). */
static int cm_alloc(uint32_t n_vocab, const skv_cm_vocab *vb, unsigned rev, unsigned slot_bits, int populate, int tables,
                    skv_cm **out)
{
    skv_cm *cm;
    if (!out) return SKV_ERR_INVALID_ARG;
    *out = NULL;
    if (n_vocab < 1 || n_vocab > SKV_CM_MAX_VOCAB) return SKV_ERR_INVALID_ARG;
    if (!(cm = calloc(1, sizeof *cm))) return SKV_ERR_NOMEM;
    cm->vb = vb;
    cm->rev = vb ? rev : 1;
    cm->n_run = cm->rev >= 2 ? CM_RUN : 0;
    cm->n_x = cm->rev >= 3 ? CM_X_MAX : cm->n_run;
    cm->wide = CM_INPUTS + cm->n_x;
    cm->wx_n = CMV_WX_N((size_t)cm->n_x);
    cm->fmt3 = cm->rev >= 3;
    cm->cmask = cm->fmt3 ? CM3_COUNT_MASK : 1023;
    cm->run_bits = slot_bits - 2;
    cm->rsm = cm->msm + CM_MATCH_CTX;
    cm->recm = cm->rsm + CM_RUN * CM_RUN_CTX;
    cm->agem = cm->recm + CM_REC_CTX;
    cm->n_msm = CM_MATCH_CTX + (size_t)cm->n_run * CM_RUN_CTX + (cm->fmt3 ? CM_REC_CTX + CM_AGE_CTX : 0);
    cm->wpos = SIZE_MAX;
    cm->n_slots = vb ? CM_SLOTS : SKV_CM_ORDERS;
    cm->n_in = vb ? CM_INPUTS : SKV_CM_ORDERS + 2;
    cm->limit = vb ? CMV_LIMIT : CM_LIMIT;
    cm->mix_lr = vb ? CMV_MIX_LR : CM_MIX_LR;
    cm->slot_bits = slot_bits;
    cm->V = n_vocab;
    cm->B = 1;
    while (((uint32_t)1 << cm->B) < n_vocab) cm->B++;
    int ok = !tables || (cm->mpos = skv_big_alloc(sizeof(uint32_t) << SKV_CM_MATCH_BITS)) != NULL;
    if (vb && tables) ok &= (cm->apm = skv_big_alloc(CMV_APM_N * sizeof *cm->apm)) != NULL;
    if (vb) ok &= (cm->w2 = malloc(CMV_SETS2 * sizeof *cm->w2)) != NULL;
    if (cm->n_run) {
        ok &= (cm->wx = malloc(cm->wx_n * sizeof *cm->wx)) != NULL;
        if (cm->wx) /* no offsets from a failed allocation (clang UBSan, test_store_faults) */
            cm->wr1 = cm->wx, cm->wr2 = cm->wx + CM_SETS * cm->n_x, cm->w3 = cm->wr2 + CMV_SETS2 * cm->n_x;
        if (tables) ok &= (cm->run = skv_big_alloc(sizeof(uint32_t) * CM_RUN << cm->run_bits)) != NULL;
    }
    if (cm->fmt3) { /* (not tables: derived from the history, never in a snapshot) */
        cm->wd = cm->B < CM_REC_MAX_DEPTH ? cm->B : CM_REC_MAX_DEPTH;
        ok &= (cm->wcnt = malloc((size_t)2 << cm->wd)) != NULL;
        ok &= (cm->wlast = malloc(sizeof(uint32_t) * 2 << cm->wd)) != NULL;
    }
    for (int k = 0; k < cm->n_slots && tables; k++)
        ok &= (cm->slot[k] = skv_big_alloc(sizeof(uint32_t) << cm->slot_bits)) != NULL;
    if (!ok) {
        skv_cm_free(cm);
        return SKV_ERR_NOMEM;
    }
    if (populate) prefault_tables(cm);
    init_tables(cm);
    *out = cm;
    return SKV_OK;
}

static int cm_create(uint32_t n_vocab, const skv_cm_vocab *vb, unsigned rev, unsigned slot_bits, skv_cm **out)
{
    int rc = cm_alloc(n_vocab, vb, rev, slot_bits, 1, 1, out);
    if (rc == SKV_OK) skv_cm_reset(*out);
    return rc;
}

int skv_cm_create(uint32_t n_vocab, skv_cm **out) { return cm_create(n_vocab, NULL, 1, SKV_CM_SLOT_BITS, out); }

static int vocab_args(const skv_cm_vocab *vb, unsigned rev, unsigned slot_bits)
{
    return vb && rev >= 1 && rev <= SKV_CMV_REV && slot_bits >= SKV_CMV_SLOT_BITS_MIN && slot_bits <= SKV_CMV_SLOT_BITS_MAX;
}

int skv_cm_create_vocab(const skv_cm_vocab *vb, unsigned rev, unsigned slot_bits, skv_cm **out)
{
    if (out) *out = NULL;
    if (!vocab_args(vb, rev, slot_bits)) return SKV_ERR_INVALID_ARG;
    return cm_create(vb->V, vb, rev, slot_bits, out);
}

void skv_cm_free(skv_cm *cm)
{
    if (!cm) return;
#if defined(__linux__)
    if (cm->map) {
        munmap(cm->map, cm->map_len);
        cm->apm = NULL, cm->mpos = NULL, cm->run = NULL;
    } else
#endif
        for (int k = 0; k < CM_SLOTS; k++) skv_big_free(cm->slot[k]);
    skv_big_free(cm->run);
    free(cm->wx);
    free(cm->wcnt);
    free(cm->wlast);
    skv_big_free(cm->ovl);
    skv_big_free(cm->apm);
    free(cm->utag);
    free(cm->uold);
    free(cm->usave);
    free(cm->w2);
    skv_big_free(cm->mpos);
    free(cm->jour);
    free(cm);
}

/* Fills n elements of `size` bytes at dst with copies of the first `have` elements (already
 * written): memcpy of what is there, doubling (a few calls instead of one store per slot). */
static void fill_doubling(void *dst, size_t size, size_t have, size_t n)
{
    uint8_t *b = dst;
    while (have < n) {
        size_t k = have < n - have ? have : n - have;
        memcpy(b + have * size, b, k * size);
        have += k;
    }
}

/* The APM's reset values: 33 knots per context, the same for every context. */
static void reset_apm(skv_cm *cm)
{
    if (!cm->apm) return;
    for (size_t j = 0; j < 33; j++) cm->apm[j] = (uint16_t)squash16((int32_t)j * 128 - 2048);
    fill_doubling(cm->apm, sizeof *cm->apm, 33, CMV_APM_N);
}

void skv_cm_blank_apm(skv_cm *cm)
{
    if (cm->apm) prefault(cm->apm, CMV_APM_N * sizeof *cm->apm); /* 4 KiB pages, one call */
    reset_apm(cm);
}

/* Everything skv_cm_reset sets but the large tables (slot tables, mpos). */
static void reset_small(skv_cm *cm)
{
    cm->jn = 0, cm->jover = 0, cm->jsrc = NULL; /* every table changes: the next copy is whole */
    cm->uon = 0;
    cm->wpos = SIZE_MAX;
    for (size_t c = 0; c < cm->n_msm; c++) cm->msm[c] = CM_SLOT_INIT;
    cm->w[0][0] = CM_W_INIT;
    fill_doubling(cm->w, sizeof cm->w[0][0], 1, (size_t)CM_SETS * CM_INPUTS);
    cm->n_coded = 0;
    cm->mlen = cm->mptr = 0;
    cm->mtok = -1;
    cm->text4 = cm->frag = 0;
    if (cm->w2) {
        cm->w2[0][0] = CM_W_INIT;
        fill_doubling(cm->w2, sizeof cm->w2[0][0], 1, CMV_SETS2 * CM_INPUTS);
    }
    if (cm->wx) {
        cm->wx[0] = CM_W_INIT;
        fill_doubling(cm->wx, sizeof *cm->wx, 1, cm->wx_n);
        for (int k = 0; k < CMV_FSETS; k++) cm->wf[k][0] = cm->wf[k][1] = cm->wf[k][2] = CMV_FIN_INIT;
    }
    reset_apm(cm);
}

void skv_cm_reset(skv_cm *cm)
{
    size_t n_slot = (size_t)1 << cm->slot_bits;
    if (cm->map) { /* its tables are the file's: it cannot go back (cm.h) */
        if (cm->ovl_on) memset(cm->ovl, 0, sizeof *cm->ovl << cm->ovl_bits);
        cm->dead = 1, cm->uon = cm->ovl_on = 0;
        return;
    }
    for (int k = 0; k < cm->n_slots; k++) {
        uint32_t *s = cm->slot[k];
        s[0] = CM_SLOT_INIT;
        fill_doubling(s, sizeof *s, 1, n_slot);
    }
    memset(cm->mpos, 0, sizeof(uint32_t) << SKV_CM_MATCH_BITS);
    if (cm->run) memset(cm->run, 0, sizeof(uint32_t) * CM_RUN << cm->run_bits);
    reset_small(cm);
    cm->fresh = 1;
    cm->ufresh = 0; /* not through the undo log */
}

static int create_blank(const skv_cm_vocab *vb, unsigned rev, unsigned slot_bits, int tables, skv_cm **out)
{
    if (out) *out = NULL;
    if (!vocab_args(vb, rev, slot_bits)) return SKV_ERR_INVALID_ARG;
    int rc = cm_alloc(vb->V, vb, rev, slot_bits, 0, tables, out); /* its reader faults the tables in (skv_cm_prefault) */
    if (rc) return rc;
    skv_cm *cm = *out;
    uint16_t *apm = cm->apm;
    cm->apm = NULL; /* reset_small leaves it: a version 2 snapshot writes it whole (two threads
                     * faulting it in as they copy), a version 1 reader asks skv_cm_blank_apm */
    reset_small(cm);
    cm->apm = apm;
    cm->fresh = 2;
    return SKV_OK;
}

int skv_cm_create_blank(const skv_cm_vocab *vb, unsigned rev, unsigned slot_bits, skv_cm **out)
{
    return create_blank(vb, rev, slot_bits, 1, out);
}

int skv_cm_create_blank_mapped(const skv_cm_vocab *vb, unsigned rev, unsigned slot_bits, skv_cm **out)
{
    return create_blank(vb, rev, slot_bits, 0, out);
}

/* 1 if the table of `bytes` bytes at offset off of a mapping of len bytes lies inside it,
 * aligned for its elements of `size` bytes. */
static int map_fits(size_t len, size_t off, size_t bytes, size_t size)
{
    return off % size == 0 && off <= len && bytes <= len - off;
}

int skv_cm_map_tables(skv_cm *cm, void *map, size_t len, const size_t off[SKV_CM_MAX_SECTIONS])
{
    skv_cm_section sec[SKV_CM_MAX_SECTIONS];
    if (!cm || !map || !off || cm->map || cm->mpos || cm->run || !cm->vb) return SKV_ERR_INVALID_ARG; /* a blank mapped model */
    int ns = skv_cm_section_shapes(cm, sec), ok = 1;
    for (int k = 0; k < ns; k++) ok &= map_fits(len, off[k], sec[k].n * sec[k].size, sec[k].size);
    if (!ok) return SKV_ERR_INVALID_ARG;
    uint8_t *b = map; /* sections in skv_cm_section_shapes' order: slots, mpos, (run), msm, w, w2, ..., APM */
    for (int k = 0; k < cm->n_slots; k++) cm->slot[k] = (uint32_t *)(void *)(b + off[k]);
    cm->mpos = (uint32_t *)(void *)(b + off[cm->n_slots]);
    if (cm->n_run) cm->run = (uint32_t *)(void *)(b + off[cm->n_slots + 1]);
    cm->apm = (uint16_t *)(void *)(b + off[ns - 1]);
    cm->map = map, cm->map_len = len;
    cm->wpos = SIZE_MAX;
    cm->fresh = cm->ufresh = 0;
    return SKV_OK;
}

int skv_cm_mapped(const skv_cm *cm) { return cm && cm->map; }

/* The reset value of every element of a section of this kind (the APM's: a pattern). */
static uint32_t reset_value(unsigned kind)
{
    switch (kind) {
    case SKV_CM_SEC_SLOT: return CM_SLOT_INIT;
    case SKV_CM_SEC_WEIGHT: return (uint32_t)CM_W_INIT;
    case SKV_CM_SEC_FINAL: return (uint32_t)CMV_FIN_INIT;
    default: return 0; /* SKV_CM_SEC_POS, SKV_CM_SEC_RUN */
    }
}

size_t skv_cm_reset_pattern(unsigned kind, uint32_t pat[33])
{
    if (kind == SKV_CM_SEC_ANY) { /* the APM: 33 knots per context, as reset_small writes them */
        for (size_t j = 0; j < 33; j++) pat[j] = (uint16_t)squash16((int32_t)j * 128 - 2048);
        return 33;
    }
    pat[0] = reset_value(kind);
    return 1;
}

void skv_cm_fill_reset(skv_cm *cm, const skv_cm_section *s, size_t at, size_t n)
{
    (void)cm; /* the reset values depend on the section's kind only */
    uint32_t v = reset_value(s->kind);
    if (s->kind == SKV_CM_SEC_ANY || !n) return; /* the APM: reset_small wrote it */
    uint32_t *d = (uint32_t *)s->p + at;
    if (n <= 64) { /* most gaps between a primed model's runs are a few elements: no calls */
        for (size_t k = 0; k < n; k++) d[k] = v;
        return;
    }
    if (!v) {
        memset(d, 0, n * sizeof *d);
        return;
    }
    d[0] = v;
    fill_doubling(d, sizeof *d, 1, n < 1024 ? n : 1024); /* a 4 KiB pattern, then copies of it */
    for (size_t k = 1024; k < n; k += 1024) memcpy(d + k, d, (n - k < 1024 ? n - k : 1024) * sizeof *d);
}

size_t skv_cm_bound(uint64_t n, uint32_t n_vocab)
{
    unsigned b = 1;
    while (b < 32 && ((uint64_t)1 << b) < n_vocab) b++;
    if (n > UINT64_MAX / b) return SIZE_MAX;
    /* a coded bit costs at most -log2(22 / 65536) < 12 bits */
    return skv_rangecoder_bound(n * b, 12);
}

/* ---- a mapped model's overlay ------------------------------------------------------ */

/* Element x of table t (numbered as the journal's) as the tables hold it. */
static inline uint32_t tbl_get(const skv_cm *cm, uint32_t t, uint32_t x)
{
    return t < CM_SLOTS ? cm->slot[t][x] : t == CM_JOUR_MPOS ? cm->mpos[x] : t == CM_JOUR_RUN ? cm->run[x] : cm->apm[x];
}

/* The overlay cell where the probe for element x of table t starts: the same for x and
 * x ^ 1 (a rev 3 bucket, an APM knot pair), so that both are found in one cache line or
 * two instead of two random ones. */
static inline uint32_t ovl_home(const skv_cm *cm, uint32_t t, uint32_t x)
{
    return ((t << 24 | x >> 1) * 0x9E3779B1u) >> (32 - cm->ovl_bits);
}

/* Element x of table t as the overlay holds it: its cell, found or taken (and given the
 * table's value). The overlay is at most half full (skv_cm_undo_begin), so a probe ends. */
static inline uint32_t *ovl_cell(skv_cm *cm, uint32_t t, uint32_t x)
{
    uint32_t key = (t << 24 | x) + 1, mask = ((uint32_t)1 << cm->ovl_bits) - 1;
    for (uint32_t h = ovl_home(cm, t, x);; h = (h + 1) & mask) {
        struct cm_cell *c = &cm->ovl[h];
        if (c->key == key) return &c->val;
        if (!c->key) {
            c->key = key, c->val = tbl_get(cm, t, x);
            return &c->val;
        }
    }
}

/* The same without taking a cell (an element only read). */
static inline uint32_t ovl_get(const skv_cm *cm, uint32_t t, uint32_t x)
{
    uint32_t key = (t << 24 | x) + 1, mask = ((uint32_t)1 << cm->ovl_bits) - 1;
    for (uint32_t h = ovl_home(cm, t, x);; h = (h + 1) & mask) {
        const struct cm_cell *c = &cm->ovl[h];
        if (c->key == key) return c->val;
        if (!c->key) return tbl_get(cm, t, x);
    }
}

/* Rev 3's bucket (x0, x0 | 1) of slot table t in the overlay, in one probe (the two share
 * their home cell): the cell of each entry (NULL: none yet) and the first empty cell of the
 * probe, where either would be taken. */
static inline struct cm_cell *ovl_pair(skv_cm *cm, uint32_t t, uint32_t x0, struct cm_cell **c0, struct cm_cell **c1)
{
    uint32_t k0 = (t << 24 | x0) + 1, mask = ((uint32_t)1 << cm->ovl_bits) - 1;
    *c0 = *c1 = NULL;
    for (uint32_t h = ovl_home(cm, t, x0);; h = (h + 1) & mask) {
        struct cm_cell *c = &cm->ovl[h];
        if (!c->key) return c;
        if (c->key == k0) *c0 = c;
        else if (c->key == k0 + 1) *c1 = c;
    }
}

/* The journal half of jour_add (skv_cm_journal models: cmvd's primed copies). */
static void jour_note(skv_cm *cm, uint32_t t, uint32_t index)
{
    if (cm->jn < CM_JOUR_CAP) cm->jour[cm->jn++] = t << 24 | index;
    else cm->jover = 1;
}

/* Records that element `index` of table `t` is about to be written (journaling models).
 * Called for every table write (5-8 per coded bit), so it is forced inline (-O1 builds
 * such as make fuzz made it a call per write: 7% of fuzz_cm's time): a model with neither
 * an undo log nor a journal pays two branches, an undo log two stores. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void jour_add(skv_cm *cm, uint32_t t, uint32_t index)
{
    if (cm->uon && !cm->ovl_on) { /* the bound of skv_cm_undo_begin keeps un < ucap; an overlay is dropped instead */
        cm->utag[cm->un] = t << 24 | index;
        cm->uold[cm->un++] = tbl_get(cm, t, index);
    }
    if (cm->jour) jour_note(cm, t, index);
}

/* ---- per token: context hashes and the match ------------------------------------ */

/* Length of the common run of ids ending before p and before i (p < i), at most
 * CM_MATCH_VERIFY. */
static uint32_t match_length(const int32_t *tok, size_t p, size_t i)
{
    uint32_t len = 0;
    while (len < CM_MATCH_VERIFY && len < p && tok[p - 1 - len] == tok[i - 1 - len]) len++;
    return len;
}

/* Follows the match if it predicted tok[i-1], else looks for a new one; then records i as
 * the position after the last 3 ids. */
static void match_update(skv_cm *cm, const int32_t *tok, size_t i)
{
    uint32_t h = (cm->hash[SKV_CM_MATCH_MIN] * 0x9E3779B1u) >> (32 - SKV_CM_MATCH_BITS);
    if (cm->mlen > 0 && cm->mtok == tok[i - 1]) {
        cm->mptr++;
        cm->mlen += cm->mlen < 65535;
    } else {
        cm->mlen = 0;
    }
    uint32_t *mp = cm->ovl_on ? ovl_cell(cm, CM_JOUR_MPOS, h) : &cm->mpos[h];
    /* p < i always holds in a model's own state; checked anyway: a mapped file changed
     * under the model may hold anything, and the match reads tok[p] */
    if (cm->mlen == 0 && i >= SKV_CM_MATCH_MIN && *mp && *mp < i) {
        uint32_t p = *mp, len = match_length(tok, p, i);
        if (len >= SKV_CM_MATCH_MIN) cm->mptr = p, cm->mlen = len;
    }
    if (i >= SKV_CM_MATCH_MIN) jour_add(cm, CM_JOUR_MPOS, h), *mp = (uint32_t)i;
    cm->mtok = cm->mlen > 0 ? tok[cm->mptr] : -1;
}

static inline uint32_t mix32(uint32_t v, uint32_t salt)
{
    uint32_t h = (v ^ salt) * 0x2C9277B5u;
    return h ^ (h >> 15);
}

/* Codec cmv: the text before id i (the bytes that ended tok[i-1], its word fragment). */
static void text_contexts(skv_cm *cm, const int32_t *tok, size_t i)
{
    const skv_cm_vocab *vb = cm->vb;
    if (i > 0) {
        uint32_t prev = (uint32_t)tok[i - 1], n = vb->nlast[prev];
        cm->text4 = n >= 4 ? vb->last4[prev] : n ? cm->text4 << (8 * n) | vb->last4[prev] : cm->text4;
        cm->frag = vb->boundary[prev] ? vb->frag[prev] : (cm->frag ^ vb->frag[prev]) * 0x01000193u;
    }
    cm->hash[SKV_CM_ORDERS] = mix32(cm->text4 & 0xFFu, 0x1B873593u);
    cm->hash[SKV_CM_ORDERS + 1] = mix32(cm->text4 & 0xFFFFFFu, 0xCC9E2D51u);
    cm->hash[SKV_CM_ORDERS + 2] = mix32(cm->frag, 0xE6546B64u);
}

/* Rev 2: each run model's prediction for the next id, the coded value that last followed
 * its context (orders 1..4), and how many times in a row it did. Any element is safe to
 * use (a mapped file changed under the model may hold anything): a value outside the
 * vocabulary predicts nothing. */
static void run_lookup(skv_cm *cm)
{
    for (int r = 0; r < CM_RUN; r++) {
        uint32_t x = (uint32_t)r << cm->run_bits | ((cm->hash[r + 1] ^ CM_RUN_SALT) * 0x9E3779B1u) >> (32 - cm->run_bits);
        uint32_t e = cm->ovl_on ? ovl_get(cm, CM_JOUR_RUN, x) : cm->run[x], v = e & 0xFFFFFFu;
        cm->ridx[r] = x;
        cm->rpred[r] = v >= 1 && v <= cm->V ? (int32_t)v - 1 : -1;
        cm->rcnt[r] = cm->rpred[r] >= 0 ? (e >> 24) & CM_RUN_COUNT_MAX : 0;
    }
}

/* Rev 2, after id i is coded (its coded value v): each run model's context now predicts v,
 * one more time in a row if it already did. */
static void run_learn(skv_cm *cm, uint32_t v)
{
    for (int r = 0; r < CM_RUN; r++) {
        uint32_t c = cm->rpred[r] == (int32_t)v ? cm->rcnt[r] + (cm->rcnt[r] < CM_RUN_COUNT_MAX) : 1;
        uint32_t e = (v + 1) | c << 24;
        if (cm->ovl_on) {
            *ovl_cell(cm, CM_JOUR_RUN, cm->ridx[r]) = e;
        } else {
            jour_add(cm, CM_JOUR_RUN, cm->ridx[r]);
            cm->run[cm->ridx[r]] = e;
        }
    }
}

/* Rev 3: the recency state of the tree nodes above coded value v (depths 1..wd). */
static void rec_count(skv_cm *cm, uint32_t v, int add)
{
    for (unsigned d = 1; d <= cm->wd; d++) cm->wcnt[(v >> (cm->B - d)) + (1u << d)] += add ? 1 : 0xFF; /* (mod 256) */
}

static void rec_last(skv_cm *cm, uint32_t v, uint32_t pos1)
{
    for (unsigned d = 1; d <= cm->wd; d++) cm->wlast[(v >> (cm->B - d)) + (1u << d)] = pos1;
}

/* Rev 3: the recency state for position i: one step from i - 1, else rebuilt from the ids
 * tok[i - CM_AGE_W .. i) (an id outside the vocabulary, which no coded history holds, is
 * skipped both ways). */
static void recency_update(skv_cm *cm, const int32_t *tok, size_t i)
{
    const uint32_t *code = cm->vb->code;
    if (i > 0 && cm->wpos + 1 == i) {
        int32_t t = tok[i - 1];
        if (t >= 0 && (uint32_t)t < cm->V) rec_count(cm, code[t], 1), rec_last(cm, code[t], (uint32_t)i);
        if (i - 1 >= CM_REC_W && (t = tok[i - 1 - CM_REC_W]) >= 0 && (uint32_t)t < cm->V) rec_count(cm, code[t], 0);
    } else if (cm->wpos != i) {
        memset(cm->wcnt, 0, (size_t)2 << cm->wd);
        memset(cm->wlast, 0, sizeof(uint32_t) * 2 << cm->wd);
        for (size_t j = i > CM_AGE_W ? i - CM_AGE_W : 0; j < i; j++) {
            int32_t t = tok[j];
            if (t < 0 || (uint32_t)t >= cm->V) continue;
            rec_last(cm, code[t], (uint32_t)j + 1);
            if (i - j <= CM_REC_W) rec_count(cm, code[t], 1);
        }
    }
    cm->wpos = i;
}

/* Rev 3: the recency and age inputs of the bit at node (depth d), from its children's
 * state: how many of the last CM_REC_W ids lie below each (when any does), and how long ago
 * the last id below each came (half-octave classes, 0: not within CM_AGE_W); each class
 * pair indexes a learned reliability (recm, agem; by depth class). */
static void recency_inputs(skv_cm *cm, uint32_t node, unsigned d)
{
    static const uint8_t q8[17] = {0, 1, 2, 3, 4, 4, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7};
    int32_t *sr = cm->st + CM_INPUTS + CM_RUN;
    cm->recx = cm->agex = -1;
    sr[0] = sr[1] = 0;
    if (d >= cm->wd) return; /* children deeper than the state */
    uint32_t c0 = cm->wcnt[2 * node], c1 = cm->wcnt[2 * node + 1];
    if (c0 + c1) {
        int dc = d < 3 ? 0 : d < 8 ? 1 : d < 12 ? 2 : 3;
        cm->recx = (dc * 8 + q8[c0 < 16 ? c0 : 16]) * 8 + q8[c1 < 16 ? c1 : 16];
        sr[0] = cm->stretch[cm->recm[cm->recx] >> 20];
    }
    uint32_t now = (uint32_t)cm->n_coded + 1, q[2];
    for (int b = 0; b < 2; b++) {
        uint32_t l = cm->wlast[2 * node + (uint32_t)b], a = l && now - l <= CM_AGE_W ? now - l : 0;
        unsigned e = a ? 31u - (unsigned)__builtin_clz(a) : 0;
        q[b] = a ? 1 + 2 * e + (e ? (a >> (e - 1)) & 1 : 0) : 0; /* a <= 1024: q <= 21 */
    }
    cm->agex = (int)(((d < 7 ? d : 7) * CM_AGE_Q + q[0]) * CM_AGE_Q + q[1]);
    sr[1] = cm->stretch[cm->agem[cm->agex] >> 20];
}

static void begin_token(skv_cm *cm, const int32_t *tok, size_t i)
{
    uint32_t h = 0;
    cm->fresh = 0;
    cm->hash[0] = 0x9E3779B9u;
    for (size_t k = 1; k < SKV_CM_ORDERS; k++) {
        uint32_t v = i >= k ? (uint32_t)tok[i - k] + 1 : 0;
        h = (h ^ v) * 0x2C9277B5u;
        h ^= h >> 15;
        cm->hash[k] = h + (uint32_t)k * 0x632BE5ABu;
    }
    if (i > 0) match_update(cm, tok, i);
    if (cm->vb) text_contexts(cm, tok, i);
    if (cm->n_run) run_lookup(cm);
    if (cm->fmt3) recency_update(cm, tok, i);
}

/* ---- per bit: predict, learn ----------------------------------------------------- */


/* cmv: p = (p + 3 apm(context, stretch(p))) / 4, the APM interpolated between two knots
 * 128 apart in the logistic domain; its context: rev 1, the order-1 context and the node;
 * rev 2, the node and what the match and the run models of orders 1 and 2 expect. */
static void apm_refine(skv_cm *cm, uint32_t node)
{
    uint32_t c = cm->n_run ? node * 0x2C9277B5u + (uint32_t)(cm->rctx[1] + 1) * 0x85EBCA6Bu +
                                 (uint32_t)(cm->rctx[0] + 1) * 0x1B873593u + (uint32_t)(cm->mctx + 1)
                           : cm->hash[1] + node;
    c = (c * 0x9E3779B1u) >> (32 - CMV_APM_BITS);
    uint32_t u = (uint32_t)(cm->stretch[cm->p >> 4] + 2048), j = u >> 7;
    cm->apm_at = c * 33 + j;
    cm->apm_f = u & 127;
    uint32_t a0 = cm->ovl_on ? ovl_get(cm, CM_JOUR_APM, cm->apm_at) : cm->apm[cm->apm_at];
    uint32_t a1 = cm->ovl_on ? ovl_get(cm, CM_JOUR_APM, cm->apm_at + 1) : cm->apm[cm->apm_at + 1];
    uint32_t pa = (a0 * (128 - cm->apm_f) + a1 * cm->apm_f) >> 7;
    cm->p_mix = cm->p;
    uint32_t p = (cm->p + 3 * pa) >> 2;
    cm->p = p < 22 ? 22 : p > 65514 ? 65514 : p;
}

static void apm_learn(skv_cm *cm, uint32_t bit)
{
    uint32_t x = cm->apm_at + (cm->apm_f >= 64);
    int32_t target = bit ? 65535 : 0;
    if (cm->ovl_on) { /* a cell holds the knot as a u32 (< 2^16 all the same) */
        uint32_t *c = ovl_cell(cm, CM_JOUR_APM, x);
        *c = (uint16_t)(*c + asr(target - (int32_t)*c, CMV_APM_RATE));
        return;
    }
    jour_add(cm, CM_JOUR_APM, x);
    uint16_t *a = &cm->apm[x];
    *a = (uint16_t)(*a + asr(target - *a, CMV_APM_RATE));
}

/* Sum of n weights times inputs (exact in 64 bits: |w| <= 2^22, |st| < 2^11, n <= 15). */
static inline int64_t dot_n(const int32_t *w, const int32_t *st, int n)
{
    int64_t dot = 0;
    for (int j = 0; j < n; j++) dot += (int64_t)w[j] * st[j];
    return dot;
}

/* Rev 3: the slots of the bit at node. Order 0 is direct; every other table holds a
 * context's slot in a bucket of two (x & ~1, x | 1) tagged by an 8-bit check of the
 * context and node: the entry with this check, else the one with the lower count (the
 * first of equals) is taken and read as a reset slot with this check (learn overwrites it). */
static void lookup3(skv_cm *cm, uint32_t node)
{
    for (int k = 0; k < cm->n_slots; k++) {
        uint32_t h = cm->hash[k] + node, x = (h * 0x9E3779B1u) >> (32 - cm->slot_bits), s;
        if (k == 0) {
            cm->sp[0] = cm->ovl_on ? ovl_cell(cm, 0, x) : &cm->slot[0][x];
            cm->idx[0] = x;
            cm->sv[0] = *cm->sp[0];
            continue;
        }
        uint32_t c = ((h * 0x2C9277B5u) >> 24) << 6, x0 = x & ~1u, a, b;
        struct cm_cell *c0 = NULL, *c1 = NULL, *e = NULL;
        if (cm->ovl_on) {
            e = ovl_pair(cm, (uint32_t)k, x0, &c0, &c1);
            a = c0 ? c0->val : cm->slot[k][x0];
            b = c1 ? c1->val : cm->slot[k][x0 | 1];
        } else {
            a = cm->slot[k][x0], b = cm->slot[k][x0 | 1];
        }
        if ((a & CM3_CHK_MASK) == c) {
            x = x0, s = a;
        } else if ((b & CM3_CHK_MASK) == c) {
            x = x0 | 1, s = b;
        } else {
            x = (b & CM3_COUNT_MASK) < (a & CM3_COUNT_MASK) ? x0 | 1 : x0;
            s = CM_SLOT_INIT | c;
        }
        cm->idx[k] = x;
        cm->sv[k] = s;
        if (cm->ovl_on) {
            struct cm_cell *cell = x == x0 ? c0 : c1;
            if (!cell) { /* taken: the element's value as the table holds it */
                cell = e;
                cell->key = ((uint32_t)k << 24 | x) + 1;
                cell->val = x == x0 ? a : b;
            }
            cm->sp[k] = &cell->val;
        } else {
            cm->sp[k] = &cm->slot[k][x];
        }
    }
}

/* An order-1 slot's count in 4 classes: unseen, 1-2, 3-6, more. */
static inline int count_class(uint32_t n)
{
    return n == 0 ? 0 : n <= 2 ? 1 : n <= 6 ? 2 : 3;
}

/* Rev 2 (docs/coder.md 4.9), with st[0 .. CM_INPUTS) and set filled: the run models'
 * inputs, the three mixers and the final one, then the APM. */
static void predict_rev2(skv_cm *cm, uint32_t node, unsigned d)
{
    int32_t *sr = cm->st + CM_INPUTS;
    int runs = 0;
    for (int r = 0; r < CM_RUN; r++) {
        cm->rctx[r] = -1;
        sr[r] = 0;
        if (cm->rpred[r] >= 0 && ((uint32_t)cm->rpred[r] >> (cm->B - d)) + (1u << d) == node) {
            uint32_t bit = ((uint32_t)cm->rpred[r] >> (cm->B - 1 - d)) & 1, c = cm->rcnt[r];
            cm->rctx[r] = r * CM_RUN_CTX + (int)((c < 31 ? c : 31) * 2 + bit);
            sr[r] = cm->stretch[cm->rsm[cm->rctx[r]] >> 20];
            runs |= 1 << r;
        }
    }
    if (cm->fmt3) recency_inputs(cm, node, d);
    uint32_t n1 = (cm->fmt3 ? cm->sv[1] : *cm->sp[1]) & cm->cmask, nx = (uint32_t)cm->n_x;
    cm->set2 = (int)d * 256 + (int)(cm->text4 & 0xFF);
    cm->set3 = (int)d * 64 + runs * 4 + count_class(n1);
    cm->fset = (int)d * 4 + (cm->mctx >= 0) * 2 + (n1 != 0);
    int64_t dot1 = dot_n(cm->w[cm->set], cm->st, CM_INPUTS) + dot_n(cm->wr1 + cm->set * nx, sr, cm->n_x);
    int64_t dot2 = dot_n(cm->w2[cm->set2], cm->st, CM_INPUTS) + dot_n(cm->wr2 + cm->set2 * nx, sr, cm->n_x);
    int64_t dot3 = dot_n(cm->w3 + (size_t)cm->set3 * (size_t)cm->wide, cm->st, cm->wide);
    cm->dot1 = clamp32(asr(dot1, 16), -2047, 2047);
    cm->dot2 = clamp32(asr(dot2, 16), -2047, 2047);
    cm->dot3 = clamp32(asr(dot3, 16), -2047, 2047);
    const int32_t *f = cm->wf[cm->fset];
    cm->p = squash16(clamp32(asr((int64_t)f[0] * cm->dot1 + (int64_t)f[1] * cm->dot2 + (int64_t)f[2] * cm->dot3, 16),
                             -2047, 2047));
    apm_refine(cm, node);
}

/* Fills st[], set and p for the bit at node (depth d). */
static void predict(skv_cm *cm, uint32_t node, unsigned d)
{
    int64_t dot = 0;
    int seen = 0;
    int ms = cm->n_slots;
    if (cm->fmt3) {
        lookup3(cm, node);
    } else if (cm->ovl_on)
        for (int k = 0; k < ms; k++)
            cm->sp[k] = ovl_cell(cm, k, cm->idx[k] = ((cm->hash[k] + node) * 0x9E3779B1u) >> (32 - cm->slot_bits));
    else
        for (int k = 0; k < ms; k++)
            cm->sp[k] = &cm->slot[k][cm->idx[k] = ((cm->hash[k] + node) * 0x9E3779B1u) >> (32 - cm->slot_bits)];
    for (int k = 0; k < ms; k++) {
        uint32_t s = cm->fmt3 ? cm->sv[k] : *cm->sp[k];
        cm->st[k] = cm->stretch[s >> 20];
        if (k > 0 && k < SKV_CM_ORDERS && (s & cm->cmask)) seen = k;
    }
    cm->mctx = -1;
    cm->st[ms] = 0;
    if (cm->mlen > 0 && ((uint32_t)cm->mtok >> (cm->B - d)) + (1u << d) == node) {
        uint32_t bit = ((uint32_t)cm->mtok >> (cm->B - 1 - d)) & 1;
        cm->mctx = (int)((cm->mlen < 15 ? cm->mlen : 15) * 2 + bit);
        cm->st[ms] = cm->stretch[cm->msm[cm->mctx] >> 20];
    }
    cm->st[ms + 1] = 256;
    if (cm->vb) cm->st[ms + 2] = cm->stretch[cm->vb->prior[node]];
    cm->set = ((int)d * SKV_CM_ORDERS + seen) * 2 + (cm->mctx >= 0);
    if (cm->n_run) {
        predict_rev2(cm, node, d);
        return;
    }
    for (int j = 0; j < cm->n_in; j++) dot += (int64_t)cm->w[cm->set][j] * cm->st[j];
    cm->dot1 = (int32_t)clamp32(asr(dot, 16), -2047, 2047);
    if (cm->w2) {
        int64_t dot2 = 0;
        cm->set2 = (int)d * 256 + (int)(cm->text4 & 0xFF);
        for (int j = 0; j < cm->n_in; j++) dot2 += (int64_t)cm->w2[cm->set2][j] * cm->st[j];
        cm->dot2 = (int32_t)clamp32(asr(dot2, 16), -2047, 2047);
        cm->p = squash16(asr((int64_t)cm->dot1 + cm->dot2, 1));
    } else {
        cm->p = squash16(cm->dot1);
    }
    if (cm->apm) apm_refine(cm, node);
}

/* A slot moves toward the bit by 1/(count + 1.5) of the distance; the count saturates. */
static inline uint32_t slot_next3(const skv_cm *cm, uint32_t s, uint32_t bit)
{
    uint32_t n = s & CM3_COUNT_MASK;
    n = n < cm->limit ? n : cm->limit; /* (as below) */
    int64_t p = s >> 14, target = bit ? ((int64_t)1 << 18) - 1 : 0;
    p += asr((target - p) * cm->rate[n], 16);
    return ((uint32_t)p << 14) | (s & CM3_CHK_MASK) | (n < cm->limit ? n + 1 : n);
}

static inline void slot_update(const skv_cm *cm, uint32_t *s, uint32_t bit)
{
    if (cm->fmt3) {
        *s = slot_next3(cm, *s, bit);
        return;
    }
    uint32_t n = *s & 1023;
    n = n < cm->limit ? n : cm->limit; /* a no-op on a model's own state (counts <= limit); a
                                        * mapped file changed under it may hold any count */
    int64_t p = *s >> 10, target = bit ? ((int64_t)1 << 22) - 1 : 0;
    p += asr((target - p) * cm->rate[n], 16);
    *s = ((uint32_t)p << 10) | (n < cm->limit ? n + 1 : n);
}

static void mixer_learn_n(const skv_cm *cm, int32_t *w, const int32_t *st, int n, int64_t err)
{
    for (int j = 0; j < n; j++) w[j] = clamp32(w[j] + asr(err * st[j] * cm->mix_lr, 18), -CM_W_MAX, CM_W_MAX);
}

static void mixer_learn(const skv_cm *cm, int32_t *w, int64_t err) { mixer_learn_n(cm, w, cm->st, cm->n_in, err); }

/* Rev 2: the runs' weights in the first two mixers, the third mixer, the final mixer (toward
 * the bit from the p it gave, before the APM), the runs' reliabilities. */
static void learn_rev2(skv_cm *cm, uint32_t bit, int64_t err1, int64_t err2)
{
    const int32_t *sr = cm->st + CM_INPUTS;
    int nx = cm->n_x;
    mixer_learn_n(cm, cm->wr1 + cm->set * nx, sr, nx, err1);
    mixer_learn_n(cm, cm->wr2 + cm->set2 * nx, sr, nx, err2);
    mixer_learn_n(cm, cm->w3 + (size_t)cm->set3 * (size_t)cm->wide, cm->st, cm->wide, ((int64_t)bit << 16) - squash16(cm->dot3));
    int64_t e = ((int64_t)bit << 16) - cm->p_mix;
    int32_t *f = cm->wf[cm->fset];
    f[0] = clamp32(f[0] + asr(e * cm->dot1 * CMV_FIN_LR, 18), -CM_W_MAX, CM_W_MAX);
    f[1] = clamp32(f[1] + asr(e * cm->dot2 * CMV_FIN_LR, 18), -CM_W_MAX, CM_W_MAX);
    f[2] = clamp32(f[2] + asr(e * cm->dot3 * CMV_FIN_LR, 18), -CM_W_MAX, CM_W_MAX);
    for (int r = 0; r < CM_RUN; r++)
        if (cm->rctx[r] >= 0) slot_update(cm, &cm->rsm[cm->rctx[r]], bit);
    if (cm->fmt3 && cm->recx >= 0) slot_update(cm, &cm->recm[cm->recx], bit);
    if (cm->fmt3 && cm->agex >= 0) slot_update(cm, &cm->agem[cm->agex], bit);
}

static void learn(skv_cm *cm, uint32_t bit)
{
    if (cm->apm) apm_learn(cm, bit);
    int64_t err = ((int64_t)bit << 16) - (cm->w2 ? squash16(cm->dot1) : cm->p); /* in (-2^16, 2^16) */
    int64_t err2 = cm->w2 ? ((int64_t)bit << 16) - squash16(cm->dot2) : 0;
    mixer_learn(cm, cm->w[cm->set], err);
    if (cm->w2) mixer_learn(cm, cm->w2[cm->set2], err2);
    if (cm->n_run) learn_rev2(cm, bit, err, err2);
    for (int k = 0; k < cm->n_slots && !cm->ovl_on; k++) jour_add(cm, (uint32_t)k, cm->idx[k]); /* the overlay is dropped instead */
    if (cm->fmt3)
        for (int k = 0; k < cm->n_slots; k++) *cm->sp[k] = slot_next3(cm, cm->sv[k], bit);
    else
        for (int k = 0; k < cm->n_slots; k++) slot_update(cm, cm->sp[k], bit);
    if (cm->mctx >= 0) slot_update(cm, &cm->msm[cm->mctx], bit);
}

/* Codes (e) or decodes (d) one bit under cm->p; neither: only learns (priming). */
static int code_bit(skv_cm *cm, skv_rangecoder_enc *e, skv_rangecoder_dec *d, uint32_t *bit)
{
    uint32_t p0 = 65536 - cm->p, target = 0;
    int rc;
    if (!e && !d) return SKV_OK;
    if (e) return *bit ? skv_rangecoder_enc_put_pow2(e, p0, cm->p, 16) : skv_rangecoder_enc_put_pow2(e, 0, p0, 16);
    if ((rc = skv_rangecoder_dec_get_freq_pow2(d, 16, &target))) return rc;
    *bit = target >= p0;
    return *bit ? skv_rangecoder_dec_update(d, p0, cm->p) : skv_rangecoder_dec_update(d, 0, p0);
}

/* The B bits of *val, most significant first (encoder: e; decoder: d fills *val;
 * neither: the model learns *val). */
static int code_id(skv_cm *cm, skv_rangecoder_enc *e, skv_rangecoder_dec *d, uint32_t *val)
{
    uint32_t node = 1, prefix = 0;
    int rc;
    for (unsigned depth = 0; depth < cm->B; depth++) {
        unsigned below = cm->B - 1 - depth;
        uint32_t bit = d ? 0 : (*val >> below) & 1;
        if ((((uint64_t)prefix << 1 | 1) << below) < cm->V) { /* else the bit is 0: not coded */
            predict(cm, node, depth);
            if ((rc = code_bit(cm, e, d, &bit))) return rc;
            learn(cm, bit);
        }
        node = node << 1 | bit;
        prefix = prefix << 1 | bit;
    }
    *val = prefix;
    if (cm->n_run) run_learn(cm, prefix);
    return SKV_OK;
}

/* 1 if cm may code: a mapped model only under its undo log (its tables are read-only). */
static int writable(const skv_cm *cm) { return !cm->dead && (!cm->map || cm->uon); }

int skv_cm_encode(skv_cm *cm, skv_rangecoder_enc *e, const int32_t *tok, size_t i)
{
    if (!cm || !writable(cm) || !e || !tok || i != cm->n_coded || i >= UINT32_MAX || (cm->uon && i - cm->ubase >= cm->umax) ||
        tok[i] < 0 || (uint32_t)tok[i] >= cm->V)
        return SKV_ERR_INVALID_ARG;
    uint32_t v = cm->vb ? cm->vb->code[tok[i]] : (uint32_t)tok[i];
    begin_token(cm, tok, i);
    int rc = code_id(cm, e, NULL, &v);
    if (rc == SKV_OK) cm->n_coded++;
    return rc;
}

int skv_cm_decode(skv_cm *cm, skv_rangecoder_dec *d, int32_t *tok, size_t i)
{
    if (!cm || !writable(cm) || !d || !tok || i != cm->n_coded || i >= UINT32_MAX ||
        (cm->uon && i - cm->ubase >= cm->umax))
        return SKV_ERR_INVALID_ARG;
    uint32_t v = 0;
    begin_token(cm, tok, i);
    int rc = code_id(cm, NULL, d, &v);
    if (rc != SKV_OK) return rc;
    tok[i] = (int32_t)(cm->vb ? cm->vb->id[v] : v);
    cm->n_coded++;
    return SKV_OK;
}

int skv_cm_prime(skv_cm *cm, const int32_t *tok, size_t n)
{
    if (!cm || (!tok && n) || n >= UINT32_MAX || cm->uon || cm->map) return SKV_ERR_INVALID_ARG;
    for (size_t i = cm->n_coded; i < n; i++) {
        if (tok[i] < 0 || (uint32_t)tok[i] >= cm->V) return SKV_ERR_INVALID_ARG;
        uint32_t v = cm->vb ? cm->vb->code[tok[i]] : (uint32_t)tok[i];
        begin_token(cm, tok, i);
        code_id(cm, NULL, NULL, &v);
        cm->n_coded++;
    }
    return SKV_OK;
}

int skv_cm_clone(const skv_cm *src, skv_cm **out)
{
    if (out) *out = NULL;
    if (!src || !out || src->ovl_on) return SKV_ERR_INVALID_ARG;
    int rc = cm_alloc(src->V, src->vb, src->rev, src->slot_bits, 1, 1, out);
    if (rc == SKV_OK) skv_cm_copy(*out, src);
    return rc;
}

/* Rewrites from src the table elements dst's journal names (dst was copied from src and
 * src has not changed since). */
static void copy_journaled(skv_cm *dst, const skv_cm *src)
{
    for (size_t j = 0; j < dst->jn; j++) {
        uint32_t t = dst->jour[j] >> 24, x = dst->jour[j] & 0xFFFFFFu;
        if (t < CM_SLOTS) dst->slot[t][x] = src->slot[t][x];
        else if (t == CM_JOUR_MPOS) dst->mpos[x] = src->mpos[x];
        else if (t == CM_JOUR_RUN) dst->run[x] = src->run[x];
        else dst->apm[x] = src->apm[x];
    }
}

static void copy_tables(skv_cm *dst, const skv_cm *src)
{
    for (int k = 0; k < src->n_slots; k++) memcpy(dst->slot[k], src->slot[k], sizeof(uint32_t) << src->slot_bits);
    memcpy(dst->mpos, src->mpos, sizeof(uint32_t) << SKV_CM_MATCH_BITS);
    if (src->run) memcpy(dst->run, src->run, sizeof(uint32_t) * CM_RUN << src->run_bits);
    if (src->apm) memcpy(dst->apm, src->apm, CMV_APM_N * sizeof *dst->apm);
}

int skv_cm_copy(skv_cm *dst, const skv_cm *src)
{
    if (!dst || !src || dst == src || dst->V != src->V || dst->vb != src->vb || dst->rev != src->rev ||
        dst->slot_bits != src->slot_bits ||
        dst->map || src->ovl_on) /* a mapped model's tables are read-only, and under its log they are not all in them */
        return SKV_ERR_INVALID_ARG;
    if (dst->jour && dst->jsrc == src && !dst->jover) copy_journaled(dst, src);
    else copy_tables(dst, src);
    dst->jn = 0, dst->jover = 0, dst->jsrc = dst->jour ? src : NULL;
    dst->uon = 0, dst->fresh = src->fresh;
    memcpy(dst->msm, src->msm, src->n_msm * sizeof *dst->msm);
    dst->wpos = SIZE_MAX; /* (dst's history may be another array) */
    memcpy(dst->w, src->w, sizeof dst->w);
    dst->n_coded = src->n_coded;
    memcpy(dst->hash, src->hash, sizeof dst->hash);
    dst->mptr = src->mptr, dst->mlen = src->mlen, dst->mtok = src->mtok;
    dst->text4 = src->text4, dst->frag = src->frag;
    if (src->w2) memcpy(dst->w2, src->w2, CMV_SETS2 * sizeof *dst->w2);
    if (src->wx) memcpy(dst->wx, src->wx, src->wx_n * sizeof *dst->wx);
    memcpy(dst->wf, src->wf, sizeof dst->wf);
    return SKV_OK;
}

int skv_cm_journal(skv_cm *cm, const skv_cm *same)
{
    if (!cm || cm == same) return SKV_ERR_INVALID_ARG;
    if (!cm->jour && !(cm->jour = malloc(CM_JOUR_CAP * sizeof *cm->jour))) return SKV_ERR_NOMEM;
    cm->jn = 0, cm->jover = 0, cm->jsrc = same;
    return SKV_OK;
}

/* ---- in-place use with an undo log ------------------------------------------------ */

/* The small state kept whole by the undo log: msm, the mixers, the scalars. */
static size_t save_bytes(const skv_cm *cm)
{
    return cm->n_msm * sizeof *cm->msm + sizeof cm->w + (cm->w2 ? CMV_SETS2 * sizeof *cm->w2 : 0) +
           (cm->wx ? cm->wx_n * sizeof *cm->wx + sizeof cm->wf : 0) + SKV_CM_N_SCALARS * 4;
}

static void save_small(skv_cm *cm, int back)
{
    uint8_t *b = cm->usave;
    void *part[5] = {cm->msm, cm->w, cm->w2, cm->wx, cm->wf};
    size_t len[5] = {cm->n_msm * sizeof *cm->msm, sizeof cm->w, cm->w2 ? CMV_SETS2 * sizeof *cm->w2 : 0,
                     cm->wx ? cm->wx_n * sizeof *cm->wx : 0, cm->wx ? sizeof cm->wf : 0};
    for (int k = 0; k < 5; b += len[k], k++)
        if (len[k]) back ? memcpy(part[k], b, len[k]) : memcpy(b, part[k], len[k]);
    uint32_t v[SKV_CM_N_SCALARS];
    if (!back) {
        skv_cm_get_scalars(cm, v);
        memcpy(b, v, sizeof v);
        return;
    }
    memcpy(v, b, sizeof v);
    skv_cm_set_scalars(cm, v); /* they came from this model */
}

int skv_cm_undo_begin(skv_cm *cm, size_t n_ids)
{
    if (!cm || cm->uon || cm->dead) return SKV_ERR_INVALID_ARG;
    /* mpos and the runs per id, then per bit */
    size_t per = 1 + (size_t)cm->n_run + (size_t)cm->B * ((size_t)cm->n_slots + (cm->apm != NULL));
    if (n_ids > CM_UNDO_MAX / per) return SKV_ERR_RANGE;
    size_t need = n_ids * per < 4096 ? 4096 : n_ids * per;
    if (need > cm->ucap) {
        uint32_t *t = realloc(cm->utag, need * sizeof *t);
        if (t) cm->utag = t;
        uint32_t *o = t ? realloc(cm->uold, need * sizeof *o) : NULL;
        if (!o) return SKV_ERR_NOMEM;
        cm->uold = o, cm->ucap = need;
    }
    if (!cm->usave && !(cm->usave = malloc(save_bytes(cm)))) return SKV_ERR_NOMEM;
    if (cm->map) { /* the overlay, kept <= 1/2 full: per id an mpos element, per bit a slot of each table and an APM knot */
        size_t cells = n_ids * (1 + (size_t)cm->n_run + cm->B * ((size_t)cm->n_slots + 1));
        unsigned bits = 12;
        while (bits < CM_OVL_MAX_BITS && ((size_t)1 << bits) < 2 * cells) bits++;
        if (((size_t)1 << bits) < 2 * cells) return SKV_ERR_RANGE;
        if (((size_t)1 << bits) > cm->ovl_cap) {
            skv_big_free(cm->ovl); /* all empty: fresh pages are zero (and it stays so between logs) */
            cm->ovl_cap = 0;
            if (!(cm->ovl = skv_big_alloc(sizeof *cm->ovl << bits))) return SKV_ERR_NOMEM;
            /* faulted in now, writable: the probes would read the zero page first, then
             * fault again to write (a TLB flush on every core each time) */
            prefault(cm->ovl, sizeof *cm->ovl << bits);
            cm->ovl_cap = (size_t)1 << bits;
        }
        cm->ovl_bits = bits;
    }
    save_small(cm, 0);
    cm->un = 0, cm->ubase = cm->n_coded, cm->umax = n_ids, cm->uon = 1, cm->ufresh = cm->fresh;
    cm->ovl_on = cm->map != NULL;
    return SKV_OK;
}

void skv_cm_undo(skv_cm *cm)
{
    if (!cm || !cm->uon) return;
    for (size_t j = cm->un; j-- > 0;) { /* newest first: the oldest value of an element wins */
        uint32_t t = cm->utag[j] >> 24, x = cm->utag[j] & 0xFFFFFFu, v = cm->uold[j];
        if (t < CM_SLOTS) cm->slot[t][x] = v;
        else if (t == CM_JOUR_MPOS) cm->mpos[x] = v;
        else if (t == CM_JOUR_RUN) cm->run[x] = v;
        else cm->apm[x] = (uint16_t)v;
    }
    if (cm->ovl_on) memset(cm->ovl, 0, sizeof *cm->ovl << cm->ovl_bits); /* the slot tables were never written */
    int was = cm->ufresh; /* (set_scalars below clears it, and the recency state) */
    save_small(cm, 1);
    cm->un = 0, cm->uon = 0, cm->ovl_on = 0;
    cm->fresh = was; /* every element is back: a model that was at the reset state is again */
}

/* ---- state access for snapshots (cm_snap.c) ------------------------------------- */

int skv_cm_sections(skv_cm *cm, skv_cm_section sec[SKV_CM_MAX_SECTIONS])
{
    cm->fresh = cm->ufresh = 0; /* the tables may be written through sec, outside any log: */
    cm->jn = 0, cm->jover = 0, cm->jsrc = NULL; /* the next copy into cm is whole */
    return skv_cm_section_shapes(cm, sec);
}

int skv_cm_section_shapes(skv_cm *cm, skv_cm_section sec[SKV_CM_MAX_SECTIONS])
{
    int n = 0;
    for (int k = 0; k < cm->n_slots; k++)
        sec[n++] = (skv_cm_section){cm->slot[k], (size_t)1 << cm->slot_bits, 4, SKV_CM_SEC_SLOT};
    sec[n++] = (skv_cm_section){cm->mpos, (size_t)1 << SKV_CM_MATCH_BITS, 4, SKV_CM_SEC_POS};
    if (cm->n_run) sec[n++] = (skv_cm_section){cm->run, (size_t)CM_RUN << cm->run_bits, 4, SKV_CM_SEC_RUN};
    sec[n++] = (skv_cm_section){cm->msm, cm->n_msm, 4, SKV_CM_SEC_SLOT};
    sec[n++] = (skv_cm_section){cm->w, (size_t)CM_SETS * CM_INPUTS, 4, SKV_CM_SEC_WEIGHT};
    if (cm->w2) sec[n++] = (skv_cm_section){cm->w2, CMV_SETS2 * CM_INPUTS, 4, SKV_CM_SEC_WEIGHT};
    if (cm->wx) {
        sec[n++] = (skv_cm_section){cm->wx, cm->wx_n, 4, SKV_CM_SEC_WEIGHT};
        sec[n++] = (skv_cm_section){cm->wf, (size_t)CMV_FSETS * 3, 4, SKV_CM_SEC_FINAL};
    }
    if (cm->vb) sec[n++] = (skv_cm_section){cm->apm, CMV_APM_N, 2, SKV_CM_SEC_ANY}; /* (NULL before skv_cm_map_tables) */
    return n;
}

int skv_cm_valid(const skv_cm *cm, unsigned kind, uint32_t v)
{
    switch (kind) {
    case SKV_CM_SEC_SLOT: return (v & cm->cmask) <= cm->limit; /* the count indexes rate[] (rev 3: any check) */
    case SKV_CM_SEC_POS: return v == 0 || v < cm->n_coded; /* a match reads tok[v - 1 ..] and tok[v] */
    case SKV_CM_SEC_WEIGHT:
    case SKV_CM_SEC_FINAL: return (int32_t)v >= -CM_W_MAX && (int32_t)v <= CM_W_MAX;
    case SKV_CM_SEC_RUN: return (v >> 31) == 0 && (v & 0xFFFFFFu) <= cm->V; /* (value + 1) | count << 24 */
    default: return 1;
    }
}

/* Loads n elements of section s from little-endian bytes at src into elements at..at+n,
 * checking each as skv_cm_valid does (one pass, no call per element); SKV_ERR_FORMAT (the
 * elements are then written but the caller resets the model). */
/* 1 if one of the n elements at d is not valid for a section of this kind. */
static inline int check_chunk(const skv_cm *cm, unsigned kind, const uint32_t *d, size_t n)
{
    uint32_t bad = 0, lim = cm->limit, nc = (uint32_t)cm->n_coded, cmask = cm->cmask;
    if (kind == SKV_CM_SEC_SLOT)
        for (size_t k = 0; k < n; k++) bad |= (d[k] & cmask) > lim;
    else if (kind == SKV_CM_SEC_POS)
        for (size_t k = 0; k < n; k++) bad |= d[k] != 0 && d[k] >= nc;
    else if (kind == SKV_CM_SEC_WEIGHT || kind == SKV_CM_SEC_FINAL)
        for (size_t k = 0; k < n; k++) bad |= d[k] + (uint32_t)CM_W_MAX > 2 * (uint32_t)CM_W_MAX;
    else if (kind == SKV_CM_SEC_RUN)
        for (size_t k = 0; k < n; k++) bad |= (d[k] >> 31) | ((d[k] & 0xFFFFFFu) > cm->V);
    return bad != 0;
}

/* One chunk of a run: copied, then checked while it is still in L1. */
static inline int load_chunk(const skv_cm *cm, unsigned kind, uint32_t *d, const uint8_t *src, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(d, src, n * 4);
#else
    for (size_t k = 0; k < n; k++)
        d[k] = (uint32_t)src[4 * k] | (uint32_t)src[4 * k + 1] << 8 | (uint32_t)src[4 * k + 2] << 16 |
               (uint32_t)src[4 * k + 3] << 24;
#endif
    return check_chunk(cm, kind, d, n);
}

int skv_cm_check_run(const skv_cm *cm, const skv_cm_section *s, size_t at, size_t n)
{
    enum { CHUNK = 2048 };
    if (s->size != 4) return SKV_OK; /* the APM's knots: any value is one */
    const uint32_t *d = (const uint32_t *)s->p + at;
    int bad = 0;
    size_t k = 0;
    for (; n - k >= CHUNK; k += CHUNK) bad |= check_chunk(cm, s->kind, d + k, CHUNK);
    if (k < n) bad |= check_chunk(cm, s->kind, d + k, n - k);
    return bad ? SKV_ERR_FORMAT : SKV_OK;
}

int skv_cm_load_run(skv_cm *cm, const skv_cm_section *s, size_t at, const uint8_t *src, size_t n)
{
    enum { CHUNK = 2048 }; /* 8 KiB: the check reads what the copy just wrote from L1, not DRAM */
    cm->fresh = cm->ufresh = 0;
    if (s->size == 2) {
        uint16_t *d = (uint16_t *)s->p + at;
        for (size_t k = 0; k < n; k++) d[k] = (uint16_t)(src[2 * k] | src[2 * k + 1] << 8);
        return SKV_OK;
    }
    uint32_t *d = (uint32_t *)s->p + at;
    int bad = 0;
    size_t k = 0;
    for (; n - k >= CHUNK; k += CHUNK) bad |= load_chunk(cm, s->kind, d + k, src + 4 * k, CHUNK); /* a fixed count: vectorised */
    if (k < n) bad |= load_chunk(cm, s->kind, d + k, src + 4 * k, n - k);
    return bad ? SKV_ERR_FORMAT : SKV_OK;
}

int skv_cm_fresh(const skv_cm *cm) { return cm->fresh; }

void skv_cm_get_scalars(const skv_cm *cm, uint32_t v[SKV_CM_N_SCALARS])
{
    v[0] = (uint32_t)cm->n_coded;
    for (int k = 0; k < CM_SLOTS; k++) v[1 + k] = cm->hash[k];
    v[9] = cm->text4, v[10] = cm->frag, v[11] = cm->mptr, v[12] = cm->mlen, v[13] = (uint32_t)cm->mtok;
}

int skv_cm_set_scalars(skv_cm *cm, const uint32_t v[SKV_CM_N_SCALARS])
{
    int32_t mtok = (int32_t)v[13];
    if (v[0] >= UINT32_MAX || v[12] > 65535 || (v[12] && (v[11] >= v[0] || mtok < 0 || (uint32_t)mtok >= cm->V)) ||
        (!v[12] && mtok != -1))
        return SKV_ERR_FORMAT;
    cm->fresh = cm->ufresh = 0;
    cm->wpos = SIZE_MAX;
    cm->n_coded = v[0];
    for (int k = 0; k < CM_SLOTS; k++) cm->hash[k] = v[1 + k];
    cm->text4 = v[9], cm->frag = v[10], cm->mptr = v[11], cm->mlen = v[12], cm->mtok = mtok;
    return SKV_OK;
}

uint32_t skv_cm_n_vocab(const skv_cm *cm) { return cm->V; }
unsigned skv_cm_slot_bits(const skv_cm *cm) { return cm->slot_bits; }
size_t skv_cm_n_coded(const skv_cm *cm) { return cm->n_coded; }

static int encode_stream(const int32_t *tok, size_t n, uint32_t V, const skv_cm_vocab *vb, unsigned rev, uint8_t *dst,
                         size_t cap,
                         size_t *size)
{
    skv_rangecoder_enc e;
    skv_cm *cm;
    int rc;
    if (!size || (!tok && n)) return SKV_ERR_INVALID_ARG;
    if ((rc = cm_create(V, vb, rev, vb ? SKV_CMV_SLOT_BITS : SKV_CM_SLOT_BITS, &cm))) return rc;
    skv_rangecoder_enc_init(&e, dst, cap);
    for (size_t i = 0; i < n && rc == SKV_OK; i++) rc = skv_cm_encode(cm, &e, tok, i);
    if (rc == SKV_OK) rc = skv_rangecoder_enc_finish(&e, size);
    skv_cm_free(cm);
    return rc;
}

static int decode_stream(const uint8_t *src, size_t size, size_t n, uint32_t V, const skv_cm_vocab *vb, unsigned rev,
                         int32_t *tok)
{
    skv_rangecoder_dec d;
    skv_cm *cm;
    int rc;
    if ((!src && size) || (!tok && n)) return SKV_ERR_INVALID_ARG;
    if ((rc = cm_create(V, vb, rev, vb ? SKV_CMV_SLOT_BITS : SKV_CM_SLOT_BITS, &cm))) return rc;
    rc = skv_rangecoder_dec_init(&d, src, size);
    for (size_t i = 0; i < n && rc == SKV_OK; i++) rc = skv_cm_decode(cm, &d, tok, i);
    if (rc == SKV_OK && skv_rangecoder_dec_finish(&d)) rc = SKV_ERR_FORMAT;
    skv_cm_free(cm);
    return rc == SKV_ERR_INVALID_ARG ? SKV_ERR_FORMAT : rc;
}

int skv_cm_encode_tokens(const int32_t *tok, size_t n, uint32_t n_vocab, uint8_t *dst, size_t cap, size_t *size)
{
    return encode_stream(tok, n, n_vocab, NULL, 1, dst, cap, size);
}

int skv_cm_decode_tokens(const uint8_t *src, size_t size, size_t n, uint32_t n_vocab, int32_t *tok)
{
    return decode_stream(src, size, n, n_vocab, NULL, 1, tok);
}

int skv_cmv_encode_tokens(const skv_cm_vocab *vb, unsigned rev, const int32_t *tok, size_t n, uint8_t *dst, size_t cap,
                          size_t *size)
{
    if (!vocab_args(vb, rev, SKV_CMV_SLOT_BITS)) return SKV_ERR_INVALID_ARG;
    return encode_stream(tok, n, vb->V, vb, rev, dst, cap, size);
}

int skv_cmv_decode_tokens(const skv_cm_vocab *vb, unsigned rev, const uint8_t *src, size_t size, size_t n, int32_t *tok)
{
    if (!vocab_args(vb, rev, SKV_CMV_SLOT_BITS)) return SKV_ERR_INVALID_ARG;
    return decode_stream(src, size, n, vb->V, vb, rev, tok);
}

unsigned skv_cm_rev(const skv_cm *cm) { return cm->rev; }

/* ---- a kept model for another vocabulary size --------------------------------------- */

int skv_cm_set_vocab(skv_cm *cm, uint32_t n_vocab)
{
    if (!cm || cm->vb || n_vocab < 1 || n_vocab > SKV_CM_MAX_VOCAB) return SKV_ERR_INVALID_ARG;
    cm->V = n_vocab; /* codec cm's tables are sized by slot_bits, not by V: only B follows */
    for (cm->B = 1; ((uint32_t)1 << cm->B) < n_vocab; cm->B++) {}
    if (cm->fresh == 1) reset_small(cm); /* the tables' reset values do not depend on V */
    else skv_cm_reset(cm);
    return SKV_OK;
}
