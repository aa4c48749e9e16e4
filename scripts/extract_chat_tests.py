#!/usr/bin/env python3
"""extract_chat_tests.py SRC OUTDIR - turns the test cases of llama.cpp's
tests/test-chat-template.cpp into fixture files for tests/test_template.c.

The C++ file is read as a specification: its `test_cases` vector holds, per case,
(name, template, expected, expected_jinja, bos, eos, supported_with_jinja,
extra_conversation). Each case becomes OUTDIR/NN.case, a list of sections
"@KEY LEN\\n" followed by LEN raw bytes and a newline, so that every byte of a
template or an expected rendering survives exactly:
  name, template, expected (the jinja rendering: expected_jinja, else expected),
  expected_builtin (llama.cpp's built-in formatter's rendering), bos, eos,
  jinja (1 or 0), then role/content pairs: the fixed conversation plus extras.
"""
import os
import re
import sys

CONVERSATION = None  # read from the file: the `conversation` vector


def tokens(text):
    """C++ tokens that matter here: strings (adjacent literals joined), words, punctuation."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            i = text.index('\n', i)
        elif text.startswith('/*', i):
            i = text.index('*/', i) + 2
        elif c.isspace():
            i += 1
        elif c == '"' or (text.startswith('u8"', i)):
            if c != '"':
                i += 2
            s, i = string_literal(text, i)
            yield ('str', s)
        elif c.isalnum() or c == '_':
            m = re.match(r'[A-Za-z0-9_]+', text[i:])
            yield ('word', m.group(0))
            i += len(m.group(0))
        else:
            yield ('punct', c)
            i += 1


ESCAPES = {'n': '\n', 't': '\t', 'r': '\r', '"': '"', '\\': '\\', "'": "'", '0': '\0'}


def string_literal(text, i):
    assert text[i] == '"'
    i += 1
    out = []
    while text[i] != '"':
        if text[i] == '\\':
            out.append(ESCAPES[text[i + 1]])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return ''.join(out), i + 1


def parse_value(toks, k):
    """One initializer: a brace list, a string (adjacent literals, U8C(...)), or a word."""
    kind, v = toks[k]
    if kind == 'punct' and v == '{':
        items, k = [], k + 1
        while toks[k] != ('punct', '}'):
            item, k = parse_value(toks, k)
            items.append(item)
            if toks[k] == ('punct', ','):
                k += 1
        return items, k + 1
    if kind == 'word' and v == 'U8C':
        s, k = parse_value(toks, k + 2)
        assert toks[k] == ('punct', ')')
        return s, k + 1
    if kind == 'str':
        s = ''
        while toks[k][0] == 'str':
            s += toks[k][1]
            k += 1
        return s, k
    return v, k + 1


def find_list(toks, name):
    for k in range(len(toks) - 1):
        if toks[k] == ('word', name) and toks[k + 1] == ('punct', '{'):
            return parse_value(toks, k + 1)[0]
    raise SystemExit('extract_chat_tests: no %s in the source' % name)


def section(key, s):
    b = s.encode('utf-8')
    return b'@' + key.encode() + b' ' + str(len(b)).encode() + b'\n' + b + b'\n'


def write_case(outdir, idx, case, conversation):
    fields = case + [''] * (8 - len(case))
    name, tmpl, expected, expected_jinja, bos, eos = fields[:6]
    jinja = fields[6] if len(case) > 6 else 'true'
    extra = fields[7] if len(case) > 7 and fields[7] else []
    out = section('name', name) + section('template', tmpl)
    out += section('expected', expected_jinja or expected)
    out += section('expected_builtin', expected)
    out += section('bos', bos) + section('eos', eos)
    out += section('jinja', '1' if jinja == 'true' else '0')
    for role, content in conversation + extra:
        out += section('role', role) + section('content', content)
    with open(os.path.join(outdir, '%02d.case' % idx), 'wb') as f:
        f.write(out)


def main():
    src, outdir = sys.argv[1], sys.argv[2]
    with open(src, encoding='utf-8') as f:
        text = f.read()
    toks = list(tokens(text[text.index('int main_automated_tests'):]))
    conversation = find_list(toks, 'conversation')
    cases = find_list(toks, 'test_cases')
    os.makedirs(outdir, exist_ok=True)
    for idx, case in enumerate(cases):
        write_case(outdir, idx, case, conversation)
    print('%d cases written to %s' % (len(cases), outdir))


if __name__ == '__main__':
    main()
