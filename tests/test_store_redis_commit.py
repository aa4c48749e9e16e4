#!/usr/bin/python3
"""A put whose commit loses its connection (issue 43, "commit ambiguity"), on a real
redis-server behind a real TCP proxy of this file that drops the connection at the put's
commit (EXEC), and the store's messages about Redis:

- lost_after_exec: the proxy forwards the commit and closes the connection before its
  reply: the put finds out from the session record that it committed and says "stored";
  the session restores verified; the same put again is a no-op ("stored already").
- lost_before_exec: the proxy closes the connection instead of forwarding the commit: the
  put finds the session absent and runs again, once (stored, restores verified); when the
  rerun's commit is lost too it says nothing was committed and to retry; the session is
  absent; the retry stores it.
- redis_messages: a store on a Redis without an append-only file is refused at init with
  the settings to use (SEQKV_REDIS_VOLATILE=1 overrides); a refused connection does not
  tell the user to run `store init`; `store stats` does not call Redis bytes LMDB pages;
  `store gc` on Redis says what it checked.
Skips (with the reason) when redis-server is not installed."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testenv  # noqa: E402
from redis_harness import free_port  # noqa: E402
from clitest import ROOT, Reporter, Skip, check, run  # noqa: E402

NAME = "test_store_redis_commit"


class Proxy:
    """A TCP proxy to Redis that can drop one connection at the n-th commit (EXEC) after
    arm(): mode "after" forwards that EXEC and closes without its reply (the commit is
    applied, the client cannot know), "before" closes instead of forwarding it."""

    def __init__(self, target):
        self.target, self.mode, self.nth, self.dropped = target, None, 0, 0
        self.lock = threading.Lock()
        self.s = socket.socket()
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.s.bind(("127.0.0.1", 0))
        self.s.listen(16)
        self.port = self.s.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def arm(self, mode, nth, times=1):
        """Applies mode to the nth commit (EXEC) from now and to the times - 1 after it."""
        with self.lock:
            self.mode, self.nth, self.times = mode, nth, times

    def accept(self):
        while True:
            try:
                c, _ = self.s.accept()
                u = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                return
            cut = threading.Event()
            threading.Thread(target=self.up, args=(c, u, cut), daemon=True).start()
            threading.Thread(target=self.down, args=(u, c, cut), daemon=True).start()

    def fire(self, data):
        """The mode to apply to this chunk, if it carries the armed commit."""
        if b"\r\nEXEC\r\n" not in data:
            return None
        with self.lock:
            if not self.mode:
                return None
            self.nth -= 1
            if self.nth:
                return None
            mode, self.times = self.mode, self.times - 1
            self.nth, self.mode = (1, mode) if self.times > 0 else (0, None)
            self.dropped += 1
            return mode

    def up(self, c, u, cut):
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    break
                mode = self.fire(d)
                if mode == "after":
                    cut.set()
                    u.sendall(d)
                    time.sleep(0.3)  # Redis applies it; its reply goes nowhere
                if mode:
                    break
                u.sendall(d)
        except OSError:
            pass
        for x in (c, u):
            try:
                x.close()
            except OSError:
                pass

    def down(self, u, c, cut):
        try:
            while True:
                d = u.recv(65536)
                if not d or cut.is_set():
                    break
                c.sendall(d)
        except OSError:
            pass


class Redis:
    def __init__(self, tmp, *extra):
        self.port = free_port()
        self.dir = os.path.join(tmp, "redis-%d" % self.port)
        os.makedirs(self.dir)
        self.p = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "yes", "--dir", self.dir, "--logfile", "redis.log"] + list(extra),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self):
        self.p.kill()
        self.p.wait()


def texts(tmp):
    with open(os.path.join(ROOT, "tests", "data", "model_ref", "heldout.txt"), encoding="utf-8") as f:
        t = f.read()
    out = []
    for i in range(3):
        path = os.path.join(tmp, "t%d.txt" % i)
        with open(path, "w", encoding="utf-8") as f:
            f.write(t[3000 + 400 * i:3000 + 400 * i + 350])
        out.append(path)
    return out


def store_with_proxy(tmp, prefix):
    r = Redis(tmp)
    px = Proxy(r.port)
    url = "redis://127.0.0.1:%d/%s" % (px.port, prefix)
    rc, out, err = run("store", "init", url)
    check(rc == 0, "init: " + err)
    return r, px, url


def lost_after_exec(tmp):
    r, px, url = store_with_proxy(tmp, "after")
    try:
        a, b, _ = texts(tmp)
        check(run("store", "put", url, "-f", a, "--name", "warm")[0] == 0, "a first put")
        px.arm("after", 2)  # a put's transactions: the read at open, then its commit
        rc, out, err = run("store", "put", url, "-f", b, "--name", "b")
        check(px.dropped == 1, "the proxy did not drop the commit")
        check(rc == 0 and "stored 'b'" in out, "a committed put whose reply was lost: %d %s %s" % (rc, out, err))
        rc, out, err = run("store", "get", url, "b")
        check(rc == 0 and "verified" in out, "get after the lost reply: " + out + err)
        rc, out, err = run("store", "put", url, "-f", b, "--name", "b")
        check(rc == 0 and "stored already" in out, "the retry: %d %s %s" % (rc, out, err))
    finally:
        r.stop()


def lost_before_exec(tmp):
    r, px, url = store_with_proxy(tmp, "before")
    try:
        a, _, c = texts(tmp)
        check(run("store", "put", url, "-f", a, "--name", "warm")[0] == 0, "a first put")
        px.arm("before", 2)
        rc, out, err = run("store", "put", url, "-f", c, "--name", "c")
        check(px.dropped == 1, "the proxy did not drop the commit")
        # not in the store: the put found that out and ran again, once
        check(rc == 0 and "stored 'c'" in out, "a put whose commit was lost: %d %s %s" % (rc, out, err))
        rc, out, err = run("store", "get", url, "c")
        check(rc == 0 and "verified" in out, "get after the rerun: " + out + err)
        px.arm("before", 2, times=2)  # the commit and its rerun's
        rc, out, err = run("store", "put", url, "-f", a, "--name", "a2")
        check(px.dropped == 3, "the proxy dropped %d commits: %d %s %s" % (px.dropped, rc, out, err))
        check(rc == 1 and "twice" in err and "nothing was committed; retry" in err,
              "a put never committed: %d %s %s" % (rc, out, err))
        rc, out, err = run("store", "ls", url)
        check(rc == 0 and "\na2\t" not in "\n" + out, "the session is listed: " + out)
        rc, out, err = run("store", "put", url, "-f", a, "--name", "a2")
        check(rc == 0 and "stored 'a2'" in out, "the retry: %d %s %s" % (rc, out, err))
    finally:
        r.stop()


def redis_messages(tmp):
    r = Redis(tmp, "--appendonly", "no")
    try:
        url = "redis://127.0.0.1:%d/m" % r.port
        rc, out, err = run("store", "init", url)
        check(rc == 1 and "appendonly yes" in err and "SEQKV_REDIS_VOLATILE=1" in err, "init on a volatile Redis: " + err)
        env = dict(os.environ, SEQKV_REDIS_VOLATILE="1")
        p = subprocess.run([os.path.join(ROOT, os.environ.get("SEQKV_BUILD", "build"), "seqkv"), "store", "init", url],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
        check(p.returncode == 0, "SEQKV_REDIS_VOLATILE=1 init: " + p.stderr)
        a = texts(tmp)[0]
        check(run("store", "put", url, "-f", a, "--name", "a")[0] == 0, "a put")
        rc, out, err = run("store", "stats", url)
        check(rc == 0 and "LMDB" not in out and "Redis" in out, "stats on Redis: " + out)
        rc, out, err = run("store", "gc", url)
        check(rc == 0 and "trie and KV blobs checked" not in out, "gc on Redis: " + out)
    finally:
        r.stop()
    rc, out, err = run("store", "put", "redis://127.0.0.1:%d/m" % free_port(), "-f", texts(tmp)[0])
    check(rc == 1 and "store init" not in err and "redis-server" in err, "a refused connection: " + err)


def main():
    rep = Reporter(NAME)
    cases = [lost_after_exec, lost_before_exec, redis_messages]
    if not shutil.which("redis-server"):
        for c in cases:
            rep.report(c.__name__, "SKIP", "redis-server is not installed (scripts/install-deps.sh)")
        return 0
    return testenv.run_cases(rep, cases, "skv-redis-commit-")


if __name__ == "__main__":
    sys.exit(main())
