/* Model loading (GGUF and llama2.c checkpoints), validation, info, fingerprint. */
#include "engine/model.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/detmath.h"
#include "core/f16.h"
#include "engine/ops.h"

#define MAX_DIM (1 << 20)

void skv_weight_row(const skv_weight *w, size_t row, float *dst)
{
    skv_dequant_rows(w->type, w->data + row * w->row_bytes, w->row_bytes, w->K, 1, dst);
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

static int init_rope(skv_model *m, const float *freq_factors, char *err, size_t cap)
{
    int np = m->info.rope_dim / 2;
    m->rope_freq = malloc((size_t)np * sizeof *m->rope_freq);
    if (!m->rope_freq) return skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
    for (int i = 0; i < np; i++) {
        /* base^(-2i/d) with our own double maths (detmath.c): the same bits on every machine */
        m->rope_freq[i] = skv_det_pow((double)m->info.rope_base, -2.0 * i / (double)m->info.rope_dim);
        if (freq_factors) m->rope_freq[i] /= (double)freq_factors[i];
    }
    return SKV_OK;
}

static float *norm_copy(const skv_weight *w, char *err, size_t cap, int *rc)
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
    if (!skv_dequant_supported(t->type))
        return skv_errf(err, cap, SKV_ERR_UNSUPPORTED,
                        "GGUF tensor '%s' has type %s; seqkv supports f32, f16, bf16, q8_0 and q4_0", name,
                        skv_ggml_type_name(t->type));
    if (t->type == SKV_GGML_F32 && ((uintptr_t)t->data & 3))
        return skv_errf(err, cap, SKV_ERR_UNSUPPORTED,
                        "GGUF tensor '%s': f32 data at an offset that is not a multiple of 4 (general.alignment too small)",
                        name);
    w->type = t->type;
    w->data = t->data;
    w->K = K;
    w->N = N;
    w->row_bytes = t->nbytes / N;
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

static int gguf_hparams(skv_model *m, char *err, size_t cap)
{
    const skv_gguf *g = m->gguf;
    skv_model_info *h = &m->info;
    skv_gguf_str s;
    char key[128];
    int rc, key_len = 0, val_len = 0;
    if (skv_gguf_get_str(g, "general.architecture", &s) != SKV_OK)
        return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: missing general.architecture");
    if (!(s.len == 5 && !memcmp(s.ptr, "llama", 5)))
        return skv_errf(err, cap, SKV_ERR_UNSUPPORTED,
                        "architecture '%.*s' is not supported (seqkv runs the Llama family: 'llama')",
                        (int)(s.len > 40 ? 40 : s.len), s.ptr);
    snprintf(h->arch, sizeof h->arch, "llama");
    if (skv_gguf_get_str(g, "general.name", &s) == SKV_OK)
        snprintf(h->name, sizeof h->name, "%.*s", (int)(s.len > 90 ? 90 : s.len), s.ptr);
#define GI(k, f, d, req) if ((rc = gguf_i(g, "llama." k, &h->f, d, req, err, cap))) return rc
    GI("block_count", n_layer, 0, 1);
    GI("embedding_length", n_embd, 0, 1);
    GI("feed_forward_length", n_ff, 0, 1);
    GI("attention.head_count", n_head, 0, 1);
    GI("attention.head_count_kv", n_head_kv, h->n_head, 0);
    GI("context_length", n_ctx_train, 2048, 0);
#undef GI
    if (h->n_head < 1) return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: head count is 0");
    if ((rc = gguf_i(g, "llama.attention.key_length", &key_len, h->n_embd / h->n_head, 0, err, cap)) ||
        (rc = gguf_i(g, "llama.attention.value_length", &val_len, key_len, 0, err, cap)))
        return rc;
    if (key_len != val_len)
        return skv_errf(err, cap, SKV_ERR_UNSUPPORTED, "different key (%d) and value (%d) head sizes", key_len, val_len);
    h->head_dim = key_len;
    if ((rc = gguf_i(g, "llama.rope.dimension_count", &h->rope_dim, h->head_dim, 0, err, cap))) return rc;
    if ((rc = gguf_f(g, "llama.rope.freq_base", &h->rope_base, 10000.0f, err, cap)) ||
        (rc = gguf_f(g, "llama.attention.layer_norm_rms_epsilon", &h->norm_eps, 1e-5f, err, cap)))
        return rc;
    m->rope_scale = 1.0;
    if (skv_gguf_get_str(g, "llama.rope.scaling.type", &s) == SKV_OK && !(s.len == 4 && !memcmp(s.ptr, "none", 4))) {
        float factor = 1.0f;
        if (!(s.len == 6 && !memcmp(s.ptr, "linear", 6)))
            return skv_errf(err, cap, SKV_ERR_UNSUPPORTED, "rope scaling '%.*s' is not supported (none, linear are)",
                            (int)(s.len > 20 ? 20 : s.len), s.ptr);
        if ((rc = gguf_f(g, "llama.rope.scaling.factor", &factor, 1.0f, err, cap))) return rc;
        if (!(factor >= 1.0f && factor < 1e6f)) return skv_errf(err, cap, SKV_ERR_FORMAT, "bad rope scaling factor");
        m->rope_scale = 1.0 / factor;
    }
    snprintf(key, sizeof key, "tokenizer.ggml.tokens");
    {
        uint32_t et;
        size_t n;
        if (skv_gguf_get_arr(g, key, &et, &n) != SKV_OK || et != SKV_GGUF_STRING || n == 0 || n > (1u << 24))
            return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: missing or invalid tokenizer.ggml.tokens");
        h->n_vocab = (int)n;
    }
    return check_hparams(h, err, cap);
}

/* A special token id: absent -> the tokenizer's default; -1 or 0xFFFFFFFF -> none;
 * other out-of-range values are passed on for the tokenizer to reject. */
static int32_t special_id(const skv_gguf *g, const char *key)
{
    int64_t v;
    int rc = skv_gguf_get_int(g, key, &v);
    if (rc == SKV_ERR_RANGE) return SKV_TOKEN_DEFAULT;
    if (rc != SKV_OK || v == -1 || v == 0xFFFFFFFFll) return SKV_TOKEN_NONE;
    return v < INT32_MIN || v > INT32_MAX ? INT32_MAX : (int32_t)v;
}

static int gguf_tokenizer(skv_model *m, char *err, size_t cap)
{
    const skv_gguf *g = m->gguf;
    skv_tokenizer_desc d;
    skv_gguf_str s, pre;
    size_t n = (size_t)m->info.n_vocab, nm = 0;
    uint32_t et;
    int64_t v;
    int rc = SKV_ERR_NOMEM, b;
    skv_strref *toks = NULL, *merges = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    memset(&d, 0, sizeof d);
    (void)v;
    if (skv_gguf_get_str(g, "tokenizer.ggml.model", &s) != SKV_OK)
        return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: missing tokenizer.ggml.model");
    if (s.len == 5 && !memcmp(s.ptr, "llama", 5)) d.kind = SKV_TOKENIZER_SPM;
    else if (s.len == 4 && !memcmp(s.ptr, "gpt2", 4)) d.kind = SKV_TOKENIZER_GPT2;
    else
        return skv_errf(err, cap, SKV_ERR_UNSUPPORTED, "tokenizer '%.*s' is not supported (llama, gpt2 are)",
                        (int)(s.len > 20 ? 20 : s.len), s.ptr);
    char prebuf[64] = "default";
    if (skv_gguf_get_str(g, "tokenizer.ggml.pre", &pre) == SKV_OK)
        snprintf(prebuf, sizeof prebuf, "%.*s", (int)(pre.len > 60 ? 60 : pre.len), pre.ptr);
    d.pre = prebuf;
    toks = malloc(n * sizeof *toks);
    if (!toks) goto done;
    {
        skv_gguf_str *tmp = (skv_gguf_str *)toks; /* identical layout: {ptr, len} */
        _Static_assert(sizeof(skv_gguf_str) == sizeof(skv_strref), "string ref layouts must match");
        if (skv_gguf_arr_strings(g, "tokenizer.ggml.tokens", tmp, n) != SKV_OK) {
            rc = skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: bad tokenizer.ggml.tokens");
            goto done;
        }
    }
    if (skv_gguf_has(g, "tokenizer.ggml.scores")) {
        if (!(scores = malloc(n * sizeof *scores))) goto done;
        if (skv_gguf_arr_f32(g, "tokenizer.ggml.scores", scores, n) != SKV_OK) {
            rc = skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: tokenizer.ggml.scores must be %zu f32 values", n);
            goto done;
        }
    }
    if (skv_gguf_has(g, "tokenizer.ggml.token_type")) {
        if (!(types = malloc(n * sizeof *types))) goto done;
        if (skv_gguf_arr_i32(g, "tokenizer.ggml.token_type", types, n) != SKV_OK) {
            rc = skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: tokenizer.ggml.token_type must be %zu integers", n);
            goto done;
        }
    }
    if (skv_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &nm) == SKV_OK) {
        if (et != SKV_GGUF_STRING || nm > (1u << 24) || !(merges = malloc((nm ? nm : 1) * sizeof *merges)) ||
            skv_gguf_arr_strings(g, "tokenizer.ggml.merges", (skv_gguf_str *)merges, nm) != SKV_OK) {
            rc = skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: bad tokenizer.ggml.merges");
            goto done;
        }
    }
    d.n_vocab = n;
    d.tokens = toks;
    d.scores = scores;
    d.types = types;
    d.n_merges = nm;
    d.merges = merges;
    d.bos_id = special_id(g, "tokenizer.ggml.bos_token_id");
    d.eos_id = special_id(g, "tokenizer.ggml.eos_token_id");
    d.unk_id = special_id(g, "tokenizer.ggml.unknown_token_id");
    d.pad_id = special_id(g, "tokenizer.ggml.padding_token_id");
    d.add_bos = skv_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == SKV_OK ? b : -1;
    d.add_eos = skv_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) == SKV_OK ? b : -1;
    d.add_space_prefix = skv_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) == SKV_OK ? b : -1;
    rc = skv_tokenizer_create(&d, &m->tok, err, cap);
done:
    if (rc == SKV_ERR_NOMEM) skv_errf(err, cap, rc, "out of memory loading the tokenizer");
    free(toks);
    free(merges);
    free(scores);
    free(types);
    return rc;
}

static int load_gguf(skv_model *m, const char *path, char *err, size_t cap)
{
    skv_model_info *h = &m->info;
    const skv_gguf *g;
    float *freq_factors = NULL;
    char name[96];
    int rc;
    if ((rc = skv_gguf_open(path, &m->gguf, err, cap))) return rc;
    g = m->gguf;
    snprintf(h->format, sizeof h->format, "gguf");
    if ((rc = gguf_hparams(m, err, cap))) return rc;
    size_t D = (size_t)h->n_embd, F = (size_t)h->n_ff, V = (size_t)h->n_vocab;
    size_t Q = (size_t)h->n_head * (size_t)h->head_dim, KV = (size_t)h->n_head_kv * (size_t)h->head_dim;
    skv_weight nw;
    if ((rc = gguf_weight(g, "token_embd.weight", D, V, &m->tok_embd, err, cap))) return rc;
    if (skv_gguf_find_tensor(g, "output.weight")) {
        if ((rc = gguf_weight(g, "output.weight", D, V, &m->output, err, cap))) return rc;
    } else {
        m->output = m->tok_embd;
        h->tied_output = 1;
    }
    {
        const skv_gguf_tensor *t = skv_gguf_find_tensor(g, "output_norm.weight");
        if (!t || t->n_elements != D || !skv_dequant_supported(t->type) || t->ne[0] != D)
            return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: missing or malformed output_norm.weight");
        nw = (skv_weight){t->type, t->data, t->nbytes, D, 1};
        if (!(m->output_norm = norm_copy(&nw, err, cap, &rc))) return rc;
    }
    if (!(m->layers = calloc((size_t)h->n_layer, sizeof *m->layers))) return skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
    for (int l = 0; l < h->n_layer; l++) {
        skv_layer *L = &m->layers[l];
#define W(field, nm, K_, N_)                                                          \
    snprintf(name, sizeof name, "blk.%d." nm ".weight", l);                           \
    if ((rc = gguf_weight(g, name, K_, N_, &L->field, err, cap))) return rc
        W(wq, "attn_q", D, Q);
        W(wk, "attn_k", D, KV);
        W(wv, "attn_v", D, KV);
        W(wo, "attn_output", Q, D);
        W(w1, "ffn_gate", D, F);
        W(w3, "ffn_up", D, F);
        W(w2, "ffn_down", F, D);
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        if ((rc = gguf_weight(g, name, D, 1, &nw, err, cap)) || !(L->attn_norm = norm_copy(&nw, err, cap, &rc))) return rc;
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        if ((rc = gguf_weight(g, name, D, 1, &nw, err, cap)) || !(L->ffn_norm = norm_copy(&nw, err, cap, &rc))) return rc;
#undef W
    }
    {
        const skv_gguf_tensor *t = skv_gguf_find_tensor(g, "rope_freqs.weight");
        if (t) {
            if (t->type != SKV_GGML_F32 || t->n_elements != (uint64_t)h->rope_dim / 2)
                return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: rope_freqs.weight must be %d f32 values", h->rope_dim / 2);
            if (!(freq_factors = malloc((size_t)h->rope_dim / 2 * sizeof *freq_factors)))
                return skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
            for (int i = 0; i < h->rope_dim / 2; i++) {
                freq_factors[i] = skv_rdf32(t->data + 4 * (size_t)i); /* byte reads: any alignment */
                if (!(freq_factors[i] > 0.0f) || !isfinite(freq_factors[i])) {
                    free(freq_factors);
                    return skv_errf(err, cap, SKV_ERR_FORMAT, "GGUF: rope_freqs.weight holds a non-positive factor");
                }
            }
        }
    }
    rc = init_rope(m, freq_factors, err, cap);
    free(freq_factors);
    if (rc) return rc;
    h->weight_type = (int)m->layers[0].wq.type;
    h->file_bytes = skv_gguf_file_size(g);
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
    *w = (skv_weight){SKV_GGML_F32, (const uint8_t *)data, K * 4, K, N};
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

static int load_l2c(skv_model *m, const char *path, const char *tok_path, char *err, size_t cap)
{
    skv_model_info *h = &m->info;
    const uint8_t *p, *end;
    const float *emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final, *fr, *fi, *wcls;
    int32_t hdr[7];
    int rc;
    if ((rc = skv_mmap_open(path, &m->map, err, cap))) return rc;
    p = m->map.data;
    end = p + m->map.size;
    if (m->map.size < 28) return skv_errf(err, cap, SKV_ERR_FORMAT, "'%s' is neither GGUF nor a llama2.c checkpoint (too short)", path);
    for (int i = 0; i < 7; i++) hdr[i] = (int32_t)skv_rd32(p + 4 * i);
    p += 28;
    snprintf(h->format, sizeof h->format, "llama2c");
    snprintf(h->arch, sizeof h->arch, "llama");
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
    if ((rc = check_hparams(h, err, cap))) return rc;
    size_t D = (size_t)h->n_embd, F = (size_t)h->n_ff, V = (size_t)h->n_vocab, L = (size_t)h->n_layer;
    size_t KV = (size_t)h->n_head_kv * (size_t)h->head_dim, S = (size_t)h->n_ctx_train, hd2 = (size_t)h->head_dim / 2;
    /* all products below are < 2^20 * 2^20 * 2^12: no overflow in size_t */
    if (!l2c_take(&p, end, V * D, &emb) || !l2c_take(&p, end, L * D, &rms_att) || !l2c_take(&p, end, L * D * D, &wq) ||
        !l2c_take(&p, end, L * KV * D, &wk) || !l2c_take(&p, end, L * KV * D, &wv) || !l2c_take(&p, end, L * D * D, &wo) ||
        !l2c_take(&p, end, L * D, &rms_ffn) || !l2c_take(&p, end, L * F * D, &w1) || !l2c_take(&p, end, L * D * F, &w2) ||
        !l2c_take(&p, end, L * F * D, &w3) || !l2c_take(&p, end, D, &rms_final) || !l2c_take(&p, end, S * hd2, &fr) ||
        !l2c_take(&p, end, S * hd2, &fi))
        return skv_errf(err, cap, SKV_ERR_FORMAT, "llama2.c checkpoint '%s' is truncated for its header's sizes", path);
    wcls = emb;
    if (!h->tied_output && !l2c_take(&p, end, V * D, &wcls))
        return skv_errf(err, cap, SKV_ERR_FORMAT, "llama2.c checkpoint '%s' is truncated (classifier)", path);
    if (p != end) return skv_errf(err, cap, SKV_ERR_FORMAT, "llama2.c checkpoint '%s' has %zu unexpected trailing bytes", path, (size_t)(end - p));
    (void)fr;
    (void)fi;
    l2c_weight(&m->tok_embd, emb, D, V);
    l2c_weight(&m->output, wcls, D, V);
    if (!(m->layers = calloc(L, sizeof *m->layers)) || !(m->output_norm = malloc(D * sizeof(float))))
        return skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
    memcpy(m->output_norm, rms_final, D * sizeof(float));
    for (size_t l = 0; l < L; l++) {
        skv_layer *ly = &m->layers[l];
        l2c_weight(&ly->wq, wq + l * D * D, D, D);
        l2c_weight(&ly->wk, wk + l * KV * D, D, KV);
        l2c_weight(&ly->wv, wv + l * KV * D, D, KV);
        l2c_weight(&ly->wo, wo + l * D * D, D, D);
        l2c_weight(&ly->w1, w1 + l * F * D, D, F);
        l2c_weight(&ly->w2, w2 + l * D * F, F, D);
        l2c_weight(&ly->w3, w3 + l * F * D, D, F);
        if (!(ly->attn_norm = malloc(D * sizeof(float))) || !(ly->ffn_norm = malloc(D * sizeof(float))))
            return skv_errf(err, cap, SKV_ERR_NOMEM, "out of memory");
        memcpy(ly->attn_norm, rms_att + l * D, D * sizeof(float));
        memcpy(ly->ffn_norm, rms_ffn + l * D, D * sizeof(float));
    }
    if ((rc = init_rope(m, NULL, err, cap))) return rc;
    h->weight_type = SKV_DTYPE_F32;
    h->file_bytes = m->map.size;
    {
        char tp[4096];
        skv_mmap tm;
        const char *base = strrchr(path, '/');
        snprintf(h->name, sizeof h->name, "%s", base ? base + 1 : path);
        if (!find_l2c_tokenizer(path, h->n_vocab, tok_path, tp, sizeof tp))
            return skv_errf(err, cap, SKV_ERR_IO, "llama2.c checkpoint '%s': no tokenizer found (looked for tok%d.bin and tokenizer.bin beside it; pass one explicitly)",
                            path, h->n_vocab);
        if ((rc = skv_mmap_open(tp, &tm, err, cap))) return rc;
        rc = skv_tokenizer_load_llama2c(tm.data, tm.size, V, &m->tok, err, cap);
        skv_mmap_close(&tm);
        return rc;
    }
}

/* ---- public ---------------------------------------------------------------- */

static int64_t count_params(const skv_model_info *h)
{
    int64_t D = h->n_embd, F = h->n_ff, V = h->n_vocab, Q = (int64_t)h->n_head * h->head_dim;
    int64_t KV = (int64_t)h->n_head_kv * h->head_dim;
    int64_t per = D * Q * 2 + D * KV * 2 + 3 * D * F + 2 * D;
    return V * D * (h->tied_output ? 1 : 2) + D + per * h->n_layer;
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
    if (got == 4 && !memcmp(magic, "GGUF", 4)) rc = load_gguf(m, path, err, errcap);
    else rc = load_l2c(m, path, tokenizer_path, err, errcap);
    if (rc == SKV_OK && skv_tokenizer_n_vocab(m->tok) != (size_t)m->info.n_vocab)
        rc = skv_errf(err, errcap, SKV_ERR_FORMAT, "tokenizer has %zu tokens but the model has %d",
                      skv_tokenizer_n_vocab(m->tok), m->info.n_vocab);
    if (rc) {
        skv_model_free(m);
        return rc;
    }
    m->info.n_params = count_params(&m->info);
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
    if (m->layers)
        for (int l = 0; l < m->info.n_layer; l++) {
            free(m->layers[l].attn_norm);
            free(m->layers[l].ffn_norm);
        }
    free(m->layers);
    free(m->output_norm);
    free(m->rope_freq);
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
    uint8_t b[256];
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < 64 && i < n; k++, i++) skv_wrf32(b + 4 * k, v[i]);
        XXH3_128bits_update(st, b, 4 * k);
    }
}

static int fp_weight(XXH3_state_t *st, const skv_weight *w, float *row)
{
    fp_u32(st, (uint32_t)w->N);
    fp_u32(st, (uint32_t)w->K);
    for (size_t r = 0; r < w->N; r++) {
        skv_weight_row(w, r, row);
        fp_f32s(st, row, w->K);
    }
    return SKV_OK;
}

static int compute_fingerprint(skv_model *m)
{
    const skv_model_info *h;
    XXH3_state_t *st;
    float *row;
    size_t maxk;
    h = &m->info;
    maxk = (size_t)(h->n_ff > h->n_embd ? h->n_ff : h->n_embd);
    if ((size_t)h->n_head * (size_t)h->head_dim > maxk) maxk = (size_t)h->n_head * (size_t)h->head_dim;
    st = XXH3_createState();
    row = malloc(maxk * sizeof *row);
    if (!st || !row) {
        XXH3_freeState(st);
        free(row);
        return SKV_ERR_NOMEM;
    }
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, "seqkv-model-fp-1", 16);
    int32_t hp[] = {h->n_layer, h->n_embd, h->n_head, h->n_head_kv, h->head_dim, h->n_ff, h->n_vocab, h->rope_dim};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++) fp_u32(st, (uint32_t)hp[i]);
    fp_f32s(st, &h->norm_eps, 1);
    {
        float fq[2] = {(float)m->rope_scale, 0.0f};
        fp_f32s(st, fq, 1);
        for (int i = 0; i < h->rope_dim / 2; i++) {
            fq[0] = (float)m->rope_freq[i];
            fp_f32s(st, fq, 1);
        }
    }
    fp_weight(st, &m->tok_embd, row);
    for (int l = 0; l < h->n_layer; l++) {
        const skv_layer *L = &m->layers[l];
        fp_f32s(st, L->attn_norm, (size_t)h->n_embd);
        fp_weight(st, &L->wq, row);
        fp_weight(st, &L->wk, row);
        fp_weight(st, &L->wv, row);
        fp_weight(st, &L->wo, row);
        fp_f32s(st, L->ffn_norm, (size_t)h->n_embd);
        fp_weight(st, &L->w1, row);
        fp_weight(st, &L->w2, row);
        fp_weight(st, &L->w3, row);
    }
    fp_f32s(st, m->output_norm, (size_t)h->n_embd);
    fp_weight(st, &m->output, row); /* hashed even when tied: the values are what count */
    /* vocabulary: the bytes each token id stands for */
    for (int32_t t = 0; t < h->n_vocab; t++) {
        char piece[512];
        size_t len = 0;
        if (skv_tokenizer_piece(m->tok, t, piece, sizeof piece, &len) != SKV_OK) len = 0;
        fp_u32(st, (uint32_t)len);
        XXH3_128bits_update(st, piece, len);
    }
    XXH128_hash_t hv = XXH3_128bits_digest(st);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, hv);
    memcpy(m->fp, c.digest, 16);
    m->fp_done = 1;
    XXH3_freeState(st);
    free(row);
    return SKV_OK;
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
