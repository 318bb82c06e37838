#!/usr/bin/env bash
# The include checker (tools/check_includes.py, docs/architecture.md "Layers"): small synthetic
# trees with a clean layering, an upward include, a cycle of use, a header cycle, two folders that
# include each other (no file cycle between them), a path trick, a file no layer names and a
# document without the table; then the real tree, whose findings are listed, and the real tree
# must be clean: no cycle of files or of folders.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
CHECK=("$PY3" "$TSR_ROOT/tools/check_includes.py")
tap_plan 25

# tree NAME: a two-layer tree (base < top) in $TMP/NAME with the include paths -Isrc -Isrc/base
tree() {
    local d=$TMP/$1
    mkdir -p "$d/docs" "$d/src/base" "$d/src/top"
    printf 'CFLAGS += -Isrc -Isrc/base\n' > "$d/Makefile"
    cat > "$d/docs/architecture.md" <<'MD'
# Layers
<!-- include-layers -->
| rank | layer | files | what |
|---|---|---|---|
| 0 | base | `src/base/*` | utilities |
| 1 | top | `src/top/*`, `src/top_main.c` | the rest |
MD
    put "$1" \
        base/a.h 'int a_fn(int x);\n' \
        base/a.c '#include "a.h"\n\nint a_fn(int x) { return x + 1; }\n' \
        top/b.h '#include "a.h"\nint b_fn(int x);\n' \
        top/b.c '#include "top/b.h"\n\nint b_fn(int x) { return a_fn(x); }\n'
}
# put NAME PATH TEXT [PATH TEXT...]: writes each TEXT (its \n a newline) to $TMP/NAME/src/PATH
put() {
    local dir=$TMP/$1
    shift
    while (($# >= 2)); do printf '%b' "$2" >"$dir/src/$1"; shift 2; done
}
# expect NAME RC WHAT: the checker on $TMP/NAME exits RC (the check WHAT); sets out and rc
expect() {
    out=$("${CHECK[@]}" "$TMP/$1" 2>&1)
    rc=$?
    tap_check $((rc != $2)) "$3"
}

tree clean
expect clean 0 "a clean tree passes (exit 0)"
out_has "its summary counts 0 cycles and 0 upward includes" "0 cycles, 0 upward includes, 0 other"

tree up
put up base/a.c '#include "top/b.h"\n\nint a_fn(int x) { return x + 1; }\n'
expect up 1 "an include into a higher layer fails (exit 1)"
out_has "the finding names the file, the line and both layers" \
    "upward: src/base/a.c:1 (base, rank 0) includes src/top/b.h (top, rank 1)"

tree cycle
put cycle \
    top/x.h 'int x_fn(int n);\n' \
    top/y.h 'int y_fn(int n);\n' \
    top/x.c '#include "top/x.h"\n#include "top/y.h"\n\nint x_fn(int n) { return n ? y_fn(n - 1) : 0; }\n' \
    top/y.c '#include "top/x.h"\n#include "top/y.h"\n\nint y_fn(int n) { return n ? x_fn(n - 1) : 1; }\n'
expect cycle 1 "two sources calling each other through their headers fail (exit 1)"
out_has "the finding names the cycle and the calls" \
    "cycle: src/top/x.c -> src/top/y.c -> src/top/x.c  \[src/top/x.c calls y_fn() of src/top/y.c; src/top/y.c calls x_fn() of src/top/x.c\]"

tree hcycle
put hcycle \
    top/p.h '#include "top/q.h"\n' \
    top/q.h '#include "top/p.h"\n'
expect hcycle 1 "two headers including each other fail (exit 1)"
out_has "the finding names the header cycle" "include cycle: src/top/p.h -> src/top/q.h -> src/top/p.h"

# two folders of one rank, each including a file of the other (no file includes or uses back the
# file that includes it): a cycle of folders; one way only is fine
folders() {
    tree "$1"
    mkdir -p "$TMP/$1/src/side"
    printf '| 1 | side | `src/side/*` | a folder beside top |\n' >> "$TMP/$1/docs/architecture.md"
    put "$1" \
        side/s.h 'int s_fn(int x);\n' \
        side/s.c '#include "side/s.h"\n\nint s_fn(int x) { return x; }\n' \
        side/u.h '#include "top/b.h"\nint u_fn(int x);\n' \
        side/u.c '#include "side/u.h"\n\nint u_fn(int x) { return b_fn(x); }\n' \
        top/c.h 'int c_fn(int x);\n' \
        top/c.c '#include "top/c.h"\n\nint c_fn(int x) { return x; }\n'
}
folders oneway
expect oneway 0 "a folder that includes another one way only passes (exit 0)"
folders fcycle
put fcycle \
    top/c.h '#include "side/s.h"\nint c_fn(int x);\n' \
    top/c.c '#include "top/c.h"\n\nint c_fn(int x) { return s_fn(x); }\n'
expect fcycle 1 "two folders that include each other fail (exit 1), though no file cycle joins them"
out_has "the finding names the folders and an include each way" \
    "folder cycle: src/side -> src/top -> src/side  \[src/side/u.h:1 includes src/top/b.h; src/top/c.h:1 includes src/side/s.h\]"
tap_ok "the summary counts it among the cycles, with no file cycle" \
    eval 'grep -q "1 cycles, 0 upward includes" <<<"$out" && ! grep -q "^check_includes: cycle:\|include cycle:" <<<"$out"'

tree trick
put trick top/b.c '#include "../base/a.h"\n\nint b_fn(int x) { return a_fn(x); }\n'
expect trick 1 "an include through ../ fails (exit 1)"
out_has "the finding names it" 'path trick: src/top/b.c:1 includes "../base/a.h"'

tree nolayer
mkdir -p "$TMP/nolayer/src/odd"; printf 'int odd;\n' > "$TMP/nolayer/src/odd/o.c"
expect nolayer 1 "a file that no row of the table places fails (exit 1)"
out_has "the finding names it" "no layer: src/odd/o.c"

tree notable
printf '# Layers\nno table here\n' > "$TMP/notable/docs/architecture.md"
expect notable 2 "a document without the layer table is bad input (exit 2)"

# the most specific pattern wins: a file named by its own row is not in its folder's layer (its
# include goes to a folder that includes nothing of base: base's folder and it form no cycle)
tree specific
mkdir -p "$TMP/specific/src/extra"
printf '| 1 | top | `src/base/late.c`, `src/extra/*` | a base-folder file of the top layer |\n' >> "$TMP/specific/docs/architecture.md"
put specific \
    extra/e.h 'int e_fn(int x);\n' \
    extra/e.c '#include "extra/e.h"\n\nint e_fn(int x) { return x; }\n' \
    base/late.c '#include "extra/e.h"\n\nint late(int x) { return e_fn(x); }\n'
expect specific 0 "a file's own row beats its folder's (src/base/late.c is top: its include of extra/e.h is fine)"

# a function defined in two sources has alternative implementations, built into different programs
# (the CUDA backend and its emulator): a source calling its own definition does not use the other
tree alt
mkdir -p "$TMP/alt/src/top/emu"
put alt \
    top/xy.h 'int x_fn(int n);\nint y_fn(int n);\n' \
    top/xy.c '#include "top/xy.h"\n\nint y_fn(int n) { return n; }\nint x_fn(int n) { return y_fn(n); }\n' \
    top/emu/y_emu.c '#include "top/xy.h"\n\nint y_fn(int n) { return x_fn(n) - 1; }\n'
expect alt 0 "a source calling its own definition does not use another source's (no cycle)"

# a call through a lower layer's header into a higher layer's source is upward too
tree upcall
put upcall \
    base/a.h 'int a_fn(int x);\nint hook(int x);\n' \
    base/a.c '#include "a.h"\n\nint a_fn(int x) { return hook(x); }\n' \
    top/h.c '#include "a.h"\n\nint hook(int x) { return x; }\n'
expect upcall 1 "a base source calling a function defined in a higher layer fails"
out_has "the finding names the call" "upward: src/base/a.c calls hook() of src/top/h.c (base, rank 0 -> top, rank 1)"

# include names resolve by the Makefile's -I folders (src/base here), not only by the file's folder
tree ipath
printf 'CFLAGS += -Isrc\n' > "$TMP/ipath/Makefile"
expect ipath 0 "an include found by no -I folder is external and skipped"

# the real tree
out=$("${CHECK[@]}" "$TSR_ROOT" 2>&1); rc=$?
tap_check $((rc > 1)) "the checker reads the real tree (docs/architecture.md's table, the Makefile's -I folders)"
while IFS= read -r line; do tap_diag "$line"; done <<<"$out"
tap_check "$rc" "the real tree has no cycle and no upward include"
tap_ok "every source of src/, kernels/, healthcheck/ has a layer" bash -c '! grep -q "no layer:" <<<"$1"' _ "$out"
tap_done
