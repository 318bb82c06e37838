#!/usr/bin/env bash
# device = cuda through the trainer (docs/cuda.md), against the CPU backend on the same runs:
#  - a tiny GPT-2 (learned positions, biases, tanh GELU) and a tiny MPT (ALiBi, no biases, exact
#    GELU, document mask): the loss of step 1 and of each of 20 steps within 0.5% of the CPU run's;
#  - a tiny Llama (RMSNorm, RoPE with Llama 3.1 scaling, SwiGLU, grouped-query attention 4:2,
#    head_dim 64 != d_model / n_head, untied head, document mask) and a tiny Qwen 3 (QK-norm,
#    multi-query attention, qkv bias, tied): every step within the tolerance of the CPU;
#  - a tiny Llama MoE (4 experts, top 2, a shared expert, aux and z losses; docs/moe.md): every
#    step within the tolerance of the CPU, every token routed (global_batch x seq_len x top_k);
#  - 2 ranks with gradient accumulation (the per-layer gradient sums during backward);
#  - a checkpoint written by the GPU run resumes on the CPU, and one written on the CPU resumes on
#    the GPU: the next steps within 0.5% of the CPU run that never stopped;
#  - parallel.sharding = zero1 and zero3 on 3 ranks (uneven pieces), hsdp on 2 x 2, zero3 on one
#    rank (with evaluation on the shards and the end-of-run sample): every step
#    within the tolerance of the CPU's ddp run; checkpoints across modes, rank counts and devices
#    (a GPU zero3 checkpoint resumed by the CPU's ddp, a GPU hsdp one by zero1 on the GPU);
#  - activation checkpointing (block, attention on a layer range, mlp on the first layers; block
#    under zero3): every step bit-identical to none on the same backend, smaller activations;
#  - the same run twice gives the same bits (the backend's determinism);
#  - input gradients overwritten (TSR_GRAD_SET) give the bits of zeroing then accumulating
#    (TSR_GRAD_OVERWRITE=0), on GPT-2, Llama and MoE;
#  - peak_mem_bytes (the device allocator's peak) within the device plan (ddp, zero1, zero3);
#    zero3 evaluates on the shards: on a device that holds the training but not a second full
#    copy of the bf16 weights, micro_batch = auto keeps its microbatch and the run evaluates;
#  - a missing CUDA library is refused naming it (once, on tessera-train);
#  - --plan with the CUDA library (no GPU) counts TSR_ATT_DQ_FUSED=1's scratch and refuses a bad value;
#    TSR_ATTENTION (cuDNN's attention, issue 66): the default opens no libcudnn, cudnn said, a bad
#    value refused;
#  - TSR_GEMM_REDUCTION (the split-K measurement switch): a bad value refused at start, none runs;
#    ranks that disagree on it (2 ranks) all stop at start, rank 0 naming the other;
#  - TSR_GEMM_TUNE (the file of GEMM choices): read and checked at start (a malformed line, another
#    GPU's file, a directory one rank cannot write in, ranks naming different files or reading
#    different tables refused; two ranks read, time nothing, need no writable directory); on a
#    GPU, a run that times writes the file and a second run reading it has the first's bits;
#  - TSR_ATT_WARP_ROWS (32 rows a warp in the attention kernels): a bad value refused at start, 32
#    said; on a GPU, GPT-2 (hs 32) and Llama (hs 64) runs with it within the tolerance of the CPU,
#    the same bits twice; TSR_XENT_RESIDENT=1 (softmax + cross-entropy with the row in registers):
#    on a GPU, the default's bits; TSR_ATT_DQ_FUSED (dq added by the dk/dv kernel): a bad value
#    refused at start, 1 said; on a GPU, GPT-2 (no document mask) the default's bits, Llama
#    (document mask) within the tolerance of the CPU and the same bits twice; TSR_NORM_HOLD (the
#    norm backwards with each row in registers; the default holds LayerNorm's): a bad value
#    refused, 1 said; on a GPU, GPT-2 (LayerNorm) with =0 and Llama (RMSNorm) with =1 the
#    default's bits.
# It runs twice: on the host emulator of the CUDA backend (build/tests/tessera-train-cuemu,
# kernels/cuda_emu/: every machine; it checks the trainer's GPU path, bf16 activations and all,
# not the CUDA kernels) and on the real backend when a GPU is present (skipped loudly otherwise).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
PER=22
tap_plan $((2 * PER + 26))
make_synth "$TMP/data" 512 80000

tiny_args "$TMP/data/train"
base=("${args[@]}" --set model.n_layer=2 --set model.n_head=2 --set global_batch=8
      --set micro_batch=4 --set model.eot_token=7 --set max_duration=20ba --set save_interval=10ba
      "${GPU_COMM_ARGS[@]}")
mpt=(--set model.pos=alibi --set model.bias=false --set model.gelu=exact
     --set model.attn_mask=document)
llama=(--set model.norm=rmsnorm --set model.pos=rope --set model.rope_theta=500000
       --set model.rope_scaling=llama3 --set model.rope_original_max_pos=16 --set model.mlp=swiglu
       --set model.intermediate_size=176 --set model.n_head=4 --set model.n_kv_head=2
       --set model.head_dim=64 --set model.bias=false --set model.tie_embeddings=false
       --set model.attn_mask=document)
qwen3=(--set model.norm=rmsnorm --set model.norm_eps=1e-6 --set model.pos=rope
       --set model.rope_theta=1000000 --set model.mlp=swiglu --set model.intermediate_size=96
       --set model.n_head=4 --set model.n_kv_head=1 --set model.head_dim=32 --set model.qk_norm=true
       --set model.bias=false --set model.qkv_bias=true)
moe=("${llama[@]}" --set model.moe_experts=4 --set model.moe_top_k=2
     --set model.moe_intermediate_size=64 --set model.moe_shared_size=32
     --set model.moe_z_loss_coef=0.001)
# run BIN NP DIR ARGS...: trains, output in DIR.txt. One rank starts without mpirun, as on the
# lent GPU machine (no MPI there, tests/gpu/device.sh): a singleton MPI process without an orted
# (as tests/run.sh starts the tests). 52 of this test's ~75 starts are of one rank, and mpirun
# added about 1 s and 0.3 CPU-s to each (docs/benchmarks.md, "CI time: one-rank jobs")
run() {
    local bin=$1 np=$2 dir=$3 launch=("${MPIRUN[@]}" -np "$2"); shift 3
    ((np == 1)) && launch=(env OMPI_MCA_ess_singleton_isolated="${OMPI_MCA_ess_singleton_isolated:-1}")
    "${launch[@]}" "$bin" "${base[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
}
# close A B FROM: every step of run B from FROM has its loss within $LOSS_TOL (relative) of run
# A's and its gradient norm within $NORM_TOL; prints the largest differences
close() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" "$3" "$LOSS_TOL" "$NORM_TOL"; }

# the CPU reference runs, shared by both suites (each keeps its step-10 checkpoint)
# 3 ranks: the shard pieces do not divide the units, so the last rank's is short and padded
three=(--set global_batch=6 --set micro_batch=1)
evals=(--set data.val="$TMP/data/val" --set eval_interval=10ba --set eval_samples=24
       --set sample.tokens=8)
# Without MPI (a NO_MPI=1 build, or no mpirun: the lent GPU machine, tests/gpu/device.sh) only
# one process runs: the multi-rank references are not made, and every check that needs them asks for more
# GPUs (emulated ones too) than such a machine has, so it skips.
MPI_OK=0 multi="(no MPI: one-rank references only)"
mpi_ok "$TRAIN" && MPI_OK=1 multi="2, 3 and 4 ranks"
run "$TRAIN" 1 cpu_gpt2 && run "$TRAIN" 1 cpu_mpt "${mpt[@]}" && run "$TRAIN" 1 cpu_eval "${evals[@]}" &&
    run "$TRAIN" 1 cpu_odd --set seq_len=31 --set micro_batch=1 --set global_batch=3 --set model.n_layer=3 &&
    { ((MPI_OK == 0)) || { run "$TRAIN" 2 cpu_ddp --set micro_batch=2 &&
        run "$TRAIN" 4 cpu_ddp4 --set micro_batch=2 && run "$TRAIN" 3 cpu_ddp3 "${three[@]}"; }; }
tap_check $? "CPU reference runs: GPT-2, MPT, with evaluation, an odd shape; $multi"
run "$TRAIN" 1 cpu_llama "${llama[@]}" && run "$TRAIN" 1 cpu_qwen3 "${qwen3[@]}" &&
    run "$TRAIN" 1 cpu_moe "${moe[@]}"
tap_check $? "CPU reference runs: tiny Llama, Qwen 3 and a Llama MoE"
# routed DIR: every step's every MoE layer routed global_batch x seq_len x top_k assignments
routed() {
    "$PY3" - "$TMP/$1/metrics.jsonl" <<'PY'
import json, sys
recs = [r for r in map(json.loads, open(sys.argv[1])) if "lr" in r]
ok = len(recs) == 20 and all(len(r["moe_load"]) == 2 and all(x["tokens"] == 8 * 32 * 2 for x in r["moe_load"]) for r in recs)
sys.exit(0 if ok else 1)
PY
}
TESSERA_CUDA_LIB=$TMP/nowhere.so run "$TRAIN" 1 nolib --set device=cuda
rc=$?
((rc == 1)) && grep -q "cannot load $TMP/nowhere.so" "$TMP/nolib.txt"
tap_check $? "device = cuda without its library: exit $rc (want 1), naming the library"

# --plan reads the environment's switches before it sizes the plan (gpu_train_switches): with the
# CUDA library (no GPU needed), TSR_ATT_DQ_FUSED=1 grows the activations by the fused dq's fp32
# sums, micro_batch x n_head x seq_len x head_dim x 4 bytes (4 x 6 x 128 x 32 x 4 = 384 KiB; T a
# multiple of the query tiles, plus 196 bytes of turn counters and at most 255 of alignment),
# read from the plan's one-decimal figure (a vocabulary of 256 keeps it in MiB); a bad value stops
# --plan as it stops a start. No tokenizer: the GPU machine's copy of the tree has no data/npm
# (its first run, 2026-11-26, failed here for want of GPT-2's files)
if [[ -f $BUILD/libtessera-cuda-train.so ]]; then
    pl=(--config "$TSR_ROOT/configs/tiny.cfg" --set device=cuda --set model.vocab_size=256
        --set model.n_layer=1 --set 'data.tokenizer=""' --plan 1)
    LD_DEBUG=files LD_DEBUG_OUTPUT=$TMP/ld "$TRAIN" "${pl[@]}" >"$TMP/plan0.txt" 2>&1 &&
        TSR_ATT_DQ_FUSED=1 "$TRAIN" "${pl[@]}" >"$TMP/plan1.txt" 2>&1
    rc=$?
    TSR_ATT_DQ_FUSED=2 "$TRAIN" "${pl[@]}" >"$TMP/plan2.txt" 2>&1
    rcb=$?
    a0=$(device_acts "$TMP/plan0.txt") a1=$(device_acts "$TMP/plan1.txt")
    grow=$((a1 - a0)) want=$((4 * 6 * 128 * 32 * 4))
    ((rc == 0 && a0 > 0 && grow >= want - 104858 && grow <= want + 451 + 104858 && rcb == 1)) &&
        grep -q 'environment TSR_ATT_DQ_FUSED = "1": .*in the device plan' "$TMP/plan1.txt" &&
        grep -q 'TSR_ATT_DQ_FUSED = "2": expected 0 (the default) or 1' "$TMP/plan2.txt" &&
        ! grep -q '^device memory' "$TMP/plan2.txt"
    tap_check $? "--plan 1 with TSR_ATT_DQ_FUSED=1: the device plan's activations grow by the fused dq's sums ($grow bytes against $want, within the plan's rounding of 0.1 MiB); TSR_ATT_DQ_FUSED=2 refused by --plan (exit $rcb, want 1)"
    # TSR_NORM_HOLD's three values (the library's mask; the emulator has one norm backward):
    # layernorm, the default, is accepted and says nothing; 0 is said
    TSR_NORM_HOLD=layernorm "$TRAIN" "${pl[@]}" >"$TMP/nhl.txt" 2>&1
    rc=$?
    TSR_NORM_HOLD=0 "$TRAIN" "${pl[@]}" >"$TMP/nh0.txt" 2>&1
    rcb=$?
    ((rc == 0 && rcb == 0)) && ! grep -q TSR_NORM_HOLD "$TMP/nhl.txt" &&
        grep -q 'environment TSR_NORM_HOLD = "0": the LayerNorm and RMSNorm backwards read each row twice' "$TMP/nh0.txt"
    tap_check $? "--plan 1 with TSR_NORM_HOLD=layernorm (the default, not said: exit $rc) and =0 (said: exit $rcb)"
    # cuBLASLt is opened at the backend's first GEMM (kernels/cuda/cuda_lt_load.cu), so a plan or
    # a dry run (a login node, the recipe checks) opens the backend without it (the loader's log)
    grep -qs 'libtessera-cuda-train.so' "$TMP"/ld.* && ! grep -qs 'libcublasLt' "$TMP"/ld.* &&
        ! readelf -d "$BUILD/libtessera-cuda-train.so" | grep -q 'NEEDED.*libcublasLt'
    tap_check $? "--plan 1 with device = cuda opens the backend library but not cuBLASLt (not among its needed libraries)"
    # TSR_ATTENTION (issue 66 item 1): read with the other switches; the default opens no cuDNN
    # (the loader's log of plan0), cudnn is said, a bad value stops --plan naming the three values
    TSR_ATTENTION=cudnn "$TRAIN" "${pl[@]}" >"$TMP/attc.txt" 2>&1
    rc=$?
    TSR_ATTENTION=cuDNN "$TRAIN" "${pl[@]}" >"$TMP/attx.txt" 2>&1
    rcb=$?
    TSR_ATTENTION=cudnn "$TRAIN" "${pl[@]}" --set model.attn_mask=document --set model.eot_token=7 \
        >"$TMP/attd.txt" 2>&1
    rcd=$?
    ((rc == 0 && rcb == 1 && rcd == 0)) && ! grep -qs 'libcudnn' "$TMP"/ld.* &&
        grep -q 'environment TSR_ATTENTION = "cudnn": cuDNN.s fused attention' "$TMP/attc.txt" &&
        ! grep -q 'runs on the own kernels' "$TMP/attc.txt" &&
        grep -q 'TSR_ATTENTION = "cudnn": this model.s attention runs on the own kernels: the model.s document mask' "$TMP/attd.txt" &&
        grep -q 'TSR_ATTENTION = "cuDNN": expected own (the default), cudnn or auto' "$TMP/attx.txt" &&
        ! grep -q '^device memory' "$TMP/attx.txt"
    tap_check $? "--plan 1: the default opens no libcudnn; TSR_ATTENTION=cudnn said (exit $rc), =cuDNN refused (exit $rcb, want 1); a document-masked model said to stay on the own kernels"
else
    tap_skip "--plan with TSR_ATT_DQ_FUSED=1 counts the fused dq's sums" "no $BUILD/libtessera-cuda-train.so (built where nvcc is)"
    tap_skip "--plan with TSR_NORM_HOLD=layernorm and =0" "no $BUILD/libtessera-cuda-train.so (built where nvcc is)"
    tap_skip "--plan with device = cuda opens the backend but not cuBLASLt" "no $BUILD/libtessera-cuda-train.so (built where nvcc is)"
    tap_skip "--plan with TSR_ATTENTION" "no $BUILD/libtessera-cuda-train.so (built where nvcc is)"
fi

# same_accumulating RUN ARGS...: run RUN's configuration again on $bin (the suite's) with
# TSR_GRAD_OVERWRITE=0: all 20 steps' loss, lr and grad norm the same bits as RUN's
same_accumulating() {
    local r=$1; shift
    TSR_GRAD_OVERWRITE=0 run "$bin" 1 "$r.acc" --set device=cuda "$@" &&
        final_lines "$TMP/$r/metrics.jsonl" >"$TMP/$r.set" &&
        final_lines "$TMP/$r.acc/metrics.jsonl" | cmp -s - "$TMP/$r.set" &&
        (($(wc -l <"$TMP/$r.set") == 20))
}

# suite BIN LABEL LOSS_TOL NORM_TOL MEM_SLACK: the checks on one backend
suite() {
    local bin=$1 l=$2 d=
    LOSS_TOL=$3 NORM_TOL=$4 MEM_SLACK=$5
    run "$bin" 1 "$l.gpt2" --set device=cuda
    tap_check $? "$l: tiny GPT-2, 20 steps with device = cuda"
    grep -q "device memory per rank (cuda" "$TMP/$l.gpt2.txt" && grep -q "^device: " "$TMP/$l.gpt2.txt"
    tap_check $? "$l: the device memory plan and the device are printed"
    d=$(peak_in_plan "$l.gpt2" "$MEM_SLACK")
    tap_check $? "$l: peak_mem_bytes (the device allocator's peak) within the device plan ($d; slack $MEM_SLACK B)"
    d=$(close cpu_gpt2 "$l.gpt2" 1)
    tap_check $? "$l: GPT-2 loss within $LOSS_TOL of the CPU at every step ($d)"
    # determinism (docs/cuda.md): no atomics, fixed reduction orders, one cuBLASLt algorithm per
    # shape, so the same run gives the same bits
    run "$bin" 1 "$l.gpt2b" --set device=cuda && final_lines "$TMP/$l.gpt2/metrics.jsonl" >"$TMP/$l.det1" &&
        final_lines "$TMP/$l.gpt2b/metrics.jsonl" | cmp -s - "$TMP/$l.det1" && (($(wc -l <"$TMP/$l.det1") == 20))
    tap_check $? "$l: the GPT-2 run again: all 20 steps' loss, lr and grad norm the same bits"
    run "$bin" 1 "$l.mpt" --set device=cuda "${mpt[@]}" && d=$(close cpu_mpt "$l.mpt" 1)
    tap_check $? "$l: tiny MPT (ALiBi, no bias, exact GELU, document mask) within $LOSS_TOL of the CPU ($d)"
    # the Llama block rounds to bf16 more often per layer (qkvr, qkv after RoPE, the 2F gate/up):
    # its gradient norm drifts faster from the fp32 run's (emulator: 2.6e-4 at step 1, 7.9e-3 at
    # step 20 after a spike at 18, while the losses stay within 5e-5), so twice NORM_TOL
    run "$bin" 1 "$l.llama" --set device=cuda "${llama[@]}" &&
        d=$(metrics_close "$TMP/cpu_llama/metrics.jsonl" "$TMP/$l.llama/metrics.jsonl" 1 "$LOSS_TOL" \
            "$(awk -v t="$NORM_TOL" 'BEGIN { print 2 * t }')")
    tap_check $? "$l: tiny Llama (RMSNorm, RoPE llama3-scaled, SwiGLU, GQA 4:2, head_dim 64, untied, document mask) within $LOSS_TOL of the CPU, norms within 2 x $NORM_TOL ($d)"
    run "$bin" 1 "$l.qwen3" --set device=cuda "${qwen3[@]}" && d=$(close cpu_qwen3 "$l.qwen3" 1)
    tap_check $? "$l: tiny Qwen 3 (QK-norm, MQA, qkv bias, tied) within $LOSS_TOL of the CPU ($d)"
    # the MoE block: bf16 logits may route a near-tie otherwise than fp32 does, so the same
    # twice-NORM_TOL as the Llama block, and the routing's completeness checked on its own
    run "$bin" 1 "$l.moe" --set device=cuda "${moe[@]}" &&
        d=$(metrics_close "$TMP/cpu_moe/metrics.jsonl" "$TMP/$l.moe/metrics.jsonl" 1 "$LOSS_TOL" \
            "$(awk -v t="$NORM_TOL" 'BEGIN { print 2 * t }')") && routed "$l.moe"
    tap_check $? "$l: tiny Llama MoE (4 experts top 2, shared expert, aux + z) within $LOSS_TOL of the CPU, norms within 2 x $NORM_TOL, no token dropped ($d)"
    # TSR_GRAD_SET (input gradients overwritten, docs/cuda.md) gives the bits of zeroing then
    # accumulating, which TSR_GRAD_OVERWRITE=0 brings back: GPT-2 (GELU), Llama (SwiGLU, GQA),
    # MoE (shared expert). This checks the backend's SET path; where the decoder asks for SET
    # (a wrong place drops a contribution on every backend alike) the CPU's gradients against
    # PyTorch check (tests/reference: 78 of its checks fail with the MoE router's SET misplaced)
    same_accumulating "$l.gpt2" && same_accumulating "$l.llama" "${llama[@]}" &&
        same_accumulating "$l.moe" "${moe[@]}"
    tap_check $? "$l: GPT-2, Llama and MoE runs with TSR_GRAD_OVERWRITE=0 (zeroing, then +=): all 20 steps the same bits as with TSR_GRAD_SET"
    if gpus 2 "$l: 2 ranks, 2 microbatches each"; then
        run "$bin" 2 "$l.ddp" --set device=cuda --set micro_batch=2 && d=$(close cpu_ddp "$l.ddp" 1)
        tap_check $? "$l: 2 ranks, 2 microbatches each: within $LOSS_TOL of the CPU's 2 ranks ($d)"
    fi
    # GPU -> CPU: the GPU run's step-10 checkpoint, resumed on the CPU to step 20
    run "$TRAIN" 1 "$l.g2c" --resume "$TMP/$l.gpt2/step-00000010.h5" &&
        grep -q "resume" "$TMP/$l.g2c.txt" && d=$(close cpu_gpt2 "$l.g2c" 11)
    tap_check $? "$l: checkpoint of the GPU run at step 10 resumed on the CPU: steps 11-20 within $LOSS_TOL ($d)"
    # CPU -> GPU
    run "$bin" 1 "$l.c2g" --set device=cuda --resume "$TMP/cpu_gpt2/step-00000010.h5" &&
        grep -q "resume" "$TMP/$l.c2g.txt" && d=$(close cpu_gpt2 "$l.c2g" 11)
    tap_check $? "$l: a CPU checkpoint at step 10 resumed with device = cuda: steps 11-20 within $LOSS_TOL ($d)"
    # sharded: the same steps as the CPU's ddp (zero1 and zero3 reduce-scatter per layer, hsdp
    # then sums the replicas; zero3 gathers every layer)
    local mode
    for mode in zero1 zero3; do
        gpus 3 "$l: parallel.sharding = $mode on 3 ranks" || continue
        run "$bin" 3 "$l.$mode" --set device=cuda "${three[@]}" --set parallel.sharding=$mode &&
            grep -q "into $mode shards (groups of 3)" "$TMP/$l.$mode.txt" &&
            d=$(close cpu_ddp3 "$l.$mode" 1) && d="$d; $(peak_in_plan "$l.$mode" "$MEM_SLACK")"
        tap_check $? "$l: parallel.sharding = $mode on 3 ranks x 2 microbatches (uneven pieces): every step within $LOSS_TOL of the CPU's ddp, peak device memory within its plan ($d)"
    done
    if gpus 4 "$l: parallel.sharding = hsdp on 2 x 2 ranks"; then
        run "$bin" 4 "$l.hsdp" --set device=cuda --set micro_batch=2 --set parallel.sharding=hsdp \
            --set parallel.replica_group=2 && grep -q "into hsdp shards (groups of 2)" "$TMP/$l.hsdp.txt" &&
            d=$(close cpu_ddp4 "$l.hsdp" 1)
        tap_check $? "$l: parallel.sharding = hsdp, 2 groups of 2: every step within $LOSS_TOL of the CPU's 4 ranks ($d)"
    fi
    # one GPU: zero3 still gathers and reduce-scatters (a group of one); evaluation runs on the
    # shards and the sample on the host from the pulled shard
    run "$bin" 1 "$l.z3eval" --set device=cuda --set parallel.sharding=zero3 "${evals[@]}" &&
        d=$(close cpu_eval "$l.z3eval" 1) && d="$d, $(evals_close cpu_eval "$l.z3eval")" &&
        grep -A1 '^sample (8 tokens' "$TMP/$l.z3eval.txt" | tail -1 | grep -Eq '^[0-9]+( [0-9]+){7}$'
    tap_check $? "$l: zero3 on one rank, with evaluation and a sample: steps and validation within $LOSS_TOL of the CPU ($d)"
    # checkpoints across modes, rank counts and devices
    if gpus 3 "$l: a zero3 checkpoint of the GPU resumed by the CPU's ddp"; then
        run "$TRAIN" 2 "$l.z3cpu" "${three[@]}" --resume "$TMP/$l.zero3/step-00000010.h5" &&
            d=$(close cpu_ddp3 "$l.z3cpu" 11)
        tap_check $? "$l: the GPU's zero3 checkpoint (3 ranks) at step 10 resumed by ddp on 2 CPU ranks: steps 11-20 within $LOSS_TOL ($d)"
    fi
    if gpus 4 "$l: an hsdp checkpoint of the GPU resumed by zero1 on the GPU"; then
        run "$bin" 2 "$l.hsdpz1" --set device=cuda --set micro_batch=2 --set parallel.sharding=zero1 \
            --resume "$TMP/$l.hsdp/step-00000010.h5" && d=$(close cpu_ddp "$l.hsdpz1" 11)
        tap_check $? "$l: the GPU's hsdp checkpoint (2 x 2 ranks) resumed by zero1 on 2: steps 11-20 within $LOSS_TOL ($d)"
    fi
    # activation checkpointing: the recomputation reruns the same kernels on the same inputs, so
    # every step is bit-identical to none on the same backend (3 layers, 2 microbatches, document
    # mask), and the device plan's activations shrink
    local ac=(--set device=cuda --set model.n_layer=3 --set model.attn_mask=document) k
    run "$bin" 1 "$l.acn" "${ac[@]}" && final_lines "$TMP/$l.acn/metrics.jsonl" >"$TMP/$l.acn.loss"
    local same=$? what=""
    for k in "block" "attention --set model.activation_checkpointing_range=1-2" \
        "mlp --set model.activation_checkpointing_layers=2"; do
        # shellcheck disable=SC2086 # k carries the mode and its layer setting
        run "$bin" 1 "$l.ac${k%% *}" "${ac[@]}" --set model.activation_checkpointing=$k &&
            final_lines "$TMP/$l.ac${k%% *}/metrics.jsonl" | cmp -s - "$TMP/$l.acn.loss" &&
            (($(device_acts "$TMP/$l.ac${k%% *}.txt") < $(device_acts "$TMP/$l.acn.txt"))) || same=1
        what+=" ${k%% *} $(device_acts "$TMP/$l.ac${k%% *}.txt") B,"
    done
    (($(wc -l <"$TMP/$l.acn.loss") == 20)) && ((same == 0))
    tap_check $? "$l: activation checkpointing block, attention (layers 1-2), mlp (first 2): all 20 steps bit-identical to none, activations $(device_acts "$TMP/$l.acn.txt") B ->${what%,}"
    # a shape whose per-layer slices are not whole 256-byte blocks (1 x 31 x 64 bf16 = 3968 B):
    # the activation stacks pad each layer to 256 bytes (the backend's align, decoder_acts.c layer_stride), so the
    # matmuls' alignment, hence cuBLASLt's algorithm, is the same for every layer and slot
    local odd=(--set seq_len=31 --set micro_batch=1 --set global_batch=3 --set model.n_layer=3)
    run "$bin" 1 "$l.oddn" --set device=cuda "${odd[@]}" && d=$(close cpu_odd "$l.oddn" 1) &&
        run "$bin" 1 "$l.oddb" --set device=cuda "${odd[@]}" --set model.activation_checkpointing=block &&
        final_lines "$TMP/$l.oddn/metrics.jsonl" >"$TMP/$l.oddn.loss" &&
        final_lines "$TMP/$l.oddb/metrics.jsonl" | cmp -s - "$TMP/$l.oddn.loss"
    tap_check $? "$l: seq_len 31, microbatches of 1 (layer slices padded to 256 bytes): within $LOSS_TOL of the CPU ($d), block checkpointing bit-identical to none"
    if gpus 2 "$l: activation checkpointing under zero3 on 2 ranks"; then
        run "$bin" 2 "$l.z3n" "${ac[@]}" --set parallel.sharding=zero3 &&
            run "$bin" 2 "$l.z3ac" "${ac[@]}" --set parallel.sharding=zero3 \
                --set model.activation_checkpointing=block &&
            final_lines "$TMP/$l.z3n/metrics.jsonl" >"$TMP/$l.z3n.loss" &&
            final_lines "$TMP/$l.z3ac/metrics.jsonl" | cmp -s - "$TMP/$l.z3n.loss" &&
            (($(wc -l <"$TMP/$l.z3n.loss") == 20))
        tap_check $? "$l: block checkpointing under zero3 on 2 ranks (recomputed from the gathered layer): all 20 steps bit-identical to none"
    fi
}

# The emulator computes each op in fp32 and rounds where the GPU rounds, so it stays far closer to
# the CPU than the issue's 0.5% (measured: loss up to 4.3e-5, norm up to 3.8e-3 on the 3-rank
# runs, whose batches are smallest): its loss tolerance is tight enough that a dropped gradient
# term (wpe's: loss 9e-4 off) fails. The GPU gets the issue's 0.5% on the loss, 5% on the norm.
if emulator_half $((PER + 12)); then
    GPUS=$((MPI_OK ? 8 : 1)) # the emulator's devices (one rank each), as many as MPI can start
    # Its allocator holds exactly what the plan counts (no cuBLASLt workspace, no scratch): no slack.
    suite "$BUILD/tests/tessera-train-cuemu" emulator 3e-4 5e-3 0

    # micro_batch = auto on a device that holds the activations of 2 sequences but not of 4: the
    # emulator's capacity (TSR_EMU_MEM) set between the two from the plan the GPT-2 run printed
    cap=$("$PY3" - "$TMP/emulator.gpt2.txt" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
u = lambda v, s: float(v) * 1024 ** ["B", "KiB", "MiB", "GiB"].index(s)
a = re.search(r"device memory per rank.*activations ([0-9.]+) (\w+) per microbatch of 4 x.*total ([0-9.]+) (\w+)", t)
print(int(u(a.group(3), a.group(4)) - u(a.group(1), a.group(2)) / 4) if a else 0)
PY
    )
    TSR_EMU_MEM=$cap run "$BUILD/tests/tessera-train-cuemu" 1 auto --set device=cuda --set micro_batch=auto &&
        run "$BUILD/tests/tessera-train-cuemu" 1 micro2 --set device=cuda --set micro_batch=2 &&
        grep -q '"event": "micro_batch"' "$TMP/auto/metrics.jsonl" &&
        final_lines "$TMP/auto/metrics.jsonl" >"$TMP/auto.loss" &&
        final_lines "$TMP/micro2/metrics.jsonl" >"$TMP/micro2.loss" && cmp -s "$TMP/auto.loss" "$TMP/micro2.loss" &&
        grep -E '"event": "micro_batch"' "$TMP/auto/metrics.jsonl" | tail -1 | grep -q '"micro_batch": 2'
    tap_check $? "emulator: micro_batch = auto with room for 2 sequences ($cap bytes) halves 8 -> 4 -> 2 and all 20 steps equal micro_batch = 2 bit for bit"

    # zero3 with evaluation evaluates on the shards, unit by unit as a training forward does
    # (docs/sharding.md, "Evaluation on the shards"): nothing on top of the training's memory. On
    # a device sized from the peak of the same run without evaluation, plus a quarter of the
    # model's bf16 weights, plus the 2% of the device the activations must leave free
    # (lib_try_acts), micro_batch = auto keeps 8 sequences and evaluates at steps 10 and 12 within
    # it (the full copy an evaluation gathered until 2026-11-26 does not fit there: it backed off
    # to 4); the plan has no evaluation term. 3 layers: more than the two gather slots hold.
    ze=(--set device=cuda --set parallel.sharding=zero3 --set micro_batch=auto --set global_batch=8
        --set model.n_layer=3 --set eval_samples=24 --set max_duration=12ba)
    run "$BUILD/tests/tessera-train-cuemu" 1 ze_free "${ze[@]}"
    cap=$("$PY3" - "$TMP/ze_free.txt" "$TMP/ze_free/metrics.jsonl" <<'PY'
import json, re, sys
n = re.search(r"params: ([0-9]+) trainable", open(sys.argv[1]).read())
peak = max((j.get("peak_mem_bytes", 0) for j in map(json.loads, open(sys.argv[2]))), default=0)
print(int((peak + int(n.group(1)) * 2 / 4) / 0.98) + 1 if n and peak else 0)
PY
    )
    TSR_EMU_MEM=$cap run "$BUILD/tests/tessera-train-cuemu" 1 ze_cap "${ze[@]}" --set data.val="$TMP/data/val" \
        --set eval_interval=10ba &&
        ! grep -q "reruns with microbatches" "$TMP/ze_cap.txt" && grep -q "^eval step 10 | val loss" "$TMP/ze_cap.txt" &&
        grep -q "^eval step 12 | val loss" "$TMP/ze_cap.txt" && ! grep -q "while evaluating" "$TMP/ze_cap.txt" &&
        "$PY3" - "$TMP/ze_cap/metrics.jsonl" "$cap" <<'PY'
import json, sys
peak = max((j.get("peak_mem_bytes", 0) for j in map(json.loads, open(sys.argv[1]))), default=0)
sys.exit(0 if 0 < peak <= int(sys.argv[2]) else 1)
PY
    tap_check $? "emulator: zero3 + evaluation on a device of the training's peak + a quarter of the bf16 weights + 2% ($cap bytes): micro_batch = auto keeps 8 sequences, evaluates at steps 10 and 12 on the shards, no evaluation term in the plan"

    # TSR_PROFILE=1 (docs/cuda.md, "Per-op profile"): rank 0 prints the per-op table over steps 2-5
    # (step 1 dropped; a run of one step keeps it). Its counts are the decoder's calls: per microbatch (2 a step) 2 layers x 3
    # matmul backwards + the head's, and 2 layers x 1 matmul backward fused with the tanh GELU's
    # (matmul_backward_dgelu; TSR_DGELU_FUSION=0: 4 matmul backwards a layer and no fused one); one
    # zeroing (the final norm's input gradient) where the input gradients are overwritten, 10 with
    # TSR_GRAD_OVERWRITE=0 (2 + 4 a layer: what TSR_GRAD_SET saves; the fused op always writes)
    # prof_calls FILE OP: the calls column of OP's rows, summed over its shapes
    prof_calls() {
        awk -v op="$2" '/TSR_PROFILE device time per op/ { on = 1; next } on && $1 == op { n += $3 }
            END { print n + 0 }' "$1"
    }
    TSR_PROFILE=1 run "$BUILD/tests/tessera-train-cuemu" 1 prof --set device=cuda --set max_duration=5ba &&
        TSR_PROFILE=1 TSR_GRAD_OVERWRITE=0 run "$BUILD/tests/tessera-train-cuemu" 1 profacc \
            --set device=cuda --set max_duration=5ba &&
        TSR_PROFILE=1 TSR_DGELU_FUSION=0 run "$BUILD/tests/tessera-train-cuemu" 1 profunf \
            --set device=cuda --set max_duration=5ba &&
        grep -q "TSR_PROFILE device time per op (CUDA events) over 4 steps (the first, warm-up, dropped)" "$TMP/prof.txt" &&
        grep -q '^cuBLASLt: the emulator has no cuBLASLt' "$TMP/prof.txt" &&
        p=$(printf '%s/%s/%s/%s/%s/%s/%s' "$(grep -c '^step: forward+backward  *-  *4 ' "$TMP/prof.txt")" \
            "$(prof_calls "$TMP/prof.txt" matmul_backward)" "$(prof_calls "$TMP/prof.txt" matmul_backward_dgelu)" \
            "$(prof_calls "$TMP/prof.txt" zero)" "$(prof_calls "$TMP/profacc.txt" zero)" \
            "$(prof_calls "$TMP/profunf.txt" matmul_backward)" "$(prof_calls "$TMP/profunf.txt" matmul_backward_dgelu)") &&
        [[ $p == 1/56/16/8/80/72/0 ]] && awk '$1 == "matmul_forward" && $5 > 0 { n++ } END { exit !(n >= 4) }' "$TMP/prof.txt" &&
        TSR_PROFILE=1 run "$BUILD/tests/tessera-train-cuemu" 1 prof1 --set device=cuda --set max_duration=1ba &&
        grep -q "TSR_PROFILE device time per op (CUDA events) over 1 step$" "$TMP/prof1.txt" &&
        (($(prof_calls "$TMP/prof1.txt" matmul_backward) == 14))
    tap_check $? "emulator: TSR_PROFILE=1 prints per-op device times over steps 2-5 (forward+backward phases/matmul backwards/fused ones/zeroings/zeroings without TSR_GRAD_SET/matmul backwards and fused ones with TSR_DGELU_FUSION=0: ${p:-none}, want 1/56/16/8/80/72/0); a run of 1 step reports that step; then the GEMM algorithm table (the emulator's one line)"

    # the head size checked is the model's (head_dim), not d_model / n_head (64 / 2 = 32 has a kernel,
    # 48 has none): refused when the config loads, naming model.head_dim: a start writes no run_dir,
    # and --plan says so too, with the CPU trainer (a login node's check, before the job queues)
    run "$BUILD/tests/tessera-train-cuemu" 1 hs48 --set device=cuda --set model.head_dim=48
    rc=$?
    run "$TRAIN" 1 hs48p --set device=cuda --set model.head_dim=48 --plan 1
    rcp=$?
    ok=1
    for f in hs48 hs48p; do
        grep -q -- '--set model.head_dim=48: device = "cuda": head size model.head_dim = 48 has no attention kernel' "$TMP/$f.txt" &&
            ! grep -q '^step ' "$TMP/$f.txt" && [[ ! -e $TMP/$f ]] || ok=0
    done
    ((rc == 1 && rcp == 1 && ok))
    tap_check $? "head_dim 48 (d_model / n_head = 32) with device = cuda: a start (emulator) and --plan 1 (CPU trainer) refused at load naming model.head_dim, no run_dir (exit $rc and $rcp, want 1)"

    # TSR_GEMM_REDUCTION, issue 25 item 4's measurement switch (docs/cuda.md): another value than
    # compute, none or any is refused at start naming it, run_dir not made; none runs (on the
    # emulator, whose products are single fp32 sums, with the default's bits)
    TSR_GEMM_REDUCTION=sometimes run "$BUILD/tests/tessera-train-cuemu" 1 gr_bad --set device=cuda
    rc=$?
    ((rc == 1)) && grep -q 'TSR_GEMM_REDUCTION = "sometimes": expected compute (the default), none or any' \
        "$TMP/gr_bad.txt" && [[ ! -e $TMP/gr_bad ]] &&
        TSR_GEMM_REDUCTION=none run "$BUILD/tests/tessera-train-cuemu" 1 gr_none --set device=cuda --set max_duration=3ba &&
        grep -q 'TSR_GEMM_REDUCTION = "none": no split-K GEMMs' "$TMP/gr_none.txt" &&
        run "$BUILD/tests/tessera-train-cuemu" 1 gr_def --set device=cuda --set max_duration=3ba &&
        final_lines "$TMP/gr_none/metrics.jsonl" >"$TMP/gr_none.loss" && (($(wc -l <"$TMP/gr_none.loss") == 3)) &&
        final_lines "$TMP/gr_def/metrics.jsonl" >"$TMP/gr_def.loss" && cmp -s "$TMP/gr_def.loss" "$TMP/gr_none.loss"
    tap_check $? "emulator: TSR_GEMM_REDUCTION=sometimes refused at start naming the variable, no run_dir (exit $rc, want 1); =none said at start, runs 3 steps with the default's bits"

    # TSR_ATT_WARP_ROWS, issue 25 item 2's measurement switch (the same agreement across ranks as
    # TSR_GEMM_REDUCTION's, checked below for that one): 24 refused at start, 32 said and runs
    TSR_ATT_WARP_ROWS=24 run "$BUILD/tests/tessera-train-cuemu" 1 ar_bad --set device=cuda
    rc=$?
    ((rc == 1)) && grep -q 'TSR_ATT_WARP_ROWS = "24": expected 16 (the default) or 32' "$TMP/ar_bad.txt" &&
        [[ ! -e $TMP/ar_bad ]] &&
        TSR_ATT_WARP_ROWS=32 TSR_ATT_DQ_FUSED=1 TSR_NORM_HOLD=1 run "$BUILD/tests/tessera-train-cuemu" 1 ar_32 --set device=cuda --set max_duration=3ba &&
        grep -q 'TSR_ATT_WARP_ROWS = "32": 32 rows a warp in the attention kernels' "$TMP/ar_32.txt"
    tap_check $? "emulator: TSR_ATT_WARP_ROWS=24 refused at start naming the variable, no run_dir (exit $rc, want 1); =32 said at start, runs"

    # TSR_ATT_DQ_FUSED, issue 25's measurement switch for the fused dq: 2 refused; 1 said, and the
    # run above with it (and 32 rows) has the default's bits (the emulator has one attention)
    TSR_ATT_DQ_FUSED=2 run "$BUILD/tests/tessera-train-cuemu" 1 dqf_bad --set device=cuda
    rc=$?
    ((rc == 1)) && grep -q 'TSR_ATT_DQ_FUSED = "2": expected 0 (the default) or 1' "$TMP/dqf_bad.txt" &&
        [[ ! -e $TMP/dqf_bad ]] &&
        grep -q 'TSR_ATT_DQ_FUSED = "1": the attention backward adds dq in its dk/dv kernel' "$TMP/ar_32.txt" &&
        final_lines "$TMP/ar_32/metrics.jsonl" | cmp -s - "$TMP/gr_def.loss"
    tap_check $? "emulator: TSR_ATT_DQ_FUSED=2 refused at start naming the variable, no run_dir (exit $rc, want 1); =1 said at start, its 3 steps (with TSR_ATT_WARP_ROWS=32) the default's bits"
    # TSR_ATT_WGMMA, the attention kernels on wgmma (issue 25 item 2): 2 refused as a bad value; 1
    # refused where they cannot run (the emulator has no compute capability 9.0 device), naming the
    # variable, the device and the head size; neither writes a run_dir
    TSR_ATT_WGMMA=2 run "$BUILD/tests/tessera-train-cuemu" 1 wg_bad --set device=cuda
    rc=$?
    TSR_ATT_WGMMA=1 run "$BUILD/tests/tessera-train-cuemu" 1 wg_no --set device=cuda
    rc2=$?
    TSR_ATT_WGMMA=1 TSR_ATT_WARP_ROWS=32 run "$BUILD/tests/tessera-train-cuemu" 1 wg_mix --set device=cuda
    rc3=$?
    ((rc == 1 && rc2 == 1 && rc3 == 1)) && grep -q 'TSR_ATT_WGMMA = "2": expected 0 (the default) or 1' "$TMP/wg_bad.txt" &&
        grep -q 'TSR_ATT_WGMMA = "1": the wgmma attention kernels need a GPU of compute capability 9.0 (H100, H200), a build with sm_90a code (NVCC_GENCODE) and head size 64 or 128; rank 0 cannot run them (rank 0: .*, sm .*; head size 32)' "$TMP/wg_no.txt" &&
        grep -q 'TSR_ATT_WGMMA = "1" with TSR_ATT_WARP_ROWS = "32": the wgmma attention kernels have 16 rows a warp and no fused dq' "$TMP/wg_mix.txt" &&
        [[ ! -e $TMP/wg_bad && ! -e $TMP/wg_no && ! -e $TMP/wg_mix ]]
    tap_check $? "emulator: TSR_ATT_WGMMA=2 refused as a bad value (exit $rc, want 1), =1 refused where the wgmma kernels cannot run (exit $rc2, want 1), naming the device and head size, and with TSR_ATT_WARP_ROWS=32 (exit $rc3, want 1); no run_dir"
    # TSR_NORM_HOLD, the norms held in registers: 2 refused; 1 said (the same run)
    TSR_NORM_HOLD=2 run "$BUILD/tests/tessera-train-cuemu" 1 nh_bad --set device=cuda
    rc=$?
    ((rc == 1)) && grep -q 'TSR_NORM_HOLD = "2": expected layernorm (the default: .*), 0 (neither) or 1' "$TMP/nh_bad.txt" &&
        [[ ! -e $TMP/nh_bad ]] &&
        grep -q 'TSR_NORM_HOLD = "1": the LayerNorm and RMSNorm backwards keep each row in registers' "$TMP/ar_32.txt"
    tap_check $? "emulator: TSR_NORM_HOLD=2 refused at start naming the variable, no run_dir (exit $rc, want 1); =1 said at start"

    # TSR_GEMM_TUNE, issue 25 item 4's file of GEMM choices (docs/cuda.md): the emulator has no
    # cuBLASLt, so it reads and checks the file as a GPU run does and never adds to it. A missing
    # file: said, runs with the default's bits, not created; a file of the emulator's device with
    # one entry: read (1 choice); a malformed line, another GPU model's file and (one rank times,
    # so it must be able to write the file) a missing directory: refused at start naming rank 0,
    # the file, the line and what was wrong, no run_dir, the file as it was
    tune_head=$'# made by the test\ndevice tessera CUDA emulator (host memory)\ncublaslt 0\n'
    tune_entry="0 0 1 0 14 14 64 32 64 64 64 64 0 256 256 256 256 256 33554432 0 66 18 9 1 0 0 0 0 0 $(printf '%0128d' 7) 12.500 14.000"
    TSR_GEMM_TUNE="$TMP/tune_none.txt" run "$BUILD/tests/tessera-train-cuemu" 1 tu_none --set device=cuda --set max_duration=3ba &&
        grep -q 'environment TSR_GEMM_TUNE = "'"$TMP"'/tune_none.txt": each GEMM shape runs the file' "$TMP/tu_none.txt" &&
        grep -q "TSR_GEMM_TUNE: 0 GEMM choice(s) read from $TMP/tune_none.txt" "$TMP/tu_none.txt" &&
        grep -q 'TSR_GEMM_TUNE: 0 shape(s) from the file (0 by configuration), 0 timed .*; the file unchanged' "$TMP/tu_none.txt" &&
        [[ ! -e $TMP/tune_none.txt ]] &&
        final_lines "$TMP/tu_none/metrics.jsonl" | cmp -s - "$TMP/gr_def.loss" &&
        printf '%s%s\n' "$tune_head" "$tune_entry" >"$TMP/tune_one.txt" &&
        TSR_GEMM_TUNE="$TMP/tune_one.txt" run "$BUILD/tests/tessera-train-cuemu" 1 tu_one --set device=cuda --set max_duration=1ba &&
        grep -q "TSR_GEMM_TUNE: 1 GEMM choice(s) read from $TMP/tune_one.txt" "$TMP/tu_one.txt"
    ok=$?
    printf '%s%s 7\n' "$tune_head" "$tune_entry" >"$TMP/tune_bad.txt"
    cp "$TMP/tune_bad.txt" "$TMP/tune_bad.orig"
    TSR_GEMM_TUNE="$TMP/tune_bad.txt" run "$BUILD/tests/tessera-train-cuemu" 1 tu_bad --set device=cuda
    rc=$?
    printf 'device NVIDIA H200\ncublaslt 130100\n%s\n' "$tune_entry" >"$TMP/tune_h200.txt"
    TSR_GEMM_TUNE="$TMP/tune_h200.txt" run "$BUILD/tests/tessera-train-cuemu" 1 tu_dev --set device=cuda
    rc2=$?
    TSR_GEMM_TUNE="$TMP/no-such-dir/tune.txt" run "$BUILD/tests/tessera-train-cuemu" 1 tu_dir --set device=cuda
    rc3=$?
    ((ok == 0 && rc == 1 && rc2 == 1 && rc3 == 1)) && [[ ! -e $TMP/tu_bad && ! -e $TMP/tu_dev && ! -e $TMP/tu_dir ]] &&
        grep -q "TSR_GEMM_TUNE: rank 0: $TMP/no-such-dir/tune.txt: cannot write in $TMP/no-such-dir (No such file or directory)" "$TMP/tu_dir.txt" &&
        grep -q "TSR_GEMM_TUNE: rank 0: $TMP/tune_bad.txt:4: more than 32 fields (\"7\" after the last)" "$TMP/tu_bad.txt" &&
        cmp -s "$TMP/tune_bad.txt" "$TMP/tune_bad.orig" &&
        grep -q "tune_h200.txt:1: made on device \"NVIDIA H200\", this is \"tessera CUDA emulator (host memory)\"" "$TMP/tu_dev.txt"
    tap_check $? "emulator: TSR_GEMM_TUNE with a missing file said, 3 steps with the default's bits, the file not created; a file of one entry read; a malformed line, an H200's file and a directory that does not exist refused at start naming the file (and line), no run_dir, the file unchanged (exit $rc, $rc2, $rc3; want 1, 1, 1)"

    # each rank reads its own environment: rank 0 unset, rank 1 none, then rank 1 a bad value;
    # both runs stop together at start (exit 1, no rank left waiting: the test's timeout would
    # end it), rank 0 naming rank 1 and both values, no run_dir
    if ((MPI_OK)); then
        gr2() { # gr2 NAME RANK1_VALUE: a 2-rank run, rank 1 with TSR_GEMM_REDUCTION=RANK1_VALUE
            env -u TSR_GEMM_REDUCTION timeout 120 "${MPIRUN[@]}" -np 1 "$BUILD/tests/tessera-train-cuemu" \
                "${base[@]}" --set run_dir="$TMP/$1" --set device=cuda : -np 1 env TSR_GEMM_REDUCTION="$2" \
                "$BUILD/tests/tessera-train-cuemu" "${base[@]}" --set run_dir="$TMP/$1" --set device=cuda \
                >"$TMP/$1.txt" 2>&1
        }
        gr2 gr_mix none
        rc=$?
        gr2 gr_mixbad often
        rc2=$?
        ((rc == 1 && rc2 == 1)) && [[ ! -e $TMP/gr_mix && ! -e $TMP/gr_mixbad ]] &&
            grep -q 'TSR_GEMM_REDUCTION: rank 1 has "none", rank 0 "compute" (unset): expected compute (the default), none or any, the same on every rank' "$TMP/gr_mix.txt" &&
            grep -q 'TSR_GEMM_REDUCTION: rank 1 has another value, rank 0 "compute" (unset)' "$TMP/gr_mixbad.txt"
        tap_check $? "emulator, 2 ranks: TSR_GEMM_REDUCTION unset on rank 0, none (then often) on rank 1: both stop at start together naming rank 1 (exit $rc, $rc2; want 1, 1), no run_dir"
        # TSR_GEMM_TUNE naming another file on rank 1: both stop at start
        timeout 120 "${MPIRUN[@]}" -np 1 env TSR_GEMM_TUNE="$TMP/tune_one.txt" "$BUILD/tests/tessera-train-cuemu" \
            "${base[@]}" --set run_dir="$TMP/tu_mix" --set device=cuda : -np 1 env TSR_GEMM_TUNE="$TMP/tune_two.txt" \
            "$BUILD/tests/tessera-train-cuemu" "${base[@]}" --set run_dir="$TMP/tu_mix" --set device=cuda \
            >"$TMP/tu_mix.txt" 2>&1
        rc=$?
        # the same file on both: read by both, nothing timed (two ranks would choose apart), said;
        # a file in a directory that does not exist: two ranks never write it, so they start
        TSR_GEMM_TUNE="$TMP/tune_one.txt" run "$BUILD/tests/tessera-train-cuemu" 2 tu_two --set device=cuda \
            --set max_duration=1ba --set micro_batch=2
        rc2=$?
        TSR_GEMM_TUNE="$TMP/no-such-dir/tune.txt" run "$BUILD/tests/tessera-train-cuemu" 2 tu_twodir --set device=cuda \
            --set max_duration=1ba --set micro_batch=2
        rc3=$?
        # one relative name, read in two working directories holding different files: the
        # tables' hashes differ, both stop at start
        mkdir -p "$TMP/wd0" "$TMP/wd1" && cp "$TMP/tune_one.txt" "$TMP/wd0/tune.txt" &&
            printf '%s%s\n' "$tune_head" "${tune_entry/ 64 32 64 / 64 48 64 }" >"$TMP/wd1/tune.txt"
        TSR_GEMM_TUNE=tune.txt timeout 120 "${MPIRUN[@]}" -np 1 --wdir "$TMP/wd0" "$BUILD/tests/tessera-train-cuemu" \
            "${base[@]}" --set run_dir="$TMP/tu_hash" --set device=cuda : -np 1 --wdir "$TMP/wd1" \
            "$BUILD/tests/tessera-train-cuemu" "${base[@]}" --set run_dir="$TMP/tu_hash" --set device=cuda \
            >"$TMP/tu_hash.txt" 2>&1
        rc4=$?
        ((rc == 1 && rc2 == 0 && rc3 == 0 && rc4 == 1)) && [[ ! -e $TMP/tu_mix && ! -e $TMP/tu_hash ]] &&
            grep -q "TSR_GEMM_TUNE: the ranks name different files (rank 0 \"$TMP/tune_one.txt\")" "$TMP/tu_mix.txt" &&
            grep -q "else cuBLASLt's first answer; 2 ranks time nothing (each would choose for itself): tune with one rank first" "$TMP/tu_two.txt" &&
            grep -q "TSR_GEMM_TUNE: 1 GEMM choice(s) read from $TMP/tune_one.txt" "$TMP/tu_two.txt" &&
            grep -q "TSR_GEMM_TUNE: 0 GEMM choice(s) read from $TMP/no-such-dir/tune.txt" "$TMP/tu_twodir.txt" &&
            grep -q 'TSR_GEMM_TUNE = "tune.txt": the ranks read different files (rank 0: 1 entries)' "$TMP/tu_hash.txt"
        tap_check $? "emulator, 2 ranks: TSR_GEMM_TUNE naming another file on rank 1: both stop at start (exit $rc, want 1), no run_dir; the same file on both: read, nothing timed, said (exit $rc2); a missing directory: not written by 2 ranks, so they start (exit $rc3); one name, two working directories with different files: both stop (exit $rc4, want 1)"
    else
        tap_skip "emulator, 2 ranks: TSR_GEMM_REDUCTION differing between ranks" "no MPI"
        tap_skip "emulator, 2 ranks: TSR_GEMM_TUNE differing between ranks" "no MPI"
    fi
    emulator_half_end
fi

# the real backend: a GPU, its driver and the library built beside tessera-train; the plan leaves
# out the 32 MiB cuBLASLt workspace and the ops' scratch (a few MiB here)
if real_half 5e-3 5e-2 $((64 << 20)); then
    # 32 rows a warp in the attention kernels (TSR_ATT_WARP_ROWS, issue 25 item 2): other tiles,
    # so other bits than the default's; against the CPU, and deterministic
    d=
    TSR_ATT_WARP_ROWS=32 run "$TRAIN" 1 cuda.r32 --set device=cuda && d=$(close cpu_gpt2 cuda.r32 1) &&
        TSR_ATT_WARP_ROWS=32 run "$TRAIN" 1 cuda.r32b --set device=cuda &&
        final_lines "$TMP/cuda.r32/metrics.jsonl" >"$TMP/cuda.r32.det" &&
        final_lines "$TMP/cuda.r32b/metrics.jsonl" | cmp -s - "$TMP/cuda.r32.det" &&
        TSR_ATT_WARP_ROWS=32 run "$TRAIN" 1 cuda.r32l --set device=cuda "${llama[@]}" &&
        d="$d; llama: $(metrics_close "$TMP/cpu_llama/metrics.jsonl" "$TMP/cuda.r32l/metrics.jsonl" 1 \
            5e-3 1e-1)"
    tap_check $? "cuda: TSR_ATT_WARP_ROWS=32: GPT-2 (hs 32) within 5e-3 of the CPU and the same bits twice, Llama (hs 64, document mask) within 5e-3, norms within 1e-1 ($d)"
    # the attention kernels on wgmma (TSR_ATT_WGMMA=1, issue 25 item 2): on a GPU of compute
    # capability 9.0, Llama (hs 64, document mask) against the CPU and deterministic (other sums
    # than the default's, so not its bits), GPT-2 (hs 32, no wgmma kernel) refused; on another
    # GPU both refused
    d=
    sm=$(sed -n 's/^device: .* (sm \([0-9.]*\)).*/\1/p' "$TMP/cuda.gpt2.txt" | head -1)
    TSR_ATT_WGMMA=1 run "$TRAIN" 1 cuda.wg32 --set device=cuda
    rc=$?
    if [[ $sm == 9.0 ]]; then
        ((rc == 1)) && grep -q 'TSR_ATT_WGMMA = "1": .*head size 32' "$TMP/cuda.wg32.txt" &&
            TSR_ATT_WGMMA=1 run "$TRAIN" 1 cuda.wgl --set device=cuda "${llama[@]}" &&
            grep -q 'TSR_ATT_WGMMA = "1": the attention forward and backward on Hopper' "$TMP/cuda.wgl.txt" &&
            d="llama: $(metrics_close "$TMP/cpu_llama/metrics.jsonl" "$TMP/cuda.wgl/metrics.jsonl" 1 \
                5e-3 1e-1)" &&
            TSR_ATT_WGMMA=1 run "$TRAIN" 1 cuda.wglb --set device=cuda "${llama[@]}" &&
            final_lines "$TMP/cuda.wgl/metrics.jsonl" >"$TMP/cuda.wgl.det" &&
            final_lines "$TMP/cuda.wglb/metrics.jsonl" | cmp -s - "$TMP/cuda.wgl.det"
    else
        TSR_ATT_WGMMA=1 run "$TRAIN" 1 cuda.wgl --set device=cuda "${llama[@]}"
        rc2=$?
        ((rc == 1 && rc2 == 1)) && d="sm $sm: refused for GPT-2 and Llama"
    fi
    tap_check $? "cuda: TSR_ATT_WGMMA=1 (sm ${sm:-?}): on sm 9.0 GPT-2 (hs 32) refused (exit $rc), Llama (hs 64, document mask) within 5e-3 of the CPU, norms within 1e-1, the same bits twice; elsewhere refused ($d)"
    # softmax + cross-entropy with the row in registers (TSR_XENT_RESIDENT=1, issue 25): the same
    # arithmetic in the same order, so all 20 steps the default's bits
    TSR_XENT_RESIDENT=1 run "$TRAIN" 1 cuda.xr --set device=cuda &&
        final_lines "$TMP/cuda.xr/metrics.jsonl" | cmp -s - "$TMP/cuda.det1"
    tap_check $? "cuda: TSR_XENT_RESIDENT=1 (the row in registers): GPT-2's 20 steps the same bits as the default's"
    # dq added by the dk/dv kernel (TSR_ATT_DQ_FUSED=1, issue 25): the dq kernel's sums in the same
    # order where the tiles agree (16 rows a warp, no document mask: GPT-2), so its 20 steps the
    # default's bits; with a document mask (Llama) other tiles: against the CPU, deterministic
    d=
    TSR_ATT_DQ_FUSED=1 run "$TRAIN" 1 cuda.dqf --set device=cuda &&
        final_lines "$TMP/cuda.dqf/metrics.jsonl" | cmp -s - "$TMP/cuda.det1" &&
        TSR_ATT_DQ_FUSED=1 run "$TRAIN" 1 cuda.dqfl --set device=cuda "${llama[@]}" &&
        d="llama: $(metrics_close "$TMP/cpu_llama/metrics.jsonl" "$TMP/cuda.dqfl/metrics.jsonl" 1 \
            5e-3 1e-1)" &&
        TSR_ATT_DQ_FUSED=1 run "$TRAIN" 1 cuda.dqflb --set device=cuda "${llama[@]}" &&
        final_lines "$TMP/cuda.dqfl/metrics.jsonl" >"$TMP/cuda.dqfl.det" &&
        final_lines "$TMP/cuda.dqflb/metrics.jsonl" | cmp -s - "$TMP/cuda.dqfl.det"
    tap_check $? "cuda: TSR_ATT_DQ_FUSED=1: GPT-2's 20 steps the same bits as the default's; Llama (document mask) within 5e-3 of the CPU, norms within 1e-1, the same bits twice ($d)"
    # the norm backwards with each row in registers (TSR_NORM_HOLD, issue 25): the same
    # arithmetic in the same order, so the same bits held or not. The default holds LayerNorm's
    # rows, not RMSNorm's: GPT-2 (LayerNorm) with TSR_NORM_HOLD=0 (neither) and Llama (RMSNorm)
    # with TSR_NORM_HOLD=1 (both) against the default's runs
    TSR_NORM_HOLD=0 run "$TRAIN" 1 cuda.nh --set device=cuda &&
        final_lines "$TMP/cuda.nh/metrics.jsonl" | cmp -s - "$TMP/cuda.det1" &&
        TSR_NORM_HOLD=1 run "$TRAIN" 1 cuda.nhl --set device=cuda "${llama[@]}" &&
        final_lines "$TMP/cuda.llama/metrics.jsonl" >"$TMP/cuda.llama.det" &&
        final_lines "$TMP/cuda.nhl/metrics.jsonl" | cmp -s - "$TMP/cuda.llama.det"
    tap_check $? "cuda: TSR_NORM_HOLD: GPT-2's (LayerNorm) 20 steps with no row held (=0) and Llama's (RMSNorm) with its rows held (=1) the same bits as the default's"
    # GEMM choices by the clock, kept in a file (TSR_GEMM_TUNE, issue 25 item 4): a first run
    # times its shapes and writes a choice for each at the end; a second reads them all, times
    # none, and has the first's bits (the first ran each chosen algorithm from its first call)
    d="" n=0
    rm -f "$TMP/tune_gpu.txt"
    TSR_GEMM_TUNE="$TMP/tune_gpu.txt" run "$TRAIN" 1 cuda.tu1 --set device=cuda &&
        d=$(close cpu_gpt2 cuda.tu1 1) && n=$(grep -c '^[0-9]' "$TMP/tune_gpu.txt") && ((n > 0)) &&
        grep -q "TSR_GEMM_TUNE: 0 shape(s) from the file (0 by configuration), .*; $n new choice(s) written to the file" "$TMP/cuda.tu1.txt" &&
        TSR_GEMM_TUNE="$TMP/tune_gpu.txt" run "$TRAIN" 1 cuda.tu2 --set device=cuda &&
        grep -q "TSR_GEMM_TUNE: $n GEMM choice(s) read from $TMP/tune_gpu.txt" "$TMP/cuda.tu2.txt" &&
        grep -q "TSR_GEMM_TUNE: $n shape(s) from the file (0 by configuration), 0 timed .* 0 not matched by .* 0 not in the file; calls past the algorithm cache: 0 not in the file, 0 not matched; the file unchanged" "$TMP/cuda.tu2.txt" &&
        final_lines "$TMP/cuda.tu1/metrics.jsonl" >"$TMP/cuda.tu1.det" &&
        final_lines "$TMP/cuda.tu2/metrics.jsonl" | cmp -s - "$TMP/cuda.tu1.det"
    tap_check $? "cuda: TSR_GEMM_TUNE: a first run times its GEMM shapes (within 5e-3 of the CPU: $d) and writes $n choices; a second finds them all by their bytes, times none, the same bits"
else
    # without a GPU the real library still loads (dlopen, the trainer's symbols from the
    # executable, cuBLASLt) and says there is no device
    without_gpu "loads and reports no CUDA device" "$PER" run "$TRAIN" 1 nodev --set device=cuda
    _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - cuda: TSR_ATT_WARP_ROWS=32 runs # SKIP $why"
    _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - cuda: TSR_ATT_WGMMA=1 runs Llama against the CPU # SKIP $why"
    _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - cuda: TSR_XENT_RESIDENT=1 gives the default's bits # SKIP $why"
    _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - cuda: TSR_ATT_DQ_FUSED=1 gives the default's bits # SKIP $why"
    _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - cuda: TSR_NORM_HOLD=0 and =1 give the default's bits # SKIP $why"
    _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - cuda: TSR_GEMM_TUNE's file repeats a run's bits # SKIP $why"
fi
tap_done
