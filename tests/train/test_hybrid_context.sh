#!/usr/bin/env bash
# Hybrid linear attention under context parallelism (parallel.context = N; docs/deltanet.md
# "Context parallelism"): the Gated DeltaNet layers pass their state and convolution tail from
# the rank holding chunk j to the one holding chunk j + 1 (src/model/dn_ring.c), the full layer
# goes round the ring. A tiny 4-layer model of 3 linear + 1 full layers (grouped DeltaNet heads
# 2 : 4, d_k 8, d_v 6; Qwen3-Next's gated attention on the full layer) on 32-token rows of the
# synthetic corpus of 64 tokens, token 8 ending a document (the corpus' rows hold documents
# shorter than a 4-token chunk of N = 4, and documents across chunk and rank boundaries: the
# first check says how many), through the real trainer on MPI ranks:
#  - the document mask: N = 2 and N = 4, and data x context = 2 x 2 under zero3 with block
#    activation checkpointing, give N = 1's losses within 1e-6 relative at each of 8 steps (the
#    gradient norms within 1e-5); step 0's
#    gradients of every tensor at N = 4 (the AdamW first moments after step 1) within 1e-5 of
#    the tensor's largest;
#  - causal (no document mask: every chunk continues the one before) on 8-token rows at N = 4, 6
#    steps: chunks of one position, shorter than the convolution's tail of K - 1 = 3 inputs,
#    which then reaches back over several chunks and ranks: the same;
#  - resume: rank 1 SIGKILLed after step 6 of an N = 2 run saving every 4 steps; the rerun
#    resumes from step 4 and equals the uninterrupted N = 2 run bit for bit (losses, final
#    weights).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 5
make_synth "$TMP/d" 64 60000
base=(--config "$TSR_ROOT/configs/tiny-llama.cfg" --set model.vocab_size=64 --set data.tokenizer=
      --set sample.tokens=0 --set data.train="$TMP/d/train" --set data.val= --set eval_interval=0ba
      --set seq_len=32 --set model.max_seq_len=32 --set model.n_layer=4 --set model.d_model=64
      --set model.n_head=4 --set model.n_kv_head=2 --set model.intermediate_size=96
      --set global_batch=4 --set micro_batch=2 --set max_duration=8ba --set save_interval=0ba
      --set save_final=false --set threads=1 --set log_interval=1 --set watchdog.window=0
      --set optim.warmup=2ba --set model.attn_mask=document --set model.eot_token=8
      --set model.layer_types=linear_attention,full_attention,linear_attention,linear_attention
      --set model.linear_num_key_heads=2 --set model.linear_num_value_heads=4
      --set model.linear_key_head_dim=8 --set model.linear_value_head_dim=6
      --set model.attn_output_gate=true)
# run DIR NP N ARGS...
run() {
    local dir=$1 np=$2 n=$3; shift 3
    ranks "$np" "$TRAIN" "${base[@]}" --set parallel.context="$n" --set run_dir="$TMP/$dir" "$@" \
        >"$TMP/$dir.txt" 2>&1
}

# the corpus' 32-token rows: documents inside one 4-token chunk, documents across chunks
"$PY3" - "$TMP/d/train/shard-00000.bin" <<'PY'
import struct, sys
raw = open(sys.argv[1], "rb").read()
width, n = struct.unpack_from("<I", raw, 16)[0], struct.unpack_from("<Q", raw, 32)[0]
tok = struct.unpack_from("<%d%s" % (n, "H" if width == 2 else "I"), raw, 64)
short = across = 0
for r in range(n // 32):
    row, start = tok[32 * r:32 * r + 32], 0
    for t, x in enumerate(row):
        if x == 8 or t == 31:  # a document ends at t (its eot) or with the row
            short += start // 4 == t // 4
            across += start // 4 != t // 4
            start = t + 1
print(f"# rows of 32: {short} documents inside a 4-token chunk, {across} across chunks")
sys.exit(0 if short > 0 and across > 0 else 1)
PY
corpus=$?
# step 1's checkpoints too: its AdamW first moments are (1 - beta1) g, step 0's gradients
first=(--set save_interval=1ba --set keep_last=8)
run C1 1 1 "${first[@]}" && run C2 2 2 --set save_final=true && run C4 4 4 "${first[@]}" &&
    runs_exact C1 C2 C4 && ((corpus == 0))
tap_check $? "document mask: N = 2 and N = 4 equal N = 1 within 1e-6 at all 8 steps (documents shorter than a chunk and across chunks)"
/usr/bin/python3 - "$TMP/C1/step-00000001.h5" "$TMP/C4/step-00000001.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["optim/m"] for p in sys.argv[1:])
worst = {n: float(np.max(np.abs(a[n][()] - b[n][()]))) / max(float(np.max(np.abs(a[n][()]))), 1e-30)
         for n in a}
dn = sorted(n for n in a if n.startswith("dn"))
print(f"# {len(worst)} tensors, the DeltaNet's {dn}; worst {max(worst.values()):.1e} of the tensor's largest"
      f" ({max(worst, key=worst.get)})")
sys.exit(0 if sorted(a) == sorted(b) and len(dn) == 9 and "attngatew" in a and max(worst.values()) <= 1e-5 else 1)
PY
tap_check $? "document mask: step 0's gradients of every tensor (the 9 DeltaNet ones, the gate's) at N = 4 equal N = 1's within 1e-5 of the tensor's largest"
grep -h 'context ring:' "$TMP/C2.txt" "$TMP/C4.txt" | sed 's/^/# /'

run Z 4 2 --set parallel.sharding=zero3 --set model.activation_checkpointing=block && runs_exact C1 Z
tap_check $? "document mask: data x context = 2 x 2 under zero3, block activation checkpointing (the pipeline rerun before each layer's backward), equals N = 1 within 1e-6"

short=(--set model.attn_mask=causal --set max_duration=6ba --set seq_len=8 --set model.max_seq_len=8)
run K1 1 1 "${short[@]}" && run K4 4 4 "${short[@]}" && runs_exact K1 K4
tap_check $? "causal, 8-token rows at N = 4 (chunks of 1 position: the convolution's 3-row tail spans ranks): N = 1 within 1e-6 at all 6 steps"

TSR_FAULT=kill:6:1 run R2 2 2 --set save_interval=4ba --set save_async=false --set save_final=true
rc=$?
run R2 2 2 --set save_interval=4ba --set save_final=true && rc2=0 || rc2=1
tap_diag "killed run: exit $rc; rerun: exit $rc2, $(grep -m1 -o 'checkpoint resume step [0-9]*' "$TMP/R2.txt")"
[[ $rc != 0 && $rc2 == 0 ]] && grep -q "checkpoint resume step 4" "$TMP/R2.txt" &&
    cmp -s <(final_lines "$TMP/C2/metrics.jsonl") <(final_lines "$TMP/R2/metrics.jsonl") &&
    same_tensors "$TMP/C2/step-00000008.h5" "$TMP/R2/step-00000008.h5"
tap_check $? "N = 2: rank 1 SIGKILLed after step 6, the rerun resumes from step 4 and equals the uninterrupted run bit for bit"
tap_done
