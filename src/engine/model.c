/* Model loading (GGUF and llama2.c checkpoints), validation, info, fingerprint. */
#include "engine/model.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/cpu.h"

#include "core/detmath.h"
#include "core/f16.h"
#include "core/log.h"
#include "engine/ops.h"
#include "engine/vocab_load.h"
#include "quant/repack.h"

#define MAX_DIM (1 << 20)

void skv_weight_row(const skv_weight *w, size_t row, float *dst)
{
    skv_dequant_rows_simd(1, w->type, w->data + row * w->row_bytes, w->row_bytes, w->K, 1, dst); /* same values */
}

/* ---- common validation --------------------------------------------------- */

static int check_hparams(const skv_model_info *h, char *err, size_t cap)
{
    if (h->n_layer < 1 || h->n_layer > 4096 || h->n_embd < 1 || h->n_embd > MAX_DIM || h->n_head < 1 ||
        h->n_head > 4096 || h->n_head_kv < 1 || h->n_head_kv > h->n_head || h->n_head % h->n_head_kv ||
        h->head_dim < 2 || h->head_dim > 4096 || h->n_ff < 1 || h->n_ff > MAX_DIM || h->n_vocab < 1 ||
        h->n_vocab > (1 << 24) || h->n_ctx_train < 1 || h->n_ctx_train > (1 << 24))
        return skv_errf(err, cap, SKV_ERR_FORMAT,
                        "implausible hyper-parameters: layers %d, width %d, heads %d/%d, head_dim %d, ffn %d, vocab %d, ctx %d",
                        h->n_layer, h->n_embd, h->n_head, h->n_head_kv, h->head_dim, h->n_ff, h->n_vocab,
                        h->n_ctx_train);
    if (h->rope_dim < 2 || h->rope_dim > h->head_dim || (h->rope_dim & 1))
        return skv_errf(err, cap, SKV_ERR_FORMAT, "rope dimension %d invalid for head_dim %d", h->rope_dim,
                        h->head_dim);
    if (!(h->rope_base > 0.0f) || !isfinite(h->rope_base) || !(h->norm_eps > 0.0f) || !(h->norm_eps < 1.0f))
        return skv_errf(err, cap, SKV_ERR_FORMAT, "invalid rope base %g or norm epsilon %g", (double)h->rope_base,
                        (double)h->norm_eps);
    return SKV_OK;
}

/* freq[i] = base^(-2i/rope_dim) / factor[i] for the rope_dim/2 pairs (factors optional). */
static double *rope_freqs(const skv_model *m, float base, const float *freq_factors)
{
    int np = m->info.rope_dim / 2;
    double *f = malloc((size_t)np * sizeof *f);
    if (!f) return NULL;
    for (int i = 0; i < np; i++) {
        /* base^(-2i/d) with our own double maths (detmath.c): the same bits on every machine */
        f[i] = skv_det_pow((double)base, -2.0 * i / (double)m->info.rope_dim);
        if (freq_factors) f[i] /= (double)freq_factors[i];
    }
    return f;
}

static int init_rope(skv_model *m, const float *freq_factors, char *err, size_t cap)
{
    if (!(m->rope_freq = rope_freqs(m, m->info.rope_base, freq_factors)))
        return skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
    return SKV_OK;
}

/* An f32 copy of a vector tensor (norm weights): the forward pass reads them often. */
static float *vector_copy(const skv_weight *w, char *err, size_t cap, int *rc)
{
    float *v = malloc(w->K * sizeof *v);
    if (!v) {
        *rc = skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    skv_weight_row(w, 0, v);
    return v;
}

/* ---- GGUF ------------------------------------------------------------------ */

static int gguf_weight(const skv_gguf *g, const char *name, size_t K, size_t N, skv_weight *w, char *err, size_t cap)
{
    const skv_gguf_tensor *t = skv_gguf_find_tensor(g, name);
    if (!t) return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: missing tensor '%s'", name);
    if (t->ne[0] != K || t->ne[1] != N || t->ne[2] != 1 || t->ne[3] != 1)
        return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF tensor '%s' has shape [%llu, %llu, %llu], expected [%zu, %zu]",
                        name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                        (unsigned long long)t->ne[2], K, N);
    if (!skv_dequant_supported(t->type)) {
        char names[160];
        skv_type_readable_names(names, sizeof names);
        return skv_errf(err, cap, SKV_ERR_UNSUPPORTED, "GGUF tensor '%s' has type %s; seqkv supports %s", name,
                        skv_ggml_type_name(t->type), names);
    }
    if (t->type == SKV_GGML_F32 && ((uintptr_t)t->data & 3))
        return skv_errf(err, cap, SKV_ERR_UNSUPPORTED,
                        "GGUF tensor '%s': f32 data at an offset that is not a multiple of 4 (general.alignment too small)",
                        name);
    *w = (skv_weight){.type = t->type, .data = t->data, .K = K, .N = N, .row_bytes = t->nbytes / N};
    return SKV_OK;
}

static int gguf_i(const skv_gguf *g, const char *key, int *out, int dflt, int required, char *err, size_t cap)
{
    int64_t v;
    int rc = skv_gguf_get_int(g, key, &v);
    if (rc == SKV_ERR_RANGE && !required) {
        *out = dflt;
        return SKV_OK;
    }
    if (rc == SKV_ERR_RANGE) return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: missing metadata '%s'", key);
    if (rc || v < 0 || v > INT32_MAX)
        return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: metadata '%s' is not a valid integer", key);
    *out = (int)v;
    return SKV_OK;
}

static int gguf_f(const skv_gguf *g, const char *key, float *out, float dflt, char *err, size_t cap)
{
    double v;
    int rc = skv_gguf_get_float(g, key, &v);
    if (rc == SKV_ERR_RANGE) {
        *out = dflt;
        return SKV_OK;
    }
    if (rc) return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: metadata '%s' is not a number", key);
    *out = (float)v;
    return SKV_OK;
}

/* Arch-prefixed metadata ("llama.block_count"): the key prefix is the row's name. */
static const char *arch_key(const skv_model *m, const char *suffix, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.%s", m->arch->name, suffix);
    return buf;
}

static int arch_i(const skv_model *m, const char *suffix, int *out, int dflt, int required, char *err, size_t cap)
{
    char key[128];
    return gguf_i(m->gguf, arch_key(m, suffix, key, sizeof key), out, dflt, required, err, cap);
}

static int arch_f(const skv_model *m, const char *suffix, float *out, float dflt, char *err, size_t cap)
{
    char key[128];
    return gguf_f(m->gguf, arch_key(m, suffix, key, sizeof key), out, dflt, err, cap);
}

/* general.architecture picks the table row; general.name is only shown. */
static int gguf_arch(skv_model *m, char *err, size_t cap)
{
    skv_gguf_str s;
    char names[256];
    if (skv_gguf_get_str(m->gguf, "general.architecture", &s) != SKV_OK)
        return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: missing general.architecture");
    if (!(m->arch = skv_arch_find(s.ptr, s.len))) {
        skv_arch_list(names, sizeof names);
        return skv_errf(err, cap, SKV_ERR_UNSUPPORTED, "architecture '%.*s' is not supported (seqkv runs: %s)",
                        (int)(s.len > 40 ? 40 : s.len), s.ptr, names);
    }
    snprintf(m->info.arch, sizeof m->info.arch, "%s", m->arch->name);
    if (skv_gguf_get_str(m->gguf, "general.name", &s) == SKV_OK)
        snprintf(m->info.name, sizeof m->info.name, "%.*s", (int)(s.len > 90 ? 90 : s.len), s.ptr);
    return SKV_OK;
}

static int gguf_sizes(skv_model *m, char *err, size_t cap)
{
    skv_model_info *h = &m->info;
    int rc, key_len = 0, val_len = 0;
    if ((rc = arch_i(m, "block_count", &h->n_layer, 0, 1, err, cap)) ||
        (rc = arch_i(m, "embedding_length", &h->n_embd, 0, 1, err, cap)) ||
        (rc = arch_i(m, "feed_forward_length", &h->n_ff, 0, 1, err, cap)) ||
        (rc = arch_i(m, "attention.head_count", &h->n_head, 0, 1, err, cap)) ||
        (rc = arch_i(m, "attention.head_count_kv", &h->n_head_kv, h->n_head, 0, err, cap)) ||
        (rc = arch_i(m, "context_length", &h->n_ctx_train, 2048, 0, err, cap)))
        return rc;
    if (h->n_head < 1) return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: head count is 0");
    if ((rc = arch_i(m, "attention.key_length", &key_len, h->n_embd / h->n_head, 0, err, cap)) ||
        (rc = arch_i(m, "attention.value_length", &val_len, key_len, 0, err, cap)))
        return rc;
    if (key_len != val_len)
        return skv_errf(err, cap, SKV_ERR_UNSUPPORTED, "different key (%d) and value (%d) head sizes", key_len, val_len);
    h->head_dim = key_len;
    return SKV_OK;
}

/* RoPE position scaling as llama.cpp reads it: rope.scaling.type absent means linear;
 * the factor is rope.scaling.factor, else the older rope.scale_linear; 0 or absent: none. */
static int gguf_rope_scaling(skv_model *m, char *err, size_t cap)
{
    skv_gguf_str s;
    char key[128];
    float factor = 0.0f;
    int rc;
    m->rope_scale = 1.0;
    if (skv_gguf_get_str(m->gguf, arch_key(m, "rope.scaling.type", key, sizeof key), &s) == SKV_OK) {
        if (s.len == 4 && !memcmp(s.ptr, "none", 4)) {
            if (arch_f(m, "rope.scaling.factor", &factor, 0.0f, NULL, 0) == SKV_OK && factor != 0.0f && factor != 1.0f)
                skv_log(SKV_LOG_WARN, "GGUF: %s.rope.scaling.factor %g ignored (rope.scaling.type is 'none')",
                        m->info.arch, (double)factor);
            return SKV_OK;
        }
        if (!(s.len == 6 && !memcmp(s.ptr, "linear", 6)))
            return skv_errf(err, cap, SKV_ERR_UNSUPPORTED, "rope scaling '%.*s' is not supported (none, linear are)",
                            (int)(s.len > 20 ? 20 : s.len), s.ptr);
    }
    if ((rc = arch_f(m, "rope.scaling.factor", &factor, 0.0f, err, cap))) return rc;
    if (factor == 0.0f && (rc = arch_f(m, "rope.scale_linear", &factor, 0.0f, err, cap))) return rc;
    if (factor == 0.0f) return SKV_OK;
    if (!(factor >= 1.0f && factor < 1e6f))
        return skv_errf(err, cap, SKV_ERR_FORMAT, "bad rope scaling factor %g (1 or more, or 0 for none)", (double)factor);
    m->rope_scale = 1.0 / factor;
    return SKV_OK;
}

/* Rotary dimension, base and scaling (none or linear), and the RMSNorm epsilon. */
static int gguf_rope(skv_model *m, char *err, size_t cap)
{
    skv_model_info *h = &m->info;
    int rc;
    if ((rc = arch_i(m, "rope.dimension_count", &h->rope_dim, h->head_dim, 0, err, cap)) ||
        (rc = arch_f(m, "rope.freq_base", &h->rope_base, 10000.0f, err, cap)) ||
        (rc = arch_f(m, "attention.layer_norm_rms_epsilon", &h->norm_eps, 1e-5f, err, cap)))
        return rc;
    return gguf_rope_scaling(m, err, cap);
}

/* What every row starts from: llama's attention scale and nothing else. */
static void arch_defaults(skv_model *m)
{
    memset(&m->ap, 0, sizeof m->ap);
    m->ap.attn_scale = 1.0f / sqrtf((float)m->info.head_dim);
    m->ap.rope_mscale = 1.0;
}

static int finite_in(float v, float lo, float hi) { return isfinite(v) && v >= lo && v < hi; }

/* Sliding-window layers: the window, the layer pattern and their own RoPE base. */
static int gguf_swa(skv_model *m, char *err, size_t cap)
{
    const skv_arch *a = m->arch;
    skv_arch_params *p = &m->ap;
    float base;
    int rc;
    if ((rc = arch_i(m, "attention.sliding_window", &p->swa_window, a->swa_window, 0, err, cap)) ||
        (rc = arch_i(m, "attention.sliding_window_pattern", &p->swa_period, a->swa_period, 0, err, cap)))
        return rc;
    if (p->swa_period > 4096) return skv_errf(err, cap, SKV_ERR_FORMAT, "sliding window pattern %d is implausible", p->swa_period);
    if (p->swa_window == 0) return SKV_OK;
    if ((rc = arch_f(m, "rope.freq_base_swa", &base, a->swa_rope_base > 0.0f ? a->swa_rope_base : m->info.rope_base, err, cap)))
        return rc;
    if (!finite_in(base, 1e-3f, 1e30f)) return skv_errf(err, cap, SKV_ERR_FORMAT, "invalid sliding-window rope base %g", (double)base);
    p->rope_scale_swa = a->swa_rope_base > 0.0f ? 1.0 : m->rope_scale;
    if (base == m->info.rope_base && p->rope_scale_swa == m->rope_scale) return SKV_OK; /* shares the tables */
    if (!(p->rope_freq_swa = rope_freqs(m, base, NULL))) return skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
    return SKV_OK;
}

/* The row's extra steps and their hyper-parameters (arch.h SKV_ARCH_*). */
static int gguf_arch_params(skv_model *m, char *err, size_t cap)
{
    const skv_arch *a = m->arch;
    skv_arch_params *p = &m->ap;
    float mscale = 1.0f;
    int rc = SKV_OK;
    arch_defaults(m);
    if (a->flags & SKV_ARCH_EMBD_SCALE) p->embd_scale = sqrtf((float)m->info.n_embd);
    if (a->wide_scale_layers && m->info.n_layer == a->wide_scale_layers)
        p->attn_scale = 1.0f / sqrtf((float)(m->info.n_embd / m->info.n_head));
    if (((a->flags & SKV_ARCH_ATTN_SOFTCAP) &&
         (rc = arch_f(m, "attn_logit_softcapping", &p->attn_softcap, a->attn_softcap, err, cap))) ||
        ((a->flags & SKV_ARCH_FINAL_SOFTCAP) &&
         (rc = arch_f(m, "final_logit_softcapping", &p->final_softcap, a->final_softcap, err, cap))) ||
        ((a->flags & SKV_ARCH_ROPE_SHORT) && (rc = arch_f(m, "rope.scaling.attn_factor", &mscale, 1.0f, err, cap))))
        return rc;
    if (!finite_in(p->attn_softcap, 0.0f, 1e6f) || !finite_in(p->final_softcap, 0.0f, 1e6f) ||
        !finite_in(mscale, 1e-3f, 1e3f))
        return skv_errf(err, cap, SKV_ERR_FORMAT, "invalid soft-capping (%g, %g) or rope attention factor %g",
                        (double)p->attn_softcap, (double)p->final_softcap, (double)mscale);
    p->rope_mscale = (double)mscale;
    return (a->flags & SKV_ARCH_SWA) ? gguf_swa(m, err, cap) : SKV_OK;
}

int skv_layer_windowed(const skv_model *m, int l)
{
    int P = m->ap.swa_period;
    return m->ap.swa_window > 0 && (P == 0 || l % P < P - 1);
}

static int gguf_hparams(skv_model *m, char *err, size_t cap)
{
    uint32_t et;
    size_t n;
    int rc;
    if ((rc = gguf_arch(m, err, cap)) || (rc = gguf_sizes(m, err, cap)) || (rc = gguf_rope(m, err, cap))) return rc;
    if (skv_gguf_get_arr(m->gguf, "tokenizer.ggml.tokens", &et, &n) != SKV_OK || et != SKV_GGUF_STRING || n == 0 ||
        n > (1u << 24))
        return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: missing or invalid tokenizer.ggml.tokens");
    m->info.n_vocab = (int)n;
    if ((rc = check_hparams(&m->info, err, cap))) return rc;
    return gguf_arch_params(m, err, cap);
}

static int gguf_tokenizer(skv_model *m, char *err, size_t cap)
{
    return skv_vocab_from_gguf(m->gguf, &m->tok, err, cap);
}

/* ---- layer tensors, by the table (arch.h) -------------------------------------- */

static skv_weight *layer_matrix(skv_layer *L, const skv_tensor_desc *d)
{
    return (skv_weight *)(void *)((char *)L + d->field);
}

static float **layer_vector(skv_layer *L, const skv_tensor_desc *d)
{
    return (float **)(void *)((char *)L + d->field);
}

static int is_vector(const skv_tensor_desc *d) { return d->n == SKV_DIM_1; }

/* Stores w (a view of tensor t of layer L) in its field: matrices as the view, vectors
 * as an f32 copy of their k values. */
static int layer_store(skv_layer *L, skv_layer_tensor t, const skv_weight *w, char *err, size_t cap)
{
    const skv_tensor_desc *d = &skv_layer_tensors[t];
    int rc = SKV_OK;
    if (!is_vector(d)) *layer_matrix(L, d) = *w;
    else if (!(*layer_vector(L, d) = vector_copy(w, err, cap, &rc))) return rc;
    return SKV_OK;
}

static const void *layer_cfield(const skv_layer *L, const skv_tensor_desc *d)
{
    return (const char *)L + d->field;
}

/* Tensor t of layer L is present (an optional one the file lacked is not). */
static int layer_has(const skv_layer *L, skv_layer_tensor t)
{
    const skv_tensor_desc *d = &skv_layer_tensors[t];
    if (is_vector(d)) return *(float *const *)layer_cfield(L, d) != NULL;
    return ((const skv_weight *)layer_cfield(L, d))->data != NULL;
}

static void layer_free(skv_layer *L)
{
    for (int t = 0; t < SKV_LT_COUNT; t++)
        if (is_vector(&skv_layer_tensors[t])) free(*layer_vector(L, &skv_layer_tensors[t]));
        else {
            skv_weight *w = layer_matrix(L, &skv_layer_tensors[t]);
            free((void *)(uintptr_t)w->packed);
            if (w->resident) free((void *)(uintptr_t)w->data);
        }
}

/* ---- repacked weights (quant/repack.h) ----------------------------------------------
 * Where the CPU has AVX2, matrices of a type with a packed form (repack.h: every type with
 * an integer dot) get a packed copy at load for the decode kernels
 * (SEQKV_REPACK=0: none); the file's pages they came from are dropped from the process
 * (madvise: they read back from the file if touched again, e.g. by the fingerprint), so
 * memory stays about one copy of the weights. */

static void drop_pages(const uint8_t *p, size_t n)
{
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p, lo, hi;
    if (ps <= 0) return;
    lo = (a + (uintptr_t)ps - 1) / (uintptr_t)ps * (uintptr_t)ps;
    hi = (a + n) / (uintptr_t)ps * (uintptr_t)ps;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

#define HUGE_PAGE ((size_t)2 << 20)
#define PACK_CHUNK_ROWS 1024 /* packed and dropped a chunk at a time: the file pages never pile up */

/* n bytes aligned to huge pages (fewer faults at load, fewer TLB misses in decode), or NULL. */
static uint8_t *packed_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, n)) return NULL;
#ifdef MADV_HUGEPAGE
    if (n >= HUGE_PAGE) (void)madvise(p, n / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE);
#endif
    return p;
}

static void repack_weight(skv_weight *w)
{
    size_t prb = skv_pack_row_bytes(w->type, w->K);
    uint8_t *p;
    if (!w->data || !prb || w->N % SKV_PACK_ROWS || w->packed || !(p = packed_alloc(prb * w->N))) return; /* keeps the file's rows */
    for (size_t r = 0; r < w->N; r += PACK_CHUNK_ROWS) {
        size_t n = w->N - r < PACK_CHUNK_ROWS ? w->N - r : PACK_CHUNK_ROWS;
        skv_pack_rows(w->type, w->data + r * w->row_bytes, w->row_bytes, w->K, n, p + r * prb);
        drop_pages(w->data + r * w->row_bytes, n * w->row_bytes);
    }
    w->packed = p;
    w->packed_row_bytes = prb;
    drop_pages(w->data, w->row_bytes * w->N); /* the pages the chunks shared */
}

/* ---- resident weights ------------------------------------------------------------------
 * Matrices read as they are (f16, f32, q8_0, ...) are copied at load out of the file's
 * mapping into anonymous memory on huge pages when the model is large, and the file's
 * pages dropped as for the repacked ones: a 1.1B F16 model's prefill pass of 33 tokens
 * took 0.73 s reading its weights from the page cache's 4 KiB pages and ~0.55 s from an
 * anonymous copy (2026-12-04, AMD EPYC; the same kernel over 2 GB of either kind: 44 vs
 * 33 ns per 2048-column row and token). SEQKV_RESIDENT=0 keeps the file's pages, =1
 * copies whatever the size. */
#define RESIDENT_MIN_BYTES ((size_t)256 << 20) /* below this the page cache's pages measured as fast */

static size_t matrix_bytes(const skv_weight *w) { return w->data && !w->packed ? w->row_bytes * w->N : 0; }

static int resident_weight(skv_weight *w)
{
    size_t n = matrix_bytes(w);
    uint8_t *p;
    if (!n || !(p = packed_alloc(n))) return 0; /* keeps the file's rows */
    for (size_t o = 0; o < n; o += HUGE_PAGE) {
        size_t k = n - o < HUGE_PAGE ? n - o : HUGE_PAGE;
        memcpy(p + o, w->data + o, k);
        drop_pages(w->data + o, k);
    }
    drop_pages(w->data, n); /* the pages the pieces shared */
    w->data = p;
    w->resident = 1;
    return 1;
}

/* The bytes of the matrices that were copied (after resident_weights). */
static uint64_t resident_total(skv_weight *const *w, size_t n)
{
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++)
        if (w[i]->resident) t += (uint64_t)w[i]->row_bytes * (uint64_t)w[i]->N;
    return t;
}

/* The matrices to copy, in order, and how the copying is shared: the first thread takes
 * them until about half the bytes, the second the rest (each faults in and the kernel
 * clears its own pages: that, not the copy, is most of the time). */
typedef struct {
    skv_weight **w;
    size_t n, split;
} resident_job;

static void *resident_tail(void *arg)
{
    resident_job *j = arg;
    for (size_t i = j->split; i < j->n; i++) resident_weight(j->w[i]);
    return NULL;
}

static void resident_weights(skv_model *m)
{
    const char *e = getenv("SEQKV_RESIDENT");
    size_t total = 0, n = 0, cap = (size_t)m->info.n_layer * SKV_LT_COUNT + 1;
    if (e && !strcmp(e, "0")) return;
    resident_job j = {malloc(cap * sizeof(skv_weight *)), 0, 0};
    if (!j.w) return; /* keeps the file's rows */
    for (int l = 0; l < m->info.n_layer; l++)
        for (int t = 0; t < SKV_LT_COUNT; t++)
            if (!is_vector(&skv_layer_tensors[t])) {
                skv_weight *w = layer_matrix(&m->layers[l], &skv_layer_tensors[t]);
                if (matrix_bytes(w)) j.w[n++] = w, total += matrix_bytes(w);
            }
    if (!m->info.tied_output && matrix_bytes(&m->output)) /* tied: the token rows' copy stays the file's */
        j.w[n++] = &m->output, total += matrix_bytes(&m->output);
    j.n = n;
    if (total >= RESIDENT_MIN_BYTES || (e && !strcmp(e, "1"))) {
        size_t half = 0;
        while (j.split < n && half < total / 2) half += matrix_bytes(j.w[j.split++]);
        pthread_t th;
        int two = sysconf(_SC_NPROCESSORS_ONLN) > 1 && j.split < n && pthread_create(&th, NULL, resident_tail, &j) == 0;
        for (size_t i = 0; i < (two ? j.split : n); i++) resident_weight(j.w[i]);
        if (two) pthread_join(th, NULL);
        m->info.resident_bytes = resident_total(j.w, n);
    }
    free(j.w);
}

static void repack_weights(skv_model *m)
{
    const char *e = getenv("SEQKV_REPACK");
    if ((e && !strcmp(e, "0")) || !skv_cpu_has(SKV_CPU_AVX2_SET)) return;
    for (int l = 0; l < m->info.n_layer; l++)
        for (int t = 0; t < SKV_LT_COUNT; t++)
            if (!is_vector(&skv_layer_tensors[t])) repack_weight(layer_matrix(&m->layers[l], &skv_layer_tensors[t]));
    repack_weight(&m->output); /* tied: token rows still read from the file's copy */
}

/* ---- GGUF tensors ------------------------------------------------------------------ */

static int gguf_layer(skv_model *m, int l, char *err, size_t cap)
{
    char name[96];
    for (int t = 0; t < SKV_LT_COUNT; t++) {
        const skv_tensor_desc *d = &skv_layer_tensors[t];
        skv_weight w;
        int rc;
        if (m->arch->use[t] == SKV_USE_NONE) continue;
        snprintf(name, sizeof name, "blk.%d.%s", l, d->gguf);
        if (m->arch->use[t] == SKV_USE_OPTIONAL && !skv_gguf_find_tensor(m->gguf, name)) continue;
        if ((rc = gguf_weight(m->gguf, name, skv_dim_size(&m->info, d->k), skv_dim_size(&m->info, d->n), &w, err,
                              cap)) ||
            (rc = layer_store(&m->layers[l], (skv_layer_tensor)t, &w, err, cap)))
            return rc;
    }
    return SKV_OK;
}

/* token_embd, output (absent: tied to token_embd) and output_norm: every architecture's. */
static int gguf_model_tensors(skv_model *m, char *err, size_t cap)
{
    const skv_gguf *g = m->gguf;
    size_t D = (size_t)m->info.n_embd, V = (size_t)m->info.n_vocab;
    skv_weight nw;
    int rc;
    if ((rc = gguf_weight(g, "token_embd.weight", D, V, &m->tok_embd, err, cap))) return rc;
    if (skv_gguf_find_tensor(g, "output.weight")) {
        if ((rc = gguf_weight(g, "output.weight", D, V, &m->output, err, cap))) return rc;
    } else {
        m->output = m->tok_embd;
        m->info.tied_output = 1;
    }
    if ((rc = gguf_weight(g, "output_norm.weight", D, 1, &nw, err, cap))) return rc;
    if (!(m->output_norm = vector_copy(&nw, err, cap, &rc))) return rc;
    return SKV_OK;
}

/* Optional per-pair frequency divisors (llama3-style RoPE); *out stays NULL without them. */
static int gguf_rope_factors(const skv_model *m, float **out, char *err, size_t cap)
{
    /* phi3: the short factors serve contexts up to the original length; seqkv runs those
     * (the long ones, for longer contexts, are not read: docs/architectures.md) */
    const char *name = (m->arch->flags & SKV_ARCH_ROPE_SHORT) && skv_gguf_find_tensor(m->gguf, "rope_factors_short.weight")
                           ? "rope_factors_short.weight"
                           : "rope_freqs.weight";
    const skv_gguf_tensor *t = skv_gguf_find_tensor(m->gguf, name);
    int np = m->info.rope_dim / 2;
    *out = NULL;
    if (!t) return SKV_OK;
    if (t->type != SKV_GGML_F32 || t->n_elements != (uint64_t)np)
        return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: %s must be %d f32 values", name, np);
    if (!(*out = malloc((size_t)np * sizeof **out))) return skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
    for (int i = 0; i < np; i++) {
        (*out)[i] = skv_rdf32(t->data + 4 * (size_t)i); /* byte reads: any alignment */
        if (!((*out)[i] > 0.0f) || !isfinite((*out)[i]))
            return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: %s holds a non-positive factor", name);
    }
    return SKV_OK;
}

static int load_gguf(skv_model *m, const char *path, char *err, size_t cap)
{
    skv_model_info *h = &m->info;
    float *freq_factors = NULL;
    int rc;
    if ((rc = skv_gguf_open(path, &m->gguf, err, cap))) return rc;
    snprintf(h->format, sizeof h->format, "gguf");
    if ((rc = gguf_hparams(m, err, cap)) || (rc = gguf_model_tensors(m, err, cap))) return rc;
    if (!(m->layers = calloc((size_t)h->n_layer, sizeof *m->layers)))
        return skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
    for (int l = 0; l < h->n_layer; l++)
        if ((rc = gguf_layer(m, l, err, cap))) return rc;
    if ((rc = gguf_rope_factors(m, &freq_factors, err, cap)) == SKV_OK) rc = init_rope(m, freq_factors, err, cap);
    free(freq_factors);
    if (rc) return rc;
    h->weight_type = (int)(m->layers[0].wq.data ? m->layers[0].wq.type : m->layers[0].wqkv.type);
    h->file_bytes = skv_gguf_file_size(m->gguf);
    return gguf_tokenizer(m, err, cap);
}

/* ---- llama2.c checkpoints ----------------------------------------------------
 * Header: 7 x int32 {dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len};
 * a negative vocab_size means a separate classifier matrix follows. Then f32 arrays:
 * token_embedding [V][D], rms_att [L][D], wq [L][D][D], wk [L][KV][D], wv [L][KV][D],
 * wo [L][D][D], rms_ffn [L][D], w1 [L][F][D], w2 [L][D][F], w3 [L][F][D], rms_final [D],
 * freq_cis_real/imag [S][hd/2] (unused: RoPE is recomputed), wcls [V][D] if unshared. */

static int l2c_take(const uint8_t **p, const uint8_t *end, size_t n_floats, const float **out)
{
    size_t bytes;
    if (!skv_mul_ok(n_floats, 4, &bytes) || bytes > (size_t)(end - *p)) return 0;
    *out = (const float *)(const void *)*p;
    *p += bytes;
    return 1;
}

static void l2c_weight(skv_weight *w, const float *data, size_t K, size_t N)
{
    *w = (skv_weight){.type = SKV_GGML_F32, .data = (const uint8_t *)data, .row_bytes = K * 4, .K = K, .N = N};
}

static int find_l2c_tokenizer(const char *path, int vocab, const char *given, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path + 1) : 0;
    FILE *f;
    if (given) {
        snprintf(out, cap, "%s", given);
        return 1;
    }
    snprintf(out, cap, "%.*stok%d.bin", dirlen, path, vocab);
    if ((f = fopen(out, "rb"))) {
        fclose(f);
        return 1;
    }
    snprintf(out, cap, "%.*stokenizer.bin", dirlen, path);
    if ((f = fopen(out, "rb"))) {
        fclose(f);
        return 1;
    }
    return 0;
}

/* The per-layer arrays of a checkpoint in file order, each [n_layer][n][k] (shapes from
 * skv_layer_tensors: the layout is the llama row's, with Q = n_embd). */
static const skv_layer_tensor l2c_order[] = {SKV_LT_ATTN_NORM, SKV_LT_Q, SKV_LT_K, SKV_LT_V, SKV_LT_O,
                                             SKV_LT_FFN_NORM, SKV_LT_GATE, SKV_LT_DOWN, SKV_LT_UP};

/* Where each array starts in the mapping. */
typedef struct {
    const float *emb, *layer[SKV_LT_COUNT], *rms_final, *wcls;
} l2c_layout;

static int l2c_header(skv_model *m, const char *path, char *err, size_t cap)
{
    skv_model_info *h = &m->info;
    int32_t hdr[7];
    if (m->map.size < 28) return skv_errf(err, cap, SKV_ERR_FORMAT, "'%s' is neither GGUF nor a llama2.c checkpoint (too short)", path);
    for (int i = 0; i < 7; i++) hdr[i] = (int32_t)skv_rd32(m->map.data + 4 * i);
    m->arch = skv_arch_llama2c();
    snprintf(h->format, sizeof h->format, "llama2c");
    snprintf(h->arch, sizeof h->arch, "%s", m->arch->name);
    h->n_embd = hdr[0];
    h->n_ff = hdr[1];
    h->n_layer = hdr[2];
    h->n_head = hdr[3];
    h->n_head_kv = hdr[4];
    h->n_vocab = hdr[5] < 0 ? (hdr[5] == INT32_MIN ? 0 : -hdr[5]) : hdr[5];
    h->n_ctx_train = hdr[6];
    h->head_dim = h->n_head > 0 ? h->n_embd / h->n_head : 0;
    h->rope_dim = h->head_dim;
    h->rope_base = 10000.0f;
    h->norm_eps = 1e-5f;
    h->tied_output = hdr[5] > 0;
    m->rope_scale = 1.0;
    if (h->n_head < 1 || h->n_embd % h->n_head)
        return skv_errf(err, cap, SKV_ERR_FORMAT, "'%s': not a GGUF file, and as a llama2.c checkpoint its header is invalid", path);
    return check_hparams(h, err, cap);
}

/* Walks the arrays after the header; the file must end exactly after the last one. */
static int l2c_walk(const skv_model *m, const char *path, l2c_layout *lo, char *err, size_t cap)
{
    const skv_model_info *h = &m->info;
    const uint8_t *p = m->map.data + 28, *end = m->map.data + m->map.size;
    const float *freq_cis;
    size_t D = (size_t)h->n_embd, L = (size_t)h->n_layer, S = (size_t)h->n_ctx_train, hd2 = (size_t)h->head_dim / 2;
    /* all sizes below are < 2^12 * 2^20 * 2^20 (check_hparams): no overflow in size_t */
    int ok = l2c_take(&p, end, (size_t)h->n_vocab * D, &lo->emb);
    for (size_t i = 0; i < sizeof l2c_order / sizeof l2c_order[0] && ok; i++) {
        const skv_tensor_desc *d = &skv_layer_tensors[l2c_order[i]];
        ok = l2c_take(&p, end, L * skv_dim_size(h, d->k) * skv_dim_size(h, d->n), &lo->layer[l2c_order[i]]);
    }
    /* freq_cis_real, freq_cis_imag [S][hd/2]: unused, RoPE is recomputed */
    if (!ok || !l2c_take(&p, end, D, &lo->rms_final) || !l2c_take(&p, end, 2 * S * hd2, &freq_cis))
        return skv_errf(err, cap, SKV_ERR_FORMAT, "llama2.c checkpoint '%s' is truncated for its header's sizes", path);
    lo->wcls = lo->emb;
    if (!h->tied_output && !l2c_take(&p, end, (size_t)h->n_vocab * D, &lo->wcls))
        return skv_errf(err, cap, SKV_ERR_FORMAT, "llama2.c checkpoint '%s' is truncated (classifier)", path);
    if (p != end) return skv_errf(err, cap, SKV_ERR_FORMAT, "llama2.c checkpoint '%s' has %zu unexpected trailing bytes", path, (size_t)(end - p));
    return SKV_OK;
}

/* Points the model's weights at the arrays (vectors are copied, as for GGUF). */
static int l2c_bind(skv_model *m, const l2c_layout *lo, char *err, size_t cap)
{
    const skv_model_info *h = &m->info;
    size_t D = (size_t)h->n_embd, V = (size_t)h->n_vocab;
    skv_weight w;
    int rc;
    l2c_weight(&m->tok_embd, lo->emb, D, V);
    l2c_weight(&m->output, lo->wcls, D, V);
    l2c_weight(&w, lo->rms_final, D, 1);
    if (!(m->layers = calloc((size_t)h->n_layer, sizeof *m->layers)) || !(m->output_norm = vector_copy(&w, err, cap, &rc)))
        return skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < sizeof l2c_order / sizeof l2c_order[0]; i++) {
        const skv_tensor_desc *d = &skv_layer_tensors[l2c_order[i]];
        size_t K = skv_dim_size(h, d->k), N = skv_dim_size(h, d->n);
        for (int l = 0; l < h->n_layer; l++) {
            l2c_weight(&w, lo->layer[l2c_order[i]] + (size_t)l * N * K, K, N);
            if ((rc = layer_store(&m->layers[l], l2c_order[i], &w, err, cap))) return rc;
        }
    }
    return SKV_OK;
}

static int l2c_tokenizer(skv_model *m, const char *path, const char *tok_path, char *err, size_t cap)
{
    char tp[4096];
    skv_mmap tm;
    int rc;
    if (!find_l2c_tokenizer(path, m->info.n_vocab, tok_path, tp, sizeof tp))
        return skv_errf(err, cap, SKV_ERR_IO, "llama2.c checkpoint '%s': no tokenizer found (looked for tok%d.bin and tokenizer.bin beside it; pass one explicitly)",
                        path, m->info.n_vocab);
    if ((rc = skv_mmap_open(tp, &tm, err, cap))) return rc;
    rc = skv_tokenizer_load_llama2c(tm.data, tm.size, (size_t)m->info.n_vocab, &m->tok, err, cap);
    skv_mmap_close(&tm);
    return rc;
}

static int load_l2c(skv_model *m, const char *path, const char *tok_path, char *err, size_t cap)
{
    skv_model_info *h = &m->info;
    const char *base = strrchr(path, '/');
    l2c_layout lo = {0};
    int rc;
    if ((rc = skv_mmap_open(path, &m->map, err, cap)) || (rc = l2c_header(m, path, err, cap))) return rc;
    arch_defaults(m); /* after the header's checks: head_dim >= 2 */
    if ((rc = l2c_walk(m, path, &lo, err, cap)) || (rc = l2c_bind(m, &lo, err, cap)) ||
        (rc = init_rope(m, NULL, err, cap)))
        return rc;
    h->weight_type = SKV_DTYPE_F32;
    h->file_bytes = m->map.size;
    snprintf(h->name, sizeof h->name, "%s", base ? base + 1 : path);
    return l2c_tokenizer(m, path, tok_path, err, cap);
}

/* ---- public ---------------------------------------------------------------- */

static int64_t count_params(const skv_model *m)
{
    const skv_model_info *h = &m->info;
    int64_t D = h->n_embd, V = h->n_vocab, n = V * D * (h->tied_output ? 1 : 2) + D;
    for (int l = 0; l < h->n_layer; l++)
        for (int t = 0; t < SKV_LT_COUNT; t++) {
            const skv_tensor_desc *d = &skv_layer_tensors[t];
            if (layer_has(&m->layers[l], (skv_layer_tensor)t))
                n += (int64_t)skv_dim_size(h, d->k) * (int64_t)skv_dim_size(h, d->n);
        }
    return n;
}

int skv_model_load(const char *path, const char *tokenizer_path, skv_model **out, char *err, size_t errcap)
{
    skv_model *m;
    int rc;
    unsigned char magic[4] = {0};
    FILE *f;
    if (!out || !path) return skv_errf(err, errcap, SKV_ERR_INVALID_ARG, "NULL argument");
    *out = NULL;
    if (!(f = fopen(path, "rb"))) return skv_errf(err, errcap, SKV_ERR_IO, "cannot open model '%s'", path);
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (!(m = calloc(1, sizeof *m))) return skv_errf(err, errcap, SKV_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&m->fp_mu, NULL);
    pthread_mutex_init(&m->vfp_mu, NULL);
    if (!(m->err = skv_errbox_create())) {
        skv_model_free(m);
        return skv_errf(err, errcap, SKV_ERR_NOMEM, "out of memory");
    }
    if (got == 4 && !memcmp(magic, "GGUF", 4)) rc = load_gguf(m, path, err, errcap);
    else rc = load_l2c(m, path, tokenizer_path, err, errcap);
    if (rc == SKV_OK && skv_tokenizer_n_vocab(m->tok) != (size_t)m->info.n_vocab)
        rc = skv_errf(err, errcap, SKV_ERR_FORMAT, "tokenizer has %zu tokens but the model has %d",
                      skv_tokenizer_n_vocab(m->tok), m->info.n_vocab);
    if (rc) {
        skv_model_free(m);
        return rc;
    }
    if (m->gguf) {
        repack_weights(m);
        resident_weights(m);
    }
    m->info.n_params = count_params(m);
    m->info.tokenizer_kind = skv_tokenizer_kind(m->tok);
    m->info.bos_id = skv_tokenizer_bos(m->tok);
    m->info.eos_id = skv_tokenizer_eos(m->tok);
    m->info.add_bos = skv_tokenizer_add_bos(m->tok);
    if (!m->info.name[0]) {
        const char *base = strrchr(path, '/');
        snprintf(m->info.name, sizeof m->info.name, "%s", base ? base + 1 : path);
    }
    *out = m;
    return SKV_OK;
}

void skv_model_free(skv_model *m)
{
    if (!m) return;
    pthread_mutex_destroy(&m->fp_mu);
    pthread_mutex_destroy(&m->vfp_mu);
    skv_errbox_free(m->err);
    if (m->layers)
        for (int l = 0; l < m->info.n_layer; l++) layer_free(&m->layers[l]);
    free(m->layers);
    free((void *)(uintptr_t)m->output.packed);
    if (m->output.resident) free((void *)(uintptr_t)m->output.data);
    free(m->output_norm);
    free(m->rope_freq);
    free(m->ap.rope_freq_swa);
    skv_tokenizer_free(m->tok);
    skv_gguf_close(m->gguf);
    skv_mmap_close(&m->map);
    free(m);
}

int skv_model_get_info(const skv_model *m, skv_model_info *info)
{
    if (!m || !info) return SKV_ERR_INVALID_ARG;
    *info = m->info;
    return SKV_OK;
}

static void fp_u32(XXH3_state_t *st, uint32_t v)
{
    uint8_t b[4];
    skv_wr32(b, v);
    XXH3_128bits_update(st, b, 4);
}

static void fp_f32s(XXH3_state_t *st, const float *v, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    XXH3_128bits_update(st, v, n * sizeof *v); /* the floats are their own little-endian bytes */
#else
    uint8_t b[256];
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < 64 && i < n; k++, i++) skv_wrf32(b + 4 * k, v[i]);
        XXH3_128bits_update(st, b, 4 * k);
    }
#endif
}

static int fp_weight(XXH3_state_t *st, const skv_weight *w, float *row)
{
    fp_u32(st, (uint32_t)w->N);
    fp_u32(st, (uint32_t)w->K);
    for (size_t r = 0; r < w->N; r++) {
        skv_weight_row(w, r, row);
        fp_f32s(st, row, w->K);
    }
    if (w->packed) drop_pages(w->data, w->row_bytes * w->N); /* read back for the hash only */
    return SKV_OK;
}

/* The extra steps' hyper-parameters (hashed for rows beyond llama's only). */
static void fp_arch_params(XXH3_state_t *st, const skv_model *m)
{
    const skv_arch_params *p = &m->ap;
    float f[] = {p->attn_scale, p->attn_softcap, p->final_softcap, p->embd_scale, (float)p->rope_mscale,
                 (float)p->rope_scale_swa};
    fp_f32s(st, f, sizeof f / sizeof f[0]);
    fp_u32(st, (uint32_t)p->swa_window);
    fp_u32(st, (uint32_t)p->swa_period);
    for (int i = 0; p->rope_freq_swa && i < m->info.rope_dim / 2; i++) {
        float v = (float)p->rope_freq_swa[i];
        fp_f32s(st, &v, 1);
    }
}

/* Hyper-parameters and RoPE as the forward pass uses them. */
static void fp_hparams(XXH3_state_t *st, const skv_model *m)
{
    const skv_model_info *h = &m->info;
    int32_t hp[] = {h->n_layer, h->n_embd, h->n_head, h->n_head_kv, h->head_dim, h->n_ff, h->n_vocab, h->rope_dim};
    float f = (float)m->rope_scale;
    XXH3_128bits_update(st, "seqkv-model-fp-1", 16);
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++) fp_u32(st, (uint32_t)hp[i]);
    fp_f32s(st, &h->norm_eps, 1);
    fp_f32s(st, &f, 1);
    for (int i = 0; i < h->rope_dim / 2; i++) {
        f = (float)m->rope_freq[i];
        fp_f32s(st, &f, 1);
    }
    /* Forward-pass behaviour beyond llama's: hashed only when present, so llama models
     * keep the fingerprints their .skv files carry. */
    if (m->arch->rope != SKV_ROPE_NORM || m->arch->flags != SKV_ARCH_NONE) {
        XXH3_128bits_update(st, "arch", 4);
        fp_u32(st, (uint32_t)m->arch->rope);
        fp_u32(st, m->arch->flags);
        fp_arch_params(st, m);
    }
}

/* The layer's present tensors in table order: vectors as values, matrices with their shape. */
static void fp_layer(XXH3_state_t *st, const skv_model *m, const skv_layer *L, float *row)
{
    for (int t = 0; t < SKV_LT_COUNT; t++) {
        const skv_tensor_desc *d = &skv_layer_tensors[t];
        if (!layer_has(L, (skv_layer_tensor)t)) continue;
        if (is_vector(d)) fp_f32s(st, *(float *const *)layer_cfield(L, d), skv_dim_size(&m->info, d->k));
        else fp_weight(st, (const skv_weight *)layer_cfield(L, d), row);
    }
}

/* The vocabulary: the bytes each token id stands for. */
/* The vocabulary's size, as it turned out: skv_tokenizer_piece returns the piece's length,
 * not SKV_OK, so every piece hashes as length 0 and no bytes (n_vocab zeros). Kept so
 * (every .skv file and store records this fingerprint); the tokenizer has its own
 * (skv_model_tokenizer_fingerprint). */
static void fp_vocab(XXH3_state_t *st, const skv_model *m)
{
    for (int32_t t = 0; t < m->info.n_vocab; t++) {
        char piece[512];
        size_t len = 0;
        if (skv_tokenizer_piece(m->tok, t, piece, sizeof piece, &len) != SKV_OK) len = 0;
        fp_u32(st, (uint32_t)len);
        XXH3_128bits_update(st, piece, len);
    }
}

/* Longest input row of any matrix (the scratch row fp_weight expands into). */
static size_t fp_row_len(const skv_model_info *h)
{
    size_t k = (size_t)h->n_embd;
    for (int t = 0; t < SKV_LT_COUNT; t++)
        if (skv_dim_size(h, skv_layer_tensors[t].k) > k) k = skv_dim_size(h, skv_layer_tensors[t].k);
    return k;
}

static int compute_fingerprint(skv_model *m)
{
    XXH3_state_t *st = XXH3_createState();
    float *row = malloc(fp_row_len(&m->info) * sizeof *row);
    XXH128_canonical_t c;
    if (!st || !row) {
        XXH3_freeState(st);
        free(row);
        return SKV_ERR_NOMEM;
    }
    XXH3_128bits_reset(st);
    fp_hparams(st, m);
    fp_weight(st, &m->tok_embd, row);
    for (int l = 0; l < m->info.n_layer; l++) fp_layer(st, m, &m->layers[l], row);
    fp_f32s(st, m->output_norm, (size_t)m->info.n_embd);
    fp_weight(st, &m->output, row); /* hashed even when tied: the values are what count */
    fp_vocab(st, m);
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
    memcpy(m->fp, c.digest, 16);
    m->fp_done = 1;
    XXH3_freeState(st);
    free(row);
    return SKV_OK;
}

int skv_model_fingerprint_ready(skv_model *m)
{
    pthread_mutex_lock(&m->fp_mu);
    int done = m->fp_done;
    pthread_mutex_unlock(&m->fp_mu);
    return done;
}

int skv_model_fingerprint(skv_model *m, uint8_t out[16])
{
    int rc = SKV_OK;
    if (!m || !out) return SKV_ERR_INVALID_ARG;
    pthread_mutex_lock(&m->fp_mu);
    if (!m->fp_done) rc = compute_fingerprint(m);
    if (rc == SKV_OK) memcpy(out, m->fp, 16);
    pthread_mutex_unlock(&m->fp_mu);
    return rc;
}

int skv_model_tokenizer_fingerprint(skv_model *m, uint8_t out[16])
{
    int rc = SKV_OK;
    if (!m || !out) return SKV_ERR_INVALID_ARG;
    pthread_mutex_lock(&m->vfp_mu);
    if (!m->vfp_done && !(rc = skv_tokenizer_fingerprint(m->tok, m->vfp))) m->vfp_done = 1;
    if (!rc) memcpy(out, m->vfp, 16);
    pthread_mutex_unlock(&m->vfp_mu);
    return rc;
}

int skv_tokenize(const skv_model *m, const char *text, size_t len, int add_special, int32_t *out, size_t cap,
                 size_t *n_out)
{
    if (!m || (!text && len) || !n_out) return SKV_ERR_INVALID_ARG;
    return skv_tokenizer_encode(m->tok, text ? text : "", len, add_special, out, cap, n_out);
}

int skv_token_piece(const skv_model *m, int32_t token, char *buf, size_t cap, size_t *len)
{
    if (!m || !len) return SKV_ERR_INVALID_ARG;
    if (token < 0 || token >= m->info.n_vocab) return SKV_ERR_RANGE;
    int rc = skv_tokenizer_piece(m->tok, token, buf, cap, len);
    return rc < 0 ? rc : SKV_OK;
}

const char *skv_model_last_error(const skv_model *m)
{
    return m && m->err ? skv_errbox_get(m->err) : "";
}

int skv_detokenize(const skv_model *m, const int32_t *tokens, size_t n, int flags, char *text, size_t cap, size_t *len)
{
    if (!m) return SKV_ERR_INVALID_ARG;
    return skv_tokenizer_detokenize(m->tok, tokens, n, flags & SKV_DETOK_AFTER_BOS, text, cap, len);
}
