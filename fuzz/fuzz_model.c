/* Fuzz target for model loading (src/engine/model.c over src/engine/gguf.c, and the llama2.c
 * checkpoint parser) and a first forward pass over whatever loads.
 *
 * The input is written to a file in a private temporary directory and loaded
 * with skv_model_load. Inputs that start with "GGUF" take the GGUF path; others
 * the llama2.c path, which then finds no tokenizer beside the file (the
 * directory is private) after validating the header and sizes. A refusal must
 * leave the handle NULL with a message. A model that loads must report sane
 * info, and run: a context of 4 positions (reference scalar kernels), a
 * 2-token prefill with logits, one decode, the KV digest, the fingerprint,
 * tokenization and token pieces. Keep inputs small (a few KB). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "seqkv.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

static char g_dir[512], g_path[600];
static volatile float sink;

static void remove_dir(void)
{
    unlink(g_path);
    rmdir(g_dir);
}

static int init_dir(void)
{
    const char *t = getenv("TMPDIR");
    if (g_dir[0]) return 1;
    if (!t || !*t) t = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/fuzz_model_XXXXXX", t);
    if (!mkdtemp(g_dir)) {
        g_dir[0] = 0;
        return 0;
    }
    snprintf(g_path, sizeof g_path, "%s/model.gguf", g_dir);
    atexit(remove_dir);
    return 1;
}

static void run_model(skv_model *m)
{
    skv_model_info info;
    skv_ctx_params p = skv_ctx_default_params();
    skv_ctx *c = NULL;
    int32_t tok[2], ids[64];
    float *logits;
    uint8_t dg[16], fp[16];
    size_t n = 0;
    char piece[64];
    CHECK(skv_model_get_info(m, &info) == SKV_OK);
    CHECK(info.n_layer >= 1 && info.n_embd >= 1 && info.n_head >= 1 && info.n_head_kv >= 1 &&
          info.n_head % info.n_head_kv == 0 && info.head_dim >= 2 && info.n_vocab >= 1 && info.rope_dim >= 2 &&
          info.rope_dim <= info.head_dim && info.arch[0] && info.format[0]);
    CHECK(info.bos_id >= -1 && info.bos_id < info.n_vocab && info.eos_id >= -1 && info.eos_id < info.n_vocab);
    if (!(logits = malloc((size_t)info.n_vocab * sizeof *logits))) return;
    p.n_ctx = 4;
    p.kernels = SKV_KERNELS_SCALAR;
    if (skv_ctx_create(m, &p, &c) == SKV_OK) {
        tok[0] = info.bos_id >= 0 ? info.bos_id : 0;
        tok[1] = info.n_vocab - 1;
        CHECK(skv_ctx_prefill(c, tok, 2, SKV_LOGITS_LAST, logits) == SKV_OK);
        sink += logits[0];
        CHECK(skv_ctx_decode(c, 0, logits) == SKV_OK);
        sink += logits[info.n_vocab - 1];
        CHECK(skv_ctx_n_pos(c) == 3);
        CHECK(skv_ctx_kv_digest(c, 3, dg) == SKV_OK);
        CHECK(skv_ctx_prefill(c, tok, 2, SKV_LOGITS_NONE, NULL) == SKV_ERR_RANGE); /* 3 + 2 > 4 */
        CHECK(skv_ctx_decode(c, info.n_vocab, NULL) == SKV_ERR_INVALID_ARG);
        skv_ctx_free(c);
    }
    free(logits);
    CHECK(skv_model_fingerprint(m, fp) == SKV_OK);
    int rc = skv_model_tokenize(m, "Once upon a time", 16, 1, ids, 64, &n);
    CHECK(rc == SKV_OK || rc == SKV_ERR_RANGE);
    for (size_t i = 0; rc == SKV_OK && i < n; i++) {
        size_t len = 0;
        CHECK(ids[i] >= 0 && ids[i] < info.n_vocab);
        int pr = skv_model_token_piece(m, ids[i], piece, sizeof piece, &len);
        CHECK(pr == SKV_OK || pr == SKV_ERR_RANGE);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    skv_model *m = (skv_model *)&size;
    char err[512] = "";
    FILE *f;
    int rc;
    if (!init_dir() || !(f = fopen(g_path, "wb"))) return 0;
    if (fwrite(data, 1, size, f) != size) {
        fclose(f);
        return 0;
    }
    if (fclose(f) != 0) return 0;
    rc = skv_model_load(g_path, NULL, &m, err, sizeof err);
    if (rc != SKV_OK) {
        CHECK(m == NULL && rc < 0 && rc >= SKV_ERR_INTERNAL && err[0]);
        return 0;
    }
    run_model(m);
    skv_model_free(m);
    return 0;
}
