#!/usr/bin/env bash
# DeepSeek's router through the real trainer (docs/moe.md "DeepSeek's router"): a tiny MoE of 8
# experts, top 2, sigmoid scores and noaux_tc's correction bias, no auxiliary loss, on a skewed
# corpus (a 32-token vocabulary), the weights all but frozen (lr 1e-9: the routing moves by the
# bias alone, so the rank counts' runs see the same rows routed the same way). Its maths:
# tests/reference/test_deepseek_moe.py.
#  - auxiliary-loss-free balancing: at model.moe_bias_update_rate = 0.001 (the default) every
#    layer's max/mean expert load is within 1.2 in each of steps 21..30, where with rate 0 (the
#    bias frozen) some layer's is above 1.25 at every one of them;
#  - the bias is equal bit for bit at 1 rank, 2 ranks, 2 ranks with parallel.expert = 2, with
#    parallel.sharding = "zero3" or "zero1" and with parallel.tensor = 2 (the loads summed over
#    every microbatch and rank, a tensor group's once); it moved; its optimizer moments stay 0 (no
#    gradient, no AdamW);
#  - rank 1 SIGKILLed after step 16: the rerun resumes from step 10 and its final checkpoint
#    equals the uninterrupted run's tensor for tensor (routercorr included);
#  - under parallel.pipeline = 2 (1f1b, interleaved, P 2 x data 2) tiny-deepseek (4 layers, no
#    MTP, 8 microbatches of one sequence) equals one rank: losses and norms within 1e-6, every MoE
#    layer's bias moved and one rank's bit for bit, the final checkpoint too (but at P 2 x data 2,
#    whose gradient sums differ in order); P 2's checkpoint resumes on one rank;
#  - the first model.moe_dense_layers layers are dense: the checkpoint's MoE tensors stack
#    n_layer - 1 layers, fcw one;
#  - bad settings exit 1 naming the key and a valid value, nothing written: moe_n_group not
#    dividing moe_experts, moe_topk_group > moe_n_group, an unknown moe_scoring and
#    moe_topk_method, a negative moe_bias_update_rate;
#    the Hugging Face export (no family has the router yet) is refused naming
#    model.moe_scoring; device = "cuda" with the balancing step over sharded weights (zero3)
#    passes the start's checks (it runs there in every sharding mode:
#    tests/gpu/test_cuda_moe_bias.sh).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 13
make_synth "$TMP/data" 32 60000
tiny_llama_args "$TMP/data/train"
args+=(--set model.vocab_size=32 --set model.n_head=4 --set model.n_kv_head=2
       --set global_batch=64 --set micro_batch=16 --set optim.lr=1e-9 --set optim.warmup=0ba
       --set model.moe_experts=8 --set model.moe_top_k=2 --set model.moe_intermediate_size=32
       --set model.moe_aux_loss_coef=0 --set model.moe_z_loss_coef=0
       --set model.moe_scoring=sigmoid --set model.moe_topk_method=noaux_tc
       --set max_duration=30ba --set save_interval=10ba --set keep_last=5 --set watchdog.window=0)
run() { local dir=$1 np=$2; shift 2; ranks "$np" "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
# ratios DIR: per step 21..30 the largest max/mean expert load over the layers
ratios() {
    $PY3 -c '
import json, sys
recs = {r["step"]: r for r in map(json.loads, open(sys.argv[1])) if "lr" in r}
print(" ".join("%.3f" % max(l["max"] * 8 / l["tokens"] for l in recs[s]["moe_load"]) for s in range(21, 31)))' "$TMP/$1/metrics.jsonl"
}
# bias RUN_DIR: the final checkpoint's routercorr, bit for bit (hex), and its moments' largest |x|
bias() {
    /usr/bin/python3 - "$(ck "$TMP/$1" 30)" <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
b = f["model/routercorr"][()]
print(b.astype(np.float32).tobytes().hex(), float(np.abs(b).max()),
      max(float(np.abs(f[f"optim/{k}/routercorr"][()]).max()) for k in "mv"))
PY
}

run A 1
rc=$?
run F 1 --set model.moe_bias_update_rate=0
rcf=$?
ra=$(ratios A) rf=$(ratios F)
tap_diag "max/mean load, steps 21..30, rate 0.001: $ra"
tap_diag "max/mean load, steps 21..30, rate 0:     $rf"
((rc == 0 && rcf == 0)) && grep -q "routercorr" <(h5ls -r "$(ck "$TMP/A" 30)") &&
    $PY3 -c "import sys; a = [float(x) for x in '$ra'.split()]; f = [float(x) for x in '$rf'.split()]
sys.exit(0 if len(a) == 10 and max(a) <= 1.2 and len(f) == 10 and min(f) > 1.25 else 1)"
tap_check $? "balancing without an auxiliary loss: max/mean expert load <= 1.2 at every step 21..30 (rate 0: > 1.25 at each)"

read -r hexa topa moma < <(bias A)
tap_diag "bias at step 30: max |bias| $topa, its moments' max $moma"
[[ -n $hexa && $topa != 0.0 && $moma == 0.0 ]] && read -r hexf topf _ < <(bias F) && [[ $topf == 0.0 ]]
tap_check $? "the bias moved (max |bias| $topa), its AdamW moments stay 0; at rate 0 it stays 0"

run B 2
read -r hexb _ < <(bias B)
[[ -n $hexb && $hexb == "$hexa" ]]
tap_check $? "the bias after 30 steps on 2 ranks equals 1 rank's bit for bit"
run E 2 --set parallel.expert=2
read -r hexe _ < <(bias E)
run E4 4 --set parallel.expert=4
read -r hexe4 _ < <(bias E4)
[[ -n $hexe && $hexe == "$hexa" && $hexe4 == "$hexa" ]] && grep -q "expert parallelism" "$TMP/E.txt" &&
    grep -q "expert parallelism" "$TMP/E4.txt"
tap_check $? "with parallel.expert = 2 on 2 ranks and 4 on 4: the same bias bit for bit (EP 1/2/4)"
run Z 2 --set parallel.sharding=zero3
read -r hexz _ < <(bias Z)
[[ -n $hexz && $hexz == "$hexa" ]]
tap_check $? "with parallel.sharding = \"zero3\" on 2 ranks (the bias moved in its shards): the same bias bit for bit"

run Z1 2 --set parallel.sharding=zero1
read -r hexz1 _ < <(bias Z1)
run T 2 --set parallel.tensor=2
read -r hext _ < <(bias T)
[[ -n $hexz1 && $hexz1 == "$hexa" && -n $hext && $hext == "$hexa" ]]
tap_check $? "with parallel.sharding = \"zero1\" and with parallel.tensor = 2 on 2 ranks: the same bias bit for bit"

OMPI_MCA_odls_base_sigkill_timeout=0 TSR_FAULT=kill:16:1 run K 2 --set save_async=false
rck=$?
run K 2
rck2=$?
tap_diag "killed run: exit $rck, rerun: exit $rck2, $(grep -m1 -o "checkpoint resume step [0-9]*" "$TMP/K.txt")"
((rck != 0 && rck2 == 0)) && grep -q "checkpoint resume step 10" "$TMP/K.txt" &&
    same_tensors "$(ck "$TMP/B" 30)" "$(ck "$TMP/K" 30)"
tap_check $? "rank 1 killed after step 16, resumed from step 10: the final checkpoint (routercorr included) equals the uninterrupted run's"

run D 1 --set model.n_layer=3 --set model.moe_dense_layers=1 --set max_duration=2ba --set save_interval=2ba
/usr/bin/python3 - "$(ck "$TMP/D" 2)" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
m = f["model"]
ok = m["routerw"].shape[0] == 2 and m["routercorr"].shape == (2, 8) and m["fcw"].shape[0] == 1
sys.exit(0 if ok else 1)
PY
tap_check $? "model.moe_dense_layers = 1 of 3 layers: routerw and routercorr stack 2 MoE layers, fcw 1 dense"

refused() { start_refused "$@"; }
refused g1 "model.moe_n_group: model.moe_experts must be a multiple of model.moe_n_group" --set model.moe_n_group=3 &&
    refused g2 "model.moe_topk_group must be at most model.moe_n_group" --set model.moe_n_group=4 --set model.moe_topk_group=5 &&
    refused g3 "model.moe_bias_update_rate" --set model.moe_bias_update_rate=-0.1
tap_check $? "moe_n_group not dividing the experts, moe_topk_group > moe_n_group, a negative rate: exit 1 naming the key, nothing written"
refused s1 "model.moe_scoring.*softmax.*sigmoid" --set model.moe_scoring=tanh &&
    refused s2 "model.moe_topk_method.*noaux_tc" --set model.moe_topk_method=aux
tap_check $? "an unknown moe_scoring and moe_topk_method: exit 1 naming the key and the valid values, nothing written"
# the pipeline: tiny-deepseek cut to 4 layers (the first dense) and no MTP, the bias moved 0.01 a
# step, 8 microbatches of one sequence (more than the stages); each stage moves its own layers'
# bias by their loads over the step's microbatches and the stage's data ranks
ds=(--config "$TSR_ROOT/configs/tiny-deepseek.cfg" --set model.vocab_size=32
    --set model.vocab_multiple=32 --set data.tokenizer= --set sample.tokens=0
    --set data.train="$TMP/data/train" --set data.val= --set eval_interval=0ba --set seq_len=32
    --set model.max_seq_len=32 --set global_batch=8 --set micro_batch=1 --set threads=1
    --set log_interval=1 --set optim.warmup=2ba --set max_duration=4ba --set save_interval=2ba
    --set keep_last=5 --set save_async=false --set watchdog.window=0
    --set model.num_nextn_predict_layers=0 --set model.moe_bias_update_rate=0.01)
prun() { local dir=$1 np=$2; shift 2; ranks "$np" "$TRAIN" "${ds[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
# moved CKPT: every MoE layer's routercorr moved
moved() {
    /usr/bin/python3 -c 'import sys, h5py, numpy as np
b = h5py.File(sys.argv[1], "r")["model/routercorr"][()]
print("# routercorr", b.shape, "max |x| per layer", np.abs(b).max(axis=1)); sys.exit(0 if (np.abs(b).max(axis=1) > 0).all() else 1)' "$1"
}
# same_bias A.h5 B.h5: the two checkpoints' routercorr equal bit for bit
same_bias() {
    /usr/bin/python3 -c 'import sys, h5py, numpy as np
a, b = (h5py.File(f, "r")["model/routercorr"][()] for f in sys.argv[1:])
sys.exit(0 if np.array_equal(a, b) else 1)' "$1" "$2"
}
pp=(--set parallel.pipeline=2)
prun P1 1 && prun P2 2 "${pp[@]}" &&
    prun Pi 2 "${pp[@]}" --set parallel.pipeline_schedule=interleaved --set parallel.pipeline_virtual=2 &&
    prun PD 4 "${pp[@]}" && prun PR 1 --resume "$(ck "$TMP/P2" 2)" && runs_exact P1 P2 Pi PD &&
    moved "$(ck "$TMP/P1" 4)" && same_tensors "$(ck "$TMP/P1" 4)" "$(ck "$TMP/P2" 4)" &&
    same_tensors "$(ck "$TMP/P1" 4)" "$(ck "$TMP/Pi" 4)" && same_bias "$(ck "$TMP/P1" 4)" "$(ck "$TMP/PD" 4)" &&
    same_tensors "$(ck "$TMP/P1" 4)" "$(ck "$TMP/PR" 4)"
tap_check $? "the bias update under parallel.pipeline = 2 (1f1b, interleaved, and P 2 x data 2) on tiny-deepseek: losses and norms within 1e-6 of one rank, every layer's moved bias one rank's bit for bit, the final checkpoint too (1f1b, interleaved: P 2 x data 2 sums its gradients in another order); P 2's step-2 checkpoint resumed on one rank ends the same"
cuda_accepted cu --set parallel.sharding=zero3 --set model.n_head=2 --set model.n_kv_head=1 # (heads of 32: a GPU kernel's)
tap_check $? "device = \"cuda\" with the correction bias's balancing step over sharded weights (zero3): passes the start's checks, no refusal (its runs: tests/gpu/test_cuda_moe_bias.sh)"
export_refused "$(ck "$TMP/A" 30)" "$TMP/hf" "model.moe_scoring"
tap_check $? "ckpt export --format hf of the router's checkpoint: exit 1 naming model.moe_scoring, no weights written"
tap_done
