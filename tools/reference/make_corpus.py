#!/usr/bin/env python3
"""Builds the tokenizer test corpus, tests/data/tokenizer/corpus.bin.xz, deterministically.

Documents, about 11 MB in all:
  * the King James Bible (public domain; Debian package bible-kjv-text), one chapter per document;
  * code: abseil headers (Apache-2.0; Debian libabsl-dev), nlohmann/json.hpp (MIT; Debian
    nlohmann-json3-dev), Python standard library modules (PSF licence);
  * other scripts: CPython's CJK codec test texts (PSF licence), Unicode's NormalizationTest.txt
    turned into characters and emoji-test.txt (Unicode licence; Debian unicode-data);
  * synthetic text made here from a seeded generator: words of many scripts, emoji sequences,
    whitespace runs, control characters, digits of several systems, contractions, added-token
    strings embedded in text;
  * a few documents with invalid UTF-8 bytes spliced in (the test tokenizes them after the same
    U+FFFD replacement Python's bytes.decode(errors="replace") does).

Format (before xz): b"RTKC", u32 document count, then per document u32 byte length and bytes.
Needs: apt-get install bible-kjv unicode-data libabsl-dev nlohmann-json3-dev
"""
import bz2
import lzma
import os
import pathlib
import random
import struct
import subprocess
import sys

OUT = pathlib.Path("tests/data/tokenizer/corpus.bin.xz")


def kjv_chapters():
    text = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True,
                          check=True).stdout
    chapter, current = [], None
    for line in text.splitlines(keepends=True):
        key = line.split(":", 1)[0]
        if key != current and chapter:
            yield "".join(chapter)
            chapter = []
        current = key
        chapter.append(line)
    if chapter:
        yield "".join(chapter)


def files_under(root, pattern, budget):
    used = 0
    for p in sorted(pathlib.Path(root).rglob(pattern)):
        if used >= budget:
            break
        data = p.read_bytes()
        used += len(data)
        yield data.decode("utf-8", errors="replace")


def unicode_docs():
    lines = bz2.open("/usr/share/unicode/NormalizationTest.txt.bz2", "rt", encoding="utf-8")
    chunk = []
    for line in lines:
        if not line.strip() or line.startswith(("#", "@")):
            continue
        cols = line.split(";")[:5]
        chunk.append(" ".join("".join(chr(int(cp, 16)) for cp in c.split()) for c in cols) + "\n")
        if len(chunk) == 400:
            yield "".join(chunk)
            chunk = []
    if chunk:
        yield "".join(chunk)
    emoji = pathlib.Path("/usr/share/unicode/emoji/emoji-test.txt").read_text(encoding="utf-8")
    for i in range(0, len(emoji), 20000):
        yield emoji[i:i + 20000]
    cjk = pathlib.Path(sys.base_prefix, "lib", f"python{sys.version_info.major}."
                       f"{sys.version_info.minor}", "test", "cjkencodings")
    for p in sorted(cjk.glob("*-utf8.txt")):
        yield p.read_text(encoding="utf-8")


SCRIPTS = [
    (0x0041, 0x005A), (0x0061, 0x007A), (0x00C0, 0x00FF), (0x0100, 0x017F), (0x0391, 0x03C9),
    (0x0410, 0x044F), (0x05D0, 0x05EA), (0x0621, 0x064A), (0x0905, 0x0939), (0x0E01, 0x0E2E),
    (0x3041, 0x3096), (0x30A1, 0x30FA), (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0x10A0, 0x10FA),
    (0x0531, 0x0556), (0x1200, 0x1248), (0x0B85, 0x0BB9), (0x1D400, 0x1D4FF), (0x20000, 0x2A6DF),
]
MARKS = [0x0300, 0x0301, 0x0308, 0x0327, 0x093C, 0x0E31, 0x064B, 0x20DD]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\n\n", " \n", "\u00a0", "\u3000", "\u2028", "\u0085",
          "\u2009", "\u200b", "\x0b", "\x0c", "    ", "\t\t\n  "]
DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "０１２３４５６７８９", "①②③", "ⅠⅡⅢⅣ", "½¾"]
PUNCT = list(".,;:!?-—–()[]{}<>\"'`~@#$%^&*_+=|\\/«»“”‘’…·、。「」！？") + ["...", "!!", "?!", "--"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🏳️‍🌈", "❤️", "🤖", "🧑🏿‍🚀", "☕", "🎉🎉", "©️", "1️⃣"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL", "'D",
                "’s"]
ADDED = ["<|endoftext|>", "<s>", "</s>", "<unk>", "<|im_start|>", "<|im_end|>", "[MASK]",
         "<tool_call>", "</tool_call>", "<|endoftext", "<s", "[MASK ]"]


def synthetic_word(rng):
    lo, hi = rng.choice(SCRIPTS)
    word = "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 9)))
    if rng.random() < 0.1:
        word += chr(rng.choice(MARKS))
    if rng.random() < 0.08:
        word += rng.choice(CONTRACTIONS)
    return word


def synthetic_doc(rng, size):
    parts, used = [], 0
    while used < size:
        r = rng.random()
        if r < 0.55:
            piece = synthetic_word(rng)
        elif r < 0.65:
            d = rng.choice(DIGITS)
            piece = "".join(rng.choice(d) for _ in range(rng.randint(1, 7)))
        elif r < 0.75:
            piece = rng.choice(PUNCT)
        elif r < 0.82:
            piece = rng.choice(EMOJI)
        elif r < 0.84:
            piece = chr(rng.choice(list(range(0, 32)) + [0x7F, 0xAD, 0xFEFF, 0x200D, 0xFFFD]))
        elif r < 0.86:
            piece = rng.choice(ADDED)
        else:
            piece = ""
        piece += rng.choice(SPACES) if rng.random() < 0.7 else ""
        parts.append(piece)
        used += len(piece)
    return "".join(parts)


def with_added_tokens(rng, text):
    """English text with added-token strings spliced in at word boundaries and inside words."""
    words = text.split(" ")
    for _ in range(max(1, len(words) // 40)):
        i = rng.randrange(len(words))
        sep = rng.choice(["", " ", "  ", "\n"])
        words[i] = words[i] + sep + rng.choice(ADDED) + rng.choice(["", " ", "\t"])
    return " ".join(words)


def corrupt(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 30)):
        pos = rng.randrange(len(data) + 1)
        junk = rng.choice([b"\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80",
                           b"\xc0\xaf", b"\x80\x80", b"\xf4\x90\x80\x80", b"\xfe\xfe", b"\xe0\x80"])
        data[pos:pos] = junk
    return bytes(data)


def main():
    rng = random.Random(20261129)
    docs = []
    chapters = list(kjv_chapters())
    for i, ch in enumerate(chapters):
        docs.append(with_added_tokens(rng, ch) if i % 25 == 3 else ch)
    docs += files_under("/usr/include/absl", "*.h", 2_000_000)
    docs += files_under("/usr/include/nlohmann", "json.hpp", 1_000_000)
    stdlib = pathlib.Path(os.__file__).parent
    docs += files_under(stdlib / "email", "*.py", 400_000)
    docs += files_under(stdlib / "asyncio", "*.py", 800_000)
    docs += list(unicode_docs())
    for _ in range(400):
        docs.append(synthetic_doc(rng, rng.choice([40, 300, 2000, 6000])))
    docs += ["", " ", "\n", "  \n\t ", "a", "▁", "<s>", "<s><s>", " <s> x</s>", "hello world",
             "Hello\r\nWorld", "\u00a0\u00a0x", "x\u0085y", "don't I'LL WE'VE", "ﬁ ﬂ Å Å"]
    raw = [d.encode("utf-8") for d in docs]
    # Spread the order so that every stretch of the file mixes kinds of text.
    rng.shuffle(raw)
    for i in range(0, len(raw), 37):
        raw[i] = corrupt(rng, raw[i])
    out = bytearray(b"RTKC" + struct.pack("<I", len(raw)))
    for d in raw:
        out += struct.pack("<I", len(d)) + d
    OUT.write_bytes(lzma.compress(bytes(out), preset=9 | lzma.PRESET_EXTREME))
    print(f"{len(raw)} documents, {len(out)} bytes, {OUT.stat().st_size} compressed",
          file=sys.stderr)


if __name__ == "__main__":
    main()
