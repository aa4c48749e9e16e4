#!/usr/bin/python3
"""The Python package (python/, seqkv._seqkv) against the library and the CLI.

Run by tests/run.sh as a script (PASS/FAIL/SKIP lines), or with Debian's pytest:
    python3 -m pytest tests/test_python.py      (SEQKV_BUILD=build by default)
The extension is imported from $SEQKV_BUILD/python, where `make` builds it. Sanitizer
builds do not build it (a sanitized extension needs the sanitizer runtime preloaded into
python): they leave $SEQKV_BUILD/python/SKIP, and every case skips with its reason. A
release build without the extension fails.

What is checked, on the bundled model (models/kjv-4m.gguf) unless said:
- round trips bit-exact against the CLI: for every codec the CLI and Python write the
  same .skv bytes for the same text; Python restores the CLI's files (tokens, KV digest)
  and the CLI restores Python's (text);
- the KV array ([layers, 2, kv_heads, positions, head_dim]) equals `seqkv kv-dump`'s
  values bit for bit, and Context.kv_dump writes the same file; restore_kv of a lossy
  session equals `seqkv restore --kv`'s dump;
- the engine-free encode_kv/decode_kv on float32/float16/bfloat16 arrays;
- the store (put/get/match/near/list/stats/remove) against a fresh prefill, on LMDB and on a
  private redis-server (two threads sharing the Store);
- errors are exceptions of the status's class carrying the library's message (stories260K
  from the shared assets for the wrong-model case);
- no leak over 10,000 calls (tracemalloc and RSS);
- two threads restoring at once get the right results, and the GIL is released meanwhile;
- python/examples/ run.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from clitest import ROOT, SEQKV, Fail, Reporter, Skip, check, run  # noqa: E402
from testenv import missing, shared_path  # noqa: E402

NAME = "test_python"
BUILD = os.environ.get("SEQKV_BUILD", "build")
PYDIR = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "python")
MODEL = os.path.join(ROOT, "models", "kjv-4m.gguf")
TEXT = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; "
        "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. "
        "And God said, Let there be light: and there was light.")
CODECS = [("model", None), ("tokens", None), ("cm", None), ("cmv", None), ("f16", None), ("q8", None), ("q4", None),
          ("tq2", None), ("tq3", None), ("tq4", None), ("kvq", "k=tq4,v=tq3"), ("pred", None)]


def skip(why):
    """Skip the case (pytest's skip under pytest, else the runner's SKIP line)."""
    if "pytest" in sys.modules:
        import pytest
        pytest.skip(why)
    raise Skip(why)


def load_package():
    """Imports seqkv from the build tree; a reason string when it cannot (sanitizer build)."""
    marker = os.path.join(PYDIR, "SKIP")
    if os.path.exists(marker):
        with open(marker) as f:
            return None, f.read().strip()
    if not os.path.exists(os.path.join(PYDIR, ".built")):
        raise Fail("%s has no Python extension: build it with `make` (python3-dev, python3-numpy, "
                   "python3-setuptools: scripts/install-deps.sh)" % PYDIR)
    sys.path.insert(0, PYDIR)
    import seqkv
    return seqkv, None


try:
    seqkv, SKIPPED = load_package()
    import numpy as np
except Fail as e:
    seqkv, SKIPPED, LOAD_FAIL = None, None, str(e)
else:
    LOAD_FAIL = None

_model = None


def model():
    global _model
    if LOAD_FAIL:
        raise Fail(LOAD_FAIL)
    if SKIPPED:
        skip(SKIPPED)
    if _model is None:
        _model = seqkv.Model(MODEL)
    return _model


def write(path, data):
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    return path


def read(path):
    with open(path, "rb") as f:
        return f.read()


def cli(*args):
    rc, out, err = run(*args)
    check(rc == 0, "seqkv %s: exit %d: %s" % (" ".join(map(str, args)), rc, err.strip()[-300:]))
    return out


def parse_kvdump(path):
    """A raw KV dump read by this test alone, as docs/kvdump.md lays it out."""
    b = read(path)
    check(b[:8] == b"SKVDUMP\0", "not a dump")
    hdr = np.frombuffer(b, "<u4", 8, 8)
    dtype, nl, nh, hd, n = (int(x) for x in hdr[2:7])
    tok = np.frombuffer(b, "<i4", n, 64)
    vals = np.frombuffer(b, "<f4" if dtype == 0 else "<f2", nl * 2 * nh * n * hd, 64 + 4 * n)
    return tok, vals.reshape(nl, 2, nh, n, hd)


# ---- cases --------------------------------------------------------------------------------

def test_cli_roundtrip(tmp_path):
    """Every codec: the same bytes from the CLI and from Python; each restores the other's."""
    m = model()
    tmp = str(tmp_path)
    txt = write(os.path.join(tmp, "t.txt"), TEXT)
    ids = m.tokenize(TEXT)
    ref = seqkv.Context(m)
    ref.prefill(ids, logits="none")
    for codec, spec in CODECS:
        out = os.path.join(tmp, codec + ".skv")
        cli("compress", "-m", MODEL, "-f", txt, "-o", out, "--codec", codec, *(["--kv-quant", spec] if spec else []))
        mine = seqkv.compress(m, TEXT, codec, kv_quant=spec)
        check(mine == read(out), "%s: Python's .skv (%d bytes) differs from the CLI's (%d)" %
              (codec, len(mine), len(read(out))))
        with seqkv.restore(m, out) as c:
            check(np.array_equal(c.tokens, ids), "%s: restored tokens differ" % codec)
            info = seqkv.inspect(out)
            check(info["codec"] == codec and info["n_tokens"] == len(ids), "%s: inspect %r" % (codec, info))
            check(c.digest() == info["segments"][0]["kv_digest"], "%s: KV digest differs" % codec)
            lossless = not seqkv.inspect(out)["segments"][0].get("kv")
            check(not lossless or c.digest() == ref.digest(), "%s: lossless restore is not the prefill's KV" % codec)
        py = write(os.path.join(tmp, codec + ".py.skv"), mine)
        back = os.path.join(tmp, codec + ".txt")
        cli("restore", "-m", MODEL, py, "-o", back)
        check(read(back).decode() == TEXT, "%s: the CLI restored another text from Python's file" % codec)
    ref.close()


def test_kv_equals_kvdump(tmp_path):
    """Context.kv() is `seqkv kv-dump`'s array; kv_dump writes its file; restore_kv is `restore --kv`."""
    m = model()
    tmp = str(tmp_path)
    txt = write(os.path.join(tmp, "t.txt"), TEXT)
    dump = os.path.join(tmp, "cli.kv")
    cli("kv-dump", "-m", MODEL, "-f", txt, "-o", dump)
    tok, vals = parse_kvdump(dump)
    with seqkv.Context(m) as c:
        c.prefill(m.tokenize(TEXT))
        kv = c.kv()
        info = m.info
        check(kv.shape == (info["n_layer"], 2, info["n_head_kv"], len(tok), info["head_dim"]), "shape %r" % (kv.shape,))
        check(np.array_equal(c.tokens, tok), "tokens differ from the dump's")
        check(kv.tobytes() == vals.tobytes(), "KV differs from seqkv kv-dump's")
        mine = os.path.join(tmp, "py.kv")
        c.kv_dump(mine)
        check(read(mine) == read(dump), "Context.kv_dump's file differs from seqkv kv-dump's")
        part = c.kv(5, 7)
        check(np.array_equal(part, kv[:, :, :, 5:12]), "kv(pos0, n) is not the slice")
    skv = os.path.join(tmp, "tq3.skv")
    cli("compress", "-m", MODEL, "-f", txt, "-o", skv, "--codec", "tq3")
    lossy = os.path.join(tmp, "tq3.kv")
    cli("restore", "-m", MODEL, skv, "--kv", lossy)
    kv2, tok2 = seqkv.restore_kv(skv)
    ltok, lvals = parse_kvdump(lossy)
    check(np.array_equal(tok2, ltok) and kv2.tobytes() == lvals.tobytes(), "restore_kv differs from restore --kv")


def test_context_ops(tmp_path):
    """prefill/decode logits agree; kv_write continues bit-exactly; truncate; cmvd's dictionary."""
    m = model()
    ids = m.tokenize(TEXT)
    with seqkv.Context(m) as a, seqkv.Context(m) as b:
        la = a.prefill(ids, logits="all")
        check(la.shape == (len(ids), m.info["n_vocab"]), "logits shape")
        b.prefill(ids[:-1], logits="none")
        lb = b.decode(int(ids[-1]))
        check(np.array_equal(la[-1], lb), "decode's logits differ from prefill's last row")
        kv = a.kv(0, 10)
        b.kv_write(kv, 0, ids[:10])
        check(b.n_pos == 10 and np.array_equal(b.tokens, ids[:10]), "kv_write: n_pos/tokens")
        b.prefill(ids[10:], logits="none")
        check(b.digest() == a.digest(), "prefill after kv_write is not bit-identical")
        b.truncate(3)
        check(b.n_pos == 3 and b.digest() == a.digest(3), "truncate")
    check(m.detokenize(ids) == TEXT, "detokenize(tokenize(text)) != text")
    dic = m.tokenize(TEXT + " " + TEXT)
    data = seqkv.compress(m, ids, "cmvd", dictionary=dic)
    with seqkv.restore(m, data, dictionary=dic) as c:
        check(np.array_equal(c.tokens, ids), "cmvd restore")
    try:
        seqkv.restore(m, data)
        raise Fail("a cmvd file restored without its dictionary")
    except seqkv.Error as e:
        check(e.message, "no message")


def test_encode_kv(tmp_path):
    """The engine-free codecs on a numpy-made KV in float32, float16 and bfloat16."""
    seqkv_ok = model()  # noqa: F841  (skips in sanitizer builds)
    rng = np.random.default_rng(7)
    L, H, P, D = 3, 4, 40, 64
    t = np.arange(P)[:, None]
    base = np.sin(0.05 * t * (1 + np.arange(D)[None, :] / D)) + 0.3 * rng.standard_normal((P, D))
    kv = (base[None, None, None] + 0.1 * rng.standard_normal((L, 2, H, P, D))).astype(np.float32)
    blob = seqkv.encode_kv(kv, "f32")
    check(np.array_equal(seqkv.decode_kv(blob), kv), "f32 is not lossless")
    h = kv.astype(np.float16)
    check(np.array_equal(seqkv.decode_kv(seqkv.encode_kv(h, "f16"), dtype=np.float16), h), "f16 input through f16")
    bits = (kv.view(np.uint32) >> 16).astype(np.uint16)  # bfloat16 by truncation
    back = seqkv.decode_kv(seqkv.encode_kv(bits, "f32", dtype="bfloat16"), dtype="bfloat16")
    check(np.array_equal(back, bits), "bfloat16 round trip through f32")
    for scheme, worst in (("tq3", 0.05), ("k=tq4,v=q8_0,seed=3", 0.02), ("pred", 0.01), ("pred:lpc,step=0.02", 0.01)):
        b = seqkv.encode_kv(kv, scheme)
        y = seqkv.decode_kv(b)
        err = float(((y - kv) ** 2).sum() / (kv ** 2).sum())
        info = seqkv.inspect(b)
        check(info["geometry"] == (L, H, D) and info["n_pos"] == P, "%s: inspect %r" % (scheme, info))
        check(0 < err < worst, "%s: relative error %g" % (scheme, err))
        check(abs(err - sum(info["rel_mse"]) / 2) < 0.5 * err, "%s: measured error %g vs recorded %r" %
              (scheme, err, info["rel_mse"]))
        check(seqkv.encode_kv(kv, scheme) == b, "%s: not deterministic" % scheme)
    bad = bytearray(seqkv.encode_kv(kv, "tq2"))
    bad[100] ^= 1
    for data, cls in ((bytes(bad), seqkv.MismatchError), (b"SKVB\x01\x00\x01\x00" + bytes(40), seqkv.FormatError)):
        try:
            seqkv.decode_kv(data)
            raise Fail("a damaged blob decoded")
        except cls as e:
            check(e.message.startswith(("KV blob checksum", "not a valid KV blob")), "message %r" % e.message)
    for args in ((kv[0], "tq3"), (kv, "tq9"), (kv, "pred:tok")):
        try:
            seqkv.encode_kv(*args)
            raise Fail("encode_kv accepted %r" % (args[1],))
        except seqkv.InvalidArgumentError as e:
            check(e.status_name == "SKV_ERR_INVALID_ARG" and e.message, "status/message")


def test_store(tmp_path):
    """put/get/match/near/list/stats/remove on an LMDB store; get == a fresh prefill."""
    m = model()
    d = os.path.join(str(tmp_path), "store")
    a = m.tokenize(TEXT)
    b = m.tokenize(TEXT[:120] + " And the evening and the morning were the first day.")
    with seqkv.Store(d, m) as st:
        r = st.put("a", a)
        check(r["n_tokens"] == len(a), "put report %r" % r)
        r = st.put("b", b)
        check(r["n_shared"] > 10, "second put shares no prefix: %r" % r)
        check(st.match(b[:30])["n_matched"] == 30, "match")
        with st.get("b") as c, seqkv.Context(m) as ref:
            ref.prefill(b, logits="none")
            check(np.array_equal(c.tokens, b) and c.digest() == ref.digest(), "get is not the prefill's KV")
        names = [s["name"] for s in st.list()]
        check(names == ["a", "b"], "list %r" % names)
        s = st.stats()
        check(s["n_sessions"] == 2 and s["session_tokens"] == len(a) + len(b), "stats %r" % s)
        c, rep = st.near(b)
        check(c.n_pos == len(b) and "approximate" in rep, "near %r" % rep)
        c.close()
        st.remove("a")
        try:
            st.get("a")
            raise Fail("a removed session was restored")
        except seqkv.InvalidArgumentError as e:
            check("a" in e.message, "message %r" % e.message)
        try:
            m.close()
            raise Fail("a model in use by a store was closed")
        except seqkv.Error:
            pass


def test_store_redis(tmp_path):
    """A Store on a private redis-server (unix socket URL), shared by two threads getting at once."""
    m = model()
    import redis_harness
    if not redis_harness.available():
        skip("redis-server is not installed (scripts/install-deps.sh installs it)")
    r = redis_harness.Redis(os.path.join(str(tmp_path), "redis"))
    try:
        texts = [TEXT, TEXT.replace("light", "night")]
        ids = [m.tokenize(t) for t in texts]
        want = []
        for t in ids:
            with seqkv.Context(m) as c:
                c.prefill(t, logits="none")
                want.append(c.digest())
        with seqkv.Store(r.url("py"), m) as st:
            for i, t in enumerate(ids):
                st.put("s%d" % i, t)
            check(st.match(ids[1])["n_matched"] == len(ids[1]), "match on redis")
            errors = []

            def worker(i):
                for _ in range(3):
                    with st.get("s%d" % i) as c:
                        if c.digest() != want[i] or not np.array_equal(c.tokens, ids[i]):
                            errors.append("thread %d: wrong session" % i)

            th = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
            for t in th:
                t.start()
            for t in th:
                t.join()
            check(not errors, "; ".join(errors))
            check(st.stats()["n_sessions"] == 2, "stats on redis")
    finally:
        r.stop()


def test_errors(tmp_path):
    """Library failures are exceptions of their status's class with the library's message."""
    m = model()
    try:
        seqkv.Model(os.path.join(str(tmp_path), "nope.gguf"))
        raise Fail("a missing model loaded")
    except seqkv.IOError as e:
        check(e.status_name == "SKV_ERR_IO" and "nope.gguf" in e.message and isinstance(e, OSError), repr(e))
    data = seqkv.compress(m, TEXT, "tokens")
    for cut in (0, 10, len(data) - 1):
        try:
            seqkv.inspect(data[:cut])
            raise Fail("a truncated file was accepted")
        except seqkv.FormatError as e:
            check(e.message.startswith("not a valid .skv file"), "message %r" % e.message)
    try:
        seqkv.compress(m, TEXT, "nosuch")
        raise Fail("an unknown codec was accepted")
    except seqkv.InvalidArgumentError:
        pass
    other = shared_path("models", "stories260K", "stories260K.gguf")
    if not os.path.exists(other):
        why = "the wrong-model case needs stories260K (../shared or $SEQKV_SHARED): not found"
        if missing(True, False):
            skip(why)
        raise Fail(why)
    with seqkv.Model(other) as o:
        try:
            seqkv.restore(o, data)
            raise Fail("a session restored into another model")
        except seqkv.MismatchError as e:
            check(e.status == -6 and "seqkv-kjv-4m" in e.message, "message %r" % e.message)


def rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_no_leak(tmp_path):
    """10,000 rounds of calls (restores -- one in ten by a prefill --, inspect, encode/decode,
    tokenize, a raised error): neither
    Python's allocations (tracemalloc) nor the process's RSS grow."""
    m = model()
    ids = m.tokenize("And God saw the light, that it was good.")
    lossy = seqkv.compress(m, ids, "tq3", n_ctx=16)    # restored without running the model
    exact = seqkv.compress(m, ids, "tokens", n_ctx=16)  # restored by a prefill (~1.5 ms)
    kv = np.random.default_rng(1).standard_normal((2, 2, 1, 4, 16)).astype(np.float32)

    def calls(n):
        for i in range(n):
            with seqkv.restore(m, exact if i % 10 == 0 else lossy) as c:
                c.kv(0, 2)
            seqkv.inspect(lossy)
            seqkv.decode_kv(seqkv.encode_kv(kv, "tq3"))
            m.tokenize("light")
            try:
                seqkv.inspect(lossy[:20])
            except seqkv.FormatError:
                pass

    calls(500)  # warm up: caches, arenas
    tracemalloc.start()
    r0, t0 = rss_kb(), tracemalloc.get_traced_memory()[0]
    calls(10000)
    r1, t1 = rss_kb(), tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    # a 100-byte leak per call would be 5 MB here; a leaked Context holds 4 MB of KV each
    check(t1 - t0 < 64 * 1024, "Python allocations grew by %d bytes over 10,000 calls" % (t1 - t0))
    check(r1 - r0 < 2048, "RSS grew by %d KiB over 10,000 calls" % (r1 - r0))


def test_threads(tmp_path):
    """Two threads restore different sessions at once, repeatedly, with the right results;
    while a restore runs the GIL is free (the main thread keeps counting); a Context used
    by two threads at once refuses the second."""
    m = model()
    texts = [TEXT, TEXT.replace("God", "the LORD")]
    files = [seqkv.compress(m, t, "model") for t in texts]
    want = []
    for t in texts:
        with seqkv.Context(m) as c:
            c.prefill(m.tokenize(t), logits="none")
            want.append(c.digest())
    errors = []

    def worker(i):
        try:
            for _ in range(4):
                with seqkv.restore(m, files[i]) as c:
                    if c.digest() != want[i]:
                        errors.append("thread %d: wrong KV" % i)
        except Exception as e:  # reported below
            errors.append("thread %d: %r" % (i, e))

    th = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in th:
        t.start()
    ticks = 0
    while any(t.is_alive() for t in th):
        ticks += 1
        time.sleep(0)
    for t in th:
        t.join()
    check(not errors, "; ".join(errors))
    check(ticks > 100, "the main thread ran %d times while two restores ran: the GIL was held" % ticks)
    long_ids = m.tokenize(" ".join([TEXT] * 8))
    with seqkv.Context(m) as c:
        t = threading.Thread(target=c.prefill, args=(long_ids,), kwargs={"logits": "none"})
        t.start()
        refused = 0
        while t.is_alive():
            try:
                c.kv(0, 0)
            except seqkv.Error as e:
                refused += "in use" in e.message
            time.sleep(0)
        t.join()
        check(refused > 0, "a context busy in another thread was not refused")
        check(c.n_pos == len(long_ids), "the prefill did not complete")


def test_examples(tmp_path):
    """python/examples/*.py run against the build and end with their OK line."""
    model()
    env = dict(os.environ, PYTHONPATH=PYDIR)
    for name in ("conversation.py", "foreign_kv.py", "kv_backend_sketch.py"):
        p = subprocess.run([sys.executable, os.path.join(ROOT, "python", "examples", name)], capture_output=True,
                           text=True, env=env, cwd=str(tmp_path), timeout=300)
        last = p.stdout.strip().splitlines()[-1:] or [""]
        check(p.returncode == 0 and last[0].startswith(name[:-3] + ": OK"),
              "%s: exit %d: %s" % (name, p.returncode, (p.stderr or p.stdout).strip()[-300:]))


CASES = [test_cli_roundtrip, test_kv_equals_kvdump, test_context_ops, test_encode_kv, test_store, test_store_redis,
         test_errors, test_no_leak, test_threads, test_examples]


def main():
    rep = Reporter(NAME)
    if SKIPPED:
        for case in CASES:
            rep.report(case.__name__, "SKIP", SKIPPED)
        return 0
    for case in CASES:
        tmp = tempfile.mkdtemp(prefix="seqkv_py_")
        try:
            rep.run_case(case, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
