#!/usr/bin/env bash
# An untrusted object store (docs/object-storage.md "Faults"), against a private s3rver behind
# tests/s3/flaky_proxy.py (tests/s3/s3lib.sh), each fault through `tessera verify-data`, whose
# fetches are the stager's (s3_get_files) and whose index GET is the trainer's (s3_get):
#  - a store that trickles (2 bytes every 0.9 s): a shard's ranged GET and the index's GET (size
#    unknown until its Content-Length) time out at their deadlines (TSR_S3_GRACE_S + bytes /
#    TSR_S3_MIN_RATE), are retried, then fail naming the object, its size, the deadline and the
#    rate, instead of hanging (the old limit, under 1 byte/s for 60 s, never tripped);
#  - sizes from the server: a ranged GET answered with Content-Length 10^15, or with a chunked body
#    that goes on past the range, and an index answered with Content-Length 10^15, stopped at the
#    bound, not fetched again, exit 2 saying so (no 256 MiB temporary file, no retry); an index
#    of 256 MiB + 1 on the store itself refused at its Content-Length;
#  - plain http to a host other than this one: said once per command, not for the loopback;
#  - bad TSR_S3_MIN_RATE / TSR_S3_GRACE_S: exit 1 before any request.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
source "$TSR_ROOT/tests/s3/s3lib.sh"
tap_plan 9
s3rver_up

"$TOOL" synth --out "$TMP/data" --vocab 512 --tokens 20000 --shard-tokens 3300 --seed 1 >/dev/null &&
    "$TOOL" data push "$TMP/data/train" s3://tsr/ds >/dev/null || { echo "Bail out! push failed"; exit 1; }
mkdir -p "$TMP/tmpdir"
shard_bytes=$(stat -c %s "$TMP/data/train/shard-00000.bin")
index_bytes=$(stat -c %s "$TMP/data/train/index.tsv")
# vd NAME [VAR=VALUE...]: verify-data s3://tsr/ds through the proxy (stopped after 60 s: a hang
# fails the check, it does not stall the suite), output in $TMP/NAME.txt, rc in $rc. (The proxy's
# own settings, PROXY_KEYS and PROXY_CHUNKED, go to start_proxy.)
vd() {
    local name=$1
    shift
    env AWS_ENDPOINT_URL="http://127.0.0.1:$PPORT" TMPDIR="$TMP/tmpdir" "$@" \
        timeout 60 "$TOOL" verify-data s3://tsr/ds >"$TMP/$name.txt" 2>&1
    rc=$?
}
first_error() { grep error "$TMP/$1.txt" | head -1 | cut -c1-330 | sed 's/^/# /'; }

# ---- a store that trickles ----
PROXY_KEYS=.bin start_proxy trickle "$TMP/trickle.log"
vd TS TSR_S3_MIN_RATE=64K TSR_S3_GRACE_S=1 TSR_S3_RETRIES=2
[[ $rc == 2 && -z $(ls -A "$TMP/tmpdir") ]] &&
    grep -q "error: GET s3://tsr/ds/shard-0000[0-9].bin at .*: timed out: [0-9]* bytes of $shard_bytes bytes moved in [0-9.]* s, past its deadline of 1.1 s (TSR_S3_GRACE_S 1 s + $shard_bytes bytes at TSR_S3_MIN_RATE 65536 bytes/s); 2 tries (TSR_S3_RETRIES)" "$TMP/TS.txt"
tap_check $? "a shard's GET trickled (2 bytes / 0.9 s): timed out at its deadline (1 s + $shard_bytes bytes at 64 KiB/s), retried, exit 2 naming it, TMPDIR left empty (exit $rc)"
first_error TS
stop_proxy
PROXY_KEYS=index.tsv start_proxy trickle "$TMP/trickle.log"
vd TI TSR_S3_MIN_RATE=64K TSR_S3_GRACE_S=1 TSR_S3_RETRIES=2
[[ $rc == 2 ]] &&
    grep -q "error: GET s3://tsr/ds/index.tsv at .*: timed out: [0-9]* bytes of $index_bytes bytes moved in [0-9.]* s, past its deadline of 1.0 s (TSR_S3_GRACE_S 1 s + $index_bytes bytes at TSR_S3_MIN_RATE 65536 bytes/s); 2 tries" "$TMP/TI.txt"
tap_check $? "the index's GET trickled: its deadline from its Content-Length ($index_bytes bytes), exit 2 naming it (exit $rc)"
first_error TI
stop_proxy

# ---- sizes from the server ----
# logged KEY: the proxy logs an oversize GET when its writes fail, after the client hung up: wait
# up to 10 s for KEY's line (a loaded machine), so that the count is of finished GETs
logged() { for _ in {1..100}; do grep -q "^$1 oversize" "$TMP/over.log" && return; sleep 0.1; done; }
PROXY_KEYS=.bin start_proxy oversize "$TMP/over.log"
vd OC
logged /tsr/ds/shard-00000.bin
n_get=$(grep -c '^/tsr/ds/shard-00000.bin oversize' "$TMP/over.log")
[[ $rc == 2 && $n_get == 1 && -z $(ls -A "$TMP/tmpdir") ]] &&
    grep -q "error: GET s3://tsr/ds/shard-00000.bin at .*: the answer is larger than the $shard_bytes bytes asked for (Content-Length 1000000000000000): stopped there, not fetched again" "$TMP/OC.txt"
tap_check $? "a ranged GET answered with Content-Length 10^15: stopped before its body, final ($n_get GET), exit 2 saying so (exit $rc)"
first_error OC
stop_proxy
: >"$TMP/over.log"
PROXY_KEYS=.bin PROXY_CHUNKED=1 start_proxy oversize "$TMP/over.log"
vd OB
logged /tsr/ds/shard-00000.bin
sent=$(sed -n 's|^/tsr/ds/shard-00000.bin oversize ||p' "$TMP/over.log")
[[ $rc == 2 && $(wc -l <<<"$sent") == 1 && ${sent:-0} -lt $((64 << 20)) ]] &&
    grep -q "error: GET s3://tsr/ds/shard-00000.bin at .*: the answer is larger than the $shard_bytes bytes asked for (more than that sent): stopped there" "$TMP/OB.txt"
tap_check $? "a ranged GET whose chunked body goes on past the range: stopped at the bound (the proxy got $sent bytes out, of 256 MiB), final, exit 2 (exit $rc)"
stop_proxy
: >"$TMP/over.log"
PROXY_KEYS=index.tsv start_proxy oversize "$TMP/over.log"
vd OI
logged /tsr/ds/index.tsv
n_get=$(grep -c '^/tsr/ds/index.tsv oversize' "$TMP/over.log")
[[ $rc == 2 && $n_get == 1 ]] &&
    grep -q "error: GET s3://tsr/ds/index.tsv at .*: the answer is larger than the 268435456 bytes this object may hold (Content-Length 1000000000000000): stopped there, not fetched again" "$TMP/OI.txt"
tap_check $? "index.tsv answered with Content-Length 10^15: refused at once as over its 256 MiB bound, not fetched again ($n_get GET), exit 2 (exit $rc)"
first_error OI
stop_proxy
# an index.tsv of 256 MiB + 1 on the store itself (sparse in s3rver's directory, which answers
# with the file's size): refused at its Content-Length, before a byte of its body, not fetched again
"$TOOL" data push "$TMP/data/train" s3://tsr/big >/dev/null 2>&1 &&
    truncate -s $((256 * 1024 * 1024 + 1)) "$(obj big/index.tsv)"
TMPDIR="$TMP/tmpdir" timeout 60 "$TOOL" verify-data s3://tsr/big >"$TMP/BI.txt" 2>&1
rc=$?
[[ $rc == 2 && -z $(ls -A "$TMP/tmpdir") ]] &&
    grep -q "error: GET s3://tsr/big/index.tsv at .*: the answer is larger than the 268435456 bytes this object may hold (Content-Length 268435457): stopped there, not fetched again" "$TMP/BI.txt"
tap_check $? "an index.tsv of 256 MiB + 1 on the store: refused at its Content-Length, before its body, exit 2 (exit $rc)"
first_error BI

# ---- plain http, the deadline settings ----
AWS_ENDPOINT_URL=http://0.0.0.0:$PPORT TSR_S3_RETRIES=1 "$TOOL" verify-data s3://tsr/ds >"$TMP/http.txt" 2>&1
rc=$?
n_warn=$(grep -c 'warning: the object store.s endpoint http://0.0.0.0:[0-9]* is plain http to another machine' "$TMP/http.txt")
[[ $rc == 2 && $n_warn == 1 ]] && "$TOOL" verify-data s3://tsr/ds >"$TMP/lo.txt" 2>&1 && ! grep -q warning "$TMP/lo.txt"
tap_check $? "plain http to a host other than this one: said once ($n_warn times; exit $rc); not for 127.0.0.1"
bad=0
for v in TSR_S3_MIN_RATE=0 TSR_S3_MIN_RATE=fast TSR_S3_MIN_RATE=-1K TSR_S3_GRACE_S=0 TSR_S3_GRACE_S=1e9; do
    env "$v" "$TOOL" verify-data s3://tsr/ds >"$TMP/bad.txt" 2>&1
    rc=$?
    [[ $rc == 1 ]] && grep -q "${v%%=*} = \"${v#*=}\": expected" "$TMP/bad.txt" || { bad=1; echo "# $v: exit $rc"; }
done
[[ $bad == 0 ]]
tap_check $? "TSR_S3_MIN_RATE 0, fast, -1K and TSR_S3_GRACE_S 0, 1e9: refused with exit 1 naming the setting"
TSR_S3_MIN_RATE=1M TSR_S3_GRACE_S=2.5 "$TOOL" verify-data s3://tsr/ds >"$TMP/good.txt" 2>&1
rc=$?
[[ $rc == 0 ]]
tap_check $? "TSR_S3_MIN_RATE=1M TSR_S3_GRACE_S=2.5: taken (exit $rc)"
tap_done
