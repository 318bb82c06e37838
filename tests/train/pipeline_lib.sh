# pipeline_lib.sh — sourced by the pipeline tests (test_pipeline*.sh), after their array llama
# refused RUN ARGS...: a dry run (one rank) that must exit 1 and write nothing; its error line
refused() {
    local dir=$1; shift
    "$TRAIN" "${llama[@]}" --set run_dir="$TMP/$dir" "$@" --dry-run >"$TMP/$dir.txt" 2>&1
    local rc=$?
    ((rc == 1)) && [[ ! -e $TMP/$dir ]] || { tap_diag "$dir: exit $rc"; return 1; }
}
err() { grep -m1 'error:' "$TMP/$1.txt"; }
