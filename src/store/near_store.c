/* skv_store_get_near: the KV of a new sequence from the nearest stored session, with
 * re-rotated spans and selective recompute (near.h, docs/near.md). APPROXIMATE: the
 * report, the CLI and the store's counter record say so; nothing here is stored. */
#include "store/near_int.h"
#include "core/fpguard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kvshift.h"

#define NEAR_DEFAULT_FRACTION 0.15
#define NEAR_DEFAULT_SEAM 2
#define NEAR_DEFAULT_NGRAM 8

skv_store_near_params skv_store_near_default_params(void)
{
    skv_store_near_params p = {.recompute = NEAR_DEFAULT_FRACTION, .seam = NEAR_DEFAULT_SEAM,
                               .ngram = NEAR_DEFAULT_NGRAM};
    return p;
}

/* The parameters with their defaults filled in. */
static skv_store_near_params resolve(const skv_store_near_params *in)
{
    skv_store_near_params p = in ? *in : skv_store_near_default_params();
    if (p.recompute < 0 || p.recompute != p.recompute) p.recompute = NEAR_DEFAULT_FRACTION;
    if (p.recompute > 1) p.recompute = 1;
    if (p.kl_target > 0) p.recompute = near_fraction_for_kl(p.kl_target);
    p.seam = p.seam == 0 ? NEAR_DEFAULT_SEAM : p.seam < 0 ? 0 : p.seam;
    if (!p.ngram) p.ngram = NEAR_DEFAULT_NGRAM;
    return p;
}

static int ctx_fail(skv_store *st, skv_ctx *c, int rc, const char *what)
{
    return store_err(st, rc, "%s: %s", what, skv_ctx_last_error(c));
}

/* One run of reused positions [q0, q0 + len) = the donor's [s0, s0 + len): read, K
 * re-rotated by the position change, written at the end of ctx. */
static int reuse_run(skv_store *st, const skv_ctx *donor, skv_ctx *ctx, size_t q0, size_t s0, size_t len)
{
    float *buf = malloc(len * store_pos_floats(st) * sizeof *buf);
    int rc;
    if (!buf) return store_err(st, SKV_ERR_NOMEM, "out of memory for %zu positions of KV", len);
    if ((rc = skv_ctx_kv_read(donor, (int)s0, (int)len, buf))) rc = store_err(st, rc, "reading the donor's KV");
    else if ((rc = skv_kv_shift(st->model, buf, len, (int)s0, (int)q0, SKV_SHIFT_ENGINE)))
        rc = store_err(st, rc, "re-rotating K");
    else if ((rc = skv_ctx_kv_write(ctx, (int)q0, (int)len, buf))) rc = ctx_fail(st, ctx, rc, "writing KV");
    free(buf);
    return rc;
}

/* Builds ctx in position order: computed runs through the model over the cache so far,
 * reused runs copied from the donor (a run ends where the donor position jumps). */
static int run_plan(skv_store *st, const near_plan *p, const skv_ctx *donor, const int32_t *q, skv_ctx *ctx,
                    float *logits, skv_store_near_report *r)
{
    double tc = 0.0, tr = 0.0;
    int rc = SKV_OK;
    for (size_t i = 0, j; i < p->n && !rc; i = j) {
        double t0 = skv_now();
        int comp = p->act[i] == NEAR_COMPUTE;
        for (j = i + 1; j < p->n && (p->act[j] == NEAR_COMPUTE) == comp && (comp || p->src[j] == p->src[j - 1] + 1);) j++;
        if (comp) {
            int mode = j == p->n && logits ? SKV_LOGITS_LAST : SKV_LOGITS_NONE;
            if ((rc = skv_ctx_prefill(ctx, q + i, j - i, mode, mode ? logits : NULL))) rc = ctx_fail(st, ctx, rc, "prefill");
            tc += skv_now() - t0;
        } else {
            rc = reuse_run(st, donor, ctx, i, (size_t)p->src[i], j - i);
            tr += skv_now() - t0;
        }
    }
    r->compute_seconds = tc, r->reuse_seconds = tr;
    return rc;
}

/* Restores the donor (exact, digest verified) into a context of its own. */
static int restore_donor(skv_store *st, const near_set *s, size_t d, skv_ctx **out, double *secs)
{
    skv_ctx_params cp = skv_ctx_default_params();
    size_t n = s->seqs[d].n, got = 0;
    int32_t *tok = malloc(n * sizeof *tok);
    double t0 = skv_now();
    int rc;
    cp.n_ctx = (int)n, cp.n_threads = st->n_threads;
    if (!tok) return store_err(st, SKV_ERR_NOMEM, "out of memory");
    if ((rc = skv_ctx_create(st->model, &cp, out))) rc = store_err(st, rc, "cannot create a context for the donor");
    else if ((rc = store_get_one(st, s->names[d], *out, SKV_STORE_VERIFY, tok, n, &got, NULL)))
        rc = store_err(st, rc, "restoring donor '%s': %s", s->names[d], skv_store_last_error(st));
    else if (got != n || memcmp(tok, s->seqs[d].tok, n * sizeof *tok)) /* replaced since the snapshot */
        rc = store_err(st, SKV_ERR_MISMATCH, "donor '%s' changed during the near get: try again", s->names[d]);
    free(tok);
    *secs = skv_now() - t0;
    return rc;
}

static void plan_report(const near_plan *p, const near_set *s, skv_store_near_report *r)
{
    snprintf(r->donor, sizeof r->donor, "%s", s->names[p->donor]);
    r->approximate = p->n_approx > 0;
    r->n_exact = p->n_exact, r->n_approx = p->n_approx;
    r->n_recomputed = p->n - p->n_exact - p->n_approx;
    r->n_seam = p->n_seam, r->n_extra = p->n_extra, r->n_spans = (uint32_t)p->n_spans;
    r->shared_bits = p->shared_bits;
}

/* Plans against the loaded sessions; 1 when none shares anything. */
static int plan_near(skv_store *st, const near_set *s, const int32_t *q, size_t n, const skv_store_near_params *p,
                     near_plan *plan)
{
    near_index *ix = NULL;
    int rc = near_index_build(s->seqs, s->n, p->ngram, &ix);
    if (rc) return store_err(st, rc, "cannot index the stored sessions (n-gram length %d: 2..64)", p->ngram);
    rc = near_best(ix, q, n, p->seam, plan);
    near_index_free(ix);
    if (rc < 0) return store_err(st, rc, "near-duplicate search failed");
    if (!rc) near_select(plan, &s->seqs[plan->donor], q, p->recompute);
    return rc;
}

static int near_call(skv_store *st, const int32_t *q, size_t n, skv_ctx *ctx, const skv_store_near_params *pin,
                     float *logits, skv_store_near_report *r)
{
    skv_store_near_params p = resolve(pin);
    near_set s;
    near_plan plan = {0};
    skv_ctx *donor = NULL;
    int rc;
    r->n_tokens = (uint32_t)n, r->fraction = p.recompute;
    if ((rc = near_set_load(st, &s))) return rc;
    if ((rc = plan_near(st, &s, q, n, &p, &plan)) == 1) { /* nothing shared: a plain prefill, exact */
        double t0 = skv_now();
        rc = skv_ctx_prefill(ctx, q, n, logits ? SKV_LOGITS_LAST : SKV_LOGITS_NONE, logits);
        if (rc) rc = ctx_fail(st, ctx, rc, "prefill");
        r->n_recomputed = (uint32_t)n, r->compute_seconds = skv_now() - t0;
    } else if (!rc && !(rc = restore_donor(st, &s, plan.donor, &donor, &r->donor_seconds))) {
        plan_report(&plan, &s, r);
        rc = run_plan(st, &plan, donor, q, ctx, logits, r);
    }
    skv_ctx_free(donor);
    near_plan_free(&plan);
    near_set_free(&s);
    return rc;
}

static int check_args(skv_store *st, const int32_t *q, size_t n, skv_ctx *ctx, const skv_store_near_params *p)
{
    int rc;
    if (!ctx || skv_ctx_model(ctx) != st->model)
        return store_err(st, SKV_ERR_INVALID_ARG, "skv_store_get_near needs a context of the store's model");
    if ((rc = store_check_tokens(st, q, n))) return rc;
    if (n > (size_t)skv_ctx_n_ctx(ctx))
        return store_err(st, SKV_ERR_RANGE, "%zu tokens do not fit the context of %d", n, skv_ctx_n_ctx(ctx));
    if (p && p->ngram && (p->ngram < 2 || p->ngram > 64))
        return store_err(st, SKV_ERR_INVALID_ARG, "n-gram length %d outside 2..64", p->ngram);
    float none = 0;
    if (skv_ctx_kv_write(ctx, 0, 0, &none) == SKV_ERR_UNSUPPORTED) /* clears it; refused with kv_quant */
        return store_err(st, SKV_ERR_UNSUPPORTED, "skv_store_get_near needs a context without kv_quant");
    return SKV_OK;
}

int store_get_near_one(skv_store *st, const int32_t *tokens, size_t n, skv_ctx *ctx, const skv_store_near_params *p,
                       float *logits, skv_store_near_report *rep)
{
    skv_store_near_report r = {0};
    int rc;
    if (!st) return SKV_ERR_INVALID_ARG;
    rc = check_args(st, tokens, n, ctx, p);
    if (!rc) rc = near_call(st, tokens, n, ctx, p, logits, &r);
    if (!rc && !st->readonly) rc = near_stats_add(st, &r);
    if (!rc && rep) *rep = r;
    return store_done(st, rc);
}
