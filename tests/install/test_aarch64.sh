#!/usr/bin/env bash
# The aarch64 (Grace) CPU side, cross-built here with Debian's aarch64 toolchain and the arm64
# multiarch libraries of ./INSTALL, run under qemu-aarch64 (docs/site.md "aarch64"). CI runs the
# reduced part (from a clean checkout about a minute of 2 cores); TSR_AARCH64_FULL=1 runs all of it
# (about 15 min: the whole build, every unit test, every reference case).
#  - `make CROSS=aarch64-linux-gnu- NO_MPI=1 ARCH=neoverse-n1` builds into its own build directory,
#    aarch64 ELF linking the arm64 OpenBLAS and HDF5, the main build left as it was: CI builds what
#    the checks below run (the trainer, the tool, ref_dump, the unit tests of QUICK), in parallel;
#    the full run builds everything the CPU side has (the health checker and the bench too);
#    ARCH=native, an ARCH GCC refuses, and an SVE ARCH under GCC 12 are refused up front;
#  - under qemu: the unit tests of QUICK (the CRC32C instruction path, ARMv8 CRC, agrees with the
#    tables in test_data; the OpenBLAS core selection applies to x86 only in test_blas_env; the key
#    table, checkpoint metadata, the cost accounting), each passing every check; the full run: all
#    of them (ops, activation checkpointing, threads, tokenizer training take minutes under qemu);
#  - the reference test's CPU side: ref_dump and `tessera shard` under qemu against the float64
#    PyTorch model run here (gpt2; the full run: all eleven cases);
#  - a 1-rank training run of the tiny recipe (reduced to d_model 64, seq_len 32, vocabulary 512,
#    3 steps) whose every loss and gradient norm matches the x86-64 build's within 1e-5 relative,
#    and whose checkpoint the x86-64 build's `tessera ckpt verify` accepts.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
deps=$("$TSR_ROOT/INSTALL" --check 2>&1)
for d in "aarch64 gcc" qemu-aarch64 "arm64 OpenBLAS" "arm64 libconfig" "arm64 HDF5" "arm64 HDF5 dev"; do
    grep -q "✓ $d " <<<"$deps" || { echo "1..0 # SKIP $d missing: run ./INSTALL --ensure as root"; exit 77; }
done
[[ -x $TRAIN && -x $TOOL ]] || { echo "1..0 # SKIP the x86-64 build is missing (make first)"; exit 77; }
FULL=${TSR_AARCH64_FULL:-0}
# CI's unit tests under qemu: the ones with code of their own for aarch64 (test_data's CRC32C,
# test_blas_env's core selection) and three quick ones of the formats a node shares with x86
# (the key table, checkpoint metadata, the cost records); TSR_AARCH64_FULL=1 runs them all
QUICK=(test_data test_blas_env test_config test_ckpt_meta test_account)
XB=${TSR_AARCH64_BUILD:-$TSR_ROOT/build-aarch64}
xmake() { make --no-print-directory -C "$TSR_ROOT" CROSS=aarch64-linux-gnu- NO_MPI=1 BUILD="$XB" "$@"; }
units=("${QUICK[@]}") targets=("$XB/tessera-train" "$XB/tessera" "$XB/tests/ref_dump") progs=(tessera-train tessera tests/ref_dump)
if [[ $FULL == 1 ]]; then
    units=()
    for f in "$TSR_ROOT"/tests/unit/test_*.c; do units+=("$(basename "$f" .c)"); done
    targets=(all) progs+=(tessera-healthcheck)
else
    for u in "${units[@]}"; do targets+=("$XB/tests/$u"); done
fi
tap_plan $((7 + ${#units[@]}))

main_before=$(sha256sum "$TRAIN" "$TOOL")
xmake -j"$(nproc)" ARCH=neoverse-n1 "${targets[@]}" >"$TMP/make.txt" 2>&1
rc=$?
((rc == 0)) || tail -20 "$TMP/make.txt" | sed 's/^/# /'
tap_check $rc "make CROSS=aarch64-linux-gnu- NO_MPI=1 ARCH=neoverse-n1 builds $([[ $FULL == 1 ]] && echo "the CPU side" || echo "the trainer, the tool, ref_dump and ${#units[@]} unit tests") into $(basename "$XB")/"
elf=$(for p in "${progs[@]}"; do
          LC_ALL=C readelf -h "$XB/$p" 2>/dev/null | grep Machine:; done | sort -u)
needed=$(LC_ALL=C readelf -d "$XB/tessera-train" 2>/dev/null | grep NEEDED)
[[ $elf == *AArch64 && $(wc -l <<<"$elf") == 1 ]] && grep -q libopenblas <<<"$needed" &&
    grep -q libhdf5_serial <<<"$needed" && ! grep -q libmpi <<<"$needed" &&
    [[ $(sha256sum "$TRAIN" "$TOOL") == "$main_before" && ! -e $XB/tests/test_gpu_ops ]]
tap_check $? "aarch64 ELF (${elf##* }) linking OpenBLAS and serial HDF5, no MPI, no CUDA; the main build unchanged"
refused=0
for a in native cortex-q99 neoverse-n2; do
    xmake ARCH=$a "$XB/tessera" >"$TMP/arch-$a.txt" 2>&1 && refused=1
done
grep -q "ARCH=native in a cross build" "$TMP/arch-native.txt" && grep -q "refuses -mcpu=cortex-q99" "$TMP/arch-cortex-q99.txt" &&
    grep -q "internal compiler error.*+nosve" "$TMP/arch-neoverse-n2.txt" && ((refused == 0))
tap_check $? "ARCH=native, an unknown core and an SVE core under GCC 12 are refused, each saying why"

# ---- the unit tests under qemu ----
qemu=(qemu-aarch64)
for u in "${units[@]}"; do
    (cd "$TSR_ROOT" && timeout 900 "${qemu[@]}" "$XB/tests/$u") >"$TMP/$u.txt" 2>&1
    rc=$?
    plan=$(grep -oE '^1\.\.[0-9]+' "$TMP/$u.txt" | head -1 | cut -d. -f3)
    n_ok=$(grep -cE '^ok ' "$TMP/$u.txt") n_bad=$(grep -cE '^not ok ' "$TMP/$u.txt")
    ((rc == 0 && n_bad == 0)) && [[ -n $plan && $n_ok == "$plan" ]]
    tap_check $? "qemu: $u passes ($n_ok of ${plan:-?} checks, exit $rc)"
    ((rc == 0 && n_bad == 0)) || grep -E '^not ok' "$TMP/$u.txt" | head -5 | sed 's/^/# /'
done

# ---- the reference test's CPU side ----
cases=gpt2
[[ $FULL == 1 ]] && cases=
TSR_RUN_WRAPPER=qemu-aarch64 BUILD=$XB TSR_REF_CASES=$cases "$PY3" "$TSR_ROOT/tests/reference/test_reference.py" \
    >"$TMP/ref.txt" 2>&1
rc=$?
((rc == 0)) || grep -E '^not ok|SKIP' "$TMP/ref.txt" | head -5 | sed 's/^/# /'
tap_check $rc "reference test, ref_dump under qemu against float64 PyTorch (${cases:-all cases}): $(grep -cE '^ok ' "$TMP/ref.txt") checks pass"

# ---- the tiny recipe: aarch64 under qemu against x86-64, one rank ----
make_synth "$TMP/data" 512 50000
tiny_args "$TMP/data/train"
args+=(--set model.n_head=4 --set global_batch=4 --set micro_batch=2 --set max_duration=3ba --set save_interval=3ba)
"$TRAIN" "${args[@]}" --set run_dir="$TMP/x86" >"$TMP/x86.txt" 2>&1
rc_x=$?
(cd "$TMP" && "${qemu[@]}" "$XB/tessera-train" "${args[@]}" --set run_dir="$TMP/arm") >"$TMP/arm.txt" 2>&1
rc_a=$?
tap_check $((rc_x + rc_a)) "the tiny recipe trains 3 steps on one rank: x86-64 (exit $rc_x) and aarch64 under qemu (exit $rc_a)"
out=$(metrics_close "$TMP/x86/metrics.jsonl" "$TMP/arm/metrics.jsonl" 1 1e-5 1e-5)
tap_check $? "aarch64's loss and gradient norm match x86-64's at every step within 1e-5 relative ($out)"
"$TOOL" ckpt verify "$(ck "$TMP/arm" 3)" >"$TMP/verify.txt" 2>&1
tap_check $? "the x86-64 build's tessera ckpt verify accepts the checkpoint written on aarch64"
tap_done
