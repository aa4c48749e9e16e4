"""Shared pieces of the command-line tests (tests/test_*_cli.py; not a test itself).

Where the built `seqkv` is ($SEQKV_BUILD, default build/), the PASS/FAIL/SKIP line
protocol that tests/run.sh counts, and running the binary from the repository root.
"""
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("SEQKV_BUILD", "build")
SEQKV = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "seqkv")
# $SEQKV_WRAP: a command run() puts before seqkv (make valgrind-cli: valgrind memcheck);
# the time limits are then 30 times longer.
WRAP = shlex.split(os.environ.get("SEQKV_WRAP", ""))


class Skip(Exception):
    """The case cannot run here (a missing optional asset); reported as SKIP."""


class Fail(Exception):
    """A checked property does not hold; reported as FAIL."""


def check(cond, why):
    if not cond:
        raise Fail(why)


def run(*args, stdin=None, timeout=120):
    """-> (exit code, stdout, stderr) of `seqkv ARGS`, run from the repository root."""
    p = subprocess.run(WRAP + [SEQKV] + [str(a) for a in args], input=stdin, capture_output=True,
                       timeout=timeout * (30 if WRAP else 1), cwd=ROOT)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


class Reporter:
    """Prints `STATUS binary:case[: why]` lines and counts the failures."""

    def __init__(self, name):
        self.name = name
        self.failed = 0

    def report(self, case, status, why=""):
        if status == "FAIL":
            self.failed += 1
        print("%s %s:%s%s" % (status, self.name, case, ": " + why if why else ""))
        sys.stdout.flush()

    def run_case(self, case, *args):
        """Runs case(*args): PASS, or SKIP / FAIL with the reason; a crash of the case is a FAIL."""
        try:
            case(*args)
            self.report(case.__name__, "PASS")
        except Skip as e:
            self.report(case.__name__, "SKIP", str(e))
        except Fail as e:
            self.report(case.__name__, "FAIL", str(e))
        except Exception as e:  # a crash of the test itself is a failure too
            self.report(case.__name__, "FAIL", "%s: %s" % (type(e).__name__, e))


def run_cases(reporter, cases, prefix):
    """Runs each case(tmp) in a fresh temporary directory; returns the exit status (1 if any failed)."""
    for case in cases:
        tmp = tempfile.mkdtemp(prefix=prefix)
        try:
            reporter.run_case(case, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if reporter.failed else 0


def perturbed_copy(model, out):
    """Writes a copy of the GGUF model with the lowest bit of its last non-zero weight word
    flipped (tensor data, f32/f16 aligned, ends the file): another fingerprint. Returns out."""
    with open(model, "rb") as f:
        data = bytearray(f.read())
    off = (len(data) & ~3) - 4
    while off > 64 and data[off:off + 4] == b"\0\0\0\0":
        off -= 4
    data[off] ^= 1
    with open(out, "wb") as f:
        f.write(bytes(data))
    return out
