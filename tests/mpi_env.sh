#!/usr/bin/env bash
# mpi_env.sh CMD... — run CMD with OpenMPI set up for several ranks on this one host (tests, demo).
# As root (CI, containers) mpirun refuses to start without the allow-run-as-root pair; more ranks
# than cores needs oversubscription; one host uses shared memory (vader). A job spanning the two
# virtual Slurm nodes of tests/slurm must use self,tcp instead (set OMPI_MCA_btl before calling).
set -euo pipefail
if [[ $(id -u) == 0 ]]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
exec "$@"
