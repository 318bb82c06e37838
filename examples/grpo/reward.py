#!/usr/bin/env python3
"""reward.py — the arithmetic example's reward program (examples/grpo/run.sh; the protocol:
docs/rl.md "The reward program"). tessera-train starts one per rank and keeps it for the whole run;
for each completion it writes one JSON line

    {"id": 17, "step": 3, "prompt_index": 40, "sample": 2,
     "prompt": {"prompt": "12+7=", "answer": 19}, "completion": "19", "tokens": [...], "stop": "eos"}

and reads back one line {"id": 17, "reward": R, "pass": B}, flushed. Here: reward 1 and a pass when
the completion is the answer and nothing else (the SFT model often runs on after it: "19 because
12+7=19" fails), 0.1 when it starts with the answer (a little credit for the right number), else 0.
The trainer bounds what comes back (one line per id, 64 KiB a line, reward.timeout seconds a step):
a crash or a bad answer stops the run with exit 2, never a silent 0."""
import json
import sys


def score(record, completion):
    want = str(record.get("answer", "")).strip()
    got = completion.strip()
    if got == want:
        return 1.0
    if got.startswith(want) and not got[len(want):len(want) + 1].isdigit():
        return 0.1
    return 0.0


for line in sys.stdin:
    q = json.loads(line)
    r = score(q["prompt"], q["completion"])
    print(json.dumps({"id": q["id"], "reward": r, "pass": r == 1.0}), flush=True)
