#!/usr/bin/env bash
# The test cluster is private (issue 21): tests/slurm/cluster.sh runs beside a site's Slurm without
# either noticing. Before `up`, the test plants decoys where the system's Slurm and munge keep their
# state, only where nothing exists yet (a real file is checksummed instead):
#  - /etc/slurm/slurm.conf (a config no private cluster could use: ClusterName=decoy, port 1),
#    files under /var/spool/slurmctld and /var/spool/slurmd/n1;
#  - a "host" slurmctld and slurmd (copies of sleep(1), so /proc/PID/comm says slurmctld/slurmd)
#    named by /run/slurmctld.pid and /run/slurmd-n1.pid.
# Then it brings up two private instances at once, runs a 2-node job (and a Prolog) in each, stops
# them, and checks: each talked only to its own controller, munged and ports; `down` stopped only its
# own daemons and removed only its own directory, and refuses a directory `up` did not make; every
# system path (the decoys, /etc/munge/munge.key, /etc/default/tessera-hc, the logs, ...) is byte for
# byte unchanged (sha256, size, mode, owner, mtime, ctime) and the "host" daemons still run. At the
# end the decoys are removed, and the system paths are as the test found them.
# Needs root and the Slurm packages (./INSTALL); skips otherwise.
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
# shellcheck source=slurm_lib.sh
source "$(dirname "$0")/slurm_lib.sh"
slurm_require
tsr_tmpdir
chmod 0711 "$TMP"
A=$TMP/a B=$TMP/b
SYS=(/etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/spool/slurm /etc/munge /run/munge
     /var/lib/munge /var/log/munge /var/log/slurm /var/lib/slurm /run/slurmctld.pid /run/slurmd.pid
     /run/slurmd-n1.pid /run/slurmd-n2.pid /etc/default/tessera-hc /var/log/tessera-hc.log
     /tmp/slurm-n1 /tmp/slurm-n2 /run/tessera-slurm-test)
made=()        # the decoys this test created (files, then directories), removed at the end
fakes=()       # the pids of the "host" daemons
cleanup() {
    local d p i
    for d in "$B" "$A"; do [[ -e $d ]] && SLURM_TEST_DIR=$d bash "$CLUSTER" down >>"$TMP/down.log" 2>&1; done
    for p in "${fakes[@]}"; do kill "$p" 2>/dev/null; done
    for ((i = ${#made[@]} - 1; i >= 0; i--)); do
        if [[ -d ${made[$i]} ]]; then rmdir "${made[$i]}" 2>/dev/null || echo "# left ${made[$i]} (not empty: not only ours)"
        else rm -f "${made[$i]}"; fi
    done
    made=()
}
trap 'cleanup; rm -rf "$TMP"' EXIT
tap_plan 14

# snapshot [dirtimes]: one line per system path and everything under it: type, mode, owner, size,
# mtime, ctime, sha256 of the content; without "dirtimes", no times for directories (a directory
# that held a decoy has new ones once the decoy is removed)
snapshot() {
    local p dfmt='%p %y %m %u:%g'
    [[ ${1:-} == dirtimes ]] && dfmt+=' %T@ %C@'
    for p in "${SYS[@]}"; do
        [[ -e $p || -L $p ]] || { echo "$p absent"; continue; }
        find "$p" -type d -printf "$dfmt\n"
        find "$p" ! -type d -printf '%p %y %m %u:%g %s %T@ %C@ ' -exec sh -c '[ -f "$1" ] && sha256sum <"$1" | cut -c1-64 || echo -' _ {} \;
    done
}
# decoy PATH CONTENT: create PATH (and its missing parents) with CONTENT, only if nothing is there
decoy() {
    local d=$1 up=()
    [[ -e $1 ]] && return 0
    while [[ ! -e $(dirname "$d") ]]; do d=$(dirname "$d"); up=("$d" "${up[@]}"); done
    for d in "${up[@]}"; do mkdir "$d" && made+=("$d"); done
    printf '%s\n' "$2" >"$1" && made+=("$1")
}
# fake_daemon NAME PIDFILE: a sleep(1) whose comm is NAME, its pid in PIDFILE if that is absent
fake_daemon() {
    mkdir -p "$TMP/fake"
    cp /bin/sleep "$TMP/fake/$1"
    "$TMP/fake/$1" 900 &
    fakes+=($!)
    decoy "$2" "$!"
}
alive() { local p; for p in "${fakes[@]}"; do [[ $(cat "/proc/$p/comm" 2>/dev/null) == slurmctld || $(cat "/proc/$p/comm" 2>/dev/null) == slurmd ]] || return 1; done; }
# ours DIR: the pids of live processes whose command line or environment names DIR (the daemons,
# and the slurmstepd and job processes they started: cluster.sh exports SLURM_CONF)
ours() {
    local p
    for p in /proc/[0-9]*; do
        cat 2>/dev/null "$p/cmdline" "$p/environ" | tr '\0' '\n' | grep -qF -- "$1/" && echo "${p#/proc/}"
    done
}
# sl DIR CMD...: a client command against the instance in DIR (fails at once if it has no config:
# Slurm's clients would retry a missing SLURM_CONF for 60 s)
sl() { [[ -f $1/slurm.conf ]] || return 1; SLURM_CONF=$1/slurm.conf "${@:2}"; }
others() { ps -eo pid=,comm= | awk '$2 ~ /^(munged|slurmctld|slurmd|slurmscriptd)$/ { print $1 }' | sort; }

before=$(snapshot)
decoy /etc/slurm/slurm.conf "# decoy written by tessera's tests/slurm/test_isolation.sh: must stay untouched
ClusterName=decoy
SlurmctldHost=localhost
SlurmctldPort=1"
decoy /var/spool/slurmctld/decoy-state "decoy controller state"
decoy /var/spool/slurmd/n1/decoy-spool "decoy slurmd spool"
fake_daemon slurmctld /run/slurmctld.pid
fake_daemon slurmd /run/slurmd-n1.pid
host_procs=$(others)
planted=$(snapshot dirtimes)
tap_diag "decoys planted: ${made[*]:-none (real files checksummed instead)}"

cat >"$TMP/prolog.sh" <<SH
#!/bin/sh
# the Prolog of both instances: records the SLURM_CONF slurmd's hook gives it, per instance and node
echo "SLURM_CONF=\$SLURM_CONF" >"$TMP/prolog-\$(basename "\$(dirname "\$SLURM_CONF")")-\$SLURMD_NODENAME"
SH
chmod +x "$TMP/prolog.sh"
echo keep >"$TMP/keep"

# 1-2. two private instances at once
SLURM_TEST_DIR=$A bash "$CLUSTER" up "$TMP/prolog.sh" >"$TMP/up-a.log" 2>&1
tap_check $? "instance A up in $A ($(tail -1 "$TMP/up-a.log" | cut -c1-200))"
SLURM_TEST_DIR=$B bash "$CLUSTER" up "$TMP/prolog.sh" >"$TMP/up-b.log" 2>&1
tap_check $? "instance B up in $B beside A ($(tail -1 "$TMP/up-b.log" | cut -c1-200))"
pa=$(head -1 "$A/ports" 2>/dev/null) pb=$(head -1 "$B/ports" 2>/dev/null)

# 3. each controller on its own port, with its own munged and key
conf_of() { sl "$1" scontrol show config 2>/dev/null | awk -v k="$2" '$1 == k { print $3 }'; }
key_a=$(sha256sum 2>/dev/null <"$A/munge-key/munge.key") key_sys=$(sha256sum 2>/dev/null </etc/munge/munge.key)
[[ -n $pa && -n $pb && $pa != "$pb" && $(conf_of "$A" SlurmctldPort) == "$pa" && $(conf_of "$B" SlurmctldPort) == "$pb" &&
   $(conf_of "$A" AuthInfo) == *"socket=$A/munge/munge.socket"* && $(conf_of "$B" AuthInfo) == *"socket=$B/munge/munge.socket"* &&
   $(conf_of "$A" StateSaveLocation) == "$A/state" && $key_a != "$key_sys" ]]
tap_check $? "A and B: own SlurmctldPort ($pa, $pb), own munged socket (AuthInfo $(conf_of "$A" AuthInfo)), own state and key"

# 4-5. a 2-node job in each, seen only by its own cluster
# shellcheck disable=SC2016
jobin() { sl "$1" sbatch --parsable -N2 -J "$2" -o "$TMP/$2.out" \
    --wrap 'echo "conf=$SLURM_CONF"; srun -N2 sh -c "echo step on \$SLURMD_NODENAME"; scontrol show config | grep SlurmctldPort'; }
ja=$(jobin "$A" job-a) jb=$(jobin "$B" job-b)
state_in() { sl "$1" scontrol show job -o "$2" 2>/dev/null | grep -o 'JobState=[A-Z]*' | cut -d= -f2; }
end=$((SECONDS + 60)); [[ -n $ja && -n $jb ]] || end=0
until [[ $(state_in "$A" "$ja") == COMPLETED && $(state_in "$B" "$jb") == COMPLETED ]] || ((SECONDS > end)); do sleep 0.5; done
tap_diag "job-a: $(tr '\n' ' ' <"$TMP/job-a.out" 2>/dev/null)"
[[ $(state_in "$A" "$ja") == COMPLETED && $(state_in "$B" "$jb") == COMPLETED ]] &&
    grep -qx "conf=$A/slurm.conf" "$TMP/job-a.out" && grep -qx "conf=$B/slurm.conf" "$TMP/job-b.out" &&
    [[ $(grep -c '^step on n[12]$' "$TMP/job-a.out") == 2 ]] && grep -q "SlurmctldPort *= $pa\$" "$TMP/job-a.out" &&
    grep -q "SlurmctldPort *= $pb\$" "$TMP/job-b.out"
tap_check $? "a 2-node job with an srun step in each: COMPLETED, the job's SLURM_CONF and controller its own cluster's"
names() { sl "$1" scontrol show job -o 2>/dev/null | grep -o 'JobName=[^ ]*' | sort -u | tr '\n' ' '; }
[[ $(names "$A") == "JobName=job-a " && $(names "$B") == "JobName=job-b " ]]
tap_check $? "each controller knows only its own job (A: $(names "$A"); B: $(names "$B"))"
grep -qx "SLURM_CONF=$A/slurm.conf" "$TMP/prolog-a-n1" 2>/dev/null && grep -qx "SLURM_CONF=$B/slurm.conf" "$TMP/prolog-b-n2" 2>/dev/null
tap_check $? "the Prolog runs with its own cluster's SLURM_CONF (through the instance's hooks/ wrapper)"

# 6. up refuses a directory in use; down refuses one that up did not make
mkdir -p "$TMP/foreign" && echo precious >"$TMP/foreign/data"
SLURM_TEST_DIR=$A bash "$CLUSTER" up >"$TMP/up-again.log" 2>&1
rc_up=$?
SLURM_TEST_DIR=$TMP/foreign bash "$CLUSTER" down >"$TMP/down-foreign.log" 2>&1
rc_down=$?
[[ $rc_up != 0 && $rc_down != 0 && $(cat "$TMP/foreign/data") == precious ]] && grep -q 'not empty' "$TMP/up-again.log" &&
    grep -q 'not made by cluster.sh up' "$TMP/down-foreign.log"
tap_check $? "up on a running instance's directory and down on a foreign one: refused, nothing touched ($(tail -1 "$TMP/down-foreign.log" | cut -c1-160))"

# 7-8. down B, then A: each stops only its own daemons and removes only its own directory
pids_a=$(ours "$A" | tr '\n' ' ')
SLURM_TEST_DIR=$B bash "$CLUSTER" down >"$TMP/down-b.log" 2>&1
rc=$?
[[ $rc == 0 && ! -e $B && -z $(ours "$B") && $(ours "$A" | tr '\n' ' ') == "$pids_a" ]] &&
    [[ $(sl "$A" sinfo -h -o %T 2>/dev/null | sort -u) == idle ]]
tap_check $? "down B: B's daemons stopped, $B removed; A's daemons ($pids_a) untouched and its nodes idle"
SLURM_TEST_DIR=$A bash "$CLUSTER" down >"$TMP/down-a.log" 2>&1
rc=$?
[[ $rc == 0 && ! -e $A && -z $(ours "$A") && $(cat "$TMP/keep") == keep && -d $TMP/foreign ]]
tap_check $? "down A: its daemons stopped, $A removed, the files beside it kept"

# 9-11. the host's side: nothing changed
after=$(snapshot dirtimes)
diff <(echo "$planted") <(echo "$after") >"$TMP/diff"
tap_check $? "every system path byte for byte as before (sha256, size, mode, owner, mtime, ctime): ${SYS[*]}$([[ -s $TMP/diff ]] && echo "; changed: $(tr '\n' ' ' <"$TMP/diff" | cut -c1-600)")"
alive && [[ $(cat /run/slurmctld.pid 2>/dev/null) == "${fakes[0]}" || ${made[*]} != *"/run/slurmctld.pid"* ]]
tap_check $? "the host's slurmctld and slurmd (pids ${fakes[*]}, named by /run/slurmctld.pid and /run/slurmd-n1.pid) still run"
[[ $(others) == "$host_procs" ]]
tap_check $? "every munged/slurmctld/slurmd daemon of the host before the test still runs, no new one is left ($(others | tr '\n' ' '))"
grep -q 'ClusterName=decoy' /etc/slurm/slurm.conf 2>/dev/null || [[ ${made[*]} != *"/etc/slurm/slurm.conf"* ]]
tap_check $? "/etc/slurm/slurm.conf is still the decoy (or the site's own file, unchanged)"

# 12. the test leaves the host as it found it
cleanup
for p in "${fakes[@]}"; do while kill -0 "$p" 2>/dev/null; do sleep 0.1; done; done
fakes=()
diff <(echo "$before") <(snapshot) >"$TMP/diff0"
tap_check $? "decoys removed: the system paths are as the test found them (directory times aside)$([[ -s $TMP/diff0 ]] && echo "; differs: $(tr '\n' ' ' <"$TMP/diff0" | cut -c1-400)")"
tap_done
