/* Library-internal access to an opened .skv session (src/session.c), for modules that
 * decode payloads themselves (src/restore_batch.c). Not part of the public API. */
#ifndef SKV_SESSION_INT_H
#define SKV_SESSION_INT_H

#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"

/* The payload bytes of segment i (valid while s lives). SKV_ERR_INVALID_ARG for a bad index. */
int skv_session_segment_payload(const skv_session *s, uint32_t i, const uint8_t **payload, size_t *bytes);

#endif
