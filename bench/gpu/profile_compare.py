#!/usr/bin/env python3
"""profile_compare.py: the TSR_PROFILE tables of several runs side by side (issue 25).

Usage: profile_compare.py BASE RUN... (files written by `tests/gpu/device.sh profile`, each a
tessera-train log with its "TSR_PROFILE device time per op" table).

Prints, for each run, its forward + backward time a step against BASE's (ms and %), and the ops
that moved most (op and shape: BASE's ms a step -> the run's; ties in name order). A run named
`again` (a file ending in "-again.txt": the defaults once more, the call's last) is the noise:
its line says how far two runs of the same build differ, op by op, and every other run's changes,
forward + backward included, are marked with `~` where they are within twice that row's
difference between BASE and `again`, or 1 % of BASE's time for it, the larger. Nothing is judged
here: the lines are read beside docs/benchmarks.md's tables.

Exit 0; 2 (usage) for a missing file or one without a table, naming it.
"""
import os
import re
import sys

HEADER = "TSR_PROFILE device time per op"
NUM = re.compile(r"^[0-9]+(\.[0-9]+)?$")
FB = ("step: forward+backward", "-")
TOP = 3


def die(msg):
    print(f"profile_compare.py: {msg}", file=sys.stderr)
    sys.exit(2)


def read_table(path):
    """{(op, shape): ms a step} of the file's first TSR_PROFILE table"""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        die(f"{path}: {e.strerror}")
    try:
        start = next(i for i, l in enumerate(lines) if HEADER in l)
    except StopIteration:
        die(f"{path}: no '{HEADER}' table (a run without TSR_PROFILE=1, or one that failed)")
    rows = {}
    # "op  shape  calls  ms/step  us/call  % f+b", read from the right: an op name may hold
    # spaces ("step: gradient norm"); the table ends at the first line that is not such a row
    for l in lines[start + 2:]:  # past the header and the column names
        f = l.split()
        if len(f) < 6 or not all(NUM.match(x) for x in f[-4:]) or "." in f[-4]:
            break
        key = (" ".join(f[:-5]), f[-5])
        rows[key] = rows.get(key, 0.0) + float(f[-3])
    if FB not in rows:
        die(f"{path}: its table has no '{FB[0]}' row")
    return rows


def name_of(path, base_path):
    """the run's name: what its file name adds to BASE's ("" for BASE itself)"""
    b = os.path.basename(base_path)
    b = b[:-len(".txt")] if b.endswith(".txt") else b
    n = os.path.basename(path)
    n = n[:-len(".txt")] if n.endswith(".txt") else n
    return n[len(b) + 1:] if n.startswith(b + "-") else n


def fmt_delta(a, b):
    d = b - a
    pct = 100.0 * d / a if a else float("inf")
    return f"{d:+.2f} ({pct:+.1f}%)"


def main(argv):
    if len(argv) < 2:
        die("usage: profile_compare.py BASE RUN... (TSR_PROFILE logs of tests/gpu/device.sh profile)")
    base_path, runs = argv[0], argv[1:]
    base = read_table(base_path)
    tables = [(name_of(p, base_path), read_table(p)) for p in runs]
    again = next((t for n, t in tables if n == "again"), None)

    def noise(key):
        b = base.get(key, 0.0)
        d = abs(again.get(key, 0.0) - b) if again is not None else 0.0
        return max(2.0 * d, 0.01 * b)

    def changes(t):
        keys = [k for k in set(base) | set(t) if k != FB and not k[0].startswith("step:")]
        moved = sorted(keys, key=lambda k: (-abs(t.get(k, 0.0) - base.get(k, 0.0)), k))[:TOP]
        return "; ".join(f"{mark(k, t)}{k[0]} {k[1]} {base.get(k, 0.0):.3f} -> {t.get(k, 0.0):.3f}"
                         for k in moved)

    def mark(k, t):
        return "~" if again is not None and abs(t.get(k, 0.0) - base.get(k, 0.0)) <= noise(k) else ""

    print(f"profile comparison, ms a step (TSR_PROFILE); base: {os.path.basename(base_path)}")
    if again is None:
        print("no 'again' run (the defaults once more): no noise estimate")
    w = max([len("base")] + [len(n) for n, _ in tables])
    print(f"{'run':<{w}}  {'f+b':>8}  {'vs base':>16}  largest changes (op shape: base -> run)")
    print(f"{'base':<{w}}  {base[FB]:8.3f}")
    for n, t in tables:
        d = mark(FB, t) + fmt_delta(base[FB], t[FB])
        print(f"{n:<{w}}  {t[FB]:8.3f}  {d:>16}  {changes(t)}")
    if again is not None:
        print("'~': within twice that row's difference between base and again, or 1 % of base's")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
