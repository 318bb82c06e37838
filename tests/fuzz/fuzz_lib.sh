# fuzz_lib.sh — what test_fuzz_build.sh and test_fuzz_regress.sh share (source after tests/lib.sh
# and tsr_tmpdir): the clang probe and the harnesses' build.

# fuzz_probe: exits 77 (a skip, saying why) where clang cannot link a libFuzzer + ASan + UBSan
# program (FUZZ_CC, default clang)
fuzz_probe() {
    printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' > "$TMP/probe.c"
    if ! command -v "${FUZZ_CC:-clang}" >/dev/null 2>&1; then
        echo "SKIP: ${FUZZ_CC:-clang} not found: the fuzz harnesses need clang with libFuzzer (Debian: clang libclang-rt-dev; ./INSTALL as root installs them)"; exit 77
    fi
    if ! "${FUZZ_CC:-clang}" -fsanitize=fuzzer,address,undefined "$TMP/probe.c" -o "$TMP/probe" >"$TMP/probe.txt" 2>&1; then
        echo "SKIP: ${FUZZ_CC:-clang} cannot link a libFuzzer program ($(head -1 "$TMP/probe.txt")): install libclang-rt-dev (./INSTALL as root)"; exit 77
    fi
}

# fuzz_build: make fuzz-build (clang, ASan + UBSan, the NO_MPI variant with serial HDF5) into
# $BUILD/fuzz, one make at a time (flock on $BUILD/fuzz.lock: test_fuzz_build.sh may still be
# building when test_fuzz_regress.sh starts; the second make then finds them built); bails out
# of the test when it fails
fuzz_build() {
    local start=$SECONDS
    mkdir -p "$BUILD"
    if ! flock "$BUILD/fuzz.lock" nice -n 10 make -C "$TSR_ROOT" --no-print-directory -j2 \
        BUILD="$BUILD" fuzz-build >"$TMP/make.txt" 2>&1; then
        tail -20 "$TMP/make.txt" | sed 's/^/# /'
        echo "Bail out! make fuzz-build failed"; exit 1
    fi
    tap_diag "make fuzz-build: $((SECONDS - start)) s"
}
