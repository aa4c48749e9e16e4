"""A small MCP server on the stdio transport (JSON-RPC 2.0, one message per line), written
from the MCP specification for tests/test_server_mcp.py; it also misbehaves on request.

Tools: echo (its text back), add (a + b), env (an environment variable), cwd (its working
directory), fail (an isError result), rpc_error (a JSON-RPC error), slow (sleeps `s`
seconds), crash (exits without answering), noisy (notifications, garbage, a stale reply and
a line over 4 MiB before the real answer), two_parts (two text parts and an image part).

argv: [--name-prefix P] (tool names prefixed), [--extra NAME]... (more tools, as echo), [--no-init] (answers nothing at all),
[--pages] (tools/list in pages of two, with nextCursor), [--log FILE] (appends one line per
process start, so a test can count spawns).
"""
import json
import os
import sys
import time

args = sys.argv[1:]
prefix = args[args.index("--name-prefix") + 1] if "--name-prefix" in args else ""
if "--log" in args:
    with open(args[args.index("--log") + 1], "a") as f:
        f.write("start %d\n" % os.getpid())

TOOLS = ["echo", "add", "env", "cwd", "fail", "rpc_error", "slow", "crash", "noisy", "two_parts"]
EXTRA = [args[i + 1] for i, a in enumerate(args) if a == "--extra"]  # more names, echo's behaviour


def send(o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()


def text(t, err=False):
    r = {"content": [{"type": "text", "text": t}]}
    if err:
        r["isError"] = True
    return r


def call(name, a, mid):
    name = name[len(prefix):]
    if name == "echo" or name in EXTRA:
        return text(a.get("text", ""))
    if name == "add":
        return text(str(a["a"] + a["b"]))
    if name == "env":
        return text(os.environ.get(a["name"], "<unset>"))
    if name == "cwd":
        return text(os.getcwd())
    if name == "fail":
        return text("it went wrong", err=True)
    if name == "rpc_error":
        return {"__error": {"code": -32000, "message": "no such thing"}}
    if name == "slow":
        time.sleep(float(a.get("s", 5)))
        return text("slept")
    if name == "crash":
        sys.stderr.write("crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)
    if name == "noisy":
        send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}})
        sys.stdout.write("this is not json\n")
        send({"jsonrpc": "2.0", "id": mid + 1000, "result": text("a stale reply")})
        sys.stdout.write('{"x": "' + "y" * (5 << 20) + '"}\n')
        return text("clean")
    if name == "two_parts":
        return {"content": [{"type": "text", "text": "first"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                            {"type": "text", "text": "second"}]}
    return {"__error": {"code": -32602, "message": "unknown tool " + name}}


def main():
    if "--no-init" in args:
        for _ in sys.stdin:
            pass
        return
    for line in sys.stdin:
        try:
            m = json.loads(line)
        except ValueError:
            continue
        method, mid, p = m.get("method"), m.get("id"), m.get("params") or {}
        if mid is None:
            continue  # a notification (notifications/initialized)
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": p.get("protocolVersion"),
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "test", "version": "1"},
                  "clientName": p.get("clientInfo", {}).get("name")}})
        elif method == "tools/list":
            tools = [{"name": prefix + n, "description": "the %s tool" % n,
                      "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}} for n in TOOLS + EXTRA]
            if "--pages" in args:
                at = int(p.get("cursor", "0"))
                page = {"tools": tools[at:at + 2]}
                if at + 2 < len(tools):
                    page["nextCursor"] = str(at + 2)
                send({"jsonrpc": "2.0", "id": mid, "result": page})
            else:
                send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
        elif method == "tools/call":
            r = call(p.get("name", ""), p.get("arguments") or {}, mid)
            if "__error" in r:
                send({"jsonrpc": "2.0", "id": mid, "error": r["__error"]})
            else:
                send({"jsonrpc": "2.0", "id": mid, "result": r})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "method not found"}})


main()
