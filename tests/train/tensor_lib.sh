# tensor_lib.sh — sourced after tests/lib.sh by the tensor-parallel tests (test_tensor*.sh), which
# define run DIR NP T MODEL ARGS... (DIR's output in $TMP/DIR.txt) and a model array llama
# bytes_match DIR NP T MODEL-ARRAY-NAME ARGS...: DIR's run sent what its plan says: the plan's
# bytes a rank and step (--dry-run) x NP ranks x 6 steps
bytes_match() {
    local dir=$1 np=$2
    shift
    run "$dir.plan" "$@" --dry-run || return 1
    local per sent
    per=$(grep -o 'sends [^(]*([0-9]* B) over its tensor group' "$TMP/$dir.plan.txt" | grep -o '([0-9]*' | tr -d '(')
    sent=$(grep -o 'tensor parallelism: [0-9]* bytes sent' "$TMP/$dir.txt" | grep -o '[0-9]*')
    tap_diag "$dir: sent $sent bytes, the plan $per a rank and step"
    [[ -n $per && -n $sent && $sent == $((per * np * 6)) ]]
}
refused() { # DIR NP T WANT ARGS...: exit 1, WANT in the output, nothing in DIR
    local dir=$1 np=$2 t=$3 want=$4; shift 4
    run "$dir" "$np" "$t" llama "$@"
    local rc=$?
    [[ $rc == 1 && ! -e $TMP/$dir ]] && grep -qF -- "$want" "$TMP/$dir.txt" ||
        { tap_diag "$dir: exit $rc; $(grep -m1 error "$TMP/$dir.txt")"; return 1; }
}
