/* The library's log (skv_set_log in seqkv.h): things a caller may want to know that are
 * not errors. Never used for errors, which are statuses plus per-handle messages. */
#ifndef SKV_LOG_H
#define SKV_LOG_H

#include "seqkv.h"

/* Formats one line (at most 1 KiB, truncated beyond) and hands it to the callback set by
 * skv_set_log; does nothing (not even the formatting) when none is set. */
void skv_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
