/* skv_model_load_params: GGUF metadata overrides (llama.cpp's --override-kv) and the RoPE
 * options (--rope-scaling / --rope-freq-base / --rope-freq-scale), on the bundled kjv-4m:
 * the getters read the overrides, the loaded model and its fingerprints follow them, the
 * two spellings of one scaling agree, and every malformed item is refused with a message. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "seqkv.h"
#include "engine/gguf.h"

#define MODEL "models/kjv-4m.gguf"

static void overrides_read_back(void)
{
    skv_gguf *g = NULL;
    skv_err err = {0};
    CHECK(skv_gguf_open(MODEL, &g, &err) == SKV_OK);
    int64_t i = 0;
    double f = 0;
    int b = 0;
    skv_gguf_str s;
    CHECK(skv_gguf_get_int(g, "llama.context_length", &i) == SKV_OK && i == 1024);
    CHECK(skv_gguf_override(g, "llama.context_length=int:512", &err) == SKV_OK);
    CHECK(skv_gguf_get_int(g, "llama.context_length", &i) == SKV_OK && i == 512);
    CHECK(skv_gguf_override(g, "llama.context_length=int:-7", &err) == SKV_OK); /* the last wins */
    CHECK(skv_gguf_get_int(g, "llama.context_length", &i) == SKV_OK && i == -7);
    CHECK(skv_gguf_override(g, "llama.rope.freq_base=float:12345.5", &err) == SKV_OK);
    CHECK(skv_gguf_get_float(g, "llama.rope.freq_base", &f) == SKV_OK && f == 12345.5);
    CHECK(skv_gguf_get_int(g, "llama.rope.freq_base", &i) == SKV_ERR_FORMAT); /* a float is no int */
    CHECK(!skv_gguf_has(g, "made.up.key"));
    CHECK(skv_gguf_override(g, "made.up.key=bool:true", &err) == SKV_OK); /* added */
    CHECK(skv_gguf_get_bool(g, "made.up.key", &b) == SKV_OK && b == 1);
    CHECK(skv_gguf_override(g, "general.name=str:a=b:c, d", &err) == SKV_OK);
    CHECK(skv_gguf_get_str(g, "general.name", &s) == SKV_OK && s.len == 8 && !memcmp(s.ptr, "a=b:c, d", 8));
    CHECK(skv_gguf_override(g, "general.name=str:", &err) == SKV_OK);
    CHECK(skv_gguf_get_str(g, "general.name", &s) == SKV_OK && s.len == 0);
    static const char *const bad[] = {"", "=int:1", "novalue", "k=int", "k=int:", "k=int:12x", "k=int:99999999999999999999",
                                      "k=float:nan", "k=float:1e999", "k=float:", "k=bool:yes", "k=bool:1", "k=long:1",
                                      "k=:1", NULL};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        skv_err e = {0};
        int rc = skv_gguf_override(g, bad[k], &e);
        CHECK_MSG(rc == SKV_ERR_INVALID_ARG && strstr(e.msg, "override"), "'%s': %d %s", bad[k] ? bad[k] : "NULL", rc, e.msg);
    }
    char *big = malloc(SKV_GGUF_MAX_OVERRIDE + 32);
    CHECK(big);
    memset(big, 'x', SKV_GGUF_MAX_OVERRIDE + 31);
    memcpy(big, "k=str:", 6);
    big[SKV_GGUF_MAX_OVERRIDE + 31] = 0;
    CHECK(skv_gguf_override(g, big, &err) == SKV_ERR_INVALID_ARG);
    free(big);
    skv_gguf_close(g);
}

typedef struct {
    uint8_t fp[16], tfp[16];
    float logit0;
    int add_bos, rc;
    char err[256];
} loaded;

static loaded load(const skv_model_params *p)
{
    loaded r = {0};
    skv_model *m = NULL;
    r.rc = skv_model_load_params(MODEL, p, &m, r.err, sizeof r.err);
    if (r.rc) return r;
    skv_model_info info;
    skv_model_get_info(m, &info);
    r.add_bos = info.add_bos;
    skv_ctx_params cp = skv_ctx_default_params();
    cp.n_ctx = 64;
    skv_ctx *c = NULL;
    int32_t toks[12];
    for (int i = 0; i < 12; i++) toks[i] = 1 + 37 * i % 4000;
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    if (!logits || skv_model_fingerprint(m, r.fp) || skv_model_tokenizer_fingerprint(m, r.tfp) ||
        skv_ctx_create(m, &cp, &c) || skv_ctx_prefill(c, toks, 12, SKV_LOGITS_LAST, logits))
        r.rc = -100, snprintf(r.err, sizeof r.err, "fingerprint, context or prefill failed");
    r.logit0 = logits ? logits[0] : NAN;
    free(logits);
    skv_ctx_free(c);
    skv_model_free(m);
    return r;
}

static void params_change_the_model(void)
{
    loaded base = load(NULL), zero;
    skv_model_params p = {0};
    CHECK_MSG(base.rc == SKV_OK, "%s", base.err);
    zero = load(&p);
    CHECK(zero.rc == SKV_OK && !memcmp(zero.fp, base.fp, 16) && zero.logit0 == base.logit0);
    /* the base frequency: another model (fingerprint, logits), the tokenizer the same */
    p.rope_freq_base = 20000;
    loaded fb = load(&p);
    CHECK_MSG(fb.rc == SKV_OK, "%s", fb.err);
    CHECK(memcmp(fb.fp, base.fp, 16) && fb.logit0 != base.logit0 && !memcmp(fb.tfp, base.tfp, 16));
    /* ... and the same model as the key's override */
    const char *o_base[] = {"llama.rope.freq_base=float:20000"};
    skv_model_params po = {.overrides = o_base, .n_overrides = 1};
    loaded ob = load(&po);
    CHECK(ob.rc == SKV_OK && !memcmp(ob.fp, fb.fp, 16) && ob.logit0 == fb.logit0);
    /* linear scaling: --rope-freq-scale 0.5 is a factor-2 override, and "none" is the file's */
    skv_model_params ps = {.rope_freq_scale = 0.5};
    loaded sc = load(&ps);
    const char *o_lin[] = {"llama.rope.scaling.type=str:linear", "llama.rope.scaling.factor=float:2"};
    skv_model_params pl = {.overrides = o_lin, .n_overrides = 2};
    loaded lin = load(&pl);
    CHECK(sc.rc == SKV_OK && lin.rc == SKV_OK && memcmp(sc.fp, base.fp, 16) && !memcmp(sc.fp, lin.fp, 16));
    skv_model_params pn = {.rope_scaling = "none", .rope_freq_scale = 0.5};
    loaded none = load(&pn);
    CHECK(none.rc == SKV_OK && !memcmp(none.fp, base.fp, 16));
    /* the tokenizer's flags: add_bos off changes its fingerprint, not the model's */
    const char *o_bos[] = {"tokenizer.ggml.add_bos_token=bool:false"};
    skv_model_params pb = {.overrides = o_bos, .n_overrides = 1};
    loaded bos = load(&pb);
    CHECK(base.add_bos == 1 && bos.rc == SKV_OK && bos.add_bos == 0);
    CHECK(memcmp(bos.tfp, base.tfp, 16) && !memcmp(bos.fp, base.fp, 16));
}

static void params_refused(void)
{
    skv_model *m = NULL;
    char err[256];
    skv_model_params p = {.rope_scaling = "yarn"};
    CHECK(skv_model_load_params(MODEL, &p, &m, err, sizeof err) == SKV_ERR_UNSUPPORTED && strstr(err, "yarn") && !m);
    p.rope_scaling = "cubic";
    CHECK(skv_model_load_params(MODEL, &p, &m, err, sizeof err) == SKV_ERR_INVALID_ARG && !m);
    const char *bad[] = {"llama.context_length=int:12", "tokenizer.ggml.add_bos_token=maybe"};
    skv_model_params pb = {.overrides = bad, .n_overrides = 2};
    CHECK(skv_model_load_params(MODEL, &pb, &m, err, sizeof err) == SKV_ERR_INVALID_ARG && strstr(err, "add_bos_token") && !m);
    const char *arch[] = {"general.architecture=str:no-such-arch"};
    skv_model_params pa = {.overrides = arch, .n_overrides = 1};
    CHECK(skv_model_load_params(MODEL, &pa, &m, err, sizeof err) != SKV_OK && strstr(err, "no-such-arch") && !m);
    const char *width[] = {"llama.embedding_length=float:256.5"}; /* a float where an int is read */
    skv_model_params pw = {.overrides = width, .n_overrides = 1};
    CHECK(skv_model_load_params(MODEL, &pw, &m, err, sizeof err) != SKV_OK && !m);
    skv_model_params pn = {.n_overrides = 1};
    CHECK(skv_model_load_params(MODEL, &pn, &m, err, sizeof err) == SKV_ERR_INVALID_ARG && !m);
    char bin[1024];
    if (test_stories_path(bin, sizeof bin, "stories260K.bin")) {
        char tok[1024];
        test_stories_path(tok, sizeof tok, "tok512.bin");
        skv_model_params pc = {.tokenizer_path = tok};
        CHECK(skv_model_load_params(bin, &pc, &m, err, sizeof err) == SKV_OK && m); /* no options: loads */
        skv_model_free(m), m = NULL;
        pc.rope_freq_base = 5000;
        CHECK(skv_model_load_params(bin, &pc, &m, err, sizeof err) == SKV_ERR_INVALID_ARG && strstr(err, "GGUF") && !m);
    }
}

int main(void)
{
    TEST_BEGIN("test_model_params");
    RUN(overrides_read_back);
    RUN(params_change_the_model);
    RUN(params_refused);
    TEST_END();
}
