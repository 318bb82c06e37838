#!/usr/bin/env python3
"""doc_blocks.py — the commands the docs show, for tests/cli/test_doc_blocks.sh.

  doc_blocks.py extract OUT_DIR FILE...
      Writes each shell block marked runnable (a fence opened with ```sh runnable, docs/style.md
      "Docs") of each FILE as OUT_DIR/NN.sh, in order, with a first line "# FILE:LINE" naming where
      it is; prints one line per FILE that has any: "FILE first-last" (the block numbers).

  doc_blocks.py options BUILD RECIPE...
      The commands in the recipes' header comments (lines "#   tessera ...", "#   mpirun ...
      tessera-train ...", "#   srun ... tessera-train ..."): every --option each one gives must be
      one its program's --help lists (tessera SUB [SUBSUB] --help, tessera-train --help). Prints
      each command checked, and each unknown option as RECIPE:LINE; exit 1 when there is one.
"""
import os
import re
import shlex
import subprocess
import sys

FENCE = re.compile(r"^```(\S*)(.*)$")


def extract(out, files):
    n = 0
    for path in files:
        first, block, start = n + 1, None, 0
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                m = FENCE.match(line.rstrip("\n"))
                if block is None and m and m.group(1) in ("sh", "bash") and \
                        "runnable" in m.group(2).split():
                    block, start = [], lineno
                elif block is not None and line.startswith("```"):
                    n += 1
                    with open(os.path.join(out, "%02d.sh" % n), "w") as g:
                        g.write("# %s:%d\n" % (path, start) + "".join(block))
                    block = None
                elif block is not None:
                    block.append(line)
        if n >= first:
            print(path, "%d-%d" % (first, n))


HEADER = re.compile(r"^#\s{3}(\S.*)$")


def command_of(words):
    """(program words, option words) of a header command, or None when it runs no tessera program."""
    for i, w in enumerate(words):
        base = os.path.basename(w)
        if base == "tessera-train":
            return ["tessera-train"], words[i + 1:]
        if base == "tessera" and i + 1 < len(words):
            prog = ["tessera", words[i + 1]]
            if words[i + 1] in ("ckpt", "tokenizer") and i + 2 < len(words):
                prog.append(words[i + 2])
            return prog, words[i + len(prog):]
    return None


def options(build, recipes):
    helps, bad, checked = {}, 0, 0
    for path in recipes:
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                if not line.startswith("#"):
                    break  # the header comment ends at the first other line
                m = HEADER.match(line.rstrip("\n"))
                if not m:
                    continue
                try:
                    words = shlex.split(m.group(1), comments=True)
                except ValueError:
                    continue
                got = command_of(words)
                if not got:
                    continue
                prog, args = got
                key = " ".join(prog)
                if key not in helps:
                    exe = os.path.join(build, prog[0])
                    r = subprocess.run([exe] + prog[1:] + ["--help"], capture_output=True, text=True)
                    helps[key] = r.stdout + r.stderr
                checked += 1
                for a in args:
                    if not a.startswith("--"):
                        continue
                    opt = a.split("=", 1)[0]
                    if not re.search(re.escape(opt) + r"(?![\w-])", helps[key]):
                        print("%s:%d: %s: %s is not an option of %s (its --help)" % (
                            path, lineno, key, opt, key))
                        bad += 1
    print("# %d header commands checked, %d unknown options" % (checked, bad))
    return 1 if bad or not checked else 0


if __name__ == "__main__":
    if sys.argv[1] == "extract":
        extract(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(options(sys.argv[2], sys.argv[3:]))
