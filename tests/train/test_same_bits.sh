#!/usr/bin/env bash
# The bit-identity set (issue 63: the house redesigned with no change of behaviour). A fixed set of
# short runs, one per way the trainer can be driven: ddp, zero1, zero3, hsdp, context 2, expert 2,
# LoRA, DPO, GRPO (with a reward program), Muon, save_async and the CUDA emulator. Each run's digest
# is the SHA-256 of its final checkpoint's tensors (every dataset: name, type, shape and bytes, in
# name order) and of its metrics (step, loss, lr, grad norm of each step, as printed). The digests
# must equal tests/train/same_bits.expected, recorded on the tree before the move: a refactor that
# changes one bit of one weight, moment or logged number fails here, naming the run.
#
# The digests are those of this machine kind (x86-64, Debian's OpenBLAS with its Haswell kernels,
# one thread a rank). RECORD=1 rewrites the file from this tree: do that only on a commit whose
# behaviour is the reference, never to make a moved tree pass.
source "$(dirname "$0")/../lib.sh"
# OpenBLAS's kernels sum in their own order: its AVX-512 ones (SkylakeX, which tests/run.sh and
# tessera pick where the CPU has AVX-512) give other bits than its AVX2 ones (Haswell, picked where
# it has AVX2 only). Machines of this kind come both ways (2026-11-29: one with AVX-512 failed every
# digest recorded on one without), so the runs here pin the kernels every x86-64 machine of this
# kind has: the same digests on either.
[[ $(uname -m) == x86_64 ]] && export OPENBLAS_CORETYPE=Haswell
tsr_tmpdir
EXPECTED=$TSR_ROOT/tests/train/same_bits.expected
RUNS=(ddp zero1 zero3 hsdp context2 expert2 lora dpo grpo muon save_async cuda_emu)
tap_plan $((${#RUNS[@]} + 3))

make_synth "$TMP/data" 512 60000 && grpo_prompts "$TMP" 400 &&
    "$TOOL" prep --out "$TMP/sft" --val-fraction 0 --tokenizer "$TMP/tok.tsr" -q --format sft \
        --pack 32 "$TMP/ar/sft.jsonl" &&
    pairs=$("$PY3" "$TSR_ROOT/tests/reference/dpo_pairs.py" "$TMP") && [[ -n $pairs ]]
tap_check $? "fixtures: the synthetic corpus, GRPO's arithmetic prompts and SFT set, DPO's pairs"

# the fixed shapes: a tiny GPT-2 and a tiny Llama, 3 steps, one thread, a final checkpoint
tiny_args "$TMP/data/train"
gpt=("${args[@]}" --set model.n_layer=2 --set model.n_head=4 --set global_batch=8 --set micro_batch=2
     --set max_duration=3ba --set save_interval=0ba --set optim.warmup=1ba)
tiny_llama_args "$TMP/data/train"
llama=("${args[@]}" --set model.n_head=4 --set model.n_kv_head=2 --set max_duration=3ba
       --set save_interval=0ba --set watchdog.window=0)
moe=(--set model.moe_experts=4 --set model.moe_top_k=2 --set model.moe_intermediate_size=48)
lora=(--set lora.rank=4 --set lora.alpha=8 --set lora.dropout=0.1 --set optim.lr=1e-2)
# the GRPO reward: a deterministic function of the completion's length, so groups have spread
cat >"$TMP/reward.py" <<'PY'
import json, sys
for line in sys.stdin:
    q = json.loads(line)
    print(json.dumps({"id": q["id"], "reward": (len(q["completion"]) % 3) / 2}), flush=True)
PY
grpo=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.n_layer=2 --set model.d_model=64
      --set model.n_head=2 --set model.vocab_size=257 --set model.vocab_multiple=16
      --set model.max_seq_len=32 --set seq_len=32 --set model.attn_mask=document
      --set model.eot_token=256 --set data.tokenizer="$TMP/tok.tsr" --set threads=1
      --set sample.tokens=0 --set watchdog.window=0 --set seed=7 --set log_interval=1
      --set data.val= --set eval_interval=0ba --set save_interval=0ba)

# train NAME NP [args...]: a run in $TMP/NAME (output in $TMP/NAME.txt)
train() {
    local name=$1 np=$2
    shift 2
    "${MPIRUN[@]}" -np "$np" "${TRAINER:-$TRAIN}" "$@" --set run_dir="$TMP/$name" >"$TMP/$name.txt" 2>&1
}
# the bases LoRA, DPO and GRPO start from
train base 1 "${llama[@]}" --set max_duration=2ba &&
    train dpo_base 1 "${llama[@]}" --set model.vocab_size=100 --set seq_len=16 \
        --set data.train="$pairs" --set max_duration=2ba &&
    train sft 1 "${grpo[@]}" --set data.train="$TMP/sft/train" --set global_batch=16 \
        --set micro_batch=16 --set max_duration=4ba --set optim.warmup=1ba
tap_check $? "the bases: a tiny Llama, a Llama on DPO's vocabulary, an SFT model for GRPO"

ddp() { train ddp 2 "${gpt[@]}"; }
zero1() { train zero1 2 "${gpt[@]}" --set parallel.sharding=zero1; }
zero3() { train zero3 2 "${gpt[@]}" --set parallel.sharding=zero3; }
hsdp() { train hsdp 4 "${gpt[@]}" --set parallel.sharding=hsdp --set parallel.replica_group=2; }
context2() {
    train context2 2 "${llama[@]}" --set parallel.context=2 --set model.attn_mask=document \
        --set model.eot_token=8
}
expert2() { train expert2 2 "${llama[@]}" "${moe[@]}" --set parallel.expert=2; }
lora() { train lora 2 "${llama[@]}" "${lora[@]}" --init-from "$TMP/base"; }
dpo() {
    train dpo 2 "${llama[@]}" --set model.vocab_size=100 --set seq_len=16 --set data.train="$pairs" \
        --set objective=dpo "${lora[@]}" --set dpo.beta=0.5 --init-from "$TMP/dpo_base"
}
grpo() {
    train grpo 2 "${grpo[@]}" --set objective=grpo --set data.train="$TMP/prompts/train" \
        --set global_batch=8 --set micro_batch=4 --set grpo.group_size=4 --set grpo.updates=2 \
        --set grpo.max_new_tokens=6 --set optim.lr=1e-3 --set optim.warmup=0ba \
        --set grpo.kl_coef=0.04 --set max_duration=2ba --set reward.kind=command \
        --set reward.command="$PY3 $TMP/reward.py" --init-from "$TMP/sft"
}
muon() {
    train muon 2 "${llama[@]}" "${moe[@]}" --set optim.name=muon --set optim.muon.weight_decay=0.1 \
        --set parallel.sharding=zero1
}
save_async() {
    train save_async 2 "${gpt[@]}" --set save_interval=1ba --set save_async=true \
        --set save_async_copy=background --set parallel.sharding=zero3
}
cuda_emu() {
    TRAINER=$BUILD/tests/tessera-train-cuemu train cuda_emu 1 "${llama[@]}" --set device=cuda \
        --set model.n_head=2 --set model.n_kv_head=1 # (head size 32: a GPU attention kernel's)
}

# digest NAME: the SHA-256 of the run's final checkpoint's tensors and of its metrics
digest() {
    "$PY3" - "$TMP/$1" <<'PY'
import hashlib, json, os, sys
import h5py, numpy as np
run = sys.argv[1]
ckpt = os.path.join(run, open(os.path.join(run, "latest")).read().strip())
h = hashlib.sha256()
with h5py.File(ckpt, "r") as f:
    names = []
    f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    for n in sorted(names):
        a = np.ascontiguousarray(f[n][()])
        h.update(f"{n} {a.dtype.str} {a.shape}\n".encode())
        h.update(a.tobytes())
for line in open(os.path.join(run, "metrics.jsonl")):
    d = json.loads(line)
    if "loss" in d and "step" in d:
        h.update(f"{d['step']} {d['loss']!r} {d.get('lr')!r} {d.get('grad_norm')!r}\n".encode())
print(len(names), h.hexdigest())
PY
}

got=$TMP/same_bits.got
: >"$got"
for r in "${RUNS[@]}"; do
    if [[ $r == cuda_emu && ! -x $BUILD/tests/tessera-train-cuemu ]]; then
        tap_skip "$r: the final checkpoint's tensors and the metrics equal the recorded digest" \
            "no CUDA emulator build (build/tests/tessera-train-cuemu)"
        grep "^$r " "$EXPECTED" >>"$got"
        continue
    fi
    if ! "$r"; then
        tap_diag "$r failed: $(grep -m3 -i error "$TMP/$r.txt")"
        echo "$r failed" >>"$got"
        tap_check 1 "$r: the run ends with exit 0"
        continue
    fi
    line="$r $(digest "$r")" || line="$r no digest"
    echo "$line" >>"$got"
    want=$(grep "^$r " "$EXPECTED" 2>/dev/null)
    [[ ${RECORD:-0} == 1 || $line == "$want" ]]
    tap_check $? "$r: the final checkpoint's tensors and the metrics equal the recorded digest"
    [[ ${RECORD:-0} == 1 || $line == "$want" ]] || tap_diag "$r: got '$line', recorded '$want'"
done
if [[ ${RECORD:-0} == 1 ]]; then
    cp "$got" "$EXPECTED"
    tap_diag "recorded $EXPECTED"
fi
[[ $(wc -l <"$EXPECTED") == "${#RUNS[@]}" ]]
tap_check $? "$EXPECTED holds a digest for each of the ${#RUNS[@]} runs"
tap_done
