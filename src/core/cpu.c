/* CPU feature detection, once per process (cpu.h). */
#include "core/cpu.h"
#include "core/fpguard.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#define SKV_CPU_X86 1
#else
#define SKV_CPU_X86 0
#endif

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static uint32_t g_features;

#if SKV_CPU_X86
/* __builtin_cpu_supports checks that the OS saves the AVX state (XGETBV);
 * F16C comes from CPUID leaf 1, ECX bit 29 (clang 14's builtin lacks it),
 * and is only usable where AVX is. */
static uint32_t detect(void)
{
    unsigned a, b, c, d;
    uint32_t f = 0;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx")) return 0;
    if (__builtin_cpu_supports("avx2")) f |= SKV_CPU_AVX2;
    if (__builtin_cpu_supports("fma")) f |= SKV_CPU_FMA;
    if (__builtin_cpu_supports("avx512f")) f |= SKV_CPU_AVX512F;
    if (__builtin_cpu_supports("avx512bw")) f |= SKV_CPU_AVX512BW;
    if (__builtin_cpu_supports("avx512vl")) f |= SKV_CPU_AVX512VL;
    if (__builtin_cpu_supports("avx512vnni")) f |= SKV_CPU_AVX512VNNI;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1)) f |= SKV_CPU_F16C;
    return f;
}
#else
static uint32_t detect(void) { return 0; }
#endif

/* The cap SEQKV_CPU asks for (all bits: no cap). */
static uint32_t env_cap(void)
{
    const char *s = getenv("SEQKV_CPU");
    if (!s) return UINT32_MAX;
    if (!strcmp(s, "scalar")) return 0;
    if (!strcmp(s, "avx2")) return SKV_CPU_AVX2_SET;
    return UINT32_MAX;
}

static void init_features(void) { g_features = detect() & env_cap(); }

uint32_t skv_cpu_features(void)
{
    pthread_once(&g_once, init_features);
    return g_features;
}

int skv_cpu_has(uint32_t need) { return (skv_cpu_features() & need) == need; }

const char *skv_cpu_level(void)
{
    if (skv_cpu_has(SKV_CPU_AVX2_SET | SKV_CPU_AVX512F)) return "avx512";
    if (skv_cpu_has(SKV_CPU_AVX2_SET)) return "avx2";
    return "scalar";
}
