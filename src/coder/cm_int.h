/* cm_int.h - what the context-mixing model's files share (cm.c: the model's life, copies,
 * undo log and state access; cm_model.c: the per-token and per-bit steps that predict,
 * code and learn): its constants and its struct. Private to src/coder/. */
#ifndef SKV_CM_INT_H
#define SKV_CM_INT_H

#include <stddef.h>
#include <stdint.h>

#include "coder/cm.h"
#include "coder/cm_vocab.h"
#include "core/util.h"


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

/* floor(x / 2^s) for any sign. */
static inline int64_t asr(int64_t x, unsigned s) { return x >= 0 ? x >> s : -((-x - 1) >> s) - 1; }

static inline int32_t clamp32(int64_t x, int32_t lo, int32_t hi) { return x < lo ? lo : x > hi ? hi : (int32_t)x; }


/* ---- cm_model.c ---- */
/* P(1) in 16 bits of the logistic-domain value d (clamped to [-2047, 2047]). */
uint32_t skv_cm_squash16(int32_t d);

#endif
