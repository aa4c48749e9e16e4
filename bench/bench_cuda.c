/* bench_cuda: the CUDA matrix-vector kernels (src/cuda/cu_ops.cu) on the weight shapes of
 * the 1.1B geometry (TinyLlama: dim 2048, 4 KV heads of 64, ffn 5632, 22 layers) and of
 * Llama-3.2-1B (dim 2048, 8 KV heads of 64, ffn 8192, 16 layers), per weight type at 1 and
 * 32 tokens: seconds per launch, the weights' bytes per second, and the sum over one
 * forward pass's matrices (the attention, norms and the output head left out).
 * Prints "SKIP: why" and exits 0 where no device can run the kernels (scripts/gpu_check.sh
 * records it). Usage: bench_cuda [iterations, default 20] */
#include <stdio.h>
#include <stdlib.h>

#include "cuda/cu_ops.h"

typedef struct {
    const char *name;
    size_t dim, kv, ffn, layers;
} geometry;

static const geometry k_geo[] = {
    {"1.1B", 2048, 256, 5632, 22},
    {"Llama-3.2-1B", 2048, 512, 8192, 16},
};

static double weight_bytes(int wtype, size_t K, size_t R)
{
    return wtype < 0 ? 2.0 * (double)K * (double)R : (double)(K / 32) * (double)R * (wtype == SKV_CU_Q4_0 ? 18 : 34);
}

/* One geometry, type and batch: every matrix of a layer timed, the pass summed. */
static int run(const geometry *g, int wtype, size_t T, int iters)
{
    /* (rows, K, count per layer): wq + wo, wk + wv, w1 + w3, w2 */
    size_t shp[4][3] = {{g->dim, g->dim, 2}, {g->kv, g->dim, 2}, {g->ffn, g->dim, 2}, {g->dim, g->ffn, 1}};
    static const char *tn[] = {"f16", "q8_0", "q4_0"};
    double pass = 0.0, bytes = 0.0;
    for (int i = 0; i < 4; i++) {
        double s;
        if (skv_cuda_bench_matvec(wtype, shp[i][1], shp[i][0], T, iters, &s) != SKV_CUDA_OK) {
            fprintf(stderr, "bench_cuda: %s\n", skv_cuda_error());
            return 1;
        }
        double wb = weight_bytes(wtype, shp[i][1], shp[i][0]);
        printf("%s,%s,%zu,%zux%zu,%.6e,%.1f\n", g->name, tn[wtype + 1], T, shp[i][0], shp[i][1], s, wb / s / 1e9);
        pass += s * (double)shp[i][2] * (double)g->layers;
        bytes += wb * (double)shp[i][2] * (double)g->layers;
    }
    printf("%s,%s,%zu,pass,%.6e,%.1f\n", g->name, tn[wtype + 1], T, pass, bytes / pass / 1e9);
    return 0;
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 20;
    if (iters < 1) iters = 1;
    if (skv_cuda_probe() != SKV_CUDA_OK) {
        printf("SKIP: %s\n", skv_cuda_error());
        return 0;
    }
    printf("# device: %s\n", skv_cuda_device_name());
    printf("geometry,type,tokens,matrix,seconds,weight_GB_per_s\n");
    for (size_t g = 0; g < sizeof k_geo / sizeof *k_geo; g++)
        for (int w = -1; w <= SKV_CU_Q4_0; w++)
            for (size_t T = 1; T <= 32; T += 31)
                if (run(&k_geo[g], w, T, iters)) return 1;
    return 0;
}
