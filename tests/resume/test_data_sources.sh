#!/usr/bin/env bash
# A resume on other data (issue 79 item 8; docs/training.md "Resuming on the same data",
# docs/checkpoint-format.md data_sources): every checkpoint records each data source's identity
# (index.tsv CRC32C, shards, tokens) and a resume compares them:
#  - data.train replaced in place (another dataset at the same path): exit 2 naming data.train and
#    both identities, run_dir untouched, at 1 and 2 ranks (2 ranks whose copies differ, rank 1's
#    path bound to another dataset in a mount namespace: refused even when allowed); with data.allow_changed = true it goes on, warning with
#    the sampler's position, and its next checkpoint records the new dataset;
#  - data.val replaced: exit 2 naming data.val; a data.val the checkpoint did not have: a note;
#  - a data.mix stream replaced: exit 2 naming data.mix.NAME;
#  - GRPO's prompts dataset (data.train, its prompts.jsonl named in its index) prepared again from
#    other prompts: exit 2 naming data.train; DPO's pairs replaced: exit 2 naming data.train, and
#    with data.allow_changed its stored reference (of the old pairs) still refuses the resume;
#  - a checkpoint of format 2 (written before the identities: this run's checkpoint with its
#    data_sources attribute removed, format_version 2 and meta_crc32c recomputed, as format 2
#    wrote them) verifies and resumes with one line saying the data could not be compared;
#  - --init-from a checkpoint of other data starts a new run: not compared, no message.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 15
synth() { "$TOOL" synth --out "$1" --vocab 512 --tokens "$2" --shard-tokens 3000 --seed "$3" >/dev/null; }
synth "$TMP/d1" 12000 1 && synth "$TMP/d2" 13000 2 && synth "$TMP/d3" 12000 3 || { echo "Bail out! synth"; exit 1; }
tiny_args "$TMP/data/train"
args+=(--set model.n_layer=1 --set model.n_head=2 --set global_batch=4 --set micro_batch=4
       --set save_async=false --set data.val="$TMP/data/val")
train() { local dir=$1; shift; ranks 1 "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >>"$TMP/$dir.txt" 2>&1; }
snapshot() { (cd "$TMP/$1" && find . -type f -exec md5sum {} + | sort); }

# data.train replaced in place
cp -r "$TMP/d1" "$TMP/data"
train R --set max_duration=2ba
rc0=$?
before=$(snapshot R)
rm -rf "$TMP/data/train" && cp -r "$TMP/d2/train" "$TMP/data/train"
train R --set max_duration=4ba
rc=$?
id1=$(sed -n 's/^data.train \(crc32c:[0-9a-f]* shards:[0-9]* tokens:[0-9]*\) .*/\1/p' <("$TOOL" ckpt inspect "$(ck "$TMP/R" 2)" | sed 's/^ *//'))
[[ $rc0 == 0 && $rc == 2 && -n $id1 ]] &&
    grep -q "error: data.train = \"$TMP/data/train\" is not the data $TMP/R/step-00000002.h5 was saved with: crc32c:[0-9a-f]* shards:5 tokens:13000 now, $id1 in the checkpoint" "$TMP/R.txt" &&
    [[ $(snapshot R) == "$before" ]]
tap_check $? "data.train replaced in place: exit 2 naming it and both identities ($id1 then), run_dir untouched (exit $rc)"
grep 'error:' "$TMP/R.txt" | head -1 | cut -c1-400 | sed 's/^/# /'
ranks 2 "$TRAIN" "${args[@]}" --set run_dir="$TMP/R" --set max_duration=4ba --set micro_batch=2 >"$TMP/R2.txt" 2>&1
rc=$?
[[ $rc == 2 && $(grep -c 'error: data.train = .* is not the data' "$TMP/R2.txt") == 1 && $(snapshot R) == "$before" ]]
tap_check $? "the same resume on 2 ranks: both stop with exit 2, the error printed once, run_dir untouched (exit $rc)"
train R --set max_duration=4ba --set data.allow_changed=true
rc=$?
[[ $rc == 0 ]] && grep -q "warning: data.allow_changed = true: data.train = \"$TMP/data/train\" is not the data .*; its sampler goes on at position 8 of the stream: epoch 0, sample 8 of this dataset's [0-9]*" "$TMP/R.txt"
tap_check $? "data.allow_changed = true: the resume goes on, warning with the sampler's position (exit $rc)"
n=$(wc -l <"$TMP/R.txt")
train R --set max_duration=5ba
rc=$?
"$TOOL" ckpt inspect "$(ck "$TMP/R" 4)" >"$TMP/R4.txt" 2>&1 # (a file: grep -q in a pipe cuts it off, SIGPIPE)
[[ $rc == 0 ]] && grep -q "data.train crc32c:[0-9a-f]* shards:5 tokens:13000 $TMP/data/train" "$TMP/R4.txt" &&
    ! tail -n +$((n + 1)) "$TMP/R.txt" | grep -E 'is not the data|could not be compared' >/dev/null
tap_check $? "the checkpoint after it records the new dataset, and the next resume goes on without a word (exit $rc)"

# data.val replaced; a data.val the checkpoint did not have
rm -rf "$TMP/data/val" && cp -r "$TMP/d3/val" "$TMP/data/val"
train R --set max_duration=6ba
rc=$?
[[ $rc == 2 ]] && grep -q "error: data.val = \"$TMP/data/val\" is not the data $TMP/R/step-00000005.h5 was saved with" "$TMP/R.txt"
tap_check $? "data.val replaced: exit 2 naming data.val (exit $rc)"
train V --set max_duration=2ba --set data.val= && train V --set max_duration=3ba
rc=$?
[[ $rc == 0 ]] && grep -q "resume: data.val = \"$TMP/data/val\" is new ($TMP/V/step-00000002.h5 has no data.val): not compared" "$TMP/V.txt"
tap_check $? "a data.val the checkpoint did not have: resumed with a note (exit $rc)"

# a data.mix stream replaced
mixcfg() {
    sed '/^data = {/,/^};/d' "$TSR_ROOT/configs/tiny.cfg" >"$TMP/mix.cfg"
    printf 'data = {\n  tokenizer = "";\n  mix = (\n    { name = "web"; path = "%s"; proportion = 0.5; },\n    { name = "code"; path = "%s"; proportion = 0.5; }\n  );\n};\n' \
        "$TMP/d1/train" "$TMP/code" >>"$TMP/mix.cfg"
}
mixcfg && cp -r "$TMP/d3/train" "$TMP/code"
margs=() # args without --config and data.train (data.mix replaces it)
for ((i = 2; i < ${#args[@]}; i += 2)); do [[ ${args[i + 1]} == data.train=* ]] || margs+=("${args[i]}" "${args[i + 1]}"); done
mtrain() { ranks 1 "$TRAIN" --config "$TMP/mix.cfg" "${margs[@]}" --set data.val= --set run_dir="$TMP/M" "$@" >>"$TMP/M.txt" 2>&1; }
mtrain --set max_duration=2ba && rm -rf "$TMP/code" && cp -r "$TMP/d2/train" "$TMP/code" && mtrain --set max_duration=3ba
rc=$?
[[ $rc == 2 ]] && grep -q "error: data.mix.code = \"$TMP/code\" is not the data" "$TMP/M.txt" && ! grep -q "error: data.mix.web" "$TMP/M.txt"
tap_check $? "a data.mix stream replaced: exit 2 naming data.mix.code, not the unchanged web (exit $rc)"

# GRPO's prompts, prepared again from other prompts
grpo_prompts "$TMP/g" 40 >/dev/null 2>&1 && grpo_small_args "$TMP/g" || { echo "Bail out! grpo fixture"; exit 1; }
# shellcheck disable=SC2154 # (small: grpo_small_args's)
gtrain() { ranks 1 "$TRAIN" "${small[@]}" --set reward.kind=answer --set run_dir="$TMP/G" --set save_async=false "$@" >>"$TMP/G.txt" 2>&1; }
gtrain --set max_duration=1ba
rc0=$?
head -n 30 "$TMP/g/ar/prompts.jsonl" >"$TMP/g/fewer.jsonl"
rm -rf "$TMP/g/prompts" && "$TOOL" prep --out "$TMP/g/prompts" --val-fraction 0 --tokenizer "$TMP/g/tok.tsr" -q \
    --format prompts --pack 8 "$TMP/g/fewer.jsonl" >/dev/null 2>&1 && gtrain --set max_duration=2ba
rc=$?
[[ $rc0 == 0 && $rc == 2 ]] && grep -q "error: data.train = \"$TMP/g/prompts/train\" is not the data $TMP/G/step-00000001.h5 was saved with" "$TMP/G.txt"
tap_check $? "GRPO: its prompts prepared again from other prompts: exit 2 naming data.train (exit $rc0, then $rc)"

# the ranks' copies differ (rank 1 sees another dataset at the same path: a bind mount in a mount
# namespace of its own, as a node-local copy would): refused even with data.allow_changed
if unshare -m true 2>/dev/null; then
    train X --set max_duration=2ba --set data.val=
    cat >"$TMP/rank1.sh" <<EOF
#!/bin/sh
[ "\$OMPI_COMM_WORLD_RANK" = 1 ] || exec "\$@"
exec unshare -m sh -c 'mount --bind "$TMP/d1/train" "$TMP/data/train" && exec "\$0" "\$@"' "\$@"
EOF
    ranks 2 sh "$TMP/rank1.sh" "$TRAIN" "${args[@]}" --set run_dir="$TMP/X" --set data.val= --set max_duration=3ba \
        --set micro_batch=2 --set data.allow_changed=true >"$TMP/X2.txt" 2>&1
    rc=$?
    [[ $rc == 2 ]] && grep -q "error: data.train = \"$TMP/data/train\" is not the data $TMP/X/step-00000002.h5 was saved with: crc32c:[0-9a-f]* shards:4 tokens:12000 now, .* on rank 1, while other ranks read the checkpoint's" "$TMP/X2.txt"
    tap_check $? "2 ranks whose copies differ (rank 1 another dataset at the same path): exit 2 even with data.allow_changed, naming rank 1 (exit $rc)"
else
    tap_skip "2 ranks whose copies differ" "unshare -m (a mount namespace) is not allowed here"
fi

# DPO's pairs (data.train) replaced in place by other pairs; data.allow_changed does not make its
# stored reference (computed on the old pairs) serve them
mkdir -p "$TMP/p5" "$TMP/p6"
p5=$("$PY3" "$TSR_ROOT/tests/reference/dpo_pairs.py" "$TMP/p5" 5) && p6=$("$PY3" "$TSR_ROOT/tests/reference/dpo_pairs.py" "$TMP/p6" 6) &&
    cp -r "$p5" "$TMP/pairs" || { echo "Bail out! dpo pairs"; exit 1; }
dpo=(--config "$TSR_ROOT/configs/tiny-llama.cfg" --set model.vocab_size=100 --set data.tokenizer=
     --set sample.tokens=0 --set data.train="$TMP/pairs" --set data.val= --set eval_interval=0ba
     --set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set model.n_kv_head=2
     --set model.intermediate_size=96 --set seq_len=16 --set global_batch=8 --set micro_batch=2
     --set threads=1 --set optim.warmup=2ba --set objective=dpo --set dpo.beta=0.5
     --set save_async=false --set run_dir="$TMP/D")
dtrain() { ranks 1 "$TRAIN" "${dpo[@]}" "$@" >>"$TMP/D.txt" 2>&1; }
dtrain --set max_duration=2ba
rc0=$?
rm -rf "$TMP/pairs" && cp -r "$p6" "$TMP/pairs" && dtrain --set max_duration=3ba
rc=$?
[[ $rc0 == 0 && $rc == 2 ]] && grep -q "error: data.train = \"$TMP/pairs\" is not the data $TMP/D/step-00000002.h5 was saved with" "$TMP/D.txt"
tap_check $? "DPO: its pairs replaced in place: exit 2 naming data.train (exit $rc0, then $rc)"
dtrain --set max_duration=3ba --set data.allow_changed=true
rc=$?
[[ $rc == 2 ]] && grep -q "warning: data.allow_changed = true: data.train = \"$TMP/pairs\"" "$TMP/D.txt" &&
    grep -q "error: $TMP/D/dpo-reference.bin: the stored DPO reference .* cannot be used by this run: computed on data.train" "$TMP/D.txt"
tap_check $? "DPO with data.allow_changed = true: warned, then its stored reference of the old pairs refuses (exit $rc)"

# a checkpoint of format 2: the same file as format 2 wrote it, without data_sources
train O --set max_duration=2ba
"$PY3" - "$(ck "$TMP/O" 2)" <<'PY'
import sys, h5py, numpy as np
def crc32c(data):  # CRC-32C (Castagnoli), reflected, init and final xor 0xffffffff
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF
with h5py.File(sys.argv[1], "r+") as f:
    at = f.attrs
    del at["data_sources"]
    at.modify("format_version", np.int64(2))
    txt = lambda v: v if isinstance(v, bytes) else str(int(v)).encode()
    blob = b"".join(k.encode() + b"\0" + txt(at[k]) + b"\0" for k in sorted(at.keys()) if k != "meta_crc32c")
    at.modify("meta_crc32c", np.uint32(crc32c(blob)))
PY
"$TOOL" ckpt verify "$(ck "$TMP/O" 2)" >"$TMP/Ov.txt" 2>&1 && "$TOOL" ckpt inspect "$(ck "$TMP/O" 2)" >"$TMP/Oi.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && grep -q 'version 2 (this program reads tessera-checkpoint versions 1 to 3)' "$TMP/Oi.txt" &&
    grep -q 'data_sources: none recorded (format version < 3)' "$TMP/Oi.txt"
tap_check $? "a format 2 checkpoint (no data_sources) verifies and inspects as version 2 (exit $rc)"
train O --set max_duration=3ba
rc=$?
[[ $rc == 0 ]] && grep -q "resume: $TMP/O/step-00000002.h5 records no identity of its data sources (written before checkpoint format 3, or by tessera ckpt import): the data could not be compared" "$TMP/O.txt" &&
    "$TOOL" ckpt inspect "$(ck "$TMP/O" 3)" >"$TMP/O3.txt" 2>&1 && grep -q 'format .* version 3' "$TMP/O3.txt"
r=$?
((r)) && grep -E 'resume|error' "$TMP/O.txt" | sed 's/^/# /'
tap_check $r "resumed from it with one line saying the data could not be compared; its next checkpoint is format 3 (exit $rc)"

# --init-from a checkpoint of other data: a new run, not compared
train I --set max_duration=1ba --set data.train="$TMP/d3/train" --init-from "$TMP/R"
rc=$?
[[ $rc == 0 ]] && ! grep -qE 'data_sources|is not the data|could not be compared' "$TMP/I.txt"
tap_check $? "--init-from a checkpoint of other data: a new run, not compared (exit $rc)"
[[ $(grep -c . <("$TOOL" ckpt inspect "$(ck "$TMP/I" 1)" | sed -n '/^data_sources:/,/^tensors/p')) == 4 ]]
tap_check $? "its checkpoint records its own data.train and data.val"
tap_done
