#!/usr/bin/env bash
# Damaged and edited checkpoint metadata (issue 21, items 1, 3 and 10; docs/checkpoint-format.md):
#  - format 3 (format 2 and the data sources) round trip on 2 ranks; a version 1 file
#    (tests/ckpt/v1-step-00000002.h5.gz, written before format 2) still verifies and loads exactly
#    on 1 and 2 ranks;
#  - one byte of the version 1 file's HDF5 global heap (the length of a string attribute) flipped:
#    `tessera ckpt verify` and a load on 1 and 2 ranks exit 2 naming the damaged heap (no crash,
#    no hang); a resume skips it and falls back to the previous checkpoint; a heap bit that makes
#    HDF5 loop is stopped after its time bound (30 s; 4 s here, TSR_CKPT_FAULT) (exit 2);
#  - format 3 (its metadata CRC is format 2's): an int64 root attribute changed by one
#    (optim_step, data_cursor) or one byte of the config text flipped: verify exits 2 (metadata CRC), a resume falls back with a warning;
#  - a version 1 file (no metadata CRC) whose data_cursor breaks
#    data_cursor = (step + skipped) x global_batch: verify exits 2 naming the identity;
#  - RUN_DIR/latest a directory: the save is refused (exit 2) naming it, nothing is left behind;
#  - run_dir of 200 characters saves; 201 and 230 (Open MPI aborted from 224 on) are refused with
#    exit 1 naming the limit.
source "$(dirname "$0")/../lib.sh"
DRIVER=$BUILD/tests/ckpt_driver
if [[ ! -x $DRIVER ]]; then echo "$DRIVER not built (MPI build needed)"; exit 77; fi
tsr_tmpdir
tap_plan 22
drv() { local np=$1; shift; timeout 120 "${MPIRUN[@]}" -np "$np" "$DRIVER" "$@"; }
verify() { timeout 60 "$TOOL" ckpt verify "$1"; }
# flip FILE OFFSET MASK: XOR one byte in place
flip() { "$PY3" -c 'import sys
p, o, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3], 0)
d = bytearray(open(p, "rb").read()); d[o] ^= m; open(p, "wb").write(d)' "$@"; }
# offset FILE BYTES: the offset of the first occurrence of BYTES (a python bytes literal)
offset() { "$PY3" -c 'import sys, ast
print(open(sys.argv[1], "rb").read().find(ast.literal_eval(sys.argv[2])))' "$@"; }

# ---- format 3 round trip, the version 1 fixture ----
V1=$TMP/v1.h5
gunzip -c "$TSR_ROOT/tests/ckpt/v1-step-00000002.h5.gz" >"$V1"
gcol=$(offset "$V1" "b'GCOL'")
# another bit of the heap (found by flipping bits at random) makes HDF5 loop for ever: the child
# reading the strings is stopped after 30 s and the file rejected; here after 4 s
# (TSR_CKPT_FAULT=v1-read-seconds:4, test-only: the same alarm, the bound shortened; it spun a
# core for 30 s). That verify runs in the background from here, beside the checks below (its own
# copy of the file, its own output files); it is judged last.
G=$TMP/loop.h5
cp "$V1" "$G"
flip "$G" $((gcol + 281)) 0x04
{ TSR_CKPT_FAULT=v1-read-seconds:4 timeout 90 "$TOOL" ckpt verify "$G" >"$TMP/loop.txt" 2>&1; echo $? >"$TMP/loop.rc"; } &
loop_pid=$!
R=$TMP/run
drv 2 save "$R" 1 2 3 >"$TMP/save.txt" 2>&1
tap_check $? "format 3: save steps 1, 2, 3 on 2 ranks"
verify "$(ck "$R" 3)" >"$TMP/v.txt" 2>&1
tap_check $? "format 3: ckpt verify step 3 valid ($(head -c 120 "$TMP/v.txt"))"
verify "$V1" >"$TMP/v1.txt" 2>&1
tap_check $? "version 1 file (written before format 2) verifies: $(head -c 100 "$TMP/v1.txt")"
for np in 1 2; do
    drv $np load "$V1" >"$TMP/v1load$np.txt" 2>&1
    rc=$?
    grep -q "loaded step 2 .* 0 wrong elements, metadata ok" "$TMP/v1load$np.txt"
    tap_check $((rc | $?)) "version 1 file loads on $np ranks: every element exact (exit $rc)"
done

# ---- a flipped byte in version 1's global heap ----
H=$TMP/heap.h5
cp "$V1" "$H"
# GCOL header: signature 4, version 1, reserved 3, collection size 8; object 1: index 2,
# refcount 2, reserved 4, size 8 -> +26 is a byte of the first string's length
flip "$H" $((gcol + 26)) 0x7f
verify "$H" >"$TMP/heap.txt" 2>&1
rc=$?
grep -q "global heap is damaged" "$TMP/heap.txt"
tap_check $(( (rc == 2 ? 0 : 1) | $? )) "heap byte flipped: ckpt verify exits 2 (got $rc): $(head -c 160 "$TMP/heap.txt")"
for np in 1 2; do
    drv $np load "$H" >"$TMP/heapload$np.txt" 2>&1
    rc=$?
    grep -q "global heap is damaged" "$TMP/heapload$np.txt" &&
        ! grep -q "Process received signal" "$TMP/heapload$np.txt" # Open MPI's handler, in the child
    tap_check $(( (rc == 2 ? 0 : 1) | $? )) "heap byte flipped: load on $np ranks exits 2, no crash, hang or Open MPI backtrace (got $rc)"
done
F=$TMP/fallback
mkdir -p "$F"
cp "$V1" "$F/step-00000002.h5"
cp "$H" "$F/step-00000003.h5"
echo step-00000003.h5 >"$F/latest"
drv 2 resume "$F" >"$TMP/fb.txt" 2>&1
rc=$?
grep -q "loaded step 2 from $F/step-00000002.h5 .* 0 wrong elements" "$TMP/fb.txt" &&
    grep -q "step-00000003.h5 skipped: .*global heap is damaged" "$TMP/fb.txt"
tap_check $((rc | $?)) "resume on 2 ranks skips the damaged newest file (warning names it) and loads step 2 (exit $rc)"

# ---- format 3 (the metadata CRC of format 2): edited or damaged metadata ----
for edit in "optim_step 1" "data_cursor 25"; do
    set -- $edit
    E=$TMP/edit-$1
    rm -rf "$E"; mkdir -p "$E"
    cp "$(ck "$R" 2)" "$(ck "$R" 3)" "$R/latest" "$E/"
    drv 1 setattr "$(ck "$E" 3)" "$1" "$2" >/dev/null 2>&1
    verify "$(ck "$E" 3)" >"$TMP/e.txt" 2>&1
    rc=$?
    grep -q "root attributes: CRC32C mismatch" "$TMP/e.txt"
    tap_check $(( (rc == 2 ? 0 : 1) | $? )) "$1 set to $2 (was $( [[ $1 == optim_step ]] && echo 0 || echo 24)): ckpt verify exits 2 (got $rc): $(head -c 150 "$TMP/e.txt")"
    drv 2 resume "$E" >"$TMP/er.txt" 2>&1
    rc=$?
    grep -q "loaded step 2 from $E/step-00000002.h5 .* 0 wrong elements" "$TMP/er.txt" &&
        grep -q "step-00000003.h5 skipped: root attributes: CRC32C mismatch" "$TMP/er.txt"
    tap_check $((rc | $?)) "$1 edited: resume on 2 ranks falls back to step 2 with a warning (exit $rc)"
done
C=$TMP/config.h5
cp "$(ck "$R" 3)" "$C"
flip "$C" "$(offset "$C" "b'global_batch = 8;'")" 0x01
verify "$C" >"$TMP/c.txt" 2>&1
rc=$?
grep -q "root attributes: CRC32C mismatch" "$TMP/c.txt"
tap_check $(( (rc == 2 ? 0 : 1) | $? )) "one byte of the config text flipped: ckpt verify exits 2 (got $rc)"

# ---- the identities, on a version 1 file (no metadata CRC to catch the edit first) ----
I=$TMP/ident.h5
cp "$V1" "$I"
drv 1 setattr "$I" data_cursor 17 >/dev/null 2>&1
verify "$I" >"$TMP/i.txt" 2>&1
rc=$?
grep -q "data_cursor = 17, expected (step 2 + skipped batches 0) x global_batch 8 = 16" "$TMP/i.txt"
tap_check $(( (rc == 2 ? 0 : 1) | $? )) "version 1 file with data_cursor 17: ckpt verify exits 2 naming the identity (got $rc)"
drv 1 setattr "$I" data_cursor 16 >/dev/null 2>&1
drv 1 setattr "$I" optim_step 3 >/dev/null 2>&1
verify "$I" >"$TMP/i2.txt" 2>&1
rc=$?
grep -q "optim_step = 3, expected 0..step (2)" "$TMP/i2.txt"
tap_check $(( (rc == 2 ? 0 : 1) | $? )) "version 1 file with optim_step 3 > step 2: ckpt verify exits 2 (got $rc)"

# ---- `latest` a directory ----
L=$TMP/latestdir
mkdir -p "$L/latest"
drv 2 save "$L" 1 >"$TMP/l.txt" 2>&1
rc=$?
grep -q "$L/latest is a directory, expected a regular file" "$TMP/l.txt"
tap_check $(( (rc == 2 ? 0 : 1) | $? )) "latest is a directory: the save exits 2 naming it (got $rc)"
left=$(cd "$L" && ls -A | tr '\n' ' ')
[[ $left == "latest " ]]
tap_check $? "latest is a directory: nothing left behind, no latest.tmp (dir: $left)"

# ---- run_dir length ----
pad() { local p=$1 n=$2; while ((${#p} < n)); do p+=x; done; printf '%s' "$p"; }
D200=$(pad "$TMP/d" 200)
drv 1 save "$D200" 1 >"$TMP/d200.txt" 2>&1
rc=$?
drv 1 resume "$D200" >>"$TMP/d200.txt" 2>&1
tap_check $((rc | $?)) "run_dir of ${#D200} characters: save and resume work"
D201=$(pad "$TMP/e" 201)
drv 1 save "$D201" 1 >"$TMP/d201.txt" 2>&1
rc=$?
grep -q "run_dir is 201 characters long, at most 200" "$TMP/d201.txt" && [[ ! -e $D201 ]]
tap_check $(( (rc == 1 ? 0 : 1) | $? )) "run_dir of 201 characters: exit 1 naming the limit, nothing created (got $rc)"
D230=$(pad "$TMP/f" 230) # Open MPI 4.1's MPI-IO aborted (exit 134) from 224 on
drv 1 save "$D230" 1 >"$TMP/d230.txt" 2>&1
rc=$?
grep -q "run_dir is 230 characters long, at most 200" "$TMP/d230.txt"
tap_check $(( (rc == 1 ? 0 : 1) | $? )) "run_dir of 230 characters: exit 1, not an abort in MPI-IO (got $rc)"

# ---- the heap bit that makes HDF5 loop (its verify started at the top) ----
wait "$loop_pid"
rc=$(cat "$TMP/loop.rc")
grep -q "did not finish in 4 s: the file's HDF5 global heap is damaged" "$TMP/loop.txt"
tap_check $(( (rc == 2 ? 0 : 1) | $? )) "heap bit that makes HDF5 loop: ckpt verify exits 2 after its bound, 4 s here (got $rc, 124 = hung)"
tap_done
