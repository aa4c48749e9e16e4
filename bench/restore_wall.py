#!/usr/bin/python3
"""Wall and CPU time of `seqkv restore` for every lossless codec against codec tokens
(issue 16's "single session, wall time of `seqkv restore`"), on the three texts of
bench/results/restore.md: held-out KJV, Debian fortunes, a chat-like text from Debian
documentation.

Usage: bench/restore_wall.py [--rounds N] [--bytes B] [--texts kjv,fortunes,chat]
                             [--codecs tokens,cm,cmv,cmvd,model,model1,model16] [--build DIR]
                             [--single [--session-tokens N]] [--model GGUF]

Each text (its first B bytes, default 24,000) is stored as 800-token segments with each
codec (`seqkv compress --segment -c 800`); cmvd takes a dictionary of the same kind of
text that is disjoint from the test text (KJV: 2 MB of the model's training chapters,
tools/train/prepare_data.py; fortunes: 1 MB of the other fortune files; chat: the chat
text from byte 30,000, or from the end of the test text when it is longer). model16 is codec model with an f16 KV cache, compared with tokens
stored with an f16 cache too (like with like). Then N rounds (default 5) restore every
file in turn, alternating the codecs, `seqkv restore -m MODEL FILE -o /dev/null`
(verified, 1 thread, the dictionary caches filled by the compress), each timed by
the clock and getrusage of the parent (wall: time.perf_counter). Prints a Markdown table:
best and median of wall and CPU (user + sys), and the speed ratio to codec tokens (tokens
time / codec time) for the same statistic.
--single: sessions of one segment each, as the issue first measured them ("800-token KJV
sessions"): the text is cut into pieces of about 800 tokens (bytes per piece from the
text's own tokens per byte, so a piece can be longer: over 1,024 tokens it gets a second
segment), each piece stored alone (`seqkv compress --segment -c 1024`) and restored by its
own process; a round restores every piece of every codec,
and a row's time is the sum over the pieces of one round (process start and model load
included, as a user pays them). model1 is then the same as model (one segment).
--session-tokens N: with --single, sessions of about N tokens instead of 800 (a session
over 1,024 tokens is stored as segments of up to 1,024, the model's context, in one file).
--model GGUF: another model than the bundled one (e.g. the 1.1B random-weight TinyLlama of
scripts/peer/gen_model.py; its prefill of an 800-token session takes ~17 s on one thread).
Needs: make, fortunes (scripts/install-deps.sh --corpus), bible-kjv (for the dictionary).
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "kjv-4m.gguf")
SINGLE_TOKENS = 800  # --single: tokens per session
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
    """(wall s, CPU s) of one run of cmd."""
    u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        fail("%s failed:\n%s" % (" ".join(cmd), r.stderr))
    return wall, (u1.ru_utime - u0.ru_utime) + (u1.ru_stime - u0.ru_stime)


def pieces(path, ntok, work, per_piece=SINGLE_TOKENS):
    """The text at path cut into pieces of about per_piece tokens (at line ends where
    there is one); their paths."""
    text = read(path)
    size = max(200, int(len(text) * per_piece / max(1, ntok)))
    out, at = [], 0
    while at < len(text):
        end = min(len(text), at + size)
        nl = text.rfind(b"\n", at + size // 2, end)
        if end < len(text) and nl > at:
            end = nl + 1
        p = os.path.join(work, "%s.piece%03d.txt" % (os.path.basename(path), len(out)))
        with open(p, "wb") as f:
            f.write(text[at:end])
        out.append(p)
        at = end
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bytes", type=int, default=24000)
    ap.add_argument("--texts", default="kjv,fortunes,chat")
    ap.add_argument("--codecs", default="tokens,cm,cmv,cmvd,model,model1,model16")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--single", action="store_true", help="one-segment sessions of ~800 tokens, one process each")
    ap.add_argument("--session-tokens", type=int, default=SINGLE_TOKENS,
                    help="with --single: tokens per session (default %d)" % SINGLE_TOKENS)
    ap.add_argument("--model", default=MODEL, help="the model (default: the bundled one)")
    a = ap.parse_args()
    model = a.model
    if not os.path.isfile(model):
        fail("no model %s" % model)
    if a.session_tokens < 50:
        fail("--session-tokens must be at least 50")
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
        print("Measured %s UTC, %s, %d cores, load average before: %s; model %s; `bench/restore_wall.py --rounds %d%s`."
              % (subprocess.run(["date", "-u", "+%Y-%m-%d %H:%M"], stdout=subprocess.PIPE, text=True).stdout.strip(),
                 cpu, os.cpu_count(), " ".join(load0), os.path.basename(model), a.rounds,
                 (" --single" + (" --session-tokens %d" % a.session_tokens if a.session_tokens != SINGLE_TOKENS else ""))
                 if a.single else ""))
        print()
        print("| text | codec | tokens | file bits/position | wall s best / median | tokens/s (best wall) "
              "| CPU s best / median | vs tokens wall (best / median) | vs tokens CPU (best / median) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, tp, dp in texts(work, a.bytes, a.texts.split(",")):
            srcs = [tp]
            if a.single:  # pieces of ~800 tokens of this text (its tokens per byte from codec tokens)
                probe = os.path.join(work, "probe.skv")
                r = subprocess.run([seqkv, "compress", "-m", model, "-f", tp, "--segment", "-c", "800", "-o", probe,
                                    "--codec", "tokens"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
                if r.returncode != 0:
                    fail("compress of %s failed:\n%s" % (tp, r.stdout))
                srcs = pieces(tp, next(int(ln.split()[1]) for ln in r.stdout.splitlines() if ln.startswith("tokens:")),
                              work, a.session_tokens)
            files = {}  # codec -> [(file, tokens)], one per session
            for c in codecs:
                if c == "model1" and "model" in files:  # the same files as codec model
                    files[c] = files["model"]
                    continue
                files[c] = []
                for k, src in enumerate(srcs):
                    f = os.path.join(work, "%s.%d.%s.skv" % (os.path.basename(tp), k, c))
                    shape = ["--segment", "-c", "1024"] if a.single else ["--segment", "-c", "800"]
                    cmd = [seqkv, "compress", "-m", model, "-f", src, "-o", f] + shape + CODECS[c][0]
                    if c == "cmvd":
                        cmd += ["--cm-dict", dp]
                    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                    if r.returncode != 0:
                        fail("%s failed:\n%s" % (" ".join(cmd), r.stdout))
                    files[c].append((f, next(int(ln.split()[1]) for ln in r.stdout.splitlines()
                                             if ln.startswith("tokens:"))))
            times = {c: [] for c in codecs}
            for _ in range(a.rounds):
                for c in codecs:
                    wall = cpu_s = 0.0
                    for f, _n in files[c]:
                        cmd = [seqkv, "restore", "-m", model, f, "-o", "/dev/null"]
                        if c == "cmvd":
                            cmd += ["--cm-dict", dp]
                        if c == "model1":
                            cmd += ["--batch", "1"]
                        w1, u1 = timed(cmd, env)
                        wall, cpu_s = wall + w1, cpu_s + u1
                    times[c].append((wall, cpu_s))
            for c in codecs:
                base = CODECS[c][1]
                w = [t[0] for t in times[c]]
                u = [t[1] for t in times[c]]
                bw = [t[0] for t in times[base]]
                bu = [t[1] for t in times[base]]
                ntok = sum(n for _f, n in files[c])
                bits = sum(os.path.getsize(f) for f, _n in files[c]) * 8.0 / ntok
                label = "%s (%d sessions)" % (name, len(files[c])) if a.single else name
                print("| %s | %s | %d | %.2f | %.2f / %.2f | %.0f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f |" % (
                    label, c, ntok, bits, min(w), statistics.median(w), ntok / min(w),
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
