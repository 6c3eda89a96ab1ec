#!/usr/bin/env python3
"""Builds the tokenizer.json files that the C++ tokenizer is tested against.

Writes, under tests/data/tokenizer/:
  gpt2/                  GPT-2's byte-level BPE, converted from the `gpt2.tiktoken` ranks that the
                         PyPI package openai-whisper ships (MIT). Pre-tokenizer ByteLevel(use_regex).
  mistral_v1/            Mistral's 32k SentencePiece BPE (`tokenizer.model.v1` from the PyPI package
                         mistral-common, Apache-2.0), converted by transformers' LlamaConverter in
                         its legacy form: Prepend("▁") + Replace(" ", "▁") normalizers.
  mistral_v1_metaspace/  The same vocabulary with the non-legacy Metaspace pre-tokenizer.
  qwen_style/            A small byte-level BPE trained here with `tokenizers` on public-domain text,
                         with Qwen2's Split regex and NFC normalizer (Qwen2's own file cannot be
                         downloaded here).

Needs: pip install tokenizers transformers tiktoken sentencepiece protobuf
       pip install --no-deps openai-whisper mistral-common
Run from the repository root: python3 tools/reference/make_tokenizers.py
"""
import base64
import json
import os
import pathlib
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

OUT = pathlib.Path("tests/data/tokenizer")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def site_file(package, *parts):
    import importlib.util
    spec = importlib.util.find_spec(package)
    return pathlib.Path(spec.submodule_search_locations[0], *parts)


def byte_to_unicode():
    """GPT-2's reversible map from bytes to printable code points."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
                 list(range(ord("®"), ord("ÿ") + 1)))
    table = {}
    extra = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def final_merge(token, ranks):
    """Runs rank-ordered byte-pair merging on `token` using only tokens ranked below it.

    A token reachable by BPE ends as exactly two parts; their merge is the one that created it.
    """
    limit = ranks[token]
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < limit and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            return None
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return tuple(parts) if len(parts) == 2 else None


def write_dir(name, tokenizer, config):
    d = OUT / name
    d.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(d / "tokenizer.json"), pretty=False)
    with open(d / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {d}: vocab {tokenizer.get_vocab_size()}", file=sys.stderr)


def make_gpt2():
    ranks = {}
    for line in open(site_file("whisper", "assets", "gpt2.tiktoken"), "rb"):
        if line.strip():
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    b2u = byte_to_unicode()
    to_str = lambda b: "".join(b2u[x] for x in b)
    vocab = {to_str(t): r for t, r in ranks.items()}
    merges = []
    for token, _ in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        pair = final_merge(token, ranks)
        if pair is None:
            raise SystemExit(f"unreachable GPT-2 token {token!r}")
        merges.append((to_str(pair[0]), to_str(pair[1])))
    eot = len(vocab)
    vocab["<|endoftext|>"] = eot
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.add_special_tokens([AddedToken("<|endoftext|>", normalized=True, special=True)])
    config = {
        "tokenizer_class": "GPT2Tokenizer",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
        "add_bos_token": False,
        "model_max_length": 1024,
    }
    write_dir("gpt2", tok, config)


class _SpmShim:
    """The parts of a slow LlamaTokenizer that transformers' LlamaConverter reads."""

    def __init__(self, path, legacy):
        import sentencepiece
        self.vocab_file = str(path)
        self.legacy = legacy
        self.add_prefix_space = True
        self._sp = sentencepiece.SentencePieceProcessor(model_file=str(path))

    def convert_ids_to_tokens(self, i):
        return self._sp.id_to_piece(i)


def make_mistral(name, legacy):
    from transformers.convert_slow_tokenizer import LlamaConverter, generate_merges

    class FixedLlamaConverter(LlamaConverter):
        """transformers 5.x's SpmConverter.tokenizer passes the scores where the extractor expects
        a model type; this builds the same BPE model the converter intends."""

        def tokenizer(self, proto):
            vocab_scores = self.vocab(proto)
            vocab = {piece: i for i, (piece, _) in enumerate(vocab_scores)}
            merges = generate_merges(vocab, vocab_scores)
            tok = Tokenizer(models.BPE(vocab, merges, unk_token=proto.trainer_spec.unk_piece,
                                       fuse_unk=True, byte_fallback=True, dropout=None))
            tok.add_tokens([AddedToken(p.piece, normalized=False, special=p.type == 3)
                            for p in proto.pieces if p.type in (3, 4)])
            # Hugging Face's own Llama/Mistral files list <unk> as a special added token too.
            tok.add_special_tokens([AddedToken("<unk>", normalized=False, special=True)])
            return tok

    path = site_file("mistral_common", "data", "tokenizer.model.v1")
    tok = FixedLlamaConverter(_SpmShim(path, legacy)).converted()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    config = {
        "tokenizer_class": "LlamaTokenizer",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "add_eos_token": False,
        "legacy": legacy,
        "model_max_length": 32768,
    }
    write_dir(name, tok, config)


def training_text():
    """Public-domain English (KJV Bible, Debian's bible-kjv) plus CJK samples and code."""
    import subprocess
    kjv = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True,
                         check=True).stdout
    yield from kjv.splitlines(keepends=True)
    cjk = pathlib.Path(sys.base_prefix, "lib", f"python{sys.version_info.major}."
                       f"{sys.version_info.minor}", "test", "cjkencodings")
    for p in sorted(cjk.glob("*-utf8.txt")):
        yield p.read_text(encoding="utf-8")
    stdlib = pathlib.Path(os.__file__).parent
    for p in sorted(stdlib.glob("*.py"))[:120]:
        yield p.read_text(encoding="utf-8", errors="replace")


def make_qwen_style():
    tok = Tokenizer(models.BPE(byte_fallback=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=12000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[AddedToken(s, normalized=False, special=True)
                                                  for s in specials])
    tok.train_from_iterator(training_text(), trainer=trainer)
    # Added tokens with the options real checkpoints use: a non-special tool tag, and a special
    # token that swallows whitespace to its left, as BERT-style [MASK] does.
    tok.add_tokens([AddedToken("<tool_call>", normalized=False, special=False),
                    AddedToken("</tool_call>", normalized=False, special=False)])
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, normalized=False, special=True)])
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "add_bos_token": False,
        "chat_template": (
            "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
            "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
            "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
        "model_max_length": 32768,
    }
    write_dir("qwen_style", tok, config)


if __name__ == "__main__":
    make_gpt2()
    make_mistral("mistral_v1", legacy=True)
    make_mistral("mistral_v1_metaspace", legacy=False)
    make_qwen_style()
