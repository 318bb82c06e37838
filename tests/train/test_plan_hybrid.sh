#!/usr/bin/env bash
# The plan's FLOPs and memory for the layers of issues 67/68 (docs/mfu.md, docs/deltanet.md
# "Wiring"), each against a hand count written here from the model's shape:
#  - FLOPs per token = 6 N + 12 (heads head_dim) keys + D, for three tiny models trained one step
#    with peak_flops = 1e9: (a) a sliding-window layer and a full one (keys: its band W = 64, not
#    T = 256, plus T); (b) a Gated DeltaNet layer and a full one (keys: T, the linear layer none;
#    D = 3 LL HV (6 dk dv + 2 c (3 dk + 2 dv)), c = min(T, 64), the chunked form's products);
#    (c) a DeltaNet layer and a sliding one (keys: W alone, and D). Each is checked three ways:
#    the plan's printed total (to its 4 digits), its printed D (6 digits), and the MFU the log
#    reports (mfu x 1e9 / tokens_per_s: the same FLOPs per token, to 1e-6);
#  - memory: (b) at 8 x 256 prints the linear layer's backward scratch, N (5 HV dv + 2 HK dk +
#    4 HV + 2 CD) floats, and the plan's total (less the checkpoint's host buffers, which the
#    backend's allocator does not hold) is within 1 % of the run's peak_mem_bytes (the allocator's
#    peak, which now holds the scratch: it is 14 % of it).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 10
make_synth "$TMP/data" 512 100000
tiny_llama_args "$TMP/data/train"
args+=(--set model.n_head=4 --set model.n_kv_head=2 --set seq_len=256 --set micro_batch=8
       --set max_duration=1ba --set save_interval=0ba --set save_final=false
       --set watchdog.window=0 --set peak_flops=1e9 --set model.sliding_window=64
       --set model.linear_num_key_heads=2 --set model.linear_num_value_heads=4
       --set model.linear_key_head_dim=32 --set model.linear_value_head_dim=32)

# CASE TYPES: one step; three checks of its FLOPs against the hand count
flops_case() {
    local name=$1 types=$2
    "$TRAIN" "${args[@]}" --set model.layer_types="$types" --set run_dir="$TMP/$name" \
        >"$TMP/$name.txt" 2>&1
    local rc=$?
    "$PY3" - "$TMP/$name.txt" "$TMP/$name/metrics.jsonl" "$types" "$rc" <<'PY' >"$TMP/$name.chk"
import json, re, sys
out, types, rc = open(sys.argv[1]).read(), sys.argv[3].split(","), int(sys.argv[4])
m = re.search(r"heads=(\d+) kv_heads=\d+ head_dim=(\d+) .* vocab=(\d+) .*untied", out)
p = re.search(r"params: (\d+) trainable; FLOPs/token = .*?(?:DeltaNet ([0-9.e+]+) )?= ([0-9.e+]+) \(", out)
if rc or not m or not p:
    print("fail fail fail # exit", rc, out[-800:].replace("\n", " | ")); sys.exit()
NH, hs, V = map(int, m.groups())
N, C, T, W = int(p.group(1)), 64, 256, 64
HK, HV, dk, dv, c = 2, 4, 32, 32, min(T, 64)
keys = sum(0 if t == "linear_attention" else min(W, T) if t == "sliding_attention" else T
           for t in types)
LL = types.count("linear_attention")
D = 3 * LL * HV * (6 * dk * dv + 2 * c * (3 * dk + 2 * dv))
hand = 6 * (N - V * C) + 12 * NH * hs * keys + D  # untied: the input embedding is a lookup
step = next(json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l)
logged = step["mfu"] * 1e9 / step["tokens_per_s"]
ok = lambda b: "ok" if b else "fail"
print(ok(abs(float(p.group(3)) - hand) <= 5e-4 * hand),
      ok(abs(float(p.group(2) or 0) - D) <= 1e-5 * max(D, 1)),
      ok(abs(logged - hand) <= 1e-6 * hand),
      f"# keys {keys}, D {D}, hand {hand}; printed {p.group(3)} (D {p.group(2)}), log {logged:.9g}")
PY
    read -r a b c rest <"$TMP/$name.chk"
    tap_diag "$name: $rest"
    [[ $a == ok ]]; tap_check $? "$name ($types): the plan's FLOPs/token is the hand count 6N + 12 H Q keys + D"
    [[ $b == ok ]]; tap_check $? "$name: its DeltaNet term D is 3 LL HV (6 dk dv + 2 c (3 dk + 2 dv)) (0 without)"
    [[ $c == ok ]]; tap_check $? "$name: the log's MFU counts the same FLOPs per token"
}
flops_case sliding sliding_attention,full_attention
flops_case hybrid linear_attention,full_attention
flops_case both linear_attention,sliding_attention

"$PY3" - "$TMP/hybrid.txt" "$TMP/hybrid/metrics.jsonl" <<'PY'
import json, re, sys
U = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
out = open(sys.argv[1]).read()
line = re.search(r"^memory per rank \(fp32\): .*$", out, re.M)
line = line.group(0) if line else ""
b = lambda pat: (lambda m: float(m.group(1)) * U[m.group(2)] if m else -1)(re.search(pat, line))
scratch = b(r"backward scratch ([0-9.]+) (B|KiB|MiB|GiB) in them")
unit = (lambda m: U[m.group(1)] if m else 1)(re.search(r"backward scratch [0-9.]+ (\w+) in", line))
plan = (b(r"total ([0-9.]+) (B|KiB|MiB|GiB)$") - b(r"checkpoint I/O ([0-9.]+) (B|KiB|MiB|GiB)")
        - b(r"checkpoint snapshot ([0-9.]+) (B|KiB|MiB|GiB)"))
Nr, HK, HV, dk, dv = 8 * 256, 2, 4, 32, 32
hand = 4 * Nr * (5 * HV * dv + 2 * HK * dk + 4 * HV + 2 * (2 * HK * dk + HV * dv))
peak = next(json.loads(l)["peak_mem_bytes"] for l in open(sys.argv[2]) if '"loss"' in l)
print(f"# scratch printed {scratch:.0f} B, by hand {hand} B; plan {plan:.0f} B, peak {peak} B "
      f"({peak / plan - 1:+.2%})")
sys.exit(0 if abs(scratch - hand) <= 0.05 * unit and 0.99 * plan <= peak <= 1.01 * plan
         and hand > 0.1 * peak else 1)
PY
tap_check $? "memory: the linear layer's backward scratch printed as counted by hand, and the plan's total within 1% of the run's allocator peak"
tap_done
