/* Moving cached KV to other positions: exact RoPE re-rotation of K (docs/near.md).
 *
 * A cached K row is k' = R(theta p) k, the engine's RoPE of the pre-RoPE key k at position
 * p. Moving it to position q = p + d needs R(theta q) k. Rotating k' by theta d in any
 * precision is not what the engine computes at q (its cos/sin tables are rounded floats and
 * its products round in float), so the shift instead
 *   1. inverts the engine's rotation at p in double with the engine's own float tables,
 *   2. rounds the recovered pre-RoPE pair to float: this is the engine's k whenever the
 *      inversion error is under half an ulp of k, which is almost always,
 *   3. applies the engine's float rotation at q, operation for operation (rope_ref).
 * Where step 2 recovers k exactly the result is bit-identical to the engine's K at q;
 * elsewhere it is off by about one ulp of |k| (tests/test_near.c measures the worst case
 * for both RoPE styles and bounds it). V does not depend on the position: copied. */
#ifndef SKV_ENGINE_KVSHIFT_H
#define SKV_ENGINE_KVSHIFT_H

#include <stddef.h>

#include "seqkv.h"

enum {
    SKV_SHIFT_ENGINE = 0, /* invert + round + the engine's rotation (above; the default) */
    SKV_SHIFT_DIRECT = 1  /* rotate by theta d in double, round once (for comparison) */
};

/* kv: n positions in the canonical order of skv_ctx_kv_read ([layer][kind][kv head][n][head_dim]),
 * computed at positions p_from .. p_from + n - 1; afterwards its K rows are those positions'
 * keys at p_to .. p_to + n - 1. SKV_ERR_INVALID_ARG for NULL or negative positions,
 * SKV_ERR_RANGE past 2^24 positions, SKV_ERR_NOMEM (tables of n x rope_dim floats). */
int skv_kv_shift(const skv_model *m, float *kv, size_t n, int p_from, int p_to, int method);

#endif
