#!/usr/bin/python3
"""Independent reference for src/tokenizer/ (llama.cpp-compatible tokenizers).

Written from llama.cpp's documented behaviour, sharing no code with the C
module: SentencePiece-style merging over characters, byte-level BPE with the
pre-tokenizers expressed as real regexes (python3-regex), llama2.c's run.c
encoder, and llama.cpp's llama2.c vocabulary conversion.

    /usr/bin/python3 tests/test_tokenizer.py           run the checks (PASS/FAIL/SKIP lines)
    /usr/bin/python3 tests/test_tokenizer.py --regen   rewrite tests/data/tokenizer/*

Checks:
  expected_ids_reproducible  tests/data/tokenizer/expected.txt equals what this reference computes
  unicode_table_matches_regex  src/tokenizer/unicode_tables.h classes == regex \\p{..}/\\s (Unicode 14 chars)
  llama2c_conversion_matches_gguf  tok512.bin converted == stories260K.gguf vocabulary
  pretokenizer_splits_vs_regex  random strings: C pre-tokenizer words (--split) == python3-regex
  differential_vs_c          random strings: C ids ($SEQKV_BUILD/tests/test_tokenizer --dump) == reference
"""
import os
import random
import struct
import subprocess
import sys
import tempfile
import unicodedata

from testenv import missing

try:
    import regex
except ImportError:  # python3-regex (scripts/install-deps.sh)
    regex = None

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, 'data', 'tokenizer')
SEP = '\u2581'.encode()

T_NORMAL, T_UNKNOWN, T_CONTROL, T_USER, T_UNUSED, T_BYTE = 1, 2, 3, 4, 5, 6

# --------------------------------------------------------------------------
# tokenizer description files (tests/data/tokenizer/*.tokdesc)


class Vocab:
    def __init__(self):
        self.kind = 'spm'
        self.pre = 'default'
        self.texts, self.scores, self.types = [], [], []
        self.merges = []
        self.bos = self.eos = self.unk = -1
        self.add_bos = self.add_eos = self.add_space_prefix = -1

    def finish(self):
        self.tok2id = {}
        for i, t in enumerate(self.texts):
            assert t and t not in self.tok2id
            self.tok2id[t] = i
        self.ranks = {}
        for r, (a, b) in enumerate(self.merges):
            self.ranks.setdefault((a, b), r)
        spm = self.kind == 'spm'
        pre_bos = self.pre in ('llama3', 'llama-bpe')
        self.f_add_bos = (1 if spm else int(pre_bos)) if self.add_bos < 0 else self.add_bos
        self.f_add_eos = 0 if self.add_eos < 0 else self.add_eos
        self.f_prefix = int(spm) if self.add_space_prefix < 0 else self.add_space_prefix
        self.ignore_merges = self.pre in ('llama3', 'llama-bpe')
        ud = [i for i, ty in enumerate(self.types) if ty == T_USER]
        self.ud = sorted(ud, key=lambda i: (-len(self.texts[i]), i))
        return self

    def write(self, path):
        with open(path, 'w') as f:
            f.write('# seqkv tokenizer description (tests/test_tokenizer.py)\n')
            f.write('kind %s\npre %s\n' % (self.kind, self.pre))
            for k in ('bos', 'eos', 'unk', 'add_bos', 'add_eos', 'add_space_prefix'):
                f.write('%s %d\n' % (k, getattr(self, k)))
            for t, s, ty in zip(self.texts, self.scores, self.types):
                f.write('tok %d %r %s\n' % (ty, float(s), t.hex()))
            for a, b in self.merges:
                f.write('merge %s %s\n' % (a.hex(), b.hex()))


def read_tokdesc(path):
    v = Vocab()
    for line in open(path):
        w = line.split()
        if not w or w[0].startswith('#'):
            continue
        if w[0] in ('kind', 'pre'):
            setattr(v, w[0], w[1])
        elif w[0] == 'tok':
            v.types.append(int(w[1]))
            v.scores.append(float(w[2]))
            v.texts.append(bytes.fromhex(w[3]))
        elif w[0] == 'merge':
            v.merges.append((bytes.fromhex(w[1]), bytes.fromhex(w[2])))
        else:
            setattr(v, w[0], int(w[1]))
    return v.finish()

# --------------------------------------------------------------------------
# llama2.c tokenizer files


def read_llama2c(path, n_vocab):
    b = open(path, 'rb').read()
    pos, toks = 4, []
    for _ in range(n_vocab):
        score, n = struct.unpack_from('<fi', b, pos)
        toks.append((score, b[pos + 8:pos + 8 + n]))
        pos += 8 + n
    return toks


def llama2c_to_vocab(toks):
    """llama.cpp's convert-llama2c-to-ggml rules."""
    v = Vocab()
    for i, (score, raw) in enumerate(toks):
        if i < 3:
            text, ty = [b'<unk>', b'<s>', b'</s>'][i], [T_UNKNOWN, T_CONTROL, T_CONTROL][i]
        elif len(raw) == 6 and raw.startswith(b'<0x') and raw.endswith(b'>'):
            text, ty = raw, T_BYTE
        else:
            text, ty = raw.replace(b' ', SEP), T_NORMAL
        v.texts.append(text)
        v.scores.append(score)
        v.types.append(ty)
    v.bos, v.eos, v.unk = 1, 2, 0
    return v.finish()


def llama2c_encode(toks, text, bos=True):
    """karpathy/llama2.c run.c encode(): BOS, dummy prefix ' ', UTF-8
    characters (byte+3 fallback), best-score pair merges."""
    vocab = {t: i for i, (_, t) in reversed(list(enumerate(toks)))}
    ids = [1] if bos else []
    if text:
        ids.append(vocab[b' '])
    i = 0
    while i < len(text):
        j = i + 1
        while j < len(text) and (text[j] & 0xC0) == 0x80 and j - i < 4:
            j += 1
        ch = text[i:j]
        if ch in vocab:
            ids.append(vocab[ch])
        else:
            ids.extend(c + 3 for c in ch)
        i = j
    while True:
        best = None
        for k in range(len(ids) - 1):
            m = toks[ids[k]][1] + toks[ids[k + 1]][1]
            if m in vocab and (best is None or toks[vocab[m]][0] > best[0]):
                best = (toks[vocab[m]][0], k, vocab[m])
        if best is None:
            return ids
        _, k, tid = best
        ids[k:k + 2] = [tid]

# --------------------------------------------------------------------------
# llama.cpp semantics


def partition(v, text):
    """User-defined tokens are cut out of the raw text, longest first."""
    frags = [text] if text else []
    for tid in v.ud:
        t, out = v.texts[tid], []
        for f in frags:
            if isinstance(f, int):
                out.append(f)
                continue
            while True:
                k = f.find(t)
                if k < 0:
                    break
                if k:
                    out.append(f[:k])
                out.append(tid)
                f = f[k + len(t):]
            if f:
                out.append(f)
        frags = out
    return frags


def spm_chars(b):
    out, i = [], 0
    while i < len(b):
        n = [1] * 12 + [2, 2, 3, 4]
        k = min(n[b[i] >> 4], len(b) - i)
        out.append(b[i:i + k])
        i += k
    return out


def spm_byte_token(v, byte):
    t = ('<0x%02X>' % byte).encode()
    if t in v.tok2id:
        return v.tok2id[t]
    return v.tok2id.get(bytes([byte]), v.unk if v.unk >= 0 else None)


def merge_pairs(syms, priority):
    """Merges the adjacent pair of lowest priority(a, b) (None: no merge;
    ties: leftmost) until none is left; returns the symbols."""
    while True:
        best = None
        for i in range(len(syms) - 1):
            p = priority(syms[i], syms[i + 1])
            if p is not None and (best is None or p < best[0]):
                best = (p, i)
        if best is None:
            return syms
        i = best[1]
        syms[i:i + 2] = [syms[i] + syms[i + 1]]


def symbol_ids(v, syms, fallback):
    """Ids of the merged symbols; fallback(s) gives those of a non-token."""
    out = []
    for s in syms:
        if s in v.tok2id:
            out.append(v.tok2id[s])
        else:
            out.extend(fallback(s))
    return out


def spm_merge(v, text):
    def priority(a, b):
        tid = v.tok2id.get(a + b)
        return None if tid is None else -v.scores[tid]
    syms = merge_pairs(spm_chars(text), priority)
    return symbol_ids(v, syms, lambda s: [t for t in (spm_byte_token(v, c) for c in s) if t is not None])


def spm_encode(v, text, add_special):
    out = [v.bos] if add_special and v.f_add_bos else []
    prev_special = True
    for f in partition(v, text):
        if isinstance(f, int):
            out.append(f)
            prev_special = True
        else:
            t = (b' ' if v.f_prefix and prev_special else b'') + f
            out += spm_merge(v, t.replace(b' ', SEP))
            prev_special = False
    if add_special and v.f_add_eos:
        out.append(v.eos)
    return out


def lax_utf8(b):
    """llama.cpp's unicode_cpts_from_utf8: only the sequence structure is
    checked; a byte that does not start one becomes U+FFFD. Returns a str
    (lone surrogates possible). Code points above U+10FFFF (llama.cpp throws
    on them later) count as invalid."""
    out, i, n = [], 0, len(b)
    while i < n:
        c = b[i]
        if c < 0x80:
            out.append(chr(c))
            i += 1
            continue
        need = -1 if (c < 0xC0 or c >= 0xF8) else 1 if c < 0xE0 else 2 if c < 0xF0 else 3
        if need < 0 or i + need >= n or any((x & 0xC0) != 0x80 for x in b[i + 1:i + 1 + need]):
            out.append('\ufffd')
            i += 1
            continue
        cp = c & (0x3F >> need)
        for x in b[i + 1:i + 1 + need]:
            cp = (cp << 6) | (x & 0x3F)
        if cp > 0x10FFFF:
            out.append('\ufffd')
            i += 1
            continue
        out.append(chr(cp))
        i += need + 1
    return ''.join(out)


def byte_level():
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c).encode() for b, c in zip(bs, cs)}


BYTE_LEVEL = byte_level()

RE_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
RE_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"
             r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
RE_QWEN2 = RE_LLAMA3.replace(r'\p{N}{1,3}', r'\p{N}')
RE_QWEN35 = RE_QWEN2.replace(r'?\p{L}+', r'?[\p{L}\p{M}]+').replace(r'[^\s\p{L}\p{N}]+', r'[^\s\p{L}\p{M}\p{N}]+')
# DeepSeek-LLM's letters (its tokenizer.json), as code point ranges
DS_LETTERS = (r'A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293'
              r'\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386'
              r'\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F'
              r'\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA'
              r'\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A'
              r'\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D'
              r'\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4'
              r'\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3'
              r'\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107'
              r'\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D'
              r'\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184'
              r'\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D'
              r'\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E'
              r'\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A'
              r'\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB'
              r'\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943')
RE_CJK = r'[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+'
PRE_STAGES = {  # llama.cpp's regex lists per pre-tokenizer
    'default': [r'[\p{P}\$\+<=>\^~\|]+', RE_GPT2, r'\p{N}+', r'[0-9][0-9][0-9]'],
    'gpt2': [RE_GPT2],
    'llama3': [RE_LLAMA3],
    'qwen2': [RE_QWEN2],
    'smollm': [r'\p{N}', RE_GPT2],
    'falcon': [r'[\p{P}\$\+<=>\^~\|`]+', RE_GPT2, r'[0-9][0-9][0-9]'],
    'qwen35': [RE_QWEN35],
    # $ is the end of the chunk (std::regex): \Z here, Python's $ also matches before a final \n
    'deepseek-llm': [r'[\r\n]', r'\s?[' + DS_LETTERS + r']+',
                     r'\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+',
                     r'\s+\Z', RE_CJK, r'\p{N}+'],
    'deepseek-coder': [r'[\r\n]', r'\s?\p{L}+', r'\s?\p{P}+', RE_CJK, r'\p{N}'],
}
RE_WS = regex.compile(r'\s') if regex else None


def regex_view(pat, s):
    """The text a stage's regex sees in llama.cpp: one without \\p{..} runs on
    the code points with non-ASCII whitespace replaced by U+000B."""
    if r'\p{' in pat:
        return s
    return ''.join('\x0b' if ord(c) > 0x7F and RE_WS.match(c) else c for c in s)


def pretokenize(pre, s):
    chunks = [s] if s else []
    for pat in PRE_STAGES[pre]:
        rx, out = regex.compile(pat), []
        for c in chunks:
            pos = 0
            for m in rx.finditer(regex_view(pat, c)):
                if m.start() > pos:
                    out.append(c[pos:m.start()])
                out.append(c[m.start():m.end()])
                pos = m.end()
            if pos < len(c):
                out.append(c[pos:])
        chunks = out
    return chunks


def bpe_word(v, w):
    enc = b''.join(BYTE_LEVEL[c] for c in w)
    if v.ignore_merges and enc in v.tok2id:
        return [v.tok2id[enc]]
    syms = merge_pairs([BYTE_LEVEL[c] for c in w], lambda a, b: v.ranks.get((a, b)))
    return symbol_ids(v, syms, lambda s: [v.tok2id[bytes([c])] for c in s if bytes([c]) in v.tok2id])


def gpt2_encode(v, text, add_special):
    out = [v.bos] if add_special and v.f_add_bos else []
    for f in partition(v, text):
        if isinstance(f, int):
            out.append(f)
            continue
        for w in pretokenize(v.pre, lax_utf8(f)):
            out += bpe_word(v, w.encode('utf-8', 'surrogatepass'))
    if add_special and v.f_add_eos:
        out.append(v.eos)
    return out


def encode(v, text, add_special):
    return (spm_encode if v.kind == 'spm' else gpt2_encode)(v, text, add_special)

# --------------------------------------------------------------------------
# the synthetic byte-level BPE vocabulary (trained here, committed)

CORPUS = """\
Once upon a time, there was a little girl named Lily. She loved to play outside in the park.
One day, she saw a big, red ball. "Can I play?" she asked. The boy said: "Sure, let's play!"
They're happy; we've seen it, I'm sure, you'll see, he'd go. IT'S THE END, ISN'T IT?
In 1999 there were 12345 apples and 3.14159 pies; call 555-0100 or e-mail bob@example.com.
    def main(argv):\n        return 0  # code with    spaces\t\ttabs\r\nand CRLF lines
Γειά σου κόσμε! Привет, мир! Здравствуйте. こんにちは世界。你好，世界！ Ünïcödé façade naïve café.
مرحبا بالعالم ١٢٣ — हिन्दी में नमस्ते ४५६ — emoji 😀🎉👍 and symbols ©®™ € £ ¥ ½ ² ³ Ⅻ.
the the the and and of of to to in in is is was was that that with with for for on on at at
~/.bashrc ~~ !~ ?! `cmd` `~` $$ ++ <=> ^^ || ~> --- !!! ??? ... ,, ;; :: 's's 'LL 'll 'S
Hello hello HELLO llll lll ll aaaa aaa
"""


def train_bpe(n_merges=320):
    words = {}
    for w in regex.findall(RE_GPT2, CORPUS):
        key = tuple(BYTE_LEVEL[c] for c in w.encode())
        words[key] = words.get(key, 0) + 1
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        nw = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nw[tuple(out)] = nw.get(tuple(out), 0) + c
        words = nw
    return merges


def synthetic_gpt2():
    v = Vocab()
    v.kind, v.pre = 'gpt2', 'default'
    for b in range(256):
        v.texts.append(BYTE_LEVEL[b])
    v.merges = train_bpe()
    for a, b in v.merges:
        if a + b not in v.texts:
            v.texts.append(a + b)
    v.types = [T_NORMAL] * len(v.texts)
    # ignore_merges (llama3) emits this whole; plain BPE cannot reach it
    extras = [(BYTE_LEVEL[32] + b'zebra', T_NORMAL), (b'<|endoftext|>', T_CONTROL),
              (b'<tool>', T_USER), (b'ool>', T_USER), (b'  ', T_USER), (b'<|unused|>', T_UNUSED)]
    for t, ty in extras:
        v.texts.append(t)
        v.types.append(ty)
    v.scores = [0.0] * len(v.texts)
    v.bos = v.eos = v.texts.index(b'<|endoftext|>')
    return v.finish()


def with_pre(v, pre):
    w = Vocab()
    w.__dict__.update({k: x for k, x in v.__dict__.items()})
    w.pre = pre
    return w.finish()

# --------------------------------------------------------------------------
# test strings

CASES = [
    b'', b'Once upon a time', b'Once upon a time, there was a little girl named Lily.',
    b' leading space', b'trailing space ', b'  two  spaces  ', b'\n', b'\n\nnew\nlines\r\n\r\n',
    b"it's they're we've I'm you'll he'd can't IT'S THEY'RE 'S", b"'sand 'tis 'll'",
    b'1 12 123 1234 12345 1234567 3.14159 x2y22z222', '\u0661\u0662\u0663\u0664 \u0968\u0969 \u2167\u00b2'.encode(),
    'Γειά σου κόσμε Привет мир こんにちは 你好，世界！'.encode(), 'naïve café façade Ünïcödé'.encode(),
    '😀🎉 👍👍 emoji!'.encode(), b'tabs\t\tand   spaces   \t x', 'a\u00a0b\u3000c \u2028d\u0085e'.encode(),
    b'<s>literal control</s> <|endoftext|> <tool> x<tool>y ool> <<tool>>',
    b'bad \xff\xfe bytes \xc3 \xe2\x82 \xf0\x9f\x98 trunc', b'\xc0\x80 overlong \xed\xa0\x80 surrogate',
    b'$5 + 3 = <8> ^~| `quoted` @user #tag %p &amp;', b'!!!\n\n???  ...\r\n--',
    b'Once upon a time zebra Zebra  zebra', b'x' * 40, b'ab ' * 12 + b'abab', b'lllll aaa llll',
    b"~~!!~ `~` a~b $+$ <=>^|| x'LLama 'Sam I'Ve", b'\x1c\x1d \x1f\x0b\x0c a\x85b',
]


CONFIGS = ['spm-tok512', 'llama2c-tok512'] + ['gpt2:' + p for p in ('default', 'gpt2', 'llama3', 'qwen2', 'smollm')]


def shared_dir():
    """Like tests/test.h: $SEQKV_SHARED if set, else ../shared or ../../shared."""
    env = os.environ.get('SEQKV_SHARED')
    for d in [env] if env else [os.path.join(ROOT, '..', 'shared'), os.path.join(ROOT, '..', '..', 'shared')]:
        if os.path.exists(os.path.join(d, 'models', 'stories260K', 'stories260K.gguf')):
            return d
    return None


def tok512_path():
    d = shared_dir()
    return os.path.join(d, 'models', 'stories260K', 'tok512.bin') if d else None


def valid_utf8(b):
    try:
        b.decode('utf-8')
        return True
    except UnicodeDecodeError:
        return False


def expected_lines(gpt2_vocab):
    """Lines of expected.txt (only the gpt2 ones without ../shared)."""
    lines, p = [], tok512_path()
    toks = read_llama2c(p, 512) if p else None
    spm = llama2c_to_vocab(toks) if toks else None
    for cfg in CONFIGS:
        if not toks and not cfg.startswith('gpt2:'):
            continue
        for c in CASES:
            for add in (0, 1):
                if cfg == 'spm-tok512':
                    ids = spm_encode(spm, c, add)
                elif cfg == 'llama2c-tok512':
                    if not add or not valid_utf8(c):
                        continue  # run.c always adds BOS; it groups invalid UTF-8 differently
                    ids = llama2c_encode(toks, c)
                else:
                    ids = encode(with_pre(gpt2_vocab, cfg.split(':')[1]), c, add)
                lines.append('%s\t%d\t%s\t%s' % (cfg, add, c.hex() or '-', ' '.join(map(str, ids)) or '-'))
    return lines

# --------------------------------------------------------------------------
# checks


def report(status, name, why=''):
    print('%s test_tokenizer.py:%s%s' % (status, name, (': ' + why) if why else ''))
    sys.stdout.flush()
    return status != 'FAIL'


def check_expected():
    if regex is None:
        return report('SKIP', 'expected_ids_reproducible', 'python3-regex not installed')
    v = read_tokdesc(os.path.join(DATA, 'bpe.tokdesc'))
    fresh = expected_lines(v)
    old = open(os.path.join(DATA, 'expected.txt')).read().split('\n')
    old = [x for x in old if x and not x.startswith('#') and (tok512_path() or x.startswith('gpt2:'))]
    if fresh != old:
        bad = next((a, b) for a, b in zip(fresh + [''] * 9, old + [''] * 9) if a != b)
        return report('FAIL', 'expected_ids_reproducible', 'first difference: %r vs %r' % bad)
    return report('PASS', 'expected_ids_reproducible', '' if tok512_path() else 'gpt2 lines only: no ../shared')


def check_unicode_table():
    if regex is None:
        return report('SKIP', 'unicode_table_matches_regex', 'python3-regex not installed')
    src = open(os.path.join(ROOT, 'src', 'tokenizer', 'unicode_tables.h')).read()
    shift = int(src.split('#define SKV_UC_SHIFT ')[1].split()[0])

    def array(name):
        body = src.split(name)[1].split('{', 1)[1].split('}', 1)[0]
        return [int(x) for x in body.replace('\n', ' ').split(',') if x.strip()]
    s1, s2 = array('uint16_t skv_uc_stage1['), array('uint8_t skv_uc_stage2[')
    groups = [(1, r'\p{N}'), (2, r'\p{L}'), (3, r'\p{Z}'), (4, r'\p{M}'), (5, r'\p{P}'), (6, r'\p{S}'), (7, r'\p{C}')]
    rx = [(g, regex.compile(p)) for g, p in groups]
    ws = regex.compile(r'\s')
    bad = 0
    for cp in range(0x110000):
        ch = chr(cp)
        if unicodedata.category(ch) == 'Cn':
            continue  # assigned after Unicode 14: may differ between databases
        f = s2[(s1[cp >> shift] << shift) + (cp & ((1 << shift) - 1))]
        want = next(g for g, r in rx if r.match(ch)) | (8 if ws.match(ch) else 0)
        if f != want:
            bad += 1
            if bad < 4:
                print('    U+%04X: table %d, regex %d' % (cp, f, want))
    if bad:
        return report('FAIL', 'unicode_table_matches_regex', '%d code points differ' % bad)
    return report('PASS', 'unicode_table_matches_regex')


def read_gguf_tokens(path):
    b = open(path, 'rb').read()
    pos = 8

    def rd(fmt):
        nonlocal pos
        v = struct.unpack_from('<' + fmt, b, pos)[0]
        pos += struct.calcsize('<' + fmt)
        return v

    def rs():
        nonlocal pos
        n = rd('Q')
        pos += n
        return b[pos - n:pos]
    sizes = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}

    def val(t):
        if t == 8:
            return rs()
        if t == 9:
            at, n = rd('I'), rd('Q')
            return [val(at) for _ in range(n)]
        return rd(sizes[t])
    rd('Q')
    kv = {}
    for _ in range(rd('Q')):
        k = rs().decode()
        kv[k] = val(rd('I'))
    return kv


def check_llama2c_conversion():
    d = shared_dir()
    if not d:
        return report(missing('SKIP', 'FAIL'), 'llama2c_conversion_matches_gguf', 'no ../shared (stories260K)')
    kv = read_gguf_tokens(os.path.join(d, 'models', 'stories260K', 'stories260K.gguf'))
    v = llama2c_to_vocab(read_llama2c(tok512_path(), 512))
    same = (v.texts == kv['tokenizer.ggml.tokens'] and v.scores == kv['tokenizer.ggml.scores'] and
            v.types == kv['tokenizer.ggml.token_type'] and v.bos == kv['tokenizer.ggml.bos_token_id'] and
            v.eos == kv['tokenizer.ggml.eos_token_id'] and v.unk == kv['tokenizer.ggml.unknown_token_id'])
    return report('PASS' if same else 'FAIL', 'llama2c_conversion_matches_gguf')


ALPHABET = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") +
            list(" \n\t\r.,;:!?'\"-()[]{}<>/\\@#$%^&*_+=|~`") + ["'s", "'T", "'re", "'LL", "'ve", "'d"] +
            list('éüßçñØæłαβγΓΩπжЖщЯ日本語中文한국어ابجअआइ\u0301\u0308ก\u0e31') +
            list('٠١٢३४५²³½ⅫⅣ') + list('\u00a0\u2009\u3000\u2028\u0085\x0b\x0c\x1c\x1f\x00\x7f') +
            list('😀🎉👍🏽€£©™→∑≠…—“”‘’') + ['<tool>', 'ool>', '<|endoftext|>', '  ', '\u2581', '<0x41>'])


# what the DeepSeek and Qwen3.5 pre-tokenizers tell apart: their explicit ranges' edges,
# fullwidth punctuation, U+3000..U+3002, marks after letters, Hangul, U+0800..
EXTRA = list('µºÀ×ØÖǃƻʔʰΆ·ꙮ＂：～‘‟、。〃ࠀ龥龦가퟿ﬀ\u0e31\u0300\u20dd')


def random_text(rnd, alphabet=ALPHABET):
    n = rnd.choice([1, 2, 5, 10, 30, 80, 200])
    s = ''.join(rnd.choice(alphabet) for _ in range(n)).encode()
    if rnd.random() < 0.15:  # invalid UTF-8
        k = rnd.randrange(len(s) + 1)
        s = s[:k] + bytes(rnd.choice([0x80, 0xbf, 0xc3, 0xe2, 0xf0, 0xff, 0xc0, 0xed, 0xf5]) for _ in range(rnd.randint(1, 3))) + s[k:]
    return s


def c_binary():
    """The C test binary and why it cannot be used ('' when it can)."""
    exe = os.path.join(os.environ.get('SEQKV_BUILD', os.path.join(ROOT, 'build')), 'tests', 'test_tokenizer')
    if regex is None:
        return exe, 'python3-regex not installed'
    if not os.path.exists(exe):
        return exe, 'C test binary %s not built' % exe
    return exe, ''


def write_inputs(tmp, texts):
    """The inputs file for --dump / --split: one hex line per text."""
    inp = os.path.join(tmp, 'in.txt')
    with open(inp, 'w') as f:
        f.write(''.join((t.hex() or '-') + '\n' for t in texts))
    return inp


def check_differential():
    name = 'differential_vs_c'
    exe, why = c_binary()
    if why:
        return report('SKIP', name, why)
    cp_ok = [c for c in ALPHABET if all(unicodedata.category(x) != 'Cn' for x in c)]
    assert cp_ok == ALPHABET
    rnd = random.Random(20240611)
    texts = [random_text(rnd) for _ in range(400)] + CASES
    vocabs = [('gpt2:' + p, with_pre(read_tokdesc(os.path.join(DATA, 'bpe.tokdesc')), p))
              for p in ('default', 'gpt2', 'llama3', 'qwen2', 'smollm', 'falcon', 'qwen35', 'deepseek-llm',
                        'deepseek-coder')]
    if tok512_path():
        spm = llama2c_to_vocab(read_llama2c(tok512_path(), 512))
        vocabs.append(('spm', spm))
        ud = llama2c_to_vocab(read_llama2c(tok512_path(), 512))
        for t in (b'<tool>', b'ool>', b'\n\n', SEP + SEP):
            ud.texts.append(t)
            ud.types.append(T_USER)
            ud.scores.append(0.0)
        vocabs.append(('spm+user', ud.finish()))
    with tempfile.TemporaryDirectory() as tmp:
        inp = write_inputs(tmp, texts)
        for label, v in vocabs:
            desc = os.path.join(tmp, 'v.tokdesc')
            v.write(desc)
            for add in (0, 1):
                r = subprocess.run([exe, '--dump', desc, inp, str(add)], capture_output=True, text=True)
                got = r.stdout.split('\n')
                if r.returncode != 0:
                    return report('FAIL', name, '%s: --dump exited %d: %s' % (label, r.returncode, r.stderr[-300:]))
                for i, t in enumerate(texts):
                    want = ' '.join(map(str, encode(v, t, add))) or '-'
                    if got[i] != want:
                        return report('FAIL', name, '%s add_special=%d text %r: C %s, reference %s'
                                      % (label, add, t, got[i], want))
    return report('PASS', name, '%d strings x %d vocabularies x 2' % (len(texts), len(vocabs)))


def check_splits():
    name = 'pretokenizer_splits_vs_regex'
    exe, why = c_binary()
    if why:
        return report('SKIP', name, why)
    rnd = random.Random(7)
    texts = [random_text(rnd) for _ in range(2000)] + [random_text(rnd, ALPHABET + EXTRA) for _ in range(2000)] + CASES
    with tempfile.TemporaryDirectory() as tmp:
        inp = write_inputs(tmp, texts)
        for pre in PRE_STAGES:
            r = subprocess.run([exe, '--split', pre, inp], capture_output=True, text=True)
            if r.returncode != 0:
                return report('FAIL', name, '--split %s exited %d' % (pre, r.returncode))
            got = r.stdout.split('\n')
            for i, t in enumerate(texts):
                words = pretokenize(pre, lax_utf8(t))
                want = ' '.join(w.encode('utf-8', 'surrogatepass').hex() for w in words) or '-'
                if got[i] != want:
                    return report('FAIL', name, '%s text %r: C %s, regex %s' % (pre, t, got[i], want))
    return report('PASS', name, '%d strings x %d pre-tokenizers' % (len(texts), len(PRE_STAGES)))


def regen():
    if regex is None or not tok512_path():
        sys.exit('--regen needs python3-regex and ../shared/models/stories260K')
    os.makedirs(DATA, exist_ok=True)
    v = synthetic_gpt2()
    v.write(os.path.join(DATA, 'bpe.tokdesc'))
    v = read_tokdesc(os.path.join(DATA, 'bpe.tokdesc'))
    with open(os.path.join(DATA, 'expected.txt'), 'w') as f:
        f.write('# config\tadd_special\thex text\tids (generated by tests/test_tokenizer.py --regen)\n')
        f.write('\n'.join(expected_lines(v)) + '\n')


def main():
    if '--regen' in sys.argv:
        regen()
        return 0
    ok = True
    for check in (check_expected, check_unicode_table, check_llama2c_conversion, check_splits, check_differential):
        ok = check() and ok
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
