# shellcheck shell=bash
# tool_paths.sh — sourced by the benchmarks that time the tessera tool against the reference files
# ./INSTALL fetches (hf_bpe_long.sh, prep_stream.sh, tokenizer_encode.sh): ROOT (this checkout),
# BUILD (default build; relative to ROOT), TESSERA (TSR_TESSERA, default $BUILD/tessera), NPM_DIR
# (TSR_DATA_DIR, default data/npm) and OUT (BENCH_OUT, default $BUILD/bench).
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
[[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
TESSERA=${TSR_TESSERA:-$BUILD/tessera}
NPM_DIR=${TSR_DATA_DIR:-$ROOT/data/npm}
OUT=${BENCH_OUT:-$BUILD/bench}
