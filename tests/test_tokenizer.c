/* Tests for src/tokenizer/tokenizer.c and src/tokenizer/unicode.c.
 *
 * Expected ids come from tests/test_tokenizer.py, an independent Python
 * reference (llama.cpp semantics, real regexes for the pre-tokenizers,
 * llama2.c's run.c encoder), committed in tests/data/tokenizer/expected.txt.
 * The synthetic byte-level BPE vocabulary is tests/data/tokenizer/bpe.tokdesc.
 *
 * Extra mode for the Python differential test:
 *   test_tokenizer --dump DESC.tokdesc INPUTS.txt ADD_SPECIAL
 * prints, per hex-encoded input line, the ids ("-" if none), after checking
 * that the heap, unsegmented and naive reference paths agree;
 *   test_tokenizer --vocab-dump VOCAB.gguf INPUTS.txt ADD_SPECIAL
 * does the same for a vocabulary-only GGUF (tests/test_vocab_llama.py). */
#include "seqkv.h"
#include "test.h"
#include "engine/vocab_load.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DATA_DIR "tests/data/tokenizer/"

/* ------------------------------------------------------------------------ */
/* helpers                                                                  */

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long len;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)len + 1);
        if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
            free(buf);
            buf = NULL;
        }
        if (buf) buf[len] = 0;
        *n = (size_t)len;
    }
    fclose(f);
    return buf;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes hex (or "-" = empty) into a new buffer; NULL on bad input. */
static char *unhex(const char *s, size_t n, size_t *out_len)
{
    char *b = malloc(n / 2 + 1);
    *out_len = 0;
    if (!b) return NULL;
    if (n == 1 && s[0] == '-') return b;
    if (n % 2) {
        free(b);
        return NULL;
    }
    for (size_t i = 0; i < n; i += 2) {
        int hi = hexval(s[i]), lo = hexval(s[i + 1]);
        if (hi < 0 || lo < 0) {
            free(b);
            return NULL;
        }
        b[i / 2] = (char)(hi * 16 + lo);
    }
    *out_len = n / 2;
    return b;
}

static uint64_t rng_state = 0x853C49E6748FEA9Bull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* Encodes into a fresh array; returns the status. */
static int enc(const skv_tokenizer *t, const char *s, size_t n, unsigned flags, int32_t **ids, size_t *n_ids)
{
    size_t need = 0;
    int rc = skv_tokenizer_encode_ex(t, s, n, flags, NULL, 0, &need);
    *ids = NULL;
    *n_ids = 0;
    if (rc != SKV_OK && rc != SKV_ERR_RANGE) return rc;
    *ids = malloc((need ? need : 1) * sizeof **ids);
    if (!*ids) return SKV_ERR_NOMEM;
    rc = skv_tokenizer_encode_ex(t, s, n, flags, *ids, need, n_ids);
    return rc;
}

/* Concatenated pieces of ids; returns a new buffer. */
static char *detok(const skv_tokenizer *t, const int32_t *ids, size_t n, size_t *len)
{
    size_t cap = 64, used = 0;
    char *out = malloc(cap);
    *len = 0;
    for (size_t i = 0; out && i < n; i++) {
        size_t pl = 0;
        int rc = skv_tokenizer_piece(t, ids[i], NULL, 0, &pl);
        if (rc != SKV_OK && rc != SKV_ERR_RANGE) {
            free(out);
            return NULL;
        }
        while (used + pl + 1 > cap) {
            char *g = realloc(out, cap * 2);
            if (!g) {
                free(out);
                return NULL;
            }
            out = g;
            cap *= 2;
        }
        if (skv_tokenizer_piece(t, ids[i], out + used, cap - used, &pl) < 0) {
            free(out);
            return NULL;
        }
        used += pl;
    }
    if (out) *len = used;
    return out;
}

/* ------------------------------------------------------------------------ */
/* .tokdesc files (written by tests/test_tokenizer.py)                      */

typedef struct {
    skv_tokenizer_desc d;
    skv_strref *toks, *merges;
    float *scores;
    int32_t *types;
    size_t n, cap, nm, mcap;
    char pre[64];
} tokdesc;

static void tokdesc_free(tokdesc *v)
{
    for (size_t i = 0; i < v->n; i++) free((void *)(uintptr_t)v->toks[i].ptr);
    for (size_t i = 0; i < v->nm; i++) free((void *)(uintptr_t)v->merges[i].ptr);
    free(v->toks);
    free(v->merges);
    free(v->scores);
    free(v->types);
    memset(v, 0, sizeof *v);
}

static int tokdesc_line(tokdesc *v, char *line)
{
    char key[32], a[4096], b[4096];
    int ival;
    double sc;
    size_t la, lb;
    if (line[0] == '#' || line[0] == 0) return 0;
    if (sscanf(line, "%31s", key) != 1) return 0;
    if (strcmp(key, "tok") == 0) {
        char *txt;
        if (sscanf(line, "tok %d %lf %4095s", &ival, &sc, a) != 3) return -1;
        if (!(txt = unhex(a, strlen(a), &la))) return -1;
        if (v->n == v->cap) {
            v->cap = v->cap ? v->cap * 2 : 256;
            v->toks = realloc(v->toks, v->cap * sizeof *v->toks);
            v->scores = realloc(v->scores, v->cap * sizeof *v->scores);
            v->types = realloc(v->types, v->cap * sizeof *v->types);
            if (!v->toks || !v->scores || !v->types) return -1;
        }
        v->toks[v->n].ptr = txt;
        v->toks[v->n].len = la;
        v->scores[v->n] = (float)sc;
        v->types[v->n++] = ival;
    } else if (strcmp(key, "merge") == 0) {
        char *x, *y, *m;
        if (sscanf(line, "merge %4095s %4095s", a, b) != 2) return -1;
        x = unhex(a, strlen(a), &la);
        y = unhex(b, strlen(b), &lb);
        m = malloc(la + lb + 1);
        if (!x || !y || !m) return -1;
        memcpy(m, x, la);
        m[la] = ' ';
        memcpy(m + la + 1, y, lb);
        free(x);
        free(y);
        if (v->nm == v->mcap) {
            v->mcap = v->mcap ? v->mcap * 2 : 256;
            v->merges = realloc(v->merges, v->mcap * sizeof *v->merges);
            if (!v->merges) return -1;
        }
        v->merges[v->nm].ptr = m;
        v->merges[v->nm++].len = la + lb + 1;
    } else if (strcmp(key, "kind") == 0) {
        if (sscanf(line, "kind %31s", a) != 1) return -1;
        v->d.kind = strcmp(a, "spm") == 0 ? SKV_TOKENIZER_SPM : SKV_TOKENIZER_GPT2;
    } else if (strcmp(key, "pre") == 0) {
        if (sscanf(line, "pre %63s", v->pre) != 1) return -1;
    } else {
        if (sscanf(line, "%*s %d", &ival) != 1) return -1;
        if (strcmp(key, "bos") == 0) v->d.bos_id = ival;
        else if (strcmp(key, "eos") == 0) v->d.eos_id = ival;
        else if (strcmp(key, "unk") == 0) v->d.unk_id = ival;
        else if (strcmp(key, "add_bos") == 0) v->d.add_bos = ival;
        else if (strcmp(key, "add_eos") == 0) v->d.add_eos = ival;
        else if (strcmp(key, "add_space_prefix") == 0) v->d.add_space_prefix = ival;
    }
    return 0;
}

static int tokdesc_read(tokdesc *v, const char *path)
{
    size_t n;
    char *buf = slurp(path, &n), *line, *save = NULL;
    memset(v, 0, sizeof *v);
    v->d.bos_id = v->d.eos_id = v->d.unk_id = v->d.pad_id = -1;
    v->d.add_bos = v->d.add_eos = v->d.add_space_prefix = -1;
    if (!buf) return -1;
    for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        if (tokdesc_line(v, line) != 0) {
            free(buf);
            return -1;
        }
    free(buf);
    v->d.n_vocab = v->n;
    v->d.tokens = v->toks;
    v->d.scores = v->scores;
    v->d.types = v->types;
    v->d.n_merges = v->nm;
    v->d.merges = v->merges;
    v->d.pre = v->pre[0] ? v->pre : NULL;
    return 0;
}

static skv_tokenizer *load_tokdesc(const char *path, const char *pre)
{
    tokdesc v;
    skv_tokenizer *t = NULL;
    skv_err err = {0};
    if (tokdesc_read(&v, path) == 0) {
        if (pre) v.d.pre = pre;
        if (skv_tokenizer_create(&v.d, &t, &err) != SKV_OK) {
            fprintf(stderr, "load_tokdesc(%s): %s\n", path, err.msg);
            t = NULL;
        }
    }
    tokdesc_free(&v);
    return t;
}

static skv_tokenizer *load_tok512(void)
{
    char path[1024];
    skv_err err = {0};
    size_t n;
    char *buf;
    skv_tokenizer *t = NULL;
    if (!test_stories_path(path, sizeof path, "tok512.bin") || !(buf = slurp(path, &n))) return NULL;
    if (skv_tokenizer_load_llama2c(buf, n, 512, &t, &err) != SKV_OK) {
        fprintf(stderr, "tok512: %s\n", err.msg);
        t = NULL;
    }
    free(buf);
    return t;
}

/* A description with flags "absent" (-1) and no pad token; the caller's
 * arrays are used, not copied. */
static skv_tokenizer_desc vocab_desc(int kind, size_t n, const skv_strref *toks, const float *scores,
                                     const int32_t *types, int32_t bos, int32_t eos, int32_t unk)
{
    skv_tokenizer_desc d = {.kind = kind, .n_vocab = n, .tokens = toks, .scores = scores, .types = types,
                            .bos_id = bos, .eos_id = eos, .unk_id = unk, .pad_id = -1,
                            .add_bos = -1, .add_eos = -1, .add_space_prefix = -1};
    return d;
}

/* A GPT2 description over merges, without special tokens. */
static skv_tokenizer_desc merges_desc(size_t n, const skv_strref *toks, size_t n_merges, const skv_strref *merges)
{
    skv_tokenizer_desc d = vocab_desc(SKV_TOKENIZER_GPT2, n, toks, NULL, NULL, -1, -1, -1);
    d.n_merges = n_merges;
    d.merges = merges;
    return d;
}

/* Appends one token to parallel arrays being filled. */
typedef struct {
    skv_strref *toks;
    float *scores;
    int32_t *types;
    size_t n;
} vocab_w;

static void vw_add(vocab_w *w, const char *text, size_t len, float score, int32_t type)
{
    w->toks[w->n] = (skv_strref){text, len};
    w->scores[w->n] = score;
    w->types[w->n++] = type;
}

/* A small SPM vocabulary built here: specials, all 256 byte tokens, a few
 * pieces (also with spaces inside tokens, to exercise the segmentation). */
static skv_tokenizer *builtin_spm(int with_bytes, int unk)
{
    static const struct {
        const char *text;
        float score;
    } pieces[] = {
        {"\xe2\x96\x81", -1}, {"a", -2}, {"b", -2}, {"c", -2}, {"\xe2\x96\x81" "a", -3},
        {"ab", -4}, {"\xe2\x96\x81" "ab", -5}, {"bc", -5}, {"abc", -6}, {"\xe2\x96\x81\xe2\x96\x81", -7},
        {"c\xe2\x96\x81", -8}, {"\xc3\xa9", -3}, {"\xc3\xa9" "a", -4}, {"\xe2\x96\x81" "b", -6},
        {"a\xe2\x96\x81" "b", -9}, {"x", -3}, {"xx", -3}, {"xxxx", -3}, {"\n", -3},
    };
    enum { NP = sizeof pieces / sizeof pieces[0] };
    skv_strref toks[3 + 256 + NP];
    float scores[3 + 256 + NP];
    int32_t types[3 + 256 + NP];
    char bytes[256][8];
    vocab_w w = {toks, scores, types, 0};
    skv_tokenizer_desc d;
    skv_tokenizer *t = NULL;
    skv_err err = {0};
    vw_add(&w, "<unk>", 5, 0, SKV_TOKEN_TYPE_UNKNOWN);
    vw_add(&w, "<s>", 3, 0, SKV_TOKEN_TYPE_CONTROL);
    vw_add(&w, "</s>", 4, 0, SKV_TOKEN_TYPE_CONTROL);
    for (int b = 0; with_bytes && b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        vw_add(&w, bytes[b], 6, 0, SKV_TOKEN_TYPE_BYTE);
    }
    for (size_t i = 0; i < NP; i++)
        vw_add(&w, pieces[i].text, strlen(pieces[i].text), pieces[i].score, SKV_TOKEN_TYPE_NORMAL);
    d = vocab_desc(SKV_TOKENIZER_SPM, w.n, toks, scores, types, 1, 2, unk ? 0 : -1);
    if (skv_tokenizer_create(&d, &t, &err) != SKV_OK) {
        fprintf(stderr, "builtin_spm: %s\n", err.msg);
        return NULL;
    }
    return t;
}

static const char *const PRES[] = {"default", "gpt2", "llama3", "qwen2", "smollm"}; /* skv_pretok order */
enum { N_PRES = sizeof PRES / sizeof PRES[0] };

/* Random text: ASCII words, UTF-8 letters, emoji, digits, whitespace runs,
 * and (if invalid) stray bytes. */
static size_t random_text(char *buf, size_t cap, int invalid)
{
    static const char *const atoms[] = {
        "a", "b", "c", "x", "the", "Once", " ", " ", "  ", "\n", "\t", "\r\n", ".", ",", "'s", "'T", "'re",
        "0", "12", "345", "\xc3\xa9", "\xce\xb1", "\xd0\xb6", "\xe6\x97\xa5", "\xf0\x9f\x98\x80", "\xe2\x80\x94",
        "\xc2\xa0", "\xe3\x80\x80", "\xd9\xa1", "\xe2\x85\xab", "<tool>", "ool>", "\xe2\x96\x81", "<s>", "abc",
        "\xe2\x96\x81\xe2\x96\x81", "c ", "zebra",
    };
    size_t n = 0, target = 1 + rnd() % (cap > 64 ? 64 : cap);
    while (n < target) {
        const char *a = atoms[rnd() % (sizeof atoms / sizeof atoms[0])];
        size_t l = strlen(a);
        if (invalid && rnd() % 8 == 0) {
            static const unsigned char bad[] = {0x80, 0xBF, 0xC3, 0xE2, 0xF0, 0xFF, 0xC0, 0xED, 0xF5};
            if (n + 1 > cap) break;
            buf[n++] = (char)bad[rnd() % sizeof bad];
            continue;
        }
        if (n + l > cap) break;
        memcpy(buf + n, a, l);
        n += l;
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* expected ids from the Python reference                                    */

static int run_expected(const char *prefix, skv_tokenizer *(*get)(const char *cfg), size_t *checked, char *why,
                        size_t whycap)
{
    size_t n, count = 0;
    char *buf = slurp(DATA_DIR "expected.txt", &n), *line, *save = NULL;
    int ok = 1;
    if (!buf) {
        snprintf(why, whycap, "cannot read " DATA_DIR "expected.txt");
        return 0;
    }
    for (line = strtok_r(buf, "\n", &save); line && ok; line = strtok_r(NULL, "\n", &save)) {
        char *cfg = line, *add, *hex, *ids, *p;
        char *text;
        size_t tl, got_n;
        int32_t *got;
        skv_tokenizer *t;
        if (line[0] == '#' || strncmp(line, prefix, strlen(prefix)) != 0) continue;
        if (!(add = strchr(cfg, '\t')) || !(hex = strchr(add + 1, '\t')) || !(ids = strchr(hex + 1, '\t'))) continue;
        *add++ = 0;
        *hex++ = 0;
        *ids++ = 0;
        t = get(cfg);
        text = unhex(hex, strlen(hex), &tl);
        if (!t || !text) {
            snprintf(why, whycap, "bad line or tokenizer for %s", cfg);
            free(text);
            ok = 0;
            break;
        }
        if (enc(t, text, tl, atoi(add) ? SKV_TOKENIZER_ADD_SPECIAL : 0, &got, &got_n) != SKV_OK) {
            snprintf(why, whycap, "%s: encode failed for %s", cfg, hex);
            ok = 0;
        } else {
            size_t k = 0;
            p = ids;
            if (strcmp(p, "-") == 0) p++;
            else {
                while (*p) {
                    long v = strtol(p, &p, 10);
                    if (k >= got_n || got[k] != v) break;
                    k++;
                    while (*p == ' ') p++;
                }
            }
            if (*p || k != got_n) {
                snprintf(why, whycap, "%s add=%s text %s: expected [%s], got %zu ids (first mismatch at %zu)", cfg,
                         add, hex, ids, got_n, k);
                ok = 0;
            }
        }
        free(got);
        free(text);
        count++;
    }
    free(buf);
    *checked = count;
    return ok;
}

static skv_tokenizer *g_tok512, *g_bpe[N_PRES];

static skv_tokenizer *get_spm(const char *cfg)
{
    (void)cfg;
    return g_tok512;
}

static skv_tokenizer *get_bpe(const char *cfg)
{
    const char *pre = strchr(cfg, ':');
    for (int i = 0; pre && i < N_PRES; i++)
        if (strcmp(pre + 1, PRES[i]) == 0) return g_bpe[i];
    return NULL;
}

static void test_expected_spm_tok512(void)
{
    char why[512];
    size_t n1 = 0, n2 = 0;
    if (!g_tok512) SKIP("no ../shared/models/stories260K/tok512.bin");
    CHECK_MSG(run_expected("spm-tok512", get_spm, &n1, why, sizeof why), "%s", why);
    CHECK_MSG(run_expected("llama2c-tok512", get_spm, &n2, why, sizeof why), "%s", why);
    CHECK(n1 >= 40 && n2 >= 10);
}

static void test_expected_gpt2(void)
{
    char why[512];
    size_t n = 0;
    for (int i = 0; i < N_PRES; i++) CHECK_MSG(g_bpe[i], "cannot load " DATA_DIR "bpe.tokdesc with pre %s", PRES[i]);
    CHECK_MSG(run_expected("gpt2:", get_bpe, &n, why, sizeof why), "%s", why);
    CHECK(n >= 5 * 40);
}

/* "Once upon a time" -> BOS, dummy-prefix merges, as llama2.c's encoder. */
static void test_once_upon_a_time(void)
{
    static const int32_t want[] = {1, 403, 407, 261, 378};
    int32_t *ids;
    size_t n;
    if (!g_tok512) SKIP("no ../shared/models/stories260K/tok512.bin");
    CHECK_EQ_INT(enc(g_tok512, "Once upon a time", 16, SKV_TOKENIZER_ADD_SPECIAL, &ids, &n), SKV_OK);
    CHECK_EQ_INT(n, 5);
    for (size_t i = 0; i < n; i++) CHECK_EQ_INT(ids[i], want[i]);
    free(ids);
}

static void test_tok512_vocab(void)
{
    size_t len;
    const char *s;
    skv_tokenizer *t = g_tok512;
    if (!t) SKIP("no ../shared/models/stories260K/tok512.bin");
    CHECK_EQ_INT(skv_tokenizer_n_vocab(t), 512);
    CHECK_EQ_INT(skv_tokenizer_kind(t), SKV_TOKENIZER_SPM);
    CHECK_EQ_INT(skv_tokenizer_bos(t), 1);
    CHECK_EQ_INT(skv_tokenizer_eos(t), 2);
    CHECK_EQ_INT(skv_tokenizer_unk(t), 0);
    CHECK_EQ_INT(skv_tokenizer_add_bos(t), 1);
    CHECK_EQ_INT(skv_tokenizer_add_eos(t), 0);
    CHECK_EQ_INT(skv_tokenizer_token_type(t, 0), SKV_TOKEN_TYPE_UNKNOWN);
    CHECK_EQ_INT(skv_tokenizer_token_type(t, 1), SKV_TOKEN_TYPE_CONTROL);
    CHECK_EQ_INT(skv_tokenizer_token_type(t, 3), SKV_TOKEN_TYPE_BYTE);
    CHECK_EQ_INT(skv_tokenizer_token_type(t, 300), SKV_TOKEN_TYPE_NORMAL);
    s = skv_tokenizer_token_text(t, 1, &len);
    CHECK(s && len == 3 && memcmp(s, "<s>", 3) == 0);
    s = skv_tokenizer_token_text(t, 259, &len);
    CHECK(s && len == 4 && memcmp(s, "\xe2\x96\x81t", 4) == 0);
    CHECK(skv_tokenizer_token_text(t, 512, &len) == NULL);
}

/* ------------------------------------------------------------------------ */
/* round trips                                                              */

/* What SPM pieces give back for text: " " + text with spaces escaped to
 * U+2581 and split into characters like the encoder does; whole U+2581
 * characters read back as ' ', everything else as its bytes. A dangling lead
 * byte before a space swallows part of its U+2581, whose bytes then come back
 * raw: llama.cpp does the same. */
static size_t spm_expected(const char *text, size_t n, char *out)
{
    char *x = malloc(3 * n + 3);
    size_t m = 0, o = 0;
    if (!x) return 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == 0 || text[i - 1] == ' ') memcpy(x + m, "\xe2\x96\x81", 3), m += 3;
        else x[m++] = text[i - 1];
    }
    for (size_t pos = 0, cl; pos < m; pos += cl) {
        cl = skv_utf8_seq_len((uint8_t)x[pos]);
        if (cl > m - pos) cl = m - pos;
        if (cl == 3 && memcmp(x + pos, "\xe2\x96\x81", 3) == 0) out[o++] = ' ';
        else memcpy(out + o, x + pos, cl), o += cl;
    }
    free(x);
    return o;
}

/* SPM: pieces of encode(text) == spm_expected(text), for any bytes (byte
 * fallback); for text without stray bytes that is " " + text. */
static int spm_roundtrip(const skv_tokenizer *t, int iters, char *why, size_t whycap)
{
    char text[300], want[1000];
    for (int it = 0; it < iters; it++) {
        size_t n = (it % 3 == 2) ? (size_t)(rnd() % 200) : random_text(text, sizeof text, it % 3 == 1), len, wn;
        int32_t *ids;
        size_t n_ids;
        char *back;
        if (it % 3 == 2)
            for (size_t i = 0; i < n; i++) text[i] = (char)rnd();
        if (enc(t, text, n, 0, &ids, &n_ids) != SKV_OK) {
            snprintf(why, whycap, "encode failed");
            return 0;
        }
        back = detok(t, ids, n_ids, &len);
        wn = n ? spm_expected(text, n, want) : 0;
        if (!back || len != wn || memcmp(back, want, len) != 0) {
            snprintf(why, whycap, "round trip failed at iteration %d (len %zu -> %zu, want %zu)", it, n, len, wn);
            free(back);
            free(ids);
            return 0;
        }
        free(back);
        free(ids);
    }
    return 1;
}

static void test_spm_roundtrip(void)
{
    char why[256];
    skv_tokenizer *t = builtin_spm(1, 1);
    CHECK(t);
    CHECK_MSG(spm_roundtrip(t, 600, why, sizeof why), "builtin: %s", why);
    skv_tokenizer_free(t);
    if (!g_tok512) SKIP("no ../shared/models/stories260K/tok512.bin (builtin vocabulary passed)");
    CHECK_MSG(spm_roundtrip(g_tok512, 600, why, sizeof why), "tok512: %s", why);
}

/* What llama.cpp turns a byte string into before byte-level BPE: its lax
 * UTF-8 decode, re-encoded (invalid bytes become U+FFFD). */
static size_t lax_normalize(const char *s, size_t n, char *out)
{
    size_t m = 0;
    for (size_t i = 0, adv; i < n; i += adv)
        m += skv_utf8_encode(skv_utf8_decode((const uint8_t *)s + i, n - i, &adv), (uint8_t *)out + m);
    return m;
}

static void test_gpt2_roundtrip(void)
{
    char text[300], want[1000];
    for (int p = 0; p < N_PRES; p++) {
        CHECK(g_bpe[p]);
        for (int it = 0; it < 400; it++) {
            size_t n = random_text(text, sizeof text, it % 2), wn = lax_normalize(text, n, want), len, n_ids;
            int32_t *ids;
            char *back;
            CHECK_EQ_INT(enc(g_bpe[p], text, n, 0, &ids, &n_ids), SKV_OK);
            back = detok(g_bpe[p], ids, n_ids, &len);
            CHECK_MSG(back && len == wn && memcmp(back, want, wn) == 0, "pre %s iteration %d", PRES[p], it);
            free(back);
            free(ids);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* fast paths == reference paths                                            */

static int same_ids(const skv_tokenizer *t, const char *s, size_t n, int naive)
{
    int32_t *a = NULL, *b = NULL;
    size_t na, nb;
    int ok = enc(t, s, n, 0, &a, &na) == SKV_OK && enc(t, s, n, SKV_TOKENIZER_NO_SEGMENT, &b, &nb) == SKV_OK &&
             na == nb && memcmp(a, b, na * sizeof *a) == 0;
    free(b);
    if (ok && naive) {
        ok = enc(t, s, n, SKV_TOKENIZER_NAIVE | SKV_TOKENIZER_NO_SEGMENT, &b, &nb) == SKV_OK && na == nb &&
             memcmp(a, b, na * sizeof *a) == 0;
        free(b);
    }
    free(a);
    return ok;
}

/* Long text: n random atoms, so that segments and blocks get cut. */
static size_t long_text(char *buf, size_t cap, int invalid)
{
    size_t n = 0;
    while (n + 300 < cap) n += random_text(buf + n, 300, invalid);
    return n;
}

static void test_reference_paths_agree(void)
{
    enum { CAP = 24000 };
    char *text = malloc(CAP);
    skv_tokenizer *spm = builtin_spm(1, 1);
    skv_tokenizer *all[2 + N_PRES];
    CHECK(text && spm);
    all[0] = spm;
    all[1] = g_tok512;
    for (int i = 0; i < N_PRES; i++) all[2 + i] = g_bpe[i];
    for (int k = 0; k < 2 + N_PRES; k++) {
        if (!all[k]) continue;
        for (int it = 0; it < 300; it++) {
            size_t n = random_text(text, 300, it % 2);
            CHECK_MSG(same_ids(all[k], text, n, 1), "tokenizer %d short text %d", k, it);
        }
        for (int it = 0; it < 4; it++) {
            size_t n = long_text(text, CAP, it % 2);
            CHECK_MSG(same_ids(all[k], text, n, 0), "tokenizer %d long text %d", k, it);
            n = long_text(text, 2500, it % 2); /* the naive path is quadratic */
            CHECK_MSG(same_ids(all[k], text, n, 1), "tokenizer %d medium text %d", k, it);
        }
    }
    skv_tokenizer_free(spm);
    free(text);
}

/* A megabyte without spaces, and one of spaces: linear time and memory (no
 * quadratic blow-up), and still a round trip. */
static void test_long_inputs(void)
{
    size_t n = 1 << 20, len, n_ids;
    char *text = malloc(n), *back;
    int32_t *ids;
    skv_tokenizer *spm = builtin_spm(1, 1);
    const skv_tokenizer *all[3] = {spm, g_bpe[0], g_bpe[2]};
    CHECK(text && spm);
    for (int pattern = 0; pattern < 3; pattern++) {
        for (size_t i = 0; i < n; i++)
            text[i] = pattern == 0 ? "abcx"[rnd() % 4] : pattern == 1 ? ' ' : (char)('a' + rnd() % 26);
        for (int k = 0; k < 3; k++) {
            CHECK_EQ_INT(enc(all[k], text, n, 0, &ids, &n_ids), SKV_OK);
            back = detok(all[k], ids, n_ids, &len);
            if (k == 0) CHECK(back && len == n + 1 && memcmp(back + 1, text, n) == 0);
            else CHECK(back && len == n && memcmp(back, text, n) == 0);
            free(back);
            free(ids);
        }
    }
    skv_tokenizer_free(spm);
    free(text);
}

/* ------------------------------------------------------------------------ */
/* pre-tokenizer splits                                                     */

/* Splits text with a pre-tokenizer; pieces joined by '|'. */
static void split_str(skv_pretok kind, const char *text, char *out, size_t cap)
{
    uint32_t cps[256];
    uint8_t cls[256];
    size_t lens[256], tmp[256], n = 0, len = strlen(text), k, o = 0, at = 0;
    for (size_t i = 0, adv; i < len && n < 256; i += adv) {
        cps[n] = skv_utf8_decode((const uint8_t *)text + i, len - i, &adv);
        cls[n] = skv_unicode_class(cps[n]);
        n++;
    }
    k = skv_unicode_pretokenize(kind, cps, cls, n, lens, tmp);
    for (size_t w = 0; w < k; w++) {
        if (w && o + 1 < cap) out[o++] = '|';
        for (size_t j = 0; j < lens[w]; j++) {
            uint8_t u[4];
            size_t m = skv_utf8_encode(cps[at + j], u);
            if (o + m < cap) memcpy(out + o, u, m), o += m;
        }
        at += lens[w];
    }
    out[o] = 0;
}

static void test_pretokenizer_splits(void)
{
    static const struct {
        skv_pretok kind;
        const char *text, *want;
    } cases[] = {
        {SKV_PRETOK_GPT2, "it's they're I'M 'sand", "it|'s| they|'re| I|'|M| '|sand"},
        {SKV_PRETOK_LLAMA3, "it's they're I'M 'sand", "it|'s| they|'re| I|'M| '|sand"},
        {SKV_PRETOK_QWEN2, "I'VE we'll", "I|'VE| we|'ll"},
        {SKV_PRETOK_GPT2, "a   b\n\n c  ", "a|  | b|\n\n| c|  "},
        {SKV_PRETOK_LLAMA3, "a   b\n\n c  ", "a|  | b|\n\n| c|  "},
        {SKV_PRETOK_LLAMA3, "x  \n\t y", "x|  \n|\t| y"},
        {SKV_PRETOK_GPT2, "x  \n\t y", "x|  \n\t| y"},
        {SKV_PRETOK_GPT2, "12345 x1y", "12345| x|1|y"},
        {SKV_PRETOK_LLAMA3, "12345 x1y", "123|45| x|1|y"},
        {SKV_PRETOK_QWEN2, "1234", "1|2|3|4"},
        {SKV_PRETOK_SMOLLM, "a 123b", "a| |1|2|3|b"},
        {SKV_PRETOK_DEFAULT, "1234567 $x+y!!", "123|456|7| |$|x|+|y|!!"},
        {SKV_PRETOK_DEFAULT, "a,b.c `d`", "a|,|b|.|c| `|d|`"},
        {SKV_PRETOK_GPT2, "\xd0\x9f\xd1\x80\xd0\xb8 \xe6\x97\xa5\xe6\x9c\xac!",
         "\xd0\x9f\xd1\x80\xd0\xb8| \xe6\x97\xa5\xe6\x9c\xac|!"},
        {SKV_PRETOK_LLAMA3, "\xe2\x80\x94word \xf0\x9f\x98\x80\xf0\x9f\x98\x80!\n\nx",
         "\xe2\x80\x94word| \xf0\x9f\x98\x80\xf0\x9f\x98\x80!\n\n|x"},
        {SKV_PRETOK_GPT2, "\xf0\x9f\x98\x80 \xf0\x9f\x98\x80" "a", "\xf0\x9f\x98\x80| \xf0\x9f\x98\x80|a"},
        {SKV_PRETOK_LLAMA3, "na\xc3\xafve \xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4", "na\xc3\xafve| |\xd9\xa1\xd9\xa2\xd9\xa3|\xd9\xa4"},
        {SKV_PRETOK_GPT2, "a\xc2\xa0\xc2\xa0" "b", "a|\xc2\xa0|\xc2\xa0|b"}, /* " ?" is U+0020 only */
        {SKV_PRETOK_LLAMA3, "a\xc2\xa0" "b", "a|\xc2\xa0" "b"},
        {SKV_PRETOK_GPT2, "x   ", "x|   "},
        {SKV_PRETOK_LLAMA3, "hello\r\n\r\nworld", "hello|\r\n\r\n|world"},
        {SKV_PRETOK_FALCON, "a,b.c `d`", "a|,|b|.|c| |`|d|`"}, /* '`' is punctuation here */
        {SKV_PRETOK_FALCON, "1234567 x", "123|456|7| x"},
        {SKV_PRETOK_QWEN2, "cafe\xcc\x81s!", "cafe|\xcc\x81s|!"},
        {SKV_PRETOK_QWEN35, "cafe\xcc\x81s!", "cafe\xcc\x81s|!"}, /* marks stay in the word */
        {SKV_PRETOK_DEEPSEEK_LLM, "jw\xc5\x82\xc3\xa7r", "jw|\xc5\x82\xc3\xa7|r"},
        {SKV_PRETOK_DEEPSEEK_LLM, "ab  \n", "ab|  |\n"},
        {SKV_PRETOK_DEEPSEEK_LLM, "x \xe3\x80\x80" "y", "x| |\xe3\x80\x80" "y"},
        {SKV_PRETOK_DEEPSEEK_CODER, "a\r\nb\xe4\xb8\xad\xe6\x96\x87" "12",
         "a|\r|\n|b|\xe4\xb8\xad\xe6\x96\x87|1|2"},
    };
    char got[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        split_str(cases[i].kind, cases[i].text, got, sizeof got);
        CHECK_MSG(strcmp(got, cases[i].want) == 0, "case %zu: got \"%s\", want \"%s\"", i, got, cases[i].want);
    }
}

/* ------------------------------------------------------------------------ */
/* hostile input                                                            */

static int try_create(skv_tokenizer_desc *d, skv_err *err)
{
    skv_tokenizer *t = (skv_tokenizer *)(uintptr_t)1;
    int rc = skv_tokenizer_create(d, &t, err);
    if (rc == SKV_OK) skv_tokenizer_free(t);
    else if (t != NULL) return 1; /* *out must be NULL on failure */
    return rc;
}

static void test_create_rejects(void)
{
    skv_strref toks[4] = {{"a", 1}, {"b", 1}, {"ab", 2}, {"<s>", 3}};
    skv_strref merges[2] = {{"a b", 3}, {"a zz", 4}};
    skv_strref dup[2] = {{"a", 1}, {"a", 1}};
    skv_strref bad_merge[1] = {{"ab", 2}};
    skv_tokenizer_desc d = merges_desc(4, toks, 1, merges);
    skv_err err = {0};
    d.bos_id = d.eos_id = 3;
    CHECK_EQ_INT(try_create(&d, &err), SKV_OK);

    d.n_vocab = 0;
    CHECK_EQ_INT(try_create(&d, &err), SKV_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "n_vocab"));
    d.n_vocab = 4;
    d.tokens = NULL;
    CHECK_EQ_INT(try_create(&d, &err), SKV_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "tokens"));
    d.tokens = toks;
    d.bos_id = 4;
    CHECK_EQ_INT(try_create(&d, &err), SKV_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "bos_id"));
    d.bos_id = -7;
    CHECK_EQ_INT(try_create(&d, &err), SKV_ERR_INVALID_ARG);
    d.bos_id = 3;
    d.n_merges = 2;
    CHECK_EQ_INT(try_create(&d, &err), SKV_ERR_FORMAT);
    CHECK(strstr(err.msg, "merge 1") && strstr(err.msg, "not in the vocabulary"));
    d.merges = bad_merge;
    d.n_merges = 1;
    CHECK_EQ_INT(try_create(&d, &err), SKV_ERR_FORMAT);
    CHECK(strstr(err.msg, "\"a b\""));
    d.merges = NULL;
    CHECK_EQ_INT(try_create(&d, &err), SKV_ERR_INVALID_ARG);
    d.merges = merges;
    d.pre = "no-such-pre";
    CHECK_EQ_INT(try_create(&d, &err), SKV_ERR_UNSUPPORTED);
    CHECK(strstr(err.msg, "no-such-pre"));
    d.pre = "llama-bpe"; /* adds BOS by default: needs one */
    d.bos_id = -1;
    CHECK_EQ_INT(try_create(&d, &err), SKV_ERR_FORMAT);
    CHECK(strstr(err.msg, "add_bos"));
    d.add_bos = 0;
    CHECK_EQ_INT(try_create(&d, &err), SKV_OK);
    d.add_bos = 2;
    CHECK_EQ_INT(try_create(&d, &err), SKV_ERR_INVALID_ARG);
    d.add_bos = -1;
    d.pre = NULL;
    d.kind = 7;
    CHECK_EQ_INT(try_create(&d, &err), SKV_ERR_UNSUPPORTED);
    d.kind = SKV_TOKENIZER_SPM; /* SPM default: BOS 1 ("b"), EOS 2, UNK 0 */
    d.bos_id = d.eos_id = d.unk_id = SKV_TOKEN_DEFAULT;
    CHECK_EQ_INT(try_create(&d, &err), SKV_OK);
    d.tokens = dup;
    d.n_vocab = 2;
    d.bos_id = d.eos_id = d.unk_id = -1;
    d.add_bos = 0;
    CHECK_EQ_INT(try_create(&d, &err), SKV_ERR_FORMAT);
    CHECK(strstr(err.msg, "duplicate"));
    toks[1].ptr = NULL;
    d.tokens = toks;
    d.n_vocab = 4;
    CHECK_EQ_INT(try_create(&d, &err), SKV_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "token 1"));
    toks[1].len = 0; /* empty text: llama.cpp's "[EMPTY_1]" */
    CHECK_EQ_INT(try_create(&d, &err), SKV_OK);
    CHECK_EQ_INT(skv_tokenizer_create(NULL, NULL, &err), SKV_ERR_INVALID_ARG);
}

static void put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static void test_llama2c_rejects(void)
{
    unsigned char f[64];
    skv_tokenizer *t = NULL;
    char path[1024], *buf;
    skv_err err = {0};
    size_t n;
    /* three tokens: "<unk>", "<s>", "</s>" style */
    put_u32(f, 5);
    for (int i = 0; i < 3; i++) {
        put_u32(f + 4 + 12 * i, 0);
        put_u32(f + 8 + 12 * i, 4);
        memcpy(f + 12 + 12 * i, "abcd", 4);
        f[12 + 12 * i] = (unsigned char)('a' + i);
    }
    CHECK_EQ_INT(skv_tokenizer_load_llama2c(f, 40, 3, &t, &err), SKV_OK);
    skv_tokenizer_free(t);
    for (size_t cut = 0; cut < 40; cut++) {
        CHECK_MSG(skv_tokenizer_load_llama2c(f, cut, 3, &t, &err) != SKV_OK && t == NULL,
                  "truncated to %zu accepted", cut);
    }
    CHECK_EQ_INT(skv_tokenizer_load_llama2c(f, 40, 4, &t, &err), SKV_ERR_FORMAT);
    CHECK_EQ_INT(skv_tokenizer_load_llama2c(f, 40, (size_t)1 << 60, &t, &err), SKV_ERR_FORMAT);
    CHECK_EQ_INT(skv_tokenizer_load_llama2c(f, 40, 0, &t, &err), SKV_ERR_FORMAT);
    put_u32(f + 8, 0x80000000u); /* negative length */
    CHECK_EQ_INT(skv_tokenizer_load_llama2c(f, 40, 3, &t, &err), SKV_ERR_FORMAT);
    put_u32(f + 8, 4);
    put_u32(f, 3); /* token longer than max_token_length */
    CHECK_EQ_INT(skv_tokenizer_load_llama2c(f, 40, 3, &t, &err), SKV_ERR_FORMAT);
    CHECK(strstr(err.msg, "max_token_length"));
    put_u32(f, 0xFFFFFFFFu);
    CHECK_EQ_INT(skv_tokenizer_load_llama2c(f, 40, 3, &t, &err), SKV_ERR_FORMAT);
    CHECK_EQ_INT(skv_tokenizer_load_llama2c(NULL, 10, 3, &t, &err), SKV_ERR_INVALID_ARG);
    /* the real file: every truncation short of the 512 tokens is rejected */
    if (!test_stories_path(path, sizeof path, "tok512.bin") || !(buf = slurp(path, &n)))
        SKIP("no ../shared/models/stories260K/tok512.bin (synthetic files passed)");
    for (size_t cut = 0; cut < n; cut += 1 + cut / 16)
        CHECK_MSG(skv_tokenizer_load_llama2c(buf, cut, 512, &t, &err) == SKV_ERR_FORMAT,
                  "tok512.bin truncated to %zu accepted", cut);
    CHECK_EQ_INT(skv_tokenizer_load_llama2c(buf, n, 513, &t, &err), SKV_ERR_FORMAT);
    CHECK_EQ_INT(skv_tokenizer_load_llama2c(buf, n, 100, &t, &err), SKV_OK); /* a prefix vocabulary */
    skv_tokenizer_free(t);
    free(buf);
}

/* ------------------------------------------------------------------------ */
/* API behaviour                                                            */

static void test_encode_api(void)
{
    skv_tokenizer *t = builtin_spm(1, 1);
    int32_t out[64], all[64];
    size_t n = 0, m = 0;
    CHECK(t);
    /* empty text: [BOS] with add_special, nothing without */
    CHECK_EQ_INT(skv_tokenizer_encode(t, "", 0, 1, out, 64, &n), SKV_OK);
    CHECK(n == 1 && out[0] == 1);
    CHECK_EQ_INT(skv_tokenizer_encode(t, NULL, 0, 0, NULL, 0, &n), SKV_OK);
    CHECK_EQ_INT(n, 0);
    /* capacity: counting, partial output, SKV_ERR_RANGE */
    CHECK_EQ_INT(skv_tokenizer_encode(t, "abc abc", 7, 1, all, 64, &m), SKV_OK);
    CHECK(m >= 3);
    CHECK_EQ_INT(skv_tokenizer_encode(t, "abc abc", 7, 1, NULL, 0, &n), SKV_ERR_RANGE);
    CHECK_EQ_INT(n, m);
    memset(out, 0x7F, sizeof out);
    CHECK_EQ_INT(skv_tokenizer_encode(t, "abc abc", 7, 1, out, 2, &n), SKV_ERR_RANGE);
    CHECK(n == m && out[0] == all[0] && out[1] == all[1] && out[2] == 0x7F7F7F7F);
    CHECK_EQ_INT(skv_tokenizer_encode(t, "abc abc", 7, 1, out, m, &n), SKV_OK);
    CHECK(memcmp(out, all, m * sizeof *out) == 0);
    /* bad arguments */
    CHECK_EQ_INT(skv_tokenizer_encode(NULL, "a", 1, 0, out, 64, &n), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_tokenizer_encode(t, NULL, 1, 0, out, 64, &n), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_tokenizer_encode(t, "a", 1, 0, NULL, 4, &n), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_tokenizer_encode(t, "a", 1, 0, out, 64, NULL), SKV_ERR_INVALID_ARG);
    /* control tokens in the text are plain text */
    CHECK_EQ_INT(skv_tokenizer_encode(t, "<s>", 3, 0, out, 64, &n), SKV_OK);
    for (size_t i = 0; i < n; i++) CHECK(out[i] != 1);
    skv_tokenizer_free(t);
    /* GPT2 BOS rules: default pre adds none, llama3 adds BOS */
    CHECK_EQ_INT(skv_tokenizer_add_bos(g_bpe[0]), 0);
    CHECK_EQ_INT(skv_tokenizer_add_bos(g_bpe[2]), 1);
    CHECK_EQ_INT(skv_tokenizer_encode(g_bpe[2], "hi", 2, 1, out, 64, &n), SKV_OK);
    CHECK(n >= 2 && out[0] == skv_tokenizer_bos(g_bpe[2]));
    CHECK_EQ_INT(skv_tokenizer_encode(g_bpe[0], "hi", 2, 1, out, 64, &n), SKV_OK);
    CHECK(n >= 1 && out[0] != skv_tokenizer_bos(g_bpe[0]));
}

/* GPT-2's bytes_to_unicode: printable bytes map to themselves, the other 68
 * in order to U+0100..U+0143; and back. */
static void test_byte_level_map(void)
{
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        uint32_t want = printable ? (uint32_t)b : next++;
        CHECK_EQ_INT(skv_unicode_byte_to_cp((uint8_t)b), want);
        CHECK_EQ_INT(skv_unicode_cp_to_byte(want), b);
    }
    CHECK_EQ_INT(next, 256 + 68);
    CHECK_EQ_INT(skv_unicode_cp_to_byte(0x20), -1);
    CHECK_EQ_INT(skv_unicode_cp_to_byte(0xAD), -1);
    CHECK_EQ_INT(skv_unicode_cp_to_byte(256 + 68), -1);
}

/* Equal scores / equal ranks: the leftmost pair merges first. */
static void test_ties_go_left(void)
{
    skv_tokenizer *t = builtin_spm(1, 1);
    int32_t out[16];
    size_t n;
    const int32_t sep = 3 + 256, x = sep + 15, xx = x + 1, xxxx = x + 2;
    CHECK(t);
    CHECK_EQ_INT(skv_tokenizer_encode(t, "xxx", 3, 0, out, 16, &n), SKV_OK);
    CHECK(n == 3 && out[0] == sep && out[1] == xx && out[2] == x);
    CHECK_EQ_INT(skv_tokenizer_encode(t, "xxxxx", 5, 0, out, 16, &n), SKV_OK);
    CHECK(n == 3 && out[0] == sep && out[1] == xxxx && out[2] == x);
    skv_tokenizer_free(t);
    {
        skv_strref toks[2] = {{"a", 1}, {"aa", 2}};
        skv_strref merges[1] = {{"a a", 3}};
        skv_tokenizer_desc d = merges_desc(2, toks, 1, merges);
        skv_err err = {0};
        CHECK_EQ_INT(skv_tokenizer_create(&d, &t, &err), SKV_OK);
        CHECK_EQ_INT(skv_tokenizer_encode(t, "aaa", 3, 0, out, 16, &n), SKV_OK);
        CHECK(n == 2 && out[0] == 1 && out[1] == 0);
        skv_tokenizer_free(t);
    }
}

static void test_piece_api(void)
{
    skv_tokenizer *t = builtin_spm(1, 1);
    char buf[16];
    size_t len = 99;
    CHECK(t);
    CHECK_EQ_INT(skv_tokenizer_piece(t, 1, buf, sizeof buf, &len), 0); /* <s>: control */
    CHECK_EQ_INT(len, 0);
    CHECK_EQ_INT(skv_tokenizer_piece(t, 0, buf, sizeof buf, &len), 0); /* <unk> */
    CHECK_EQ_INT(skv_tokenizer_piece(t, 3 + 0x41, buf, sizeof buf, &len), 1);
    CHECK(buf[0] == 'A');
    CHECK_EQ_INT(skv_tokenizer_piece(t, 3 + 0xFF, buf, sizeof buf, &len), 1);
    CHECK((unsigned char)buf[0] == 0xFF);
    CHECK_EQ_INT(skv_tokenizer_piece(t, 3 + 256 + 6, buf, sizeof buf, &len), 3); /* "\u2581ab" */
    CHECK(memcmp(buf, " ab", 3) == 0);
    CHECK_EQ_INT(skv_tokenizer_piece(t, 3 + 256 + 6, buf, 2, &len), SKV_ERR_RANGE);
    CHECK_EQ_INT(len, 3);
    CHECK_EQ_INT(skv_tokenizer_piece(t, 3 + 256 + 6, NULL, 0, &len), SKV_ERR_RANGE);
    CHECK_EQ_INT(skv_tokenizer_piece(t, -1, buf, sizeof buf, &len), SKV_ERR_INVALID_ARG);
    CHECK_EQ_INT(skv_tokenizer_piece(t, 100000, buf, sizeof buf, &len), SKV_ERR_INVALID_ARG);
    skv_tokenizer_free(t);
    /* GPT2: byte-level characters back to bytes; control and unused empty */
    t = g_bpe[0];
    {
        size_t tl;
        const char *txt;
        int32_t ctl = skv_tokenizer_bos(t), unused = (int32_t)skv_tokenizer_n_vocab(t) - 1;
        txt = skv_tokenizer_token_text(t, unused, &tl);
        CHECK(txt && tl == 10 && memcmp(txt, "<|unused|>", 10) == 0);
        CHECK_EQ_INT(skv_tokenizer_piece(t, unused, buf, sizeof buf, &len), 0);
        CHECK_EQ_INT(skv_tokenizer_piece(t, ctl, buf, sizeof buf, &len), 0);
        CHECK_EQ_INT(skv_tokenizer_piece(t, 0x41, buf, sizeof buf, &len), 1); /* id 0x41: byte 'A' */
        CHECK(buf[0] == 'A');
        CHECK_EQ_INT(skv_tokenizer_piece(t, 0x0A, buf, sizeof buf, &len), 1); /* "\u010a" -> '\n' */
        CHECK(buf[0] == '\n');
    }
}

/* User-defined tokens are cut out first (also inside words); control ones
 * (including text-detected ones such as "<|im_end|>") are not. */
static void test_user_defined_and_fixups(void)
{
    skv_strref toks[8] = {{"<unk>", 5}, {"<s>", 3}, {"</s>", 4}, {"<tool>", 6},
                          {"<|im_end|>", 10}, {"\xe2\x96\x81", 3}, {"x", 1}, {"\xe2\x96\x81x", 4}};
    int32_t types[8] = {2, 3, 3, 4, 4, 1, 1, 1};
    float scores[8] = {0, 0, 0, 0, 0, -1, -1, -0.5f};
    skv_tokenizer_desc d = vocab_desc(SKV_TOKENIZER_SPM, 8, toks, scores, types, 1, 2, 0);
    skv_tokenizer *t;
    int32_t out[32];
    size_t n;
    skv_err err = {0};
    CHECK_EQ_INT(skv_tokenizer_create(&d, &t, &err), SKV_OK);
    CHECK_EQ_INT(skv_tokenizer_token_type(t, 3), SKV_TOKEN_TYPE_USER_DEFINED);
    CHECK_EQ_INT(skv_tokenizer_token_type(t, 4), SKV_TOKEN_TYPE_CONTROL); /* llama.cpp's EOG list */
    /* "x<tool>x": [x] <tool> [x], each text fragment after a token gets the
     * space prefix again (llama.cpp's is_prev_special) */
    CHECK_EQ_INT(skv_tokenizer_encode(t, "x<tool>x", 8, 1, out, 32, &n), SKV_OK);
    CHECK_EQ_INT(n, 4);
    CHECK(out[0] == 1 && out[1] == 7 && out[2] == 3 && out[3] == 7);
    /* "<|im_end|>" is control: not cut out, spelled with <unk> (no byte tokens) */
    CHECK_EQ_INT(skv_tokenizer_encode(t, "<|im_end|>", 10, 0, out, 32, &n), SKV_OK);
    for (size_t i = 0; i < n; i++) CHECK(out[i] != 4);
    skv_tokenizer_free(t);
}

/* Missing byte tokens: SPM falls back to <unk> (llama.cpp would throw) or
 * drops the byte; a GPT2 merge whose result is not a token falls back to
 * one-byte tokens. */
static void test_fallbacks(void)
{
    skv_tokenizer *t = builtin_spm(0, 1), *u = builtin_spm(0, 0);
    int32_t out[32];
    size_t n;
    CHECK(t && u);
    CHECK_EQ_INT(skv_tokenizer_encode(t, "\xe2\x82\xac", 3, 0, out, 32, &n), SKV_OK);
    CHECK(n == 4 && out[0] == 3 && out[1] == 0 && out[2] == 0 && out[3] == 0);
    CHECK_EQ_INT(skv_tokenizer_encode(u, "\xe2\x82\xac", 3, 0, out, 32, &n), SKV_OK);
    CHECK(n == 1 && out[0] == 3);
    skv_tokenizer_free(t);
    skv_tokenizer_free(u);
    {
        /* vocabulary: 'a', 'b', 'c' (byte-level = themselves); merge "a b" -> "ab" missing */
        skv_strref toks[3] = {{"a", 1}, {"b", 1}, {"c", 1}};
        skv_strref merges[1] = {{"a b", 3}};
        skv_tokenizer_desc d = merges_desc(3, toks, 1, merges);
        skv_err err = {0};
        d.pre = "gpt2";
        CHECK_EQ_INT(skv_tokenizer_create(&d, &t, &err), SKV_OK);
        CHECK_EQ_INT(skv_tokenizer_encode(t, "abc", 3, 1, out, 32, &n), SKV_OK);
        CHECK(n == 3 && out[0] == 0 && out[1] == 1 && out[2] == 2);
        CHECK_EQ_INT(skv_tokenizer_encode(t, "a\xc3\xa9", 3, 0, out, 32, &n), SKV_OK);
        CHECK(n == 1 && out[0] == 0); /* no token for the byte-level characters of e-acute */
        skv_tokenizer_free(t);
    }
}

/* skv_tokenizer_fingerprint: equal for equal descriptions, different when anything that
 * changes encoding or rendering changes (a merge's rank, a score, a type, a flag, a text). */
static skv_tokenizer *fp_of(const skv_tokenizer_desc *d, uint8_t fp[16])
{
    skv_tokenizer *t = NULL;
    skv_err err = {0};
    memset(fp, 0, 16);
    if (skv_tokenizer_create(d, &t, &err) != SKV_OK) return NULL;
    if (skv_tokenizer_fingerprint(t, fp) != SKV_OK) {
        skv_tokenizer_free(t);
        return NULL;
    }
    return t;
}

static void test_fingerprint(void)
{
    skv_strref toks[6] = {{"a", 1}, {"b", 1}, {"c", 1}, {"ab", 2}, {"bc", 2}, {"abc", 3}};
    skv_strref m1[3] = {{"a b", 3}, {"b c", 3}, {"ab c", 4}}, m2[3] = {{"b c", 3}, {"a b", 3}, {"ab c", 4}};
    float sc2[6] = {0, 0, 0, 0, 0, -1};
    int32_t ty2[6] = {1, 1, 1, 1, 1, 4};
    skv_tokenizer_desc base = merges_desc(6, toks, 3, m1), d[6];
    uint8_t f0[16], f1[16], fk[6][16];
    int32_t a[8], b[8];
    size_t na = 0, nb = 0;
    for (int i = 0; i < 6; i++) d[i] = base;
    d[0].merges = m2;                         /* two ranks swapped: "abc" encodes otherwise */
    d[1].scores = sc2;                        /* one score */
    d[2].types = ty2;                         /* one type */
    d[3].add_bos = 1, d[3].bos_id = 0;        /* a flag */
    d[4].n_merges = 2;                        /* a merge fewer */
    d[5].pre = "falcon";                      /* the pre-tokenizer */
    skv_tokenizer *t0 = fp_of(&base, f0), *t1 = fp_of(&base, f1);
    CHECK(t0 && t1 && !memcmp(f0, f1, 16));
    if (t0 && t1) {
        CHECK(skv_tokenizer_encode(t0, "abc", 3, 0, a, 8, &na) == SKV_OK && na == 1 && a[0] == 5);
        skv_tokenizer_free(t1);
        for (int i = 0; i < 6; i++) {
            skv_tokenizer *t = fp_of(&d[i], fk[i]);
            CHECK_MSG(t != NULL, "variant %d", i);
            CHECK_MSG(memcmp(fk[i], f0, 16) != 0, "variant %d: the same fingerprint", i);
            for (int j = 0; j < i; j++) CHECK_MSG(memcmp(fk[i], fk[j], 16) != 0, "variants %d and %d", i, j);
            if (i == 0 && t) CHECK(skv_tokenizer_encode(t, "abc", 3, 0, b, 8, &nb) == SKV_OK && (nb != na || b[0] != a[0]));
            skv_tokenizer_free(t);
        }
    }
    skv_tokenizer_free(t0);
    CHECK_EQ_INT(skv_tokenizer_fingerprint(NULL, f0), SKV_ERR_INVALID_ARG);
}

/* ------------------------------------------------------------------------ */
/* --dump mode for tests/test_tokenizer.py                                  */

/* Prints the ids of each hex line of inputs (tokenizer t, owned). */
static int dump_with(skv_tokenizer *t, const char *inputs, int add)
{
    size_t n;
    char *buf = slurp(inputs, &n), *line, *save = NULL;
    if (!t || !buf) {
        fprintf(stderr, "dump: no tokenizer or cannot read %s\n", inputs);
        skv_tokenizer_free(t);
        free(buf);
        return 2;
    }
    for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        size_t tl, n_ids;
        char *text = unhex(line, strlen(line), &tl);
        int32_t *ids;
        if (!text || enc(t, text, tl, add ? SKV_TOKENIZER_ADD_SPECIAL : 0, &ids, &n_ids) != SKV_OK) {
            printf("ERROR\n");
        } else if (!same_ids(t, text, tl, tl <= 4096)) {
            printf("MISMATCH-BETWEEN-PATHS\n");
        } else {
            for (size_t i = 0; i < n_ids; i++) printf(i ? " %d" : "%d", (int)ids[i]);
            printf(n_ids ? "\n" : "-\n");
            free(ids);
        }
        free(text);
    }
    free(buf);
    skv_tokenizer_free(t);
    return 0;
}

static int dump(const char *desc, const char *inputs, int add)
{
    return dump_with(load_tokdesc(desc, NULL), inputs, add);
}

/* --vocab-dump VOCAB.gguf INPUTS.txt ADD_SPECIAL: a vocabulary-only GGUF
 * (llama.cpp's models/ggml-vocab-*.gguf) loaded by skv_vocab_load; first line
 * "PRE <pre-tokenizer>" or "REFUSED <message>" (then nothing else). */
static int vocab_dump(const char *path, const char *inputs, int add)
{
    skv_err err = {0};
    skv_tokenizer *t = NULL;
    if (skv_vocab_load(path, &t, &err) != SKV_OK) {
        printf("REFUSED %s\n", err.msg);
        return 0;
    }
    printf("PRE %s\n", skv_tokenizer_kind(t) == SKV_TOKENIZER_SPM ? "spm" : skv_tokenizer_pre_name(t));
    return dump_with(t, inputs, add);
}

/* --split PRE INPUTS.txt: the pre-tokenizer's words, hex, space-separated. */
static int split_dump(const char *pre, const char *inputs)
{
    size_t n;
    char *buf = slurp(inputs, &n), *line, *save = NULL;
    int kind = -1;
    for (int i = 0; i < SKV_PRETOK_COUNT; i++)
        if (strcmp(pre, skv_pretok_name((skv_pretok)i)) == 0) kind = i;
    if (!buf || kind < 0) {
        fprintf(stderr, "--split: bad pre %s or inputs %s\n", pre, inputs);
        free(buf);
        return 2;
    }
    for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        size_t tl, m = 0, k, at = 0;
        char *text = unhex(line, strlen(line), &tl);
        uint32_t *cps = malloc((tl + 1) * sizeof *cps);
        uint8_t *cls = malloc(tl + 1);
        size_t *lens = malloc((tl + 1) * sizeof *lens), *tmp = malloc((tl + 1) * sizeof *tmp);
        if (!text || !cps || !cls || !lens || !tmp) return 2;
        for (size_t i = 0, adv; i < tl; i += adv) {
            cps[m] = skv_utf8_decode((const uint8_t *)text + i, tl - i, &adv);
            cls[m] = skv_unicode_class(cps[m]);
            m++;
        }
        k = skv_unicode_pretokenize((skv_pretok)kind, cps, cls, m, lens, tmp);
        for (size_t w = 0; w < k; w++) {
            if (w) printf(" ");
            for (size_t j = 0; j < lens[w]; j++) {
                uint8_t u[4];
                size_t ul = skv_utf8_encode(cps[at + j], u);
                for (size_t q = 0; q < ul; q++) printf("%02x", u[q]);
            }
            at += lens[w];
        }
        printf(k ? "\n" : "-\n");
        free(text);
        free(cps);
        free(cls);
        free(lens);
        free(tmp);
    }
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--dump") == 0) return dump(argv[2], argv[3], atoi(argv[4]));
    if (argc == 5 && strcmp(argv[1], "--vocab-dump") == 0) return vocab_dump(argv[2], argv[3], atoi(argv[4]));
    if (argc == 4 && strcmp(argv[1], "--split") == 0) return split_dump(argv[2], argv[3]);
    g_tok512 = load_tok512();
    for (int i = 0; i < N_PRES; i++) g_bpe[i] = load_tokdesc(DATA_DIR "bpe.tokdesc", PRES[i]);
    TEST_BEGIN("test_tokenizer");
    RUN(test_expected_spm_tok512);
    RUN(test_expected_gpt2);
    RUN(test_once_upon_a_time);
    RUN(test_tok512_vocab);
    RUN(test_spm_roundtrip);
    RUN(test_gpt2_roundtrip);
    RUN(test_reference_paths_agree);
    RUN(test_long_inputs);
    RUN(test_pretokenizer_splits);
    RUN(test_create_rejects);
    RUN(test_llama2c_rejects);
    RUN(test_encode_api);
    RUN(test_byte_level_map);
    RUN(test_ties_go_left);
    RUN(test_piece_api);
    RUN(test_user_defined_and_fixups);
    RUN(test_fallbacks);
    RUN(test_fingerprint);
    skv_tokenizer_free(g_tok512);
    for (int i = 0; i < N_PRES; i++) skv_tokenizer_free(g_bpe[i]);
    TEST_END();
}
