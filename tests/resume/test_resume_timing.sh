#!/usr/bin/env bash
# After a resume the ETA and the closing average divide this process's time by this process's
# steps (they divided by every step of the run: a requeued job printed "eta 7s" with 33 s left),
# and every metrics.jsonl line carries its wall-clock time (docs/tracking.md):
#  - a tiny run trains 8 steps, then a rerun resumes at 8 and trains to 20 with every step slowed
#    to >= 250 ms (TSR_FAULT=slow): its "done" average is within 25% of the median step time it
#    printed, and the ETA printed at step 10 (10 steps left) is 2..4 s (it was under 1 s); the
#    process's first step (9: start-up and page faults, no average yet) prints "eta -";
#  - every line of metrics.jsonl has "time" (unix seconds, ms), inside the wall-clock window of
#    the process that wrote it, never decreasing; and the two processes' "start" lines say steps
#    0 and 8.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 5
synth_tiny_args 1 4 4 --set save_interval=8ba --set run_dir="$TMP/run"
t0=$(date +%s.%N)
"$TRAIN" "${args[@]}" --set max_duration=8ba >"$TMP/a.txt" 2>&1 || { cat "$TMP/a.txt"; exit 1; }
t1=$(date +%s.%N)
TSR_FAULT=slow:250:0 "$TRAIN" "${args[@]}" --set max_duration=20ba >"$TMP/b.txt" 2>&1 || { cat "$TMP/b.txt"; exit 1; }
t2=$(date +%s.%N)
grep -E "^(step|done|checkpoint)" "$TMP/b.txt" | sed 's/^/# /'

"$PY3" - "$TMP/b.txt" <<'PY'
import re, sys, statistics
out = open(sys.argv[1]).read()
ms = [float(m) for s, m in re.findall(r"^step +(\d+)/20 .*\| ([0-9.]+) ms \|", out, re.M) if int(s) > 9]
avg = float(re.search(r"^done: .* ([0-9.]+) ms/step average", out, re.M).group(1))
med = statistics.median(ms)
print(f"# done average {avg} ms, median printed step {med} ms over {len(ms)} steps")
sys.exit(0 if len(ms) >= 10 and abs(avg - med) <= 0.25 * med else 1)
PY
tap_check $? "after a resume at step 8 the closing average is this process's own (within 25% of its median step)"

eta=$(grep -E "^step +10/20 " "$TMP/b.txt" | sed -E 's/.*eta ([0-9]+)s$/\1/')
[[ $eta =~ ^[0-9]+$ ]] && ((eta >= 2 && eta <= 4))
tap_check $? "ETA at step 10 of 20 (10 steps of >= 250 ms left) is 2..4 s: '$eta'"
grep -qE "^step +9/20 .*\| eta -$" "$TMP/b.txt"
tap_check $? "the resumed process's first step (9) prints 'eta -': no average to predict from yet"

"$PY3" - "$TMP/run/metrics.jsonl" "$t0" "$t1" "$t2" <<'PY'
import json, sys
t0, t1, t2 = map(float, sys.argv[2:])
lines = [json.loads(l) for l in open(sys.argv[1])]
times = [d.get("time") for d in lines]
starts = [i for i, d in enumerate(lines) if d.get("event") == "start"]
ok = all(isinstance(t, (int, float)) for t in times) and len(starts) == 2
ok = ok and all(b >= a for a, b in zip(times, times[1:]))
# lines of the first process lie in [t0, t1], those of the second in [t1, t2] (ms rounding)
ok = ok and all(t0 - 0.002 <= times[i] <= t1 + 0.002 for i in range(starts[1]))
ok = ok and all(t1 - 0.002 <= times[i] <= t2 + 0.002 for i in range(starts[1], len(lines)))
print(f"# {len(lines)} lines, times {times[0]}..{times[-1]}, window {t0:.3f}..{t2:.3f}")
sys.exit(0 if ok else 1)
PY
tap_check $? "every metrics.jsonl line has a wall-clock \"time\" inside its process's window, non-decreasing"

[[ $(grep '"event": "start"' "$TMP/run/metrics.jsonl" | sed -E 's/.*"step": ([0-9]+),.*/\1/' | tr '\n' ' ') == "0 8 " ]]
tap_check $? "the two processes' start lines say steps 0 and 8"
tap_done
