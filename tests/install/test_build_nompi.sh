#!/usr/bin/env bash
# NO_MPI=1 gives a single-process build that links no MPI (its checkpoints go through serial HDF5)
# and trains to the same bits as the MPI build run on one rank (same code paths; the all-reduces
# are no-ops on one rank). Its checkpoints are the MPI build's, file for file:
#  - it saves step-*.h5 every save_interval and at the end, and `latest`; its `tessera ckpt
#    verify` accepts them, so does the MPI build's, and h5py opens them;
#  - a stop request (SIGUSR1 after step 4, TSR_FAULT: between periodic saves) saves and exits 85;
#    the rerun resumes and ends bit for bit like the uninterrupted run (every step's loss, lr and
#    grad norm; every tensor);
#  - cross-build: its step-3 checkpoint resumed by the MPI build, and the MPI build's resumed by
#    it: on 1 rank bit for bit; between 1 and 2 ranks within 1e-6 relative (2 ranks sum the
#    gradient and the loss in another order: not bit for bit, as in tests/resume/test_resume.sh);
#  - the spike guard's rollback reloads a checkpoint, as in the MPI build on one rank (bit for bit);
#  - a save that crashes half way (TSR_CKPT_FAULT=abort-after, test-only) or fails (its .tmp name
#    taken by a directory: exit 2) leaves the previous checkpoint and `latest`; the rerun resumes;
#  - --init-from a checkpoint, and `tessera ckpt ls|inspect|export`, `tessera eval --ckpt`,
#    `tessera generate --ckpt` (the same tokens as the MPI build's) work in it.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
deps=$(NO_MPI=1 "$TSR_ROOT/INSTALL" --check 2>&1)
if ! grep -q "✓ serial HDF5" <<<"$deps"; then
    echo "1..0 # SKIP serial HDF5 missing (libhdf5-dev, pkg-config hdf5-serial, or HDF5_DIR): run ./INSTALL as root"; exit 77
fi
tap_plan 18
make -C "$TSR_ROOT" NO_MPI=1 BUILD="$TMP/b" -j2 "$TMP/b/tessera-train" "$TMP/b/tessera" >"$TMP/make.txt" 2>&1
tap_check $? "make NO_MPI=1 builds tessera-train and tessera"
NOMPI_TRAIN=$TMP/b/tessera-train NOMPI_TOOL=$TMP/b/tessera
libs_train=$(ldd "$NOMPI_TRAIN") libs_tool=$(ldd "$NOMPI_TOOL")  # (not piped into grep -q: pipefail)
! grep -q libmpi <<<"$libs_train$libs_tool" && grep -q libhdf5 <<<"$libs_train" && grep -q libhdf5 <<<"$libs_tool"
tap_check $? "the NO_MPI binaries link no MPI; they link (serial) HDF5"
make_synth "$TMP/data" 512 50000
args=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.vocab_size=512 --set data.train="$TMP/data/train" --set data.val="$TMP/data/val"
      --set max_duration=3ba --set eval_interval=0ba --set data.val="" --set threads=1)
"$NOMPI_TRAIN" "${args[@]}" --set run_dir="$TMP/r1" >/dev/null 2>&1 &&
    "$TRAIN" "${args[@]}" --set run_dir="$TMP/r2" >/dev/null 2>&1 &&
    [[ $(losses "$TMP/r1/metrics.jsonl" | wc -l) -ge 3 ]] && cmp -s <(losses "$TMP/r1/metrics.jsonl") <(losses "$TMP/r2/metrics.jsonl")
tap_check $? "NO_MPI and MPI builds give bit-identical losses"

# ---- checkpoints: 6 steps of the tiny model, saved at 3 and 6 ----
tiny_args "$TMP/data/train"
args+=(--set model.n_layer=2 --set model.n_head=4 --set global_batch=2 --set micro_batch=1
       --set max_duration=6ba --set save_interval=3ba --set keep_last=3)
nrun() { local dir=$1; shift; "$NOMPI_TRAIN" "${args[@]}" --set run_dir="$dir" "$@"; }       # NO_MPI
mrun() { local dir=$1 np=$2; shift 2; "${MPIRUN[@]}" -np "$np" "$TRAIN" "${args[@]}" --set run_dir="$dir" "$@"; }
from4() { final_lines "$1" | awk '$1 >= 4'; }  # steps 4..6 of a run's metrics.jsonl

nrun "$TMP/U" >"$TMP/U.txt" 2>&1
rc=$?
[[ $rc == 0 && -f $(ck "$TMP/U" 3) && -f $(ck "$TMP/U" 6) && $(cat "$TMP/U/latest" 2>/dev/null) == step-00000006.h5 ]] &&
    "$NOMPI_TOOL" ckpt verify "$(ck "$TMP/U" 3)" >"$TMP/U.v3" 2>&1 && "$NOMPI_TOOL" ckpt verify "$(ck "$TMP/U" 6)" >"$TMP/U.v6" 2>&1
tap_check $? "NO_MPI: 6 steps save step-3 and step-6, latest names step-6, its tessera ckpt verify accepts both (exit $rc)"
/usr/bin/python3 - "$(ck "$TMP/U" 3)" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    a = f.attrs
    ok = (a["format"] == b"tessera-checkpoint" and a["format_version"] == 3 and a["step"] == 3
          and a["world_size"] == 1 and f["model/wte"].dtype == np.dtype("<f4")
          and "optim/m/wte" in f and "optim/v/wte" in f)
    print("# h5py:", a["format"], a["step"], "world_size", a["world_size"], "wte", f["model/wte"].shape)
sys.exit(0 if ok else 1)
PY
tap_check $? "h5py opens the NO_MPI checkpoint: format, step 3, world_size 1, model/ and optim/ tensors"

# ---- stop request -> exit 85 -> rerun: bit for bit ----
TSR_FAULT=usr1:4:0 nrun "$TMP/S" >"$TMP/S1.txt" 2>&1
rc=$?
[[ $rc == 85 && -f $(ck "$TMP/S" 4) && ! -e $(ck "$TMP/S" 5) && $(cat "$TMP/S/latest" 2>/dev/null) == step-00000004.h5 ]] &&
    grep -q "stop requested" "$TMP/S1.txt"
tap_check $? "NO_MPI: SIGUSR1 after step 4 commits step-4 (latest) and exits 85 (got $rc)"
nrun "$TMP/S" >"$TMP/S2.txt" 2>&1 && grep -q "checkpoint resume step 4" "$TMP/S2.txt" &&
    [[ $(grep -c '"loss"' "$TMP/S/metrics.jsonl") == 6 ]] &&
    cmp -s <(final_lines "$TMP/U/metrics.jsonl") <(final_lines "$TMP/S/metrics.jsonl") &&
    same_tensors "$(ck "$TMP/U" 6)" "$(ck "$TMP/S" 6)"
tap_check $? "NO_MPI: the rerun resumes from step 4; steps 5..6 and the step-6 tensors equal the uninterrupted run bit for bit"

# ---- cross-build ----
mrun "$TMP/M" 2 >"$TMP/M.txt" 2>&1 &&
    "$TOOL" ckpt verify "$(ck "$TMP/U" 3)" >"$TMP/x.v1" 2>&1 && "$NOMPI_TOOL" ckpt verify "$(ck "$TMP/M" 3)" >"$TMP/x.v2" 2>&1
tap_check $? "the MPI build's tessera ckpt verify accepts the NO_MPI step-3, the NO_MPI one the MPI build's 2-rank step-3"
mrun "$TMP/X1" 2 --resume "$(ck "$TMP/U" 3)" >"$TMP/X1.txt" 2>&1 && grep -q "checkpoint resume step 3" "$TMP/X1.txt" &&
    [[ $(from4 "$TMP/X1/metrics.jsonl" | wc -l) == 3 ]] && metrics_close "$TMP/U/metrics.jsonl" "$TMP/X1/metrics.jsonl" 4 1e-6 1e-6 &&
    "$TRAIN" "${args[@]}" --set run_dir="$TMP/X1b" --resume "$(ck "$TMP/U" 3)" >"$TMP/X1b.txt" 2>&1 &&
    cmp -s <(from4 "$TMP/U/metrics.jsonl") <(final_lines "$TMP/X1b/metrics.jsonl")
tap_check $? "NO_MPI step-3 resumed by the MPI build: on 2 ranks steps 4..6 within 1e-6, on 1 rank bit for bit"
"$TRAIN" "${args[@]}" --set run_dir="$TMP/O" >"$TMP/O.txt" 2>&1 &&
    nrun "$TMP/X2" --resume "$(ck "$TMP/M" 3)" >"$TMP/X2.txt" 2>&1 && grep -q "checkpoint resume step 3" "$TMP/X2.txt" &&
    [[ $(from4 "$TMP/X2/metrics.jsonl" | wc -l) == 3 ]] && metrics_close "$TMP/M/metrics.jsonl" "$TMP/X2/metrics.jsonl" 4 1e-6 1e-6 &&
    nrun "$TMP/X2b" --resume "$TMP/O" --set max_duration=9ba >/dev/null 2>&1 && nrun "$TMP/X2c" --resume "$(ck "$TMP/O" 3)" >"$TMP/X2c.txt" 2>&1 &&
    cmp -s <(from4 "$TMP/O/metrics.jsonl") <(final_lines "$TMP/X2c/metrics.jsonl") &&
    [[ $(final_lines "$TMP/X2b/metrics.jsonl" | awk '{print $1}' | tr '\n' ' ') == "7 8 9 " ]]
tap_check $? "MPI build step-3 resumed by NO_MPI: the 2-rank one within 1e-6, the 1-rank one bit for bit; --resume RUN_DIR takes its latest (step 6)"

# ---- the spike guard's rollback (garbage data batches 27..29 after 32 steps of learning) ----
gargs=(--set global_batch=8 --set micro_batch=2 --set max_duration=32ba --set save_interval=5ba --set keep_last=20
       --set guard.window=10)
TSR_FAULT=garbage:27:30 nrun "$TMP/G" "${gargs[@]}" >"$TMP/G.txt" 2>&1 &&
    TSR_FAULT=garbage:27:30 "$TRAIN" "${args[@]}" "${gargs[@]}" --set run_dir="$TMP/G1" >"$TMP/G1.txt" 2>&1 &&
    grep -q '"event": "rollback"' "$TMP/G/metrics.jsonl" && grep -q "^checkpoint rollback step" "$TMP/G.txt" &&
    cmp -s <(final_lines "$TMP/G/metrics.jsonl") <(final_lines "$TMP/G1/metrics.jsonl") &&
    cmp -s <(grep '"event": "rollback"' "$TMP/G/metrics.jsonl" | sed -E "s#$TMP/G/##; s/, \"time\": [0-9.]+//") \
           <(grep '"event": "rollback"' "$TMP/G1/metrics.jsonl" | sed -E "s#$TMP/G1/##; s/, \"time\": [0-9.]+//")
tap_check $? "NO_MPI: the spike guard rolls back to a checkpoint, as the MPI build on one rank does (bit for bit; $(grep -c '"event": "rollback"' "$TMP/G/metrics.jsonl") rollbacks)"

# ---- saves that fail keep the previous checkpoint ----
cp -r "$TMP/U" "$TMP/F"
TSR_CKPT_FAULT=abort-after:2 nrun "$TMP/F" --set max_duration=9ba >"$TMP/F1.txt" 2>&1
rc=$?
[[ $rc != 0 && $rc != 85 && $(cat "$TMP/F/latest") == step-00000006.h5 && -f $(ck "$TMP/F" 9).tmp && ! -e $(ck "$TMP/F" 9) ]] &&
    "$NOMPI_TOOL" ckpt verify "$(ck "$TMP/F" 6)" >"$TMP/F.v" 2>&1
tap_check $? "NO_MPI: a save that crashes half way (TSR_CKPT_FAULT=abort-after:2; exit $rc) leaves step-6 and latest valid, step-9 only a .tmp"
nrun "$TMP/F" --set max_duration=9ba >"$TMP/F2.txt" 2>&1 && grep -q "checkpoint resume step 6" "$TMP/F2.txt" &&
    [[ $(cat "$TMP/F/latest") == step-00000009.h5 && ! -e $(ck "$TMP/F" 9).tmp ]]
tap_check $? "NO_MPI: the rerun resumes from step 6 and commits step-9 (the stale .tmp removed)"
mkdir -p "$(ck "$TMP/F" 12).tmp"  # the save's file cannot be created: an error, not a crash
nrun "$TMP/F" --set max_duration=12ba >"$TMP/F3.txt" 2>&1
rc=$?
[[ $rc == 2 && $(cat "$TMP/F/latest") == step-00000009.h5 && ! -e $(ck "$TMP/F" 12) ]] &&
    grep -q "step-00000012.h5 not written: cannot create .*step-00000012.h5.tmp" "$TMP/F3.txt" && "$NOMPI_TOOL" ckpt verify "$(ck "$TMP/F" 9)" >/dev/null 2>&1
tap_check $? "NO_MPI: a save that fails exits 2 naming the file; step-9 and latest stay (got $rc)"

# ---- --init-from, tessera ckpt / eval / generate ----
nrun "$TMP/I" --init-from "$TMP/U" --set max_duration=1ba >"$TMP/I.txt" 2>&1 &&
    "$TRAIN" "${args[@]}" --set run_dir="$TMP/I1" --init-from "$TMP/U" --set max_duration=1ba >"$TMP/I1.txt" 2>&1 &&
    grep -q "checkpoint init-from step 0 | $(ck "$TMP/U" 6) " "$TMP/I.txt" &&
    [[ $(json_field "$TMP/I/metrics.jsonl" 1 loss) != "$(json_field "$TMP/U/metrics.jsonl" 1 loss)" ]] &&
    cmp -s <(final_lines "$TMP/I/metrics.jsonl") <(final_lines "$TMP/I1/metrics.jsonl")
tap_check $? "NO_MPI: --init-from RUN_DIR starts a new run from its step-6 weights, as the MPI build does (step-1 loss $(json_field "$TMP/I/metrics.jsonl" 1 loss) vs $(json_field "$TMP/U/metrics.jsonl" 1 loss) fresh)"
"$NOMPI_TOOL" ckpt ls "$TMP/U" >"$TMP/ls.txt" 2>&1 && [[ $(grep -c " valid" "$TMP/ls.txt") == 2 ]] &&
    "$NOMPI_TOOL" ckpt inspect "$(ck "$TMP/M" 6)" >"$TMP/inspect.txt" 2>&1 && grep -qE "^world_size +2" "$TMP/inspect.txt" &&
    "$NOMPI_TOOL" ckpt export --format hf --tokenizer none "$TMP/U" "$TMP/hf" >"$TMP/export.txt" 2>&1 && [[ -s $TMP/hf/model.safetensors ]]
tap_check $? "NO_MPI: tessera ckpt ls, inspect (of the MPI build's checkpoint) and export work"
"$NOMPI_TOOL" eval --ckpt "$TMP/U" --val "$TMP/data/val" --set eval_samples=8 >"$TMP/e1.json" 2>"$TMP/e1.txt" &&
    "$TOOL" eval --ckpt "$TMP/U" --val "$TMP/data/val" --set eval_samples=8 >"$TMP/e2.json" 2>/dev/null &&
    grep -q '"loss"' "$TMP/e1.json" && cmp -s "$TMP/e1.json" "$TMP/e2.json"
tap_check $? "NO_MPI: tessera eval --ckpt reports the same validation loss as the MPI build's"
"$NOMPI_TOOL" generate --ckpt "$TMP/U" --prompt-ids 1 --max-tokens 8 >"$TMP/g1.txt" 2>/dev/null &&
    "$TOOL" generate --ckpt "$TMP/U" --prompt-ids 1 --max-tokens 8 >"$TMP/g2.txt" 2>/dev/null &&
    [[ $(wc -w <"$TMP/g1.txt") == 8 ]] && cmp -s "$TMP/g1.txt" "$TMP/g2.txt"
tap_check $? "NO_MPI: tessera generate --ckpt gives the MPI build's tokens ($(tr '\n' ' ' <"$TMP/g1.txt"))"
tap_done
