#!/usr/bin/env bash
# bench/gpu/gen_vs_hf.sh — batched decoding on one GPU: GRPO's rollouts in tessera (device = cuda:
# the CUDA decode kernels tcu_attention_decode and tcu_matmul_rows, docs/cuda.md "Batched
# decoding") against transformers' generate (bench/gpu/hf_generate.py), the same model
# dimensions, batch and new tokens, side by side in one run (docs/benchmarks.md "Generation").
#
#   bash tests/gpu/device.sh gen              (on the GPU machine: BUILD and PYTHON from the bundle)
#   TRAIN=build/tests/tessera-train-cuemu DIMS="2 64 2 1 128" NEW=8 BATCHES="1 16" ROUNDS=1 \
#       PYTHON=/usr/bin/python3 bash bench/gpu/gen_vs_hf.sh   (the self-check here, on the emulator)
#
# tessera: the arithmetic prompts of `tessera synth --task arithmetic` (operands 0..99, a
# character-level tokenizer: prompts of 4 to 8 ids), prepared with `tessera prep --format prompts`;
# a randomly initialised Llama-style model (DIMS = "layers d_model heads kv_heads ffn", RoPE,
# RMSNorm, SwiGLU, tied embeddings, vocabulary 257 padded to 320) trained STEPS steps of
# objective = "grpo" with B sequences decoded together (grpo.rollout_batch = B; B = 1: groups of 2
# decoded one after the other, else groups of 8), NEW new tokens at most (a random model stops
# where it samples <|endoftext|>: the figure counts the tokens generated). Its figure: the median
# over steps 2..STEPS of metrics.jsonl's grpo_rollout_tokens_per_s (tokens generated / seconds of
# the rollout phase: the decode, its prompt prefill and the rewards), with grpo_rollout_s and
# grpo_train_s beside it. The peer: hf_generate.py, the same dimensions and B, prompts of 8 random
# ids, exactly NEW tokens each (min_new_tokens), sampling at temperature 1, bf16, median of ROUNDS
# timed generate calls after one untimed. Its figure is what it prints; a peer that cannot run
# (no transformers: exit 77) gets a line saying so, never a number.
#
# DECODE_GEMM="0 1" runs tessera's side once per value of TSR_DECODE_GEMM (issue 66 item 3: 1 sends
# the linear layers of 8 rows or more, a multiple of 8, through cuBLASLt's GEMM; docs/cuda.md
# "Batched decoding"), a row each; the peer runs once per batch.
#
# Knobs: BATCHES="1 16 64" NEW=128 STEPS=4 ROUNDS=3 DIMS="12 768 12 4 2048" BUILD=build
#        TRAIN=$BUILD/tessera-train DEVICE=cuda PYTHON=python3 BENCH_OUT=/tmp/bench-gen DECODE_GEMM=0
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
TRAIN=${TRAIN:-$BUILD/tessera-train}
BATCHES=${BATCHES:-1 16 64} NEW=${NEW:-128} STEPS=${STEPS:-4} ROUNDS=${ROUNDS:-3}
DIMS=${DIMS:-12 768 12 4 2048} DEVICE=${DEVICE:-cuda} PYTHON=${PYTHON:-python3}
DECODE_GEMM=${DECODE_GEMM:-0}
OUT=${BENCH_OUT:-/tmp/bench-gen}
die() { echo "gen_vs_hf: $*" >&2; exit 2; }
for dg in $DECODE_GEMM; do [[ $dg == [01] ]] || die "DECODE_GEMM='$DECODE_GEMM': 0 and/or 1"; done
[[ -x $BUILD/tessera && -x $TRAIN ]] || die "no $BUILD/tessera or $TRAIN"
read -r L D H K F <<<"$DIMS"
[[ -n $F ]] || die "DIMS='$DIMS': expected layers d_model heads kv_heads ffn"
((STEPS >= 2)) || die "STEPS=$STEPS: at least 2 (step 1 warms up)"
mkdir -p "$OUT"
W=$OUT/work
rm -rf "$W" && mkdir -p "$W"

# the prompts
"$BUILD/tessera" synth --task arithmetic --out "$W/ar" --examples 2000 --seed 3 -q
"$PYTHON" -c '
import json, sys
with open(sys.argv[2], "w") as f:
    for l in open(sys.argv[1]): f.write(json.loads(l)["text"] + "\n")' "$W/ar/pretrain.jsonl" "$W/text.txt"
"$BUILD/tessera" tokenizer train --vocab-size 258 --min-frequency 1000000000 \
    --special '<|endoftext|>' --out "$W/tok.tsr" -q "$W/text.txt" 2>/dev/null
"$BUILD/tessera" prep --out "$W/prompts" --val-fraction 0 --tokenizer "$W/tok.tsr" -q \
    --format prompts --pack 16 "$W/ar/prompts.jsonl"

# peer B: transformers' generate at batch B, tokens/s (or why not)
peer() {
    local b=$1 prc=0 out p
    out=$("$PYTHON" "$ROOT/bench/gpu/hf_generate.py" --layers "$L" --d-model "$D" --heads "$H" \
        --kv-heads "$K" --ffn "$F" --vocab 320 --prompt 8 --new "$NEW" --batch "$b" \
        --rounds "$ROUNDS" --device "$DEVICE" 2>"$OUT/hf-$b.log") || prc=$?
    echo "$out" >"$OUT/hf-$b.json"
    p=$("$PYTHON" -c 'import json, sys; print("%.0f" % json.loads(sys.argv[1])["tokens_per_s"])' "$out" 2>/dev/null || true)
    ((prc == 0)) && [[ -n $p ]] || p="not run (exit $prc: $(tail -1 "$OUT/hf-$b.log"))"
    echo "$p"
}

T=$((16 + NEW))
model=(--config "$ROOT/configs/tiny.cfg" --set model.n_layer="$L" --set model.d_model="$D"
       --set model.n_head="$H" --set model.n_kv_head="$K" --set model.intermediate_size="$F"
       --set model.pos='"rope"' --set model.norm='"rmsnorm"' --set model.mlp='"swiglu"'
       --set model.bias=false --set model.tie_embeddings=true --set model.vocab_size=257
       --set model.vocab_multiple=64 --set model.max_seq_len="$T" --set seq_len="$T"
       --set model.attn_mask=document --set model.eot_token=256 --set data.tokenizer="$W/tok.tsr"
       --set sample.tokens=0 --set watchdog.window=0 --set guard.window=0 --set seed=7
       --set log_interval=1 --set device="$DEVICE")
echo "| batch | TSR_DECODE_GEMM | tessera rollout tokens/s | transformers generate tokens/s | tessera / transformers | tessera rollout s / train s per step | mean response length |" >"$OUT/results.md"
echo "|---|---|---|---|---|---|---|" >>"$OUT/results.md"
declare -A peer_of=() # batch -> the peer's tokens/s (or why not), run once per batch
failed=0 # a tessera run that failed: the table still written, the exit status 1
for b in $BATCHES; do for dg in $DECODE_GEMM; do
    g=8 gb=$((b / 8))
    ((b >= 8)) || g=2 gb=1
    ((gb * g == b || b == 1)) || die "batch $b: 1 or a multiple of 8"
    run=run-$b-$dg
    rm -rf "$W/$run"
    rc=0
    TSR_DECODE_GEMM=$dg "$TRAIN" "${model[@]}" --set objective=grpo --set data.train="$W/prompts/train" \
        --set data.val= --set global_batch="$gb" --set micro_batch="$gb" --set grpo.group_size="$g" \
        --set grpo.rollout_batch="$b" --set grpo.max_new_tokens="$NEW" --set max_duration="${STEPS}ba" \
        --set eval_interval=0ba --set save_interval=0ba --set run_dir="$W/$run" \
        >"$OUT/tessera-$b-$dg.log" 2>&1 || rc=$?
    tess=$("$PYTHON" -c '
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1]) if "grpo_rollout_tokens_per_s" in l]
r = [j for j in r if j["step"] >= 2]
m = lambda k: statistics.median(j["grpo_" + k] for j in r)
print("%.0f %.3f %.3f %.1f" % (m("rollout_tokens_per_s"), m("rollout_s"), m("train_s"), m("response_length")))' \
        "$W/$run/metrics.jsonl" 2>/dev/null || true)
    [[ $rc == 0 && -n $tess ]] || { tess="failed (exit $rc: $OUT/tessera-$b-$dg.log)"; failed=1; }
    [[ -n ${peer_of[$b]+x} ]] || peer_of[$b]=$(peer "$b")
    p=${peer_of[$b]}
    read -r ts rs trs len <<<"$tess"
    if [[ $ts =~ ^[0-9]+$ && $p =~ ^[0-9]+$ ]]; then ratio=$("$PYTHON" -c "print('%.2fx' % ($ts / $p))")
    else ratio="-"; fi
    if [[ $ts =~ ^[0-9]+$ ]]; then
        echo "| $b | $dg | $ts | $p | $ratio | $rs / $trs | $len of $NEW |" >>"$OUT/results.md"
    else
        echo "| $b | $dg | $tess | $p | - | - | - |" >>"$OUT/results.md"
    fi
done; done
{
    echo
    echo "DIMS=\"$DIMS\" NEW=$NEW STEPS=$STEPS ROUNDS=$ROUNDS DEVICE=$DEVICE, $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
} >>"$OUT/results.md"
cat "$OUT/results.md"
exit $failed
