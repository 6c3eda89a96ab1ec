#!/usr/bin/env python3
"""Tokenize the splits into flat uint16 id streams for training, adding a small share of
synthetic ChatML conversations so that the chat route answers in sentences.

    python3 tools/train_default/encode_data.py --data data/default_model --tokenizer assets/default-model

Writes DATA/train.npy, DATA/val.npy (uint16, documents separated by <|endoftext|>=0, one
<|endoftext|> also at the start) and DATA/encode_stats.json.

Synthetic conversations (seeded): a run of 2-6 sentences is taken from a document of the same
split; its first sentence becomes the user's message, wrapped in one of a few instructions
("Continue the text: ..."), and the following sentences are the assistant's answer:
    <|im_start|>user\nContinue the text: S1<|im_end|>\n<|im_start|>assistant\nS2 S3 ...<|im_end|>\n
A fortune may also be the answer to "Tell me a fortune." and similar. Documents and the
conversations are shuffled together (seed 1234).
"""

import argparse
import json
import os
import random
import re

import numpy as np
from tokenizers import Tokenizer

PROMPTS = ["Continue the text: {s}", "Continue the text: {s}", "Continue: {s}",
           "Please continue this passage: {s}", "What comes next? {s}", "{s}"]
FORTUNE_PROMPTS = ["Tell me a fortune.", "Say something wise.", "Tell me something funny.",
                   "Give me a quote."]


def sentences(text):
    body = text.split("\n\n", 1)[1] if re.match(r"^[^\n]{1,60}\n\n", text) else text  # drop headings
    out = []
    for para in body.split("\n\n"):
        out += [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\u201c\"'])", para) if s.strip()]
    return out


def chat(user, assistant):
    return (f"<|im_start|>user\n{user}<|im_end|>\n"
            f"<|im_start|>assistant\n{assistant}<|im_end|>\n")


def make_chats(docs, n, rng):
    prose = [d for d in docs if d["source"] != "fortunes"]
    fort = [d["text"] for d in docs if d["source"] == "fortunes"]
    out = []
    while len(out) < n:
        if fort and rng.random() < 0.08:
            out.append(chat(rng.choice(FORTUNE_PROMPTS), rng.choice(fort)))
            continue
        ss = sentences(rng.choice(prose)["text"])
        if len(ss) < 3:
            continue
        i = rng.randrange(0, len(ss) - 2)
        k = rng.randint(2, 5)
        first, rest = ss[i], ss[i + 1:i + 1 + k]
        if not (15 <= len(first) <= 300):
            continue
        ans = " ".join(rest)
        if len(ans) > 900:
            ans = " ".join(rest[:1])
        out.append(chat(rng.choice(PROMPTS).format(s=first), ans))
    return out


def encode(tok, docs, chats, rng):
    items = [d["text"] for d in docs] + chats
    rng.shuffle(items)
    ids = [0]
    for enc in tok.encode_batch(items, add_special_tokens=False):
        ids += enc.ids
        ids.append(0)
    return np.asarray(ids, dtype=np.uint16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/default_model")
    ap.add_argument("--tokenizer", default="assets/default-model")
    ap.add_argument("--chat-train", type=int, default=2500)
    ap.add_argument("--chat-val", type=int, default=100)
    a = ap.parse_args()
    tok = Tokenizer.from_file(os.path.join(a.tokenizer, "tokenizer.json"))
    stats = {}
    for split, n in (("train", a.chat_train), ("val", a.chat_val)):
        rng = random.Random(1234 if split == "train" else 4321)
        docs = [json.loads(l) for l in open(os.path.join(a.data, f"{split}.jsonl"))]
        chats = make_chats(docs, n, rng)
        arr = encode(tok, docs, chats, rng)
        np.save(os.path.join(a.data, f"{split}.npy"), arr)
        chat_tokens = sum(len(e.ids) + 1 for e in tok.encode_batch(chats, add_special_tokens=False))
        stats[split] = {"tokens": int(arr.size), "docs": len(docs), "chats": len(chats),
                        "chat_tokens": chat_tokens, "chars_per_token":
                        round(sum(len(d["text"]) for d in docs) / max(1, arr.size - chat_tokens), 3)}
        print(split, stats[split], flush=True)
        if split == "train":
            print("example chat:", repr(chats[0]))
    json.dump(stats, open(os.path.join(a.data, "encode_stats.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
