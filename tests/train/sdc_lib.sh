# sdc_lib.sh — what the silent-data-corruption tests read from a run directory ($TMP/DIR),
# sourced after tests/lib.sh by tests/train/test_sdc*.sh
culprit() { # culprit DIR KEY: a field of DIR's sdc-culprit.json
    "$PY3" -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print(v if not isinstance(v, list) else ",".join(map(str, v)))' "$TMP/$1/sdc-culprit.json" "$2" 2>/dev/null
}
health() { # health DIR KEY: a field of DIR's {"event": "health"} record
    "$PY3" -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if "\"event\": \"health\"" in l]
print(r[-1][sys.argv[2]] if r else "none")' "$TMP/$1/metrics.jsonl" "$2"
}
