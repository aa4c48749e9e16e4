/* Deterministic double-precision exp, log and sin/cos for the RoPE tables.
 * Built from IEEE-754 double +, -, * and / only (no libm, no fused operations), so every
 * platform that evaluates doubles in double precision (FLT_EVAL_METHOD == 0: x86-64 SSE2,
 * AArch64, ...) computes the very same bits. Accuracy is a few ulp of a double, far below
 * the float rounding the engine applies afterwards. */
#ifndef SKV_DETMATH_H
#define SKV_DETMATH_H

double skv_det_exp(double x);             /* x clamped to [-700, 700]; NaN returns NaN */
double skv_det_log(double x);             /* x > 0, finite */
double skv_det_pow(double b, double y);   /* b > 0 */
/* |a| < 2^30; any other a (a hostile model's RoPE angle, NaN) gives sin 0, cos 1: defined,
 * the same everywhere, never undefined behaviour. */
void skv_det_sincos(double a, double *s, double *c);

#endif
