/* The byte planes of the store's KV blobs (src/core/shuffle.c): the SIMD path gives the
 * scalar reference's bytes, both ways, for every length around its 16-value blocks, and
 * the inverse undoes the forward. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/shuffle.h"
#include "test.h"

static void simd_is_the_reference(void)
{
    enum { MAX = 1000 };
    static uint8_t in[4 * MAX], a[4 * MAX], b[4 * MAX], back[4 * MAX];
    uint32_t x = 0x9E3779B9u;
    for (size_t i = 0; i < sizeof in; i++) x = x * 1664525u + 1013904223u, in[i] = (uint8_t)(x >> 24);
    for (size_t n = 0; n <= MAX && !test_cur_failed; n += n < 70 ? 1 : 37) {
        for (int inv = 0; inv < 2; inv++) {
            memset(a, 0xAA, sizeof a), memset(b, 0x55, sizeof b);
            skv_shuffle4(in, a, n, inv);
            skv_shuffle4_ref(in, b, n, inv);
            CHECK_MSG(!memcmp(a, b, 4 * n), "n %zu inverse %d: the SIMD bytes differ", n, inv);
        }
        skv_shuffle4(in, a, n, 0);
        skv_shuffle4(a, back, n, 1);
        CHECK_MSG(!memcmp(back, in, 4 * n), "n %zu: the inverse does not undo", n);
    }
}

int main(void)
{
    TEST_BEGIN("test_shuffle");
    RUN(simd_is_the_reference);
    TEST_END();
}
