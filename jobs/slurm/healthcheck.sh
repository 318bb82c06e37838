#!/bin/sh
# Slurm HealthCheckProgram (slurm.conf: HealthCheckProgram=@PREFIX@/share/tessera/jobs/slurm/healthcheck.sh,
# HealthCheckInterval=300, HealthCheckNodeState=IDLE or ANY): slurmd ignores its exit status, so the
# checker drains an unhealthy node itself (--drain) and, when the node is healthy again, resumes it
# only if the drain reason is its own "tessera-hc:" (--resume-own). Always exits 0. See hc-common.sh.
. "$(dirname "$0")/hc-common.sh"
tsr_hc_run healthcheck --resume-own || true
exit 0
