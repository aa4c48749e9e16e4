/* Minimal test harness shared by every tests/test_*.c binary.
 *
 * Protocol (read by tests/run.sh): one line per test case,
 *   PASS <binary>:<case>
 *   FAIL <binary>:<case>: <file>:<line>: <what>
 *   SKIP <binary>:<case>: <reason>
 * A case fails at its first failed CHECK (the case function returns).
 * The binary exits 0 when no case failed. */
#ifndef SKV_TEST_H
#define SKV_TEST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* TEST_SANITIZED: 1 when built with AddressSanitizer (make san, gcc or clang), where the
 * engine runs ~15x slower: a test may lighten its costliest loops (and say how). */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_SANITIZED 1
#endif
#endif
#ifndef TEST_SANITIZED
#define TEST_SANITIZED 0
#endif

static const char *test_binary_name = "test";
static int test_cur_failed, test_cur_skipped;
static char test_cur_msg[512];
static int test_n_pass, test_n_fail, test_n_skip;

__attribute__((format(printf, 3, 4)))
static void test_fail_at(const char *file, int line, const char *fmt, ...)
{
    if (test_cur_failed) return;
    va_list ap;
    int n = snprintf(test_cur_msg, sizeof test_cur_msg, "%s:%d: ", file, line);
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof test_cur_msg)
        vsnprintf(test_cur_msg + n, sizeof test_cur_msg - (size_t)n, fmt, ap);
    va_end(ap);
    test_cur_failed = 1;
}

/* SEQKV_REQUIRE_SHARED=1 (set by .ci/run) forbids skipping for missing shared assets:
 * a SKIP whose reason names them ("../shared", "stories260K" or "SEQKV_SHARED") is then
 * a FAIL, so CI cannot pass by silently running less. Other skips (no AVX2, no `bible`)
 * stay skips. */
__attribute__((unused)) static int test_shared_required(void)
{
    const char *e = getenv("SEQKV_REQUIRE_SHARED");
    return e && strcmp(e, "1") == 0;
}

__attribute__((unused)) static int test_reason_names_shared(const char *why)
{
    return strstr(why, "../shared") || strstr(why, "stories260K") || strstr(why, "SEQKV_SHARED");
}

/* The SKIP of the running case, whose reason is in test_cur_msg. */
__attribute__((unused)) static void test_skip_at(const char *file, int line)
{
    char why[sizeof test_cur_msg];
    if (!(test_shared_required() && test_reason_names_shared(test_cur_msg))) {
        test_cur_skipped = 1;
        return;
    }
    memcpy(why, test_cur_msg, sizeof why);
    test_fail_at(file, line, "SEQKV_REQUIRE_SHARED=1 forbids this skip (point SEQKV_SHARED at the shared assets): %s",
                 why);
}

/* Mark the running case as skipped (e.g. ../shared/ is absent) and return. */
#define SKIP(...)                                                              \
    do {                                                                       \
        snprintf(test_cur_msg, sizeof test_cur_msg, __VA_ARGS__);              \
        test_skip_at(__FILE__, __LINE__);                                      \
        return;                                                                \
    } while (0)

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) { test_fail_at(__FILE__, __LINE__, "%s", #cond); return; } \
    } while (0)

#define CHECK_MSG(cond, ...)                                                   \
    do {                                                                       \
        if (!(cond)) { test_fail_at(__FILE__, __LINE__, __VA_ARGS__); return; } \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                     \
    do {                                                                       \
        long long va_ = (long long)(a), vb_ = (long long)(b);                  \
        if (va_ != vb_) {                                                      \
            test_fail_at(__FILE__, __LINE__, "%s == %s (%lld != %lld)", #a, #b, va_, vb_); \
            return;                                                            \
        }                                                                      \
    } while (0)

static void test_run_case(const char *name, void (*fn)(void))
{
    test_cur_failed = 0;
    test_cur_skipped = 0;
    test_cur_msg[0] = 0;
    fn();
    if (test_cur_failed) {
        printf("FAIL %s:%s: %s\n", test_binary_name, name, test_cur_msg);
        test_n_fail++;
    } else if (test_cur_skipped) {
        printf("SKIP %s:%s: %s\n", test_binary_name, name, test_cur_msg);
        test_n_skip++;
    } else {
        printf("PASS %s:%s\n", test_binary_name, name);
        test_n_pass++;
    }
    fflush(stdout);
}

#define TEST_BEGIN(binary) test_binary_name = (binary)
#define RUN(fn) test_run_case(#fn, fn)
#define TEST_END() return test_n_fail ? 1 : 0

/* Path of the shared read-only assets, or NULL when absent (fresh clone).
 * Override with SEQKV_SHARED=/path/to/shared. */
__attribute__((unused)) static const char *test_shared_dir(void)
{
    static const char *cands[] = {"../shared", "../../shared"};
    const char *env = getenv("SEQKV_SHARED");
    FILE *f;
    char probe[1024];
    if (env && *env) {
        snprintf(probe, sizeof probe, "%s/models/stories260K/stories260K.gguf", env);
        if ((f = fopen(probe, "rb")) == NULL) return NULL;
        fclose(f);
        return env;
    }
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
        snprintf(probe, sizeof probe, "%s/models/stories260K/stories260K.gguf", cands[i]);
        if ((f = fopen(probe, "rb")) != NULL) { fclose(f); return cands[i]; }
    }
    return NULL;
}

/* Fills buf with <shared>/models/stories260K/<file>; returns 0 when absent. */
__attribute__((unused)) static int test_stories_path(char *buf, size_t cap, const char *file)
{
    const char *d = test_shared_dir();
    if (!d) return 0;
    snprintf(buf, cap, "%s/models/stories260K/%s", d, file);
    return 1;
}

#endif
