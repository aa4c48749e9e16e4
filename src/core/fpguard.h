/* Determinism guard (docs/determinism.md, "Build guard").
 *
 * Every translation unit of the library includes this header (right after its own
 * first #include), because the numbers they compute feed the entropy coder or the
 * KV cache: a file written on one machine must decode on another, so the compiler
 * may not reorder, fuse or "simplify" floating-point arithmetic.
 *
 * READ ME FIRST
 *  - -ffast-math and -Ofast (which implies it), -ffinite-math-only,
 *    -funsafe-math-optimizations and its parts stop the build here: the predefined
 *    macros below are how GCC and Clang announce them.
 *  - FP contraction (a*b+c fused into one fma) has no predefined macro. The Makefile
 *    appends -ffp-contract=off after the user's CFLAGS, so it always wins; for Clang
 *    the pragma below pins it off as well in builds that bypass the Makefile. (GCC
 *    ignores the pragma and warns about it, hence only for Clang.)
 *  - -fassociative-math or -freciprocal-math given alone announce nothing to GCC's
 *    preprocessor or Clang's; the Makefile refuses those flags by name. */
#ifndef SKV_CORE_FPGUARD_H
#define SKV_CORE_FPGUARD_H

#if defined(__FAST_MATH__)
#error "seqkv: -ffast-math / -Ofast break the determinism contract (docs/determinism.md): build without them"
#elif defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "seqkv: -ffinite-math-only breaks the determinism contract (docs/determinism.md): build without it"
#elif defined(__ASSOCIATIVE_MATH__) || defined(__RECIPROCAL_MATH__) || defined(__NO_SIGNED_ZEROS__)
#error "seqkv: -funsafe-math-optimizations (or -fassociative-math, -freciprocal-math, -fno-signed-zeros) breaks the determinism contract (docs/determinism.md): build without it"
#endif

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#endif
