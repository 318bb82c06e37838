#!/usr/bin/env bash
# Datasets on an S3-compatible object store (docs/object-storage.md), against a private s3rver
# (npm s3rver, a real S3 protocol server; it knows its access key but takes a wrong secret:
# tests/s3/test_s3_sigv4.sh checks the signatures) on 127.0.0.1:
#  - tessera data push uploads a prepared dataset (train and val), the index after the shards;
#  - training from s3://... through data.stage_to gives the local copy's losses bit for bit, at 1
#    and 2 ranks, no sample read in place; killed and rerun, it resumes mid-window, streaming again;
#    a data.mix stream on the store gives the all-local mixture's losses;
#  - faults: a corrupted object in the store -> exit 2 naming it; wrong credentials (403) or a missing
#    dataset (404) -> exit 2 naming endpoint, bucket and key, the secret never printed; no
#    data.stage_to or no credentials -> exit 1; the shared credentials/config files with a profile;
#    503 SlowDown and a corrupted body on the way (tests/s3/flaky_proxy.py) -> retried, same losses.
source "$(dirname "$0")/../lib.sh"
gpt2_dir
tsr_tmpdir
source "$TSR_ROOT/tests/s3/s3lib.sh"
tap_plan 27
s3rver_up

"$TOOL" synth --out "$TMP/data" --vocab 512 --tokens 40000 --shard-tokens 3300 --seed 1 >/dev/null
"$TOOL" data push "$TMP/data" s3://tsr/ds >"$TMP/push.txt" 2>&1
rc=$?
ok=1
for f in "$TMP"/data/train/* "$TMP"/data/val/*; do
    cmp -s "$f" "$(obj "ds/$(basename "$(dirname "$f")")/$(basename "$f")")" || ok=0
done
[[ $rc == 0 && $ok == 1 ]] && (( $(stat -c %Y "$(obj ds/train/index.tsv)") >= $(stat -c %Y "$(obj ds/train/shard-00012.bin)") ))
tap_check $? "tessera data push: every shard and index of train and val in the store, byte for byte (exit $rc)"

# tessera verify-data and tessera prep --out s3:// work in a private TMPDIR that they leave empty
mkdir -p "$TMP/tmpdir"
TMPDIR=$TMP/tmpdir "$TOOL" verify-data s3://tsr/ds/train >"$TMP/vd.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && grep -q 's3://tsr/ds/train: ok: 13 shards, 40000 tokens.*checksums verified' "$TMP/vd.txt" &&
    [[ -z $(ls -A "$TMP/tmpdir") ]]
tap_check $? "tessera verify-data s3://...: every shard fetched and verified, nothing left in TMPDIR (exit $rc)"

# prep --out s3://: the same objects as a local prep then push; a refused upload leaves nothing
for i in $(seq 1 300); do printf '{"text": "document %d: the quick brown fox %d jumps"}\n' "$i" "$((i * 7))"; done >"$TMP/corpus.jsonl"
prep() { "$TOOL" prep --tokenizer "$GPT2_DIR" --quiet --val-fraction 0.1 --shard-tokens 2000 "$@" "$TMP/corpus.jsonl"; }
prep --out "$TMP/prepL" >/dev/null 2>&1 && TMPDIR=$TMP/tmpdir prep --out s3://tsr/prepped >"$TMP/prep.txt" 2>&1
rc=$?
ok=1
for f in "$TMP"/prepL/train/* "$TMP"/prepL/val/*; do
    cmp -s "$f" "$TMP/store/tsr/prepped/$(basename "$(dirname "$f")")/$(basename "$f")._S3rver_object" || ok=0
done
[[ $rc == 0 && $ok == 1 && -z $(ls -A "$TMP/tmpdir") && -f $TMP/store/tsr/prepped/val/index.tsv._S3rver_object ]]
tap_check $? "tessera prep --out s3://tsr/prepped: train and val in the store equal to a local prep byte for byte, TMPDIR left empty (exit $rc)"
AWS_ACCESS_KEY_ID=NOBODY TMPDIR=$TMP/tmpdir prep --out s3://tsr/refused >"$TMP/prepF.txt" 2>&1
rc=$?
[[ $rc == 2 && -z $(ls -A "$TMP/tmpdir") && ! -e $TMP/store/tsr/refused ]] && grep -q 'HTTP 403' "$TMP/prepF.txt"
tap_check $? "tessera prep --out s3:// refused by the store (403): exit 2, nothing in the store, TMPDIR left empty (exit $rc)"

args=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.vocab_size=512 --set data.tokenizer=
      --set sample.tokens=0 --set data.val="$TMP/data/val" --set model.n_layer=2
      --set model.d_model=64 --set model.n_head=4 --set seq_len=32 --set global_batch=8
      --set micro_batch=2 --set max_duration=20ba --set eval_interval=0ba --set threads=1
      --set log_interval=1 --set data.stage_window=10 --set watchdog.window=0)
run() { local np=$1 dir=$2; shift 2; "${MPIRUN[@]}" -np "$np" "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
s3run() { local np=$1 dir=$2; shift 2; run "$np" "$dir" --set data.train=s3://tsr/ds/train --set data.stage_to="$TMP/stage-$dir" "$@"; }
in_place() { "$PY3" -c '
import json, sys
n = [json.loads(l) for l in open(sys.argv[1])]
n = [d for d in n if d.get("event") == "staging"]
print(sum(d["in_place_reads"] for d in n) if n else -1)' "$1"; }

# evaluated at steps 10 and 20; S1 also streams data.val (staged whole at start)
val_lines() { "$PY3" -c '
import json, sys
print([(d["step"], d["val_loss"]) for d in map(json.loads, open(sys.argv[1])) if "val_loss" in d])' "$1"; }
# every step record of a staged run has data_wait_s >= 0 (the wait for its window's shards)
waits_ok() { "$PY3" -c '
import json, sys
s = [d for d in map(json.loads, open(sys.argv[1])) if "loss" in d]
sys.exit(not s or not all(d.get("data_wait_s", -1) >= 0 for d in s))' "$1"; }
run 1 L1 --set data.train="$TMP/data/train" --set eval_interval=10ba &&
    s3run 1 S1 --set data.val=s3://tsr/ds/val --set eval_interval=10ba
rc=$?
[[ $rc == 0 ]] && cmp -s <(final_lines "$TMP/L1/metrics.jsonl") <(final_lines "$TMP/S1/metrics.jsonl") &&
    [[ $(in_place "$TMP/S1/metrics.jsonl") == 0 ]] && cmp -s "$TMP/data/train/shard-00005.bin" "$(ls "$TMP"/stage-S1/*/shard-00005.bin)"
tap_check $? "1 rank: s3:// trains the local copy's losses bit for bit, every sample from a staged copy (exit $rc)"
vl=$(val_lines "$TMP/L1/metrics.jsonl")
[[ $rc == 0 && $vl == "[(10, "*", (20, "* && $vl == "$(val_lines "$TMP/S1/metrics.jsonl")" ]] &&
    for f in "$TMP"/stage-S1/*/shard-00000.bin; do cmp -s "$f" "$TMP/data/val/shard-00000.bin" && break; done
tap_check $? "1 rank: data.val = s3://...: the local copy's validation losses bit for bit at steps 10 and 20, from a staged copy"
waits_ok "$TMP/S1/metrics.jsonl" && ! grep -q data_wait_s "$TMP/L1/metrics.jsonl"
tap_check $? "1 rank: every step record of the streamed run has data_wait_s >= 0 (none without staging)"
# the accounting record's data part: the steps' waits summed (the first window's shards), 0 locally
data_part() { "$PY3" -c '
import json, sys
L = [json.loads(l) for l in open(sys.argv[1])]
a = [d for d in L if d.get("event") == "account"]
w = sum(d.get("data_wait_s", 0) for d in L if "loss" in d)
ok = len(a) == 1 and abs(a[0]["data_s"] - w) <= 1e-4 + 1e-5 * w and (a[0]["data_s"] > 0) == (sys.argv[2] == "s3")
print(a[0]["data_s"] if a else None, w); sys.exit(not ok)' "$1" "$2"; }
ds=$(data_part "$TMP/S1/metrics.jsonl" s3) && dl=$(data_part "$TMP/L1/metrics.jsonl" local)
tap_check $? "the accounting record's data_s is the sum of the steps' data_wait_s: streamed ($ds), local ($dl)"

# (through the proxy, which counts the requests: the index is fetched once for the job, by rank 0)
start_proxy pass "$TMP/pass.log"
run 2 L2 --set data.train="$TMP/data/train" && AWS_ENDPOINT_URL=http://127.0.0.1:$PPORT s3run 2 S2
rc=$?
stop_proxy
[[ $rc == 0 ]] && cmp -s <(final_lines "$TMP/L2/metrics.jsonl") <(final_lines "$TMP/S2/metrics.jsonl") &&
    [[ $(in_place "$TMP/S2/metrics.jsonl") == 0 ]]
tap_check $? "2 ranks: s3:// trains the local copy's losses bit for bit, none read in place (exit $rc)"
n_index=$(grep -c '^/tsr/ds/train/index.tsv ' "$TMP/pass.log")
[[ $rc == 0 && $n_index == 1 ]]
tap_check $? "2 ranks: index.tsv fetched once for the job (rank 0, broadcast), not twice per rank ($n_index GETs)"

# killed after step 18 (checkpoints every 5 steps, windows of 10): the rerun resumes at step 15, mid-window
TSR_FAULT=kill:18:1 s3run 2 K --set save_interval=5ba --set save_async=false
rc=$?
rm -rf "$TMP/stage-K" # requeued on another node: nothing local, the window is fetched again
s3run 2 K --set save_interval=5ba --set save_async=false
rc2=$?
[[ $rc != 0 && $rc2 == 0 ]] && grep -q "resume step 15" "$TMP/K.txt" &&
    cmp -s <(final_lines "$TMP/L2/metrics.jsonl") <(final_lines "$TMP/K/metrics.jsonl")
tap_check $? "2 ranks killed after step 18 and rerun: resumed at step 15 (mid-window) streaming again, losses bit for bit (exit $rc, then $rc2)"

# tessera eval of a dataset on the store: fetched whole into TMPDIR (left empty), the local loss
TMPDIR=$TMP/tmpdir "$TOOL" eval --ckpt "$TMP/K" --val "$TMP/data/val" --val s3://tsr/ds/val >"$TMP/ev.txt" 2>&1
rc=$?
loss_of() { sed -n "s|.*\"path\": \"$1\", \"loss\": \([^,]*\),.*|\1|p" "$TMP/ev.txt" | head -1; }
la=$(loss_of "$TMP/data/val") lb=$(loss_of s3://tsr/ds/val)
[[ $rc == 0 && -n $la && $la == "$lb" && -z $(ls -A "$TMP/tmpdir") ]]
tap_check $? "tessera eval --val s3://...: the local copy's loss ($la = $lb), nothing left in TMPDIR (exit $rc)"

# a mixture (data.mix, docs/data-mixing.md): a local stream and one on the store, against both local
# (pushed in multipart uploads of 2 KB parts: TSR_S3_PART_MB=0.002)
"$TOOL" synth --out "$TMP/dom" --vocab 512 --tokens 30000 --shard-tokens 3300 --seed 2 >/dev/null &&
    TSR_S3_PART_MB=0.002 "$TOOL" data push "$TMP/dom/train" s3://tsr/dom >"$TMP/mp.txt" 2>&1
rc=$?
n_dom=$(ls "$TMP/dom/train" | grep -c '^shard-')
ok=1
for f in "$TMP"/dom/train/*; do cmp -s "$f" "$TMP/store/tsr/dom/$(basename "$f")._S3rver_object" || ok=0; done
n_mp=$(sed -n 's/.*pushed [0-9]* shards (.*; \([0-9]*\) in multipart uploads).*/\1/p' "$TMP/mp.txt")
n_big=$(find "$TMP/dom/train" -type f -size +2097c | wc -l) # over 0.002 MiB
[[ $rc == 0 && $ok == 1 && $n_big -ge 2 && $n_mp == "$n_big" ]]
tap_check $? "data push with TSR_S3_PART_MB=0.002: the $n_big files of $n_dom shards + index over 2 KB in multipart uploads ($n_mp), all byte for byte (exit $rc)"
TSR_S3_PART_MB=0 "$TOOL" data push "$TMP/dom/train" s3://tsr/zero >"$TMP/mp0.txt" 2>&1
rc=$?
[[ $rc == 1 && ! -e $TMP/store/tsr/zero ]] && grep -q 'TSR_S3_PART_MB = "0"' "$TMP/mp0.txt"
tap_check $? "TSR_S3_PART_MB=0: refused with exit 1 naming it, nothing uploaded (exit $rc)"
mixcfg() { # mixcfg FILE DOMAIN_PATH
    sed '/^data = {/,/^};/d' "$TSR_ROOT/configs/tiny.cfg" >"$1"
    printf 'data = {\n  val = "%s";\n  tokenizer = "";\n  stage_window = 10;\n  mix = (\n    { name = "web"; path = "%s"; proportion = 0.75; },\n    { name = "domain"; path = "%s"; proportion = 0.25; }\n  );\n};\n' \
        "$TMP/data/val" "$TMP/data/train" "$2" >>"$1"
}
mixcfg "$TMP/mixL.cfg" "$TMP/dom/train" && mixcfg "$TMP/mixS.cfg" s3://tsr/dom
margs=("${args[@]:2}")
"${MPIRUN[@]}" -np 1 "$TRAIN" --config "$TMP/mixL.cfg" "${margs[@]}" --set run_dir="$TMP/ML" >"$TMP/ML.txt" 2>&1 &&
    "${MPIRUN[@]}" -np 1 "$TRAIN" --config "$TMP/mixS.cfg" "${margs[@]}" --set run_dir="$TMP/MS" \
        --set data.stage_to="$TMP/stage-MS" >"$TMP/MS.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && cmp -s <(final_lines "$TMP/ML/metrics.jsonl") <(final_lines "$TMP/MS/metrics.jsonl") &&
    [[ $(in_place "$TMP/MS/metrics.jsonl") == 0 ]]
tap_check $? "a mixture of a local stream and an s3:// stream: the all-local mixture's losses bit for bit (exit $rc)"

# DPO preference pairs on the store (their preference_pairs and packed_seq_len notes read from the
# fetched index): a DPO run from s3:// gives the local pairs' losses bit for bit
pairs=$("$PY3" "$TSR_ROOT/tests/reference/dpo_pairs.py" "$TMP")
dbase=(--config "$TSR_ROOT/configs/tiny-llama.cfg" --set model.vocab_size=100 --set data.tokenizer=
       --set sample.tokens=0 --set data.val= --set eval_interval=0ba --set model.n_layer=2
       --set model.d_model=64 --set model.n_head=4 --set model.n_kv_head=2
       --set model.intermediate_size=96 --set seq_len=16 --set global_batch=8 --set micro_batch=2
       --set max_duration=6ba --set threads=1 --set log_interval=1 --set watchdog.window=0
       --set data.stage_window=10)
dtrain() { local dir=$1; shift; "${MPIRUN[@]}" -np 1 "$TRAIN" "${dbase[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
ddpo=(--set objective=dpo --set lora.rank=4 --set lora.alpha=8 --set optim.lr=1e-2 --set dpo.beta=0.5
      --init-from "$TMP/DB")
[[ -n $pairs ]] && "$TOOL" data push "$pairs" s3://tsr/pairs >/dev/null &&
    dtrain DB --set data.train="$pairs" && dtrain DL "${ddpo[@]}" --set data.train="$pairs" &&
    dtrain DS "${ddpo[@]}" --set data.train=s3://tsr/pairs --set data.stage_to="$TMP/stage-DS"
rc=$?
[[ $rc == 0 ]] && grep -q dpo "$TMP/DS/metrics.jsonl" &&
    cmp -s <(final_lines "$TMP/DL/metrics.jsonl") <(final_lines "$TMP/DS/metrics.jsonl") &&
    [[ $(in_place "$TMP/DS/metrics.jsonl") == 0 ]]
tap_check $? "objective = dpo on preference pairs in the store: the local pairs' losses bit for bit, none read in place (exit $rc)"
TMPDIR=$TMP/tmpdir "$TOOL" eval --ckpt "$TMP/DS" --val "$pairs" --val s3://tsr/pairs -o "$TMP/evp.json" >"$TMP/evp.txt" 2>&1
rc=$?
"$PY3" - "$TMP/evp.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))["val"]
a, b = v[-2], v[-1]
keys = ("loss", "preference_pairs", "preference_accuracy", "preference_logp_margin")
print("# tessera eval:", {k: b.get(k) for k in keys})
sys.exit(not (b["path"] == "s3://tsr/pairs" and a.get("preference_pairs", 0) > 0 and all(a.get(k) == b.get(k) for k in keys)))
PY
[[ $? == 0 && $rc == 0 && -z $(ls -A "$TMP/tmpdir") ]]
tap_check $? "tessera eval of the pairs in the store: the local pairs' loss, pair count, accuracy and log-prob margin (exit $rc)"

# faults, each with its own stage directory (so nothing is local yet)
s3run 1 NS --set data.stage_to=
rc=$?
[[ $rc == 1 ]] && grep -q 'data.stage_to' "$TMP/NS.txt"
tap_check $? "s3:// without data.stage_to: exit 1 naming data.stage_to (exit $rc)"

# (s3rver knows one access key, S3RVER; it answers an unknown one with 403 InvalidAccessKeyId)
AWS_ACCESS_KEY_ID=NOBODY AWS_SECRET_ACCESS_KEY=not-the-secret-x7 s3run 1 WS
rc=$?
[[ $rc == 2 ]] && grep -q "127.0.0.1:$PORT" "$TMP/WS.txt" && grep -q 'bucket tsr' "$TMP/WS.txt" &&
    grep -q 'key ds/train/index.tsv' "$TMP/WS.txt" && grep -q 'HTTP 403' "$TMP/WS.txt" &&
    ! grep -rq 'not-the-secret-x7' "$TMP/WS.txt" "$TMP/WS" "$TMP/stage-WS" 2>/dev/null
tap_check $? "wrong credentials: exit 2 naming the endpoint, bucket and key (HTTP 403), the secret printed nowhere (exit $rc)"
grep 'error' "$TMP/WS.txt" | head -2 | sed 's/^/# /'
run 1 NF --set data.train=s3://tsr/nothing-here --set data.stage_to="$TMP/stage-NF"
rc=$?
[[ $rc == 2 ]] && grep -q 'key nothing-here/index.tsv' "$TMP/NF.txt" && grep -q 'HTTP 404 NoSuchKey' "$TMP/NF.txt"
tap_check $? "a prefix without a dataset: exit 2 naming the key, HTTP 404 (exit $rc)"

s3run 1 CL --set data.cache_limit=1000
rc=$?
[[ $rc == 2 ]] && grep -q 'error: s3://tsr/ds/train/shard-[0-9]*.bin does not fit data.cache_limit' "$TMP/CL.txt"
tap_check $? "a cache_limit smaller than a shard: exit 2 naming the shard (an s3:// shard is never read in place) (exit $rc)"

(unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY; s3run 1 NC)
rc=$?
[[ $rc == 1 ]] && grep -q 'no credentials' "$TMP/NC.txt" && grep -q 'profile "default"' "$TMP/NC.txt"
tap_check $? "no credentials anywhere: exit 1 naming the profile and where credentials go (exit $rc)"

# the shared files with a profile: credentials file + config file (endpoint, region, path style)
mkdir -p "$TMP/aws"
printf '[lumi]\naws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n' >"$TMP/aws/credentials"
printf '[profile lumi]\nregion = us-east-1\nendpoint_url = http://127.0.0.1:%s\ns3 =\n  addressing_style = path\n' "$PORT" >"$TMP/aws/config"
(unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_ENDPOINT_URL AWS_REGION
 AWS_PROFILE=lumi AWS_SHARED_CREDENTIALS_FILE=$TMP/aws/credentials AWS_CONFIG_FILE=$TMP/aws/config s3run 1 P)
rc=$?
[[ $rc == 0 ]] && cmp -s <(final_lines "$TMP/L1/metrics.jsonl") <(final_lines "$TMP/P/metrics.jsonl")
tap_check $? "profile lumi from AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE (endpoint_url, path style): bit for bit (exit $rc)"

# a flaky store (tests/s3/flaky_proxy.py in front of it): each shard's first GET answers 503
# SlowDown, its second a body with one byte flipped; the stager retries, fetches again, and trains
start_proxy flaky "$TMP/proxy.log"
AWS_ENDPOINT_URL=http://127.0.0.1:$PPORT s3run 1 F
rc=$?
n_shards=$(ls "$TMP/data/train" | grep -c '^shard-')
[[ $rc == 0 ]] && cmp -s <(final_lines "$TMP/L1/metrics.jsonl") <(final_lines "$TMP/F/metrics.jsonl") &&
    [[ $(grep -c ' 1 503$' "$TMP/proxy.log") == "$n_shards" && $(grep -c ' 2 flip$' "$TMP/proxy.log") == "$n_shards" &&
       $(grep -c ' 3 pass$' "$TMP/proxy.log") == "$n_shards" ]]
tap_check $? "a flaky store (503 SlowDown, then a corrupted body, for each of the $n_shards shards): retried and fetched again, bit for bit (exit $rc)"
stop_proxy

# the ETag: each shard's first GET corrupted on the way (fetched again), its second with the right
# bytes but another ETag: the object changed between the two fetches, exit 2 naming it
start_proxy etag "$TMP/etag.log"
AWS_ENDPOINT_URL=http://127.0.0.1:$PPORT s3run 1 E
rc=$?
[[ $rc == 2 ]] && grep -q 'error: s3://tsr/ds/train/shard-[0-9]*.bin at .*: its ETag "0123456789abcdef0123456789abcdef" differs from "[0-9a-f]*" at its first fetch' "$TMP/E.txt" &&
    grep -q ' 2 etag$' "$TMP/etag.log" && [[ -z $(ls "$TMP"/stage-E/*/ 2>/dev/null | grep -E 'shard|tmp') ]]
tap_check $? "an object whose ETag changed between two fetches (same bytes): exit 2 naming it and both ETags, nothing committed (exit $rc)"
grep 'error' "$TMP/E.txt" | head -1 | sed 's/^/# /'
stop_proxy

# an object corrupted in the store (same size, one byte changed): fetched again, then exit 2
victim=$(obj ds/train/shard-00003.bin)
printf '\xff\xff' | dd of="$victim" bs=1 seek=100 conv=notrunc status=none
s3run 1 C
rc=$?
[[ $rc == 2 ]] && grep -q 'error: s3://tsr/ds/train/shard-00003.bin' "$TMP/C.txt" && grep -q 'CRC32C differs' "$TMP/C.txt" &&
    [[ -z $(ls "$TMP"/stage-C/*/ | grep -E 'shard-00003|tmp') ]]
tap_check $? "a corrupted object: exit 2 naming s3://tsr/ds/train/shard-00003.bin, nothing of it committed (exit $rc)"
grep 'error' "$TMP/C.txt" | head -1 | sed 's/^/# /'
TMPDIR=$TMP/tmpdir "$TOOL" verify-data s3://tsr/ds/train >"$TMP/vdC.txt" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q 'not a valid copy of s3://tsr/ds/train/shard-00003.bin' "$TMP/vdC.txt" &&
    grep -q 'payload checksum mismatch' "$TMP/vdC.txt" && [[ -z $(ls -A "$TMP/tmpdir") ]]
tap_check $? "tessera verify-data s3:// of the corrupted object: exit 2 naming it, TMPDIR left empty (exit $rc)"
tap_done
