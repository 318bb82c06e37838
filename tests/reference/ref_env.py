"""ref_env.py — where the Python reference tests start: TAP's skip (exit 77), the checkout and its
build, and the programs there a test runs."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("TSR_ROOT") or os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD", "build")
BUILD = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
TESSERA, TRAIN = os.path.join(BUILD, "tessera"), os.path.join(BUILD, "tessera-train")
REF_DUMP = os.path.join(BUILD, "tests", "ref_dump")
MPIRUN = ["bash", os.path.join(ROOT, "tests", "mpi_env.sh"), "mpirun"]


def skip(reason):
    print(f"1..0 # SKIP {reason}")
    sys.exit(77)


def need_programs(*exes):
    """Skips the test unless each of exes is built."""
    for exe in exes:
        if not os.access(exe, os.X_OK):
            skip(f"{exe} is missing (run make first)")
