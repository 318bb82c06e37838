#!/usr/bin/env bash
# test_report_grpo.sh — `tessera report` of GRPO runs (docs/tracking.md "tessera report", "Axes";
# issue 65 item 11), on a tiny GRPO run (tests/lib.sh grpo_small_args, 6 steps) whose reward
# program scores each completion 1 or 0.97 (mean rewards near 1, as a run that has learnt its task):
#  - the summary has a reward line: the first, last and largest grpo_reward_mean of metrics.jsonl;
#  - grpo.png's reward axis spans at least 0..1 (min(0, lowest) to max(1, highest), padded), not
#    the values' own 0.97..1 range, and the right axis (the rates) is on the same scale;
#  - neither the report nor `report --compare` of two one-step runs (one x value; a loss that is
#    0 at every step: one y value) lets a gnuplot warning through ("empty x range", ...);
#  - a one-step run's plots have whole-number step ticks (gnuplot's own were 0.5 apart): its
#    plots.gp drawn again by gnuplot on its text terminal, the labels under each x axis read.
# Skips (77) without gnuplot.
source "$(dirname "$0")/../lib.sh"
command -v gnuplot >/dev/null || { echo "gnuplot not found (Debian: gnuplot-nox; ./INSTALL)"; exit 77; }
for x in "$TOOL" "$TRAIN"; do [[ -x $x ]] || { echo "$x missing: run make"; exit 77; }; done
tsr_tmpdir
tap_plan 6
cat >"$TMP/reward.py" <<'PY'
import json, sys
for line in sys.stdin:
    q = json.loads(line)
    print(json.dumps({"id": q["id"], "reward": 1.0 if len(q["tokens"]) % 2 else 0.97}), flush=True)
PY
grpo_prompts "$TMP" 60 && grpo_small_args "$TMP"
small+=(--set reward.kind=command --set reward.command="$PY3 $TMP/reward.py")
"$TRAIN" "${small[@]}" --set max_duration=6ba --set run_dir="$TMP/run" >"$TMP/train.log" 2>&1 &&
    "$TRAIN" "${small[@]}" --set max_duration=1ba --set run_dir="$TMP/one" >>"$TMP/train.log" 2>&1 &&
    "$TRAIN" "${small[@]}" --set max_duration=1ba --set seed=2 --set run_dir="$TMP/two" >>"$TMP/train.log" 2>&1
tap_check $? "a 6-step GRPO run and two 1-step ones (rewards 1 or 0.97 from a reward program)" || tail -5 "$TMP/train.log"

"$TOOL" report "$TMP/run" >"$TMP/rep.out" 2>"$TMP/rep.err"
rc=$?
want=$("$PY3" -c '
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])]
s = [(r["step"], r["grpo_reward_mean"]) for r in s if "grpo_reward_mean" in r]
top = max(s, key=lambda p: p[1])
print("reward:     first %.6g (step %d), last %.6g (step %d), max %.6g (step %d)" % (s[0][1], s[0][0], s[-1][1], s[-1][0], top[1], top[0]))' "$TMP/run/metrics.jsonl")
tap_diag "$want"
((rc == 0)) && grep -qxF "$want" "$TMP/rep.out" && grep -qxF "$want" "$TMP/run/report/summary.txt"
tap_check $? "the summary's reward line: first, last and largest grpo_reward_mean of metrics.jsonl (exit $rc)"

# the y and y2 ranges set before grpo.png's plot, and the rewards' extent
"$PY3" - "$TMP/run/report/plots.gp" "$TMP/run/metrics.jsonl" <<'PY'
import json, re, sys
ranges, got = {}, None
for line in open(sys.argv[1]):
    m = re.match(r"set (y2?)range \[([-0-9.e]+):([-0-9.e]+)\]", line)
    if m: ranges[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    if line.startswith("set output") and "grpo.png" in line: got = dict(ranges); break
r = [json.loads(l).get("grpo_reward_mean") for l in open(sys.argv[2])]
r = [x for x in r if x is not None]
print("# rewards %.4g..%.4g, y %s, y2 %s" % (min(r), max(r), got and got.get("y"), got and got.get("y2")))
if not got or "y" not in got or "y2" not in got: sys.exit(1)  # autoscaled: no range set
lo, hi = got["y"]
sys.exit(0 if min(r) > 0.9 and lo <= min(0, min(r)) and hi >= max(1, max(r)) and hi - lo <= 1.2
         and got["y2"] == got["y"] else 1)
PY
tap_check $? "grpo.png: the reward axis spans 0..1 padded (not the rewards' own range), the rates' axis the same"
tap_ok "the report: no gnuplot warning on stderr" bash -c "! grep -i 'warning\|empty' '$TMP/rep.err'"

"$TOOL" report --compare "$TMP/one" "$TMP/two" --out "$TMP/cmp" >"$TMP/cmp.out" 2>"$TMP/cmp.err"
rc=$?
((rc == 0)) && [[ -s $TMP/cmp/compare-loss.png && -s $TMP/cmp/compare-throughput.png ]] &&
    ! grep -i 'warning\|empty' "$TMP/cmp.err"
tap_check $? "report --compare of two 1-step runs: drawn, no gnuplot warning (exit $rc)"

# the one-step run's plots, drawn as text: the row under each page's last border line (the bottom
# of the plot) holds the step ticks (the step is 1: the axis spans 0..2)
"$TOOL" report "$TMP/one" >/dev/null 2>&1 &&
    sed -e "s/^ *set terminal .*/set terminal dumb size 100,24/" -e "s/^set output .*/set output/" \
        "$TMP/one/report/plots.gp" | gnuplot 2>/dev/null >"$TMP/one.txt"
ticks=$(awk 'function flush() { if (last) print rows[last + 1]; n = last = 0 }
    /^\f/ { flush() } { rows[++n] = $0 } /\+-----+.*\+ *$/ { last = n } END { flush() }' "$TMP/one.txt")
tap_diag "x tick rows: $(sort -u <<<"$ticks" | tr -s ' ' | tr '\n' '|')"
(($(wc -l <<<"$ticks") >= 5)) && ! grep -q '[0-9]\.[0-9]' <<<"$ticks" && grep -qw 1 <<<"$ticks"
tap_check $? "a one-step run's plots: whole-number step ticks (no 0.5, 1.5)"
tap_done
