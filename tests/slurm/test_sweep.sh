#!/usr/bin/env bash
# A sweep as a Slurm job array on the private test cluster (tests/slurm/cluster.sh), through the
# installed tessera-job, pretrain template, hook and modulefile (docs/site.md "Sweeps"):
#  - `tessera-job sweep pretrain ... --grid optim.lr=... --max-parallel 2` is one sbatch array of two
#    tasks (%2: both at once, beside each other), each training in its own RUN_DIR/TASK with its
#    own learning rate (its config.cfg says so);
#  - each task has its own requeue loop: both stop at step 40 (exit 85, a stop request as Slurm's
#    --signal gives), the hook requeues that array task (scontrol requeue JOB_TASK), it resumes at
#    step 40 and finishes (COMPLETED, SLURM_RESTART_COUNT=1, 2 starts in its metrics.jsonl);
#  - binding: the hook binds the ranks (--cpu-bind=cores) and the banner prints each rank's cores;
#  - what it cost: every start records its array task as its job; the task's Slurm comment is
#    the run's one-line summary (the hook's scontrol update after the step; scontrol show job); `tessera report` lists both starts, and says
#    sacct gave no answer (this cluster keeps no accounting), so nothing is reconciled;
#  - `tessera report --compare RUN_DIR/*`: one row per task;
#  - the script is a CPU job's (no --gpus-per-node) with MEM=64M and EXTRA_SBATCH's --nice=7, which
#    sbatch takes and scontrol shows, and it loads tessera/RELEASE, the installed tessera-job's own.
# Needs root and the Slurm packages (./INSTALL); skips otherwise. Stops the cluster it started.
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
# shellcheck source=slurm_lib.sh
source "$(dirname "$0")/slurm_lib.sh"
slurm_require
tsr_tmpdir
trap 'slurm_down; rm -rf "$TMP"' EXIT
tap_plan 7

# shellcheck disable=SC2119
slurm_install_up
eval "$(bash "$CLUSTER" env)"
export MODULEPATH=$PREFIX/share/modulefiles
export TSR_PREFLIGHT=off TSR_FAULT=usr1:40:0     # sbatch passes the environment to the tasks

make_synth "$TMP/data" 512 100000
cat >"$TMP/sweep.cfg" <<CFG
seed = 7;
max_duration = "80ba";
global_batch = 4;
micro_batch = 2;
seq_len = 32;
eval_interval = "0ba";
save_interval = "20ba";
log_interval = 20;
model = { n_layer = 1; d_model = 64; n_head = 4; vocab_size = 512; max_seq_len = 32; };
data = { train = "$TMP/data/train"; val = ""; tokenizer = ""; };
sample = { tokens = 0; };
CFG
mkdir -p "$TMP/jobs"
cd "$TMP/jobs" || exit 1
R=$TMP/sweep
# a CPU job (no GPUS_PER_NODE), with a site's memory request and directives of its own
"$PREFIX/bin/tessera-job" sweep pretrain JOB_NAME=lr-sweep PARTITION=debug NODES=1 TASKS_PER_NODE=1 \
    CPUS_PER_TASK=1 WALLTIME=00:10:00 CONFIG="$TMP/sweep.cfg" RUN_DIR="$R" MEM=64M \
    EXTRA_SBATCH='--nice=7 --mail-type=NONE' --grid optim.lr=1e-3,3e-3 --max-parallel 2 >sweep.sbatch
A=$(sbatch --parsable sweep.sbatch)
sub=$(scontrol show job "$A" 2>/dev/null)   # (the array as submitted)
done_all() { # until both tasks have ended (a requeued task goes back to PENDING in between)
    local end=$((SECONDS + 150)) s0 s1
    while ((SECONDS < end)); do
        s0=$(field "${A}_0" JobState) s1=$(field "${A}_1" JobState)
        [[ $s0 =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT)$ && $s1 =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT)$ ]] && break
        sleep 1
    done
    echo "$s0 $s1"
}
states=$(done_all)
[[ $states == "COMPLETED COMPLETED" && $(grep -c '^#SBATCH --array=0-1%2$' sweep.sbatch) == 1 ]] &&
    grep -q 'lr = 0.001;' "$R/0_lr=1e-3/config.cfg" && grep -q 'lr = 0.003;' "$R/1_lr=3e-3/config.cfg"
tap_check $? "one array job $A of 2 tasks, both COMPLETED ($states), each in RUN_DIR/TASK with its learning rate"
REL=$(cat "$TSR_ROOT/VERSION")
[[ $sub == *"Nice=7"* && $sub == *"MinMemoryNode=64M"* && $sub != *"gres/gpu"* ]] && ! grep -q -- --gpus-per-node sweep.sbatch &&
    grep -q "^TESSERA_MODULE=tessera/$REL " sweep.sbatch && [[ $states == "COMPLETED COMPLETED" ]]
tap_check $? "sbatch takes the script of a CPU job without --gpus-per-node, with MEM=64M and EXTRA_SBATCH's --nice=7 (scontrol: $(grep -o 'Nice=[^ ]*\|MinMemoryNode=[^ ]*' <<<"$sub" | tr '\n' ' ')); its tasks ran on the module tessera/$REL"

ok=0
for k in 0 1; do
    log=lr-sweep-${A}_$k.log d=$(ls -d "$R/${k}_"*)
    grep -q "step exited with 85" "$log" && grep -q "requeue: scontrol requeue ${A}_$k" "$log" &&
        grep -q "SLURM_RESTART_COUNT=1" "$log" && grep -q "checkpoint resume step 40" "$log" &&
        [[ $(grep -c '"event": "start"' "$d/metrics.jsonl") == 2 && $(final_lines "$d/metrics.jsonl" | wc -l) == 80 ]] &&
        ok=$((ok + 1))
done
((ok == 2)) || tail -25 "lr-sweep-${A}_1.log" | sed 's/^/# /'
tap_check $((ok != 2)) "each task its own requeue loop: stopped at 40 (85), requeued as ${A}_k, resumed at 40, 80 steps in 2 starts"

log=lr-sweep-${A}_1.log
grep -q "binding: srun --cpu-bind=cores$" "$log" && grep -q "| 1 thread per rank" "$log" &&
    grep -qE "^rank 0 on [^:]+: cpus [0-9,-]+ \([0-9]+ cores?\) \| NUMA [0-9,-]+ \| GPU -" "$log"
tap_check $? "binding: srun --cpu-bind=cores, 1 thread (the task's 1 CPU), the banner's line of rank 0's cores, NUMA node and GPU"

d=$(ls -d "$R/1_"*)
jobs_ok=$(grep -c "\"job\": \"${A}_1\"" "$d/metrics.jsonl")
comment=$(scontrol show job "${A}_1" 2>/dev/null | grep -o 'Comment=.*' | head -1)
[[ $jobs_ok == 2 ]] && [[ $comment == "Comment=tessera: 80 steps, 2 starts, 0 GPU-h, "*"goodput "* ]] &&
    grep -q "comment of ${A}_1: tessera: 80 steps, 2 starts" "$log"
tap_check $? "both starts record job ${A}_1; the task's comment is the run's summary ($comment)"

"$PREFIX/bin/tessera" report "$d" >"$TMP/rep.txt" 2>&1
grep -qE "^ +2 +40 +${A}_1 " "$TMP/rep.txt" && grep -q "sacct:  no answer for jobs ${A}_1 (exit" "$TMP/rep.txt"
tap_check $? "tessera report: both starts of ${A}_1; sacct (no accounting storage here) gives no answer, nothing reconciled"

"$PREFIX/bin/tessera" report --compare "$R"/*_lr=* >"$TMP/cmp.txt" 2>&1
rc=$?
sed 's/^/# /' "$TMP/cmp.txt" | head -4
[[ $rc -le 2 ]] && grep -qE '^0_lr=1e-3 +80 ' "$R/compare/compare.txt" && grep -qE '^1_lr=3e-3 +80 ' "$R/compare/compare.txt"
tap_check $? "tessera report --compare RUN_DIR/*: one row per task at step 80 (exit $rc)"
tap_done
