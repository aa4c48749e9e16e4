/* cm.c - the context-mixing token model of codec "cm" (see cm.h, docs/coder.md section 4):
 * its life (create, reset, map, free), copies, the undo log and the state snapshots read.
 * The model itself, per token and per bit, is cm_model.c. Summary:
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
#include "coder/cm_int.h"
#include "core/fpguard.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* stretch = the inverse of squash on 12-bit probabilities: the smallest d whose squash
 * reaches p (2047 above the last). */
static void init_tables(skv_cm *cm)
{
    int32_t d = -2047;
    for (uint32_t p = 0; p < 4096; p++) {
        while (d < 2047 && (skv_cm_squash16(d) >> 4) < p) d++;
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
    for (size_t j = 0; j < 33; j++) cm->apm[j] = (uint16_t)skv_cm_squash16((int32_t)j * 128 - 2048);
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
        for (size_t j = 0; j < 33; j++) pat[j] = (uint16_t)skv_cm_squash16((int32_t)j * 128 - 2048);
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

