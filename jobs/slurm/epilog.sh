#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=@PREFIX@/share/tessera/jobs/slurm/epilog.sh): a quick health check
# after every job, so a node a job broke is drained before the next job lands. Always exits 0: an
# unhealthy node is drained by the checker with a precise reason (a failing epilog would only add
# Slurm's generic "Epilog error"). See hc-common.sh.
. "$(dirname "$0")/hc-common.sh"
tsr_hc_run epilog || true
exit 0
