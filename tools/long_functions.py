#!/usr/bin/env python3
"""long_functions.py — the C and CUDA functions of tessera's product code longer than a limit.

docs/style.md: "No product function longer than about 80 lines". This lists every function
definition of src/, checkpoint/, kernels/ and healthcheck/ (.c, .h, .cu, .cuh under ROOT, default:
this checkout) whose length, from the line of its name to its closing brace, is over MAX lines
(default 80), and fails on each one that the list of known exceptions does not allow:
ROOT/tools/long_functions.known, one line per function, "PATH FUNCTION LINES  why it is not
split" ('#' starts a comment line).

A definition is found by brace matching at file scope, after comments, string and character
literals and preprocessor lines are blanked: a '{' at depth 0 whose preceding text ends in ')'
(an optional __attribute__((...)) between) opens a function named by the identifier before the
matching '('; a '{' after '=' (an initializer), 'struct', 'union' or 'enum' does not.

An exception allows its function up to the lines it names, so it cannot grow; an exception
whose function is gone or no longer over MAX is itself a finding (the list shrinks as the code
does).

Usage: tools/long_functions.py [--max N] [--all] [ROOT]
  --all   list every function over MAX, exceptions too, and exit 0
  exit 0: clean; 1: findings (each named); 2: bad input
"""
import bisect
import os
import re
import sys

SOURCE_DIRS = ("src", "checkpoint", "kernels", "healthcheck")
EXTS = (".c", ".h", ".cu", ".cuh")
DEFAULT_MAX = 80
KNOWN_FILE = os.path.join("tools", "long_functions.known")
IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?=\s*$)")
NOT_FUNCTIONS = {"if", "for", "while", "switch", "return", "sizeof", "__attribute__",
                 "_Alignas", "__declspec"}


def fail_input(msg):
    print(f"long_functions: {msg}", file=sys.stderr)
    sys.exit(2)


# what the brace matching must not see: comments, string and character literals, preprocessor
# lines with their continuations (a directive's own comment is taken with it)
NOISE_RE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|'
                      r'^[ \t]*#(?:/\*.*?\*/|\\\n|[^\n])*', re.M | re.S)


def blank_code(text):
    """text with comments, literals and preprocessor lines turned into spaces; newlines kept, so
    that offsets and line numbers stay those of the file."""
    return NOISE_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def last_char(code, end):
    """the offset of the last non-space character before end, or -1"""
    k = end - 1
    while k >= 0 and code[k].isspace():
        k -= 1
    return k


def back_to_open(code, close):
    """the offset of the '(' that matches the ')' at close, or -1"""
    depth = 0
    for k in range(close, -1, -1):
        if code[k] == ")":
            depth += 1
        elif code[k] == "(":
            depth -= 1
            if depth == 0:
                return k
    return -1


def function_name(code, brace):
    """(name, offset) of the function a file-scope '{' at brace opens, or None (a struct, an
    initializer)"""
    end = brace
    while True:
        close = last_char(code, end)
        if close < 0 or code[close] != ")":
            return None
        open_ = back_to_open(code, close)
        if open_ <= 0:
            return None
        m = IDENT_RE.search(code, max(0, open_ - 200), last_char(code, open_) + 1)
        if not m:
            return None
        if m.group(0) != "__attribute__":
            return None if m.group(0) in NOT_FUNCTIONS else (m.group(0), m.start())
        end = m.start()  # skip the attribute, read the declarator before it


def functions(path):
    """[(name, first line, lines)] of the functions defined in the file at path"""
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError as e:
        fail_input(f"cannot read {path}: {e}")
    code = blank_code(text)
    newlines = [m.start() for m in re.finditer("\n", code)]
    line_of = lambda off: bisect.bisect_left(newlines, off) + 1  # noqa: E731
    found, depth, opened = [], 0, None
    for m in re.finditer("[{}]", code):
        if m.group(0) == "{":
            if depth == 0:
                opened = function_name(code, m.start())
            depth += 1
            continue
        depth -= 1
        if depth < 0:
            fail_input(f"{path}: unbalanced '}}' on line {line_of(m.start())}")
        if depth == 0 and opened:
            first = line_of(opened[1])
            found.append((opened[0], first, line_of(m.start()) - first + 1))
            opened = None
    return found


def read_known(root):
    """{(path, function): lines allowed} from ROOT/tools/long_functions.known (none: no file)"""
    path, known = os.path.join(root, KNOWN_FILE), {}
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except FileNotFoundError:
        return known
    except OSError as e:
        fail_input(f"cannot read {path}: {e}")
    for n, line in enumerate(lines, 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) < 4 or not words[2].isdigit():
            fail_input(f"{path}:{n}: expected 'PATH FUNCTION LINES why', got '{line}'")
        known[(words[0], words[1])] = int(words[2])
    return known


def source_files(root):
    for d in SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(EXTS):
                    yield os.path.join(dirpath, f)


def parse_args(argv):
    limit, show_all, root = DEFAULT_MAX, False, None
    it = iter(argv)
    for a in it:
        if a == "--max":
            v = next(it, "")
            if not v.isdigit() or int(v) < 1:
                fail_input(f"--max '{v}': expected a whole number of lines, 1 or more")
            limit = int(v)
        elif a == "--all":
            show_all = True
        elif a.startswith("-") or root is not None:
            fail_input(f"unknown argument '{a}'; usage: long_functions.py [--max N] [--all] [ROOT]")
        else:
            root = a
    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(root, "src")):
        fail_input(f"{root}: no src/ folder here; expected a tessera checkout")
    return limit, show_all, root


def main(argv):
    limit, show_all, root = parse_args(argv)
    known = read_known(root)
    long_ones, seen, findings = [], set(), 0
    for path in source_files(root):
        rel = os.path.relpath(path, root)
        for name, line, n in functions(path):
            if n > limit:
                long_ones.append((rel, line, name, n))
    for rel, line, name, n in long_ones:
        allowed = known.get((rel, name))
        seen.add((rel, name))
        if show_all:
            print(f"{rel}:{line}: {name}: {n} lines" + (" (known exception)" if allowed else ""))
        elif allowed is None or n > allowed:
            findings += 1
            why = f"over the known exception's {allowed}" if allowed else f"over {limit}"
            print(f"long function: {rel}:{line}: {name}: {n} lines, {why}; "
                  "split it into named steps")
    for rel, name in sorted(set(known) - seen):
        if not show_all:
            findings += 1
            print(f"stale exception: {rel}: {name} is no longer over {limit} lines; "
                  f"remove it from {KNOWN_FILE}")
    if not show_all:
        print(f"long_functions: {len(long_ones)} over {limit} lines, {len(known)} known exceptions, "
              f"{findings} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
