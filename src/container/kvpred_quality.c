/* Target-quality mode of the predictive KV writer: the step scale whose measured KL of a
 * continuation over the decoded cache meets a target (kvpred_quality.h).
 *
 *   positions 0 .. P-1 (coded alone, as a P-position segment) | P .. n-1 (the tail: m tokens run)
 *   exact:    kv_write(kv[0..P)),  prefill(tok[P..n)) -> lf[m][V]
 *   trial g:  encode kv[0..P) at steps * 2^g -> deq;  kv_write(deq),  prefill -> lq[m][V]
 *             KL = mean over the m rows of KL(softmax(lf) || softmax(lq))
 *   result:   the whole segment encoded at the coarsest g that met the target.
 * Bisection on g keeps lo = the coarsest scale known to meet the target. */
#include "container/kvpred_quality.h"
#include "core/fpguard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KVQ_G_LO (-8.0)
#define KVQ_G_HI 6.0

typedef struct kvq_run {
    const skv_kvp_params *p;
    const int32_t *tok;
    const float *kv;
    skv_model_info mi;
    skv_ctx *c;
    size_t n, P, m, nfP;        /* nfP: floats of P positions */
    float *pre;                 /* [nfP] the exact prefix, canonical order of P positions */
    float *lf, *lq;             /* [m][V] exact and trial logits */
    float *deq;                 /* [nfP] a trial's decoded prefix */
} kvq_run;

/* KL(softmax(a) || softmax(b)) of one row of V logits, nats. */
static double row_kl(const float *a, const float *b, size_t V)
{
    double ma = a[0], mb = b[0], za = 0, zb = 0, kl = 0;
    for (size_t i = 1; i < V; i++) ma = a[i] > ma ? a[i] : ma, mb = b[i] > mb ? b[i] : mb;
    for (size_t i = 0; i < V; i++) za += exp(a[i] - ma), zb += exp(b[i] - mb);
    double la = ma + log(za), lb = mb + log(zb);
    for (size_t i = 0; i < V; i++) {
        double pa = exp(a[i] - la);
        kl += pa * ((a[i] - la) - (b[i] - lb));
    }
    return kl > 0 ? kl : 0;
}

/* Loads a P-position KV (canonical) into the scratch context and runs the tail over it. */
static int run_tail(kvq_run *r, const float *kvP, float *logits)
{
    int rc = skv_ctx_truncate(r->c, 0);
    if (!rc) rc = skv_ctx_kv_write(r->c, 0, (int)r->P, kvP);
    return rc ? rc : skv_ctx_prefill(r->c, r->tok + r->P, r->m, SKV_LOGITS_ALL, logits);
}

/* p with both steps scaled by 2^g (and no target: an ordinary encode). */
static skv_kvp_params scaled(const skv_kvp_params *p, double g)
{
    skv_kvp_params q = *p;
    q.kl = 0.0f;
    for (int k = 0; k < 2; k++) {
        double st = p->step[k] * exp2(g);
        q.step[k] = (float)(st < 1e-6 ? 1e-6 : st > 1e6 ? 1e6 : st);
    }
    return q;
}

/* The KL at scale 2^g: the prefix coded alone (HUGE_VAL when a residual is out of range). */
static int trial(kvq_run *r, double g, double *kl)
{
    skv_kvp_params q = scaled(r->p, g);
    skv_kvp_header h;
    uint8_t *body = NULL;
    size_t len = 0, V = (size_t)r->mi.n_vocab;
    int rc = skv_kvp_encode(&q, (uint32_t)r->mi.n_layer, (uint32_t)r->mi.n_head_kv, (uint32_t)r->mi.head_dim, r->pre,
                            r->P, &body, &len, &h, r->deq);
    free(body);
    *kl = HUGE_VAL;
    if (rc) return rc == SKV_ERR_RANGE ? SKV_OK : rc;
    if ((rc = run_tail(r, r->deq, r->lq))) return rc;
    *kl = 0;
    for (size_t j = 0; j < r->m; j++) *kl += row_kl(r->lf + j * V, r->lq + j * V, V);
    *kl /= (double)r->m;
    return SKV_OK;
}

/* Bisection: lo = the coarsest scale known to meet the target (*kl its KL). */
static int search(kvq_run *r, double *kl, double *g_out)
{
    double lo = KVQ_G_LO, hi = KVQ_G_HI, kl_lo = -1.0;
    int rc = SKV_OK;
    for (int it = 0; it < SKV_KVQ_ITERS && !rc; it++) {
        double mid = 0.5 * (lo + hi), k = 0;
        rc = trial(r, mid, &k);
        if (k <= r->p->kl) lo = mid, kl_lo = k;
        else if (k == HUGE_VAL) lo = mid; /* a residual out of range: too fine, go coarser */
        else hi = mid;
    }
    if (!rc && kl_lo < 0) rc = trial(r, lo, &kl_lo);
    *kl = kl_lo, *g_out = lo;
    return rc;
}

static int setup(kvq_run *r, const skv_model *m)
{
    skv_ctx_params cp = skv_ctx_default_params();
    skv_model_get_info(m, &r->mi);
    size_t V = (size_t)r->mi.n_vocab, d = (size_t)r->mi.head_dim, ns = (size_t)r->mi.n_layer * 2 * (size_t)r->mi.n_head_kv;
    r->m = r->n / 4 < SKV_KVQ_TAIL ? r->n / 4 : SKV_KVQ_TAIL;
    r->P = r->n - r->m;
    r->nfP = ns * r->P * d;
    cp.n_ctx = (int)r->n;
    r->pre = malloc(r->nfP * sizeof *r->pre);
    r->lf = malloc(r->m * V * sizeof *r->lf);
    r->lq = malloc(r->m * V * sizeof *r->lq);
    r->deq = malloc(r->nfP * sizeof *r->deq);
    if (!r->pre || !r->lf || !r->lq || !r->deq) return SKV_ERR_NOMEM;
    for (size_t s = 0; s < ns; s++) memcpy(r->pre + s * r->P * d, r->kv + s * r->n * d, r->P * d * sizeof *r->pre);
    int rc = skv_ctx_create(m, &cp, &r->c);
    return rc ? rc : run_tail(r, r->pre, r->lf);
}

/* The whole segment at scale 2^g. */
static int encode_at(const kvq_run *r, double g, uint8_t **body, size_t *len, skv_kvp_header *h, float *deq)
{
    skv_kvp_params q = scaled(r->p, g);
    return skv_kvp_encode(&q, (uint32_t)r->mi.n_layer, (uint32_t)r->mi.n_head_kv, (uint32_t)r->mi.head_dim, r->kv, r->n,
                          body, len, h, deq);
}

int skv_kvp_encode_quality(const skv_kvp_params *p, const skv_model *m, const int32_t *tok, const float *kv, size_t n,
                           uint8_t **body, size_t *body_len, skv_kvp_header *h, float *deq, double *kl_out,
                           double *scale_out)
{
    kvq_run r = {.p = p, .tok = tok, .kv = kv, .n = n};
    double kl = -1.0, g = 0.0;
    int rc;
    if (!body || !body_len || !h) return SKV_ERR_INVALID_ARG;
    *body = NULL;
    if (!p || !m || !tok || !kv || !(p->kl > 0.0f) || isinf(p->kl) || p->rate != 0.0f) return SKV_ERR_INVALID_ARG;
    if (n < 8) {
        skv_model_get_info(m, &r.mi);
        rc = encode_at(&r, 0.0, body, body_len, h, deq);
    } else if (!(rc = setup(&r, m)) && !(rc = search(&r, &kl, &g))) {
        rc = encode_at(&r, g, body, body_len, h, deq);
    }
    if (rc) free(*body), *body = NULL;
    if (kl_out) *kl_out = kl;
    if (scale_out) *scale_out = exp2(g);
    skv_ctx_free(r.c);
    free(r.pre), free(r.lf), free(r.lq), free(r.deq);
    return rc;
}
