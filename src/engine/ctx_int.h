/* The context's internals, shared by the forward pass (forward.c) and the bulk KV access
 * (kvcache.c). Engine-internal: not part of the public API. */
#ifndef SKV_CTX_INT_H
#define SKV_CTX_INT_H

#include <stdint.h>

#include "quant/kvquant.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "core/threadpool.h"

#define ROW_BLOCK 16 /* weight rows per matmul task (dequantised together) */

struct skv_ctx {
    const skv_model *m;
    const skv_kernels *k;
    skv_pool *pool;        /* NULL: single-threaded */
    skv_pool *active;      /* pool for the current batch (NULL for small batches) */
    int n_ctx, n_pos, max_batch;
    size_t kmax;           /* longest matmul input row */
    float *k_cache, *v_cache; /* f32 cache; NULL with an f16 cache */
    int kv_f16;               /* SKV_KV_CACHE_F16: k16 / v16 instead, same layout */
    uint16_t *k16, *v16;
    /* Quantized KV (kvquant.h; NULL when off): attention reads kq_cache / vq_cache for the
     * active (layer, kind) pairs, the exact k_cache / v_cache otherwise. Invariant after every
     * batch: view rows [0, kvq_done) are round trips of the exact rows, rows [kvq_done, n_pos)
     * copies of them, kvq_done = max(0, n_pos - window). */
    skv_kvquant *kvq;
    float *kq_cache, *vq_cache; /* same layout as k_cache / v_cache */
    int kvq_done;
    float *rope_cos, *rope_sin; /* [S][rope_dim/2] */
    float *swa_cos, *swa_sin;   /* [S][rope_dim/2] of windowed layers with their own base; else NULL */
    float *fused;               /* [max_batch][max(Q + 2 KV, 2 F)] fused matmul outputs, or NULL */
    float *rope_tmp;            /* [rope_dim]: one head's rotated pairs gathered (skv_rope_apply) */
    float *x, *xb, *q, *kk, *vv, *att, *hb, *hb2; /* activations for max_batch tokens */
    float *thread_scratch; /* per thread: ROW_BLOCK*kmax dequant rows + S attention scores
                            * (+ with an f16 cache: one head's K and V rows as f32) */
    size_t scratch_stride;
    /* f16 cache, per thread: the rows of (layer, head) its scratch holds as f32 since the
     * attention call numbered epoch (a prefill's tasks of one head extend them) */
    struct kv16_conv { uint64_t epoch; int layer, head; size_t rows; } *kv16_conv;
    uint64_t kv16_epoch;
    uint8_t *qact;         /* [max_batch][SKV_QMATMUL_ACT_BOUND(kmax)]: a matmul's quantized inputs */
    float *sur_rows;       /* skv_ctx_prefill_surprisal's logits rows (lazily, bounded), or NULL */
    skv_err err;           /* last error: set on failure, "" after a success */
};

static inline size_t kv_block(const skv_ctx *c) { return (size_t)c->n_ctx * (size_t)c->m->info.head_dim; }

static inline float *kv_ptr(float *cache, const skv_ctx *c, int layer, int head)
{
    return cache + ((size_t)layer * (size_t)c->m->info.n_head_kv + (size_t)head) * kv_block(c);
}

static inline uint16_t *kv16_ptr(uint16_t *cache, const skv_ctx *c, int layer, int head)
{
    return cache + ((size_t)layer * (size_t)c->m->info.n_head_kv + (size_t)head) * kv_block(c);
}

/* The cache attention reads for (layer, kind): the quantized view when that pair is active. */
static inline float *attn_cache(const skv_ctx *c, int layer, int kind)
{
    if (!skv_kvquant_active(c->kvq, layer, kind)) return kind ? c->v_cache : c->k_cache;
    return kind ? c->vq_cache : c->kq_cache;
}

/* Rows [r0, r1) of one (layer, kind, head) of an f16 cache as f32 (exact). */
void skv_kv16_load(const skv_ctx *c, int layer, int kind, int head, size_t r0, size_t r1, float *dst);
/* Rows [0, n) of (layer, hk) as f32 in a thread's K / V scratch, reusing the rows its
 * earlier tasks of the same head converted in this attention call (c->kv16_epoch). */
void skv_kv16_rows(skv_ctx *c, int thread, int layer, int hk, size_t n, float *K, float *V);
/* n values rounded to binary16 (nearest, ties to even), as the cache stores them. */
void skv_kv16_store(uint16_t *dst, const float *src, size_t n);

#endif
