#!/usr/bin/python3
"""Progress lines (issue 40, "Long jobs print nothing"): on a terminal, store put, store get,
perplexity, bench, compress and restore draw a progress line on stderr (done/total, rate,
ETA); with stderr not a terminal, or with -q, they draw none. Each command runs under a
pseudo-terminal (python3 pty) and again with stderr a pipe. Bundled model; seconds.

  progress_on_a_terminal      every command's stderr, on a pty, holds a "\\r...tok/s" line
                              (bench: "cases/s") with the rate; none of stdout does
  quiet_without_a_terminal    the same commands with stderr a pipe print no progress line
  quiet_with_q                and with -q on a pty, none either
Prints PASS/FAIL/SKIP lines for tests/run.sh.
"""
import os
import pty
import re
import select
import shutil
import subprocess
import sys

from clitest import ROOT, SEQKV, WRAP, Reporter, check
from testenv import run_cases

NAME = "test_progress"
REPORTER = Reporter(NAME)
PROGRESS = re.compile(r"\r[a-z ()]+: \d+/\d+ (tokens|cases) \([\d.]+%\), [\d.]+ (tok|cases)/s")


def text_file(tmp, n_bytes=1600):
    src = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    path = os.path.join(tmp, "t.txt")
    with open(path, "w") as f:
        f.write(re.sub(r"[^A-Za-z0-9 .,;:'()\n-]", " ", src)[:n_bytes])
    return path


def run_tty(args, tty=True, timeout=300):
    """(exit status, stdout, stderr) of seqkv args, stderr a pty when tty, else a pipe."""
    cmd = WRAP + [SEQKV] + [str(a) for a in args]
    if not tty:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    err = b""
    while True:
        r, _, _ = select.select([master], [], [], timeout)
        if not r:
            p.kill()
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        err += chunk
    out = p.stdout.read().decode(errors="replace")
    p.wait()
    os.close(master)
    return p.returncode, out, err.decode(errors="replace")


def commands(tmp):
    text = text_file(tmp)
    st = os.path.join(tmp, "st")
    skv = os.path.join(tmp, "t.skv")
    return [
        ("compress", ["compress", "-f", text, "-o", skv]),
        ("restore", ["restore", skv, "-o", os.path.join(tmp, "back.txt")]),
        ("store put", ["store", "put", st, "-f", text, "--name", "a"]),
        ("store get", ["store", "get", st, "a", "-o", os.path.join(tmp, "a.txt")]),
        ("perplexity", ["perplexity", "-f", text, "-c", "128"]),
        ("bench", ["bench", "--quick", "-n", "64", "-f", text, "-o", os.path.join(tmp, "bench"), "--no-plots",
                   "--no-rd", "--no-store", "--no-kv-files"]),
    ]


def prepare(tmp):
    shutil.rmtree(os.path.join(tmp, "st"), ignore_errors=True)
    rc, _, err = run_tty(["store", "init", os.path.join(tmp, "st")], tty=False)
    check(rc == 0, "store init: %s" % err)


def progress_on_a_terminal(tmp):
    prepare(tmp)
    for name, args in commands(tmp):
        rc, out, err = run_tty(args)
        check(rc == 0, "%s on a pty: exit %d: %s" % (name, rc, err[-400:]))
        check(PROGRESS.search(err), "%s on a pty drew no progress line: %r" % (name, err[-400:]))
        check("\r" not in out, "%s wrote a progress line to stdout" % name)
        if name != "bench":
            check("ETA" in err or re.search(r"\((100\.0)%\)", err), "%s: no ETA and no end: %r" % (name, err[-300:]))


def quiet_without_a_terminal(tmp):
    prepare(tmp)
    for name, args in commands(tmp):
        rc, out, err = run_tty(args, tty=False)
        check(rc == 0, "%s: exit %d: %s" % (name, rc, err[-400:]))
        check(not PROGRESS.search(err) and "\r" not in err, "%s drew progress into a pipe: %r" % (name, err[-300:]))


def quiet_with_q(tmp):
    prepare(tmp)
    for name, args in commands(tmp):
        rc, out, err = run_tty(args + ["-q"])
        check(rc == 0, "%s -q: exit %d: %s" % (name, rc, err[-400:]))
        check(not PROGRESS.search(err), "%s -q drew progress: %r" % (name, err[-300:]))


CASES = [progress_on_a_terminal, quiet_without_a_terminal, quiet_with_q]


def main():
    return run_cases(REPORTER, CASES, "seqkv_progress_")


if __name__ == "__main__":
    sys.exit(main())
