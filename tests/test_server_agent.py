"""llama-server's built-in agent tools (issue 48, docs/server.md "Agent tools"): GET and POST
/tools with --tools, against a real `seqkv serve` driven over HTTP, on files in a scratch
directory and real shell commands.

- off_by_default: without --tools both routes answer 403 (feature_disabled) and nothing
  runs; with an API key /tools needs it; the start warns; CORS then allows localhost
  origins only (an explicit --cors-origins wins); an unknown tool name or --tools-runtime
  stops the start with a message.
- lists_enabled: GET /tools lists exactly the tools named, each with its OpenAI function
  definition and write permission; a tool not enabled is a 404.
- files: write_file (parents created), read_file (ranges, line numbers, the 16 KB bound
  and its truncation, base64 byte for byte), edit_file (unique, not found, repeated,
  overlapping, unchanged, several at once), paths from X-Tool-Cwd and ~.
- search: file_glob_search (include, exclude, dir and all, max_depth, limit, junk
  directories listed but not entered, git's ignores), grep_search (POSIX and \\d, literal,
  ignore_case, context lines as llama-server prints them, the 100-match bound, a bad regex).
- exec: output and exit code, stdout and stderr together, the output bound, a timeout that
  kills the command and what it started, stdin empty, no server descriptor inherited,
  streamed output arriving as it is printed, and a client that leaves (streaming or not)
  killing its command.
- bad_calls: 400s naming the field, 404 for an unknown tool or a stream it cannot do, the
  tool runtimes refused, memory past --mem-budget a 413 (not a crash, not a partial file).
"""
import base64
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
import testenv  # noqa: E402
from clitest import Reporter, check  # noqa: E402
from harness import SEQKV, Server, request  # noqa: E402

MODEL = testenv.shared_path("models", "stories260K", "stories260K.gguf")
KEY = "agent-test-key"
AUTH = {"Authorization": "Bearer " + KEY}


def tool(s, name, params=None, headers=None, **extra):
    """POST /tools -> (status, parsed JSON)."""
    body = dict({"tool": name}, **extra)
    if params is not None:
        body["params"] = params
    code, _, raw = request(s, "POST", "/tools", body, dict(AUTH, **(headers or {})))
    return code, json.loads(raw)


def text(s, name, params, **kw):
    code, o = tool(s, name, params, **kw)
    check(code == 200 and "plain_text_response" in o, "%s %s: %d %s" % (name, params, code, o))
    return o["plain_text_response"]


def with_tools(tmp, fn, *flags, env=None):
    s = Server("-m", MODEL, "--api-key", KEY, *(flags or ("--tools", "all")), env=env,
               log=os.path.join(tmp, fn.__name__ + ".log"))
    try:
        fn(s)
    finally:
        s.stop()


def off_by_default(tmp):
    marker = os.path.join(tmp, "ran")
    s = Server("-m", MODEL, log=os.path.join(tmp, "off.log"))
    try:
        for method, body in (("GET", None), ("POST", {"tool": "exec_shell_command",
                                                      "params": {"command": "touch " + marker}})):
            code, _, raw = request(s, method, "/tools", body)
            check(code == 403 and json.loads(raw)["error"]["type"] == "feature_disabled" and b"--tools" in raw,
                  "%s without --tools: %d %r" % (method, code, raw))
        check(not os.path.exists(marker), "a command ran with the tools off")
        code, h, _ = request(s, "GET", "/health", headers={"Origin": "http://evil.example"})
        check(code == 200 and h.get("access-control-allow-origin"), "CORS without tools: %s" % h)
    finally:
        s.stop()
    log = os.path.join(tmp, "on.log")
    s = Server("-m", MODEL, "--tools", "all", "--api-key", KEY, log=log)
    try:
        code, _, _ = request(s, "POST", "/tools", {"tool": "exec_shell_command", "params": {"command": "touch " + marker}})
        check(code == 401 and not os.path.exists(marker), "no key: %d" % code)
        check("do not enable" in open(log).read(), "no warning at start")
        for origin, allowed in (("http://localhost:8080", True), ("http://127.0.0.1:3000", True),
                                ("http://evil.example", False)):
            code, h, _ = request(s, "OPTIONS", "/completions", headers={
                "Origin": origin, "Access-Control-Request-Method": "POST"})
            check(code == 200 and (h.get("access-control-allow-origin") == origin) == allowed and
                  (allowed or "access-control-allow-origin" not in h), "preflight from %s: %s" % (origin, h))
    finally:
        s.stop()
    s = Server("-m", MODEL, "-ag", "--cors-origins", "*", log=os.path.join(tmp, "agent.log"))
    try:
        code, h, _ = request(s, "GET", "/health", headers={"Origin": "http://evil.example"})
        check(code == 200 and h.get("access-control-allow-origin"), "an explicit --cors-origins lost: %s" % h)
        code, _, raw = request(s, "GET", "/tools")
        check(code == 200 and len(json.loads(raw)) == 7, "-ag: %d %r" % (code, raw[:200]))
        code, _, raw = request(s, "GET", "/cors-proxy?url=http%3A%2F%2F127.0.0.1%3A1%2F")
        check(code == 502, "-ag turns the proxy on too: %d" % code)
    finally:
        s.stop()
    for flags, want in ((["--tools", "read_file,rm_rf"], "unknown tool \"rm_rf\""),
                        (["--tools", "all", "--tools-runtime", "docker:alpine"], "not supported")):
        p = subprocess.run([SEQKV, "serve", "-m", MODEL, "--port", "0"] + flags, capture_output=True,
                           text=True, timeout=30)
        check(p.returncode != 0 and want in p.stderr, "%s: rc %d %r" % (flags, p.returncode, p.stderr[-300:]))


def lists_enabled(tmp):
    def run(s):
        code, _, raw = request(s, "GET", "/tools", headers=AUTH)
        got = json.loads(raw)
        check(code == 200 and [t["tool"] for t in got] == ["read_file", "edit_file"], "listed: %r" % raw[:300])
        rf, ef = got
        check(rf["permissions"]["write"] is False and ef["permissions"]["write"] is True and rf["type"] == "server",
              "permissions: %s" % got)
        fn = rf["definition"]["function"]
        check(rf["definition"]["type"] == "function" and fn["name"] == "read_file" and
              fn["parameters"]["required"] == ["path"] and "start_line" in fn["parameters"]["properties"],
              "definition: %s" % rf["definition"])
        code, o = tool(s, "exec_shell_command", {"command": "true"})
        check(code == 404 and "unknown tool" in o["error"]["message"], "not enabled: %d %s" % (code, o))
    with_tools(tmp, run, "--tools", "read_file, edit_file")


def files(tmp):
    home = os.path.join(tmp, "home")
    os.makedirs(home)

    def run(s):
        d = os.path.join(tmp, "w")
        code, o = tool(s, "write_file", {"path": d + "/a/b/c.txt", "content": "one\ntwo\nthree\n"})
        check(code == 200 and o == {"result": "file written successfully", "path": d + "/a/b/c.txt", "bytes": 14},
              "write: %d %s" % (code, o))
        check(open(d + "/a/b/c.txt").read() == "one\ntwo\nthree\n", "written content")
        check(text(s, "read_file", {"path": d + "/a/b/c.txt"}) == "one\ntwo\nthree\n", "read whole")
        check(text(s, "read_file", {"path": d + "/a/b/c.txt", "start_line": 2, "end_line": 2, "append_loc": True})
              == "2\u2192two\n", "read range")
        check(text(s, "read_file", {"path": "b/c.txt"}, headers={"X-Tool-Cwd": d + "/a/./x/.."}) ==
              "one\ntwo\nthree\n", "X-Tool-Cwd")
        code, o = tool(s, "write_file", {"path": "~/h.txt", "content": "at home"})
        check(code == 200 and open(os.path.join(home, "h.txt")).read() == "at home", "~: %s" % o)
        code, o = tool(s, "read_file", {"path": d + "/missing"})
        check(code == 200 and o["error"].startswith("cannot stat file"), "missing: %d %s" % (code, o))
        big = "".join("line %05d %s\n" % (i, "x" * 40) for i in range(1000))  # 52 KB
        open(d + "/big.txt", "w").write(big)
        code, o = tool(s, "read_file", {"path": d + "/big.txt"})
        check(code == 200 and "file too large" in o.get("error", "") and "start_line" in o["error"], "big: %s" % o)
        part = text(s, "read_file", {"path": d + "/big.txt", "start_line": 10, "end_line": 12})
        check(part == "".join(big.splitlines(True)[9:12]), "big range: %r" % part)
        cut = text(s, "read_file", {"path": d + "/big.txt", "end_line": 100000})
        check(cut.endswith("[output truncated]") and 15000 < len(cut) <= 16384 + 20 and big.startswith(cut[:-18]),
              "truncated read: %d bytes" % len(cut))
        blob = bytes(range(256)) * 1000
        open(d + "/blob.bin", "wb").write(blob)
        code, o = tool(s, "read_file", {"path": d + "/blob.bin"}, headers={"X-Resp-Type": "base64"})
        check(code == 200 and base64.b64decode(o["base64"]) == blob and o["size_bytes"] == len(blob),
              "base64: %d %s" % (code, str(o)[:100]))
        # edit_file
        p = d + "/e.txt"
        open(p, "w").write("alpha beta\ngamma beta\ndelta\n")
        for edits, want in (([{"old_text": "zeta", "new_text": "z"}], "could not find edits[0].old_text"),
                            ([{"old_text": "beta", "new_text": "b"}], "found 2 occurrences of edits[0]"),
                            ([{"old_text": "alpha beta", "new_text": "a"}, {"old_text": "beta\ngamma", "new_text": "g"}],
                             "overlap"),
                            ([{"old_text": "delta", "new_text": "delta"}], "no changes made"),
                            ([{"old_text": "", "new_text": "x"}], "must not be empty")):
            code, o = tool(s, "edit_file", {"path": p, "edits": edits})
            check(code == 200 and want in o.get("error", ""), "edit %s: %s" % (edits, o))
            check(open(p).read() == "alpha beta\ngamma beta\ndelta\n", "a refused edit changed the file")
        code, o = tool(s, "edit_file", {"path": p, "edits": [{"old_text": "delta", "new_text": "D"},
                                                             {"old_text": "alpha", "new_text": "A"}]})
        check(code == 200 and o.get("edits_applied") == 2 and open(p).read() == "A beta\ngamma beta\nD\n",
              "two edits: %s %r" % (o, open(p).read()))
    with_tools(tmp, run, env=dict(os.environ, HOME=home))


def search(tmp):
    d = os.path.join(tmp, "tree")
    for rel, body in (("a.c", "int x = 1;\n"), ("src/b.c", "int y = 22;\nfoo(a.b)\n"), ("src/deep/c.h", "Foo\n"),
                      ("node_modules/m.js", "x = 3\n"), ("notes.txt", "no digits here\nfoo(a+b)\n")):
        os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
        open(os.path.join(d, rel), "w").write(body)
    many = os.path.join(tmp, "many")
    os.makedirs(many)
    for i in range(150):
        open(os.path.join(many, "f%03d.txt" % i), "w").write("hit %d\n" % i)

    def run(s):
        code, o = tool(s, "file_glob_search", {"path": d})
        check(code == 200 and [e["path"] for e in o["entries"]] == ["a.c", "notes.txt", "src/b.c", "src/deep/c.h"] and
              o["base"] == d and "Total matches: 4" in o["plain_text_response"], "all files: %s" % o)
        t = text(s, "file_glob_search", {"path": d, "include": "*.c"})
        check(t.startswith("a.c\nsrc/b.c\n\n---\nTotal matches: 2\n"), "*.c: %r" % t)
        t = text(s, "file_glob_search", {"path": d, "include": "src/**/*.h"})
        check(t.startswith("src/deep/c.h\n\n---"), "src/**/*.h: %r" % t)
        t = text(s, "file_glob_search", {"path": d, "include": "src/**/*.c"})
        check(t.startswith("src/b.c\n\n---"), "** over no directory: %r" % t)
        t = text(s, "file_glob_search", {"path": d, "exclude": "src/**"})
        check(t.startswith("a.c\nnotes.txt\n\n---"), "exclude: %r" % t)
        code, o = tool(s, "file_glob_search", {"path": d, "type": "dir"})
        check([e["path"] for e in o["entries"]] == ["node_modules", "src", "src/deep"] and
              all(e["type"] == "dir" for e in o["entries"]) and "node_modules/\n" in o["plain_text_response"],
              "dirs (junk listed, not entered): %s" % o)
        t = text(s, "file_glob_search", {"path": d, "type": "all", "max_depth": 1})
        check(t.startswith("a.c\nnode_modules/\nnotes.txt\nsrc/\n\n---"), "max_depth 1: %r" % t)
        t = text(s, "file_glob_search", {"path": many, "limit": 5})
        check(t.startswith("f000.txt\nf001.txt\nf002.txt\nf003.txt\nf004.txt\n\n---\nTotal matches: 150\n") and
              "limit reached" in t, "limit: %r" % t)
        for params, want in (({"path": d, "type": "files"}, "invalid type"), ({"path": d, "limit": 0}, "invalid limit"),
                             ({"path": d + "/nope"}, "not a directory")):
            code, o = tool(s, "file_glob_search", params)
            check(code == 200 and want in o.get("error", ""), "%s: %s" % (params, o))
        if shutil.which("git"):
            g = os.path.join(tmp, "repo")
            os.makedirs(g)
            subprocess.run(["git", "init", "-q", g], check=True)
            open(os.path.join(g, ".gitignore"), "w").write("*.log\n")
            for f in ("keep.c", "drop.log"):
                open(os.path.join(g, f), "w").write("x\n")
            t = text(s, "file_glob_search", {"path": g})
            check(t.startswith(".gitignore\nkeep.c\n\n---"), "git's ignores: %r" % t)
        # grep_search
        t = text(s, "grep_search", {"path": d, "pattern": "\\d+", "return_line_numbers": True})
        check(t == "a.c:1:int x = 1;\nsrc/b.c:1:int y = 22;\n\n---\nTotal matches: 2\n", "\\d: %r" % t)
        t = text(s, "grep_search", {"path": d, "pattern": "foo(a.b)", "literal": True})
        check(t.startswith("src/b.c:foo(a.b)\n\n---\nTotal matches: 1"), "literal: %r" % t)
        t = text(s, "grep_search", {"path": d, "pattern": "^foo", "ignore_case": True, "include": "*.h"})
        check(t.startswith("src/deep/c.h:Foo\n\n---\nTotal matches: 1"), "ignore_case: %r" % t)
        t = text(s, "grep_search", {"path": d + "/src/b.c", "pattern": "foo", "context_lines": 1})
        check(t.startswith(d + "/src/b.c-1-int y = 22;\n" + d + "/src/b.c:2:foo(a.b)\n--\n\n---"), "context: %r" % t)
        t = text(s, "grep_search", {"path": many, "pattern": "hit"})
        check("Total matches: 100\n[100 matches limit reached" in t, "limit: %r" % t[-200:])
        for pattern in ("a(b", "(a)\\1"):
            code, o = tool(s, "grep_search", {"path": d, "pattern": pattern})
            check(code == 200 and o.get("error", "").startswith("invalid regex"), "%r: %s" % (pattern, o))
    with_tools(tmp, run)


def exec_tool(tmp):
    def run(s):
        t = text(s, "exec_shell_command", {"command": "echo out; echo err >&2; exit 3"})
        check(t == "out\nerr\n\n[exit code: 3]", "exit code: %r" % t)
        t = text(s, "exec_shell_command", {"command": "cat; echo done"})
        check(t == "done\n\n[exit code: 0]", "stdin not empty: %r" % t)
        t = text(s, "exec_shell_command", {"command": "ls /proc/self/fd"})
        fds = sorted(int(x) for x in t.split("[exit")[0].split())
        check(fds == [0, 1, 2, 3], "descriptors the command inherited: %s" % fds)  # 3: ls's own directory
        t = text(s, "exec_shell_command", {"command": "head -c 100000 /dev/zero | tr '\\0' y", "max_output_size": 1000})
        check(t == "y" * 1000 + "\n[output truncated]\n[exit code: 0]", "bound: %r" % t[-80:])
        t = text(s, "exec_shell_command", {"command": "pwd"}, headers={"X-Tool-Cwd": tmp})
        check(t == tmp + "\n\n[exit code: 0]", "cwd: %r" % t)
        marker = os.path.join(tmp, "late")
        t0 = time.time()
        t = text(s, "exec_shell_command", {"command": "(sleep 3; touch %s) & sleep 30" % marker, "timeout": 1})
        check(time.time() - t0 < 5 and t.endswith("[exit due to timed out]"), "timeout: %.1f s %r" %
              (time.time() - t0, t))
        time.sleep(3.5)
        check(not os.path.exists(marker), "a command's background child outlived its timeout")
        # streamed: the first line arrives while the command still runs
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=20)
        c.request("POST", "/tools", json.dumps({"tool": "exec_shell_command", "stream": True,
                                                "params": {"command": "echo a; sleep 2; echo b"}}), AUTH)
        r = c.getresponse()
        t0 = time.time()
        first = b""
        while b"\n\n" not in first:
            first += r.read1(4096)
        check(r.status == 200 and r.getheader("Content-Type") == "text/event-stream" and time.time() - t0 < 1.5 and
              json.loads(first.split(b"\n\n")[0][6:]) == {"chunk": "a\n"}, "first event: %r" % first)
        rest = first + r.read()
        events = [json.loads(e[6:]) for e in rest.split(b"\n\n") if e.startswith(b"data: ")]
        check(events == [{"chunk": "a\n"}, {"chunk": "b\n"}, {"chunk": "\n[exit code: 0]"}, {"done": True}],
              "events: %s" % events)
        c.close()
        # a client that leaves kills its command, streaming or not
        for stream in (True, False):
            marker = os.path.join(tmp, "after-%s" % stream)
            body = json.dumps({"tool": "exec_shell_command", "stream": stream,
                               "params": {"command": "sleep 2; touch " + marker, "timeout": 20}})
            sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            sock.sendall(("POST /tools HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: "
                          "application/json\r\nContent-Length: %d\r\n\r\n%s" % (KEY, len(body), body)).encode())
            time.sleep(0.5)
            sock.close()
            time.sleep(3)
            check(not os.path.exists(marker), "the command went on after its client left (stream %s)" % stream)
        code, _ = s.curl("/health")
        check(code == 200, "health after the exec cases: %d" % code)
    with_tools(tmp, run)


def bad_calls(tmp):
    def run(s):
        for body, code_want, want in (({"params": {}}, 400, "\"tool\""),
                                      ({"tool": "read_file", "params": [1]}, 400, "\"params\""),
                                      ({"tool": "read_file", "params": {}}, 400, "params.path"),
                                      ({"tool": "read_file", "params": {"path": "/x", "start_line": "2"}}, 400,
                                       "params.start_line"),
                                      ({"tool": "read_file", "params": {"path": "/x", "end_line": 2 ** 40}}, 400,
                                       "params.end_line"),
                                      ({"tool": "exec_shell_command", "params": {"command": "true", "timeout": 0}},
                                       400, "params.timeout"),
                                      ({"tool": "edit_file", "params": {"path": "/x", "edits": [{"old_text": 1}]}},
                                       400, "params.edits[0]"),
                                      ({"tool": "read_file", "params": {"path": "/x"}, "stream": True}, 404,
                                       "does not support stream"),
                                      ({"tool": "rm"}, 404, "unknown tool")):
            code, _, raw = request(s, "POST", "/tools", body, AUTH)
            check(code == code_want and want in json.loads(raw)["error"]["message"], "%s: %d %r" % (body, code, raw))
        code, _, raw = request(s, "POST", "/tools", b"{not json", AUTH)
        check(code == 400, "bad JSON: %d" % code)
        for rt, code_want, want in (("docker-container:abc", 400, "not supported"),
                                    ("ssh:user@host.example", 400, "not supported"),
                                    ("podman:alpine", 500, "must name a running container"),
                                    ("docker-container:--privileged", 500, "invalid container id"),
                                    ("ssh:-oProxyCommand=x", 500, "invalid ssh target"),
                                    ("fake:x", 500, "unknown tool runtime")):
            code, o = tool(s, "get_info", headers={"X-Tool-Runtime": rt})
            check(code == code_want and want in o["error"]["message"], "runtime header %s: %d %s" % (rt, code, o))
        code, o = tool(s, "get_info")
        check(code == 200 and o["os"].startswith("Linux") and o["cwd"].startswith("/"), "get_info: %s" % o)
        p = os.path.join(tmp, "two-mb.bin")
        open(p, "wb").write(os.urandom(2 << 20))
        code, o = tool(s, "read_file", {"path": p}, headers={"X-Resp-Type": "base64"})
        check(code == 413, "a 2 MB base64 read past a 1 MB budget: %d %s" % (code, str(o)[:200]))
        big = "keep\n" * 400000 + "UNIQUE\n"
        open(p + ".txt", "w").write(big)
        code, o = tool(s, "edit_file", {"path": p + ".txt", "edits": [{"old_text": "UNIQUE", "new_text": "x"}]})
        check(code == 413 and open(p + ".txt").read() == big, "an edit past the budget: %d %s" % (code, o))
        code, _ = s.curl("/health")
        check(code == 200, "health: %d" % code)
    with_tools(tmp, run, "--tools", "all", "--mem-budget", "1M")


CASES = [off_by_default, lists_enabled, files, search, exec_tool, bad_calls]

if __name__ == "__main__":
    sys.exit(testenv.run_stories_cases(Reporter("test_server_agent"), CASES, MODEL, "agent-"))
