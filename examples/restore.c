/* seqkv from C: store a text's KV cache as a .skv session, then regenerate the cache
 * (verified bit-exact against the stored digest) and the text.
 *   cc restore.c $(pkg-config --cflags --libs --static seqkv) -o restore
 *   ./restore /usr/local/share/seqkv/kjv-4m.gguf "In the beginning"
 * Every call returns a status: SKV_OK (0) or a negative skv_status. */
#include <seqkv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call, why) do { if ((call) != SKV_OK) { fprintf(stderr, "%s\n", why); return 1; } } while (0)

int main(int argc, char **argv)
{
    skv_model *m; skv_encoder *e; skv_session *s; skv_ctx *c;
    int32_t tok[512], back[512];
    size_t n, size, len;
    uint8_t *file;
    char err[256] = "", text[4096];
    skv_encoder_params ep = skv_encoder_default_params(); /* codec "model": tokens coded under the model */
    skv_restore_params rp = {.verify = 1};
    if (argc != 3) return fprintf(stderr, "usage: restore MODEL TEXT\n"), 2;
    CHECK(skv_model_load(argv[1], NULL, &m, err, sizeof err), err);
    CHECK(skv_model_tokenize(m, argv[2], strlen(argv[2]), 1, tok, 512, &n), "text too long");
    CHECK(skv_encoder_create(m, &ep, &e, err, sizeof err), err);
    CHECK(skv_encoder_append(e, tok, n, NULL), skv_encoder_last_error(e));
    CHECK(skv_encoder_finish(e, &file, &size), skv_encoder_last_error(e)); /* the .skv bytes */
    CHECK(skv_session_open(file, size, &s, err, sizeof err), err);
    CHECK(skv_ctx_create(m, NULL, &c), "no memory for a context");
    CHECK(skv_session_restore_segment(s, m, 0, c, &rp, back, 512), skv_ctx_last_error(c));
    CHECK(skv_model_detokenize(m, back, n, 0, text, sizeof text, &len), "text too long");
    printf("%zu tokens in %zu bytes; KV regenerated, digest verified; text: %s\n", n, size, text);
    free(file);
    skv_session_free(s); skv_ctx_free(c); skv_encoder_free(e); skv_model_free(m);
    return 0;
}
