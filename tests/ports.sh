# shellcheck shell=bash
# ports.sh — sourced by the tests that start a private daemon on this host (tests/slurm/cluster.sh,
# tests/tools/test_prometheus.sh): free TCP ports for it.
# free_ports N: N distinct TCP ports below the ephemeral range that no socket of this host uses
# (any state, IPv4 or IPv6) and that are not Slurm's defaults; random, so two instances started at
# once rarely pick the same (a daemon that cannot bind makes `up` fail, never a shared port)
free_ports() {
    local used p n=0 tries=0
    used=" 6817 6818 6819 "
    while read -r p; do used+="$((16#$p)) "; done < <(awk 'FNR > 1 { n = split($2, a, ":"); print a[n] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
    while ((n < $1)); do
        ((tries++ < 1000)) || { echo "free_ports: no free TCP port found in 20000-31999" >&2; return 1; }
        p=$((20000 + RANDOM % 12000))
        [[ $used == *" $p "* ]] && continue
        used+="$p "
        echo "$p"
        n=$((n + 1))
    done
}
