/* Quantized weights repacked at model load for the integer dot kernels (issue 15).
 *
 * READ ME FIRST
 * - A GGUF stores a q8_0 / q4_0 / q4_1 / q5_0 / q5_1 / iq4_nl / q2_k / q3_k / q4_k / q5_k /
 *   q6_k / iq4_xs matrix row after row.  Decode (one token) then reads eight rows as eight separate
 *   streams and must reduce each row's products horizontally.  The packed layout
 *   interleaves groups of 16 rows so that one 64-byte load holds four bytes of every
 *   row of the group (row i at byte 4i), and a 32-byte half of it the same four bytes
 *   of eight rows: the kernel puts rows in lanes and broadcasts the activation's
 *   matching four bytes, so each int32 lane ends a block holding exactly its row's
 *   integer sum (no horizontal reduction) and runs the reference chain of dot.c.
 * - Per block b of a group (16 rows, blocks at 16 * skv_pack_row_bytes / nb):
 *     q4_0 (288 = 16 x 18):  d[16] f16 | qs: 4 chunks of 64
 *     q4_k (2368 = 16 x 148): d[16] | dmin[16] | sc[8][16] u8 | mn pairs [4][16][2] u8
 *                             | qs: 32 chunks of 64
 *     q5_k (2880 = 16 x 180): q4_k's fields with qh: 8 chunks of 64 before qs (at 320)
 *     q4_1, q5_0, q5_1, iq4_nl, q8_0: q4_0's scheme with their m and qh, q8_0's qs in
 *                             8 chunks (dot_pack32_x86.h)
 *     q2_k, q3_k: scales by [group][row] (q3_k's unpacked), qs and hmask chunks
 *                             (dot_pack2_x86.h)
 *     iq4_xs (2208 = 16 x 138): d[16] | ls[8][16] u8 (the runs' 6-bit scales + 32,
 *                             unpacked from scales_h / scales_l) | qs: 32 chunks of 64
 *     q6_k (3360 = 16 x 210): d[16] | scales[16][16] s8 | ql: 32 chunks | qh: 16 chunks
 *   where chunk u holds bytes 4u..4u+3 of every row's field (row i at 4i), d[i]
 *   is row i's binary16 scale, sc[r][i] / mn[..][i] the 6-bit scales and mins of
 *   q4_k / q5_k run r (unpacked from the 12 bytes: with iq4_xs's and q3_k's 6-bit
 *   scales the only changes of values' encoding, hence the 4, 2 and 4 extra bytes
 *   per row and block) and q6_k's int8 scales
 *   sit as [group][row].  The nibbles and bits inside a 4-byte chunk are the
 *   file's, unchanged.
 * - The packed copy holds exactly the file's values, so every kernel on it gives
 *   the bits of dot.c's reference on the file's rows: decode (T = 1, AVX2 and
 *   AVX-512 levels) runs the packed kernels; other batches and the scalar level
 *   unpack 8 rows at a time back to the file layout and run the level's gemm.
 *   The model fingerprint is still taken from the file's bytes (engine/model_fp.c).
 * - f16 and bf16 (for the float kernels of types_kernels.h, not the integer dot): each
 *   16-row group is two groups of 8 rows, each 8 rows x 2K bytes of 16-byte chunks:
 *   chunk c (values 8c .. 8c + 7) at 128 c, row i's 8 values at 128 c + 16 i, the file's
 *   bytes.  Decode then reads one stream instead of 8 rows' (2048 x 32768 f16 on the AMD
 *   EPYC, 1 thread: 26-31 GB/s against 22-24); the kernels are
 *   skv_type_matmul_packed's (types.h), not skv_gemm_packed.  Packed only when K is a
 *   multiple of 8.
 * - Only whole groups are packed: a matrix whose row count is not a multiple of
 *   16, or whose 8 file rows exceed SKV_PACK_BUF bytes, keeps the file layout. */
#ifndef SKV_REPACK_H
#define SKV_REPACK_H

#include <stddef.h>
#include <stdint.h>

#define SKV_PACK_ROWS 16u               /* rows per interleaved group */
#define SKV_PACK_BUF ((size_t)64 << 10) /* bytes of the 8 file rows a fallback call unpacks on its stack */

/* Bytes per row of the packed layout of type for rows of K values (a group of 16
 * rows takes 16 times that); 0 when the type has none or K does not fit. */
size_t skv_pack_row_bytes(uint32_t type, size_t K);

/* Packs n_rows rows (a multiple of 16; row r at src + r * row_bytes, the file
 * layout) into dst, n_rows * skv_pack_row_bytes(type, K) bytes. */
void skv_pack_rows(uint32_t type, const void *src, size_t row_bytes, size_t K, size_t n_rows, void *dst);

/* Rows r0 .. r0 + n - 1 (r0 + n <= 16) of the packed group at P back in the file
 * layout: row i at dst + i * (the file's row bytes). */
void skv_unpack_group_rows(uint32_t type, const void *P, size_t K, size_t r0, size_t n, void *dst);

/* The gemm of dot.h (y[t*ldy + r], r < n_rows, t < T) on packed rows: W the first
 * group, row_bytes the packed row bytes, n_rows a multiple of 16, qa quantized by
 * skv_act_quantize at the same level for the type.  The reference's bits at any level. */
void skv_gemm_packed(int level, uint32_t type, float *y, size_t ldy, const void *W, size_t row_bytes, const void *qa,
                     size_t qa_stride, size_t K, size_t T, size_t n_rows);

#endif
