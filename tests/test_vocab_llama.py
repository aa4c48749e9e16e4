"""llama.cpp's own tokenizer test files, run against seqkv's tokenizer.

llama.cpp ships vocabulary-only GGUF files (models/ggml-vocab-NAME.gguf: the
tokenizer.ggml.* keys, no tensors) with test inputs (.gguf.inp) and the ids
that the model's reference tokenizer gives for them (.gguf.out). Its
tests/test-tokenizer-0 reads them so: the inputs are separated by the line
"__ggml_vocab_test__" (each input ends before the "\\n" in front of it), the
outputs are one line of space-separated ids per input, and every input is
tokenized as plain text without BOS/EOS (add_special = false, parse_special =
false). This test does the same through skv_vocab_load
($SEQKV_BUILD/tests/test_tokenizer --vocab-dump), one case per vocabulary:

  vocab_<name>   every input gives exactly llama.cpp's ids (PASS with the
                 count and the pre-tokenizer), or the vocabulary is one that
                 seqkv refuses on purpose (REFUSED below: PASS with the reason)

The files are llama.cpp's and are not in this repository: they are read from
$SEQKV_ORACLE_DIR/src/models (default ~/.cache/seqkv-oracle), the llama.cpp
checkout that scripts/oracle/setup.sh makes (docs/oracle.md). Without it the
cases SKIP.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEP = b'\n__ggml_vocab_test__\n'

# Vocabularies seqkv does not tokenize, with why; every other one must pass.
REFUSED = {
    'bert-bge': 'WordPiece (tokenizer.ggml.model "bert"): not implemented',
    'gemma-4': 'Gemma 4 BPE (tokenizer.ggml.model "gemma4"): not implemented',
}


def oracle_models():
    base = os.environ.get('SEQKV_ORACLE_DIR') or os.path.join(os.path.expanduser('~'), '.cache', 'seqkv-oracle')
    return os.path.join(base, 'src', 'models')


def report(status, name, why=''):
    print('%s test_vocab_llama.py:%s%s' % (status, name, (': ' + why) if why else ''))
    sys.stdout.flush()
    return status != 'FAIL'


def read_cases(inp, out):
    """test-tokenizer-0's reading: [(input bytes, [ids])]."""
    with open(inp, 'rb') as f:
        raw = f.read()
    texts, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    with open(out, 'rb') as f:
        ids = [[int(x) for x in line.split()] for line in f.read().split(b'\n')]
    if ids and ids[-1] == [] and len(ids) == len(texts) + 1:
        ids.pop()  # the newline that ends the file
    if len(ids) != len(texts):
        raise ValueError('%d inputs but %d outputs' % (len(texts), len(ids)))
    return list(zip(texts, ids))


def run_vocab(exe, gguf, cases, tmp):
    """-> (pre-tokenizer or None, refusal message or None, [ids or error per case])."""
    inputs = os.path.join(tmp, 'inputs.txt')
    with open(inputs, 'w') as f:
        f.write(''.join((t.hex() or '-') + '\n' for t, _ in cases))
    r = subprocess.run([exe, '--vocab-dump', gguf, inputs, '0'], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = r.stdout.decode('utf-8', 'replace').split('\n')
    if r.returncode != 0:
        raise RuntimeError('exit status %d: %s' % (r.returncode, r.stderr.decode('utf-8', 'replace')[-300:]))
    head = lines[0]
    if head.startswith('REFUSED '):
        return None, head[8:], []
    got = []
    for line in lines[1:1 + len(cases)]:
        got.append([] if line == '-' else [int(x) for x in line.split()] if line[:1].isdigit() else line)
    return head[4:], None, got


def check_vocab(exe, models, name, tmp):
    base = os.path.join(models, 'ggml-vocab-%s.gguf' % name)
    cases = read_cases(base + '.inp', base + '.out')
    pre, refused, got = run_vocab(exe, base, cases, tmp)
    if refused is not None:
        if name in REFUSED:
            return report('PASS', 'vocab_' + name, 'refused as expected (%s): %s' % (REFUSED[name], refused))
        return report('FAIL', 'vocab_' + name, 'refused: ' + refused)
    bad = [(t, want, have) for (t, want), have in zip(cases, got) if want != have]
    passed = len(cases) - len(bad)
    if name in REFUSED:
        return report('FAIL', 'vocab_' + name, 'now loads (pre %s, %d/%d): remove it from REFUSED' %
                      (pre, passed, len(cases)))
    if bad or len(got) != len(cases):
        t, want, have = bad[0] if bad else (b'', [], 'missing output')
        return report('FAIL', 'vocab_' + name, '%d/%d cases (pre %s); first: %r -> %s, llama.cpp %s' %
                      (passed, len(cases), pre, t[:60], have, want))
    return report('PASS', 'vocab_' + name, '%d/%d cases (pre %s)' % (passed, len(cases), pre))


def main():
    models = oracle_models()
    exe = os.path.join(os.environ.get('SEQKV_BUILD', os.path.join(ROOT, 'build')), 'tests', 'test_tokenizer')
    names = sorted(f[len('ggml-vocab-'):-len('.gguf.inp')] for f in
                   (os.listdir(models) if os.path.isdir(models) else []) if
                   f.startswith('ggml-vocab-') and f.endswith('.gguf.inp'))
    if not names:
        return 0 if report('SKIP', 'vocab_llama_cpp', 'no llama.cpp vocabularies in %s '
                           '(run scripts/oracle/setup.sh, or set SEQKV_ORACLE_DIR)' % models) else 1
    ok = True
    with tempfile.TemporaryDirectory(prefix='skv-vocab-') as tmp:
        for name in names:
            try:
                ok = check_vocab(exe, models, name, tmp) and ok
            except (OSError, ValueError, RuntimeError) as e:
                ok = report('FAIL', 'vocab_' + name, str(e)) and ok
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
