#!/usr/bin/env bash
# Object storage, the rest of issue 69 (docs/object-storage.md), against a private s3rver
# (tests/s3/s3lib.sh; the first part is tests/s3/test_s3.sh):
#  - GRPO prompts on the store: `tessera data push` and `tessera prep --out s3://` upload a prompts
#    dataset's prompts.jsonl (before its index); objective = "grpo" with data.train = s3://... fetches it once for the job
#    (rank 0, broadcast: one GET, counted by tests/s3/flaky_proxy.py) and gives the local prompts'
#    rollouts at 2 ranks: the same losses, rewards and lengths at steps 1-2, bit for bit;
#  - parallel multipart uploads: a shard of ~390 KB in parts of 10 KB (TSR_S3_PART_MB=0.01) sent
#    TSR_S3_CONNECTIONS at once (the proxy saw two parts in flight together), read back identical
#    (the store's object, and verify-data s3://); part 3 failing for good (HTTP 500 from the proxy)
#    stops the push with exit 2 naming the object, no object and no index visible, and the upload
#    aborted (DELETE ?uploadId= of that upload; s3rver implements neither AbortMultipartUpload nor
#    ListMultipartUploads: it answers the DELETE 405, so the abort is checked as sent);
#  - virtual-host addressing (AWS_S3_ADDRESSING_STYLE=virtual, endpoint http://s3.localhost:PORT,
#    s3rver's --service-endpoint localhost; curl resolves *.localhost to the loopback): the requests
#    go to tsr.s3.localhost with no bucket in the path, and a run reads the bytes and trains the
#    losses of the same dataset in path style.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
source "$TSR_ROOT/tests/s3/s3lib.sh"
tap_plan 9
s3rver_up --service-endpoint localhost

# ---- GRPO prompts on the store ----
grpo_prompts "$TMP/g" 200 || { echo "Bail out! grpo_prompts failed"; exit 1; }
"$TOOL" data push "$TMP/g/prompts" s3://tsr/prompts >"$TMP/gpush.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && cmp -s "$TMP/g/prompts/train/prompts.jsonl" "$(obj prompts/train/prompts.jsonl)" &&
    grep -q 'prompts.jsonl and index.tsv' "$TMP/gpush.txt" &&
    (( $(stat -c %Y "$(obj prompts/train/index.tsv)") >= $(stat -c %Y "$(obj prompts/train/prompts.jsonl)") ))
tap_check $? "data push of a GRPO prompts dataset: prompts.jsonl in the store byte for byte, before the index (exit $rc)"
mkdir -p "$TMP/tmpdir"
TMPDIR=$TMP/tmpdir "$TOOL" prep --out s3://tsr/pp --val-fraction 0 --tokenizer "$TMP/g/tok.tsr" -q \
    --format prompts --pack 8 "$TMP/g/ar/prompts.jsonl" >"$TMP/pp.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && cmp -s "$TMP/g/prompts/train/prompts.jsonl" "$(obj pp/train/prompts.jsonl)" &&
    cmp -s "$TMP/g/prompts/train/index.tsv" "$(obj pp/train/index.tsv)"
tap_check $? "tessera prep --format prompts --out s3://: prompts.jsonl and the index in the store, as a local prep's (exit $rc)"

grpo_small_args "$TMP/g"
# a reward that depends on the prompt record (prompts.jsonl's answer) and the completion, so that a
# fresh model's groups have advantages (the built-in exact-answer reward is 0 for all of them)
cat >"$TMP/rw.py" <<'PY'
import json, sys
for line in sys.stdin:
    q = json.loads(line)
    r = (int(q["prompt"]["answer"]) + len(q["completion"]) + sum(q["tokens"])) % 5 / 4.0
    print(json.dumps({"id": q["id"], "reward": r}), flush=True)
PY
small+=(--set reward.kind=command --set reward.command="$PY3 $TMP/rw.py")
grun() { local dir=$1; shift; "${MPIRUN[@]}" -np 2 "$TRAIN" "${small[@]}" --set max_duration=2ba --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
# the step records without their timings
steps_of() { "$PY3" -c '
import json, sys
for d in map(json.loads, open(sys.argv[1])):
    if "loss" in d:
        print(d["step"], sorted((k, v) for k, v in d.items() if k in ("loss", "grad_norm") or
              (k.startswith("grpo_") and not k.endswith("_per_s") and not k.endswith("_s"))))' "$1"; }
start_proxy pass "$TMP/gpass.log"
grun GL && AWS_ENDPOINT_URL=http://127.0.0.1:$PPORT grun GS --set data.train=s3://tsr/prompts/train --set data.stage_to="$TMP/stage-GS"
rc=$?
stop_proxy
sl=$(steps_of "$TMP/GL/metrics.jsonl") ss=$(steps_of "$TMP/GS/metrics.jsonl")
[[ $rc == 0 && $(wc -l <<<"$sl") == 2 && $sl == *"('grpo_reward_mean', 0."[0-9]* && $sl == "$ss" ]]
tap_check $? "objective = grpo on prompts in the store, 2 ranks: the local prompts' losses, rewards and lengths at steps 1-2 bit for bit (exit $rc)"
head -1 <<<"$ss" | cut -c1-200 | sed 's/^/# /'
n_rec=$(grep -c '^/tsr/prompts/train/prompts.jsonl ' "$TMP/gpass.log")
[[ $rc == 0 && $n_rec == 1 ]]
tap_check $? "2 ranks: prompts.jsonl fetched once for the job (rank 0, broadcast) ($n_rec GETs)"

# ---- parallel multipart uploads ----
"$TOOL" synth --out "$TMP/big" --vocab 512 --tokens 200000 --shard-tokens 200000 --seed 4 >/dev/null
big=$TMP/big/train/shard-00000.bin
n_parts=$(( ($(stat -c %s "$big") + 10485) / 10486 )) # parts of 0.01 MiB, rounded down to bytes
# push_parts MODE LOG URL OUT: $TMP/big/train pushed to URL in parts of 0.01 MiB, 4 at a time,
# through the proxy in MODE (its log LOG), the output in OUT; rc is the push's exit
push_parts() {
    start_proxy "$1" "$2"
    AWS_ENDPOINT_URL=http://127.0.0.1:$PPORT TSR_S3_PART_MB=0.01 TSR_S3_CONNECTIONS=4 \
        "$TOOL" data push "$TMP/big/train" "$3" >"$4" 2>&1
    rc=$?
    stop_proxy
}
push_parts pass "$TMP/mp.log" s3://tsr/big "$TMP/mp.txt"
n_put=$(grep -c '^PUT /tsr/big/shard-00000.bin?partNumber=[0-9]*&uploadId=.* 200$' "$TMP/mp.log")
most=$(sed -n 's/^inflight //p' "$TMP/mp.log" | sort -n | tail -1)
[[ $rc == 0 && $n_put -ge 30 && ${most:-0} -ge 2 ]] && cmp -s "$big" "$(obj big/shard-00000.bin)" &&
    grep -q '1 in multipart uploads' "$TMP/mp.txt"
tap_check $? "a $(stat -c %s "$big")-byte shard in $n_put parts of 10 KB, TSR_S3_CONNECTIONS=4 ($most in flight at once): the store's object byte for byte (exit $rc)"
TMPDIR=$TMP/tmpdir "$TOOL" verify-data s3://tsr/big >"$TMP/vd.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && grep -q 's3://tsr/big: ok: 1 shards*.*checksums verified' "$TMP/vd.txt"
tap_check $? "verify-data s3://tsr/big: the multipart object read back and checked (exit $rc)"

push_parts failpart "$TMP/fp.log" s3://tsr/failed "$TMP/fp.txt"
n_create=$(grep -c '^POST /tsr/failed/shard-00000.bin?uploads= 200$' "$TMP/fp.log")
upload_id=$(sed -n 's|^PUT /tsr/failed/shard-00000.bin?partNumber=1&uploadId=\([^ ]*\) 200$|\1|p' "$TMP/fp.log")
[[ $rc == 2 && $n_create == 1 && -n $upload_id && ! -e $(obj failed/shard-00000.bin) && ! -e $(obj failed/index.tsv) ]] &&
    grep -q 'error: .*s3://tsr/failed/shard-00000.bin.*HTTP 500 InternalError' "$TMP/fp.txt" &&
    grep -q "^DELETE /tsr/failed/shard-00000.bin?uploadId=$upload_id " "$TMP/fp.log" &&
    [[ $(grep -c '^PUT /tsr/failed/shard-00000.bin?partNumber=3&' "$TMP/fp.log") == 2 ]]
tap_check $? "part 3 failing for good (HTTP 500, tried TSR_S3_RETRIES=2 times): exit 2 naming the object, no object or index visible, the upload aborted (DELETE ?uploadId=) (exit $rc)"
grep 'error' "$TMP/fp.txt" | head -1 | cut -c1-240 | sed 's/^/# /'
grep '^DELETE' "$TMP/fp.log" | head -1 | sed 's/uploadId=[^ ]*/uploadId=.../; s/^/# s3rver: /'

# ---- virtual-host addressing ----
"$TOOL" synth --out "$TMP/data" --vocab 512 --tokens 20000 --shard-tokens 3300 --seed 1 >/dev/null &&
    "$TOOL" data push "$TMP/data/train" s3://tsr/ds/train >/dev/null
args=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.vocab_size=512 --set data.tokenizer=
      --set sample.tokens=0 --set data.val= --set model.n_layer=2 --set model.d_model=64
      --set model.n_head=4 --set seq_len=32 --set global_batch=8 --set micro_batch=2
      --set max_duration=6ba --set eval_interval=0ba --set threads=1 --set log_interval=1
      --set data.stage_window=10 --set watchdog.window=0)
run() { local dir=$1; shift; "${MPIRUN[@]}" -np 1 "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
start_proxy pass "$TMP/vh.log"
run VL --set data.train="$TMP/data/train" &&
    AWS_ENDPOINT_URL=http://s3.localhost:$PPORT AWS_S3_ADDRESSING_STYLE=virtual \
        run VS --set data.train=s3://tsr/ds/train --set data.stage_to="$TMP/stage-VS"
rc=$?
stop_proxy
[[ $rc == 0 ]] && cmp -s <(final_lines "$TMP/VL/metrics.jsonl") <(final_lines "$TMP/VS/metrics.jsonl") &&
    cmp -s "$TMP/data/train/shard-00002.bin" "$(ls "$TMP"/stage-VS/*/shard-00002.bin)"
tap_check $? "virtual-host style: trains the local copy's losses bit for bit from a byte-identical staged copy (exit $rc)"
n_vh=$(grep -c '^/ds/train/' "$TMP/vh.log") n_path=$(grep -c '^/tsr/' "$TMP/vh.log")
[[ $rc == 0 && $n_vh -ge 2 && $n_path == 0 ]] && grep -q '^/ds/train/index.tsv 1 pass$' "$TMP/vh.log"
tap_check $? "virtual-host style: every request to tsr.s3.localhost with no bucket in its path ($n_vh GETs, $n_path in path style)"
tap_done
