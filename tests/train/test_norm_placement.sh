#!/usr/bin/env bash
# Norm placements through the real trainer (docs/models.md "Norm placements"; the maths is checked
# against float64 PyTorch by tests/reference/test_reference.py, case llama-sandwich):
#  - a tiny Llama with sandwich norms (Gemma 2/3) trains on 2 ranks with ddp, and zero3 on 2 ranks
#    equals it within 1e-6 at every step (postattnw and postmlpw are ordinary parameters of the
#    sharded list); its checkpoint holds both tensors and verifies; the placement changes the run;
#  - ckpt export --format hf refuses it naming the key (no exported class has it);
#  - device = "cuda" and parallel.context = 2 are refused at start (exit 1) naming the key,
#    nothing written in run_dir; model.norm = "layernorm" with it is refused naming the key;
#  - a resume with the other placement is refused (exit 1) naming what differs;
#  - tessera generate from the checkpoint, greedy 100 tokens: the KV cache's ids and probabilities
#    equal the no-cache forward's (the decode path runs the post-norms too).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
GEN=("$TOOL" generate --set threads=1)
PROMPT="5 17 3 250 99 12 7 300 41 8 2 66 19 101 3 77 45 9 13 21"
source "$(dirname "$0")/../eval/generate_lib.sh"
tap_plan 7
make_synth "$TMP/data" 512 60000
tiny_llama_args "$TMP/data/train"
args+=(--set model.n_head=4 --set model.n_kv_head=2 --set max_duration=6ba --set save_interval=6ba --set watchdog.window=0)
sw=(--set model.norm_placement=sandwich)
run() { local dir=$1 np=$2; shift 2; "${MPIRUN[@]}" -np "$np" "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }

run D 2 "${sw[@]}" && run Z 2 "${sw[@]}" --set parallel.sharding=zero3
rc=$?
tap_diag "zero3 vs ddp: $(metrics_close "$TMP/D/metrics.jsonl" "$TMP/Z/metrics.jsonl" 1 1e-6 1e-6)"
((rc == 0)) && metrics_close "$TMP/D/metrics.jsonl" "$TMP/Z/metrics.jsonl" 1 1e-6 1e-6 >/dev/null
tap_check $? "sandwich norms: ddp and zero3 on 2 ranks train 6 steps and agree within 1e-6"

"$PY3" - "$TMP/D/step-00000006.h5" <<'PY' && "$TOOL" ckpt verify "$TMP/D/step-00000006.h5" >"$TMP/verify.txt" 2>&1
import sys, h5py
names = []
h5py.File(sys.argv[1], "r").visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
post = sorted({n.split("/")[-1] for n in names if n.split("/")[-1] in ("postattnw", "postmlpw")})
print("# post-norm datasets:", post)
sys.exit(0 if post == ["postattnw", "postmlpw"] else 1)
PY
tap_check $? "the checkpoint holds postattnw and postmlpw and verifies"

run P 1
a=$(json_field "$TMP/D/metrics.jsonl" 6 loss) p=$(json_field "$TMP/P/metrics.jsonl" 6 loss)
tap_diag "step-6 loss sandwich $a, pre $p"
[[ -n $a && -n $p && $a != "$p" ]]
tap_check $? "the placement changes the run: step-6 losses differ with pre"

"$TOOL" ckpt export --format hf "$TMP/D/step-00000006.h5" "$TMP/hfD" >"$TMP/export.txt" 2>&1
rc=$?
tap_diag "export: $(head -c 300 "$TMP/export.txt")"
[[ $rc == 1 && ! -e $TMP/hfD/model.safetensors ]] && grep -q "model.norm_placement" "$TMP/export.txt"
tap_check $? "ckpt export --format hf of a sandwich model: refused (exit $rc) naming the key, no weights written"

mkdir -p "$TMP/R"
"$TRAIN" "${args[@]}" "${sw[@]}" --set run_dir="$TMP/R/cuda" --set device=cuda >"$TMP/cuda.txt" 2>&1
rc1=$?
"${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" "${sw[@]}" --set run_dir="$TMP/R/cp" \
    --set parallel.context=2 >"$TMP/cp.txt" 2>&1
rc2=$?
"$TRAIN" "${args[@]}" "${sw[@]}" --set run_dir="$TMP/R/ln" --set model.norm=layernorm >"$TMP/ln.txt" 2>&1
rc3=$?
sed 's/^/# /' "$TMP/cuda.txt" "$TMP/cp.txt" "$TMP/ln.txt" | grep "norm_placement" | head -3
((rc1 == 1 && rc2 == 1 && rc3 == 1)) &&
    grep -q 'model.norm_placement: device = "cuda" does not run' "$TMP/cuda.txt" &&
    grep -q "model.norm_placement: parallel.context = 2" "$TMP/cp.txt" &&
    grep -q 'model.norm_placement = "sandwich" needs model.norm = "rmsnorm"' "$TMP/ln.txt" &&
    [[ -z $(ls -A "$TMP/R") ]]
tap_check $? "device = cuda, parallel.context = 2, model.norm = layernorm with sandwich: exit 1 ($rc1 $rc2 $rc3) naming the key, nothing written"

run D 1 --set max_duration=8ba
rc=$?
((rc == 1)) && grep -q "norm_placement (0 pre, 1 sandwich) 0 vs 1" "$TMP/D.txt" &&
    [[ -z $(json_field "$TMP/D/metrics.jsonl" 7 loss) ]]
tap_check $? "a resume with norm_placement = pre of a sandwich checkpoint is refused (exit $rc) naming it"

greedy D gen --max-tokens 100 && [[ $(wc -w <"$TMP/gen.c") == 100 ]] && cmp -s "$TMP/gen.c" "$TMP/gen.n" &&
    probs_close "$TMP/gen.c.probs" "$TMP/gen.n.probs"
tap_check $? "generate (sandwich norms), greedy 20 + 100 tokens: KV cache == no cache, ids and probabilities"
tap_done
