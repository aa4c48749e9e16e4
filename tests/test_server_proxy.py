"""llama-server's CORS proxy for its web UI (issue 48, docs/server.md "CORS proxy"):
GET and POST /cors-proxy?url=URL with --ui-mcp-proxy, against a real upstream HTTP server
(Python's, in this process, on loopback) and a real `seqkv serve` driven over HTTP.

- off_by_default: without --ui-mcp-proxy the route answers 403 (and forwards nothing);
  with an API key it needs the key like every other route.
- forwards_only_explicit_headers: "X-Llama-Server-Proxy-Header-NAME: V" arrives as
  "NAME: V"; the client's Authorization, X-Api-Key, Cookie and Proxy-Authorization do
  not; the upstream's status, headers and Content-Type come back, its Server and
  Content-Length are replaced by this server's own.
- post_body_as_is: a POST body that is not a JSON object (an array, bytes) reaches the
  upstream byte for byte with the Content-Type the client names, and none when it names
  none (not libcurl's form type); a 1 MB reply comes back whole (16 times the buffer).
- streams: the first event of a server-sent stream reaches the client while the upstream
  still holds the rest (the proxy does not collect the reply), and a client that hangs up
  mid-stream, before the upstream has answered at all, or while an answering upstream
  sends nothing more, stops the upstream transfer within seconds.
- memory_charged: the proxy's buffers and its copy of the body count against the
  request's working memory: with --mem-budget 1M a 600 KB body (which alone fits) is a
  413, a 100 KB one goes through.
- refuses_bad_targets: no url, an unparsable one, ftp:// and file:// targets, a URL with
  a password: 400 naming the problem; a closed port: 502 "proxy error"; a redirect is
  followed to http, never to file://.
"""
import http.client
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
import testenv  # noqa: E402
from clitest import Reporter, check  # noqa: E402
from harness import Server  # noqa: E402

MODEL = testenv.shared_path("models", "stories260K", "stories260K.gguf")
KEY = "proxy-test-key"
BIG = bytes(range(256)) * 4096  # 1 MiB


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, code, body, ctype="text/plain", extra=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        st = self.server.state
        st["headers"] = {k.lower(): v for k, v in self.headers.items()}
        if self.path == "/capture":
            self.reply(201, b'{"ok": true}', "application/json", [("X-Upstream", "yes"), ("Server", "upstream/1.0")])
        elif self.path == "/big":
            self.reply(200, BIG, "application/octet-stream")
        elif self.path == "/redirect":
            self.reply(302, b"", extra=[("Location", "/capture")])
        elif self.path == "/to-file":
            self.reply(302, b"", extra=[("Location", "file:///etc/passwd")])
        elif self.path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.chunk(b"data: first\n\n")
            st["first_read"].wait(20)  # the client must see the first event before this one is sent
            self.chunk(b"data: second\n\n")
            self.chunk(b"")
        elif self.path == "/silent":  # no reply: wait for the proxy to hang up (at most 20 s)
            self.connection.settimeout(20)
            try:
                st["silent"] = "closed" if self.connection.recv(1) == b"" else "data"
            except OSError:
                st["silent"] = "timeout"
            st["silent_at"] = time.time()
        elif self.path == "/quiet":  # headers and one event, then nothing until the proxy hangs up
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.chunk(b"data: only\n\n")
            self.connection.settimeout(20)
            try:
                st["quiet"] = "closed" if self.connection.recv(1) == b"" else "data"
            except OSError:
                st["quiet"] = "timeout"
            st["quiet_at"] = time.time()
        elif self.path == "/endless":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            t0 = time.time()
            try:
                while time.time() - t0 < 60:
                    self.chunk(b"data: tick\n\n" + b"x" * 4096)
                    time.sleep(0.01)
                st["endless"] = "ran out"
            except OSError:
                st["endless"] = time.time()
        else:
            self.reply(404, b"no such path")

    def chunk(self, b):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
        self.wfile.flush()

    def do_POST(self):
        st = self.server.state
        st["headers"] = {k.lower(): v for k, v in self.headers.items()}
        st["body"] = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.reply(200, b"got %d" % len(st["body"]))


def upstream():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    srv.daemon_threads = True
    srv.state = {"first_read": threading.Event()}
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def proxied(up, path):
    return "/cors-proxy?url=" + quote("http://127.0.0.1:%d%s" % (up.server_port, path), safe="")


def request(s, method, path, body=None, headers=None):
    """-> (status, {lower-case header: value}, body bytes), over http.client."""
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    out = r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    c.close()
    return out


AUTH = {"Authorization": "Bearer " + KEY}


def off_by_default(tmp):
    up = upstream()
    try:
        s = Server("-m", MODEL, log=os.path.join(tmp, "off.log"))
        try:
            code, _, body = request(s, "GET", proxied(up, "/capture"))
            check(code == 403 and b"--ui-mcp-proxy" in body, "without the flag: %d %r" % (code, body))
            check("headers" not in up.state, "the upstream was called")
        finally:
            s.stop()
        s = Server("-m", MODEL, "--ui-mcp-proxy", "--api-key", KEY, log=os.path.join(tmp, "key.log"))
        try:
            code, _, _ = request(s, "GET", proxied(up, "/capture"))
            check(code == 401 and "headers" not in up.state, "no key: %d" % code)
            log = open(os.path.join(tmp, "key.log")).read()
            check("do not enable" in log, "no warning when the proxy is on: " + log[-300:])
        finally:
            s.stop()
    finally:
        up.shutdown()


def with_proxy(tmp, fn):
    up = upstream()
    s = Server("-m", MODEL, "--ui-mcp-proxy", "--api-key", KEY, log=os.path.join(tmp, fn.__name__ + ".log"))
    try:
        fn(s, up)
    finally:
        s.stop()
        up.shutdown()


def forwards_only_explicit_headers(tmp):
    def run(s, up):
        code, h, body = request(s, "GET", proxied(up, "/capture"), headers=dict(AUTH, **{
            "X-Api-Key": KEY, "Cookie": "session=secret", "Proxy-Authorization": "Basic secret",
            "X-Llama-Server-Proxy-Header-Accept": "application/json",
            "x-llama-server-proxy-header-authorization": "Bearer explicit",
            "X-Llama-Server-Proxy-Header-X-Trace": "abc"}))
        got = up.state["headers"]
        check(code == 201 and body == b'{"ok": true}', "reply: %d %r" % (code, body))
        check(got.get("accept") == "application/json" and got.get("authorization") == "Bearer explicit" and
              got.get("x-trace") == "abc", "explicit headers: %s" % got)
        for leaked in ("x-api-key", "cookie", "proxy-authorization"):
            check(leaked not in got, "%s was forwarded: %s" % (leaked, got))
        check(not any(k.startswith("x-llama-server-proxy-header") for k in got), "prefixed names forwarded: %s" % got)
        check(h.get("x-upstream") == "yes" and h.get("content-type") == "application/json", "reply headers: %s" % h)
        check(h.get("server") != "upstream/1.0", "the upstream's Server passed through: %s" % h)
        check("content-length" not in h or h["content-length"] == str(len(body)), "Content-Length: %s" % h)
        code, _, body = request(s, "GET", proxied(up, "/redirect"), headers=AUTH)
        check(code == 201 and body == b'{"ok": true}', "redirect not followed: %d %r" % (code, body))
        code, _, body = request(s, "GET", proxied(up, "/nowhere"), headers=AUTH)
        check(code == 404 and body == b"no such path", "upstream 404: %d %r" % (code, body))
    with_proxy(tmp, run)


def post_body_as_is(tmp):
    def run(s, up):
        raw = b'[1, 2, {"jsonrpc": "2.0"}]'
        code, _, body = request(s, "POST", proxied(up, "/rpc"), raw, dict(AUTH, **{
            "Content-Type": "application/json", "X-Llama-Server-Proxy-Header-Content-Type": "application/json"}))
        check(code == 200 and body == b"got %d" % len(raw) and up.state["body"] == raw, "array body: %d %r" % (code, body))
        check(up.state["headers"].get("content-type") == "application/json", "content type: %s" % up.state["headers"])
        blob = bytes(range(256)) * 3
        code, _, body = request(s, "POST", proxied(up, "/rpc"), blob, AUTH)
        check(code == 200 and up.state["body"] == blob, "bytes body: %d %r" % (code, body))
        check("content-type" not in up.state["headers"] and "expect" not in up.state["headers"],
              "libcurl's defaults sent: %s" % up.state["headers"])
        code, _, body = request(s, "GET", proxied(up, "/big"), headers=AUTH)
        check(code == 200 and body == BIG, "1 MiB reply: %d, %d bytes" % (code, len(body)))
    with_proxy(tmp, run)


def streams(tmp):
    def run(s, up):
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=15)
        c.request("GET", proxied(up, "/sse"), headers=AUTH)
        r = c.getresponse()
        check(r.status == 200 and r.getheader("Content-Type") == "text/event-stream", "sse: %d" % r.status)
        first = b""
        while b"\n\n" not in first:
            b = r.read1(4096)
            check(b, "the stream ended before its first event")
            first += b
        check(first.startswith(b"data: first"), "first event: %r" % first)
        up.state["first_read"].set()
        rest = r.read()
        check(b"data: second" in first + rest, "second event: %r" % rest)
        c.close()
        # a client that hangs up stops the transfer
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        sock.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n" %
                      (proxied(up, "/endless"), KEY)).encode())
        check(sock.recv(4096).startswith(b"HTTP/1.1 200"), "endless stream did not start")
        sock.close()
        t0 = time.time()
        while "endless" not in up.state and time.time() - t0 < 20:
            time.sleep(0.1)
        check(isinstance(up.state.get("endless"), float), "the upstream transfer went on after the client left: %s" %
              up.state.get("endless"))
        code, _ = s.curl("/health")
        check(code == 200, "health after a dropped stream: %d" % code)
        # a client that hangs up while the upstream has not answered yet stops the transfer too,
        # and so does one that hangs up while an answering upstream sends nothing more
        for name, wait_for in (("silent", None), ("quiet", b"data: only")):
            sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            sock.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n" %
                          (proxied(up, "/" + name), KEY)).encode())
            got = b""
            while wait_for and wait_for not in got:
                b = sock.recv(4096)
                check(b, "the %s stream ended before its event" % name)
                got += b
            time.sleep(0.5)
            sock.close()
            t_close = time.time()
            while name not in up.state and time.time() - t_close < 30:
                time.sleep(0.1)
            check(up.state.get(name) == "closed" and up.state[name + "_at"] - t_close < 5,
                  "the transfer with a %s upstream outlived its client: %s after %.1f s" %
                  (name, up.state.get(name), up.state.get(name + "_at", time.time()) - t_close))
    with_proxy(tmp, run)


def memory_charged(tmp):
    up = upstream()
    s = Server("-m", MODEL, "--ui-mcp-proxy", "--mem-budget", "1M", log=os.path.join(tmp, "mem.log"))
    try:
        code, _, body = request(s, "POST", proxied(up, "/rpc"), b"x" * 600000)
        check(code == 413 and "body" not in up.state, "600 KB body: %d %r" % (code, body[:200]))
        code, _, body = request(s, "POST", proxied(up, "/rpc"), b"y" * 100000)
        check(code == 200 and up.state.get("body") == b"y" * 100000, "100 KB body: %d %r" % (code, body[:200]))
    finally:
        s.stop()
        up.shutdown()


def refuses_bad_targets(tmp):
    def run(s, up):
        free = socket.socket()
        free.bind(("127.0.0.1", 0))
        closed = free.getsockname()[1]
        free.close()
        cases = (("/cors-proxy", 400, b"missing the url"),
                 ("/cors-proxy?url=" + quote("not a url", safe=""), 400, b"does not parse"),
                 ("/cors-proxy?url=" + quote("ftp://127.0.0.1/x", safe=""), 400, b"http or https"),
                 ("/cors-proxy?url=" + quote("file:///etc/passwd", safe=""), 400, b"http or https"),
                 ("/cors-proxy?url=" + quote("http://u:pw@127.0.0.1:%d/capture" % up.server_port, safe=""), 400,
                  b"authentication"),
                 ("/cors-proxy?url=" + quote("http://127.0.0.1:%d/" % closed, safe=""), 502, b"proxy error"),
                 (proxied(up, "/to-file"), 502, b"proxy error"))
        for path, want, phrase in cases:
            code, _, body = request(s, "GET", path, headers=AUTH)
            check(code == want and phrase in body, "%s: %d %r" % (path, code, body[:200]))
    with_proxy(tmp, run)


def main():
    cases = [off_by_default, forwards_only_explicit_headers, post_body_as_is, streams, memory_charged,
             refuses_bad_targets]
    return testenv.run_stories_cases(Reporter("test_server_proxy"), cases, MODEL, "skv-proxy-")


if __name__ == "__main__":
    sys.exit(main())
