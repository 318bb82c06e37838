#!/usr/bin/env bash
# bench/demo_sample.sh — the measure tests/cli/test_demo.sh judges the demo's sample by
# (tools/sample_measure.awk: word pairs in Brown, distinct words, the most frequent word), over many
# seeds of the sample, or over Brown's own text (docs/decisions.md "The demo's recipe"):
#   bash bench/demo_sample.sh RUN_DIR FIRST_SEED N [--set KEY=VALUE ...]
#       RUN_DIR: a finished demo run (make demo DEMO_RUN_DIR=RUN_DIR). For each seed S of
#       FIRST_SEED..FIRST_SEED+N-1 a copy of it is resumed by build/tessera-train --set seed=S (one
#       thread, and the --set given, e.g. --set sample.top_k=200 --set sample.temperature=1.0): it
#       trains no step and prints its end-of-run sample, from the run's weights, seeded by S.
#   bash bench/demo_sample.sh --brown N
#       N stretches of 1,050 bytes (about the demo's 256 tokens) at random places (awk's srand(1))
#       of data/brown-text's documents, one after another.
# Prints one line per sample (WORDS PAIRS HITS DISTINCT TOP TOP_N, then its failed checks), then how
# many pass each check and all three, with the means. Runs in the checkout it is in, after make demo.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BROWN=$ROOT/data/brown-text
TMP=$(mktemp -d /tmp/demo_sample.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
die() { echo "demo_sample.sh: $*" >&2; exit 2; }
[[ -f $BROWN/.complete ]] || die "$BROWN: missing (make data/brown-text/.complete, or make demo)"

# seeds RUN_DIR FIRST N [--set ...]: the samples, $TMP/sample-K.txt for K = 1..N
seeds() {
    local run=$1 first=$2 n=$3 k
    shift 3
    [[ -f $run/config.cfg && -f $run/latest ]] || die "$run: not a finished run (no config.cfg, latest)"
    cp -r "$run" "$TMP/run"
    cd "$ROOT" # (the recipe's data paths are relative to the checkout)
    for ((k = 1; k <= n; k++)); do
        build/tessera-train --config "$TMP/run/config.cfg" --set run_dir="$TMP/run" \
            --set seed=$((first + k - 1)) --set threads=1 --set data.verify=false "$@" \
            >"$TMP/log" 2>&1 || die "seed $((first + k - 1)): tessera-train: $(tail -1 "$TMP/log")"
        sed -n '/^sample (/,/^cost: /{/^sample (/d;/^cost: /d;p;}' "$TMP/log" |
            sed 's/<|endoftext|>/\n/g' >"$TMP/sample-$k.txt"
    done
}

# brown N: N stretches of Brown, $TMP/sample-K.txt
brown() {
    cat "$BROWN"/*.txt >"$TMP/brown.txt"
    awk -v n="$1" -v size="$(stat -c %s "$TMP/brown.txt")" \
        'BEGIN { srand(1); for (k = 1; k <= n; k++) print k, int(rand() * (size - 1050)) }' |
        while read -r k at; do
            dd if="$TMP/brown.txt" of="$TMP/sample-$k.txt" bs=1050 count=1 skip="$at" iflag=skip_bytes status=none
        done
}

if [[ ${1:-} == --brown ]]; then
    [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--brown N: N, a count, expected"
    n=$2 what="stretches of Brown"
    brown "$n"
else
    if (($# < 3)) || ! [[ $2 =~ ^[0-9]+$ && $3 =~ ^[1-9][0-9]*$ ]]; then
        die "usage: bench/demo_sample.sh RUN_DIR FIRST_SEED N [--set KEY=VALUE ...] | --brown N"
    fi
    n=$3 what="seeds $2..$(($2 + $3 - 1)) of the sample${4:+ (${*:4})}"
    seeds "$@"
fi
files=()
for ((k = 1; k <= n; k++)); do files+=("$TMP/sample-$k.txt"); done
awk -v samples="$n" -f "$ROOT/tools/sample_measure.awk" "${files[@]}" "$BROWN"/*.txt |
    awk -v what="$what" '
    { w = $1; ok_p = w >= 20 && $3 * 2 >= $2; ok_d = w >= 20 && $4 * 10 >= w * 4; ok_t = w >= 20 && $6 * 10 <= w
      printf "%s%s%s%s\n", $0, ok_p ? "" : "  fails pairs", ok_d ? "" : "  fails distinct", ok_t ? "" : "  fails top word"
      n++; P += ok_p; D += ok_d; T += ok_t; A += ok_p && ok_d && ok_t
      if (w > 1) { mp += $3 / $2; md += $4 / w; mt += $6 / w; nw++ } }
    END { printf "%s: %d of %d pass all three; pairs in Brown %d, distinct %d, top word %d", what, A, n, P, D, T
          if (nw) printf " (means %.3f, %.3f, %.3f)", mp / nw, md / nw, mt / nw
          printf "\n" }'
