"""A replicated Redis deployment for the tests (not a test itself): one master and two
replicas (redis-server, append-only file on) and three sentinels (redis-sentinel, quorum 2)
on loopback TCP ports in a temporary folder, tuned to fail over in a few seconds
(down-after 1000 ms). stop() kills every process it started.

Needs redis-server and redis-sentinel (scripts/install-deps.sh); missing() says which is
absent. Callers skip without them, and fail under SEQKV_REQUIRE_REDIS=1 (set by .ci/run)."""
import os
import shutil
import socket
import subprocess
import time

from redis_harness import free_port  # noqa: F401 (the tests take it from here too)

MASTER = "seqkv"


def missing():
    """The programs this harness needs that are not installed ([] when all are)."""
    return [p for p in ("redis-server", "redis-sentinel") if shutil.which(p) is None]


def command(port, *args, timeout=2.0, raw=False, host="127.0.0.1"):
    """One Redis command to host:port (RESP; arguments str or bytes); -> the reply as
    Python values (bulk strings as bytes when raw), or None when the server cannot be reached."""
    args = [x if isinstance(x, bytes) else x.encode() for x in args]
    msg = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(msg)
            f = s.makefile("rb")
            return _reply(f, raw)
    except (OSError, ValueError):
        return None


def _reply(f, raw=False):
    line = f.readline()
    if not line:
        raise ValueError("connection closed")
    t, rest = line[:1], line[1:-2]
    if t in (b"+", b"-"):
        return rest.decode()
    if t == b":":
        return int(rest)
    if t == b"$":
        n = int(rest)
        if n < 0:
            return None
        b = f.read(n + 2)[:-2]
        return b if raw else b.decode("utf-8", "replace")
    if t == b"*":
        n = int(rest)
        return None if n < 0 else [_reply(f, raw) for _ in range(n)]
    raise ValueError("bad reply")


def wait(ok, why, seconds=20):
    """Polls ok() every 50 ms until it holds; RuntimeError(why) after `seconds`."""
    t = time.time() + seconds
    while time.time() < t:
        if ok():
            return
        time.sleep(0.05)
    raise RuntimeError(why)


class Deployment:
    """host: the address every process binds; wrap: a command prefix for each process (e.g.
    `ip netns exec NS`); call(fn, *args): runs the harness's own Redis commands (e.g. in
    that namespace); by default loopback and this process."""

    def __init__(self, workdir, host="127.0.0.1", wrap=(), call=None):
        self.dir, self.host, self.wrap = workdir, host, list(wrap)
        self.call = call or (lambda fn, *a: fn(*a))
        os.makedirs(workdir, exist_ok=True)
        self.procs = {}  # port -> Popen
        self.redis_ports = [free_port() for _ in range(3)]
        self.sentinel_ports = [free_port() for _ in range(3)]
        try:
            self._start_redis(self.redis_ports[0], None)
            for p in self.redis_ports[1:]:
                self._start_redis(p, self.redis_ports[0])
            self._wait_replicas(self.redis_ports[0], 2)
            for p in self.sentinel_ports:
                self._start_sentinel(p)
            self._wait(lambda: all(self.master_port(s) == self.redis_ports[0] for s in self.sentinel_ports),
                       "the sentinels do not know the master")
        except BaseException:
            self.stop()
            raise

    def _start_redis(self, port, master):
        d = os.path.join(self.dir, "r%d" % port)
        os.makedirs(d, exist_ok=True)
        args = self.wrap + ["redis-server", "--port", str(port), "--bind", self.host, "--protected-mode", "no", "--save", "", "--appendonly", "yes",
                "--appendfsync", "everysec", "--dir", d, "--logfile", "redis.log"]
        if master:
            args += ["--replicaof", self.host, str(master)]
        self.procs[port] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self._wait(lambda: self.command(port, "PING") == "PONG", "redis-server on port %d did not start" % port)

    def _start_sentinel(self, port):
        conf = os.path.join(self.dir, "sentinel%d.conf" % port)
        with open(conf, "w") as f:
            f.write("port %d\nbind %s\nprotected-mode no\ndir %s\nlogfile sentinel%d.log\n"
                    "sentinel monitor %s %s %d 2\n"
                    "sentinel down-after-milliseconds %s 1000\n"
                    "sentinel failover-timeout %s 10000\n"
                    "sentinel parallel-syncs %s 1\n" % (port, self.host, self.dir, port, MASTER, self.host, self.redis_ports[0],
                                                       MASTER, MASTER, MASTER))
        self.procs[port] = subprocess.Popen(self.wrap + ["redis-sentinel", conf], stdout=subprocess.DEVNULL,
                                            stderr=subprocess.STDOUT)
        self._wait(lambda: self.command(port, "PING") == "PONG", "redis-sentinel on port %d did not start" % port)

    def command(self, port, *args, **kw):
        """command() to this deployment's host, through self.call."""
        return self.call(lambda: command(port, *args, host=self.host, **kw))

    def _wait(self, ok, why, seconds=20):
        wait(ok, why, seconds)

    def _wait_replicas(self, port, n):
        def ok():
            info = self.command(port, "INFO", "replication") or ""
            return "connected_slaves:%d" % n in info and info.count("state=online") >= n
        self._wait(ok, "the replicas did not sync with the master on port %d" % port)

    def url(self, prefix, options=""):
        hosts = ",".join("%s:%d" % (self.host, p) for p in self.sentinel_ports)
        return "redis+sentinel://%s/%s/%s%s" % (hosts, MASTER, prefix, options)

    def master_port(self, sentinel=None):
        """The master's port as a sentinel names it (None: no answer)."""
        r = self.command(sentinel or self.sentinel_ports[0], "SENTINEL", "get-master-addr-by-name", MASTER)
        return int(r[1]) if isinstance(r, list) and len(r) == 2 else None

    def kill(self, port):
        p = self.procs.get(port)
        if p and p.poll() is None:
            p.kill()
            p.wait()

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
