#!/usr/bin/python3
"""The build's own guarantees (docs/determinism.md "Build guard", README "Layout").

  guard_in_every_tu            every src/<layer>/*.c includes core/fpguard.h
  guard_refuses_fast_math      compiling a guarded file with -ffast-math, -Ofast or
                               -ffinite-math-only stops at the guard's #error, which names
                               docs/determinism.md (gcc and clang; -fsyntax-only, cheap)
  guard_accepts_the_build_flags  ... and the Makefile's own flags pass it, warning-free
  make_refuses_unsafe_flags    `make CFLAGS=-ffast-math` (and OPT=-Ofast, -fassociative-math,
                               which no compiler announces) stops before compiling anything
  make_default_goal_is_all     plain `make` builds everything (README's first command): a rule
                               added above `all:` (the CUDA ones once did) cannot take its place
  fp_contract_pinned_last      -ffp-contract=off comes after the user's CFLAGS on the
                               compile line, so CFLAGS=-ffp-contract=fast cannot win
  clang_pragma_stops_fusion    under the guard clang does not fuse a*b+c even when told
                               -ffp-contract=on (the control without the guard does)
  check_layers_passes          scripts/check_layers.sh accepts the tree and, when the build's
                               objects are there, their symbols
  check_layers_catches         on a copy of src/ and tools/, an upward include, a peer
                               include, an include without its layer and a private header
                               of another folder each fail it
  funclen_counts_the_function  scripts/funclen.py counts a file's first function from its
                               signature, not from the include block above it, and a
                               macro's braces are no block; `make metrics` regenerates
                               docs/metrics.md below its marker (on a copy)
  check_layers_catches_calls   the symbol pass: an object of core calling a function an
                               object of store defines fails it, naming both (nm)
  check_layers_catches_cycle   the chain pass: two store objects calling each other fail
                               it, naming both; the store's own files form a one-way chain
  check_layers_catches_errcap  the error pass: an internal function taking an error buffer
                               and its capacity (char *err, size_t errcap; char *msg, size_t
                               cap) fails it; a public wrapper handing over to skv_err_out
                               at once passes (docs/architecture.md "Errors: one channel")

Prints PASS/FAIL/SKIP lines for tests/run.sh.
"""
import os
import re
import shutil
import subprocess
import sys

from clitest import ROOT, Reporter, Skip, check
from testenv import run_cases

NAME = "test_build"
REPORTER = Reporter(NAME)
GUARD = '#include "core/fpguard.h"'
GUARDED_TU = os.path.join("src", "core", "detmath.c")


def sh(args, cwd=ROOT, env=None):
    """-> (exit code, stdout + stderr) of a command, run from the repository root."""
    p = subprocess.run(args, cwd=cwd, env=env, capture_output=True, timeout=120)
    return p.returncode, (p.stdout + p.stderr).decode("utf-8", "replace")


def clean_make_env():
    """The environment without the outer make's variables (make test, make san pass theirs)."""
    return {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}


def compilers():
    return [c for c in ("gcc", "clang") if shutil.which(c)]


def lib_sources():
    src = os.path.join(ROOT, "src")
    for layer in sorted(os.listdir(src)):
        d = os.path.join(src, layer)
        if os.path.isdir(d):
            for f in sorted(os.listdir(d)):
                if f.endswith(".c"):
                    yield os.path.join("src", layer, f)


def guard_in_every_tu(tmp):
    files = list(lib_sources())
    check(files, "no sources found under src/")
    missing = [f for f in files if GUARD not in open(os.path.join(ROOT, f)).read()]
    check(not missing, "without %s: %s" % (GUARD, " ".join(missing)))


def guard_refuses_fast_math(tmp):
    check(compilers(), "neither gcc nor clang found")
    for cc in compilers():
        for flag in ("-ffast-math", "-Ofast", "-ffinite-math-only"):
            rc, out = sh([cc, "-std=c11", "-D_DEFAULT_SOURCE", "-Iinclude", "-Isrc", flag, "-fsyntax-only", GUARDED_TU])
            check(rc != 0, "%s %s compiled a guarded file" % (cc, flag))
            check("determinism contract (docs/determinism.md)" in out,
                  "%s %s: no #error naming docs/determinism.md:\n%s" % (cc, flag, out[-400:]))


def guard_accepts_the_build_flags(tmp):
    for cc in compilers():
        rc, out = sh([cc, "-std=c11", "-D_DEFAULT_SOURCE", "-Iinclude", "-Isrc", "-O2", "-ffp-contract=off",
                      "-fno-math-errno", "-Wall", "-Wextra", "-Wundef", "-Werror", "-fsyntax-only", GUARDED_TU])
        check(rc == 0, "%s refuses the guarded file under the Makefile's own flags:\n%s" % (cc, out[-400:]))


def make_refuses_unsafe_flags(tmp):
    for var in ("CFLAGS=-ffast-math", "OPT=-Ofast", "CFLAGS=-O2 -fassociative-math", "SANFLAGS=-ffinite-math-only"):
        rc, out = sh(["make", "-n", "BUILD=" + tmp, var, "lib"], env=clean_make_env())
        check(rc != 0, "make %s was not refused" % var)
        check("breaks the determinism contract (docs/determinism.md)" in out, "make %s: %s" % (var, out[-300:]))
        check(" -c src/" not in out, "make %s went on to compile" % var)


def make_default_goal_is_all(tmp):
    rc, out = sh(["make", "-pn", "BUILD=" + tmp], env=clean_make_env())
    goals = [l for l in out.splitlines() if l.startswith(".DEFAULT_GOAL :=")]
    check(goals and goals[-1].split(":=", 1)[1].strip() == "all", "the default goal is not all: %s" % goals)


def fp_contract_pinned_last(tmp):
    obj = os.path.join(tmp, "obj", "core", "util.o")
    rc, out = sh(["make", "-n", "-B", "V=1", "BUILD=" + tmp, "CFLAGS=-ffp-contract=fast", obj], env=clean_make_env())
    check(rc == 0, "make -n failed: %s" % out[-300:])
    line = next((ln for ln in out.splitlines() if " -c src/core/util.c" in ln), "")
    check(line, "no compile command for src/core/util.c in:\n%s" % out[-300:])
    flags = re.findall(r"-ffp-contract=\w+", line)
    check(flags and flags[-1] == "-ffp-contract=off", "the last contraction flag is %s: %s" % (flags[-1:], line))
    check("-ffp-contract=fast" in flags, "the user's CFLAGS are missing from: %s" % line)


def fused(asm):
    return re.search(r"\bvfn?m(add|sub)\d+[sp]s\b", asm) is not None


def clang_pragma_stops_fusion(tmp):
    if not shutil.which("clang"):
        raise Skip("clang is not installed (scripts/install-deps.sh installs it)")
    body = "float f(float a, float b, float c);\nfloat f(float a, float b, float c) { return a * b + c; }\n"
    results = {}
    for name, head in (("guarded", GUARD + "\n"), ("control", "")):
        src = os.path.join(tmp, name + ".c")
        open(src, "w").write(head + body)
        rc, out = sh(["clang", "-std=c11", "-Isrc", "-O2", "-mfma", "-ffp-contract=on", "-S", "-o", "-", src])
        check(rc == 0, "clang -S %s: %s" % (name, out[-300:]))
        results[name] = fused(out)
    check(results["control"], "the control did not fuse: the probe proves nothing on this clang")
    check(not results["guarded"], "clang fused a*b+c under the guard's FP_CONTRACT OFF")


def check_layers_passes(tmp):
    rc, out = sh(["scripts/check_layers.sh", "."])
    check(rc == 0, "check_layers.sh fails on the tree:\n%s" % out[-600:])
    build = os.path.join(ROOT, os.environ.get("SEQKV_BUILD", "build"))
    if not os.path.isdir(os.path.join(build, "obj")):
        raise Skip("no objects in %s/obj: the symbol pass is not run" % build)
    rc, out = sh(["scripts/check_layers.sh", ".", build])
    check(rc == 0 and "objects" in out, "check_layers.sh's symbol pass fails on %s:\n%s" % (build, out[-600:]))


def layered_copy(tmp, name):
    root = os.path.join(tmp, name)
    for d in ("src", "tools"):
        shutil.copytree(os.path.join(ROOT, d), os.path.join(root, d))
    return root


def check_layers_catches(tmp):
    script = os.path.join(ROOT, "scripts", "check_layers.sh")
    bad = [("src/core/util.c", '#include "store/trie.h"', "must not include"),          # upward
           ("src/quant/quant.c", '#include "coder/rangecoder.h"', "must not include"),  # peer
           ("src/engine/ops.c", '#include "util.h"', "does not name its layer"),
           ("src/store/store_kv.c", '#include "container/session_int.h"', "is private to src/container/"),
           ("tools/cmd/cmd_engine.c", '#include "engine/model.h"', "is private to src/engine/")]
    for i, (path, inc, msg) in enumerate(bad):
        root = layered_copy(tmp, "tree%d" % i)
        with open(os.path.join(root, path), "a") as f:
            f.write(inc + "\n")
        rc, out = sh([script, root])
        check(rc != 0, "check_layers.sh accepted %s in %s" % (inc, path))
        check(path in out and msg in out, "check_layers.sh on %s in %s said: %s" % (inc, path, out[-300:]))


def check_layers_catches_errcap(tmp):
    script = os.path.join(ROOT, "scripts", "check_layers.sh")
    bad = ["static int planted(const char *s, char *err, size_t errcap)\n{\n    return s && err && errcap;\n}\n",
           "int planted_msg(char *msg, size_t cap);\n"]
    for i, text in enumerate(bad):
        root = layered_copy(tmp, "errtree%d" % i)
        with open(os.path.join(root, "src/quant/kvquant.c"), "a") as f:
            f.write(text)
        rc, out = sh([script, root])
        check(rc != 0, "check_layers.sh accepted an error buffer pair: %s" % text)
        check("src/quant/kvquant.c" in out and "error buffer and its capacity" in out,
              "check_layers.sh on %r said: %s" % (text, out[-300:]))
    root = layered_copy(tmp, "errtree_ok")
    with open(os.path.join(root, "src/quant/kvquant.c"), "a") as f:
        f.write("int planted_api(char *err, size_t errcap)\n{\n    skv_err e = {0};\n"
                "    return skv_err_out(&e, SKV_OK, err, errcap);\n}\n")
    rc, out = sh([script, root])
    check(rc == 0, "check_layers.sh refused a public wrapper over skv_err_out: %s" % out[-300:])


def check_layers_catches_calls(tmp):
    if not shutil.which("nm") or not compilers():
        raise Skip("no nm or no C compiler")
    build = os.path.join(tmp, "symbuild")
    srcs = {"core": "int skv_planted_up(void);\nint skv_planted(void) { return skv_planted_up(); }\n",
            "store": "int skv_planted_up(void);\nint skv_planted_up(void) { return 1; }\n"}
    for layer, text in srcs.items():
        os.makedirs(os.path.join(build, "obj", layer))
        c = os.path.join(tmp, layer + ".c")
        with open(c, "w") as f:
            f.write(text)
        rc, out = sh([compilers()[0], "-c", c, "-o", os.path.join(build, "obj", layer, "planted.o")])
        check(rc == 0, "cannot compile the planted object: %s" % out)
    rc, out = sh(["scripts/check_layers.sh", ".", build])
    check(rc != 0, "check_layers.sh accepted core calling store:\n%s" % out[-400:])
    check("core/planted.o: calls skv_planted_up, defined in store" in out,
          "check_layers.sh did not name the call: %s" % out[-400:])


def check_layers_catches_cycle(tmp):
    if not shutil.which("nm") or not compilers():
        raise Skip("no nm or no C compiler")
    build = os.path.join(tmp, "cycbuild")
    os.makedirs(os.path.join(build, "obj", "store"))
    srcs = {"store_up": "int skv_low(void);\nint skv_up(void);\nint skv_up(void) { return skv_low(); }\n",
            "store_low": "int skv_up(void);\nint skv_low(void);\nint skv_low(void) { return skv_up() + 1; }\n"}
    for name, text in srcs.items():
        c = os.path.join(tmp, name + ".c")
        with open(c, "w") as f:
            f.write(text)
        rc, out = sh([compilers()[0], "-c", c, "-o", os.path.join(build, "obj", "store", name + ".o")])
        check(rc == 0, "cannot compile the planted object: %s" % out)
    rc, out = sh(["scripts/check_layers.sh", ".", build])
    check(rc != 0, "check_layers.sh accepted two store files calling each other:\n%s" % out[-400:])
    check("cycle: store_low store_up" in out, "check_layers.sh did not name the cycle: %s" % out[-400:])
    objs = os.path.join(ROOT, os.environ.get("SEQKV_BUILD", "build"), "obj", "store")
    if os.path.isdir(objs):
        rc, out = sh(["scripts/file_cycles.py", objs, "--order"])
        check(rc == 0 and re.search(r"^store_tx +-> \(none\)$", out, re.M), "src/store/ is not a chain from store_tx.c:\n%s" % out[-600:])


def funclen_counts_the_function(tmp):
    d = os.path.join(tmp, "fl", "src")
    os.makedirs(d)
    with open(os.path.join(d, "a.c"), "w") as f:
        f.write('#include <stdio.h>\n#include <string.h>\n\n#define ROW(x) { x, #x }\n\n'
                'static int first(int x)\n{\n    return x + 1;\n}\n')
    rc, out = sh([os.path.join(ROOT, "scripts", "funclen.py"), "--list", "5", "src"], cwd=os.path.join(tmp, "fl"))
    check(rc == 0 and "functions: 1 " in out, "funclen.py on one function said: %s" % out)
    check(re.search(r"^\s+4\s+src/a\.c:6\s+first$", out, re.M), "first() is lines 6-9 (4 lines): %s" % out)
    doc = os.path.join(tmp, "metrics.md")
    shutil.copy(os.path.join(ROOT, "docs", "metrics.md"), doc)
    with open(doc, "a") as f:
        f.write("stale figures\n")
    rc, out = sh([os.path.join(ROOT, "scripts", "funclen.py"), "--list", "3", "--doc", doc, "src"],
                 cwd=os.path.join(tmp, "fl"))
    text = open(doc).read()
    check(rc == 0 and "stale figures" not in text and "$ scripts/funclen.py --list 3 src\nfunctions: 1 " in text,
          "funclen.py --doc did not regenerate the file: %s %s" % (out, text[-300:]))


CASES = [guard_in_every_tu, guard_refuses_fast_math, guard_accepts_the_build_flags, make_refuses_unsafe_flags,
         make_default_goal_is_all,
         fp_contract_pinned_last, clang_pragma_stops_fusion, check_layers_passes, check_layers_catches,
         check_layers_catches_errcap,
         check_layers_catches_calls, check_layers_catches_cycle, funclen_counts_the_function]


def main():
    return run_cases(REPORTER, CASES, "seqkv_build_")  # cases use distinct names in it


if __name__ == "__main__":
    sys.exit(main())
