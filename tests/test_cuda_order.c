/* The CUDA kernels' reduction order, proven on the CPU (docs/cuda.md): the host model
 * (src/cuda/cu_model.c), which runs the kernels' own per-thread steps (cu_kern.h) in their
 * structure, gives the CPU engine's scalar reference bit for bit on every kernel; the
 * activation quantizer, written anew for the device, equals quant/dot.c's on edge cases;
 * and a control shows the comparisons would see a changed order. (exp and the binary16
 * conversions need no such test: the kernels compile core/detf32.h and core/f16.h, the
 * CPU's own source.) */
#include "test.h"

#include "cuda/cu_kern.h"
#include "quant/dot_int.h"

#include "cuda_cases.h"

static int m_matvec_f16(float *y, const uint16_t *W, size_t K, const float *x, size_t T, size_t n_rows)
{
    skv_cumodel_matvec_f16(y, W, K, x, T, n_rows);
    return SKV_CUDA_OK;
}

static int m_qmatmul(int wtype, float *y, const void *W, size_t K, const float *x, size_t T, size_t n_rows)
{
    skv_cumodel_qmatmul(wtype, y, W, K, x, T, n_rows);
    return SKV_CUDA_OK;
}

static int m_rmsnorm(float *y, const float *x, const float *w, size_t n, size_t T, float eps)
{
    skv_cumodel_rmsnorm(y, x, w, n, T, eps);
    return SKV_CUDA_OK;
}

static int m_rope(float *x, size_t rows, size_t hd, size_t np, int neox, const float *c, const float *s,
                  const uint32_t *pos, size_t n_pos)
{
    (void)n_pos;
    skv_cumodel_rope(x, rows, hd, np, neox, c, s, pos);
    return SKV_CUDA_OK;
}

static int m_silu_mul(float *h, const float *g, size_t n)
{
    skv_cumodel_silu_mul(h, g, n);
    return SKV_CUDA_OK;
}

static int m_attn(const skv_cu_attn_args *a)
{
    float *sc = malloc(a->nq * a->n_ctx * sizeof *sc);
    if (!sc) return SKV_CUDA_FAILED;
    skv_cumodel_attn(a, sc);
    free(sc);
    return SKV_CUDA_OK;
}

static const cu_impl k_model = {m_matvec_f16, m_qmatmul, m_rmsnorm, m_rope, m_silu_mul, m_attn, 0};

static uint32_t bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

/* skv_cu_act32 == quant/dot.c's act32 block (scale and values) on random blocks, ties,
 * zeros, subnormals, infinities and NaN. */
static void act32_equals_reference(void)
{
    for (int it = 0; it < 2000; it++) {
        float x[32];
        skv_act32 ref;
        int8_t q[32];
        cu_fill(x, 32, it % 3 ? 5.0f : 1e-38f);
        if (it % 5 == 1) x[it % 32] = 127.0f, x[(it + 1) % 32] = 2.5f, x[(it + 2) % 32] = -0.5f;
        if (it % 11 == 2) memset(x, 0, sizeof x);
        if (it % 13 == 3) x[it % 32] = INFINITY;
        if (it % 17 == 4) x[it % 32] = NAN;
        skv_act32_quantize_ref(x, &ref, 32);
        float d = skv_cu_act32(x, q);
        CHECK_MSG(bits(d) == bits(ref.d), "block %d: scale %a vs %a", it, (double)d, (double)ref.d);
        CHECK_MSG(memcmp(q, ref.qs, 32) == 0, "block %d: values differ", it);
    }
}

/* The control: on the inputs these tests use, a single sequential fma chain (an order a
 * naive kernel would use) differs from the canonical 8-lane dot, so the bitwise
 * comparisons above do see a change of order. */
static void a_changed_order_is_seen(void)
{
    int differ = 0;
    for (int it = 0; it < 64; it++) {
        float a[257], b[257], seq = 0.0f;
        cu_fill(a, 257, 1.0f);
        cu_fill(b, 257, 1.0f);
        for (int j = 0; j < 257; j++) seq = fmaf(a[j], b[j], seq);
        differ += bits(seq) != bits(skv_kernels_scalar()->dot(a, b, 257));
        CHECK(bits(skv_cu_dot(a, b, 257)) == bits(skv_kernels_scalar()->dot(a, b, 257)));
    }
    CHECK_MSG(differ > 0, "a sequential chain gave the canonical bits on every input: the tests lack power");
}

#define X(name, fn) \
    static void name(void) { fn(); }
CU_CASES(X)
#undef X

int main(void)
{
    TEST_BEGIN("test_cuda_order");
    cu_under_test = &k_model;
    RUN(act32_equals_reference);
    RUN(a_changed_order_is_seen);
#define X(name, fn) RUN(name);
    CU_CASES(X)
#undef X
    TEST_END();
}
