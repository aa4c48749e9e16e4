/* skv-oracle-quantize: write a GGUF quantized to one llama-quantize preset with
 * llama.cpp's own quantizer (llama_model_quantize), for seqkv's oracle fixtures.
 *
 *   skv-oracle-quantize IN.gguf OUT.gguf PRESET [THREADS] [pure]
 *
 * PRESET is a llama-quantize name (F32, F16, Q8_0, Q4_0, ..., IQ4_XS); "pure"
 * is llama-quantize's --pure: every 2-D tensor in the preset's base type, none
 * of its per-tensor upgrades (the tied token_embd/output stays Q4_0 in Q4_0,
 * not Q6_K). Built by
 * scripts/oracle/setup.sh against the prebuilt libllama of the npm package; see
 * docs/oracle.md. Exit status 0 on success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "llama.h"

struct preset {
    const char *name;
    enum llama_ftype ftype;
};

/* The presets that need no importance matrix, in llama-quantize's spelling. */
static const struct preset presets[] = {
    {"F32", LLAMA_FTYPE_ALL_F32},         {"F16", LLAMA_FTYPE_MOSTLY_F16},
    {"BF16", LLAMA_FTYPE_MOSTLY_BF16},    {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
    {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},    {"Q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
    {"Q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},    {"Q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},
    {"Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K},    {"Q3_K_S", LLAMA_FTYPE_MOSTLY_Q3_K_S},
    {"Q3_K_M", LLAMA_FTYPE_MOSTLY_Q3_K_M}, {"Q3_K_L", LLAMA_FTYPE_MOSTLY_Q3_K_L},
    {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S}, {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M},
    {"Q5_K_S", LLAMA_FTYPE_MOSTLY_Q5_K_S}, {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M},
    {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K},    {"IQ4_NL", LLAMA_FTYPE_MOSTLY_IQ4_NL},
    {"IQ4_XS", LLAMA_FTYPE_MOSTLY_IQ4_XS},
};

static int preset_find(const char *name, enum llama_ftype *out)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(presets[i].name, name) == 0) {
            *out = presets[i].ftype;
            return 0;
        }
    }
    return -1;
}

static void usage(void)
{
    fprintf(stderr, "usage: skv-oracle-quantize IN.gguf OUT.gguf PRESET [THREADS] [pure]\npresets:");
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        fprintf(stderr, " %s", presets[i].name);
    fprintf(stderr, "\n");
}

int main(int argc, char **argv)
{
    enum llama_ftype ftype;
    int pure = argc == 6 && strcmp(argv[5], "pure") == 0;
    if (argc < 4 || argc > 6 || (argc == 6 && !pure) || preset_find(argv[3], &ftype) != 0) {
        usage();
        return 2;
    }
    oracle_quiet_log();
    if (oracle_load_cpu_backend() != 0)
        return 1;
    llama_backend_init();
    llama_model_quantize_params qp = llama_model_quantize_default_params();
    qp.ftype = ftype;
    qp.nthread = argc >= 5 ? atoi(argv[4]) : 1;
    qp.pure = pure;
    uint32_t rc = llama_model_quantize(argv[1], argv[2], &qp);
    llama_backend_free();
    if (rc != 0) {
        fprintf(stderr, "skv-oracle-quantize: llama_model_quantize failed (%u)\n", rc);
        return 1;
    }
    return 0;
}
