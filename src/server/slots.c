/* The slots: each owns a context (n_ctx positions) and the tokens whose KV it holds, and
 * runs one job at a time from the shared bounded queue: prepare the prompt cache, prefill
 * the rest, sample and decode until a stop, then put the conversation back into the store.
 *
 * Decoding is batched across slots (continuous batching): a slot with its next token
 * joins the pending step; the first slot to find no step running takes every pending
 * token and runs them as one skv_decode_multi pass (the weights read once for all rows),
 * then hands each slot its logits row. A slot that arrives during a step joins the next
 * one; nobody waits for a slot to arrive. Each row is bit-identical to skv_decode on its
 * own context, so batching never changes a result.
 *
 *   HTTP thread --submit--> queue[SRV_QUEUE_MAX] --pop--> slot k: cache, prefill, decode
 *        ^                                                     |
 *        +---- job->text / safe / done (mu, cv) <--------------+
 */
#include <errno.h>
#include <stdio.h>
#include "core/fpguard.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv.h"

typedef struct slot {
    int id;
    srv_pool *pool;
    skv_ctx *ctx;
    int32_t *tokens;     /* [n_ctx] the tokens whose KV ctx holds */
    size_t n_tokens;
    size_t approx_from;  /* first position whose KV is APPROXIMATE (--reuse near); SIZE_MAX: none */
    float *sur;          /* with a store: [n_ctx] each token's surprisal, known for positions */
    size_t sur_from;     /* [sur_from, n_tokens) (SIZE_MAX: none): the put takes them */
    float *hid;          /* [n_ctx][n_embd] or NULL: prompt rows' final hidden states, and */
    uint8_t *pend;       /* [n_ctx]: 1 where sur[p] is still to come from hid[p - 1] (the writer's) */
    float *logits;       /* [n_vocab] */
    void *scratch;       /* sampling */
    srv_job *job;        /* running, for /slots (guarded by the pool's mu) */
    int avail;           /* waiting for a job, or about to (its reply is out): guarded by mu */
    uint64_t n_jobs;
    int step_rc, step_done; /* the batched decode's result for this slot (bmu) */
    pthread_t th;
    int started;
} slot;

/* The decode step being gathered (guarded by bmu). */
typedef struct step {
    skv_ctx *ctx[SRV_MAX_PARALLEL];
    int32_t tok[SRV_MAX_PARALLEL];
    struct slot *who[SRV_MAX_PARALLEL];
    size_t n;
} step;

struct srv_pool {
    srv *s;
    pthread_mutex_t pfmu; /* one prompt prefill at a time: each uses every thread already */
    pthread_mutex_t bmu;
    pthread_cond_t bcv;
    step pending;
    int stepping;
    int n_gen; /* slots in their generation loop (bmu): a step waits a moment for all of them */
    int pf_want; /* prompt prefills waiting or running (bmu): decode steps wait for them */
    float *step_logits; /* [SRV_MAX_PARALLEL][n_vocab] */
    slot *slots;
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job *q[SRV_QUEUE_MAX];
    size_t n_q;
    int stop, busy;
    srv_cache *cache;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

srv_job *srv_job_new(void)
{
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    atomic_init(&j->refs, 1);
    atomic_init(&j->cancel, 0);
    j->id_slot = -1;
    j->slot = -1;
    j->finish = "length";
    return j;
}

void srv_job_unref(srv_job *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1) return;
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->prompt);
    free(j->text);
    free(j->gen);
    free(j->bias);
    free(j->probs);
    free(j->tok_end);
    free(j->think_force);
    free(j->fields);
    free(j->embd);
    json_decref(j->chat_msgs);
    srv_grammar_free(j);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void srv_job_wait(srv_job *j, int (*alive)(void *), void *arg)
{
    struct timespec until;
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += SRV_ALIVE_CHECK_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        /* every new token signals cv: wait out the whole interval, then ask */
        while (!j->done && !pthread_cond_timedwait(&j->cv, &j->mu, &until)) {
        }
        if (!j->done && alive && !alive(arg)) atomic_store(&j->cancel, 1); /* gone: the slot stops at its next token */
    }
    pthread_mutex_unlock(&j->mu);
}

int srv_pool_submit(srv_pool *p, srv_job *j)
{
    if (j->id_slot >= p->n) return 400;
    pthread_mutex_lock(&p->mu);
    int full = p->n_q >= SRV_QUEUE_MAX;
    if (!full) {
        atomic_fetch_add(&j->refs, 1);
        p->q[p->n_q++] = j;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    if (full) atomic_fetch_add(&p->s->m.n_rejected, 1);
    return full ? 503 : 0;
}

static size_t common_prefix(const slot *sl, const srv_job *j)
{
    size_t i = 0;
    while (i < sl->n_tokens && i < j->n_prompt && sl->tokens[i] == j->prompt[i]) i++;
    return i;
}

/* The available slot that should run j: its id_slot, else the one holding the longest prefix of
 * its prompt (llama-server's slot similarity), ties to the lowest id. Caller holds mu. */
static int best_slot(const srv_pool *p, const srv_job *j)
{
    int best = -1;
    size_t best_len = 0;
    if (j->id_slot >= 0) return j->id_slot;
    for (int i = 0; i < p->n; i++) {
        if (!p->slots[i].avail) continue;
        size_t k = common_prefix(&p->slots[i], j);
        if (best < 0 || k > best_len) best = i, best_len = k;
    }
    return best;
}

/* The oldest queued job this slot should run; NULL at shutdown. */
static srv_job *next_job(slot *sl)
{
    srv_pool *p = sl->pool;
    srv_job *j = NULL;
    pthread_mutex_lock(&p->mu);
    sl->job = NULL;
    sl->avail = 1;
    while (!p->stop && !j) {
        for (size_t i = 0; i < p->n_q && !j; i++) {
            if (best_slot(p, p->q[i]) != sl->id) continue;
            j = p->q[i];
            memmove(p->q + i, p->q + i + 1, (p->n_q - i - 1) * sizeof *p->q);
            p->n_q--;
        }
        if (!j) pthread_cond_wait(&p->cv, &p->mu);
    }
    sl->avail = j == NULL;
    sl->job = j;
    p->busy += j != NULL;
    /* this slot is no longer available: a queued job that was its may now be another's,
     * whose slot went back to sleep when it looked (jobs arriving together waited for the
     * next submit: 87 ms at 4 slots) */
    if (j && p->n_q) pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return j;
}

static void job_end(srv_job *j, int status, const char *msg)
{
    pthread_mutex_lock(&j->mu);
    j->status = status;
    if (msg) snprintf(j->err, sizeof j->err, "%s", msg);
    j->safe = j->len;
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Ends the job. The slot counts as available from here on, before its conversation is put
 * back, so a client's next turn (sent as soon as it has this reply) waits for this slot's
 * KV instead of going to another idle slot (the race would lose the cache). */
static void job_done(slot *sl, srv_job *j, int status, const char *msg)
{
    pthread_mutex_lock(&sl->pool->mu);
    sl->avail = 1;
    pthread_mutex_unlock(&sl->pool->mu);
    job_end(j, status, msg);
}

/* A prompt_progress event: `processed` of the prompt's positions are in the cache. */
static void progress_push(srv_job *j, size_t processed, double t0)
{
    pthread_mutex_lock(&j->mu);
    if (j->n_prog < SRV_MAX_PROGRESS) j->prog[j->n_prog++] = (struct srv_progress){processed, now_ms() - t0};
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Prompt prefills go first: while one waits or runs, no decode step starts (the step
 * that runs finishes) and the store writer starts no put, so a prompt gets the cores
 * whole and its first token soon, as in llama-server, whose batch holds the prompt's
 * tokens and the decodes together; four prompts arriving at once no longer wait for each
 * other's slots' decode steps too. */
static void prefill_announce(srv_pool *p, int d)
{
    pthread_mutex_lock(&p->bmu);
    p->pf_want += d;
    if (!p->pf_want) pthread_cond_broadcast(&p->bcv);
    pthread_mutex_unlock(&p->bmu);
    srv_cache_prefill(p->cache, d);
}

/* Prefills t[a, b) (ctx holds [0, a)); the last row's logits into sl->logits when asked,
 * and always when the slot keeps surprisals (sur_from set): then sur[a+1 .. b) too, or,
 * with hid, the rows' hidden states from which the store's writer computes them. */
static int prefill_span(slot *sl, const int32_t *t, size_t a, size_t b, int want_logits)
{
    int rc;
    size_t D = (size_t)sl->pool->s->info.n_embd;
    prefill_announce(sl->pool, 1);
    pthread_mutex_lock(&sl->pool->pfmu);
    if (sl->sur_from != SIZE_MAX && sl->hid) {
        rc = skv_ctx_prefill_hidden(sl->ctx, t + a, b - a, sl->hid + a * D, sl->logits);
        if (!rc && b > a + 1) memset(sl->pend + a + 1, 1, b - a - 1);
    } else if (sl->sur_from != SIZE_MAX) {
        rc = skv_ctx_prefill_surprisal(sl->ctx, t + a, b - a, sl->sur + a + 1, sl->logits);
        if (!rc && sl->pend && b > a + 1) memset(sl->pend + a + 1, 0, b - a - 1);
    } else {
        rc = skv_prefill(sl->ctx, t + a, b - a, want_logits ? SKV_LOGITS_LAST : SKV_LOGITS_NONE,
                         want_logits ? sl->logits : NULL);
    }
    pthread_mutex_unlock(&sl->pool->pfmu);
    srv_metrics_pass(&sl->pool->s->m, 1);
    prefill_announce(sl->pool, -1);
    return rc;
}

/* The surprisal of the token the slot's logits (of the position before it) just chose. */
static void sur_note(slot *sl, size_t pos, int32_t tok)
{
    if (sl->sur_from == SIZE_MAX) return;
    sl->sur[pos] = (float)skv_token_bits(sl->logits, sl->pool->s->info.n_vocab, tok);
    if (sl->pend) sl->pend[pos] = 0;
}

/* Prefills prompt[start, n) (the cache holds `keep` positions for the client: start is keep,
 * or one less when the slot keeps surprisals), logits of the last position. With
 * return_progress, in batches of -b tokens (grown so that at most SRV_MAX_PROGRESS events go
 * out), one event before the first and one after each: the cache is the same as one
 * prefill's (docs/determinism.md). */
static int prefill_prompt(slot *sl, srv_job *j, size_t start, size_t keep, double t0)
{
    size_t n = j->n_prompt;
    if (!j->return_progress || !j->stream) return prefill_span(sl, j->prompt, start, n, 1);
    size_t b = sl->pool->s->p.n_batch > 0 ? (size_t)sl->pool->s->p.n_batch : SRV_DEFAULT_BATCH;
    if ((n - start) / b + 2 > SRV_MAX_PROGRESS) b = (n - start) / (SRV_MAX_PROGRESS - 2) + 1;
    j->prog_cache = keep;
    progress_push(j, keep, t0);
    for (size_t at = start; at < n;) {
        size_t k = n - at < b ? n - at : b;
        if (at > start) sur_note(sl, at, j->prompt[at]); /* the last chunk's last row predicts it */
        int rc = prefill_span(sl, j->prompt, at, at + k, at + k == n);
        if (rc) return rc;
        at += k;
        progress_push(j, at, t0);
    }
    return 0;
}

/* Prompt: reuse what a cache holds, prefill the rest; logits of the last position. */
static int run_prompt(slot *sl, srv_job *j)
{
    srv *s = sl->pool->s;
    double t0 = now_ms();
    srv_reuse u = {.approx_from = sl->approx_from};
    size_t keep = 0;
    if (j->cache_prompt)
        keep = srv_cache_prepare(s, sl->pool->cache, sl->ctx, sl->tokens, sl->n_tokens, j->prompt, j->n_prompt, &u);
    else
        skv_ctx_truncate(sl->ctx, 0), u.approx_from = SIZE_MAX;
    memcpy(sl->tokens, j->prompt, j->n_prompt * sizeof *j->prompt);
    size_t start = keep;
    /* an exact cache and a store: the surprisals of what runs now go to the put (the first
     * of them needs the kept position's logits: it runs again) */
    sl->sur_from = sl->sur && u.approx_from == SIZE_MAX ? keep : SIZE_MAX;
    if (sl->sur_from != SIZE_MAX && keep) skv_ctx_truncate(sl->ctx, (int)(start = keep - 1));
    sl->n_tokens = start;
    sl->approx_from = u.approx_from;
    int rc = prefill_prompt(sl, j, start, keep, t0);
    if (rc) {
        skv_ctx_truncate(sl->ctx, 0);
        sl->approx_from = sl->sur_from = SIZE_MAX;
        return rc;
    }
    sl->n_tokens = j->n_prompt;
    size_t reused = j->cache_prompt ? u.n_reused : 0;
    j->n_cached = reused;
    j->cached_bits = u.bits;
    j->cache_approx = u.approximate, j->n_cache_approx = u.n_approx, j->n_near_recomputed = u.n_recomputed;
    j->t_prompt_ms = now_ms() - t0;
    atomic_fetch_add(&s->m.n_prompt_tokens, j->n_prompt - reused);
    atomic_fetch_add(&s->m.n_cached_tokens, reused);
    atomic_fetch_add(&s->m.prompt_us, (unsigned long long)(j->t_prompt_ms * 1e3));
    atomic_fetch_add(&s->m.win_prompt_tokens, j->n_prompt - reused);
    atomic_fetch_add(&s->m.win_prompt_us, (unsigned long long)(j->t_prompt_ms * 1e3));
    return 0;
}

/* Appends tok to the generated ids (and its probabilities when asked), under the job's
 * lock: a streaming reader reads them. */
static int gen_push(srv_job *j, int32_t tok, const float *logits, int n_vocab, const void *scratch)
{
    int rc = 0;
    pthread_mutex_lock(&j->mu);
    if (j->n_gen == j->gen_cap) {
        size_t cap = j->gen_cap ? j->gen_cap * 2 : 64;
        int32_t *g = realloc(j->gen, cap * sizeof *g);
        if (g) j->gen = g, j->gen_cap = cap;
        else rc = -1;
    }
    if (!rc && j->want_probs)
        rc = j->post_probs ? srv_probs_record_post(j, scratch, tok) : srv_probs_record(j, logits, n_vocab, tok);
    if (!rc) j->gen[j->n_gen++] = tok;
    pthread_mutex_unlock(&j->mu);
    return rc;
}

/* Runs the pending tokens as one step; called with bmu held, returns with it held. */
static void run_step(srv_pool *p)
{
    step st = p->pending;
    size_t V = (size_t)p->s->info.n_vocab;
    p->pending.n = 0;
    p->stepping = 1;
    pthread_mutex_unlock(&p->bmu);
    int rc = skv_decode_multi(st.ctx, st.tok, st.n, p->step_logits);
    srv_metrics_pass(&p->s->m, st.n);
    for (size_t i = 0; i < st.n && !rc; i++) memcpy(st.who[i]->logits, p->step_logits + i * V, V * sizeof(float));
    pthread_mutex_lock(&p->bmu);
    for (size_t i = 0; i < st.n; i++) st.who[i]->step_rc = rc, st.who[i]->step_done = 1;
    p->stepping = 0;
    pthread_cond_broadcast(&p->bcv);
}

static void gen_count(srv_pool *p, int d)
{
    pthread_mutex_lock(&p->bmu);
    p->n_gen += d;
    pthread_cond_broadcast(&p->bcv); /* a step waiting for this slot's token need not */
    pthread_mutex_unlock(&p->bmu);
}

/* skv_decode(sl->ctx, tok, sl->logits), batched with the other slots decoding now. A step
 * that could start waits up to SRV_STEP_GATHER_US for the other generating slots' tokens
 * (each is sampling its last step's row): the slots then step together instead of in
 * turns of one or two rows, each step's thread hand-offs shared by all of them. */
static int decode_batched(slot *sl, int32_t tok)
{
    srv_pool *p = sl->pool;
    pthread_mutex_lock(&p->bmu);
    step *st = &p->pending;
    st->ctx[st->n] = sl->ctx, st->tok[st->n] = tok, st->who[st->n] = sl;
    st->n++;
    sl->step_done = 0;
    pthread_cond_broadcast(&p->bcv); /* a gathering step may be waiting for this token */
    struct timespec until = {0, 0};
    while (!sl->step_done) {
        if (!p->stepping && !p->pf_want) {
            if ((int)st->n < p->n_gen) {
                if (!until.tv_sec) {
                    clock_gettime(CLOCK_REALTIME, &until);
                    until.tv_nsec += SRV_STEP_GATHER_US * 1000L;
                    until.tv_sec += until.tv_nsec / 1000000000L, until.tv_nsec %= 1000000000L;
                }
                if (pthread_cond_timedwait(&p->bcv, &p->bmu, &until) != ETIMEDOUT) continue;
            }
            if (!sl->step_done && !p->stepping && !p->pf_want) run_step(p);
        } else {
            pthread_cond_wait(&p->bcv, &p->bmu);
        }
    }
    int rc = sl->step_rc;
    pthread_mutex_unlock(&p->bmu);
    return rc;
}

/* The context is full: llama-server's context shift. The first n_keep positions stay (-1:
 * the whole prompt; the BOS is added to a count >= 0; at most n_ctx - 4), n_discard (0:
 * half) of the rest go, and what follows moves down. The engine cannot move KV entries
 * to other positions, so the moved tokens are prefilled again after the kept prefix: the
 * KV is then exactly a fresh prefill of the shifted token list (deterministic, and what a
 * later request with that list finds in the cache). 1 = room made, 0 = none (stop). */
static int ctx_shift(slot *sl, srv_job *j)
{
    const srv *s = sl->pool->s;
    int n = (int)sl->n_tokens, keep = j->n_keep < 0 ? (int)j->n_prompt : j->n_keep;
    if (j->n_keep >= 0 && s->info.bos_id >= 0 && n && sl->tokens[0] == s->info.bos_id) keep++;
    keep = keep < s->n_ctx - 4 ? keep : s->n_ctx - 4;
    keep = keep > 0 ? keep : 0;
    int left = n - keep, drop = j->n_discard > 0 ? j->n_discard : left / 2;
    drop = drop < left - 1 ? drop : left - 1;
    if (drop <= 0) return 0;
    memmove(sl->tokens + keep, sl->tokens + keep + drop, (size_t)(n - keep - drop) * sizeof *sl->tokens);
    sl->n_tokens = (size_t)(n - drop);
    sl->sur_from = SIZE_MAX; /* the shifted positions' surprisals are not run: the put runs them */
    skv_ctx_truncate(sl->ctx, keep);
    int rc = skv_prefill(sl->ctx, sl->tokens + keep, sl->n_tokens - (size_t)keep, SKV_LOGITS_NONE, NULL);
    srv_metrics_pass(&sl->pool->s->m, 1);
    if (rc) {
        srv_log("slot %d: context shift: %s", sl->id, skv_ctx_last_error(sl->ctx));
        skv_ctx_truncate(sl->ctx, 0);
        sl->n_tokens = 0;
        return 0;
    }
    j->truncated = 1;
    return 1;
}

/* One sampled token: 1 = the job is finished (j->finish set), 0 = go on, < 0 = error. */
/* gen_step's answer when the request's grammar is too costly to follow (ends it with a 400) */
#define GEN_COSTLY 2

static int gen_step(slot *sl, srv_job *j, srv_rng *rng)
{
    const srv *s = sl->pool->s;
    int32_t tok;
    if (j->grammar || !srv_think_budget_next(j, &tok)) /* a thought past its budget is closed */
        tok = srv_sample_constrained(s, j, sl->logits, sl->tokens, sl->n_tokens, rng, sl->scratch);
    if (tok < 0) return j->finish = "stop", GEN_COSTLY;
    if (tok == s->info.eos_id) return j->finish = "stop", 1;
    if (gen_push(j, tok, sl->logits, s->info.n_vocab, sl->scratch)) return SKV_ERR_NOMEM;
    size_t had = j->len; /* the slot's thread is the text's only writer */
    if (srv_job_append(j, s->model, tok)) return j->finish = "stop", 1;
    if (j->n_gen >= (size_t)j->n_predict) return j->finish = "length", 1;
    /* t_max_predict_ms, as llama-server: past the time, the generation ends at a newline */
    if (j->t_max_predict_ms > 0 && j->len > had && memchr(j->text + had, '\n', j->len - had) &&
        now_ms() - j->t_gen_start > j->t_max_predict_ms)
        return j->finish = "length", 1;
    /* as llama-server: prompt + generated tokens never exceed n_ctx (the last one needs no KV) */
    if (sl->n_tokens + 1 >= (size_t)s->n_ctx && (!s->p.ctx_shift || !ctx_shift(sl, j)))
        return j->truncated = 1, j->finish = "length", 1; /* as llama-server: stopped by the context */
    sur_note(sl, sl->n_tokens, tok);
    int rc = decode_batched(sl, tok);
    if (rc) return rc;
    sl->tokens[sl->n_tokens++] = tok;
    return 0;
}

static void run_action_job(slot *sl, srv_job *j)
{
    j->slot = sl->id;
    sl->sur_from = SIZE_MAX;
    int rc = srv_slot_action(sl->pool->s, j, sl->ctx, sl->tokens, &sl->n_tokens);
    if (j->action != SRV_ACT_SAVE) sl->approx_from = SIZE_MAX; /* restored or erased: exact */
    job_done(sl, j, rc, NULL);
}

/* At the end of a chat reply: the slot's KV becomes the conversation as the client will send it
 * back (its messages, the reply as an assistant turn, rendered by the template and
 * tokenized), so the next turn reuses the whole history even where the template renders
 * the reply otherwise than the model generated it (a space added or trimmed, end-of-turn
 * markers): the positions past the common prefix are prefilled now. */
static void extend_history(slot *sl, srv_job *j)
{
    srv *s = sl->pool->s;
    size_t tl = 0, n = 0, k = 0;
    pthread_mutex_lock(&j->mu);
    char *reply = srv_utf8_valid(j->text ? j->text : "", j->len, &tl);
    pthread_mutex_unlock(&j->mu);
    int32_t *t = reply ? srv_chat_history_tokens(s, j->chat_msgs, reply, tl, &n) : NULL;
    free(reply);
    if (t && n < (size_t)s->n_ctx) {
        while (k < n && k < sl->n_tokens && t[k] == sl->tokens[k]) k++;
        /* keeping surprisals, position k's needs the logits of k - 1: it runs again */
        size_t a = sl->sur_from != SIZE_MAX && k ? k - 1 : k;
        if (k < n && (skv_ctx_truncate(sl->ctx, (int)a) || prefill_span(sl, t, a, n, 0))) {
            skv_ctx_truncate(sl->ctx, 0);
            n = 0;
        }
        if (k < n && sl->sur_from != SIZE_MAX && sl->sur_from > k) sl->sur_from = k; /* known: [k, n) too */
        memcpy(sl->tokens, t, n * sizeof *t);
        sl->n_tokens = n;
    }
    free(t);
}

static void run_job(slot *sl, srv_job *j)
{
    srv *s = sl->pool->s;
    srv_rng rng;
    srv_rng_seed(&rng, j->seed);
    if (j->action) {
        run_action_job(sl, j);
        return;
    }
    if (j->embd) { /* an embedding: the slot's KV is cleared before and after */
        int erc = atomic_load(&j->cancel) ? 0 : srv_embed_run(sl->ctx, j);
        if (!erc && !atomic_load(&j->cancel)) { /* its prompt is a prompt processed (llama-server counts it) */
            srv_metrics_pass(&s->m, 1);
            srv_metrics_seq(&s->m, j->n_prompt);
            atomic_fetch_add(&s->m.n_prompt_tokens, j->n_prompt);
            atomic_fetch_add(&s->m.win_prompt_tokens, j->n_prompt);
        }
        sl->n_tokens = 0, sl->approx_from = sl->sur_from = SIZE_MAX;
        job_done(sl, j, erc ? 500 : 0, erc ? skv_ctx_last_error(sl->ctx) : NULL);
        return;
    }
    int rc = atomic_load(&j->cancel) ? 0 : run_prompt(sl, j);
    if (rc) {
        sl->n_tokens = 0;
        job_done(sl, j, 500, skv_ctx_last_error(sl->ctx));
        return;
    }
    pthread_mutex_lock(&j->mu);
    j->slot = sl->id;
    j->started = 1;
    double t0 = j->t_gen_start = now_ms();
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    gen_count(sl->pool, 1);
    while (!rc && j->n_gen < (size_t)j->n_predict && !atomic_load(&j->cancel)) rc = gen_step(sl, j, &rng);
    gen_count(sl->pool, -1);
    j->t_gen_ms = now_ms() - t0;
    /* before the reply goes out: the messages' memory is the request's, given back with it */
    if (rc >= 0 && j->chat_msgs && !atomic_load(&j->cancel)) extend_history(sl, j);
    json_decref(j->chat_msgs);
    j->chat_msgs = NULL;
    atomic_fetch_add(&s->m.n_gen_tokens, j->n_gen);
    atomic_fetch_add(&s->m.gen_us, (unsigned long long)(j->t_gen_ms * 1e3));
    atomic_fetch_add(&s->m.win_gen_tokens, j->n_gen ? j->n_gen - 1 : 0); /* decode steps (the first token is free) */
    atomic_fetch_add(&s->m.win_gen_us, (unsigned long long)(j->t_gen_ms * 1e3));
    srv_metrics_seq(&s->m, j->n_prompt + j->n_gen);
    if (rc < 0) {
        sl->n_tokens = 0;
        skv_ctx_truncate(sl->ctx, 0);
    }
    if (rc == GEN_COSTLY)
        job_done(sl, j, 400,
                 "the grammar is too costly to follow: the next token took its recognizer past a bound on work "
                 "(docs/server.md, Limits); simplify it (nested repetitions that can match the same text, "
                 "such as (a | a a)*, multiply the work)");
    else job_done(sl, j, rc < 0 ? 500 : 0, rc < 0 ? skv_ctx_last_error(sl->ctx) : NULL);
}

static void *slot_main(void *arg)
{
    slot *sl = arg;
    srv_job *j;
    while ((j = next_job(sl))) {
        run_job(sl, j);
        int ok = j->status == 0 && !atomic_load(&j->cancel) && !j->action && !j->embd;
        srv_job_unref(j);
        if (ok) {
            srv_put_work w = {sl->sur, sl->sur_from, sl->hid, sl->pend};
            srv_cache_put(sl->pool->s, sl->pool->cache, sl->ctx, sl->tokens, sl->n_tokens, &w);
        }
        pthread_mutex_lock(&sl->pool->mu);
        sl->pool->busy--;
        sl->n_jobs++;
        pthread_mutex_unlock(&sl->pool->mu);
    }
    return NULL;
}

/* As llama-server warms up: a short prefill (with surprisals when a store takes them) before
 * the first request, so the weights' pages, the thread pool and the scratch buffers are
 * in place instead of costing the first requests (they took 3-10x the median time to
 * first token); the cache is cleared after. */
static void warm_up(slot *sl)
{
    enum { N = 4 };
    int32_t t[N] = {0};
    float sur[N];
    if (sl->hid) (void)skv_ctx_prefill_hidden(sl->ctx, t, N, sl->hid, sl->logits);
    else if (sl->sur) (void)skv_ctx_prefill_surprisal(sl->ctx, t, N, sur, sl->logits);
    else (void)skv_prefill(sl->ctx, t, N, SKV_LOGITS_LAST, sl->logits);
    skv_ctx_truncate(sl->ctx, 0);
}

static int slot_init(srv_pool *p, slot *sl, int id)
{
    const srv *s = p->s;
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = s->n_ctx;
    cp.n_threads = s->p.n_threads;
    sl->id = id;
    sl->approx_from = sl->sur_from = SIZE_MAX;
    sl->pool = p;
    if (skv_ctx_create(s->model, &cp, &sl->ctx)) return -1;
    sl->tokens = malloc((size_t)s->n_ctx * sizeof *sl->tokens);
    sl->logits = malloc((size_t)s->info.n_vocab * sizeof *sl->logits);
    sl->scratch = calloc(1, srv_sample_scratch_bytes(s->info.n_vocab)); /* the penalty counts start at 0 */
    sl->sur = s->store ? calloc((size_t)s->n_ctx, sizeof *sl->sur) : NULL;
    if (!sl->tokens || !sl->logits || !sl->scratch || (s->store && !sl->sur)) return -1;
    if (s->store && srv_cache_takes_hidden(p->cache)) { /* else the slot computes the surprisals */
        sl->hid = malloc((size_t)s->n_ctx * (size_t)s->info.n_embd * sizeof *sl->hid);
        sl->pend = calloc((size_t)s->n_ctx, 1);
        if (!sl->hid || !sl->pend) return -1;
    }
    warm_up(sl);
    if (pthread_create(&sl->th, NULL, slot_main, sl)) return -1;
    sl->started = 1;
    return 0;
}

int srv_pool_start(srv *s, srv_pool **out)
{
    srv_pool *p = calloc(1, sizeof *p);
    if (!p) return -1;
    p->s = s;
    p->n = s->p.parallel;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_mutex_init(&p->bmu, NULL);
    pthread_mutex_init(&p->pfmu, NULL);
    pthread_cond_init(&p->bcv, NULL);
    p->step_logits = malloc((size_t)p->n * (size_t)s->info.n_vocab * sizeof *p->step_logits);
    p->slots = calloc((size_t)p->n, sizeof *p->slots);
    p->cache = srv_cache_create(s);
    *out = p;
    if (!p->slots || !p->cache || !p->step_logits) return -1;
    for (int i = 0; i < p->n; i++)
        if (slot_init(p, &p->slots[i], i)) return -1;
    return 0;
}

void srv_pool_stop(srv_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; p->slots && i < p->n; i++) {
        slot *sl = &p->slots[i];
        if (sl->started) pthread_join(sl->th, NULL);
        skv_ctx_free(sl->ctx);
        free(sl->tokens);
        free(sl->logits);
        free(sl->scratch);
        free(sl->sur);
        free(sl->hid);
        free(sl->pend);
    }
    for (size_t i = 0; i < p->n_q; i++) srv_job_unref(p->q[i]);
    srv_cache_free(p->cache);
    free(p->step_logits);
    free(p->slots);
    free(p);
}

json_t *srv_pool_slots_json(srv_pool *p)
{
    json_t *a = json_array();
    if (!p) return a; /* asleep: no slots (sleep.c) */
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->n && a; i++) {
        const slot *sl = &p->slots[i];
        json_array_append_new(a, json_pack("{s:i,s:i,s:b,s:I,s:I}", "id", sl->id, "n_ctx", p->s->n_ctx,
                                           "is_processing", sl->job != NULL, "n_past", (json_int_t)sl->n_tokens,
                                           "n_jobs", (json_int_t)sl->n_jobs));
    }
    pthread_mutex_unlock(&p->mu);
    return a;
}

size_t srv_pool_queued(srv_pool *p)
{
    if (!p) return 0;
    pthread_mutex_lock(&p->mu);
    size_t n = p->n_q;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int srv_pool_busy(srv_pool *p)
{
    if (!p) return 0;
    pthread_mutex_lock(&p->mu);
    int n = p->busy;
    pthread_mutex_unlock(&p->mu);
    return n;
}
