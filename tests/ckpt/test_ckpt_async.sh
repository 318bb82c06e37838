#!/usr/bin/env bash
# The asynchronous save (save_async, issue 53; docs/checkpoint-format.md "Asynchronous save"):
#  - on 2 ranks under zero1, zero3 and hsdp (groups of 1, two replicas), and on the CUDA emulator
#    (device = cuda, zero1), saves every step of 3: steps 1 and 2 in the background (the second
#    waits for the first: one in flight), step 3 the final synchronous one; under ddp the resume
#    runs below (R: 2 and 4 in the background, 6 final; Y: every save synchronous); every
#    checkpoint equals the synchronous run's dataset for dataset (raw bytes and crc32c), and
#    metrics.jsonl says which were background saves (with their blocking and write seconds and
#    bytes) and that each was committed at a later step boundary;
#  - the CUDA emulator pins the host copy of the device's state (once, said at start);
#  - resume bit for bit from a checkpoint written in the background and from a synchronous one
#    (stopped after step 4 by TSR_FAULT=usr1, while the background save of step 4 was being
#    written: exit 85, that save committed as the stop checkpoint, not written twice); a save
#    written slowly while two steps changed the state holds the state of its own step;
#  - the memory plan (--dry-run, --plan and the start) shows the snapshot; save_async = false
#    shows none; a snapshot that does not fit MemAvailable (TSR_FAULT=mem_available) makes the run
#    save synchronously with one warning at start;
#  - tessera report: the checkpoints line of the summary and checkpoint.png;
#  - zero3 with 36M weights: a background and a final save grow the ranks' resident peak by the
#    plan's snapshot and at most its checkpoint I/O more (+16 MiB).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 14
synth_tiny_args 2 8 2 --set max_duration=3ba --set save_interval=1ba --set keep_last=3 \
    --set save_async_copy=background # (auto would copy in the step on a machine of 2 cores)
run() { local dir=$1 np=$2; shift 2; "${MPIRUN[@]}" -np "$np" "${TRAINER:-$TRAIN}" "${args[@]}" --set run_dir="$dir" "$@"; }
# same_datasets A.h5 B.h5: the same datasets, each with the same bytes and crc32c attribute
same_datasets() {
    /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, h5py
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
na, nb = [], []
a.visititems(lambda n, o: na.append(n) if isinstance(o, h5py.Dataset) else None)
b.visititems(lambda n, o: nb.append(n) if isinstance(o, h5py.Dataset) else None)
bad = [n for n in na if n not in b or a[n][()].tobytes() != b[n][()].tobytes()
       or int(a[n].attrs["crc32c"]) != int(b[n].attrs["crc32c"])]
print(f"# {sys.argv[1].split('/')[-2]}/{sys.argv[1].split('/')[-1]}: {len(na)} datasets, "
      f"different: {bad}, names equal: {sorted(na) == sorted(nb)}")
sys.exit(1 if bad or not na or sorted(na) != sorted(nb) else 0)
PY
}
# saves_ok RUN_DIR [A B LAST [DIRECT [STEP]]]: steps A and B (default 1 and 2) saved in the
# background, each committed at a step boundary after it, with blocking, write and wait seconds,
# the writer's CPU seconds by phase and its bytes; step LAST (default 3) synchronous. DIRECT 1:
# the background saves copied nothing into O_DIRECT bounce buffers (their slices were copied into
# the snapshot where they go to the disk straight from it; zero3 / hsdp parts lie in it packed:
# 0). STEP: their copy ran in the save step (1, save_async_copy = step) or in the background (0)
saves_ok() {
    "$PY3" - "$1/metrics.jsonl" "${2:-1}" "${3:-2}" "${4:-3}" "${5:-0}" "${6:-0}" <<'PY'
import json, sys
a, b, last, direct, step = map(int, sys.argv[2:7])
cpu = ("write_cpu_s", "write_cpu_copy_s", "write_cpu_slices_s", "write_cpu_fsync_s", "write_cpu_io_s")
s = {d["step"]: d for d in map(json.loads, open(sys.argv[1])) if d.get("checkpoint") == "save"}
ok = sorted(s) == [a, b, last] and [s[k]["async"] for k in (a, b, last)] == [True, True, False]
ok = ok and all(s[k]["committed_step"] >= k for k in (a, b)) and s[last]["committed_step"] == last
ok = ok and all(s[k][f] >= 0 for k in s for f in ("blocking_s", "write_s", "waited_s"))
ok = ok and all(s[k]["bytes"] == s[last]["bytes"] > 0 for k in s)
ok = ok and all(s[k][f] >= 0 for k in s for f in cpu) and all(s[k]["write_cpu_copy_s"] > 0 for k in (a, b))
ok = ok and (not direct or all(s[k]["write_bounced_bytes"] == 0 for k in (a, b)))
ok = ok and all(s[k]["copy_in_step"] == bool(step) for k in (a, b))
print("# saves:", {k: (s[k]["async"], s[k]["committed_step"], s[k]["blocking_s"], s[k]["write_s"],
                     s[k]["write_bounced_bytes"]) for k in s})
sys.exit(0 if ok else 1)
PY
}
# mode NAME NP TRAINER-ARGS...: the background run and the synchronous one, compared
mode() {
    local name=$1 np=$2 direct=$3 step=$4 ok=0 k
    shift 4
    run "$TMP/$name-a" "$np" "$@" >"$TMP/$name-a.txt" 2>&1 || ok=1
    run "$TMP/$name-s" "$np" --set save_async=false "$@" >"$TMP/$name-s.txt" 2>&1 || ok=1
    for k in 1 2 3; do same_datasets "$(ck "$TMP/$name-a" $k)" "$(ck "$TMP/$name-s" $k)" || ok=1; done
    saves_ok "$TMP/$name-a" 1 2 3 "$direct" "$step" || ok=1
    return $ok
}

# (ddp: the runs R and Y below)
mode zero1 2 1 1 --set parallel.sharding=zero1 --set save_async_copy=step &&
    (($(grep -c "blocking [0-9.]* s (the copy into the snapshot, made inside the step)" "$TMP/zero1-a.txt") == 2))
tap_check $? "zero1, 2 ranks, save_async_copy = step: checkpoints of steps 1, 2 (background) and 3 equal the synchronous run's, dataset for dataset; metrics.jsonl records each save (the background ones with no bounce copy, copied in the step); the log says the blocking was the copy made inside the step (no 'snapshot 0.000 s' beside it)"
mode zero3 2 0 0 --set parallel.sharding=zero3
tap_check $? "zero3, 2 ranks: the same"
mode hsdp 2 0 0 --set parallel.sharding=hsdp --set parallel.replica_group=1
tap_check $? "hsdp, 2 ranks (2 replicas of 1; the first writes): the same"
TRAINER=$BUILD/tests/tessera-train-cuemu mode cuda 2 1 0 --set device=cuda --set parallel.sharding=zero1 \
    --set model.n_head=2 # (head size 32: a GPU attention kernel's)
tap_check $? "device = cuda on the emulator, zero1, 2 ranks: the same"
n=$(grep -c "^save_async: .* of host memory pinned per rank" "$TMP/cuda-a.txt")
[[ $n == 1 ]] && ! grep -q "pinned" "$TMP/cuda-s.txt"
tap_check $? "device = cuda: the host copy of the device's state pinned once at start ($n), not without save_async"

# resume: R uninterrupted (6 steps, saves every 2: 2 and 4 in the background); S stopped by a
# SIGUSR1 after step 4 while its background save is written (slow-write), then rerun; Y the same
# with synchronous saves
args+=(--set max_duration=6ba --set save_interval=2ba)
run "$TMP/R" 2 >"$TMP/R.txt" 2>&1
rcr=$?
TSR_FAULT=usr1:4:0 TSR_CKPT_FAULT=slow-write:30 run "$TMP/S" 2 >"$TMP/S1.txt" 2>&1
rc=$?
tap_diag "S: $(grep -E "^checkpoint save|^stop requested" "$TMP/S1.txt" | cut -c1-150 | tr '\n' ';')"
# the write of step 2 (30 ms a tensor) outlasts steps 3 and 4: committed by the save of step 4,
# which waited for it, while training went on
[[ $rcr == 0 && $rc == 85 && $(cat "$TMP/S/latest") == step-00000004.h5 ]] &&
    grep -q "^checkpoint save step 4: the background save of step 2 was still being written; waited [0-9.]* s" "$TMP/S1.txt" &&
    grep -q '"step": 2, "checkpoint": "save", .*"async": true, .*"committed_step": 4' "$TMP/S/metrics.jsonl" &&
    (( $(grep -c "^checkpoint save step 4 |" "$TMP/S1.txt") == 1 )) &&
    grep -q '"step": 4, "checkpoint": "save", .*"async": true' "$TMP/S/metrics.jsonl" &&
    "$TOOL" ckpt verify "$(ck "$TMP/S" 4)" >/dev/null
tap_check $? "slow writes: steps 3 and 4 ran while step 2's save was written, step 4's waited for it; SIGUSR1 after step 4 while its own background save is written: committed as the stop checkpoint (once, verifies), exit $rc (want 85)"
run "$TMP/S" 2 >"$TMP/S2.txt" 2>&1 && grep -q "checkpoint resume step 4" "$TMP/S2.txt" &&
    cmp -s <(final_lines "$TMP/R/metrics.jsonl") <(final_lines "$TMP/S/metrics.jsonl") &&
    same_tensors "$(ck "$TMP/R" 6)" "$(ck "$TMP/S" 6)"
tap_check $? "resumed from the checkpoint written in the background: every step and the final checkpoint bit for bit like the uninterrupted run"
TSR_FAULT=usr1:4:0 run "$TMP/Y" 2 --set save_async=false >"$TMP/Y1.txt" 2>&1
rc=$?
run "$TMP/Y" 2 >"$TMP/Y2.txt" 2>&1 && ((rc == 85)) && grep -q "checkpoint resume step 4" "$TMP/Y2.txt" &&
    grep -q '"step": 4, "checkpoint": "save", .*"async": false' "$TMP/Y/metrics.jsonl" &&
    cmp -s <(final_lines "$TMP/R/metrics.jsonl") <(final_lines "$TMP/Y/metrics.jsonl") &&
    same_tensors "$(ck "$TMP/R" 6)" "$(ck "$TMP/Y" 6)"
tap_check $? "resumed from a synchronous checkpoint (exit $rc, want 85): bit for bit like the uninterrupted run"
ok=0
for k in 2 4 6; do same_datasets "$(ck "$TMP/R" $k)" "$(ck "$TMP/Y" $k)" || ok=1; done
saves_ok "$TMP/R" 2 4 6 1 0 || ok=1
tap_check $ok "ddp, 2 ranks: R's checkpoints of steps 2, 4 (background) and 6 equal Y's (synchronous), dataset for dataset; metrics.jsonl records each save"
same_datasets "$(ck "$TMP/S" 2)" "$(ck "$TMP/Y" 2)"
tap_check $? "the step-2 checkpoint written slowly in the background while steps 3 and 4 changed the state equals the synchronous run's step 2 (the snapshot, not the live state, was written)"

# the memory plan: the snapshot of 2 ranks' ddp = 3 x (the parameters / 2) floats, rounded up,
# and room to place each of 3 x TSR_P_COUNT tensors (the parameter slots of src/model/model.h,
# counted there: a slot of size 0 is still room planned) on its 4 KiB alignment (ckpt.h
# CKPT_STAGE_PAD_FLOATS)
plan_snap() { sed -nE 's/^memory per rank.*, checkpoint snapshot ([0-9.]+ [KMG]?i?B) \(save_async, host\); total .*/\1/p' "$1"; }
run "$TMP/P" 2 --dry-run >"$TMP/P.txt" 2>&1
"$TRAIN" "${args[@]}" --set run_dir="$TMP/P" --plan 4 >"$TMP/P4.txt" 2>&1
"$TRAIN" "${args[@]}" --set run_dir="$TMP/P" --plan 2 --set save_async=false >"$TMP/Pf.txt" 2>&1
params=$(/usr/bin/python3 -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r')
print(sum(o.size for o in f['model'].values()))" "$(ck "$TMP/R" 2)") # the flat buffer's floats
slots=$(sed -n '/^typedef enum {/,/TSR_P_COUNT$/p' "$TSR_ROOT/src/model/model.h" | grep -c '^ *TSR_P_[A-Z0-9_]*\( = 0\)\?,')
want2=$("$PY3" -c "b=3*4*($params//2+16)+3*$slots*4096; print(f'{b/1024:.1f} KiB' if b < 1048576 else f'{b/1048576:.1f} MiB')")
want4=$("$PY3" -c "b=3*4*($params//4+16)+3*$slots*4096; print(f'{b/1024:.1f} KiB' if b < 1048576 else f'{b/1048576:.1f} MiB')")
tap_diag "snapshot: dry run on 2 ranks '$(plan_snap "$TMP/P.txt")' (want $want2), --plan 4 '$(plan_snap "$TMP/P4.txt")' (want $want4)"
[[ $(plan_snap "$TMP/P.txt") == "$want2" && $(plan_snap "$TMP/P4.txt") == "$want4" ]] &&
    grep -q "checkpoint snapshot .*(save_async, host)" "$TMP/R.txt" && grep -q "^memory per rank" "$TMP/Pf.txt" &&
    ! grep -q "checkpoint snapshot" "$TMP/Pf.txt"
tap_check $? "the memory plan (--dry-run, --plan, the start) shows the snapshot, 3 x params / ranks floats and the alignment room; none with save_async = false"
TSR_FAULT=mem_available:64 run "$TMP/M" 2 --set max_duration=3ba >"$TMP/M.txt" 2>&1
rc=$?
n=$(grep -c "warning: save_async: the snapshot of a background save .* does not fit beside the run on 1 node(s)" "$TMP/M.txt")
first=$(grep -n "save_async: the snapshot" "$TMP/M.txt" | head -1 | cut -d: -f1)
step1=$(grep -n '^step *1/3' "$TMP/M.txt" | head -1 | cut -d: -f1)
[[ $rc == 0 && $n == 1 && -n $first && -n $step1 ]] && ((first < step1)) &&
    ! grep -q '"async": true' "$TMP/M/metrics.jsonl" && grep -q '"step": 2, "checkpoint": "save", .*"async": false' "$TMP/M/metrics.jsonl"
tap_check $? "a snapshot that does not fit MemAvailable (64 KiB): one warning at start, every save synchronous (exit $rc)"

"$TOOL" report "$TMP/R" >"$TMP/rep.txt" 2>&1
rc=$?
grep -q "^checkpoints: 3 saved (2 in the background); training stopped [0-9.e-]* s per save (median; longest [0-9.e-]* s), written in [0-9.e-]* s (median), [0-9.]* MB each (the last)$" "$TMP/rep.txt"
ok=$?
if command -v gnuplot >/dev/null; then
    ((ok == 0 && rc == 0)) && [[ $(head -c 8 "$TMP/R/report/checkpoint.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] &&
        grep -q "title 'training stopped (blocking)'" "$TMP/R/report/plots.gp" &&
        grep -q "plot:       $TMP/R/report/checkpoint.png" "$TMP/rep.txt"
else
    ((ok == 0)) && grep -q "title 'training stopped (blocking)'" "$TMP/R/report/plots.gp"
fi
tap_check $? "tessera report: the checkpoints line (3 saved, 2 in the background, blocking and write seconds, MB) and checkpoint.png (exit $rc)"

# The host memory of zero3 saves against the plan: 36M weights (d_model 768, 5 layers), zero3 on 2
# ranks, 3 steps. A saves step 2 in the background and step 3 synchronously at the end; B never
# saves (save_async = false, no final save). The ranks' largest resident set (ru_maxrss of the
# children) of A exceeds B's by at least the plan's snapshot (it is taken) and by no more than the
# plan's snapshot + checkpoint I/O + 16 MiB: the saves' layout exchange moved shards through its
# kept buffers (it allocated the whole part twice a set), the final save into the snapshot (it
# allocated three parts of its own). Seen failing with the old exchange and final save (062a67a):
# +584 MiB against the same plan (+298 MiB now).
# maxrss NAME ARGS...: runs ARGS (output in $TMP/NAME.txt); prints the children's largest RSS (KiB)
maxrss() {
    local name=$1
    shift
    "$PY3" - "$TMP/$name.txt" "$@" <<'PY'
import resource, subprocess, sys
with open(sys.argv[1], "w") as out:
    rc = subprocess.run(sys.argv[2:], stdout=out, stderr=subprocess.STDOUT).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if rc == 0 else -1)
PY
}
big=(--set model.d_model=768 --set model.n_layer=5 --set model.n_head=12 --set global_batch=2
     --set micro_batch=1 --set max_duration=3ba --set save_interval=2ba --set parallel.sharding=zero3)
ra=$(maxrss ZA "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" "${big[@]}" --set run_dir="$TMP/ZA")
rb=$(maxrss ZB "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" "${big[@]}" --set save_async=false --set save_interval=0ba \
     --set save_final=false --set run_dir="$TMP/ZB")
"$PY3" - "$TMP/ZA.txt" "$ra" "$rb" <<'PY'
import re, sys
text, ra, rb = open(sys.argv[1]).read(), int(sys.argv[2]), int(sys.argv[3])
units = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
def plan(what):
    m = re.search(r"^memory per rank.*" + what + r" ([0-9.]+) (B|KiB|MiB|GiB) \(", text, re.M)
    return float(m.group(1)) * units[m.group(2)] / 2 ** 20 if m else -1
snap, io, grew = plan("checkpoint snapshot"), plan("checkpoint I/O"), (ra - rb) / 1024
saves = len(re.findall(r"^checkpoint save step [23] ", text, re.M))
print(f"# resident peak A {ra / 1024:.1f} MiB, B {rb / 1024:.1f} MiB: +{grew:.1f} MiB; the plan's "
      f"snapshot {snap:.1f} MiB + checkpoint I/O {io:.1f} MiB; {saves} saves")
sys.exit(0 if ra > 0 and rb > 0 and saves == 2 and snap > 0 and io > 0 and snap <= grew <= snap + io + 16 else 1)
PY
tap_check $? "zero3, 2 ranks, 36M weights: a background and a final save take no more host memory than the plan's snapshot and checkpoint I/O (+16 MiB)"
tap_done
