#!/usr/bin/env bash
# The Gated DeltaNet core on the CPU (kernels/cpu/cpu_deltanet.c: the chunked forward with its saved
# states, and the backward) against the same chunked algorithm in PyTorch fp32 (eager, its backward
# by autograd: bench/torch_deltanet_peer.py), in one run, the same shapes and thread count.
# Usage: bash bench/deltanet_vs_torch.sh   (make first; about 2 minutes)
# Knobs: THREADS (2), REPS (3), SHAPES ("B T HK HV DK DV" lines; default below: a small one and
# Qwen3-Next's head sizes, 128 x 128, with 2 value heads a query/key head). Chunk 64.
# Prints a markdown table of the median seconds and the ratios (torch / tessera). Results:
# docs/benchmarks.md "Gated DeltaNet core, CPU".
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build} THREADS=${THREADS:-2} REPS=${REPS:-3} PYTHON=${PYTHON:-/usr/bin/python3}
SHAPES=${SHAPES:-"1 1024 2 4 64 64
1 4096 1 2 128 128"}
[[ -x $BUILD/bench/deltanet_bench ]] || { echo "$BUILD/bench/deltanet_bench missing: run make" >&2; exit 1; }
field() { "$PYTHON" -c "import json,sys; print('%.3f' % json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
ratio() { "$PYTHON" -c "import sys; print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$1" "$2"; }
echo "| B T HK HV dk dv | tessera fwd s | torch fwd s | ratio | tessera bwd s | torch bwd s | ratio |"
echo "|---|---|---|---|---|---|---|"
while read -r B T HK HV DK DV; do
    [[ -n ${B:-} ]] || continue
    c=$(OMP_NUM_THREADS=$THREADS "$BUILD/bench/deltanet_bench" "$B" "$T" "$HK" "$HV" "$DK" "$DV" 64 "$REPS")
    p=$("$PYTHON" bench/torch_deltanet_peer.py "$B" "$T" "$HK" "$HV" "$DK" "$DV" 64 "$REPS" "$THREADS")
    cf=$(field "$c" forward_s) cb=$(field "$c" backward_s) pf=$(field "$p" forward_s) pb=$(field "$p" backward_s)
    echo "| $B $T $HK $HV $DK $DV | $cf | $pf | $(ratio "$pf" "$cf") | $cb | $pb | $(ratio "$pb" "$cb") |"
done <<<"$SHAPES"
