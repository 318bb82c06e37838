#!/usr/bin/env bash
# The CPU benchmark's matmul floor (bench/cpu_vs_torch.sh, docs/benchmarks.md): bench_util.py
# linears lists a run's linear layers from its config.cfg, and their weights must be exactly the
# trainer's own parameter count less the norm weights (so the floor times the products the
# trainer runs, no more, no fewer); build/bench/matmul_floor times them and counts their FLOPs;
# MoE configs give no list; bad input is refused with exit 2 naming the line.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
FLOOR=$BUILD/bench/matmul_floor
UTIL=("$PY3" "$TSR_ROOT/bench/bench_util.py")
tap_plan 7

make_synth "$TMP/data"
tiny_args "$TMP/data/train"
# a Llama-style model: 2 layers of 64, 4 query heads sharing 2 key/value heads, SwiGLU 96 wide,
# tied embeddings; 2 microbatches of 2 x 32 tokens per step
args+=(--set model.n_layer=2 --set model.n_head=4 --set model.n_kv_head=2 --set 'model.pos="rope"'
       --set 'model.norm="rmsnorm"' --set 'model.mlp="swiglu"' --set model.bias=false
       --set model.intermediate_size=96 --set model.tie_embeddings=true --set global_batch=4
       --set micro_batch=2 --set max_duration=1ba --set save_interval=0ba --set run_dir="$TMP/run")
"$TRAIN" "${args[@]}" >"$TMP/train.log" 2>&1
tap_check $? "a one-step Llama-style run writes its config.cfg"

"${UTIL[@]}" linears "$TMP/run/config.cfg" >"$TMP/linears" 2>"$TMP/linears.err"
tap_check $? "bench_util.py linears reads it"
tap_diag "$(tr '\n' ';' <"$TMP/linears")"

# weights of the listed linears (per step: COUNT = layers x 2 microbatches, the head once per
# microbatch) = the trainer's parameters less 2 RMSNorm weights of 64 per layer and the final one
"$PY3" - "$TMP/linears" "$TMP/train.log" <<'PY'
import re, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
log = open(sys.argv[2]).read()
params = int(re.search(r"params: (\d+) trainable", log).group(1))
names = [r[0] for r in rows]
n = {r[0]: (int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows}
micro = 2
weights = sum(ic * oc * count // micro for _, ic, oc, count in n.values())
norms = (2 * 2 + 1) * 64
print("# linears: %s; their weights %d + norms %d, trainer's params %d" % (names, weights, norms, params))
ok = (names == ["qkv", "attn_out", "mlp_up", "mlp_down", "head"] and all(v[0] == 64 for v in n.values())
      and n["qkv"][1:] == (64, (4 + 2 * 2) * 16, 4) and n["mlp_up"][1:] == (64, 192, 4)
      and n["head"][1:] == (64, 512, 2) and weights + norms == params)
sys.exit(0 if ok else 1)
PY
tap_check $? "the linears are the model's (q/k/v 64 -> 128, SwiGLU up 64 -> 2 x 96, head over the vocabulary) and their weights plus the norms are the trainer's parameter count"

out=$("$FLOOR" 1 2 <"$TMP/linears" 2>&1)
rc=$?
tap_check $rc "matmul_floor times them (1 thread, 2 repetitions)"
"$PY3" - "$TMP/linears" <<PY
import json, sys
d = json.loads('''$out''')
want = sum(6 * int(r[1]) * int(r[2]) * int(r[3]) * int(r[4]) for r in (l.split() for l in open(sys.argv[1])) if r)
print("# total %d FLOP (want %d), %.6f s, FMA peak %.1f GFLOP/s" % (d["flop"], want, d["s"], d["fma_gflops"]))
ok = (len(d["shapes"]) == 5 and d["flop"] == want and d["s"] > 0
      and all(s["s"] > 0 for s in d["shapes"]) and d["fma_gflops"] > 0)
sys.exit(0 if ok else 1)
PY
tap_check $? "its FLOPs are 3 products of 2 N IC OC per call, summed over the calls, and every time is positive"

printf 'model = {\n  moe_experts = 4;\n  d_model = 64;\n};\n' >"$TMP/moe.cfg"
moe=$("${UTIL[@]}" linears "$TMP/moe.cfg")
tap_check $(($? != 0 || ${#moe} != 0)) "a MoE config lists no linears (the floor covers dense models)"

err=$(printf 'qkv 64 64 192 4\nmlp_up 64 -3 192 4\n' | "$FLOOR" 1 1 2>&1 >/dev/null)
rc=$?
[[ $rc == 2 && $err == *"stdin line 2"* ]]
tap_check $? "a negative size is refused with exit 2, naming the line ($err)"
tap_done
