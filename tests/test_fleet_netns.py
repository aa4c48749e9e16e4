#!/usr/bin/python3
"""The fleet with real network faults (issue 43; docs/reliability.md "Network faults"):
hosts are network namespaces this test makes (prefix skvnf-): a switch (a bridge), the
Redis host (master, two replicas, three sentinels: tests/sentinel_harness.py), the
balancer host (haproxy, round-robin, retry on another node; the test reaches it through
a unix socket, so no address exists outside the namespaces) and three `seqkv serve`
nodes, each on its own veth link into the bridge, 10.77.0.0/24. CLIENTS multi-turn greedy
conversations (scripts/serve_load.py's turns) run through haproxy while

  1. node n0's link is taken down at the switch (packets vanish) and, LINK_S later, up;
  2. node n1 is partitioned from the Redis host only (blackhole routes on both sides: its
     open connections hang, new ones fail; it still answers haproxy) and, PART_S later,
     healed.

Checks: every request answered 200; n0 serves again after its link is back; a request
sent straight to n1 PROBE_AT s into the partition is answered within PROBE_S (without the
store: its lookups miss, its puts fail, they do not hold it), and again after the heal; greedy replies served from the store, and n1's replies during the partition,
equal a cold server's on a sample; every conversation in the store restores with its KV
digest verified (`seqkv store get` with the sentinel URL). Printed per fault: the errors
and the longest request in flight during it (the outage).

Release build only; root, `ip netns`, redis-server, redis-sentinel and haproxy needed:
SKIP without root or a usable `ip netns`, and without the programs (FAIL for those under
SEQKV_REQUIRE_REDIS=1, as test_fleet)."""
import concurrent.futures
import ctypes
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "server"))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
import sentinel_harness  # noqa: E402
import test_fleet  # noqa: E402
from clitest import BUILD, SEQKV, Reporter, check  # noqa: E402
from harness import Server  # noqa: E402
from redis_harness import report_missing  # noqa: E402
from serve_load import TEMPLATE  # noqa: E402

NAME = "test_fleet_netns"
CLIENTS, NODES = 48, 3  # test_fleet.TURNS turns a conversation, test_fleet.N_PREDICT tokens a reply
TURNS = test_fleet.TURNS
LINK_S, PART_S = 3.0, 15.0  # how long each fault lasts
FAILOVER_S, WAIT_MS = 3, 500  # the store URL's failover= (how long a store call looks for a master) and wait_ms=
# PROBE_AT s into the partition (past the socket timeout of a hung call, 5 s + WAIT_MS,
# and one search for a master) a request straight to n1 must be answered within PROBE_S,
# before the heal; and again after the heal
PROBE_AT, PROBE_S = 10.0, 5.0
PFX = "skvnf"  # every namespace this test makes; leftovers of a crashed run go first
SW, LB, RD = PFX + "-sw", PFX + "-lb", PFX + "-rd"
NET = "10.77.0."
LB_IP, RD_IP = NET + "2", NET + "20"
NODE_PORT = 8080
CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL(None, use_errno=True)


def node_ns(i):
    return "%s-n%d" % (PFX, i)


def node_ip(i):
    return NET + str(11 + i)


def ip(*args):
    """`ip ARGS`; a failure raises with ip's message."""
    p = subprocess.run(["ip"] + list(args), capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError("ip %s: %s" % (" ".join(args), p.stderr.strip()))


def in_ns(ns, fn):
    """fn() in a thread that entered network namespace ns (setns moves only that thread)."""
    out = {}

    def body():
        fd = os.open("/var/run/netns/" + ns, os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET):
                out["e"] = OSError(ctypes.get_errno(), "setns " + ns)
                return
        finally:
            os.close(fd)
        try:
            out["v"] = fn()
        except BaseException as e:  # handed to the caller
            out["e"] = e
    t = threading.Thread(target=body)
    t.start()
    t.join()
    if "e" in out:
        raise out["e"]
    return out.get("v")


# ---- the network -------------------------------------------------------------------

def our_namespaces():
    p = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [x.split()[0] for x in p.stdout.splitlines() if x.startswith(PFX + "-")]


def teardown():
    """Kills what runs in this test's namespaces (by pid) and deletes them, with their links."""
    for ns in our_namespaces():
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        for pid in pids:
            wait_gone(int(pid))
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def wait_gone(pid, seconds=5):
    t = time.time() + seconds
    while time.time() < t and os.path.exists("/proc/%d" % pid):
        try:  # our own child: reap it
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.02)


def plug(ns, addr, port):
    """A veth from ns (eth0, addr/24) to the switch's bridge (port name `port`)."""
    ip("-n", SW, "link", "add", "name", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
    ip("-n", SW, "link", "set", port, "master", "br0", "up")
    ip("-n", ns, "addr", "add", addr + "/24", "dev", "eth0")
    ip("-n", ns, "link", "set", "eth0", "up")


def build_network():
    hosts = [(LB, LB_IP, "p-lb"), (RD, RD_IP, "p-rd")] + [(node_ns(i), node_ip(i), "p-n%d" % i) for i in range(NODES)]
    for ns in [SW] + [h[0] for h in hosts]:
        ip("netns", "add", ns)
        ip("-n", ns, "link", "set", "lo", "up")
    ip("-n", SW, "link", "add", "name", "br0", "type", "bridge")
    ip("-n", SW, "link", "set", "br0", "up")
    for h in hosts:
        plug(*h)


def netns_usable():
    """'' when `ip netns` works here, else why not."""
    probe = PFX + "-probe"
    p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return "" if p.returncode == 0 else "ip netns add: " + p.stderr.strip()


def reaches(ns, addr, port):
    """Whether a TCP connection from ns to addr:port opens within a second."""
    def go():
        try:
            socket.create_connection((addr, port), timeout=1).close()
            return True
        except OSError:
            return False
    return in_ns(ns, go)


def partition(i, on):
    """Node i cut from (on) or joined again to the Redis host: blackhole routes both ways."""
    verb = "add" if on else "del"
    ip("-n", node_ns(i), "route", verb, "blackhole", RD_IP + "/32")
    ip("-n", RD, "route", verb, "blackhole", node_ip(i) + "/32")


# ---- the processes -----------------------------------------------------------------

class Node(Server):
    """`seqkv serve` in namespace ns on addr:NODE_PORT."""

    def __init__(self, ns, addr, url, log):
        self.args = ["ip", "netns", "exec", ns, SEQKV, "serve", "--host", addr, "--port", str(NODE_PORT), "--metrics",
                     *TEMPLATE, "--store", url, "--parallel", "2", "-c", "2048"]
        self.log, self.env = log, None
        self.start()


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("fleet", timeout=timeout)
        self.sock_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.sock_path)


class Proxy:
    """haproxy in the balancer's namespace, listening on a unix socket only."""

    def __init__(self, tmp):
        self.sock = os.path.join(tmp, "fleet.sock")
        cfg = os.path.join(tmp, "haproxy.cfg")
        servers = "\n".join("    server n%d %s:%d" % (i, node_ip(i), NODE_PORT) for i in range(NODES))
        conf = test_fleet.HAPROXY.replace("bind 127.0.0.1:%d", "bind unix@%s")
        with open(cfg, "w") as f:
            f.write(conf % (self.sock, servers))
        self.log = open(os.path.join(tmp, "haproxy.log"), "w")
        self.p = subprocess.Popen(["ip", "netns", "exec", LB, "haproxy", "-db", "-f", cfg], stdout=self.log,
                                  stderr=subprocess.STDOUT)
        sentinel_harness.wait(self.up, "haproxy did not start: see " + self.log.name)

    def up(self):
        if self.p.poll() is not None:
            raise RuntimeError("haproxy exited: " + open(self.log.name).read()[-1000:])
        try:
            c = UnixHTTP(self.sock, 2)
            c.request("GET", "/health")
            return c.getresponse().status == 200
        except OSError:
            return False

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        self.log.close()


def wait_done(load, n, threads):
    """Until n turns are done (or every client stopped)."""
    while load.done < n and any(x.is_alive() for x in threads):
        time.sleep(0.02)


# ---- the faults --------------------------------------------------------------------

def fault_link(load, n, th):
    """Node 0's cable pulled at the switch for LINK_S seconds -> (start, end)."""
    wait_done(load, n, th)
    t0 = time.time()
    ip("-n", SW, "link", "set", "p-n0", "down")
    check(not reaches(LB, node_ip(0), NODE_PORT), "node n0 still reachable with its link down")
    time.sleep(LINK_S)
    ip("-n", SW, "link", "set", "p-n0", "up")
    return t0, time.time()


def fault_partition(load, n, th, dep):
    """Node 1 cut from the Redis host for PART_S seconds -> (start, end)."""
    wait_done(load, n, th)
    t0 = time.time()
    partition(1, True)
    check(not reaches(node_ns(1), RD_IP, dep.sentinel_ports[0]), "node n1 still reaches Redis when partitioned")
    check(reaches(LB, node_ip(1), NODE_PORT), "the partition cut node n1 from haproxy too")
    time.sleep(max(0.0, t0 + PROBE_AT - time.time()))
    probe = in_ns(LB, lambda: probe_n1("cut from Redis for %.0f s" % PROBE_AT))
    time.sleep(max(0.0, t0 + PART_S - time.time()))
    partition(1, False)
    t1 = time.time()
    return t0, t1, probe, in_ns(LB, lambda: probe_n1("healed"))


def probe_n1(state):
    """One request straight to node n1 -> its seconds; a failure if no 200 within PROBE_S."""
    msgs = [{"role": "user", "content": "A probe of the node cut from its store"}]
    try:
        code, reply, _, _, sec = test_fleet.chat(None, msgs, http.client.HTTPConnection(node_ip(1), NODE_PORT,
                                                                                         timeout=PROBE_S))
    except OSError as e:
        code, reply, sec = 0, repr(e), PROBE_S
    check(code == 200, "node n1, %s, did not answer within %.0f s (%s %s)" % (state, PROBE_S, code, reply[:200]))
    return sec


def during(turns, a, b):
    """The requests in flight at some time in [a, b]."""
    return [x for x in turns if x["t0"] <= b and x["t0"] + x["sec"] >= a]


def figures(turns, name, a, b):
    near = during(turns, a, b)
    bad = [x for x in near if x["code"] != 200]
    return "%s: %.1f s, %d requests in flight, %d errors, longest %.1f s" % (
        name, b - a, len(near), len(bad), max([x["sec"] for x in near] or [0.0]))


# ---- the case ----------------------------------------------------------------------

def store_cli(*args):
    """`seqkv store ARGS` on the Redis host -> (exit code, stdout, stderr)."""
    p = subprocess.run(["ip", "netns", "exec", RD, SEQKV, "store"] + list(args), capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout, p.stderr


def served_after(turns, node, t):
    return [x for x in turns if x["node"] == node and x["t0"] > t + 1.0 and x["code"] == 200]


def check_turns(turns, link, part):
    bad = [x for x in turns if x["code"] != 200]
    check(not bad, "%d of %d requests failed, e.g. %s" % (len(bad), len(turns), [(b["code"], b["reply"]) for b in bad[:3]]))
    check(len(turns) == CLIENTS * TURNS, "%d requests of %d" % (len(turns), CLIENTS * TURNS))
    check(served_after(turns, "n0", link[1]), "node n0 served nothing after its link came back")
    cut = [x for x in turns if x["node"] == "n1" and part[0] < x["t0"] and x["t0"] + x["sec"] < part[1]]
    if os.environ.get("FLEET_DEBUG") == "1":  # each request around the partition
        for x in during(turns, part[0] - 2, part[1] + 5):
            sys.stderr.write("%s t0=%+.1f sec=%.1f code=%s cached=%s\n" % (x["node"], x["t0"] - part[0], x["sec"], x["code"], x["cached"]))
    check(cut, "node n1 answered no request while cut from Redis")
    return cut


def verify_store(url):
    rc, out, err = store_cli("ls", url)
    names = [line.split("\t")[0] for line in out.splitlines() if line.strip()]
    check(rc == 0 and len(names) >= CLIENTS, "store ls: %d sessions: %s" % (len(names), err))
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        for name, (rc, out, err) in zip(names, ex.map(lambda n: store_cli("get", url, n), names)):
            check(rc == 0 and "verified" in out, "store get %s: %s" % (name, out + err))
    return len(names)


def run_load(sock, dep):
    load = test_fleet.Load(None, lambda: UnixHTTP(sock, 120))
    total = CLIENTS * TURNS
    th = [threading.Thread(target=load.client, args=(i,)) for i in range(CLIENTS)]
    t_start = time.time()
    for x in th:
        x.start()
    try:
        link = fault_link(load, total // 10, th)
        part = fault_partition(load, total // 3, th, dep)
    finally:  # a failed fault check still lets the clients end
        partition_heal_quietly()
        subprocess.run(["ip", "-n", SW, "link", "set", "p-n0", "up"], capture_output=True)
        for x in th:
            x.join()
    return sorted(load.turns, key=lambda x: (x["client"], x["turn"])), link, part[:2], part[2:], time.time() - t_start


def partition_heal_quietly():
    try:
        partition(1, False)
    except RuntimeError:  # healed already
        pass


def case_fleet_netns(tmp):
    teardown()
    build_network()
    dep, nodes, proxy = None, [], None
    try:
        dep = sentinel_harness.Deployment(os.path.join(tmp, "redis"), host=RD_IP, wrap=["ip", "netns", "exec", RD],
                                          call=lambda fn: in_ns(RD, fn))
        url = dep.url("fleet", "?failover=%d&wait_ms=%d" % (FAILOVER_S, WAIT_MS))
        rc, out, err = store_cli("init", url)
        check(rc == 0, "store init: " + out + err)
        for i in range(NODES):
            nodes.append(Node(node_ns(i), node_ip(i), url, os.path.join(tmp, "node%d.log" % i)))
        proxy = Proxy(tmp)
        turns, link, part, probe, t_load = run_load(proxy.sock, dep)
        cut = check_turns(turns, link, part)
        check(all(n.p.poll() is None for n in nodes), "a node exited: see its log")
        moved = [x for x in turns if x["prev"] and x["node"] != x["prev"]]
        hits = [x for x in moved if x["cached"] > 0]
        check(len(hits) * 2 >= len(moved), "%d of %d moved turns were cache hits" % (len(hits), len(moved)))
        test_fleet.same_as_cold(tmp, hits + cut[:: max(1, len(cut) // 3)])
        logs = [open(n.log, errors="replace").read() for n in nodes]
        puts = [x.count("store put ") for x in logs]
        t1 = time.time()
        n_names = verify_store(url)
        print("fleet_netns: %d requests (%d clients) through haproxy to %d nodes in namespaces, %d failed; %d turns "
              "moved node, %d cache hits; %s; %s (n1 answered %d requests while cut; a request straight to it %.0f s in took %.1f s, after the heal %.1f s); conversation puts failed per node "
              "(logs) %s; %d stored conversations verified; the load took %.0f s, the store check %.0f s"
              % (len(turns), CLIENTS, NODES, len([x for x in turns if x["code"] != 200]), len(moved), len(hits),
                 figures(turns, "link down n0", *link), figures(turns, "n1 cut from Redis", *part), len(cut), PROBE_AT, probe[0], probe[1], puts,
                 n_names, t_load, time.time() - t1))
    finally:
        if proxy:
            proxy.stop()
        for n in nodes:
            n.stop()
        if dep:
            dep.stop()
        teardown()


def why_skip():
    if re.search(r"san|clang", os.path.basename(BUILD.rstrip("/"))):
        return "runs in the release build only (make test)"
    if os.geteuid() != 0:
        return "needs root (ip netns, veth links)"
    if shutil.which("ip") is None:
        return "ip (iproute2) not installed"
    why = netns_usable()
    return "ip netns is not usable here (%s)" % why if why else ""


def main():
    rep = Reporter(NAME)
    skip = why_skip()
    if skip:
        rep.report("fleet_netns", "SKIP", skip)
        return 0
    miss = sentinel_harness.missing() + ([] if shutil.which("haproxy") else ["haproxy"])
    if miss:
        return report_missing(rep, "fleet_netns", miss)
    with tempfile.TemporaryDirectory(prefix="seqkv-fleetns-") as tmp:
        rep.run_case(case_fleet_netns, tmp)
        log = os.path.join(tmp, "haproxy.log")
        if rep.failed and os.path.exists(log):  # what the proxy saw of the failed requests
            for line in open(log, errors="replace"):
                if " 502 " in line or " 503 " in line or " 504 " in line:
                    sys.stderr.write(line)
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
