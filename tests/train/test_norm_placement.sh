#!/usr/bin/env bash
# Norm placements through the real trainer (docs/models.md "Norm placements"; the maths is checked
# against float64 PyTorch by tests/reference/test_reference.py, cases llama-sandwich and
# llama-olmo2, llama-gemma):
#  - a tiny Llama with sandwich norms, the embedding times sqrt(d_model) and GeGLU (Gemma 2/3)
#    trains on 2 ranks with ddp, and zero3 on 2 ranks equals it within 1e-6 at every step
#    (postattnw and postmlpw are ordinary parameters of the sharded list); its checkpoint holds
#    both tensors and verifies; the placement changes the run;
#  - ckpt export --format hf writes it as Gemma2ForCausalLM (sandwich norms, the scale and GeGLU
#    without QK-norm: Gemma 2's class), its four norms under Gemma's names;
#  - device = "cuda" is refused at start (exit 1) naming the key (the ring of parallel.context
#    runs them: tests/train/test_context_variants.sh),
#    nothing written in run_dir, for sandwich, post, model.qk_norm_scope = projection,
#    model.embed_scale and model.mlp = geglu_tanh; model.norm = "layernorm" with post and
#    model.pos = "learned" with embed_scale are refused naming the key;
#  - a resume with the other placement is refused (exit 1) naming what differs;
#  - tessera generate from the checkpoint, greedy 100 tokens: the KV cache's ids and probabilities
#    equal the no-cache forward's (the decode path runs the post-norms and the scale too);
#  - OLMo 2's form (post-norms, QK-norm over the projections) trains 6 steps; its checkpoint holds
#    postattnw, postmlpw, qnormw (2, 64) and knormw (2, 32) and no ln1w or ln2w, and verifies;
#    generate from it likewise: KV cache == no cache.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
source "$(dirname "$0")/../eval/generate_lib.sh"
tap_plan 9
tiny_gqa_args 6
sw=(--set model.norm_placement=sandwich --set model.embed_scale=sqrt_d_model
    --set model.mlp=geglu_tanh)
run() { local dir=$1 np=$2; shift 2; "${MPIRUN[@]}" -np "$np" "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }

run D 2 "${sw[@]}" && run Z 2 "${sw[@]}" --set parallel.sharding=zero3
runs_close $? "zero3 vs ddp" D Z 1e-6 1e-6
tap_check $? "sandwich norms, the embedding scale, GeGLU: ddp and zero3 on 2 ranks train 6 steps and agree within 1e-6"

"$PY3" - "$TMP/D/step-00000006.h5" <<'PY' && "$TOOL" ckpt verify "$TMP/D/step-00000006.h5" >"$TMP/verify.txt" 2>&1
import sys, h5py
names = []
h5py.File(sys.argv[1], "r").visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
post = sorted({n.split("/")[-1] for n in names if n.split("/")[-1] in ("postattnw", "postmlpw")})
print("# post-norm datasets:", post)
sys.exit(0 if post == ["postattnw", "postmlpw"] else 1)
PY
tap_check $? "the checkpoint holds postattnw and postmlpw and verifies"

run P 1 --set model.embed_scale=sqrt_d_model --set model.mlp=geglu_tanh
a=$(json_field "$TMP/D/metrics.jsonl" 6 loss) p=$(json_field "$TMP/P/metrics.jsonl" 6 loss)
tap_diag "step-6 loss sandwich $a, pre $p"
[[ -n $a && -n $p && $a != "$p" ]]
tap_check $? "the placement changes the run: step-6 losses differ with pre"

"$TOOL" ckpt export --format hf "$TMP/D/step-00000006.h5" "$TMP/hfD" >"$TMP/export.txt" 2>&1
rc=$?
tap_diag "export: $(head -c 300 "$TMP/export.txt")"
[[ $rc == 0 ]] && "$PY3" - "$TMP/hfD" <<'PY'
import json, struct, sys
d = sys.argv[1]
arch = json.load(open(d + "/config.json"))["architectures"]
with open(d + "/model.safetensors", "rb") as f:
    names = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
want = ["model.layers.0." + n + ".weight" for n in ("input_layernorm", "post_attention_layernorm",
        "pre_feedforward_layernorm", "post_feedforward_layernorm")]
print("# architectures", arch, "; missing", [w for w in want if w not in names])
sys.exit(0 if arch == ["Gemma2ForCausalLM"] and all(w in names for w in want) else 1)
PY
tap_check $? "ckpt export --format hf of the sandwich model (no QK-norm) writes Gemma2ForCausalLM with its four norms (exit $rc)"

olmo=(--set model.norm_placement=post --set model.qk_norm=true --set model.qk_norm_scope=projection)
mkdir -p "$TMP/L"
"$TRAIN" "${args[@]}" "${olmo[@]}" --set run_dir="$TMP/L/ln" --set model.norm=layernorm >"$TMP/ln.txt" 2>&1
rc=$?
"$TRAIN" "${args[@]}" --set model.embed_scale=sqrt_d_model --set model.pos=learned \
    --set model.max_seq_len=32 --set run_dir="$TMP/L/pos" >"$TMP/pos.txt" 2>&1
rc2=$?
sed 's/^/# /' "$TMP/ln.txt" "$TMP/pos.txt" | grep "norm_placement\|embed_scale" | head -2
((rc == 1)) && grep -q 'model.norm_placement = "post" needs model.norm = "rmsnorm"' "$TMP/ln.txt" &&
    ((rc2 == 1)) && grep -q 'model.embed_scale = "sqrt_d_model" with model.pos = "learned"' "$TMP/pos.txt" &&
    [[ -z $(ls -A "$TMP/L") ]]
tap_check $? "model.norm = layernorm with post (exit $rc), pos = learned with the scale (exit $rc2): exit 1 naming the key, nothing written (device = cuda runs sandwich, post, QK-norm over the projection, the scale and GeGLU: tests/gpu/test_cuda_families.sh)"

run D 1 --set max_duration=8ba
rc=$?
((rc == 1)) && grep -q 'norm_placement "pre" vs "sandwich"' "$TMP/D.txt" &&
    [[ -z $(json_field "$TMP/D/metrics.jsonl" 7 loss) ]]
tap_check $? "a resume with norm_placement = pre of a sandwich checkpoint is refused (exit $rc) naming it"

cached_as_uncached D 100
tap_check $? "generate (sandwich norms, embedding scale, GeGLU), greedy 20 + 100 tokens: KV cache == no cache, ids and probabilities"

run O 1 "${olmo[@]}"
rc=$?
tap_diag "OLMo 2 form: exit $rc, step-6 loss $(json_field "$TMP/O/metrics.jsonl" 6 loss)"
((rc == 0)) && "$PY3" - "$TMP/O/step-00000006.h5" <<'PY' && "$TOOL" ckpt verify "$TMP/O/step-00000006.h5" >"$TMP/verify.txt" 2>&1
import sys, h5py
shapes = {}
def see(n, o):
    if isinstance(o, h5py.Dataset): shapes.setdefault(n.split("/")[-1], o.shape)
h5py.File(sys.argv[1], "r").visititems(see)
got = {k: shapes.get(k) for k in ("postattnw", "postmlpw", "qnormw", "knormw", "ln1w", "ln2w")}
print("# shapes:", got)
sys.exit(0 if got == dict(postattnw=(2, 64), postmlpw=(2, 64), qnormw=(2, 64), knormw=(2, 32),
                          ln1w=None, ln2w=None) else 1)
PY
tap_check $? "post norms + QK-norm over the projections train 6 steps; the checkpoint holds postattnw, postmlpw, qnormw (2, 64), knormw (2, 32), no ln1w/ln2w, and verifies"

cached_as_uncached O 100
tap_check $? "generate (post norms, QK-norm over the projections), greedy 20 + 100 tokens: KV cache == no cache"
tap_done
