"""Starts a real `seqkv serve` for the server tests (not a test itself) and talks to it
with curl, as a user would. Server(...) picks a free port (--port 0, read back from the
log), waits for /health, and stop()/kill() end it."""
import http.client
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from clitest import ROOT, SEQKV, WRAP, Fail  # noqa: E402

# Under $SEQKV_WRAP (scripts/reliability.sh valgrind: memcheck) the server runs inside the
# wrapper and every wait is 30 times longer; a wrapper's error exit (99) at stop() fails.
SLOW = 30 if WRAP else 1
WRAP_ERROR_EXIT = 99
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def request(s, method, path, body=None, headers=None, timeout=60):
    """One HTTP request to server s -> (status, {lower-case header: value}, body bytes);
    body: bytes, text, or an object sent as JSON."""
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=timeout)
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    out = r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    c.close()
    return out


class Server:
    def __init__(self, *args, log=None, env=None, until="listening on http://"):
        # --metrics: the tests read /metrics (off by default, as in llama-server)
        self.args = WRAP + [SEQKV, "serve", "--port", "0", "--metrics"] + [str(a) for a in args]
        self.log = log or os.path.join(ROOT, "build", "serve-%d.log" % os.getpid())
        self.env = env
        self.start(until)

    def start(self, until="listening on http://"):
        """Starts the server and waits for the log line `until` (the "loading ... (http://"
        line comes before the model is loaded, "listening on" after)."""
        self.logf = open(self.log, "w+")
        env = dict(os.environ, **self.env) if self.env else None
        self.p = subprocess.Popen(self.args, stdout=self.logf, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        self.port = None
        t0 = time.time()
        while time.time() - t0 < 30 * SLOW and self.p.poll() is None:
            with open(self.log) as f:
                for line in f:
                    if until in line:
                        self.port = int(line.split("http://")[1].split(":")[1].split()[0])
            if self.port:
                break
            time.sleep(0.05)
        if not self.port:
            raise RuntimeError("server did not start: " + open(self.log).read()[-2000:])
        self.url = "http://127.0.0.1:%d" % self.port

    def kill(self):
        """kill -9: no chance to flush anything."""
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()
        self.logf.close()

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=20 * SLOW)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.logf.close()
        if WRAP and self.p.returncode == WRAP_ERROR_EXIT:
            raise Fail("the wrapper (%s) found errors in seqkv serve (its log; the server's: %s)" % (WRAP[0], self.log))
        # under the sanitizers (make san, make ubsan) a finding in the server (LeakSanitizer's
        # leaks at shutdown above all, which no reply shows) fails every server test
        log = open(self.log, errors="replace").read()
        found = [m for m in SANITIZER_MARKS if m in log]
        if found:
            raise Fail("seqkv serve (exit %s) had sanitizer findings (%s): %s" %
                       (self.p.returncode, ", ".join(found), log[log.index(found[0]):][:3000]))
        return self.p.returncode

    def curl(self, path, body=None, method=None, headers=(), raw=None, timeout=60):
        """-> (HTTP status, response text). body: an object sent as JSON; raw: bytes as is."""
        timeout *= SLOW
        cmd = ["curl", "-s", "-N", "-o", "-", "-w", "\n%{http_code}", "--max-time", str(timeout)]
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        if data is not None:
            cmd += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
        for h in headers:
            cmd += ["-H", h]
        if method:
            cmd += ["-X", method]
        p = subprocess.run(cmd + [self.url + path], input=data, capture_output=True, timeout=timeout + 10)
        text = p.stdout.decode("utf-8", "replace")
        text, _, code = text.rpartition("\n")
        return int(code or 0), text

    def json(self, path, body=None, **kw):
        code, text = self.curl(path, body, **kw)
        try:
            return code, json.loads(text)
        except ValueError:
            return code, text


def sse(text):
    """The data: payloads of a server-sent event stream (comments dropped), in order."""
    out = []
    for block in text.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                out.append(line[6:])
    return out
