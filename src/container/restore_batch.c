/* Batch restore: a queue of .skv segments decoded together.
 *
 * Decoding a model-coded segment needs one forward pass per token, and a pass over one
 * token reads every weight of the model for a single row of arithmetic: restore is bound
 * by weight traffic, not by FLOPs. Restoring several sessions at once runs their next
 * tokens as the rows of one pass (skv_ctx_decode_multi), so the weights are read once per
 * step for all of them: the queue as a whole decodes at close to prefill speed.
 *
 *   step s:   job A  tok[i_A - 1] --+                      +--> logits row 0 -> decode tok[i_A]
 *             job B  tok[i_B - 1] --+-- skv_ctx_decode_multi --+--> logits row 1 -> decode tok[i_B]
 *             job C  tok[i_C - 1] --+                      +--> logits row 2 -> decode tok[i_C]
 *
 * Jobs are independent (own context, own range decoder, own position); a finished job
 * leaves the step set and the next queued job joins it, at most MAX_ACTIVE at a time.
 * Each row's logits and KV are bit-identical to a solo decode (the engine guarantees it),
 * so every job restores exactly what skv_session_restore_segment restores; segments of
 * other codecs are handed to skv_session_restore_segment directly. The stream format is
 * session.c's: this module only schedules its steps (src/session_int.h). */
#include <stdio.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>

#include "container/codecs.h"
#include "core/util.h"
#include "engine/engine.h"

#define MAX_ACTIVE 64
#define BATCH_MIN_WEIGHTS ((uint64_t)4 << 20) /* smaller models: weights stay in cache, no batching */
#define BATCH_KV_BUDGET ((uint64_t)1 << 30)   /* KV memory of the contexts of one wave */

typedef struct {
    skv_restore_job *job;
    skv_rangecoder_dec dec;
    uint32_t n, i;     /* segment tokens; tok[0..i) decoded, tok[0..i-1) in the cache */
} active_job;

typedef struct {
    skv_model *m;
    const skv_restore_params *p;
    uint32_t V;
    float *logits;         /* [MAX_ACTIVE][V] */
    uint32_t *freq, *cum;  /* [V], [V + 1] */
    uint64_t done, total;  /* tokens, for progress */
    skv_restore_stats st;
} batch;

/* A job's error: its status, and the message in its context's last error. */
static int job_fail(skv_restore_job *j, int status, const char *msg)
{
    j->status = status;
    if (j->ctx) skv_ctx_set_error(j->ctx, status, msg);
    return status;
}

/* job_fail for a step that wrote its message into e (nothing when rc is SKV_OK). */
static int job_check(skv_restore_job *j, int rc, const char *e) { return rc ? job_fail(j, rc, e) : SKV_OK; }

/* Everything about a job that can be checked before any model pass. */
static int job_validate(batch *b, skv_restore_job *j)
{
    skv_session_info si;
    uint32_t n = 0;
    skv_err e = {0};
    if (!j->session || !j->ctx || !j->tokens || skv_ctx_model(j->ctx) != b->m)
        return job_fail(j, SKV_ERR_INVALID_ARG, "invalid job (session, context of this model and token buffer required)");
    skv_session_get_info(j->session, &si);
    if (j->segment >= si.n_segments) return job_fail(j, SKV_ERR_INVALID_ARG, "segment index out of range");
    if (job_check(j, skv_session_check_ctx(j->ctx, &e), e.msg) ||
        job_check(j, skv_session_check_kv_type(j->session, j->ctx, &e), e.msg) ||
        job_check(j, skv_session_check_model(j->session, b->m, &e), e.msg))
        return j->status;
    skv_session_segment_info(j->session, j->segment, &n, NULL, NULL);
    if (j->cap < n || (uint32_t)skv_ctx_n_ctx(j->ctx) < n)
        return job_fail(j, SKV_ERR_RANGE, "token buffer or context too small for the segment");
    return SKV_OK;
}

static int job_start(active_job *a, skv_restore_job *j)
{
    skv_err e = {0};
    a->job = j;
    skv_session_segment_info(j->session, j->segment, &a->n, NULL, NULL);
    skv_ctx_truncate(j->ctx, 0);
    a->i = 1;
    return job_check(j, skv_session_stream_open(j->session, j->segment, &a->dec, j->tokens, &e), e.msg);
}

/* The segment is decoded and its cache complete: check the stream's end and the digest. */
static int job_finish(batch *b, active_job *a)
{
    skv_restore_job *j = a->job;
    skv_err e = {0};
    if (skv_rangecoder_dec_finish(&a->dec))
        return job_fail(j, SKV_ERR_FORMAT, "not a valid .skv file: model-coded stream has trailing or missing bytes");
    if (b->p && b->p->verify && job_check(j, skv_session_verify_segment(j->session, j->segment, j->ctx, &e), e.msg))
        return j->status;
    b->st.n_tokens += a->n;
    return SKV_OK;
}

/* One step of every active job; finished or failed jobs are removed (order kept). */
static void step(batch *b, active_job *act, size_t *n_act)
{
    skv_ctx *ctxs[MAX_ACTIVE];
    int32_t toks[MAX_ACTIVE];
    size_t n = *n_act, k = 0;
    for (size_t r = 0; r < n; r++) {
        ctxs[r] = act[r].job->ctx;
        toks[r] = act[r].job->tokens[act[r].i - 1];
    }
    char e[256];
    skv_err se = {0};
    int rc = skv_ctx_decode_multi(ctxs, toks, n, b->logits);
    b->st.n_passes++;
    if (rc) snprintf(e, sizeof e, "forward pass failed: %.200s", skv_ctx_last_error(ctxs[0]));
    for (size_t r = 0; r < n; r++) {
        active_job *a = &act[r];
        if (rc) {
            job_fail(a->job, rc, e);
            continue;
        }
        b->done++;
        if (a->i == a->n) {
            job_finish(b, a);
            continue;
        }
        if (job_check(a->job,
                      skv_session_stream_next(a->job->session, &a->dec, b->logits + r * (size_t)b->V, b->freq, b->cum,
                                              &a->job->tokens[a->i], &se),
                      se.msg))
            continue;
        a->i++;
        act[k++] = *a;
    }
    *n_act = k;
    if (b->p && b->p->progress && (b->st.n_passes & 63) == 0) b->p->progress(b->p->user, b->done, b->total);
}

static void run_model_jobs(batch *b, skv_restore_job **queue, size_t nq)
{
    active_job act[MAX_ACTIVE];
    size_t n_act = 0, next = 0;
    while (next < nq || n_act > 0) {
        while (n_act < MAX_ACTIVE && next < nq)
            if (job_start(&act[n_act], queue[next++]) == SKV_OK) n_act++;
        if (n_act == 0) continue;
        step(b, act, &n_act);
    }
}

static int alloc_batch(batch *b)
{
    b->logits = malloc((size_t)MAX_ACTIVE * b->V * sizeof(float));
    b->freq = malloc((size_t)b->V * sizeof(uint32_t));
    b->cum = malloc(((size_t)b->V + 1) * sizeof(uint32_t));
    return b->logits && b->freq && b->cum ? SKV_OK : SKV_ERR_NOMEM;
}

static void free_batch(batch *b)
{
    free(b->logits);
    free(b->freq);
    free(b->cum);
}

static int distinct_contexts(skv_restore_job *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < i; k++)
            if (jobs[i].ctx && jobs[i].ctx == jobs[k].ctx) {
                job_fail(&jobs[i], SKV_ERR_INVALID_ARG, "the same context is given to two jobs");
                return SKV_ERR_INVALID_ARG;
            }
    return SKV_OK;
}

/* Jobs of other codecs restore on their own; model-coded ones join the queue. */
static void dispatch(batch *b, skv_restore_job *jobs, size_t n, skv_restore_job **queue, size_t *nq)
{
    /* verify and a cmvd dictionary carry over; drafts and decoded ids are per segment, not per queue */
    skv_restore_params solo = {.verify = b->p ? b->p->verify : 0, .stats = &b->st, .cm_dict = b->p ? b->p->cm_dict : NULL,
                               .n_cm_dict = b->p ? b->p->n_cm_dict : 0};
    for (size_t i = 0; i < n; i++) {
        skv_restore_job *j = &jobs[i];
        skv_session_info si;
        uint32_t nt = 0;
        if (j->status != SKV_OK) continue;
        skv_session_get_info(j->session, &si);
        skv_session_segment_info(j->session, j->segment, &nt, NULL, NULL);
        b->total += nt;
        if (skv_codec_flags(si.codec) & SKV_CODEC_F_MODEL) { /* the lockstep decode of model-coded streams */
            queue[(*nq)++] = j;
            continue;
        }
        j->status = skv_session_restore_segment(j->session, b->m, j->segment, j->ctx, &solo, j->tokens, j->cap);
        b->done += nt;
    }
}

/* The first failed job's status; its message (kept in its context, set on whichever thread
 * ran it) becomes the calling thread's last error too. */
static int batch_status(const skv_restore_job *jobs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (jobs[i].status != SKV_OK)
            return skv_fail(NULL, jobs[i].status, "restore job %zu: %s", i,
                            jobs[i].ctx ? skv_ctx_last_error(jobs[i].ctx) : skv_status_str(jobs[i].status));
    return SKV_OK;
}

int skv_session_restore_batch(skv_model *m, skv_restore_job *jobs, size_t n, const skv_restore_params *p)
{
    batch b = {.m = m, .p = p};
    skv_restore_job **queue;
    skv_model_info mi;
    size_t nq = 0;
    if (!m || (!jobs && n)) return skv_fail(NULL, SKV_ERR_INVALID_ARG, "restore_batch: NULL model or jobs");
    for (size_t i = 0; i < n; i++) jobs[i].status = SKV_OK;
    if (distinct_contexts(jobs, n)) return SKV_ERR_INVALID_ARG;
    skv_model_get_info(m, &mi);
    b.V = (uint32_t)mi.n_vocab;
    for (size_t i = 0; i < n; i++) job_validate(&b, &jobs[i]);
    if (!(queue = malloc((n ? n : 1) * sizeof *queue)) || alloc_batch(&b)) {
        free(queue);
        free_batch(&b);
        return skv_fail(NULL, SKV_ERR_NOMEM, "restore_batch: out of memory");
    }
    dispatch(&b, jobs, n, queue, &nq);
    run_model_jobs(&b, queue, nq);
    if (p && p->progress) p->progress(p->user, b.done, b.total);
    if (p && p->stats) {
        p->stats->n_tokens += b.st.n_tokens;
        p->stats->n_passes += b.st.n_passes;
    }
    free(queue);
    free_batch(&b);
    return batch_status(jobs, n);
}

uint32_t skv_restore_batch_width(const skv_model *m, size_t n_queued, int n_ctx)
{
    skv_model_info mi;
    uint64_t ctx_bytes, fit;
    if (!m || n_queued < 2 || n_ctx < 1) return 1;
    skv_model_get_info(m, &mi);
    if (mi.file_bytes < BATCH_MIN_WEIGHTS) return 1;
    /* K and V, every layer, f32 */
    ctx_bytes = (uint64_t)mi.n_layer * 2u * (uint64_t)mi.n_head_kv * (uint64_t)mi.head_dim * (uint64_t)n_ctx * 4u;
    fit = ctx_bytes ? BATCH_KV_BUDGET / ctx_bytes : MAX_ACTIVE;
    if (fit > MAX_ACTIVE) fit = MAX_ACTIVE;
    if (fit > n_queued) fit = n_queued;
    return fit ? (uint32_t)fit : 1;
}
