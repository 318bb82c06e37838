#!/usr/bin/env bash
# The AWS Signature V4 of tessera's requests, checked by AWS's own signer (docs/object-storage.md
# "Tests"): tests/s3/sigv4_store.js, a store of the test's own, signs every request again with
# @smithy/signature-v4 (the AWS SDK for JavaScript's) from the request as received and the true
# secret and answers 403 SignatureDoesNotMatch on a difference (s3rver, the other tests' store,
# accepts a wrong secret). The table of requests, each signed by libcurl (CURLOPT_AWS_SIGV4):
#  - PUT, GET of index.tsv, ranged GETs, HEAD: keys with a space, UTF-8 and every reserved
#    character (percent-encoded by SigV4's rules), path and virtual-host style;
#  - a multipart upload: POST ?uploads=, PUT ?partNumber=N&uploadId=ID (the store's ids hold '+',
#    '/' and '=', as real ones do), POST ?uploadId= (complete), DELETE ?uploadId= (the abort);
#  - a session token of 3 KB on every request (more than the 2,047 bytes tessera once cut it to);
#  - refused: a wrong secret (SignatureDoesNotMatch), a missing token (InvalidToken);
# and a server's <Code> with terminal escape bytes printed escaped.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
source "$TSR_ROOT/tests/ports.sh"
MODULES=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}/sigv4/node_modules
[[ -f $MODULES/@smithy/signature-v4/package.json ]] || { echo "1..0 # SKIP $MODULES missing: ./INSTALL --ensure installs AWS's SigV4 signer (npm @smithy/signature-v4)"; exit 77; }
command -v node >/dev/null || { echo "1..0 # SKIP node not found (Debian: nodejs)"; exit 77; }
tap_plan 9

SECRET='wJalr/XUtnFEMI+K7MDENG=bPxRfiCYEXAMPLE' # with '/', '+' and '=': signed as bytes
TOKEN=$("$PY3" -c 'import base64; print(base64.b64encode(bytes(range(256)) * 9).decode() + "/+=")')
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait "${PIDS[@]}" 2>/dev/null; rm -rf "$TMP"' EXIT
# store NAME [TOKEN]: a private store in $TMP/NAME (port $STORE_PORT, log $TMP/NAME.log)
store() {
    local port
    port=$(free_ports 1) || exit 1
    mkdir -p "$TMP/$1"
    SIGV4_MODULES=$MODULES SIGV4_VHOST=s3.localhost node "$TSR_ROOT/tests/s3/sigv4_store.js" "$port" \
        "$TMP/$1" "$TMP/$1.log" TSRKEY "$SECRET" "${2:-}" 2>"$TMP/$1.err" &
    PIDS+=($!)
    for _ in $(seq 1 100); do grep -qs listening "$TMP/$1.log" && break; sleep 0.1; done
    grep -qs listening "$TMP/$1.log" || { echo "Bail out! sigv4_store.js did not start: $(cat "$TMP/$1.err")"; exit 1; }
    STORE_PORT=$port
}
store plain && PORT_plain=$STORE_PORT
store tok "$TOKEN" && PORT_tok=$STORE_PORT
export HOME=$TMP/home AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=TSRKEY AWS_SECRET_ACCESS_KEY=$SECRET TSR_S3_RETRIES=1
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL_S3 AWS_CONFIG_FILE AWS_SHARED_CREDENTIALS_FILE
unset AWS_S3_ADDRESSING_STYLE TSR_S3_PART_MB TSR_S3_CONNECTIONS TSR_S3_MIN_RATE TSR_S3_GRACE_S
# every request of LOG answered 2xx (or a HEAD 404: verify-data's look for index.tsv) and none
# refused (a "# CODE: why" line is a refusal)
all_ok() {
    [[ -s $1 ]] && ! grep -v '^# NoSuchKey: ' "$1" | grep -q '^#' &&
        ! grep -v '^listening$' "$1" | grep -v '^# NoSuchKey: ' | grep -v '^HEAD .* 404 NoSuchKey$' | grep -vq ' 20[046] -$'
}
refusals() { grep '^#' "$1" | grep -v '^# NoSuchKey' | head -3 | cut -c1-300 | sed 's/^/# /'; }
# in_store STORE KEY FILE: the store's object KEY (a decoded key) is FILE's bytes
in_store() { cmp -s "$3" "$TMP/$1/tsr/$("$PY3" -c 'import sys; print(sys.argv[1].encode().hex())' "$2")"; }

"$TOOL" synth --out "$TMP/data" --vocab 512 --tokens 20000 --shard-tokens 3300 --seed 1 >/dev/null
# a prefix with a space, UTF-8, "..." and every character SigV4 percent-encodes
odd=$'sp ace/\xc3\xbcn\xc3\xafc\xc3\xb8d\xe2\x82\xac/.../!"#$%&\'()*+,:;<=>?@[\\]^`{|}~/ds'
export AWS_ENDPOINT_URL=http://127.0.0.1:$PORT_plain
"$TOOL" data push "$TMP/data" "s3://tsr/$odd" >"$TMP/push.txt" 2>&1
rc=$?
ok=1
for f in "$TMP"/data/train/* "$TMP"/data/val/*; do
    in_store plain "$odd/$(basename "$(dirname "$f")")/$(basename "$f")" "$f" || ok=0
done
[[ $rc == 0 && $ok == 1 ]] && all_ok "$TMP/plain.log"
tap_check $? "PUT of keys with a space, UTF-8 and every reserved character, path style: every signature AWS's signer's, the objects byte for byte (exit $rc)"
refusals "$TMP/plain.log"

: >"$TMP/plain.log"
"$TOOL" verify-data "s3://tsr/$odd" >"$TMP/vd.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && all_ok "$TMP/plain.log" && grep -q '^HEAD path tsr .*/ds/train/index.tsv ? 200' "$TMP/plain.log" &&
    grep -q '^GET path tsr .*/ds/val/shard-00000.bin ? 206' "$TMP/plain.log" && grep -q 'val: ok: ' "$TMP/vd.txt"
tap_check $? "HEAD, GET of index.tsv and ranged GETs of those keys (verify-data of the pushed prep prefix: train and val): signatures right (exit $rc)"
refusals "$TMP/plain.log"

: >"$TMP/plain.log"
AWS_ENDPOINT_URL=http://s3.localhost:$PORT_plain AWS_S3_ADDRESSING_STYLE=virtual \
    "$TOOL" verify-data "s3://tsr/$odd/train" >"$TMP/vh.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && all_ok "$TMP/plain.log" && ! grep -q '^[A-Z]* path' "$TMP/plain.log" && grep -q '^GET vhost tsr ' "$TMP/plain.log"
tap_check $? "virtual-host style (tsr.s3.localhost): every request's signature right (exit $rc)"
refusals "$TMP/plain.log"

# multipart uploads with a session token of 3 KB on every request
export AWS_ENDPOINT_URL=http://127.0.0.1:$PORT_tok
AWS_SESSION_TOKEN=$TOKEN TSR_S3_PART_MB=0.002 "$TOOL" data push "$TMP/data/train" "s3://tsr/$odd/mp" >"$TMP/mp.txt" 2>&1 &&
    AWS_SESSION_TOKEN=$TOKEN "$TOOL" verify-data "s3://tsr/$odd/mp" >>"$TMP/mp.txt" 2>&1
rc=$?
in_store tok "$odd/mp/shard-00003.bin" "$TMP/data/train/shard-00003.bin"
ok=$?
[[ $rc == 0 && $ok == 0 ]] && all_ok "$TMP/tok.log" && grep -q "^POST path tsr .*/mp/shard-00003.bin ?uploads= 200" "$TMP/tok.log" &&
    grep -q "^PUT path tsr .*/mp/shard-00003.bin ?partNumber=2&uploadId=[^ ]*%2B%2F[^ ]*%3D%3D 200" "$TMP/tok.log" &&
    grep -q "^POST path tsr .*/mp/shard-00003.bin ?uploadId=[^ ]* 200" "$TMP/tok.log"
tap_check $? "multipart upload (create, parts with an upload id of '+', '/' and '=', complete) and GETs, with a ${#TOKEN}-byte session token: signatures right (exit $rc)"
refusals "$TMP/tok.log"

: >"$TMP/tok.log"
AWS_SESSION_TOKEN=$TOKEN TSR_S3_PART_MB=0.002 "$TOOL" data push "$TMP/data/train" "s3://tsr/fail-part" >"$TMP/fp.txt" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q '^DELETE path tsr fail-part/shard-00000.bin ?uploadId=[^ ]* 204 -$' "$TMP/tok.log" &&
    [[ $(grep -c '^#' "$TMP/tok.log") == 1 ]] && grep -q '^# InternalError' "$TMP/tok.log"
tap_check $? "a part failing (HTTP 500): the abort (DELETE ?uploadId=) signed right too (exit $rc)"

: >"$TMP/tok.log"
AWS_SESSION_TOKEN=${TOKEN:0:2047} "$TOOL" verify-data "s3://tsr/$odd/mp" >"$TMP/cut.txt" 2>&1
rc=$?
(unset AWS_SESSION_TOKEN; "$TOOL" verify-data "s3://tsr/$odd/mp" >>"$TMP/cut.txt" 2>&1)
rc2=$?
[[ $rc == 2 && $rc2 == 2 && $(grep -c 'HTTP 403' "$TMP/cut.txt") == 2 && $(grep -c '^# InvalidToken' "$TMP/tok.log") == 2 ]]
tap_check $? "the session token cut to 2,047 bytes, or none: refused by the store (InvalidToken), exit 2 (exit $rc, $rc2)"

export AWS_ENDPOINT_URL=http://127.0.0.1:$PORT_plain
: >"$TMP/plain.log"
AWS_SECRET_ACCESS_KEY=${SECRET%?}Y "$TOOL" verify-data "s3://tsr/$odd/train" >"$TMP/ws.txt" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q 'HTTP 403' "$TMP/ws.txt" && grep -q '^# SignatureDoesNotMatch' "$TMP/plain.log" &&
    grep -q '^# canonical request: HEAD|/tsr/sp%20ace/%C3%BCn%C3%AFc%C3%B8d%E2%82%AC/.../%21%22%23%24%25%26%27%28%29%2A%2B%2C%3A%3B%3C%3D%3E%3F%40%5B%5C%5D%5E%60%7B%7C%7D~/ds/train/index.tsv|' "$TMP/plain.log"
tap_check $? "a wrong secret: 403 SignatureDoesNotMatch, exit 2; the store's canonical request has the key encoded by SigV4's rules (exit $rc)"
grep '^# canonical' "$TMP/plain.log" | head -1 | cut -c1-200 | sed 's/^/# /'

"$TOOL" verify-data s3://tsr/x/esc-code >"$TMP/esc.txt" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q 'HTTP 400 Bad\\x1b\[31mRed\\x1b\]0;owned\\x07Code' "$TMP/esc.txt" && ! grep -q $'\x1b' "$TMP/esc.txt"
tap_check $? "a server's <Code> with terminal escape bytes: printed as \\xNN, no escape byte on the terminal (exit $rc)"
grep error "$TMP/esc.txt" | head -1 | cut -c1-220 | sed 's/^/# /'

"$TOOL" verify-data s3://tsr/nothing >"$TMP/none.txt" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q 'no dataset there: neither s3://tsr/nothing/index.tsv nor s3://tsr/nothing/train/index.tsv' "$TMP/none.txt"
tap_check $? "verify-data of a prefix with neither index.tsv nor train/index.tsv: exit 2 saying so (exit $rc)"
tap_done
