/* The codecs that store a segment's ids alone and are restored by one prefill of them
 * (docs/format.md 2.1, 2.4, 2.6): tokens (zstd of LEB128 ids), cm (the ids under the
 * context-mixing model of coder/cm.h), cmv and cmvd (the same with the vocabulary's side
 * information, cmvd primed by a dictionary). The digest is the exact KV's: the restore
 * regenerates it by running the model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fpguard.h"

#include "container/cmv_model.h"
#include "container/codecs.h"

int skv_codec_tokens_encode(skv_codec_seg *x)
{
    int rc = skv_codec_tokens_frame(x, &x->len);
    if (!rc) rc = skv_codec_ctx_digest(x);
    x->payload = *x->buf;
    return rc;
}

int skv_codec_tokens_decode(const skv_session *s, const seg_view *g, skv_model *m, const skv_restore_params *p,
                            int32_t *tok, const skv_id_notify *nf, skv_err *err)
{
    (void)m, (void)p, (void)nf;
    return skv_session_decode_tokens(g, s->info.n_vocab, tok, err);
}

/* A coder's SKV_ERR_FORMAT is a damaged file: said the way the reader says it. */
static int ids_failed(int rc, skv_err *err)
{
    if (rc == SKV_ERR_FORMAT) {
        return skv_session_bad(err, skv_err_msg(err));
    }
    return rc;
}

int skv_codec_cm_encode(skv_codec_seg *x)
{
    int rc = skv_codec_ctx_digest(x);
    if (!rc && (rc = skv_cm_payload(x->tok, x->n, x->V, x->buf, x->cap, &x->len)))
        return skv_fail(x->err, rc, "%s",
                        rc == SKV_ERR_NOMEM ? "out of memory" : "cm coder bound violated (internal)");
    x->payload = *x->buf;
    return rc;
}

int skv_codec_cm_decode(const skv_session *s, const seg_view *g, skv_model *m, const skv_restore_params *p,
                        int32_t *tok, const skv_id_notify *nf, skv_err *err)
{
    (void)m, (void)p, (void)nf;
    int rc = skv_cm_payload_decode(g->payload, (size_t)g->payload_bytes, g->n_tokens, s->info.n_vocab, tok, err);
    return ids_failed(rc, err);
}

/* Codec cmvd: a dictionary of 1..2^24 ids < V, copied into the state. */
int skv_codec_cmv_setup(const skv_encoder_params *p, const skv_model_info *mi, skv_codec_state *st, skv_err *err)
{
    int rc = skv_cmv_dict_copy((uint32_t)mi->n_vocab, p->cm_dict, p->n_cm_dict, &st->dict, err);
    st->n_dict = st->dict ? p->n_cm_dict : 0;
    return rc;
}

int skv_codec_cmv_encode(skv_codec_seg *x)
{
    const skv_codec_state *st = x->st;
    skv_cmv_src v;
    int rc = skv_codec_ctx_digest(x);
    if (!rc && !(rc = skv_cmv_src_of(x->m, &v)))
        rc = skv_cmv_payload(&v, st->dict, st->n_dict, x->tok, x->n, x->buf, x->cap, &x->len);
    if (rc)
        return skv_fail(x->err, rc, "%s", rc == SKV_ERR_NOMEM ? "out of memory" : "cmv coder failed (internal)");
    x->payload = *x->buf;
    return rc;
}

int skv_codec_cmv_decode(const skv_session *s, const seg_view *g, skv_model *m, const skv_restore_params *p,
                         int32_t *tok, const skv_id_notify *nf, skv_err *err)
{
    int with_dict = (skv_codec_flags(s->info.codec) & SKV_CODEC_F_DICT) != 0;
    skv_cmv_src v;
    int rc = skv_cmv_src_of(m, &v);
    if (rc) return skv_fail(err, rc, "cannot fingerprint the model's tokenizer");
    if (with_dict && !(p && p->cm_dict && p->n_cm_dict))
        return skv_fail(err, SKV_ERR_MISMATCH,
                        "codec cmvd: give the dictionary the file was written with (skv_restore_params.cm_dict)");
    rc = skv_cmv_payload_decode(&v, g->payload, (size_t)g->payload_bytes, g->n_tokens, with_dict, p ? p->cm_dict : NULL,
                                p ? p->n_cm_dict : 0, tok, nf, err);
    return ids_failed(rc, err);
}
