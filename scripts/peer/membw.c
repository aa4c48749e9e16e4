/* membw: memory read bandwidth of one thread, for the decode bound in bench/results/peer.md.
 *
 *   cc -O2 -mavx2 scripts/peer/membw.c -o membw && ./membw [STREAMS=8]
 *
 * Sums a 1 GiB buffer read as STREAMS interleaved sequential streams (a decode tile reads
 * eight weight rows at once), best of 5 passes, timed in process CPU time: on a shared
 * machine wall-clock bandwidth measures the neighbours. Prints GB per CPU-second. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static __m256i pass(const char *b, size_t per, int streams, __m256i acc)
{
    for (size_t o = 0; o < per; o += 64)
        for (int s = 0; s < streams; s++) {
            const __m256i *p = (const __m256i *)(const void *)(b + (size_t)s * per + o);
            acc = _mm256_add_epi64(acc, _mm256_add_epi64(_mm256_load_si256(p), _mm256_load_si256(p + 1)));
        }
    return acc;
}

int main(int argc, char **argv)
{
    size_t n = (size_t)1 << 30;
    int streams = argc > 1 ? atoi(argv[1]) : 8;
    char *b = aligned_alloc(64, n);
    if (!b || streams < 1 || streams > 64) return 1;
    memset(b, 1, n);
    double best = 1e30;
    __m256i acc = _mm256_setzero_si256();
    for (int r = 0; r < 5; r++) {
        double t0 = cpu_s();
        acc = pass(b, n / (size_t)streams / 64 * 64, streams, acc);
        double t = cpu_s() - t0;
        best = t < best ? t : best;
    }
    long long x[4];
    _mm256_storeu_si256((__m256i *)(void *)x, acc);
    printf("streams %d: %.2f GB per CPU-second (check %lld)\n", streams, (double)n / best / 1e9, x[0] & 1);
    free(b);
    return 0;
}
