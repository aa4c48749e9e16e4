/* cli_kvtccal.h - --kvtc-cal FILE|DIR for compress and restore (codec kvtc): the
 * calibration file (kvtc-<id>.cal, `seqkv kvtc-calib`, docs/kvtc.md), or a directory
 * holding it, where a restore finds it by the id the session names. */
#ifndef SKV_CLI_KVTCCAL_H
#define SKV_CLI_KVTCCAL_H

#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"

/* The bytes of the calibration at path: the file itself, or for a directory
 * path/kvtc-<want>.cal (want 0: a directory is refused). NULL after a message. */
uint8_t *cli_kvtc_cal_read(const char *path, uint64_t want, size_t *len);
/* Gives session s (read from in) the calibration at path; 0, or -1 after a message that
 * names the file the session needs. */
int cli_kvtc_cal_attach(skv_session *s, const char *in, const char *path);

#endif
