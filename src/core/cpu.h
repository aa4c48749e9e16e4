/* CPU features, detected once per process (pthread_once), never re-read.
 *
 * Every SIMD path asks for exactly the features its instructions need
 * (skv_cpu_has(SKV_CPU_AVX2 | SKV_CPU_F16C) for a kernel that runs AVX2 and
 * F16C instructions), so a CPU with AVX2 but no F16C, or a build for another
 * architecture, falls back to the scalar references, which compute the same
 * bits.
 *
 * The environment variable SEQKV_CPU caps what is reported, so tests and
 * benchmarks can compare paths on any machine:
 *   SEQKV_CPU=scalar   no SIMD feature at all (every kernel runs its _ref twin)
 *   SEQKV_CPU=avx2     at most AVX2 + FMA + F16C (AVX-512 hidden)
 *   unset or "native"  everything the CPU and the OS support
 * Any other value is treated as "native".  It is read once, at the first call. */
#ifndef SKV_CPU_H
#define SKV_CPU_H

#include <stdint.h>

enum skv_cpu_feature {
    SKV_CPU_AVX2 = 1u << 0,
    SKV_CPU_FMA = 1u << 1,
    SKV_CPU_F16C = 1u << 2,
    SKV_CPU_AVX512F = 1u << 3,
    SKV_CPU_AVX512BW = 1u << 4,
    SKV_CPU_AVX512VL = 1u << 5,
    SKV_CPU_AVX512VNNI = 1u << 6,
};

/* The features the AVX2 kernel files are compiled for (-mavx2 -mfma -mf16c). */
#define SKV_CPU_AVX2_SET ((uint32_t)(SKV_CPU_AVX2 | SKV_CPU_FMA | SKV_CPU_F16C))
/* The features the AVX-512 kernel files are compiled for (*_avx512.c: the AVX2 set
 * plus -mavx512f -mavx512bw -mavx512vl -mavx512vnni). */
#define SKV_CPU_AVX512_SET \
    ((uint32_t)(SKV_CPU_AVX2_SET | SKV_CPU_AVX512F | SKV_CPU_AVX512BW | SKV_CPU_AVX512VL | SKV_CPU_AVX512VNNI))

/* The detected feature bits, capped by SEQKV_CPU.  Thread-safe. */
uint32_t skv_cpu_features(void);

/* 1 when every bit of need is present (need == 0: always 1). */
int skv_cpu_has(uint32_t need);

/* "scalar", "avx2" or "avx512": the widest level skv_cpu_features() allows. */
const char *skv_cpu_level(void);

#endif
