#!/usr/bin/env bash
# Multi-token prediction (model.num_nextn_predict_layers > 0, DeepSeek-V3; docs/models.md
# "Multi-token prediction") through the real trainer, on a tiny MLA model (V3's mixer) with 2
# depths (the maths against float64 PyTorch: tests/reference/test_mtp.py):
#  - 6 steps on 2 ranks: every step's metrics.jsonl record has a finite mtp_loss beside the loss,
#    the step line shows "| mtp X"; the checkpoint holds the modules' tensors at their shapes;
#  - killed after step 5 and rerun: resumes from the step-4 checkpoint and every later loss, lr,
#    grad norm and MTP loss, and the final checkpoint's every tensor, equal the uninterrupted run
#    bit for bit;
#  - tessera generate from the MTP checkpoint, greedy 100 tokens: the modules are skipped, the
#    cache gives the no-cache forward's ids and probabilities;
#  - refused at start (exit 1, naming both keys, nothing written): parallel.tensor = 2,
#    parallel.pipeline = 2, parallel.context = 2, device = "cuda", model.norm = "layernorm",
#    parallel.expert = 2, parallel.sharding = "zero3", lora.rank = 4, objective = "dpo";
#    a negative depth and a negative weight exit 1 naming their key.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
source "$(dirname "$0")/../eval/generate_lib.sh"
tap_plan 9
make_synth "$TMP/data" 512 60000
tiny_llama_args "$TMP/data/train"
args+=(--set model.n_head=4 --set model.n_kv_head=0 --set model.kv_lora_rank=32
       --set model.q_lora_rank=24 --set model.qk_nope_head_dim=16 --set model.qk_rope_head_dim=8
       --set model.v_head_dim=12 --set model.num_nextn_predict_layers=2
       --set max_duration=6ba --set save_interval=2ba --set watchdog.window=0)
run() { local dir=$1; shift; "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@"; }
mtp_lines() { # "step loss mtp_loss" of each step, the last line logged for it
    "$PY3" - "$1" <<'PY'
import json, math, sys
last = {}
for l in open(sys.argv[1]):
    d = json.loads(l)
    if "loss" in d and "step" in d: last[d["step"]] = (d["loss"], d.get("mtp_loss"))
for k in sorted(last): print(k, *last[k])
sys.exit(0 if len(last) == 6 and all(isinstance(m, float) and math.isfinite(m) and m > 0
                                      for _, m in last.values()) else 1)
PY
}

run A >"$TMP/A.txt" 2>&1
rc=$?
mtp_lines "$TMP/A/metrics.jsonl" >"$TMP/A.mtp"
m=$?
tap_diag "train: exit $rc; $(tail -1 "$TMP/A.mtp"); $(grep -m1 '^step *6/' "$TMP/A.txt")"
((rc == 0 && m == 0)) && grep -q '^step *6/6 | loss [0-9.]* | mtp [0-9.]* |' "$TMP/A.txt"
tap_check $? "6 steps of a 2-layer MLA model with 2 MTP depths on 2 ranks: each step's record has a finite mtp_loss beside its loss, the step line shows it"

"$PY3" - "$(ck "$TMP/A" 6)" <<'PY'
import sys, h5py
shapes = {}
h5py.File(sys.argv[1], "r").visititems(
    lambda n, o: shapes.__setitem__(n.split("/")[-1], o.shape) if isinstance(o, h5py.Dataset) else None)
want = {"mtp_enorm": (2, 64), "mtp_hnorm": (2, 64), "mtp_eh_proj": (2, 64, 128),
        "mtp_head_norm": (2, 64)}
got = {k: shapes.get(k) for k in want}
w, n = shapes.get("mtp_layer_w"), shapes.get("mtp_layer_n")
print("#", got, "mtp_layer_w", w, "mtp_layer_n", n)
sys.exit(0 if got == want and w and n and w[0] == 2 and n[0] == 2 and w[1] > n[1] > 0 else 1)
PY
tap_check $? "its checkpoint holds mtp_enorm, mtp_hnorm, mtp_eh_proj, mtp_head_norm and the layers' blocks at their shapes"

TSR_FAULT=kill:5:1 run B --set save_async=false >"$TMP/B1.txt" 2>&1
rc=$?
run B >"$TMP/B2.txt" 2>&1
rc2=$?
mtp_lines "$TMP/B/metrics.jsonl" >"$TMP/B.mtp"
tap_diag "killed: exit $rc, rerun: exit $rc2; $(grep -m1 -o 'checkpoint resume step [0-9]*' "$TMP/B2.txt")"
((rc != 0 && rc2 == 0)) && grep -q "checkpoint resume step 4" "$TMP/B2.txt" &&
    cmp -s <(final_lines "$TMP/A/metrics.jsonl") <(final_lines "$TMP/B/metrics.jsonl") &&
    cmp -s "$TMP/A.mtp" "$TMP/B.mtp" && same_tensors "$(ck "$TMP/A" 6)" "$(ck "$TMP/B" 6)"
tap_check $? "killed after step 5 and rerun: resumes from step 4; losses, lr, grad norms, MTP losses and the final checkpoint's every tensor equal the uninterrupted run bit for bit"

cached_as_uncached A 100
tap_check $? "generate from the MTP checkpoint, greedy 100 tokens: the modules skipped, the cache == no cache"

start_refused T 'parallel.tensor > 1 with model.num_nextn_predict_layers = 2: multi-token prediction does not run with it yet' \
    --set parallel.tensor=2
t=$?
start_refused P 'parallel.pipeline > 1 with model.num_nextn_predict_layers = 2: multi-token prediction does not run with it yet' \
    --set parallel.pipeline=2
p=$?
start_refused C 'parallel.context > 1 with model.num_nextn_predict_layers = 2: multi-token prediction does not run with it yet' \
    --set parallel.context=2
tap_check $((t | p | $?)) "parallel.tensor, parallel.pipeline, parallel.context = 2 with MTP: exit 1 naming both keys, nothing written"
start_refused U 'device = "cuda" with model.num_nextn_predict_layers = 2: multi-token prediction does not run with it yet' \
    --set device=cuda
tap_check $? "device = cuda with MTP: exit 1 naming both keys, nothing written"
start_refused N 'model.norm other than "rmsnorm" with model.num_nextn_predict_layers = 2' \
    --set model.kv_lora_rank=0 --set model.q_lora_rank=0 --set model.norm=layernorm
tap_check $? "model.norm = layernorm with MTP: exit 1 naming both keys, nothing written"
r=0
for kv in parallel.expert=2 parallel.sharding=zero3 lora.rank=4 objective=dpo; do
    start_refused "X${kv%%=*}" "${kv%%=*} [^:]* with model.num_nextn_predict_layers = 2: multi-token prediction does not run with it yet" \
        --set "$kv" || r=1
done
tap_check $r "parallel.expert = 2, parallel.sharding = zero3, lora.rank = 4, objective = dpo with MTP: exit 1 naming both keys, nothing written"
start_refused D 'model.num_nextn_predict_layers' --set model.num_nextn_predict_layers=-1
d=$?
start_refused W 'model.mtp_loss_weight' --set model.mtp_loss_weight=-0.5
tap_check $((d | $?)) "model.num_nextn_predict_layers = -1 and model.mtp_loss_weight = -0.5: exit 1 naming the key, nothing written"
tap_done
