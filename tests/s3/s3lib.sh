# shellcheck shell=bash
# s3lib.sh — sourced by tests/s3/test_s3*.sh (after tests/lib.sh and tsr_tmpdir): a private s3rver
# (npm s3rver, a real S3 protocol server; it takes a wrong secret: tests/s3/test_s3_sigv4.sh checks
# signatures) on 127.0.0.1 with its own directory ($TMP/store, bucket tsr) and a free port ($PORT),
# stopped by PID on exit with tests/s3/flaky_proxy.py when one runs (start_proxy MODE LOG on
# $PPORT, stop_proxy; the proxy's own settings, e.g. PROXY_KEYS, in start_proxy's environment);
# the store's settings exported as a centre's users set them (no profile files: HOME points at
# nothing).
# Skips (exit 77) when s3rver or node is not installed. s3rver_up [ARGS...] passes ARGS to s3rver
# (e.g. --service-endpoint localhost, for virtual-host requests).
source "$TSR_ROOT/tests/ports.sh"
S3RVER=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}/s3rver/node_modules/.bin/s3rver
[[ -x $S3RVER ]] || { echo "1..0 # SKIP $S3RVER missing: npm install --prefix data/npm/s3rver s3rver@3.7.1 (./INSTALL --ensure)"; exit 77; }
command -v node >/dev/null || { echo "1..0 # SKIP node not found (Debian: nodejs)"; exit 77; }
s3rver_up() {
    PORT=$(free_ports 1) || exit 1
    mkdir -p "$TMP/store"
    "$S3RVER" -d "$TMP/store" -a 127.0.0.1 -p "$PORT" --configure-bucket tsr --silent "$@" >"$TMP/s3rver.log" 2>&1 &
    S3PID=$!
    PROXYPID=
    trap 'kill "$S3PID" $PROXYPID 2>/dev/null; wait "$S3PID" $PROXYPID 2>/dev/null; rm -rf "$TMP"' EXIT
    for _ in $(seq 1 100); do
        grep -q listening "$TMP/s3rver.log" && break
        kill -0 "$S3PID" 2>/dev/null || break
        sleep 0.1
    done
    grep -q listening "$TMP/s3rver.log" || { echo "Bail out! s3rver did not start: $(cat "$TMP/s3rver.log")"; exit 1; }
    PPORT=$(free_ports 1) || exit 1
    export HOME=$TMP/home AWS_ENDPOINT_URL=http://127.0.0.1:$PORT AWS_REGION=us-east-1
    export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER TSR_S3_RETRIES=2
    unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL_S3 AWS_CONFIG_FILE AWS_SHARED_CREDENTIALS_FILE
    unset AWS_S3_ADDRESSING_STYLE TSR_S3_PART_MB TSR_S3_CONNECTIONS TSR_S3_MIN_RATE TSR_S3_GRACE_S
    unset PROXY_KEYS PROXY_CHUNKED
}
# start_proxy MODE LOG: tests/s3/flaky_proxy.py on $PPORT in front of the store (stop_proxy)
start_proxy() {
    "$PY3" "$TSR_ROOT/tests/s3/flaky_proxy.py" "$PPORT" "$PORT" "$2" "$1" 2>"$TMP/proxy.err" &
    PROXYPID=$!
    for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PPORT") 2>/dev/null && break; sleep 0.1; done
}
stop_proxy() { kill "$PROXYPID" 2>/dev/null; wait "$PROXYPID" 2>/dev/null; PROXYPID=; }
# obj KEY: the file s3rver keeps object tsr/KEY in
obj() { echo "$TMP/store/tsr/$1._S3rver_object"; }
