#!/usr/bin/env python3
"""check_limits_doc.py — docs/limits.md against the tree it describes.

docs/limits.md states every refusal and limit once, in tables whose header is
"| refusal or limit | message | exit | test |". For each row of those tables this checks that

  - every backquoted fragment of the *message* cell occurs in the program's sources (src/,
    checkpoint/, kernels/, healthcheck/, jobs/, tools/; in C, CUDA and shell text `\\"` reads
    as `"`, and C's adjacent string literals `"..." "..."` are read joined), so a message
    reworded in the code makes its row fail instead of going stale;
  - the *exit* cell is 0, 1, 2, 3, 85, 86, 87 or — (no exit: a warning, a stop, a wait);
  - every backquoted path of the *test* cell exists under ROOT;

and that every link from ROOT/README.md and ROOT/docs/*.md to a section of limits.md
(`limits.md#anchor`) names a heading of limits.md (GitHub's anchors: lower case, spaces to
hyphens, punctuation other than hyphens and underscores dropped).

Rows without a test (a test cell of —) are listed, not failed: the page says so for each.

Usage: tools/check_limits_doc.py [ROOT]   exit 0: consistent; 1: findings (each named); 2: bad input
"""
import os
import re
import sys

HEADER = ["refusal or limit", "message", "exit", "test"]
SOURCE_DIRS = ("src", "checkpoint", "kernels", "healthcheck", "jobs", "tools")
EXITS = {"0", "1", "2", "3", "85", "86", "87", "—"}
LINK_RE = re.compile(r"\]\((?:\./)?limits\.md#([^)\s]+)\)")
CODE_RE = re.compile(r"`([^`]+)`")


def cells(line):
    """The cells of a table row, `\\|` read as a pipe inside a cell."""
    parts = re.split(r"(?<!\\)\|", line.strip())
    return [p.strip().replace("\\|", "|") for p in parts[1:-1]]


def rows(doc_lines):
    """(line number, cells) of every body row of the refusal tables."""
    out, in_table = [], False
    for n, line in enumerate(doc_lines, 1):
        if not line.startswith("|"):
            in_table = False
            continue
        c = cells(line)
        if [x.lower() for x in c] == HEADER:
            in_table = True
        elif in_table and not set("".join(c)) <= set("-: "):
            out.append((n, c))
    return out


C_EXTS = (".c", ".h", ".cu", ".cuh")
LITERAL_RE = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
CHAR_RE = re.compile(r"'(?:[^'\\\n]|\\.)'")


def unescape(t):
    return t.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\").replace("%%", "%")


def c_messages(text):
    """The string literals of C/CUDA text, each run of adjacent literals ("a " "b", across lines)
    joined and unescaped: the messages as the program formats them."""
    text = CHAR_RE.sub("''", text)
    out, run, end = [], [], None
    for m in LITERAL_RE.finditer(text):
        if run and text[end:m.start()].strip():
            out.append("".join(run))
            run = []
        run.append(unescape(m.group(1)))
        end = m.end()
    if run:
        out.append("".join(run))
    return "\n".join(out)


def source_text(root):
    """Every source file's text in one string: C/CUDA files as their joined messages, the rest
    (shell, Python) with `\\"` read as `"`."""
    chunks = []
    for d in SOURCE_DIRS:
        for dirpath, dirnames, files in os.walk(os.path.join(root, d)):
            dirnames.sort()
            for f in sorted(files):
                if f.endswith((".o", ".a", ".so", ".pyc")):
                    continue
                try:
                    t = open(os.path.join(dirpath, f), encoding="utf-8", errors="replace").read()
                except OSError:
                    continue
                chunks.append(c_messages(t) if f.endswith(C_EXTS) else unescape(t))
    return "\n".join(chunks)


def anchor(heading):
    a = heading.strip().lower()
    a = re.sub(r"[^\w\- ]", "", a)
    return a.replace(" ", "-")


def check_rows(root, doc, lines, src):
    findings, untested = [], []
    for n, c in rows(lines):
        where = f"{doc}:{n}"
        if len(c) != 4:
            findings.append(f"{where}: {len(c)} cells, expected 4 ({' | '.join(HEADER)})")
            continue
        what, message, code, test = c
        if not what:
            findings.append(f"{where}: the row names no refusal or limit")
        for frag in CODE_RE.findall(message):
            if frag not in src:
                findings.append(f"{where}: message `{frag}` occurs nowhere in "
                                f"{', '.join(SOURCE_DIRS)}: reworded in the code? update the row")
        if code and code not in EXITS:
            findings.append(f"{where}: exit '{code}': expected one of {', '.join(sorted(EXITS))}")
        tests = CODE_RE.findall(test)
        for t in tests:
            if not os.path.isfile(os.path.join(root, t)):
                findings.append(f"{where}: test `{t}` does not exist")
        if not tests and code:
            untested.append(f"{where}: {what[:100]}")
    return findings, untested


def check_links(root, lines):
    anchors = {anchor(l.lstrip("#")) for l in lines if re.match(r"#{1,6} ", l)}
    pages = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    pages += [os.path.join(docs, f) for f in sorted(os.listdir(docs)) if f.endswith(".md")]
    findings = []
    for p in pages:
        if not os.path.isfile(p):
            continue
        for n, line in enumerate(open(p, encoding="utf-8").read().splitlines(), 1):
            for a in LINK_RE.findall(line):
                if a not in anchors:
                    findings.append(f"{os.path.relpath(p, root)}:{n}: limits.md#{a}: no such "
                                    f"section (sections: {', '.join(sorted(anchors))})")
    return findings


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    doc = os.path.join(root, "docs", "limits.md")
    try:
        lines = open(doc, encoding="utf-8").read().splitlines()
    except OSError as e:
        print(f"check_limits_doc: cannot read {doc}: {e}", file=sys.stderr)
        return 2
    body = rows(lines)
    if not body:
        print(f"check_limits_doc: {doc}: no table with the header | {' | '.join(HEADER)} |",
              file=sys.stderr)
        return 2
    findings, untested = check_rows(root, "docs/limits.md", lines, source_text(root))
    findings += check_links(root, lines)
    for f in findings:
        print(f)
    print(f"# {len(body)} rows, {len(untested)} without a test, {len(findings)} findings")
    for u in untested:
        print(f"#   no test: {u}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
