"""dpo_pairs.py — the preference pairs of the DPO tests, written with the standard library alone
(test_dpo.py, and tests/train/test_dpo.sh, test_dpo_full.sh and tests/gpu/test_cuda_dpo.sh, whose
GPU machine runs them with its /usr/bin/python3: no numpy there, and a torch that may not load with
the bundle's libraries).

As a script: python3 dpo_pairs.py DIR [SEED] prints the dataset's path (DIR/pairs), or exits with
`tessera shard`'s status; the shape is T = 16, 40 pairs, vocabulary 100 (test_reference.py's)."""
import os
import random
import subprocess
import sys


class LegacyRandint:
    """The draws of numpy.random.RandomState(seed).randint (the generator these pairs were first
    made with, and every tolerance of the DPO tests was set on), from the standard library's
    Mersenne Twister: the state numpy's legacy seeding writes (init_genrand), then each draw in
    [low, high) a 32-bit output masked to the range's bit length, rejected while past the range."""

    def __init__(self, seed):
        mt = [seed & 0xFFFFFFFF]
        for i in range(1, 624):
            mt.append((1812433253 * (mt[-1] ^ (mt[-1] >> 30)) + i) & 0xFFFFFFFF)
        self.r = random.Random()
        self.r.setstate((3, tuple(mt) + (624,), None))

    def randint(self, low, high, size=None):
        if size is not None:
            return [self.randint(low, high) for _ in range(size)]
        span = high - 1 - low
        if span == 0:
            return low
        mask = span
        for s in (1, 2, 4, 8, 16):
            mask |= mask >> s
        while True:
            v = self.r.getrandbits(32) & mask
            if v <= span:
                return low + v


def make_pairs(tmp, seed, T, pairs, vocab, tessera):
    """The preference layout by hand: 1 + 2 pairs T tokens, notes in index.tsv as prep writes.
    Returns (the dataset's directory, the CompletedProcess of `tessera shard`)."""
    rng = LegacyRandint(seed)
    eot = vocab - 1
    toks, mask = [eot], [0]
    for _ in range(pairs):
        plen = rng.randint(2, T // 2)
        prompt = rng.randint(0, vocab - 1, size=plen)
        for _k in range(2):
            alen = rng.randint(2, T - plen + 1)
            w = prompt + rng.randint(0, vocab - 1, size=alen - 1) + [eot]
            m = [0] * plen + [1] * alen
            toks += w + [eot] * (T - len(w))
            mask += m + [0] * (T - len(m))
    txt = os.path.join(tmp, "pairs.txt")
    with open(txt, "w") as f:
        for i in range(0, len(toks), 16):
            f.write(" ".join(f"{t}:{m}" for t, m in zip(toks[i:i + 16], mask[i:i + 16])) + "\n")
    out = os.path.join(tmp, "pairs")
    r = subprocess.run([tessera, "shard", "--out", out, "--vocab", str(vocab), "--mask", txt],
                       capture_output=True, text=True)
    if r.returncode == 0:
        p = os.path.join(out, "index.tsv")
        lines = open(p).read().split("\n")
        at = 1
        while at < len(lines) and lines[at].startswith("#"):
            at += 1
        lines[at:at] = [f"# packed_seq_len\t{T}\t(test_dpo.py)",
                        f"# preference_pairs\t{pairs}\t(test_dpo.py)"]
        open(p, "w").write("\n".join(lines))
    return out, r


if __name__ == "__main__":
    root = os.environ.get("TSR_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    tool = os.path.join(root, os.environ.get("BUILD", "build"), "tessera")
    out, r = make_pairs(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5, 16, 40, 100,
                        tool)
    if r.returncode:
        sys.stderr.write(r.stderr)
        sys.exit(r.returncode)
    print(out)
