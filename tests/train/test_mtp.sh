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
#    parallel.pipeline = 2, model.norm = "layernorm",
#    lora.rank = 4, objective = "dpo"; a negative depth and a negative weight exit 1 naming their
#    key;
#  - the modes it runs with, 4 steps with packed documents (attn_mask = "document": a depth's
#    shifted targets stop at a document's end, and under context parallelism position i + k lies
#    in another rank's share) against the 1-rank run, loss, gradient norm and MTP loss within
#    1e-6 relative at every step: parallel.sharding = "zero3" on 2 ranks and "hsdp" on 4 (the
#    modules' layers sharded and gathered as units of their own); parallel.context = 2 and 4 (the
#    modules' attention round the ring); and on a tiny DeepSeek-V3 (configs/tiny-deepseek.cfg,
#    2 layers: the module's layer is a MoE layer) parallel.expert = 2, alone and with zero3;
#  - killed after step 3 at expert 2 x context 2 x zero3 on 4 ranks and rerun: resumes from the
#    step-2 checkpoint, every later loss, lr, grad norm and MTP loss and the final checkpoint's
#    every tensor equal the uninterrupted run's at that layout bit for bit.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
source "$(dirname "$0")/../eval/generate_lib.sh"
tap_plan 12
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
tap_check $((t | p)) "parallel.tensor, parallel.pipeline = 2 with MTP: exit 1 naming both keys, nothing written"
start_refused N 'model.norm other than "rmsnorm" with model.num_nextn_predict_layers = 2' \
    --set model.kv_lora_rank=0 --set model.q_lora_rank=0 --set model.norm=layernorm
tap_check $? "model.norm = layernorm with MTP: exit 1 naming both keys, nothing written"
r=0
for kv in lora.rank=4 objective=dpo; do
    start_refused "X${kv%%=*}" "${kv%%=*} [^:]* with model.num_nextn_predict_layers = 2: multi-token prediction does not run with it yet" \
        --set "$kv" || r=1
done
tap_check $r "lora.rank = 4, objective = dpo with MTP: exit 1 naming both keys, nothing written"
start_refused D 'model.num_nextn_predict_layers' --set model.num_nextn_predict_layers=-1
d=$?
start_refused W 'model.mtp_loss_weight' --set model.mtp_loss_weight=-0.5
tap_check $((d | $?)) "model.num_nextn_predict_layers = -1 and model.mtp_loss_weight = -0.5: exit 1 naming the key, nothing written"

# ---- the parallel layouts: 4 steps with packed documents, saved every 2 -----------------------
args+=(--set max_duration=4ba --set save_interval=2ba --set model.attn_mask=document
       --set model.eot_token=8)
lay() { local np=$1 dir=$2; shift 2; ranks "$np" "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
# mtp_close REF DIR...: every step's loss, grad_norm and mtp_loss of each run $TMP/DIR within 1e-6
# of run $TMP/REF's, relative, each run 4 steps (the largest differences as one diagnostic line)
mtp_close() {
    "$PY3" - "$TMP" "$@" <<'PY'
import json, sys
def steps(d):
    last = {}
    for l in open(f"{sys.argv[1]}/{d}/metrics.jsonl"):
        j = json.loads(l)
        if "loss" in j and "step" in j: last[j["step"]] = [j["loss"], j["grad_norm"], j.get("mtp_loss")]
    return last
ref, ok, msg = steps(sys.argv[2]), len(steps(sys.argv[2])) == 4, []
for d in sys.argv[3:]:
    run = steps(d)
    if sorted(run) != sorted(ref): ok = False; msg.append(f"{d}: steps {sorted(run)}"); continue
    w = [max(abs(run[k][i] - ref[k][i]) / abs(ref[k][i]) for k in ref) for i in range(3)]
    ok = ok and max(w) <= 1e-6
    msg.append(f"{d}: loss {w[0]:.1e} norm {w[1]:.1e} mtp {w[2]:.1e}")
print("# vs", sys.argv[2] + ":", "; ".join(msg))
sys.exit(0 if ok else 1)
PY
}
lay 1 L1; r1=$?
lay 2 LZ --set parallel.sharding=zero3; rz=$?
lay 4 LH --set parallel.sharding=hsdp --set parallel.replica_group=2; rh=$?
tap_diag "exits: 1 rank $r1, zero3 $rz, hsdp $rh"
((r1 == 0 && rz == 0 && rh == 0)) && mtp_close L1 LZ LH
tap_check $? "parallel.sharding = zero3 on 2 ranks and hsdp on 4 (2 x 2): every step's loss, grad norm and MTP loss within 1e-6 of 1 rank's"

lay 2 LC2 --set parallel.context=2; r2=$?
lay 4 LC4 --set parallel.context=4; r4=$?
tap_diag "exits: context 2 $r2, context 4 $r4"
((r2 == 0 && r4 == 0)) && mtp_close L1 LC2 LC4
tap_check $? "parallel.context = 2 and 4 (the shifted rows across the chunks, the modules' attention round the ring): every step's loss, grad norm and MTP loss within 1e-6 of 1 rank's"

args=(--config "$TSR_ROOT/configs/tiny-deepseek.cfg" "${args[@]:2}" --set model.n_layer=2
      --set model.max_seq_len=32 --set model.rope_original_max_pos=8 --set model.num_nextn_predict_layers=1)
lay 1 D1; r1=$?
lay 2 DE2 --set parallel.expert=2; r2=$?
lay 2 DEZ --set parallel.expert=2 --set parallel.sharding=zero3; rz=$?
tap_diag "exits: 1 rank $r1, expert 2 $r2, expert 2 zero3 $rz; $(grep -m1 '^step *4/' "$TMP/D1.txt")"
((r1 == 0 && r2 == 0 && rz == 0)) && mtp_close D1 DE2 DEZ
tap_check $? "tiny DeepSeek-V3 (its module's layer MoE), parallel.expert = 2, alone and with zero3: every step's loss, grad norm and MTP loss within 1e-6 of 1 rank's"

X=(--set parallel.expert=2 --set parallel.context=2 --set parallel.sharding=zero3)
lay 4 DX "${X[@]}"; rc=$?
TSR_FAULT=kill:3:1 lay 4 DK "${X[@]}" --set save_async=false; rk=$?
cp "$TMP/DK.txt" "$TMP/DK1.txt"
lay 4 DK "${X[@]}"; rk2=$?
mtp_lines "$TMP/DX/metrics.jsonl" >"$TMP/DX.mtp"
mtp_lines "$TMP/DK/metrics.jsonl" >"$TMP/DK.mtp"
tap_diag "expert 2 x context 2 x zero3: exit $rc; killed: exit $rk, rerun: exit $rk2; $(grep -m1 -o 'checkpoint resume step [0-9]*' "$TMP/DK.txt")"
((rc == 0 && rk != 0 && rk2 == 0)) && grep -q "checkpoint resume step 2" "$TMP/DK.txt" &&
    cmp -s <(final_lines "$TMP/DX/metrics.jsonl") <(final_lines "$TMP/DK/metrics.jsonl") &&
    cmp -s "$TMP/DX.mtp" "$TMP/DK.mtp" && [[ -s $TMP/DX.mtp ]] &&
    same_tensors "$(ck "$TMP/DX" 4)" "$(ck "$TMP/DK" 4)"
tap_check $? "killed after step 3 at expert 2 x context 2 x zero3 and rerun: resumes from step 2; losses, lr, grad norms, MTP losses and the final checkpoint's every tensor equal the uninterrupted run bit for bit"
tap_done
