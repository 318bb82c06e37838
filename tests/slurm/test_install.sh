#!/usr/bin/env bash
# make install / uninstall, the modulefiles under Lmod from a non-interactive shell, the job-template
# filler (its scripts load the module of its own release), the Slurm prolog/epilog/HealthCheckProgram wrappers' exit-code contract, and shellcheck
# on every installed shell script. No Slurm daemons needed.
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 16
REL=$(cat "$TSR_ROOT/VERSION")
PREFIX=$TMP/opt/tessera/$REL
STAGE=$TMP/stage
LMOD_INIT=/usr/share/lmod/lmod/init/bash

make -s -C "$TSR_ROOT" install DESTDIR="$STAGE" PREFIX="$PREFIX" BUILD="$BUILD" >"$TMP/install.log" 2>&1
tap_check $? "make install DESTDIR=… PREFIX=…/opt/tessera/$REL"
want=(bin/tessera-train bin/tessera bin/tessera-job share/man/man1/tessera-train.1 share/man/man1/tessera.1
      share/tessera/jobs/pretrain.sbatch share/tessera/jobs/finetune.sbatch share/tessera/jobs/eval.sbatch
      share/tessera/jobs/healthcheck.sbatch share/tessera/jobs/lib/tessera-job.sh
      share/tessera/jobs/slurm/prolog.sh share/tessera/jobs/slurm/epilog.sh share/tessera/jobs/slurm/healthcheck.sh
      share/tessera/configs/gpt2-124m.cfg share/tessera/examples/tiny.cfg share/doc/tessera/slurm.md
      "share/modulefiles/tessera/$REL.lua" "share/modulefiles-tcl/tessera/$REL")
missing=()
for f in "${want[@]}"; do [[ -f $STAGE$PREFIX/$f ]] || missing+=("$f"); done
[[ ${#missing[@]} == 0 ]]
tap_check $? "installed: programs, man pages, job templates and hook, Slurm wrappers, recipes, docs, both modulefiles${missing:+ (missing: ${missing[*]})}"
! grep -rlF "$STAGE" "$STAGE" >/dev/null && ! grep -rl '@PREFIX@\|@VERSION@' "$STAGE" >/dev/null &&
    grep -q "local root = \"$PREFIX\"" "$STAGE$PREFIX/share/modulefiles/tessera/$REL.lua" &&
    head -1 "$STAGE$PREFIX/share/modulefiles-tcl/tessera/$REL" | grep -q '^#%Module'
tap_check $? "relocatable: no file names DESTDIR, every @PREFIX@/@VERSION@ filled; the Tcl file has the #%Module cookie"

# what a package manager does with the staged tree: put it at PREFIX
mkdir -p "$PREFIX" && cp -a "$STAGE$PREFIX/." "$PREFIX/"
modload() { # modload MODULEDIR CMDS: a clean non-interactive bash with Lmod, module use + load
    env -i HOME="$TMP" PATH=/usr/bin:/bin bash -c "set -euo pipefail; set +u; source $LMOD_INIT; set -u
        module use $1; module load tessera; $2" 2>&1
}
if [[ -r $LMOD_INIT ]]; then
    out=$(modload "$PREFIX/share/modulefiles" 'command -v tessera-train; tessera-job --list pretrain | sed -n 1p; echo "root=$TESSERA_ROOT"; tessera-train --version; man -w tessera-train')
    rc=$?
    tap_diag "${out//$'\n'/ | }"
    [[ $rc == 0 && $out == "$PREFIX/bin/tessera-train"* && $out == *"root=$PREFIX"* && $out == *"tessera-train $REL"* &&
        $out == *"$PREFIX/share/man/man1/tessera-train.1"* ]]
    tap_check $? "Lmod: module use + module load tessera (Lua) in env -i bash: binaries on PATH and run, TESSERA_ROOT, man page"
    out=$(modload "$PREFIX/share/modulefiles-tcl" 'command -v tessera; echo "root=$TESSERA_ROOT"')
    rc=$?
    [[ $rc == 0 && $out == "$PREFIX/bin/tessera"* && $out == *"root=$PREFIX"* ]]
    tap_check $? "Lmod: the Tcl modulefile loads the same way (${out//$'\n'/ | })"
    out=$(modload "$PREFIX/share/modulefiles" "module whatis tessera; module help tessera")
    [[ $out == *"Version: $REL"* && $out == *"tessera-train --config RECIPE"* ]]
    tap_check $? "module whatis / help describe tessera $REL"
    out=$(env -i HOME="$TMP" PATH=/usr/bin:/bin bash -c "set +u; source $LMOD_INIT; module use $TMP/nowhere; module load tessera" 2>&1)
    tap_check $(($? == 0)) "module load fails (non-zero) where tessera is not on MODULEPATH"
else
    for w in "Lua modulefile" "Tcl modulefile" "whatis/help" "missing module"; do echo "ok - $w # SKIP no Lmod ($LMOD_INIT)"; done
    _tap_n=$((_tap_n + 4))
fi
if command -v modulecmd >/dev/null || [[ -x /usr/lib/x86_64-linux-gnu/modulecmd.tcl ]]; then
    out=$(env -i HOME="$TMP" PATH=/usr/bin:/bin bash -c ". /usr/share/modules/init/bash; module use $PREFIX/share/modulefiles-tcl; module load tessera; command -v tessera-train" 2>&1)
    [[ $out == "$PREFIX/bin/tessera-train" ]]
    tap_check $? "Environment Modules loads the Tcl modulefile"
else
    _tap_n=$((_tap_n + 1))
    echo "ok $_tap_n - Environment Modules loads the Tcl modulefile # SKIP environment-modules not installed (Debian: it conflicts with lmod)"
fi

# every installed shell script passes shellcheck (templates follow their `source` of the hook)
mapfile -t scripts < <(cd "$PREFIX" && grep -lE '^#!(/usr/bin/env )?(ba)?sh|^#!/bin/(ba)?sh|shellcheck shell=' -r bin share/tessera | sort)
out=$(cd "$PREFIX" && shellcheck -x -P SCRIPTDIR "${scripts[@]}" 2>&1)
tap_check $? "shellcheck passes on the ${#scripts[@]} installed shell scripts (${scripts[*]##*/})${out:+: $out}"
out=$(for m in "$PREFIX"/share/man/man1/*.1; do LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$m" 2>&1; done)
[[ -z $out ]]
tap_check $? "the man pages render without groff warnings${out:+: $out}"

# the template filler
J=$PREFIX/bin/tessera-job
out=$("$J" pretrain ACCOUNT=a PARTITION=p NODES=2 TASKS_PER_NODE=4 GPUS_PER_NODE=4 CPUS_PER_TASK=8 \
    WALLTIME=1:00:00 RUN_DIR='/scratch/x&y/run' CONFIG=/c.cfg STOP_SECONDS=120)
[[ $? == 0 && $out != *@[A-Z]*@* && $out == *"RUN_DIR='/scratch/x&y/run' "* && $out == *"--signal=B:USR1@120 "* &&
    $out == *"--job-name=tessera-pretrain "* ]]
tap_check $? "tessera-job fills every placeholder (values with / and &, JOB_NAME default, STOP_SECONDS given)"
# the scripts of the installed tessera-job load its own release by name: with a newer tessera
# beside it (tessera/9.9, Lmod's default), the script's module line still gives this PREFIX's build
line=$(grep '^TESSERA_MODULE=' <<<"$out")
if [[ -r $LMOD_INIT ]]; then
    sed 's|^local root = .*|local root = "'"$TMP"'/newer"|' "$PREFIX/share/modulefiles/tessera/$REL.lua" \
        >"$PREFIX/share/modulefiles/tessera/9.9.lua"
    got=$(modload "$PREFIX/share/modulefiles" "echo default=\$TESSERA_ROOT; module purge; ${line%% *}; module load \"\$TESSERA_MODULE\"; echo job=\$TESSERA_ROOT")
    rm -f "$PREFIX/share/modulefiles/tessera/9.9.lua"
else
    got="default=$TMP/newer job=$PREFIX (no Lmod: the module line alone is checked)"
fi
[[ $line == "TESSERA_MODULE=tessera/$REL "* && $got == *"default=$TMP/newer"*"job=$PREFIX"* ]]
tap_check $? "the installed tessera-job's script loads tessera/$REL, its own, not the default newer one (${got//$'\n'/ | })"
err=$("$J" pretrain ACCOUNT=a 2>&1 >/dev/null)
rc=$?
err2=$("$J" pretrain ACCOUNT=a BOGUS=1 2>&1 >/dev/null)
rc2=$?
[[ $rc == 1 && $err == *"no value for CONFIG CPUS_PER_TASK"* && $rc2 == 1 && $err2 == *"no placeholder @BOGUS@"* ]]
tap_check $? "tessera-job: missing values and unknown keys exit 1 naming them ($err | $err2)"

# the wrappers' exit-code contract, with stand-in checkers that exit 0, 1, 2 or hang
export TESSERA_HC_LOG=$TMP/hc.log TESSERA_HC_TIMEOUT=2 SLURMD_NODENAME=nX SLURM_JOB_ID=7 TESSERA_HC_DEFAULTS=$TMP/none
W=$PREFIX/share/tessera/jobs/slurm
for c in 0 1 2; do printf '#!/bin/sh\necho "$@" > %s/args-%s\necho "nX sgemm FAIL 1.0 10.0 GFLOP/s"\nexit %s\n' "$TMP" "$c" "$c" >"$TMP/hc-$c"; done
printf '#!/bin/sh\necho "MPI_Init aborted"\nexit 1\n' >"$TMP/hc-bare1"
printf '#!/bin/sh\nsleep 30\n' >"$TMP/hc-hang"
chmod +x "$TMP"/hc-*
got=""
for c in 0 1 2 bare1 hang missing; do
    for w in prolog epilog healthcheck; do
        TESSERA_HEALTHCHECK=$TMP/hc-$c sh "$W/$w.sh"
        got+="$c:$w=$? "
    done
done
expect="0:prolog=0 0:epilog=0 0:healthcheck=0 1:prolog=1 1:epilog=0 1:healthcheck=0 2:prolog=0 2:epilog=0 2:healthcheck=0 bare1:prolog=0 bare1:epilog=0 bare1:healthcheck=0 hang:prolog=0 hang:epilog=0 hang:healthcheck=0 missing:prolog=0 missing:epilog=0 missing:healthcheck=0 "
[[ $got == "$expect" ]]
tap_check $? "wrappers: only an unhealthy verdict (exit 1 + a FAIL line) fails the prolog; epilog/HealthCheckProgram always 0; a checker that cannot run, hangs or is missing never fails ($got)"
grep -q 'prolog node=nX job=7: unhealthy' "$TESSERA_HC_LOG" && grep -q 'timed out after 2 s' "$TESSERA_HC_LOG" &&
    grep -q 'not installed: not checked' "$TESSERA_HC_LOG" && [[ $(cat "$TMP/args-0") == "--quick --drain --resume-own" ]]
tap_check $? "wrappers log each verdict to TESSERA_HC_LOG and call the checker with --quick --drain (--resume-own for HealthCheckProgram)"

make -s -C "$TSR_ROOT" uninstall DESTDIR="$STAGE" PREFIX="$PREFIX" BUILD="$BUILD" >>"$TMP/install.log" 2>&1
left=$(find "$STAGE" -type f | sed "s|$STAGE$PREFIX/||")
[[ -z $left ]]
tap_check $? "make uninstall removes every installed file${left:+ (left: ${left//$'\n'/ })}"
tap_done
