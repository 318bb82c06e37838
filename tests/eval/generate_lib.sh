# generate_lib.sh — sourced by tests/eval/test_generate*.sh and the training tests that generate
# from their checkpoints (after tests/lib.sh, with TMP set): the KV cache against the no-cache
# reference. GEN (the command) and PROMPT (the ids) default to tessera generate on one thread and
# 20 ids below 511; a test that wants others sets them before or after sourcing this.
[[ -v GEN ]] || GEN=("$TOOL" generate --set threads=1)
PROMPT=${PROMPT:-"5 17 3 250 99 12 7 300 41 8 2 66 19 101 3 77 45 9 13 21"}

# greedy MODEL NAME [ARGS]: ids of a greedy completion of PROMPT by the model in $TMP/MODEL, with
# the cache ($TMP/NAME.c, probabilities in NAME.c.probs) and without it ($TMP/NAME.n, NAME.n.probs)
greedy() {
    local m=$1 n=$2; shift 2
    "${GEN[@]}" --ckpt "$TMP/$m" --prompt-ids "$PROMPT" --temperature 0 --no-eos-stop --ids \
        --dump-probs "$TMP/$n.c.probs" "$@" >"$TMP/$n.c" 2>"$TMP/$n.c.err" &&
    "${GEN[@]}" --ckpt "$TMP/$m" --prompt-ids "$PROMPT" --temperature 0 --no-eos-stop --ids \
        --dump-probs "$TMP/$n.n.probs" --no-cache "$@" >"$TMP/$n.n" 2>"$TMP/$n.n.err"
}
# same_ids A B N: files A and B hold the same N ids, not all alike (at least 10 distinct)
same_ids() {
    local na nd
    na=$(wc -w <"$1"); nd=$(tr ' ' '\n' <"$1" | sort -u | wc -l)
    tap_diag "$(basename "$1"): $na ids, $nd distinct: $(cut -d' ' -f1-16 "$1") ..."
    [[ $na == "$3" ]] && ((nd >= 10)) && cmp -s "$1" "$2"
}
# probs_close A B: the dumped next-token probabilities of the cached path (A) and model_forward (B)
# agree: |p_cache - p_full| <= 1e-6 + 1e-4 p_full per entry. Both are fp32 forwards of the same
# maths that differ in summation order (sgemv on 1 row vs sgemm on the whole context); measured
# max 6e-7 absolute.
probs_close() {
    "$PY3" - "$1" "$2" <<'PY'
import sys, numpy as np
a, b = np.loadtxt(sys.argv[1], ndmin=2), np.loadtxt(sys.argv[2], ndmin=2)
if a.shape != b.shape or a.shape[0] < 100: print("# shapes", a.shape, b.shape); sys.exit(1)
pa, pb = a[:, 2:], b[:, 2:]
if not (np.isfinite(pa).all() and np.isfinite(pb).all()): print("# NaN or Inf"); sys.exit(1)
err = np.abs(pa - pb) / (1e-6 + 1e-4 * np.abs(pb))
print("# %d steps x %d probabilities: max |diff| %.3g, max diff/tol %.3g, rows summing to %.6f..%.6f"
      % (pa.shape[0], pa.shape[1], np.abs(pa - pb).max(), err.max(), pa.sum(1).min(), pa.sum(1).max()))
sys.exit(0 if (a[:, :2] == b[:, :2]).all() and err.max() <= 1 and abs(pa.sum(1) - 1).max() < 1e-4 else 1)
PY
}
# cached_as_uncached MODEL TOKENS: greedy TOKENS tokens after PROMPT from $TMP/MODEL (greedy's
# files $TMP/gen.*): the cache gives the no-cache forward's TOKENS ids and probabilities (probs_close)
cached_as_uncached() {
    greedy "$1" gen --max-tokens "$2" && [[ $(wc -w <"$TMP/gen.c") == "$2" ]] &&
        cmp -s "$TMP/gen.c" "$TMP/gen.n" && probs_close "$TMP/gen.c.probs" "$TMP/gen.n.probs"
}
# batched_as_alone MODEL: tessera generate --prompts (batched decoding) from $TMP/MODEL, 3 prompts
# of 7, 15 and 2 ids x 2 samples at batch 4 (a prompt's slot copied, slots reused), greedy, 30
# tokens ($TMP/batch.jsonl): each completion the ids of its prompt generated alone ($TMP/aloneN),
# the 3 not all alike; fails too where the batched run does not exit 0 (sets rc to its status)
batched_as_alone() {
    local m=$1 i p
    local P1="5 17 3 250 99 12 7" P2="300 41 8 2 66 19 101 3 77 45 9 13 21 4 88" P3="60 61"
    for p in "$P1" "$P2" "$P3"; do echo "{\"prompt_ids\": [${p// /, }]}"; done >"$TMP/prompts.jsonl"
    "${GEN[@]}" --ckpt "$TMP/$m" --prompts "$TMP/prompts.jsonl" --out "$TMP/batch.jsonl" --batch 4 \
        --samples 2 --temperature 0 --no-eos-stop --max-tokens 30 >"$TMP/batch.txt" 2>&1
    rc=$?
    for i in 1 2 3; do
        p=P$i
        "${GEN[@]}" --ckpt "$TMP/$m" --prompt-ids "${!p}" --temperature 0 --no-eos-stop --ids \
            --max-tokens 30 >"$TMP/alone$i" 2>/dev/null
    done
    "$PY3" - "$TMP/batch.jsonl" "$TMP/alone1" "$TMP/alone2" "$TMP/alone3" <<'PY' && ((rc == 0))
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
alone = [[int(x) for x in open(f).read().split()] for f in sys.argv[2:]]
got = [(r["index"], r.get("ids")) for r in rows]
for i, g in got:
    print("# batched", i, (g or [])[:12], "... alone", alone[i][:12], "...")
sys.exit(0 if len(rows) == 6 and all(g == alone[i] for i, g in got) and all(len(a) == 30 for a in alone)
         and len({tuple(a) for a in alone}) == 3 else 1)
PY
}
