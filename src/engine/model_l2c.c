/* llama2.c checkpoints (karpathy/llama2.c's run.c format) and their tokenizer.bin. */
#include "core/fpguard.h"
#include "engine/model_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/vocab_load.h"

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

static int l2c_header(skv_model *m, const char *path, skv_err *err)
{
    skv_model_info *h = &m->info;
    int32_t hdr[7];
    if (m->map.size < 28) return skv_fail(err, SKV_ERR_FORMAT, "'%s' is neither GGUF nor a llama2.c checkpoint (too short)", path);
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
        return skv_fail(err, SKV_ERR_FORMAT, "'%s': not a GGUF file, and as a llama2.c checkpoint its header is invalid", path);
    return skv_model_check_hparams(h, err);
}

/* Walks the arrays after the header; the file must end exactly after the last one. */
static int l2c_walk(const skv_model *m, const char *path, l2c_layout *lo, skv_err *err)
{
    const skv_model_info *h = &m->info;
    const uint8_t *p = m->map.data + 28, *end = m->map.data + m->map.size;
    const float *freq_cis;
    size_t D = (size_t)h->n_embd, L = (size_t)h->n_layer, S = (size_t)h->n_ctx_train, hd2 = (size_t)h->head_dim / 2;
    /* all sizes below are < 2^12 * 2^20 * 2^20 (skv_model_check_hparams): no overflow in size_t */
    int ok = l2c_take(&p, end, (size_t)h->n_vocab * D, &lo->emb);
    for (size_t i = 0; i < sizeof l2c_order / sizeof l2c_order[0] && ok; i++) {
        const skv_tensor_desc *d = &skv_layer_tensors[l2c_order[i]];
        ok = l2c_take(&p, end, L * skv_dim_size(h, d->k) * skv_dim_size(h, d->n), &lo->layer[l2c_order[i]]);
    }
    /* freq_cis_real, freq_cis_imag [S][hd/2]: unused, RoPE is recomputed */
    if (!ok || !l2c_take(&p, end, D, &lo->rms_final) || !l2c_take(&p, end, 2 * S * hd2, &freq_cis))
        return skv_fail(err, SKV_ERR_FORMAT, "llama2.c checkpoint '%s' is truncated for its header's sizes", path);
    lo->wcls = lo->emb;
    if (!h->tied_output && !l2c_take(&p, end, (size_t)h->n_vocab * D, &lo->wcls))
        return skv_fail(err, SKV_ERR_FORMAT, "llama2.c checkpoint '%s' is truncated (classifier)", path);
    if (p != end) return skv_fail(err, SKV_ERR_FORMAT, "llama2.c checkpoint '%s' has %zu unexpected trailing bytes", path, (size_t)(end - p));
    return SKV_OK;
}

/* Points the model's weights at the arrays (vectors are copied, as for GGUF). */
static int l2c_bind(skv_model *m, const l2c_layout *lo, skv_err *err)
{
    const skv_model_info *h = &m->info;
    size_t D = (size_t)h->n_embd, V = (size_t)h->n_vocab;
    skv_weight w;
    int rc;
    l2c_weight(&m->tok_embd, lo->emb, D, V);
    l2c_weight(&m->output, lo->wcls, D, V);
    l2c_weight(&w, lo->rms_final, D, 1);
    if (!(m->layers = calloc((size_t)h->n_layer, sizeof *m->layers)) || !(m->output_norm = skv_weight_vector_copy(&w, err, &rc)))
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < sizeof l2c_order / sizeof l2c_order[0]; i++) {
        const skv_tensor_desc *d = &skv_layer_tensors[l2c_order[i]];
        size_t K = skv_dim_size(h, d->k), N = skv_dim_size(h, d->n);
        for (int l = 0; l < h->n_layer; l++) {
            l2c_weight(&w, lo->layer[l2c_order[i]] + (size_t)l * N * K, K, N);
            if ((rc = skv_layer_store(&m->layers[l], l2c_order[i], &w, err))) return rc;
        }
    }
    return SKV_OK;
}

static int l2c_tokenizer(skv_model *m, const char *path, const char *tok_path, skv_err *err)
{
    char tp[4096];
    skv_mmap tm;
    int rc;
    if (!find_l2c_tokenizer(path, m->info.n_vocab, tok_path, tp, sizeof tp))
        return skv_fail(err, SKV_ERR_IO, "llama2.c checkpoint '%s': no tokenizer found (looked for tok%d.bin and tokenizer.bin beside it; pass one explicitly)",
                        path, m->info.n_vocab);
    if ((rc = skv_mmap_open(tp, &tm, err))) return rc;
    rc = skv_tokenizer_load_llama2c(tm.data, tm.size, (size_t)m->info.n_vocab, &m->tok, err);
    skv_mmap_close(&tm);
    return rc;
}

int skv_model_load_l2c(skv_model *m, const char *path, const char *tok_path, skv_err *err)
{
    skv_model_info *h = &m->info;
    const char *base = strrchr(path, '/');
    l2c_layout lo = {0};
    int rc;
    if ((rc = skv_mmap_open(path, &m->map, err)) || (rc = l2c_header(m, path, err))) return rc;
    skv_model_arch_defaults(m); /* after the header's checks: head_dim >= 2 */
    if ((rc = l2c_walk(m, path, &lo, err)) || (rc = l2c_bind(m, &lo, err)) ||
        (rc = skv_model_init_rope(m, NULL, err)))
        return rc;
    h->weight_type = SKV_DTYPE_F32;
    h->file_bytes = m->map.size;
    snprintf(h->name, sizeof h->name, "%s", base ? base + 1 : path);
    return l2c_tokenizer(m, path, tok_path, err);
}
