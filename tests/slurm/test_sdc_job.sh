#!/usr/bin/env bash
# Silent data corruption on a real, private Slurm (tests/slurm/cluster.sh: n1, n2 on this host),
# through the installed pretrain template, the hook and the health checker (docs/health.md,
# docs/slurm.md "3. The requeue loop"):
#  - a job of 2 ranks placed on n2, a bit flipped in n2's weights after step 20 (TSR_FAULT
#    flip:...:node=n2): the trainer's at-rest check catches it before step 21's update, names n2 and
#    exits 87 without a checkpoint of that state, setting aside the one of step 20;
#  - the hook drains n2 through tessera-healthcheck --sdc-report (reason "tessera-hc: sdc ..."),
#    requeues the job excluding n2; the rerun, on n1 with the same 2 ranks, resumes from step 10
#    (the newest checkpoint whose fingerprints agreed) and ends with the weights and moments of a
#    clean run at step 30, bit for bit;
#  - n2 passes the checker's burn, yet the HealthCheckProgram's --resume-own leaves it drained.
# Needs root and the Slurm packages (./INSTALL); skips otherwise. Stops the cluster it started.
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
# shellcheck source=slurm_lib.sh
source "$(dirname "$0")/slurm_lib.sh"
slurm_require
tsr_tmpdir
trap 'slurm_down; rm -rf "$TMP"' EXIT
tap_plan 6

export SLURM_TEST_CPUS=4
# shellcheck disable=SC2119
slurm_install_up SLURM_TEST_HC_INTERVAL=3600
phase "installed, cluster up"
eval "$(bash "$CLUSTER" env)"                     # OpenMPI across the two virtual nodes
export MODULEPATH=$PREFIX/share/modulefiles      # sbatch passes the environment to the job
export TSR_HC_LIMIT=60 TSR_PREFLIGHT=off OMPI_MCA_mpi_yield_when_idle=1

make_synth "$TMP/data" 512 200000
cat >"$TMP/job.cfg" <<CFG
seed = 7;
max_duration = "30ba";
global_batch = 8;
micro_batch = 2;
seq_len = 32;
eval_interval = "0ba";
save_interval = "10ba";
keep_last = 3;
log_interval = 1;
model = { n_layer = 2; d_model = 64; n_head = 4; vocab_size = 512; max_seq_len = 32; };
optim = { lr = 0.003; warmup = "5ba"; };
data = { train = "$TMP/data/train"; val = ""; tokenizer = ""; };
sample = { tokens = 0; };
parallel = { sharding = "ddp"; };
watchdog = { window = 0; };
CFG
# the clean run, outside Slurm: 2 ranks of the installed build
"${MPIRUN[@]}" -np 2 "$PREFIX/bin/tessera-train" --config "$TMP/job.cfg" --set run_dir="$TMP/ref" \
    --set threads=1 >"$TMP/ref.txt" 2>&1
tap_check $? "the clean reference run: 30 steps on 2 ranks"
phase "reference done"

mkdir -p "$TMP/jobs"
cd "$TMP/jobs" || exit 1
"$PREFIX/bin/tessera-job" pretrain JOB_NAME=sdc ACCOUNT=tessera-ci PARTITION=debug NODES=1 \
    TASKS_PER_NODE=2 GPUS_PER_NODE=0 CPUS_PER_TASK=1 WALLTIME=00:10:00 CONFIG="$TMP/job.cfg" \
    RUN_DIR="$TMP/run" >sdc.sbatch
node() { sinfo -h -N -n "$1" -o "%$2" | head -1; }     # node N T: state; node N E: reason
wait_for() { local end=$((SECONDS + $1)); shift; until "$@"; do ((SECONDS < end)) || return 1; sleep 0.5; done; }
running_on() { [[ $(field "$1" JobState) == RUNNING && $(field "$1" NodeList) == "$2" ]]; }
ended() { [[ $(field "$1" JobState) =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL)$ ]]; }

# n1 held, so that the first start lands on n2; released once it runs there
scontrol update nodename=n1 state=drain reason="test: hold"
j=$(sbatch --parsable --export=ALL,TSR_FAULT=flip:weights:qkvw:20:node=n2:20 sdc.sbatch)
wait_for 90 running_on "$j" n2
first=$(field "$j" NodeList)
scontrol update nodename=n1 state=resume
wait_for 240 ended "$j"
phase "job $j: $(field "$j" JobState)"
log=$TMP/jobs/sdc-$j.log
grep -q "step exited with 87" "$log" && grep -q "model/qkvw of rank [01] (node n2) changed at rest between the fingerprints taken after step 20" "$log" &&
    grep -q '"nodes": "n2"' "$TMP/run/sdc-culprit.json" && [[ -f $TMP/run/step-00000020.h5.sdc && $first == n2 ]]
tap_check $? "first start on ${first:-?}: the flip in n2's weights caught at rest before step 21, exit 87, culprit n2, the step-20 checkpoint set aside"

reason=$(node n2 E)
tap_diag "n2: $(node n2 T) '$reason'"
[[ $reason == "tessera-hc: sdc step 21 model/qkvw changed_at_rest" ]] && grep -q "culprit node(s) of .*: n2" "$log" &&
    grep -q "hc| n2 sdc FAIL 1 0 reports" "$log"
tap_check $? "the hook had n2 drained by the health checker's own path: '$reason'"

[[ $(field "$j" ExcNodeList) == n2 && $(field "$j" NodeList) == n1 ]] && grep -q "requeue excluding n2" "$log" &&
    grep -q "start 2, SLURM_RESTART_COUNT=1" "$log"
tap_check $? "requeued excluding n2 (ExcNodeList=$(field "$j" ExcNodeList)), second start on $(field "$j" NodeList)"

[[ $(field "$j" JobState) == COMPLETED ]] && grep -q "checkpoint resume step 10 " "$log" &&
    grep -q "fingerprints agreed" <("$TOOL" ckpt verify "$TMP/run" 2>&1) &&
    same_tensors "$TMP/ref/step-00000030.h5" "$TMP/run/step-00000030.h5"
tap_check $? "resumed on n1 with 2 ranks from step 10, the newest agreed checkpoint, finished: weights and moments at step 30 equal the clean run's bit for bit ($(field "$j" JobState))"

# the HealthCheckProgram wrapper as slurmd runs it on n2 (healthy: its burn passes)
env -i PATH=/usr/bin:/bin:/usr/sbin:/sbin SLURMD_NODENAME=n2 SLURM_CONF="$SLURM_CONF" \
    TESSERA_HC_DEFAULTS="$HC_DEFAULTS" TESSERA_HC_LOG="$HC_LOG" TESSERA_HC_CONFIG="$TESSERA_HC_CONFIG" \
    sh "$W/healthcheck.sh"
[[ $(node n2 T) == drained && $(node n2 E) == "$reason" ]] && grep -q "healthcheck node=n2 job=none: healthy" "$HC_LOG"
tap_check $? "n2 passes the checker's burn, yet its --resume-own leaves the sdc drain in place ($(node n2 T))"
tap_done
