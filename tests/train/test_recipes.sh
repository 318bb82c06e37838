#!/usr/bin/env bash
# The recipes in configs/ say true things (issue 21: stale comments):
#  - each loads and plans (tessera-train --config FILE --dry-run, exit 0);
#  - every value the comment of `sharding` lists is accepted by that recipe (--set
#    parallel.sharding=V --dry-run) and together they are all of ddp, zero1, zero3, hsdp;
#  - no recipe comment promises what exists already ("not yet", "arrive with", "tessera shard
#    now, tessera prep" of the time before prep existed).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
recipes=("$TSR_ROOT"/configs/*.cfg)
tap_plan 3
bad=()
for f in "${recipes[@]}"; do "$TRAIN" --config "$f" --dry-run >"$TMP/out.txt" 2>&1 || bad+=("${f##*/}"); done
((${#bad[@]} == 0))
tap_check $? "all ${#recipes[@]} recipes load and plan with --dry-run (failed: ${bad[*]:-none})"

bad=()
for f in "${recipes[@]}"; do
    line=$(grep -E '^\s*sharding\s*=' "$f") || continue
    vals=$(echo "${line#*#}" | grep -oE '\b(ddp|zero1|zero3|hsdp)\b' | sort | tr '\n' ' ')
    [[ $vals == "ddp hsdp zero1 zero3 " ]] || bad+=("${f##*/}: lists '$vals'")
    [[ ${line#*#} == *"not yet"* ]] && bad+=("${f##*/}: says not yet")
    for v in $vals; do
        "$TRAIN" --config "$f" --set parallel.sharding="$v" --dry-run >/dev/null 2>&1 || bad+=("${f##*/}: $v refused")
    done
done
((${#bad[@]} == 0))
tap_check $? "the sharding comments list ddp, zero1, zero3, hsdp, each accepted (${bad[*]:-ok})"

stale=$(grep -nE 'not yet|arrive with|tessera shard now' "${recipes[@]}")
[[ -z $stale ]]
tap_check $? "no stale promise in the recipes' comments"
[[ -z $stale ]] || echo "$stale" | sed "s#$TSR_ROOT/##; s/^/#   /"
tap_done
