#!/usr/bin/env bash
# Checkpoints through MPI-IO (checkpoint/, docs/checkpoint-format.md), driven by
# build/tests/ckpt_driver: tensors of 1-D..4-D shapes, exactly representable values, each tensor's
# flat range split unevenly over the ranks (some empty). Checks: save on 2 ranks, load on 1, 2 and 4
# (elastic) bit for bit; retention keeps 2 and `latest` names the newest; h5py reads the right
# values and its own CRC32C equals the attribute; a flipped byte is found and named, resume falls
# back with a warning naming the file; no `latest`, a truncated file, all invalid (exit 2, each file
# listed); a crash in the middle of a save (TSR_CKPT_FAULT, test-only) leaves the previous
# checkpoint valid and its .tmp is ignored, then removed by the next save's retention; a rank that
# cannot open the .tmp while the others can: every rank returns the error, none hangs, nothing
# replaces the newest checkpoint.
source "$(dirname "$0")/../lib.sh"
DRIVER=$BUILD/tests/ckpt_driver
PY=${PYTHON:-/usr/bin/python3}
if [[ ! -x $DRIVER ]]; then echo "$DRIVER not built (MPI build needed)"; exit 77; fi
tsr_tmpdir
tap_plan 27
R=$TMP/run
drv() { local np=$1; shift; "${MPIRUN[@]}" -np "$np" "$DRIVER" "$@"; }

drv 2 save "$R" 1 2 3 >"$TMP/save.txt" 2>&1
tap_check $? "save steps 1, 2, 3 on 2 ranks ($(grep -c '^saved' "$TMP/save.txt") saved)"
files=$(cd "$R" && printf '%s ' *)
[[ $files == "latest step-00000002.h5 step-00000003.h5 " && $(cat "$R/latest") == step-00000003.h5 ]]
tap_check $? "retention keep_last=2: only steps 2 and 3 remain, latest names 3 (dir: $files)"

for np in 1 2 4; do
    drv $np resume "$R" >"$TMP/res$np.txt" 2>&1
    rc=$?
    grep -q "loaded step 3 from $R/step-00000003.h5 on $np ranks (written by 2): 0 wrong elements, metadata ok" "$TMP/res$np.txt"
    tap_check $((rc | $?)) "resume on $np ranks (saved on 2): every element exact, metadata right (exit $rc)"
done
drv 3 load "$R/step-00000002.h5" model/ >"$TMP/load3.txt" 2>&1
rc=$?
grep -q "loaded step 2 .* 0 wrong elements" "$TMP/load3.txt"
tap_check $((rc | $?)) "ckpt_load of step 2 on 3 ranks, only_prefix model/: exact (exit $rc)"

# h5py: values, shape, CRC32C computed in python, root attributes
"$PY" - "$R/step-00000003.h5" >"$TMP/h5py.txt" 2>&1 <<'PY'
import sys, h5py, numpy as np
T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    T.append(c)
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = T[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
f = h5py.File(sys.argv[1], "r")
ok = True
for t, name, shape in [(0, "model/wte", (37, 11)), (3, "optim/m/attn", (5, 7, 3)), (4, "optim/v/attn", (3, 4, 5, 2))]:
    d = f[name]
    a = d[...]
    i = np.arange(a.size, dtype=np.int64)
    want = (((i * 7 + t * 13 + 3 * 101) % 65536) - 32768 + 0.25).astype(np.float32).reshape(shape)
    crc = crc32c(a.astype("<f4").tobytes())
    good = d.shape == shape and d.dtype == np.float32 and np.array_equal(a, want) and crc == int(d.attrs["crc32c"])
    print(f"# {name}: shape {d.shape}, values {'exact' if np.array_equal(a, want) else 'WRONG'}, "
          f"crc32c python 0x{crc:08x} attribute 0x{int(d.attrs['crc32c']):08x}")
    ok &= good
at = f.attrs
ok &= at["format"] == b"tessera-checkpoint" and int(at["format_version"]) == 3 and int(at["step"]) == 3
ok &= int(at["world_size"]) == 2 and int(at["tokens"]) == 3000 and b"global_batch = 8" in at["config"]
# meta_crc32c: every other root attribute in order of name, each as name NUL value NUL
# (integers in decimal, strings as stored; docs/checkpoint-format.md)
txt = lambda v: v if isinstance(v, bytes) else str(int(v)).encode()
blob = b"".join(k.encode() + b"\0" + txt(at[k]) + b"\0" for k in sorted(at.keys()) if k != "meta_crc32c")
ok &= crc32c(blob) == int(at["meta_crc32c"])
print("# root attributes:", {k: (v if not isinstance(v, bytes) else v[:40]) for k, v in at.items()},
      f"meta_crc32c python 0x{crc32c(blob):08x}")
sys.exit(0 if ok else 1)
PY
tap_check $? "h5py reads model/wte, optim/m/attn, optim/v/attn: shapes, values exact, python CRC32C == attribute"
cat "$TMP/h5py.txt"

# flip one byte inside optim/m/attn's data in a copy
flip() { # flip FILE DATASET
    "$PY" - "$1" "$2" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    off = f[sys.argv[2]].id.get_offset()
with open(sys.argv[1], "r+b") as g:
    g.seek(off + 10); b = g.read(1); g.seek(off + 10); g.write(bytes([b[0] ^ 0x01]))
PY
}
# resumes NAME DIR STEP PATTERN WHAT: a resume from DIR (its output in $TMP/NAME.txt) exits 0 having
# loaded step STEP with no wrong element, its output matching PATTERN (empty: anything); the check
# says WHAT and the exit
resumes() {
    local rc
    drv 2 resume "$2" >"$TMP/$1.txt" 2>&1
    rc=$?
    grep -q "loaded step $3 .* 0 wrong elements" "$TMP/$1.txt" && grep -q -- "$4" "$TMP/$1.txt"
    tap_check $((rc | $?)) "$5 (exit $rc)"
}
C=$TMP/corrupt
cp -r "$R" "$C"
flip "$C/step-00000003.h5" optim/m/attn
drv 2 load "$C/step-00000003.h5" >"$TMP/bad.txt" 2>&1
rc=$?
grep -q "tensor optim/m/attn: CRC32C mismatch" "$TMP/bad.txt"
tap_check $((rc != 2 || $? != 0)) "flipped byte: load exits 2 (got $rc) naming the tensor optim/m/attn"
resumes fall "$C" 2 "warning: checkpoint $C/step-00000003.h5 skipped: tensor optim/m/attn: CRC32C mismatch" \
    "resume falls back to step 2 with a warning naming the corrupt step-00000003.h5"

N=$TMP/nolatest
cp -r "$R" "$N"
rm "$N/latest"
resumes nolatest "$N" 3 "" "latest deleted: resume still finds the newest valid (step 3)"

cp "$N/step-00000003.h5" "$N/step-00000009.h5"
resumes renamed "$N" 3 "step-00000009.h5 skipped: its step attribute is 3, its name says 9" \
    "a file whose step attribute differs from its name is skipped with a warning"

T=$TMP/trunc
cp -r "$R" "$T"
truncate -s 9000 "$T/step-00000003.h5"
resumes trunc "$T" 2 "step-00000003.h5 skipped" "newest truncated: resume falls back to step 2 with a warning"

truncate -s 100 "$C/step-00000002.h5"
drv 2 resume "$C" >"$TMP/none.txt" 2>&1
rc=$?
grep -q "error: no valid checkpoint in $C" "$TMP/none.txt" && grep -q "^  $C/step-00000003.h5: tensor optim/m/attn" "$TMP/none.txt" &&
    grep -q "^  $C/step-00000002.h5: cannot open" "$TMP/none.txt"
tap_check $((rc != 2 || $? != 0)) "all invalid: resume exits 2 (got $rc), the error lists each file tried and why"
sed -n '/error: no valid/,/^  .*00002/p' "$TMP/none.txt" | sed 's/^/# /'

drv 2 resume "$TMP/fresh" >"$TMP/fresh.txt" 2>&1
rc=$?
tap_check $((rc != 1)) "no checkpoint at all: resume returns 1, a fresh run (got $rc)"

# crash in the middle of saving step 4 (rank 0 aborts after writing 1 tensor)
TSR_CKPT_FAULT=abort-after:1 drv 2 save "$R" 4 >"$TMP/crash.txt" 2>&1
rc=$?
[[ $rc != 0 && -f $R/step-00000004.h5.tmp && ! -e $R/step-00000004.h5 && $(cat "$R/latest") == step-00000003.h5 ]]
tap_check $? "TSR_CKPT_FAULT=abort-after:1 kills the save of step 4 (exit $rc): only a .tmp, latest still names 3"
drv 2 resume "$R" >"$TMP/after.txt" 2>&1
rc=$?
grep -q "loaded step 3 .* 0 wrong elements" "$TMP/after.txt" && ! grep -q "step-00000004" "$TMP/after.txt"
tap_check $((rc | $?)) "after the crash: resume takes step 3, the .tmp is ignored (exit $rc)"
drv 2 save "$R" 5 >"$TMP/save5.txt" 2>&1
rc=$?
files=$(cd "$R" && printf '%s ' *)
[[ $rc == 0 && $files == "latest step-00000003.h5 step-00000005.h5 " ]]
tap_check $? "the next save (step 5) removes the stale .tmp and step 2 (dir: $files)"
# A rank that cannot open the .tmp while the others can (what a node whose view of run_dir
# differs meets: node-local, read-only or absent there): here the ranks run in different working
# directories and run_dir is relative, and in one of them "run" is a plain file. Every rank must
# return the error (none hangs: under a timeout, exit 124 is a hang), the message names the rank
# and the path, and nothing changes in the run directory.
mkdir -p "$TMP/elsewhere" && : >"$TMP/elsewhere/run"
split_save() { # split_save STEP DIR_OF_RANK0 DIR_OF_RANK1
    timeout -k 10 60 "${MPIRUN[@]}" -np 1 --wdir "$2" "$DRIVER" save run "$1" : \
        -np 1 --wdir "$3" "$DRIVER" save run "$1"
}
split_save 6 "$TMP" "$TMP/elsewhere" >"$TMP/split1.txt" 2>&1
rc=$?
grep -q "^rank 0: save of step 6 returned 2" "$TMP/split1.txt" &&
    grep -q "^rank 1: save of step 6 returned 2" "$TMP/split1.txt" &&
    grep -q "checkpoint run/step-00000006.h5 not written: rank 1: cannot open run/step-00000006.h5.tmp" "$TMP/split1.txt"
tap_check $((rc != 2 || $? != 0)) "rank 1 cannot open the .tmp: every rank returns exit 2 (got $rc; 124 = hang), naming rank 1 and the path"
grep -E "error|returned" "$TMP/split1.txt" | sed 's/^/# /'
files=$(cd "$R" && printf '%s ' *)
drv 2 resume "$R" >"$TMP/after-split.txt" 2>&1
rc2=$?
[[ $files == "latest step-00000003.h5 step-00000005.h5 " && $(cat "$R/latest") == step-00000005.h5 ]] &&
    grep -q "loaded step 5 .* 0 wrong elements" "$TMP/after-split.txt"
tap_check $((rc2 | $?)) "after it: no step 6 and no .tmp, latest still names 5, resume loads step 5 (dir: $files)"
split_save 6 "$TMP/elsewhere" "$TMP" >"$TMP/split0.txt" 2>&1
rc=$?
files=$(cd "$R" && printf '%s ' *)
grep -q "^rank 0: save of step 6 returned 2" "$TMP/split0.txt" &&
    grep -q "^rank 1: save of step 6 returned 2" "$TMP/split0.txt" &&
    grep -q "checkpoint run/step-00000006.h5 not written: cannot create run/step-00000006.h5.tmp" "$TMP/split0.txt" &&
    [[ $files == "latest step-00000003.h5 step-00000005.h5 " ]]
tap_check $((rc != 2 || $? != 0)) "rank 0 cannot create the .tmp: every rank returns exit 2 (got $rc), the run directory unchanged (dir: $files)"
grep -E "error|returned" "$TMP/split0.txt" | sed 's/^/# /'
drv 3 save-gap "$TMP/gap" 1 >"$TMP/gap.txt" 2>&1
rc=$?
grep -q "tensor model/wte: the ranks' ranges cover 406 of its 407 elements" "$TMP/gap.txt" && [[ -z $(ls "$TMP/gap") ]]
tap_check $((rc != 2 || $? != 0)) "ranges that do not tile a tensor: save refused with exit 2 (got $rc), naming it; no file left"

# tessera ckpt ls / verify / inspect, once wired into build/tessera
if "$TOOL" ckpt --help >/dev/null 2>&1; then
    "$TOOL" ckpt ls "$C" >"$TMP/ls.txt" 2>&1
    rc=$?
    grep -qE "^ *3 .*invalid" "$TMP/ls.txt" && grep -qE "^ *2 .*invalid" "$TMP/ls.txt"
    tap_check $? "tessera ckpt ls: both corrupt checkpoints listed as invalid (exit $rc)"
    sed 's/^/# /' "$TMP/ls.txt"
    "$TOOL" ckpt ls "$R" >"$TMP/ls2.txt" 2>&1
    grep -qE "^ *5 .* valid .*latest" "$TMP/ls2.txt" && grep -qE "^ *3 .* valid" "$TMP/ls2.txt"
    tap_check $? "tessera ckpt ls: steps 3 and 5 valid, latest marks 5"
    sed 's/^/# /' "$TMP/ls2.txt"
    "$TOOL" ckpt verify "$R/step-00000005.h5" >"$TMP/v.txt" 2>&1
    tap_check $? "tessera ckpt verify of a good file exits 0"
    "$TOOL" ckpt verify "$TMP/corrupt/step-00000003.h5" >"$TMP/v2.txt" 2>&1
    rc=$?
    grep -q "optim/m/attn" "$TMP/v2.txt"
    tap_check $((rc != 2 || $? != 0)) "tessera ckpt verify of the flipped file exits 2 (got $rc) naming optim/m/attn"
    "$TOOL" ckpt inspect "$R/step-00000005.h5" >"$TMP/i.txt" 2>&1
    rc=$?
    grep -q "tessera-checkpoint" "$TMP/i.txt" && grep -q "global_batch = 8" "$TMP/i.txt" &&
        grep -qE "optim/v/attn +\(3, 4, 5, 2\) +120 " "$TMP/i.txt"
    tap_check $((rc | $?)) "tessera ckpt inspect: format, config text, tensor table (exit $rc)"
    sed 's/^/# /' "$TMP/i.txt" | head -30
    "$TOOL" ckpt verify "$TMP/nonexistent.h5" >"$TMP/v3.txt" 2>&1
    rc=$?
    tap_check $((rc != 2)) "tessera ckpt verify of a missing file exits 2 (got $rc)"
else
    for what in "ckpt ls corrupt" "ckpt ls valid" "ckpt verify good" "ckpt verify flipped" "ckpt inspect" "ckpt verify missing"; do
        _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - tessera $what # SKIP 'tessera ckpt' not wired into $TOOL yet"
    done
fi
tap_done
