#!/usr/bin/env bash
# bench/gpu/run.sh starts tessera's programs with its own library path (issue 22, item 1).
# On the lent GPU machine tests/gpu/device.sh runs bench/gpu/run.sh with LD_LIBRARY_PATH naming
# the bundle's libraries (libconfig, HDF5, OpenBLAS, libgomp: the machine has none of them) and
# with PYTHON set to its python3-machine wrapper, which puts the machine's own library path back for
# PyTorch. tessera-train runs as a child of that Python (bench_util.py rss measures its peak), so
# it used to lose the bundle's path and fail to start (exit 127) in every row.
# Here the same situation for real: in a mount namespace of its own, the run hides the system's
# libconfig (the library file replaced by an empty one), so tessera-train finds it only through
# LD_LIBRARY_PATH (a directory holding a copy), and PYTHON is a wrapper that drops
# LD_LIBRARY_PATH as python3-machine does. The CPU self-check of run.sh (DEVICE=cpu TINY=1, one
# model, 3 steps) must then give a tessera row with numbers.
# Needs root and unshare -m (skips loudly without them), PyTorch (Debian's python3-torch).
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 4
skip_all() {
    local what
    for what in "tessera-train needs the hidden library (the set-up can fail)" \
        "run.sh's CPU self-check exits 0" "its results give tessera's tok/s" \
        "its results give PyTorch's tok/s"; do
        tap_skip "$what" "$1"
    done
    tap_done
    exit
}
if ((EUID != 0)) || ! unshare -m true 2>/dev/null; then skip_all "needs root and unshare -m (a mount namespace)"; fi
"$PY3" -c 'import torch' 2>/dev/null || skip_all "no PyTorch for $PY3"
# the libconfig tessera-train loads (resolved through its symlinks: that file gets hidden)
lib=$(ldd "$TRAIN" | awk '$1 ~ /^libconfig\.so/ && $3 ~ /^\// {print $3; exit}')
[[ -n $lib ]] || skip_all "$TRAIN loads no libconfig from a file (ldd: $(ldd "$TRAIN" | grep -m1 libconfig))"
real=$(readlink -f "$lib")
mkdir -p "$TMP/lib"
cp -L "$lib" "$TMP/lib/$(basename "$lib")"
: >"$TMP/empty.so"
# the wrapper: what device.sh's python3-machine does on the GPU machine (there it restores the
# machine's own path; here the machine has none)
printf '#!/usr/bin/env bash\nunset LD_LIBRARY_PATH\nexec %q "$@"\n' "$PY3" >"$TMP/python3-machine"
chmod +x "$TMP/python3-machine"
# hidden CMD...: CMD in a mount namespace where the system's libconfig file is empty
# shellcheck disable=SC2016 # the inner sh expands its own arguments
hidden() { unshare -m sh -c 'mount --bind "$0" "$1" && shift && exec "$@"' "$TMP/empty.so" "$real" "$@"; }

rc=0
hidden env -u LD_LIBRARY_PATH "$TRAIN" --version >"$TMP/bare.txt" 2>&1 || rc=$?
hidden env LD_LIBRARY_PATH="$TMP/lib" "$TRAIN" --version >"$TMP/with.txt" 2>&1
rc2=$?
((rc == 127 && rc2 == 0))
r=$?; ((r)) && { tap_diag "without the path: exit $rc"; sed 's/^/#   /' "$TMP/bare.txt"; tap_diag "with it: exit $rc2"; sed 's/^/#   /' "$TMP/with.txt"; }
tap_check $r "with $real hidden, tessera-train starts only through LD_LIBRARY_PATH (exit $rc without it, $rc2 with it)"

rc=0
(cd "$TSR_ROOT" && hidden env LD_LIBRARY_PATH="$TMP/lib" DEVICE=cpu TINY=1 MODELS=gpt2-124m STEPS=2 \
    WARMUP=1 CPU_THREADS=1 PYTHON="$TMP/python3-machine" BUILD="$BUILD" BENCH_OUT="$TMP/bench" \
    bash bench/gpu/run.sh) >"$TMP/run.txt" 2>&1 || rc=$?
((rc == 0)) || { tap_diag "exit $rc"; tail -20 "$TMP/run.txt" | sed 's/^/#   /'; }
tap_check $((rc != 0)) "bench/gpu/run.sh's CPU self-check through the wrapper: exit $rc"
# result JSON of each program: tokens_per_s, or an error line
res() { "$PY3" -c 'import json, sys; j = json.load(open(sys.argv[1])); print(j.get("tokens_per_s") or "error: " + j.get("error", "?"))' "$1" 2>&1; }
t=$(res "$TMP/bench/gpt2-124m-tessera.json") p=$(res "$TMP/bench/gpt2-124m-torch.json")
[[ $t =~ ^[0-9.]+$ ]]
r=$?; ((r)) && { tail -5 "$TMP/bench/gpt2-124m-tessera.log" 2>/dev/null | sed 's/^/#   /'; }
tap_check $r "tessera ran under the wrapper's Python with the bundle's path: $t tok/s"
[[ $p =~ ^[0-9.]+$ ]]
tap_check $? "PyTorch ran under the wrapper: $p tok/s"
tap_done
