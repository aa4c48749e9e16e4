/* cm_model.c - the context-mixing model's steps (cm.h, docs/coder.md section 4): per
 * token the context hashes, the match, the run and recency models; per bit the
 * prediction (slots, mixers, APM), the coding and the learning. All integer arithmetic. */
#include "coder/cm_int.h"
#include "core/fpguard.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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


uint32_t skv_cm_squash16(int32_t d)
{
    uint32_t u = (uint32_t)(clamp32(d, -2047, 2047) + 2048), j = u >> 5, f = u & 31;
    return squash_knots[j] + (((uint32_t)(squash_knots[j + 1] - squash_knots[j]) * f) >> 5);
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
    cm->p = skv_cm_squash16(clamp32(asr((int64_t)f[0] * cm->dot1 + (int64_t)f[1] * cm->dot2 + (int64_t)f[2] * cm->dot3, 16),
                             -2047, 2047));
    apm_refine(cm, node);
}

/* Fills st[], set and p for the bit at node (depth d). */
static void cm_predict(skv_cm *cm, uint32_t node, unsigned d)
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
        cm->p = skv_cm_squash16(asr((int64_t)cm->dot1 + cm->dot2, 1));
    } else {
        cm->p = skv_cm_squash16(cm->dot1);
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
    mixer_learn_n(cm, cm->w3 + (size_t)cm->set3 * (size_t)cm->wide, cm->st, cm->wide, ((int64_t)bit << 16) - skv_cm_squash16(cm->dot3));
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
    int64_t err = ((int64_t)bit << 16) - (cm->w2 ? skv_cm_squash16(cm->dot1) : cm->p); /* in (-2^16, 2^16) */
    int64_t err2 = cm->w2 ? ((int64_t)bit << 16) - skv_cm_squash16(cm->dot2) : 0;
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
            cm_predict(cm, node, depth);
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
