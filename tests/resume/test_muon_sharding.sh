#!/usr/bin/env bash
# optim.name = muon under every sharding mode on real MPI ranks (docs/training.md "Muon",
# src/optim/muon.h), 8 steps of a tiny Llama-style SwiGLU mixture of experts with grouped-query
# attention (q, k and v of different widths, gate and up, each expert's projections and the router
# each a matrix of its own) on the synthetic corpus:
#  - on 2 ranks zero1 and zero3, on 4 ranks zero1, zero3 and hsdp (2 groups of 2, with
#    parallel.expert = 2) give ddp's loss and grad norm at every step within 1e-6 relative (each
#    matrix is orthogonalised whole: by every rank under ddp, by the rank whose zero1 part holds
#    it, by its owner under zero3/hsdp; the experts' by every rank of their EDP group that holds
#    them);
#  - zero3's exchange: the bytes the ranks sent equal the formula's (muon.h) times the steps;
#    the CPU allocator's peak before the first save within the memory plan rank 0 printed, which
#    counts Muon's scratch (the iteration's buffers, the owned matrices, the exchange's);
#  - a rank SIGKILLed after step 6 of a zero3 run: the rerun resumes from step 4 and ends bit for
#    bit like the uninterrupted run (losses, weights, and the momentum in optim/m);
#  - the zero3 checkpoint of 4 ranks resumes under zero3 on 2 ranks, steps 5-8 within 1e-6 of the
#    4-rank run;
#  - refusals, exit 1 with nothing written into run_dir: an unknown optim.name, a Muon key without
#    optim.name = muon, LoRA with Muon, and a resume that switches optimizers.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 13
make_synth "$TMP/data" 512 40000
tap_check $? "synthetic corpus made"
tiny_args "$TMP/data/train"
# a Llama-style SwiGLU mixture of experts with grouped-query attention: q, k, v of different
# widths, gate and up, each expert's three projections and the router are each a matrix
args+=(--set model.n_layer=2 --set model.n_head=4 --set global_batch=8 --set micro_batch=2
       --set max_duration=8ba --set save_interval=4ba --set keep_last=3 --set optim.warmup=2ba
       --set model.mlp=swiglu --set model.norm=rmsnorm --set model.pos=rope --set model.bias=false
       --set model.n_kv_head=2 --set model.moe_experts=4 --set model.moe_top_k=2
       --set model.moe_intermediate_size=32 --set model.max_seq_len=0)
mu=(--set optim.name=muon --set optim.muon.weight_decay=0.1)
run() {
    local dir=$1 np=$2
    shift 2
    "${MPIRUN[@]}" -np "$np" "$TRAIN" "${args[@]}" "${mu[@]}" --set run_dir="$TMP/$dir" "$@" \
        >"$TMP/$dir.txt" 2>&1
}
close() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" "${3:-1}" 1e-6 1e-6; }

run D2 2 && run O2 2 --set parallel.sharding=zero1 && run Z2 2 --set parallel.sharding=zero3
tap_check $? "2 ranks, Muon: ddp, zero1, zero3 (8 steps each)"
tap_diag "zero1 vs ddp: $(close D2 O2); zero3 vs ddp: $(close D2 Z2)"
close D2 O2 >/dev/null && close D2 Z2 >/dev/null
tap_check $? "2 ranks: Muon under zero1 and zero3 equals ddp within 1e-6 at all 8 steps"

run D4 4 && run O4 4 --set parallel.sharding=zero1 && run Z4 4 --set parallel.sharding=zero3 &&
    run H4 4 --set parallel.sharding=hsdp --set parallel.replica_group=2 --set parallel.expert=2
tap_check $? "4 ranks, Muon: ddp, zero1, zero3, hsdp 2x2 with parallel.expert = 2"
tap_diag "zero1 vs ddp: $(close D4 O4); zero3: $(close D4 Z4); hsdp: $(close D4 H4)"
close D4 O4 >/dev/null && close D4 Z4 >/dev/null && close D4 H4 >/dev/null
tap_check $? "4 ranks: Muon under zero1, zero3 and hsdp(2x2, parallel.expert = 2) equals ddp within 1e-6 at all 8 steps"

# zero3's exchange: what the ranks counted against the formula (bench/comm_volume.sh: the wire)
line=$(grep "muon exchange:" "$TMP/Z4.txt")
tap_diag "$line"
[[ $line =~ ^muon\ exchange:\ ([0-9]+)\ bytes.*\ ([0-9]+)\ steps.*formula:\ ([0-9]+)\ per\ step.*\ ([0-9]+)\ groups ]] &&
    ((BASH_REMATCH[1] == BASH_REMATCH[3] * BASH_REMATCH[2] * BASH_REMATCH[4] && BASH_REMATCH[1] > 0))
tap_check $? "zero3 on 4 ranks: the owners' exchange sent the formula's bytes each step"

# the plan's total against the allocator's peak of step 1 (the checkpoint's buffers come later)
"$PY3" - "$TMP/Z4.txt" "$TMP/Z4/metrics.jsonl" <<'PY'
import json, re, sys
m = re.search(r"^memory per rank \(fp32\): .*optimizer .*\(Muon's iteration, owned matrices and "
              r"exchange: .*total ([0-9.]+) (B|KiB|MiB|GiB)$", open(sys.argv[1]).read(), re.M)
units = ["B", "KiB", "MiB", "GiB"]
plan = float(m.group(1)) * 1024 ** units.index(m.group(2)) if m else -1
# less the checkpoint's host buffers (save_async's snapshot, its I/O), which the plan counts and the
# backend's allocator does not
for what in (r"checkpoint snapshot ([0-9.]+) (B|KiB|MiB|GiB) \(save_async", r"checkpoint I/O ([0-9.]+) (B|KiB|MiB|GiB) \(host"):
    snap = re.search(what, m.group(0)) if m else None
    plan -= float(snap.group(1)) * 1024 ** units.index(snap.group(2)) if snap else 0
peak = next(d["peak_mem_bytes"] for d in map(json.loads, open(sys.argv[2])) if d.get("step") == 1)
print(f"# step 1's peak {peak} B, the plan's {plan:.0f} B")
sys.exit(0 if m and 0.97 * plan <= peak <= 1.10 * plan else 1)
PY
tap_check $? "zero3 on 4 ranks: the CPU's peak memory within the printed plan, Muon's scratch counted"

killed_resumes K2 --set parallel.sharding=zero3 &&
    cmp -s <(final_lines "$TMP/Z2/metrics.jsonl") <(final_lines "$TMP/K2/metrics.jsonl") &&
    same_tensors "$(ck "$TMP/Z2" 8)" "$(ck "$TMP/K2" 8)"
tap_check $? "zero3, rank 1 SIGKILLed after step 6 (exit $rc): the rerun resumed from step 4; losses, weights and momentum equal the uninterrupted run bit for bit"

run RZ2 2 --set parallel.sharding=zero3 --resume "$(ck "$TMP/Z4" 4)"
tap_diag "zero3 on 2 from zero3-on-4's step 4: $(close Z4 RZ2 5)"
close Z4 RZ2 5 >/dev/null && [[ -z $(json_field "$TMP/RZ2/metrics.jsonl" 4 loss) ]] &&
    [[ -n $(json_field "$TMP/RZ2/metrics.jsonl" 5 loss) ]]
tap_check $? "the zero3 checkpoint of 4 ranks resumed under zero3 on 2 ranks: steps 5-8 within 1e-6"

# refusals: exit 1, run_dir not created (or, on resume, left as it was)
"$TRAIN" "${args[@]}" "${mu[@]}" --set run_dir="$TMP/N1" --set optim.name=lion >"$TMP/N1.txt" 2>&1
rc=$?
[[ $rc == 1 && ! -e $TMP/N1 ]] && grep -q "optim.name" "$TMP/N1.txt"
tap_check $? "optim.name = lion: exit $rc, nothing written ($(grep -m1 error "$TMP/N1.txt" | cut -c1-120))"
"$TRAIN" "${args[@]}" --set run_dir="$TMP/N2" --set optim.muon.lr=0.02 >"$TMP/N2.txt" 2>&1
rc=$?
[[ $rc == 1 && ! -e $TMP/N2 ]] && grep -q "optim.muon.lr is a Muon setting" "$TMP/N2.txt"
tap_check $? "optim.muon.lr without optim.name = muon: exit $rc, nothing written"
"$TRAIN" "${args[@]}" "${mu[@]}" --set run_dir="$TMP/N3" --set lora.rank=4 >"$TMP/N3.txt" 2>&1
rc=$?
[[ $rc == 1 && ! -e $TMP/N3 ]] && grep -q 'optim.name = "muon" with lora.rank' "$TMP/N3.txt"
tap_check $? "Muon with LoRA: exit $rc, nothing written"
before=$(cd "$TMP/D2" && find . -type f -exec md5sum {} + | sort | md5sum)
"$TRAIN" "${args[@]}" --set run_dir="$TMP/D2" --set optim.name=adamw --set max_duration=10ba >"$TMP/N4.txt" 2>&1
rc=$?
after=$(cd "$TMP/D2" && find . -type f -exec md5sum {} + | sort | md5sum)
[[ $rc == 1 && $before == "$after" ]] && grep -q "checkpoint was written by Muon" "$TMP/N4.txt"
tap_check $? "resuming a Muon run with optim.name = adamw: exit $rc, run_dir unchanged"
tap_done
