#!/usr/bin/env bash
# LoRA on multi-head latent attention (issue 84; docs/lora.md "Multi-head latent attention")
# through the real trainer on configs/tiny-deepseek.cfg (vocabulary 512, seq_len 32, no MTP module:
# LoRA with model.num_nextn_predict_layers > 0 is refused, docs/models.md "Multi-token
# prediction"); the gradients against float64 PyTorch: tests/reference/test_lora_mla.py.
#  - a base trained 4 steps, then adapters (all-linear: o, q_a_proj, q_b_proj, kv_a_proj_with_mqa,
#    kv_b_proj; the experts take none) with dropout 0.1 on 2 ranks, 16 steps on a dataset small
#    enough that its batches repeat: the checkpoint holds the adapters at their shapes over the 4
#    layers; the loss falls (the last 4 steps' mean under the first 4's, step 16 under step 1);
#  - resumed from its step-8 checkpoint (another run directory, same config), steps 9 .. 16's
#    losses, lr and grad norms and the final adapters equal the uninterrupted run bit for bit;
#  - the base's file is untouched (its bytes), and the resumed run's checksum of the base it
#    loaded (crc32c of its weights) is the first run's lora.base_checksum (the base's tensors stay
#    bit for bit through training: test_lora_mla.py);
#  - `ckpt export --adapter`: PEFT's names base_model.model.model.layers.<l>.self_attn.<module>
#    .lora_<A|B>.weight for each layer and module, target_modules those modules;
#    `ckpt export --merge` against the base's export, in float64: every adapted weight equals
#    W + (alpha / r) B A from the PEFT files (rel err <= 1e-6: fp32 rounding of the merge), every
#    other tensor the base's bit for bit; the same with no model.q_lora_rank (V2-Lite's shape: q
#    is q_proj);
#  - `--init-from` the PEFT directory (lora.base the base), one step at lr 1e-30: exported again,
#    the same 40 tensors bit for bit (the DeepSeek module names read back);
#  - zero1 and zero3 on 2 ranks, and hsdp on 2 x 2 against ddp on 4 ranks (microbatches of 2):
#    every step's loss and grad norm equal ddp's within 1e-6 (the dropout masks follow the
#    global row);
#  - parallel.context = 2 on a dense MLA model (all-linear, dropout 0.1, lr 1e-2): 4 steps' loss
#    and grad norm equal one rank's within 1e-6, the final adapters within 1e-3 of each tensor's
#    largest (kv_b_proj's adapter applied where the ring expands and contracts a block);
#  - objective = "dpo" over the adapters on 2 ranks equals 1 rank (loss 1e-6, grad norm 1e-5),
#    step 1's loss log 2, the loss falls, the base's file untouched;
#  - objective = "grpo" over the adapters on a tiny MLA model (rollouts decoded over the
#    compressed cache from the merged copy): 2 steps, 32 rollouts with finite log-probabilities,
#    every B moved from 0, the base's file untouched; greedy `generate` of its checkpoint (the
#    adapters merged at load) equals that of its merged Hugging Face export (40 tokens, the
#    probabilities within 1e-6) and differs from the base's;
#  - parallel.pipeline = 2 (2 stages of the 4 layers): 4 steps and the final adapters equal one
#    rank's within 1e-6;
#  - refused at start (exit 1), naming lora.targets, nothing written: k (no k_proj in MLA), q with
#    model.q_lora_rank > 0, and kv_b_proj on a model without MLA name lora.targets.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 14
make_synth "$TMP/data" 512 30000
"$TOOL" synth --out "$TMP/small" --vocab 512 --tokens 400 --seed 3 >/dev/null
args=(--config "$TSR_ROOT/configs/tiny-deepseek.cfg" --set model.vocab_size=512 --set data.tokenizer=
      --set sample.tokens=0 --set data.train="$TMP/data/train" --set data.val= --set eval_interval=0ba
      --set model.num_nextn_predict_layers=0 --set seq_len=32 --set model.max_seq_len=32
      --set global_batch=8 --set micro_batch=4 --set threads=1 --set log_interval=1
      --set optim.warmup=2ba --set watchdog.window=0 --set keep_last=3)
lora=(--set lora.rank=4 --set lora.alpha=8 --set lora.dropout=0.1 --set optim.lr=1e-1
      --set max_duration=16ba --set save_interval=8ba --set data.train="$TMP/small/train")
base() { # DIR [SETTINGS]: a base trained 4 steps
    local d=$1; shift
    "$TRAIN" "${args[@]}" --set run_dir="$TMP/$d" --set max_duration=4ba --set save_interval=4ba \
        "$@" >"$TMP/$d.txt" 2>&1
}

base base && sum=$(sha256sum <"$TMP/base/step-00000004.h5") &&
    ranks 2 "$TRAIN" "${args[@]}" "${lora[@]}" --init-from "$TMP/base" --set run_dir="$TMP/L" \
        >"$TMP/L.txt" 2>&1
rc=$?
tap_diag "exit $rc; $(grep -m1 '^lora:' "$TMP/L.txt" | head -c 200)"
((rc == 0)) && grep -q "^lora: r=4 alpha=8 dropout=0.1 targets=o,q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj; " "$TMP/L.txt" &&
    "$PY3" - "$TMP/L/step-00000016.h5" <<'PY'
import sys, h5py
shapes = {}
h5py.File(sys.argv[1], "r").visititems(
    lambda n, o: shapes.__setitem__(n, o.shape) if isinstance(o, h5py.Dataset) and n.startswith("lora/") else None)
# 4 layers; C 64, 4 heads of 16 + 8 (values 12), q latent 24, kv latent 32
want = {"o_A": (4, 4, 48), "o_B": (4, 64, 4), "q_a_proj_A": (4, 4, 64), "q_a_proj_B": (4, 24, 4),
        "q_b_proj_A": (4, 4, 24), "q_b_proj_B": (4, 96, 4), "kv_a_proj_with_mqa_A": (4, 4, 64),
        "kv_a_proj_with_mqa_B": (4, 40, 4), "kv_b_proj_A": (4, 4, 32), "kv_b_proj_B": (4, 112, 4)}
got = {n[len("lora/"):]: s for n, s in shapes.items()}
print("#", got)
sys.exit(0 if got == want else 1)
PY
tap_check $? "tiny-deepseek, LoRA all-linear on 2 ranks with dropout: the MLA targets, stacked over the 4 layers in the checkpoint"

"$PY3" - "$TMP/L/metrics.jsonl" <<'PY'
import json, sys
loss = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l and '"step"' in l]
print(f"# losses {' '.join(f'{x:.4f}' for x in loss)}")
sys.exit(0 if len(loss) == 16 and sum(loss[-4:]) < sum(loss[:4]) and loss[-1] < loss[0] else 1)
PY
tap_check $? "the loss falls over the 16 steps (the last 4 under the first 4, step 16 under step 1)"

ranks 2 "$TRAIN" "${args[@]}" "${lora[@]}" --init-from "$TMP/base" --set run_dir="$TMP/R" \
    --resume "$TMP/L/step-00000008.h5" >"$TMP/R.txt" 2>&1
rc=$?
"$PY3" - "$TMP/L" "$TMP/R" <<'PY'
import json, sys, h5py
def steps(d):
    rows = [json.loads(l) for l in open(d + "/metrics.jsonl") if '"loss"' in l and '"step"' in l]
    return {r["step"]: (r["loss"], r["lr"], r["grad_norm"]) for r in rows if r["step"] > 8}
def adapters(d):
    f = h5py.File(d + "/step-00000016.h5", "r")
    return {k: f["lora"][k][()].tobytes() for k in f["lora"]}
a, b = steps(sys.argv[1]), steps(sys.argv[2])
print(f"# steps 9..16: {len(a)} and {len(b)}; same {a == b}")
sys.exit(0 if len(a) == 8 and a == b and adapters(sys.argv[1]) == adapters(sys.argv[2]) else 1)
PY
tap_check $? "resumed from step 8: steps 9 .. 16 (loss, lr, grad norm) and the final adapters equal the uninterrupted run bit for bit (exit $rc)"

want=$(grep -o 'base_checksum = "crc32c:[0-9a-f]*"' "$TMP/L/config.cfg")
got=$(grep -o 'base_checksum = "crc32c:[0-9a-f]*"' "$TMP/R/config.cfg")
tap_diag "base: the run's $want, the resumed run's (from the base it loaded) $got"
[[ $sum == "$(sha256sum <"$TMP/base/step-00000004.h5")" && -n $want && $want == "$got" ]]
tap_check $? "the base's file is untouched; the resumed run's checksum of the base it holds is the first run's lora.base_checksum"

merge_check() { # RUN BASE: the PEFT export's names, the merged export = W + (alpha / r) B A
    local r=$1 b=$2
    rm -rf "$TMP/$r.peft" "$TMP/$r.merged" "$TMP/$b.hf"
    "$TOOL" ckpt export -f hf -t none --adapter "$TMP/$r" "$TMP/$r.peft" >/dev/null 2>&1 &&
        "$TOOL" ckpt export -f hf -t none --merge "$TMP/$r" "$TMP/$r.merged" >/dev/null 2>&1 &&
        "$TOOL" ckpt export -f hf -t none "$TMP/$b" "$TMP/$b.hf" >/dev/null 2>&1 &&
        "$PY3" - "$TSR_ROOT/tests/reference" "$TMP/$r.peft" "$TMP/$r.merged" "$TMP/$b.hf" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from test_hf_export import st_arrays, np  # (safetensors read by hand)
peft, merged, base = sys.argv[2:5]
cfg = json.load(open(peft + "/adapter_config.json"))
mods = cfg["target_modules"]
_, _, ad = st_arrays(peft + "/adapter_model.safetensors")
_, _, mw = st_arrays(merged + "/model.safetensors")
_, _, bw = st_arrays(base + "/model.safetensors")
L = json.load(open(base + "/config.json"))["num_hidden_layers"]
names = {f"base_model.model.model.layers.{l}.self_attn.{m}.lora_{ab}.weight"
         for l in range(L) for m in mods for ab in "AB"}
bad = [f"names: extra {sorted(set(ad) - names)[:2]} missing {sorted(names - set(ad))[:2]}"] if set(ad) != names else []
s = cfg["lora_alpha"] / cfg["r"]
adapted = set()
for l in range(L):
    for m in mods:
        w = f"model.layers.{l}.self_attn.{m}.weight"
        p = f"base_model.model.model.layers.{l}.self_attn.{m}.lora_"
        A, B = (ad[p + ab + ".weight"].astype(np.float64) for ab in "AB")
        want = bw[w].astype(np.float64) + s * (B @ A)
        e = np.linalg.norm(mw[w] - want) / np.linalg.norm(want)
        moved = np.linalg.norm(mw[w].astype(np.float64) - bw[w]) > 0
        if not (e <= 1e-6 and moved):
            bad.append(f"{w}: rel err {e:.2e}, moved {moved}")
        adapted.add(w)
same = [n for n in bw if n not in adapted and mw[n].tobytes() != bw[n].tobytes()]
print(f"# targets {mods}: {len(adapted)} weights checked; problems {bad[:3]}; other tensors changed {same[:3]}")
sys.exit(0 if not bad and not same and set(mw) == set(bw) else 1)
PY
}
merge_check L base
tap_check $? "PEFT export: DeepSeek's module names per layer; the merged export equals W + (alpha/r) B A in float64 for each MLA target, the rest the base's"

rm -rf "$TMP/P.peft"
"$TRAIN" "${args[@]}" "${lora[@]}" --init-from "$TMP/L.peft" --set lora.base="$TMP/base" \
    --set run_dir="$TMP/P" --set max_duration=1ba --set save_interval=1ba --set optim.lr=1e-30 \
    --set lora.dropout=0 >"$TMP/P.txt" 2>&1 &&
    "$TOOL" ckpt export -f hf -t none --adapter "$TMP/P" "$TMP/P.peft" >/dev/null 2>&1 &&
    "$PY3" - "$TSR_ROOT/tests/reference" "$TMP/L.peft" "$TMP/P.peft" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from test_hf_export import st_arrays
_, _, a = st_arrays(sys.argv[2] + "/adapter_model.safetensors")
_, _, b = st_arrays(sys.argv[3] + "/adapter_model.safetensors")
same = set(a) == set(b) and all(a[n].tobytes() == b[n].tobytes() for n in a)
print(f"# {len(a)} PEFT tensors; read back and written again the same: {same}")
sys.exit(0 if same and len(a) == 40 else 1)
PY
tap_check $? "--init-from the PEFT directory (lora.base the base), 1 step at lr 1e-30: its export holds the same 40 tensors bit for bit"

for sh in zero1 zero3; do
    ranks 2 "$TRAIN" "${args[@]}" "${lora[@]}" --init-from "$TMP/base" --set run_dir="$TMP/$sh" \
        --set parallel.sharding=$sh >"$TMP/$sh.txt" 2>&1 || echo "$sh exit $?"
done >"$TMP/shard.err"
for sh in ddp hsdp; do # (4 ranks, microbatches of 2: the router's balancing loss is a microbatch's)
    ranks 4 "$TRAIN" "${args[@]}" "${lora[@]}" --init-from "$TMP/base" --set run_dir="$TMP/${sh}4" \
        --set parallel.sharding=$sh --set parallel.replica_group=2 --set micro_batch=2 \
        >"$TMP/${sh}4.txt" 2>&1 || echo "$sh on 4 exit $?"
done >>"$TMP/shard.err"
ok=0
for p in L:zero1 L:zero3 ddp4:hsdp4; do
    a=${p%%:*} b=${p##*:}
    tap_diag "$b vs $a: $(metrics_close "$TMP/$a/metrics.jsonl" "$TMP/$b/metrics.jsonl" 1 1e-6 1e-6)"
    metrics_close "$TMP/$a/metrics.jsonl" "$TMP/$b/metrics.jsonl" 1 1e-6 1e-6 >/dev/null || ok=1
done
[[ ! -s $TMP/shard.err ]]
tap_check $((ok | $?)) "zero1 and zero3 on 2 ranks, hsdp on 2 x 2 (against ddp on 4): every step's loss and grad norm equal ddp's within 1e-6 ($(cat "$TMP/shard.err"))"

base base2 --set model.q_lora_rank=0 &&
    "$TRAIN" "${args[@]}" "${lora[@]}" --init-from "$TMP/base2" --set run_dir="$TMP/L2" \
        --set max_duration=2ba --set model.q_lora_rank=0 >"$TMP/L2.txt" 2>&1 &&
    grep -q "targets=q,o,kv_a_proj_with_mqa,kv_b_proj; " "$TMP/L2.txt" && merge_check L2 base2
tap_check $? "no model.q_lora_rank (V2-Lite's shape): all-linear is q (q_proj), o, kv_a_proj_with_mqa, kv_b_proj, and the merge equals PEFT's rule"

# (a dense MLA model: tiny-deepseek's MoE layers route each rank's half of a row apart)
cp=(--config "$TSR_ROOT/configs/tiny-llama.cfg" "${args[@]:2}" --set model.n_layer=2
    --set model.n_head=4 --set model.intermediate_size=96 --set model.n_kv_head=0
    --set model.kv_lora_rank=32 --set model.q_lora_rank=24 --set model.qk_nope_head_dim=16
    --set model.qk_rope_head_dim=8 --set model.v_head_dim=12 --set model.rope_interleave=true
    --set max_duration=4ba --set save_interval=4ba)
cpL=("${lora[@]}" --set optim.lr=1e-2 --set max_duration=4ba --set save_interval=4ba
     --init-from "$TMP/cbase")
"$TRAIN" "${cp[@]}" --set run_dir="$TMP/cbase" >"$TMP/cbase.txt" 2>&1 &&
    ranks 2 "$TRAIN" "${cp[@]}" "${cpL[@]}" --set run_dir="$TMP/CP2" --set parallel.context=2 \
        >"$TMP/CP2.txt" 2>&1 &&
    "$TRAIN" "${cp[@]}" "${cpL[@]}" --set run_dir="$TMP/CP1" >"$TMP/CP1.txt" 2>&1
rc=$?
tap_diag "context 2 vs 1 (exit $rc): $(metrics_close "$TMP/CP1/metrics.jsonl" "$TMP/CP2/metrics.jsonl" 1 1e-6 1e-6)"
((rc == 0)) && metrics_close "$TMP/CP1/metrics.jsonl" "$TMP/CP2/metrics.jsonl" 1 1e-6 1e-6 >/dev/null &&
    "$PY3" - "$TMP/CP1/step-00000004.h5" "$TMP/CP2/step-00000004.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
worst = {n: float(np.max(np.abs(a["lora"][n][()] - b["lora"][n][()])) / np.max(np.abs(a["lora"][n][()])))
         for n in a["lora"]}
init = {n: float(np.max(np.abs(a["lora"][n][()]))) for n in a["lora"] if n.endswith("_B")}
print(f"# {len(worst)} adapter tensors; worst {max(worst.values()):.1e} of the tensor's largest; "
      f"kv_b_proj_B {worst['kv_b_proj_B']:.1e}; B moved {min(init.values()):.1e}")
sys.exit(0 if len(worst) == 16 and max(worst.values()) <= 1e-3 and min(init.values()) > 0 else 1)
PY
tap_check $? "parallel.context = 2 (the latent ring, kv_b_proj's adapter where each block is expanded and contracted, dropout 0.1): 4 steps' loss and grad norm equal one rank's within 1e-6, the final adapters within 1e-3 of each tensor's largest (AdamW's normalised steps lift rounding where a gradient is near 0; a dense MLA model, lr 1e-2)"

pairs=$("$PY3" "$TSR_ROOT/tests/reference/dpo_pairs.py" "$TMP")
dpo=(--set model.vocab_size=100 --set data.train="$pairs" --set seq_len=16 --set model.max_seq_len=16
     --set micro_batch=2)
dpoL=(--set objective=dpo --set lora.rank=4 --set lora.alpha=8 --set lora.dropout=0.1
      --set optim.lr=1e-2 --set dpo.beta=0.5 --set max_duration=8ba --set save_interval=8ba
      --init-from "$TMP/dbase")
[[ -n $pairs ]] && base dbase "${dpo[@]}" && dsum=$(sha256sum <"$TMP/dbase/step-00000004.h5") &&
    "$TRAIN" "${args[@]}" "${dpo[@]}" "${dpoL[@]}" --set run_dir="$TMP/D1" >"$TMP/D1.txt" 2>&1 &&
    ranks 2 "$TRAIN" "${args[@]}" "${dpo[@]}" "${dpoL[@]}" --set run_dir="$TMP/D2" >"$TMP/D2.txt" 2>&1
rc=$?
tap_diag "dpo 2 ranks vs 1 (exit $rc): $(metrics_close "$TMP/D1/metrics.jsonl" "$TMP/D2/metrics.jsonl" 1 1e-6 1e-5)"
((rc == 0)) && metrics_close "$TMP/D1/metrics.jsonl" "$TMP/D2/metrics.jsonl" 1 1e-6 1e-5 >/dev/null &&
    [[ $dsum == "$(sha256sum <"$TMP/dbase/step-00000004.h5")" ]] &&
    "$PY3" - "$TMP/D1/metrics.jsonl" "$TMP/D1/step-00000008.h5" <<'PY'
import json, math, sys, h5py
rows = [json.loads(l) for l in open(sys.argv[1]) if '"dpo_reward_margin"' in l]
loss = [r["loss"] for r in rows]
names = sorted(h5py.File(sys.argv[2], "r")["lora"])
print(f"# losses {' '.join(f'{x:.4f}' for x in loss)}; {len(names)} adapter tensors")
sys.exit(0 if len(loss) == 8 and abs(loss[0] - math.log(2)) < 1e-6 and loss[-1] < loss[0]
         and len(names) == 10 else 1)
PY
tap_check $? "objective = dpo over the MLA adapters (the reference the base without them): 2 ranks equal 1 within 1e-6 (loss; grad norm 1e-5, test_dpo.sh's) at all 8 steps, step 1's loss log 2 and the loss falls, the base's file untouched"

# GRPO over the adapters: a tiny MLA base with MoE layers (DeepSeek-V2's export: 1 full GRPO
# step), then 2 LoRA steps from it; the reward a completion's length in characters, so that a
# group's rewards differ
cat >"$TMP/len_reward.py" <<'PY'
import json, sys
for line in sys.stdin:
    q = json.loads(line)
    print(json.dumps({"id": q["id"], "reward": float(len(q["completion"]))}), flush=True)
PY
mlag=(--set model.pos=rope --set model.norm=rmsnorm --set model.mlp=swiglu --set model.bias=false
      --set model.kv_lora_rank=16 --set model.q_lora_rank=12 --set model.qk_nope_head_dim=16
      --set model.qk_rope_head_dim=8 --set model.v_head_dim=16 --set model.rope_interleave=true
      --set model.moe_experts=4 --set model.moe_top_k=2 --set model.moe_intermediate_size=32
      --set grpo.log_completions=16 --set reward.kind=command
      --set reward.command="$PY3 $TMP/len_reward.py")
grpo_prompts "$TMP/rl" 400 && grpo_small_args "$TMP/rl" &&
    "$TRAIN" "${small[@]}" "${mlag[@]}" --set max_duration=1ba --set save_interval=1ba \
        --set run_dir="$TMP/gbase" >"$TMP/gbase.txt" 2>&1 && gsum=$(sha256sum <"$TMP/gbase/step-00000001.h5") &&
    "$TRAIN" "${small[@]}" "${mlag[@]}" --set lora.rank=4 --set lora.alpha=8 --set lora.dropout=0.1 \
        --set optim.lr=1e-1 --init-from "$TMP/gbase" --set max_duration=2ba --set save_interval=2ba \
        --set run_dir="$TMP/G" >"$TMP/G.txt" 2>&1
rc=$?
tap_diag "grpo with LoRA on MLA: exit $rc, $(grep -m1 '^lora:' "$TMP/G.txt" | head -c 120)"
((rc == 0)) && [[ $gsum == "$(sha256sum <"$TMP/gbase/step-00000001.h5")" ]] &&
    "$PY3" - "$TMP/G/completions.jsonl" "$TMP/G/step-00000002.h5" <<'PY'
import json, math, sys, h5py, numpy as np
rows = [json.loads(l) for l in open(sys.argv[1])]
f = h5py.File(sys.argv[2], "r")
moved = {n: float(np.max(np.abs(f["lora"][n][()]))) for n in f["lora"] if n.endswith("_B")}
print(f"# {len(rows)} rollouts, logprobs {[round(r['logprob'], 2) for r in rows[:4]]} ...; "
      f"largest |B| (0 at the start) {moved}")
sys.exit(0 if sorted({r["step"] for r in rows}) == [1, 2] and len(rows) == 32
         and all(math.isfinite(r["logprob"]) and r["logprob"] < 0 for r in rows)
         and len(moved) == 5 and min(moved.values()) > 0 else 1)
PY
tap_check $? "objective = grpo over the MLA adapters (all-linear: o, q_a_proj .. kv_b_proj; rollouts decoded over the compressed cache from the merged copy): 2 steps, 32 rollouts with finite log-probabilities, every B moved from 0, the base's file untouched"

rm -rf "$TMP/G.merged"
gen() { # CKPT OUT: greedy, 40 tokens, the ids and each step's probabilities
    "$TOOL" generate --set threads=1 --ckpt "$1" --prompt-ids "5 17 3 250 99 12 7 41 8 2" \
        --max-tokens 40 --temperature 0 --no-eos-stop --ids --dump-probs "$2.probs" >"$2" 2>"$2.err"
}
"$TOOL" ckpt export -f hf -t none --merge "$TMP/G" "$TMP/G.merged" >/dev/null 2>&1 &&
    gen "$TMP/G" "$TMP/gen.lora" && gen "$TMP/G.merged" "$TMP/gen.merged" && gen "$TMP/gbase" "$TMP/gen.base"
rc=$?
((rc == 0)) && cmp -s "$TMP/gen.lora" "$TMP/gen.merged" &&
    "$PY3" - "$TMP/gen.lora.probs" "$TMP/gen.merged.probs" "$TMP/gen.base.probs" <<'PY'
import sys, numpy as np
a, m, b = (np.loadtxt(p, ndmin=2) for p in sys.argv[1:])
same = np.abs(a[:, 2:] - m[:, 2:]).max()
base = np.abs(a[:, 2:] - b[:, 2:]).max() if a.shape == b.shape else float("inf")
print(f"# {a.shape[0]} steps: the checkpoint vs its merged export max |dp| {same:.2e}; vs the base {base:.2e}")
sys.exit(0 if a.shape == m.shape and a.shape[0] == 40 and same <= 1e-6 and base > 1e-4 else 1)
PY
tap_check $? "greedy decoding over the compressed cache (40 tokens): the GRPO LoRA checkpoint (adapters merged at load) gives its merged Hugging Face export's ids and probabilities (1e-6), not the base's (exit $rc)"

# pipeline: 2 stages of tiny-deepseek's 4 layers (no bias update: the pipeline refuses it) against 1 rank
pp=(--set model.moe_bias_update_rate=0 --set optim.lr=1e-2 --set max_duration=4ba --set save_interval=4ba)
base pbase --set model.moe_bias_update_rate=0 &&
    ranks 2 "$TRAIN" "${args[@]}" "${lora[@]}" "${pp[@]}" --init-from "$TMP/pbase" --set parallel.pipeline=2 \
        --set run_dir="$TMP/PP2" >"$TMP/PP2.txt" 2>&1 &&
    "$TRAIN" "${args[@]}" "${lora[@]}" "${pp[@]}" --init-from "$TMP/pbase" --set run_dir="$TMP/PP1" \
        >"$TMP/PP1.txt" 2>&1
rc=$?
tap_diag "pipeline 2 vs 1 (exit $rc): $(metrics_close "$TMP/PP1/metrics.jsonl" "$TMP/PP2/metrics.jsonl" 1 1e-6 1e-6)"
((rc == 0)) && grep -q '^pipeline: 2 ranks a pipeline' "$TMP/PP2.txt" &&
    metrics_close "$TMP/PP1/metrics.jsonl" "$TMP/PP2/metrics.jsonl" 1 1e-6 1e-6 >/dev/null &&
    "$PY3" - "$TMP/PP1/step-00000004.h5" "$TMP/PP2/step-00000004.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["lora"] for p in sys.argv[1:])
worst = max(float(np.max(np.abs(a[n][()] - b[n][()])) / np.max(np.abs(a[n][()]))) for n in a)
print(f"# {len(a)} adapter tensors (every layer's, from both stages); worst {worst:.1e} of the tensor's largest")
sys.exit(0 if set(a) == set(b) and len(a) == 10 and worst <= 1e-6 else 1)
PY
tap_check $? "parallel.pipeline = 2 (1f1b, dropout 0.1): 4 steps' loss and grad norm and the final adapters of all 4 layers equal one rank's within 1e-6"

ref=("${args[@]}")
args+=("${lora[@]}")
start_refused K 'lora.targets = "o,k": k: the model has no such projection (multi-head latent attention' \
    --set lora.targets=o,k
k=$?
start_refused Q 'lora.targets = "q": q: the model has no such projection (with model.q_lora_rank > 0' \
    --set lora.targets=q
q=$?
tiny_llama_args "$TMP/data/train"
start_refused N 'lora.targets = "q,kv_b_proj": kv_b_proj: the model has no such projection (q_a_proj, q_b_proj, kv_a_proj_with_mqa and kv_b_proj are multi-head latent attention' \
    --set lora.rank=4 --set lora.targets=q,kv_b_proj
args=("${ref[@]}")
tap_check $((k | q | $?)) "refused at start (exit 1, nothing written): k, q beside q_lora_rank, and kv_b_proj on a model without MLA, naming lora.targets"
tap_done
