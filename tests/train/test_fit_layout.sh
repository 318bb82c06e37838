#!/usr/bin/env bash
# tessera-train --fit layout (issue 82 item 5; src/plan/layout.c, docs/planning.md "Choosing the
# layout"): the layout search, all dry runs (nothing trained, no data opened, nothing written):
#  1-3. for llama-3.1-8b, olmo2-13b and qwen3-8b on 64 GPUs of 8 a node and 80 GiB: the best
#     layout fits (its GiB a GPU at most 80), is the first row and the fastest of the rows, beats
#     the naive one (ZeRO-3 over all 64 ranks, row 0) in the plan's own model (more tokens/s/GPU,
#     or the naive one does not fit), and its `a run:` line sets every key of the layout;
#  4. Llama-3-70B (the llama-3.1-8b recipe at 80 layers of 8192, as docs/planning.md's table):
#     pipeline rows are printed, and each 1f1b / interleaved row's bubble is its schedule's
#     formula, (P-1)/(M+P-1) and (P-1)/(V M+P-1) at M = global_batch / (DP x micro_batch); the
#     trials are quiet (no warning of a layout tried: a dataset's open used to unmute them); a
#     tensor x pipeline layout is tried (a row, or the best's comparison with the fastest such);
#  5. --time with a pipeline: a W its stages (x tensor x context) do not divide is a line saying
#     so (it divided by zero before);
#  6. bad input exits 1 naming the option: --plan W/G with G not dividing W, --fit layout without
#     /PER_NODE, without --gpu-mem, device = cpu, an unknown --fit key, --time=H100 (no table to time
#     the layouts by); nothing written.
#  7. --fit world (issue 84 item 8; docs/planning.md "DeepSeek-V3 and Kimi K2"): deepseek-v3 with
#     device = cuda on 8 GPUs of 141 GiB says "does not fit" and names the smallest world that
#     does and its expert split ("a run: --plan W/8 --set parallel.expert=E"), planned although
#     MLA has no CUDA kernels yet (each missing one a warning that plans anyway: model.kv_lora_rank,
#     the MLA head size qk_nope_head_dim + qk_rope_head_dim = 192; a start refuses them:
#     test_mla.sh), no error; that run's
#     --plan says "fits", the largest world it names as too small "does not fit" at the GiB it
#     gives; kimi-k2 at its global_batch of 256 fits no world (named so), at 768 it names 384
#     GPUs, whose plan fits;
#  8. MLA's plan lines: the FLOPs label is MLA's 6*heads*(qk_nope+qk_rope+v_head_dim), and the time
#     plan's context ring carries latent and RoPE key blocks, not key/value blocks.
#  9. "runs on cuda" (issue 82 item 5 with the GPU's tensor and pipeline paths): llama-3.1-8b on 8
#     GPUs of one node, at 24 GiB (the plan's best a pipeline with zero3, the fastest that runs
#     a tensor split with ddp) and at 80 GiB over slow links (the fastest that runs a pipeline
#     with ddp): every layout printed (the rows, the layouts the report compares the best with,
#     the "runs on cuda:" line's) is marked, and `--plan 8/8` with its keys and device = cuda
#     agrees with the mark: one marked yes plans with no refusal and no "does not run" warning,
#     one marked "no: KEY VALUE" is refused (or, for tensor parallelism's GPU modes, warned) naming
#     KEY VALUE; the best not runnable, the "runs on cuda:" line names the fastest that runs; a
#     tensor layout and a pipeline layout are among those accepted;
# 10. a tensor split that needs zero3 (TP4 CP2 zero3 at 24 GiB) is marked "no: parallel.sharding
#     other than "ddp"", a tensor x pipeline layout "no:" with its key.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 10
# fit NAME ARGS...: the search's output in $TMP/NAME.txt
fit() {
    local n=$1; shift
    "$TRAIN" "$@" --set device=cuda --set run_dir="$TMP/run-$n" --plan 64/8 --gpu-mem 80 \
        --fit layout >"$TMP/$n.txt" 2>&1 || { tap_diag "$n: exit $?: $(grep -m1 error "$TMP/$n.txt")"; return 1; }
}
# beats NAME: the checks 1-3 on NAME's output
beats() {
    "$PY3" - "$TMP/$1.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
rows = re.findall(r"^ ?(\d+)  (TP\d+ PP\d+ .*?)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+(\d+)  (.*)$", text, re.M)
assert rows, "no rows"
top = [r for r in rows if r[0] != "0"]
naive = [r for r in rows if r[0] == "0"]
best = top[0]
assert float(best[2]) <= 80.0, f"the best does not fit: {best}"
assert all(float(r[2]) <= 80.0 for r in top), "a row over 80 GiB"
assert int(best[6]) == max(int(r[6]) for r in top), "the first row is not the fastest"
assert naive and naive[0][1].startswith("TP1 PP1 CP1 DP64 zero3"), f"no naive row: {naive}"
n = naive[0]
assert float(n[2]) > 80.0 or int(best[6]) > int(n[6]), f"does not beat the naive: {best} vs {n}"
m = re.search(r"^best: (.*?): (\d+) tokens/s/GPU, ([0-9.]+) GiB a GPU; a run: (.*)$", text, re.M)
assert m and m.group(1) == best[1].strip(), (m and m.group(1), best[1])
name, sets = m.group(1), m.group(4)
want = {"parallel.tensor": re.search(r"TP(\d+)", name)[1], "parallel.pipeline": re.search(r"PP(\d+)", name)[1],
        "parallel.context": re.search(r"CP(\d+)", name)[1],
        "parallel.sharding": re.search(r"DP\d+ (\w+)", name)[1], "micro_batch": re.search(r"mb(\d+)", name)[1],
        "model.activation_checkpointing": "block" if name.endswith("ckpt") else "none"}
for k, v in want.items():
    assert f"--set {k}={v}" in sets, f"{k}={v} not in {sets}"
print(f"# best {name}: {best[6]} tokens/s/GPU at {best[2]} GiB; naive {n[6]} at {n[2]} GiB")
PY
}
i=0
for r in llama-3.1-8b olmo2-13b qwen3-8b; do
    i=$((i + 1))
    fit "$r" --config "$r" && beats "$r"
    tap_check $? "$r on 64 GPUs (8 a node), 80 GiB: the best layout fits, is the fastest row and beats ZeRO-3 over all ranks in the plan's own model; its run line sets its keys"
done

fit l70 --config llama-3.1-8b --set model.n_layer=80 --set model.d_model=8192 --set model.n_head=64 \
    --set model.n_kv_head=8 --set model.intermediate_size=28672 --set seq_len=8192 \
    --set model.max_seq_len=8192 --set global_batch=128 --set micro_batch=1 \
    --set parallel.sharding=zero1 --time=configs/profiles/H200.prof --link 460,350 &&
    "$PY3" - "$TMP/l70.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
rows = re.findall(r"^ ?\d+  TP\d+ PP(\d+) (1f1b|interleaved VP\d+|zb) CP\d+ DP(\d+) \w+ mb(\d+)(?: ckpt)?\s+[0-9.]+\s+([0-9.]+)\s", text, re.M)
checked = 0
for P, sched, D, mb, bubble in rows:
    P, D, mb = int(P), int(D), int(mb)
    M = 128 // (D * mb)
    if sched == "zb":
        assert float(bubble) < (P - 1) / (M + P - 1), (sched, P, M, bubble)
        continue
    V = int(sched.split("VP")[1]) if "VP" in sched else 1
    want = (P - 1) / (V * M + P - 1)
    assert abs(float(bubble) - want) < 6e-5, (P, sched, M, bubble, want)
    checked += 1
assert checked >= 1, "no 1f1b or interleaved row"
tp_pp = [m[0] for m in re.finditer(r"TP(\d+) PP(\d+) [^)]*?(?= {2,}|\)|:)", text)
         if int(m[1]) > 1 and int(m[2]) > 1]
assert tp_pp, "no tensor x pipeline layout among the rows and the best's comparisons"
print(f"# tensor x pipeline: {tp_pp[0]}")
print(f"# {checked} pipeline rows' bubbles equal their formulas")
PY
[[ $? == 0 ]] && ! grep -m3 "warning:" "$TMP/l70.txt"
tap_check $? "Llama-3-70B on 64 GPUs: pipeline rows printed, a tensor x pipeline layout among the rows or compared with the best, each 1f1b / interleaved row's bubble is (P-1)/(V M+P-1), zb's under 1F1B's; the trials print nothing (their hsdp warnings stay quiet)"

# --time with a pipeline: a W its stages do not divide is a line saying so (it divided by zero)
"$TRAIN" --config llama-3.1-8b --set device=cpu --set parallel.sharding=zero1 --set parallel.pipeline=8 --set parallel.context=2 \
    --set parallel.pipeline_schedule=interleaved --set parallel.pipeline_virtual=2 --plan 64/8 \
    --time >"$TMP/pt.txt" 2>&1 &&
    grep -qE "^ +1 +1  parallel.pipeline = 8 x parallel.tensor x parallel.context does not divide 1 rank$" "$TMP/pt.txt" &&
    grep -qE "^ +8 +1  parallel.pipeline = 8 x parallel.tensor x parallel.context does not divide 8 ranks$" "$TMP/pt.txt" &&
    grep -qE "^ +64 +8 +[0-9]+ +[0-9.]+ " "$TMP/pt.txt"
tap_check $? "--time at parallel.pipeline = 8 x context 2: W = 1 and 8 are lines saying the stages do not divide them, W = 64 a row"

bad() {
    local want=$1; shift
    "$TRAIN" --config llama-3.1-8b --set run_dir="$TMP/bad" "$@" >"$TMP/bad.txt" 2>&1
    local rc=$?
    [[ $rc == 1 ]] && grep -q -- "$want" "$TMP/bad.txt" ||
        { tap_diag "$*: exit $rc, $(grep -m1 error "$TMP/bad.txt")"; return 1; }
}
bad "--plan 60/8: expected" --set device=cuda --plan 60/8 --gpu-mem 80 --fit layout &&
    bad "--fit layout needs --plan W/PER_NODE" --set device=cuda --plan 64 --gpu-mem 80 --fit layout &&
    bad "--fit needs --gpu-mem" --set device=cuda --plan 64/8 --fit layout &&
    bad 'device = "cpu"' --set device=cpu --plan 64/8 --gpu-mem 80 --fit layout &&
    bad "--fit layouts: expected seq_len or micro_batch" --set device=cuda --plan 64/8 --gpu-mem 80 --fit layouts &&
    bad "--fit layout ranks layouts by the time plan, which cannot time" --set device=cuda --plan 16/8 --gpu-mem 80 --fit layout --time=H100 &&
    [[ ! -e $TMP/bad ]]
tap_check $? "bad input exits 1 naming the option (--plan 60/8, --plan 64 without PER_NODE, no --gpu-mem, device = cpu, --fit layouts, a GPU without a table), nothing written"

# 7. --fit world: the smallest allocation of DeepSeek-V3 and Kimi K2
world() { # NAME ARGS...: --fit world's output in $TMP/NAME.txt; its named run's --plan in NAME.run.txt
    local n=$1; shift
    "$TRAIN" "$@" --set device=cuda --set run_dir="$TMP/run-$n" --plan 8 --gpu-mem 141 \
        --fit world >"$TMP/$n.txt" 2>&1 || return 1
    tap_diag "$n: $(grep -E '^(does not fit|fit):' "$TMP/$n.txt" | cut -c1-250 | tr '\n' ' ')"
    local run
    run=$(sed -n 's/^fit: .*; a run: \(--plan .*\)$/\1/p' "$TMP/$n.txt")
    [[ -z $run ]] && return 0
    # shellcheck disable=SC2086 # (the named options, word by word)
    "$TRAIN" "$@" --set device=cuda --set run_dir="$TMP/run-$n" $run --gpu-mem 141 >"$TMP/$n.run.txt" 2>&1
}
small() { # NAME: the largest world named too small, planned, does not fit at the GiB named
    local w e g
    read -r w g e < <(sed -n 's/.*; \([0-9]*\) GPUs, the most planned that do not fit, need \([0-9.]*\) GiB with parallel.expert = \([0-9]*\).*/\1 \2 \3/p' "$TMP/$1.txt")
    shift
    [[ -n $w ]] && "$TRAIN" "$@" --set device=cuda --set run_dir="$TMP/run-s" --plan "$w/8" \
        --set parallel.expert="$e" --gpu-mem 141 >"$TMP/small.txt" 2>&1 &&
        grep -q "^does not fit: needs $(printf '%.1f' "$g") GiB" "$TMP/small.txt"
}
cuda_warned() { # FILE: each missing CUDA kernel (while MLA has none) a warning that plans anyway
    local w
    w=$(grep 'warning: .*device = "cuda"' "$1")
    tap_diag "$(wc -l <<<"$w") kernel warnings: $(grep -o '[a-z_.]*\(: device\| + model.qk_rope_head_dim = [0-9 +=]*\)' <<<"$w" | tr '\n' ' ')"
    ! grep -v "planned anyway" <<<"$w" | grep -q .
}
world v3 --config deepseek-v3 && grep -q "^does not fit: needs" "$TMP/v3.txt" &&
    grep -qE "^fit: [0-9]+ GPUs \(8 a node\) is the smallest world that fits 141.0 GiB a GPU.*a run: --plan [0-9]+/8 --set parallel.expert=[0-9]+$" "$TMP/v3.txt" &&
    grep -q "^fits: " "$TMP/v3.run.txt" && small v3 --config deepseek-v3 &&
    ! grep -q "error:" "$TMP/v3.txt" && cuda_warned "$TMP/v3.txt" && [[ ! -e $TMP/run-v3 ]]
v=$?
world k2 --config kimi-k2 && grep -q "^does not fit: needs" "$TMP/k2.txt" &&
    grep -q "^fit: no world fits 141.0 GiB a GPU (whole nodes from --plan's 8 up to 256 GPUs: global_batch = 256 feeds no more data ranks)" "$TMP/k2.txt" &&
    world k2b --config kimi-k2 --set global_batch=768 &&
    grep -q "^fit: 384 GPUs (8 a node) is the smallest world" "$TMP/k2b.txt" && grep -q "^fits: " "$TMP/k2b.run.txt"
tap_check $((v | $?)) "--fit world: deepseek-v3 on 8 GPUs of 141 GiB does not fit and names the smallest world and expert split, whose --plan fits (the world named too small does not); MLA planned with device = cuda, its missing kernels warned; kimi-k2 fits no world at global_batch 256, 384 GPUs at 768"

# 8. MLA's FLOPs label and its ring's blocks in the time plan
"$TRAIN" --config deepseek-v3 --plan 64/8 --time --set parallel.context=2 --set parallel.expert=32 \
    >"$TMP/v3t.txt" 2>&1 &&
    grep -q "FLOPs/token = 6N_active + 6\*heads\*(qk_nope+qk_rope+v_head_dim)\*keys = 2.812e+11" "$TMP/v3t.txt" &&
    grep -q "the ring sends .* (latent and RoPE key blocks " "$TMP/v3t.txt" && ! grep -q "key/value blocks" "$TMP/v3t.txt" &&
    "$TRAIN" --config llama-3.1-8b --plan 64/8 --time --set parallel.context=2 >"$TMP/lt.txt" 2>&1 &&
    grep -q "FLOPs/token = 6N + 12\*(heads\*head_dim)" "$TMP/lt.txt" && grep -q "(key/value blocks " "$TMP/lt.txt"
tap_check $? "MLA's plan: FLOPs/token labelled 6*heads*(qk_nope+qk_rope+v_head_dim), its ring's latent and RoPE key blocks (attention's: 12*(heads*head_dim), key/value blocks)"

# 9-10. runs on cuda: each printed layout's mark against --plan with its keys
marks() { # NAME: "yes|no: KEY VALUE<TAB>--set ..." for each layout NAME's output prints
    "$PY3" - "$TMP/$1.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
found = re.findall(r"^ ?\d+  (TP\d+ PP\d+ .*?)\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+\d+  (yes|no: .*)$", text, re.M)
found += re.findall(r"\((TP\d+ PP\d+ [^;()]*); runs on cuda: (yes|no: [^()]*(?:\([^()]*\))?[^()]*)\)", text)
m = re.search(r"^runs on cuda: (TP[^:]*): \d+ tokens/s/GPU.*; a run: (.*)$", text, re.M)
if m: found.append((m.group(1), "yes"))
best = re.search(r"^best: (TP[^:]*): \d+ tokens/s/GPU, [0-9.]+ GiB a GPU; (.*)$", text, re.M)
assert best, "no best line"
if "does not run it yet" in best.group(2):
    assert m, "the best does not run on cuda and no 'runs on cuda:' line"
def sets(name):
    t = re.match(r"TP(\d+) PP(\d+)(?: (1f1b|zb|interleaved))?(?: VP(\d+))? CP(\d+)(?: EP(\d+))? DP\d+ (\w+) mb(\d+)( ckpt)?$", name)
    assert t, name
    T, P, sch, V, N, E, sh, mb, ck = t.groups()
    out = f"--set parallel.tensor={T} --set parallel.pipeline={P} --set parallel.context={N} --set parallel.sharding={sh} --set micro_batch={mb}"
    if sch: out += f" --set parallel.pipeline_schedule={sch} --set parallel.pipeline_virtual={V or 1}"
    return out + f" --set model.activation_checkpointing={'block' if ck else 'none'}"
seen = set()
for n, mark in found:
    if n not in seen: seen.add(n); print(f"{mark}\t{sets(n)}\t{n}")
PY
}
agree() { # NAME: each layout of NAME's marks, planned with its keys, agrees with its mark
    local mark keys name rc n=0
    marks "$1" >"$TMP/$1.marks" || return 1
    while IFS=$'\t' read -r mark keys name; do
        n=$((n + 1))
        # shellcheck disable=SC2086 # (the keys, word by word)
        "$TRAIN" --config llama-3.1-8b --set device=cuda --set run_dir="$TMP/run-agree" \
            --plan 8/8 $keys >"$TMP/agree.txt" 2>&1
        rc=$?
        if [[ $mark == yes ]]; then
            [[ $rc == 0 ]] && ! grep -qE "error:|does not run" "$TMP/agree.txt" ||
                { tap_diag "$name marked yes: exit $rc: $(grep -m1 -E 'error:|does not run' "$TMP/agree.txt" | cut -c1-200)"; return 1; }
        else
            grep -E "(error|warning): " "$TMP/agree.txt" | grep -qF -- "${mark#no: }" ||
                { tap_diag "$name marked $mark: --plan says $(grep -m1 -E 'error:|warning:' "$TMP/agree.txt" | cut -c1-200)"; return 1; }
        fi
    done <"$TMP/$1.marks"
    tap_diag "$1: $n layouts' marks agree with --plan ($(grep -c '^yes' "$TMP/$1.marks") runnable)"
    [[ $n -gt 0 && ! -e $TMP/run-agree ]]
}
small8() { # NAME ARGS...: --fit layout of llama-3.1-8b on 8 GPUs of a node
    local n=$1; shift
    "$TRAIN" --config llama-3.1-8b --set device=cuda --set run_dir="$TMP/run-$n" --plan 8/8 "$@" \
        --fit layout >"$TMP/$n.txt" 2>&1
}
small8 c24 --gpu-mem 24 && small8 c80 --gpu-mem 80 --time=configs/profiles/H200.prof --link 20,10 &&
    grep -q '^best: .*device = "cuda" does not run it yet: a start refuses parallel.sharding = "zero3"' "$TMP/c24.txt" &&
    grep -qE '^runs on cuda: TP[248] PP1 .* ddp .*; a run: ' "$TMP/c24.txt" &&
    grep -qE '^runs on cuda: TP1 PP[248] (1f1b|interleaved) .* ddp .*; a run: ' "$TMP/c80.txt" &&
    agree c24 && agree c80 && [[ ! -e $TMP/run-c24 && ! -e $TMP/run-c80 ]]
tap_check $? "runs on cuda: on 8 GPUs, each printed layout's mark agrees with --plan at its keys and device = cuda (yes: no refusal; no: KEY VALUE refused or warned naming it); the fastest runnable named (a tensor split at 24 GiB, a pipeline at 80 GiB over slow links) when the best is not"

grep -qE '\(TP[248] PP1 [^;]* zero3 [^;]*; runs on cuda: no: parallel.sharding other than "ddp"\)' "$TMP/c24.txt" &&
    grep -qE '\(TP[248] PP[248] [^;]*; runs on cuda: no: parallel\.[a-z_]+ ' "$TMP/c24.txt"
tap_check $? "a tensor split with zero3 is marked 'no: parallel.sharding other than \"ddp\"', a tensor x pipeline layout 'no:' with its key"
tap_done
