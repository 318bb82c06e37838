#!/usr/bin/env bash
# Data mixing and curriculum through the trainer (docs/data-mixing.md), 2 real datasets, MPI ranks:
#  - every global batch holds each stream's share exactly (from the per-stream sample counts the
#    trainer logs each step), and the curriculum switches the shares at the configured step;
#  - the checkpoint records the samples drawn from each stream;
#  - resume mid-schedule is bit for bit; 1, 2 and 4 ranks train on the same batches (same losses
#    within 1e-6 relative);
#  - repeat / choose weights; refused configs name the problem (exit 1).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 11
make_synth "$TMP/web"
"$TOOL" synth --out "$TMP/dom" --vocab 512 --tokens 60000 --seed 2 >/dev/null
# a config file: tiny.cfg with its data group replaced by a mix
mixcfg() { # mixcfg FILE MIX_LINES [CURRICULUM_LINES]
    sed '/^data = {/,/^};/d' "$TSR_ROOT/configs/tiny.cfg" >"$1"
    printf 'data = {\n  val = "%s";\n  tokenizer = "";\n  mix = (\n%s\n  );\n%s};\n' "$TMP/web/val" "$2" "${3:+  curriculum = ( $3 );
}" >>"$1"
}
mixcfg "$TMP/mix.cfg" "    { name = \"web\"; path = \"$TMP/web/train\"; proportion = 0.75; },
    { name = \"domain\"; path = \"$TMP/dom/train\"; proportion = 0.25; }" '{ at = "50%"; scale = { domain = 3.0; }; }'
args=(--set model.vocab_size=512 --set sample.tokens=0 --set model.n_layer=2 --set model.d_model=64
      --set model.n_head=4 --set seq_len=32 --set global_batch=8 --set micro_batch=2
      --set max_duration=40ba --set eval_interval=20ba --set eval_samples=16 --set save_interval=10ba
      --set threads=1 --set log_interval=1 --set watchdog.window=0)
# watchdog.window=0: no straggler exit (86) on a loaded machine (tests/lib.sh, tiny_args): its
# 500-step run shares tests/run.sh's lanes with other tests
run() { local np=$1 dir=$2; shift 2; "${MPIRUN[@]}" -np "$np" "$TRAIN" --config "$TMP/mix.cfg" "${args[@]}" --set run_dir="$dir" "$@"; }
per_batch() { # per_batch METRICS: "step web domain" drawn in that step
    /usr/bin/python3 - "$1" <<'PY'
import json, sys
prev = {}
for l in open(sys.argv[1]):
    d = json.loads(l)
    if "samples" not in d: continue
    s = d["samples"]
    print(d["step"], *(s[k] - prev.get(k, 0) for k in ("web", "domain")))
    prev = s
PY
}

run 2 "$TMP/A" >"$TMP/A.txt" 2>&1
tap_check $? "mix of two datasets, 40 steps on 2 ranks"
per_batch "$TMP/A/metrics.jsonl" >"$TMP/A.per"
awk '($1 <= 20 && ($2 != 6 || $3 != 2)) || ($1 > 20 && ($2 != 4 || $3 != 4)) { bad++ } END { print "#", NR, "batches checked,", bad + 0, "off"; exit !(NR == 40 && bad == 0) }' "$TMP/A.per"
tap_check $? "every global batch holds exactly 6 web + 2 domain (0.75/0.25 of 8), then 4 + 4 from step 21 (domain x3 at 50%)"
grep -q "data mix from step 0: web 6/8 domain 2/8" "$TMP/A.txt" && grep -q "data mix from step 20: web 4/8 domain 4/8" "$TMP/A.txt"
tap_check $? "the plan is printed at start"
[[ $(/usr/bin/python3 -c 'import sys,h5py; print(h5py.File(sys.argv[1],"r").attrs["mix_tokens"].decode())' "$TMP/A/step-00000040.h5") == "web=6400,domain=3840" ]]
tap_check $? "the checkpoint records the tokens drawn per stream: web=6400,domain=3840 (200 and 120 samples of 32)"

TSR_FAULT=usr1:15:1 run 2 "$TMP/B" >"$TMP/B1.txt" 2>&1
rc=$?
run 2 "$TMP/B" >"$TMP/B2.txt" 2>&1 && [[ $rc == 85 ]] &&
    cmp -s <(final_lines "$TMP/A/metrics.jsonl") <(final_lines "$TMP/B/metrics.jsonl")
tap_check $? "stopped at step 15 (exit $rc), resumed across the schedule switch: every step bit for bit"

for np in 1 4; do
    run "$np" "$TMP/W$np" >"$TMP/W$np.txt" 2>&1 &&
    /usr/bin/python3 - "$TMP/A/metrics.jsonl" "$TMP/W$np/metrics.jsonl" <<'PY'
import json, sys
def losses(p): return {d["step"]: d["loss"] for d in map(json.loads, open(p)) if "loss" in d and "event" not in d}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(a[k] - b[k]) / abs(a[k]) for k in a)
print("# steps", len(a), len(b), "max relative loss difference", worst)
sys.exit(0 if len(a) == len(b) == 40 and worst < 1e-6 else 1)
PY
    tap_check $? "$np rank(s): the same batches (losses within 1e-6 of 2 ranks)"
done

mixcfg "$TMP/rep.cfg" "    { name = \"web\"; path = \"$TMP/web/train\"; choose = 300; },
    { name = \"domain\"; path = \"$TMP/dom/train\"; repeat = 2; }"
n_dom=$(awk -F'\t' '$1 == "shard" { n += int(($3 - 1) / 32) } END { print n }' "$TMP/dom/train/index.tsv") # samples of T = 32
"${MPIRUN[@]}" -np 2 "$TRAIN" --config "$TMP/rep.cfg" "${args[@]}" --set run_dir="$TMP/R" --set max_duration=1ep >"$TMP/R.txt" 2>&1
rc=$?
/usr/bin/python3 - "$TMP/R.txt" "$n_dom" <<'PY'
import re, sys, math
text = open(sys.argv[1]).read()
n_dom = int(sys.argv[2])
m = re.search(r"data mix from step 0: web (\d+)/8 domain (\d+)/8", text)
w = [300, 2 * n_dom]
q = [8 * x / sum(w) for x in w]
fl = [math.floor(x) for x in q]
if sum(fl) < 8: fl[max(range(2), key=lambda i: q[i] - fl[i])] += 1
steps = re.search(r"done: (\d+) steps", text)
want_steps = math.ceil(sum(w) / 8)
print("# domain samples", n_dom, "plan", m and m.groups(), "expected", fl, "steps", steps and steps.group(1), "expected", want_steps)
sys.exit(0 if m and [int(g) for g in m.groups()] == fl and steps and int(steps.group(1)) == want_steps else 1)
PY
tap_check $? "choose = 300 and repeat = 2: weights 300 : 2 x $n_dom, and 1ep = their sum of samples (exit $rc)"

mixcfg "$TMP/bad1.cfg" "    { name = \"web\"; path = \"$TMP/web/train\"; proportion = 0.5; },
    { name = \"domain\"; path = \"$TMP/dom/train\"; repeat = 2; }" '{ at = "10ba"; scale = { code = 2.0; }; }'
"$TRAIN" --config "$TMP/bad1.cfg" "${args[@]}" >"$TMP/bad1.txt" 2>&1
rc1=$?
"$TRAIN" --config "$TMP/mix.cfg" "${args[@]}" --set data.train="$TMP/web/train" >"$TMP/bad2.txt" 2>&1
rc2=$?
"$TRAIN" --config "$TMP/mix.cfg" "${args[@]}" --set 'data.mix=x' >"$TMP/bad3.txt" 2>&1
rc3=$?
cat "$TMP"/bad[123].txt | sed 's/^/# /'
[[ $rc1 == 1 && $rc2 == 1 && $rc3 == 1 ]] &&
    grep -q "bad1.cfg: data.mix: stream 'domain' gives repeat but stream 'web' gives proportion" "$TMP/bad1.txt" &&
    grep -q "bad1.cfg:[0-9]*: data.curriculum\[0\].scale.code: no stream of that name in data.mix" "$TMP/bad1.txt" &&
    grep -q "data.mix and data.train are both given" "$TMP/bad2.txt" &&
    grep -q "data.mix is a list: write it in the config file" "$TMP/bad3.txt"
tap_check $? "refused with exit 1 naming file, line and key: proportion mixed with repeat, an unknown stream in the curriculum, data.train beside data.mix, --set data.mix"

"$TRAIN" --config "$TMP/A/config.cfg" --dry-run >"$TMP/rt.txt" 2>&1 &&
    diff <(sed -n '/^data = {/,/^};/p' "$TMP/A/config.cfg") <(sed -n '/^data = {/,/^};/p' "$TMP/rt.txt") >/dev/null &&
    grep -q 'curriculum = (' "$TMP/A/config.cfg"
tap_check $? "the effective config in the run directory holds the mix and the curriculum and loads back unchanged"

cp -r "$TMP/A" "$TMP/X"
run 2 "$TMP/X" --set max_duration=80ba >"$TMP/X.txt" 2>&1
rc=$?
sed 's/^/# /' "$TMP/X.txt" | grep error | head -2
[[ $rc == 1 ]] && grep -q 'the data mix plan .* was "0:6,2;20:4,4", this run.s is "0:6,2;40:4,4"' "$TMP/X.txt"
tap_check $? "resuming with a longer max_duration would move the 50% phase: refused with exit 1 naming both plans (got $rc)"
