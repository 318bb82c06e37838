#!/usr/bin/env bash
# prep_stream.sh — peak memory and time of `tessera prep` on one large text file (one document),
# this build against a peer build (the commit before issue 48 item 11, which held the whole file and
# all its tokens in memory), side by side in one run; checks that both write the same shard bytes.
# Results in docs/benchmarks.md ("tessera prep: one large text file").
#
#   bash bench/prep_stream.sh PEER_TESSERA [SIZES_MB...]     (default sizes: 80 320)
#
# PEER_TESSERA: the peer's build/tessera, e.g. built from the old commit:
#   git worktree add /tmp/peer ad3c44c && ln -s "$PWD/data" /tmp/peer/data && make -C /tmp/peer build/tessera
# Input: the 500 Brown files concatenated (10 MB), repeated to each size. Peak RSS from GNU time's
# %M (getrusage's ru_maxrss of the command), wall time of the whole command, 2 threads.
# Environment: BUILD=build, TSR_TESSERA (default $BUILD/tessera), TSR_DATA_DIR (default data/npm),
# BENCH_OUT=build/bench, BENCH_TOKENIZER (prep's --tokenizer; default GPT-2's; e.g.
# data/npm/chat/llama2 for a SentencePiece-style one, whose peer is the commit before 38eb6a8).
set -euo pipefail
source "$(dirname "$0")/tool_paths.sh"
PEER=${1:?usage: bench/prep_stream.sh PEER_TESSERA [SIZES_MB...]}
shift
SIZES=("${@:-80}")
(($# > 0)) || SIZES=(80 320)
OUT=$OUT/prep_stream
[[ -x /usr/bin/time ]] || { echo "needs GNU time (/usr/bin/time: apt-get install time)" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT"
cat "$NPM_DIR"/brown/c[a-r][0-9][0-9] >"$OUT/brown.txt"

printf '%-8s %8s %10s %12s %10s\n' build "file MB" "wall s" "peak RSS MB" "RSS/file"
for mb in "${SIZES[@]}"; do
    in=$OUT/in-$mb.txt
    while (($(stat -c %s "$in" 2>/dev/null || echo 0) < mb * 1000000)); do cat "$OUT/brown.txt" >>"$in"; done
    truncate -s $((mb * 1000000)) "$in"
    for b in peer this; do
        bin=$TESSERA
        [[ $b == peer ]] && bin=$PEER
        /usr/bin/time -f '%e %M' -o "$OUT/$b-$mb.time" "$bin" prep --quiet --threads 2 \
            ${BENCH_TOKENIZER:+--tokenizer "$BENCH_TOKENIZER"} --val-fraction 0 --out "$OUT/$b-$mb" "$in"
        read -r wall kib <"$OUT/$b-$mb.time"
        awk -v b="$b" -v mb="$mb" -v w="$wall" -v k="$kib" \
            'BEGIN { printf "%-8s %8d %10.2f %12.0f %10.2f\n", b, mb, w, k / 1024, k * 1024 / (mb * 1e6) }'
    done
    cmp "$OUT/peer-$mb/train/shard-00000.bin" "$OUT/this-$mb/train/shard-00000.bin" ||
        { echo "the two builds wrote different tokens for $mb MB" >&2; exit 1; }
    rm -rf "$in" "$OUT/peer-$mb" "$OUT/this-$mb"
done
echo "same shard bytes from both builds at every size"
