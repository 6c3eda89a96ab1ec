#!/usr/bin/env python3
"""Train the byte-level BPE tokenizer of the default model on the training split.

    python3 tools/train_default/train_tokenizer.py --data data/default_model --out assets/default-model

Writes OUT/tokenizer.json and OUT/tokenizer_config.json (ChatML template, <|endoftext|> as
bos/eos/pad). Special tokens get the first ids: <|endoftext|>=0, <|im_start|>=1, <|im_end|>=2.
Deterministic for a given input (the `tokenizers` BPE trainer breaks ties by content).
"""

import argparse
import json
import os

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Verbatim the Qwen2-style ChatML template that ridgeserve's tokenizer recognises ("chatml").
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
                 "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def texts(path):
    with open(path) as f:
        for line in f:
            yield json.loads(line)["text"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/default_model")
    ap.add_argument("--out", default="assets/default-model")
    ap.add_argument("--vocab-size", type=int, default=4096)
    a = ap.parse_args()

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=a.vocab_size, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts(os.path.join(a.data, "train.jsonl")), trainer=trainer)
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))

    os.makedirs(a.out, exist_ok=True)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1000000000,
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "chat_template": CHAT_TEMPLATE,
    }
    json.dump(cfg, open(os.path.join(a.out, "tokenizer_config.json"), "w"), indent=2)
    print("vocab", tok.get_vocab_size(), "->", a.out)


if __name__ == "__main__":
    main()
