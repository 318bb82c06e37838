#!/usr/bin/env bash
# The long-function lint (tools/long_functions.py, docs/style.md "No product function longer than
# about 80 lines"): a synthetic tree whose functions are 80 lines and whose other braces (a long
# initializer, a struct, a macro, comments and strings holding braces) are not functions; then an
# 81-line function, one with a multi-line signature and one behind __attribute__, each named; the
# known exceptions (allowed up to their count, over it a finding, stale ones a finding, a bad line
# bad input); then the real tree, which must be clean.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
CHECK=("$PY3" "$TSR_ROOT/tools/long_functions.py")
tap_plan 12

# body N: N lines of statements
body() { local k; for ((k = 0; k < $1; k++)); do echo "    x += $k;"; done; }
# fn NAME LINES: a definition of LINES lines, name and braces included
fn() { printf 'int %s(int x) {\n' "$1"; body $(($2 - 2)); printf '}\n'; }
# tree DIR: src/, kernels/ and checkpoint/ with functions of 80 lines at most and long non-functions
tree() {
    mkdir -p "$1/src/a" "$1/kernels" "$1/checkpoint" "$1/tools"
    { fn a_eighty 80; fn a_short 3
      printf 'static const int table[] = {\n'; body 90 | sed 's/x += \(.*\);/\1,/'; printf '};\n'
      printf 'struct big {\n'; body 90 | sed 's/x += \(.*\);/int f\1;/'; printf '};\n'
      printf '#define MACRO(y) static int m_fn(int x) { \\\n'; body 90 | sed 's/$/ \\/'; printf '}\n'
      printf '/* in a comment:\nint c_fn(int x) {\n'; body 90; printf '}\n*/\n'
      printf 'const char *s = "s_fn(x) {"; const char *e = "}";\n'
    } > "$1/src/a/a.c"
    fn k_fn 12 > "$1/kernels/k.cu"
    fn c_fn 5 > "$1/checkpoint/c.h"
}
# run NAME [ARGS]: the checker on $TMP/NAME; sets out and rc
run() { local d=$1; shift; out=$("${CHECK[@]}" "$@" "$TMP/$d" 2>&1); rc=$?; }

tree "$TMP/clean"
run clean
tap_check $((rc != 0)) "80-line functions, a long initializer, struct, macro and comment pass (exit 0)"
tap_ok "the summary counts none over 80" grep -q "0 over 80 lines, 0 known exceptions, 0 findings" <<<"$out"

tree "$TMP/long"
{ fn b_long 81
  printf 'static void\nb_sig(int a,\n      int b)\n{\n'; body 78; printf '}\n'
  printf '__attribute__((unused)) static int b_attr(int x) __attribute__((cold));\n'
  printf 'static int b_attr(int x) __attribute__((noinline)) {\n'; body 79; printf '}\n'
} > "$TMP/long/src/a/b.c"
run long
tap_check $((rc != 1)) "a function of 81 lines fails (exit 1)"
tap_ok "the finding names the file, the line, the function and its lines" \
    grep -q "long function: src/a/b.c:1: b_long: 81 lines, over 80" <<<"$out"
tap_ok "a multi-line signature counts from the name's line, a definition after __attribute__ too" \
    bash -c 'grep -q "src/a/b.c:83: b_sig: 82 lines" <<<"$1" && grep -q "src/a/b.c:166: b_attr: 81 lines" <<<"$1"' _ "$out"
run long --max 85
tap_check $((rc != 0)) "--max 85 lets them pass"

tree "$TMP/known"
fn k_long 90 > "$TMP/known/kernels/k.cu"
printf '# comment\nkernels/k.cu k_long 90  a reason\n' > "$TMP/known/tools/long_functions.known"
run known
tap_check $((rc != 0)) "a known exception passes at its count"
fn k_long 91 > "$TMP/known/kernels/k.cu"
run known
tap_ok "grown past its count, it fails" \
    bash -c '(($2 == 1)) && grep -q "kernels/k.cu:1: k_long: 91 lines, over the known exception.s 90" <<<"$1"' _ "$out" "$rc"
fn k_long 80 > "$TMP/known/kernels/k.cu"
run known
tap_ok "an exception no longer over the limit is stale and fails" \
    bash -c '(($2 == 1)) && grep -q "stale exception: kernels/k.cu: k_long" <<<"$1"' _ "$out" "$rc"
printf 'kernels/k.cu k_long many  a reason\n' > "$TMP/known/tools/long_functions.known"
run known
tap_check $((rc != 2)) "a malformed exception line is bad input (exit 2)"

# the real tree
out=$("${CHECK[@]}" "$TSR_ROOT" 2>&1); rc=$?
while IFS= read -r line; do tap_diag "$line"; done <<<"$out"
tap_check $((rc > 1)) "the checker reads the real tree"
tap_check "$rc" "the real tree has no function over 80 lines but its known exceptions"
tap_done
