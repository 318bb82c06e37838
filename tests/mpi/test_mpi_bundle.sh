#!/usr/bin/env bash
# tests/gpu/mpi_bundle.sh (issue 52 item 2): the MPI trainer and the OpenMPI runtime it needs, in
# one relocatable folder for the lent GPU machine, which has no MPI (tests/gpu/device.sh pack
# carries it). Here the folder is made from this checkout's MPI build and run where the system's
# OpenMPI cannot be reached: a private mount namespace (unshare, root; nothing outside it sees the
# mounts) in which every file of Debian's OpenMPI and PMIx packages (the programs, libraries,
# plugins, help texts, configuration) is covered by an empty file or folder. There:
#  1. the system's mpirun and libmpi are gone (the hiding works: a check that cannot pass
#     through the system's MPI);
#  2. the folder's mpirun, relocated by OPAL_PREFIX to a path it was never built for, runs a
#     2-rank CPU training job of the folder's tessera-train: both ranks in one world, 2 steps
#     logged, exit 0.
# Skipped (77) without unshare and root, dpkg (the package lists), or an MPI build.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
# (not `ldd | grep -q`: under pipefail grep leaving early can fail the pipe, and skip the test)
[[ -x $TRAIN && $(ldd "$TRAIN" 2>/dev/null) == *libmpi* ]] || { echo "needs an MPI build of tessera-train"; exit 77; }
command -v ompi_info >/dev/null && command -v dpkg >/dev/null || { echo "needs OpenMPI's ompi_info and dpkg"; exit 77; }
[[ $(id -u) == 0 ]] && unshare --mount --propagation private true 2>/dev/null ||
    { echo "needs root and unshare --mount (a private mount namespace)"; exit 77; }
tap_plan 3
bash "$TSR_ROOT/tests/gpu/mpi_bundle.sh" "$TMP/bundle" "$TRAIN" >"$TMP/pack.txt" 2>&1
tap_check $? "mpi_bundle.sh packs tessera-train and OpenMPI's runtime ($(tail -1 "$TMP/pack.txt" | cut -c1-160))"

make_synth "$TMP/data" 512 20000
tiny_args "$TMP/data/train"
# every file of the system's OpenMPI and PMIx, covered inside the namespace
dpkg -L libopenmpi3 libpmix2 openmpi-bin openmpi-common 2>/dev/null | sort -u >"$TMP/files.txt"
mkdir "$TMP/empty"
cat >"$TMP/hidden.sh" <<'EOF'
set -u
# the packages' own folders whole, then their files elsewhere (/usr/bin, the library folder)
dirs=(/usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi /etc/openmpi)
for d in "${dirs[@]}"; do [[ -d $d ]] && mount --bind "$EMPTY" "$d"; done
while read -r f; do
    [[ -f $f && ! -L $f ]] && mount --bind /dev/null "$f"
done < <(grep -v -e '^/usr/lib/x86_64-linux-gnu/openmpi/' -e '^/usr/lib/x86_64-linux-gnu/pmix2/' \
              -e '^/usr/share/openmpi/' -e '^/etc/openmpi/' -e '^/usr/share/doc/' -e '^/usr/share/man/' "$FILES")
# 1: nothing of the system's MPI runs or loads
if /usr/bin/orterun --version >/dev/null 2>&1 || /usr/bin/mpirun --version >/dev/null 2>&1 ||
    [[ -s /usr/lib/x86_64-linux-gnu/libmpi.so.40 ]]; then echo "system MPI visible"; exit 3; fi
# 2: the bundle's, moved: its prefix is not where it was built
mv "$BUNDLE" "$BUNDLE.moved"
source "$BUNDLE.moved/env.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
command -v mpirun
exec mpirun -np 2 "$BUNDLE.moved/bin/tessera-train" "$@"
EOF
EMPTY=$TMP/empty FILES=$TMP/files.txt BUNDLE=$TMP/bundle \
    unshare --mount --propagation private bash "$TMP/hidden.sh" "${args[@]}" --set model.n_layer=1 \
    --set model.n_head=2 --set global_batch=4 --set micro_batch=2 --set max_duration=2ba \
    --set save_interval=0ba --set run_dir="$TMP/run" >"$TMP/run.txt" 2>&1
rc=$?
((rc != 3))
tap_check $? "inside the namespace the system's mpirun and libmpi are hidden ($(wc -l <"$TMP/files.txt") files of libopenmpi3, libpmix2, openmpi-bin, openmpi-common covered)"
((rc == 0)) && grep -q "^$TMP/bundle.moved/openmpi/bin/mpirun$" "$TMP/run.txt" &&
    grep -q '| 2 ranks |' "$TMP/run.txt" && (($(final_lines "$TMP/run/metrics.jsonl" | wc -l) == 2))
tap_check $? "the bundle's mpirun, moved, runs a 2-rank CPU job of its tessera-train there (exit $rc, want 0; 2 ranks, 2 steps)"
((rc == 0)) || tail -5 "$TMP/run.txt" | sed 's/^/# /'
tap_done
