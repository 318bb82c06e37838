# sdc_lib.sh — how the silent-data-corruption tests run the trainer and what they read from a run
# directory ($TMP/DIR), sourced after tests/lib.sh by tests/train/test_sdc*.sh
# run NP DIR [SETTINGS...]: the test's `args` on NP ranks in $TMP/DIR, its output in $TMP/DIR.txt
run() { local np=$1 dir=$2; shift 2; ranks "$np" "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
# fault_refused FAULT DIR TEXT WHAT [SETTINGS...]: a run of 2 ranks under TSR_FAULT=FAULT is
# refused at start: exit 1, nothing written in $TMP/DIR, its output saying TEXT (a grep pattern)
fault_refused() {
    local fault=$1 dir=$2 text=$3 what=$4 rc
    shift 4
    TSR_FAULT=$fault run 2 "$dir" "$@"
    rc=$?
    [[ $rc == 1 && ! -e $TMP/$dir ]] && grep -q "$text" "$TMP/$dir.txt"
    tap_check $? "$what (exit $rc)"
}
culprit() { # culprit DIR KEY: a field of DIR's sdc-culprit.json
    "$PY3" -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print(v if not isinstance(v, list) else ",".join(map(str, v)))' "$TMP/$1/sdc-culprit.json" "$2" 2>/dev/null
}
health() { # health DIR KEY: a field of DIR's {"event": "health"} record
    "$PY3" -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if "\"event\": \"health\"" in l]
print(r[-1][sys.argv[2]] if r else "none")' "$TMP/$1/metrics.jsonl" "$2"
}
