#!/usr/bin/env bash
# A save that meets a filesystem with 0 bytes free (issue 64 finding 1), through the trainer on 2
# MPI ranks, on a tmpfs this test mounts (as tests/ckpt/test_ckpt_diskfull.sh does; needs
# root, skips loudly otherwise) of 4 MiB. A run writes its step-2 checkpoint (1.6 MiB); the run resumed to
# step 6 saves at step 4 with the space checks skipped (TSR_CKPT_FAULT=skip-space-check: another
# process fills the disk after them) and each tensor's write delayed (slow-write:500), and the
# test fills the tmpfs to 0 bytes with dd as soon as step 4's .tmp appears, before any tensor is
# written: so the file's metadata, never written, cannot be flushed by HDF5's close either (the
# disk-full test leaves 1.4 MB, where the close's flush had room). Synchronous and background
# saves alike: exit 2 naming the filesystem and its 0 bytes free, no crash (both ranks died with
# SIGSEGV in HDF5's close under MPI_Finalize, exit 139), tessera.lock released, latest still
# step 2's checkpoint and valid, no .tmp left.
# Timing: the dd must land in the 0.5 s before the first tensor's write (a lost race fails the
# "0 bytes free" check, never passes it): on tests/run.sh's SOLO list. The background save first
# copies its tensors into the stage, slow-write's delay before each copy too (checkpoint/
# ckpt_writer.c): its first write comes after 20 or more delays, so 50 ms each there (at 500 ms
# its failing run took 20 s: 40 copies and writes of rank 1, whose first ones succeed).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
small_tmpfs 4m
tap_plan 8
synth_tiny_args 2 8 2 --set max_duration=6ba --set save_interval=2ba --set keep_last=2
R=$FS/run
for mode in sync background; do
    rm -rf "${FS:?}"/*
    diskfull_run "$R" --set max_duration=2ba >"$TMP/$mode-1.txt" 2>&1 || { cat "$TMP/$mode-1.txt"; exit 1; }
    ( # the other process: fills the disk once step 4's file exists
        for _ in $(seq 1 6000); do
            if [[ -e $R/step-00000004.h5.tmp ]]; then dd if=/dev/zero of="$FS/filler" bs=4k 2>/dev/null; break; fi
            sleep 0.01
        done
    ) &
    filler=$!
    async=true slow=50; [[ $mode == sync ]] && async=false slow=500
    TSR_CKPT_FAULT=skip-space-check,slow-write:$slow diskfull_run "$R" --set save_async=$async >"$TMP/$mode.txt" 2>&1
    rc=$?
    wait "$filler"
    tap_diag "$mode: exit $rc; $(grep -m1 -o 'error: checkpoint .*' "$TMP/$mode.txt" | cut -c1-260)"
    [[ $rc == 2 ]] && grep -q "error: checkpoint $R/step-00000004.h5 not written: .*ckpt: tmpfs at $FS ($R) has 0 bytes free" "$TMP/$mode.txt" &&
        ! grep -q "Segmentation fault\|signal 11\|Process received signal" "$TMP/$mode.txt"
    tap_check $? "$mode: a save at 0 bytes free exits 2 (got $rc) naming the filesystem and its 0 bytes free; no crash"
    left=$(cd "$R" && ls -A | grep -c '\.tmp$')
    [[ ! -e $R/tessera.lock && $left == 0 && $(cat "$R/latest" 2>/dev/null) == step-00000002.h5 ]] &&
        "$TOOL" ckpt verify "$(ck "$R" 2)" >/dev/null 2>&1
    tap_check $? "$mode: tessera.lock released, latest still step 2's checkpoint and valid, no .tmp left ($left)"
    tap_diag "$mode: run_dir holds $(ls -A "$R" | tr '\n' ' ')"
done
# and with room again the same run dir resumes and saves (nothing of the failure in the way)
rm -f "$FS/filler"
diskfull_run "$R" --set max_duration=4ba >"$TMP/again.txt" 2>&1
rc=$?
[[ $rc == 0 && $(cat "$R/latest") == step-00000004.h5 ]] && grep -q "checkpoint resume step 2" "$TMP/again.txt"
tap_check $? "with the filler removed, the run resumes from step 2 and commits step 4 (exit $rc)"
# the filler really took the last byte while the save ran (the checks above are about 0 bytes)
rm -rf "${FS:?}"/*
head -c 100 /dev/zero >"$FS/x"
dd if=/dev/zero of="$FS/filler" bs=4k 2>/dev/null
[[ $(df -B1 --output=avail "$FS" | tail -1 | tr -d ' ') == 0 ]]
tap_check $? "dd fills the tmpfs to 0 bytes available"
# a run refused at start by the full disk (its lock cannot be written) leaves no lock behind
diskfull_run "$FS/full" >"$TMP/full.txt" 2>&1
rc=$?
[[ $rc == 2 && ! -e $FS/full/tessera.lock ]] && grep -q "No space left on device" "$TMP/full.txt"
tap_check $? "a start at 0 bytes free: exit $rc naming the full disk, no lock left"
rm -rf "${FS:?}"/*
tap_ok "the tmpfs is empty again" test -z "$(ls -A "$FS")"
tap_done
