/* Architecture descriptors: one table row per model family (docs/architectures.md).
 *
 * A row says what the loader reads (model_gguf.c: the GGUF metadata key prefix, which per-layer
 * tensors are required, optional or absent) and what the forward pass does with them
 * (forward.c: the RoPE pairing, the SKV_ARCH_* steps). Tensors shared by every family
 * (token_embd, output_norm, output, rope_freqs) are read by model_gguf.c for all rows.
 *
 * Per-layer tensors are described once, in skv_layer_tensors[] (arch.c): GGUF name, shape
 * as dimension symbols, and the skv_layer field they land in. Shapes follow model.h: a
 * matrix W[n][k] maps k inputs to n outputs; a vector (n == SKV_DIM_1) holds k values and
 * is kept as an f32 copy. An optional tensor the file lacks leaves its field zero (NULL
 * data / NULL vector), which is how the forward pass tells that it is absent. */
#ifndef SKV_ARCH_H
#define SKV_ARCH_H

#include <stddef.h>

#include "seqkv.h"

/* How RoPE pairs the first rope_dim dimensions of a head for rotation by pair i's angle. */
typedef enum {
    SKV_ROPE_NORM = 0, /* adjacent: (2i, 2i+1) - llama */
    SKV_ROPE_NEOX = 1, /* halves: (i, i + rope_dim/2) - GPT-NeoX, qwen2, phi3, gemma */
} skv_rope_style;

/* Sizes a tensor dimension can name (resolved by skv_dim_size). */
typedef enum {
    SKV_DIM_1,    /* a vector's second dimension */
    SKV_DIM_EMBD, /* n_embd */
    SKV_DIM_Q,    /* n_head * head_dim */
    SKV_DIM_KV,   /* n_head_kv * head_dim */
    SKV_DIM_FF,   /* n_ff */
    SKV_DIM_HEAD, /* head_dim */
    SKV_DIM_QKV,  /* n_head * head_dim + 2 * n_head_kv * head_dim: fused Q|K|V rows */
    SKV_DIM_FF2,  /* 2 * n_ff: fused gate|up rows */
} skv_dim;

/* Per-layer tensors. This order is the fingerprint's hashing order (model_fp.c), so a new
 * kind goes at the end: absent tensors hash nothing and old fingerprints stay put. */
typedef enum {
    SKV_LT_ATTN_NORM,
    SKV_LT_Q,
    SKV_LT_K,
    SKV_LT_V,
    SKV_LT_O,
    SKV_LT_FFN_NORM,
    SKV_LT_GATE,
    SKV_LT_DOWN,
    SKV_LT_UP,
    SKV_LT_Q_BIAS,         /* qwen2 */
    SKV_LT_K_BIAS,
    SKV_LT_V_BIAS,
    SKV_LT_Q_NORM,         /* per-head RMSNorm weights [head_dim]: qwen3, gemma3 */
    SKV_LT_K_NORM,
    SKV_LT_QKV,            /* fused [Q|K|V][n_embd]: phi3 */
    SKV_LT_GATE_UP,        /* fused [gate|up][n_embd], named ffn_up: phi3 */
    SKV_LT_ATTN_POST_NORM, /* RMSNorm of the attention output before the residual: gemma */
    SKV_LT_FFN_POST_NORM,  /* RMSNorm of the FFN output before the residual: gemma */
    SKV_LT_COUNT
} skv_layer_tensor;

typedef enum {
    SKV_USE_NONE = 0, /* not part of this architecture (the default of an unnamed entry) */
    SKV_USE_REQUIRED, /* loading fails without it */
    SKV_USE_OPTIONAL, /* read when the file has it; the forward pass checks for it */
} skv_tensor_use;

typedef struct {
    const char *gguf; /* GGUF name after "blk.<l>." ("attn_q.weight", "attn_q.bias") */
    skv_dim k, n;     /* shape: [n][k]; n == SKV_DIM_1 for a vector of k values */
    size_t field;     /* offsetof(skv_layer, ...): an skv_weight, or a float * for a vector */
} skv_tensor_desc;

/* Forward-pass steps beyond the llama baseline: each is one bit here, consulted where
 * forward.c runs that step (see docs/architectures.md). Steps that come with a tensor
 * (biases, Q/K norms, post-norms, fused matrices) need no bit: the tensor's presence is
 * the switch. */
enum {
    SKV_ARCH_NONE = 0,
    SKV_ARCH_EMBD_SCALE = 1u << 0, /* token embeddings multiplied by sqrt(n_embd) */
    SKV_ARCH_GELU = 1u << 1,       /* FFN: gelu(gate) * up (tanh form) instead of silu(gate) * up */
    SKV_ARCH_ATTN_SOFTCAP = 1u << 2,  /* <p>.attn_logit_softcapping c: score -> c tanh(score / c) */
    SKV_ARCH_FINAL_SOFTCAP = 1u << 3, /* <p>.final_logit_softcapping c: logit -> c tanh(logit / c) */
    SKV_ARCH_SWA = 1u << 4,           /* <p>.attention.sliding_window on the layers of the pattern */
    SKV_ARCH_ROPE_SHORT = 1u << 5,    /* rope_factors_short.weight, <p>.rope.scaling.attn_factor */
};

typedef struct skv_arch {
    const char *name;                /* general.architecture; also the metadata key prefix */
    skv_rope_style rope;
    unsigned flags;                  /* SKV_ARCH_* */
    unsigned char use[SKV_LT_COUNT]; /* skv_tensor_use of each per-layer tensor */
    /* SKV_ARCH_*_SOFTCAP: the caps when the keys are absent (0: none) */
    float attn_softcap, final_softcap;
    /* SKV_ARCH_SWA: the window when <p>.attention.sliding_window is absent (0: no window),
     * and the default <p>.attention.sliding_window_pattern P: layer l is windowed when
     * l % P < P - 1 (llama.cpp's convention). Windowed layers rotate with base
     * <p>.rope.freq_base_swa, else swa_rope_base without scaling, else as the others. */
    int swa_window, swa_period;
    float swa_rope_base;
    /* n_layer of the variant whose attention scale is 1/sqrt(n_embd / n_head) instead of
     * 1/sqrt(head_dim) (gemma's 27B models; 0: none) */
    int wide_scale_layers;
} skv_arch;

extern const skv_tensor_desc skv_layer_tensors[SKV_LT_COUNT];

/* The row whose name is the first len bytes of name; NULL when there is none. */
const skv_arch *skv_arch_find(const char *name, size_t len);
/* The architecture of llama2.c checkpoints (their layout is llama's). */
const skv_arch *skv_arch_llama2c(void);
/* The size dimension d names for the hyper-parameters h. */
size_t skv_dim_size(const skv_model_info *h, skv_dim d);
/* Writes the supported names as "a, b, c" (for error messages). */
void skv_arch_list(char *buf, size_t cap);

/* Applies RoPE to one head x of rope_dim = 2 * n_pairs leading dimensions in the given
 * style, with kernel rope (ops.h: adjacent pairs) doing the arithmetic either way: NEOX
 * pairs are gathered into tmp [2 * n_pairs] and scattered back. */
void skv_rope_apply(skv_rope_style style, void (*rope)(float *, const float *, const float *, size_t), float *x,
                    const float *cos_t, const float *sin_t, size_t n_pairs, float *tmp);

#endif
