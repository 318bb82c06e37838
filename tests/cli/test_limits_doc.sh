#!/usr/bin/env bash
# test_limits_doc.sh — docs/limits.md states every refusal and limit once, with its message and the
# test that shows it (tools/check_limits_doc.py): the real tree is consistent (every quoted message
# occurs in the sources, every named test exists, every docs/*.md link to a section of limits.md
# resolves); then a small synthetic tree, consistent, and one broken thing at a time, each named:
# a message reworded in the code, a message split over C string literals (found), a test that
# does not exist, an exit that is no exit code, a link to a section that does not exist.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
CHECK=("$PY3" "$TSR_ROOT/tools/check_limits_doc.py")
tap_plan 7

out=$("${CHECK[@]}" "$TSR_ROOT" 2>&1)
rc=$?
printf '%s\n' "$out" | sed 's/^#* */# /'
tap_check $rc "docs/limits.md against this tree: $(printf '%s\n' "$out" | grep -m1 'rows,' | sed 's/^# //')"

# tree: a consistent small tree under $TMP/t
tree() {
    rm -rf "$TMP/t"
    mkdir -p "$TMP/t/docs" "$TMP/t/src" "$TMP/t/tests/cli"
    cat >"$TMP/t/src/x.c" <<'C'
static void refuse(int n) {
    tsr_error("%s: widgets = %d: at most 16 widgets are "
              "supported (\"wide\" ones: 8)", where, n);
}
C
    printf '#!/bin/sh\n' >"$TMP/t/tests/cli/test_x.sh"
    cat >"$TMP/t/docs/limits.md" <<'MD'
# Refusals and limits

## Widgets

| refusal or limit | message | exit | test |
|---|---|---|---|
| at most 16 widgets | `at most 16 widgets are supported ("wide" ones: 8)` | 1 | `tests/cli/test_x.sh` |
| a bound with no message | — | — | — |
MD
    printf 'Widgets are bounded: [limits](limits.md#widgets).\n' >"$TMP/t/docs/other.md"
}
# broken WHAT SED_SCRIPT FILE WANT: the tree with FILE edited fails (exit 1) naming WANT
broken() {
    tree
    sed -i "$2" "$TMP/t/$3"
    out=$("${CHECK[@]}" "$TMP/t" 2>&1)
    rc=$?
    ((rc == 1)) && grep -qF -- "$4" <<<"$out"
    tap_check $? "$1: exit $rc (want 1), naming \"$4\""
    ((rc == 1)) || printf '%s\n' "$out" | sed 's/^/#   /'
}

tree
out=$("${CHECK[@]}" "$TMP/t" 2>&1)
rc=$?
((rc == 0)) && grep -q "2 rows, 1 without a test, 0 findings" <<<"$out"
tap_check $? "a consistent tree passes, its message found across two C string literals and their \\\" (exit $rc)"
((rc == 0)) || printf '%s\n' "$out" | sed 's/^/#   /'
# shellcheck disable=SC2016 # (the backquotes are the page's, not commands)
broken "a message reworded in the code" 's/at most 16 widgets/at most 32 widgets/' src/x.c \
    'message `at most 16 widgets are supported ("wide" ones: 8)` occurs nowhere'
broken "a row's message not in the code" 's/("wide" ones: 8)/("wide" ones: 9)/' docs/limits.md \
    'occurs nowhere'
# shellcheck disable=SC2016
broken "a test that does not exist" 's#tests/cli/test_x.sh#tests/cli/test_y.sh#' docs/limits.md \
    'test `tests/cli/test_y.sh` does not exist'
broken "an exit that is no exit code" 's/| 1 |/| one |/' docs/limits.md "exit 'one'"
broken "a link to a section that does not exist" 's/#widgets/#gadgets/' docs/other.md \
    'docs/other.md:1: limits.md#gadgets: no such section'
tap_done
