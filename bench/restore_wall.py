#!/usr/bin/python3
"""Wall and CPU time of `seqkv restore` for every lossless codec against codec tokens
(issue 16's "single session, wall time of `seqkv restore`"), on the three texts of
bench/results/restore.md: held-out KJV, Debian fortunes, a chat-like text from Debian
documentation.

Usage: bench/restore_wall.py [--rounds N] [--bytes B] [--texts kjv,fortunes,chat]
                             [--codecs tokens,cm,cmv,cmvd,model,model1,model16] [--build DIR]

Each text (its first B bytes, default 24,000) is stored as 800-token segments with each
codec (`seqkv compress --segment -c 800`); cmvd takes a dictionary of the same kind of
text that is disjoint from the test text (KJV: 2 MB of the model's training chapters,
tools/train/prepare_data.py; fortunes: 1 MB of the other fortune files; chat: the chat
text from byte 30,000, or from the end of the test text when it is longer). model16 is codec model with an f16 KV cache, compared with tokens
stored with an f16 cache too (like with like). Then N rounds (default 5) restore every
file in turn, alternating the codecs, `seqkv restore -m MODEL FILE -o /dev/null`
(verified, 1 thread, the dictionary caches filled by the compress), each timed by
/usr/bin/time. Prints a Markdown table: best and median of wall and CPU (user + sys), and
the speed ratio to codec tokens (tokens time / codec time) for the same statistic.
Needs: make, fortunes (scripts/install-deps.sh --corpus), bible-kjv (for the dictionary).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "kjv-4m.gguf")
FORTUNE_DIR = "/usr/share/games/fortunes"
FORTUNE_DICT = ["people", "wisdom", "literature", "humorists", "computers", "education", "science",
                "work", "politics", "law", "love", "men-women", "miscellaneous", "platitudes", "pets",
                "food"]


def fail(msg):
    sys.exit("restore_wall: " + msg)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def texts(work, nbytes, wanted):
    """(name, text file, dictionary file) for each wanted text."""
    out = []
    if "kjv" in wanted:
        train = os.path.join(work, "kjvtrain")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools/train/prepare_data.py"), "--out", train],
                       check=True, stdout=subprocess.DEVNULL)
        lines = read(os.path.join(train, "train.txt")).split(b"\n")
        d = b"\n".join(lines[::2])[:2000000]
        t = read(os.path.join(ROOT, "tests/data/model_ref/heldout.txt"))[:nbytes]
        out.append(("held-out KJV", t, d))
    if "fortunes" in wanted:
        if not os.path.isdir(FORTUNE_DIR):
            fail("no %s: run scripts/install-deps.sh --corpus" % FORTUNE_DIR)
        t = read(os.path.join(FORTUNE_DIR, "fortunes"))[:nbytes]
        d = b"".join(read(os.path.join(FORTUNE_DIR, n)) for n in FORTUNE_DICT)[:1000000]
        out.append(("fortunes", t, d))
    if "chat" in wanted:
        chat = subprocess.run([sys.executable, os.path.join(ROOT, "bench/chat_text.py"), "400000"],
                              check=True, stdout=subprocess.PIPE).stdout
        out.append(("chat", chat[:nbytes], chat[max(30000, nbytes):]))
    res = []
    for name, t, d in out:
        key = name.split()[-1].lower()
        tp, dp = os.path.join(work, key + ".txt"), os.path.join(work, key + ".dict.txt")
        with open(tp, "wb") as f:
            f.write(t)
        with open(dp, "wb") as f:
            f.write(d)
        res.append((name, tp, dp))
    return res


CODECS = {  # name: (compress options, the tokens file it is compared with)
    "tokens": (["--codec", "tokens"], "tokens"),
    "cm": (["--codec", "cm"], "tokens"),
    "cmv": (["--codec", "cmv"], "tokens"),
    "cmvd": (["--codec", "cmvd"], "tokens"),
    "model": (["--codec", "model"], "tokens"),
    "model1": (["--codec", "model"], "tokens"),  # restored with --batch 1: one segment at a time
    "model16": (["--codec", "model", "--kv-cache", "f16"], "tokens16"),
    "tokens16": (["--codec", "tokens", "--kv-cache", "f16"], "tokens16"),
}


def timed(cmd, env):
    r = subprocess.run(["/usr/bin/time", "-f", "@@ %e %U %S"] + cmd, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail("%s failed:\n%s" % (" ".join(cmd), r.stderr))
    line = [x for x in r.stderr.splitlines() if x.startswith("@@ ")][-1].split()
    return float(line[1]), float(line[2]) + float(line[3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bytes", type=int, default=24000)
    ap.add_argument("--texts", default="kjv,fortunes,chat")
    ap.add_argument("--codecs", default="tokens,cm,cmv,cmvd,model,model1,model16")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    seqkv = os.path.join(a.build, "seqkv")
    if not os.access(seqkv, os.X_OK):
        fail("%s missing: run make" % seqkv)
    codecs = a.codecs.split(",")
    for c in codecs:
        if c not in CODECS:
            fail("unknown codec %r (known: %s)" % (c, ", ".join(CODECS)))
    if "model16" in codecs and "tokens16" not in codecs:
        codecs.append("tokens16")
    if "tokens" not in codecs:
        codecs.insert(0, "tokens")
    cpu = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
    cpu = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), "?")
    with tempfile.TemporaryDirectory(prefix="restore_wall.") as work:
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(work, "cache"))
        load0 = open("/proc/loadavg").read().split()[:3]
        print("Measured %s UTC, %s, %d cores, load average before: %s; `bench/restore_wall.py --rounds %d`."
              % (subprocess.run(["date", "-u", "+%Y-%m-%d %H:%M"], stdout=subprocess.PIPE, text=True).stdout.strip(),
                 cpu, os.cpu_count(), " ".join(load0), a.rounds))
        print()
        print("| text | codec | tokens | file bits/position | wall s best / median | tokens/s (best wall) "
              "| CPU s best / median | vs tokens wall (best / median) | vs tokens CPU (best / median) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, tp, dp in texts(work, a.bytes, a.texts.split(",")):
            files = {}
            for c in codecs:
                f = os.path.join(work, "%s.%s.skv" % (os.path.basename(tp), c))
                cmd = [seqkv, "compress", "-m", MODEL, "-f", tp, "--segment", "-c", "800", "-o", f] + CODECS[c][0]
                if c == "cmvd":
                    cmd += ["--cm-dict", dp]
                if c == "model1" and "model" in files:  # the same file as codec model
                    files[c] = files["model"]
                    continue
                r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                if r.returncode != 0:
                    fail("%s failed:\n%s" % (" ".join(cmd), r.stdout))
                ntok = next(int(ln.split()[1]) for ln in r.stdout.splitlines() if ln.startswith("tokens:"))
                files[c] = (f, ntok)
            times = {c: [] for c in codecs}
            for _ in range(a.rounds):
                for c in codecs:
                    cmd = [seqkv, "restore", "-m", MODEL, files[c][0], "-o", "/dev/null"]
                    if c == "cmvd":
                        cmd += ["--cm-dict", dp]
                    if c == "model1":
                        cmd += ["--batch", "1"]
                    times[c].append(timed(cmd, env))
            for c in codecs:
                base = CODECS[c][1]
                w = [t[0] for t in times[c]]
                u = [t[1] for t in times[c]]
                bw = [t[0] for t in times[base]]
                bu = [t[1] for t in times[base]]
                bits = os.path.getsize(files[c][0]) * 8.0 / files[c][1]
                print("| %s | %s | %d | %.2f | %.2f / %.2f | %.0f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f |" % (
                    name, c, files[c][1], bits, min(w), statistics.median(w), files[c][1] / min(w),
                    min(u), statistics.median(u),
                    min(bw) / min(w), statistics.median(bw) / statistics.median(w),
                    min(bu) / min(u), statistics.median(bu) / statistics.median(u)))
            sys.stdout.flush()
        print()
        print("Load average after: %s. Ratios compare like with like: model16 with tokens16 "
              "(both f16 KV caches), every other codec with tokens. model: the file's segments decoded "
              "together (seqkv restore's default: the width skv_restore_batch_width picks); model1: the "
              "same file with --batch 1 (one segment at a time, token by token). Every restore verified "
              "against the stored KV digests." % " ".join(open("/proc/loadavg").read().split()[:3]))


if __name__ == "__main__":
    main()
