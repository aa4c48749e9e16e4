"""MCP servers' tools in /tools (issue 48, docs/server.md "MCP servers"): `seqkv serve
--mcp-servers-config / --mcp-servers-json` against a real MCP server on the stdio transport
(tests/server/mcp_server.py, a separate process speaking JSON-RPC line by line), driven over
HTTP.

- listed: every server's tools in GET /tools as SERVER_TOOL (type "mcp", not write, the
  server's description and input schema as the function's), after the built-in ones of
  --tools, with MCP alone enough to turn /tools on; paged tools/list followed; a name that
  collides with a built-in tool or another server's is skipped; CORS defaults to localhost.
- calls: arguments reach the server, the text parts come back joined by newlines,
  isError and JSON-RPC errors are {"error": ...}, the config's env and cwd reach the child,
  the server is spawned once at start and once more on the first call (then reused).
- hostile: a call past timeout_ms answers an error in time and the server still serves the
  next call; a server that crashes mid-call is an error naming it, and the next call
  respawns it; notifications, garbage, stale replies and a 5 MiB line before the answer are
  skipped; a server that never answers or exits at once does not stop the start; a command that does not
  exist is a clear error per call; stream = true is a 404.
- config: malformed configs stop the start with a message naming the field; an entry
  without a command is skipped with a warning; the server's children are gone after it
  stops.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
import testenv  # noqa: E402
from clitest import Reporter, check  # noqa: E402
from harness import SEQKV, Server, request  # noqa: E402

MODEL = testenv.shared_path("models", "stories260K", "stories260K.gguf")
MCP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server", "mcp_server.py")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def tool(s, name, params=None, **extra):
    body = dict({"tool": name}, **extra)
    if params is not None:
        body["params"] = params
    code, _, raw = request(s, "POST", "/tools", body)
    return code, json.loads(raw)


def entry(*argv, **kw):
    e = {"command": PY, "args": [MCP] + list(argv)}
    e.update(kw)
    return e


def config(tmp, servers):
    p = os.path.join(tmp, "mcp-%d.json" % len(os.listdir(tmp)))
    with open(p, "w") as f:
        json.dump({"mcpServers": servers}, f)
    return p


class Serve(Server):
    def stop(self):
        rc = super().stop()
        check(rc == 0, "seqkv serve exited %s at its stop: %s" % (rc, open(self.log).read()[-1500:]))
        return rc


def serve(tmp, name, *flags):
    return Serve("-m", MODEL, *flags, log=os.path.join(tmp, name + ".log"))


def spawns(log):
    return open(log).read().count("start ") if os.path.exists(log) else 0


def listed(tmp):
    cfg = config(tmp, {"demo": entry("--pages"), "other": entry("--name-prefix", "x")})
    s = serve(tmp, "listed", "--mcp-servers-config", cfg, "--tools", "read_file")
    try:
        code, h, raw = request(s, "GET", "/tools")
        got = json.loads(raw)
        names = [t["tool"] for t in got]
        check(code == 200 and names[0] == "read_file" and "demo_echo" in names and "other_xecho" in names and
              "demo_two_parts" in names and len(names) == 21, "listed: %d %s" % (code, names))
        e = got[names.index("demo_echo")]
        check(e["type"] == "mcp" and e["permissions"]["write"] is False and e["uses_cwd"] is False and
              e["definition"]["function"]["description"] == "the echo tool" and
              e["definition"]["function"]["parameters"]["properties"]["text"]["type"] == "string",
              "entry: %s" % e)
        code, h, _ = request(s, "OPTIONS", "/tools", headers={"Origin": "http://evil.example",
                                                              "Access-Control-Request-Method": "POST"})
        check("access-control-allow-origin" not in h, "CORS with MCP servers: %s" % h)
    finally:
        s.stop()
    # MCP alone turns /tools on; a tool named like a built-in one, or another server's, is skipped
    cfg = config(tmp, {"read": entry("--extra", "file"), "demo": entry("--extra", "x_y"),
                       "demo_x": entry("--extra", "y")})
    s = serve(tmp, "collide", "--mcp-servers-config", cfg, "--tools", "read_file")
    try:
        got = json.loads(request(s, "GET", "/tools")[2])
        names = [t["tool"] for t in got]
        check("read_echo" in names and names.count("read_file") == 1 and got[0]["type"] == "server" and
              names.count("demo_x_y") == 1 and "demo_x_echo" in names and len(names) == 1 + 3 * 10 + 1,
              "collisions: %s" % names)
        code, o = tool(s, "demo_x_y", {"text": "whose?"})
        check(o == {"plain_text_response": "whose?"}, "the first server's demo_x_y: %s" % o)
        log = open(os.path.join(tmp, "collide.log")).read()
        check("has the name of another tool" in log, "no warning for a collision: %s" % log[-500:])
    finally:
        s.stop()
    s = serve(tmp, "alone", "--mcp-servers-json", json.dumps({"mcpServers": {"demo": entry()}}))
    try:
        code, _, raw = request(s, "GET", "/tools")
        check(code == 200 and len(json.loads(raw)) == 10, "MCP alone: %d %r" % (code, raw[:200]))
        code, o = tool(s, "read_file", {"path": "/etc/hostname"})
        check(code == 404, "a built-in tool without --tools: %d %s" % (code, o))
    finally:
        s.stop()


def calls(tmp):
    spawn_log = os.path.join(tmp, "spawns")
    cfg = config(tmp, {"demo": entry("--log", spawn_log, env={"SKV_MCP_TEST": "from config"}, cwd=tmp)})
    s = serve(tmp, "calls", "--mcp-servers-config", cfg)
    try:
        check(spawns(spawn_log) == 1, "spawned at start: %d" % spawns(spawn_log))
        code, o = tool(s, "demo_echo", {"text": "héllo\nworld"})
        check(code == 200 and o == {"plain_text_response": "héllo\nworld"}, "echo: %d %s" % (code, o))
        code, o = tool(s, "demo_add", {"a": 2, "b": 40})
        check(code == 200 and o == {"plain_text_response": "42"}, "add: %d %s" % (code, o))
        code, o = tool(s, "demo_two_parts", {})
        check(o == {"plain_text_response": "first\nsecond"}, "two parts: %s" % o)
        code, o = tool(s, "demo_fail")
        check(code == 200 and o == {"error": "it went wrong"}, "isError: %d %s" % (code, o))
        code, o = tool(s, "demo_rpc_error", {})
        check(code == 200 and "no such thing" in o.get("error", ""), "JSON-RPC error: %s" % o)
        code, o = tool(s, "demo_env", {"name": "SKV_MCP_TEST"})
        check(o == {"plain_text_response": "from config"}, "env: %s" % o)
        code, o = tool(s, "demo_env", {"name": "PATH"})
        check(o.get("plain_text_response", "<unset>") != "<unset>", "the parent's environment: %s" % o)
        code, o = tool(s, "demo_cwd", {})
        check(o == {"plain_text_response": os.path.realpath(tmp)}, "cwd: %s" % o)
        check(spawns(spawn_log) == 2, "one spawn for all those calls: %d" % spawns(spawn_log))
        code, o = tool(s, "demo_echo", {"text": "x"}, stream=True)
        check(code == 404 and "stream" in o["error"]["message"], "stream: %d %s" % (code, o))
        code, o = tool(s, "demo_nope", {})
        check(code == 404, "unknown tool: %d %s" % (code, o))
        code, o = tool(s, "demo_echo", [1, 2])
        check(code == 400, "params not an object: %d %s" % (code, o))
    finally:
        s.stop()
    time.sleep(0.5)
    pids = [int(line.split()[1]) for line in open(spawn_log)]
    alive = [p for p in pids if os.path.exists("/proc/%d" % p) and "Z" not in open("/proc/%d/stat" % p).read().split()[2]]
    check(not alive, "MCP children left after the server stopped: %s" % alive)


def hostile(tmp):
    spawn_log = os.path.join(tmp, "spawns2")
    cfg = config(tmp, {"demo": entry("--log", spawn_log, timeout_ms=1500),
                       "mute": entry("--no-init"),
                       "ghost": {"command": os.path.join(tmp, "no-such-program")},
                       "quits": {"command": "/bin/true"}})
    t0 = time.time()
    s = serve(tmp, "hostile", "--mcp-servers-config", cfg)
    try:
        log = os.path.join(tmp, "hostile.log")
        check(all("'%s'" % n in open(log).read() for n in ("mute", "ghost", "quits")),
              "no warning for the servers that failed at start: %s" % open(log).read()[-800:])
        names = [t["tool"] for t in json.loads(request(s, "GET", "/tools")[2])]
        check(len(names) == 10 and all(n.startswith("demo_") for n in names), "tools: %s" % names)
        t = time.time()
        code, o = tool(s, "demo_slow", {"s": 5})
        dt = time.time() - t
        check(code == 200 and "did not answer in time" in o.get("error", "") and 1.2 < dt < 3.5,
              "timeout: %d %s after %.1f s" % (code, o, dt))
        code, o = tool(s, "demo_echo", {"text": "after the timeout"})
        check(o == {"plain_text_response": "after the timeout"}, "the call after a timeout: %s" % o)
        code, o = tool(s, "demo_noisy", {})
        check(o == {"plain_text_response": "clean"}, "noise before the answer: %s" % o)
        n = spawns(spawn_log)
        code, o = tool(s, "demo_crash", {})
        check(code == 200 and "demo" in o.get("error", ""), "crash: %d %s" % (code, o))
        code, o = tool(s, "demo_echo", {"text": "again"})
        check(o == {"plain_text_response": "again"} and spawns(spawn_log) == n + 1,
              "respawn after a crash: %s, %d spawns" % (o, spawns(spawn_log) - n))
        check("crashing on purpose" in open(log).read(), "the crashed server's stderr not in the log")
        code, _, _ = request(s, "GET", "/health")
        check(code == 200, "health: %d" % code)
    finally:
        s.stop()
    check(time.time() - t0 < 60, "the hostile run took %.0f s" % (time.time() - t0))


def bad_config(tmp):
    cases = [
        ("{", "not JSON"),
        (json.dumps({"mcpServers": {"a": {"command": PY, "args": "x"}}}), "\"args\""),
        (json.dumps({"mcpServers": {"a": {"command": PY, "env": {"K": 1}}}}), "\"env\""),
        (json.dumps({"mcpServers": {"a": {"command": PY, "timeout_ms": 0}}}), "\"timeout_ms\""),
        (json.dumps({"mcpServers": {"a b": {"command": PY}}}), "a name is"),
        (json.dumps({"mcpServers": {"a": {"command": 7}}}), "\"command\""),
    ]
    for text, want in cases:
        p = subprocess.run([SEQKV, "serve", "-m", MODEL, "--port", "0", "--mcp-servers-json", text],
                           capture_output=True, text=True, timeout=30)
        check(p.returncode != 0 and want in p.stderr, "%s: rc %d %r" % (text[:60], p.returncode, p.stderr[-300:]))
    p = subprocess.run([SEQKV, "serve", "-m", MODEL, "--port", "0", "--mcp-servers-config",
                        os.path.join(tmp, "missing.json")], capture_output=True, text=True, timeout=30)
    check(p.returncode != 0 and "missing.json" in p.stderr, "a missing file: %r" % p.stderr[-300:])
    s = serve(tmp, "nocmd", "--mcp-servers-json", json.dumps({"mcpServers": {"a": {"args": []}, "b": entry()}}))
    try:
        check("has no command" in open(os.path.join(tmp, "nocmd.log")).read(), "no warning for a missing command")
        check(len(json.loads(request(s, "GET", "/tools")[2])) == 10, "the other server's tools")
    finally:
        s.stop()


CASES = [listed, calls, hostile, bad_config]

if __name__ == "__main__":
    sys.exit(testenv.run_stories_cases(Reporter("test_server_mcp"), CASES, MODEL, "mcp-"))
