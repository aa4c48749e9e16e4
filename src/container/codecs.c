/* The codec table (codecs.h says how to add a row). Listing order: the lossless codecs,
 * smallest-to-restore-slowly first, then the ones that store the KV. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include "core/fpguard.h"

#include "container/codecs.h"

#define F_IDS SKV_CODEC_F_IDS
#define F_KV SKV_CODEC_F_KV
#define F_PREFILL SKV_CODEC_F_PREFILL
#define F_MODEL SKV_CODEC_F_MODEL
#define F_DICT SKV_CODEC_F_DICT
#define F_SPEC SKV_CODEC_F_SPEC
#define F_NEEDS SKV_CODEC_F_NEEDS
#define F_CAL SKV_CODEC_F_CAL

/* The rows every quantized-KV codec of a fixed scheme shares; only the id and words differ. */
#define KV_ROW(id_, name_, help_, words_)                                                                     \
    {.d = {id_, name_, help_, words_, F_KV}, .setup = skv_codec_kv_setup, .encode = skv_codec_kv_encode,     \
     .check = skv_codec_kv_check, .decode_kv = skv_codec_kv_decode, .restore = skv_codec_restore_kv}

static const skv_codec_row rows[] = {
    {.d = {SKV_CODEC_MODEL, "model", "the ids arithmetic-coded under the model (smallest; restored token by token)",
           "arithmetic-coded under the model", F_MODEL},
     .encode = skv_codec_model_encode, .restore = skv_codec_restore_model},
    {.d = {SKV_CODEC_TOKENS, "tokens", "raw token ids, zstd-compressed (restored by one parallel prefill)",
           "zstd varints", F_IDS | F_PREFILL},
     .encode = skv_codec_tokens_encode, .decode_ids = skv_codec_tokens_decode, .restore = skv_codec_restore_prefill},
    {.d = {SKV_CODEC_CM, "cm", "the ids under a cheap context-mixing model of the ids (smaller than tokens; one prefill)",
           "context-mixing coded ids", F_IDS | F_PREFILL},
     .encode = skv_codec_cm_encode, .decode_ids = skv_codec_cm_decode, .restore = skv_codec_restore_prefill},
    {.d = {SKV_CODEC_CMV, "cmv",
           "cm with the vocabulary's side information (within a few % of cm: either may be smaller)",
           "context-mixing coded ids, vocabulary side information", F_IDS | F_PREFILL},
     .pipelined = 1, .encode = skv_codec_cmv_encode, .decode_ids = skv_codec_cmv_decode,
     .restore = skv_codec_restore_prefill},
    {.d = {SKV_CODEC_CMVD, "cmvd", "cmv primed by a dictionary (--cm-dict; the restore needs the same one)",
           "context-mixing coded ids, primed by a dictionary", F_IDS | F_PREFILL | F_DICT | F_NEEDS},
     .pipelined = 1, .setup = skv_codec_cmv_setup, .encode = skv_codec_cmv_encode,
     .decode_ids = skv_codec_cmv_decode, .restore = skv_codec_restore_prefill},
    KV_ROW(SKV_CODEC_F16, "f16", "the tokens plus every position's KV as binary16 (restored without the model)",
           "zstd varints + binary16 KV"),
    KV_ROW(SKV_CODEC_Q8, "q8", "the tokens plus the KV as q8_0 per vector (lossy; no model run)",
           "zstd varints + q8_0 KV"),
    KV_ROW(SKV_CODEC_Q4, "q4", "the tokens plus the KV as q4_0 per vector (lossy; no model run)",
           "zstd varints + q4_0 KV"),
    KV_ROW(SKV_CODEC_TQ2, "tq2", "the tokens plus the KV as TurboQuant 2 bits (lossy; no model run)",
           "zstd varints + TurboQuant KV"),
    KV_ROW(SKV_CODEC_TQ3, "tq3", "the tokens plus the KV as TurboQuant 3 bits (lossy; no model run)",
           "zstd varints + TurboQuant KV"),
    KV_ROW(SKV_CODEC_TQ4, "tq4", "the tokens plus the KV as TurboQuant 4 bits (lossy; no model run)",
           "zstd varints + TurboQuant KV"),
    {.d = {SKV_CODEC_KVQ, "kvq", "the same with the schemes of --kv-quant (k=SCHEME,v=SCHEME[,seed=S])",
           "zstd varints + quantized KV", F_KV | F_SPEC | F_NEEDS},
     .setup = skv_codec_kv_setup, .encode = skv_codec_kv_encode, .check = skv_codec_kv_check,
     .decode_kv = skv_codec_kv_decode, .restore = skv_codec_restore_kv},
    {.d = {SKV_CODEC_PRED, "pred", "the tokens plus the KV coded predictively across positions (lossy; --kv-quant)",
           "zstd varints + predictively coded KV", F_KV | F_SPEC},
     .setup = skv_codec_pred_setup, .encode = skv_codec_pred_encode, .check = skv_session_check_pred,
     .decode_kv = skv_session_decode_pred, .restore = skv_codec_restore_kv, .kv_info = skv_codec_pred_kv_info},
    {.d = {SKV_CODEC_KVTC, "kvtc",
           "the tokens plus the KV transform-coded with a calibration (lossy; --kvtc-cal, which the restore needs too)",
           "zstd varints + transform-coded KV", F_KV | F_SPEC | F_CAL},
     .setup = skv_codec_kvtc_setup, .encode = skv_codec_kvtc_encode, .check = skv_codec_kvtc_check,
     .decode_kv = skv_codec_kvtc_decode, .restore = skv_codec_restore_kv, .kv_info = skv_codec_kvtc_kv_info},
};
#define N_ROWS (sizeof rows / sizeof rows[0])

const skv_codec_row *skv_codec_row_of(int codec)
{
    for (size_t i = 0; i < N_ROWS; i++)
        if (rows[i].d.id == codec) return &rows[i];
    return NULL;
}

unsigned skv_codec_flags(int codec)
{
    const skv_codec_row *r = skv_codec_row_of(codec);
    return r ? r->d.flags : 0;
}

const skv_codec_desc *skv_codec_at(size_t i) { return i < N_ROWS ? &rows[i].d : NULL; }

const skv_codec_desc *skv_codec_desc_of(int codec)
{
    const skv_codec_row *r = skv_codec_row_of(codec);
    return r ? &r->d : NULL;
}

const char *skv_codec_name(int codec)
{
    const skv_codec_row *r = skv_codec_row_of(codec);
    return r ? r->d.name : NULL;
}

int skv_codec_parse(const char *name)
{
    for (size_t i = 0; name && i < N_ROWS; i++)
        if (!strcmp(name, rows[i].d.name)) return rows[i].d.id;
    return SKV_ERR_INVALID_ARG;
}

size_t skv_codec_list(char *buf, size_t cap, unsigned flags, const char *sep)
{
    size_t len = 0;
    if (cap) buf[0] = 0;
    for (size_t i = 0; i < N_ROWS; i++) {
        if ((rows[i].d.flags & flags) != flags) continue;
        int k = snprintf(buf + (len < cap ? len : cap), len < cap ? cap - len : 0, "%s%s", len ? sep : "", rows[i].d.name);
        len += k > 0 ? (size_t)k : 0;
    }
    return len;
}

int skv_codec_spec_items(const char *spec, skv_codec_spec_item_fn item, void *user)
{
    char buf[128];
    size_t len = strlen(spec);
    if (len >= sizeof buf) return SKV_ERR_INVALID_ARG;
    memcpy(buf, spec, len + 1);
    for (char *save = NULL, *it = strtok_r(buf, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(it, '=');
        if (eq) *eq = 0;
        if (item(user, it, eq ? eq + 1 : NULL)) return SKV_ERR_INVALID_ARG;
    }
    return SKV_OK;
}

int skv_codec_is_kv(int codec) { return (skv_codec_flags(codec) & F_KV) != 0; }

void skv_codec_state_free(skv_codec_state *st)
{
    skv_kvcodec_free(st->kvc);
    free(st->dict);
    skv_kvtc_calib_free(st->tc);
    memset(st, 0, sizeof *st);
}

static int seg_fail(skv_codec_seg *x, int rc, const char *msg) { return skv_fail(x->err, rc, "%s", msg); }

static int put_varints(uint8_t *dst, const int32_t *t, size_t n, size_t *len)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)t[i];
        while (v >= 0x80) {
            dst[k++] = (uint8_t)(v | 0x80);
            v >>= 7;
        }
        dst[k++] = (uint8_t)v;
    }
    *len = k;
    return SKV_OK;
}

int skv_codec_tokens_frame(skv_codec_seg *x, size_t *len)
{
    uint8_t *raw = malloc(x->n * 5);
    size_t rlen = 0, bound;
    if (!raw) return seg_fail(x, SKV_ERR_NOMEM, "out of memory");
    put_varints(raw, x->tok, x->n, &rlen);
    bound = ZSTD_compressBound(rlen);
    if (bound > *x->cap) {
        uint8_t *nb = realloc(*x->buf, bound);
        if (!nb) {
            free(raw);
            return seg_fail(x, SKV_ERR_NOMEM, "out of memory");
        }
        *x->buf = nb;
        *x->cap = bound;
    }
    *len = ZSTD_compress(*x->buf, *x->cap, raw, rlen, ZSTD_LEVEL);
    free(raw);
    if (ZSTD_isError(*len)) return seg_fail(x, SKV_ERR_INTERNAL, "zstd compression failed");
    return SKV_OK;
}

int skv_codec_ctx_digest(skv_codec_seg *x)
{
    int rc = skv_ctx_kv_digest(x->ctx, (int)x->n, x->digest);
    return rc ? seg_fail(x, rc, "KV digest failed") : SKV_OK;
}
