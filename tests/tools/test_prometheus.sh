#!/usr/bin/env bash
# Monitoring with the real thing (docs/site.md "Monitoring"): Debian's prometheus-node-exporter,
# started privately (127.0.0.1 on a free port, its textfile collector pointed at this test's own
# directory, no other collector), stopped by its PID; promtool checks the files. Both are the
# programs ./INSTALL unpacked from Debian's packages into $TSR_PROM_DIR/usr/bin (default
# data/prometheus), never apt-installed ones: installing them would start the host's services.
#  - tessera-train with metrics.prometheus_dir: stopped at step 6 (exit 85) the file says
#    running 0, exit code 85, step 6, the step-6 checkpoint and its age; resumed to the end: step 12,
#    exit 0; the exporter serves exactly those values, with no textfile scrape error; promtool
#    accepts the file; no temp file is left; the start's log names the files (metrics: ...); each
#    write replaces the file (a new inode), and a
#    reader polling it while a run writes it every second never sees a partial file;
#  - tessera-healthcheck --prometheus DIR: per check ok/value/limit matching its verdict lines; the
#    Slurm wrappers add it when the site file sets TESSERA_HC_PROMETHEUS;
#  - a prometheus_dir that is not a directory: exit 1 naming the key, run_dir not created;
#  - the exporter is ours: the test refuses a port on which something already answers, and reads
#    back only from the PID it started (its socket is the one listening).
source "$(dirname "$0")/../lib.sh"
source "$TSR_ROOT/tests/ports.sh"
tsr_tmpdir
PROM_BIN=${TSR_PROM_DIR:-$TSR_ROOT/data/prometheus}/usr/bin
NE=$PROM_BIN/prometheus-node-exporter
[[ -x $PROM_BIN/promtool && -x $NE ]] ||
    { echo "1..0 # SKIP $PROM_BIN: no prometheus-node-exporter or promtool: run ./INSTALL --ensure (unpacks them)"; exit 77; }
promtool() { "$PROM_BIN/promtool" "$@"; }
TXT=$TMP/textfile
mkdir -p "$TXT"
NE_PID=
stop_exporter() { [[ -n $NE_PID ]] && kill "$NE_PID" 2>/dev/null && wait "$NE_PID" 2>/dev/null; NE_PID=; }
trap 'stop_exporter; rm -rf "$TMP"' EXIT
fetch() { "$PY3" -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$1/metrics', timeout=5).read().decode())"; }
answers() { fetch "$1" >/dev/null 2>&1; }
# pq NAME [LABEL=VALUE...] < exposition text: the value of the sample with those labels (the
# exporter sorts labels by name, so they are matched as a set)
pq() {
    "$PY3" -c '
import re, sys
want = dict(a.split("=", 1) for a in sys.argv[2:])
for line in sys.stdin:
    m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$", line.strip())
    if not m or m.group(1) != sys.argv[1]: continue
    labels = dict(re.findall(r"(\w+)=\"((?:[^\"\\\\]|\\\\.)*)\"", m.group(2) or ""))
    if all(labels.get(k) == v for k, v in want.items()): print(m.group(3)); break
' "$@"
}
# the socket listening on port $1 belongs to process $2 (its inode among the process's fds)
owns_port() {
    local hex inode
    hex=$(printf '%04X' "$1")
    inode=$(awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { print $10; exit }' /proc/net/tcp)
    [[ -n $inode ]] && ls -l "/proc/$2/fd" 2>/dev/null | grep -q "socket:\[$inode\]"
}
tap_plan 10

# ---- our own exporter ----
PORT=
for p in $(free_ports 5); do
    if answers "$p"; then tap_diag "port $p answers already: not ours, not used"; continue; fi
    PORT=$p; break
done
"$NE" --web.listen-address="127.0.0.1:$PORT" --collector.disable-defaults --collector.textfile \
    --collector.textfile.directory="$TXT" >"$TMP/ne.log" 2>&1 &
NE_PID=$!
for _ in $(seq 100); do answers "$PORT" && break; sleep 0.1; done
answers "$PORT" && owns_port "$PORT" "$NE_PID"
tap_check $? "a private node exporter ($NE, pid $NE_PID) listens on 127.0.0.1:$PORT, its socket its own, textfile dir $TXT"

# ---- the trainer ----
make_synth "$TMP/data" 512 50000
tiny_args "$TMP/data/train"
args+=(--set model.n_layer=1 --set model.n_head=4 --set global_batch=4 --set micro_batch=2
       --set max_duration=12ba --set save_interval=3ba --set metrics.prometheus_dir="$TXT"
       --set metrics.prometheus_interval=1 --set run_dir="$TMP/runs/prom-run")
F=$TXT/tessera_train_prom-run.prom
TSR_FAULT=usr1:6:0 "$TRAIN" "${args[@]}" >"$TMP/t1.txt" 2>&1
rc=$?
# the file as it is now, held open: a write that replaces the file (a rename) leaves what this
# descriptor reads unchanged; one that rewrote it in place would change it (inode numbers are no
# test: the file system reuses a freed one, so two renames can give the first number back)
exec 7<"$F"
sum1=$(md5sum <"$F")
s=$(fetch "$PORT")
val() { pq "$1" run=prom-run <<<"$s"; }
[[ $rc == 85 && $(val tessera_train_running) == 0 && $(val tessera_train_exit_code) == 85 &&
   $(val tessera_train_step) == 6 && $(val tessera_train_total_steps) == 12 &&
   $(val tessera_train_last_checkpoint_step) == 6 ]] &&
    "$PY3" -c "import sys; a=float('$(val tessera_train_last_checkpoint_age_seconds)'); sys.exit(0 if 0 <= a < 60 else 1)" &&
    grep -q '^node_textfile_scrape_error 0' <<<"$s" &&
    grep -qxF "metrics: $TMP/runs/prom-run/metrics.jsonl, TensorBoard $TMP/runs/prom-run/tb/, Prometheus $F (every 1 s)" "$TMP/t1.txt"
tap_check $? "stopped at step 6 (exit $rc): the exporter serves running 0, exit code 85, step 6 of 12, checkpoint 6 and its age; no scrape error; the start's log names the file"
promtool check metrics <"$F" >"$TMP/promtool.txt" 2>&1
tap_check $? "promtool check metrics accepts $(basename "$F") $(tr '\n' ' ' <"$TMP/promtool.txt")"

# a reader polling the file while a resumed run rewrites it each second: always a whole file
( end=$((SECONDS + 30)); n=0
  while ((SECONDS < end)) && [[ ! -e $TMP/done ]]; do
      cp "$F" "$TMP/snap" 2>/dev/null && { tail -1 "$TMP/snap" | grep -q '^tessera_train_last_update_timestamp_seconds' || echo partial; }
      n=$((n + 1))
  done; echo "reads $n" ) >"$TMP/reader.txt" &
reader=$!
"$TRAIN" "${args[@]}" --set max_duration=200ba >"$TMP/t2.txt" 2>&1
rc=$?
touch "$TMP/done"; wait "$reader"
held=$(md5sum <&7)
exec 7<&-
s=$(fetch "$PORT")
[[ $rc == 0 && $(val tessera_train_running) == 0 && $(val tessera_train_exit_code) == 0 &&
   $(val tessera_train_step) == 200 && $(val tessera_train_total_steps) == 200 ]] &&
    ! grep -q partial "$TMP/reader.txt" && [[ $held == "$sum1" && $(md5sum <"$F") != "$sum1" ]] &&
    [[ -z $(find "$TXT" -type f ! -name '*.prom') ]] && promtool check metrics <"$F" >/dev/null 2>&1
tap_check $? "resumed to step 200 (exit $rc): served step 200, exit 0; the file replaced (the descriptor held open still reads the old one), never read partial ($(tail -1 "$TMP/reader.txt")), no temp file left"
served() {
    local m
    for m in loss tokens_per_second mfu_ratio eta_seconds last_update_timestamp_seconds; do
        [[ $(pq "tessera_train_$m" run=prom-run slurm_job= host="$(hostname)" <<<"$s") =~ ^[0-9.e+-]+$ ]] || return 1
    done
}
# no label of the file is one Prometheus sets itself on a scrape (job, instance: exported_job)
[[ $(pq tessera_train_device_memory_peak_bytes run=prom-run device=cpu <<<"$s") =~ ^[0-9.e+]+$ ]] && served &&
    ! grep -qE '^tessera_train_[a-z_]*\{(.*,)?(job|instance)=' "$F"
tap_check $? "loss, tokens/s, MFU, ETA, peak device memory and the update time are served with run, slurm_job, host labels (no job or instance label: Prometheus's own)"
# the silent-data-corruption checks of the resumed start (steps 7-200, docs/health.md): a
# comparison at its start, at each multiple of 10 and before each save, replays at steps 100 and
# 200, none found
[[ $(val tessera_train_sdc_comparisons) -ge 21 && $(val tessera_train_sdc_rest_checks) -ge 19 &&
   $(val tessera_train_sdc_replays) == 2 && $(val tessera_train_sdc_found) == 0 &&
   $(val tessera_train_sdc_transient_faults) == 0 && $(val tessera_train_sdc_step_seconds) =~ ^[0-9.e+-]+$ ]]
tap_check $? "the checks' figures are served: $(val tessera_train_sdc_comparisons) comparisons, $(val tessera_train_sdc_replays) replays, found $(val tessera_train_sdc_found)"

# ---- the health checker ----
TESSERA_HC_CONFIG= "$TSR_ROOT/build/tessera-healthcheck" --quick --burn 1 --prometheus "$TXT" >"$TMP/hc.txt" 2>&1
rc=$?
s=$(fetch "$PORT")
bad=0 n=0
while read -r node check verdict _; do
    want=$([[ $verdict == OK ]] && echo 1 || echo 0)
    got=$(pq tessera_healthcheck_check_ok node="$node" check="$check" <<<"$s")
    [[ $got == "$want" ]] || bad=$((bad + 1))
    [[ -n $(pq tessera_healthcheck_check_value node="$node" check="$check" <<<"$s") ]] || bad=$((bad + 1))
    n=$((n + 1))
done < <(grep -E ' (OK|FAIL) ' "$TMP/hc.txt")
healthy=$(pq tessera_healthcheck_healthy mode=quick <<<"$s")
((rc <= 1 && n > 0 && bad == 0)) && [[ $healthy == $((rc == 0 ? 1 : 0)) ]] &&
    promtool check metrics <"$TXT"/tessera_healthcheck_*.prom >/dev/null 2>&1 && grep -q '^node_textfile_scrape_error 0' <<<"$s"
tap_check $? "tessera-healthcheck --prometheus: $n checks served with ok/value matching the verdict lines, healthy $healthy for exit $rc, promtool accepts it"

# the Slurm wrappers pass the site file's TESSERA_HC_PROMETHEUS on (a recording stand-in checker)
printf '#!/bin/sh\nprintf "%%s\\n" "$@" > "%s/hc.args"\n' "$TMP" >"$TMP/hc-stub"
chmod +x "$TMP/hc-stub"
echo "TESSERA_HC_PROMETHEUS='$TXT'" >"$TMP/hc-site"
TESSERA_HC_DEFAULTS=$TMP/hc-site TESSERA_HEALTHCHECK=$TMP/hc-stub TESSERA_HC_LOG=$TMP/hc-wrapper.log \
    sh "$TSR_ROOT/jobs/slurm/healthcheck.sh" >/dev/null 2>&1
[[ $(tr '\n' ' ' <"$TMP/hc.args" 2>/dev/null) == "--quick --drain --prometheus $TXT "* ]]
tap_check $? "the HealthCheckProgram wrapper adds --prometheus DIR from the site file's TESSERA_HC_PROMETHEUS ($(tr '\n' ' ' <"$TMP/hc.args" 2>/dev/null))"

# ---- a bad directory ----
touch "$TMP/a-file"
"$TRAIN" "${args[@]}" --set metrics.prometheus_dir="$TMP/a-file" --set run_dir="$TMP/runs/refused" >"$TMP/bad.txt" 2>&1
rc=$?
[[ $rc == 1 && ! -e $TMP/runs/refused ]] && grep -q "metrics.prometheus_dir = \"$TMP/a-file\": not a directory" "$TMP/bad.txt"
tap_check $? "metrics.prometheus_dir not a directory: exit 1 naming the key, nothing written (exit $rc)"

pid=$NE_PID
stop_exporter
! kill -0 "$pid" 2>/dev/null && ! answers "$PORT"
tap_check $? "the exporter stopped by its PID ($pid); the port no longer answers"
tap_done
