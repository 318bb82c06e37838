#!/usr/bin/env bash
# Context parallelism for multi-head latent attention (parallel.context = N with
# model.kv_lora_rank > 0; docs/parallelism.md "Multi-head latent attention"): the ring carries each
# rank's normed latent and turned RoPE key instead of the expanded keys and values, every rank
# expanding a block with its own kv_b_proj. Through the real trainer on MPI ranks, a tiny 2-layer
# MLA model (the queries' low-rank path, interleaved RoPE, value heads unlike the keys') on 32-token
# rows, 4 steps of 2 microbatches:
#  - causal: N = 2 and N = 4 equal N = 1 within 1e-6 relative at every step (the gradient norms
#    within 1e-5);
#  - attn_mask = document (the 64-token corpus' token 8 ends a document: documents straddle the
#    chunks and ranks) at N = 4, and data x context = 2 x 2 with zero3 and block activation
#    checkpointing (each layer's ring rerun before its backward): N = 1 within 1e-6;
#  - step 0's gradients (the AdamW first moments after one step, (1 - beta1) g) of every tensor at
#    N = 4 equal N = 1's within 1e-5 of the tensor's largest, kv_b_proj's (mlakvbw: summed from
#    every rank's blocks) and kv_a's (mlakvaw: from the latent's gradient that came home) among them;
#  - the bytes: each run's "context ring" count equals the plan's formula (--dry-run: per rank
#    and step) x ranks x steps, N = 2 and 4 — the latent's kv_lora_rank + qk_rope_head_dim = 40
#    numbers a token where the expanded keys and values are 4 x (24 + 12) = 144.
# (device = "cuda" runs the same ring: tests/gpu/test_cuda_mla_context.sh.)
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 5
parallel_args 2 4 2 4ba
mla=(--config "$TSR_ROOT/configs/tiny-llama.cfg" "${base[@]}" --set model.intermediate_size=96
     --set model.n_kv_head=0 --set model.kv_lora_rank=32 --set model.q_lora_rank=24
     --set model.qk_nope_head_dim=16 --set model.qk_rope_head_dim=8 --set model.v_head_dim=12
     --set model.rope_interleave=true)
doc=(--set model.attn_mask=document --set model.eot_token=8)
# run DIR NP N ARGS...
run() {
    local dir=$1 np=$2 n=$3; shift 3
    ranks "$np" "$TRAIN" "${mla[@]}" --set parallel.context="$n" --set run_dir="$TMP/$dir" "$@" \
        >"$TMP/$dir.txt" 2>&1
}
# bytes_match DIR NP N ARGS...: DIR's run sent what its plan says a rank and step, x NP x 4 steps
bytes_match() {
    local dir=$1 np=$2 per sent
    run "$dir.plan" "$np" "${@:3}" --dry-run || return 1
    per=$(grep -o 'backward, [0-9]* B per rank and step' "$TMP/$dir.plan.txt" | grep -o '[0-9]* B' | tr -d ' B')
    sent=$(sed -n 's/^context ring: \([0-9]*\) bytes sent.*/\1/p' "$TMP/$dir.txt")
    tap_diag "$dir: sent $sent bytes, the plan $per a rank and step: $(grep -o 'multi-head latent attention rings.*' "$TMP/$dir.plan.txt")"
    [[ -n $per && -n $sent && $sent == $((per * np * 4)) ]]
}

run C1 1 1 && run C2 2 2 && run C4 4 4 && runs_exact C1 C2 C4
tap_check $? "causal: N = 2 and N = 4 equal N = 1 within 1e-6 at all 4 steps"

first=(--set save_interval=1ba --set keep_last=8)
run D1 1 1 "${doc[@]}" "${first[@]}" && run D4 4 4 "${doc[@]}" "${first[@]}" &&
    run Z 4 2 "${doc[@]}" --set parallel.sharding=zero3 --set model.activation_checkpointing=block &&
    runs_exact D1 D4 Z
tap_check $? "attn_mask = document: N = 4, and data x context 2 x 2 under zero3 with block activation checkpointing, equal N = 1 within 1e-6 at all 4 steps"

"$PY3" - "$TMP/D1/step-00000001.h5" "$TMP/D4/step-00000001.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["optim/m"] for p in sys.argv[1:])
worst = {n: float(np.max(np.abs(a[n][()] - b[n][()]))) / max(float(np.max(np.abs(a[n][()]))), 1e-30)
         for n in a}
mla = sorted(n for n in a if n.startswith("mla"))
print(f"# {len(worst)} tensors, MLA's {mla}; worst {max(worst.values()):.1e} of the tensor's largest"
      f" ({max(worst, key=worst.get)}), mlakvbw {worst.get('mlakvbw', -1):.1e}")
sys.exit(0 if sorted(a) == sorted(b) and len(mla) == 7 and max(worst.values()) <= 1e-5 else 1)
PY
tap_check $? "document mask: step 0's gradients of every tensor (the 7 MLA ones) at N = 4 equal N = 1's within 1e-5 of the tensor's largest"

bytes_match C2 2 2 && bytes_match C4 4 4
tap_check $? "the bytes each run's ring sent (its 'context ring' line) equal the plan's per rank and step x ranks x 4 steps, N = 2 and 4"

grep -q 'rings its latent: 40 numbers a token .* 144 (n_head' "$TMP/C2.plan.txt"
tap_check $? "the plan says the latent ring's 40 numbers a token against the expanded 144"

tap_done
