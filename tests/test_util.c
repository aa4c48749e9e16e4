/* skv_big_alloc (src/core/util.h): zeroed, writable over its whole size, freed by
 * skv_big_free, and the huge-page rule: a block is 2 MiB aligned and advised to huge pages
 * as a whole when rounding it up to 2 MiB adds at most half of it, else over the whole
 * 2 MiB pages inside it (the advice read back from /proc/self/smaps: VmFlags "hg"). Under
 * AddressSanitizer the blocks come from calloc: only the first three properties hold. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "test.h"

#if defined(__SANITIZE_ADDRESS__)
#define VIA_CALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VIA_CALLOC 1
#endif
#endif

#define MIB ((size_t)1 << 20)

/* 1 if the mapping holding p has the huge-page advice, 0 if not, -1 if unknown. */
__attribute__((unused)) static int advised_huge(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0, r = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (in && !strncmp(line, "VmFlags:", 8)) {
            r = strstr(line, " hg") != NULL;
            break;
        }
    }
    fclose(f);
    return r;
}

static void blocks_zeroed_writable_freed(void)
{
    static const size_t sizes[] = {0, 1, 4095, 4096, MIB, 1400 * 1024, 1638400, 2 * MIB, 3 * MIB + 5, 36 * MIB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        uint8_t *p = skv_big_alloc(n);
        CHECK_MSG(p != NULL, "skv_big_alloc(%zu) failed", n);
        for (size_t k = 0; k < n; k += 4093) CHECK_MSG(p[k] == 0, "block of %zu not zeroed at %zu", n, k);
        if (n) CHECK(p[n - 1] == 0);
        memset(p, 0xa5, n); /* ASan: writable over exactly n bytes */
        skv_big_free(p);
    }
    skv_big_free(NULL);
}

static void huge_page_rule(void)
{
#ifdef VIA_CALLOC
    SKIP("AddressSanitizer build: the blocks come from calloc");
#else
    if (getenv("SEQKV_HUGEPAGES") && !strcmp(getenv("SEQKV_HUGEPAGES"), "0")) SKIP("SEQKV_HUGEPAGES=0 set");
    /* {size, whole block advised}: rounding up adds <= half -> whole; else only inner pages */
    static const struct {
        size_t n;
        int whole;
    } cases[] = {{MIB, 0}, {1400 * 1024, 1}, {1638400, 1}, {2 * MIB, 1}, {3 * MIB, 1}, {5 * MIB - 4096, 1},
                 {2 * MIB + 4096, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = cases[i].n;
        uint8_t *p = skv_big_alloc(n);
        CHECK(p != NULL);
        int hg = advised_huge(p);
        if (hg < 0) {
            skv_big_free(p);
            SKIP("no VmFlags in /proc/self/smaps");
        }
        if (cases[i].whole) {
            CHECK_MSG((uintptr_t)p % (2 * MIB) == 0, "block of %zu bytes not 2 MiB aligned", n);
            CHECK_MSG(hg == 1, "block of %zu bytes not advised to huge pages", n);
            CHECK_MSG(advised_huge(p + n - 1) == 1, "the end of a block of %zu bytes not advised", n);
        } else if (n >= 2 * MIB) {
            CHECK_MSG(hg == 1, "the inner 2 MiB pages of a block of %zu bytes not advised", n);
            CHECK_MSG(advised_huge(p + n - 1) == 0, "the tail of a block of %zu bytes advised", n);
        } else {
            CHECK_MSG(hg == 0, "a block of %zu bytes advised to huge pages", n);
        }
        skv_big_free(p);
    }
#endif
}

int main(void)
{
    TEST_BEGIN("test_util");
    RUN(blocks_zeroed_writable_freed);
    RUN(huge_page_rule);
    TEST_END();
}
