#!/usr/bin/env bash
# What a run cost (docs/site.md "What a run cost"), on real runs of the tiny model:
#  - a run stopped at step 6 (exit 85), killed after step 10 (SIGKILL: no record) and resumed from
#    its step-8 checkpoint to 12: every start event says when the process started and what it held;
#    the two starts that ended write an account record whose parts add up to their wall time, with
#    goodput = steps / wall and CPU-hours = ranks x wall; no GPU and no powercap here: energy null,
#    and the log says why; the last log's "cost: run so far" line sums the three starts;
#  - `tessera report`: the starts table (the killed one estimated, its steps 9 and 10 lost to the
#    restart, checked against the step times of metrics.jsonl), the totals, cost.txt, and sacct not
#    asked outside Slurm;
#  - NaN gradients at steps 6-8 roll back to step 4 until the guard stops (exit 2): the
#    rolled-back steps are lost, not kept, and the stop still writes the record;
#  - 2 ranks: CPU-hours count both;
#  - under Slurm (SLURM_JOB_ID set; no slurmdbd runs here, so sacct is a recording stand-in,
#    TSR_SACCT, printing what sacct -P prints): the start records the job, the trainer writes the
#    run's summary line into TSR_COMMENT_FILE (the hook makes it the job's comment after the step:
#    tests/slurm/test_sweep.sh), and the report adds sacct's Elapsed over the job's runs (-D: a
#    requeued job's earlier runs too) and sets the starts' wall time against it;
#  - `tessera report --compare` of the runs: a table of their final figures and the shared plots;
#    one run, or a directory without metrics.jsonl, refused.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 10
make_synth "$TMP/data" 512 50000
tiny_args "$TMP/data/train"
args+=(--set model.n_layer=1 --set model.n_head=4 --set global_batch=4 --set micro_batch=2
       --set max_duration=12ba --set save_interval=4ba --set keep_last=5)
# synchronous saves: the kill after step 10 must find step 8's checkpoint committed (a background
# save may still be in flight then; docs/checkpoint-format.md "Asynchronous save")
args+=(--set save_async=false)
A=$TMP/runs/stopped
TSR_FAULT=usr1:6:0 "$TRAIN" "${args[@]}" --set run_dir="$A" >"$TMP/a1.txt" 2>&1
rc1=$?
TSR_FAULT=kill:10:0 "$TRAIN" "${args[@]}" --set run_dir="$A" >"$TMP/a2.txt" 2>&1
rc2=$?
"$TRAIN" "${args[@]}" --set run_dir="$A" >"$TMP/a3.txt" 2>&1
rc3=$?
tap_check $(((rc1 != 85) + (rc2 != 137) + rc3)) "stopped (85), killed (137), resumed to the end (exit $rc1, $rc2, $rc3)"

# the records, checked by an independent reading of the file
check_records() {
    "$PY3" - "$1" "$2" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ranks = int(sys.argv[2])
starts = [l for l in lines if l.get("event") == "start"]
accts = [l for l in lines if l.get("event") == "account"]
parts = ["startup_s", "steps_s", "save_s", "load_s", "eval_s", "lost_s", "data_s", "health_s", "idle_s"]
bad = []
for s in starts:
    if not (s["ranks"] == ranks and s["gpus"] == 0 and s["threads"] == 1 and s["job"] == ""
            and 0 < s["time"] - s["started"] < 120):
        bad.append(("start", s))
for a in accts:
    tot = sum(a[p] for p in parts)
    if not (abs(tot - a["wall_s"]) <= 1e-5 * a["wall_s"] + 1e-5 and a["steps_s"] > 0
            and abs(a["goodput"] - a["steps_s"] / a["wall_s"]) < 1e-5
            and abs(a["cpu_hours"] - ranks * a["wall_s"] / 3600) < 1e-8 and a["gpu_hours"] == 0
            and a["gpu_energy_j"] is None and min(a[p] for p in parts) >= 0):
        bad.append(("account", a))
print("# starts", len(starts), "accounts", [(a["exit"], a["wall_s"]) for a in accts], "bad", bad)
sys.exit(1 if bad else 0)
PY
}
out=$(check_records "$A/metrics.jsonl" 1)
[[ $(grep -c '"event": "start"' "$A/metrics.jsonl") == 3 && $(grep -c '"event": "account"' "$A/metrics.jsonl") == 2 ]] &&
    grep -q '"event": "account", "step": 6, "exit": 85' "$A/metrics.jsonl" &&
    grep -q '"event": "account", "step": 12, "exit": 0' "$A/metrics.jsonl"
tap_check $((PIPESTATUS[0] + $?)) "3 start events with started/ranks/gpus/threads/job; 2 account records (85 and 0) whose parts add up to wall_s, goodput and CPU-hours consistent, energy null $out"

why_cpu="/sys/class/powercap: no powercap"
[[ -d /sys/class/powercap ]] && why_cpu="CPU package energy"
grep -q "^cost: this start .* 1 rank: 0 GPU-h" "$TMP/a1.txt" &&
    grep -q "GPU energy not measured (no GPU in use (device = cpu))" "$TMP/a1.txt" &&
    grep -q "$why_cpu" "$TMP/a3.txt" &&
    grep -q "^cost: run so far: tessera: 12 steps, 3 starts, 0 GPU-h, .* CPU-h, goodput .*% (startup .*lost .*)" "$TMP/a3.txt" &&
    ! grep -q "comment" "$TMP/a3.txt"
tap_check $? "the log's cost lines: this start, the energy not measured and why, the run so far over 3 starts (no Slurm: no comment)"

"$TOOL" report "$A" >"$TMP/rep.txt" 2>&1
rc=$?
want_lost=$("$PY3" - "$A/metrics.jsonl" <<'PY'
import json, sys
k, lost = 0, 0.0
for l in map(json.loads, open(sys.argv[1])):
    if l.get("event") == "start": k += 1
    elif k == 2 and "loss" in l and l["step"] > 8: lost += l["step_time_s"]
print(f"{lost:.3g}")
PY
)
sed -n '/^cost:/,/^cost file/p' "$TMP/rep.txt" | sed 's/^/# /'
grep -qE "^ +2 +6 +- +1 +0 +[0-9.e-]+ +[0-9.]+% +$want_lost +no: estimated \(killed\)" "$TMP/rep.txt" &&
    grep -qE "^ +3 +8 " "$TMP/rep.txt" && grep -q "^cost:       3 starts" "$TMP/rep.txt" &&
    grep -q "sacct:  not reconciled (no start ran under Slurm)" "$TMP/rep.txt" &&
    [[ -s $A/report/cost.txt ]] && grep -q "goodput" "$A/report/cost.txt" && ! grep -q sacct "$A/report/cost.txt"
tap_check $? "tessera report: 3 starts, the killed one estimated with steps 9-10 lost ($want_lost s), cost.txt, sacct not asked outside Slurm (exit $rc)"
wall_sum=$("$PY3" -c "
import json,sys
print(sum(l['wall_s'] for l in map(json.loads, open('$A/metrics.jsonl')) if l.get('event')=='account'))")
total=$(grep -oE 'total: wall [0-9.]+' "$TMP/rep.txt" | awk '{print $3}')
"$PY3" -c "import sys; sys.exit(0 if float('$total') > float('$wall_sum') else 1)"
tap_check $? "the total wall ($total s) is the two records' ($wall_sum s) plus the killed start's"

# ---- a rollback's lost steps ----
B=$TMP/runs/rollback
TSR_FAULT=nan:6-8:0 "$TRAIN" "${args[@]}" --set max_duration=8ba --set run_dir="$B" >"$TMP/b.txt" 2>&1
rc=$?
"$PY3" - "$B/metrics.jsonl" <<'PY'
import json, sys
a = [l for l in map(json.loads, open(sys.argv[1])) if l.get("event") == "account"][-1]
steps = sum(l["step_time_s"] for l in map(json.loads, open(sys.argv[1])) if "loss" in l)
print("# rollback run: lost", a["lost_s"], "kept", a["steps_s"], "all step lines", steps)
kept = a["lost_s"] + a["steps_s"] + a.get("health_s", 0)  # (the checks' part of the steps: health_s)
sys.exit(0 if a["lost_s"] > 0 and abs(kept - steps) < 1e-3 * steps else 1)
PY
tap_check $(($? + (rc != 2))) "NaNs at steps 6-8 roll back to step 4 (again at each return, until the guard stops: exit $rc): every thrown-away step is in lost_s, the rest in steps_s, the record written at the stop"

# ---- 2 ranks ----
C=$TMP/runs/two
"${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set max_duration=4ba --set run_dir="$C" >"$TMP/c.txt" 2>&1
rc=$?
out=$(check_records "$C/metrics.jsonl" 2)
tap_check $((rc + $?)) "2 ranks: the start and account records count 2 ranks, CPU-hours = 2 x wall (exit $rc) $out"

# ---- --compare ----
"$TOOL" report --compare "$A" "$B" "$C" >"$TMP/cmp.txt" 2>&1
rc=$?
sed 's/^/# /' "$TMP/cmp.txt" | head -6
pngs=1
if command -v gnuplot >/dev/null; then
    [[ -s $TMP/runs/compare/compare-loss.png && -s $TMP/runs/compare/compare-throughput.png ]] || pngs=0
fi
[[ $rc == 0 && $(grep -cE '^(stopped|rollback|two) ' "$TMP/runs/compare/compare.txt") == 3 ]] &&
    grep -qE '^stopped +12 ' "$TMP/cmp.txt" && grep -qE '^rollback +8 ' "$TMP/cmp.txt" && grep -qE '^two +4 ' "$TMP/cmp.txt" &&
    (($(grep -c "title 'stopped'" "$TMP/runs/compare/compare.gp") == 2)) && ((pngs))
tap_check $? "report --compare: one row per run with its last step, compare.txt and the shared plots in the runs' parent/compare (exit $rc)"
"$TOOL" report --compare "$A" >"$TMP/one.txt" 2>&1
rc1=$?
mkdir -p "$TMP/empty"
"$TOOL" report --compare "$A" "$TMP/empty" --out "$TMP/cmp2" >"$TMP/empty.txt" 2>&1
rc2=$?
[[ $rc1 == 1 && $rc2 == 2 ]] && grep -q "expected 2 to 64" "$TMP/one.txt" &&
    grep -q "$TMP/empty/metrics.jsonl: cannot open" "$TMP/empty.txt" && [[ ! -e $TMP/cmp2 ]]
tap_check $? "--compare of one run is a usage error (exit $rc1); a directory without metrics.jsonl exits 2 naming it, nothing written (exit $rc2)"
# ---- under Slurm: the comment line and sacct's Elapsed (a stand-in: no slurmdbd here) ----
printf '#!/bin/sh\nprintf "%%s\\n" "$@" > "%s/sacct.args"\nprintf "4242|00:00:05\\n4242|1-00:00:07\\n"\n' "$TMP" >"$TMP/sacct"
chmod +x "$TMP/sacct"
D=$TMP/runs/slurm
SLURM_JOB_ID=4242 TSR_COMMENT_FILE=$TMP/comment "$TRAIN" "${args[@]}" --set max_duration=4ba --set run_dir="$D" >"$TMP/d.txt" 2>&1
rc=$?
TSR_SACCT=$TMP/sacct "$TOOL" report "$D" >"$TMP/drep.txt" 2>&1
grep -q '"job": "4242"' "$D/metrics.jsonl" && grep -q "^tessera: 4 steps, 1 start, 0 GPU-h, .*goodput" "$TMP/comment" &&
    (($(wc -l <"$TMP/comment") == 1)) && grep -q "cost: the line for the job's comment in TSR_COMMENT_FILE" "$TMP/d.txt" &&
    [[ $(tr '\n' ' ' <"$TMP/sacct.args") == "-n -P -X -D -j 4242 --format=JobID,Elapsed " ]] &&
    grep -q "sacct:  jobs 4242: Elapsed 86412 s over 2 runs; tessera-train's starts" "$TMP/drep.txt"
tap_check $((rc + $?)) "under Slurm: job 4242 recorded, the summary line in TSR_COMMENT_FILE for the hook, the report sums sacct's Elapsed of 2 runs (5 s + 1 day 7 s) against the starts (exit $rc)"
tap_done
