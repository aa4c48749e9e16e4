#!/usr/bin/python3
"""Stores on a Redis Cluster (docs/store.md "Redis Cluster"), on real processes
(tests/cluster_harness.py: three masters, three replicas, cluster-node-timeout 1000 ms):

- spread: stores with different prefixes land on different masters (each store is one
  hash slot, its tag {PREFIX}: every key of a store is in the slot CLUSTER KEYSLOT names,
  and the masters' DBSIZEs add up to the stores' keys); puts, gets verified, ls, rm, gc,
  stats.
- redirects: one `seqkv serve` (pooled connections) answers completions while its store's
  slot is migrated to another master (SETSLOT/MIGRATE) and then while a replica takes
  over by CLUSTER FAILOVER: its pooled connections get MOVED (counted in the old
  masters' errorstats), every request is a 200 and every conversation restores verified.
- ask: a slot left half migrated (MIGRATING, its keys on the target but the header and
  model records, SETSLOT NODE not sent): a get opens the store and its transaction is
  answered ASK; each runs again a bounded number of times, then fails
  with a clear error naming the redirection, within seconds; once the migration is
  finished the sessions restore verified from the new master.
- failover: puts (the CLI, each its own process) while the slot's master is killed with
  SIGKILL; the cluster promotes its replica; the puts go on, at most a couple say
  "retry", and every acknowledged put restores verified from the promoted master. The
  puts run with replicas=0: the promoted master has no replica left, so with replicas=1
  (the default) puts are refused until the old master is back, as a replica: it is
  started again, and then a put with replicas=1 is acknowledged.
- no_node: seeds that do not answer: a clear error within the failover bound.
- bad_urls: malformed cluster URLs are refused with the grammar, never a crash.

Needs redis-server and redis-cli: SKIP without them, FAIL under SEQKV_REQUIRE_REDIS=1."""
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_harness  # noqa: E402
import redis_harness  # noqa: E402
from sentinel_harness import command, free_port, wait  # noqa: E402
from test_store_redis_sentinel import check_refused, put, restore_all, store, text  # noqa: E402
from test_store_redis_server import stat  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
from clitest import Reporter, check, run_cases  # noqa: E402
from harness import Server  # noqa: E402

NAME = "test_store_redis_cluster"


def prefixes_on_masters(c, n):
    """n prefixes whose slots are served by n different masters (as far as there are)."""
    out, seen = [], set()
    for i in range(1000):
        p = "c%d" % i
        owner = c.owner(c.keyslot("{%s}" % p))
        if owner not in seen:
            seen.add(owner)
            out.append(p)
        if len(out) == n:
            break
    return out


def moved_count(port):
    info = command(port, "INFO", "errorstats") or ""
    for line in info.splitlines():
        if line.startswith("errorstat_MOVED:count="):
            return int(line.split("=")[1])
    return 0


def case_spread(tmp, c):
    prefixes = prefixes_on_masters(c, 3)
    check(len(prefixes) == 3, "no three prefixes on three masters: %s" % prefixes)
    for k, p in enumerate(prefixes):
        url = c.url(p)
        rc, out = store("init", url)
        check(rc == 0 and "ready" in out, "init %s: %s" % (p, out))
        for i in range(2):
            rc, out = put(tmp, url, 10 * k + i)
            check(rc == 0 and "stored" in out, "put %s %d: %s" % (p, i, out))
        rc, ls = store("ls", url)
        check(rc == 0 and len(ls.splitlines()) == 2, "ls %s: %s" % (p, ls))
        for i in range(2):
            rc, out = store("get", url, "s%03d.txt" % (10 * k + i))
            check(rc == 0 and "verified" in out, "get %s %d: %s" % (p, i, out))
    url = c.url(prefixes[0])  # the whole-store commands: each runs on its store's master
    rc, out = store("rm", url, "s000.txt")
    check(rc == 0, "rm: " + out)
    for cmd in ("gc", "stats"):
        rc, out = store(cmd, url)
        check(rc == 0, "%s: %s" % (cmd, out))
    rc, ls = store("ls", url)
    check(rc == 0 and ls.startswith("s001.txt"), "ls after rm: " + ls)
    in_slots = 0
    for p in prefixes:
        slot = c.keyslot("{%s}" % p)
        n = command(c.owner(slot), "CLUSTER", "COUNTKEYSINSLOT", str(slot))
        check(isinstance(n, int) and n >= 5, "store %s: %s keys in its slot %d" % (p, n, slot))
        in_slots += n
    sizes = {m: command(m, "DBSIZE") for m in c.masters()}
    check(all(v > 0 for v in sizes.values()), "a master holds no key: %s" % sizes)
    check(sum(sizes.values()) == in_slots, "keys outside the stores' slots: %s vs %d" % (sizes, in_slots))
    print("spread: stores %s on masters %s, keys per master %s" % (prefixes, [c.owner(c.keyslot("{%s}" % p))
                                                                         for p in prefixes], sizes))


def shard_prefix(c, n, b):
    """A store prefix whose n shards ("P.n.b.k") cover every master."""
    for i in range(200):
        p = "sh%d" % i
        if len({c.owner(c.keyslot("{%s.%d.%d.%d}" % (p, n, b, k))) for k in range(n)}) == len(c.masters()):
            return p
    return None


def case_sharded(tmp, c):
    """One store over all masters (?shards=6&shard_tokens=8): sessions with other openings
    land in other shards, on every master; sessions sharing an opening share one shard and
    their prefix is stored once; ls, get (verified), match, rm, gc and stats see the whole
    store; a name is unique across shards; the same prefix with another shard count is
    another store; a server on it serves a stored conversation's next turn from the store."""
    n, b = 6, 8
    p = shard_prefix(c, n, b)
    check(p is not None, "no prefix whose shards cover the masters")
    url = c.url(p, "?shards=%d&shard_tokens=%d" % (n, b))
    rc, out = store("init", url)
    check(rc == 0 and "ready" in out, "init: " + out)
    openings = ["%s %d," % (w, i) for i, w in enumerate(["Story", "Tale", "Fable", "Saga", "Legend", "Myth",
                                                         "Yarn", "Epic", "Ballad", "Rhyme", "Parable", "Anecdote"])]
    texts = {}
    for i, o in enumerate(openings):
        texts["s%03d.txt" % i] = o + " " + text(i)
    for k in range(3):  # three more under the first opening, its first 80 characters shared
        texts["t%03d.txt" % k] = texts["s000.txt"][:80] + " and then %s." % text(20 + k)
    for name, t in texts.items():
        f = os.path.join(tmp, name)
        with open(f, "w") as fh:
            fh.write(t)
        rc, out = store("put", url, "-f", f)
        check(rc == 0 and "stored" in out, "put %s: %s" % (name, out))
    names = restore_all(url, len(texts), len(texts))
    check(sorted(names) == sorted(texts), "ls: %s" % names)
    per_master, used = {m: 0 for m in c.masters()}, set()
    for k in range(n):
        slot = c.keyslot("{%s.%d.%d.%d}" % (p, n, b, k))
        keys = command(c.owner(slot), "CLUSTER", "COUNTKEYSINSLOT", str(slot))
        per_master[c.owner(slot)] += keys
        if keys > 5:  # more than the header, state, model and index records: sessions
            used.add(k)
    check(all(v > 0 for v in per_master.values()), "a master holds none of the store: %s" % per_master)
    check(len(used) >= 3, "the sessions went to %d shard(s) of %d" % (len(used), n))
    rc, st = store("stats", url)
    check(rc == 0, "stats: " + st)
    sessions, uniq, toks = (int(stat(st, k)) for k in ("sessions", "unique stored positions", "session tokens"))
    check(sessions == len(texts) and uniq < toks, "stats: %d sessions, %d unique of %d" % (sessions, uniq, toks))
    f = os.path.join(tmp, "m.txt")
    with open(f, "w") as fh:
        fh.write(texts["t001.txt"])
    rc, out = store("match", url, "-f", f)
    m = re.search(r"longest stored prefix: (\d+) of (\d+) tokens", out)
    check(rc == 0 and m and m.group(1) == m.group(2), "match of a stored text: " + out)
    other = os.path.join(tmp, "s000.txt")
    with open(other, "w") as fh:
        fh.write("Another story altogether, of another shard or not.")
    rc, out = store("put", url, "-f", other)
    check(rc != 0 and "exists already" in out, "a second s000.txt: " + out)
    rc, out = store("rm", url, "s003.txt")
    check(rc == 0, "rm: " + out)
    rc, out = store("get", url, "s003.txt")
    check(rc != 0 and "no session" in out, "get after rm: " + out)
    rc, out = store("gc", url)
    check(rc == 0, "gc: " + out)
    rc, out = store("ls", c.url(p, "?shards=%d&shard_tokens=%d" % (n + 1, b)))
    check(rc != 0 and "no seqkv store" in out, "another shard count: " + out)
    srv = Server("--store", url, "-c", "1024", log=os.path.join(tmp, "sharded.log"))
    try:
        code, r = srv.json("/completion", {"prompt": texts["t002.txt"] + " And so", "n_predict": 4,
                                           "temperature": 0})
        check(code == 200 and r["timings"]["cache_n"] > 20, "the server missed the stored text: %s" % r.get("timings"))
    finally:
        srv.stop()
    print("sharded: %d sessions over %d shards of %d, keys per master %s, %d unique positions of %d" %
          (sessions, len(used), n, per_master, uniq, toks))


def serve_and_check(tmp, c, url, events):
    """Completions one after another through a server on url; events[i](): run after the
    i-th reply. -> the conversations stored, each restored verified."""
    srv = Server("--store", url, "-c", "1024", log=os.path.join(tmp, "serve.log"))
    try:
        for i in range(16):
            prompt = " ".join(text(i + k) for k in range(3))
            code, r = srv.json("/completion", {"prompt": prompt, "n_predict": 4, "temperature": 0})
            check(code == 200, "completion %d: %d %s" % (i, code, json.dumps(r)[:200]))
            if i in events:
                events[i]()
        srv.stop()
        log = open(srv.log, errors="replace").read()
        bad = [line for line in log.splitlines() if "store" in line and "Redis" in line]
        check(not bad, "store calls failed: %s" % bad[:2])
    finally:
        if srv.p.poll() is None:
            srv.stop()
    return restore_all(url, 14, 16)


def case_redirects(tmp, c):
    p = prefixes_on_masters(c, 1)[0] + "r"
    url, slot = c.url(p), c.keyslot("{%s}" % p)
    rc, out = store("init", url)
    check(rc == 0, "init: " + out)
    first = c.owner(slot)
    dst = [m for m in c.masters() if m != first][0]
    seen = {}

    def migrate():
        seen["migrated_from"] = c.migrate_slot(slot, dst)

    def failover():
        rep = c.replica_of(dst)
        check(rep is not None, "no replica of %d" % dst)
        check(command(rep, "CLUSTER", "FAILOVER") == "OK", "CLUSTER FAILOVER refused")
        wait(lambda: c.owner(slot) == rep, "the replica did not take the slot over")
        c.wait_ok()
        seen["promoted"] = rep

    names = serve_and_check(tmp, c, url, {4: migrate, 9: failover})
    check(c.owner(slot) == seen["promoted"], "slot %d served by %s" % (slot, c.owner(slot)))
    moved = moved_count(first) + moved_count(dst)
    check(moved > 0, "no MOVED answered: the redirections were not exercised")
    print("redirects: slot %d moved %d -> %d (migration) -> %d (failover); %d MOVED answers followed; "
          "%d conversations restored verified" % (slot, first, dst, seen["promoted"], moved, len(names)))


def case_ask(tmp, c):
    p = prefixes_on_masters(c, 1)[0] + "a"
    url, slot = c.url(p), c.keyslot("{%s}" % p)
    rc, out = store("init", url)
    check(rc == 0, "init: " + out)
    for i in range(2):
        rc, out = put(tmp, url, 50 + i)
        check(rc == 0, "put: " + out)
    dst = [m for m in c.masters() if m != c.owner(slot)][0]
    c.begin_migration(slot, dst, keep=[("{%s}:skv2:%s" % (p, k)).encode() for k in "HM"])
    t0 = time.time()
    rc, out = store("get", url, "s050.txt")
    dt = time.time() - t0
    check(rc != 0 and "answered 'ASK %d" % slot in out and "retry" in out, "get during the migration: " + out)
    check(0.5 < dt < 15, "the bounded redirections took %.1f s" % dt)  # 6 attempts, pauses 50..800 ms
    c.finish_migration(slot, dst)
    for i in range(2):
        rc, got = store("get", url, "s%03d.txt" % (50 + i))
        check(rc == 0 and "verified" in got, "get after the migration: " + got)
    print("ask: a half-migrated slot: %.1f s, then '%s'" % (dt, out.splitlines()[-1][:90]))


def case_failover(tmp, c):
    p = prefixes_on_masters(c, 1)[0] + "f"
    url, slot = c.url(p, "?replicas=0"), c.keyslot("{%s}" % p)
    rc, out = store("init", url)
    check(rc == 0, "init: " + out)
    master = c.owner(slot)
    acked, retried, kill_at, total, outage = [], [], 4, 12, None
    for i in range(total):
        if i == kill_at:
            c.kill(master)
        t0 = time.time()
        rc, out = put(tmp, url, 100 + i)
        if rc != 0:
            check("retry" in out, "put %d failed without saying to retry: %s" % (i, out))
            retried.append(i)
            rc, out = put(tmp, url, 100 + i)
        check(rc == 0 and "stored" in out, "put %d: %s" % (i, out))
        acked.append(i)
        if i == kill_at:
            outage = time.time() - t0
    new = c.owner(slot)
    check(new not in (None, master), "the cluster did not promote a replica (slot %d at %s)" % (slot, new))
    check(len(retried) <= 2, "%d puts needed a retry: %s" % (len(retried), retried))
    for i in acked:
        rc, out = store("get", url, "s%03d.txt" % (100 + i))
        check(rc == 0 and "verified" in out, "get s%03d.txt after the failover: %s" % (100 + i, out))
    rc, out = put(tmp, c.url(p), 200)
    check(rc != 0 and "0 of 1 replicas confirmed" in out, "replicas=1 with no replica left: " + out)
    c.restart(master)
    rc, out = put(tmp, c.url(p), 201)
    check(rc == 0 and "stored" in out, "replicas=1 after the old master came back: " + out)
    print("failover: %d puts acknowledged, %d retried; the put during the failover took %.1f s; master %d -> %d"
          % (len(acked), len(retried), outage, master, new))


def case_no_node(tmp):
    p = free_port()
    url = "redis+cluster://127.0.0.1:%d/x?failover=1" % p
    t0 = time.time()
    rc, out = store("stats", url)
    dt = time.time() - t0
    check(rc != 0 and "no Redis Cluster master serves slot" in out and "seed 127.0.0.1:%d: unreachable" % p in out,
          "no node: " + out)
    check(dt < 10, "gave up after %.1f s, bound 1 s" % dt)


def case_bad_urls(tmp):
    bad = ["redis+cluster://", "redis+cluster://h:1", "redis+cluster://h:1/", "redis+cluster://h/p",
           "redis+cluster://h:0/p", "redis+cluster://:1/p", "redis+cluster://h:1/p{x}", "redis+cluster://h:1/a/b",
           "redis+cluster://h:1/p?bogus=1", "redis+cluster://h:1/p?replicas=-1", "redis+cluster://h:99999/p",
           "redis+cluster://" + ",".join("h:%d" % (i + 1) for i in range(9)) + "/p",
           "redis+cluster://h:1/" + "p" * 300, "redis+cluster://h:1/p?shards=1", "redis+cluster://h:1/p?shards=257",
           "redis+cluster://h:1/p?shards=x", "redis+cluster://h:1/p?shards=", "redis+cluster://h:1/p?shard_tokens=8",
           "redis+cluster://h:1/p?shards=4&shard_tokens=0", "redis+cluster://h:1/p?shards=4&shard_tokens=99999",
           "redis://h:1/p?shards=4", "redis+sentinel://h:1/m/p?shards=4"]
    check_refused(bad)


def main():
    rep = Reporter(NAME)
    miss = cluster_harness.missing()
    if miss:
        return redis_harness.report_missing(rep, "cluster", miss)
    run_cases(rep, (case_bad_urls, case_no_node), "seqkv-cluster-")
    with tempfile.TemporaryDirectory(prefix="seqkv-cluster-") as tmp:
        c = cluster_harness.Cluster(os.path.join(tmp, "cluster"))
        try:
            for case in (case_spread, case_sharded, case_redirects, case_ask, case_failover):  # the last one kills a master
                rep.run_case(case, tmp, c)
        finally:
            c.stop()
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
