#!/usr/bin/env bash
# run.sh — tessera's test runner (make check). Runs every test program and script, reads their TAP
# lines ("ok N - ...", "not ok N - ...", "# SKIP"), and ends with "N passed, N failed, N skipped".
#   C tests:      build/tests/test_*           shell tests: tests/**/test_*.sh
#   python tests: tests/**/test_*.py (Debian's /usr/bin/python3, for torch and h5py)
# A test program that exits non-zero, or runs fewer checks than its plan, adds one failure.
# Exit 77 without TAP output counts as one skip. TESTS="name ..." runs only those (substring).
set -uo pipefail
cd "$(dirname "$0")/.."
export TSR_ROOT=$PWD BUILD=${BUILD:-build} PYTHON=${PYTHON:-/usr/bin/python3}
source "$TSR_ROOT/tests/ompi_session.sh"
# torch in the reference tests loads Debian's OpenBLAS, which mis-detects this CPU (tessera's own
# programs fix that themselves, src/base/blas_env.c); python has no such hook, so set it here when the
# CPU has AVX-512 and nobody chose a core.
if [[ -z ${OPENBLAS_CORETYPE:-} ]] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    export OPENBLAS_CORETYPE=SkylakeX
fi
TIMEOUT=${TEST_TIMEOUT:-900}
logdir=$BUILD/test-logs
mkdir -p "$logdir"

tests=()
for f in "$BUILD"/tests/test_*; do [[ -x $f ]] && tests+=("$f"); done
while IFS= read -r f; do tests+=("$f"); done < <(find tests -name 'test_*.sh' -o -name 'test_*.py' | sort)

# Two lanes (TEST_LANES, default 2 where there are 2 cores or more, else 1): most tests spend much
# of their time below one core (process starts, mpirun, waits on files, single-threaded node and
# python), so two at a time finish the suite sooner than one after another. A test in SOLO runs
# alone, after the others, nothing beside it:
#   - its own Slurm cluster or daemons (tests/slurm/, test_prometheus's node exporter), the health
#     checker's measurements against thresholds (tests/healthcheck/), timing windows: a signal or
#     a kill caught during a save or a stall, a file deleted mid-run, a background save that must
#     outlast steps, a signal or the hang watchdog during a wait for a slow store (tests/faults/,
#     test_ckpt_signal, test_ckpt_async, test_ckpt_async_kill, test_ckpt_damage, test_staging,
#     test_resume, test_job_hook, test_s3_wait), step times and ETAs judged by the clock
#     (test_resume_timing), a time-capped fuzzer (tests/fuzz/), the CPU health checks of
#     test_hc_gpu; the free memory read once before a large allocation (test_alltoallv);
#   - a make in this checkout that builds (test_demo, test_fuzz_regress; the builds of
#     tests/install/ are IDLE, below). test_make_noapt (its makes stop at the dependency check,
#     BUILD and PREFIX temporary) and test_standalone (make install of the build into a temporary
#     PREFIX, as test_install does beside the lanes) share the lanes since 2026-11-28: 26 s and 4 s
#     of the alone phase, all CPU;
#   - the two tests made of many short runs of 2 to 4 ranks, test_cuda_train (13 such runs
#     among 75 starts) and test_moe_ep (24 runs of 2 and 4 ranks): beside another test their
#     ranks, on 2 cores with its processes, wait on each other's turns at every collective. The
#     CI of 2026-11-28 (evening) ran them in the lanes in 203 s for 55 CPU-s and 137 s for 50
#     CPU-s; test_cuda_train took 35 s for 34 CPU-s alone on the idle machine the next day (the
#     same machine with one busy loop beside it: 75 s for 50 CPU-s). Alone, they cost the alone
#     phase what they compute; in the lanes they held one lane for about 340 s;
#   - multi-rank runs of 150 steps or more with the straggler watchdog on (a rank 2x slower than
#     the other for 3 windows of 50 steps stops the run; a run of 2 ms steps measured 1.06-1.48x
#     between its ranks beside another test, 2026-11-26); and test_matmul_floor (a timed
#     product). test_eval, test_generate_gqa, test_icl_train, test_sft and test_mixing, here
#     for that once, share the lanes since 2026-11-28: each of their runs sets
#     watchdog.window = 0, as tests/lib.sh's tiny_args does.
# A new test that does any of these belongs here.
SOLO=(tests/slurm/ tests/healthcheck/ tests/faults/ tests/fuzz/ tests/cli/test_demo.sh
      tests/ckpt/test_ckpt_signal.sh tests/ckpt/test_ckpt_damage.sh tests/ckpt/test_ckpt_async.sh
      tests/ckpt/test_ckpt_async_kill.sh tests/ckpt/test_ckpt_diskfull0.sh tests/train/test_staging.sh
      tests/resume/test_resume.sh tests/resume/test_resume_timing.sh tests/jobs/test_job_hook.sh
      tests/gpu/test_hc_gpu.sh tests/mpi/test_alltoallv.sh tests/tools/test_matmul_floor.sh
      tests/tools/test_prometheus.sh tests/gpu/test_cuda_train.sh tests/train/test_moe_ep.sh
      tests/s3/test_s3_wait.sh)
# A test in BESIDE runs during the shared phase, in a lane of its own beside the LANES (one such
# test at a time, in this order): tests of the SOLO kind (their own private Slurm cluster) whose
# time is mostly a wait on Slurm's clocks (the 30 s time-limit check, requeue delays, the
# scheduler's intervals), a light load beside the others (CI of 2026-11-27: 278 s alone). Their
# health checks judge against thresholds far below a shared CPU's (tests/slurm/slurm_lib.sh), and
# their compared runs have no watchdog; their make install into a temp PREFIX only reads the
# build, which no shared test writes. test_install (13 s: make install into its own temp dir, no
# daemon) runs there too. test_isolation stays SOLO: it counts the host's Slurm and munge daemons,
# which another cluster beside it would change.
BESIDE=(tests/slurm/test_jobs.sh tests/slurm/test_sweep.sh tests/slurm/test_hc_drain.sh
        tests/slurm/test_sdc_job.sh tests/slurm/test_install.sh)
# A test in IDLE runs in that same lane during the alone phase, under `nice -n 19`: a build of its
# own into its own directory (build-aarch64/, a temp dir: the build the others run is only read)
# with no check on time, so it takes only what the test run alone leaves. The alone phase of the
# CI of 2026-11-28 used 1.1 of the 2 cores (520 CPU-s in 475 s): about 430 CPU-s were idle, and
# these two need about 225 (108 and 117 CPU-s). They ran beside the shared phase before (CI of
# 2026-11-28: 1213 s, 2074 CPU-s), where the lanes want both cores; nice 19 weighs 15 against a
# test's 1024, so a test run alone loses about 1.5% of the core it shares with one, and a test
# that wants both cores (spinning MPI or OpenMP waits, as tests run alone keep) leaves them
# nothing. After the last test run alone, the one still running gets the runner's priority back
# (unnice_beside, below) and the run waits for it. Their time-out is twice the others'.
# test_demo (it re-prepares data/brown, which shared tests read) and test_fuzz_regress (its
# fuzzers' time caps) stay SOLO: the builds only read the checkout and write their own directories.
# test_fuzz_build builds test_fuzz_regress's harnesses (48 s of the alone phase on 2 cores, CI of
# 2026-11-28) first, and test_fuzz_regress runs last of the tests run alone (LAST): it waits for
# that build if it still runs (one make at a time: tests/fuzz/fuzz_lib.sh), then finds it done.
IDLE=(tests/fuzz/test_fuzz_build.sh tests/install/test_aarch64.sh tests/install/test_build_nompi.sh)
LAST=(tests/fuzz/test_fuzz_regress.sh)
# A shared test in NICED may also run in that lane during the shared phase, under `nice -n 19`, once
# the BESIDE tests are done (after about 255 s of a shared phase of about 1200, CI of 2026-11-28):
# the lane takes the last one the LANES have not started, so it runs on the CPU they leave idle
# (that CI's shared phase used 1.65 of the 2 cores: about 430 CPU-s idle) while they work through
# the queue from its front. The float64 references (tests/reference/*.py: 20 tests, 191 CPU-s in
# that CI) are all CPU, judge no time and wait on no timer; test_lora_peft.py stays out (its runs
# have a 120 s time-out). So are test_hf_identity (91 CPU-s: node's reference encoders and
# tessera's, nothing timed) and test_torch_peer_families (27 CPU-s: the PyTorch peer's tiny models
# against tessera's plans, no timer). Their time-out is twice the others'.
# Since 2026-11-29 the NICED tests wait at the end of the LANES' queue (NICED_LONG, the longest,
# last), so the lane, taking from the back, finds them there all through the phase (the CI of
# 2026-11-28 ran 20 of the 23 NICED tests there: it ran out), and more are NICED: the tokenizer
# and chat-template comparisons with node's references, test_prep*'s file checks, test_recipes'
# --plan and --dry-run runs, the SIMT op test (no MPI rank, no timer, no clock in any of them:
# 365 CPU-s in that CI, all taken by the LANES at full priority). When the LANES have no test
# left to start, the one the lane still runs goes on under nice 19 into the phase of the tests run
# alone, as the IDLE ones do (it used to get the runner's priority back while the phase waited for
# it), and the IDLE ones follow it in that lane.
NICED=(tests/reference/ tests/tokenizer/test_hf_identity.sh tests/gpu/test_torch_peer_families.sh
       tests/tokenizer/test_gpt2_identity.sh tests/tokenizer/test_hf_spm_metaspace.sh
       tests/tokenizer/test_hf_cli.sh tests/tokenizer/test_hf_export_tokjson.sh tests/tokenizer/test_train_brown.sh
       tests/chat/test_chat_templates.sh tests/chat/test_harmony_sft.sh tests/prep/test_prep.sh
       tests/prep/test_prep_chat_template.sh tests/prep/test_long_prompt.sh tests/prep/test_prep_preference.sh
       tests/train/test_recipes.sh tests/train/test_recipes_plan.py tests/test_gpu_ops_simt)
# the longest NICED tests (CPU-s, CI of 2026-11-28), shortest first: the last in the queue
NICED_LONG=(tests/reference/test_hf_clients.py tests/chat/test_chat_templates.sh tests/tokenizer/test_gpt2_identity.sh
            tests/test_gpu_ops_simt tests/train/test_recipes.sh tests/reference/test_hf_llama.py
            tests/tokenizer/test_hf_spm_metaspace.sh tests/tokenizer/test_hf_identity.sh)
NICED_NOT=(tests/reference/test_lora_peft.py)
# Where a GPU is present, the tests that can use it run alone too: two processes on one GPU share
# its memory, which micro_batch = auto and the device-plan checks read
compgen -G '/dev/nvidia[0-9]*' >/dev/null && SOLO+=(tests/gpu/ tests/test_gpu_ops)
if [[ -n ${TEST_LANES:-} ]]; then
    [[ $TEST_LANES =~ ^[1-9][0-9]?$ ]] || { echo "tests/run.sh: TEST_LANES = '$TEST_LANES': expected 1 to 99" >&2; exit 2; }
    LANES=$TEST_LANES
else
    LANES=$(($(nproc 2>/dev/null || echo 1) >= 2 ? 2 : 1))
fi
# (wait -n -p, below, is bash 5.1's: an older bash runs one test at a time)
((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 501)) || LANES=1
solo() { local p; for p in "${SOLO[@]}"; do [[ $1 == "$p"* ]] && return 0; done; return 1; }
beside() { local p; for p in "${BESIDE[@]}"; do [[ $1 == "$p" ]] && return 0; done; return 1; }
idle() { local p; for p in "${IDLE[@]}"; do [[ $1 == "$p" ]] && return 0; done; return 1; }
niceable() { # niceable TEST: a NICED test
    local p
    for p in "${NICED_NOT[@]}"; do [[ $1 == "$p" ]] && return 1; done
    for p in "${NICED[@]}"; do [[ $1 == "$p"* ]] && return 0; done
    return 1
}
# limit_of TEST: its time-out in seconds
limit_of() {
    if idle "${1#"$BUILD"/}" || niceable "${1#"$BUILD"/}"; then echo $((TIMEOUT * 2)); else echo "$TIMEOUT"; fi
}

shared=() alone=() besides=() idles=() lasts=()
for t in "${tests[@]}"; do
    name=${t#"$BUILD"/}
    if [[ -n ${TESTS:-} ]]; then
        match=0
        for want in $TESTS; do [[ $name == *"$want"* ]] && match=1; done
        ((match)) || continue
    fi
    if beside "$name"; then besides+=("$t"); elif idle "$name"; then idles+=("$t")
    elif [[ " ${LAST[*]} " == *" $name "* ]]; then lasts+=("$t")
    elif solo "$name"; then alone+=("$t"); else shared+=("$t"); fi
done
alone+=(${lasts[@]+"${lasts[@]}"})
selected=$((${#shared[@]} + ${#besides[@]} + ${#alone[@]} + ${#idles[@]})) # (checked at the end)
# The longest shared tests (40 s or more each on the CI machine, 2026-11-27) start first, so the
# lanes end together instead of one lane running a long test alone at the end (the run of
# 2026-11-27 ended its shared phase with test_train_converges, 51 s, beside an idle lane); the
# NICED ones come last (above)
FIRST=(tests/train/test_train_converges.sh tests/eval/test_generate_chat.sh
       tests/train/test_train_cli.sh tests/eval/test_generate.sh tests/train/test_spike_guard.sh
       tests/train/test_lora_dpo_example.sh tests/resume/test_sharding.sh tests/s3/test_s3.sh
       tests/train/test_tensor.sh)
# (in FIRST's order, longest first: the run of 2026-11-27 started them in the tests' own order,
# the longest after three others)
in_list() { # in_list NAME LIST...: NAME is one of LIST
    local n=$1 f
    shift
    for f in "$@"; do [[ $n == "$f" ]] && return 0; done
    return 1
}
first=() rest=() niced=() niced_long=()
for f in "${FIRST[@]}" "${NICED_LONG[@]}"; do
    for t in ${shared[@]+"${shared[@]}"}; do
        [[ ${t#"$BUILD"/} == "$f" ]] || continue
        if in_list "$f" "${FIRST[@]}"; then first+=("$t"); else niced_long+=("$t"); fi
    done
done
for t in ${shared[@]+"${shared[@]}"}; do
    name=${t#"$BUILD"/}
    in_list "$name" "${FIRST[@]}" "${NICED_LONG[@]}" && continue
    if niceable "$name"; then niced+=("$t"); else rest+=("$t"); fi
done
shared=(${first[@]+"${first[@]}"} ${rest[@]+"${rest[@]}"} ${niced[@]+"${niced[@]}"} ${niced_long[@]+"${niced_long[@]}"})
if ((LANES > 1)); then
    echo "tests/run.sh: ${#shared[@]} tests $LANES at a time and ${#besides[@]} beside them, then ${#alone[@]} alone and ${#idles[@]} beside those (TEST_LANES=$LANES)"
else # one lane: every test alone, the shared ones first as with two
    alone=(${shared[@]+"${shared[@]}"} ${besides[@]+"${besides[@]}"} ${idles[@]+"${idles[@]}"}
           ${alone[@]+"${alone[@]}"})
    shared=() besides=() idles=()
fi

# The tests that share the cores (the LANES and BESIDE) run with threads that wait without spinning:
# libgomp's OpenMP threads (a rank of tessera with threads = 0 runs 2 here; torch) otherwise spin at
# each barrier, and an OpenMPI rank waiting on its peer (mpirun -np 2 beside another test: its
# ranks think they own the 2 cores) polls its core. Beside another busy test both take the core
# from the thread that has the work (docs/decisions.md, "OpenMP build of OpenBLAS": 4x): a 30-step
# tiny.cfg run on a loaded machine took 572 s (100 CPU-s) spinning, 18 s (9.4 CPU-s) with passive
# waits; four shared tests two at a time 825 s (410 CPU-s), 234 s (141 CPU-s) (docs/benchmarks.md,
# 2026-11-27). Tests run alone keep the defaults; a value the caller set is kept.
SHARE_ENV=(OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
           OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}")

log_of() { echo "$logdir/$(echo "${1#"$BUILD"/}" | tr '/' '_').log"; } # log_of TEST: its log file

# cpu_of FILE: the user + sys seconds in FILE, what bash's times wrote (its second line: the
# processes the shell waited for). Not in a command substitution: that counts its own subshell's.
cpu_of() {
    awk 'NR == 2 { split($1, a, /[ms]/); split($2, b, /[ms]/); printf "%.0f", a[1] * 60 + a[2] + b[1] * 60 + b[2] }' "$1"
}
nice_idle=$((LANES > 1)) # an IDLE test starts under nice 19 while tests run alone
beside_niced=0 # the test in the BESIDE lane runs under nice 19
# renice_beside: the niced test still running in the BESIDE lane gets the runner's own priority
# back (renice of its process group, the one timeout made: lowering a nice value needs root, as CI
# runs; elsewhere it keeps 19)
renice_beside() {
    [[ -n $beside_pid ]] && ((beside_niced)) || return 0
    local pg
    pg=$(ps -o pgid=,comm= --ppid "$beside_pid" 2>/dev/null | awk '$2 == "timeout" { print $1; exit }')
    [[ -n $pg ]] && renice -n "$(nice)" -g "$pg" >/dev/null 2>&1
    return 0
}
# unnice_beside: the tests run alone are done; the IDLE test still running gets the runner's
# priority back, and the next ones start without nice
unnice_beside() { nice_idle=0; renice_beside; }
# run_one TEST [VAR=VALUE...]: runs it under the time-out, with those variables in its environment,
# into its log; writes "RC SECONDS CPU_SECONDS" to the log's .rc (CPU: of the processes it waited
# for, not of one that outlived its parent, such as a daemon or a singleton MPI process's orted)
run_one() {
    local t=$1 log start=$SECONDS rc cpu0 cpu1 pre=() limit
    shift
    ((${niced_now:-0})) && pre=(nice -n 19) # (IDLE and NICED, above)
    limit=$(limit_of "$t")
    # A tessera-train started without mpirun is a singleton MPI process, for which OpenMPI forks an
    # orted: not for the tests (OMPI_MCA_ess_singleton_isolated=1, as test_time_plan.sh did):
    # --version 0.73 s with it, 0.42 s without (2026-11-27), and the suite starts a few hundred.
    # One rank needs no daemon (tessera spawns, publishes, connects nothing). tests/slurm/ and
    # tests/jobs/ keep it: in a Slurm job's environment a singleton start is what the product must
    # avoid (dist_launched, tessera-healthcheck's dist_init_single), so they must see it as it is.
    case ${t#"$BUILD"/} in
        tests/slurm/* | tests/jobs/*) ;;
        *) set -- "$@" OMPI_MCA_ess_singleton_isolated="${OMPI_MCA_ess_singleton_isolated:-1}" ;;
    esac
    # Every MPI process of the tests (singletons and mpirun's ranks: mpirun passes OMPI_MCA_* on)
    # starts with the point-to-point layer it ends up with anyway, ob1 (shared memory and TCP):
    # OpenMPI 4 otherwise first opens the cm layer, whose PSM and PSM2 libraries probe for Omni-Path
    # hardware (416 sleeps of 125 us in an strace of one start) before failing over to ob1.
    # `tessera-train --version`: 0.75-0.87 s, 0.16-0.18 CPU-s a start without, 0.55-0.62 s, 0.14-0.15
    # CPU-s with (8 each, load 10); mpirun -np 2: 1.70 s against 1.46 s (docs/benchmarks.md, "CI
    # time: the MPI start"). The private Slurm cluster's jobs already ran with it (cluster.sh env).
    set -- "$@" OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}"
    # its own OpenMPI session directory base (tests/ompi_session.sh: side-by-side starts must not
    # share one), unless the caller named one
    local base=''
    if [[ -z ${OMPI_MCA_orte_tmpdir_base:-} ]]; then
        base=$(mktemp -d /tmp/tsr-ompi.XXXXXX) && ompi_session_base "$base"
        set -- "$@" OMPI_MCA_orte_tmpdir_base="$base"
    fi
    set -- "$@" TSR_RUN_SH=1
    log=$(log_of "$t")
    times >"$log.cpu"
    cpu0=$(cpu_of "$log.cpu")
    case $t in
        *.py) env "$@" ${pre[@]+"${pre[@]}"} timeout "$limit" "$PYTHON" "$t" >"$log" 2>&1 ;;
        *.sh) env "$@" ${pre[@]+"${pre[@]}"} timeout "$limit" bash "$t" >"$log" 2>&1 ;;
        *)    env "$@" ${pre[@]+"${pre[@]}"} timeout "$limit" "$t" >"$log" 2>&1 ;;
    esac
    rc=$?
    [[ -n $base ]] && rm -rf "$base"
    times >"$log.cpu"
    cpu1=$(cpu_of "$log.cpu")
    rm -f "$log.cpu"
    echo "$rc $((SECONDS - start)) $((cpu1 - cpu0))" >"$log.rc"
}

passed=0 failed=0 skipped=0 cpu_total=0 reported=0
: >"$logdir/times.txt" # each test's "NAME SECONDS CPU_SECONDS", in the order they ended
# report TEST: reads its log and .rc, counts and prints its line
report() {
    local name=${1#"$BUILD"/} log rc secs cpu p s f plan extra status
    log=$(log_of "$1")
    rc=125 secs=0 cpu=0 # (no status written: the runner's subshell was killed)
    [[ -s $log.rc ]] && read -r rc secs cpu <"$log.rc"
    rm -f "$log.rc"
    printf '%s %d %d\n' "$name" "$secs" "$cpu" >>"$logdir/times.txt"
    reported=$((reported + 1))
    cpu_total=$((cpu_total + cpu))
    p=$(grep -cE '^ok [0-9]+' "$log" | tr -d ' ')
    s=$(grep -cE '^ok [0-9]+.*# SKIP' "$log" | tr -d ' ')
    f=$(grep -cE '^not ok [0-9]+' "$log" | tr -d ' ')
    plan=$(grep -oE '^1\.\.[0-9]+' "$log" | head -1 | cut -d. -f3)
    p=$((p - s))
    extra=""
    if ((rc == 77 && p + f + s == 0)); then
        s=1; extra=" (skipped: $(tail -1 "$log"))"
    elif ((rc != 0)); then
        f=$((f + 1)); extra=" (exit $rc$( ((rc == 124)) && echo ", timed out after $(limit_of "$1")s"))"
    elif [[ -z $plan ]]; then
        f=$((f + 1)); extra=" (no TAP plan)"
    elif ((p + s + f != plan)); then
        f=$((f + 1)); extra=" (planned $plan, ran $((p + s + f)))"
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    status=PASS; ((f > 0)) && status=FAIL
    printf '%-4s %-44s %3d passed %2d failed %2d skipped %4ds%s\n' "$status" "$name" "$p" "$f" "$s" "$secs" "$extra"
    if ((f > 0)); then
        grep -E '^not ok' "$log" | sed 's/^/       /' | head -20
        echo "       log: $log (last lines below)"
        tail -15 "$log" | sed 's/^/       | /'
    fi
    grep -E '^ok [0-9]+.*# SKIP' "$log" | sed 's/^/       /' | head -5
}

# the shared tests, LANES at a time, and the BESIDE ones in a lane of their own, each reported as
# it ends
phase_start=$SECONDS
declare -A running=() # pid -> test
beside_pid='' next_beside=0 steal=0
declare -A taken=() # the shared tests started (by the LANES or, NICED ones, the BESIDE lane)
last_niced() { # the last NICED shared test not started yet, or nothing
    local i
    for ((i = ${#shared[@]} - 1; i >= 0; i--)); do
        [[ -z ${taken[${shared[i]}]+x} ]] && niceable "${shared[i]#"$BUILD"/}" && echo "${shared[i]}" && return 0
    done
    return 0
}
start_beside() { # starts the next BESIDE test when none runs; then, while steal is 1, a NICED one
    [[ -z $beside_pid ]] || return 0
    local t niced=0
    if ((next_beside < ${#besides[@]})); then
        t=${besides[$next_beside]} next_beside=$((next_beside + 1))
        idle "${t#"$BUILD"/}" && ((nice_idle)) && niced=1
    elif ((steal)); then
        t=$(last_niced) niced=1
        [[ -n $t ]] || return 0
        taken[$t]=1
    else
        return 0
    fi
    niced_now=$niced run_one "$t" "${SHARE_ENV[@]}" &
    beside_pid=$! running[$!]=$t beside_niced=$niced
}
ended() { # ended PID: report its test; a BESIDE test's end starts the next one
    report "${running[$1]}"
    unset "running[$1]"
    [[ $1 == "$beside_pid" ]] && { beside_pid=''; start_beside; }
    return 0
}
reap() { # waits for one running test to end, reports it
    local pid=
    wait -n -p pid "${!running[@]}"
    if [[ -z $pid || -z ${running[$pid]+x} ]]; then
        # (a signal, or none left to wait for: each that has ended is reported; none: a pause)
        local found=0
        for pid in "${!running[@]}"; do
            kill -0 "$pid" 2>/dev/null && continue
            ended "$pid"
            found=1
        done
        ((found)) || sleep 0.2
        return 0
    fi
    ended "$pid"
}
steal=$((LANES > 1))
start_beside
for t in ${shared[@]+"${shared[@]}"}; do
    while [[ -z ${taken[$t]+x} ]] && ((${#running[@]} - (${#beside_pid} > 0) >= LANES)); do reap; done
    [[ -z ${taken[$t]+x} ]] || continue # (the BESIDE lane took it)
    taken[$t]=1
    run_one "$t" "${SHARE_ENV[@]}" &
    running[$!]=$t
done
steal=0
# the LANES' last tests and every BESIDE one; a NICED one the BESIDE lane still runs goes on into
# the next phase, still niced (a BESIDE test is never left behind: they start the lane's queue)
beside_stealing() { [[ -n $beside_pid ]] && ((beside_niced && next_beside >= ${#besides[@]})); }
while ((${#running[@]} - $(beside_stealing && echo 1 || echo 0) > 0 || next_beside < ${#besides[@]})); do reap; done
shared_s=$((SECONDS - phase_start)) phase_start=$SECONDS shared_cpu=$cpu_total
# then the others, one at a time, and the IDLE ones beside them in the BESIDE lane (after the
# NICED one still running there, if any)
besides=(${idles[@]+"${idles[@]}"}) next_beside=0
start_beside
for t in ${alone[@]+"${alone[@]}"}; do
    run_one "$t" &
    running[$!]=$t alone_pid=$!
    while [[ -n ${running[$alone_pid]+x} ]]; do reap; done
done
((nice_idle)) && unnice_beside
while ((${#running[@]} > 0)); do reap; done
echo "tests/run.sh: ${shared_s} s for the shared tests (CPU ${shared_cpu} s), $((SECONDS - phase_start)) s for those run alone (CPU $((cpu_total - shared_cpu)) s); each test's in $logdir/times.txt"
# the slowest twenty, where CI's time goes (issue 65: printed at the end of every run)
echo "tests/run.sh: the slowest twenty tests (wall seconds, CPU seconds):"
sort -k2,2nr "$logdir/times.txt" | head -20 | awk '{ printf "  %5d s %6d CPU-s  %s\n", $2, $3, $1 }'
# every test selected was run and reported: a scheduling slip (a lane's queue replaced before its
# tests started) must not pass as a shorter run
if ((reported != selected)); then
    echo "tests/run.sh: $selected tests selected, $reported reported: the runner lost $((selected - reported))" >&2
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
