#!/usr/bin/env bash
# Positions and soft-capping through the real trainer (docs/models.md "Positions and
# soft-capping"; the maths is checked against float64 PyTorch by tests/reference/test_reference.py,
# cases llama-gemma2 and llama-yarn):
#  - a tiny Llama with Gemma 2's soft caps on the scores and the final logits, and Gemma 3's RoPE
#    per layer type (a sliding layer with its own base, a full layer with linear scaling), trains
#    6 steps and checkpoints; so does one with gpt-oss's YaRN, partial rotary (half the head) and
#    a NoPE layer (no_rope_layers "1, 0");
#  - tessera generate from each, greedy, 20 + 100 tokens: the KV cache's ids equal the no-cache
#    forward's and its next-token probabilities agree within 1e-6 + 1e-4 p (the capped scores in
#    the decode, the capped logits' distribution, each layer's RoPE table, NoPE);
#  - device = "cuda" with a soft cap is refused (exit 1, a config error) naming the key, nothing
#    written (the ring of parallel.context runs it: tests/train/test_context_variants.sh); the ring runs the RoPE variants (positions come with each
#    token): YaRN + partial + NoPE at parallel.context = 2 gives context 1's losses within 1e-6,
#    and device = cuda refuses them; ckpt export --format hf refuses the YaRN model naming
#    model.rope_scaling;
#  - bad values: a no_rope_layers entry other than 0/1, a partial_rotary_factor that does not turn
#    an even number of dimensions: exit 1 naming the key.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
source "$(dirname "$0")/../eval/generate_lib.sh"
tap_plan 8
tiny_gqa_args 6
gemma=(--set model.layer_types=sliding_attention,full_attention --set model.sliding_window=5
       --set model.rope_theta=1000000 --set model.rope_scaling=linear --set model.rope_factor=8
       --set model.rope_local_theta=10000 --set model.attn_logit_softcapping=1.0
       --set model.final_logit_softcapping=2.0)
yarn=(--set model.rope_scaling=yarn --set model.rope_factor=32 --set model.rope_beta_fast=32
      --set model.rope_beta_slow=1 --set model.rope_truncate=false
      --set model.rope_original_max_pos=4096 --set model.partial_rotary_factor=0.5
      --set "model.no_rope_layers=1, 0")
run() { local dir=$1; shift; "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }

run G "${gemma[@]}"
rc1=$?
run Y "${yarn[@]}"
rc2=$?
tap_diag "step-6 losses: soft caps + local/global RoPE $(json_field "$TMP/G/metrics.jsonl" 6 loss), YaRN + partial + NoPE $(json_field "$TMP/Y/metrics.jsonl" 6 loss)"
((rc1 == 0 && rc2 == 0)) && [[ -n $(json_field "$TMP/G/metrics.jsonl" 6 loss) &&
    -n $(json_field "$TMP/Y/metrics.jsonl" 6 loss) && -f $TMP/G/step-00000006.h5 && -f $TMP/Y/step-00000006.h5 ]]
tap_check $? "soft caps with local/global RoPE (exit $rc1), and YaRN with partial rotary and a NoPE layer (exit $rc2): 6 steps and a checkpoint each"

greedy G g --max-tokens 100 && [[ $(wc -w <"$TMP/g.c") == 100 ]] && cmp -s "$TMP/g.c" "$TMP/g.n" &&
    probs_close "$TMP/g.c.probs" "$TMP/g.n.probs"
tap_check $? "generate (soft caps, window 5, local and global RoPE), greedy 20 + 100 tokens: KV cache == no cache, ids and probabilities"
greedy Y y --max-tokens 100 && [[ $(wc -w <"$TMP/y.c") == 100 ]] && cmp -s "$TMP/y.c" "$TMP/y.n" &&
    probs_close "$TMP/y.c.probs" "$TMP/y.n.probs"
tap_check $? "generate (YaRN, partial rotary, NoPE layer 1), greedy 20 + 100 tokens: KV cache == no cache, ids and probabilities"

cuda_accepted R --set model.attn_logit_softcapping=1.0 --set model.head_dim=32 # (a GPU kernel's head size)
tap_check $? "device = cuda with the attention soft cap: the start's checks pass (--dry-run exit 0; the runs: tests/gpu/test_cuda_families.sh)"

# the ring takes each token's position from the data: the RoPE variants run there as they are
"${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" "${yarn[@]}" --set run_dir="$TMP/YC" --set parallel.context=2 >"$TMP/YC.txt" 2>&1
rc=$?
runs_close $rc "context 2 vs 1" Y YC 1e-6 1e-5
tap_check $? "YaRN, partial rotary and a NoPE layer at parallel.context = 2 (exit $rc): the losses of context 1 within 1e-6, gradient norms within 1e-5 (device = cuda runs them: tests/gpu/test_cuda_families.sh)"

export_refused "$TMP/Y/step-00000006.h5" "$TMP/hfY" "model.rope_scaling"
tap_check $? "ckpt export --format hf of the YaRN model: refused (exit $rc) naming the key, no weights written"

"$TRAIN" "${args[@]}" --set run_dir="$TMP/B/nope" --set "model.no_rope_layers=1,2" >"$TMP/nope.txt" 2>&1
rc=$?
grep -q 'model.no_rope_layers entry 1 is "2"' "$TMP/nope.txt" && ((rc == 1)) && [[ ! -e $TMP/B/nope ]]
tap_check $? "no_rope_layers \"1,2\" is refused (exit $rc) naming the entry, nothing written"

"$TRAIN" "${args[@]}" --set run_dir="$TMP/B/part" --set model.partial_rotary_factor=0.3 >"$TMP/part.txt" 2>&1
rc=$?
grep -q "model.partial_rotary_factor = 0.3 with a head size of 16" "$TMP/part.txt" && ((rc == 1))
tap_check $? "partial_rotary_factor 0.3 of a 16-wide head is refused (exit $rc) naming the key"

tap_done
