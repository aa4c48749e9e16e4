#!/usr/bin/python3
"""The README's library example (examples/restore.c) compiles against the built static
library and the public header alone, with strict warnings, and runs on the bundled model:
it stores a text as a .skv session, restores it verified and prints the text back."""
import os
import subprocess
import sys

from clitest import BUILD, ROOT, WRAP, Reporter, check, run_cases

LIB = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "libseqkv.a")
TEXT = "In the beginning God created the heaven and the earth."


def sanitizer_flags():
    """The library's own sanitizers (make san), which the example must link with too."""
    p = subprocess.run(["nm", "-A", LIB], capture_output=True, text=True)
    flags = []
    if "__asan_" in p.stdout:
        flags.append("-fsanitize=address")
    if "__ubsan_" in p.stdout:
        flags.append("-fsanitize=undefined")
    return flags


def case_example_compiles_and_runs(tmp):
    exe = os.path.join(tmp, "restore")
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"] + sanitizer_flags() + [
        "-I" + os.path.join(ROOT, "include"), os.path.join(ROOT, "examples", "restore.c"), LIB,
        "-llmdb", "-lzstd", "-lxxhash", "-lpthread", "-lm", "-o", exe]
    p = subprocess.run(cmd, capture_output=True, text=True)
    check(p.returncode == 0, "compile: %s" % p.stderr)
    p = subprocess.run(WRAP + [exe, os.path.join(ROOT, "models", "kjv-4m.gguf"), TEXT], capture_output=True,
                       text=True, timeout=120 * (30 if WRAP else 1))  # WRAP: make valgrind-cli
    check(p.returncode == 0, "run: exit %d: %s" % (p.returncode, p.stderr))
    check("digest verified" in p.stdout and p.stdout.rstrip("\n").endswith("text: " + TEXT),
          "output: %r" % p.stdout)
    p = subprocess.run(WRAP + [exe], capture_output=True, text=True)
    check(p.returncode == 2 and "usage" in p.stderr, "no arguments: exit %d" % p.returncode)


def case_example_is_short(tmp):
    """The README promises a ~20-line example: count its lines of code in main."""
    src = open(os.path.join(ROOT, "examples", "restore.c")).read()
    body = src[src.index("int main"):]
    lines = [l for l in body.splitlines() if l.strip() and not l.strip().startswith(("/*", "*"))]
    check(len(lines) <= 30, "main is %d lines" % len(lines))


if __name__ == "__main__":
    sys.exit(run_cases(Reporter("test_example"), [case_example_compiles_and_runs, case_example_is_short],
                       "seqkv-example-"))
