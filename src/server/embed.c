/* Embeddings as llama-server computes them for any model (--embedding, --pooling): each
 * input runs through a slot's cleared context (skv_ctx_prefill_embd: the final hidden state
 * of every position, after the output norm), then the HTTP thread pools the rows (none,
 * mean, the first (cls) or the last token's) and normalizes them (embd_normalize: -1 none,
 * 0 max-abs to int16's range, 1 taxicab, 2 euclidean, the default). The rows' memory is
 * charged to the request before a slot runs it. /embedding and /embeddings answer
 * llama-server's list ({"index", "embedding": rows}); /v1/embeddings OpenAI's object (a
 * pooled vector per input, as floats or base64 of little-endian float32). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "core/fpguard.h"
#include <string.h>

#include "server/srv.h"

int srv_embed_run(skv_ctx *ctx, srv_job *j)
{
    int rc = skv_ctx_truncate(ctx, 0);
    if (!rc) rc = skv_ctx_prefill_embd(ctx, j->prompt, j->n_prompt, j->embd);
    skv_ctx_truncate(ctx, 0);
    return rc;
}

/* The request's inputs as jobs (jobs[0..*n)); 0, or an HTTP code with err. */
static int embed_jobs(srv_req *r, const json_t *in, srv_job **jobs, size_t *n, skv_err *err)
{
    const srv *s = r->s;
    int batch = srv_prompt_is_batch(in);
    size_t want = batch ? json_array_size(in) : 1, D = (size_t)s->info.n_embd;
    if (want > SRV_MAX_EMBED_INPUTS) return skv_fail(err, SKV_ERR_INVALID_ARG, "at most %d inputs", SRV_MAX_EMBED_INPUTS), 400;
    for (*n = 0; *n < want; (*n)++) {
        size_t nt = 0;
        const json_t *p = batch ? json_array_get(in, *n) : in;
        int32_t *t = batch ? srv_batch_item(s, p, &nt, err) : srv_prompt_tokens(s, p, &nt, err);
        if (!t) {
            if (nt >= (size_t)s->n_ctx)
                skv_fail(err, SKV_ERR_INVALID_ARG, "input %zu is too large to process: %zu tokens, a slot holds %d", *n, nt, s->n_ctx - 1);
            return 400;
        }
        srv_job *j = srv_job_new();
        if (j) jobs[*n] = j, j->prompt = t, j->n_prompt = nt, j->id_slot = -1;
        if (!j) return free(t), skv_fail(err, SKV_ERR_NOMEM, "out of memory"), 500;
        if (nt > SIZE_MAX / sizeof(float) / D || srv_mem_hold(NULL, nt * D * sizeof(float)) ||
            !(j->embd = malloc(nt * D * sizeof(float))))
            return skv_fail(err, SKV_ERR_INVALID_ARG, "input %zu (%zu tokens): its hidden states do not fit the request's memory "
                            "(--mem-budget)", *n, nt), 413;
    }
    return 0;
}

/* Runs the jobs on the slots, at most `parallel` at a time; 0 or an HTTP code with err. */
static int embed_run_all(srv_req *r, srv_job **jobs, size_t n, skv_err *err)
{
    size_t wave = (size_t)r->s->p.parallel;
    for (size_t at = 0; at < n; at += wave) {
        size_t k = n - at < wave ? n - at : wave, sub = 0;
        int code = 0;
        while (sub < k && !(code = srv_pool_submit(r->s->pool, jobs[at + sub]))) sub++;
        for (size_t i = 0; i < sub; i++) srv_job_wait(jobs[at + i], r->sink->alive, r);
        if (code) return skv_fail(err, SKV_ERR_INVALID_ARG, "all slots busy and the queue full: retry later"), 503;
        for (size_t i = 0; i < k; i++)
            if (jobs[at + i]->status)
                return skv_fail(err, SKV_ERR_INVALID_ARG, "embedding failed: %.200s", jobs[at + i]->err), jobs[at + i]->status;
    }
    return 0;
}

/* v[0..D) pooled from the rows of j. */
static void pool_rows(const srv_job *j, size_t D, int pooling, float *v)
{
    const float *e = j->embd;
    size_t n = j->n_prompt;
    if (pooling == SRV_POOL_CLS || pooling == SRV_POOL_LAST) {
        memcpy(v, e + (pooling == SRV_POOL_CLS ? 0 : n - 1) * D, D * sizeof *v);
        return;
    }
    for (size_t d = 0; d < D; d++) { /* mean: positions summed in order, in double */
        double sum = 0.0;
        for (size_t t = 0; t < n; t++) sum += (double)e[t * D + d];
        v[d] = (float)(sum / (double)n);
    }
}

/* llama-server's embd_normalize: -1 none, 0 max-abs scaled to 32760, 1 taxicab, 2 euclidean. */
static void normalize(float *v, size_t D, int norm)
{
    double sum = 0.0;
    for (size_t d = 0; d < D; d++) {
        double a = fabs((double)v[d]);
        sum = norm == 0 ? (a > sum ? a : sum) : norm == 1 ? sum + a : sum + a * a;
    }
    double scale = norm == 0 ? (sum > 0 ? 32760.0 / sum : 0.0) : norm == 1 ? (sum > 0 ? 1.0 / sum : 0.0)
                                                                          : (sum > 0 ? 1.0 / sqrt(sum) : 0.0);
    for (size_t d = 0; norm >= 0 && d < D; d++) v[d] = (float)((double)v[d] * scale);
}

static json_t *floats_json(const float *v, size_t D)
{
    json_t *a = json_array();
    for (size_t d = 0; a && d < D; d++) json_array_append_new(a, json_real((double)v[d]));
    return a;
}

char *srv_base64(const unsigned char *b, size_t n, size_t *len)
{
    static const char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t at = 0;
    char *o = malloc((n + 2) / 3 * 4 + 1);
    for (size_t i = 0; o && i < n; i += 3) {
        uint32_t w = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
        o[at++] = k[w >> 18 & 63], o[at++] = k[w >> 12 & 63];
        o[at++] = i + 1 < n ? k[w >> 6 & 63] : '=', o[at++] = i + 2 < n ? k[w & 63] : '=';
    }
    if (o) o[at] = 0;
    if (len) *len = at;
    return o;
}

static json_t *base64_json(const float *v, size_t D)
{
    size_t n = D * 4;
    unsigned char *b = malloc(n ? n : 1);
    json_t *out = NULL;
    for (size_t d = 0; b && d < D; d++) { /* little-endian float32 */
        uint32_t u;
        memcpy(&u, &v[d], 4);
        for (int i = 0; i < 4; i++) b[d * 4 + (size_t)i] = (unsigned char)(u >> (8 * i));
    }
    char *o = b ? srv_base64(b, n, NULL) : NULL;
    if (o) out = json_string(o);
    free(b);
    free(o);
    return out;
}

/* One input's "embedding": rows (llama-server's, pooling none), [vector] (llama-server's,
 * pooled) or the vector (OpenAI's; base64 when asked). */
static json_t *embedding_of(const srv *s, srv_job *j, int oai, int norm, int b64)
{
    size_t D = (size_t)s->info.n_embd;
    if (s->p.pooling == SRV_POOL_NONE) {
        json_t *rows = json_array();
        for (size_t t = 0; rows && t < j->n_prompt; t++) json_array_append_new(rows, floats_json(j->embd + t * D, D));
        return rows;
    }
    float *v = j->embd; /* pooled into the first row's room: the rows are not needed after */
    if (s->p.pooling == SRV_POOL_MEAN) {
        float *m = malloc(D * sizeof *m);
        if (!m) return NULL;
        pool_rows(j, D, SRV_POOL_MEAN, m);
        memcpy(v, m, D * sizeof *m);
        free(m);
    } else {
        pool_rows(j, D, s->p.pooling, v);
    }
    normalize(v, D, norm);
    if (!oai) return json_pack("[o]", floats_json(v, D));
    return b64 ? base64_json(v, D) : floats_json(v, D);
}

/* The request's options: embd_normalize, encoding_format. 0 or 400 with err. */
static int embed_opts(json_t *b, int oai, int *norm, int *b64, skv_err *err)
{
    json_int_t n = 2;
    const char *fmt = "float";
    if (json_unpack(b, "{s?I,s?s}", "embd_normalize", &n, "encoding_format", &fmt) || n < -1 || n > 2)
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"embd_normalize\": -1, 0, 1 or 2; \"encoding_format\": \"float\" or \"base64\""),
               400;
    *norm = (int)n, *b64 = !strcmp(fmt, "base64");
    if (!*b64 && strcmp(fmt, "float"))
        return skv_fail(err, SKV_ERR_INVALID_ARG, "\"encoding_format\": \"float\" or \"base64\", not \"%.40s\"", fmt), 400;
    return oai || !*b64 ? 0 : (skv_fail(err, SKV_ERR_INVALID_ARG, "\"encoding_format\" is /v1/embeddings' (OpenAI's)"), 400);
}

static json_t *embed_reply(const srv *s, srv_job **jobs, size_t n, int oai, int norm, int b64)
{
    json_t *data = json_array();
    json_int_t tokens = 0;
    for (size_t i = 0; data && i < n; i++) {
        json_t *e = embedding_of(s, jobs[i], oai, norm, b64);
        tokens += (json_int_t)jobs[i]->n_prompt;
        json_array_append_new(data, oai ? json_pack("{s:o,s:I,s:s}", "embedding", e, "index", (json_int_t)i, "object",
                                                    "embedding")
                                        : json_pack("{s:I,s:o}", "index", (json_int_t)i, "embedding", e));
    }
    if (!oai) return data;
    return json_pack("{s:s,s:s,s:{s:I,s:I},s:o}", "model", s->model_id, "object", "list", "usage", "prompt_tokens",
                     tokens, "total_tokens", tokens, "data", data);
}

static int embeddings(srv_req *r, int oai)
{
    skv_err err = {0};
    const srv *s = r->s;
    int norm = 2, b64 = 0, code;
    if (!s->p.embedding)
        return srv_reply_error(r, 501, "This server does not support embeddings. Start it with `--embeddings`");
    if (oai && s->p.pooling == SRV_POOL_NONE)
        return srv_reply_error(r, 400, "Pooling type 'none' is not OAI compatible. Please use a different pooling type");
    const json_t *in = json_object_get(r->body, "input");
    if (!in) in = json_object_get(r->body, "content");
    if (!in) return srv_reply_error(r, 400, "\"input\" (or \"content\") is required");
    if ((code = embed_opts(r->body, oai, &norm, &b64, &err))) return srv_reply_error(r, code, "%.255s", err.msg);
    size_t cap = srv_prompt_is_batch(in) ? json_array_size(in) : 1, n = 0;
    srv_job **jobs = calloc(cap ? cap : 1, sizeof *jobs);
    if (!jobs) return srv_reply_error(r, 500, "out of memory");
    code = embed_jobs(r, in, jobs, &n, &err);
    if (code) n += n < cap && jobs[n]; /* the job made before the failure is freed too */
    if (!code) code = embed_run_all(r, jobs, n, &err);
    int rc = code ? srv_reply_error(r, code, "%.255s", err.msg) : srv_reply_json(r, 200, embed_reply(s, jobs, n, oai, norm, b64));
    for (size_t i = 0; i < n; i++) srv_job_unref(jobs[i]);
    free(jobs);
    return rc;
}

int srv_rt_embedding(srv_req *r) { return embeddings(r, 0); }
int srv_rt_oai_embeddings(srv_req *r) { return embeddings(r, 1); }
