/* unicode - the Unicode pieces the tokenizer needs, bit-compatible with llama.cpp.
 *
 * READ ME FIRST
 * - UTF-8 is decoded the way llama.cpp's unicode_cpt_from_utf8() does it: the
 *   lead byte's type and the presence of continuation bytes are checked, nothing
 *   else (overlong forms and surrogates decode "fine"). A byte that does not
 *   start a well-formed sequence becomes U+FFFD and decoding resumes at the next
 *   byte. Sequences decoding above U+10FFFF (llama.cpp throws on those later)
 *   are treated as invalid too.
 * - Character classes come from the generated src/unicode_tables.h (Unicode
 *   general category group + White_Space), the same classes llama.cpp's
 *   unicode_cpt_flags carries.
 * - The pre-tokenizers below reproduce llama.cpp's unicode_regex_split() for the
 *   listed pre-tokenizer types: its hand-written GPT-2 and Llama-3 splitters
 *   and, for the regexes llama.cpp runs through std::regex on "collapsed" text,
 *   hand-written matchers with the same (ECMAScript backtracking) semantics. No
 *   regex engine is involved.
 */
#ifndef SKV_UNICODE_H
#define SKV_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Character class byte: bits 0-2 category group, bit 3 White_Space. 0 is never
 * the class of a character; the splitters use it for "outside the chunk". */
enum {
    SKV_UC_NONE = 0,
    SKV_UC_N = 1, /* \p{N} */
    SKV_UC_L = 2, /* \p{L} */
    SKV_UC_Z = 3, /* \p{Z} */
    SKV_UC_M = 4, /* \p{M} */
    SKV_UC_P = 5, /* \p{P} */
    SKV_UC_S = 6, /* \p{S} */
    SKV_UC_C = 7, /* \p{C}, including unassigned code points */
    SKV_UC_CAT_MASK = 7,
    SKV_UC_WS = 8 /* White_Space (regex \s) */
};

#define SKV_UNICODE_REPLACEMENT 0xFFFDu

/* Class byte of a code point (code points above U+10FFFF: SKV_UC_C). */
uint8_t skv_unicode_class(uint32_t cp);

/* Unicode version of the generated tables, e.g. "14.0.0". */
const char *skv_unicode_version(void);

/* Length of the UTF-8 sequence a lead byte announces, llama.cpp's
 * unicode_len_utf8(): 1 for ASCII and stray continuation bytes, else 2..4. */
static inline size_t skv_utf8_seq_len(uint8_t lead)
{
    static const uint8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[lead >> 4];
}

/* Decodes one code point from s[0..n) (n >= 1); *adv = bytes consumed (>= 1). */
uint32_t skv_utf8_decode(const uint8_t *s, size_t n, size_t *adv);

/* Encodes cp (<= 0x10FFFF; larger values are encoded as U+FFFD) into out;
 * returns the number of bytes (1..4). */
size_t skv_utf8_encode(uint32_t cp, uint8_t out[4]);

/* GPT-2's byte-level alphabet: byte b <-> printable code point. */
uint32_t skv_unicode_byte_to_cp(uint8_t b);
int skv_unicode_cp_to_byte(uint32_t cp); /* -1: not a byte-level code point */

/* Pre-tokenizers (llama.cpp LLAMA_VOCAB_PRE_TYPE_*). */
typedef enum skv_pretok {
    SKV_PRETOK_DEFAULT = 0, /* 4 regexes: punctuation runs, GPT-2, \p{N}+, [0-9]{3} */
    SKV_PRETOK_GPT2 = 1,    /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    SKV_PRETOK_LLAMA3 = 2,  /* Llama-3: contractions (any case), letters with one leading
                               non-letter, \p{N}{1,3}, punctuation + newlines, whitespace */
    SKV_PRETOK_QWEN2 = 3,   /* Llama-3 with \p{N} (single digits) */
    SKV_PRETOK_SMOLLM = 4,  /* \p{N} (single digits), then GPT-2 */
    SKV_PRETOK_FALCON = 5,  /* default without its \p{N}+ stage, '`' also punctuation */
    SKV_PRETOK_QWEN35 = 6,  /* Qwen2 with marks: [\p{L}\p{M}]+ words, M not "other" */
    SKV_PRETOK_DEEPSEEK_LLM = 7,   /* 6 stages with explicit ranges (pretok_deepseek.c) */
    SKV_PRETOK_DEEPSEEK_CODER = 8, /* 5 stages: [\r\n], \s?\p{L}+, \s?\p{P}+, CJK, \p{N} */
    SKV_PRETOK_COUNT
} skv_pretok;

/* The pre-tokenizer's llama.cpp name ("llama3", "deepseek-llm", ...); "?" if unknown. */
const char *skv_pretok_name(skv_pretok kind);

/* Splits the code points cps[0..n) (classes cls[0..n), from skv_unicode_class)
 * into pre-token words. Writes the word lengths, in code points, to lens and
 * returns their count (<= n). lens and tmp must each hold n entries. */
size_t skv_unicode_pretokenize(skv_pretok kind, const uint32_t *cps, const uint8_t *cls,
                               size_t n, size_t *lens, size_t *tmp);

/* The DeepSeek pre-tokenizers (pretok_deepseek.c), with skv_unicode_pretokenize's
 * contract; kind is SKV_PRETOK_DEEPSEEK_LLM or SKV_PRETOK_DEEPSEEK_CODER. */
size_t skv_pretok_deepseek(skv_pretok kind, const uint32_t *cps, const uint8_t *cls, size_t n,
                           size_t *lens, size_t *tmp);

#endif
