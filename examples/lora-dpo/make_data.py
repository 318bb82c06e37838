#!/usr/bin/env python3
"""make_data.py OUT_DIR — the worked example's data (docs/finetune.md, "LoRA, then DPO"): a toy
world of 30 things with one colour each.

  base.txt      the text the base is pretrained on: "The THING is COLOUR." with the colour drawn
                at random, questions "What colour is the THING?", and role words: the base learns
                the words and the sentences, not the colours, and has never seen a conversation
  tok.txt       what the tokenizer is trained on (base.txt and the chat lines as rendered)
  sft.jsonl     chat lines: the user asks "what colour is the THING?", the assistant answers
                "The THING is COLOUR." with a random colour (SFT teaches the form of the answer)
  pairs.jsonl   preference pairs: the same question in the `ROLE: content` form of the chat lines;
                chosen = the true colour, rejected = another (DPO teaches which is preferred)
Deterministic (seed 7)."""
import json
import os
import random
import sys

THINGS = ["apple", "sky", "grass", "banana", "coal", "cherry", "ocean", "leaf", "lemon", "crow",
          "tomato", "sapphire", "frog", "sun", "night", "strawberry", "river", "lime", "canary",
          "ink", "ruby", "jeans", "moss", "corn", "tar", "brick", "lake", "pea", "butter", "raven"]
COLOURS = ["red", "blue", "green", "yellow", "black"]
TRUE = {t: COLOURS[i % 5] for i, t in enumerate(THINGS)}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(7)
    base = []
    for _ in range(4000):
        t = rng.choice(THINGS)
        base.append(rng.choice([f"The {t} is {rng.choice(COLOURS)}.",
                                f"What colour is the {t}?", rng.choice(["user", "assistant"])]))
    with open(os.path.join(out, "base.txt"), "w") as f:
        f.write("\n".join(base) + "\n")
    with open(os.path.join(out, "sft.jsonl"), "w") as f:
        for _ in range(600):
            t = rng.choice(THINGS)
            f.write(json.dumps({"messages": [
                {"role": "user", "content": f"What colour is the {t}?"},
                {"role": "assistant", "content": f"The {t} is {rng.choice(COLOURS)}."}]}) + "\n")
    with open(os.path.join(out, "tok.txt"), "w") as f:
        f.write("\n".join(base) + "\n")
        for t in THINGS:
            f.write(f"user: What colour is the {t}?\nassistant: The {t} is red.\n")
    with open(os.path.join(out, "pairs.jsonl"), "w") as f:
        for _ in range(800):
            t = rng.choice(THINGS)
            wrong = rng.choice([c for c in COLOURS if c != TRUE[t]])
            # prep renders a pair without a chat template as an sft row (prompt + answer): the
            # prompt is written here in the conversation form the SFT stage trained on
            f.write(json.dumps({"prompt": f"user: What colour is the {t}?\nassistant: ",
                                "chosen": f"The {t} is {TRUE[t]}.\n",
                                "rejected": f"The {t} is {wrong}.\n"}) + "\n")


if __name__ == "__main__":
    main()
