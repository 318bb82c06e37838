#!/usr/bin/env python3
"""A reward program for tessera's GRPO tests (docs/rl.md "The reward program"): one JSON line in
per completion, one {"id", "reward"} line out, flushed. Reward 1 when the whole completion (trimmed)
is the prompt record's "answer", as tessera's built-in reward.kind = "answer" with reward.extract =
"auto" and no marker in the text scores it, so the two give the same rewards.

GRPO_REWARD_MODE (the misbehaviours tests/train/test_grpo.sh checks; from the GRPO_REWARD_AT-th
request on, 1-based, counting this process's requests): ok (default), crash (exit 3 without an
answer), hang (sleep), garbage (a line that is not JSON), wrong_id (an id it was not sent), nan
(a reward that is not a number), long (a line of 70000 bytes), hog (allocates 1 GiB: under
reward.memory_mib below it, a MemoryError ends it)."""
import json
import os
import sys
import time

mode = os.environ.get("GRPO_REWARD_MODE", "ok")
at = int(os.environ.get("GRPO_REWARD_AT", "1"))
n = 0
for line in sys.stdin:
    q = json.loads(line)
    n += 1
    if mode != "ok" and n >= at:
        if mode == "crash":
            sys.exit(3)
        if mode == "hang":
            time.sleep(3600)
        if mode == "hog":
            hog = bytearray(1 << 30)
        if mode == "garbage":
            print("this is not json", flush=True)
            continue
        if mode == "wrong_id":
            q["id"] += 1000000
        if mode == "long":
            print("x" * 70000, flush=True)
            continue
    want = str(q["prompt"].get("answer", "")).strip()
    reward = 1.0 if q["completion"].strip() == want else 0.0
    if mode == "nan" and n >= at:
        print('{"id": %d, "reward": NaN}' % q["id"], flush=True)
        continue
    print(json.dumps({"id": q["id"], "reward": reward}), flush=True)
