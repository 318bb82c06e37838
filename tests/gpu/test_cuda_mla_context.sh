#!/usr/bin/env bash
# Context parallelism for multi-head latent attention with device = cuda (docs/cuda.md "Multi-head
# latent attention", docs/parallelism.md "Multi-head latent attention"): the ring carries each
# rank's normed latent and turned RoPE key (model_ring.c's latent ring, mixer_mla.c's payload),
# its blocks' attention over heads the ring kernels lack (queries and keys of 16 + 8 = 24, values
# of 12: zero-padded to 32 by src/gpu/gpu_mla_ring.c). A tiny 2-layer MLA model (the queries'
# low-rank path, interleaved RoPE) on 32-token rows under attn_mask = document (the 64-token
# corpus' token 8 ends a document: documents straddle the chunks and ranks), 6 steps of 2
# microbatches, device = cuda:
#  - parallel.context = 2 on 2 ranks gives every step of the 1-rank device run within 2e-4 (loss)
#    and 2e-3 (norm), relative (test_cuda_context.sh's bar; measured 4e-5 and 1.3e-3 on the
#    emulator), the ring over the context group's communicator said at start;
#  - step 0's gradients (the AdamW first moments after one step) of every tensor, row by row,
#    within 5e-2 of the row's largest of the 1-rank run's (measured 1.1e-2 on the emulator: bf16
#    activations; a ring that loses the RoPE key's gradient on its way home leaves kv_a's RoPE
#    rows at 1.0: the loss and norm alone barely move then);
#  - the bytes the ring sent (the run's "context ring" line) equal the plan's per rank and step x
#    2 ranks x 6 steps (bf16: 2 bytes an element), the plan saying the latent's 40 numbers a token
#    against the expanded keys and values' 144;
#  - data x context = 2 x 2 with zero3 and block activation checkpointing (each layer's ring rerun
#    before its backward) on 4 ranks: every step within the same tolerance of the 1-rank run's;
#  - LoRA on every MLA projection (kv_b_proj's adapter applied where a block is expanded, its
#    backward where the block is contracted) at parallel.context = 2: every step within the same
#    tolerance of the 1-rank LoRA run's (measured 3e-5, 3.4e-4; without kv_b_proj's adapter's
#    backward in the contraction 1.3e-3, 0.21), and step 0's adapter gradients row by row within
#    2e-1 of the row's largest (measured 5.3e-2: an adapter's B has rows of 4 numbers, bf16's
#    rounding shows more there).
# It runs on the host emulator of the CUDA backend (build/tests/tessera-train-cuemu: the trainer's
# GPU path, bf16 activations, the padded blocks' copies and the ring's transport) and on the real
# backend with as many GPUs as ranks (tests/gpu/device.sh's multirank stage; skipped loudly
# otherwise).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
PER=5
tap_plan $((2 * PER))
gpu_tiny_args 64 60000 --set model.n_head=4 --set model.n_kv_head=0 --set model.kv_lora_rank=32 \
    --set model.q_lora_rank=24 --set model.qk_nope_head_dim=16 --set model.qk_rope_head_dim=8 \
    --set model.v_head_dim=12 --set model.rope_interleave=true --set model.max_seq_len=32 \
    --set model.attn_mask=document --set model.eot_token=8 --set global_batch=4 \
    --set max_duration=6ba --set save_interval=1ba --set keep_last=8 --set save_final=false \
    --set watchdog.window=0 --set device=cuda
# run BIN DIR NP N ARGS...: output in DIR.txt
run() {
    local bin=$1 dir=$2 np=$3 n=$4; shift 4
    ranks "$np" "$bin" "${args[@]}" --set parallel.context="$n" \
        --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
}
close() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" 1 2e-4 2e-3; }

lora=(--set lora.rank=4 --set lora.alpha=8
      --set lora.targets=q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o)
# rows_close A B TOL PREFIX N: step 1's AdamW first moments of runs A and B (the same tensors, N of
# them named from PREFIX on), every tensor's rows (the last axis) within TOL of the row's largest
rows_close() {
    "$PY3" - "$TMP/$1/step-00000001.h5" "$TMP/$2/step-00000001.h5" "$3" "$4" "$5" <<'PY'
import sys, h5py, numpy as np
def moments(p):
    f, d = h5py.File(p, "r"), {}
    f["optim/m"].visititems(lambda n, o: d.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return d
a, b = moments(sys.argv[1]), moments(sys.argv[2])
def worst(x, y):
    x = x.reshape(-1, x.shape[-1]).astype(np.float64)
    y = y.reshape(-1, y.shape[-1]).astype(np.float64)
    return float(np.max(np.max(np.abs(x - y), axis=1) / np.maximum(np.max(np.abs(x), axis=1), 1e-30)))
w = {n: worst(a[n], b[n]) for n in a if n in b}
top = max(w, key=w.get)
mine = sorted(n for n in a if n.startswith(sys.argv[4]))
print(f"{len(w)} tensors ({len(mine)} {sys.argv[4]}*), worst row {w[top]:.1e} of its largest ({top})")
sys.exit(0 if sorted(a) == sorted(b) and len(mine) == int(sys.argv[5]) and w[top] <= float(sys.argv[3])
         else 1)
PY
}

# bytes_match DIR NP: DIR's ring sent what its plan says a rank and step x NP ranks x 6 steps
bytes_match() {
    local per sent
    per=$(grep -o 'backward, [0-9]* B per rank and step' "$TMP/$1.txt" | grep -o '[0-9]* B' | tr -d ' B')
    sent=$(sed -n 's/^context ring: \([0-9]*\) bytes sent.*/\1/p' "$TMP/$1.txt")
    echo "sent $sent bytes, the plan $per a rank and step"
    [[ -n $per && -n $sent && $sent == $((per * $2 * 6)) ]] &&
        grep -q 'rings its latent: 40 numbers a token .* 144 (n_head' "$TMP/$1.txt"
}

# suite BIN LABEL: the checks on one backend
suite() {
    local bin=$1 l=$2 d ok=1
    if gpus 2 "$l: parallel.context = 2"; then
        run "$bin" "$l.1" 1 1 && run "$bin" "$l.2" 2 2 && ok=0
        ((ok == 0)) && d=$(close "$l.1" "$l.2") &&
            grep -q "context parallelism: the ring over .* 2 ranks a group" "$TMP/$l.2.txt"
        tap_check $? "$l: parallel.context = 2 with MLA: every step within 2e-4 (loss), 2e-3 (norm) of one rank's ($d), the ring over the context group's communicator"
    fi
    if gpus 2 "$l: step 0's gradients at parallel.context = 2"; then
        ((ok == 0)) && d=$(rows_close "$l.1" "$l.2" 5e-2 mla 7)
        tap_check $? "$l: step 0's gradients of every tensor at parallel.context = 2, row by row, within 5e-2 of the row's largest of one rank's ($d)"
    fi
    if gpus 2 "$l: the ring's bytes against the plan"; then
        ((ok == 0)) && d=$(bytes_match "$l.2" 2)
        tap_check $? "$l: the bytes the ring sent equal the plan's per rank and step x 2 ranks x 6 steps ($d), the latent's 40 numbers a token against 144"
    fi
    if gpus 4 "$l: 2 x 2 with zero3 and activation checkpointing"; then
        local staged=()
        [[ $l == emulator ]] && staged=(--set parallel.gpu_comm=mpi)
        ((ok == 0)) && run "$bin" "$l.z" 4 2 --set parallel.sharding=zero3 "${staged[@]}" \
            --set model.activation_checkpointing=block && d=$(close "$l.1" "$l.z")
        tap_check $? "$l: data x context = 2 x 2 with zero3 and block activation checkpointing: every step within the tolerance of one rank's ($d)"
    fi
    if gpus 2 "$l: LoRA on every MLA projection at parallel.context = 2"; then
        local r=""
        ((ok == 0)) && run "$bin" "$l.l1" 1 1 "${lora[@]}" && run "$bin" "$l.l2" 2 2 "${lora[@]}" &&
            d=$(close "$l.l1" "$l.l2") && r=$(rows_close "$l.l1" "$l.l2" 2e-1 lora/ 10)
        tap_check $? "$l: LoRA on every MLA projection at parallel.context = 2: every step within the tolerance of one rank's ($d), step 0's adapter gradients row by row within 2e-1 of the row's largest ($r)"
    fi
}

both_halves "$PER" "" ""
tap_done
