"""llama.cpp's own server tests against `seqkv serve` (issue 48; docs/server.md "llama.cpp's
server tests").

The test files of tools/server/tests/unit in the llama.cpp source that scripts/oracle/setup.sh
clones from the node-llama-cpp npm bundle (v0.4.0) run unedited under Debian's pytest, with
LLAMA_SERVER_BIN_PATH naming tests/llama_server/llama-server, a stand-in that maps the
model flags to the shared stories260K and execs `seqkv serve` with every other flag as is.
The openai Python client has no Debian package: tests/llama_server/pyshim stands in for its
import only, and the few tests that use it skip.

Every test of FILES must pass, except those tests/llama_server/expected_failures.txt lists
with a reason (a model that cannot be had offline, a feature not built yet). Lines:
    PASS   one per passing test
    FAIL   a test that fails and is not listed, or a listed one that passes now (take it
           off the list: the list only shrinks)
    SKIP   one line with the count of listed failures
Runs in the release build only (about 2 minutes); a sanitizer build skips it.
"""
import os
import re
import socket
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testenv  # noqa: E402
from clitest import BUILD, ROOT, Reporter  # noqa: E402

FILES = ["test_basic", "test_completion", "test_chat_completion", "test_tokenize", "test_security",
         "test_ctx_shift", "test_slot_save", "test_infill", "test_tool_call", "test_embedding",
         "test_tools_builtin", "test_mcp_servers", "test_proxy", "test_template", "test_ignore_eos", "test_metrics",
         "test_compat_anthropic", "test_compat_gcp", "test_sleep", "test_compat_oai_responses"]
HERE = os.path.join(ROOT, "tests", "llama_server")
LIST = os.path.join(HERE, "expected_failures.txt")
NAME = "test_llama_server_suite"


def suite_dir():
    base = os.environ.get("SEQKV_ORACLE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "seqkv-oracle")
    d = os.path.join(base, "src", "tools", "server", "tests")
    return d if os.path.isfile(os.path.join(d, "utils.py")) else None


def expected():
    """{test id or id prefix ending in '[': reason} from the list."""
    out = {}
    for line in open(LIST):
        line = line.rstrip("\n")
        if line and not line.startswith("#"):
            tid, _, why = line.partition("\t")
            out[tid.strip()] = why.strip()
    return out


def listed(tid, exp):
    """The reason tid is expected to fail, or None (an entry may name a test without its
    parameters, for every parametrization)."""
    if tid in exp:
        return exp[tid]
    base = tid.split("[", 1)[0]
    return exp.get(base)


def free_port():
    """A TCP port nothing listens on now: the suite's servers default to 8080, which another
    run of the suite (or anything else) on the machine may hold."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_suite(sdir, xml_path):
    env = dict(os.environ, LLAMA_SERVER_BIN_PATH=os.path.join(HERE, "llama-server"),
               SEQKV_BUILD=os.path.join(ROOT, BUILD) if not os.path.isabs(BUILD) else BUILD,
               SEQKV_SHARED=testenv.shared_dir() or "", PORT=str(free_port()))
    try:
        import openai  # noqa: F401
    except ImportError:
        env["PYTHONPATH"] = os.path.join(HERE, "pyshim") + os.pathsep + env.get("PYTHONPATH", "")
    cmd = ["/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", xml_path] + \
          ["unit/%s.py" % f for f in FILES]
    return subprocess.run(cmd, cwd=sdir, env=env, capture_output=True, text=True, timeout=1800)


def results(xml_path):
    """[(test id, 'pass' | 'fail' | 'skip', message)] from pytest's JUnit XML."""
    out = []
    for tc in ET.parse(xml_path).getroot().iter("testcase"):
        f = tc.get("classname", "").replace(".", "/")
        tid = "%s.py::%s" % (f, tc.get("name"))
        bad = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
        if bad is not None:
            out.append((tid, "fail", " ".join((bad.get("message") or "").split())[:300]))
        elif tc.find("skipped") is not None:
            out.append((tid, "skip", (tc.find("skipped").get("message") or "")[:200]))
        else:
            out.append((tid, "pass", ""))
    return out


def main():
    rep = Reporter(NAME)
    if re.search(r"san|clang", os.path.basename(BUILD.rstrip("/"))):
        rep.report("suite", "SKIP", "runs in the release build only (make test)")
        return 0
    sdir = suite_dir()
    if not sdir:
        rep.report("suite", "SKIP", "llama.cpp's server tests not found: run scripts/oracle/setup.sh")
        return 0
    if not testenv.shared_dir():
        rep.report("suite", testenv.missing("SKIP", "FAIL"), "stories260K not found (../shared)")
        return 1 if rep.failed else 0
    try:
        import pytest  # noqa: F401
        import requests  # noqa: F401
        import aiohttp  # noqa: F401
        import wget  # noqa: F401
    except ImportError as e:
        rep.report("suite", "SKIP", "%s: install python3-pytest, -requests, -aiohttp, -jsonschema, -wget, -filelock, "
                   "-prometheus-client (scripts/install-deps.sh)" % e)
        return 0
    exp = expected()
    with tempfile.TemporaryDirectory(prefix="skv-llsuite-") as tmp:
        xml_path = os.path.join(tmp, "junit.xml")
        p = run_suite(sdir, xml_path)
        if not os.path.isfile(xml_path):
            rep.report("suite", "FAIL", "pytest wrote no results (exit %d): %s" % (p.returncode, p.stdout[-1500:]))
            return 1
        res = results(xml_path)
    n_known = n_skip = 0
    for tid, status, msg in res:
        why = listed(tid, exp)
        if status == "pass":
            rep.report(tid, "FAIL" if why else "PASS", "passes now: take it off tests/llama_server/expected_failures.txt"
                       if why else "")
        elif status == "skip":
            n_skip += 1
        elif why:
            n_known += 1
        else:
            rep.report(tid, "FAIL", msg)
    n_pass = sum(1 for r in res if r[1] == "pass")
    print("# llama.cpp server tests: %d passed, %d listed failures, %d skipped (the openai client), %d in all"
          % (n_pass, n_known, n_skip, len(res)))
    rep.report("expected_failures", "SKIP", "%d tests fail for the reasons tests/llama_server/expected_failures.txt "
               "gives" % n_known)
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
