#!/usr/bin/python3
"""The seqkv command line itself, through the built CLI (build/seqkv), on the bundled model.

Prints `PASS test_cli_options:<case>` / `FAIL ...: <why>` / `SKIP ...: <why>` lines (counted
by tests/run.sh). Runs in a few seconds.

What is checked:
- every command's --help is generated from its option table: usage line, an options list
  that holds every option its synopsis names, and every listed option is accepted;
- the same thing has the same spelling everywhere: each row of the README's option
  conventions table is spelt the same (short and long name) in every command that has it;
- unknown options and bad values exit 2 with a message that names the command and --help
  (and the nearest option for a misspelling);
- output files are replaced only when a command succeeds: a failed restore (another model)
  leaves `-o important.txt`, `-o s.skv` (its own input) and `--kv` as they were, and so do
  failed kv-dump, compress, generate -o and store get runs; no temporary files are left;
  an output in a missing directory fails before any work;
- '-' is stdin / stdout: compress -o -, restore - and -o -, inspect -, kv-dump -o -,
  compress --kv-in -, store get -o -; the report moves to stderr when data is on stdout;
- llama.cpp spellings: -n -1, -s/--seed, --top-k, long forms and --name=value;
- restore copies a large model's weights into memory (the engine's resident copy) only when
  the restore runs enough forward passes to pay for it, unless $SEQKV_RESIDENT says: on a
  281 MB random-weight model (scripts/peer/gen_model.py resident-test), compressing 120
  bytes, a one-pass restore and `store put` of 120 bytes read the file's pages, a 40-pass
  restore and `store get` copy, and SEQKV_RESIDENT=1 / =0 overrule them, with the same
  restored text.
"""
import os
import re
import subprocess
import sys

from clitest import ROOT, SEQKV, WRAP, Reporter, Skip, check, perturbed_copy, run, run_cases

NAME = "test_cli_options"
REPORTER = Reporter(NAME)
KJV = os.path.join(ROOT, "models", "kjv-4m.gguf")
HELD = os.path.join(ROOT, "tests", "data", "model_ref", "heldout.txt")

COMMANDS = ["generate", "perplexity", "info", "tokenize", "kv-dump", "kv-quality", "kv-rd", "kvtc-calib", "compress", "restore", "inspect",
            "store init", "store put", "store get", "store match", "store ls", "store stats", "store rm", "store gc"]


def need_cli():
    if not os.access(SEQKV, os.X_OK):
        raise Skip("%s not built" % SEQKV)


def text(n_bytes):
    t = open(HELD, "rb").read()[:n_bytes]
    return t[:t.rindex(b" ")]


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return path


def read(path):
    with open(path, "rb") as f:
        return f.read()


def help_of(cmd):
    rc, out, err = run(*cmd.split(), "--help")
    check(rc == 0, "%s --help: exit %d: %s" % (cmd, rc, err.strip()))
    return out


def listed_options(help_text):
    """{(letter or None, long name or None): value name or None} of a --help's options list."""
    body = help_text.split("\noptions:\n", 1)
    check(len(body) == 2, "no options list in %r" % help_text[:200])
    rows = {}
    for line in body[1].split("\n\n")[0].splitlines():
        m = re.match(r"^(?:  -(\w), --([a-z0-9-]+)|      --([a-z0-9-]+)|  -(\w))(?: (\S+))?", line)
        if m:
            rows[(m.group(1) or m.group(4), m.group(2) or m.group(3))] = m.group(5)
    return rows


def stray_files(tmp, before):
    return sorted(set(os.listdir(tmp)) - set(before))


# ---- cases -------------------------------------------------------------------------


def help_generated_from_tables(tmp):
    need_cli()
    for cmd in COMMANDS:
        out = help_of(cmd)
        check(out.startswith("usage: seqkv %s " % cmd), "%s: no usage line: %r" % (cmd, out[:60]))
        rc, out2, _ = run(*cmd.split(), "-h")
        check(rc == 0 and out2 == out, "%s -h differs from --help" % cmd)
        rows = listed_options(out)
        check((("h", "help")) in rows, "%s: -h/--help not listed" % cmd)
        longs = {l for _, l in rows if l}
        shorts = {s for s, _ in rows if s}
        synopsis = out.split("\n\n", 1)[0]
        for opt in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", synopsis.replace("usage: seqkv " + cmd, "")):
            ok = opt[2:] in longs if opt.startswith("--") else opt[1:] in shorts
            check(ok, "%s: the synopsis names %s but the options list does not" % (cmd, opt))
        for (short, long_), arg in rows.items():
            if long_ == "help":
                continue
            spelt = "--" + long_ if long_ else "-" + short
            args = cmd.split() + ([spelt] if arg else [spelt, "--help"])
            rc, o, err = run(*args)
            check("unknown option" not in err, "%s: listed option %s is refused: %s" % (cmd, spelt, err.strip()))
            if arg:
                check(rc == 2 and "needs a value" in err, "%s %s without a value: exit %d %r" % (cmd, spelt, rc, err))
    rc, out, err = run("store", "--help")
    check(rc == 0 and all(("  %s " % c.split()[1]) in out for c in COMMANDS if c.startswith("store ")),
          "store --help does not list every store command")


def conventions_table():
    """Rows of the README's option-conventions table: [(letter or None, long name or None)]."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    m = re.search(r"\n### Option conventions\n(.*?)(?:\n#|\Z)", readme, re.S)
    check(m, "README has no '### Option conventions' section")
    rows = []
    for line in m.group(1).splitlines():
        cell = re.match(r"^\| `(?:-(\w)(?:, |`| ))?(?:--([a-z0-9-]+))?", line)
        if cell and (cell.group(1) or cell.group(2)):
            rows.append((cell.group(1), cell.group(2)))
    check(len(rows) >= 8, "the conventions table has only %d rows" % len(rows))
    return rows


def same_spelling_everywhere(tmp):
    need_cli()
    table = conventions_table()
    for cmd in COMMANDS:
        rows = listed_options(help_of(cmd))
        for short, long_ in table:
            for (s, l) in rows:
                if long_ and l == long_:
                    check(s == short, "%s spells --%s with short name %r, the README %r" % (cmd, long_, s, short))
                if long_ and short and s == short:
                    check(l == long_, "%s uses -%s for --%s, the README for --%s" % (cmd, short, l, long_))


def usage_errors_say_what_to_do(tmp):
    need_cli()
    cases = [
        (["compress", "--bogus"], "unknown option '--bogus'"),
        (["restore", "a.skv", "--thread", "2"], "did you mean --threads?"),
        (["compress", "-f", "x", "-o", "y", "-t", "0"], "from 1 to 256"),
        (["generate", "-p", "x", "-n", "-2"], "from -1 to"),
        (["generate", "-p", "x", "--temp", "hot"], "--temp"),
        (["restore", "a.skv", "--draft", "fast"], "auto|none|ngram"),
        (["store", "gc", "st", "--budget", "12Q"], "byte count"),
        (["kv-dump", "-f", "x", "-o", "-", "--logits", "-"], "stdout"),
        (["restore", "a.skv", "-o", "-", "--kv", "-"], "stdout"),
        (["generate", "-p", "x", "-o", "-"], "stdout"),
        (["compress", "--segment=1"], "takes no value"),
        (["info", "a", "b"], "unexpected argument 'b'"),
        (["tokenize"], "-p TEXT or -f FILE"),
    ]
    for args, want in cases:
        rc, out, err = run(*args)
        cmd = args[0] + (" " + args[1] if args[0] == "store" else "")
        check(rc == 2, "%s: exit %d, want 2" % (" ".join(args), rc))
        check(want in err, "%s: %r does not say %r" % (" ".join(args), err.strip(), want))
        check(err.startswith("seqkv %s: " % cmd) and "seqkv %s --help" % cmd in err,
              "%s: the message does not name the command and its --help: %r" % (" ".join(args), err.strip()))


def outputs_replaced_only_on_success(tmp):
    need_cli()
    src = write(os.path.join(tmp, "s.txt"), text(800))
    skv = os.path.join(tmp, "s.skv")
    rc, out, err = run("compress", "-m", KJV, "-f", src, "-o", skv)
    check(rc == 0, "compress: exit %d: %s" % (rc, err.strip()))
    session = read(skv)
    other = perturbed_copy(KJV, os.path.join(tmp, "other.gguf"))
    precious = b"important bytes that must survive\n" * 3
    imp, kv = write(os.path.join(tmp, "important.txt"), precious), write(os.path.join(tmp, "important.kv"), precious)
    before = os.listdir(tmp)
    for args in (["-o", imp], ["--kv", kv], ["-o", imp, "--kv", kv]):
        rc, out, err = run("restore", "-m", other, skv, *args)
        check(rc == 1 and "wrong model" in err, "restore with another model %s: exit %d %r" % (args, rc, err.strip()))
        check(read(imp) == precious and read(kv) == precious, "a failed restore %s changed its output" % args)
    rc, out, err = run("restore", skv, "-o", skv, "-m", other)
    check(rc == 1 and read(skv) == session, "restore s.skv -o s.skv -m OTHER: exit %d, session intact: %s"
          % (rc, read(skv) == session))
    check(not stray_files(tmp, before), "temporary files left: %r" % stray_files(tmp, before))
    long_src = write(os.path.join(tmp, "long.txt"), open(HELD, "rb").read()[:12000])
    failures = [
        ["kv-dump", "-m", KJV, "-f", long_src, "-o", imp, "--logits", kv],            # longer than the context
        ["compress", "-m", KJV, "-f", long_src, "-o", imp],                          # ditto, without --segment
        ["generate", "-m", KJV, "-p", "And it came to pass", "-c", "4", "-o", imp],   # prompt does not fit
    ]
    for args in failures:
        rc, out, err = run(*args)
        check(rc == 1 and err.strip(), "%s: exit %d, want 1" % (args[0], rc))
        check(read(imp) == precious and read(kv) == precious, "a failed %s changed its output" % args[0])
    st = os.path.join(tmp, "st")
    rc, _, err = run("store", "init", st)
    check(rc == 0, "store init: %s" % err)
    rc, out, err = run("store", "get", st, "nope", "-o", imp, "--kv", kv)
    check(rc == 1 and read(imp) == precious and read(kv) == precious, "a failed store get changed its outputs")
    check(not stray_files(tmp, before + ["long.txt", "st"]), "temporary files left: %r" % stray_files(tmp, before))
    rc, out, err = run("restore", skv, "-o", os.path.join(tmp, "missing", "x.txt"))
    check(rc == 1 and "missing/x.txt" in err and "restored" not in out, "output in a missing directory: %r" % err)
    rc, out, err = run("restore", skv, "-o", imp)
    check(rc == 0 and read(imp) == read(src), "a successful restore did not replace the file")
    check(os.stat(imp).st_mode & 0o777 == 0o666 & ~current_umask(), "restored file mode %o" % os.stat(imp).st_mode)


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def dash_is_stdin_and_stdout(tmp):
    need_cli()
    body = text(600)
    src = write(os.path.join(tmp, "d.txt"), body)
    skv = os.path.join(tmp, "d.skv")
    rc, out, err = run("compress", "-f", src, "-o", skv)
    check(rc == 0 and "bits per position" in out, "compress -o FILE: the report is not on stdout")
    p = run_bytes("compress", "-f", "-", "-o", "-", stdin=body)
    check(p[0] == 0 and p[1] == read(skv), "compress -f - -o -: stdout is not the .skv file")
    check(b"bits per position" in p[2], "compress -o -: the report is not on stderr")
    p = run_bytes("restore", "-", "-o", "-", stdin=read(skv))
    check(p[0] == 0 and p[1] == body and b"restored" in p[2], "restore - -o -: %r" % p[2][-200:])
    rc, out, err = run("inspect", "-", stdin=read(skv))
    check(rc == 0 and "segments:" in out, "inspect -: exit %d" % rc)
    dump = os.path.join(tmp, "d.kv")
    rc, out, err = run("kv-dump", "-f", src, "-o", dump)
    check(rc == 0 and "wrote" in out, "kv-dump -o FILE: exit %d" % rc)
    p = run_bytes("kv-dump", "-f", src, "-o", "-")
    check(p[0] == 0 and p[1] == read(dump) and b"wrote" in p[2], "kv-dump -o -: stdout is not the dump")
    p = run_bytes("compress", "--kv-in", "-", "-o", "-", stdin=read(dump))
    check(p[0] == 0 and p[1] == read(skv), "compress --kv-in -: a different session")
    p = run_bytes("restore", skv, "--kv", "-")
    check(p[0] == 0 and p[1] == read(dump), "restore --kv -: stdout is not the dump")
    st = os.path.join(tmp, "st")
    check(run("store", "init", st)[0] == 0 and run("store", "put", st, "-f", src)[0] == 0, "store init/put")
    p = run_bytes("store", "get", st, "d.txt", "-o", "-")
    check(p[0] == 0 and p[1] == body and b"restored 'd.txt'" in p[2], "store get -o -: %r" % p[2][-200:])


def run_bytes(*args, stdin=None):
    import subprocess
    from clitest import WRAP
    p = subprocess.run(WRAP + [SEQKV] + list(args), input=stdin, capture_output=True, timeout=120 * (30 if WRAP else 1),
                       cwd=ROOT)
    return p.returncode, p.stdout, p.stderr


def llama_cpp_spellings(tmp):
    need_cli()
    base = ["generate", "-p", "And the LORD said"]
    rc, greedy, err = run(*base, "-n", "12")
    check(rc == 0, "generate: exit %d: %s" % (rc, err.strip()))
    rc, out, err = run("generate", "--prompt", "And the LORD said", "--n-predict=12", "--threads", "2")
    check(rc == 0 and out == greedy, "long spellings give another text")
    rc, out, err = run(*base, "-n", "12", "--temp", "0.9", "--top-k", "1", "-s", "5")
    check(rc == 0 and out == greedy, "--top-k 1 is not greedy")
    a = run(*base, "-n", "20", "--temp", "0.9", "-s", "7")
    b = run(*base, "-n", "20", "--temp", "0.9", "--seed", "7")
    check(a[0] == 0 and a == b, "-s and --seed differ")
    rc, out, err = run(*base, "-n", "-1", "-c", "40")
    n = len(run("tokenize", "-p", out.rstrip("\n"))[1].split())
    check(rc == 0 and len(out) > len(greedy) and n <= 41, "-n -1 -c 40: exit %d, %d tokens" % (rc, n))
    src = write(os.path.join(tmp, "l.txt"), text(400))
    rc, out, err = run("compress", "--model", KJV, "--file", src, "--output", os.path.join(tmp, "l.skv"),
                       "--ctx=64", "--segment", "--threads=2")
    check(rc == 0, "compress with long spellings: exit %d: %s" % (rc, err.strip()))
    rc, out, err = run("perplexity", "--file", src, "--ctx-size", "64")
    check(rc == 0 and "windows of 64" in out, "perplexity --ctx-size (llama.cpp's spelling): %s" % err.strip())


def resident_copy_only_when_it_pays(tmp):
    need_cli()
    if WRAP:
        raise Skip("a 281 MB model's forward passes under %s would take too long" % WRAP[0])
    model = os.path.join(tmp, "resident-test.gguf")
    gen = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "peer", "gen_model.py"), "resident-test", model],
                         capture_output=True, text=True, timeout=300)
    check(gen.returncode == 0, "gen_model.py resident-test: %s" % gen.stderr.strip())
    src = write(os.path.join(tmp, "r.txt"), text(120))
    short, long_ = os.path.join(tmp, "short.skv"), os.path.join(tmp, "long.skv")
    saved = os.environ.pop("SEQKV_RESIDENT", None)
    os.environ["SEQKV_REPACK"] = "0"  # f16 matrices: a packed copy (quant/repack.h) takes the resident one's place
    try:
        copied = "copied into memory at load"
        for codec, out in (("tokens", short), ("model", long_)):  # 120 bytes: at most 2 passes
            rc, rep, err = run("compress", "-m", model, "-f", src, "-o", out, "--codec", codec, "-c", "64", "--segment")
            check(rc == 0, "compress --codec %s: exit %d: %s" % (codec, rc, err.strip()))
            check(copied not in rep + err, "compress of 120 bytes copied the weights: %s" % rep.strip())
        os.environ["SEQKV_RESIDENT"] = "1"
        rc, rep, err = run("compress", "-m", model, "-f", src, "-o", os.path.join(tmp, "forced.skv"), "-c", "64",
                           "--segment", "--codec", "tokens")
        check(rc == 0 and copied in rep, "compress with SEQKV_RESIDENT=1: no copy reported: %s" % (rep + err).strip())
        runs = {}
        for env, f, want in ((None, short, False), (None, long_, True), ("1", short, True), ("0", long_, False)):
            if env is None:
                os.environ.pop("SEQKV_RESIDENT", None)
            else:
                os.environ["SEQKV_RESIDENT"] = env
            rc, out, err = run("restore", "-m", model, f, "-o", "-")
            check(rc == 0, "restore %s (SEQKV_RESIDENT=%s): exit %d: %s" % (os.path.basename(f), env, rc, err.strip()))
            check((copied in err) == want, "restore %s with SEQKV_RESIDENT=%s: weights %s: %s"
                  % (os.path.basename(f), env, "not copied" if want else "copied", err.strip()))
            check(runs.setdefault(f, out) == out, "restore %s: another text with SEQKV_RESIDENT=%s" % (f, env))
        check(runs[short] == runs[long_] and runs[short].strip(), "the two codecs restore different texts")
        # the store: put of 120 bytes reads the file's pages; get (its length unknown before the
        # store is open) keeps the engine's default, which SEQKV_RESIDENT=0 overrules
        sdir = os.path.join(tmp, "store")
        os.environ.pop("SEQKV_RESIDENT", None)
        rc, out, err = run("store", "init", sdir, "-m", model)
        check(rc == 0, "store init: %s" % err.strip())
        rc, out, err = run("store", "put", sdir, "-f", src)
        check(rc == 0 and "stored" in out and copied not in out + err, "store put of 120 bytes: %s" % (out + err).strip())
        for env, want in ((None, True), ("0", False)):
            if env is not None:
                os.environ["SEQKV_RESIDENT"] = env
            rc, out, err = run("store", "get", sdir, "r.txt", "-o", os.path.join(tmp, "got.txt"))
            check(rc == 0 and (copied in out + err) == want, "store get (SEQKV_RESIDENT=%s): %s" % (env, (out + err).strip()))
    finally:
        os.environ.pop("SEQKV_RESIDENT", None)
        os.environ.pop("SEQKV_REPACK", None)
        if saved is not None:
            os.environ["SEQKV_RESIDENT"] = saved


CASES = [help_generated_from_tables, same_spelling_everywhere, usage_errors_say_what_to_do,
         outputs_replaced_only_on_success, dash_is_stdin_and_stdout, llama_cpp_spellings,
         resident_copy_only_when_it_pays]


if __name__ == "__main__":
    sys.exit(run_cases(REPORTER, CASES, "seqkv_opt_"))
