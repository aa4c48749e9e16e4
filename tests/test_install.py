#!/usr/bin/python3
"""`make install PREFIX=...` into a temporary prefix (issue 40, "What a new user hit"), then
the README's two pkg-config lines build examples/restore.c from that prefix alone, and both
programs run. Seconds; needs pkg-config.

  installs_the_files         bin/seqkv, the header, libseqkv.a, libseqkv.so.0 (+ the .so
                             link), seqkv.pc, seqkv-static.pc, the man page, the model;
                             the installed seqkv runs
  shared_build_runs          cc app.c $(pkg-config --cflags --libs seqkv): the program
                             needs libseqkv.so.0 and starts from the user prefix without
                             LD_LIBRARY_PATH (the .pc's rpath), restoring verified
  static_build_runs          cc app.c $(pkg-config --cflags --libs seqkv-static): no
                             libseqkv.so.0 among the program's needs; it runs the same
  ldconfig_only_for_system_prefixes  a user PREFIX runs no ldconfig (a fake one in the
                             command line is never called); PREFIX=/usr/local runs it
                             (make -n), DESTDIR (a package build) does not
Prints PASS/FAIL/SKIP lines for tests/run.sh.
"""
import os
import shutil
import stat
import subprocess
import sys

from clitest import BUILD, ROOT, Reporter, Skip, check
from test_example import TEXT, sanitizer_flags
from testenv import run_cases

NAME = "test_install"
REPORTER = Reporter(NAME)
STATE = {}


def make_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    env.update(extra)
    return env


def fake_ldconfig(tmp):
    path = os.path.join(tmp, "fake-ldconfig")
    with open(path, "w") as f:
        f.write("#!/bin/sh\necho called >> %s.log\n" % path)
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return path


def installed(tmp):
    """The prefix, installed once for every case."""
    if "prefix" not in STATE:
        if not shutil.which("pkg-config"):
            raise Skip("no pkg-config")
        prefix = os.path.join(tmp, "prefix")
        ld = fake_ldconfig(tmp)
        p = subprocess.run(["make", "-s", "install", "PREFIX=" + prefix, "BUILD=" + BUILD, "LDCONFIG=" + ld],
                           cwd=ROOT, env=make_env(), capture_output=True, text=True, timeout=600)
        check(p.returncode == 0, "make install: %s" % (p.stdout + p.stderr)[-600:])
        STATE["prefix"], STATE["ld"] = prefix, ld
    return STATE["prefix"]


def build_example(tmp, prefix, pc, exe):
    env = make_env(PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    p = subprocess.run(["pkg-config", "--cflags", "--libs", pc], env=env, capture_output=True, text=True)
    check(p.returncode == 0, "pkg-config %s: %s" % (pc, p.stderr))
    flags = p.stdout.split()
    cc = os.environ.get("CC", "cc")
    out = os.path.join(tmp, exe)
    src = os.path.join(ROOT, "examples", "restore.c")
    p = subprocess.run([cc, "-std=c11", "-O1"] + sanitizer_flags() + [src, "-o", out] + flags, capture_output=True,
                       text=True, cwd=tmp)
    check(p.returncode == 0, "cc with %s: %s" % (" ".join(flags), p.stderr[-600:]))
    return out


def needed(exe):
    p = subprocess.run(["readelf", "-d", exe], capture_output=True, text=True)
    return [l.split("[", 1)[1].rstrip("]") for l in p.stdout.splitlines() if "(NEEDED)" in l]


def runs(exe, prefix):
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    model = os.path.join(prefix, "share", "seqkv", "kjv-4m.gguf")
    p = subprocess.run([exe, model, TEXT], capture_output=True, text=True, env=env, timeout=300, cwd="/")
    check(p.returncode == 0, "%s: exit %d: %s" % (exe, p.returncode, p.stderr[-400:]))
    check("digest verified" in p.stdout and p.stdout.rstrip("\n").endswith("text: " + TEXT), "output: %r" % p.stdout)


def installs_the_files(tmp):
    prefix = installed(tmp)
    for f in ["bin/seqkv", "include/seqkv.h", "lib/libseqkv.a", "lib/libseqkv.so.0", "lib/libseqkv.so",
              "lib/pkgconfig/seqkv.pc", "lib/pkgconfig/seqkv-static.pc", "share/man/man1/seqkv.1",
              "share/seqkv/kjv-4m.gguf"]:
        check(os.path.exists(os.path.join(prefix, f)), "make install did not install %s" % f)
    p = subprocess.run([os.path.join(prefix, "bin", "seqkv"), "--version"], capture_output=True, text=True)
    check(p.returncode == 0 and p.stdout.strip(), "the installed seqkv --version: %d %r" % (p.returncode, p.stderr))


def shared_build_runs(tmp):
    prefix = installed(tmp)
    exe = build_example(tmp, prefix, "seqkv", "app_shared")
    check("libseqkv.so.0" in needed(exe), "the shared build does not use libseqkv.so.0: %s" % needed(exe))
    runs(exe, prefix)


def static_build_runs(tmp):
    prefix = installed(tmp)
    exe = build_example(tmp, prefix, "seqkv-static", "app_static")
    check(not any(n.startswith("libseqkv") for n in needed(exe)), "the static build needs %s" % needed(exe))
    runs(exe, prefix)


def ldconfig_only_for_system_prefixes(tmp):
    installed(tmp)
    check(not os.path.exists(STATE["ld"] + ".log"), "make install PREFIX=<user dir> ran ldconfig")
    for extra, want in ((["PREFIX=/usr/local"], True), (["PREFIX=/usr/local", "DESTDIR=" + tmp], False),
                        (["PREFIX=" + tmp], False)):
        p = subprocess.run(["make", "-n", "install", "BUILD=" + BUILD, "LDCONFIG=" + STATE["ld"]] + extra, cwd=ROOT,
                           env=make_env(), capture_output=True, text=True, timeout=120)
        ran = any(l.strip() == STATE["ld"] for l in p.stdout.splitlines())
        check(p.returncode == 0 and ran == want, "make -n install %s: ldconfig %s" %
              (" ".join(extra), "run" if ran else "not run"))


CASES = [installs_the_files, shared_build_runs, static_build_runs, ldconfig_only_for_system_prefixes]


def main():
    return run_cases(REPORTER, CASES, "seqkv_install_")


if __name__ == "__main__":
    sys.exit(main())
