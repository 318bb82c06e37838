#!/usr/bin/env bash
# gen_vs_torch.sh — batched generation, tessera vs PyTorch with a KV cache, on the CPU (issue 54;
# docs/benchmarks.md "Generation: tessera vs PyTorch with a KV cache").
#
# The model is cpu_vs_torch.sh's llama-tiny (4 layers, d_model 192, 8 query heads sharing 2
# key/value heads, SwiGLU 512, RoPE, RMSNorm, tied embeddings, vocabulary 512), trained STEPS
# steps on the synthetic corpus so that its greedy choices are not near-ties. 64 prompts of 16
# random token ids (seeded) are completed greedily with 112 new tokens each (no stop: 128
# positions, the model's length) at each batch size of BATCHES, ROUNDS times alternately by
#   tessera generate --prompts P --out O --batch B --temperature 0 --no-eos-stop (threads = THREADS)
#   bench/torch_generate.py (Debian's python3-torch, float32, torch.set_num_threads(THREADS)):
#     the same weights (the checkpoint's), prefill then one token per forward over a
#     preallocated key/value cache, under torch.inference_mode
# and reports tokens/s = generated tokens / seconds from the first forward to the last (model
# load not counted; tessera's figure is its own summary line's), the median over the rounds, and
# how many of the completions' tokens are the same on both sides (greedy, fp32: a flip where two
# logits are within rounding, and everything after it, differs).
# Knobs: BATCHES="1 16 64" ROUNDS=3 THREADS=1 STEPS=60 BUILD=build BENCH_OUT=build/bench/gen
#        PYTHON=/usr/bin/python3 QUIET_WAIT=30 (seconds to wait for idle CPUs before each run)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
BATCHES=${BATCHES:-1 16 64} ROUNDS=${ROUNDS:-3} THREADS=${THREADS:-1} STEPS=${STEPS:-60}
OUT=${BENCH_OUT:-$BUILD/bench/gen}
PYTHON=${PYTHON:-/usr/bin/python3}
QUIET_WAIT=${QUIET_WAIT:-30}
UTIL=(env -u PYTHONPATH "$PYTHON" "$ROOT/bench/bench_util.py")
die() { echo "gen_vs_torch: $*" >&2; exit 1; }
[[ -x $BUILD/tessera && -x $BUILD/tessera-train ]] || die "run 'make' first"
"$PYTHON" -c 'import torch, h5py' 2>/dev/null || die "$PYTHON cannot import torch and h5py"
mkdir -p "$OUT"

# the model: llama-tiny over the synthetic corpus, STEPS steps
"$BUILD/tessera" synth --out "$OUT/data" --vocab 512 --tokens 300000 --seed 1 --quiet 2>/dev/null ||
    [[ -f $OUT/data/train/index.tsv ]]
rm -rf "$OUT/run"
"$BUILD/tessera-train" --config "$ROOT/configs/tiny.cfg" --set model.vocab_size=512 \
    --set sample.tokens=0 --set model.pos='"rope"' --set model.norm='"rmsnorm"' \
    --set model.mlp='"swiglu"' --set model.bias=false --set model.tie_embeddings=true \
    --set model.n_head=8 --set model.n_kv_head=2 --set model.intermediate_size=512 \
    --set data.train="$OUT/data/train" --set data.val= --set eval_interval=0ba \
    --set data.tokenizer= --set max_duration="${STEPS}ba" --set save_interval=0ba \
    --set threads="$THREADS" --set run_dir="$OUT/run" >"$OUT/train.log" 2>&1 ||
    { tail "$OUT/train.log"; die "training the model failed"; }
ckpt=$(cat "$OUT/run/latest")
[[ $ckpt == /* ]] || ckpt=$OUT/run/$(basename "$ckpt")
read -r -a peer <<<"$("${UTIL[@]}" torch-args "$OUT/run/config.cfg")"
"$PYTHON" -c '
import json, random, sys
r = random.Random(7)
with open(sys.argv[1], "w") as f:
    for _ in range(64): f.write(json.dumps({"prompt_ids": [r.randrange(511) for _ in range(16)]}) + "\n")' "$OUT/prompts.jsonl"

: >"$OUT/results.tsv"
for b in $BATCHES; do
    for r in $(seq "$ROUNDS"); do
        echo "== batch $b round $r: tessera: $("${UTIL[@]}" quiet "$QUIET_WAIT")"
        "$BUILD/tessera" generate --ckpt "$OUT/run" --prompts "$OUT/prompts.jsonl" \
            --out "$OUT/tessera-$b.jsonl" --batch "$b" --max-tokens 112 --temperature 0 \
            --no-eos-stop --tokenizer '' --set threads="$THREADS" 2>"$OUT/tessera-$b-$r.log"
        t=$(grep -o '[0-9.]* tokens/s' "$OUT/tessera-$b-$r.log" | tail -1 | cut -d' ' -f1)
        echo "== batch $b round $r: PyTorch: $("${UTIL[@]}" quiet "$QUIET_WAIT")"
        p=$(env -u PYTHONPATH "$PYTHON" "$ROOT/bench/torch_generate.py" --ckpt "$ckpt" \
            --prompts "$OUT/prompts.jsonl" --out "$OUT/torch-$b.jsonl" --batch "$b" \
            --max-tokens 112 --threads "$THREADS" -- "${peer[@]:1}" |
            "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["tokens_per_s"])')
        printf '%s\t%s\t%s\t%s\n' "$b" "$r" "$t" "$p" | tee -a "$OUT/results.tsv"
    done
done
"$PYTHON" - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = [l.split("\t") for l in open(f"{out}/results.tsv").read().split("\n") if l]
print("| batch | tessera tokens/s | PyTorch tokens/s | tessera / PyTorch | same tokens |")
print("|---|---|---|---|---|")
for b in dict.fromkeys(r[0] for r in rows):
    t = statistics.median(float(r[2]) for r in rows if r[0] == b)
    p = statistics.median(float(r[3]) for r in rows if r[0] == b)
    a = [json.loads(l)["tokens"] for l in open(f"{out}/torch-{b}.jsonl")]
    ts = sorted((json.loads(l) for l in open(f"{out}/tessera-{b}.jsonl")), key=lambda j: j["index"])
    ts = [j["ids"] for j in ts]
    same = sum(x == y for u, v in zip(a, ts) for x, y in zip(u, v))
    total = sum(len(u) for u in a)
    print(f"| {b} | {t:.0f} | {p:.0f} | {t / p:.2f}x | {same}/{total} |")
PY
