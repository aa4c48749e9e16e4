/* Codec cm (docs/format.md section 2.4): a segment's ids range-coded under the cheap
 * context-mixing model of cm.c, as a payload: the buffer grown to the coder's bound, and
 * a decode that tells a corrupt stream from a lack of memory. */
#include <stdint.h>
#include <stdlib.h>
#include "core/fpguard.h"

#include "coder/cm.h"
#include "coder/cmvcodec.h"
#include "core/util.h"

int skv_cm_payload(const int32_t *tok, size_t n, uint32_t V, uint8_t **buf, size_t *cap, size_t *len)
{
    size_t need = skv_cm_bound(n, V);
    if (need == SIZE_MAX) return SKV_ERR_NOMEM;
    if (need > *cap) {
        uint8_t *nb = realloc(*buf, need);
        if (!nb) return SKV_ERR_NOMEM;
        *buf = nb;
        *cap = need;
    }
    int rc = skv_cm_encode_tokens(tok, n, V, *buf, *cap, len);
    return rc == SKV_ERR_RANGE ? SKV_ERR_INTERNAL : rc;
}

int skv_cm_payload_decode(const uint8_t *p, size_t len, size_t n, uint32_t V, int32_t *tok, skv_err *err)
{
    int rc = skv_cm_decode_tokens(p, len, n, V, tok);
    if (rc == SKV_ERR_NOMEM) return skv_fail(err, rc, "out of memory for the context-mixing model");
    if (rc) return skv_fail(err, SKV_ERR_FORMAT, "corrupt context-mixing (cm) token stream");
    return SKV_OK;
}
