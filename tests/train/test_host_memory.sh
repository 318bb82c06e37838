#!/usr/bin/env bash
# The trainer's host memory at start (src/train/trainer_init.c host_memory_warn; kernels/cpu/cpu_ops.c):
# blocks of 64 MiB and more are mapped untouched, so their pages are committed when first written.
# Each node's first rank warns at start when what is still untouched, times the node's ranks, is
# more than /proc/meminfo's MemAvailable (test hook: TSR_FAULT="mem_available:KIB"):
#  - a model whose weight store is 84 MB (vocabulary 32768 x d_model 640) on a node "with 1 MiB
#    available": the warning names the ranks, the bytes, MemAvailable and what to do; the run
#    still trains (a warning, not a refusal);
#  - the same model with this machine's real MemAvailable (GiBs): no warning;
#  - a tiny model's 8 MB store (heap blocks, written at start) with 1 KiB "available": no warning.
# (The mapped blocks themselves and the weights' independence of threads: tests/unit/test_init_threads.c.)
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 3
make_synth "$TMP/data" 32768 20000
big=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.vocab_size=32768 --set model.d_model=640
     --set model.n_head=4 --set model.n_layer=1 --set seq_len=16 --set global_batch=1
     --set micro_batch=1 --set max_duration=1ba --set data.train="$TMP/data/train" --set data.val=
     --set data.tokenizer= --set sample.tokens=0 --set eval_interval=0ba --set save_interval=0ba
     --set threads=1)

TSR_FAULT=mem_available:1024 "$TRAIN" "${big[@]}" --set run_dir="$TMP/low" >"$TMP/low.txt" 2>&1
rc=$?
((rc == 0)) && grep -qE "host memory: this node's 1 rank\(s\) will commit 0\.[0-9]+ GiB more when they first write their host buffers \(the gradients and AdamW state, at the first step\), more than the 0\.00 GiB the node has available \(/proc/meminfo MemAvailable\)" "$TMP/low.txt" &&
    grep -q 'fewer ranks per node, parallel.sharding = "zero3", or nodes with more memory' "$TMP/low.txt" &&
    grep -q '^step 1/1 ' "$TMP/low.txt"
tap_check $? "84 MB blocks on a node with 1 MiB available: warned at start naming ranks, bytes and MemAvailable; the run trains (exit $rc)"

"$TRAIN" "${big[@]}" --set run_dir="$TMP/ok" >"$TMP/ok.txt" 2>&1 && ! grep -q 'host memory:' "$TMP/ok.txt"
tap_check $? "the same run with this machine's MemAvailable ($(awk '/^MemAvailable/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)): no warning"

tiny_args "$TMP/data/train"
TSR_FAULT=mem_available:1 "$TRAIN" "${args[@]}" --set model.vocab_size=32768 --set model.n_head=4 --set max_duration=1ba \
    --set run_dir="$TMP/tiny" >"$TMP/tiny.txt" 2>&1 && ! grep -q 'host memory:' "$TMP/tiny.txt"
tap_check $? "a tiny model (heap blocks, written at start) with 1 KiB available: no warning"

tap_done
