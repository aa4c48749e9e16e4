/* Near-duplicate reuse (docs/near.md): internal to src/store/near*.c.
 *
 *   near_index.c   n-gram chunk index over stored sequences, span finding, candidate
 *                  scoring, the selective-recompute plan (pure: no LMDB, no model)
 *   near_store.c   the sessions' tokens and surprisals out of the store, the near get
 *                  (donor restore, K re-rotation, recompute runs), the counter record
 *
 * A plan maps every position i of the new sequence q to one action:
 *
 *   q:      [BOS a b c] [X Y] [d e f g h ...] [Z] [p q r ...]
 *   donor:  [BOS a b c] [U]   [d e f g h ...] [p q r ...] ...
 *   act:     EXACT....   COMPUTE  SEAM APPROX..  COMPUTE  SEAM APPROX (delta -1)
 *
 * EXACT positions (the common prefix) are the donor's own KV, bit for bit what a fresh
 * prefill gives; APPROX positions reuse the donor's KV computed in another context (K
 * re-rotated by the span's delta), so attention over them differs from a fresh run;
 * COMPUTE and SEAM positions run through the model over the cache built so far. */
#ifndef SKV_STORE_NEAR_H
#define SKV_STORE_NEAR_H

#include <stddef.h>
#include <stdint.h>

enum { NEAR_COMPUTE = 0, NEAR_EXACT = 1, NEAR_APPROX = 2 };

typedef struct near_seq {
    const int32_t *tok;   /* n tokens */
    const float *sur;     /* n surprisals (bits; position 0: 0) */
    size_t n;
} near_seq;

typedef struct near_span {
    uint32_t q0, s0, len; /* q[q0 .. q0+len) == donor[s0 .. s0+len) */
} near_span;

typedef struct near_plan {
    size_t donor;         /* index of the donor sequence */
    near_span *spans;     /* in q order, non-overlapping */
    size_t n_spans;
    uint8_t *act;         /* [n] NEAR_* */
    int32_t *src;         /* [n] donor position of a reused position, else -1 */
    uint32_t n, n_exact, n_approx, n_seam, n_extra; /* extra: recomputed by the deviation estimate */
    double shared_bits, score;
} near_plan;

typedef struct near_index near_index;

/* Indexes every g-gram of seqs (g >= 2), which must outlive the index. */
int near_index_build(const near_seq *seqs, size_t n_seqs, int g, near_index **out);
void near_index_free(near_index *ix);

/* The best donor for q: of the sequences sharing the most g-grams with q, the one whose
 * spans score highest (shared bits - the bits of the positions it leaves to recompute).
 * SKV_OK with a plan (free with near_plan_free), 1 when no sequence shares a g-gram or
 * even a first token with q, or the best plan reuses fewer than g positions. Positions are marked EXACT / APPROX / COMPUTE; seam_k first
 * positions of every APPROX span and the last position of q become COMPUTE. */
int near_best(const near_index *ix, const int32_t *q, size_t n, int seam_k, near_plan *out);
/* Marks more APPROX positions COMPUTE, highest deviation estimate first, until
 * ceil(fraction x n) positions are computed (or none is APPROX). */
void near_select(near_plan *p, const near_seq *donor, const int32_t *q, double fraction);
void near_plan_free(near_plan *p);

/* The recompute fraction for a target mean KL (nats) from the calibration table measured
 * by bench/bench_near.c (bench/results/near.md). */
double near_fraction_for_kl(double kl);

#endif
