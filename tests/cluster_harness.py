"""A Redis Cluster for the tests (not a test itself): three masters and three replicas
(Debian's redis-server with cluster-enabled yes, append-only file on) on loopback TCP ports
in a temporary folder, joined by `redis-cli --cluster create ... --cluster-replicas 1`,
tuned to fail over in a couple of seconds (cluster-node-timeout 1000 ms). stop() kills
every process it started.

Needs redis-server and redis-cli; missing() says which is absent. Callers skip without
them, and fail under SEQKV_REQUIRE_REDIS=1 (set by .ci/run)."""
import os
import random
import shutil
import socket
import subprocess

from sentinel_harness import command, wait


def missing():
    """The programs this harness needs that are not installed ([] when all are)."""
    return [p for p in ("redis-server", "redis-cli") if shutil.which(p) is None]


def _free(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def cluster_port(taken):
    """A loopback port P with P and its cluster bus port P + 10000 free; P <= 55535 (Redis
    refuses higher ones: the bus port would not exist)."""
    while True:
        p = random.randint(20000, 45000)
        if p not in taken and p + 10000 not in taken and _free(p) and _free(p + 10000):
            return p


class Cluster:
    def __init__(self, workdir, n_masters=3):
        self.dir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.procs = {}  # port -> Popen
        self.ports = []
        for _ in range(2 * n_masters):
            self.ports.append(cluster_port(self.ports + [p + 10000 for p in self.ports]))
        try:
            for p in self.ports:
                self._start(p)
            subprocess.run(["redis-cli", "--cluster", "create"] + ["127.0.0.1:%d" % p for p in self.ports]
                           + ["--cluster-replicas", "1", "--cluster-yes"], check=True, timeout=60,
                           stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            self.wait_ok()
        except BaseException:
            self.stop()
            raise

    def _start(self, port):
        d = os.path.join(self.dir, "n%d" % port)
        os.makedirs(d, exist_ok=True)
        args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
                "--appendfsync", "everysec", "--dir", d, "--logfile", "redis.log", "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000"]
        self.procs[port] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self._wait(lambda: command(port, "PING") == "PONG", "redis-server on port %d did not start" % port)

    def _wait(self, ok, why, seconds=30):
        wait(ok, why, seconds)

    def alive(self):
        return [p for p in self.ports if self.procs[p].poll() is None]

    def wait_ok(self):
        """Until every live node says cluster_state:ok and agrees on who serves each slot."""
        def ok():
            live = self.alive()
            infos = [command(p, "CLUSTER", "INFO") or "" for p in live]
            maps = [self.slot_map(p) for p in live]
            if not (all("cluster_state:ok" in i for i in infos) and all(m == maps[0] and m for m in maps)):
                return False
            return all(self._synced(p) for p in set(maps[0].values()))
        self._wait(ok, "the cluster did not become ready")

    def _synced(self, master):
        """Every live replica of master has finished its initial sync (a WAIT can succeed)."""
        want = sum(1 for p in self.alive() if self._master_of(p) == master)
        info = command(master, "INFO", "replication") or ""
        return info.count("state=online") >= want

    def _master_of(self, port):
        info = command(port, "INFO", "replication") or ""
        if "role:slave" not in info:
            return None
        for line in info.splitlines():
            if line.startswith("master_port:"):
                return int(line.split(":")[1])
        return None

    def slot_map(self, port):
        """{(start, end): master port} as node `port` sees it."""
        r = command(port, "CLUSTER", "SLOTS")
        if not isinstance(r, list):
            return None
        return {(int(e[0]), int(e[1])): int(e[2][1]) for e in r}

    def masters(self):
        return sorted(set(self.slot_map(self.alive()[0]).values()))

    def keyslot(self, key):
        return command(self.alive()[0], "CLUSTER", "KEYSLOT", key)

    def owner(self, slot):
        for (a, b), p in self.slot_map(self.alive()[0]).items():
            if a <= slot <= b:
                return p
        return None

    def node_id(self, port):
        return command(port, "CLUSTER", "MYID")

    def replica_of(self, master):
        """A live replica port of master."""
        mid = self.node_id(master)
        for p in self.alive():
            info = command(p, "CLUSTER", "NODES") or ""
            for line in info.splitlines():
                f = line.split()
                if "myself" in f[2] and "slave" in f[2] and f[3] == mid:
                    return p
        return None

    def migrate_slot(self, slot, dst):
        """Moves a slot and its keys to master dst as an operator would (SETSLOT IMPORTING /
        MIGRATING, MIGRATE in batches, SETSLOT NODE on every master); -> the old master."""
        src = self.begin_migration(slot, dst)
        self.finish_migration(slot, dst)
        return src

    def begin_migration(self, slot, dst, keep=()):
        """The first half: the slot MIGRATING to dst and its keys but those in `keep` moved
        there, the slot still the old master's (clients are answered ASK); -> the old master."""
        src = self.owner(slot)
        command(dst, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", self.node_id(src))
        command(src, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", self.node_id(dst))
        self._move_keys(src, dst, slot, keep)
        return src

    def _move_keys(self, src, dst, slot, keep=()):
        while True:
            keys = [k for k in command(src, "CLUSTER", "GETKEYSINSLOT", str(slot), "1000", raw=True) or []
                    if k not in keep]
            if not keys:
                return
            r = command(src, "MIGRATE", "127.0.0.1", str(dst), "", "0", "5000", "KEYS", *keys, timeout=10)
            if r != "OK":
                raise RuntimeError("MIGRATE: %s" % r)

    def finish_migration(self, slot, dst):
        """The rest of the keys moved, the slot given to dst on every master."""
        self._move_keys(self.owner(slot), dst, slot)
        for p in self.masters():
            command(p, "CLUSTER", "SETSLOT", str(slot), "NODE", self.node_id(dst))
        self.wait_ok()

    def restart(self, port):
        """Starts a killed node again (its folder keeps nodes.conf: it rejoins, as a replica
        when its slots were taken over meanwhile)."""
        self._start(port)
        self.wait_ok()

    def kill(self, port):
        p = self.procs.get(port)
        if p and p.poll() is None:
            p.kill()
            p.wait()

    def url(self, prefix, options=""):
        return "redis+cluster://%s/%s%s" % (",".join("127.0.0.1:%d" % p for p in self.ports), prefix, options)

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
