#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=@PREFIX@/share/tessera/jobs/slurm/prolog.sh with PrologFlags=Alloc):
# a quick health check before a job starts on this node. Exit 1 only when the node is unhealthy:
# slurmctld then requeues the job on other nodes (the checker has drained this one). See hc-common.sh.
. "$(dirname "$0")/hc-common.sh"
rc=0
tsr_hc_run prolog || rc=$?
[ "$rc" = 1 ] && exit 1
exit 0
