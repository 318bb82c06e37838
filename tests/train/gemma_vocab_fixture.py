#!/usr/bin/env python3
"""gemma_vocab_fixture.py — a tiny Gemma-3-shaped Hugging Face directory whose tokenizer has one id
more than the model has rows, as google/gemma-3-1b-pt's (262,145 ids over 262,144 rows: the last,
<image_soft_token>, is the image placeholder the text model never sees), for
tests/train/test_gemma_vocab.sh (issue 79 items 10 and 11).

    python3 tests/train/gemma_vocab_fixture.py OUT [--ordinary]

OUT/config.json + model.safetensors: hf_fixture.py's gemma3_text fixture with vocab_size V = 320.
OUT/tokenizer.json: Gemma 3's layout (SentencePiece-style BPE with byte fallback: normalizer
Replace " " -> U+2581, pre_tokenizer Split on " ", the same decoder), its first ids as Gemma 3's
(<pad> 0, <eos> 1, <bos> 2, <unk> 3) then <start_of_turn> 4, <end_of_turn> 5, the 256 byte
tokens, U+2581, a-z and merged pieces up to id V - 1, and the added special token
<image_soft_token> at id V: V + 1 ids. --ordinary makes id V an ordinary vocabulary entry instead
(a tokenizer that is not this model's: text encodes to it).
OUT/tokenizer_config.json: an instruct model's (Gemma 3 IT): eos_token <end_of_turn>, bos_token <bos>.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))
import hf_fixture as fxm  # noqa: E402

V = 320
SP = "\u2581"
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
PIECES = ["th", "he", SP + "t", SP + "a", "in", "er", "an", "re", "on", SP + "the", "at", "en",
          "nd", "ed", "es", "or", "te", "of", SP + "o", SP + "s", "is", "it", "ar", "st", "to",
          "nt", "ng", "se", "ha"]


def tokenizer(ordinary):
    vocab = {}
    for t in SPECIAL:
        vocab[t] = len(vocab)
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t in [SP] + [chr(c) for c in range(ord("a"), ord("z") + 1)]:
        vocab[t] = len(vocab)
    merges = []
    for p in PIECES:
        if len(vocab) == V:
            break
        merges.append([SP + "t", "he"] if p == SP + "the" else [p[:-1], p[-1]])
        vocab[p] = len(vocab)
    while len(vocab) < V:  # padding entries no merge makes
        vocab[f"<unused{len(vocab)}>"] = len(vocab)
    added = [dict(id=i, content=t, single_word=False, lstrip=False, rstrip=False,
                  normalized=False, special=True) for i, t in enumerate(SPECIAL)]
    if ordinary:
        vocab["zz"] = V
    else:
        added.append(dict(id=V, content="<image_soft_token>", single_word=False, lstrip=False,
                          rstrip=False, normalized=False, special=True))
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": SP},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "},
                          "behavior": "MergedWithPrevious", "invert": False},
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SP}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
                  "byte_fallback": True, "ignore_merges": False, "vocab": vocab, "merges": merges}}


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--ordinary"):
        sys.exit("usage: gemma_vocab_fixture.py OUT [--ordinary]")
    out = sys.argv[1]
    fxm.V = V
    fx = next(f for f in fxm.FAMILY_FIXTURES if f["name"] == "gemma3_text")
    d = fxm.make(out, dict(fx, name="model"), 7)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer(len(sys.argv) == 3), f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<bos>", "eos_token": "<end_of_turn>", "pad_token": "<pad>",
                   "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
                   "tokenizer_class": "GemmaTokenizer"}, f, indent=2)
    print(d)


if __name__ == "__main__":
    main()
