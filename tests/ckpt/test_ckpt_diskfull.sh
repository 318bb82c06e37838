#!/usr/bin/env bash
# A full disk during a checkpoint save (issue 21, item 2), through the trainer on 2 MPI ranks, on a
# 3 MiB tmpfs this test mounts (the tiny model's checkpoint is 1.6 MiB: the first fits, the second
# does not; needs root, skips loudly otherwise):
#  - the save is refused before any data moves: exit 2 (not 139), the message names the
#    filesystem, its free bytes and the bytes needed; the previous checkpoint and `latest` survive
#    and verify; no .tmp is left;
#  - the same with the space checks skipped (TSR_CKPT_FAULT=skip-space-check, test-only), so the
#    writes themselves hit ENOSPC: still exit 2 with the filesystem named, no crash in HDF5's
#    close at MPI_Finalize (it was SIGSEGV, exit 139, which the job hook requeued).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
if [[ $(id -u) != 0 ]]; then echo "# not root: cannot mount a small tmpfs; skipped"; exit 77; fi
FS=$TMP/fs
mkdir -p "$FS"
if ! mount -t tmpfs -o size=3m tmpfs "$FS" 2>"$TMP/mount.txt"; then
    echo "# mount -t tmpfs failed ($(cat "$TMP/mount.txt")); skipped"
    exit 77
fi
trap 'umount "$FS" 2>/dev/null; rm -rf "$TMP"' EXIT
tap_plan 8
make_synth "$TMP/data"
tiny_args "$TMP/data/train"
args+=(--set model.n_layer=2 --set model.n_head=4 --set global_batch=8 --set micro_batch=2
       --set max_duration=6ba --set save_interval=2ba --set keep_last=2)
run() { timeout 300 "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$1"; }

for mode in checked skip-space-check; do
    rm -rf "${FS:?}"/*
    R=$FS/run
    if [[ $mode == checked ]]; then run "$R" >"$TMP/$mode.txt" 2>&1; else
        TSR_CKPT_FAULT=$mode run "$R" >"$TMP/$mode.txt" 2>&1; fi
    rc=$?
    msg=$(grep -o "ckpt: tmpfs at $FS ($R) has [0-9]* bytes free, the checkpoint needs [0-9]*" "$TMP/$mode.txt" | head -1)
    tap_diag "$mode: exit $rc; $msg"
    [[ $rc == 2 && -n $msg ]]
    tap_check $? "$mode: the second save exits 2 (got $rc) naming the filesystem, free and needed bytes"
    ! grep -q "Segmentation fault\|signal 11\|Process received signal" "$TMP/$mode.txt"
    tap_check $? "$mode: no crash (HDF5's close at MPI_Finalize)"
    [[ $(cat "$R/latest" 2>/dev/null) == step-00000002.h5 ]] && "$TOOL" ckpt verify "$(ck "$R" 2)" >/dev/null 2>&1
    tap_check $? "$mode: the step-2 checkpoint and latest survive and verify"
    left=$(cd "$R" && ls -A | grep -c '\.tmp$')
    [[ $left == 0 ]]
    tap_check $? "$mode: no .tmp left ($left)"
done
tap_done
