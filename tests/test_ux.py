#!/usr/bin/python3
"""Issue 13 "what a user expects", through the built CLI on the bundled model.

Each case checks one promise: a store finds its model without -m (and names the model to
pass when the file is gone); `store get` verifies by default; `store gc` reports what it
re-materialised; text that would not come back (invalid UTF-8, a literal U+2581) and empty
input are refused at compress/put time; `perplexity -c 2` is refused instead of printing
nan; a context beyond the trained length and an ignored GGUF key are warned about (the
library's log, printed by the CLI); OS errors carry their reason; no drafts line when
drafting is off; install-deps.sh --help lists every option; the man page covers every
command and `make install` installs it.
"""
import os
import re
import shutil
import subprocess
import sys

from clitest import HERE, ROOT, Reporter, Skip, check, run, run_cases

MODEL = os.path.join(ROOT, "models", "kjv-4m.gguf")
TEXT = "In the beginning God created the heaven and the earth. And the earth was without form.\n"


def write(path, data):
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def fingerprint(model):
    rc, out, err = run("info", "-m", model)
    check(rc == 0, "info: " + err)
    return re.search(r"fingerprint:\s+([0-9a-f]{32})", out).group(1)


def ok(*args, **kw):
    rc, out, err = run(*args, **kw)
    check(rc == 0, "%s: exit %d: %s" % (" ".join(map(str, args)), rc, err.strip()))
    return out, err


def case_store_finds_its_model(tmp):
    model = shutil.copy(MODEL, os.path.join(tmp, "mine.gguf"))
    st, a = os.path.join(tmp, "st"), write(os.path.join(tmp, "a.txt"), TEXT)
    ok("store", "init", st, "-m", model)
    env_bad = os.environ.get("SEQKV_MODEL")
    os.environ["SEQKV_MODEL"] = os.path.join(tmp, "no-such-model.gguf")  # the default is unusable
    try:
        ok("store", "put", st, "-f", a)
        for sub in (["get", st, "a.txt", "-o", os.path.join(tmp, "o.txt")], ["ls", st], ["stats", st],
                    ["match", st, "-f", a], ["gc", st], ["rm", st, "a.txt"]):
            ok("store", *sub)
        os.rename(model, model + ".moved")
        rc, out, err = run("store", "ls", st)
        check(rc == 1, "ls with the model gone: exit %d" % rc)
        fp = fingerprint(model + ".moved")
        for want in ("seqkv-kjv-4m", fp, model, "-m MODEL", "No such file"):
            check(want in err, "the message lacks %r: %s" % (want, err))
        ok("store", "ls", st, "-m", model + ".moved")
    finally:
        if env_bad is None:
            del os.environ["SEQKV_MODEL"]
        else:
            os.environ["SEQKV_MODEL"] = env_bad


def case_store_wrong_model_says_what_to_do(tmp):
    st = os.path.join(tmp, "st")
    ok("store", "init", st)
    other = os.path.join(tmp, "other.gguf")
    from clitest import perturbed_copy
    perturbed_copy(MODEL, other)
    rc, out, err = run("store", "ls", st, "-m", other)
    fp = fingerprint(MODEL)
    check(rc == 1 and "-m MODEL" in err and fp in err and MODEL in err, "wrong model: exit %d: %s" % (rc, err))
    rc, out, err = run("store", "ls", os.path.join(tmp, "nowhere"))
    check(rc == 1 and "store init" in err, "no store: exit %d: %s" % (rc, err))


def case_store_get_verifies_by_default(tmp):
    st, a = os.path.join(tmp, "st"), write(os.path.join(tmp, "a.txt"), TEXT)
    ok("store", "init", st)
    ok("store", "put", st, "-f", a)
    out, err = ok("store", "get", st, "a.txt", "-o", "-")
    check(out == TEXT, "get -o - gave %r" % out)
    check("KV digest verified" in err, "no verification by default: " + err)
    out, err = ok("store", "get", st, "a.txt", "-o", "-", "--no-verify")
    check("verified" not in err, "--no-verify still verified: " + err)


def case_store_gc_reports_rematerialised(tmp):
    st, a = os.path.join(tmp, "st"), write(os.path.join(tmp, "a.txt"), TEXT * 3)
    ok("store", "init", st, "--budget", "0")
    ok("store", "put", st, "-f", a)
    out, err = ok("store", "gc", st, "--budget", "4M")
    m = re.search(r"re-materialised (\d+) nodes", out)
    check(m and int(m.group(1)) > 0, "gc after raising the budget: " + out)


def case_text_that_cannot_round_trip(tmp):
    st = os.path.join(tmp, "st")
    ok("store", "init", st)
    cases = [(b"abc \xff def\n", "byte 4", "invalid UTF-8"), (u"a \u2581 b\n".encode("utf-8"), "byte 2", "U+2581"),
             (u"ok\nline\nbad \u2581\n".encode("utf-8"), "line 3", "U+2581")]
    for i, (data, where, why) in enumerate(cases):
        f = write(os.path.join(tmp, "t%d.txt" % i), data)
        for args in (["compress", "-f", f, "-o", os.path.join(tmp, "t.skv")], ["store", "put", st, "-f", f]):
            rc, out, err = run(*args)
            check(rc == 1 and where in err and why in err and "--lossy-text" in err,
                  "%s on %r: exit %d: %s" % (args[0], data, rc, err))
        check(not os.path.exists(os.path.join(tmp, "t.skv")), "a refused compress left a file")
        ok("compress", "-f", f, "-o", os.path.join(tmp, "t.skv"), "--lossy-text")
        os.remove(os.path.join(tmp, "t.skv"))
        ok("store", "put", st, "-f", f, "--lossy-text")


def case_empty_input_refused(tmp):
    e = write(os.path.join(tmp, "empty.txt"), b"")
    st = os.path.join(tmp, "st")
    ok("store", "init", st)
    for args in (["compress", "-f", e, "-o", os.path.join(tmp, "e.skv")], ["store", "put", st, "-f", e],
                 ["perplexity", "-f", e], ["compress", "-f", "-", "-o", os.path.join(tmp, "e.skv")]):
        rc, out, err = run(*args, stdin=b"")
        check(rc == 1 and "empty" in err, "%s: exit %d: %s" % (" ".join(args[:2]), rc, err))


def case_perplexity_tiny_window(tmp):
    f = write(os.path.join(tmp, "a.txt"), TEXT * 2)
    rc, out, err = run("perplexity", "-f", f, "-c", "2")
    check(rc == 2 and "nan" not in out + err and "-c 3" in err, "-c 2: exit %d: %s%s" % (rc, out, err))
    out, err = ok("perplexity", "-f", f, "-c", "3")
    check("nan" not in out, "-c 3 printed nan: " + out)


def case_context_beyond_training_warns(tmp):
    out, err = ok("generate", "-p", "In the", "-n", "2", "-c", "1030")
    check("seqkv: warning: context of 1030 positions is beyond the model's trained length 1024" in err,
          "no warning: " + err)
    out, err = ok("generate", "-p", "In the", "-n", "2", "-c", "1024")
    check("warning" not in err, "a warning at the trained length: " + err)


def case_ignored_gguf_key_warns(tmp):
    sys.path.insert(0, os.path.join(HERE, "ref"))
    try:
        import make_gguf as mg
    except ImportError as e:  # numpy missing
        raise Skip("tests/ref/make_gguf.py needs numpy: %s" % e)
    w = mg.llama_gguf(n_layer=1, seed=3)
    # llama.cpp reads a factor without a type as linear scaling; with the type 'none' the
    # factor is ignored, and seqkv says so.
    w.add("llama.rope.scaling.type", mg.STRING, "none")
    w.add("llama.rope.scaling.factor", mg.F32, 4.0)
    path = os.path.join(tmp, "scaled.gguf")
    w.write(path)
    out, err = ok("info", "-m", path)
    check("seqkv: warning: GGUF: llama.rope.scaling.factor 4 ignored (rope.scaling.type is 'none')" in err, "no warning: " + err)


def case_os_errors_named(tmp):
    rc, out, err = run("compress", "-f", os.path.join(tmp, "missing.txt"), "-o", os.path.join(tmp, "x.skv"))
    check(rc == 1 and "No such file or directory" in err, "missing input: %s" % err)
    f = write(os.path.join(tmp, "a.txt"), TEXT)
    bad = os.path.join(tmp, "no", "dir", "x.skv")
    rc, out, err = run("compress", "-f", f, "-o", bad, "-m", os.path.join(tmp, "no-model.gguf"))
    # the output is checked first: its error, not the missing model's
    check(rc == 1 and bad in err and "No such file or directory" in err and "model" not in err,
          "unwritable output: %s" % err)


def case_no_drafts_line_without_drafting(tmp):
    f = write(os.path.join(tmp, "a.txt"), TEXT)
    skv = os.path.join(tmp, "a.skv")
    ok("compress", "-f", f, "-o", skv)
    out, err = ok("restore", skv, "-o", os.path.join(tmp, "b.txt"))
    check("drafts" not in out + err, "a drafts line with drafting off: " + out)
    out, err = ok("restore", skv, "-o", os.path.join(tmp, "b.txt"), "--draft", "ngram")
    check("drafts:" in out, "no drafts line with --draft ngram: " + out)


def case_install_deps_help(tmp):
    script = os.path.join(ROOT, "scripts", "install-deps.sh")
    opts = re.findall(r"^\s+(--[a-z-]+)(?:\|[^)]*)?\)", open(script).read(), re.M)
    opts += re.findall(r"^\s+-h\|(--help)\)", open(script).read(), re.M)
    check(len(opts) >= 4, "found only %s in the script" % opts)
    p = subprocess.run(["sh", script, "--help"], capture_output=True, text=True)
    check(p.returncode == 0, "--help exit %d" % p.returncode)
    for o in opts:
        check(o in p.stdout, "--help does not list %s:\n%s" % (o, p.stdout))


def case_man_page(tmp):
    page = open(os.path.join(ROOT, "docs", "seqkv.1")).read()
    out, err = ok("--help")
    cmds = re.findall(r"^  (\S+)\s", out, re.M)
    check(len(cmds) >= 10, "commands from --help: %s" % cmds)
    for c in cmds:
        check(re.search(r"^\.BR %s " % re.escape(c.replace("-", "\\-")), page, re.M), "no entry for " + c)
    out, err = ok("store", "--help")
    for sub in re.findall(r"^  (\w+) DIR", out, re.M):
        check(re.search(r"^\.B %s DIR" % sub, page, re.M), "no entry for store " + sub)
    if shutil.which("man"):
        p = subprocess.run(["man", "--warnings", "-l", os.path.join(ROOT, "docs", "seqkv.1")], capture_output=True,
                           text=True, env=dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0"))
        check(p.returncode == 0 and "SEQKV(1)" in p.stdout, "man -l: %d %s" % (p.returncode, p.stderr))
        check("warning" not in p.stderr, "roff warnings: " + p.stderr)
    build = os.environ.get("SEQKV_BUILD", "build")
    p = subprocess.run(["make", "-n", "-s", "install", "PREFIX=" + tmp, "BUILD=" + build], cwd=ROOT,
                       capture_output=True, text=True)
    check("docs/seqkv.1 %s/share/man/man1/seqkv.1" % tmp in p.stdout, "make install does not install the man page")
    p = subprocess.run(["make", "-n", "-s", "uninstall", "PREFIX=" + tmp], cwd=ROOT, capture_output=True, text=True)
    check("%s/share/man/man1/seqkv.1" % tmp in p.stdout, "make uninstall does not remove the man page")


CASES = [case_store_finds_its_model, case_store_wrong_model_says_what_to_do, case_store_get_verifies_by_default,
         case_store_gc_reports_rematerialised, case_text_that_cannot_round_trip, case_empty_input_refused,
         case_perplexity_tiny_window, case_context_beyond_training_warns, case_ignored_gguf_key_warns,
         case_os_errors_named, case_no_drafts_line_without_drafting, case_install_deps_help, case_man_page]

if __name__ == "__main__":
    sys.exit(run_cases(Reporter("test_ux"), CASES, "seqkv-ux-"))
