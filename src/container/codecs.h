/* The codec table: one row per .skv codec (docs/format.md section 2), the single place
 * that says what a codec stores, how its segments are written, checked, decoded and
 * restored. Every other file asks the table (skv_codec_row_of) instead of naming codec ids.
 *
 * READ ME FIRST -- adding a codec:
 *   1. a new id in seqkv.h (never reuse or renumber one: it is the file's u32 codec field);
 *   2. one row in codecs.c: id, name, help, payload words, flags, and its operations;
 *   3. its own file with the operations (signatures below; codec_kv.c is an example).
 *   Flags decide the shared paths: SKV_CODEC_F_PREFILL restores through decode_ids and one
 *   prefill (restore.c), SKV_CODEC_F_KV through decode_kv and a KV load, SKV_CODEC_F_MODEL
 *   through the model-coded stream; SKV_CODEC_F_DICT / _F_SPEC take skv_encoder_params'
 *   cm_dict / kv_quant, and _F_NEEDS says the one taken must be given (the CLI's checks,
 *   --help and usage errors follow); SKV_CODEC_F_CAL takes kvtc_cal and a restore needs
 *   the session's calibration (skv_session_set_kvtc_cal; the CLI's --kvtc-cal). tests/test_codecs.c checks every row.
 * What must never change: an existing codec's id, name and payload bytes (the golden files,
 * tests/data/golden, pin them). */
#ifndef SKV_CONTAINER_CODECS_H
#define SKV_CONTAINER_CODECS_H

#include <stddef.h>
#include <stdint.h>

#include "container/kvtc.h"
#include "container/session_int.h"
#include "core/util.h"

/* A codec's state in an encoder, made by its setup operation from skv_encoder_params and
 * freed by skv_codec_state_free. Zeroed: no state (the codecs without a setup). */
typedef struct skv_codec_state {
    skv_kvcodec *kvc;   /* quantized-KV codecs: the per-(layer, kind) quantizers */
    int kv_scheme[2];   /* quantized-KV codecs: the K and V schemes (SKV_QUANT_*) */
    uint64_t kv_seed;
    skv_kvp_params kvp; /* codec pred: predictor and steps */
    int want_sur;       /* codec pred: the encoder keeps each token's surprisal */
    int32_t *dict;      /* codecs taking a dictionary: the owned copy */
    size_t n_dict;
    struct skv_kvtc_calib *tc; /* codec kvtc: the calibration (owned) */
    skv_kvtc_params tcp;       /* codec kvtc: predictor, ramp, steps, water level */
} skv_codec_state;

void skv_codec_state_free(skv_codec_state *st);

/* One segment to write: what the encoder hands a codec's encode operation. The codec
 * leaves the payload in *buf (growing it) or in owned (malloc'ed, the encoder frees it). */
typedef struct skv_codec_seg {
    const skv_codec_state *st;
    skv_model *m;
    const skv_model_info *mi;
    skv_ctx *ctx;            /* holds the segment's KV at positions 0..n */
    const int32_t *tok;      /* the segment's ids, [n] */
    const float *sur;        /* [n] each token's surprisal (st->want_sur), else NULL */
    size_t n;
    uint32_t V;              /* vocabulary size */
    skv_rangecoder_enc *rc;  /* codec model: the stream coded while the tokens were appended */
    uint8_t **buf;           /* the encoder's payload buffer (realloc'able) and its size */
    size_t *cap;
    /* out */
    const uint8_t *payload;  /* *buf or owned */
    uint8_t *owned;
    size_t len;
    uint8_t digest[16];      /* XXH3-128 of the KV a restore reproduces */
    skv_err *err;
} skv_codec_seg;

/* One segment to restore into a cleared context. fj: the model's fingerprint thread a
 * prefill restore starts beside its work (restore.c; NULL: none). */
struct skv_fp_job;
typedef struct skv_codec_restore {
    const skv_session *s;
    const seg_view *g;
    skv_model *m;
    skv_ctx *ctx;
    const skv_restore_params *p;
    int32_t *tok;            /* out: the segment's ids */
    skv_restore_stats *st;
    struct skv_fp_job *fj;
    skv_err *err;
} skv_codec_restore;

/* The operations. NULL where the codec has none (its flags say which it needs). */
typedef int (*skv_codec_setup_fn)(const skv_encoder_params *p, const skv_model_info *mi, skv_codec_state *st,
                                  skv_err *err);
typedef int (*skv_codec_encode_fn)(skv_codec_seg *x);
typedef int (*skv_codec_check_fn)(skv_session *s, uint32_t i, skv_err *err);
typedef int (*skv_codec_ids_fn)(const skv_session *s, const seg_view *g, skv_model *m, const skv_restore_params *p,
                                int32_t *tok, const skv_id_notify *nf, skv_err *err);
typedef int (*skv_codec_kv_fn)(const skv_session *s, const seg_view *g, int model_free, float *kv, size_t kv_cap,
                               int32_t *tok, skv_err *err);
typedef int (*skv_codec_restore_fn)(const skv_codec_restore *r);
typedef void (*skv_codec_kv_info_fn)(const seg_view *g, skv_session_kv_info *out);

typedef struct skv_codec_row {
    skv_codec_desc d;              /* the public part (skv_codec_at): id, name, help, flags */
    int pipelined;                 /* decode_ids calls its notify: a restore prefills while it decodes */
    skv_codec_setup_fn setup;      /* encoder: checks kv_quant / cm_dict, builds the state */
    skv_codec_encode_fn encode;    /* encoder: the segment's payload and digest */
    skv_codec_check_fn check;      /* reader: segment i's sub-header (codecs storing KV) */
    skv_codec_ids_fn decode_ids;   /* the ids of a segment (SKV_CODEC_F_IDS) */
    skv_codec_kv_fn decode_kv;     /* ids and KV of a segment (SKV_CODEC_F_KV) */
    skv_codec_restore_fn restore;  /* regenerates a segment into a cleared context */
    skv_codec_kv_info_fn kv_info;  /* refines skv_session_segment_kv_info (NULL: per-vector KV) */
} skv_codec_row;

/* The row of codec id, NULL if unknown. */
const skv_codec_row *skv_codec_row_of(int codec);
/* Its flags (0 for an unknown id). */
unsigned skv_codec_flags(int codec);
/* The names of the codecs having every flag of `flags`, in table order, joined by sep, into
 * buf (cut to cap - 1 bytes); the length the whole list needs. For messages. */
size_t skv_codec_list(char *buf, size_t cap, unsigned flags, const char *sep);

/* ---- operations shared by several rows ---- */
/* A kv_quant spec's comma-separated items, each as (name, value after '=' or NULL) to
 * item (nonzero: refused); SKV_ERR_INVALID_ARG for a refused item or a spec of 128
 * bytes or more. */
typedef int (*skv_codec_spec_item_fn)(void *user, const char *name, const char *val);
int skv_codec_spec_items(const char *spec, skv_codec_spec_item_fn item, void *user);
/* zstd(LEB128 ids) of the segment into *x->buf: codec tokens' payload, the token frame of
 * the KV codecs; *len its bytes. */
int skv_codec_tokens_frame(skv_codec_seg *x, size_t *len);
/* The digest of the context's exact KV (codecs that restore it by running the model). */
int skv_codec_ctx_digest(skv_codec_seg *x);

/* codec_kv.c: the quantized-KV codecs (f16 .. kvq). */
int skv_codec_kv_setup(const skv_encoder_params *p, const skv_model_info *mi, skv_codec_state *st, skv_err *err);
int skv_codec_kv_encode(skv_codec_seg *x);
int skv_codec_kv_check(skv_session *s, uint32_t i, skv_err *err);
int skv_codec_kv_decode(const skv_session *s, const seg_view *g, int model_free, float *kv, size_t kv_cap,
                        int32_t *tok, skv_err *err);

/* kvpred_session.c: codec pred. */
int skv_codec_pred_setup(const skv_encoder_params *p, const skv_model_info *mi, skv_codec_state *st, skv_err *err);
int skv_codec_pred_encode(skv_codec_seg *x);
void skv_codec_pred_kv_info(const seg_view *g, skv_session_kv_info *out);

/* codec_kvtc.c: codec kvtc. */
int skv_codec_kvtc_setup(const skv_encoder_params *p, const skv_model_info *mi, skv_codec_state *st, skv_err *err);
int skv_codec_kvtc_encode(skv_codec_seg *x);
int skv_codec_kvtc_check(skv_session *s, uint32_t i, skv_err *err);
int skv_codec_kvtc_decode(const skv_session *s, const seg_view *g, int model_free, float *kv, size_t kv_cap,
                          int32_t *tok, skv_err *err);
void skv_codec_kvtc_kv_info(const seg_view *g, skv_session_kv_info *out);
/* "[none|tok][,ramp][,step=S][,kstep=S][,vstep=S][,theta=X]" -> p; SKV_ERR_INVALID_ARG. */
int skv_codec_kvtc_spec(const char *spec, skv_kvtc_params *p);
/* skv_session_kvtc_cal_id and skv_session_set_kvtc_cal, their messages in err. */
int skv_codec_kvtc_cal_of(const skv_session *s, uint64_t *id, skv_err *err);
int skv_codec_kvtc_attach(skv_session *s, const void *image, size_t len, skv_err *err);

/* codec_ids.c: the codecs storing the ids alone (tokens, cm, cmv, cmvd). */
int skv_codec_tokens_encode(skv_codec_seg *x);
int skv_codec_tokens_decode(const skv_session *s, const seg_view *g, skv_model *m, const skv_restore_params *p,
                            int32_t *tok, const skv_id_notify *nf, skv_err *err);
int skv_codec_cm_encode(skv_codec_seg *x);
int skv_codec_cm_decode(const skv_session *s, const seg_view *g, skv_model *m, const skv_restore_params *p,
                        int32_t *tok, const skv_id_notify *nf, skv_err *err);
int skv_codec_cmv_setup(const skv_encoder_params *p, const skv_model_info *mi, skv_codec_state *st, skv_err *err);
int skv_codec_cmv_encode(skv_codec_seg *x);
int skv_codec_cmv_decode(const skv_session *s, const seg_view *g, skv_model *m, const skv_restore_params *p,
                         int32_t *tok, const skv_id_notify *nf, skv_err *err);

/* restore.c: the three ways a segment is regenerated. */
int skv_codec_restore_prefill(const skv_codec_restore *r);
int skv_codec_restore_kv(const skv_codec_restore *r);
int skv_codec_restore_model(const skv_codec_restore *r);
/* encoder.c: codec model's segment end (the stream was coded during the appends). */
int skv_codec_model_encode(skv_codec_seg *x);

#endif
