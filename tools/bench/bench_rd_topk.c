/* The paper's top-k KV predictor, as a kv-rd point (tools/bench/bench_rd.c). Closed loop over
 * the prefix, on a context that holds the *reconstructed* cache [0, t):
 *   - candidates: the k most likely tokens under L (the logits the decoder has for t);
 *     each one runs one single-position pass at t (its KV row and logits), then the cache
 *     is truncated back to t;
 *   - prediction: the probability-weighted mean of the candidates' KV rows; if the real
 *     token is outside the top k, an escape: the token is coded (flag + log2 V bits) and its
 *     own pass is the prediction;
 *   - residual = exact row - prediction, uniform step per (layer, kind) (step x RMS of the
 *     exact block), none coded (zero bits) when L's top-1 probability is above thr and
 *     there was no escape;
 *   - the reconstructed row is written at t; L for t + 1 = the logits of the top-1
 *     candidate's pass (or the escaped token's): what a decoder, which never learns the
 *     token, can compute.
 * Position 0 (BOS) is known: one pass. Bits: the quantized residuals coded by kvpred
 * (predictor none, unit step on the integers, skipped rows as SKIP levels), plus the
 * escape flags at their empirical entropy, plus log2 V bits per escape. Restore cost: the
 * passes (k per position, +1 per escape), timed here as the whole loop's CPU time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_rd.h"
#include "container/kvpred.h"

#define TOPK_MAX 8

typedef struct {
    size_t V, rowf, B, d, P, H; /* vocab, floats per position, (layer, kind, head) blocks, head_dim, prefix, heads */
    float *L, *Lc, *rows;     /* [V] logits for t, [k][V] candidates' logits, [k+1][rowf] rows */
    float *row, *q, *step;    /* [rowf] reconstruction, [B*P*d] integers, [B] steps */
    uint8_t *lv;              /* [P] levels: 0 coded, SKIP zero bits */
    size_t escapes, passes;
} topk_state;

static int pass(rd_window *w, topk_state *s, size_t t, int32_t tok, float *row, float *logits)
{
    s->passes++;
    if (skv_ctx_decode(w->cq, tok, logits) || skv_ctx_kv_read(w->cq, (int)t, 1, row)) return -1;
    return skv_ctx_truncate(w->cq, (int)t) ? -1 : 0;
}

/* The k largest logits' ids (descending) and their softmax probabilities. */
static void top_k(const float *L, size_t V, int k, int32_t *id, double *p)
{
    double mx = L[0], z = 0;
    for (int j = 0; j < k; j++) id[j] = -1;
    for (size_t i = 0; i < V; i++) {
        mx = L[i] > mx ? L[i] : mx;
        for (int j = 0; j < k; j++)
            if (id[j] < 0 || L[i] > L[id[j]]) {
                memmove(id + j + 1, id + j, (size_t)(k - 1 - j) * sizeof *id);
                id[j] = (int32_t)i;
                break;
            }
    }
    for (size_t i = 0; i < V; i++) z += exp((double)L[i] - mx);
    for (int j = 0; j < k; j++) p[j] = exp((double)L[id[j]] - mx) / z;
}

/* Row t: prediction, residual, reconstruction written at t; s->L becomes L(t + 1). */
static int topk_position(rd_window *w, topk_state *s, size_t t, int k, double thr)
{
    int32_t id[TOPK_MAX], tok = w->win[t];
    double p[TOPK_MAX], ps = 0;
    int hit = -1;
    top_k(s->L, s->V, k, id, p);
    for (int j = 0; j < k; j++) {
        if (pass(w, s, t, id[j], s->rows + (size_t)j * s->rowf, s->Lc + (size_t)j * s->V)) return -1;
        hit = id[j] == tok ? j : hit;
        ps += p[j];
    }
    memset(s->row, 0, s->rowf * sizeof *s->row);
    if (hit < 0) { /* escape: the token's own pass */
        s->escapes++;
        if (pass(w, s, t, tok, s->row, s->L)) return -1;
    } else {
        for (int j = 0; j < k; j++)
            for (size_t i = 0; i < s->rowf; i++) s->row[i] += (float)(p[j] / ps) * s->rows[(size_t)j * s->rowf + i];
        memcpy(s->L, s->Lc, s->V * sizeof *s->L); /* the top-1 candidate's logits */
    }
    s->lv[t] = hit >= 0 && p[0] > thr ? SKV_KVP_SKIP : 0;
    for (size_t b = 0; b < s->B && !s->lv[t]; b++)
        for (size_t c = 0; c < s->d; c++) {
            size_t i = b * s->d + c, o = (b * s->P + t) * s->d + c;
            float st = s->step[b / s->H];
            double q = floor(((double)w->kv[o] - s->row[i]) / st + 0.5);
            s->q[o] = (float)q;
            s->row[i] += (float)q * st;
        }
    for (size_t b = 0; b < s->B; b++) memcpy(w->out + (b * s->P + t) * s->d, s->row + b * s->d, s->d * sizeof(float));
    return skv_ctx_kv_write(w->cq, (int)t, 1, s->row) ? -1 : 0;
}

static void topk_free(topk_state *s)
{
    free(s->L), free(s->Lc), free(s->rows), free(s->row), free(s->q), free(s->step), free(s->lv);
}

static int topk_init(rd_window *w, topk_state *s, int k, float rel)
{
    memset(s, 0, sizeof *s);
    s->V = (size_t)w->mi.n_vocab, s->d = (size_t)w->mi.head_dim, s->P = w->P, s->H = (size_t)w->mi.n_head_kv;
    s->B = (size_t)w->mi.n_layer * 2 * s->H, s->rowf = s->B * s->d;
    s->L = malloc(s->V * sizeof(float)), s->Lc = malloc((size_t)k * s->V * sizeof(float));
    s->rows = malloc((size_t)(k + 1) * s->rowf * sizeof(float)), s->row = malloc(s->rowf * sizeof(float));
    s->q = calloc(w->nf, sizeof(float)), s->step = malloc(s->B / s->H * sizeof(float)), s->lv = calloc(s->P, 1);
    if (!s->L || !s->Lc || !s->rows || !s->row || !s->q || !s->step || !s->lv) return -1;
    for (size_t i = 0; i < s->B / s->H; i++) { /* rel x RMS of the exact (layer, kind) block */
        double ss = 0;
        size_t n = s->H * s->P * s->d;
        for (size_t j = 0; j < n; j++) ss += (double)w->kv[i * n + j] * w->kv[i * n + j];
        s->step[i] = (float)(rel * sqrt(ss / (double)n)) > 0 ? (float)(rel * sqrt(ss / (double)n)) : 1.0f;
    }
    return 0;
}

/* Bits of the integers s->q (kvpred, predictor none, unit step) and of the escapes. */
static double topk_bits(const rd_window *w, const topk_state *s)
{
    float *unit = malloc(s->B / s->H * sizeof *unit);
    skv_kvp_params p = {.predictor = SKV_KVP_NONE, .step = {1.0f, 1.0f}, .level = s->lv, .abs_step = unit};
    skv_kvp_header h;
    uint8_t *body = NULL;
    size_t len = 0;
    double bits, pe = (double)s->escapes / (double)s->P;
    for (size_t i = 0; unit && i < s->B / s->H; i++) unit[i] = 1.0f;
    (void)w;
    int rc = unit ? skv_kvp_encode(&p, (uint32_t)(s->B / s->H / 2), (uint32_t)s->H, (uint32_t)s->d, s->q, s->P, &body, &len, &h, NULL) : -1;
    free(unit);
    free(body);
    if (rc) return -1;
    bits = 8.0 * (double)(len + SKV_KVP_HDR);
    if (pe > 0 && pe < 1) bits += (double)s->P * (-pe * log2(pe) - (1 - pe) * log2(1 - pe));
    return bits + (double)s->escapes * ceil(log2((double)s->V));
}

int rd_topk_restore(rd_window *w, rd_point *pt, int k, double thr)
{
    topk_state s = {0};
    int rc = k < 1 || k > TOPK_MAX || topk_init(w, &s, k, pt->step) ? -1 : 0;
    double t0 = rd_cpu_now();
    skv_ctx_truncate(w->cq, 0);
    /* position 0 is BOS, known to the decoder: its pass gives row 0 exactly and L(1) */
    if (!rc && (skv_ctx_decode(w->cq, w->win[0], s.L) || skv_ctx_kv_read(w->cq, 0, 1, s.row))) rc = -1;
    for (size_t b = 0; !rc && b < s.B; b++) memcpy(w->out + b * s.P * s.d, s.row + b * s.d, s.d * sizeof(float));
    s.passes = 1;
    for (size_t t = 1; !rc && t < w->P; t++) rc = topk_position(w, &s, t, k, thr);
    pt->dec_cpu += rd_cpu_now() - t0;
    double bits = rc ? -1 : topk_bits(w, &s);
    pt->bits += bits;
    pt->passes += (double)s.passes;
    topk_free(&s);
    return rc || bits < 0 ? -1 : 0;
}
