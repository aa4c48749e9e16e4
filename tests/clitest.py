"""Shared pieces of the command-line tests (tests/test_*_cli.py; not a test itself).

Where the built `seqkv` is ($SEQKV_BUILD, default build/), the PASS/FAIL/SKIP line
protocol that tests/run.sh counts, and running the binary from the repository root.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("SEQKV_BUILD", "build")
SEQKV = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "seqkv")


class Skip(Exception):
    """The case cannot run here (a missing optional asset); reported as SKIP."""


class Fail(Exception):
    """A checked property does not hold; reported as FAIL."""


def check(cond, why):
    if not cond:
        raise Fail(why)


def run(*args, stdin=None, timeout=120):
    """-> (exit code, stdout, stderr) of `seqkv ARGS`, run from the repository root."""
    p = subprocess.run([SEQKV] + [str(a) for a in args], input=stdin, capture_output=True, timeout=timeout,
                       cwd=ROOT)
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
