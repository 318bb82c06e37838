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

# tree DIR: a two-layer tree (base < top) with the include paths -Isrc -Isrc/base
tree() {
    mkdir -p "$1/docs" "$1/src/base" "$1/src/top"
    printf 'CFLAGS += -Isrc -Isrc/base\n' > "$1/Makefile"
    cat > "$1/docs/architecture.md" <<'MD'
# Layers
<!-- include-layers -->
| rank | layer | files | what |
|---|---|---|---|
| 0 | base | `src/base/*` | utilities |
| 1 | top | `src/top/*`, `src/top_main.c` | the rest |
MD
    printf 'int a_fn(int x);\n' > "$1/src/base/a.h"
    printf '#include "a.h"\n\nint a_fn(int x) { return x + 1; }\n' > "$1/src/base/a.c"
    printf '#include "a.h"\nint b_fn(int x);\n' > "$1/src/top/b.h"
    printf '#include "top/b.h"\n\nint b_fn(int x) { return a_fn(x); }\n' > "$1/src/top/b.c"
}
# run NAME: the checker on $TMP/NAME; sets out and rc
run() { out=$("${CHECK[@]}" "$TMP/$1" 2>&1); rc=$?; }

tree "$TMP/clean"
run clean
tap_check $((rc != 0)) "a clean tree passes (exit 0)"
tap_ok "its summary counts 0 cycles and 0 upward includes" grep -q "0 cycles, 0 upward includes, 0 other" <<<"$out"

tree "$TMP/up"
printf '#include "top/b.h"\n\nint a_fn(int x) { return x + 1; }\n' > "$TMP/up/src/base/a.c"
run up
tap_check $((rc != 1)) "an include into a higher layer fails (exit 1)"
tap_ok "the finding names the file, the line and both layers" \
    grep -q "upward: src/base/a.c:1 (base, rank 0) includes src/top/b.h (top, rank 1)" <<<"$out"

tree "$TMP/cycle"
printf 'int x_fn(int n);\n' > "$TMP/cycle/src/top/x.h"
printf 'int y_fn(int n);\n' > "$TMP/cycle/src/top/y.h"
printf '#include "top/x.h"\n#include "top/y.h"\n\nint x_fn(int n) { return n ? y_fn(n - 1) : 0; }\n' > "$TMP/cycle/src/top/x.c"
printf '#include "top/x.h"\n#include "top/y.h"\n\nint y_fn(int n) { return n ? x_fn(n - 1) : 1; }\n' > "$TMP/cycle/src/top/y.c"
run cycle
tap_check $((rc != 1)) "two sources calling each other through their headers fail (exit 1)"
tap_ok "the finding names the cycle and the calls" \
    grep -q "cycle: src/top/x.c -> src/top/y.c -> src/top/x.c  \[src/top/x.c calls y_fn() of src/top/y.c; src/top/y.c calls x_fn() of src/top/x.c\]" <<<"$out"

tree "$TMP/hcycle"
printf '#include "top/q.h"\n' > "$TMP/hcycle/src/top/p.h"
printf '#include "top/p.h"\n' > "$TMP/hcycle/src/top/q.h"
run hcycle
tap_check $((rc != 1)) "two headers including each other fail (exit 1)"
tap_ok "the finding names the header cycle" grep -q "include cycle: src/top/p.h -> src/top/q.h -> src/top/p.h" <<<"$out"

# two folders of one rank, each including a file of the other (no file includes or uses back the
# file that includes it): a cycle of folders; one way only is fine
folders() {
    tree "$1"
    mkdir -p "$1/src/side"
    printf '| 1 | side | `src/side/*` | a folder beside top |\n' >> "$1/docs/architecture.md"
    printf 'int s_fn(int x);\n' > "$1/src/side/s.h"
    printf '#include "side/s.h"\n\nint s_fn(int x) { return x; }\n' > "$1/src/side/s.c"
    printf '#include "top/b.h"\nint u_fn(int x);\n' > "$1/src/side/u.h"
    printf '#include "side/u.h"\n\nint u_fn(int x) { return b_fn(x); }\n' > "$1/src/side/u.c"
    printf 'int c_fn(int x);\n' > "$1/src/top/c.h"
    printf '#include "top/c.h"\n\nint c_fn(int x) { return x; }\n' > "$1/src/top/c.c"
}
folders "$TMP/oneway"
run oneway
tap_check $((rc != 0)) "a folder that includes another one way only passes (exit 0)"
folders "$TMP/fcycle"
printf '#include "side/s.h"\nint c_fn(int x);\n' > "$TMP/fcycle/src/top/c.h"
printf '#include "top/c.h"\n\nint c_fn(int x) { return s_fn(x); }\n' > "$TMP/fcycle/src/top/c.c"
run fcycle
tap_check $((rc != 1)) "two folders that include each other fail (exit 1), though no file cycle joins them"
tap_ok "the finding names the folders and an include each way" \
    grep -q "folder cycle: src/side -> src/top -> src/side  \[src/side/u.h:1 includes src/top/b.h; src/top/c.h:1 includes src/side/s.h\]" <<<"$out"
tap_ok "the summary counts it among the cycles, with no file cycle" \
    eval 'grep -q "1 cycles, 0 upward includes" <<<"$out" && ! grep -q "^check_includes: cycle:\|include cycle:" <<<"$out"'

tree "$TMP/trick"
printf '#include "../base/a.h"\n\nint b_fn(int x) { return a_fn(x); }\n' > "$TMP/trick/src/top/b.c"
run trick
tap_check $((rc != 1)) "an include through ../ fails (exit 1)"
tap_ok "the finding names it" grep -q 'path trick: src/top/b.c:1 includes "../base/a.h"' <<<"$out"

tree "$TMP/nolayer"
mkdir -p "$TMP/nolayer/src/odd"; printf 'int odd;\n' > "$TMP/nolayer/src/odd/o.c"
run nolayer
tap_check $((rc != 1)) "a file that no row of the table places fails (exit 1)"
tap_ok "the finding names it" grep -q "no layer: src/odd/o.c" <<<"$out"

tree "$TMP/notable"
printf '# Layers\nno table here\n' > "$TMP/notable/docs/architecture.md"
run notable
tap_check $((rc != 2)) "a document without the layer table is bad input (exit 2)"

# the most specific pattern wins: a file named by its own row is not in its folder's layer (its
# include goes to a folder that includes nothing of base: base's folder and it form no cycle)
tree "$TMP/specific"
mkdir -p "$TMP/specific/src/extra"
printf '| 1 | top | `src/base/late.c`, `src/extra/*` | a base-folder file of the top layer |\n' >> "$TMP/specific/docs/architecture.md"
printf 'int e_fn(int x);\n' > "$TMP/specific/src/extra/e.h"
printf '#include "extra/e.h"\n\nint e_fn(int x) { return x; }\n' > "$TMP/specific/src/extra/e.c"
printf '#include "extra/e.h"\n\nint late(int x) { return e_fn(x); }\n' > "$TMP/specific/src/base/late.c"
run specific
tap_check $((rc != 0)) "a file's own row beats its folder's (src/base/late.c is top: its include of extra/e.h is fine)"

# a function defined in two sources has alternative implementations, built into different programs
# (the CUDA backend and its emulator): a source calling its own definition does not use the other
tree "$TMP/alt"
mkdir -p "$TMP/alt/src/top/emu"
printf 'int x_fn(int n);\nint y_fn(int n);\n' > "$TMP/alt/src/top/xy.h"
printf '#include "top/xy.h"\n\nint y_fn(int n) { return n; }\nint x_fn(int n) { return y_fn(n); }\n' > "$TMP/alt/src/top/xy.c"
printf '#include "top/xy.h"\n\nint y_fn(int n) { return x_fn(n) - 1; }\n' > "$TMP/alt/src/top/emu/y_emu.c"
run alt
tap_check $((rc != 0)) "a source calling its own definition does not use another source's (no cycle)"

# a call through a lower layer's header into a higher layer's source is upward too
tree "$TMP/upcall"
printf 'int a_fn(int x);\nint hook(int x);\n' > "$TMP/upcall/src/base/a.h"
printf '#include "a.h"\n\nint a_fn(int x) { return hook(x); }\n' > "$TMP/upcall/src/base/a.c"
printf '#include "a.h"\n\nint hook(int x) { return x; }\n' > "$TMP/upcall/src/top/h.c"
run upcall
tap_check $((rc != 1)) "a base source calling a function defined in a higher layer fails"
tap_ok "the finding names the call" grep -q "upward: src/base/a.c calls hook() of src/top/h.c (base, rank 0 -> top, rank 1)" <<<"$out"

# include names resolve by the Makefile's -I folders (src/base here), not only by the file's folder
tree "$TMP/ipath"
printf 'CFLAGS += -Isrc\n' > "$TMP/ipath/Makefile"
run ipath
tap_check $((rc != 0)) "an include found by no -I folder is external and skipped"

# the real tree
out=$("${CHECK[@]}" "$TSR_ROOT" 2>&1); rc=$?
tap_check $((rc > 1)) "the checker reads the real tree (docs/architecture.md's table, the Makefile's -I folders)"
while IFS= read -r line; do tap_diag "$line"; done <<<"$out"
tap_check "$rc" "the real tree has no cycle and no upward include"
tap_ok "every source of src/, kernels/, healthcheck/ has a layer" bash -c '! grep -q "no layer:" <<<"$1"' _ "$out"
tap_done
