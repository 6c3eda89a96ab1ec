#!/usr/bin/env python3
"""Encodes the test corpus with the `tokenizers` library: the golden the C++ tokenizer must match.

For every tokenizer directory under tests/data/tokenizer/ writes golden_<name>.bin.xz:
  b"RTKG", u32 version (1), u32 document count, then per document
  u8 flags (1: add_special_tokens, 2: full ids follow, 4: input was invalid UTF-8 and was decoded
  with errors="replace" first), u32 id count, u64 FNV-1a of the ids (u32 little-endian each),
  u64 FNV-1a of decode(ids, skip_special_tokens=False), u64 FNV-1a of decode(ids, True),
  then the ids as u32 when flag 2 is set (about 1.5 MB of text gets full ids).
Also checks the converted files against the tools they came from (tiktoken, sentencepiece).

Run from the repository root after make_tokenizers.py and make_corpus.py.
"""
import lzma
import pathlib
import struct
import sys

from tokenizers import Tokenizer

DATA = pathlib.Path("tests/data/tokenizer")
NAMES = ["gpt2", "mistral_v1", "mistral_v1_metaspace", "qwen_style"]
FULL_IDS_TEXT_BUDGET = 1_500_000


def fnv1a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def read_corpus():
    data = lzma.decompress((DATA / "corpus.bin.xz").read_bytes())
    assert data[:4] == b"RTKC"
    (n,) = struct.unpack_from("<I", data, 4)
    pos, docs = 8, []
    for _ in range(n):
        (size,) = struct.unpack_from("<I", data, pos)
        docs.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return docs


def cross_check(name, tok, texts):
    """The converted tokenizer.json must agree with the tool its vocabulary came from."""
    added = ["<|endoftext|>", "<s>", "</s>", "<unk>"]
    plain = [t for t in texts if not any(a in t for a in added)]
    if name == "gpt2":
        import tiktoken
    else:
        return
    import base64
    import importlib.util
    spec = importlib.util.find_spec("whisper")
    path = pathlib.Path(spec.submodule_search_locations[0], "assets", "gpt2.tiktoken")
    ranks = {base64.b64decode(t): int(r) for t, r in (l.split() for l in open(path, "rb") if l.strip())}
    enc = tiktoken.Encoding("gpt2", pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
                            mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256})
    bad = sum(enc.encode_ordinary(t) != tok.encode(t, add_special_tokens=False).ids for t in plain)
    print(f"  {name}: {bad} of {len(plain)} documents differ from tiktoken", file=sys.stderr)


def cross_check_spm(tok, texts):
    import importlib.util
    import sentencepiece
    spec = importlib.util.find_spec("mistral_common")
    sp = sentencepiece.SentencePieceProcessor(
        model_file=str(pathlib.Path(spec.submodule_search_locations[0], "data", "tokenizer.model.v1")))
    plain = [t for t in texts if not any(a in t for a in ["<s>", "</s>", "<unk>"])]
    bad = sum(sp.encode(t) != tok.encode(t, add_special_tokens=False).ids for t in plain)
    print(f"  mistral_v1: {bad} of {len(plain)} documents differ from sentencepiece", file=sys.stderr)


def main():
    docs = read_corpus()
    texts, invalid = [], []
    for d in docs:
        try:
            texts.append(d.decode("utf-8"))
            invalid.append(False)
        except UnicodeDecodeError:
            texts.append(d.decode("utf-8", errors="replace"))
            invalid.append(True)
    for name in NAMES:
        tok = Tokenizer.from_file(str(DATA / name / "tokenizer.json"))
        out = bytearray(b"RTKG" + struct.pack("<II", 1, len(texts)))
        full_budget = FULL_IDS_TEXT_BUDGET
        total_ids = 0
        for i, text in enumerate(texts):
            add_special = i % 3 != 0
            ids = tok.encode(text, add_special_tokens=add_special).ids
            total_ids += len(ids)
            full = i % 4 == 0 and full_budget > 0
            if full:
                full_budget -= len(docs[i])
            flags = (1 if add_special else 0) | (2 if full else 0) | (4 if invalid[i] else 0)
            packed = struct.pack(f"<{len(ids)}I", *ids)
            out += struct.pack("<BIQQQ", flags, len(ids), fnv1a(packed),
                               fnv1a(tok.decode(ids, skip_special_tokens=False).encode()),
                               fnv1a(tok.decode(ids, skip_special_tokens=True).encode()))
            if full:
                out += packed
        path = DATA / f"golden_{name}.bin.xz"
        path.write_bytes(lzma.compress(bytes(out), preset=9 | lzma.PRESET_EXTREME))
        print(f"{path}: {total_ids} ids, {path.stat().st_size} bytes", file=sys.stderr)
        if name == "gpt2":
            cross_check(name, tok, texts)
        if name == "mistral_v1":
            cross_check_spm(tok, texts)


if __name__ == "__main__":
    main()
