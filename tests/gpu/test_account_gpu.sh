#!/usr/bin/env bash
# What a GPU run cost (src/telemetry/account.h, energy.h; docs/site.md "What a run cost"): device = cuda
# counts one GPU per rank.
#  - the CUDA emulator (build/tests/tessera-train-cuemu; every machine, CI included): the start and
#    account records say gpus = ranks, GPU-hours = GPUs x wall; gpu_energy_j null and the log says
#    why: libnvidia-ml.so.1 cannot be opened where there is no driver, and on a GPU node NVML has no
#    handle for the rank's GPU 3 (the GPU machine has one: seen there 2026-11-27); the banner's rank line
#    names the GPU the rank uses (CUDA_VISIBLE_DEVICES' entry);
#  - a real GPU (the next GPU session: bash tests/gpu/device.sh check account): the real library
#    reads NVML's total energy counter of the rank's GPU: gpu_energy_j > 0, the start's average
#    power between 10 W and 1500 W per GPU, the log's "GPU energy ... kWh"; skipped without one.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
tap_plan 3
EMU=$BUILD/tests/tessera-train-cuemu
make_synth "$TMP/data" 512 100000
tiny_args "$TMP/data/train"
args+=(--set model.n_layer=1 --set model.n_head=2 --set global_batch=4 --set micro_batch=2
       --set save_interval=0ba --set device=cuda)
# record RUN GPUS: the start and account records count GPUS GPUs; prints the account's energy
record() {
    "$PY3" - "$TMP/$1/metrics.jsonl" "$2" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
g = int(sys.argv[2])
s = [l for l in lines if l.get("event") == "start"][0]
a = [l for l in lines if l.get("event") == "account"][0]
ok = (s["gpus"] == g and a["gpus"] == g and abs(a["gpu_hours"] - g * a["wall_s"] / 3600) < 1e-9)
print(json.dumps(a["gpu_energy_j"]), a["wall_s"])
sys.exit(0 if ok else 1)
PY
}

if [[ -x $EMU ]]; then
    CUDA_VISIBLE_DEVICES=3 "$EMU" "${args[@]}" --set max_duration=4ba --set run_dir="$TMP/emu" >"$TMP/emu.txt" 2>&1
    rc=$?
    out=$(record emu 1)
    ((rc == 0)) && [[ $out == "null "* ]] &&
        grep -qE "GPU energy not measured \((libnvidia-ml.so.1 cannot be opened|NVML has no handle for CUDA device 0 \(3\))" "$TMP/emu.txt" &&
        grep -qE "^rank 0 on [^:]+: .* \| GPU 3$" "$TMP/emu.txt"
    tap_check $? "emulator, device = cuda: 1 GPU in the records, GPU-hours = wall, energy null for no NVML; the banner names GPU 3 (exit $rc; $out)"
else
    tap_skip "the emulator's accounting" "no $EMU (make)"
fi

real_backend
if [[ -z $why ]] && ((GPUS >= 1)); then
    "$TRAIN" "${args[@]}" --set max_duration=300ba --set run_dir="$TMP/gpu" >"$TMP/gpu.txt" 2>&1
    rc=$?
    read -r joules wall < <(record gpu 1)
    "$PY3" -c "import sys; j, w = float('$joules'), float('$wall'); print('# %.1f J over %.2f s: %.1f W' % (j, w, j / w)); sys.exit(0 if j > 0 and 10 <= j / w <= 1500 else 1)" &&
        ((rc == 0)) && grep -qE "^cost: this start .* GPU energy [0-9.e-]+ kWh" "$TMP/gpu.txt"
    tap_check $? "a real GPU: NVML's energy counter read, average power 10-1500 W, in the log (exit $rc)"
    grep -qE "^rank 0 on [^:]+: .* \| GPU [0-9A-Za-z-]+$" "$TMP/gpu.txt"
    tap_check $? "the banner names rank 0's GPU"
else
    tap_skip "a real GPU's energy from NVML" "${why:-nvidia-smi lists no GPU}"
    tap_skip "the banner names the real GPU" "${why:-nvidia-smi lists no GPU}"
fi
tap_done
