"""The Python tests' environment (not a test itself): where the shared read-only assets
are, whether their absence may be skipped, and running a file's cases.

Mirrors tests/test.h: $SEQKV_SHARED when set (and holding stories260K), else ../shared or
../../shared beside the repository. With SEQKV_REQUIRE_SHARED=1 (set by .ci/run) a case
that would skip because an asset is missing must fail instead: missing(skip, fail) picks
the caller's own way of saying either, e.g.

    raise testenv.missing(Skip, Fail)("stories260K not found (../shared)")
    report(case, testenv.missing(None, False), "../shared/... not present")
"""
import os
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join("models", "stories260K", "stories260K.gguf")


def shared_dir():
    """The shared assets' folder, or None when they are absent (a fresh clone)."""
    env = os.environ.get("SEQKV_SHARED")
    cands = [env] if env else [os.path.join(ROOT, "..", "shared"), os.path.join(ROOT, "..", "..", "shared")]
    for d in cands:
        if os.path.isfile(os.path.join(d, PROBE)):
            return d
    return None


def shared_path(*parts):
    """A path inside the shared assets (under ../shared when they are absent, so it does not exist)."""
    return os.path.join(shared_dir() or os.path.join(ROOT, "..", "shared"), *parts)


def required():
    """True when missing shared assets must fail the suite (SEQKV_REQUIRE_SHARED=1)."""
    return os.environ.get("SEQKV_REQUIRE_SHARED") == "1"


def missing(skip, fail):
    """What a case whose shared asset is missing reports: `fail` when required, else `skip`."""
    return fail if required() else skip


def run_cases(reporter, cases, prefix):
    """Runs every case(tmp) through reporter (a clitest.Reporter) in one temporary folder,
    removed afterwards; -> the exit status (1 when a case failed)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for case in cases:
            reporter.run_case(case, tmp)
    return 1 if reporter.failed else 0


def run_stories_cases(reporter, cases, model, prefix):
    """run_cases when model (a path under the shared assets) exists; otherwise every case
    is reported missing (SKIP, or FAIL when the shared assets are required)."""
    if not os.path.isfile(model):
        for c in cases:
            reporter.report(c.__name__, missing("SKIP", "FAIL"), "%s not found (../shared)" % os.path.basename(model))
        return 1 if reporter.failed else 0
    return run_cases(reporter, cases, prefix)
