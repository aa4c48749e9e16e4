/* Library-internal access to an opened .skv session (src/session.c) for modules that
 * drive the decoding of model-coded segments themselves (src/restore_batch.c decodes
 * many segments in lockstep). The stream format lives in session.c only: these are its
 * steps, exactly as skv_session_restore_segment uses them. Not part of the public API. */
#ifndef SKV_SESSION_INT_H
#define SKV_SESSION_INT_H

#include <stddef.h>
#include <stdint.h>

#include "coder/rangecoder.h"
#include "seqkv.h"

/* SKV_OK if m is the model s was written with (fingerprint and vocabulary), else
 * SKV_ERR_MISMATCH naming both. */
int skv_session_check_model(const skv_session *s, skv_model *m, char *err, size_t cap);
/* Opens segment i's model-coded stream (i < n_segments) and reads its first token. */
int skv_session_stream_open(const skv_session *s, uint32_t i, skv_rangecoder_dec *d, int32_t *tok0, char *err,
                            size_t cap);
/* Decodes the next token from the logits that predict it (freq, cum: n_vocab and
 * n_vocab + 1 scratch entries). */
int skv_session_stream_next(const skv_session *s, skv_rangecoder_dec *d, const float *logits, uint32_t *freq,
                            uint32_t *cum, int32_t *tok, char *err, size_t cap);
/* Compares ctx's first n_tokens positions of segment i with the stored digest. */
int skv_session_verify_segment(const skv_session *s, uint32_t i, const skv_ctx *ctx, char *err, size_t cap);

#endif
