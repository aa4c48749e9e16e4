/* skv_model_arch_steps: what the loader recognised, in words (seqkv info). */
#include <stdarg.h>
#include "core/fpguard.h"
#include <stdio.h>
#include <string.h>

#include "engine/model.h"

typedef struct {
    char *buf;
    size_t cap, used;
} words;

__attribute__((format(printf, 2, 3))) static void say(words *w, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (w->used >= w->cap) return;
    if (w->used) w->used += (size_t)snprintf(w->buf + w->used, w->cap - w->used, ", ");
    if (w->used >= w->cap) return;
    va_start(ap, fmt);
    n = vsnprintf(w->buf + w->used, w->cap - w->used, fmt, ap);
    va_end(ap);
    if (n > 0) w->used += (size_t)n;
}

/* The per-layer tensors beyond llama's that layer 0 holds. */
static void tensor_steps(const skv_model *m, words *w)
{
    const skv_layer *L = &m->layers[0];
    if (L->bq) say(w, "Q/K/V biases");
    if (L->q_norm) say(w, "per-head Q/K RMSNorm");
    if (L->wqkv.data) say(w, "fused QKV");
    if (L->w13.data) say(w, "fused gate|up");
    if (L->attn_post_norm) say(w, "post-attention and post-FFN norms");
}

static void param_steps(const skv_model *m, words *w)
{
    const skv_arch_params *p = &m->ap;
    int n_win = 0;
    for (int l = 0; l < m->info.n_layer; l++) n_win += skv_layer_windowed(m, l);
    if (p->embd_scale > 0.0f) say(w, "embeddings x sqrt(n_embd)");
    if (m->arch->flags & SKV_ARCH_GELU) say(w, "GELU FFN");
    if (p->attn_softcap > 0.0f) say(w, "attention soft-cap %g", (double)p->attn_softcap);
    if (p->final_softcap > 0.0f) say(w, "logit soft-cap %g", (double)p->final_softcap);
    if (n_win)
        say(w, "sliding window %d on %d of %d layers%s", p->swa_window, n_win, m->info.n_layer,
            p->rope_freq_swa ? " (own RoPE base)" : "");
    if (p->rope_mscale != 1.0) say(w, "RoPE attention factor %g", p->rope_mscale);
}

int skv_model_arch_steps(const skv_model *m, char *buf, size_t cap)
{
    words w = {buf, cap, 0};
    if (!m || !buf || !cap) return SKV_ERR_INVALID_ARG;
    buf[0] = '\0';
    say(&w, "%s RoPE", m->arch->rope == SKV_ROPE_NEOX ? "NEOX" : "adjacent-pair");
    tensor_steps(m, &w);
    param_steps(m, &w);
    return w.used < cap ? SKV_OK : SKV_ERR_RANGE;
}
