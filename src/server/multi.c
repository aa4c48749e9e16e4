/* Several completions for one request: llama-server's batch prompts (/completion with a
 * list of prompts: a list of results) and OpenAI's n (one object, n choices). The jobs
 * run on whichever slots are free, in parallel, and the reply waits for all of them. */
#include <stdio.h>
#include <stdlib.h>
#include "core/fpguard.h"

#include "server/srv.h"

/* Merges the OpenAI replies of jobs 1..n-1 into job 0's: their choice as choices[i] and
 * their token counts into usage. */
static json_t *oai_merged(const srv *s, srv_job **jobs, size_t n)
{
    json_t *o = srv_reply_final(s, jobs[0]);
    json_t *choices = json_object_get(o, "choices"), *usage = json_object_get(o, "usage");
    for (size_t i = 1; o && i < n; i++) {
        json_t *oi = srv_reply_final(s, jobs[i]);
        json_t *c = json_array_get(json_object_get(oi, "choices"), 0), *u = json_object_get(oi, "usage");
        json_object_set_new(c, "index", json_integer((json_int_t)i));
        json_array_append(choices, c);
        static const char *keys[] = {"prompt_tokens", "completion_tokens", "total_tokens"};
        for (size_t k = 0; usage && k < 3; k++)
            json_object_set_new(usage, keys[k], json_integer(json_integer_value(json_object_get(usage, keys[k])) +
                                                             json_integer_value(json_object_get(u, keys[k]))));
        json_decref(oi);
    }
    return o;
}

static json_t *llama_list(const srv *s, srv_job **jobs, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        json_t *o = srv_reply_final(s, jobs[i]);
        json_object_set_new(o, "index", json_integer((json_int_t)i));
        json_array_append_new(a, o);
    }
    return a;
}

int srv_run_many(srv_req *r, srv_job **jobs, size_t n)
{
    size_t sub = 0;
    int code = 0, rc;
    while (sub < n && !(code = srv_pool_submit(r->s->pool, jobs[sub]))) sub++;
    for (size_t i = 0; code && i < sub; i++) atomic_store(&jobs[i]->cancel, 1); /* one did not fit: none runs on */
    for (size_t i = 0; i < sub; i++) srv_job_wait(jobs[i], r->sink->alive, r);
    const srv_job *bad = NULL;
    for (size_t i = 0; i < sub && !bad; i++) bad = jobs[i]->status ? jobs[i] : NULL;
    if (code == 503) rc = srv_reply_error(r, 503, "all %d slots busy and %d requests queued: retry later",
                                          r->s->p.parallel, SRV_QUEUE_MAX);
    else if (code) rc = srv_reply_error(r, 400, "no slot with that id_slot");
    else if (bad) rc = srv_reply_error(r, bad->status, "generation failed: %s", bad->err);
    else rc = srv_reply_json(r, 200, jobs[0]->fmt == SRV_FMT_LLAMA ? llama_list(r->s, jobs, n) : oai_merged(r->s, jobs, n));
    for (size_t i = 0; i < n; i++) srv_job_unref(jobs[i]);
    return rc;
}
