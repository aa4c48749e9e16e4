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
};

#undef LT

/* The pre-norm decoder every row starts from: RMSNorm, attention, RMSNorm, SwiGLU FFN. */
#define BASE_LAYER                                                                                  \
    [SKV_LT_ATTN_NORM] = SKV_USE_REQUIRED, [SKV_LT_Q] = SKV_USE_REQUIRED, [SKV_LT_K] = SKV_USE_REQUIRED, \
    [SKV_LT_V] = SKV_USE_REQUIRED, [SKV_LT_O] = SKV_USE_REQUIRED, [SKV_LT_FFN_NORM] = SKV_USE_REQUIRED,  \
    [SKV_LT_GATE] = SKV_USE_REQUIRED, [SKV_LT_DOWN] = SKV_USE_REQUIRED, [SKV_LT_UP] = SKV_USE_REQUIRED

static const skv_arch archs[] = {
    {.name = "llama", .rope = SKV_ROPE_NORM, .flags = SKV_ARCH_NONE, .use = {BASE_LAYER}},
};

#undef BASE_LAYER

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
