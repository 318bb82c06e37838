#!/usr/bin/env bash
# In-context-learning evaluation during training (docs/eval.md, "During training") on the shipped
# "colors" task set (eval/tasks/, eval/tasks/make_colors.py): a tokenizer trained on its text, the
# text prepped, a tiny model trained 300 steps on 2 MPI ranks with icl_tasks, eval every 25 steps:
#  - an {"event": "icl"} line in metrics.jsonl and a stdout line at every eval; accuracies in [0, 1]
#    equal correct / examples; rescaled and the gauntlet recomputed here from the task files'
#    random baselines;
#  - the accuracy starts near the baselines and ends high (the model learns the colours);
#  - the training losses (steps and val) equal, bit for bit, those of the same run without
#    icl_tasks: evaluation leaves the training state alone;
#  - the last in-training result equals `tessera eval` (one process) on the final checkpoint, and
#    one rank scoring the step-75 weights (--init-from that checkpoint, lr 1e-30, one step) gives
#    the 2-rank run's step-75 result exactly;
#  - TensorBoard holds icl/<label>/accuracy and icl/gauntlet at every eval step;
#  - device = cuda (the emulated GPU; the real one when present) scores the same weights as the
#    CPU within 3 of 30 examples per task; on the shards (zero3 on 4 emulated GPUs, hsdp 2 x 2 on
#    the CPU) exactly as on one rank of the same backend; a head size the GPU has no attention kernel for is refused at start;
#  - a missing task file stops the run before its first step (exit 2, naming the file); a bad task
#    line names file:line (exit 2); icl_tasks without data.tokenizer exit 1 naming the key.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 12
PY=/usr/bin/python3
colors_icl 0.1
tap_check $? "tokenizer trained on the colors text (320 tokens), the text prepped"

colors_args
args+=(--set eval_interval=25ba --set save_interval=75ba --set keep_last=4 --set max_duration=300ba
       --set watchdog.window=0)
# watchdog.window=0: 300 steps on 2 ranks are long enough for the straggler watchdog to stop a
# run (exit 86) when a loaded machine starves one rank (as test_staging's did, 2026-11-26)
# the recipe with tasks: tiny.cfg plus icl_tasks (one of them few-shot)
cp "$TSR_ROOT/configs/tiny.cfg" "$TMP/plain.cfg"
colors_tasks_cfg "$TMP/icl.cfg"
train() { local np=$1 cfg=$2 dir=$3; shift 3; "${MPIRUN[@]}" -np "$np" "$TRAIN" --config "$cfg" "${args[@]}" --set run_dir="$dir" "$@"; }
train 2 "$TMP/icl.cfg" "$TMP/A" >"$TMP/A.txt" 2>&1 && train 2 "$TMP/plain.cfg" "$TMP/P" >"$TMP/P.txt" 2>&1
rc=$?
grep -F '| icl ' "$TMP/A.txt" | sed 's/^/# /'
tap_check $rc "trained 300 steps on 2 ranks with icl_tasks, and without (exit $rc)"

# baselines from the task files: multiple_choice 1 / choices, schema 1 / context_options, LM 0
$PY - "$TMP/A/metrics.jsonl" "$TMP/A.txt" "$TASKS" <<'PY'
import json, sys
metrics, out, tasks = sys.argv[1:]
def base(f, key):
    rows = [json.loads(l) for l in open(f"{tasks}/{f}") if l.strip()]
    return sum(1 / len(r[key]) for r in rows) / len(rows)
B = {"colors_mc": base("colors_mc.jsonl", "choices"), "colors_mc_2shot": base("colors_mc.jsonl", "choices"),
     "colors_lm": 0.0, "colors_schema": base("colors_schema.jsonl", "context_options")}
lines = [json.loads(l) for l in open(metrics) if '"event": "icl"' in l]
ok = [d["step"] for d in lines] == list(range(25, 301, 25))
for d in lines:
    ok &= list(d["tasks"]) == list(B)
    res = []
    for k, t in d["tasks"].items():
        ok &= 0 <= t["accuracy"] <= 1 and t["examples"] == 30 and abs(t["accuracy"] - t["correct"] / 30) < 1e-9
        r = (t["accuracy"] - B[k]) / (1 - B[k])
        ok &= abs(r - t["rescaled"]) < 1e-9
        res.append(r)
    ok &= abs(d["gauntlet"] - sum(res) / len(res)) < 1e-9 and d["seconds"] >= 0
text = open(out).read()
ok &= all(f"eval step {s} | icl colors_mc " in text for s in range(25, 301, 25))
print("# gauntlet by step:", [(d["step"], round(d["gauntlet"], 4)) for d in lines])
sys.exit(0 if ok else 1)
PY
tap_check $? "an icl line at every eval (steps 25..300; stdout too): accuracy in [0, 1] = correct / 30; rescaled = (acc - baseline) / (1 - baseline); gauntlet = their mean"

# measured: first eval gauntlet 0.11 (mc 0.20, lm 0.13, schema 0.47); from step 100 on every
# zero-shot task is 1.0
$PY - "$TMP/A/metrics.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if '"event": "icl"' in l]
first, last = lines[0], lines[-1]
zero_shot = ("colors_mc", "colors_lm", "colors_schema")
ok = first["gauntlet"] <= 0.3 and all(first["tasks"][k]["rescaled"] <= 0.35 for k in zero_shot)
ok &= last["gauntlet"] >= 0.8 and all(last["tasks"][k]["accuracy"] >= 0.95 for k in zero_shot)
print("# first", {k: v["accuracy"] for k, v in first["tasks"].items()}, "\n# last", {k: v["accuracy"] for k, v in last["tasks"].items()})
sys.exit(0 if ok else 1)
PY
tap_check $? "the accuracy rises: near the baselines at the first eval (gauntlet <= 0.3), >= 0.95 per zero-shot task at the end"

losses "$TMP/A/metrics.jsonl" >"$TMP/A.losses"
losses "$TMP/P/metrics.jsonl" >"$TMP/P.losses"
(($(wc -l <"$TMP/A.losses") == 312)) && cmp -s "$TMP/A.losses" "$TMP/P.losses"
tap_check $? "training and val losses with icl_tasks equal those without, bit for bit (300 steps + 12 evals)"

"$TOOL" eval --ckpt "$TMP/A" --config "$TMP/icl.cfg" "${args[@]}" >"$TMP/A.json" 2>"$TMP/A.err"
rc=$?
$PY - "$TMP/A.json" "$TMP/A/metrics.jsonl" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
last = [json.loads(l) for l in open(sys.argv[2]) if '"event": "icl"' in l][-1]
ok = rep["step"] == last["step"] == 300
for t in rep["icl"]:
    mine = last["tasks"][t["label"]]
    ok &= t["accuracy"] == mine["accuracy"] and t["rescaled"] == mine["rescaled"] and t["examples"] == mine["examples"]
ok &= len(rep["icl"]) == len(last["tasks"]) and rep["gauntlet"]["average_rescaled_accuracy"] == last["gauntlet"]
sys.exit(0 if ok else 1)
PY
tap_check $? "the final in-training result equals tessera eval on the final checkpoint (one process; exit $rc)"

train 1 "$TMP/icl.cfg" "$TMP/B" --init-from "$TMP/A/step-00000075.h5" --set optim.lr=1e-30 --set max_duration=1ba >"$TMP/B.txt" 2>&1
rc=$?
$PY - "$TMP/A/metrics.jsonl" "$TMP/B/metrics.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"event": "icl"' in l and '"step": 75,' in l][0]
b = [json.loads(l) for l in open(sys.argv[2]) if '"event": "icl"' in l]
print("# step 75, 2 ranks:", {k: v["correct"] for k, v in a["tasks"].items()})
print("# the same weights, 1 rank:", {k: v["correct"] for k, v in b[0]["tasks"].items()} if b else None)
sys.exit(0 if len(b) == 1 and a["tasks"] == b[0]["tasks"] and a["gauntlet"] == b[0]["gauntlet"] else 1)
PY
tap_check $? "1 rank scoring the step-75 weights gives the 2-rank run's step-75 result exactly (exit $rc)"

# device = cuda scores through the same scorer (model_token_scores: per-position losses and the
# logits' argmax on the device). The GPU's attention needs head size 32, 64, 128 or 256, so a model of
# 2 heads (hs 32) and 3 layers (more than the two gather slots hold: every forward on the shards
# gathers) is trained on the CPU here; its step-75 (mid-learning) and step-150 weights are scored
# by one CPU rank, by the emulated GPU on one rank, on the shards under zero3 on 4 emulated GPUs
# (step 75) and hsdp 2 x 2 on the CPU (step 150) (30 examples a task: ranks 0 and 1 score 8, ranks
# 2 and 3 score 7 and top up with idle forwards), and by the real GPU when there is one. bf16 logits move
# near-ties between options: measured on the emulator, at most 1 of 30 examples per task at step
# 75, none at 150.
gargs=(--set model.n_head=2 --set model.n_layer=3 --set max_duration=150ba)
train 2 "$TMP/icl.cfg" "$TMP/H" "${gargs[@]}" >"$TMP/H.txt" 2>&1
score() { # BIN NP RUN STEP ARGS...: scores the step's weights after one step at lr 1e-30
    local bin=$1 np=$2 run=$3 step=$4; shift 4
    "${MPIRUN[@]}" -np "$np" "$bin" --config "$TMP/icl.cfg" "${args[@]}" "${gargs[@]}" --set run_dir="$TMP/$run" \
        --init-from "$TMP/H/step-$(printf %08d "$step").h5" --set optim.lr=1e-30 --set max_duration=1ba "$@" >"$TMP/$run.txt" 2>&1
}
gpu_bins=("$BUILD/tests/tessera-train-cuemu")
[[ -f $BUILD/libtessera-cuda-train.so && -e /dev/nvidiactl ]] && gpu_bins+=("$TRAIN")
ok=0
for step in 75 150; do
    score "$TRAIN" 1 "C$step" "$step" || ok=1
    k=0
    for bin in "${gpu_bins[@]}"; do
        score "$bin" 1 "G$k.$step" "$step" --set device=cuda || ok=1
        k=$((k + 1))
    done
    # on the shards, a microbatch of 8 a rank: zero3 on the emulated GPU, hsdp on the CPU
    if ((step == 75)); then
        score "$BUILD/tests/tessera-train-cuemu" 4 "Z$step" "$step" --set device=cuda \
            --set parallel.sharding=zero3 --set global_batch=32 || ok=1
    else
        score "$TRAIN" 4 "Z$step" "$step" --set parallel.sharding=hsdp --set parallel.replica_group=2 \
            --set global_batch=32 || ok=1
    fi
done
$PY - "$TMP" "${#gpu_bins[@]}" <<'PY' && ((ok == 0))
import json, sys
tmp, n = sys.argv[1], int(sys.argv[2])
res = lambda run: [{k: v["correct"] for k, v in json.loads(l)["tasks"].items()}
                   for l in open(f"{tmp}/{run}/metrics.jsonl") if '"event": "icl"' in l][-1]
ok = True
for step in (75, 150):
    cpu = res(f"C{step}")
    print(f"# step {step}: CPU {cpu}")
    for k in range(n):
        g = res(f"G{k}.{step}")
        d = max(abs(g[t] - cpu[t]) for t in cpu)
        print(f"#   {'emulator' if k == 0 else 'GPU'}: {g} (largest difference {d} of 30)")
        ok &= g.keys() == cpu.keys() and d <= 3
    z = res(f"Z{step}")
    print(f"#   {'emulator zero3 on 4 ranks' if step == 75 else 'CPU hsdp 2 x 2'}: {z}")
    ok &= z == (res(f"G0.{step}") if step == 75 else cpu)
sys.exit(0 if ok else 1)
PY
tap_check $? "device = cuda scores ICL on the device: the same weights within 3 of 30 examples per task of the CPU's (emulator; the real GPU when present), on the shards with uneven examples per rank (emulator zero3 on 4, CPU hsdp 2 x 2) equal to 1 rank"

# a head size the GPU has no kernel for (this test's model: 64 / 4 = 16) is refused when the config
# loads, naming the --set that gave n_head; no run_dir
"${MPIRUN[@]}" -np 1 "$BUILD/tests/tessera-train-cuemu" --config "$TMP/plain.cfg" "${args[@]}" --set device=cuda \
    --set run_dir="$TMP/hs16" >"$TMP/hs16.txt" 2>&1
rc=$?
((rc == 1)) && grep -q -- '--set model.n_head=4: device = "cuda": head size model.d_model / model.n_head = 64 / 4 = 16' "$TMP/hs16.txt" &&
    ! grep -q "^step " "$TMP/hs16.txt" && [[ ! -e $TMP/hs16 ]]
tap_check $? "device = cuda with head size 16: exit 1 before any step, naming --set model.n_head and model.d_model / model.n_head, no run_dir (got $rc)"

# TensorBoard: TFRecords (u64 length, u32 masked crc, data, u32 masked crc) of Event protobufs
$PY - "$TMP/A" <<'PY'
import glob, json, struct, sys
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF
def masked(b):
    c = crc32c(b)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
def varint(b, i):
    v = s = 0
    while True:
        v |= (b[i] & 0x7F) << s
        s += 7
        i += 1
        if b[i - 1] < 0x80:
            return v, i
def fields(b):  # (field, value): varints as ints, fixed and length-delimited as bytes
    i = 0
    while i < len(b):
        k, i = varint(b, i)
        wt = k & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt in (1, 5):
            n = 8 if wt == 1 else 4
            v, i = b[i:i + n], i + n
        else:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        yield k >> 3, v
scalars = {}  # tag -> {step: value}
for path in glob.glob(sys.argv[1] + "/tb/events.out.tfevents.*"):
    data, off = open(path, "rb").read(), 0
    while off < len(data):
        n = struct.unpack("<Q", data[off:off + 8])[0]
        body = data[off + 12:off + 12 + n]
        assert struct.unpack("<I", data[off + 8:off + 12])[0] == masked(data[off:off + 8])
        assert struct.unpack("<I", data[off + 12 + n:off + 16 + n])[0] == masked(body)
        off += 16 + n
        ev = dict(fields(body))
        for f, val in fields(body):
            if f != 5:
                continue
            for _, v in fields(val):  # Summary.value
                d = dict(fields(v))
                scalars.setdefault(d[1].decode(), {})[ev[2]] = struct.unpack("<f", d[2])[0]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
lines = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if '"event": "icl"' in l]
want = {"icl/gauntlet": {d["step"]: f32(d["gauntlet"]) for d in lines}}
for k in lines[0]["tasks"]:
    want[f"icl/{k}/accuracy"] = {d["step"]: f32(d["tasks"][k]["accuracy"]) for d in lines}
got = {k: v for k, v in scalars.items() if k.startswith("icl/")}
print("# icl tags:", sorted(got))
sys.exit(0 if got == want and "train/loss" in scalars else 1)
PY
tap_check $? "TensorBoard: icl/<label>/accuracy and icl/gauntlet at every eval step, equal to metrics.jsonl (float32)"

sed "s|$TASKS/colors_lm.jsonl|$TMP/missing.jsonl|" "$TMP/icl.cfg" >"$TMP/miss.cfg"
train 2 "$TMP/miss.cfg" "$TMP/M" >"$TMP/M.txt" 2>&1
rc=$?
grep -E 'error' "$TMP/M.txt" | sed 's/^/# /'
[[ $rc == 2 ]] && grep -q "$TMP/missing.jsonl: cannot read ICL task 'colors_lm'" "$TMP/M.txt" &&
    ! grep -qE '^step +1/' "$TMP/M.txt" && [[ ! -e $TMP/M/metrics.jsonl ]]
tap_check $? "a missing task file: exit 2 naming it, before the first step (no step line, no metrics.jsonl; got $rc)"

printf '{"query": "the apple is", "choices": ["red"], "gold": 3}\n' >"$TMP/bad.jsonl"
sed "s|$TASKS/colors_schema.jsonl|$TMP/bad.jsonl|; s|\"schema\"; path = \"$TMP/bad.jsonl\"|\"multiple_choice\"; path = \"$TMP/bad.jsonl\"|" "$TMP/icl.cfg" >"$TMP/bad.cfg"
train 1 "$TMP/bad.cfg" "$TMP/X" --set max_duration=1ba >"$TMP/X.txt" 2>&1
rc1=$?
train 1 "$TMP/icl.cfg" "$TMP/Y" --set max_duration=1ba --set data.tokenizer= >"$TMP/Y.txt" 2>&1
rc2=$?
grep -hE 'error' "$TMP/X.txt" "$TMP/Y.txt" | sed 's/^/# /'
[[ $rc1 == 2 && $rc2 == 1 ]] && grep -q "$TMP/bad.jsonl:1: multiple_choice example: \"gold\"" "$TMP/X.txt" &&
    grep -q "icl_tasks need a tokenizer: set data.tokenizer" "$TMP/Y.txt" && [[ ! -e $TMP/X/metrics.jsonl && ! -e $TMP/Y/metrics.jsonl ]]
tap_check $? "a bad task line: exit 2 naming file:line and the field; icl_tasks without data.tokenizer: exit 1 naming the key (got $rc1, $rc2)"
tap_done
