/* GGUF models: hyper-parameters from the file's keys (through the architecture table,
 * arch.c), the tensors as views into the mapping, the tokenizer from its vocabulary keys. */
#include "core/fpguard.h"
#include "engine/model_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "engine/ops.h"
#include "engine/vocab_load.h"

/* ---- GGUF ------------------------------------------------------------------ */

static int gguf_weight(const skv_gguf *g, const char *name, size_t K, size_t N, skv_weight *w, skv_err *err)
{
    const skv_gguf_tensor *t = skv_gguf_find_tensor(g, name);
    if (!t) return skv_fail(err, SKV_ERR_FORMAT, "GGUF: missing tensor '%s'", name);
    if (t->ne[0] != K || t->ne[1] != N || t->ne[2] != 1 || t->ne[3] != 1)
        return skv_fail(err, SKV_ERR_FORMAT, "GGUF tensor '%s' has shape [%llu, %llu, %llu], expected [%zu, %zu]",
                        name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                        (unsigned long long)t->ne[2], K, N);
    if (!skv_dequant_supported(t->type)) {
        char names[160];
        skv_type_readable_names(names, sizeof names);
        return skv_fail(err, SKV_ERR_UNSUPPORTED, "GGUF tensor '%s' has type %s; seqkv supports %s", name,
                        skv_ggml_type_name(t->type), names);
    }
    if (t->type == SKV_GGML_F32 && ((uintptr_t)t->data & 3))
        return skv_fail(err, SKV_ERR_UNSUPPORTED,
                        "GGUF tensor '%s': f32 data at an offset that is not a multiple of 4 (general.alignment too small)",
                        name);
    *w = (skv_weight){.type = t->type, .data = t->data, .K = K, .N = N, .row_bytes = t->nbytes / N};
    return SKV_OK;
}

static int gguf_i(const skv_gguf *g, const char *key, int *out, int dflt, int required, skv_err *err)
{
    int64_t v;
    int rc = skv_gguf_get_int(g, key, &v);
    if (rc == SKV_ERR_RANGE && !required) {
        *out = dflt;
        return SKV_OK;
    }
    if (rc == SKV_ERR_RANGE) return skv_fail(err, SKV_ERR_FORMAT, "GGUF: missing metadata '%s'", key);
    if (rc || v < 0 || v > INT32_MAX)
        return skv_fail(err, SKV_ERR_FORMAT, "GGUF: metadata '%s' is not a valid integer", key);
    *out = (int)v;
    return SKV_OK;
}

static int gguf_f(const skv_gguf *g, const char *key, float *out, float dflt, skv_err *err)
{
    double v;
    int rc = skv_gguf_get_float(g, key, &v);
    if (rc == SKV_ERR_RANGE) {
        *out = dflt;
        return SKV_OK;
    }
    if (rc) return skv_fail(err, SKV_ERR_FORMAT, "GGUF: metadata '%s' is not a number", key);
    *out = (float)v;
    return SKV_OK;
}

/* Arch-prefixed metadata ("llama.block_count"): the key prefix is the row's name. */
static const char *arch_key(const skv_model *m, const char *suffix, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.%s", m->arch->name, suffix);
    return buf;
}

static int arch_i(const skv_model *m, const char *suffix, int *out, int dflt, int required, skv_err *err)
{
    char key[128];
    return gguf_i(m->gguf, arch_key(m, suffix, key, sizeof key), out, dflt, required, err);
}

static int arch_f(const skv_model *m, const char *suffix, float *out, float dflt, skv_err *err)
{
    char key[128];
    return gguf_f(m->gguf, arch_key(m, suffix, key, sizeof key), out, dflt, err);
}

/* general.architecture picks the table row; general.name is only shown. */
static int gguf_arch(skv_model *m, skv_err *err)
{
    skv_gguf_str s;
    char names[256];
    if (skv_gguf_get_str(m->gguf, "general.architecture", &s) != SKV_OK)
        return skv_fail(err, SKV_ERR_FORMAT, "GGUF: missing general.architecture");
    if (!(m->arch = skv_arch_find(s.ptr, s.len))) {
        skv_arch_list(names, sizeof names);
        return skv_fail(err, SKV_ERR_UNSUPPORTED, "architecture '%.*s' is not supported (seqkv runs: %s)",
                        (int)(s.len > 40 ? 40 : s.len), s.ptr, names);
    }
    snprintf(m->info.arch, sizeof m->info.arch, "%s", m->arch->name);
    if (skv_gguf_get_str(m->gguf, "general.name", &s) == SKV_OK)
        snprintf(m->info.name, sizeof m->info.name, "%.*s", (int)(s.len > 90 ? 90 : s.len), s.ptr);
    return SKV_OK;
}

static int gguf_sizes(skv_model *m, skv_err *err)
{
    skv_model_info *h = &m->info;
    int rc, key_len = 0, val_len = 0;
    if ((rc = arch_i(m, "block_count", &h->n_layer, 0, 1, err)) ||
        (rc = arch_i(m, "embedding_length", &h->n_embd, 0, 1, err)) ||
        (rc = arch_i(m, "feed_forward_length", &h->n_ff, 0, 1, err)) ||
        (rc = arch_i(m, "attention.head_count", &h->n_head, 0, 1, err)) ||
        (rc = arch_i(m, "attention.head_count_kv", &h->n_head_kv, h->n_head, 0, err)) ||
        (rc = arch_i(m, "context_length", &h->n_ctx_train, 2048, 0, err)))
        return rc;
    if (h->n_head < 1) return skv_fail(err, SKV_ERR_FORMAT, "GGUF: head count is 0");
    if ((rc = arch_i(m, "attention.key_length", &key_len, h->n_embd / h->n_head, 0, err)) ||
        (rc = arch_i(m, "attention.value_length", &val_len, key_len, 0, err)))
        return rc;
    if (key_len != val_len)
        return skv_fail(err, SKV_ERR_UNSUPPORTED, "different key (%d) and value (%d) head sizes", key_len, val_len);
    h->head_dim = key_len;
    return SKV_OK;
}

/* RoPE position scaling as llama.cpp reads it: rope.scaling.type absent means linear;
 * the factor is rope.scaling.factor, else the older rope.scale_linear; 0 or absent: none. */
static int gguf_rope_scaling(skv_model *m, skv_err *err)
{
    skv_gguf_str s;
    char key[128];
    float factor = 0.0f;
    int rc;
    m->rope_scale = 1.0;
    if (skv_gguf_get_str(m->gguf, arch_key(m, "rope.scaling.type", key, sizeof key), &s) == SKV_OK) {
        if (s.len == 4 && !memcmp(s.ptr, "none", 4)) {
            if (arch_f(m, "rope.scaling.factor", &factor, 0.0f, NULL) == SKV_OK && factor != 0.0f && factor != 1.0f)
                skv_log(SKV_LOG_WARN, "GGUF: %s.rope.scaling.factor %g ignored (rope.scaling.type is 'none')",
                        m->info.arch, (double)factor);
            return SKV_OK;
        }
        if (!(s.len == 6 && !memcmp(s.ptr, "linear", 6)))
            return skv_fail(err, SKV_ERR_UNSUPPORTED, "rope scaling '%.*s' is not supported (none, linear are)",
                            (int)(s.len > 20 ? 20 : s.len), s.ptr);
    }
    if ((rc = arch_f(m, "rope.scaling.factor", &factor, 0.0f, err))) return rc;
    if (factor == 0.0f && (rc = arch_f(m, "rope.scale_linear", &factor, 0.0f, err))) return rc;
    if (factor == 0.0f) return SKV_OK;
    if (!(factor >= 1e-6f && factor <= 1e6f))
        return skv_fail(err, SKV_ERR_FORMAT, "bad rope scaling factor %g (1e-6 to 1e6, or 0 for none)", (double)factor);
    m->rope_scale = 1.0 / factor;
    return SKV_OK;
}

/* Rotary dimension, base and scaling (none or linear), and the RMSNorm epsilon. */
static int gguf_rope(skv_model *m, skv_err *err)
{
    skv_model_info *h = &m->info;
    int rc;
    if ((rc = arch_i(m, "rope.dimension_count", &h->rope_dim, h->head_dim, 0, err)) ||
        (rc = arch_f(m, "rope.freq_base", &h->rope_base, 10000.0f, err)) ||
        (rc = arch_f(m, "attention.layer_norm_rms_epsilon", &h->norm_eps, 1e-5f, err)))
        return rc;
    return gguf_rope_scaling(m, err);
}


static int finite_in(float v, float lo, float hi) { return isfinite(v) && v >= lo && v < hi; }

/* Sliding-window layers: the window, the layer pattern and their own RoPE base. */
static int gguf_swa(skv_model *m, skv_err *err)
{
    const skv_arch *a = m->arch;
    skv_arch_params *p = &m->ap;
    float base;
    int rc;
    if ((rc = arch_i(m, "attention.sliding_window", &p->swa_window, a->swa_window, 0, err)) ||
        (rc = arch_i(m, "attention.sliding_window_pattern", &p->swa_period, a->swa_period, 0, err)))
        return rc;
    if (p->swa_period > 4096) return skv_fail(err, SKV_ERR_FORMAT, "sliding window pattern %d is implausible", p->swa_period);
    if (p->swa_window == 0) return SKV_OK;
    if ((rc = arch_f(m, "rope.freq_base_swa", &base, a->swa_rope_base > 0.0f ? a->swa_rope_base : m->info.rope_base, err)))
        return rc;
    if (!finite_in(base, 1e-3f, 1e30f)) return skv_fail(err, SKV_ERR_FORMAT, "invalid sliding-window rope base %g", (double)base);
    p->rope_scale_swa = a->swa_rope_base > 0.0f ? 1.0 : m->rope_scale;
    if (base == m->info.rope_base && p->rope_scale_swa == m->rope_scale) return SKV_OK; /* shares the tables */
    if (!(p->rope_freq_swa = skv_model_rope_freqs(m, base, NULL))) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    return SKV_OK;
}

/* The row's extra steps and their hyper-parameters (arch.h SKV_ARCH_*). */
static int gguf_arch_params(skv_model *m, skv_err *err)
{
    const skv_arch *a = m->arch;
    skv_arch_params *p = &m->ap;
    float mscale = 1.0f;
    int rc = SKV_OK;
    skv_model_arch_defaults(m);
    if (a->flags & SKV_ARCH_EMBD_SCALE) p->embd_scale = sqrtf((float)m->info.n_embd);
    if (a->wide_scale_layers && m->info.n_layer == a->wide_scale_layers)
        p->attn_scale = 1.0f / sqrtf((float)(m->info.n_embd / m->info.n_head));
    if (((a->flags & SKV_ARCH_ATTN_SOFTCAP) &&
         (rc = arch_f(m, "attn_logit_softcapping", &p->attn_softcap, a->attn_softcap, err))) ||
        ((a->flags & SKV_ARCH_FINAL_SOFTCAP) &&
         (rc = arch_f(m, "final_logit_softcapping", &p->final_softcap, a->final_softcap, err))) ||
        ((a->flags & SKV_ARCH_ROPE_SHORT) && (rc = arch_f(m, "rope.scaling.attn_factor", &mscale, 1.0f, err))))
        return rc;
    if (!finite_in(p->attn_softcap, 0.0f, 1e6f) || !finite_in(p->final_softcap, 0.0f, 1e6f) ||
        !finite_in(mscale, 1e-3f, 1e3f))
        return skv_fail(err, SKV_ERR_FORMAT, "invalid soft-capping (%g, %g) or rope attention factor %g",
                        (double)p->attn_softcap, (double)p->final_softcap, (double)mscale);
    p->rope_mscale = (double)mscale;
    return (a->flags & SKV_ARCH_SWA) ? gguf_swa(m, err) : SKV_OK;
}



static int gguf_hparams(skv_model *m, skv_err *err)
{
    uint32_t et;
    size_t n;
    int rc;
    if ((rc = gguf_arch(m, err)) || (rc = gguf_sizes(m, err)) || (rc = gguf_rope(m, err))) return rc;
    if (skv_gguf_get_arr(m->gguf, "tokenizer.ggml.tokens", &et, &n) != SKV_OK || et != SKV_GGUF_STRING || n == 0 ||
        n > (1u << 24))
        return skv_fail(err, SKV_ERR_FORMAT, "GGUF: missing or invalid tokenizer.ggml.tokens");
    m->info.n_vocab = (int)n;
    if ((rc = skv_model_check_hparams(&m->info, err))) return rc;
    return gguf_arch_params(m, err);
}

static int gguf_tokenizer(skv_model *m, skv_err *err)
{
    return skv_vocab_from_gguf(m->gguf, &m->tok, err);
}

/* ---- GGUF tensors ------------------------------------------------------------------ */

static int gguf_layer(skv_model *m, int l, skv_err *err)
{
    char name[96];
    for (int t = 0; t < SKV_LT_COUNT; t++) {
        const skv_tensor_desc *d = &skv_layer_tensors[t];
        skv_weight w;
        int rc;
        if (m->arch->use[t] == SKV_USE_NONE) continue;
        snprintf(name, sizeof name, "blk.%d.%s", l, d->gguf);
        if (m->arch->use[t] == SKV_USE_OPTIONAL && !skv_gguf_find_tensor(m->gguf, name)) continue;
        if ((rc = gguf_weight(m->gguf, name, skv_dim_size(&m->info, d->k), skv_dim_size(&m->info, d->n), &w, err)) ||
            (rc = skv_layer_store(&m->layers[l], (skv_layer_tensor)t, &w, err)))
            return rc;
    }
    return SKV_OK;
}

/* token_embd, output (absent: tied to token_embd) and output_norm: every architecture's. */
static int gguf_model_tensors(skv_model *m, skv_err *err)
{
    const skv_gguf *g = m->gguf;
    size_t D = (size_t)m->info.n_embd, V = (size_t)m->info.n_vocab;
    skv_weight nw;
    int rc;
    if ((rc = gguf_weight(g, "token_embd.weight", D, V, &m->tok_embd, err))) return rc;
    if (skv_gguf_find_tensor(g, "output.weight")) {
        if ((rc = gguf_weight(g, "output.weight", D, V, &m->output, err))) return rc;
    } else {
        m->output = m->tok_embd;
        m->info.tied_output = 1;
    }
    if ((rc = gguf_weight(g, "output_norm.weight", D, 1, &nw, err))) return rc;
    if (!(m->output_norm = skv_weight_vector_copy(&nw, err, &rc))) return rc;
    return SKV_OK;
}

/* Optional per-pair frequency divisors (llama3-style RoPE); *out stays NULL without them. */
static int gguf_rope_factors(const skv_model *m, float **out, skv_err *err)
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
        return skv_fail(err, SKV_ERR_FORMAT, "GGUF: %s must be %d f32 values", name, np);
    if (!(*out = malloc((size_t)np * sizeof **out))) return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    for (int i = 0; i < np; i++) {
        (*out)[i] = skv_rdf32(t->data + 4 * (size_t)i); /* byte reads: any alignment */
        if (!((*out)[i] > 0.0f) || !isfinite((*out)[i]))
            return skv_fail(err, SKV_ERR_FORMAT, "GGUF: %s holds a non-positive factor", name);
    }
    return SKV_OK;
}

/* A RoPE option as an override of the architecture's key: "<arch>.suffix=TYPE:value". */
static int rope_override(skv_gguf *g, skv_gguf_str arch, const char *suffix, const char *typed, skv_err *err)
{
    char spec[256];
    snprintf(spec, sizeof spec, "%.*s.%s=%s", (int)(arch.len > 100 ? 100 : arch.len), arch.ptr, suffix, typed);
    return skv_gguf_override(g, spec, err);
}

/* The caller's metadata overrides, then its RoPE options as overrides of the keys of the
 * architecture the file (so overridden) names: they win over both, as llama.cpp's flags. */
static int apply_overrides(skv_gguf *g, const skv_model_params *p, skv_err *err)
{
    skv_gguf_str arch;
    char v[64];
    int rc = SKV_OK;
    for (size_t i = 0; i < p->n_overrides && !rc; i++) rc = skv_gguf_override(g, p->overrides[i], err);
    const char *sc = p->rope_scaling && *p->rope_scaling ? p->rope_scaling : NULL;
    if (rc || (!sc && p->rope_freq_base <= 0 && p->rope_freq_scale <= 0)) return rc;
    if (sc && strcmp(sc, "none") && strcmp(sc, "linear"))
        return skv_fail(err, strcmp(sc, "yarn") ? SKV_ERR_INVALID_ARG : SKV_ERR_UNSUPPORTED,
                        "rope scaling '%.20s' is not supported (none, linear are)", sc);
    if (!(p->rope_freq_base >= 0 && p->rope_freq_base < 1e30) || !(p->rope_freq_scale >= 0 && p->rope_freq_scale <= 1e6))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "rope freq base %g / freq scale %g: out of range", p->rope_freq_base,
                        p->rope_freq_scale);
    if (skv_gguf_get_str(g, "general.architecture", &arch)) return SKV_OK; /* the load says so */
    if (p->rope_freq_base > 0) snprintf(v, sizeof v, "float:%.17g", p->rope_freq_base), rc = rope_override(g, arch, "rope.freq_base", v, err);
    if (!rc && sc) rc = rope_override(g, arch, "rope.scaling.type", !strcmp(sc, "none") ? "str:none" : "str:linear", err);
    if (!rc && p->rope_freq_scale > 0) {
        if (!sc) rc = rope_override(g, arch, "rope.scaling.type", "str:linear", err);
        snprintf(v, sizeof v, "float:%.17g", 1.0 / p->rope_freq_scale);
        if (!rc) rc = rope_override(g, arch, "rope.scaling.factor", v, err);
    }
    return rc;
}

int skv_model_load_gguf(skv_model *m, const char *path, const skv_model_params *p, skv_err *err)
{
    skv_model_info *h = &m->info;
    float *freq_factors = NULL;
    int rc;
    if ((rc = skv_gguf_open(path, &m->gguf, err)) || (rc = apply_overrides(m->gguf, p, err))) return rc;
    snprintf(h->format, sizeof h->format, "gguf");
    if ((rc = gguf_hparams(m, err)) || (rc = gguf_model_tensors(m, err))) return rc;
    if (!(m->layers = calloc((size_t)h->n_layer, sizeof *m->layers)))
        return skv_fail(err, SKV_ERR_NOMEM, "out of memory");
    for (int l = 0; l < h->n_layer; l++)
        if ((rc = gguf_layer(m, l, err))) return rc;
    if ((rc = gguf_rope_factors(m, &freq_factors, err)) == SKV_OK) rc = skv_model_init_rope(m, freq_factors, err);
    free(freq_factors);
    if (rc) return rc;
    h->weight_type = (int)(m->layers[0].wq.data ? m->layers[0].wq.type : m->layers[0].wqkv.type);
    h->file_bytes = skv_gguf_file_size(m->gguf);
    return gguf_tokenizer(m, err);
}
