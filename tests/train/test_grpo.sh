#!/usr/bin/env bash
# GRPO end to end (objective = "grpo"; docs/rl.md; issue 54), on the synthetic arithmetic corpus of
# `tessera synth --task arithmetic` (sums and differences of 0..9; half the SFT answers run on
# after the number, which the reward, reading the whole completion as the answer, does not pass):
# a character-level tokenizer trained on it, `tessera prep` of the SFT examples, the training
# prompts and the held-out prompts (--format prompts), a tiny model SFT'd for a few hundred steps
# (the fixture), then GRPO from it. Checked:
#  - held-out pass@1 (greedy, the prompts GRPO never trains on) rises by at least 20 points in 12
#    steps over the SFT model's (a run of one step at lr 1e-12, its gradient made NaN: the spike
#    guard skips the step's updates and the run goes on);
#  - the same run (with a KL term to a frozen copy of the starting weights, grpo.kl_coef = 0.04) on
#    2 ranks under zero1, with the reward from a program (tests/train/grpo_reward.py, one per
#    rank, the same rule as the built-in one), gives the same rewards, pass rates and lengths at
#    every step, and the same completions at step 1 (completions.jsonl) as 1 rank; 4 ranks under
#    zero3 and under hsdp (2x2) give step 1's completions too (rollouts drawn from (seed, step,
#    prompt, sample) streams); zero1, zero3 and hsdp give 1 rank's loss, grad norm and KL at steps
#    1-2 (the reference sharded as the weights are);
#  - SIGKILL after a random step 5..11: the rerun resumes from step 4 (the KL reference read back
#    from grpo-reference.bin) and ends bit for bit where the uninterrupted run ends (every tensor of
#    the final checkpoint; every metric from step 5);
#  - the reward program crashing, running out of reward.memory_mib, hanging (reward.timeout; as a
#    shell's child, which must not outlive the run), answering a line that is not JSON, an
#    id it was not sent, a reward that is not a number, or a line over 64 KiB at step 2: exit 2,
#    the message quotes what it was sent and what it answered, the checkpoint of step 1 stays the
#    run's latest and step 2 is never logged (the hang with watchdog.hang_timeout above
#    reward.timeout: reward.timeout's exit 2 comes first; the watchdogs under GRPO, which need
#    timing windows, are tests/faults/test_watchdog.sh's);
#  - the step's figures (grpo_reward_mean ... grpo_rollout_tokens_per_s) are in metrics.jsonl, and
#    `tessera report` plots them (grpo.png);
#  - `tessera eval` with the held-out prompts as a generation_task_with_answers task (answers and
#    aliases, LLM Foundry's normalisation) scores the final checkpoint as its held-out pass@1, on 1
#    and 2 ranks;
#  - device = cuda on the CUDA emulator (tests/tessera-train-cuemu: the rollouts decoded by the
#    device path, bf16): step 1's completions mostly the same tokens as the CPU's (a sampled token
#    flips where bf16 moves a probability across its draw), and where the tokens are the same the
#    log-probabilities recorded within bf16 tolerance (0.03 per token + 0.02 |logp| per completion:
#    bf16 logits of magnitude ~10 are 0.02 apart); with TSR_DECODE_GEMM=1 (issue 66 item 3) the
#    rollouts' 16-row linear layers run the GEMM, not the per-row product, and the completions are
#    (>= 90%) those of the per-row products.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 17

# ---- the fixture: corpus, tokenizer, datasets, the SFT model ----
grpo_prompts "$TMP" 4000
prep() { "$TOOL" prep --out "$TMP/$1" --val-fraction 0 --tokenizer "$TMP/tok.tsr" -q "${@:2}"; }
prep sft --format sft --pack 32 "$TMP/ar/sft.jsonl"
prep heldout --format prompts --pack 8 "$TMP/ar/heldout.jsonl"
model=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.n_layer=2 --set model.d_model=64
       --set model.n_head=2 --set model.vocab_size=257 --set model.vocab_multiple=16
       --set model.max_seq_len=32 --set seq_len=32 --set model.attn_mask=document
       --set model.eot_token=256 --set data.tokenizer="$TMP/tok.tsr" --set threads=1
       --set sample.tokens=0 --set watchdog.window=0 --set seed=7 --set log_interval=1)
"$TRAIN" "${model[@]}" --set run_dir="$TMP/sft" --set data.train="$TMP/sft/train" --set data.val= \
    --set eval_interval=0ba --set max_duration=300ba --set global_batch=32 --set micro_batch=32 \
    --set optim.warmup=10ba --set save_interval=0ba >"$TMP/sft.log" 2>&1 || { cat "$TMP/sft.log"; exit 1; }

grpo=("${model[@]}" --set objective=grpo --set data.train="$TMP/prompts/train"
      --set data.val="$TMP/heldout/train" --set global_batch=16 --set micro_batch=8
      --set grpo.group_size=8 --set grpo.updates=2 --set grpo.max_new_tokens=6 --set optim.lr=1e-4
      --set optim.warmup=0ba --set optim.schedule=constant --set optim.weight_decay=0
      --set guard.window=0 --set reward.compare=exact --set grpo.log_completions=128
      --set max_duration=12ba --set eval_interval=12ba --set save_interval=4ba --set keep_last=5)
run() { "$TRAIN" "${grpo[@]}" --init-from "$TMP/sft" "$@"; }
# the KL term to a frozen copy of the starting weights (grpo.reference = auto: initial without LoRA):
# the runs compared across rank counts and sharding modes, and the resumed one, use it
kl=(--set grpo.kl_coef=0.04)
# pass@1 of an evaluation: the run's last val_pass_at_1
pass_at() { "$PY3" -c 'import json,sys; print([json.loads(l)["val_pass_at_1"] for l in open(sys.argv[1]) if "val_pass_at_1" in l][-1])' "$1"; }

# ---- 1-2: held-out pass@1 rises; the spike guard ----
# (the SFT model's pass@1: one step at lr 1e-12 whose gradient is made NaN, so that the spike
# guard skips its updates: checked below)
TSR_FAULT=nan:1:0 run --set run_dir="$TMP/base" --set max_duration=1ba --set eval_interval=1ba \
    --set optim.lr=1e-12 --set save_interval=0ba --set guard.window=100 --set guard.action=skip \
    >"$TMP/base.log" 2>&1
brc=$?
run "${kl[@]}" --set run_dir="$TMP/r1" >"$TMP/r1.log" 2>&1
rc=$?
b=$(pass_at "$TMP/base/metrics.jsonl" 2>/dev/null || echo nan)
a=$(pass_at "$TMP/r1/metrics.jsonl" 2>/dev/null || echo nan)
tap_diag "held-out pass@1: SFT model $b, after 12 GRPO steps $a"
tap_ok "held-out pass@1 rises by >= 20 points in 12 GRPO steps ($b -> $a)" \
    "$PY3" -c "import sys; sys.exit(0 if $rc == 0 and $a - $b >= 0.2 else 1)"
tap_ok "the spike guard under GRPO: a NaN gradient at step 1 skips the step's updates (guard: skip), the run goes on to its evaluation (exit $brc)" \
    "$PY3" -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
step = [r for r in recs if r.get("step") == 1 and "loss" in r]
sys.exit(0 if sys.argv[2] == "0" and step and step[-1].get("guard") == "skip" and any("val_pass_at_1" in r for r in recs) else 1)' "$TMP/base/metrics.jsonl" "$brc"

# ---- 3-6: 2 ranks with the reward program under zero1; 4 ranks under zero3 and hsdp ----
# the step records' rollout figures of a run (rewards, pass rates, lengths, tied groups)
figures() { "$PY3" -c '
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if "grpo_reward_mean" in j:
        print(j["step"], *[j["grpo_" + k] for k in ("reward_mean", "reward_std", "pass_rate", "response_length", "tied_groups")])' "$1"; }
# the completions of step 1, as tokens and rewards
step1() { "$PY3" -c '
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j["step"] == 1: print(j["position"], j["sample"], j["tokens"], j["reward"])' "$1"; }
"${MPIRUN[@]}" -np 2 "$TRAIN" "${grpo[@]}" --init-from "$TMP/sft" "${kl[@]}" --set run_dir="$TMP/r2" \
    --set parallel.sharding=zero1 --set reward.kind=command \
    --set reward.command="$PY3 $TSR_ROOT/tests/train/grpo_reward.py" >"$TMP/r2.log" 2>&1
tap_ok "2 ranks under zero1, rewards from a program per rank: the same rewards, pass rates and lengths at all 12 steps as 1 rank" \
    diff <(figures "$TMP/r1/metrics.jsonl") <(figures "$TMP/r2/metrics.jsonl")
tap_ok "2 ranks: step 1's 128 completions the same tokens and rewards as 1 rank's" \
    diff <(step1 "$TMP/r1/completions.jsonl") <(step1 "$TMP/r2/completions.jsonl")
# 4 ranks under zero3 and under hsdp (2 replicas of groups of 2): the weights gathered for the
# rollouts, the frozen reference a shard of its own gathered unit by unit (docs/rl.md), 2 steps
r4() { "${MPIRUN[@]}" -np 4 "$TRAIN" "${grpo[@]}" --init-from "$TMP/sft" "${kl[@]}" --set run_dir="$TMP/$1" \
    --set max_duration=2ba --set save_interval=0ba --set eval_interval=0ba --set micro_batch=4 \
    "${@:2}" >"$TMP/$1.log" 2>&1; }
r4 r4 --set parallel.sharding=zero3
rc=$?
r4 rh --set parallel.sharding=hsdp --set parallel.replica_group=2
rh=$?
((rc == 0 && rh == 0)) && diff <(step1 "$TMP/r1/completions.jsonl") <(step1 "$TMP/r4/completions.jsonl") &&
    diff <(step1 "$TMP/r1/completions.jsonl") <(step1 "$TMP/rh/completions.jsonl")
tap_check $? "4 ranks under zero3 and under hsdp 2x2: step 1's 128 completions the same tokens and rewards as 1 rank's, the steps trained (exit $rc, $rh)"
# (steps 1-2 against 1 rank's: the loss, a sum of terms that cancel over each group's advantages
# (about 1e-3 here), within 1e-6 absolute (1e-7 apart measured); the grad norm within 1e-5 relative
# (1.6e-6 measured: the reductions' order differs); the mean KL, a small difference of two
# log-probabilities, within 1e-4 relative (2.6e-6 measured); step 2's KL, to the initial weights
# after step 1's 2 updates, is not 0)
close_kl() { "$PY3" -c '
import json, sys
def steps(p): return {j["step"]: j for j in map(json.loads, open(p)) if "loss" in j and j["step"] <= 2}
a, b = steps(sys.argv[1]), steps(sys.argv[2])
rel = lambda x, y, tol=1e-5: abs(x - y) <= tol * max(abs(x), abs(y))
ok = sorted(a) == sorted(b) == [1, 2] and a[2]["grpo_kl"] > 0 and all(
    abs(a[k]["loss"] - b[k]["loss"]) <= 1e-6 and rel(a[k]["grad_norm"], b[k]["grad_norm"]) and
    rel(a[k]["grpo_kl"], b[k]["grpo_kl"], 1e-4) for k in (1, 2))
print("# %s: step 2 loss %.9g vs %.9g, grad norm %.9g vs %.9g, KL %.9g vs %.9g" % (sys.argv[3],
      a[2]["loss"], b[2]["loss"], a[2]["grad_norm"], b[2]["grad_norm"], a[2]["grpo_kl"], b[2]["grpo_kl"]))
sys.exit(0 if ok else 1)' "$TMP/r1/metrics.jsonl" "$TMP/$1/metrics.jsonl" "$2"; }
close_kl r2 zero1 && close_kl r4 zero3 && close_kl rh hsdp
tap_check $? "with the KL term (grpo.kl_coef = 0.04, the frozen initial weights): zero1 on 2 ranks, zero3 and hsdp 2x2 on 4 give 1 rank's loss, grad norm and KL at steps 1-2 (KL > 0 at step 2)"

# ---- 7-8: SIGKILL at a random step, resumed bit for bit ----
k=$((5 + RANDOM % 7))
from=$((k / 4 * 4))
# (save_async = false in the killed run: its last periodic save is committed before the kill; a
# background save may still be in flight then: tests/ckpt/test_ckpt_async_kill.sh)
TSR_FAULT="kill:$k:0" run "${kl[@]}" --set run_dir="$TMP/rk" --set save_async=false >"$TMP/rk1.log" 2>&1
run "${kl[@]}" --set run_dir="$TMP/rk" >"$TMP/rk2.log" 2>&1
tap_ok "SIGKILL after step $k: the rerun resumes from step $from and finishes" \
    grep -q "checkpoint resume step $from " "$TMP/rk2.log"
# each step's loss, norm and rollout figures, the last line logged for it (a step is logged twice
# when a run resumes before it)
steps_from() { "$PY3" -c '
import json, sys
last = {}
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j.get("step", 0) >= 5 and "loss" in j:
        last[j["step"]] = [j[k] for k in ("loss", "grad_norm", "lr", "grpo_reward_mean", "grpo_pass_rate",
                           "grpo_response_length", "grpo_entropy", "grpo_kl", "grpo_clip_fraction")]
for k in sorted(last): print(k, *last[k])' "$1"; }
same_tensors "$(ck "$TMP/r1" 12)" "$(ck "$TMP/rk" 12)"
t=$?
diff <(steps_from "$TMP/r1/metrics.jsonl") <(steps_from "$TMP/rk/metrics.jsonl") >/dev/null
tap_ok "the resumed run = the uninterrupted one bit for bit (final checkpoint's tensors; steps 5-12's metrics)" \
    test $((t + $?)) -eq 0

# ---- 9-12: the reward program misbehaving at step 2 ----
bad() { # MODE WANT [SET...]: the run stops at step 2 with exit 2, quoting the exchange; step 1 stands
    local d="$TMP/bad_$1"
    GRPO_REWARD_MODE=$1 GRPO_REWARD_AT=129 run --set run_dir="$d" --set save_interval=1ba \
        --set reward.kind=command --set reward.timeout=2 \
        --set reward.command="$PY3 $TSR_ROOT/tests/train/grpo_reward.py" "${@:3}" >"$d.log" 2>&1
    local rc=$?
    grep -q "$2" "$d.log" && grep -q 'it was sent: {"id": ' "$d.log" &&
        grep -q "no completion is scored 0" "$d.log" && ((rc == 2)) &&
        [[ $(cat "$d/latest") == *step-00000001.h5 ]] &&
        ! grep -q '"step": 2' "$d/metrics.jsonl" || { tail -3 "$d.log"; return 1; }
}
bad crash "it exited with status 3"
g=$?
bad hog "it exited with status 1 (its memory is bounded by reward.memory_mib = 300)" --set reward.memory_mib=300
tap_ok "the program crashes at step 2, or allocates 1 GiB under reward.memory_mib = 300: exit 2, 'exited with status 3' / '1', the exchange quoted, step 1's checkpoint stays latest" \
    test $((g + $?)) -eq 0
# hanging, the program is a shell's child (not exec'd): stopping its process group ends it too
# (with the hang watchdog on, above reward.timeout: reward.timeout's exit 2 comes first, no warning)
bad hang "no answer within reward.timeout = 2 s" --set watchdog.hang_timeout=5 \
    --set reward.command="$PY3 $TSR_ROOT/tests/train/grpo_reward.py $TMP/hang-marker; :"
g=$?
! grep -q 'is not above reward.timeout' "$TMP/bad_hang.log" || g=1
left=$(pgrep -f "$TMP/hang-marker" || true)
[[ -z $left ]] || kill $left
tap_ok "it hangs, started by a shell: exit 2 after reward.timeout = 2 s (watchdog.hang_timeout = 5), quoted; nothing of it left running${left:+ (left: $left)}" \
    test -z "$left" -a $g -eq 0
bad garbage 'it answered: this is not json'
g=$?
bad long 'longer than 65536 bytes'
tap_ok "it answers a line that is not JSON, or one of 70000 bytes: exit 2, the line quoted" test $((g + $?)) -eq 0
bad wrong_id 'an id it was not sent'
g=$?
bad nan 'it answered a line that is not a JSON object'
tap_ok "it answers an id it was not sent, or a reward that is not a number: exit 2, quoted" test $((g + $?)) -eq 0

# ---- 13-14: the figures ----
tap_ok "metrics.jsonl: each step's grpo_reward_mean, pass_rate, response_length, kl, clip_fraction, entropy, rollout_tokens_per_s; the held-out pass@1" \
    "$PY3" -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in recs if "grpo_reward_mean" in r]
keys = ["grpo_" + k for k in ("reward_mean", "reward_std", "pass_rate", "response_length", "kl",
        "clip_fraction", "entropy", "rollout_tokens_per_s", "rollout_s", "train_s")]
ok = len(steps) == 12 and all(all(k in r for k in keys) for r in steps)
ok = ok and steps[0]["grpo_rollout_tokens_per_s"] > 0 and steps[0]["grpo_entropy"] > 0
ok = ok and any("val_pass_at_1" in r for r in recs)
sys.exit(0 if ok else 1)' "$TMP/r1/metrics.jsonl"

if command -v gnuplot >/dev/null; then
    "$TOOL" report "$TMP/r1" -o "$TMP/rep" >"$TMP/rep.txt" 2>&1 && [[ -s $TMP/rep/grpo.png ]] &&
        grep -q "^pass@1: .* -> .* (step 12)" "$TMP/rep.txt" &&
        grep -q "GRPO loss (the clipped" "$TMP/rep/plots.gp" && ! grep -q nats "$TMP/rep/plots.gp"
    tap_check $? "tessera report draws grpo.png (mean reward, pass rate, held-out pass@1) and sums up the pass@1; its loss axis names the GRPO loss, not nats/token"
else
    tap_skip "tessera report draws grpo.png" "gnuplot is not installed"
fi

# ---- 15: generation tasks in tessera eval ----
# the held-out prompts as an LLM Foundry generation_task_with_answers file: every other line with a
# wrong answer and the right one an alias ("14." normalised to "14")
"$PY3" -c '
import json, sys
with open(sys.argv[2], "w") as f:
    for i, l in enumerate(open(sys.argv[1])):
        j = json.loads(l); a = str(j["answer"])
        f.write(json.dumps({"context": j["prompt"], "answer": "no " + a if i % 2 else a + ".",
                            "aliases": [a + "!"] if i % 2 else []}) + "\n")' "$TMP/ar/heldout.jsonl" "$TMP/gen.jsonl"
# (a config of what to evaluate only: the model and seq_len come from the checkpoint)
cat >"$TMP/gen.cfg" <<CFG
icl_tasks = ( { label = "arith"; type = "generation_task_with_answers"; path = "$TMP/gen.jsonl";
                continuation_delimiter = ""; } );
CFG
ev=(--config "$TMP/gen.cfg" --set data.tokenizer="$TMP/tok.tsr" --set micro_batch=8 --set data.val=
    --set eval_interval=0ba --set threads=1)
acc() { "$PY3" -c 'import json,sys; print(json.load(open(sys.argv[1]))["icl"][0]["accuracy"])' "$1"; }
"$TOOL" eval --ckpt "$TMP/r1" "${ev[@]}" --out "$TMP/gen1.json" >/dev/null 2>"$TMP/gen1.err" &&
    "${MPIRUN[@]}" -np 2 "$TOOL" eval --ckpt "$TMP/r1" "${ev[@]}" --out "$TMP/gen2.json" >/dev/null 2>"$TMP/gen2.err"
tap_diag "tessera eval, generation_task_with_answers: $(acc "$TMP/gen1.json" 2>/dev/null) (1 rank), $(acc "$TMP/gen2.json" 2>/dev/null) (2 ranks); the run's held-out pass@1 $a"
tap_ok "tessera eval: a generation_task_with_answers task of the held-out prompts (answers and aliases normalised) scores the run's held-out pass@1, on 1 and 2 ranks" \
    "$PY3" -c "import sys; sys.exit(0 if $(acc "$TMP/gen1.json" 2>/dev/null || echo -1) == $(acc "$TMP/gen2.json" 2>/dev/null || echo -2) == $a else 1)"

# ---- 16: the device decode on the emulator ----
if [[ -x $BUILD/tests/tessera-train-cuemu ]]; then
    "$BUILD/tests/tessera-train-cuemu" "${grpo[@]}" --init-from "$TMP/sft" --set device=cuda \
        --set run_dir="$TMP/rc" --set max_duration=1ba --set save_interval=0ba \
        --set eval_interval=0ba >"$TMP/rc.log" 2>&1
    tap_ok "device = cuda (emulator): step 1's completions >= 80% the same tokens as the CPU's, their log-probabilities within 0.03 n + 0.02 |logp| (n tokens)" \
        "$PY3" -c '
import json, sys
def rows(p): return {(j["position"], j["sample"]): j for j in map(json.loads, open(p)) if j["step"] == 1}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
same = [k for k in a if k in b and a[k]["tokens"] == b[k]["tokens"]]
tol = lambda k: 0.03 * len(a[k]["tokens"]) + 0.02 * abs(a[k]["logprob"])
bad = [k for k in same if not abs(a[k]["logprob"] - b[k]["logprob"]) <= tol(k)]
worst = max(abs(a[k]["logprob"] - b[k]["logprob"]) / tol(k) for k in same)
print("# %d of %d completions the same tokens; %d of them with log-probabilities apart (worst %.2f of the tolerance)" % (len(same), len(a), len(bad), worst))
sys.exit(0 if len(a) == 128 and len(same) >= 0.8 * len(a) and not bad else 1)' "$TMP/r1/completions.jsonl" "$TMP/rc/completions.jsonl"
    # 17: TSR_DECODE_GEMM=1 (issue 66 item 3, the measurement switch): the rollouts' linear layers
    # at 8 rows or more through the GEMM (the profile's matmul_forward calls of 16 rows; no
    # matmul_rows call of 16), said at start, and the completions those of the per-row products
    # (the same bf16 inputs summed in another order)
    TSR_DECODE_GEMM=1 TSR_PROFILE=1 "$BUILD/tests/tessera-train-cuemu" "${grpo[@]}" \
        --init-from "$TMP/sft" --set device=cuda --set run_dir="$TMP/rg" --set max_duration=1ba \
        --set save_interval=0ba --set eval_interval=0ba --set grpo.rollout_batch=16 >"$TMP/rg.log" 2>&1
    rc=$?
    grep -E '^matmul_(rows|forward) +(8|16)x' "$TMP/rg.log" | head -4 | sed 's/^/# /'
    ((rc == 0)) && grep -q 'TSR_DECODE_GEMM = "1"' "$TMP/rg.log" &&
        ! grep -qE 'matmul_rows +16x' "$TMP/rg.log" && grep -qE 'matmul_forward +16x' "$TMP/rg.log" &&
        "$PY3" -c '
import json, sys
def rows(p): return {(j["position"], j["sample"]): j for j in map(json.loads, open(p)) if j["step"] == 1}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
same = [k for k in a if k in b and a[k]["tokens"] == b[k]["tokens"]]
print("# TSR_DECODE_GEMM=1: %d of %d completions the tokens of the per-row products" % (len(same), len(a)))
sys.exit(0 if len(a) == 128 and len(same) >= 0.9 * len(a) else 1)' "$TMP/rc/completions.jsonl" "$TMP/rg/completions.jsonl"
    tap_check $? "TSR_DECODE_GEMM=1 (emulator): said at start; the rollouts' 16-row linear layers run the GEMM (matmul_forward), none the per-row product; >= 90% of the completions the per-row products' tokens"
else
    tap_skip "device = cuda on the emulator" "no $BUILD/tests/tessera-train-cuemu"
    tap_skip "TSR_DECODE_GEMM=1 on the emulator" "no $BUILD/tests/tessera-train-cuemu"
fi
tap_done
