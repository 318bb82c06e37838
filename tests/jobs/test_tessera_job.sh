#!/usr/bin/env bash
# tessera-job with hostile values, no Slurm needed: every shipped template is filled with values
# holding spaces, quotes, ;, $(), backticks, newlines and @KEY@ text, then the generated script's
# shell part is executed with recording stand-ins for the external programs it calls (srun,
# tessera-train, tessera, tessera-healthcheck, module): the program's argv must equal the values
# byte for byte and no planted command may run. #SBATCH values that sbatch cannot take are refused
# with exit 1 naming the key; ACCOUNT, PARTITION, QOS, RESERVATION, CONSTRAINT, MEM and
# GPUS_PER_NODE, when not given, leave no #SBATCH line; EXTRA_SBATCH adds directives (never one the
# template sets); the scripts load the module TESSERA_MODULE (tessera-job's own). A sweep's tasks:
# their settings checked by the trainer's dry run when rendering (a misspelt key refused, naming it).
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 24
J=$TSR_ROOT/jobs/tessera-job

# stand-ins: srun writes its argv, NUL-terminated, to $TMP/argv and exits 0
BIN=$TMP/bin
mkdir -p "$BIN" "$TMP/root/share/tessera/jobs/lib"
ln -s "$TSR_ROOT/jobs/lib/tessera-job.sh" "$TMP/root/share/tessera/jobs/lib/tessera-job.sh"
printf '#!/bin/sh\nprintf "%%s\\0" "$@" >"$ARGV_OUT"\nexit 0\n' >"$BIN/srun"
printf '#!/bin/sh\necho "tessera-train 0.0-stub"\n' >"$BIN/tessera-train"
printf '#!/bin/sh\nexit 0\n' >"$BIN/tessera"
printf '#!/bin/sh\nexit 0\n' >"$BIN/tessera-healthcheck"
chmod +x "$BIN"/*

# the hostile values: each one plants a command that would create a file under $TMP/pwned
P=$TMP/pwned
v_run="/scratch/my run; touch $P-semi \$(touch $P-subst) \`touch $P-tick\` 'single' \"double\" &"
v_cfg="$TMP/cfg dir/it's
touch $P-newline
@RUN_DIR@ \\ \$HOME ~ *"
v_init="-x \${PATH} %s \\n	tab|pipe>redir<in #hash"
v_ckpt=$'trailing newline\n'
# shellcheck disable=SC2088 # a literal ~, quoted on purpose
v_out="~/out.json"
base=(NODES=2 TASKS_PER_NODE=4 GPUS_PER_NODE=0 CPUS_PER_TASK=1 WALLTIME=0:10:00)

# run_job NAME: execute $TMP/NAME.sbatch as sbatch would start it (bash, in a job), argv to
# $TMP/NAME.argv; returns the script's exit status
run_job() {
    (cd "$TMP" && env -i PATH="$BIN:/usr/bin:/bin" HOME="$TMP" TESSERA_ROOT="$TMP/root" ${JOB_ENV[@]+"${JOB_ENV[@]}"} \
        SLURM_JOB_ID=7 TSR_PREFLIGHT=off ARGV_OUT="$TMP/$1.argv" BASH_FUNC_module%%="() { :; }" \
        bash "$TMP/$1.sbatch" >"$TMP/$1.out" 2>&1)
}
# argv_is NAME ARG...: the recorded argv equals ARG... exactly
argv_is() {
    local name=$1 got=()
    shift
    [[ -f $TMP/$name.argv ]] || { tap_diag "$name: srun never ran: $(tail -3 "$TMP/$name.out")"; return 1; }
    mapfile -d '' -t got <"$TMP/$name.argv"
    if [[ ${#got[@]} != "$#" ]]; then tap_diag "$name: ${#got[@]} args, expected $#: $(printf '[%q] ' "${got[@]}")"; return 1; fi
    local i=0 a
    for a in "$@"; do
        [[ ${got[i]} == "$a" ]] || { tap_diag "$name: arg $i is $(printf %q "${got[i]}"), expected $(printf %q "$a")"; return 1; }
        i=$((i + 1))
    done
}
no_pwned() { ! compgen -G "$P*" >/dev/null || { tap_diag "planted commands ran: $(ls "$P"*)"; return 1; }; }
# checks NAME: bash -n and (when installed) shellcheck on the generated script
syntax_ok() {
    bash -n "$TMP/$1.sbatch" || return 1
    # SC2088: a value with a leading ~ is the literal the user quoted, not a forgotten $HOME
    if command -v shellcheck >/dev/null; then shellcheck -S warning -e SC2088 -x "$TMP/$1.sbatch" || return 1; fi
}

# each template, hostile values, the shell part executed
"$J" pretrain "${base[@]}" RUN_DIR="$v_run" CONFIG="$v_cfg" >"$TMP/pretrain.sbatch" && syntax_ok pretrain &&
    run_job pretrain && argv_is pretrain --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores tessera-train --config "$v_cfg" \
    --set "run_dir=$v_run" --set threads=0 && no_pwned
tap_check $? "pretrain: RUN_DIR and CONFIG with ; \$() backticks quotes newline @KEY@ reach tessera-train byte for byte, nothing planted runs"
"$J" finetune "${base[@]}" RUN_DIR="$v_cfg" CONFIG="$v_run" INIT_FROM="$v_init" >"$TMP/finetune.sbatch" &&
    syntax_ok finetune && run_job finetune && argv_is finetune --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores tessera-train \
    --config "$v_run" --init-from "$v_init" --set "run_dir=$v_cfg" --set threads=0 && no_pwned
tap_check $? "finetune: RUN_DIR, CONFIG, INIT_FROM (leading -, \${}, tab, |, >, #) byte for byte"
"$J" rl "${base[@]}" RUN_DIR="$v_run" CONFIG="$v_cfg" INIT_FROM="$v_init" PROMPTS="$v_cfg" HELDOUT="" \
    REWARD="$v_run" >"$TMP/rl.sbatch" && syntax_ok rl && run_job rl && argv_is rl --mpi=pmix \
    --kill-on-bad-exit=1 tessera-train --config "$v_cfg" --init-from "$v_init" --set "run_dir=$v_run" \
    --set threads=0 --set "data.train=$v_cfg" --set data.val= --set reward.kind=command \
    --set "reward.command=$v_run" && no_pwned
tap_check $? "rl: PROMPTS, REWARD (a command line with ; \$() backticks) byte for byte, HELDOUT empty passed as empty, nothing planted runs"
"$J" rl "${base[@]}" RUN_DIR=r CONFIG=c INIT_FROM=i PROMPTS=p HELDOUT=h REWARD= >"$TMP/rl2.sbatch" &&
    run_job rl2 && argv_is rl2 --mpi=pmix --kill-on-bad-exit=1 tessera-train --config c --init-from i \
    --set run_dir=r --set threads=0 --set data.train=p --set data.val=h
tap_check $? "rl: REWARD empty: the recipe's reward, no reward.* override"
"$J" eval "${base[@]}" CKPT="$v_ckpt" CONFIG="$v_cfg" OUT="$v_out" >"$TMP/eval.sbatch" && syntax_ok eval &&
    run_job eval && argv_is eval --mpi=pmix --kill-on-bad-exit=1 tessera eval --config "$v_cfg" --ckpt "$v_ckpt" \
    --out "$v_out" --set threads=0 && no_pwned
tap_check $? "eval: a trailing newline and a leading ~ are kept as they are"
"$J" healthcheck NODES=2 GPUS_PER_NODE=0 WALLTIME=5 DRAIN= REPORT="$v_run" >"$TMP/hc.sbatch" && syntax_ok hc &&
    run_job hc && argv_is hc --mpi=pmix tessera-healthcheck --full --json "$v_run" && no_pwned
tap_check $? "healthcheck: DRAIN empty adds no argument; REPORT byte for byte"
"$J" healthcheck NODES=2 GPUS_PER_NODE=0 WALLTIME=5 DRAIN=--drain REPORT=r.json >"$TMP/hc2.sbatch" &&
    run_job hc2 && argv_is hc2 --mpi=pmix tessera-healthcheck --full --json r.json --drain
tap_check $? "healthcheck: DRAIN=--drain is passed as one argument"
"$J" healthcheck NODES=2 GPUS_PER_NODE=0 WALLTIME=5 DRAIN="--drain; touch $P-drain" REPORT=r.json >"$TMP/hc3.sbatch"
run_job hc3
rc=$?
((rc == 2)) && [[ ! -f $TMP/hc3.argv ]] && grep -q 'DRAIN=.*expected --drain or nothing' "$TMP/hc3.out" && no_pwned
tap_check $? "healthcheck: any other DRAIN stops the script (exit $rc) before srun"

# #SBATCH values sbatch cannot take: exit 1 naming the key, nothing printed
bad=("JOB_NAME=a
#SBATCH --uid=0" "JOB_NAME=my job" "JOB_NAME=x/y" "ACCOUNT=a b" "PARTITION=p;q" "NODES=0" "NODES=2#x"
     "TASKS_PER_NODE=-1" "CPUS_PER_TASK=1.5" "GPUS_PER_NODE=4 --exclusive" "WALLTIME=1:00:00 --wrap=id"
     "WALLTIME=1:99:00" "WALLTIME=" "STOP_SECONDS=70000" "STOP_SECONDS=0" "NODES=" "MEM=2GB" "MEM=-1"
     "QOS=a b" "CONSTRAINT=a#b" "CONSTRAINT=x y" "RESERVATION=r;x" "EXTRA_SBATCH=--time=5" "EXTRA_SBATCH=--requeue"
     "EXTRA_SBATCH=-N 2" "EXTRA_SBATCH=--comment=a#b" "EXTRA_SBATCH=--array=0-3" "EXTRA_SBATCH=--qos=x")
refused=0
for kv in "${bad[@]}"; do
    k=${kv%%=*}
    out=$("$J" pretrain "${base[@]}" RUN_DIR=r CONFIG=c "$kv" 2>"$TMP/err")
    rc=$?
    if ((rc == 1)) && [[ -z $out ]] && grep -q "$k" "$TMP/err"; then refused=$((refused + 1))
    else tap_diag "not refused (exit $rc): $(printf %q "$kv"): $(head -c 300 "$TMP/err")"; fi
done
((refused == ${#bad[@]}))
tap_check $? "$refused of ${#bad[@]} invalid #SBATCH values refused with exit 1 naming the key, nothing printed"
good=0
for kv in JOB_NAME=run-1.a_b+c NODES=2-4 GPUS_PER_NODE=a100:4 WALLTIME=90 WALLTIME=30:00 WALLTIME=1-0 \
    WALLTIME=2-12:30 WALLTIME=2-12:30:00 PARTITION=gpu,gpu-long ACCOUNT=proj_42 STOP_SECONDS=600 MEM=0 \
    'CONSTRAINT=[a100|h100]&ib*2' RESERVATION=maint,maint2; do
    v=${kv#*=}
    out=$("$J" pretrain "${base[@]}" RUN_DIR=r CONFIG=c "$kv" 2>"$TMP/err") &&
        [[ $out == *"=$v "* || $out == *"@$v "* ]] && good=$((good + 1)) || tap_diag "refused: $kv: $(cat "$TMP/err")"
done
((good == 14))
tap_check $? "valid #SBATCH values are taken as they are ($good of 14: ranges, TYPE:COUNT, Slurm's time formats, comma lists, memory units, feature expressions)"

out=$("$J" pretrain "${base[@]}" RUN_DIR=r CONFIG=c)
rc=$?
want=$(($(grep -c '^#SBATCH' "$TSR_ROOT/jobs/pretrain.sbatch") - 6))
((rc == 0)) && ! grep -q -- '--account\|--partition\|--qos\|--reservation\|--constraint\|--mem' <<<"$out" &&
    [[ $(grep -c '^#SBATCH' <<<"$out") == "$want" ]]
tap_check $? "ACCOUNT, PARTITION, QOS, RESERVATION, CONSTRAINT, MEM not given: their #SBATCH lines are left out (exit $rc)"
# site directives, a CPU job without GPUS_PER_NODE, EXTRA_SBATCH, the module version (the source
# tree's tessera-job: the default module; TESSERA_MODULE= another; installed: tests/install)
cpu=(NODES=2 TASKS_PER_NODE=4 CPUS_PER_TASK=1 WALLTIME=0:10:00)
ok=0
for t in pretrain finetune rl eval healthcheck; do
    case $t in
        healthcheck) own=(NODES=2 WALLTIME=5 DRAIN= REPORT=r) ;;
        eval) own=("${cpu[@]}" CKPT=k CONFIG=c OUT=o) ;;
        rl) own=("${cpu[@]}" RUN_DIR=r CONFIG=c INIT_FROM=i PROMPTS=p HELDOUT=h REWARD=) ;;
        finetune) own=("${cpu[@]}" RUN_DIR=r CONFIG=c INIT_FROM=i) ;;
        *) own=("${cpu[@]}" RUN_DIR=r CONFIG=c) ;;
    esac
    out=$("$J" "$t" "${own[@]}" QOS=high RESERVATION=maint 'CONSTRAINT=a100|h100' MEM=200G EXTRA_SBATCH=$'--mail-type=END,FAIL --mail-user=me@site.org\n--nice=10' 2>"$TMP/err")
    sb=$(sed '/^[^#]/,$d' <<<"$out" | grep '^#SBATCH')   # the directives sbatch reads: before the first command
    if [[ $? == 0 ]] && grep -q '^#SBATCH --qos=high ' <<<"$sb" && grep -q '^#SBATCH --reservation=maint ' <<<"$sb" &&
        grep -q '^#SBATCH --constraint=a100|h100 ' <<<"$sb" && grep -q '^#SBATCH --mem=200G ' <<<"$sb" &&
        [[ $(grep -A3 '^# EXTRA_SBATCH' <<<"$out") == "# EXTRA_SBATCH (tessera-job):
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=me@site.org
#SBATCH --nice=10" ]] && [[ $(tail -3 <<<"$sb") == "$(printf '#SBATCH %s\n' --mail-type=END,FAIL --mail-user=me@site.org --nice=10)" ]] &&
        ! grep -q -- '--gpus-per-node' <<<"$out" && grep -q '^TESSERA_MODULE=tessera ' <<<"$out" &&
        grep -q '^module load "$TESSERA_MODULE"$' <<<"$out" && ! grep -q '^module load tessera' <<<"$out"
    then ok=$((ok + 1)); else tap_diag "$t: $(head -c 300 "$TMP/err")"; fi
done
out=$("$J" pretrain "${cpu[@]}" RUN_DIR=r CONFIG=c TESSERA_MODULE=tessera/9.9)
((ok == 5)) && grep -q '^TESSERA_MODULE=tessera/9.9 ' <<<"$out" && "$J" --list pretrain | grep -q '^EXTRA_SBATCH  *optional'
tap_check $? "site directives QOS, RESERVATION, CONSTRAINT, MEM and EXTRA_SBATCH lines among the directives, no --gpus-per-node without GPUS_PER_NODE, module load \"\$TESSERA_MODULE\" ($ok of 5 templates)"
out=$("$J" eval "${base[@]}" CKPT=k CONFIG=c OUT=o ACCOUNT= PARTITION=debug)
rc=$?
((rc == 0)) && ! grep -q -- '--account' <<<"$out" && grep -q '^#SBATCH --partition=debug ' <<<"$out"
tap_check $? "ACCOUNT= (empty) leaves its line out; PARTITION=debug is written"
out=$("$J" --list pretrain)
grep -q '^ACCOUNT  *optional' <<<"$out" && grep -q '^PARTITION  *optional' <<<"$out" &&
    grep -q '^RUN_DIR  *required' <<<"$out" && grep -q '^NODES  *required' <<<"$out"
tap_check $? "--list says which keys are optional"

# what stays an error
err=$("$J" pretrain ACCOUNT=a 2>&1 >/dev/null)
rc=$?
err2=$("$J" pretrain "${base[@]}" RUN_DIR=r CONFIG=c BOGUS=1 2>&1 >/dev/null)
rc2=$?
[[ $rc == 1 && $err == *"no value for CONFIG CPUS_PER_TASK"* && $rc2 == 1 && $err2 == *"no placeholder @BOGUS@"* ]]
tap_check $? "missing values and unknown keys: exit 1 naming them ($err | $err2)"
# an option it does not know, first or after the template: exit 1 (the usage code, docs/cli.md), the
# program, the option and where to look, nothing printed
told=0
for args in "--bogus" "-x" "pretrain --bogus" "pretrain NODES=2 -v"; do
    read -ra a <<<"$args"
    out=$("$J" "${a[@]}" 2>"$TMP/err")
    rc=$?
    opt=${a[${#a[@]} - 1]}
    if ((rc == 1)) && [[ -z $out && $(<"$TMP/err") == "tessera-job: error: unknown option: $opt (see 'tessera-job --help')" ]]
    then told=$((told + 1))
    else tap_diag "tessera-job $args: exit $rc: $(head -c 300 "$TMP/err")"; fi
done
((told == 4))
tap_check $? "unknown options: exit 1, 'tessera-job: error: unknown option: OPT (see 'tessera-job --help')' ($told of 4)"
printf '#!/bin/bash\n#SBATCH --nodes=@NODES@\necho "dir: @RUN_DIR@"\n' >"$TMP/own.sbatch"
printf '#!/bin/bash\n# run in @RUN_DIR@\nX=1\n' >"$TMP/own2.sbatch"
err=$("$J" "$TMP/own.sbatch" NODES=1 RUN_DIR=r 2>&1 >/dev/null)
rc=$?
err2=$("$J" "$TMP/own2.sbatch" RUN_DIR=r 2>&1 >/dev/null)
rc2=$?
[[ $rc == 1 && $err == *"own.sbatch:3: placeholder outside"* && $rc2 == 1 && $err2 == *"own2.sbatch:2:"* ]]
tap_check $? "a template using a placeholder inside quotes or a comment is refused naming file:line ($err)"

# the shipped templates themselves, as templates
ok=0 all=0
for t in "$TSR_ROOT"/jobs/*.sbatch; do all=$((all + 1)); bash -n "$t" && ok=$((ok + 1)); done
((ok == all && all >= 5))
tap_check $? "the $all shipped templates parse (bash -n) as they are"
# ---- binding (tsr_bind) ----
JOB_ENV=(SLURM_GPUS_ON_NODE=4 TSR_THREADS=3)
run_job pretrain && argv_is pretrain --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores --gpu-bind=closest \
    tessera-train --config "$v_cfg" --set "run_dir=$v_run" --set threads=3 &&
    grep -q "binding: srun --cpu-bind=cores --gpu-bind=closest$" "$TMP/pretrain.out"
tap_check $? "a job with GPUs: --cpu-bind=cores --gpu-bind=closest, logged; TSR_THREADS"
JOB_ENV=(SLURM_GPUS_ON_NODE=4 TSR_CPU_BIND=none TSR_GPU_BIND=map_gpu:1,0)
run_job pretrain && argv_is pretrain --mpi=pmix --kill-on-bad-exit=1 --gpu-bind=map_gpu:1,0 \
    tessera-train --config "$v_cfg" --set "run_dir=$v_run" --set threads=0
tap_check $? "TSR_CPU_BIND=none leaves the CPU binding to the site; TSR_GPU_BIND names another GPU binding"
JOB_ENV=()

# ---- sweep: the array and each task's settings ----
"$J" sweep pretrain "${base[@]}" RUN_DIR="$v_run" CONFIG="$v_cfg" --grid optim.lr=1e-3,3e-3 \
    --grid "data.val=a b;touch $P-val,c" --max-parallel 2 >"$TMP/sweep.sbatch" && syntax_ok sweep &&
    grep -q '^#SBATCH --array=0-3%2$' "$TMP/sweep.sbatch" && grep -q '^#SBATCH --output=%x-%A_%a.log' "$TMP/sweep.sbatch" &&
    JOB_ENV=(SLURM_ARRAY_TASK_ID=1) && run_job sweep &&
    argv_is sweep --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores tessera-train --config "$v_cfg" \
        --set "run_dir=$v_run/1_lr=1e-3_val=c" --set threads=0 --set optim.lr=1e-3 --set data.val=c &&
    JOB_ENV=(SLURM_ARRAY_TASK_ID=2) && run_job sweep &&
    argv_is sweep --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores tessera-train --config "$v_cfg" \
        --set "run_dir=$v_run/2_lr=3e-3_val=a_b_touch_${P//[^A-Za-z0-9._=+-]/_}-val" --set threads=0 \
        --set optim.lr=3e-3 --set "data.val=a b;touch $P-val" && no_pwned
tap_check $? "sweep: a 2x2 grid is one --array=0-3%2 job, task 1 and task 2 run with their settings (byte for byte) in RUN_DIR/TASK"
JOB_ENV=()
bad=0
for a in "--grid run_dir=x,y" "--grid optim.lr=" "--grid Bad.Key=1" "--task optim.lr=1 --grid seed=1" "" \
    "--grid" "--max-parallel 0"; do
    # shellcheck disable=SC2086 # the words of each case
    "$J" sweep pretrain "${base[@]}" RUN_DIR=r CONFIG=c $a >"$TMP/bad.sbatch" 2>"$TMP/bad.err" && bad=$((bad + 1))
    [[ -s $TMP/bad.sbatch ]] && bad=$((bad + 1))
done
"$J" sweep eval "${base[@]}" CKPT=c CONFIG=c OUT=o --grid seed=1,2 >"$TMP/bad.sbatch" 2>"$TMP/bad.err" && bad=$((bad + 1))
grep -q "no RUN_DIR=@RUN_DIR@ line" "$TMP/bad.err" || bad=$((bad + 1))
((bad == 0))
tap_check $? "sweep refuses run_dir, an empty value, a bad key, --grid with --task, no setting, --grid without its value, --max-parallel 0, a template without RUN_DIR (exit 1, nothing printed)"
# one long name, one meaning (docs/cli.md): a sweep's task is --task; its old name --list (also
# `tessera-job --list TEMPLATE`, the keys) still renders the same script, with a warning naming
# --task; an option without its value says so in the one wording of every tessera program
"$J" sweep pretrain "${base[@]}" RUN_DIR=r CONFIG=c --task 'optim.lr=1e-3 seed=2' >"$TMP/task.sbatch" 2>"$TMP/task.err"
r1=$?
"$J" sweep pretrain "${base[@]}" RUN_DIR=r CONFIG=c --list 'optim.lr=1e-3 seed=2' >"$TMP/list.sbatch" 2>"$TMP/list.err"
r2=$?
"$J" sweep pretrain "${base[@]}" RUN_DIR=r CONFIG=c --task >"$TMP/miss.sbatch" 2>"$TMP/miss.err"
r3=$?
((r1 == 0 && r2 == 0 && r3 == 1)) && [[ ! -s $TMP/task.err && ! -s $TMP/miss.sbatch ]] &&
    grep -q '^#SBATCH --array=0-0$' "$TMP/task.sbatch" && cmp -s "$TMP/task.sbatch" "$TMP/list.sbatch" &&
    [[ $(<"$TMP/list.err") == "tessera-job: warning: sweep --list is --task now (--task 'optim.lr=1e-3 seed=2'); --list alone, 'tessera-job --list TEMPLATE', lists a template's keys" &&
       $(<"$TMP/miss.err") == "tessera-job: error: option --task needs a value (see 'tessera-job --help')" ]]
tap_check $? "sweep --task: one task; the old sweep --list: the same script and a warning naming --task; --task without a value: exit 1 'option --task needs a value' (exit $r1, $r2, $r3: $(head -c 200 "$TMP/list.err"))"
# each task's settings through the trainer's dry run when rendering (issue 65 item 9): a misspelt
# key, a bad value, a task the recipe refuses: exit 1 naming the task and the key, nothing printed
cat >"$TMP/sweep.cfg" <<CFG
max_duration = "10ba"; global_batch = 4; micro_batch = 2; seq_len = 32;
model = { n_layer = 1; d_model = 32; n_head = 2; vocab_size = 512; max_seq_len = 32; };
data = { train = "$TMP/no-data/train"; val = ""; tokenizer = ""; };
optim = { lr = 1e-3; };
CFG
errs=() bad=0
refused() { # PATTERN ARGS...: tessera-job sweep pretrain ARGS exits 1, prints nothing, says PATTERN
    local pat=$1
    shift
    "$J" sweep pretrain "${base[@]}" RUN_DIR=r "$@" >"$TMP/bad.sbatch" 2>"$TMP/bad.err" && bad=$((bad + 1))
    [[ -s $TMP/bad.sbatch ]] && bad=$((bad + 1))
    grep -qF -- "$pat" "$TMP/bad.err" || { bad=$((bad + 1)); tap_diag "not said: $pat; said: $(cat "$TMP/bad.err")"; }
    errs+=("$(head -c 120 "$TMP/bad.err")")
}
refused "tessera-job: error: sweep task 0 (0_lrr=1e-3): --set optim.lrr=1e-3: unknown key 'optim.lrr' (did you mean 'optim.lr'?)" \
    CONFIG="$TMP/sweep.cfg" --grid optim.lrr=1e-3,3e-3
refused "sweep task 1 (1_lr=1e-3_sed=2): --set sed=2: unknown key 'sed'" CONFIG="$TMP/sweep.cfg" \
    --task 'optim.lr=1e-3 seed=2' --task 'optim.lr=1e-3 sed=2'
refused "sweep task 1 (1_lr=abc): --set optim.lr=abc: expected a number" CONFIG="$TMP/sweep.cfg" --grid optim.lr=1e-3,abc
refused "sweep task 1 (1_micro_batch=3): $TMP/sweep.cfg:1: global_batch = 4 is not divisible by micro_batch = 3" \
    CONFIG="$TMP/sweep.cfg" --grid micro_batch=4,3
refused "sweep task 0 (0_lrr=1e-3): --set optim.lrr=1e-3: unknown key 'optim.lrr'" CONFIG="$TMP/elsewhere.cfg" \
    --grid optim.lrr=1e-3
"$J" sweep pretrain "${base[@]}" RUN_DIR=r CONFIG="$TMP/sweep.cfg" --grid optim.lr=1e-3,3e-3 \
    --grid micro_batch=2,4 >"$TMP/good.sbatch" && grep -q '^#SBATCH --array=0-3$' "$TMP/good.sbatch" || bad=$((bad + 1))
((bad == 0))
tap_check $? "sweep checks each task's settings by the trainer's dry run: a misspelt key in a --grid, in one --task task, a bad value, a task the recipe refuses, a misspelt key with a CONFIG not readable here (keys only): exit 1 naming the task, nothing printed; a good grid renders"
tap_done
