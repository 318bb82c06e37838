#!/usr/bin/env bash
# device = cuda on DeepSeek's family (docs/cuda.md "Multi-head latent attention", "DeepSeek's
# router"): configs/tiny-deepseek.cfg cut to 2 layers (one dense, one DeepSeekMoE) against the CPU
# backend on the same 8 steps, its losses and gradient norms within the bf16 tolerances of
# test_cuda_families.sh and every parameter tensor's 8-step update within UPD_TOL of the CPU's
# (gpu_lib.sh updates: a loss barely tells RoPE's pairs apart at these sizes, the attention's
# weights' updates do):
#  - v3: V3's shape: heads of 16 + 8 (24: no attention kernel, padded to 32 with the values of
#    12), interleaved RoPE with YaRN's mscale, the queries through their latent, sigmoid scores
#    with the correction bias in groups ranked by their two best (noaux_tc), the bias moved 0.001
#    a step on the host (its update counted among the tensors'); on the emulator the bias also
#    against the CPU's (multiples of the rate, no AdamW moments, within 0.35) and resumed from
#    step 4 bit for bit as the run that went on;
#  - v2: V2-Lite's: heads of 24 + 8 (32, a kernel's size) with values of 16 (padded: dv != dqk),
#    RoPE's halves, the queries by q_proj alone, softmax scores group-limited, scaled;
# GRPO's decoding over the compressed caches (gpu_mla.c gpu_mla_decode: the decode kernel over the
# latent as one shared key/value head, kv_b_proj absorbed) for each case, 2 steps of 4 prompts x 4
# rollouts of 6 tokens, greedy (grpo.top_k = 1), against the CPU's: the rollouts of both steps
# logged with finite log-probabilities; step 1's (the same weights) first tokens the CPU's, at least
# half of its rollouts the CPU's tokens throughout, their log-probabilities within 1e-2 (measured
# on the emulator: v3 16 of 16 within 4e-3, v2 12 of 16 within 7e-3: a random model's near-uniform
# logits tie within bf16's rounding now and then, and greedy parts there); and the correction
# bias's balancing step over sharded weights (parallel.sharding = "zero3") passes the start's
# checks (its runs: tests/gpu/test_cuda_moe_bias.sh). It runs on the host
# emulator of the CUDA backend (build/tests/tessera-train-cuemu) and on the real backend when a
# GPU is present (tests/gpu/device.sh's train stage; skipped loudly otherwise).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
EMU=$BUILD/tests/tessera-train-cuemu
[[ -x $EMU || ${TSR_TEST_EMULATOR:-1} == 0 ]] || { echo "no $EMU (make builds it)"; exit 77; }
tsr_tmpdir
CASES=(v3 v2)
PER=${#CASES[@]}
real_backend # (why: the real half's checks are PER + 1, and one more, the library's, without a GPU)
tap_plan $((1 + 1 + (PER + 2) + (PER + 1) + (${#why} > 0 ? 1 : 0)))
make_synth "$TMP/data" 512 30000

args=(--config "$TSR_ROOT/configs/tiny-deepseek.cfg" --set model.vocab_size=512
      --set model.vocab_multiple=64 --set data.tokenizer= --set sample.tokens=0
      --set data.train="$TMP/data/train" --set data.val= --set eval_interval=0ba --set seq_len=32
      --set model.max_seq_len=32 --set global_batch=8 --set micro_batch=2 --set threads=1
      --set log_interval=1 --set optim.warmup=2ba --set max_duration=8ba --set save_interval=8ba
      --set watchdog.window=0 --set model.n_layer=2 --set model.num_nextn_predict_layers=0
      "${GPU_COMM_ARGS[@]}")
v3=()
v2=(--set model.qk_nope_head_dim=24 --set model.v_head_dim=16 --set model.q_lora_rank=0
    --set model.rope_interleave=false --set model.rope_scaling=none --set model.moe_scoring=softmax
    --set model.moe_topk_method=group_limited_greedy --set model.moe_routed_scaling=1.5)

ok=0
for f in "${CASES[@]}"; do
    fam "$f"
    run "$TRAIN" "cpu_$f" "${opts[@]}" && run "$TRAIN" "init_$f" "${opts[@]}" --set optim.lr=1e-30 \
        --set max_duration=1ba --set save_interval=1ba --set model.moe_bias_update_rate=0 || ok=1
done
tap_check $ok "CPU reference runs and initial weights: ${CASES[*]}"

cuda_accepted accepted --set parallel.sharding=zero3
tap_check $? "device = cuda accepts the correction bias's balancing step over sharded weights (zero3; its runs: tests/gpu/test_cuda_moe_bias.sh)"

# grpo BIN DIR CASE OPTIONS...: GRPO's 2 greedy steps on grpo_prompts' arithmetic (as
# grpo_smoke's) with the case's model, into DIR
grpo_prompts "$TMP/rl" 400 >/dev/null 2>&1 && grpo_small_args "$TMP/rl"
grpo() {
    local bin=$1 dir=$2; fam "$3"; shift 3
    OMPI_MCA_ess_singleton_isolated="${OMPI_MCA_ess_singleton_isolated:-1}" \
        "$bin" --config "$TSR_ROOT/configs/tiny-deepseek.cfg" "${small[@]:2}" --set model.n_head=4 \
        --set model.n_kv_head=0 --set model.num_nextn_predict_layers=0 \
        --set model.moe_bias_update_rate=0 --set grpo.top_k=1 --set grpo.log_completions=16 \
        --set max_duration=2ba "${opts[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
}

# decode BIN LABEL: each case's GRPO with device = cuda on BIN against the CPU's (above)
decode() {
    local bin=$1 l=$2 f ok=0
    for f in "${CASES[@]}"; do
        [[ -d $TMP/grpo_cpu_$f ]] || grpo "$TRAIN" "grpo_cpu_$f" "$f" || ok=1
        grpo "$bin" "grpo_$l.$f" "$f" --set device=cuda || ok=1
        "$PY3" - "$TMP/grpo_cpu_$f/completions.jsonl" "$TMP/grpo_$l.$f/completions.jsonl" <<'PY' || ok=1
import json, math, sys
cpu, dev = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
one = lambda rows: [(r["prompt_index"], r["tokens"], r["logprob"]) for r in rows if r["step"] == 1]
c, d = one(cpu), one(dev)
same = [(x, y) for x, y in zip(c, d) if x[:2] == y[:2]]
gap = max((abs(x[2] - y[2]) for x, y in same), default=math.inf)
print("#", len(dev), "rollouts;", len(same), "of step 1's", len(d), "the CPU's tokens, their",
      "log-probabilities within %.2g;" % gap, "first tokens", [y[1][0] for y in d], "CPU",
      [x[1][0] for x in c])
sys.exit(0 if (len(dev) == 32 and sorted({r["step"] for r in dev}) == [1, 2]
               and all(math.isfinite(r["logprob"]) and r["logprob"] < 0 for r in dev)
               and len(c) == len(d) == 16 and [x[0] for x in c] == [y[0] for y in d]
               and all(x[1][0] == y[1][0] for x, y in zip(c, d))
               and len(same) >= 8 and gap < 1e-2) else 1)
PY
    done
    tap_check $ok "$l: GRPO's greedy rollouts through the compressed caches (${CASES[*]}): finite log-probabilities; step 1's first tokens the CPU's, at least half its rollouts the CPU's tokens, their log-probabilities within 1e-2"
}

# suite BIN LABEL LOSS_TOL NORM_TOL: each case with device = cuda on BIN against its CPU run
suite() {
    local bin=$1 l=$2 f d=""
    for f in "${CASES[@]}"; do
        fam "$f"
        run "$bin" "$l.$f" "${opts[@]}" --set device=cuda
        runs_close $? "$l: $f" "cpu_$f" "$l.$f" "$3" "$4" &&
            d=$(UPD_STEP=8 updates "init_$f" "cpu_$f" "$l.$f")
        tap_check $? "$l: DeepSeek $f-like (${opts[*]}) within the CPU's tolerance: $d"
    done
}

# bias CKPT_A CKPT_B TOL: checkpoint B's correction bias moved by its own rule alone (multiples of
# the rate 0.001, its AdamW moments 0) and within TOL of A's, relative (TOL 0: bit for bit)
bias() {
    "$PY3" - "$@" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
x, y = (np.asarray(f["model/routercorr"][()], dtype=np.float64) for f in (a, b))
k = y / 1e-3
d = np.linalg.norm(y - x) / np.linalg.norm(x) if np.linalg.norm(x) > 0 else np.inf
moments = max(np.abs(b[f"optim/{m}/routercorr"][()]).max() for m in "mv")
print(f"# bias: max |x| {np.abs(y).max():.4g}, off the rate's multiples {np.abs(k - np.round(k)).max():.2g}, "
      f"moments {moments}, {d:.3g} of the reference's norm apart")
ok = np.abs(y).max() > 0 and np.abs(k - np.round(k)).max() < 1e-5 and moments == 0
sys.exit(0 if ok and (d <= float(sys.argv[3]) if float(sys.argv[3]) > 0 else np.array_equal(x, y)) else 1)
PY
}

# the emulator: test_cuda_families.sh's losses and norms (measured: loss 6.5e-5, norm 3.8e-3), the
# updates at 0.35 (measured at most 0.18, the router's; RoPE's pairs taken as halves instead of
# interleaved gives 0.58 on q_a_proj); the correction bias (v3: moved 0.001 a step by the step's
# loads) within 0.35 of the CPU's (measured 0.15: bf16 near-ties move a few experts' loads), and
# resumed from a step-4 checkpoint it ends bit for bit as the run that went on
if emulator_half $((PER + 2)); then
    UPD_TOL=0.35 suite "$EMU" emulator 5e-4 1e-2
    fam v3
    run "$EMU" emu_s "${opts[@]}" --set device=cuda --set save_interval=4ba --set keep_last=3 &&
        run "$EMU" emu_r "${opts[@]}" --set device=cuda --resume "$TMP/emu_s/step-00000004.h5" &&
        bias "$TMP/cpu_v3/step-00000008.h5" "$TMP/emulator.v3/step-00000008.h5" 0.35 &&
        bias "$TMP/emu_s/step-00000008.h5" "$TMP/emu_r/step-00000008.h5" 0
    tap_check $? "emulator: v3's correction bias moved by the host's rule (multiples of the rate, no AdamW moments) within 0.35 of the CPU's; resumed from step 4 it ends bit for bit as the uninterrupted run"
    decode "$EMU" emulator
    emulator_half_end
fi

# the real backend: the issue's 0.5% on the loss, test_cuda_train.sh's 5e-2 on the norm
family_real_half "loads for a DeepSeek-like run and reports no CUDA device" "$((PER + 1))" decode
tap_done
