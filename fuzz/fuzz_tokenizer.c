/* Fuzz target for src/tokenizer/tokenizer.c (and the pre-tokenizers in src/tokenizer/unicode.c).
 *
 * The first byte picks a mode:
 *   0  SPM encode of the rest with a built-in vocabulary (byte tokens, pieces
 *      containing U+2581, a user-defined token)
 *   1  GPT2 encode of data[2..] with a built-in byte-level vocabulary and
 *      merges; data[1] picks the pre-tokenizer
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

static skv_tokenizer *g_spm, *g_bpe[5];

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
    skv_tokenizer_desc d;
    skv_tokenizer *t = NULL;
    size_t n = 0;
    const char *sp[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++, n++) {
        toks[n].ptr = sp[i];
        toks[n].len = strlen(sp[i]);
        scores[n] = 0;
        types[n] = i ? SKV_TOKEN_TYPE_CONTROL : SKV_TOKEN_TYPE_UNKNOWN;
    }
    for (int b = 0; b < 256; b++, n++) {
        memcpy(bytes[b], "<0x", 3);
        bytes[b][3] = "0123456789ABCDEF"[b >> 4];
        bytes[b][4] = "0123456789ABCDEF"[b & 15];
        bytes[b][5] = '>';
        toks[n].ptr = bytes[b];
        toks[n].len = 6;
        scores[n] = 0;
        types[n] = SKV_TOKEN_TYPE_BYTE;
    }
    for (size_t i = 0; i < NP; i++, n++) {
        toks[n].ptr = pieces[i];
        toks[n].len = strlen(pieces[i]);
        scores[n] = -(float)(i % 7);
        types[n] = SKV_TOKEN_TYPE_NORMAL;
    }
    toks[n].ptr = "<u>";
    toks[n].len = 3;
    scores[n] = 0;
    types[n++] = SKV_TOKEN_TYPE_USER_DEFINED;
    memset(&d, 0, sizeof d);
    d.kind = SKV_TOKENIZER_SPM;
    d.n_vocab = n;
    d.tokens = toks;
    d.scores = scores;
    d.types = types;
    d.bos_id = d.eos_id = d.unk_id = SKV_TOKEN_DEFAULT;
    d.pad_id = SKV_TOKEN_NONE;
    d.add_bos = d.add_eos = d.add_space_prefix = -1;
    CHECK(skv_tokenizer_create(&d, &t, NULL, 0) == SKV_OK);
    return t;
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
    skv_tokenizer_desc d;
    skv_tokenizer *t = NULL;
    size_t n = 0;
    for (int b = 0; b < 256; b++, n++) {
        size_t l = skv_utf8_encode(skv_unicode_byte_to_cp((uint8_t)b), (uint8_t *)chars[b]);
        toks[n].ptr = chars[b];
        toks[n].len = l;
        types[n] = SKV_TOKEN_TYPE_NORMAL;
    }
    for (size_t i = 0; i < NM; i++, n++) {
        size_t l = strlen(merges[i]), k = 0;
        for (size_t j = 0; j < l; j++)
            if (merges[i][j] != ' ') joined[i][k++] = merges[i][j];
        toks[n].ptr = joined[i];
        toks[n].len = k;
        types[n] = SKV_TOKEN_TYPE_NORMAL;
        mref[i].ptr = merges[i];
        mref[i].len = l;
    }
    toks[n].ptr = "<|endoftext|>";
    toks[n].len = 13;
    types[n++] = SKV_TOKEN_TYPE_CONTROL;
    toks[n].ptr = "<u>";
    toks[n].len = 3;
    types[n++] = SKV_TOKEN_TYPE_USER_DEFINED;
    memset(&d, 0, sizeof d);
    d.kind = SKV_TOKENIZER_GPT2;
    d.pre = pre;
    d.n_vocab = n;
    d.tokens = toks;
    d.types = types;
    d.n_merges = NM;
    d.merges = mref;
    d.bos_id = d.eos_id = (int32_t)n - 2;
    d.unk_id = d.pad_id = SKV_TOKEN_NONE;
    d.add_bos = d.add_eos = d.add_space_prefix = -1;
    CHECK(skv_tokenizer_create(&d, &t, NULL, 0) == SKV_OK);
    return t;
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
    char err[128];
    if (skv_tokenizer_load_llama2c(s, n, vocab, &t, err, sizeof err) != SKV_OK) {
        CHECK(t == NULL && err[0]);
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
    char err[128];
    for (; i <= n && nm < 64 && nt < 64; i++) {
        if (i < n && s[i] != '\n' && s[i] != 0) continue;
        if (in_merges) merges[nm++] = (skv_strref){(const char *)s + start, i - start};
        else toks[nt++] = (skv_strref){(const char *)s + start, i - start};
        if (i < n && s[i] == 0) in_merges = 1;
        start = i + 1;
    }
    memset(&d, 0, sizeof d);
    d.kind = n && (s[0] & 1) ? SKV_TOKENIZER_GPT2 : SKV_TOKENIZER_SPM;
    d.pre = n > 1 && (s[1] & 1) ? "qwen2" : NULL;
    d.n_vocab = nt;
    d.tokens = toks;
    d.n_merges = nm;
    d.merges = merges;
    d.bos_id = d.eos_id = d.unk_id = d.pad_id = n > 2 ? (int32_t)(s[2] % 8) - 2 : -1;
    d.add_bos = d.add_eos = d.add_space_prefix = -1;
    if (skv_tokenizer_create(&d, &t, err, sizeof err) != SKV_OK) {
        CHECK(t == NULL);
        return;
    }
    free(encode_all(t, s, n, &n));
    skv_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const pres[5] = {NULL, "gpt2", "llama-bpe", "qwen2", "smollm"};
    if (!g_spm) {
        g_spm = make_spm();
        for (int i = 0; i < 5; i++) g_bpe[i] = make_bpe(pres[i]);
    }
    if (size < 1) return 0;
    switch (data[0] % 4) {
    case 0: fuzz_spm(data + 1, size - 1); break;
    case 1:
        if (size >= 2) fuzz_bpe(g_bpe[data[1] % 5], data + 2, size - 2);
        break;
    case 2:
        if (size >= 2) fuzz_llama2c(data + 2, size - 2, 1 + data[1] % 64);
        break;
    default: fuzz_create(data + 1, size - 1); break;
    }
    return 0;
}
