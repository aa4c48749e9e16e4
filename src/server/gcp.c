/* Vertex AI's custom-container contract (Google Cloud), as llama-server serves it: with the
 * environment variable AIP_MODE=PREDICTION, POST AIP_PREDICT_ROUTE (default /predict) takes
 * {"instances": [{"@requestFormat": ROUTE, ...request}, ...]} and answers
 * {"predictions": [reply, ...]}: each instance runs the route its @requestFormat names (a
 * POST route's path, or its camelCase alias: "/v1/chat/completions" is "chatCompletions",
 * "/apply-template" "applyTemplate"; the first route of an alias wins) with the instance's
 * other fields as its body, never streamed; a reply is the route's JSON (its error envelope
 * included), or {"error": ...} for a malformed instance. AIP_HEALTH_ROUTE adds a GET alias
 * of /health and AIP_HTTP_PORT sets the port (server.c). At most SRV_GCP_MAX_INSTANCES
 * instances; they run one after another (llama-server runs them at once). */
#include "core/fpguard.h"
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

#define SRV_GCP_MAX_INSTANCES 128

/* An instance's request: a srv_req whose replies are kept, not sent. */
typedef struct capture {
    srv_req r;
    const srv_req *outer;
    json_t *reply;
} capture;

static capture *cap_of(srv_req *r) { return (capture *)(void *)((char *)r - offsetof(capture, r)); }

static int cap_text(srv_req *r, int code, const char *type, char *text)
{
    capture *c = cap_of(r);
    (void)code, (void)type;
    json_decref(c->reply);
    c->reply = *text ? json_loads(text, JSON_DECODE_ANY, NULL) : json_null();
    if (!c->reply) c->reply = json_string(text); /* not JSON: the text itself, as llama-server */
    free(text);
    return 0;
}

static int cap_stream(srv_req *r, srv_job *j)
{
    capture *c = cap_of(r);
    int state = 0;
    size_t sent = 0, len = 0;
    char *piece;
    while ((piece = srv_reply_stream_next(r->s, j, &state, &sent, &len))) free(piece); /* drained: ends the job */
    srv_job_unref(j);
    json_decref(c->reply);
    c->reply = json_pack("{s:{s:i,s:s,s:s}}", "error", "code", 400, "message",
                         "predict route does not support streaming responses", "type", "invalid_request_error");
    return 0;
}

static int cap_alive(void *r)
{
    const srv_req *o = cap_of(r)->outer;
    return !o->sink->alive || o->sink->alive((void *)(uintptr_t)o);
}

static const srv_sink k_capture = {cap_text, cap_stream, cap_alive, NULL, NULL};

static json_t *instance_error(const char *msg)
{
    return json_pack("{s:{s:i,s:s,s:s}}", "error", "code", 400, "message", msg, "type", "invalid_request_error");
}

/* One instance run through its route: the reply (new). */
static json_t *run_instance(srv_req *outer, json_t *inst)
{
    if (!json_is_object(inst)) return instance_error("each instance must be a JSON object");
    const char *format = json_string_value(json_object_get(inst, "@requestFormat"));
    if (!format) return instance_error("each instance must include a string @requestFormat");
    char path[128];
    if (!srv_route_alias(format, path, sizeof path)) {
        json_t *e = json_sprintf("no handler registered for @requestFormat: %.100s", format);
        json_t *o = e ? instance_error(json_string_value(e)) : NULL;
        json_decref(e);
        return o;
    }
    json_t *body = json_copy(inst);
    if (!body) return NULL;
    json_object_del(body, "@requestFormat");
    if (json_object_get(body, "stream")) json_object_set_new(body, "stream", json_false());
    size_t n = 0;
    char *text = srv_json_text(body, &n, 1);
    json_decref(body);
    if (!text) return NULL;
    capture c = {.r = {.s = outer->s, .method = "POST", .url = path, .auth = outer->auth,
                       .x_api_key = outer->x_api_key, .headers = outer->headers, .n_headers = outer->n_headers,
                       .data = text, .len = n, .sink = &k_capture, .inner = 1},
                 .outer = outer};
    srv_dispatch(&c.r);
    free(text);
    return c.reply ? c.reply : json_null();
}

int srv_rt_gcp_predict(srv_req *r)
{
    json_t *inst = json_object_get(r->body, "instances"), *x;
    size_t i;
    if (!json_is_array(inst)) return srv_reply_error(r, 400, "request body must include an array field named instances");
    if (json_array_size(inst) > SRV_GCP_MAX_INSTANCES)
        return srv_reply_error(r, 400, "instances array exceeds maximum size of %d", SRV_GCP_MAX_INSTANCES);
    json_t *pred = json_array();
    json_array_foreach(inst, i, x) {
        json_t *p = pred ? run_instance(r, x) : NULL;
        if (!p || json_array_append_new(pred, p)) {
            json_decref(pred);
            const srv_mem_scope *sc = srv_mem_current();
            return sc && sc->refused == 413 ? srv_reply_error(r, 413, "the instances need more working memory than one "
                                                                      "request may have (--mem-budget)")
                                            : srv_reply_error(r, 500, "out of memory");
        }
    }
    return srv_reply_json(r, 200, json_pack("{s:o}", "predictions", pred));
}
