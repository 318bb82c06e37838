#!/usr/bin/env bash
# Tracking (docs/tracking.md): the TensorBoard event files the trainer writes and `tessera report`.
#  - a short real run (tiny model, synthetic data, 2 MPI ranks, eval every 4 steps) writes one
#    event file under run_dir/tb/ with TensorBoard's name; a reader written here (TFRecord framing
#    with both masked CRC32Cs verified, the Event/Summary/Value protobufs decoded by hand) finds the
#    file_version record first, every step's scalars equal to metrics.jsonl's (float32 rounding), the peak memory figures
#    never falling, within 10% of the plan (CPU) and under the resident peak,
#    and eval/val_loss at the eval steps;
#  - the reader is no rubber stamp: a flipped data byte, a flipped length byte, and a loss changed
#    in metrics.jsonl each make it fail;
#  - SIGUSR1 (exit 85) and a rerun: a second event file; the two together cover every step, and
#    the losses equal the uninterrupted run's; rank 0 SIGKILLed after step 6: its file (flushed
#    per record) reads to its end with steps 1..6, and the rerun from step 4 re-logs 5 and 6;
#  - on a hand-made DPO run of a mixture of experts (120 steps), the report draws lr.png,
#    grad_norm.png, moe.png (the expert load's cv) and dpo.png with the validation accuracy, the
#    per-step curves' datablocks hold the values and their moving average (recomputed here), and
#    the summary and plots say neither "ppl" nor "nats/token";
#  - `tessera report` writes five PNGs (signature, 960x600 header, plausible size) and a summary
#    whose numbers are recomputed here from metrics.jsonl; on a hand-made metrics.jsonl (steps
#    logged twice, nulls, event lines, nested values, escapes) it gives the summary worked out by
#    hand; a line that is not JSON, a missing run dir, a missing metrics.jsonl and a missing
#    gnuplot exit 2 naming the cause (the summary is still written without gnuplot); usage errors
#    exit 1.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 15
diag_file() { sed 's/^/# /' "$@"; }
PY=/usr/bin/python3
make_synth "$TMP/data"
args=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.vocab_size=512 --set data.tokenizer=
      --set sample.tokens=0 --set data.train="$TMP/data/train" --set data.val="$TMP/data/val"
      --set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set seq_len=32
      --set global_batch=8 --set micro_batch=2 --set max_duration=12ba --set eval_interval=4ba
      --set eval_samples=16 --set save_interval=4ba --set threads=1)
run() { local dir=$1; shift; "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$dir" "$@"; }

# The reader (TFRecord and protobuf by hand): tests/train/tb_events.py
TBPY=$TSR_ROOT/tests/train/tb_events.py
tb() { "$PY" "$TBPY" "$@"; }

# ---- a run: one event file, the scalars of metrics.jsonl ----
run "$TMP/A" >"$TMP/A.txt" 2>&1
rc=$?
files=("$TMP"/A/tb/events.out.tfevents.*)
host=$(hostname)
[[ $rc == 0 && ${#files[@]} == 1 && ${files[0]##*/} =~ ^events\.out\.tfevents\.[0-9]{10}\.${host//./\\.}$ ]]
tap_check $? "12 steps on 2 ranks (exit $rc): one event file in run_dir/tb/, named events.out.tfevents.SECONDS.HOST (${files[0]##*/})"
tb check "$TMP/A"
tap_check $? "reader (TFRecord CRCs, protobuf by hand): file_version first; every step's train/* and memory/ scalars and eval/* at steps 4, 8, 12 equal metrics.jsonl (float32); peak memory never falls, within 10% of the plan, under the resident peak"

# ---- the reader can fail ----
tb read "${files[0]}" >/dev/null &&
    tb corrupt "${files[0]}" "$TMP/bad-data" data && tb corrupt "${files[0]}" "$TMP/bad-len" length
! tb read "$TMP/bad-data" 2>"$TMP/bad-data.err" && grep -q "data crc mismatch" "$TMP/bad-data.err" &&
    ! tb read "$TMP/bad-len" 2>"$TMP/bad-len.err" && grep -q "length crc mismatch" "$TMP/bad-len.err"
tap_check $? "one flipped bit in a record's data, or in its length, fails the reader's CRC check ($(cat "$TMP/bad-data.err" "$TMP/bad-len.err" | sed 's/.*: //' | paste -sd';'))"
mkdir -p "$TMP/A2" && ln -s "$TMP/A/tb" "$TMP/A2/tb" &&
    "$PY" -c 'import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d.get("step") == 7 and "loss" in d: d["loss"] += 2e-5
    print(json.dumps(d))' "$TMP/A/metrics.jsonl" >"$TMP/A2/metrics.jsonl"
! tb check "$TMP/A2" >"$TMP/A2.txt" && grep -q 'step 7 train/loss' "$TMP/A2.txt"
tap_check $? "step 7's loss in metrics.jsonl moved by 2e-5 fails the comparison ($(grep 'step 7 train/loss' "$TMP/A2.txt" | sed 's/^# *//'))"

# ---- a resume adds a file; the union covers every step ----
TSR_FAULT=usr1:5:0 run "$TMP/B" >"$TMP/B1.txt" 2>&1
rc1=$?
run "$TMP/B" >"$TMP/B2.txt" 2>&1
rc2=$?
bfiles=("$TMP"/B/tb/events.out.tfevents.*)
[[ $rc1 == 85 && $rc2 == 0 && ${#bfiles[@]} == 2 ]]
tap_check $? "SIGUSR1 after step 5: exit $rc1 (85), the rerun exit $rc2: two event files (${bfiles[*]##*/})"
s1=$(tb read "${bfiles[0]}"); s2=$(tb read "${bfiles[1]}")
tap_diag "train/loss steps: first file [$s1], second file [$s2]"
[[ $s1 == "1 2 3 4 5" && $s2 == "6 7 8 9 10 11 12" ]] && tb check "$TMP/B" resumed &&
    "$PY" - "$TBPY" "$TMP/A" "$TMP/B" <<'PY'
import runpy, sys
tb = runpy.run_path(sys.argv[1])
a, b = (tb["scalars"](tb["event_files"](d))["train/loss"] for d in sys.argv[2:4])
print(f"# train/loss: run A {len(a)} steps, resumed run B {len(b)} steps, equal: {a == b}")
sys.exit(0 if a == b and len(a) == 12 else 1)
PY
tap_check $? "the two files cover steps 1..5 and 6..12; their union matches metrics.jsonl and equals the uninterrupted run's train/loss"

# ---- a crash: the writer's own rank killed (SIGKILL) after step 6 loses no logged step ----
# (the rerun finds its file name taken: empty placeholders hold the names of the next 60 s, so it
# must open NAME.1)
# (save_async = false in the killed run: its step-4 save is committed before the kill; a
# background save may still be in flight two steps later: tests/ckpt/test_ckpt_async_kill.sh)
TSR_FAULT=kill:6:0 run "$TMP/K" --set save_async=false >"$TMP/K1.txt" 2>&1
rc1=$?
now=$(date +%s) held=()
for ((s = now; s <= now + 60; s++)); do
    f=$TMP/K/tb/events.out.tfevents.$s.$host
    [[ -e $f ]] || { : >"$f"; held+=("$f"); }
done
run "$TMP/K" >"$TMP/K2.txt" 2>&1
rc2=$?
rm -f "${held[@]}"
kfiles=("$TMP"/K/tb/events.out.tfevents.*)
k1=$(tb read "${kfiles[0]}"); k2=$(tb read "${kfiles[1]:-/nonexistent}")
tap_diag "train/loss steps: killed run [$k1], rerun from the step-4 checkpoint [$k2]"
[[ $rc1 != 0 && $rc2 == 0 && ${#kfiles[@]} == 2 && $k1 == "1 2 3 4 5 6" && $k2 == "5 6 7 8 9 10 11 12" &&
   ${kfiles[1]} == *.$host.1 ]] && tb check "$TMP/K" resumed >/dev/null
tap_check $? "rank 0 SIGKILLed after step 6 (exit $rc1): its event file reads to the end with steps 1..6; the rerun's file (${kfiles[1]##*/}: its name was taken) re-logs 5..12; together (later wins) they match metrics.jsonl"

# ---- tessera report ----
have_gnuplot=1
command -v gnuplot >/dev/null || have_gnuplot=0
"$TOOL" report "$TMP/A" >"$TMP/rep.txt" 2>&1
rc=$?
if ((have_gnuplot)); then
    "$PY" - "$TMP/A/report" <<'PY'
import os, struct, sys
ok = True
for name in ("loss.png", "throughput.png", "mfu.png", "lr.png", "grad_norm.png"):
    p = os.path.join(sys.argv[1], name)
    b = open(p, "rb").read() if os.path.exists(p) else b""
    sig = b[:8] == b"\x89PNG\r\n\x1a\n" and b[12:16] == b"IHDR"
    w, h = struct.unpack(">II", b[16:24]) if len(b) >= 24 else (0, 0)
    print(f"# {name}: {len(b)} bytes, PNG signature {sig}, {w}x{h}")
    ok &= sig and (w, h) == (960, 600) and 5000 < len(b) < 2000000
sys.exit(0 if ok else 1)
PY
    (($? == 0 && rc == 0))
    tap_check $? "tessera report (exit $rc) writes loss.png, throughput.png, mfu.png, lr.png, grad_norm.png: PNG signature, 960x600, 5 KB..2 MB"
else
    tap_skip "tessera report writes three PNGs" "gnuplot not installed (./INSTALL installs gnuplot-nox)"
fi
tb summary "$TMP/A" >"$TMP/expect.txt"
diff "$TMP/expect.txt" "$TMP/A/report/summary.txt" >"$TMP/diff.txt" && grep -qxF -f "$TMP/expect.txt" "$TMP/rep.txt" &&
    (( $(grep -cxF -f "$TMP/expect.txt" "$TMP/rep.txt") == $(wc -l <"$TMP/expect.txt") ))
tap_check $? "summary.txt and stdout: steps, tokens, first/last/min loss, val loss, medians, time as recomputed from metrics.jsonl"
sed 's/^/#   /' "$TMP/A/report/summary.txt"

# a hand-made metrics.jsonl: steps 2 and 3 logged again after a rollback (the later lines count),
# a null loss and grad norm, event and checkpoint lines, nested values, escapes, a blank line
mkdir -p "$TMP/H"
cat >"$TMP/H/metrics.jsonl" <<'EOF'
{"event": "start", "step": 0, "world": 2}
{"step": 1, "loss": 6.5, "lr": 1e-4, "grad_norm": null, "tokens": 100, "tokens_per_s": 1000, "mfu": 0.1, "step_time_s": 0.5, "samples": {"a": 1, "b": [1, 2.5e-3, {"c": "x\"y\\\u00e9"}]}, "guard": "warn"}
{"step": 2, "loss": null, "lr": 2e-4, "grad_norm": 1.5, "tokens": 200, "tokens_per_s": 3000, "mfu": 0.3, "step_time_s": 0.75}
{"step": 3, "loss": 3.25, "lr": 3e-4, "grad_norm": 1.5, "tokens": 300, "tokens_per_s": 2000, "mfu": 0.2, "step_time_s": 0.5}
{"step": 3, "checkpoint": "save", "path": "h/step-00000003.h5", "seconds": 0.1, "bytes": 10, "gb_per_s": 1e-7}
{"step": 3, "val_loss": 5.5, "val_ppl": 244.691932}
{"event": "guard", "action": "rollback", "step": 3, "data_batch": 2, "outlier_loss": null, "why": "loss 3.25 > 3 \u03c3"}
{"event": "rollback", "step": 3, "to_step": 1, "checkpoint": "h/step-00000001.h5", "skipped_batches": [2, 3], "rollbacks": 1}

{"step": 2, "loss": 6.0, "lr": 2e-4, "grad_norm": 1.25, "tokens": 200, "tokens_per_s": 4000, "mfu": 0.4, "step_time_s": 0.25}
{"step": 3, "loss": 4.75, "lr": 3e-4, "grad_norm": 1.0, "tokens": 300, "tokens_per_s": 5000, "mfu": 0.5, "step_time_s": 0.125}
{"step": 4, "loss": 4.5e0, "lr": 4e-4, "grad_norm": 0.5, "tokens": 400, "tokens_per_s": 6000, "mfu": 0.6, "step_time_s": 0.125, "data_batch": 5}
EOF
cat >"$TMP/H.expect" <<EOF
run:        $TMP/H (metrics.jsonl: 6 step lines, 1 eval lines)
steps:      4 (steps 1..4)
tokens:     400
loss:       first 6.5 (step 1), last 4.5 (step 4), min 4.5 (step 4)
val loss:   5.5 (step 3), ppl 244.692
tokens/s:   median 4500
mfu:        median 45 %
train time: 1 s (sum of the step times)
checkpoints: 1 saved (0 in the background); training stopped 0.1 s per save (median; longest 0.1 s), 0.0 MB each (the last)
EOF
"$TOOL" report "$TMP/H" --out "$TMP/H-out" >"$TMP/H.txt" 2>&1
rc=$?
diff "$TMP/H.expect" "$TMP/H-out/summary.txt" && (( rc == (have_gnuplot ? 0 : 2) ))
tap_check $? "hand-made metrics.jsonl (rollback re-logs, nulls, events, nesting, escapes), --out DIR: the summary worked out by hand (exit $rc)"

# a hand-made DPO run of a mixture of experts, 120 steps (the lines metrics.c writes): lr.png,
# grad_norm.png, moe.png and dpo.png with the validation accuracy are drawn; each per-step curve
# holds its values and their moving average (120 points: 2 either side, the mean of 5), recomputed
# here; the summary gives the validation accuracy, no perplexity, and no plot says nats/token
mkdir -p "$TMP/D"
"$PY" - "$TMP/D/metrics.jsonl" <<'PY'
import math, sys
with open(sys.argv[1], "w") as f:
    f.write('{"event": "start", "step": 0, "world": 1}\n')
    for s in range(1, 121):
        cv2 = "null" if s % 7 == 0 else "%.4f" % (0.1 + 0.001 * s)
        f.write('{"step": %d, "loss": %.6f, "lr": %g, "grad_norm": %.4f, "tokens": %d, "tokens_per_s": %d, '
                '"mfu": 0.1, "step_time_s": 0.1, "dpo_reward_margin": %.4f, "dpo_accuracy": %.3f, '
                '"moe_aux": 1.0, "moe_z": 0.1, "moe_load": [{"tokens": 64, "min": 4, "max": 12, "cv": %.4f}, '
                '{"tokens": 64, "min": 8, "max": 8, "cv": %s}]}\n'
                % (s, 0.69 - 0.002 * s + 0.05 * math.sin(s), 1e-5 * min(s, 20) / 20, 1 + 0.3 * math.cos(s),
                   64 * s, 1000 + 100 * (s % 3), 0.01 * s, (s % 4) / 4, 0.5 + 0.2 * math.sin(s / 3), cv2))
        if s % 40 == 0:
            f.write('{"step": %d, "val_loss": %.4f, "val_dpo_accuracy": %.3f}\n' % (s, 0.7 - s / 1000, 0.5 + s / 400))
PY
"$TOOL" report "$TMP/D" >"$TMP/D.txt" 2>&1
rc=$?
"$PY" - "$TMP/D/metrics.jsonl" "$TMP/D/report/plots.gp" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
blocks, plots, out, cur = {}, {}, None, None
for line in open(sys.argv[2]).read().splitlines():
    if line.endswith("<< EOD"): cur = blocks.setdefault(line.split()[0][1:], [])
    elif line == "EOD": cur = None
    elif cur is not None: cur.append([float(x) for x in line.split()])
    elif line.startswith("set output"): out = line.split("/")[-1].rstrip("'")
    elif line.startswith(("plot ", "set ylabel")): plots.setdefault(out, []).append(line)
def moving(v, h=2):
    return [sum(v[max(0, i - h):i + h + 1]) / len(v[max(0, i - h):i + h + 1]) for i in range(len(v))]
def cv_of(d, agg):
    c = [l["cv"] for l in d["moe_load"] if l["cv"] is not None]
    return agg(c) / (len(c) if agg is sum else 1)
def same(block, raw, smooth=True):
    rows = blocks.get(block, [])
    want = moving(raw) if smooth else raw
    ok = len(rows) == len(raw) and all(abs(r[1] - a) <= 1e-6 * max(1, abs(a)) for r, a in zip(rows, raw))
    ok = ok and all(abs(r[-1] - b) <= 1e-6 * max(1, abs(b)) for r, b in zip(rows, want))
    print(f"# ${block}: {len(rows)} rows, values and moving average {'right' if ok else 'WRONG'}")
    return ok
ok = same("loss", [d["loss"] for d in steps]) and same("gnorm", [d["grad_norm"] for d in steps])
ok &= same("tput", [d["tokens_per_s"] for d in steps]) and same("margin", [d["dpo_reward_margin"] for d in steps])
ok &= same("lr", [d["lr"] for d in steps], smooth=False)
ok &= same("moecv", [cv_of(d, sum) for d in steps]) and same("moecvmax", [cv_of(d, max) for d in steps])
ok &= [r[1] for r in blocks.get("vacc", [])] == [0.6, 0.7, 0.8]
for png, want in (("loss.png", "$loss using 1:3"), ("grad_norm.png", "$gnorm using 1:3"), ("moe.png", "$moecvmax using 1:3"),
                  ("dpo.png", "$vacc using 1:2 axes x1y2"), ("lr.png", "$lr using 1:2")):
    text = " ".join(plots.get(png, []))
    ok &= want in text and "(each step)" in text or png == "lr.png" and want in text
    print(f"# {png}: {text[:150]}")
ok &= "nats" not in " ".join(plots["loss.png"])
sys.exit(0 if ok else 1)
PY
r=$?
pngs=1
if ((have_gnuplot)); then for p in loss throughput mfu lr grad_norm dpo moe; do [[ -s $TMP/D/report/$p.png ]] || pngs=0; done; fi
diag_file <(grep -E "val loss|plot:" "$TMP/D.txt")
[[ $r == 0 && $rc == $((have_gnuplot ? 0 : 2)) && $pngs == 1 ]] && ! grep -qw ppl "$TMP/D.txt" && ! grep -q nats "$TMP/D.txt" &&
    grep -qxF "val loss:   0.58 (step 120), val accuracy 0.8 (DPO: the validation pairs' loss and accuracy)" "$TMP/D.txt"
tap_check $? "a DPO run with MoE (exit $rc): lr.png, grad_norm.png, moe.png, dpo.png with the val accuracy; per-step curves with their moving average; no ppl nan or nats/token"

# ---- errors ----
sed '4s/.*/{"step": 3, "loss": 3.25,, "lr": 3e-4}/' "$TMP/H/metrics.jsonl" >"$TMP/bad.jsonl"
mkdir -p "$TMP/J" && cp "$TMP/bad.jsonl" "$TMP/J/metrics.jsonl"
"$TOOL" report "$TMP/J" >"$TMP/J.txt" 2>&1
rc=$?
diag_file "$TMP/J.txt"
[[ $rc == 2 ]] && grep -q "$TMP/J/metrics.jsonl:4:.*not JSON" "$TMP/J.txt"
tap_check $? "a line that is not JSON: exit 2 ($rc), naming file:line"
"$TOOL" report "$TMP/nonexistent" >"$TMP/M.txt" 2>&1
rc=$?
mkdir -p "$TMP/E"
"$TOOL" report "$TMP/E" >"$TMP/E.txt" 2>&1
rc2=$?
diag_file "$TMP/M.txt" "$TMP/E.txt"
[[ $rc == 2 && $rc2 == 2 ]] && grep -q "$TMP/nonexistent" "$TMP/M.txt" && grep -q "$TMP/E/metrics.jsonl" "$TMP/E.txt"
tap_check $? "a missing run dir (exit $rc) and a run dir without metrics.jsonl (exit $rc2): exit 2 naming them"
PATH=/nonexistent "$TOOL" report "$TMP/A" --out "$TMP/nognu" >"$TMP/N.txt" 2>&1
rc=$?
grep -i gnuplot "$TMP/N.txt" | diag_file
[[ $rc == 2 && -s $TMP/nognu/summary.txt && ! -e $TMP/nognu/loss.png ]] && grep -q "gnuplot not found" "$TMP/N.txt"
tap_check $? "without gnuplot on PATH: exit 2 ($rc) saying so; summary.txt still written"
"$TOOL" report >/dev/null 2>&1
rc=$?
"$TOOL" report "$TMP/A" "$TMP/B" >/dev/null 2>&1
rc2=$?
"$TOOL" report --bogus "$TMP/A" >/dev/null 2>&1
rc3=$?
grep -q -- "--out DIR" <<<"$("$TOOL" report --help)"
[[ $? == 0 && $rc == 1 && $rc2 == 1 && $rc3 == 1 ]]
tap_check $? "usage: no RUN_DIR ($rc), two ($rc2), an unknown option ($rc3): exit 1; --help lists --out DIR"
tap_done
