#!/usr/bin/env bash
# test_config_docs.sh — docs/config.md must be exactly what `tessera config-doc` generates from the
# key table (src/config/config_table.c), so the documentation cannot drift from the parser.
# Regenerate with `make docs`.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 1
doc=$TSR_ROOT/docs/config.md
what="docs/config.md equals \`tessera config-doc\`"
if [[ ! -x $TOOL ]]; then
    tap_diag "$TOOL not found or not executable: run make first"
    tap_check 1 "$what"
elif ! "$TOOL" config-doc >"$TMP/config.md"; then
    tap_diag "$TOOL config-doc failed"
    tap_check 1 "$what"
elif [[ ! -f $doc ]]; then
    tap_diag "$doc is missing: run make docs"
    tap_check 1 "$what"
else
    diff -u "$doc" "$TMP/config.md" >"$TMP/diff.txt"
    status=$?
    ((status)) && { tap_diag "the key table changed: run make docs"; head -n 40 "$TMP/diff.txt" | sed 's/^/# /'; }
    tap_check $status "$what"
fi
tap_done
