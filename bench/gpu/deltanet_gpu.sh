#!/usr/bin/env bash
# The Gated DeltaNet core on one GPU (kernels/cuda/cuda_deltanet.cu through bench/gpu/deltanet_gpu.c)
# against the PyTorch peer of the same chunked algorithm (bench/torch_deltanet_peer.py on cuda:
# bf16 q, k, v, fp32 state, torch.compile), in one run, Qwen3-Next's linear-attention heads
# (16 query/key heads, 32 value heads, d_k = d_v = 128), one sequence, chunk 64. The device
# tool's `deltanet` stage (tests/gpu/device.sh); docs/deltanet.md "CUDA".
# Usage: bash bench/gpu/deltanet_gpu.sh     Knobs: TS ("4096 16384"), REPS (5), SHAPE
# ("1 16 32 128 128": B HK HV DK DV), BENCH ($BUILD/bench/deltanet_gpu), PYTHON (python3),
# PEER_DEVICE (cuda), PEER_FORM (peer); tests/gpu/test_deltanet_bench.sh runs it on the emulator.
# Prints one markdown table: the median milliseconds of each, and the ratios (torch / tessera).
# A peer that SKIPs (no torch, no CUDA device) leaves its cells "skip". Exit 0 when every tessera
# run succeeded.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build} REPS=${REPS:-5} TS=${TS:-"4096 16384"} PYTHON=${PYTHON:-python3}
BENCH=${BENCH:-$BUILD/bench/deltanet_gpu} PEER_DEVICE=${PEER_DEVICE:-cuda} PEER_FORM=${PEER_FORM:-peer}
read -r B HK HV DK DV <<<"${SHAPE:-1 16 32 128 128}"
[[ -x $BENCH ]] || { echo "deltanet_gpu.sh: $BENCH missing: run make" >&2; exit 1; }
ms() { "$PYTHON" -c "import json,sys; v=json.loads(sys.argv[1]).get(sys.argv[2]); print('-' if v is None else '%.3f' % (1e3 * v))" "$1" "$2"; }
ratio() { "$PYTHON" -c "import sys; a, b = sys.argv[1:]; print('%.2f' % (float(a) / float(b)) if '-' not in (a, b) and float(b) > 0 else '-')" "$1" "$2"; }
echo "| B T HK HV dk dv | tessera fwd ms | torch fwd ms | ratio | tessera fwd+bwd ms | torch fwd+bwd ms | ratio | torch |"
echo "|---|---|---|---|---|---|---|---|"
rc=0
for T in $TS; do
    c=$("$BENCH" "$B" "$T" "$HK" "$HV" "$DK" "$DV" "$REPS") || { rc=1; echo "| $B $T $HK $HV $DK $DV | failed | | | | | | |"; continue; }
    cf=$(ms "$c" forward_s) cb=$(ms "$c" backward_s)
    ct=$("$PYTHON" -c "print('%.3f' % (float('$cf') + float('$cb')))")
    pf=skip pt=skip what=skip
    if p=$("$PYTHON" bench/torch_deltanet_peer.py "$B" "$T" "$HK" "$HV" "$DK" "$DV" 64 "$REPS" 1 "$PEER_DEVICE" "$PEER_FORM"); then
        pf=$(ms "$p" forward_s) pb=$(ms "$p" backward_s)
        pt=$("$PYTHON" -c "print('%.3f' % (float('$pf') + float('$pb')))")
        what=$("$PYTHON" -c "import json,sys; j=json.loads(sys.argv[1]); print('%s %s%s' % (j['torch'], j['device'], ' compiled' if j['compiled'] else ' eager'))" "$p")
    fi
    echo "| $B $T $HK $HV $DK $DV | $cf | $pf | $(ratio "$pf" "$cf") | $ct | $pt | $(ratio "$pt" "$ct") | $what |"
done
exit $rc
