#!/usr/bin/python3
"""Build the multi-source training corpus of the GPU model (issue 47), its BPE
tokenizer, and the packed token streams that travel to the device machine.

One command (everything outside git, in a cache folder, except the pack and
the manifest):

    tools/train/build_corpus.py                 # ~/.cache/seqkv-train, pack in tools/train/pack

Steps:
  1. Sources.  Debian packages fetched with `apt-get download` (no root, no
     install) and unpacked with `dpkg-deb -x` into CACHE/x/; the KJV from the
     installed `bible` command (bible-kjv), as prepare_data.py reads it.
     Licences: docs/train.md.  Each source yields documents (doc id, text):
       kjv       one chapter per document (verse references dropped)
       fortunes  one fortune per document (fortunes + fortunes-min; the
                 offensive set is a separate package and not used)
       jargon    one Jargon File entry (paragraph group) per document
       gcide     one dictionary entry per document (gcide.dict.dz is plain text)
       linuxdoc  one Documentation/ file per document (linux-doc-6.1, .rst/.txt)
       pydoc     one reStructuredText source per document (python3.11-doc)
  2. Cleaning: UTF-8 only (a document that does not decode is dropped), tabs
     expanded to 8 columns, trailing blanks stripped, runs of blank lines cut to
     one, documents of under 32 characters dropped.
  3. Held-out split per source, before any dedup or sampling: KJV by whole
     books (tools/train/heldout_books.txt, the same books as kjv-4m); other
     sources by document: sha256("SRC/DOCID") mod 1000 < 20 (2 %), at most
     HELDOUT_CHARS characters per source.  Held-out documents are never used
     for tokenizer training or for training.
  4. Dedup, held-out documents first, then training documents in a fixed
     pseudo-random order: (a) exact: a document whose whole text was seen is
     dropped; (b) near-exact: a paragraph (blank-line separated) whose
     normalised form (lower case, only letters and digits kept) has been seen
     is dropped, when that form has >= 24 characters (short paragraphs such as
     "Example::" are structure, not content).  Held-out goes first, so no
     held-out paragraph survives in training.
  5. Training documents are taken, in that same order, up to a per-source
     character cap (CAPS) so that the pack fits the device's 64 MiB tree.
  6. Tokenizer: SentencePiece BPE (train_tokenizer.py settings, so llama.cpp's
     SPM algorithm reproduces it), trained on every line of the training text
     of a deterministic 1-in-K line sample (<= SPM_CHARS characters).
  7. Encoding.  Documents are joined by "\\n\\n\\n" (inside a document there
     is at most one blank line).  Each split file is encoded as one text would
     be by llama.cpp: the training stream is built per document as
     encode("\\n" + doc)[2:] (dropping "\\u2581", "\\n"), which equals the
     whole-text encoding because no piece contains a newline; this identity is
     checked on the held-out text of every source.
  8. Pack (PACK, default tools/train/pack, git-ignored, carried to the device):
       train.u16.xz            all sources' training stream, documents
                               interleaved in the pseudo-random order
       heldout-SRC.u16.xz      one held-out stream per source
       heldout-SRC.txt.xz      its text (for llama.cpp / seqkv perplexity)
       vocab.json.xz           tokens, scores, types, special ids (export_gguf)
       tokenizer.model         the SentencePiece model
       manifest.json           sources, package versions, .deb sha256,
                               documents, characters, tokens, file sha256
     A .u16 stream is little-endian uint16 ids, byte planes split (all low
     bytes, then all high bytes) before xz: that compresses ~15 % better.
     tools/train/corpus-manifest.json (committed) is a copy of manifest.json.

Tiny mode for tests: --text SRC=FILE (repeatable) uses those files as sources
(documents = blank-line-separated paragraphs) instead of the packages.
"""
import argparse
import glob
import gzip
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "seqkv-train")
PACKAGES = {  # source -> Debian binary packages it reads
    "fortunes": ["fortunes", "fortunes-min"],
    "jargon": ["jargon-text"],
    "gcide": ["dict-gcide"],
    "linuxdoc": ["linux-doc-6.1"],
    "pydoc": ["python3.11-doc"],
}
LICENCES = {
    "kjv": "public domain (bible-kjv)",
    "fortunes": "BSD-4-Clause-UC (fortune-mod data; fortunes, fortunes-min)",
    "jargon": "GPL-2 (jargon-text; Jargon File 4.4.7)",
    "gcide": "GPL-2+ (dict-gcide; GCIDE, from Webster's 1913 + WordNet)",
    "linuxdoc": "GPL-2 (linux-doc-6.1; the kernel's Documentation/)",
    "pydoc": "PSF-2.0 (python3.11-doc; the docs' reStructuredText sources)",
}
SOURCES = ["kjv", "fortunes", "jargon", "gcide", "linuxdoc", "pydoc"]
# Training characters per source (~4.2 characters per token): sized so that the
# pack stays near 16 MiB.  KJV, fortunes, jargon and pydoc are taken whole.
CAPS = {"kjv": 5_000_000, "fortunes": 5_000_000, "jargon": 2_000_000,
        "gcide": 12_000_000, "linuxdoc": 18_000_000, "pydoc": 12_000_000}
HELDOUT_PERMILLE = 20
HELDOUT_CHARS = 200_000
SPM_CHARS = 12_000_000
MIN_DOC = 32
MIN_NEAR = 24
DOC_SEP = "\n\n\n"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def order_key(src, doc_id):
    return hashlib.sha256(("%s/%s" % (src, doc_id)).encode()).digest()


# ---- 1. sources -------------------------------------------------------------

def fetch_debs(cache, pkgs):
    """apt-get download each package into CACHE/debs, unpack into CACHE/x/PKG.
    -> {pkg: (version, sha256 of the .deb)}"""
    debs = os.path.join(cache, "debs")
    os.makedirs(debs, exist_ok=True)
    info = {}
    for p in pkgs:
        have = glob.glob(os.path.join(debs, p + "_*.deb"))
        if not have:
            subprocess.run(["apt-get", "download", p], cwd=debs, check=True,
                           stdout=subprocess.DEVNULL)
            have = glob.glob(os.path.join(debs, p + "_*.deb"))
        if len(have) != 1:
            sys.exit("build_corpus: expected one %s .deb in %s, found %d" % (p, debs, len(have)))
        deb = have[0]
        ver = subprocess.run(["dpkg-deb", "-f", deb, "Version"], check=True,
                             stdout=subprocess.PIPE).stdout.decode().strip()
        dest = os.path.join(cache, "x", p)
        if not os.path.isdir(dest):
            os.makedirs(dest + ".tmp", exist_ok=True)
            subprocess.run(["dpkg-deb", "-x", deb, dest + ".tmp"], check=True)
            os.rename(dest + ".tmp", dest)
        info[p] = {"version": ver, "deb": os.path.basename(deb), "deb_sha256": sha256_file(deb)}
    return info


def docs_kjv(_x):
    import prepare_data as P
    order, chapters = P.read_bible()
    for book, chap in order:
        yield "%s%d" % (book, chap), " ".join(chapters[(book, chap)])


def docs_fortunes(x):
    files = []
    for p in PACKAGES["fortunes"]:
        files += glob.glob(os.path.join(x, p, "usr/share/games/fortunes/*"))
    for path in sorted(files, key=os.path.basename):
        if path.endswith(".dat") or os.path.islink(path) or not os.path.isfile(path):
            continue
        raw = open(path, "rb").read()
        for i, part in enumerate(re.split(rb"\n%\n", raw)):
            yield "%s/%d" % (os.path.basename(path), i), part


def docs_jargon(x):
    path = os.path.join(x, "jargon-text/usr/share/doc/jargon-text/jargon.txt.gz")
    text = gzip.open(path, "rb").read().decode("utf-8")
    # Entries start at a line "   :Headword: ..." (the whole text is indented
    # by three spaces, removed here).  What precedes the first entry (front
    # matter and the headword index) is not used.
    parts = re.split(r"\n(?=   :[^\n:]+:)", text)
    for i, part in enumerate(parts[1:]):
        yield "e%d" % i, textwrap.dedent(part)


def docs_gcide(x):
    path = os.path.join(x, "dict-gcide/usr/share/dictd/gcide.dict.dz")
    text = gzip.open(path, "rb").read()   # dictzip is gzip-compatible
    # Entries are blank-line separated blocks whose first line is at the margin
    # ("Word \\Pro*nun"ci*a`tion\\, n. ..."), continuation lines indented.
    cur, n = [], 0
    for para in text.split(b"\n\n"):
        if para[:1] not in (b" ", b"") and cur:
            yield "e%d" % n, b"\n\n".join(cur)
            cur, n = [], n + 1
        cur.append(para)
    if cur:
        yield "e%d" % n, b"\n\n".join(cur)


def docs_linuxdoc(x):
    base = os.path.join(x, "linux-doc-6.1/usr/share/doc/linux-doc-6.1/Documentation")
    for path in sorted(glob.glob(os.path.join(base, "**", "*.gz"), recursive=True)):
        rel = os.path.relpath(path, base)
        name = rel[:-3]
        if not (name.endswith(".rst") or name.endswith(".txt") or "." not in os.path.basename(name)):
            continue
        yield name, gzip.open(path, "rb").read()


def docs_pydoc(x):
    base = os.path.join(x, "python3.11-doc/usr/share/doc/python3.11/html/_sources")
    for path in sorted(glob.glob(os.path.join(base, "**", "*.txt"), recursive=True)):
        yield os.path.relpath(path, base), open(path, "rb").read()


def docs_textfile(path):
    text = open(path, "rb").read()
    for i, part in enumerate(re.split(rb"\n\s*\n", text)):
        yield "p%d" % i, part


READERS = {"kjv": docs_kjv, "fortunes": docs_fortunes, "jargon": docs_jargon,
           "gcide": docs_gcide, "linuxdoc": docs_linuxdoc, "pydoc": docs_pydoc}


# ---- 2.-5. cleaning, split, dedup, caps ---------------------------------------

def clean(raw):
    """Bytes or str -> cleaned str, or None when it is not UTF-8 or too short."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    lines = [ln.expandtabs(8).rstrip() for ln in raw.replace("\r\n", "\n").split("\n")]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")
    # Control characters other than newline would only become byte tokens.
    text = re.sub(r"[\x00-\x09\x0b-\x1f\x7f]", "", text)
    return text if len(text) >= MIN_DOC else None


NONWORD = re.compile(r"[\W_]+", re.UNICODE)


def near_key(para):
    k = NONWORD.sub("", para.lower())
    return hashlib.sha256(k.encode()).digest()[:12] if len(k) >= MIN_NEAR else None


class Dedup:
    def __init__(self):
        self.docs, self.paras = set(), set()
        self.dropped_docs = self.dropped_paras = 0

    def __call__(self, text):
        h = hashlib.sha256(text.encode()).digest()[:12]
        if h in self.docs:
            self.dropped_docs += 1
            return None
        self.docs.add(h)
        keep = []
        for para in text.split("\n\n"):
            k = near_key(para)
            if k is not None:
                if k in self.paras:
                    self.dropped_paras += 1
                    continue
                self.paras.add(k)
            keep.append(para)
        out = "\n\n".join(keep).strip("\n")
        return out if len(out) >= MIN_DOC else None


def split_docs(src, docs, heldout_books, permille=HELDOUT_PERMILLE):
    """-> (heldout [(key, id, text)], train [...]) each in pseudo-random order."""
    ho, tr = [], []
    for doc_id, raw in docs:
        text = clean(raw)
        if text is None:
            continue
        key = order_key(src, doc_id)
        if src == "kjv":
            is_ho = re.match(r"^([1-3]?[A-Za-z]+)", doc_id).group(1) in heldout_books
        else:
            is_ho = int.from_bytes(key[:8], "big") % 1000 < permille
        (ho if is_ho else tr).append((key, doc_id, text))
    if src != "kjv":   # the KJV's held-out books stay in canonical order
        ho.sort()
    tr.sort()
    return ho, tr


# ---- 6.-8. tokenizer, encoding, pack ------------------------------------------

def write_u16_xz(path, ids):
    a = np.asarray(ids, dtype="<u2")
    planes = a.view(np.uint8).reshape(-1, 2).T.copy()   # low bytes, then high bytes
    with lzma.open(path, "wb", preset=9) as f:
        f.write(np.uint64(len(a)).tobytes())
        f.write(planes.tobytes())


def read_u16_xz(path):
    with lzma.open(path, "rb") as f:
        n = int(np.frombuffer(f.read(8), dtype="<u8")[0])
        planes = np.frombuffer(f.read(), dtype=np.uint8)
    if planes.size != 2 * n:
        raise ValueError("%s: %d bytes for %d ids" % (path, planes.size, n))
    return planes.reshape(2, n).T.copy().view("<u2").reshape(n)


def encode_docs(sp, texts, nl_id, space_id):
    """Token ids of DOC_SEP.join(texts) as llama.cpp would encode "\n" + that
    text, less the leading U+2581 and newline (step 7)."""
    encs = sp.encode(["\n" + t for t in texts], num_threads=os.cpu_count() or 1)
    out = []
    sep = [nl_id] * 3
    for i, e in enumerate(encs):
        if e[:2] != [space_id, nl_id]:
            raise RuntimeError("build_corpus: unexpected encoding prefix %r" % e[:3])
        if i:
            out += sep
        out += e[2:]
    return out


def verify_pack(pack):
    """0 when every file the manifest lists has its size and sha256 (and the
    streams decode to the token counts it gives), else a message."""
    try:
        with open(os.path.join(pack, "manifest.json"), encoding="utf-8") as f:
            man = json.load(f)
        for name, info in sorted(man["files"].items()):
            path = os.path.join(pack, name)
            if os.path.getsize(path) != info["bytes"] or sha256_file(path) != info["sha256"]:
                return "build_corpus: %s differs from the manifest" % path
        if len(read_u16_xz(os.path.join(pack, "train.u16.xz"))) != man["train_tokens"]:
            return "build_corpus: train.u16.xz: token count differs from the manifest"
        for src, s in sorted(man["sources"].items()):
            n = len(read_u16_xz(os.path.join(pack, "heldout-%s.u16.xz" % src)))
            if n != s["heldout_tokens"]:
                return "build_corpus: heldout-%s.u16.xz: %d tokens, manifest %d" % (src, n, s["heldout_tokens"])
    except (OSError, ValueError, KeyError) as e:
        return "build_corpus: pack %s: %s" % (pack, e)
    print("build_corpus: pack %s verified: %d files, %d bytes, %d training tokens"
          % (pack, len(man["files"]), man["pack_bytes"], man["train_tokens"]))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=os.environ.get("SEQKV_TRAIN_CACHE", DEFAULT_CACHE))
    ap.add_argument("--pack", default=os.path.join(HERE, "pack"))
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--text", action="append", default=[], metavar="SRC=FILE",
                    help="tiny mode: use these files as the sources")
    ap.add_argument("--heldout-permille", type=int, default=HELDOUT_PERMILLE)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every source cap")
    ap.add_argument("--manifest-copy", default=None,
                    help="also write the manifest here (the committed copy)")
    ap.add_argument("--verify", metavar="PACK", default=None,
                    help="only check PACK's files against its manifest (needs numpy only)")
    args = ap.parse_args()
    if args.verify:
        sys.exit(verify_pack(args.verify))
    import sentencepiece as spm
    from train_tokenizer import train_spm
    from export_gguf import vocab_from_spm
    import prepare_data as P

    cache = args.cache
    os.makedirs(cache, exist_ok=True)
    manifest = {"format": "seqkv-train-pack-1", "sources": {}, "packages": {},
                "heldout_permille": args.heldout_permille, "heldout_chars": HELDOUT_CHARS,
                "vocab_size": args.vocab, "files": {}}
    if args.text:
        srcs = []
        for spec in args.text:
            name, path = spec.split("=", 1)
            srcs.append((name, lambda _x, p=path: docs_textfile(p), "test text " + path))
    else:
        manifest["packages"] = fetch_debs(cache, [p for s in SOURCES for p in PACKAGES.get(s, [])])
        # The KJV comes from the installed bible-kjv (its text package holds the data).
        ver = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "bible-kjv-text"],
                             stdout=subprocess.PIPE, check=True).stdout.decode().strip()
        manifest["packages"]["bible-kjv-text"] = {"version": ver, "deb": "(installed)"}
        srcs = [(s, READERS[s], LICENCES[s]) for s in SOURCES]
    heldout_books = set(P.read_heldout_list(os.path.join(HERE, "heldout_books.txt")))
    xdir = os.path.join(cache, "x")

    dedup = Dedup()
    per = {}
    for name, reader, lic in srcs:
        ho, tr = split_docs(name, reader(xdir), heldout_books, args.heldout_permille)
        per[name] = {"ho_all": ho, "tr_all": tr, "licence": lic}
    # Held-out first (all sources), so its paragraphs win over training copies.
    for name in per:
        kept, chars = [], 0
        for key, doc_id, text in per[name]["ho_all"]:
            t = dedup(text)
            if t is None or chars + len(t) > HELDOUT_CHARS * args.scale:
                continue
            kept.append(t)
            chars += len(t) + len(DOC_SEP)
        per[name]["ho"] = kept
    for name in per:
        kept, chars, cap = [], 0, CAPS.get(name, 10 ** 12) * args.scale
        for key, doc_id, text in per[name]["tr_all"]:
            if chars >= cap:
                break
            t = dedup(text)
            if t is not None:
                kept.append((key, t))
                chars += len(t) + len(DOC_SEP)
        per[name]["tr"] = kept

    work = os.path.join(cache, "text")
    os.makedirs(work, exist_ok=True)
    # Tokenizer training text: a deterministic line sample of the training text.
    lines = []
    for name in per:
        for _, t in per[name]["tr"]:
            lines += [ln for ln in t.split("\n") if ln.strip()]
    total = sum(len(ln) for ln in lines)
    step = max(1, -(-total // SPM_CHARS))
    with open(os.path.join(work, "spm_train.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines[::step]) + "\n")
    del lines
    train_spm(work, args.vocab, os.path.join(work, "spm_train.txt"))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(work, "tokenizer.model"))
    nl_id, space_id = sp.piece_to_id("<0x0A>"), sp.piece_to_id("\u2581")
    if sp.id_to_piece(space_id) != "\u2581" or nl_id == sp.unk_id():
        sys.exit("build_corpus: the tokenizer lacks the U+2581 or <0x0A> piece")

    os.makedirs(args.pack, exist_ok=True)
    for old in glob.glob(os.path.join(args.pack, "*")):
        os.remove(old)
    mixed = []
    for name in per:
        d = per[name]
        ho_text = DOC_SEP.join(d["ho"]) + "\n"
        ho_ids = sp.encode(ho_text)
        pieces = encode_docs(sp, d["ho"], nl_id, space_id) + [nl_id]
        if sp.encode("\n" + ho_text)[2:] != pieces:
            sys.exit("build_corpus: %s: per-document encoding differs from the whole text" % name)
        write_u16_xz(os.path.join(args.pack, "heldout-%s.u16.xz" % name), ho_ids)
        with lzma.open(os.path.join(args.pack, "heldout-%s.txt.xz" % name), "wb", preset=9) as f:
            f.write(ho_text.encode("utf-8"))
        with open(os.path.join(work, "heldout-%s.txt" % name), "w", encoding="utf-8", newline="\n") as f:
            f.write(ho_text)
        tr_texts = [t for _, t in d["tr"]]
        encs = sp.encode(["\n" + t for t in tr_texts], num_threads=os.cpu_count() or 1)
        pos = 0
        for (key, _), e in zip(d["tr"], encs):
            mixed.append((key, e[2:]))
            pos += len(e) - 2
        del encs
        manifest["sources"][name] = {
            "licence": d["licence"],
            "train_docs": len(d["tr"]), "train_chars": sum(len(t) for t in tr_texts),
            "train_tokens": pos,
            "train_docs_available": len(d["tr_all"]),
            "heldout_docs": len(d["ho"]), "heldout_chars": len(ho_text),
            "heldout_tokens": len(ho_ids)}
        print("build_corpus: %-9s train %6d docs %10d chars %9d tokens; heldout %4d docs %7d chars %6d tokens"
              % (name, len(d["tr"]), manifest["sources"][name]["train_chars"], pos,
                 len(d["ho"]), len(ho_text), len(ho_ids)), flush=True)
    mixed.sort(key=lambda m: m[0])
    stream = []
    for i, (_, e) in enumerate(mixed):
        if i:
            stream += [nl_id] * 3
        stream += e
    del mixed
    write_u16_xz(os.path.join(args.pack, "train.u16.xz"), stream)
    shutil.copy(os.path.join(work, "tokenizer.model"), os.path.join(args.pack, "tokenizer.model"))
    with lzma.open(os.path.join(args.pack, "vocab.json.xz"), "wt", encoding="utf-8", preset=9) as f:
        json.dump(vocab_from_spm(sp), f, ensure_ascii=False)
    manifest["train_tokens"] = len(stream)
    manifest["dedup"] = {"dropped_docs": dedup.dropped_docs, "dropped_paragraphs": dedup.dropped_paras}
    total = 0
    for path in sorted(glob.glob(os.path.join(args.pack, "*"))):
        sz = os.path.getsize(path)
        total += sz
        manifest["files"][os.path.basename(path)] = {"bytes": sz, "sha256": sha256_file(path)}
    manifest["pack_bytes"] = total
    body = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    for dest in [os.path.join(args.pack, "manifest.json")] + ([args.manifest_copy] if args.manifest_copy else []):
        with open(dest, "w", encoding="utf-8") as f:
            f.write(body)
    print("build_corpus: %d training tokens, dedup dropped %d documents %d paragraphs; pack %s %d bytes (%.2f MiB)"
          % (len(stream), dedup.dropped_docs, dedup.dropped_paras, args.pack, total, total / 2 ** 20))


if __name__ == "__main__":
    main()
