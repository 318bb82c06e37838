#!/usr/bin/env bash
# bench/gpu/deltanet_gpu.sh (device.sh's deltanet stage) on the host emulator of the CUDA backend
# (build/tests/deltanet_gpu_emu) at tiny shapes, its PyTorch peer's compiled form run eager on
# the CPU (the Debian torch here has no torch.compile): the script runs to the end and prints its
# table, a row for T = 100 with positive times on both sides (forward, forward + backward); bad
# arguments are refused (exit 1); the
# peer's form (the one the GPU call compiles) is the reference chunked algorithm's function.
# Times say nothing (the emulator is not a GPU); docs/deltanet.md "CUDA" has what is measured where.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 3
bin=$BUILD/tests/deltanet_gpu_emu
[[ -x $bin ]] || { echo "$bin not built (make)"; exit 1; }
BENCH=$bin TS="100" REPS=1 SHAPE="1 2 4 32 32" PEER_DEVICE=cpu PYTHON=/usr/bin/python3 \
    bash bench/gpu/deltanet_gpu.sh >"$TMP/out.txt" 2>&1
rc=$?
sed 's/^/# /' "$TMP/out.txt"
((rc == 0)) && awk -F'|' '
    /^\| 1 100 2 4 32 32 \|/ { rows++; if ($3 + 0 <= 0 || $4 + 0 <= 0 || $6 + 0 <= $3 || $7 + 0 <= 0) bad = 1 }
    END { exit !(rows == 1 && !bad) }' "$TMP/out.txt"
tap_check $? "deltanet_gpu.sh on the emulator: its row for T = 100 (two chunks, the second partial), tessera's and the peer's times positive, tessera's forward + backward over its forward (exit $rc)"
"$bin" 1 64 2 3 32 32 1 >"$TMP/bad.txt" 2>&1
rc=$?
((rc == 1)) && grep -q "HV a multiple of HK" "$TMP/bad.txt"
tap_check $? "deltanet_gpu refuses HV = 3 on HK = 2 with its usage (exit $rc: $(head -c 120 "$TMP/bad.txt"))"
/usr/bin/python3 - >"$TMP/peer.txt" 2>&1 <<'PY'
import sys, torch
sys.path[:0] = ["bench", "tests/reference"]
import torch_deltanet_peer as p, torch_deltanet as ref
x, _ = p.inputs(2, 100, 2, 4, 32, 32, "cpu", torch.float32)
o1, s1 = p.peer(*x.values(), 64, p.intra, p.step)
o2, s2 = ref.chunked(*x.values(), None, chunk=64, dtype=torch.float64)
e = max((o1 - o2).abs().max().item(), (s1 - s2).abs().max().item())
print("peer vs chunked() in float64: max |diff| %.3g" % e)
sys.exit(0 if e < 1e-5 else 1)
PY
tap_check $? "the peer's form equals tests/reference's chunked() (fp32 vs float64, <= 1e-5): $(cat "$TMP/peer.txt")"
tap_done
