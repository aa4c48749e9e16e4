#!/usr/bin/python3
"""seqkv serve --reuse near end to end: the real server on the bundled model, driven with curl.

Checks: an edited prompt (a clause inserted early, so the rest moves by a few positions) is
built from the stored near-duplicate and every reply marks it APPROXIMATE (timings
cache_approximate / cache_n_approx / cache_n_recomputed, OpenAI usage
prompt_tokens_details.cached_approximate, /metrics seqkv:near_approximate_total); a slot that
continues from approximate KV stays marked; a prompt the store holds exactly is restored
exactly (unmarked, same greedy text as a fresh run); cache_prompt false is exact; a quality
target below every calibrated bound recomputes everything (unmarked); `store stats` counts the
server's near gets; the option checks fail cleanly.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
import testenv  # noqa: E402,F401
from clitest import ROOT, Fail, Reporter, check, run, run_cases  # noqa: E402
from harness import SLOW, Server  # noqa: E402

NAME = "test_server_near"
with open(os.path.join(ROOT, "tests/data/model_ref/heldout.txt"), encoding="utf-8") as f:
    TEXT = f.read()
A = TEXT[:900]
B = TEXT[:150] + " in those days of old" + TEXT[150:900]  # the rest of A, a few positions on


def completion(srv, prompt, **kw):
    body = {"prompt": prompt, "n_predict": 4, "temperature": 0, "id_slot": 0}
    body.update(kw)
    code, r = srv.json("/completion", body)
    if code != 200:
        raise Fail("completion: %d %s" % (code, r))
    return r


def metric(srv, name):
    for line in srv.curl("/metrics")[1].splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def stored(srv, n):
    t0 = time.time()
    while time.time() - t0 < 20 * SLOW:  # the put runs after the reply
        if (metric(srv, "seqkv:store_puts_total") or 0) >= n:
            return True
        time.sleep(0.02)
    return False


def case_near_marked(tmp):
    store = os.path.join(tmp, "st")
    s = Server("--store", store, "-c", "512", "--reuse", "near", log=os.path.join(tmp, "near.log"))
    try:
        a = completion(s, A)
        check(not a["timings"]["cache_approximate"], "fresh prompt marked: %s" % a["timings"])
        check(stored(s, 1), "A was not stored")
        b = completion(s, B)
        t, n = b["timings"], b["tokens_evaluated"]
        check(t["cache_approximate"] and t["cache_n_approx"] > 0, "edited prompt not approximate: %s" % t)
        check(t["cache_n"] >= 0.7 * n and t["prompt_n"] == n - t["cache_n"], "reuse of %d: %s" % (n, t))
        check(t["cache_n_recomputed"] > 0, "nothing recomputed: %s" % t)
        check(metric(s, "seqkv:near_approximate_total") == 1, "metric: %s" % metric(s, "seqkv:near_approximate_total"))
        check(metric(s, "seqkv:near_approx_positions_total") == t["cache_n_approx"], "positions metric")
        more = completion(s, B + b["content"] + " and")  # the slot's own (approximate) KV continues
        check(more["timings"]["cache_approximate"] and more["timings"]["cache_n"] > n, "continuation: %s" %
              more["timings"])
        code, c = s.json("/v1/completions", {"prompt": B, "max_tokens": 2, "temperature": 0})
        check(code == 200 and c["usage"]["prompt_tokens_details"]["cached_approximate"] is True, "openai: %s" % c)
        again = completion(s, A)  # held exactly by the store: an exact restore, same text
        check(not again["timings"]["cache_approximate"] and again["timings"]["cache_n"] == again["tokens_evaluated"] - 1,
              "exact prompt: %s" % again["timings"])
        check(again["content"] == a["content"], "exact restore gives other text: %r %r" % (again["content"], a["content"]))
        fresh = completion(s, B, cache_prompt=False)
        check(not fresh["timings"]["cache_approximate"] and fresh["timings"]["cache_n"] == 0, "cache_prompt false")
    finally:
        check(s.stop() == 0, "unclean shutdown")
    rc, out, err = run("store", "stats", store)
    check(rc == 0 and "near reuse (APPROXIMATE)" in out, "stats: %s %s" % (out, err))
    line = [x for x in out.splitlines() if x.startswith("near reuse")][0]
    check(int(line.split(":")[1].split()[0]) >= 2 and ", 0 approximate" not in line, "stats line: " + line)


def case_quality_exact(tmp):
    """A KL target below every calibrated bound recomputes every position: exact, unmarked."""
    store = os.path.join(tmp, "st")
    s = Server("--store", store, "-c", "512", "--reuse", "near", "--quality", "1e-12", log=os.path.join(tmp, "q.log"))
    try:
        a = completion(s, A)
        check(stored(s, 1), "A was not stored")
        b = completion(s, B)
        check(not b["timings"]["cache_approximate"] and b["timings"]["cache_n_approx"] == 0, "not exact: %s" % b["timings"])
        fresh = completion(s, B, cache_prompt=False)
        check(b["content"] == fresh["content"], "all recomputed, other text: %r %r" % (b["content"], fresh["content"]))
        check(a["content"], "no text")
    finally:
        s.stop()


def case_options(tmp):
    for args, want in ((["--reuse", "near"], "needs --store"), (["--recompute", "0.3"], "need --reuse near"),
                       (["--store", tmp, "--reuse", "near", "--recompute", "0.2", "--quality", "0.01"], "not both"),
                       (["--reuse", "far"], "far")):
        rc, out, err = run("serve", *args)
        check(rc == 2 and want in err, "serve %s: %d %s" % (args, rc, err))


if __name__ == "__main__":
    sys.exit(run_cases(Reporter(NAME), [case_near_marked, case_quality_exact, case_options], "seqkv-serve-near-"))
