#!/usr/bin/env python3
"""check_includes.py — the include graph of tessera's C/CUDA sources against its layer order.

Reads every `#include "..."` line of src/, checkpoint/, kernels/ and healthcheck/ (under ROOT, default: this
checkout), resolves each name the way the compiler does (the including file's folder first, then
the -I folders the Makefile names, in the Makefile's order; a name found nowhere in the tree is a
system or external header and is skipped), and fails on

  - a cycle: module A includes module B and B (directly or through others) includes A, where a
    module is a source and its header (src/base/common.c + src/base/common.h = src/base/common);
  - a cycle of folders: a file of folder A includes a file of folder B and a file of B (directly,
    or through other folders) includes one of A, whatever the files (two folders that include
    each other are the shortest; the layer table may rank them alike, the folders still form no
    circle);
  - an upward include: a file of a lower layer including a file of a higher one;
  - a file that no row of the layer table places.

The layer table is the one in docs/architecture.md under the line holding "include-layers" (so the
document and the check cannot drift): rows "| rank | layer | patterns | ... |", patterns are
backquoted shell globs relative to ROOT (`*` also crosses `/`), and a file's layer is the row with
the longest matching pattern (`src/*/*_cmd.*` beats `src/data/*`). Layers of the same rank may
include each other (but not in a cycle).

Usage: tools/check_includes.py [ROOT]      exit 0: clean; 1: violations (each named); 2: bad input
"""
import fnmatch
import os
import re
import sys

SOURCE_DIRS = ("src", "checkpoint", "kernels", "healthcheck")
EXTS = (".c", ".h", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
MARKER = "include-layers"


def fail_input(msg):
    print(f"check_includes: {msg}", file=sys.stderr)
    sys.exit(2)


def read_layers(root):
    """[(pattern, rank, layer)] from the table under the include-layers line of docs/architecture.md."""
    doc = os.path.join(root, "docs", "architecture.md")
    try:
        lines = open(doc, encoding="utf-8").read().splitlines()
    except OSError as e:
        fail_input(f"cannot read the layer table: {e}")
    start = next((i for i, l in enumerate(lines) if MARKER in l), None)
    if start is None:
        fail_input(f"{doc}: no line naming '{MARKER}' above the layer table")
    rows, in_table = [], False
    for line in lines[start + 1:]:
        if not line.startswith("|"):
            if in_table:
                break
            continue
        in_table = True
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].isdigit():
            continue  # the header row and the |---| line
        patterns = re.findall(r"`([^`]+)`", cells[2])
        if not patterns:
            fail_input(f"{doc}: layer '{cells[1]}' names no `pattern`")
        for p in patterns:
            rows.append((p, int(cells[0]), cells[1]))
    if not rows:
        fail_input(f"{doc}: the table under '{MARKER}' has no rows")
    return rows


def specificity(pattern):
    """Literal characters in the pattern's last component, then in the whole pattern."""
    literal = lambda p: len(re.sub(r"[*?]|\[[^]]*\]", "", p))
    return (literal(pattern.rsplit("/", 1)[-1]), literal(pattern))


def layer_of(path, rows):
    best = None
    for pattern, rank, name in rows:
        if fnmatch.fnmatchcase(path, pattern) and (best is None or specificity(pattern) > specificity(best[0])):
            best = (pattern, rank, name)
    return best


def include_dirs(root):
    """The -I folders of the Makefile (and the makefiles it includes from tests/), in order."""
    dirs = []
    for mk in ("Makefile", os.path.join("tests", "fuzz", "fuzz.mk")):
        try:
            text = open(os.path.join(root, mk), encoding="utf-8").read()
        except OSError:
            continue
        for d in re.findall(r"(?<![\w$(])-I([A-Za-z0-9_./-]+)", text):
            d = os.path.normpath(d)
            if d not in dirs and os.path.isdir(os.path.join(root, d)):
                dirs.append(d)
    return dirs


def source_files(root):
    out = []
    for top in SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(EXTS):
                    out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return out


def resolve(root, src, name, dirs):
    for d in [os.path.dirname(src)] + dirs:
        cand = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


COMMENT_OR_STRING = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
NOT_A_FUNCTION = re.compile(r"^(#|static\b|typedef\b|extern\b|return\b|struct\b|enum\b|union\b|if\b|for\b|while\b|switch\b|else\b|do\b)")
COLUMN0_NAME = re.compile(r"^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(", re.M)
CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def strip(text):
    """The code without comments and literals (a literal becomes "")."""
    return COMMENT_OR_STRING.sub(lambda m: '""' if m.group(0)[0] in "\"'" else " ", text)


def column0_functions(code, definitions):
    """Names of the non-static functions declared (headers) or defined (sources) at column 0."""
    names = set()
    for m in COLUMN0_NAME.finditer(code):
        line = code[m.start():code.find("\n", m.start())]
        if NOT_A_FUNCTION.match(line):
            continue
        if definitions:  # a definition: its parameter list is followed by a body, not by ';'
            rest = code[m.end():]
            brace, semi = rest.find("{"), rest.find(";")
            if brace < 0 or (0 <= semi < brace):
                continue
        names.add(m.group(1))
    return names


def definers(user, where):
    """The sources whose definition of a function `user` links to. A function defined in several
    sources has alternative implementations built into different programs (the CUDA backend and its
    emulator, the MPI and NCCL communicators): the user's own, else those in the user's folder, else
    all of them."""
    if user in where:
        return []
    near = [v for v in where if os.path.dirname(v) == os.path.dirname(user)]
    return sorted(near or where)


def uses_graph(files, code, includes):
    """Source -> the sources whose functions it calls through the headers it includes: U uses V
    when U calls f, a header U includes (directly or through other headers) declares f, and V
    defines f. A source's own header joins the two halves of one file pair, so common.c including
    dist.h and dist.c including common.h is the cycle common.c -> dist.c -> common.c."""
    sources = [f for f in files if f.endswith((".c", ".cu"))]
    headers = [f for f in files if not f.endswith((".c", ".cu"))]
    defined_in = {}
    for f in sources:
        for name in column0_functions(code[f], True):
            defined_in.setdefault(name, set()).add(f)
    declares = {h: column0_functions(code[h], False) for h in headers}
    edges, evidence = {}, {}
    for u in sources:
        seen, todo = set(), [t for t, _ in includes[u]]
        while todo:
            h = todo.pop()
            if h in seen or h not in declares:
                continue
            seen.add(h)
            todo.extend(t for t, _ in includes[h])
        reachable = set().union(*(declares[h] for h in seen)) if seen else set()
        for name in sorted(set(CALL.findall(code[u])) & reachable):
            for v in definers(u, defined_in.get(name, set())):
                edges.setdefault(u, set()).add(v)
                evidence.setdefault((u, v), f"{u} calls {name}()")
    return edges, evidence


def find_cycles(edges):
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, sccs, counter = {}, {}, set(), [], [], [0]
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    sccs.append(sorted(comp))
    return sccs


def one_cycle(comp, edges):
    """A shortest path from comp[0] back to itself inside the component."""
    members, first = set(comp), comp[0]
    prev, frontier = {first: None}, [first]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges.get(v, ())):
                if w == first:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [first]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp + [first]


def folder_cycles(includes):
    """Cycles of the folder graph: folder A -> folder B when a file of A includes a file of B
    (the first such include kept as evidence). Returns [(path, evidence, members)] per strongly
    connected component: its shortest cycle from its first folder, 'A/x.c:L includes B/y.h' per
    step, and all its folders."""
    edges, evidence = {}, {}
    for src in sorted(includes):
        for target, lineno in includes[src]:
            a, b = os.path.dirname(src), os.path.dirname(target)
            if a == b:
                continue
            edges.setdefault(a, set()).add(b)
            evidence.setdefault((a, b), f"{src}:{lineno} includes {target}")
    out = []
    for comp in find_cycles(edges):
        path = one_cycle(comp, edges)
        out.append((path, [evidence[(path[i], path[i + 1])] for i in range(len(path) - 1)], comp))
    return out


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    rows = read_layers(root)
    dirs = include_dirs(root)
    files = source_files(root)
    problems, code, includes, n_includes = [], {}, {}, 0
    for src in files:
        src_layer = layer_of(src, rows)
        if src_layer is None:
            problems.append(f"no layer: {src} matches no pattern of docs/architecture.md's layer table")
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
            text = f.read()
        code[src], includes[src] = strip(text), []
        for lineno, line in enumerate(text.splitlines(), 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            name = m.group(1)
            if "../" in name:
                problems.append(f"path trick: {src}:{lineno} includes \"{name}\" (name it by an include path)")
            target = resolve(root, src, name, dirs)
            if target is None or target == src:
                continue
            n_includes += 1
            includes[src].append((target, lineno))
            dst_layer = layer_of(target, rows)
            if src_layer and dst_layer and dst_layer[1] > src_layer[1]:
                problems.append(f"upward: {src}:{lineno} ({src_layer[2]}, rank {src_layer[1]}) includes "
                                f"{target} ({dst_layer[2]}, rank {dst_layer[1]})")
    # a header cycle (a.h includes b.h includes a.h), then a cycle of use between sources
    header_edges = {f: {t for t, _ in inc} for f, inc in includes.items() if inc}
    cycles = find_cycles(header_edges)
    for comp in cycles:
        problems.append(f"include cycle: {' -> '.join(one_cycle(comp, header_edges))}")
    folders = folder_cycles(includes)
    for path, steps, comp in folders:
        members = ""
        if len(comp) > len(path) - 1:
            members = f" (one of {len(comp)} folders in a cycle: {', '.join(comp)})"
        problems.append(f"folder cycle: {' -> '.join(path)}  [{'; '.join(steps)}]{members}")
    edges, evidence = uses_graph(files, code, includes)
    for u in sorted(edges):  # a call into a higher layer through a header of a lower one
        lu = layer_of(u, rows)
        for v in sorted(edges[u]):
            lv = layer_of(v, rows)
            if lu and lv and lv[1] > lu[1]:
                problems.append(f"upward: {evidence[(u, v)]} of {v} ({lu[2]}, rank {lu[1]} -> {lv[2]}, rank {lv[1]})")
    use_cycles = find_cycles(edges)
    for comp in use_cycles:
        path = one_cycle(comp, edges)
        steps = "; ".join(f"{evidence[(path[i], path[i + 1])]} of {path[i + 1]}" for i in range(len(path) - 1))
        members = f" (one of {len(comp)} files in a cycle: {', '.join(comp)})" if len(comp) > len(path) - 1 else ""
        problems.append(f"cycle: {' -> '.join(path)}  [{steps}]{members}")
    for p in problems:
        print(f"check_includes: {p}")
    n_up = sum(p.startswith("upward") for p in problems)
    n_cycles = len(cycles) + len(folders) + len(use_cycles)
    print(f"check_includes: {len(files)} files, {n_includes} includes, {n_cycles} cycles, "
          f"{n_up} upward includes, {len(problems) - n_cycles - n_up} other problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
