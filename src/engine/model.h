/* Loaded model: hyper-parameters, weight views into the file mapping, tokenizer.
 *
 * Shapes (GGML order written as math: W[N][K] maps K inputs to N outputs, rows contiguous):
 *   tok_embd  [n_vocab][n_embd]
 *   wq [n_head*hd][n_embd]   wk, wv [n_head_kv*hd][n_embd]   wo [n_embd][n_head*hd]
 *   w1 (gate), w3 (up) [n_ff][n_embd]   w2 (down) [n_embd][n_ff]
 *   output [n_vocab][n_embd] (== tok_embd when tied)
 *   norms: f32 copies of length n_embd */
#ifndef SKV_MODEL_H
#define SKV_MODEL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/arch.h"
#include "engine/engine.h"
#include "engine/gguf.h"
#include "seqkv.h"
#include "tokenizer/tokenizer.h"
#include "core/util.h"

typedef struct skv_weight {
    uint32_t type;        /* SKV_GGML_* */
    const uint8_t *data;  /* N rows of row_bytes */
    size_t row_bytes;
    size_t K, N;
    const uint8_t *packed;   /* the rows repacked for the integer dot (quant/repack.h), owned; or NULL */
    size_t packed_row_bytes; /* its bytes per row */
    int resident;            /* data is an owned copy on huge pages (model_weights.c), not the file's */
} skv_weight;

/* One decoder layer. Every field is described by a row of skv_layer_tensors (arch.c),
 * which is how the loaders fill it; an optional tensor the file lacks stays zero. */
typedef struct skv_layer {
    skv_weight wq, wk, wv, wo, w1, w2, w3;
    skv_weight wqkv;             /* [Q + 2 KV][n_embd] fused (phi3), or absent */
    skv_weight w13;              /* [2 n_ff][n_embd] fused gate|up (phi3), or absent */
    float *attn_norm, *ffn_norm; /* [n_embd], owned */
    float *bq, *bk, *bv;         /* [Q], [KV], [KV] biases (qwen2), or NULL */
    float *q_norm, *k_norm;      /* [head_dim] per-head RMSNorm weights (qwen3, gemma3), or NULL */
    float *attn_post_norm, *ffn_post_norm; /* [n_embd] (gemma), or NULL */
} skv_layer;

/* Hyper-parameters of the steps beyond llama's (arch.h SKV_ARCH_*), as loaded. */
typedef struct skv_arch_params {
    float attn_scale;             /* score = dot(q, k) * attn_scale */
    float attn_softcap;           /* 0: none; else score -> c tanh(score / c) */
    float final_softcap;          /* 0: none; else logit -> c tanh(logit / c) */
    float embd_scale;             /* 0: none; else sqrt(n_embd) */
    int swa_window, swa_period;   /* window 0: every layer attends to all positions */
    double rope_mscale;           /* cos and sin multiplied by this (phi3 attn_factor; 1: none) */
    double *rope_freq_swa;        /* [rope_dim/2] windowed layers' frequencies, owned; NULL: as global */
    double rope_scale_swa;        /* their position scale (with rope_freq_swa) */
} skv_arch_params;

struct skv_model {
    skv_model_info info;
    skv_errbox *err;      /* per-thread message of calls made through the model (skv_ctx_create) */
    const skv_arch *arch; /* row of the architecture table (arch.c) */
    skv_gguf *gguf;       /* GGUF form */
    skv_mmap map;         /* llama2.c form */
    skv_weight tok_embd, output;
    float *output_norm;   /* [n_embd], owned */
    double *rope_freq;    /* [rope_dim/2] angular frequency per pair, owned */
    double rope_scale;    /* positions are multiplied by this (linear scaling: 1/factor) */
    skv_arch_params ap;
    skv_layer *layers;
    skv_tokenizer *tok;
    pthread_mutex_t fp_mu; /* guards the lazily computed fingerprint: models are shared */
    int fp_done;
    uint8_t fp[16];
    pthread_mutex_t vfp_mu; /* the tokenizer's fingerprint: its own lock, never held while
                               the model's (seconds on a large model) is computed */
    int vfp_done;
    uint8_t vfp[16];
};

/* Layer l attends through a sliding window (SKV_ARCH_SWA). */
int skv_layer_windowed(const skv_model *m, int l);

/* Expands one row of a weight to f32. */
void skv_weight_row(const skv_weight *w, size_t row, float *dst);

#endif
