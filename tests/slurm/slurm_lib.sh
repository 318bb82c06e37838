# shellcheck shell=bash
# slurm_lib.sh — sourced by tests/slurm/test_*.sh (after tests/lib.sh): skip without Slurm, install
# tessera into a temp PREFIX, bring the test cluster up with the installed wrappers, job fields.
CLUSTER=$TSR_ROOT/tests/slurm/cluster.sh

# Exit 77 (skip) unless this machine can run the cluster (root + the Slurm packages).
slurm_require() {
    local why
    why=$(bash "$CLUSTER" can) || { echo "skip: cannot run a Slurm cluster here: $why"; exit 77; }
}

# slurm_install_up [VAR=VALUE ...]: make install PREFIX=$TMP/prefix (sets PREFIX and W, the
# installed jobs/slurm), then cluster.sh up with W's Prolog, Epilog and HealthCheckProgram, the
# VAR=VALUE settings in its environment. Bails out of the test on failure.
slurm_install_up() {
    PREFIX=$TMP/prefix
    W=$PREFIX/share/tessera/jobs/slurm
    make -s -C "$TSR_ROOT" install PREFIX="$PREFIX" BUILD="$BUILD" >"$TMP/install.log" 2>&1 ||
        { cat "$TMP/install.log"; echo "Bail out! make install failed"; exit 1; }
    env "$@" bash "$CLUSTER" up "$W/prolog.sh" "$W/epilog.sh" "$W/healthcheck.sh" >"$TMP/up.log" 2>&1 ||
        { cat "$TMP/up.log"; echo "Bail out! the Slurm cluster did not start"; exit 1; }
}

slurm_down() { bash "$CLUSTER" down >"$TMP/down.log" 2>&1; }

# field JOB KEY: the value of KEY in `scontrol show job`
field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | grep "^$2=" | head -1 | cut -d= -f2-; }
