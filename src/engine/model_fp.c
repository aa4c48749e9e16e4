/* The model's fingerprint (its hyper-parameters, every weight converted to f32 and the
 * vocabulary, hashed: what a .skv file names as its model) and the tokenizer's. */
#include "core/fpguard.h"
#include "engine/model_int.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

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
    if (w->packed) skv_weight_drop_pages(w->data, w->row_bytes * w->N); /* read back for the hash only */
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
        if (!skv_layer_has(L, (skv_layer_tensor)t)) continue;
        if (skv_tensor_is_vector(d)) fp_f32s(st, *(float *const *)skv_layer_cfield(L, d), skv_dim_size(&m->info, d->k));
        else fp_weight(st, (const skv_weight *)skv_layer_cfield(L, d), row);
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
