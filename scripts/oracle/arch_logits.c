/* llama.cpp's logits for one token list: the oracle of tests/test_arch.c.
 *
 *   arch_logits MODEL.gguf TOKENS OUT [CPU_BACKEND.so]
 *
 * TOKENS: little-endian int32 ids (scripts/gguf_write.py writes them). OUT: for each
 * position, the n_vocab f32 logits after that token, little-endian, row after row. One
 * batch of every token, one thread, F32 KV cache (llama.cpp's default F16 cache would
 * round K and V), no flash attention, a full-size sliding-window cache. The CPU backend is
 * loaded explicitly (default ./libggml-cpu-haswell.so): the AMX variants crash on some
 * Xeons. Built and run by scripts/oracle/arch_logits.sh. */
#include <stdio.h>
#include <stdlib.h>

#include "ggml-backend.h"
#include "llama.h"

#define MAX_TOKENS 4096

static void quiet(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

static int read_tokens(const char *path, int32_t *tok)
{
    FILE *f = fopen(path, "rb");
    int n;
    if (!f) return -1;
    n = (int)fread(tok, 4, MAX_TOKENS, f);
    fclose(f);
    return n;
}

static struct llama_context *make_context(struct llama_model *m)
{
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.swa_full = 1;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    return llama_init_from_model(m, cp);
}

static int write_logits(struct llama_context *c, int n, int V, const char *path)
{
    FILE *o = fopen(path, "wb");
    int ok = o != NULL;
    for (int i = 0; i < n && ok; i++) ok = fwrite(llama_get_logits_ith(c, i), 4, (size_t)V, o) == (size_t)V;
    if (o && fclose(o)) ok = 0;
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    static int32_t tok[MAX_TOKENS];
    int n, V, rc;
    if (argc < 4) {
        fprintf(stderr, "usage: arch_logits MODEL.gguf TOKENS OUT [CPU_BACKEND.so]\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    ggml_backend_load(argc > 4 ? argv[4] : "./libggml-cpu-haswell.so");
    llama_backend_init();
    if ((n = read_tokens(argv[2], tok)) < 1) return fprintf(stderr, "cannot read %s\n", argv[2]), 1;
    struct llama_model *m = llama_model_load_from_file(argv[1], llama_model_default_params());
    struct llama_context *c = m ? make_context(m) : NULL;
    if (!c) return fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    V = llama_vocab_n_tokens(llama_model_get_vocab(m));
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = tok[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n;
    rc = llama_decode(c, b) ? (fprintf(stderr, "decode failed\n"), 1) : write_logits(c, n, V, argv[3]) ? 1 : 0;
    if (!rc) fprintf(stderr, "%s: %d positions x %d logits\n", argv[1], n, V);
    llama_batch_free(b);
    llama_free(c);
    llama_model_free(m);
    return rc;
}
