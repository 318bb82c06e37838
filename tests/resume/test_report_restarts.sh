#!/usr/bin/env bash
# `tessera report` marks restarts (docs/tracking.md): every {"event": "start"} line after the
# first of metrics.jsonl is a process that started again (a resume, a requeue) at its step.
#  - a real run: 4 steps, then resumed to 8: plots.gp draws one dashed line at step 4 on each of
#    the six plots (loss, throughput, mfu, lr, grad_norm; checkpoint.png: the run saved), stdout says "restarts: 1, at step 4", the PNGs are still drawn (gnuplot);
#  - a hand-made metrics.jsonl with starts at 0, 3, 3 and 7 (a crash before a checkpoint restarts
#    at the same step): lines at 3, 3 and 7, none at the first start;
#  - one start, no restart: no line.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 3
synth_tiny_args 1 4 4 --set save_interval=4ba --set run_dir="$TMP/run"
"$TRAIN" "${args[@]}" --set max_duration=4ba >/dev/null 2>&1 && "$TRAIN" "${args[@]}" --set max_duration=8ba >/dev/null 2>&1 ||
    { echo "Bail out! training failed"; exit 1; }
"$TOOL" report "$TMP/run" >"$TMP/rep.txt" 2>&1
rc=$?
arrows=$(grep -c "^set arrow from 4, graph 0 to 4, graph 1 nohead" "$TMP/run/report/plots.gp")
pngs_ok=1
if command -v gnuplot >/dev/null; then [[ $rc == 0 && -s $TMP/run/report/loss.png ]] || pngs_ok=0; fi
[[ $arrows == 1 ]] && grep -qx "restarts:   1, at step 4 (dashed lines on the plots)" "$TMP/rep.txt" && ((pngs_ok)) &&
    (($(grep -c "^set arrow" "$TMP/run/report/plots.gp") == 1)) && (($(grep -c "^plot " "$TMP/run/report/plots.gp") == 6))
tap_check $? "resumed at step 4: a restart line at step 4 (set before the 6 plots), the PNGs drawn (exit $rc)"

mkdir -p "$TMP/hand"
{
    echo '{"event": "start", "step": 0, "world": 1, "time": 1.0}'
    for s in 1 2 3; do echo "{\"step\": $s, \"loss\": 5.$s, \"tokens_per_s\": 100, \"mfu\": 0.1, \"step_time_s\": 0.1}"; done
    echo '{"event": "start", "step": 3, "world": 1, "time": 2.0}'
    echo '{"event": "start", "step": 3, "world": 2, "time": 3.0}'
    for s in 4 5 6 7; do echo "{\"step\": $s, \"loss\": 4.$s, \"tokens_per_s\": 100, \"mfu\": 0.1, \"step_time_s\": 0.1}"; done
    echo '{"event": "guard", "action": "warn", "step": 7}'
    echo '{"event": "start", "step": 7, "world": 1}'
    echo '{"step": 8, "loss": 3.0, "tokens_per_s": 100, "mfu": 0.1, "step_time_s": 0.1}'
} >"$TMP/hand/metrics.jsonl"
PATH=/nonexistent "$TOOL" report "$TMP/hand" >"$TMP/hand.txt" 2>&1 # no gnuplot needed for plots.gp
[[ $(grep "^set arrow" "$TMP/hand/report/plots.gp" | awk '{print $4}' | tr -d , | tr '\n' ' ') == "3 3 7 " ]] &&
    grep -qx "restarts:   3, at step 3, 3, 7 (dashed lines on the plots)" "$TMP/hand.txt"
tap_check $? "hand-made log with starts at 0, 3, 3, 7: restart lines at 3, 3 and 7"
grep -E "^set arrow|^restarts" "$TMP/hand/report/plots.gp" "$TMP/hand.txt" | sed 's/^/#   /'

rm -rf "$TMP/one" && mkdir -p "$TMP/one" && head -4 "$TMP/hand/metrics.jsonl" >"$TMP/one/metrics.jsonl"
PATH=/nonexistent "$TOOL" report "$TMP/one" >"$TMP/one.txt" 2>&1
! grep -q "^set arrow" "$TMP/one/report/plots.gp" && ! grep -q "^restarts" "$TMP/one.txt"
tap_check $? "a single start: no restart line"
tap_done
