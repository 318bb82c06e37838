#!/usr/bin/env python3
"""pref_check.py — fixtures and an independent checker for tests/prep/test_prep_preference.sh
(`tessera prep --format preference --pack T`, docs/prep.md "Preference pairs").

  pref_check.py gen DIR
      Writes DIR/pairs.jsonl: preference pairs {"prompt", "chosen", "rejected"} of varied lengths
      for --pack 16 with the GPT-2 tokenizer (crafted ones first: a pair whose chosen example
      fills a window exactly, one whose chosen example is truncated, one dropped because its
      rejected example's first 15 tokens are all prompt while its chosen one alone would be kept,
      and bad lines at known places), then random ones; DIR/bad-lines.txt lists "LINE<TAB>reason"
      of the bad lines; DIR/chat-pairs.jsonl holds a few short pairs for the chat template test
      and DIR/chat-convs.jsonl the same pairs as chat lines, two conversations per pair
      [user: prompt, assistant: chosen], [user: prompt, assistant: rejected].

  pref_check.py segs PAIRS.jsonl DIR
      For each valid line of PAIRS.jsonl (a JSON object with string "prompt", "chosen" and
      "rejected"), writes its three strings to DIR/seg-NNNNN.txt (prompt, chosen, rejected), to
      be tokenized one file per line by `tessera tokenizer encode` (ids.txt).

  pref_check.py layout OUT IDS T EOS SEED FRACTION SHARD_TOKENS [--target-prompts]
      Reads OUT/train and OUT/val with prep_check.py's shard reader and checks them token by token
      against the layout built here from the segment ids: each example is prompt (mask 0, 1 with
      --target-prompts), answer (1), EOT (1); an example longer than T keeps its first T-1 tokens;
      a pair goes when either example keeps no target; pair p (numbered over the valid lines, the
      dropped ones included) goes to val when u(SEED, p) < FRACTION, u computed here from the
      SplitMix64 definition of docs/prep.md; read as the trainer reads samples of seq_len T
      (docs/data-format.md "Samples"), sample 2i of a split is its pair i's chosen example and
      sample 2i+1 the rejected one, each followed by EOT padding of mask 0 to the end of its
      window; each shard is 1 + m*T tokens with m = 2*floor((SHARD_TOKENS-1)/(2T)) (the last one
      fewer, still even) and starts with an EOT of mask 0; and each index.tsv carries the two
      comment lines. Prints "SPLIT pairs P dropped D truncated X full F windows W shards S tokens
      N" per split (F: windows an example fills without padding) and "assign A" (0/1 per pair,
      dropped ones included). Exit 0 when everything matches.

  pref_check.py chat PREF CHAT EOT
      PREF: --format preference of chat-pairs.jsonl, CHAT: --format chat of chat-convs.jsonl (both
      into train only, with the same chat template; CHAT unpacked). Cuts CHAT's stream into its
      conversations (each starts where the first one does: the template's first two tokens),
      conversations 2i and 2i+1 being pair i's; a pair one of whose conversations holds no target
      must be missing from PREF; the windows of PREF hold the other pairs' conversations in order,
      tokens and mask, each followed by EOT padding of mask 0. Prints "conversations N pairs P
      dropped D". Exit 0 when everything matches.
"""
import json
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prep_check import read_shards, sentence  # noqa: E402

SPLIT_STREAM = 0x7072657053504C54  # "prepSPLT"
M64 = (1 << 64) - 1
INDEX_PAIRS = ("# preference_pairs\t%d\t(tessera prep --format preference: samples 2i and 2i+1 are "
               "pair i's chosen and rejected answers; docs/prep.md)")
INDEX_PACKED = ("# packed_seq_len\t%d\t(tessera prep --pack: every example is whole inside one "
                "sample when seq_len = %d; docs/prep.md)")


def hash64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def uniform(seed, stream, counter):
    return (hash64(hash64(hash64(seed) ^ stream) ^ counter) >> 11) * 2.0 ** -53


def gen(root):
    os.makedirs(root, exist_ok=True)
    rng = random.Random(2718)
    a15 = "a" + " a" * 14  # 15 GPT-2 tokens: "a", then " a" x 14
    lines = [
        json.dumps({"prompt": "Q: 2+2?\nA:", "chosen": " 4", "rejected": " 5"}),
        # other keys are ignored; the chosen example is 5 + 10 + EOT = 16 tokens: a full window
        json.dumps({"id": 7, "prompt": "a a a a a", "chosen": " b" * 10, "rejected": " no",
                    "meta": {"x": [1, 2]}}, ensure_ascii=False),
        # the chosen example is longer than 16 tokens: its first 15 kept
        json.dumps({"prompt": "Say c:", "chosen": " c" * 30, "rejected": " \u00e9t\u00e9 caf\u00e9"},
                   ensure_ascii=False),
        '{"prompt": "x", "chosen": "y"}',                                 # 4: bad
        # chosen alone: 15 + 0 + EOT = 16 tokens, kept; rejected: its first 15 tokens are the
        # prompt, so it is dropped, and the pair with it
        json.dumps({"prompt": a15, "chosen": "", "rejected": " b" * 10}),
        '{"prompt": "x", "chosen": "y", "rejected": "z"',                 # 6: bad
        '{"prompt": "x", "chosen": "y", "rejected": 3}',                  # 7: bad
    ]
    bad = {4: 'missing field "rejected"', 6: "invalid JSON", 7: 'field "rejected" is a number'}
    for k in range(40):  # mostly whole examples; some answers longer than the window
        p = "Q%d:%s" % (k, " " + sentence(rng, rng.randint(1, 3)) if k % 3 else "")
        ans = [" " + sentence(rng, rng.randint(1, 3 if rng.random() < 0.8 else 20)) for _ in range(2)]
        lines.append(json.dumps({"prompt": p, "chosen": ans[0], "rejected": ans[1]}))
    with open(os.path.join(root, "pairs.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(root, "bad-lines.txt"), "w") as f:
        for no, why in sorted(bad.items()):
            f.write("%d\t%s\n" % (no, why))
    pairs = [("What is 2+2?", "4", "5"), ("Name a colour.", "Blue.", "A car."),
             ("Caf\u00e9?", "Oui, un caf\u00e9 cr\u00e8me.", "Non."),
             ("Short", "  spaces around  ", "x"),
             # an empty answer: Qwen 3's template gives it no target, so the pair is dropped
             ("Tabs\tand\nnewlines", "Both\tkept\n.", ""), ("Last", "Yes", "No")]
    with open(os.path.join(root, "chat-pairs.jsonl"), "w") as fp, \
            open(os.path.join(root, "chat-convs.jsonl"), "w") as fc:
        for p, c, r in pairs:
            fp.write(json.dumps({"prompt": p, "chosen": c, "rejected": r}, ensure_ascii=False) + "\n")
            for a in (c, r):
                fc.write(json.dumps({"messages": [{"role": "user", "content": p},
                                                  {"role": "assistant", "content": a}]},
                                    ensure_ascii=False) + "\n")


def valid_pairs(path):
    """The (prompt, chosen, rejected) of each valid line, in order."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                o = json.loads(line)
            except ValueError:
                continue
            if isinstance(o, dict) and all(isinstance(o.get(k), str)
                                           for k in ("prompt", "chosen", "rejected")):
                out.append((o["prompt"], o["chosen"], o["rejected"]))
    return out


def segs(path, root):
    os.makedirs(root, exist_ok=True)
    n = 0
    for pair in valid_pairs(path):
        for s in pair:
            with open(os.path.join(root, "seg-%05d.txt" % n), "wb") as f:
                f.write(s.encode("utf-8"))
            n += 1
    print(n)


def window_of(toks, mask, T, eos):
    """An example in its window: (tokens, mask) of length T, or None when it keeps no target."""
    keep = T - 1 if len(toks) > T else len(toks)
    if not any(mask[:keep]):
        return None
    return (np.array(toks[:keep] + [eos] * (T - keep), np.int64),
            np.array(mask[:keep] + [0] * (T - keep), np.uint8), keep < len(toks))


def layout(argv):
    tp = "--target-prompts" in argv
    out, ids_file, T, eos, seed, frac, shard_tokens = [a for a in argv if not a.startswith("--")]
    T, eos, seed, frac, shard_tokens = int(T), int(eos), int(seed), float(frac), int(shard_tokens)
    with open(ids_file) as f:
        ids = [[int(x) for x in line.split()] for line in f]
    assert len(ids) % 3 == 0, "ids.txt: %d lines, not 3 per pair" % len(ids)
    want = [[], []]  # per split: [(chosen window, rejected window)]
    counts = [dict(pairs=0, dropped=0, truncated=0, full=0) for _ in range(2)]
    assign = []
    for p in range(len(ids) // 3):
        prompt, answers = ids[3 * p], ids[3 * p + 1:3 * p + 3]
        sp = 1 if frac > 0 and uniform(seed, SPLIT_STREAM, p) < frac else 0
        assign.append(str(sp))
        wins = [window_of(prompt + a + [eos], [int(tp)] * len(prompt) + [1] * (len(a) + 1), T, eos)
                for a in answers]
        if None in wins:
            counts[sp]["dropped"] += 1
            continue
        counts[sp]["pairs"] += 1
        counts[sp]["truncated"] += sum(w[2] for w in wins)
        counts[sp]["full"] += sum(w[0][-1] != eos or w[1][-1] == 1 for w in wins)
        want[sp].append(wins)
    m = 2 * ((shard_tokens - 1) // (2 * T))
    res = []
    for sp, name in enumerate(("train", "val")):
        d = os.path.join(out, name)
        if not want[sp]:
            assert not os.path.isdir(d), "%s: written, but no pair falls into it" % d
            res.append("%s pairs 0 dropped %d truncated 0 full 0 windows 0 shards 0 tokens 0" % (
                name, counts[sp]["dropped"]))
            continue
        with open(os.path.join(d, "index.tsv")) as f:
            lines = f.read().split("\n")
        at = lines.index(INDEX_PACKED % (T, T)) if INDEX_PACKED % (T, T) in lines else -1
        assert 2 <= at <= 5, "%s/index.tsv: no packed_seq_len note among the header comments" % d
        assert all(l.startswith("# ") for l in lines[1:at]), "%s/index.tsv: %r" % (d, lines[:at])
        assert lines[at + 1] == INDEX_PAIRS % len(want[sp]), "%s/index.tsv line %d: %r" % (
            d, at + 2, lines[at + 1])
        assert sum(l.startswith("# preference_pairs") for l in lines) == 1, "%s: two notes" % d
        has_mask, shards = read_shards(d)
        assert has_mask, "%s: no mask channel" % d
        # shards: 1 + m*T tokens (the last one 1 + m'*T, m' even), each starting with EOT/0
        n_windows = 2 * len(want[sp])
        sizes = [len(t) for t, _ in shards]
        expect = [1 + min(m, n_windows - k) * T for k in range(0, n_windows, m)]
        assert sizes == expect, "%s: shard sizes %s, expected %s" % (d, sizes, expect)
        for k, (t, mk) in enumerate(shards):
            assert t[0] == eos and mk[0] == 0, "%s shard %d: token 0 is %d/%d" % (d, k, t[0], mk[0])
        # the samples of seq_len T, read as the trainer reads them: sample j of a shard is its
        # tokens [jT, jT+T], the targets [jT+1, jT+T]; global numbers run through the shards
        samples = [(t[j * T + 1:j * T + T + 1], mk[j * T + 1:j * T + T + 1], t[j * T], k)
                   for k, (t, mk) in enumerate(shards) for j in range((len(t) - 1) // T)]
        assert len(samples) == n_windows, "%s: %d samples for %d pairs" % (d, len(samples), n_windows)
        for i, wins in enumerate(want[sp]):
            for a in range(2):
                st, sm, first, shard = samples[2 * i + a]
                wt, wm, _ = wins[a]
                what = "%s: sample %d (pair %d's %s)" % (d, 2 * i + a, i, ("chosen", "rejected")[a])
                assert np.array_equal(st, wt), "%s: tokens\n  got  %s\n  want %s" % (
                    what, st.tolist(), wt.tolist())
                assert np.array_equal(sm, wm), "%s: mask\n  got  %s\n  want %s" % (
                    what, sm.tolist(), wm.tolist())
                assert first == eos, "%s: starts after %d, not an EOT" % (what, first)
            assert samples[2 * i][3] == samples[2 * i + 1][3], "%s: pair %d straddles shards" % (d, i)
        res.append("%s pairs %d dropped %d truncated %d full %d windows %d shards %d tokens %d" % (
            name, counts[sp]["pairs"], counts[sp]["dropped"], counts[sp]["truncated"],
            counts[sp]["full"], n_windows,
            len(shards), sum(sizes)))
    print("; ".join(res) + "; assign " + "".join(assign))
    return 0


def chat(argv):
    pref, conv, eot = argv[0], argv[1], int(argv[2])
    _, ps = read_shards(os.path.join(pref, "train"))
    _, cs = read_shards(os.path.join(conv, "train"))
    ct = np.concatenate([t for t, _ in cs])
    cm = np.concatenate([m for _, m in cs])
    # each conversation starts as the first one does (<|im_start|> user): the cut points
    starts = [k for k in range(len(ct) - 1) if ct[k] == ct[0] and ct[k + 1] == ct[1]] + [len(ct)]
    convs = [(ct[a:b], cm[a:b]) for a, b in zip(starts, starts[1:])]
    assert len(convs) % 2 == 0, "%d conversations, not 2 per pair" % len(convs)
    kept = [c for i in range(0, len(convs), 2) if convs[i][1].any() and convs[i + 1][1].any()
            for c in convs[i:i + 2]]
    (t, m), = ps
    T = None
    with open(os.path.join(pref, "train", "index.tsv")) as f:
        for l in f:
            if l.startswith("# packed_seq_len\t"):
                T = int(l.split("\t")[1])
    assert T and (len(t) - 1) % T == 0, "%s: %d tokens, T %s" % (pref, len(t), T)
    assert (len(t) - 1) // T == len(kept), "%d windows for %d conversations of kept pairs" % (
        (len(t) - 1) // T, len(kept))
    for k, (xt, xm) in enumerate(kept):
        wt, wm = t[1 + k * T:1 + (k + 1) * T], m[1 + k * T:1 + (k + 1) * T]
        n = len(xt)
        assert n <= T, "conversation %d: %d tokens > T %d" % (k, n, T)
        assert np.array_equal(wt[:n], xt), "window %d: tokens\n  got  %s\n  want %s" % (
            k, wt[:n].tolist(), xt.tolist())
        assert np.array_equal(wm[:n], xm), "window %d: mask\n  got  %s\n  want %s" % (
            k, wm[:n].tolist(), xm.tolist())
        assert (wt[n:] == eot).all() and (wm[n:] == 0).all(), "window %d: padding %s" % (
            k, wt[n:].tolist())
    print("conversations %d pairs %d dropped %d" % (len(convs), len(kept) // 2,
                                                   (len(convs) - len(kept)) // 2))
    return 0


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    try:
        if cmd == "gen" and len(sys.argv) == 3:
            gen(sys.argv[2])
        elif cmd == "segs" and len(sys.argv) == 4:
            segs(sys.argv[2], sys.argv[3])
        elif cmd == "layout" and len(sys.argv) >= 9:
            sys.exit(layout(sys.argv[2:]))
        elif cmd == "chat" and len(sys.argv) == 5:
            sys.exit(chat(sys.argv[2:]))
        else:
            print(__doc__)
            sys.exit(2)
    except AssertionError as e:
        print("FAIL: %s" % e)
        sys.exit(1)
