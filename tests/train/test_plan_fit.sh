#!/usr/bin/env bash
# tessera-train --gpu-mem and --fit (issue 65 item 5; src/plan/fit.c, docs/planning.md "Does it
# fit a GPU"), all dry runs (device = cuda's plan; nothing trained, nothing written):
#  1. the commands docs/planning.md shows print the lines it shows (fits:, fit: seq_len, fit:
#     micro_batch), as written, tessera-train being the build's;
#  2. the search agrees with the plan it searched: --set seq_len=FOUND prints 'fits', the next
#     multiple of 128 'does not fit'; at --gpu-mem 40 the micro_batch found fits and the next
#     larger divisor of the per-rank batch does not (so each found value is the edge);
#  3. bad input exits 1 naming the option: device = cpu, --fit without --gpu-mem, a GIB that is
#     not a number, a key --fit does not search; nothing written;
#  4. --help, the man page and docs/tessera-train.md name both options.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 4
cd "$TMP" || exit 1
export OMPI_MCA_ess_singleton_isolated=1
cfg() { echo "$TSR_ROOT/configs/$1.cfg"; }

# 1. docs/planning.md's commands and their lines
mkdir -p docs/bin && ln -s "$BUILD" docs/build && ln -s "$TSR_ROOT/configs" docs/configs &&
    ln -s "$TRAIN" docs/bin/tessera-train
sec=$(awk '/^## Does it fit a GPU/{on=1; next} /^## /{on=0} on' "$TSR_ROOT/docs/planning.md")
cmds=$(awk '/^```sh/{on=1; next} /^```/{on=0} on' <<<"$sec")
lines=$(awk '/^```/{if (blk) blk = 0; else { blk = 1; plain = $0 == "```" }; next} blk && plain && /^(fits|fit|does not fit):/' <<<"$sec")
(cd docs && while read -r c; do PATH="$PWD/bin:$PATH" bash -c "$c" </dev/null || echo "rc $?: $c"; done <<<"$cmds") >docs.txt 2>&1
ok=0 n=0
while read -r l; do
    n=$((n + 1))
    grep -qxF -- "$l" docs.txt || { ok=1; tap_diag "not printed: $l"; }
done <<<"$lines"
((n == 3)) && ! grep -q '^rc ' docs.txt
tap_check $((ok | $?)) "docs/planning.md's $(wc -l <<<"$cmds") --gpu-mem/--fit commands print its $n lines as written"

# 2. the edges: the value found fits, the next does not
p64=(--config "$(cfg llama-3.1-8b-long)" --plan 64/8 --gpu-mem 80)
s=$(sed -n 's/^fit: seq_len = \([0-9]*\) is the longest .*/\1/p' docs.txt)
"$TRAIN" "${p64[@]}" --set seq_len="$s" >s0.txt 2>&1
"$TRAIN" "${p64[@]}" --set seq_len=$((s + 128)) >s1.txt 2>&1
p8=(--config "$(cfg gpt2-350m)" --set device=cuda --plan 8 --gpu-mem 40)
"$TRAIN" "${p8[@]}" --fit micro_batch >m.txt 2>&1
m=$(sed -n 's/^fit: micro_batch = \([0-9]*\) is the largest .*/\1/p' m.txt)
nx=$(sed -n 's/.*; micro_batch = \([0-9]*\) needs .*/\1/p' m.txt)
"$TRAIN" "${p8[@]}" --set micro_batch="$m" >m0.txt 2>&1
"$TRAIN" "${p8[@]}" --set micro_batch="$nx" >m1.txt 2>&1
[[ -n $s && -n $m && $nx == $((2 * m)) ]] && grep -q '^fits: ' s0.txt && grep -q '^does not fit: needs ' s1.txt &&
    grep -q '^fits: ' m0.txt && grep -q '^does not fit: needs ' m1.txt
tap_check $? "the edges: seq_len $s fits 80 GiB at 64/8, $((s + 128)) does not; micro_batch ${m:-?} fits 40 GiB at 8 (gpt2-350m), ${nx:-?} does not"

# 3. bad input
out=""
expect() { # PATTERN ARGS...
    local pat=$1 r
    shift
    "$TRAIN" "$@" >e.txt 2>&1
    r=$?
    out+=" $r"
    ((r == 1)) && grep -q -- "$pat" e.txt
}
g=(--config "$(cfg gpt2-124m)")
expect 'error: --gpu-mem compares the device memory plan of device = "cuda"' "${g[@]}" --set device=cpu --gpu-mem 80 &&
    expect 'error: --fit needs --gpu-mem GIB' "${g[@]}" --fit seq_len &&
    expect 'error: --gpu-mem 80GB: expected the memory of one GPU in GiB' "${g[@]}" --gpu-mem 80GB &&
    expect 'error: --fit lr: expected seq_len or micro_batch' "${g[@]}" --gpu-mem 80 --fit lr &&
    [[ ! -e runs && -z $(ls "$TMP" | grep -v -e '\.txt$' -e '^docs$') ]]
tap_check $? "device = cpu, --fit without --gpu-mem, --gpu-mem 80GB, --fit lr: exit 1 naming the option; nothing written (exits:$out)"

# 4. the help, the man page, the reference page
"$TRAIN" --help >help.txt 2>&1
ok=0
for o in --gpu-mem --fit; do
    grep -q -- "      $o " help.txt && grep -q -- "${o//-/\\\\-}" "$TSR_ROOT/docs/man/tessera-train.1" &&
        grep -q -- "\`$o " "$TSR_ROOT/docs/tessera-train.md" || { ok=1; tap_diag "$o missing"; }
done
tap_check $ok "--gpu-mem and --fit in --help, tessera-train.1 and docs/tessera-train.md"
tap_done
