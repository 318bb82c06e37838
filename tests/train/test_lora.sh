#!/usr/bin/env bash
# LoRA through the real trainer on MPI ranks (docs/lora.md; issue 27): a tiny Llama-style base is
# trained first, then adapters on every target (q, k, v, o, gate, up, down) with lora.dropout 0.1:
#  - ddp on 1 and 2 ranks, zero3 on 2 and 4 ranks, hsdp (2 groups of 2), zero1 on 4 ranks with
#    block activation checkpointing: every step's loss and gradient norm equal 1 rank's within
#    1e-6 (the dropout masks follow the global row, not the rank);
#  - the checkpoint holds the adapters and their moments, no base tensor; the run's config names
#    the base and its checksum;
#  - rank 1 SIGKILLed after step 6 (zero3, 2 ranks): the rerun resumes from step 4 and every
#    later loss, lr and grad norm, and the final adapters, equal the uninterrupted run bit for bit;
#  - the base's weights are untouched: an evaluation of the base alone gives its old loss;
#  - a resume over another base (same shapes, other weights) stops with exit 2 naming both
#    checksums and writes nothing; so does a lora.base_checksum that does not match;
#  - refused with exit 1 naming the key: an unknown target, gate on a GELU MLP, dpo with
#    device = cuda (LoRA on the GPU itself: tests/gpu/test_cuda_lora.sh);
#  - --plan prints the adapters and the memory saved against full finetuning;
#  - the trainer's evaluation runs with the adapters (its loss is not the base's, which `tessera
#    eval` gives on the same samples), and `tessera eval` of the LoRA checkpoint (base read from
#    lora.base, adapters merged in) gives the trainer's loss within 1e-5; `tessera generate` runs
#    from it;
#  - the base is recorded absolute, relative to the run directory and by checksum: a copy of the
#    tree (base + LoRA run) elsewhere finds its base by the relative path when the absolute one is
#    gone; a base at neither is exit 2 saying it is the LoRA base, where it was looked for and
#    --set lora.base=PATH, which then loads it.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 13
make_synth "$TMP/data"
tiny_llama_args "$TMP/data/train"
args+=(--set model.n_head=4 --set model.n_kv_head=2 --set max_duration=12ba --set save_interval=4ba
       --set keep_last=3)
lora=(--set lora.rank=4 --set lora.alpha=8 --set lora.dropout=0.1 --set optim.lr=1e-2)
train() { local dir=$1 np=$2; shift 2; ranks "$np" "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
run() { local dir=$1 np=$2; shift 2; train "$dir" "$np" "${lora[@]}" --init-from "$TMP/base" "$@"; }
close() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" 1 1e-6 1e-6; }

train base 1 && train base2 1 --set seed=7
tap_check $? "two base models trained (seeds 1234 and 7)"

run A 1 && run D2 2 && run Z2 2 --set parallel.sharding=zero3 &&
    run Z4 4 --set parallel.sharding=zero3 &&
    run H4 4 --set parallel.sharding=hsdp --set parallel.replica_group=2 &&
    run Q4 4 --set parallel.sharding=zero1 --set model.activation_checkpointing=block
rc=$?
ok=$rc
for d in D2 Z2 Z4 H4 Q4; do
    tap_diag "$d vs 1 rank: $(close A "$d")"
    close A "$d" >/dev/null || ok=1
done
tap_check $ok "LoRA with dropout: ddp 2 ranks, zero3 2 and 4, hsdp 2x2, zero1 4 + block checkpointing equal 1 rank within 1e-6 (runs exit $rc)"

/usr/bin/python3 - "$TMP/A/step-00000012.h5" "$TMP/A/config.cfg" "$TMP/base/step-00000012.h5" <<'PY'
import sys, h5py, re
f = h5py.File(sys.argv[1], "r")
names = []
f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
want = {f"{p}lora/{t}_{ab}" for p in ("", "optim/m/", "optim/v/")
        for t in ("q", "k", "v", "o", "gate", "up", "down") for ab in "AB"}
cfg = open(sys.argv[2]).read()
base = re.search(r'base = "([^"]*)"', cfg)
crc = re.search(r'base_checksum = "(crc32c:[0-9a-f]{8})"', cfg)
print("# datasets:", len(names), "base:", base and base.group(1), "checksum:", crc and crc.group(1))
sys.exit(0 if set(names) == want and base and base.group(1) == sys.argv[3] and crc else 1)
PY
tap_check $? "the checkpoint holds the 14 adapters and their moments only (no base tensor); config.cfg names the base (the file its run dir named) and its crc32c"

killed_resumes B --set parallel.sharding=zero3 &&
    cmp -s <(final_lines "$TMP/Z2/metrics.jsonl") <(final_lines "$TMP/B/metrics.jsonl") &&
    same_tensors "$TMP/Z2/step-00000012.h5" "$TMP/B/step-00000012.h5"
tap_check $? "rank 1 SIGKILLed after step 6 (exit $rc): the rerun resumes from step 4 (exit $rc2); every later loss, lr, norm and the final adapters equal the uninterrupted run bit for bit"

# the base checkpoint is read, never written: its step-12 file is the same bytes
sum0=$(sha256sum <"$TMP/base/step-00000012.h5")
"$TOOL" ckpt verify "$TMP/base/step-00000012.h5" >/dev/null 2>&1
[[ $? == 0 && $sum0 == $(sha256sum <"$TMP/base/step-00000012.h5") ]] &&
    ! grep -q '"save".*base' "$TMP/A/metrics.jsonl"
tap_check $? "the base checkpoint is read and verifies unchanged"

before=$(ls -l --time-style=full-iso "$TMP/A")
train A 1 "${lora[@]}" --init-from "$TMP/base2"
rc=$?
[[ $rc == 2 ]] && grep -q "crc32c:[0-9a-f]\{8\}, but the adapters belong to a base with crc32c:" "$TMP/A.txt" &&
    [[ $before == $(ls -l --time-style=full-iso "$TMP/A") ]]
tap_check $? "a resume over another base stops (exit $rc) naming both checksums; the run dir is unchanged"

run C 1 --set lora.base_checksum=crc32c:00000000
rc=$?
[[ $rc == 2 ]] && grep -q "lora.base_checksum in the config" "$TMP/C.txt" && [[ ! -e $TMP/C ]]
tap_check $? "a lora.base_checksum that does not match the base stops the start (exit $rc), nothing written"

run E 1 --set lora.targets=q,x
rc1=$?
grep -q 'lora.targets = "q,x": "x" is not a target' "$TMP/E.txt"
m1=$?
train E 1 --config "$TSR_ROOT/configs/tiny.cfg" --set lora.rank=4 --set lora.targets=q,gate
rc2=$?
grep -q "gate and up need model.mlp" "$TMP/E.txt"
m2=$?
run E 1 --set parallel.expert=2 --set model.moe_experts=4
rc3=$?
[[ $(grep -c 'lora.rank = 4: LoRA with expert parallelism is not supported yet; set parallel.expert = 1' "$TMP/E.txt") == 1 ]]
[[ $rc1 == 1 && $m1 == 0 && $rc2 == 1 && $m2 == 0 && $rc3 == 1 && $? == 0 && ! -e $TMP/E ]]
tap_check $? "refused with exit 1 naming the key: an unknown target ($rc1), gate on a GELU MLP ($rc2), LoRA with parallel.expert = 2 ($rc3, said once); nothing written"

"$TRAIN" "${args[@]}" "${lora[@]}" --set run_dir="$TMP/P" --set parallel.sharding=zero3 --plan 4 >"$TMP/P.txt" 2>&1
rc=$?
grep "^lora:" "$TMP/P.txt" | sed 's/^/# /'
[[ $rc == 0 ]] && grep -q "^lora: r=4 alpha=8 dropout=0.1 targets=q,k,v,o,gate,up,down; 7424 adapter parameters .* less than full finetuning" "$TMP/P.txt" &&
    grep -q "grads 29.0 KiB, AdamW 58.0 KiB (ZeRO-3: the frozen base sharded over 4 ranks)" "$TMP/P.txt" && [[ ! -e $TMP/P ]]
tap_check $? "--plan 4 with zero3: the adapters (7424 parameters), their gradients and AdamW state only (the base sharded), the memory saved"

# the default targets, all-linear, are what the model has: a GELU MLP (GPT-2) takes down only
"$TRAIN" --config "$TSR_ROOT/configs/tiny.cfg" --set data.train="$TMP/data/train" --set data.val= \
    --set data.tokenizer= --set eval_interval=0ba --set lora.rank=4 --set run_dir="$TMP/PG" --plan 1 >"$TMP/PG.txt" 2>&1
rc=$?
grep "^lora:" "$TMP/PG.txt" | sed 's/^/# /'
[[ $rc == 0 ]] && grep -q "^lora: r=4 alpha=16 dropout=0 targets=q,k,v,o,down; " "$TMP/PG.txt" && [[ ! -e $TMP/PG ]]
tap_check $? "lora.targets = all-linear (the default) on a GELU model: q, k, v, o and down (exit $rc)"

# the trained adapters change the model: evaluation through the trainer's eval on the same data
run V 1 --set data.val="$TMP/data/train" --set eval_interval=12ba --set eval_samples=16 --set max_duration=12ba
vl=$(grep -o '"val_loss": [0-9.]*' "$TMP/V/metrics.jsonl" | tail -1 | awk '{print $2}')
"$TOOL" eval --ckpt "$TMP/base" --val "$TMP/data/train" -s eval_samples=16 -o "$TMP/W.json" >"$TMP/W.txt" 2>&1
wl=$(grep -o '"loss": [0-9.]*' "$TMP/W.json" | head -1 | awk '{print $2}')
tap_diag "validation loss: with adapters $vl, the base alone $wl"
[[ -n $vl && -n $wl ]] && /usr/bin/python3 -c "import sys; sys.exit(0 if abs($vl - $wl) > 1e-4 else 1)"
tap_check $? "evaluation runs with the adapters applied (its loss differs from the base's)"

"$TOOL" eval --ckpt "$TMP/V" --val "$TMP/data/train" -s eval_samples=16 -o "$TMP/V.json" >"$TMP/Veval.txt" 2>&1
rc=$?
# the checkpoints of zero3 and hsdp runs (their base checksum combined over 4 ranks' parts) load in
# the tools, which check it as one CRC over the whole base
"$TOOL" eval --ckpt "$TMP/Z4" --val "$TMP/data/train" -s eval_samples=8 >>"$TMP/Veval.txt" 2>&1 &&
    "$TOOL" eval --ckpt "$TMP/H4" --val "$TMP/data/train" -s eval_samples=8 >>"$TMP/Veval.txt" 2>&1 || rc=1
ml=$(grep -o '"loss": [0-9.]*' "$TMP/V.json" 2>/dev/null | head -1 | awk '{print $2}')
"$TOOL" generate --ckpt "$TMP/V" --prompt-ids "1 2 3" --max-tokens 8 --seed 1 >"$TMP/gen.txt" 2>&1
rcg=$?
tap_diag "tessera eval of the LoRA checkpoint (merged): $ml; the trainer's (adapters beside the base): $vl; generate exit $rcg"
[[ $rc == 0 && $rcg == 0 && -n $ml ]] && /usr/bin/python3 -c "import sys; sys.exit(0 if abs($ml - $vl) <= 1e-5 * abs($vl) else 1)"
tap_check $? "tessera eval of the LoRA checkpoint (base from lora.base, adapters merged) equals the trainer's evaluation within 1e-5; the zero3 and hsdp runs' checkpoints load too (their base checksum is the tools'); generate runs from it"
# where the base is (docs/lora.md "Where the base is"): V's config records it three ways; a copy of
# the tree elsewhere finds it relative to its run directory once the original is gone
grep -q "base_relative = \"../base/step-00000012.h5\"" "$TMP/V/config.cfg"
rcr=$?
mkdir "$TMP/moved" && cp -r "$TMP/base" "$TMP/V" "$TMP/moved/" && mv "$TMP/base" "$TMP/base.away"
"$TOOL" eval --ckpt "$TMP/moved/V" --val "$TMP/data/train" -s eval_samples=16 -o "$TMP/M.json" >"$TMP/M.txt" 2>&1
rcm=$?
"$TOOL" eval --ckpt "$TMP/V" --val "$TMP/data/train" -s eval_samples=16 >/dev/null 2>"$TMP/gone.err"
rcg=$?
"$TOOL" eval --ckpt "$TMP/V" --val "$TMP/data/train" -s eval_samples=16 -s lora.base="$TMP/base.away/step-00000012.h5" \
    -o "$TMP/S.json" >"$TMP/S.txt" 2>&1
rcs=$?
mv "$TMP/base.away" "$TMP/base"
sed 's/^/# /' "$TMP/gone.err"
moved=$(grep -o '"loss": [0-9.]*' "$TMP/M.json" 2>/dev/null | head -1 | awk '{print $2}')
given=$(grep -o '"loss": [0-9.]*' "$TMP/S.json" 2>/dev/null | head -1 | awk '{print $2}')
tap_diag "base_relative recorded: $rcr; moved tree: exit $rcm loss $moved; base gone: exit $rcg; --set lora.base: exit $rcs loss $given; in place: $ml"
[[ $rcr == 0 && $rcm == 0 && $rcg == 2 && $rcs == 0 && -n $moved && $moved == "$ml" && $given == "$ml" ]] &&
    grep -q "the LoRA base model (lora.base) is not found: looked for $TMP/base/step-00000012.h5 and $TMP/V/../base/step-00000012.h5" "$TMP/gone.err" &&
    grep -q -- "--set lora.base=PATH" "$TMP/gone.err"
tap_check $? "the base is recorded absolute and relative to the run directory: a moved tree finds it (same loss), a missing base is exit 2 naming lora.base, both places and --set lora.base=PATH, which loads it"
tap_done
