/* cm_snap.h - a snapshot of a cm model's whole state (docs/coder.md 4.8).
 *
 * A model primed by a dictionary (codec cmvd) costs a walk of every dictionary id to build
 * (~10 us per id: over a second for 10^5 ids); its snapshot is read back in a few
 * milliseconds. The bytes hold every table as runs of elements that differ from a freshly
 * reset model, the per-stream scalars, and the checks a reader needs: the model's kind
 * (vocabulary check, n_vocab, slot bits), the dictionary it was primed by (id, length) and
 * an XXH3-64 of every byte. A reader treats the bytes as hostile: anything inconsistent is
 * SKV_ERR_FORMAT, another model or dictionary SKV_ERR_MISMATCH, and every loaded element
 * is checked (skv_cm_valid) so that no table index can leave its table.
 *
 *   "SKVC" u32 version 1 | u32 n_vocab | u32 slot_bits | u64 model check (0: codec cm)
 *   | u64 dictionary id | u32 dictionary ids | u32 sections | u32 scalars[14]
 *   | per section: u32 elements | u32 element bytes | u32 runs
 *                  | per run: u32 gap (elements as reset) | u32 len | len elements (LE)
 *   | u64 XXH3-64 of every byte before it
 * Version 2 (SKV_CM_SNAP_RAW) keeps the same header fields, then per section u32 elements |
 * u32 element bytes | u64 XXH3-64 of its elements, a u64 XXH3-64 of the header, and every
 * section's elements as they are: read straight into the tables by two threads.
 */
#ifndef SKV_CM_SNAP_H
#define SKV_CM_SNAP_H

#include <stddef.h>
#include <stdint.h>

#include "coder/cm.h"

#define SKV_CM_SNAP_VERSION 1 /* runs against the reset values (the store's records) */
#define SKV_CM_SNAP_RAW 2     /* the elements as they are, a checksum per section (the CLI's cache) */

/* Who the snapshot is for: checked by the reader, written by the writer. */
typedef struct skv_cm_snap_id {
    uint64_t vocab_check; /* skv_cm_model_check (the vocabulary and the model revision), 0 for codec cm */
    uint64_t dict_id;     /* the dictionary the model was primed by */
    uint32_t dict_n;
} skv_cm_snap_id;

/* Bytes that always hold cm's snapshot. */
size_t skv_cm_snap_bound(skv_cm *cm);
/* cm's state into dst[0..cap) (*len bytes) as version 1. SKV_ERR_RANGE (cap too small),
 * SKV_ERR_NOMEM. _version: as version 1 or 2 (SKV_CM_SNAP_RAW: larger for a small
 * dictionary, ~36 MiB for any cmvd model, but read at memory speed by two threads). */
int skv_cm_snap_write(skv_cm *cm, const skv_cm_snap_id *id, uint8_t *dst, size_t cap, size_t *len);
int skv_cm_snap_write_version(skv_cm *cm, const skv_cm_snap_id *id, uint32_t version, uint8_t *dst, size_t cap,
                              size_t *len);
/* cm (created for the same vocabulary and slot bits) takes the state of src[0..len).
 * SKV_ERR_FORMAT (damaged, truncated, inconsistent), SKV_ERR_MISMATCH (a snapshot of
 * another model kind or dictionary than id), SKV_ERR_UNSUPPORTED (another version),
 * SKV_ERR_NOMEM. On error cm is left reset. */
int skv_cm_snap_read(skv_cm *cm, const skv_cm_snap_id *id, const uint8_t *src, size_t len);
/* The same from the open file fd, at its current offset, whose snapshot is size bytes
 * (the caller bounds size: skv_cm_snap_bound): read through a window of 256 KiB (the
 * parse and the checksum read L2, and no buffer of the snapshot's size is made: 14-25 MB
 * for a cmvd dictionary). The checksum is verified at the end, before which the model may
 * hold part of the file: any error leaves cm reset, and a file whose checksum fails is
 * SKV_ERR_FORMAT whatever its header said. A read error or a file shorter than size is
 * SKV_ERR_FORMAT too (the caller reports the OS error it sees). _window: the same with
 * a window of `window` bytes (>= 64; the tests make runs straddle refills). */
int skv_cm_snap_read_fd(skv_cm *cm, const skv_cm_snap_id *id, int fd, uint64_t size);
int skv_cm_snap_read_fd_window(skv_cm *cm, const skv_cm_snap_id *id, int fd, uint64_t size, size_t window);
/* The whole file fd (size bytes, a version 2 snapshot) as cm's state, its slot tables,
 * mpos and APM mapped read-only where they lie in the file (cm.h skv_cm_map_tables; cm
 * comes from skv_cm_create_blank_mapped), the other (small) tables read into memory; every element is
 * checked as by skv_cm_snap_read_fd, the checksums too, before it returns. Errors as
 * skv_cm_snap_read_fd's, and SKV_ERR_UNSUPPORTED (the file cannot be mapped, is not
 * version 2, or the host is not a little-endian Linux): read it with skv_cm_snap_read_fd
 * into a blank model then. On any error cm is unusable: free it. */
int skv_cm_snap_map_fd(skv_cm *cm, const skv_cm_snap_id *id, int fd, uint64_t size);

#endif
