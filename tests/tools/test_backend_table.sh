#!/usr/bin/env bash
# The backends' tables checked at compile time (kernels/backend.h TSR_BACKEND_DEFINE, docs/decoder.md
# "The interface"): the real fp32 and CUDA tables compile; copies of them with an entry left out,
# an entry named twice or a name that is no entry do not, nor do both when backend.h gains an
# entry no table names, or a data field among the entries. Compiles only (-fsyntax-only): no
# build, no GPU.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 14

cd "$TSR_ROOT" || exit 1
CC=${CC:-cc}
CFLAGS=(-std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -fsyntax-only)
INC=(-Isrc -Isrc/base -Icheckpoint -Ikernels -Ikernels/cuda -Ikernels/cpu -Isrc/gpu)
# the MPI and HDF5 headers the model's headers may reach, as the Makefile finds them
read -ra DEP <<<"$(pkg-config --cflags ompi-c hdf5-openmpi 2>/dev/null)"
FP32=kernels/cpu/cpu_backend.c
CUDA=src/gpu/gpu_backend.c

# compile FILE [INCLUDE_FIRST]: sets out and rc (INCLUDE_FIRST: a folder searched before the tree's)
compile() {
    local first=()
    [[ -n ${2:-} ]] && first=(-I"$2")
    out=$("$CC" "${CFLAGS[@]}" "${first[@]}" "${INC[@]}" "${DEP[@]}" "$1" 2>&1)
    rc=$?
}
# refused WHAT PATTERN: the last compile failed, saying PATTERN
refused() {
    tap_check $((rc == 0)) "$1: does not compile"
    grep -q -- "$2" <<<"$out"
    tap_check $? "$1: the compiler says: $2"
    [[ $rc != 0 ]] && grep -q -- "$2" <<<"$out" || tap_diag "$(head -5 <<<"$out")"
}

for f in "$FP32" "$CUDA"; do
    compile "$f"
    tap_check $rc "$f: its table names every entry once and compiles"
    ((rc)) && tap_diag "$(head -5 <<<"$out")"
done

# an entry left out of the fp32 table (gelu_backward's line)
sed '/^    E(gelu_backward, /d' "$FP32" >"$TMP/left_out.c"
compile "$TMP/left_out.c"
refused "the fp32 table without gelu_backward" "does not name every entry"

# an entry named twice in the CUDA table (argmax's line again, where gelu_backward's is)
sed 's/^    E(gelu_backward, c_gelu_backward) *\\$/    E(argmax, c_argmax) \\/' "$CUDA" >"$TMP/twice.c"
compile "$TMP/twice.c"
refused "the CUDA table naming argmax twice" "tsr_backend_named_argmax"

# a name that is no entry
sed 's/^    E(gelu_backward, f_gelu_backward)/    E(gelu_backwards, f_gelu_backward)/' "$FP32" >"$TMP/no_entry.c"
compile "$TMP/no_entry.c"
refused "the fp32 table naming gelu_backwards" "no member named"

# backend.h with an entry no table names: both tables refused
mkdir -p "$TMP/added" "$TMP/field"
sed 's|^    void (\*argmax)(const tsr_backend \*be, int32_t \*idx, const void \*logits, int N, int V, int Vp);|&\n    void (*new_entry)(const tsr_backend *be);|' \
    kernels/backend.h >"$TMP/added/backend.h"
grep -q new_entry "$TMP/added/backend.h" || tap_diag "the test's edit of backend.h did not apply"
compile "$FP32" "$TMP/added"
refused "the fp32 table after backend.h gains an entry" "does not name every entry"
compile "$CUDA" "$TMP/added"
refused "the CUDA table after backend.h gains an entry" "does not name every entry"

# a data field among the entries
sed 's|^    void (\*free)(const tsr_backend \*be, void \*p);|&\n    int data_field;|' kernels/backend.h \
    >"$TMP/field/backend.h"
grep -q data_field "$TMP/field/backend.h" || tap_diag "the test's edit of backend.h did not apply"
compile "$FP32" "$TMP/field"
refused "a data field after try_alloc" "does not name every entry"
tap_done
