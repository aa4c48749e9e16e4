/* Bulk access to a context's KV cache (include/seqkv.h: kv_view, kv_digest, kv_read,
 * kv_write), f32 or f16 (kv_cache_type): an f16 cache is seen as the f32 values of its
 * binary16 entries (exact), so digests and reads cover what attention computes over. */
#include "engine/ctx_int.h"
#include "core/fpguard.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "core/f16.h"
#include "core/util.h"
#include "quant/types.h"

void skv_kv16_load(const skv_ctx *c, int layer, int kind, int head, size_t r0, size_t r1, float *dst)
{
    size_t hd = (size_t)c->m->info.head_dim;
    const uint16_t *src = kv16_ptr(kind ? c->v16 : c->k16, c, layer, head) + r0 * hd;
    c->k->dequant(SKV_GGML_F16, src, hd * sizeof(uint16_t), hd, r1 - r0, dst);
}

void skv_kv16_store(uint16_t *dst, const float *src, size_t n)
{
    /* the type table's f16 encoder, SIMD where the CPU has it: the same bytes as
     * skv_f32_to_f16 per value (its twin); the status (non-finite values) is not needed */
    (void)skv_type_from_float(skv_type_traits_of(SKV_GGML_F16), 1)(src, dst, n);
}

/* Rows [0, n) of (layer, hk) of c's f16 cache as f32 in the thread's K / V scratch: only
 * the rows this thread's earlier tasks of the same head in this attention call did not
 * convert (exact values, so reuse changes nothing). */
void skv_kv16_rows(skv_ctx *c, int thread, int layer, int hk, size_t n, float *K, float *V)
{
    struct kv16_conv *t = &c->kv16_conv[thread];
    size_t hd = (size_t)c->m->info.head_dim;
    size_t r0 = t->epoch == c->kv16_epoch && t->layer == layer && t->head == hk ? t->rows : 0;
    if (r0 >= n) return;
    skv_kv16_load(c, layer, 0, hk, r0, n, K + r0 * hd);
    skv_kv16_load(c, layer, 1, hk, r0, n, V + r0 * hd);
    *t = (struct kv16_conv){c->kv16_epoch, layer, hk, n};
}

int skv_ctx_kv_cache_type(const skv_ctx *c) { return c && c->kv_f16 ? SKV_KV_CACHE_F16 : SKV_KV_CACHE_F32; }

int skv_ctx_kv_view(const skv_ctx *c, int layer, int kind, int kv_head, const float **data)
{
    if (!c || !data || layer < 0 || layer >= c->m->info.n_layer || kind < 0 || kind > 1 || kv_head < 0 ||
        kv_head >= c->m->info.n_head_kv)
        return SKV_ERR_INVALID_ARG;
    if (c->kv_f16) return SKV_ERR_UNSUPPORTED; /* no f32 block to point at: kv_read converts */
    *data = kv_ptr(attn_cache(c, layer, kind), c, layer, kv_head);
    return SKV_OK;
}

/* The digest of one (layer, kind, head)'s first n_pos rows: the f16 entries as f32 in
 * chunks (the hash is of the byte stream, so chunking changes nothing). */
static void digest_head(const skv_ctx *c, XXH3_state_t *st, int l, int kind, int hh, size_t n_pos)
{
    size_t hd = (size_t)c->m->info.head_dim;
    float buf[4096];
    if (!c->kv_f16) {
        skv_digest_f32_update(st, kv_ptr(attn_cache(c, l, kind), c, l, hh), n_pos * hd);
        return;
    }
    size_t rows = sizeof buf / sizeof buf[0] / hd;
    for (size_t r = 0; r < n_pos; r += rows) {
        size_t r1 = r + rows < n_pos ? r + rows : n_pos;
        skv_kv16_load(c, l, kind, hh, r, r1, buf);
        skv_digest_f32_update(st, buf, (r1 - r) * hd);
    }
}

int skv_ctx_kv_digest(const skv_ctx *c, int n_pos, uint8_t out[16])
{
    XXH3_state_t *st;
    if (!c || !out || n_pos < 0 || n_pos > c->n_pos) return SKV_ERR_INVALID_ARG;
    if (c->kv_f16 && c->m->info.head_dim > 4096) return SKV_ERR_UNSUPPORTED;
    if (!(st = XXH3_createState())) return SKV_ERR_NOMEM;
    XXH3_128bits_reset(st);
    for (int l = 0; l < c->m->info.n_layer; l++)
        for (int kind = 0; kind < 2; kind++)
            for (int hh = 0; hh < c->m->info.n_head_kv; hh++) digest_head(c, st, l, kind, hh, (size_t)n_pos);
    skv_digest_finish(st, out);
    return SKV_OK;
}

/* ---- bulk KV access (canonical order: layer, kind, kv_head, position, dimension) -------- */

static int kv_range_ok(const skv_ctx *c, int pos0, int n, int limit)
{
    return c && pos0 >= 0 && n >= 0 && pos0 <= limit && n <= c->n_ctx - pos0;
}

int skv_ctx_kv_read(const skv_ctx *c, int pos0, int n, float *out)
{
    if (!kv_range_ok(c, pos0, n, c ? c->n_pos : 0) || pos0 + n > c->n_pos || (!out && n > 0))
        return SKV_ERR_INVALID_ARG;
    size_t hd = (size_t)c->m->info.head_dim, row = (size_t)n * hd;
    for (int l = 0; l < c->m->info.n_layer; l++)
        for (int kind = 0; kind < 2; kind++)
            for (int hh = 0; hh < c->m->info.n_head_kv; hh++, out += row) {
                if (c->kv_f16) skv_kv16_load(c, l, kind, hh, (size_t)pos0, (size_t)pos0 + (size_t)n, out);
                else memcpy(out, kv_ptr(attn_cache(c, l, kind), c, l, hh) + (size_t)pos0 * hd, row * sizeof(float));
            }
    return SKV_OK;
}

/* One (layer, kind, head)'s rows [pos0, pos0 + n) := kv (rounded to f16 in an f16 cache). */
static void write_head(skv_ctx *c, int l, int kind, int hh, int pos0, size_t row, const float *kv)
{
    size_t off = (size_t)pos0 * (size_t)c->m->info.head_dim;
    if (c->kv_f16) skv_kv16_store(kv16_ptr(kind ? c->v16 : c->k16, c, l, hh) + off, kv, row);
    else memcpy(kv_ptr(kind ? c->v_cache : c->k_cache, c, l, hh) + off, kv, row * sizeof(float));
}

int skv_ctx_kv_write(skv_ctx *c, int pos0, int n, const float *kv)
{
    if (!kv_range_ok(c, pos0, n, c ? c->n_pos : 0) || (!kv && n > 0))
        return c ? skv_ctx_set_error(c, SKV_ERR_INVALID_ARG, "kv_write: positions out of range or NULL data")
                 : SKV_ERR_INVALID_ARG;
    skv_err_clear(&c->err);
    if (c->kvq) {
        skv_fail(&c->err, 0, "KV cannot be loaded into a context with a quantized cache");
        return SKV_ERR_UNSUPPORTED;
    }
    size_t hd = (size_t)c->m->info.head_dim, row = (size_t)n * hd;
    for (int l = 0; l < c->m->info.n_layer && n > 0; l++) /* n = 0: kv may be NULL (memcpy must not see it) */
        for (int kind = 0; kind < 2; kind++)
            for (int hh = 0; hh < c->m->info.n_head_kv; hh++, kv += row) write_head(c, l, kind, hh, pos0, row, kv);
    c->n_pos = pos0 + n;
    return SKV_OK;
}
