#!/usr/bin/env python3
"""Install the Debian packages that ship the public-domain English text, extract and clean
it, and write documents split into train / validation.

    sudo python3 tools/train_default/prepare_data.py --out data/default_model   [--no-install]

Output (never committed; the folder is for the next steps):
    OUT/train.jsonl, OUT/val.jsonl   one {"source": ..., "text": ...} per line
    OUT/stats.json                   documents and characters per source and split

Sources (Debian 12 packages; licences in assets/default-model/MODEL_CARD.md):
    bible-kjv-text + bible-kjv   King James Version (dumped with the `bible` program)
    sword-text-web + libsword-utils   World English Bible with Deuterocanon (mod2imp, OSIS)
    r-cran-janeaustenr (+ R)     Jane Austen's six novels (austen_books())
    r-cran-tokenizers            Moby Dick (data(mobydick)); Project Gutenberg header/licence cut
    jargon-text                  The Jargon File 4.4.7 (plain text)
    fortunes-min                 the `fortunes`, `literature` and `riddles` fortune files

Documents are chapters (Bibles, novels), Jargon File paragraphs grouped in ~2 kB blocks, and
single fortunes. The split is by document: a document goes to validation when
crc32(source + index) % 100 < VAL_PERCENT, so it is deterministic and independent of order.
"""

import argparse
import gzip
import html
import json
import os
import re
import subprocess
import sys
import zlib

PACKAGES = ["bible-kjv-text", "bible-kjv", "sword-text-web", "libsword-utils",
            "r-cran-janeaustenr", "r-cran-tokenizers", "r-base-core", "jargon-text", "fortunes-min"]
VAL_PERCENT = 2


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def install():
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends"] + PACKAGES,
                   check=True, env=env, stdout=subprocess.DEVNULL)


def norm_space(s):
    return re.sub(r"[ \t\u00a0]+", " ", s).strip()


def paragraphs(lines):
    """Unwrap hard-wrapped text: blank lines separate paragraphs."""
    out, cur = [], []
    for ln in lines:
        if ln.strip():
            cur.append(ln.strip())
        elif cur:
            out.append(norm_space(" ".join(cur)))
            cur = []
    if cur:
        out.append(norm_space(" ".join(cur)))
    return out


def clean(s):
    s = s.replace("\r", "").replace("\ufeff", "")
    s = s.replace("_", "")          # Gutenberg italics markers
    return s


def kjv():
    """`bible Gen1:1-Rev22:21`: 'Book N' headings, '  V text' verses hard-wrapped."""
    raw = sh(["bible", "-l1000000", "Gen1:1-Rev22:21"])
    docs, head, verses = [], None, []
    for ln in raw.splitlines():
        if not ln.strip():
            continue
        m = re.match(r"^\s+(\d+) (.*)$", ln)
        if m:
            verses.append(m.group(2).strip())
        elif re.match(r"^\S.* \d+$", ln):
            if head and verses:
                docs.append(head + "\n\n" + " ".join(verses))
            head, verses = ln.strip(), []
        else:                                 # continuation of a wrapped verse
            verses[-1] += " " + ln.strip()
    if head and verses:
        docs.append(head + "\n\n" + " ".join(verses))
    return [norm_space_keep_nl(d) for d in docs]


def norm_space_keep_nl(d):
    return "\n".join(norm_space(x) for x in d.split("\n"))


def web():
    """mod2imp engWEB2015eb: '$$$Book C:V' keys then OSIS text; footnotes dropped."""
    raw = sh(["mod2imp", "engWEB2015eb"])
    chapters = {}
    order = []
    key = None
    for ln in raw.splitlines():
        if ln.startswith("$$$"):
            key = ln[3:].strip()
            continue
        m = re.match(r"^(.*) (\d+):(\d+)$", key or "")
        if not m or int(m.group(2)) == 0 or int(m.group(3)) == 0:
            continue                           # prefaces, book and chapter headings
        t = re.sub(r"<note\b.*?</note>", "", ln, flags=re.S)
        t = re.sub(r"<title\b.*?</title>", "", t, flags=re.S)
        t = re.sub(r"<[^>]+>", "", t)
        t = norm_space(html.unescape(t))
        if not t:
            continue
        ch = f"{m.group(1)} {m.group(2)}"
        if ch not in chapters:
            chapters[ch] = []
            order.append(ch)
        chapters[ch].append(t)
    return [ch + "\n\n" + norm_space(" ".join(chapters[ch])) for ch in order]


def rscript(expr):
    return sh(["Rscript", "-e", expr])


def austen():
    raw = rscript('library(janeaustenr); b <- austen_books(); '
                  'for (i in seq_len(nrow(b))) cat(as.character(b$book[i]), "\\t", b$text[i], "\\n", sep="")')
    books = {}
    for ln in raw.split("\n"):
        if "\t" not in ln:
            continue
        book, text = ln.split("\t", 1)
        books.setdefault(book, []).append(clean(text))
    docs = []
    for book, lines in books.items():
        chap = []
        for p in paragraphs(lines):
            if re.match(r"^(CHAPTER|Chapter) [IVXLC\d]+\.?$", p) and chap:
                docs.append("\n\n".join(chap))
                chap = []
            chap.append(p)
        if chap:
            docs.append("\n\n".join(chap))
    return [d for d in docs if len(d) > 200]


def mobydick():
    raw = rscript('data(mobydick, package="tokenizers"); cat(mobydick)')
    raw = clean(raw)
    s = raw.find("CHAPTER 1. Loomings.")
    s = raw.find("CHAPTER 1. Loomings.", s + 1) if raw.find("CHAPTER 1. Loomings.", s + 1) > 0 else s
    e = raw.find("End of Project Gutenberg")
    if e < 0:
        e = raw.find("*** END OF")
    body = raw[s:e]
    docs, chap = [], []
    for p in paragraphs(body.split("\n")):
        if re.match(r"^(CHAPTER \d+\.|Epilogue)", p) and chap:
            docs.append("\n\n".join(chap))
            chap = []
        chap.append(p)
    if chap:
        docs.append("\n\n".join(chap))
    return docs


def jargon():
    raw = gzip.open("/usr/share/doc/jargon-text/jargon.txt.gz", "rt", encoding="utf-8").read()
    paras = [p for p in paragraphs(raw.split("\n"))
             if len(p) > 40 and not re.search(r"[\u2500-\u257f]", p)]
    docs, cur = [], []
    for p in paras:
        cur.append(p)
        if sum(len(x) for x in cur) > 2000:
            docs.append("\n\n".join(cur))
            cur = []
    if cur:
        docs.append("\n\n".join(cur))
    return docs


def fortunes():
    docs = []
    for name in ("fortunes", "literature", "riddles"):
        raw = open(f"/usr/share/games/fortunes/{name}", encoding="utf-8", errors="replace").read()
        for f in raw.split("\n%\n"):
            f = "\n".join(x.rstrip() for x in f.replace("\t", "    ").strip("\n").split("\n"))
            if 20 < len(f) < 1500 and f.strip() != "%":
                docs.append(f)
    return docs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="data/default_model")
    ap.add_argument("--no-install", action="store_true")
    a = ap.parse_args()
    if not a.no_install:
        install()
    os.makedirs(a.out, exist_ok=True)
    sources = [("kjv", kjv), ("web", web), ("austen", austen), ("mobydick", mobydick),
               ("jargon", jargon), ("fortunes", fortunes)]
    stats = {}
    with open(os.path.join(a.out, "train.jsonl"), "w") as ft, open(os.path.join(a.out, "val.jsonl"), "w") as fv:
        for name, fn in sources:
            docs = fn()
            st = {"train_docs": 0, "val_docs": 0, "train_chars": 0, "val_chars": 0}
            for i, d in enumerate(docs):
                split = "val" if zlib.crc32(f"{name}:{i}".encode()) % 100 < VAL_PERCENT else "train"
                (fv if split == "val" else ft).write(json.dumps({"source": name, "text": d}) + "\n")
                st[split + "_docs"] += 1
                st[split + "_chars"] += len(d)
            stats[name] = st
            print(name, st, flush=True)
    json.dump(stats, open(os.path.join(a.out, "stats.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
