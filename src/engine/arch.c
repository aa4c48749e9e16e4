/* The architecture table and the per-layer tensor descriptions (arch.h). */
#include "engine/arch.h"
#include "core/fpguard.h"

#include <stdio.h>
#include <string.h>

#include "engine/model.h"

#define LT(name, k_, n_, member) {name, SKV_DIM_##k_, SKV_DIM_##n_, offsetof(skv_layer, member)}

const skv_tensor_desc skv_layer_tensors[SKV_LT_COUNT] = {
    [SKV_LT_ATTN_NORM] = LT("attn_norm.weight", EMBD, 1, attn_norm),
    [SKV_LT_Q] = LT("attn_q.weight", EMBD, Q, wq),
    [SKV_LT_K] = LT("attn_k.weight", EMBD, KV, wk),
    [SKV_LT_V] = LT("attn_v.weight", EMBD, KV, wv),
    [SKV_LT_O] = LT("attn_output.weight", Q, EMBD, wo),
    [SKV_LT_FFN_NORM] = LT("ffn_norm.weight", EMBD, 1, ffn_norm),
    [SKV_LT_GATE] = LT("ffn_gate.weight", EMBD, FF, w1),
    [SKV_LT_DOWN] = LT("ffn_down.weight", FF, EMBD, w2),
    [SKV_LT_UP] = LT("ffn_up.weight", EMBD, FF, w3),
    [SKV_LT_Q_BIAS] = LT("attn_q.bias", Q, 1, bq),
    [SKV_LT_K_BIAS] = LT("attn_k.bias", KV, 1, bk),
    [SKV_LT_V_BIAS] = LT("attn_v.bias", KV, 1, bv),
    [SKV_LT_Q_NORM] = LT("attn_q_norm.weight", HEAD, 1, q_norm),
    [SKV_LT_K_NORM] = LT("attn_k_norm.weight", HEAD, 1, k_norm),
    [SKV_LT_QKV] = LT("attn_qkv.weight", EMBD, QKV, wqkv),
    [SKV_LT_GATE_UP] = LT("ffn_up.weight", EMBD, FF2, w13),
    [SKV_LT_ATTN_POST_NORM] = LT("post_attention_norm.weight", EMBD, 1, attn_post_norm),
    [SKV_LT_FFN_POST_NORM] = LT("post_ffw_norm.weight", EMBD, 1, ffn_post_norm),
};

#undef LT

/* The pre-norm decoder every row starts from: RMSNorm, attention, RMSNorm, SwiGLU FFN. */
#define BASE_LAYER                                                                                  \
    [SKV_LT_ATTN_NORM] = SKV_USE_REQUIRED, [SKV_LT_Q] = SKV_USE_REQUIRED, [SKV_LT_K] = SKV_USE_REQUIRED, \
    [SKV_LT_V] = SKV_USE_REQUIRED, [SKV_LT_O] = SKV_USE_REQUIRED, [SKV_LT_FFN_NORM] = SKV_USE_REQUIRED,  \
    [SKV_LT_GATE] = SKV_USE_REQUIRED, [SKV_LT_DOWN] = SKV_USE_REQUIRED, [SKV_LT_UP] = SKV_USE_REQUIRED

/* phi3: one fused Q|K|V matrix and one fused gate|up matrix instead of five. */
#define FUSED_LAYER                                                                                 \
    [SKV_LT_ATTN_NORM] = SKV_USE_REQUIRED, [SKV_LT_QKV] = SKV_USE_REQUIRED, [SKV_LT_O] = SKV_USE_REQUIRED, \
    [SKV_LT_FFN_NORM] = SKV_USE_REQUIRED, [SKV_LT_GATE_UP] = SKV_USE_REQUIRED, [SKV_LT_DOWN] = SKV_USE_REQUIRED

#define QK_NORMS [SKV_LT_Q_NORM] = SKV_USE_REQUIRED, [SKV_LT_K_NORM] = SKV_USE_REQUIRED
#define POST_NORMS [SKV_LT_ATTN_POST_NORM] = SKV_USE_REQUIRED, [SKV_LT_FFN_POST_NORM] = SKV_USE_REQUIRED
#define GEMMA_FLAGS (SKV_ARCH_EMBD_SCALE | SKV_ARCH_GELU | SKV_ARCH_FINAL_SOFTCAP | SKV_ARCH_SWA)

static const skv_arch archs[] = {
    {.name = "llama", .rope = SKV_ROPE_NORM, .flags = SKV_ARCH_NONE, .use = {BASE_LAYER}},
    {.name = "qwen2",
     .rope = SKV_ROPE_NEOX,
     .use = {BASE_LAYER, [SKV_LT_Q_BIAS] = SKV_USE_REQUIRED, [SKV_LT_K_BIAS] = SKV_USE_REQUIRED,
             [SKV_LT_V_BIAS] = SKV_USE_REQUIRED}},
    {.name = "qwen3", .rope = SKV_ROPE_NEOX, .use = {BASE_LAYER, QK_NORMS}},
    {.name = "phi3", .rope = SKV_ROPE_NEOX, .flags = SKV_ARCH_ROPE_SHORT, .use = {FUSED_LAYER}},
    {.name = "gemma2",
     .rope = SKV_ROPE_NEOX,
     .flags = GEMMA_FLAGS | SKV_ARCH_ATTN_SOFTCAP,
     .use = {BASE_LAYER, POST_NORMS},
     .attn_softcap = 50.0f,
     .final_softcap = 30.0f,
     .swa_window = 4096,
     .swa_period = 2,
     .wide_scale_layers = 46},
    {.name = "gemma3",
     .rope = SKV_ROPE_NEOX,
     .flags = GEMMA_FLAGS,
     .use = {BASE_LAYER, POST_NORMS, QK_NORMS},
     .swa_period = 6,
     .swa_rope_base = 10000.0f,
     .wide_scale_layers = 62},
};

#undef BASE_LAYER
#undef FUSED_LAYER
#undef QK_NORMS
#undef POST_NORMS
#undef GEMMA_FLAGS

const skv_arch *skv_arch_find(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strlen(archs[i].name) == len && !memcmp(archs[i].name, name, len)) return &archs[i];
    return NULL;
}

const skv_arch *skv_arch_llama2c(void) { return &archs[0]; }

void skv_arch_list(char *buf, size_t cap)
{
    size_t used = 0;
    if (cap) buf[0] = '\0';
    for (size_t i = 0; i < sizeof archs / sizeof archs[0] && used < cap; i++) {
        int n = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", archs[i].name);
        if (n < 0) return;
        used += (size_t)n;
    }
}

size_t skv_dim_size(const skv_model_info *h, skv_dim d)
{
    switch (d) {
    case SKV_DIM_EMBD: return (size_t)h->n_embd;
    case SKV_DIM_Q: return (size_t)h->n_head * (size_t)h->head_dim;
    case SKV_DIM_KV: return (size_t)h->n_head_kv * (size_t)h->head_dim;
    case SKV_DIM_FF: return (size_t)h->n_ff;
    case SKV_DIM_HEAD: return (size_t)h->head_dim;
    case SKV_DIM_QKV: return (size_t)(h->n_head + 2 * h->n_head_kv) * (size_t)h->head_dim;
    case SKV_DIM_FF2: return 2 * (size_t)h->n_ff;
    case SKV_DIM_1: break;
    }
    return 1;
}

void skv_rope_apply(skv_rope_style style, void (*rope)(float *, const float *, const float *, size_t), float *x,
                    const float *cos_t, const float *sin_t, size_t n_pairs, float *tmp)
{
    if (style == SKV_ROPE_NORM) {
        rope(x, cos_t, sin_t, n_pairs);
        return;
    }
    for (size_t i = 0; i < n_pairs; i++) {
        tmp[2 * i] = x[i];
        tmp[2 * i + 1] = x[i + n_pairs];
    }
    rope(tmp, cos_t, sin_t, n_pairs);
    for (size_t i = 0; i < n_pairs; i++) {
        x[i] = tmp[2 * i];
        x[i + n_pairs] = tmp[2 * i + 1];
    }
}
