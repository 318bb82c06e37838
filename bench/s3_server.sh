# shellcheck shell=bash
# s3_server.sh — sourced by bench/s3_stream.sh and bench/s3_steady.sh (after ROOT is set): the
# tools they run and a private s3rver (npm s3rver 3.7.1) on 127.0.0.1, a free port, its own
# directory under a new $TMP (named after PREFIX), bucket tsr-bench (a name of 3-63 characters, as
# S3's naming rules and tessera want), stopped by PID and $TMP removed on exit; the store's
# settings exported. s3_server_up PREFIX
source "$ROOT/tests/ports.sh"
S3RVER=$ROOT/data/npm/s3rver/node_modules/.bin/s3rver
TOOL=$ROOT/build/tessera TRAIN=$ROOT/build/tessera-train
MPIRUN=(bash "$ROOT/tests/mpi_env.sh" mpirun)
s3_server_up() {
    [[ -x $S3RVER ]] || { echo "no $S3RVER: ./INSTALL --ensure (npm s3rver@3.7.1)"; exit 1; }
    TMP=$(mktemp -d "/tmp/$1.XXXXXX")
    PORT=$(free_ports 1)
    mkdir -p "$TMP/store"
    "$S3RVER" -d "$TMP/store" -a 127.0.0.1 -p "$PORT" --configure-bucket tsr-bench --silent >"$TMP/s3rver.log" 2>&1 &
    PID=$!
    trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$TMP"' EXIT
    for _ in $(seq 1 100); do grep -q listening "$TMP/s3rver.log" && break; sleep 0.1; done
    export AWS_ENDPOINT_URL=http://127.0.0.1:$PORT AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
}
