/* Fuzz target for the tokenizer in src/tokenizer/ (and the pre-tokenizers in src/tokenizer/unicode.c).
 *
 * The first byte picks a mode:
 *   0  SPM encode of the rest with a built-in vocabulary (byte tokens, pieces
 *      containing U+2581, a user-defined token)
 *   1  GPT2 encode of data[2..] with a built-in byte-level vocabulary and
 *      merges; data[1] picks the pre-tokenizer (one of N_BPE)
 *   2  skv_tokenizer_load_llama2c on data[2..]; data[1] picks vocab_size;
 *      encodes the file's own bytes with the result
 *   3  skv_tokenizer_create on a description parsed from data[1..]:
 *      '\n'-separated tokens, then after a 0 byte '\n'-separated merges
 * Invariants (abort on violation): ids are in range; the heap, unsegmented
 * and naive merge paths agree; pieces give the text back (SPM: modulo the
 * U+2581 escaping, GPT2: modulo llama.cpp's U+FFFD for invalid UTF-8). */
#include "seqkv.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) abort();                                                                         \
    } while (0)

#define N_BPE 9 /* the pre-tokenizers: one built-in BPE vocabulary each */
static skv_tokenizer *g_spm, *g_bpe[N_BPE];

/* One token of a built-in vocabulary: text, score (when scores is given), type. */
static void add(skv_strref *toks, float *scores, int32_t *types, size_t *n, const char *text, size_t len, int32_t type)
{
    toks[*n] = (skv_strref){text, len};
    if (scores) scores[*n] = 0;
    types[(*n)++] = type;
}

/* Creates the built-in tokenizer that d describes (it must succeed). */
static skv_tokenizer *create(const skv_tokenizer_desc *d)
{
    skv_tokenizer *t = NULL;
    CHECK(skv_tokenizer_create(d, &t, NULL) == SKV_OK);
    return t;
}

static skv_tokenizer *make_spm(void)
{
    static const char *const pieces[] = {
        "\xe2\x96\x81", "a", "b", "c", "\xe2\x96\x81" "a", "ab", "\xe2\x96\x81" "ab", "bc", "abc",
        "\xe2\x96\x81\xe2\x96\x81", "c\xe2\x96\x81", "\xc3\xa9", "a\xe2\x96\x81" "b", "x", "xx", "xxxx",
    };
    enum { NP = sizeof pieces / sizeof pieces[0], N = 3 + 256 + NP + 1 };
    static char bytes[256][8];
    skv_strref toks[N];
    float scores[N];
    int32_t types[N];
    size_t n = 0;
    add(toks, scores, types, &n, "<unk>", 5, SKV_TOKEN_TYPE_UNKNOWN);
    add(toks, scores, types, &n, "<s>", 3, SKV_TOKEN_TYPE_CONTROL);
    add(toks, scores, types, &n, "</s>", 4, SKV_TOKEN_TYPE_CONTROL);
    for (int b = 0; b < 256; b++) {
        memcpy(bytes[b], "<0x", 3);
        bytes[b][3] = "0123456789ABCDEF"[b >> 4];
        bytes[b][4] = "0123456789ABCDEF"[b & 15];
        bytes[b][5] = '>';
        add(toks, scores, types, &n, bytes[b], 6, SKV_TOKEN_TYPE_BYTE);
    }
    for (size_t i = 0; i < NP; i++) {
        scores[n] = -(float)(i % 7);
        add(toks, NULL, types, &n, pieces[i], strlen(pieces[i]), SKV_TOKEN_TYPE_NORMAL);
    }
    add(toks, scores, types, &n, "<u>", 3, SKV_TOKEN_TYPE_USER_DEFINED);
    return create(&(skv_tokenizer_desc){
        .kind = SKV_TOKENIZER_SPM, .n_vocab = n, .tokens = toks, .scores = scores, .types = types,
        .bos_id = SKV_TOKEN_DEFAULT, .eos_id = SKV_TOKEN_DEFAULT, .unk_id = SKV_TOKEN_DEFAULT,
        .pad_id = SKV_TOKEN_NONE, .add_bos = -1, .add_eos = -1, .add_space_prefix = -1});
}

static skv_tokenizer *make_bpe(const char *pre)
{
    /* byte-level characters of bytes 0..255, then merge results */
    static const char *const merges[] = {"\xc4\xa0 t", "h e", "\xc4\xa0t he", "i n", "\xc4\xa0 a", "a a",
                                         "aa aa", "1 2", "\xc4\x8a \xc4\x8a", "\xc3\xa9 \xc3\xa9"};
    enum { NM = sizeof merges / sizeof merges[0], N = 256 + NM + 2 };
    static char chars[256][4];
    static char joined[NM][16];
    skv_strref toks[N], mref[NM];
    int32_t types[N];
    size_t n = 0;
    for (int b = 0; b < 256; b++) {
        size_t l = skv_utf8_encode(skv_unicode_byte_to_cp((uint8_t)b), (uint8_t *)chars[b]);
        add(toks, NULL, types, &n, chars[b], l, SKV_TOKEN_TYPE_NORMAL);
    }
    for (size_t i = 0; i < NM; i++) {
        size_t l = strlen(merges[i]), k = 0;
        for (size_t j = 0; j < l; j++)
            if (merges[i][j] != ' ') joined[i][k++] = merges[i][j];
        add(toks, NULL, types, &n, joined[i], k, SKV_TOKEN_TYPE_NORMAL);
        mref[i] = (skv_strref){merges[i], l};
    }
    add(toks, NULL, types, &n, "<|endoftext|>", 13, SKV_TOKEN_TYPE_CONTROL);
    add(toks, NULL, types, &n, "<u>", 3, SKV_TOKEN_TYPE_USER_DEFINED);
    return create(&(skv_tokenizer_desc){
        .kind = SKV_TOKENIZER_GPT2, .pre = pre, .n_vocab = n, .tokens = toks, .types = types,
        .n_merges = NM, .merges = mref, .bos_id = (int32_t)n - 2, .eos_id = (int32_t)n - 2,
        .unk_id = SKV_TOKEN_NONE, .pad_id = SKV_TOKEN_NONE, .add_bos = -1, .add_eos = -1, .add_space_prefix = -1});
}

static int32_t *encode(const skv_tokenizer *t, const uint8_t *s, size_t n, unsigned flags, size_t *n_ids)
{
    size_t need = 0;
    int32_t *ids;
    int rc = skv_tokenizer_encode_ex(t, (const char *)s, n, flags, NULL, 0, &need);
    CHECK(rc == SKV_OK || rc == SKV_ERR_RANGE);
    CHECK(need == 0 || rc == SKV_ERR_RANGE);
    ids = malloc((need + 1) * sizeof *ids);
    CHECK(ids);
    CHECK(skv_tokenizer_encode_ex(t, (const char *)s, n, flags, ids, need, n_ids) == SKV_OK);
    CHECK(*n_ids == need);
    for (size_t i = 0; i < need; i++) CHECK(ids[i] >= 0 && (size_t)ids[i] < skv_tokenizer_n_vocab(t));
    return ids;
}

/* Encodes with every path, checks they agree, returns the pieces. */
static uint8_t *encode_all(const skv_tokenizer *t, const uint8_t *s, size_t n, size_t *out_len)
{
    size_t na, nb, cap = 64, len = 0;
    int32_t *a = encode(t, s, n, 0, &na), *b = encode(t, s, n, SKV_TOKENIZER_NO_SEGMENT, &nb);
    uint8_t *out = malloc(cap);
    CHECK(out && na == nb && memcmp(a, b, na * sizeof *a) == 0);
    free(b);
    if (n <= 512) {
        b = encode(t, s, n, SKV_TOKENIZER_NAIVE | SKV_TOKENIZER_NO_SEGMENT, &nb);
        CHECK(na == nb && memcmp(a, b, na * sizeof *a) == 0);
        free(b);
    }
    for (size_t i = 0; i < na; i++) {
        size_t pl = 0;
        int rc = skv_tokenizer_piece(t, a[i], NULL, 0, &pl);
        CHECK(rc == 0 || rc == SKV_ERR_RANGE);
        while (len + pl > cap) {
            cap *= 2;
            out = realloc(out, cap);
            CHECK(out);
        }
        CHECK(skv_tokenizer_piece(t, a[i], (char *)out + len, cap - len, &pl) == (int)pl);
        len += pl;
    }
    free(a);
    *out_len = len;
    return out;
}

static int contains(const uint8_t *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(s + i, needle, k) == 0) return 1;
    return 0;
}

static void fuzz_spm(const uint8_t *s, size_t n)
{
    size_t m = 0, o = 0, len;
    uint8_t *x = malloc(3 * n + 3), *want = malloc(3 * n + 3), *got;
    CHECK(x && want);
    /* expected: " " + text escaped and split like the encoder; whole U+2581
     * characters read back as spaces, the rest as bytes. Only without the
     * user-defined token (which restarts the space prefix). */
    for (size_t i = 0; i <= n; i++) {
        if (i == 0 || s[i - 1] == ' ') memcpy(x + m, "\xe2\x96\x81", 3), m += 3;
        else x[m++] = s[i - 1];
    }
    for (size_t pos = 0, cl; pos < m; pos += cl) {
        cl = skv_utf8_seq_len(x[pos]);
        if (cl > m - pos) cl = m - pos;
        if (cl == 3 && memcmp(x + pos, "\xe2\x96\x81", 3) == 0) want[o++] = ' ';
        else memcpy(want + o, x + pos, cl), o += cl;
    }
    got = encode_all(g_spm, s, n, &len);
    if (n && !contains(s, n, "<u>")) CHECK(len == o && memcmp(got, want, o) == 0);
    free(got);
    free(x);
    free(want);
}

static void fuzz_bpe(const skv_tokenizer *t, const uint8_t *s, size_t n)
{
    size_t o = 0, len;
    uint8_t *want = malloc(3 * n + 1), *got;
    CHECK(want);
    for (size_t i = 0, adv; i < n; i += adv) o += skv_utf8_encode(skv_utf8_decode(s + i, n - i, &adv), want + o);
    got = encode_all(t, s, n, &len);
    CHECK(len == o && memcmp(got, want, o) == 0);
    free(got);
    free(want);
}

static void fuzz_llama2c(const uint8_t *s, size_t n, size_t vocab)
{
    skv_tokenizer *t = NULL;
    skv_err err = {0};
    if (skv_tokenizer_load_llama2c(s, n, vocab, &t, &err) != SKV_OK) {
        CHECK(t == NULL && err.msg[0]);
        return;
    }
    CHECK(skv_tokenizer_n_vocab(t) == vocab);
    free(encode_all(t, s, n < 256 ? n : 256, &n));
    skv_tokenizer_free(t);
}

static void fuzz_create(const uint8_t *s, size_t n)
{
    skv_strref toks[64], merges[64];
    size_t nt = 0, nm = 0, i = 0, start = 0;
    int in_merges = 0;
    skv_tokenizer_desc d;
    skv_tokenizer *t = NULL;
    int32_t special;
    skv_err err = {0};
    for (; i <= n && nm < 64 && nt < 64; i++) {
        if (i < n && s[i] != '\n' && s[i] != 0) continue;
        if (in_merges) merges[nm++] = (skv_strref){(const char *)s + start, i - start};
        else toks[nt++] = (skv_strref){(const char *)s + start, i - start};
        if (i < n && s[i] == 0) in_merges = 1;
        start = i + 1;
    }
    special = n > 2 ? (int32_t)(s[2] % 8) - 2 : -1;
    d = (skv_tokenizer_desc){.kind = n && (s[0] & 1) ? SKV_TOKENIZER_GPT2 : SKV_TOKENIZER_SPM,
                             .pre = n > 1 && (s[1] & 1) ? "qwen2" : NULL,
                             .n_vocab = nt, .tokens = toks, .n_merges = nm, .merges = merges,
                             .bos_id = special, .eos_id = special, .unk_id = special, .pad_id = special,
                             .add_bos = -1, .add_eos = -1, .add_space_prefix = -1};
    if (skv_tokenizer_create(&d, &t, &err) != SKV_OK) {
        CHECK(t == NULL);
        return;
    }
    free(encode_all(t, s, n, &n));
    skv_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const pres[N_BPE] = {NULL,     "gpt2",   "llama-bpe",    "qwen2",         "smollm",
                                            "falcon", "qwen35", "deepseek-llm", "deepseek-coder"};
    if (!g_spm) {
        g_spm = make_spm();
        for (int i = 0; i < N_BPE; i++) g_bpe[i] = make_bpe(pres[i]);
    }
    if (size < 1) return 0;
    switch (data[0] % 4) {
    case 0: fuzz_spm(data + 1, size - 1); break;
    case 1:
        if (size >= 2) fuzz_bpe(g_bpe[data[1] % N_BPE], data + 2, size - 2);
        break;
    case 2:
        if (size >= 2) fuzz_llama2c(data + 2, size - 2, 1 + data[1] % 64);
        break;
    default: fuzz_create(data + 1, size - 1); break;
    }
    return 0;
}
