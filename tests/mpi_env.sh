#!/usr/bin/env bash
# mpi_env.sh CMD... — run CMD with OpenMPI set up for several ranks on this one host (tests, demo).
# As root (CI, containers) mpirun refuses to start without the allow-run-as-root pair; more ranks
# than cores needs oversubscription; one host uses shared memory (vader). A job spanning the two
# virtual Slurm nodes of tests/slurm must use self,tcp instead (set OMPI_MCA_btl before calling).
set -euo pipefail
if [[ $(id -u) == 0 ]]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Without an mpirun (a NO_MPI=1 build on a machine without MPI: the lent GPU machine,
# tests/gpu/device.sh) `mpirun -np 1 CMD...` runs CMD as the single process it would have been;
# more ranks cannot run there: exit 77, which the tests count as a skip.
if [[ ${1:-} == mpirun ]] && ! command -v mpirun >/dev/null; then
    [[ ${2:-} == -np && ${3:-} =~ ^[0-9]+$ ]] || { echo "mpi_env.sh: no mpirun on PATH" >&2; exit 127; }
    ((${3} == 1)) || { echo "mpi_env.sh: no mpirun on PATH: $3 ranks need MPI" >&2; exit 77; }
    shift 3
    exec "$@"
fi
export OMPI_MCA_rmaps_base_oversubscribe=1
# A job of one rank (mpirun -np 1 CMD, no second app context after a ':') that exits non-zero:
# OpenMPI 4's mpirun then "kills" that rank, already gone, with SIGCONT, a sleep of
# odls_base_sigkill_timeout (1 s), SIGTERM, another sleep, SIGKILL: 2 s of nothing after each
# refused start or requeue exit (strace of a refused one-rank start: 2.5 s through mpirun, 0.5 s
# with the timeout at 0). One rank has no other rank to give time to end, so 0 here; a job of
# several ranks keeps the default (a rank still finishing when another has exited gets its
# grace). The one difference left: a SIGTERM sent to mpirun itself would reach the rank with its
# SIGKILL right behind; the tests signal the ranks, or mpirun of 2. A value the caller set is kept.
# Its rank is not bound either: OpenMPI 4 binds the ranks of a job of 1 or 2 to cores, each mpirun
# counting from core 0 as if the machine were its own, so every one-rank job ran on core 0 (its
# log: "cpus 0 (1 core)"): two tests side by side (tests/run.sh's lanes) shared core 0 while
# core 1 waited. Unbound, the rank has the cores a program started without mpirun has ("cpus
# 0-1"), and the kernel places it. (A job of several ranks keeps the binding that keeps them apart.)
if [[ ${1:-} == mpirun && ${2:-} == -np && ${3:-} == 1 && " ${*:4} " != *" : "* ]]; then
    export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-0}
    export OMPI_MCA_hwloc_base_binding_policy=${OMPI_MCA_hwloc_base_binding_policy:-none}
fi
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
exec "$@"
