#!/usr/bin/python3
# make_colors.py — writes the "colors" task set and its training text (tessera's ICL test set,
# docs/eval.md): 30 things, each with one colour; a model trained on colors_corpus.txt knows
# every answer, a model with random weights scores the random baseline. Deterministic.
import json, random

things = ["apple", "sky", "grass", "banana", "coal", "cherry", "ocean", "leaf", "lemon", "crow",
          "tomato", "sapphire", "frog", "sun", "night", "strawberry", "river", "lime", "canary", "ink",
          "ruby", "jeans", "moss", "corn", "tar", "brick", "lake", "pea", "butter", "raven"]
colors = ["red", "blue", "green", "yellow", "black"]
color_of = {t: colors[i % 5] for i, t in enumerate(things)}  # apple red, sky blue, grass green, ...

rng = random.Random(7)
lines = [f"the {t} is {color_of[t]} ." for t in things for _ in range(24)]
rng.shuffle(lines)
with open("colors_corpus.txt", "w") as f:
    f.write("\n".join(lines) + "\n")

with open("colors_mc.jsonl", "w") as f:
    for t in things:
        f.write(json.dumps({"query": f"the {t} is", "choices": colors, "gold": colors.index(color_of[t])}) + "\n")
with open("colors_lm.jsonl", "w") as f:
    for t in things:
        f.write(json.dumps({"context": f"the {t} is", "continuation": color_of[t]}) + "\n")
with open("colors_schema.jsonl", "w") as f:
    for i, t in enumerate(things):
        others = [u for u in things if color_of[u] != color_of[t]]
        opts = [t] + rng.sample(others, 2)
        rng.shuffle(opts)
        f.write(json.dumps({"context_options": [f"the {o}" for o in opts], "continuation": f"is {color_of[t]} .",
                            "gold": opts.index(t)}) + "\n")
