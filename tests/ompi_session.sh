# ompi_session.sh — sourced by tests/run.sh and tests/mpi/test_session_dir.sh: a private OpenMPI
# session directory for one test (issue 64, finding 10).
#
# OpenMPI keeps each process's session directory under $OMPI_MCA_orte_tmpdir_base (else $TMPDIR,
# else /tmp): ompi.HOST.UID/ (the top), a job family's directory in it, a process's in that. A
# process that ends removes its own and then, last one out, every level it finds empty. The tests'
# single-process starts are isolated singletons (no orted: tests/run.sh), and every isolated
# singleton has the same name (job family 0, job 1, rank 0: ompi.HOST.UID/jf.0/1/0), so two side by
# side share one directory, and the first to end removes it under the other; one starting while
# another ends finds its parent gone between two mkdir calls ("A call to mkdir was unable to create
# the desired directory", the CI flake of tests/reference/test_dpo.py and test_recipes.sh's dry runs).
# Two parts, both needed:
#  - each test gets its own base (no test removes another's directories), and
#  - in it, that shared singleton directory holds a directory of ours, so it is never empty and
#    never removed while the test's processes start and end (OpenMPI removes files, and empty
#    directories by rmdir; a directory inside is left alone).
# The base is the test's own; tests/run.sh removes it when the test has ended.

# ompi_session_base DIR: makes DIR a private session base (the singleton directory kept)
ompi_session_base() {
    local host
    host=$(hostname)
    host=${host%%.*} # OpenMPI drops the domain (orte_keep_fqdn_hostnames is off)
    mkdir -p "$1/ompi.$host.$(id -u)/jf.0/1/0/.tessera-keep"
}
