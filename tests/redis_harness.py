"""A private redis-server for the Python tests (the C tests use tests/redis_harness.h):
on a unix socket in a temporary directory, no TCP port, no persistence; stop() kills it."""
import os
import shutil
import socket
import subprocess
import time


def free_port():
    """A loopback TCP port nothing listens on (at the moment of asking)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def report_missing(rep, case, miss):
    """Programs `miss` are not installed: reports `case` as SKIP, or FAIL under
    SEQKV_REQUIRE_REDIS=1 (.ci/run); -> the test's exit status."""
    need = os.environ.get("SEQKV_REQUIRE_REDIS") == "1"
    rep.report(case, "FAIL" if need else "SKIP", "%s not installed (scripts/install-deps.sh)" % " and ".join(miss))
    return 1 if need else 0


def available():
    return shutil.which("redis-server") is not None


class Redis:
    def __init__(self, workdir, *extra):
        self.dir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.sock = os.path.join(workdir, "redis.sock")
        self.p = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", self.sock, "--unixsocketperm", "700",
                                   "--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--dir", workdir,
                                   "--logfile", "redis.log"]
                                  + list(extra), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        for _ in range(200):
            if self.ping():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("redis-server did not start")

    def ping(self):
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(1)
                s.connect(self.sock)
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def url(self, prefix):
        return "unix://%s?prefix=%s" % (self.sock, prefix)

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
