/* Contexts and the forward pass: batched prefill and single-token decode over one
 * KV cache, batch- and thread-invariant by construction (ops.h, docs/determinism.md).
 *
 * Names: T = tokens in this batch, D = n_embd, F = n_ff, hd = head_dim,
 * Hq / Hkv = query / key-value heads, V = n_vocab, S = n_ctx (cache capacity).
 *
 * KV cache layout, one f32 block per (layer, kind, kv head), rows = positions:
 *   k_cache[l][h][pos][hd], v_cache[l][h][pos][hd]   (S rows reserved per block) */
#include <math.h>
#include "core/fpguard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/detmath.h"
#include "quant/kvquant.h"
#include "engine/arch.h"
#include "engine/layer0.h"
#include "engine/archops.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "core/threadpool.h"
#include "core/log.h"
#include "engine/ctx_int.h"

/* Batches smaller than this run on the calling thread: waking workers for a handful of
 * tokens costs more than it saves (and never changes a result: see ops.h). */
#define POOL_MIN_BATCH 8
/* ... except matrix products of at least this many weights per token: a 1B model's
 * decode spends its time streaming weights, which two threads do faster than one. */
#define POOL_MIN_WEIGHTS ((size_t)1 << 18)
/* ... and attention of small batches once tokens x positions attended reaches this: a decode
 * step deep into a long context splits its KV heads between the threads. */
#define POOL_MIN_ATTN ((size_t)128)

/* View rows [r0, r1) of every active pair := exact rows (quant = 0) or their round trips. */
static void kvq_set_rows(skv_ctx *c, int layer, int r0, int r1, int quant)
{
    size_t hd = (size_t)c->m->info.head_dim;
    for (int kind = 0; kind < 2; kind++) {
        if (!skv_kvquant_active(c->kvq, layer, kind)) continue;
        for (int hh = 0; hh < c->m->info.n_head_kv; hh++) {
            const float *src = kv_ptr(kind ? c->v_cache : c->k_cache, c, layer, hh);
            float *dst = kv_ptr(kind ? c->vq_cache : c->kq_cache, c, layer, hh);
            for (int r = r0; r < r1; r++) {
                if (quant) skv_kvquant_roundtrip(c->kvq, layer, kind, src + (size_t)r * hd, dst + (size_t)r * hd);
                else memcpy(dst + (size_t)r * hd, src + (size_t)r * hd, hd * sizeof(float));
            }
        }
    }
}

/* After a truncation, rows that are back inside the full-precision window get their exact
 * values again, so the cache equals the one a fresh run of the kept tokens builds. */
static void kvq_truncate(skv_ctx *c)
{
    int w = skv_kvquant_spec(c->kvq)->window, done = c->n_pos > w ? c->n_pos - w : 0;
    if (done >= c->kvq_done) return;
    for (int l = 0; l < c->m->info.n_layer; l++) kvq_set_rows(c, l, done, c->kvq_done < c->n_pos ? c->kvq_done : c->n_pos, 0);
    c->kvq_done = done;
}

skv_ctx_params skv_ctx_default_params(void)
{
    skv_ctx_params p = {.n_ctx = 0, .n_threads = 1, .kernels = SKV_KERNELS_AUTO, .max_batch = 512};
    return p;
}

/* cos / sin of every (position, pair) angle the context can need, times mscale. */
static void rope_tables(const skv_ctx *c, const double *freq, double scale, float *cos_t, float *sin_t)
{
    size_t S = (size_t)c->n_ctx, np = (size_t)c->m->info.rope_dim / 2;
    double ms = c->m->ap.rope_mscale;
    for (size_t p = 0; p < S; p++)
        for (size_t i = 0; i < np; i++) {
            double a = (double)p * scale * freq[i], sn, cs;
            skv_det_sincos(a, &sn, &cs); /* not libm: identical on every machine */
            cos_t[p * np + i] = (float)(cs * ms); /* ms == 1 (llama): exact, the bits unchanged */
            sin_t[p * np + i] = (float)(sn * ms);
        }
}

/* The tables of windowed layers with their own RoPE base, and the buffer fused matmuls
 * write to: only for models that need them. */
static int ctx_alloc_arch(skv_ctx *c)
{
    const skv_model *m = c->m;
    const skv_model_info *h = &m->info;
    size_t S = (size_t)c->n_ctx, np = (size_t)h->rope_dim / 2;
    size_t w = skv_dim_size(h, SKV_DIM_QKV) > skv_dim_size(h, SKV_DIM_FF2) ? skv_dim_size(h, SKV_DIM_QKV)
                                                                            : skv_dim_size(h, SKV_DIM_FF2);
    if (m->arch->use[SKV_LT_QKV] || m->arch->use[SKV_LT_GATE_UP]) {
        if (!(c->fused = malloc((size_t)c->max_batch * w * sizeof(float)))) return SKV_ERR_NOMEM;
    }
    rope_tables(c, m->rope_freq, m->rope_scale, c->rope_cos, c->rope_sin);
    if (!m->ap.rope_freq_swa) return SKV_OK;
    c->swa_cos = malloc(S * np * sizeof(float));
    c->swa_sin = malloc(S * np * sizeof(float));
    if (!c->swa_cos || !c->swa_sin) return SKV_ERR_NOMEM;
    rope_tables(c, m->ap.rope_freq_swa, m->ap.rope_scale_swa, c->swa_cos, c->swa_sin);
    return SKV_OK;
}

static int ctx_alloc(skv_ctx *c)
{
    const skv_model_info *h = &c->m->info;
    size_t B = (size_t)c->max_batch, D = (size_t)h->n_embd, F = (size_t)h->n_ff;
    size_t Q = (size_t)h->n_head * (size_t)h->head_dim, KV = (size_t)h->n_head_kv * (size_t)h->head_dim;
    size_t S = (size_t)c->n_ctx, np = (size_t)h->rope_dim / 2, cache;
    c->kmax = D > F ? D : F;
    if (Q > c->kmax) c->kmax = Q;
    if (!skv_mul_ok((size_t)h->n_layer * KV, S, &cache) || cache > ((size_t)1 << 40)) return SKV_ERR_RANGE;
    if (c->kv_f16) {
        c->k16 = skv_big_alloc(cache * sizeof(uint16_t));
        c->v16 = skv_big_alloc(cache * sizeof(uint16_t));
    } else {
        c->k_cache = skv_big_alloc(cache * sizeof(float));
        c->v_cache = skv_big_alloc(cache * sizeof(float));
    }
    if (c->kvq && skv_kvquant_spec(c->kvq)->scheme[0] >= 0 && !(c->kq_cache = skv_big_alloc(cache * sizeof(float))))
        return SKV_ERR_NOMEM;
    if (c->kvq && skv_kvquant_spec(c->kvq)->scheme[1] >= 0 && !(c->vq_cache = skv_big_alloc(cache * sizeof(float))))
        return SKV_ERR_NOMEM;
    c->rope_cos = malloc(S * np * sizeof(float));
    c->rope_sin = malloc(S * np * sizeof(float));
    c->rope_tmp = malloc(2 * np * sizeof(float));
    c->x = skv_big_alloc(B * D * sizeof(float));
    c->xb = skv_big_alloc(B * D * sizeof(float));
    c->q = skv_big_alloc(B * Q * sizeof(float));
    c->kk = malloc(B * KV * sizeof(float));
    c->vv = malloc(B * KV * sizeof(float));
    c->att = skv_big_alloc(B * Q * sizeof(float));
    c->hb = skv_big_alloc(B * F * sizeof(float));
    c->hb2 = skv_big_alloc(B * F * sizeof(float));
    c->scratch_stride = ROW_BLOCK * c->kmax + SKV_ATTN_MAX_Q * S + 16 + (c->kv_f16 ? 2 * S * (size_t)h->head_dim : 0);
    c->thread_scratch = malloc((size_t)skv_pool_size(c->pool) * c->scratch_stride * sizeof(float));
    c->qact = malloc(B * SKV_QMATMUL_ACT_BOUND(c->kmax));
    if (c->kv_f16 && !(c->kv16_conv = calloc((size_t)skv_pool_size(c->pool), sizeof *c->kv16_conv))) return SKV_ERR_NOMEM;
    if (!c->qact || (c->kv_f16 ? !c->k16 || !c->v16 : !c->k_cache || !c->v_cache) || !c->rope_cos || !c->rope_sin || !c->rope_tmp || !c->x || !c->xb || !c->q || !c->kk ||
        !c->vv || !c->att || !c->hb || !c->hb2 || !c->thread_scratch)
        return SKV_ERR_NOMEM;
    return ctx_alloc_arch(c);
}

static int ctx_params_ok(const skv_ctx_params *p)
{
    return p->n_ctx >= 0 && p->n_ctx <= (1 << 24) && p->n_threads >= 0 && p->n_threads <= 1024 && p->max_batch >= 0 &&
           p->max_batch <= 65536 && (p->kv_cache_type == SKV_KV_CACHE_F32 || p->kv_cache_type == SKV_KV_CACHE_F16);
}

static int ctx_kernels(skv_ctx *c, int kernels)
{
    switch (kernels) {
    case SKV_KERNELS_AUTO: c->k = skv_kernels_best(); break;
    case SKV_KERNELS_SCALAR: c->k = skv_kernels_scalar(); break;
    case SKV_KERNELS_AVX2: c->k = skv_kernels_avx2(); break;
    default: return SKV_ERR_INVALID_ARG;
    }
    return c->k ? SKV_OK : SKV_ERR_UNSUPPORTED; /* AVX2 asked for on a CPU without it */
}

static int ctx_kv_quant(skv_ctx *c, const char *spec_text)
{
    skv_kvq_spec spec;
    int rc;
    if (!spec_text || !spec_text[0]) return SKV_OK;
    if ((rc = skv_kvquant_parse(spec_text, &spec, NULL))) return rc;
    return skv_kvquant_create(&c->kvq, &spec, c->m->info.n_layer, (size_t)c->m->info.head_dim);
}

/* Why skv_ctx_create failed with status rc: the message kept on the model (per thread). */
static int ctx_create_failed(const skv_model *m, const skv_ctx_params *p, int rc)
{
    const char *why = rc == SKV_ERR_NOMEM ? "out of memory for the context's buffers (try a smaller n_ctx or max_batch)"
                      : rc == SKV_ERR_UNSUPPORTED ? "the requested AVX2 kernels need a CPU with AVX2, FMA and F16C"
                      : !ctx_params_ok(p) ? "a parameter is out of range (n_ctx 0..2^24, n_threads 0..1024, "
                                            "max_batch 0..65536, kv_cache_type f32 or f16)"
                      : p->kv_cache_type == SKV_KV_CACHE_F16 && p->kv_quant && p->kv_quant[0]
                          ? "kv_quant and an f16 KV cache cannot be combined"
                      : p->kernels < SKV_KERNELS_AUTO || p->kernels > SKV_KERNELS_AVX2 ? "unknown kernels value"
                      : "bad kv_quant spec (skv_kv_quant_check says why)";
    return skv_errbox_set(m->err, rc, "cannot create a context: %s", why);
}

int skv_ctx_create(const skv_model *m, const skv_ctx_params *p, skv_ctx **out)
{
    skv_ctx_params d = skv_ctx_default_params();
    skv_ctx *c;
    int rc;
    if (!m || !out) return SKV_ERR_INVALID_ARG;
    *out = NULL;
    if (!p) p = &d;
    if (!ctx_params_ok(p)) return ctx_create_failed(m, p, SKV_ERR_INVALID_ARG);
    if (!(c = calloc(1, sizeof *c))) return ctx_create_failed(m, p, SKV_ERR_NOMEM);
    c->m = m;
    c->n_ctx = p->n_ctx ? p->n_ctx : m->info.n_ctx_train;
    c->max_batch = p->max_batch ? p->max_batch : 512;
    if (c->max_batch > c->n_ctx) c->max_batch = c->n_ctx;
    if ((rc = ctx_kernels(c, p->kernels)) == SKV_OK && p->n_threads > 1 && !(c->pool = skv_pool_create(p->n_threads)))
        rc = SKV_ERR_NOMEM;
    c->kv_f16 = p->kv_cache_type == SKV_KV_CACHE_F16;
    if (rc == SKV_OK && c->kv_f16 && p->kv_quant && p->kv_quant[0]) rc = SKV_ERR_INVALID_ARG;
    if (rc == SKV_OK) rc = ctx_kv_quant(c, p->kv_quant);
    if (rc == SKV_OK) rc = ctx_alloc(c);
    if (rc) {
        skv_ctx_free(c);
        return ctx_create_failed(m, p, rc);
    }
    if (c->n_ctx > m->info.n_ctx_train)
        skv_log(SKV_LOG_WARN, "context of %d positions is beyond the model's trained length %d: positions past %d "
                "are extrapolation, their outputs may degrade (use -c/n_ctx <= %d for the model's quality)",
                c->n_ctx, m->info.n_ctx_train, m->info.n_ctx_train, m->info.n_ctx_train);
    skv_errbox_clear(m->err);
    *out = c;
    return SKV_OK;
}

void skv_ctx_free(skv_ctx *c)
{
    if (!c) return;
    skv_pool_free(c->pool);
    skv_big_free(c->k_cache);
    skv_big_free(c->v_cache);
    skv_big_free(c->k16);
    skv_big_free(c->v16);
    skv_big_free(c->kq_cache);
    skv_big_free(c->vq_cache);
    skv_kvquant_free(c->kvq);
    free(c->rope_cos);
    free(c->rope_sin);
    free(c->rope_tmp);
    free(c->swa_cos);
    free(c->swa_sin);
    free(c->fused);
    free(c->sur_rows);
    skv_big_free(c->x);
    skv_big_free(c->xb);
    skv_big_free(c->q);
    free(c->kk);
    free(c->vv);
    skv_big_free(c->att);
    skv_big_free(c->hb);
    skv_big_free(c->hb2);
    free(c->thread_scratch);
    free(c->kv16_conv);
    free(c->qact);
    free(c);
}

const char *skv_ctx_last_error(const skv_ctx *c) { return c ? c->err.msg : "NULL context"; }

int skv_ctx_set_error(skv_ctx *c, int status, const char *msg)
{
    skv_fail(&c->err, 0, "%s", msg);
    return status;
}
const skv_model *skv_ctx_model(const skv_ctx *c) { return c ? c->m : NULL; }
int skv_ctx_n_pos(const skv_ctx *c) { return c ? c->n_pos : 0; }
int skv_ctx_n_ctx(const skv_ctx *c) { return c ? c->n_ctx : 0; }

int skv_ctx_truncate(skv_ctx *c, int n_pos)
{
    if (!c || n_pos < 0) return c ? skv_ctx_set_error(c, SKV_ERR_INVALID_ARG, "truncate: negative position") : SKV_ERR_INVALID_ARG;
    skv_err_clear(&c->err);
    if (n_pos < c->n_pos) c->n_pos = n_pos;
    if (c->kvq) kvq_truncate(c);
    return SKV_OK;
}

/* ---- parallel matmul ------------------------------------------------------------ */

typedef struct {
    skv_ctx *c;
    const skv_weight *w;
    const float *x;  /* [T][w->K], row stride ldx */
    size_t ldx, T;
    float *y;        /* [T][ldy] */
    size_t ldy;
    const uint8_t *qa; /* x quantized for the integer dot (ops.h skv_qmatmul); NULL: none */
    size_t rows;       /* weight rows per task: ROW_BLOCK, or a multiple of it (task_rows) */
} matmul_job;

/* Weight rows per matmul task. A decode-sized product (T < SMALL_T_ROWS) on several
 * threads gives each task a contiguous span of about N / (threads * SPANS_PER_THREAD) rows:
 * with 16-row tasks the threads took alternate slices of the matrix, so neither streamed
 * its rows (the hardware prefetcher follows one stream; 2 threads decoded slower than 1) and
 * every slice cost a claim on the shared ticket. Only the paths that need no per-thread
 * copy of their rows take spans (the dequantising path's scratch holds ROW_BLOCK rows). Which
 * thread computes which row never changes a result: each row is its own chain (ops.h). */
#define SMALL_T_ROWS 16
#define SPANS_PER_THREAD 4
static size_t task_rows(const skv_ctx *c, const skv_weight *w, const skv_pool *p, size_t T, int has_qa)
{
    int direct = has_qa || w->type == SKV_GGML_F32 || (c->k->matmul_f16 && w->type == SKV_GGML_F16) ||
                 (c->k->matmul_f16 && skv_type_matmul(skv_type_traits_of(w->type), 1));
    size_t threads = (size_t)skv_pool_size(p), span;
    if (!direct || threads < 2 || T >= SMALL_T_ROWS) return ROW_BLOCK;
    span = w->N / (threads * SPANS_PER_THREAD) / ROW_BLOCK * ROW_BLOCK;
    return span > ROW_BLOCK ? span : ROW_BLOCK;
}

static void matmul_task(void *arg, size_t task, int thread)
{
    matmul_job *j = arg;
    const skv_weight *w = j->w;
    size_t r0 = task * j->rows, nr = w->N - r0 < j->rows ? w->N - r0 : j->rows;
    const float *W;
    if (j->qa) {
        if (w->packed) /* repacked at load (model_weights.c): same bits, faster decode */
            skv_qmatmul(j->c->k, j->y + r0, j->ldy, w->type | SKV_QMATMUL_PACKED, w->packed + r0 * w->packed_row_bytes,
                        w->packed_row_bytes, w->K, j->qa, j->T, nr);
        else
            skv_qmatmul(j->c->k, j->y + r0, j->ldy, w->type, w->data + r0 * w->row_bytes, w->row_bytes, w->K, j->qa, j->T, nr);
        return;
    }
    skv_matmul_packed_fn mp = w->packed && j->c->k->matmul_f16 ? skv_type_matmul_packed(skv_type_traits_of(w->type), 1) : NULL;
    if (mp) { /* f16 / bf16 rows packed at load (model_weights.c): same bits, decode reads one stream */
        float *buf = j->c->thread_scratch + (size_t)thread * j->c->scratch_stride; /* ROW_BLOCK * K floats */
        mp(j->y + r0, j->ldy, w->packed + r0 * w->packed_row_bytes, w->K, j->x, j->ldx, j->T, nr, buf);
        return;
    }
    if (w->type == SKV_GGML_F16 && j->c->k->matmul_f16) { /* no f32 copy of the rows */
        float *buf = j->c->thread_scratch + (size_t)thread * j->c->scratch_stride; /* ROW_BLOCK * K floats */
        j->c->k->matmul_f16(j->y + r0, j->ldy, w->data + r0 * w->row_bytes, w->row_bytes, w->K, j->x, j->ldx, j->T, nr,
                            buf);
        return;
    }
    skv_matmul_fn mm = j->c->k->matmul_f16 ? skv_type_matmul(skv_type_traits_of(w->type), 1) : NULL;
    if (mm && w->type != SKV_GGML_F32) { /* bf16: the type's own SIMD product, no f32 copy either */
        float *buf = j->c->thread_scratch + (size_t)thread * j->c->scratch_stride;
        mm(j->y + r0, j->ldy, w->data + r0 * w->row_bytes, w->row_bytes, w->K, j->x, j->ldx, j->T, nr, buf);
        return;
    }
    if (w->type == SKV_GGML_F32) {
        W = (const float *)(const void *)(w->data + r0 * w->row_bytes);
    } else {
        float *buf = j->c->thread_scratch + (size_t)thread * j->c->scratch_stride;
        j->c->k->dequant(w->type, w->data + r0 * w->row_bytes, w->row_bytes, w->K, nr, buf);
        W = buf;
    }
    j->c->k->matmul(j->y + r0, j->ldy, W, w->K, j->x, j->ldx, j->T, nr);
}

/* The activation rows of a batch quantized for the integer dot (ops.h), QUANT_TOKENS rows
 * per task: a multiple of 16, so the AVX-512 level's lane groups of 16 rows fall where a
 * single call puts them, and every row's bytes are those of one call (rows are
 * quantized alone). */
#define QUANT_TOKENS 32

static void quant_task(void *arg, size_t task, int thread)
{
    const matmul_job *j = arg;
    size_t t0 = task * QUANT_TOKENS, n = j->T - t0 < QUANT_TOKENS ? j->T - t0 : QUANT_TOKENS;
    (void)thread;
    skv_qmatmul_quantize(j->c->k, j->w->type, j->x + t0 * j->ldx, j->ldx, n, j->w->K,
                         j->c->qact + t0 * skv_qmatmul_act_bytes(j->w->type, j->w->K));
}

/* y[t][0..N) = W x[t] for t < T */
static void matmul(skv_ctx *c, const skv_weight *w, const float *x, size_t ldx, size_t T, float *y, size_t ldy)
{
    matmul_job j = {c, w, x, ldx, T, y, ldy, NULL, ROW_BLOCK};
    skv_pool *p = c->active ? c->active : w->N * w->K >= POOL_MIN_WEIGHTS ? c->pool : NULL;
    size_t ab = skv_qmatmul_act_bytes(w->type, w->K);
    j.rows = task_rows(c, w, p, T, ab > 0);
    if (ab) { /* quantized weights: integer dot products, one cache-sized block of tokens at a time */
        size_t tb = skv_qmatmul_token_block(w->type, w->K);
        skv_pool_run(T > QUANT_TOKENS ? p : NULL, quant_task, &j, (T + QUANT_TOKENS - 1) / QUANT_TOKENS);
        for (size_t t0 = 0; t0 < T; t0 += tb) {
            j.qa = c->qact + t0 * ab, j.y = y + t0 * ldy, j.T = T - t0 < tb ? T - t0 : tb;
            skv_pool_run(p, matmul_task, &j, (w->N + j.rows - 1) / j.rows);
        }
        return;
    }
    skv_pool_run(p, matmul_task, &j, (w->N + j.rows - 1) / j.rows);
}

/* ---- attention --------------------------------------------------------------------
 * One task = one KV head x a block of tokens: all query heads of the head's group for
 * those tokens (up to SKV_ATTN_MAX_Q rows) go through one kernel call, which shares the
 * K/V loads between them. Token t (absolute position p0+t) attends to rows 0..p0+t.
 * How rows are grouped into calls never changes a result: each row's arithmetic is fixed. */

/* nq query rows of one KV head; row i attends to rows [0, n[i]) of K and V, or (windowed
 * layer) to the last swa_window of them. The plain case is one kernel call; a window or
 * capped scores take each row alone (the same arithmetic per row: see above). */
static void attn_call(const skv_ctx *c, int layer, float *const *out, const float *const *q, const size_t *n,
                      size_t nq, const float *K, const float *V, float *scores)
{
    const skv_arch_params *ap = &c->m->ap;
    size_t hd = (size_t)c->m->info.head_dim, W = (size_t)ap->swa_window;
    int windowed = skv_layer_windowed(c->m, layer);
    if (!windowed && ap->attn_softcap == 0.0f) {
        c->k->attn(out, q, n, nq, K, V, hd, ap->attn_scale, scores, n[nq - 1]);
        return;
    }
    for (size_t i = 0; i < nq; i++) {
        size_t lo = windowed && n[i] > W ? n[i] - W : 0, len = n[i] - lo;
        const float *Ki = K + lo * hd, *Vi = V + lo * hd;
        if (ap->attn_softcap > 0.0f)
            skv_attn_capped_row(c->k, out[i], q[i], len, Ki, Vi, hd, ap->attn_scale, ap->attn_softcap, scores);
        else c->k->attn(out + i, q + i, &len, 1, Ki, Vi, hd, ap->attn_scale, scores, len);
    }
}

/* attn_call over sc's f16 cache (head hk): the plain case reads the binary16 rows in the
 * kernel (attn_f16); windows and capped scores convert the rows first. The conversion
 * scratch follows the scores in the thread's scratch (2 * n_ctx * hd floats). */
static void attn_call16(const skv_ctx *c, const skv_ctx *sc, int layer, int hk, float *const *out,
                        const float *const *q, const size_t *n, size_t nq, float *scores)
{
    const skv_arch_params *ap = &c->m->ap;
    size_t hd = (size_t)c->m->info.head_dim, n_max = n[nq - 1];
    float *K = scores + SKV_ATTN_MAX_Q * (size_t)c->n_ctx + 16, *V = K + (size_t)c->n_ctx * hd;
    if (!skv_layer_windowed(c->m, layer) && ap->attn_softcap == 0.0f) {
        c->k->attn_f16(out, q, n, nq, kv16_ptr(sc->k16, sc, layer, hk), kv16_ptr(sc->v16, sc, layer, hk), hd,
                       ap->attn_scale, scores, n_max, K);
        return;
    }
    skv_kv16_load(sc, layer, 0, hk, 0, n_max, K);
    skv_kv16_load(sc, layer, 1, hk, 0, n_max, V);
    attn_call(c, layer, out, q, n, nq, K, V, scores);
}

typedef struct {
    skv_ctx *c;
    int layer, p0;
    size_t t0, T, per_head; /* first token, tokens; tasks per KV head */
} attn_job;

/* Query rows of one KV head are numbered r = t*g + gi; a task takes SKV_ATTN_MAX_Q of them. */
static void attn_task(void *arg, size_t task, int thread)
{
    attn_job *j = arg;
    skv_ctx *c = j->c;
    const skv_model_info *h = &c->m->info;
    size_t hd = (size_t)h->head_dim, g = (size_t)(h->n_head / h->n_head_kv), Hq = (size_t)h->n_head;
    size_t hk = task / j->per_head, r0 = (task % j->per_head) * SKV_ATTN_MAX_Q, r1 = r0 + SKV_ATTN_MAX_Q, nq = 0;
    const float *q[SKV_ATTN_MAX_Q];
    float *out[SKV_ATTN_MAX_Q];
    size_t n[SKV_ATTN_MAX_Q];
    if (r1 > j->T * g) r1 = j->T * g;
    for (size_t r = r0; r < r1; r++, nq++) {
        size_t t = j->t0 + r / g, row = (t * Hq + hk * g + r % g) * hd;
        q[nq] = c->q + row;
        out[nq] = c->att + row;
        n[nq] = (size_t)j->p0 + t + 1;
    }
    float *scores = c->thread_scratch + (size_t)thread * c->scratch_stride + ROW_BLOCK * c->kmax;
    if (c->kv_f16 && j->T == 1) { /* a decode step: the kernel reads the halves */
        attn_call16(c, c, j->layer, (int)hk, out, q, n, nq, scores);
        return;
    }
    if (c->kv_f16) { /* a batch: the head's rows converted once per thread, then f32 */
        float *K = scores + SKV_ATTN_MAX_Q * (size_t)c->n_ctx + 16, *V = K + (size_t)c->n_ctx * hd;
        skv_kv16_rows(c, thread, j->layer, (int)hk, n[nq - 1], K, V);
        attn_call(c, j->layer, out, q, n, nq, K, V, scores);
        return;
    }
    attn_call(c, j->layer, out, q, n, nq, kv_ptr(attn_cache(c, j->layer, 0), c, j->layer, (int)hk),
              kv_ptr(attn_cache(c, j->layer, 1), c, j->layer, (int)hk), scores);
}

/* Attention of the batch's tokens [t0, t1) (absolute positions p0 + t). */
static void attention(skv_ctx *c, int layer, size_t t0, size_t t1, int p0)
{
    const skv_model_info *h = &c->m->info;
    size_t g = (size_t)(h->n_head / h->n_head_kv), T = t1 - t0;
    attn_job aj = {c, layer, p0, t0, T, (T * g + SKV_ATTN_MAX_Q - 1) / SKV_ATTN_MAX_Q};
    c->kv16_epoch++; /* rows converted by earlier calls may have changed since */
    skv_pool *p = c->active ? c->active : T * ((size_t)p0 + t1) >= POOL_MIN_ATTN ? c->pool : NULL;
    skv_pool_run(p, attn_task, &aj, aj.per_head * (size_t)h->n_head_kv);
}

/* Multi-sequence step: batch row t is the next token of context seq[t] and attends to that
 * context's cache only. One task = one row x one KV head (its query heads in groups of at
 * most SKV_ATTN_MAX_Q); activations and scratch are the lead context's. */
typedef struct {
    skv_ctx *c;            /* lead: activations, kernels, scratch */
    skv_ctx *const *seq;   /* [T] */
    int layer;
    size_t groups;         /* calls per (row, KV head) */
} attn_multi_job;

static void attn_multi_task(void *arg, size_t task, int thread)
{
    attn_multi_job *j = arg;
    skv_ctx *c = j->c;
    const skv_model_info *h = &c->m->info;
    size_t hd = (size_t)h->head_dim, g = (size_t)(h->n_head / h->n_head_kv), Hq = (size_t)h->n_head;
    size_t per_row = (size_t)h->n_head_kv * j->groups, t = task / per_row;
    size_t hk = task % per_row / j->groups, q0 = task % j->groups * SKV_ATTN_MAX_Q, nq = 0;
    const skv_ctx *sc = j->seq[t];
    const float *q[SKV_ATTN_MAX_Q];
    float *out[SKV_ATTN_MAX_Q];
    size_t n[SKV_ATTN_MAX_Q];
    for (size_t gi = q0; gi < g && nq < SKV_ATTN_MAX_Q; gi++, nq++) {
        size_t row = (t * Hq + hk * g + gi) * hd;
        q[nq] = c->q + row;
        out[nq] = c->att + row;
        n[nq] = (size_t)sc->n_pos + 1;
    }
    float *scores = c->thread_scratch + (size_t)thread * c->scratch_stride + ROW_BLOCK * c->kmax;
    if (sc->kv_f16) {
        attn_call16(c, sc, j->layer, (int)hk, out, q, n, nq, scores);
        return;
    }
    attn_call(c, j->layer, out, q, n, nq, kv_ptr(sc->k_cache, sc, j->layer, (int)hk),
              kv_ptr(sc->v_cache, sc, j->layer, (int)hk), scores);
}

static void attention_multi(skv_ctx *c, skv_ctx *const *seq, int layer, size_t T)
{
    const skv_model_info *h = &c->m->info;
    size_t g = (size_t)(h->n_head / h->n_head_kv);
    attn_multi_job j = {c, seq, layer, (g + SKV_ATTN_MAX_Q - 1) / SKV_ATTN_MAX_Q};
    skv_pool_run(c->active, attn_multi_task, &j, T * (size_t)h->n_head_kv * j.groups);
}

/* Attention of a layer whose K and/or V are held quantized, with window W: token p must see
 * rows < max(0, p+1-W) as round trips and rows up to p exact, exactly as in token-by-token
 * decoding. The batch's exact rows are copied into the view, then each token's attention runs
 * after the rows that left its window were replaced. With W = 0 every row is a round trip
 * before any token reads it, so one batched call serves all; with W >= 1 the tokens whose
 * window still covers position 0 share one call and the others go one at a time (their
 * requirements differ). Results never depend on the grouping (see attention above). */
static void kvq_attention(skv_ctx *c, int l, size_t T, int p0)
{
    int w = skv_kvquant_spec(c->kvq)->window, done = c->kvq_done;
    kvq_set_rows(c, l, p0, p0 + (int)T, 0);
    if (w == 0) {
        kvq_set_rows(c, l, done, p0 + (int)T, 1);
        attention(c, l, 0, T, p0);
        return;
    }
    for (size_t t = 0; t < T;) {
        int p = p0 + (int)t, target = p + 1 - w > 0 ? p + 1 - w : 0;
        size_t t_end = t + 1;
        if (target == 0) t_end = (size_t)(w - p0) < T ? (size_t)(w - p0) : T;
        kvq_set_rows(c, l, done, target, 1);
        if (target > done) done = target;
        attention(c, l, t, t_end, p0);
        t = t_end;
    }
}

/* ---- one batch ---------------------------------------------------------------------- */

/* Position of batch row t: consecutive from p0 in one context, or each row's own context's
 * next position in a multi-sequence step (seq != NULL). */
static size_t row_pos(skv_ctx *const *seq, size_t t, int p0)
{
    return seq ? (size_t)seq[t]->n_pos : (size_t)p0 + t;
}

/* RoPE of n_heads heads per batch row; windowed layers with their own base use theirs. */
static void rope_rows(skv_ctx *c, skv_ctx *const *seq, int l, float *x, size_t T, size_t n_heads, int p0)
{
    const skv_model_info *h = &c->m->info;
    size_t hd = (size_t)h->head_dim, np = (size_t)h->rope_dim / 2;
    int own = c->swa_cos && skv_layer_windowed(c->m, l);
    const float *cos_t = own ? c->swa_cos : c->rope_cos, *sin_t = own ? c->swa_sin : c->rope_sin;
    for (size_t t = 0; t < T; t++) {
        size_t pos = row_pos(seq, t, p0);
        for (size_t hh = 0; hh < n_heads; hh++)
            skv_rope_apply(c->m->arch->rope, c->k->rope, x + (t * n_heads + hh) * hd, cos_t + pos * np,
                           sin_t + pos * np, np, c->rope_tmp);
    }
}

/* y[t] = RMSNorm(y[t]) * w for each of T rows of n (in place); nothing when w is absent. */
static void norm_rows(const skv_ctx *c, float *y, const float *w, size_t T, size_t n)
{
    if (!w) return;
    for (size_t r = 0; r < T; r++) c->k->rmsnorm(y + r * n, y + r * n, w, n, c->m->info.norm_eps);
}

/* x[t] += b for each of T rows of n; nothing when b is absent. */
static void bias_rows(const skv_ctx *c, float *x, const float *b, size_t T, size_t n)
{
    if (!b) return;
    for (size_t t = 0; t < T; t++) c->k->add(x + t * n, b, n);
}

/* Columns [c0, c0 + n) of T rows of width ld to a [T][n] array. */
static void split_cols(float *dst, const float *src, size_t ld, size_t c0, size_t n, size_t T)
{
    for (size_t t = 0; t < T; t++) memcpy(dst + t * n, src + t * ld + c0, n * sizeof(float));
}

/* q, kk, vv of the normed rows xb: three matmuls or one fused, biases, per-head Q/K norms;
 * q of rows [r0, T) only where the projections are separate (kk, vv: every row). */
static void qkv_rows(skv_ctx *c, const skv_layer *L, size_t T, size_t r0)
{
    const skv_model_info *h = &c->m->info;
    size_t D = (size_t)h->n_embd, hd = (size_t)h->head_dim;
    size_t Q = (size_t)h->n_head * hd, KV = (size_t)h->n_head_kv * hd;
    if (L->wqkv.data) {
        matmul(c, &L->wqkv, c->xb, D, T, c->fused, Q + 2 * KV);
        split_cols(c->q, c->fused, Q + 2 * KV, 0, Q, T);
        split_cols(c->kk, c->fused, Q + 2 * KV, Q, KV, T);
        split_cols(c->vv, c->fused, Q + 2 * KV, Q + KV, KV, T);
    } else {
        if (r0 < T) matmul(c, &L->wq, c->xb + r0 * D, D, T - r0, c->q + r0 * Q, Q);
        matmul(c, &L->wk, c->xb, D, T, c->kk, KV);
        matmul(c, &L->wv, c->xb, D, T, c->vv, KV);
    }
    bias_rows(c, c->q + r0 * Q, L->bq, T - r0, Q);
    bias_rows(c, c->kk, L->bk, T, KV);
    bias_rows(c, c->vv, L->bv, T, KV);
    norm_rows(c, c->q + r0 * Q, L->q_norm, (T - r0) * (size_t)h->n_head, hd);
    norm_rows(c, c->kk, L->k_norm, T * (size_t)h->n_head_kv, hd);
}

/* The attention block: x += post_norm(wo . attention(rope(qkv(norm(x))))); K and V of every
 * row go to the cache, the rest is computed for rows [r0, T) only (forward_batch: the last
 * layer of a batch whose earlier rows' outputs nobody reads). Each row's values are the same
 * whichever rows run beside it (the kernels' contract), so r0 changes no bit of what is
 * computed. seq != NULL or a quantized-KV layer: r0 = 0. */
static void attn_block(skv_ctx *c, skv_ctx *const *seq, int l, size_t T, int p0, size_t r0)
{
    const skv_model_info *h = &c->m->info;
    const skv_layer *L = &c->m->layers[l];
    size_t D = (size_t)h->n_embd, hd = (size_t)h->head_dim;
    size_t Q = (size_t)h->n_head * hd, KV = (size_t)h->n_head_kv * hd;
    for (size_t t = 0; t < T; t++) c->k->rmsnorm(c->xb + t * D, c->x + t * D, L->attn_norm, D, h->norm_eps);
    qkv_rows(c, L, T, r0);
    if (r0 < T) rope_rows(c, seq, l, c->q + r0 * Q, T - r0, (size_t)h->n_head, p0 + (int)r0);
    rope_rows(c, seq, l, c->kk, T, (size_t)h->n_head_kv, p0);
    for (size_t t = 0; t < T; t++) {
        skv_ctx *dst = seq ? seq[t] : c;
        size_t row = row_pos(seq, t, p0) * hd;
        for (int hh = 0; hh < h->n_head_kv; hh++) {
            const float *kr = c->kk + t * KV + (size_t)hh * hd, *vr = c->vv + t * KV + (size_t)hh * hd;
            if (dst->kv_f16) { /* rounded once, here: attention reads these values */
                skv_kv16_store(kv16_ptr(dst->k16, dst, l, hh) + row, kr, hd);
                skv_kv16_store(kv16_ptr(dst->v16, dst, l, hh) + row, vr, hd);
                continue;
            }
            memcpy(kv_ptr(dst->k_cache, dst, l, hh) + row, kr, hd * sizeof(float));
            memcpy(kv_ptr(dst->v_cache, dst, l, hh) + row, vr, hd * sizeof(float));
        }
    }
    if (r0 == T) return;
    if (seq) attention_multi(c, seq, l, T);
    else if (skv_kvquant_layer_active(c->kvq, l)) kvq_attention(c, l, T, p0);
    else attention(c, l, r0, T, p0);
    matmul(c, &L->wo, c->att + r0 * Q, Q, T - r0, c->xb + r0 * D, D);
    norm_rows(c, c->xb + r0 * D, L->attn_post_norm, T - r0, D);
    c->k->add(c->x + r0 * D, c->xb + r0 * D, (T - r0) * D);
}

/* The FFN block: x += post_norm(down(act(gate) * up)), gate|up from two matmuls or one, for
 * rows [r0, T) of x (hb, hb2 hold them from their first row). */
static void ffn_block(skv_ctx *c, const skv_layer *L, size_t T0, size_t r0)
{
    const skv_model_info *h = &c->m->info;
    size_t D = (size_t)h->n_embd, F = (size_t)h->n_ff, T = T0 - r0;
    float *x = c->x + r0 * D, *xb = c->xb + r0 * D;
    if (!T) return;
    for (size_t t = 0; t < T; t++) c->k->rmsnorm(xb + t * D, x + t * D, L->ffn_norm, D, h->norm_eps);
    if (L->w13.data) {
        matmul(c, &L->w13, xb, D, T, c->fused, 2 * F);
        split_cols(c->hb, c->fused, 2 * F, 0, F, T);
        split_cols(c->hb2, c->fused, 2 * F, F, F, T);
    } else {
        matmul(c, &L->w1, xb, D, T, c->hb, F);
        matmul(c, &L->w3, xb, D, T, c->hb2, F);
    }
    if (c->m->arch->flags & SKV_ARCH_GELU) skv_gelu_mul(c->hb, c->hb2, T * F);
    else c->k->silu_mul(c->hb, c->hb2, T * F);
    matmul(c, &L->w2, c->hb, F, T, xb, D);
    norm_rows(c, xb, L->ffn_post_norm, T, D);
    c->k->add(x, xb, T * D);
}

/* One layer for T batch rows: tokens p0.. of c, or (seq != NULL) one token of each seq[t];
 * beyond K and V, only rows [r0, T) (attn_block). */
static void layer_forward(skv_ctx *c, skv_ctx *const *seq, int l, size_t T, int p0, size_t r0)
{
    if (seq || skv_kvquant_layer_active(c->kvq, l)) r0 = 0;
    attn_block(c, seq, l, T, p0, r0);
    ffn_block(c, &c->m->layers[l], T, r0);
}

/* x[t] = the embedding of tokens[t] (times sqrt(n_embd) where the row says so). */
static void embed_rows(skv_ctx *c, const int32_t *tokens, size_t T)
{
    const skv_weight *e = &c->m->tok_embd;
    size_t D = (size_t)c->m->info.n_embd;
    for (size_t t = 0; t < T; t++) {
        c->k->dequant(e->type, e->data + (size_t)tokens[t] * e->row_bytes, e->row_bytes, e->K, 1, c->x + t * D);
        if (c->m->ap.embd_scale > 0.0f) c->k->scale(c->x + t * D, c->m->ap.embd_scale, D);
    }
}

/* Logits of batch rows [t0, T) into logits (row t0 first): final norm, output matrix,
 * soft-capping where the row caps. */
static void output_rows(skv_ctx *c, size_t t0, size_t T, float *logits)
{
    const skv_model_info *h = &c->m->info;
    size_t D = (size_t)h->n_embd, V = (size_t)h->n_vocab;
    for (size_t t = t0; t < T; t++) c->k->rmsnorm(c->xb + t * D, c->x + t * D, c->m->output_norm, D, h->norm_eps);
    matmul(c, &c->m->output, c->xb + t0 * D, D, T - t0, logits, V);
    if (c->m->ap.final_softcap > 0.0f) skv_softcap(logits, (T - t0) * V, c->m->ap.final_softcap);
}

/* Runs T <= max_batch tokens at positions n_pos.. ; logits rows for tokens [t_first, T). The
 * last layer computes beyond K and V only the rows whose final state is read: [keep, T)
 * (keep = t_first where only logits are wanted, 0 where the caller reads x, T for none;
 * llama.cpp does the same): for 512 tokens and 22 layers, 4% of the work. */
static void forward_batch(skv_ctx *c, const int32_t *tokens, size_t T, size_t t_first, float *logits, size_t keep)
{
    const skv_model_info *h = &c->m->info;
    int p0 = c->n_pos;
    c->active = T >= POOL_MIN_BATCH ? c->pool : NULL;
    embed_rows(c, tokens, T);
    for (int l = 0; l < h->n_layer; l++) layer_forward(c, NULL, l, T, p0, l + 1 == h->n_layer ? keep : 0);
    c->n_pos += (int)T;
    if (c->kvq) {
        int w = skv_kvquant_spec(c->kvq)->window;
        c->kvq_done = c->n_pos > w ? c->n_pos - w : 0;
    }
    if (!logits || t_first >= T) return;
    output_rows(c, t_first, T, logits);
}

/* Layer 0's kk, vv of the T embedded rows in x (engine/layer0.h): norm, projections, RoPE of K. */
static void layer0_rows(skv_ctx *c, size_t T, int p0)
{
    const skv_model_info *h = &c->m->info;
    const skv_layer *L = &c->m->layers[0];
    size_t D = (size_t)h->n_embd, KV = (size_t)h->n_head_kv * (size_t)h->head_dim;
    for (size_t t = 0; t < T; t++) c->k->rmsnorm(c->xb + t * D, c->x + t * D, L->attn_norm, D, h->norm_eps);
    if (L->wqkv.data) {
        qkv_rows(c, L, T, 0);
    } else { /* qkv_rows without Q */
        matmul(c, &L->wk, c->xb, D, T, c->kk, KV);
        matmul(c, &L->wv, c->xb, D, T, c->vv, KV);
        bias_rows(c, c->kk, L->bk, T, KV);
        bias_rows(c, c->vv, L->bv, T, KV);
        norm_rows(c, c->kk, L->k_norm, T * (size_t)h->n_head_kv, (size_t)h->head_dim);
    }
    rope_rows(c, NULL, 0, c->kk, T, (size_t)h->n_head_kv, p0);
}

int skv_ctx_layer0_kv(skv_ctx *c, const int32_t *tokens, size_t n, int p0, float *kv)
{
    if (!c || (!tokens && n) || (n && !kv) || p0 < 0) return c ? skv_ctx_set_error(c, SKV_ERR_INVALID_ARG, "layer0_kv: NULL or negative argument") : SKV_ERR_INVALID_ARG;
    const skv_model_info *h = &c->m->info;
    size_t H = (size_t)h->n_head_kv, hd = (size_t)h->head_dim;
    if (n > (size_t)c->n_ctx - (size_t)p0 || p0 > c->n_ctx) return skv_ctx_set_error(c, SKV_ERR_RANGE, "layer0_kv: positions past the context");
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= h->n_vocab) return skv_ctx_set_error(c, SKV_ERR_INVALID_ARG, "layer0_kv: token outside the vocabulary");
    for (size_t done = 0, T; done < n; done += T) {
        T = n - done < (size_t)c->max_batch ? n - done : (size_t)c->max_batch;
        c->active = T >= POOL_MIN_BATCH ? c->pool : NULL;
        embed_rows(c, tokens + done, T);
        layer0_rows(c, T, p0 + (int)done);
        for (size_t t = 0; t < T; t++)
            for (size_t hh = 0; hh < H; hh++) {
                memcpy(kv + ((hh * n) + done + t) * hd, c->kk + (t * H + hh) * hd, hd * sizeof(float));
                memcpy(kv + (((H + hh) * n) + done + t) * hd, c->vv + (t * H + hh) * hd, hd * sizeof(float));
            }
    }
    return SKV_OK;
}

static int check_tokens(skv_ctx *c, const int32_t *tokens, size_t n)
{
    if ((size_t)c->n_pos + n > (size_t)c->n_ctx) {
        skv_fail(&c->err, 0, "context full: %d positions + %zu tokens exceed the capacity of %d", c->n_pos,
                 n, c->n_ctx);
        return SKV_ERR_RANGE;
    }
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->m->info.n_vocab) {
            skv_fail(&c->err, 0, "token id %d at index %zu is outside the vocabulary [0, %d)", tokens[i], i,
                     c->m->info.n_vocab);
            return SKV_ERR_INVALID_ARG;
        }
    return SKV_OK;
}

int skv_ctx_prefill(skv_ctx *c, const int32_t *tokens, size_t n, int logits_mode, float *logits)
{
    int rc;
    if (!c || (!tokens && n) || logits_mode < SKV_LOGITS_NONE || logits_mode > SKV_LOGITS_ALL ||
        (logits_mode != SKV_LOGITS_NONE && !logits))
        return c ? skv_ctx_set_error(c, SKV_ERR_INVALID_ARG, "prefill: NULL tokens or logits, or a bad logits mode")
                 : SKV_ERR_INVALID_ARG;
    skv_err_clear(&c->err);
    if ((rc = check_tokens(c, tokens, n))) return rc;
    size_t V = (size_t)c->m->info.n_vocab;
    for (size_t done = 0; done < n;) {
        size_t T = n - done < (size_t)c->max_batch ? n - done : (size_t)c->max_batch;
        int last_chunk = done + T == n;
        if (logits_mode == SKV_LOGITS_ALL) forward_batch(c, tokens + done, T, 0, logits + done * V, 0);
        else if (logits_mode == SKV_LOGITS_LAST && last_chunk) forward_batch(c, tokens + done, T, T - 1, logits, T - 1);
        else forward_batch(c, tokens + done, T, T, NULL, T);
        done += T;
    }
    return SKV_OK;
}

/* Logits rows skv_ctx_prefill_surprisal holds at once: its scratch is bounded by this (or
 * one row of a larger vocabulary), never n x n_vocab. */
#define SUR_SCRATCH_BYTES (4u << 20)
#define SUR_BLOCK_ROWS 64u /* and at most this many: the output matmul is efficient by then */

/* The context's logits-rows scratch (kept: a server's slot uses it every request), *R rows
 * of n_vocab floats; NULL when out of memory. */
static float *sur_scratch(skv_ctx *c, size_t *R)
{
    size_t V = (size_t)c->m->info.n_vocab, r = SUR_SCRATCH_BYTES / (V * sizeof(float));
    *R = r < 1 ? 1 : r > SUR_BLOCK_ROWS ? SUR_BLOCK_ROWS : r;
    if (!c->sur_rows) c->sur_rows = malloc(*R * V * sizeof *c->sur_rows);
    return c->sur_rows;
}

/* The logits of batch rows [0, T) (final hidden states in x) in blocks of R rows of
 * scratch: each row's surprisal of the token after it (global index base + r), the last
 * row of the call (global n - 1) into last. */
static void surprisal_rows(skv_ctx *c, size_t T, size_t base, const int32_t *tokens, size_t n, float *scratch,
                           size_t R, float *sur, float *last)
{
    size_t V = (size_t)c->m->info.n_vocab;
    for (size_t r0 = 0; r0 < T; r0 += R) {
        size_t r1 = T - r0 < R ? T : r0 + R;
        output_rows(c, r0, r1, scratch); /* row t lands at scratch + (t - r0) * V */
        for (size_t t = r0; t < r1; t++) {
            size_t g = base + t;
            const float *row = scratch + (t - r0) * V;
            if (g + 1 < n) sur[g] = (float)skv_token_bits(row, (int)V, tokens[g + 1]);
            else if (last) memcpy(last, row, V * sizeof *row);
        }
    }
}

int skv_ctx_prefill_surprisal(skv_ctx *c, const int32_t *tokens, size_t n, float *sur, float *last_logits)
{
    int rc;
    if (!c || (!tokens && n) || (!sur && n > 1))
        return c ? skv_ctx_set_error(c, SKV_ERR_INVALID_ARG, "prefill_surprisal: NULL tokens or sur") : SKV_ERR_INVALID_ARG;
    skv_err_clear(&c->err);
    if ((rc = check_tokens(c, tokens, n))) return rc;
    size_t R = 1;
    if (n && !sur_scratch(c, &R)) return skv_ctx_set_error(c, SKV_ERR_NOMEM, "prefill_surprisal: out of memory");
    float *scratch = c->sur_rows; /* kept: a server's slot prefills with it every request */
    for (size_t done = 0; done < n;) {
        size_t T = n - done < (size_t)c->max_batch ? n - done : (size_t)c->max_batch;
        forward_batch(c, tokens + done, T, T, NULL, 0); /* x: the rows' final residual stream */
        surprisal_rows(c, T, done, tokens, n, scratch, R, sur, last_logits);
        done += T;
    }
    return SKV_OK;
}

/* The logits of R rows of final hidden states (after the output norm), as output_rows
 * computes them from the same rows. */
static void hidden_logits(skv_ctx *c, const float *hidden, size_t R, float *logits)
{
    size_t D = (size_t)c->m->info.n_embd, V = (size_t)c->m->info.n_vocab;
    matmul(c, &c->m->output, hidden, D, R, logits, V);
    if (c->m->ap.final_softcap > 0.0f) skv_softcap(logits, R * V, c->m->ap.final_softcap);
}

/* skv_ctx_prefill_embd and skv_ctx_prefill_hidden: the rows' final hidden states, and the
 * last row's logits through the output matrix when last_logits is set. */
static int prefill_normed(skv_ctx *c, const int32_t *tokens, size_t n, float *embd, float *last_logits)
{
    int rc;
    if (!c || (!tokens && n) || (!embd && n))
        return c ? skv_ctx_set_error(c, SKV_ERR_INVALID_ARG, "prefill_embd: NULL tokens or embd") : SKV_ERR_INVALID_ARG;
    skv_err_clear(&c->err);
    if ((rc = check_tokens(c, tokens, n))) return rc;
    const skv_model_info *h = &c->m->info;
    size_t D = (size_t)h->n_embd;
    for (size_t done = 0; done < n;) {
        size_t T = n - done < (size_t)c->max_batch ? n - done : (size_t)c->max_batch;
        forward_batch(c, tokens + done, T, T, NULL, 0); /* x: the rows' final residual stream */
        for (size_t t = 0; t < T; t++)
            c->k->rmsnorm(embd + (done + t) * D, c->x + t * D, c->m->output_norm, D, h->norm_eps);
        done += T;
    }
    if (n && last_logits) {
        c->active = NULL; /* one row: as a decode step runs it */
        hidden_logits(c, embd + (n - 1) * D, 1, last_logits);
    }
    return SKV_OK;
}

int skv_ctx_prefill_embd(skv_ctx *c, const int32_t *tokens, size_t n, float *embd)
{
    return prefill_normed(c, tokens, n, embd, NULL);
}

int skv_ctx_prefill_hidden(skv_ctx *c, const int32_t *tokens, size_t n, float *hidden, float *last_logits)
{
    return prefill_normed(c, tokens, n, hidden, last_logits);
}

int skv_ctx_hidden_surprisal(skv_ctx *c, const float *hidden, size_t n, const int32_t *next, float *sur)
{
    if (!c || (n && (!hidden || !next || !sur)))
        return c ? skv_ctx_set_error(c, SKV_ERR_INVALID_ARG, "hidden_surprisal: NULL hidden, next or sur")
                 : SKV_ERR_INVALID_ARG;
    skv_err_clear(&c->err);
    size_t D = (size_t)c->m->info.n_embd, V = (size_t)c->m->info.n_vocab;
    for (size_t i = 0; i < n; i++)
        if (next[i] < 0 || (size_t)next[i] >= V)
            return skv_ctx_set_error(c, SKV_ERR_INVALID_ARG, "hidden_surprisal: token outside the vocabulary");
    size_t R = 1;
    if (n && !sur_scratch(c, &R)) return skv_ctx_set_error(c, SKV_ERR_NOMEM, "hidden_surprisal: out of memory");
    R = R > (size_t)c->max_batch ? (size_t)c->max_batch : R; /* the activation scratch holds max_batch rows */
    for (size_t r0 = 0; r0 < n; r0 += R) {
        size_t k = n - r0 < R ? n - r0 : R;
        c->active = k >= POOL_MIN_BATCH ? c->pool : NULL;
        hidden_logits(c, hidden + r0 * D, k, c->sur_rows);
        for (size_t t = 0; t < k; t++)
            sur[r0 + t] = (float)skv_token_bits(c->sur_rows + t * V, (int)V, next[r0 + t]);
    }
    return SKV_OK;
}

int skv_ctx_decode(skv_ctx *c, int32_t token, float *logits)
{
    return skv_ctx_prefill(c, &token, 1, logits ? SKV_LOGITS_LAST : SKV_LOGITS_NONE, logits);
}

/* The lead context runs the step: it must hold the longest context (its RoPE tables and
 * attention scratch are sized by n_ctx) and a batch of n rows. */
static int multi_check(skv_ctx *const *ctxs, const int32_t *tokens, size_t n, skv_ctx **lead)
{
    skv_ctx *c = ctxs[0], *e = ctxs[0]; /* errors are reported on ctxs[0] */
    for (size_t i = 0; i < n; i++) {
        if (!ctxs[i] || ctxs[i]->m != c->m) return SKV_ERR_INVALID_ARG;
        if (ctxs[i]->n_ctx > c->n_ctx) c = ctxs[i];
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < i; k++)
            if (ctxs[k] == ctxs[i]) {
                skv_fail(&e->err, 0, "decode_multi: context %zu appears twice (entries %zu and %zu)", i, k, i);
                return SKV_ERR_INVALID_ARG;
            }
        if (ctxs[i]->kvq) {
            skv_fail(&e->err, 0, "decode_multi: context %zu has a quantized KV cache (not supported)", i);
            return SKV_ERR_UNSUPPORTED;
        }
        if (ctxs[i]->kv_f16 != ctxs[0]->kv_f16) { /* the lead's scratch is sized for its own type */
            skv_fail(&e->err, 0, "decode_multi: context %zu's KV cache type differs from context 0's", i);
            return SKV_ERR_UNSUPPORTED;
        }
        int rc = check_tokens(ctxs[i], tokens + i, 1);
        if (rc) {
            skv_fail(&e->err, 0, "decode_multi: context %zu: %.160s", i, ctxs[i]->err.msg); /* e may be ctxs[i] */
            return rc;
        }
    }
    *lead = c;
    return SKV_OK;
}

/* Rows [0, n) of a multi step, n <= the lead's max_batch. */
static void multi_chunk(skv_ctx *c, skv_ctx *const *ctxs, const int32_t *tokens, size_t n, float *logits)
{
    c->active = n >= POOL_MIN_BATCH ? c->pool : NULL;
    embed_rows(c, tokens, n);
    for (int l = 0; l < c->m->info.n_layer; l++) layer_forward(c, ctxs, l, n, 0, 0);
    for (size_t t = 0; t < n; t++) ctxs[t]->n_pos++;
    if (logits) output_rows(c, 0, n, logits);
}

int skv_ctx_decode_multi(skv_ctx *const *ctxs, const int32_t *tokens, size_t n, float *logits)
{
    skv_ctx *c;
    int rc;
    if (!ctxs || !tokens || n == 0) return n == 0 && ctxs && tokens ? SKV_OK : SKV_ERR_INVALID_ARG;
    if (ctxs[0]) skv_err_clear(&ctxs[0]->err);
    if ((rc = multi_check(ctxs, tokens, n, &c))) return rc;
    size_t B = (size_t)c->max_batch, V = (size_t)c->m->info.n_vocab;
    for (size_t r = 0; r < n; r += B) /* rows are independent: chunking changes nothing */
        multi_chunk(c, ctxs + r, tokens + r, n - r < B ? n - r : B, logits ? logits + r * V : NULL);
    return SKV_OK;
}
