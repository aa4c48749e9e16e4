/* Token probabilities (llama-server's n_probs, OpenAI's logprobs / top_logprobs): for each
 * generated token, its log-probability and the n most likely tokens', from the model's raw
 * logits (a log-softmax over the vocabulary, in double with core/detmath: the same numbers
 * on every machine), kept in the job and shaped into llama-server's and OpenAI's JSON. */
#include <stdlib.h>
#include <string.h>
#include "core/fpguard.h"

#include "core/detmath.h"
#include "server/srv.h"

/* The n most likely ids of logits (highest first; ties: the lower id), into top[0..n). */
static void top_ids(const float *logits, int n_vocab, int n, int32_t *top)
{
    int have = 0;
    for (int32_t id = 0; id < n_vocab && n > 0; id++) {
        int at;
        if (have < n) {
            at = have++;
        } else {
            if (logits[id] <= logits[top[n - 1]]) continue; /* not above the n-th best (ties: the lower id stays) */
            at = n - 1;
        }
        while (at > 0 && logits[id] > logits[top[at - 1]]) top[at] = top[at - 1], at--;
        top[at] = id;
    }
}

int srv_probs_record(srv_job *j, const float *logits, int n_vocab, int32_t tok)
{
    int n = j->n_probs < n_vocab ? j->n_probs : n_vocab;
    size_t per = (size_t)n + 1, need = (j->n_gen + 1) * per;
    if (need > j->probs_cap) {
        size_t cap = need * 2;
        srv_prob *p = realloc(j->probs, cap * sizeof *p);
        if (!p) return -1;
        j->probs = p, j->probs_cap = cap;
    }
    double max = logits[0], sum = 0.0;
    for (int i = 1; i < n_vocab; i++) max = logits[i] > max ? logits[i] : max;
    for (int i = 0; i < n_vocab; i++) sum += skv_det_exp((double)logits[i] - max);
    double lse = max + skv_det_log(sum);
    srv_prob *r = j->probs + j->n_gen * per;
    int32_t *top = malloc((size_t)(n ? n : 1) * sizeof *top);
    if (!top) return -1;
    top_ids(logits, n_vocab, n, top);
    r[0] = (srv_prob){tok, (float)((double)logits[tok] - lse)};
    for (int i = 0; i < n; i++) r[1 + i] = (srv_prob){top[i], (float)((double)logits[top[i]] - lse)};
    free(top);
    return 0;
}

/* Room for one more token's entries (the token and its top n). NULL when out of memory. */
static srv_prob *probs_row(srv_job *j)
{
    size_t per = (size_t)j->n_probs + 1, need = (j->n_gen + 1) * per;
    if (need > j->probs_cap) {
        size_t cap = need * 2;
        srv_prob *p = realloc(j->probs, cap * sizeof *p);
        if (!p) return NULL;
        j->probs = p, j->probs_cap = cap;
    }
    return j->probs + j->n_gen * per;
}

int srv_probs_record_post(srv_job *j, const void *scratch, int32_t tok)
{
    srv_prob *r = probs_row(j);
    if (!r) return -1;
    int k = srv_sample_post(scratch, j->n_probs, tok, r);
    for (int i = k; i < j->n_probs; i++) r[1 + i] = (srv_prob){-1, 0.0f}; /* fewer candidates were left */
    return 0;
}

/* {"id", "token", "bytes", "logprob"} of one token ("prob" after sampling). */
static json_t *prob_obj(const srv *s, srv_prob p, int post)
{
    char piece[256];
    size_t n = 0;
    if (skv_token_piece(s->model, p.id, piece, sizeof piece, &n)) n = 0;
    json_t *bytes = json_array();
    for (size_t i = 0; i < n && bytes; i++) json_array_append_new(bytes, json_integer((unsigned char)piece[i]));
    size_t tl = 0;
    char *text = srv_utf8_valid(piece, n, &tl);
    json_t *o = json_pack("{s:i,s:s%,s:o,s:f}", "id", p.id, "token", text ? text : "", text ? tl : (size_t)0, "bytes",
                          bytes, post ? "prob" : "logprob", (double)p.logprob);
    free(text);
    return o;
}

json_t *srv_probs_json(const srv *s, const srv_job *j, size_t from, size_t to)
{
    json_t *a = json_array();
    size_t per = (size_t)j->n_probs + 1;
    for (size_t k = from; a && j->probs && k < to; k++) {
        const srv_prob *r = j->probs + k * per;
        json_t *o = prob_obj(s, r[0], j->post_probs), *top = json_array();
        for (int i = 0; i < j->n_probs && top; i++)
            if (r[1 + i].id >= 0) json_array_append_new(top, prob_obj(s, r[1 + i], j->post_probs));
        json_object_set_new(o, j->post_probs ? "top_probs" : "top_logprobs", top);
        json_array_append_new(a, o);
    }
    return a;
}
