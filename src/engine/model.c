/* Model loading: the entry point (the file's magic picks the loader: model_gguf.c or
 * model_l2c.c), the checks and tables both loaders share, and the public model API.
 * Weights are repacked and made resident in model_weights.c, fingerprinted in model_fp.c. */
#include "core/fpguard.h"
#include "engine/model_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/detmath.h"
#include "engine/ops.h"
#include "quant/types.h"


void skv_weight_row(const skv_weight *w, size_t row, float *dst)
{
    skv_dequant_rows_simd(1, w->type, w->data + row * w->row_bytes, w->row_bytes, w->K, 1, dst); /* same values */
}

/* ---- common validation --------------------------------------------------- */

int skv_model_check_hparams(const skv_model_info *h, skv_err *err)
{
    if (h->n_layer < 1 || h->n_layer > 4096 || h->n_embd < 1 || h->n_embd > MAX_DIM || h->n_head < 1 ||
        h->n_head > 4096 || h->n_head_kv < 1 || h->n_head_kv > h->n_head || h->n_head % h->n_head_kv ||
        h->head_dim < 2 || h->head_dim > 4096 || h->n_ff < 1 || h->n_ff > MAX_DIM || h->n_vocab < 1 ||
        h->n_vocab > (1 << 24) || h->n_ctx_train < 1 || h->n_ctx_train > (1 << 24))
        return skv_fail(err, SKV_ERR_FORMAT,
                        "implausible hyper-parameters: layers %d, width %d, heads %d/%d, head_dim %d, ffn %d, vocab %d, ctx %d",
                        h->n_layer, h->n_embd, h->n_head, h->n_head_kv, h->head_dim, h->n_ff, h->n_vocab,
                        h->n_ctx_train);
    if (h->rope_dim < 2 || h->rope_dim > h->head_dim || (h->rope_dim & 1))
        return skv_fail(err, SKV_ERR_FORMAT, "rope dimension %d invalid for head_dim %d", h->rope_dim,
                        h->head_dim);
    if (!(h->rope_base > 0.0f) || !isfinite(h->rope_base) || !(h->norm_eps > 0.0f) || !(h->norm_eps < 1.0f))
        return skv_fail(err, SKV_ERR_FORMAT, "invalid rope base %g or norm epsilon %g", (double)h->rope_base,
                        (double)h->norm_eps);
    return SKV_OK;
}

/* freq[i] = base^(-2i/rope_dim) / factor[i] for the rope_dim/2 pairs (factors optional). */
double *skv_model_rope_freqs(const skv_model *m, float base, const float *freq_factors)
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

int skv_model_init_rope(skv_model *m, const float *freq_factors, skv_err *err)
{
    if (!(m->rope_freq = skv_model_rope_freqs(m, m->info.rope_base, freq_factors)))
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    return SKV_OK;
}

/* An f32 copy of a vector tensor (norm weights): the forward pass reads them often. */
float *skv_weight_vector_copy(const skv_weight *w, skv_err *err, int *rc)
{
    float *v = malloc(w->K * sizeof *v);
    if (!v) {
        *rc = skv_fail(err, SKV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    skv_weight_row(w, 0, v);
    return v;
}


/* What every row starts from: llama's attention scale and nothing else. */
void skv_model_arch_defaults(skv_model *m)
{
    memset(&m->ap, 0, sizeof m->ap);
    m->ap.attn_scale = 1.0f / sqrtf((float)m->info.head_dim);
    m->ap.rope_mscale = 1.0;
}

int skv_layer_windowed(const skv_model *m, int l)
{
    int P = m->ap.swa_period;
    return m->ap.swa_window > 0 && (P == 0 || l % P < P - 1);
}

/* ---- layer tensors, by the table (arch.h) -------------------------------------- */

skv_weight *skv_layer_matrix(skv_layer *L, const skv_tensor_desc *d)
{
    return (skv_weight *)(void *)((char *)L + d->field);
}

float **skv_layer_vector(skv_layer *L, const skv_tensor_desc *d)
{
    return (float **)(void *)((char *)L + d->field);
}

int skv_tensor_is_vector(const skv_tensor_desc *d) { return d->n == SKV_DIM_1; }

/* Stores w (a view of tensor t of layer L) in its field: matrices as the view, vectors
 * as an f32 copy of their k values. */
int skv_layer_store(skv_layer *L, skv_layer_tensor t, const skv_weight *w, skv_err *err)
{
    const skv_tensor_desc *d = &skv_layer_tensors[t];
    int rc = SKV_OK;
    if (!skv_tensor_is_vector(d)) *skv_layer_matrix(L, d) = *w;
    else if (!(*skv_layer_vector(L, d) = skv_weight_vector_copy(w, err, &rc))) return rc;
    return SKV_OK;
}

const void *skv_layer_cfield(const skv_layer *L, const skv_tensor_desc *d)
{
    return (const char *)L + d->field;
}

/* Tensor t of layer L is present (an optional one the file lacked is not). */
int skv_layer_has(const skv_layer *L, skv_layer_tensor t)
{
    const skv_tensor_desc *d = &skv_layer_tensors[t];
    if (skv_tensor_is_vector(d)) return *(float *const *)skv_layer_cfield(L, d) != NULL;
    return ((const skv_weight *)skv_layer_cfield(L, d))->data != NULL;
}

static void layer_free(skv_layer *L)
{
    for (int t = 0; t < SKV_LT_COUNT; t++)
        if (skv_tensor_is_vector(&skv_layer_tensors[t])) free(*skv_layer_vector(L, &skv_layer_tensors[t]));
        else {
            skv_weight *w = skv_layer_matrix(L, &skv_layer_tensors[t]);
            free((void *)(uintptr_t)w->packed);
            if (w->resident) free((void *)(uintptr_t)w->data);
        }
}

/* ---- public ---------------------------------------------------------------- */

static int64_t count_params(const skv_model *m)
{
    const skv_model_info *h = &m->info;
    int64_t D = h->n_embd, V = h->n_vocab, n = V * D * (h->tied_output ? 1 : 2) + D;
    for (int l = 0; l < h->n_layer; l++)
        for (int t = 0; t < SKV_LT_COUNT; t++) {
            const skv_tensor_desc *d = &skv_layer_tensors[t];
            if (skv_layer_has(&m->layers[l], (skv_layer_tensor)t))
                n += (int64_t)skv_dim_size(h, d->k) * (int64_t)skv_dim_size(h, d->n);
        }
    return n;
}

static int skv_model_load_e(const char *path, const skv_model_params *p, skv_model **out, skv_err *err)
{
    const char *tokenizer_path = p->tokenizer_path;
    skv_model *m;
    int rc;
    unsigned char magic[4] = {0};
    FILE *f;
    if (!out || !path || (p->n_overrides && !p->overrides)) return skv_fail(err, SKV_ERR_INVALID_ARG, "NULL argument");
    *out = NULL;
    if (!(f = fopen(path, "rb"))) return skv_fail(err, SKV_ERR_IO, "cannot open model '%s'", path);
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (!(m = calloc(1, sizeof *m))) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&m->fp_mu, NULL);
    pthread_mutex_init(&m->vfp_mu, NULL);
    if (!(m->err = skv_errbox_create())) {
        skv_model_free(m);
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    }
    if (got == 4 && !memcmp(magic, "GGUF", 4)) rc = skv_model_load_gguf(m, path, p, err);
    else if (p->n_overrides || (p->rope_scaling && *p->rope_scaling) || p->rope_freq_base > 0 || p->rope_freq_scale > 0)
        rc = skv_fail(err, SKV_ERR_INVALID_ARG, "'%s' is a llama2.c checkpoint: metadata overrides and RoPE options apply to GGUF files only", path);
    else rc = skv_model_load_l2c(m, path, tokenizer_path, err);
    if (rc == SKV_OK && skv_tokenizer_n_vocab(m->tok) != (size_t)m->info.n_vocab)
        rc = skv_fail(err, SKV_ERR_FORMAT, "tokenizer has %zu tokens but the model has %d",
                      skv_tokenizer_n_vocab(m->tok), m->info.n_vocab);
    if (rc) {
        skv_model_free(m);
        return rc;
    }
    if (m->gguf) {
        skv_model_repack_weights(m);
        skv_model_resident_weights(m);
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

int skv_model_load(const char *path, const char *tokenizer_path, skv_model **out, char *err, size_t errcap)
{
    skv_err e = {0};
    skv_model_params p = {.tokenizer_path = tokenizer_path};
    return skv_err_out(&e, skv_model_load_e(path, &p, out, &e), err, errcap);
}

int skv_model_load_params(const char *path, const skv_model_params *params, skv_model **out, char *err, size_t errcap)
{
    skv_err e = {0};
    skv_model_params p = params ? *params : (skv_model_params){0};
    return skv_err_out(&e, skv_model_load_e(path, &p, out, &e), err, errcap);
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

const skv_model_info *skv_model_info_of(const skv_model *m) { return &m->info; }

const char *skv_weight_type_name(int type) { return type < 0 ? "unknown" : skv_ggml_type_name((uint32_t)type); }

const struct skv_tokenizer *skv_model_tokenizer(const skv_model *m) { return m->tok; }

char *skv_model_chat_template(const skv_model *m)
{
    skv_gguf_str s;
    if (!m->gguf || skv_gguf_get_str(m->gguf, "tokenizer.chat_template", &s)) return NULL;
    char *t = malloc(s.len + 1);
    if (!t) return NULL;
    memcpy(t, s.ptr, s.len);
    t[s.len] = 0;
    return t;
}

/* A tokenizer call's failure with a message (skv_last_error): a model keeps none of its own. */
static int tok_err(int rc, const char *call)
{
    return skv_fail(NULL, rc, "%s: %s%s", call, skv_status_str(rc),
                    rc == SKV_ERR_RANGE ? " (the output buffer is too small, or a token id is outside the vocabulary)"
                                        : "");
}

int skv_model_tokenize(const skv_model *m, const char *text, size_t len, int add_special, int32_t *out, size_t cap,
                 size_t *n_out)
{
    if (!m || (!text && len) || !n_out) return skv_fail(NULL, SKV_ERR_INVALID_ARG, "tokenize: NULL model, text or n_out");
    int rc = skv_tokenizer_encode(m->tok, text ? text : "", len, add_special, out, cap, n_out);
    if (rc == SKV_ERR_RANGE) return skv_fail(NULL, rc, "tokenize: %zu tokens do not fit in room for %zu", *n_out, cap);
    return rc < 0 ? tok_err(rc, "tokenize") : rc;
}

int skv_model_token_piece(const skv_model *m, int32_t token, char *buf, size_t cap, size_t *len)
{
    if (!m || !len) return skv_fail(NULL, SKV_ERR_INVALID_ARG, "token_piece: NULL model or len");
    if (token < 0 || token >= m->info.n_vocab)
        return skv_fail(NULL, SKV_ERR_RANGE, "token_piece: token id %d is outside the vocabulary [0, %d)", token,
                        m->info.n_vocab);
    int rc = skv_tokenizer_piece(m->tok, token, buf, cap, len);
    return rc < 0 ? tok_err(rc, "token_piece") : SKV_OK;
}

const char *skv_model_last_error(const skv_model *m)
{
    return m && m->err ? skv_errbox_get(m->err) : "";
}

int skv_model_detokenize(const skv_model *m, const int32_t *tokens, size_t n, int flags, char *text, size_t cap, size_t *len)
{
    if (!m) return skv_fail(NULL, SKV_ERR_INVALID_ARG, "detokenize: NULL model");
    int rc = skv_tokenizer_detokenize(m->tok, tokens, n, flags & SKV_DETOK_AFTER_BOS, text, cap, len);
    return rc < 0 ? tok_err(rc, "detokenize") : rc;
}
