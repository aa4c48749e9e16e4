/* The CUDA kernels on a device against the CPU engine's scalar reference, bit for bit
 * (docs/cuda.md): the cases of tests/cuda_cases.h, run through src/cuda/cu_ops.cu.
 * Every case skips with the reason where the kernels cannot run: a build without
 * CUDA=1 ("built without CUDA"), no driver ("CUDA driver version is insufficient ..."),
 * no device, or no kernel image for the device's architecture. NaN results count as
 * equal whatever their payload (x86 and CUDA make different default NaNs). */
#include "test.h"

#include "cuda_cases.h"

static const cu_impl k_device = {skv_cuda_matvec_f16, skv_cuda_qmatmul, skv_cuda_rmsnorm, skv_cuda_rope,
                                  skv_cuda_silu_mul,   skv_cuda_attn,    1};

static int g_probe = -100;
static char g_why[300];

/* Skips the running case when no device can run the kernels. */
#define NEED_DEVICE()                                                                      \
    do {                                                                                   \
        if (g_probe == -100) {                                                             \
            g_probe = skv_cuda_probe();                                                    \
            snprintf(g_why, sizeof g_why, "%s", skv_cuda_error());                         \
        }                                                                                  \
        if (g_probe != SKV_CUDA_OK) SKIP("no CUDA device to run the kernels on: %s", g_why); \
    } while (0)

static void device_probe(void)
{
    NEED_DEVICE();
    printf("# device: %s\n", skv_cuda_device_name());
}

/* Hostile arguments are refused with SKV_CUDA_BADARG, nothing launched. */
static void bad_arguments_refused(void)
{
    float y[4] = {0}, x[64] = {0};
    uint8_t w[34] = {0};
    uint32_t n = 5, kvh = 0, pos = 3;
    NEED_DEVICE();
    CHECK_EQ_INT(skv_cuda_qmatmul(SKV_CU_Q8_0, y, w, 33, x, 1, 1), SKV_CUDA_BADARG); /* K % 32 */
    CHECK_EQ_INT(skv_cuda_qmatmul(7, y, w, 32, x, 1, 1), SKV_CUDA_BADARG);           /* type */
    CHECK_EQ_INT(skv_cuda_rope(x, 1, 8, 8, 0, x, x, &pos, 2), SKV_CUDA_BADARG);      /* 2 np > hd */
    CHECK_EQ_INT(skv_cuda_rope(x, 1, 8, 4, 0, x, x, &pos, 2), SKV_CUDA_BADARG);      /* pos >= n_pos */
    skv_cu_attn_args a = {y, x, &n, &kvh, 1, x, x, 0, 1, 4, 4, 1.0f};                 /* n > n_ctx */
    CHECK_EQ_INT(skv_cuda_attn(&a), SKV_CUDA_BADARG);
    CHECK(strlen(skv_cuda_error()) > 0);
}

#define X(name, fn)          \
    static void name(void)       \
    {                            \
        NEED_DEVICE();           \
        fn();                    \
    }
CU_CASES(X)
#undef X

int main(void)
{
    TEST_BEGIN("test_cuda_gpu");
    cu_under_test = &k_device;
    RUN(device_probe);
    RUN(bad_arguments_refused);
#define X(name, fn) RUN(name);
    CU_CASES(X)
#undef X
    TEST_END();
}
