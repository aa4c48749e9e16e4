#!/usr/bin/python3
"""What a new user hit (issue 40, "What a new user hit"), each checked through the CLI and
the scripts, on the bundled model (no shared assets needed). A few seconds.

  help_lists_the_codec_table   compress --help lists every codec of the library's table
                               (skv_codec_at) once, and claims no order between cm and
                               cmv (cmv was larger than cm on 3 of 4 texts tried)
  usage_errors_list_the_codecs a bad --codec names every codec; generate refuses a codec
                               that needs a spec or a dictionary it does not take
  report_says_what_the_cross_entropy_is  compress's report calls the model's cross-entropy
                               its code length for those tokens, not "the floor" (the
                               payload can come in under it)
  cmvd_restore_names_the_option  a cmvd file restored without its dictionary is refused
                               with --cm-dict named, before the model loads; inspect
                               shows the dictionary's hash, which a restore with the
                               right text then meets
  install_deps_waits_for_the_lock  scripts/install-deps.sh, with apt-get failing twice on a
                               held lock (fakes in PATH), waits and installs instead of
                               failing at once; a lock held past APT_LOCK_WAIT fails
  run_sh_counts_shared_skips  tests/run.sh ends, on a clone without the shared assets, by
                               counting the cases skipped for want of them (TESTS= runs a
                               planted test alone); with none skipped it says nothing
Prints PASS/FAIL/SKIP lines for tests/run.sh.
"""
import os
import re
import stat
import subprocess
import sys

from clitest import ROOT, Reporter, check, run
from testenv import run_cases

NAME = "test_newuser"
REPORTER = Reporter(NAME)
CODECS = ["model", "tokens", "cm", "cmv", "cmvd", "f16", "q8", "q4", "tq2", "tq3", "tq4", "kvq", "pred", "kvtc"]


def text_file(tmp, name, n_bytes, skip=0):
    """A piece of the README (plain English: the bundled model's vocabulary covers it)."""
    src = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    text = re.sub(r"[^A-Za-z0-9 .,;:'()\n-]", " ", src)[skip:skip + n_bytes]
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def help_lists_the_codec_table(tmp):
    rc, out, err = run("compress", "--help")
    check(rc == 0, "compress --help: exit %d %s" % (rc, err))
    block = out.split("      --codec CODEC", 1)[1].split("\n      --cm-dict", 1)[0]  # --codec's help, to the next option
    listed = re.findall(r"^\s*([a-z0-9]+): ", block, re.M)
    check(listed == CODECS, "compress --help lists %s, the table has %s" % (listed, CODECS))
    cmv = " ".join(block.split("cmv:")[1].split("cmvd:")[0].split())
    check("smaller than cm" not in cmv, "--help still claims cmv is smaller than cm: %r" % cmv)


def usage_errors_list_the_codecs(tmp):
    rc, out, err = run("compress", "-f", "README.md", "-o", os.path.join(tmp, "x.skv"), "--codec", "zz")
    check(rc == 2 and " ".join(CODECS) in err, "bad --codec: exit %d, %r" % (rc, err))
    rc, out, err = run("generate", "-p", "In the", "-n", "2", "-o", os.path.join(tmp, "g.skv"), "--codec", "kvq")
    check(rc == 2 and "cmvd" not in err.split("one of")[1] and "kvtc" not in err.split("one of")[1] and "pred" in err,
          "generate --codec kvq: %d %r" % (rc, err))


def report_says_what_the_cross_entropy_is(tmp):
    t = text_file(tmp, "r.txt", 1500)
    rc, out, err = run("compress", "-f", t, "--lossy-text", "--segment", "-o", os.path.join(tmp, "r.skv"))
    check(rc == 0, "compress: exit %d %s" % (rc, err))
    rep = out + err
    check("the floor" not in rep, "the report still calls the cross-entropy the floor: %s" % rep)
    check("code length" in rep, "the report does not say what the cross-entropy is: %s" % rep)


def cmvd_restore_names_the_option(tmp):
    t, d = text_file(tmp, "t.txt", 1500), text_file(tmp, "d.txt", 2500, skip=3000)
    f = os.path.join(tmp, "c.skv")
    rc, out, err = run("compress", "-f", t, "--lossy-text", "--segment", "--codec", "cmvd", "--cm-dict", d, "-o", f)
    check(rc == 0, "compress --codec cmvd: exit %d %s" % (rc, err))
    rc, out, err = run("restore", f, "-o", os.path.join(tmp, "back.txt"))
    check(rc == 2 and "--cm-dict" in err and "skv_restore_params" not in err,
          "restore without the dictionary: exit %d %r" % (rc, err))
    rc, out, err = run("inspect", f)
    m = re.search(r"^dictionary:\s+([0-9a-f]{16}) \((\d+) ids", out, re.M)
    check(rc == 0 and m, "inspect shows no dictionary hash: %s" % out)
    rc, out, err = run("restore", f, "--cm-dict", d, "-o", os.path.join(tmp, "back.txt"))
    check(rc == 0, "restore with the dictionary: exit %d %s" % (rc, err))
    wrong = text_file(tmp, "w.txt", 2500, skip=100)
    rc, out, err = run("restore", f, "--cm-dict", wrong, "-o", os.path.join(tmp, "back2.txt"))
    check(rc != 0 and m.group(1) in err, "a wrong dictionary's refusal does not name the file's %s: %r" % (m.group(1), err))


def fake_bin(tmp, name, body):
    path = os.path.join(tmp, "bin", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def install_deps_waits_for_the_lock(tmp):
    """apt-get fails with dpkg's lock message while a counter file says the lock is held."""
    held = os.path.join(tmp, "held")
    log = os.path.join(tmp, "apt.log")
    fake_bin(tmp, "dpkg-query", "exit 1\n")  # every package missing
    fake_bin(tmp, "sudo", 'exec "$@"\n')
    fake_bin(tmp, "node", "exit 0\n")
    fake_bin(tmp, "npm", "exit 0\n")
    fake_bin(tmp, "apt-get",
             'n=$(cat %s 2>/dev/null || echo 0)\n'
             'if [ "$n" -gt 0 ]; then echo $((n - 1)) > %s\n'
             '  echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2\n'
             '  exit 100; fi\n'
             'echo "$@" >> %s\n' % (held, held, log))
    env = dict(os.environ, PATH=os.path.join(tmp, "bin") + ":" + os.environ["PATH"], APT_LOCK_POLL="0",
               APT_LOCK_WAIT="10")
    script = os.path.join(ROOT, "scripts", "install-deps.sh")
    with open(held, "w") as f:
        f.write("2")
    p = subprocess.run(["sh", script], env=env, capture_output=True, timeout=60)
    err = p.stderr.decode()
    calls = open(log).read() if os.path.exists(log) else ""
    check(p.returncode == 0 and "waiting for it" in err, "install-deps.sh with a held lock: exit %d %s" % (p.returncode, err))
    check("update" in calls and "install" in calls and "liblmdb-dev" in calls, "apt-get did not run: %r" % calls)
    with open(held, "w") as f:
        f.write("1000")
    p = subprocess.run(["sh", script], env=dict(env, APT_LOCK_WAIT="3"), capture_output=True, timeout=60)
    check(p.returncode != 0 and "still held" in p.stderr.decode(), "a lock held too long: exit %d %s" %
          (p.returncode, p.stderr.decode()))


def run_sh_counts_shared_skips(tmp):
    build = os.path.join(tmp, "fakebuild")
    os.makedirs(os.path.join(build, "tests"))
    for name, lines in (("test_planted", "PASS test_planted:a\nSKIP test_planted:b: ../shared/models/stories260K missing\n"
                                          "SKIP test_planted:c: no redis-server\n"),
                        ("test_planted2", "PASS test_planted2:a\n")):
        path = os.path.join(build, "tests", name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\nprintf '%s'\n" % lines)
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    env = {k: v for k, v in os.environ.items() if k != "SEQKV_REQUIRE_SHARED"}
    for tests, want in (("test_planted", "(1 cases skipped for want of the shared assets"), ("test_planted2", None)):
        p = subprocess.run([os.path.join(ROOT, "tests", "run.sh"), build], env=dict(env, TESTS=tests),
                           capture_output=True, text=True, timeout=60)
        out = p.stdout.splitlines()
        check(out and out[-1] in ("2 passed, 0 failed", "1 passed, 0 failed"), "run.sh's last line: %r" % out[-1:])
        check("test_planted2" not in p.stdout or tests == "test_planted2", "TESTS= ran the others too: %r" % p.stdout)
        if want:
            check(any(l.startswith(want) for l in out), "run.sh did not count the shared skips: %r" % p.stdout)
        else:
            check("for want of the shared assets" not in p.stdout, "a count with no shared skip: %r" % p.stdout)


CASES = [help_lists_the_codec_table, usage_errors_list_the_codecs, report_says_what_the_cross_entropy_is,
         cmvd_restore_names_the_option, install_deps_waits_for_the_lock, run_sh_counts_shared_skips]


def main():
    return run_cases(REPORTER, CASES, "seqkv_newuser_")


if __name__ == "__main__":
    sys.exit(main())
