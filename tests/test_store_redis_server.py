#!/usr/bin/python3
"""A shared store on Redis from the command line and from two servers (docs/store.md
"Redis layout"): `seqkv store init|put|get|ls|stats|rm unix://...`, and two `seqkv serve
--store unix://...` processes answering the same prompts identically while storing their
conversations in one Redis namespace, shared prefixes once; every stored conversation
restores verified from the CLI. Needs redis-server (scripts/install-deps.sh): SKIP
without it, FAIL under SEQKV_REQUIRE_REDIS=1."""
import contextlib
import os
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
import redis_harness  # noqa: E402
from clitest import WRAP, Reporter, check, run  # noqa: E402
from harness import Server  # noqa: E402

NAME = "test_store_redis_server"
PROMPT = "In the beginning God created the heaven and the earth. And the earth was without form, and void;"


def store(*args):
    """(exit code, stdout + stderr) of `seqkv store ARGS` (under $SEQKV_WRAP when set)."""
    rc, out, err = run("store", *args)
    return rc, out + err


def stat(text, key):
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].split()[0]
    return None


def case_cli(tmp):
    r = redis_harness.Redis(os.path.join(tmp, "r"))
    try:
        url = r.url("cli")
        rc, out = store("init", url)
        check(rc == 0 and "ready" in out, "init: " + out)
        f = os.path.join(tmp, "a.txt")
        with open(f, "w") as fh:
            fh.write(PROMPT + " and darkness was upon the face of the deep.")
        rc, out = store("put", url, "-f", f)
        check(rc == 0 and "stored 'a.txt'" in out, "put: " + out)
        rc, out = store("get", url, "a.txt")
        check(rc == 0 and "verified" in out, "get: " + out)
        rc, out = store("ls", url)
        check(rc == 0 and out.startswith("a.txt\t"), "ls: " + out)
        rc, out = store("rm", url, "a.txt")
        check(rc == 0, "rm: " + out)
        rc, out = store("get", url, "a.txt")
        check(rc != 0 and "no session" in out, "get after rm: " + out)
        rc, out = store("stats", "unix://%s/none.sock?prefix=x" % tmp)
        check(rc != 0 and "cannot connect to Redis" in out, "no server: " + out)
    finally:
        r.stop()


def metric(srv, name):
    for line in srv.curl("/metrics")[1].splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def wait_metric(srv, name, want):
    for _ in range(400 * (30 if WRAP else 1)):  # 20 s; 10 min under Valgrind
        if metric(srv, name) >= want:
            return True
        threading.Event().wait(0.05)
    return False


def completion(srv, prompt):
    code, r = srv.json("/completion", {"prompt": prompt, "n_predict": 8, "temperature": 0})
    check(code == 200, "completion: %d %s" % (code, r))
    return r["content"]


@contextlib.contextmanager
def two_servers(tmp, prefix):
    """(store URL, server A, server B): two `seqkv serve` on one Redis namespace, stopped after."""
    r = redis_harness.Redis(os.path.join(tmp, "r"))
    servers = []
    try:
        url = r.url(prefix)
        for n in ("a", "b"):
            servers.append(Server("--store", url, "-c", "512", log=os.path.join(tmp, n + ".log")))
        yield url, servers[0], servers[1]
    finally:
        for s in servers:
            s.stop()
        r.stop()


def case_two_servers(tmp):
    with two_servers(tmp, "srv") as (url, a, b):
        tails = [" And God said", " And the Spirit of God moved", " And God saw the light", " And God divided"]
        outs = {}
        threads = []
        for i, t in enumerate(tails):  # both servers at once, each its own prompts
            srv = a if i % 2 == 0 else b
            th = threading.Thread(target=lambda s=srv, p=PROMPT + t: outs.__setitem__((s.port, p), completion(s, p)))
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
        check(wait_metric(a, "seqkv:store_puts_total", 2) and wait_metric(b, "seqkv:store_puts_total", 2),
              "the servers did not store their conversations")
        for t in tails:  # the other server answers the same
            p = PROMPT + t
            (port, _), first = [(k, v) for k, v in outs.items() if k[1] == p][0]
            other = b if port == a.port else a
            check(completion(other, p) == first, "servers disagree on %r" % t)
        rc, out = store("stats", url)
        check(rc == 0, "stats: " + out)
        n, uniq, tok = int(stat(out, "sessions")), int(stat(out, "unique stored positions")), int(stat(out, "session tokens"))
        check(n >= 4 and uniq < tok, "shared prefixes not stored once: %d sessions, %d unique of %d" % (n, uniq, tok))
        rc, ls = store("ls", url)
        for line in ls.splitlines():
            rc, out = store("get", url, line.split("\t")[0])
            check(rc == 0 and "verified" in out, "get %s: %s" % (line, out))
        print("two servers on one Redis store: %d conversations, %d unique positions of %d" % (n, uniq, tok))


def case_slot_shared(tmp):
    """A slot saved on one server of a fleet (no --slot-save-path: the save is the store's
    session "slot:NAME") restores verified on another, whose completion of the same prompt is
    then a hit of its own slot with the first server's text."""
    with two_servers(tmp, "slots") as (url, a, b):
        req = {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "id_slot": 0}
        code, first = a.json("/completion", req)
        check(code == 200, "completion on A: %d %s" % (code, first))
        n = first["tokens_evaluated"] + first["tokens_predicted"] - 1
        code, sv = a.json("/slots/0?action=save", {"filename": "shared-conv"})
        check(code == 200 and sv["n_saved"] == n, "save on A: %d %s" % (code, sv))
        code, rs = b.json("/slots/0?action=restore", {"filename": "shared-conv"})
        check(code == 200 and rs["n_restored"] == n, "restore on B: %d %s" % (code, rs))
        hits = metric(b, "seqkv:store_hits_total")
        code, hit = b.json("/completion", req)
        check(code == 200 and hit["timings"]["cache_n"] == first["tokens_evaluated"] - 1 and
              metric(b, "seqkv:store_hits_total") == hits, "B's restored slot missed: %s" % hit.get("timings"))
        check(hit["content"] == first["content"], "B gives other text: %r vs %r" % (hit["content"], first["content"]))
        rc, out = store("get", url, "slot:shared-conv")
        check(rc == 0 and "verified" in out, "get slot:shared-conv: " + out)


def main():
    rep = Reporter(NAME)
    if not redis_harness.available():
        need = os.environ.get("SEQKV_REQUIRE_REDIS") == "1"
        rep.report("redis", "FAIL" if need else "SKIP", "redis-server is not installed (scripts/install-deps.sh)")
        return 1 if need else 0
    for case in (case_cli, case_two_servers, case_slot_shared):
        tmp = tempfile.mkdtemp(prefix="seqkv-redis-")
        try:
            rep.run_case(case, tmp)
        finally:
            subprocess.run(["rm", "-rf", tmp])
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
