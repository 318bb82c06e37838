#!/usr/bin/env bash
# bench/demo_fresh.sh — README's demo command, `make demo`, timed on a fresh Debian 12 (issue 65
# item 1; docs/benchmarks.md "make demo on a fresh machine"). As root, on a Debian/Ubuntu host:
#   bash bench/demo_fresh.sh [REPO]     (REPO: a git checkout, default this one; its HEAD is cloned)
#   bash bench/demo_fresh.sh --pristine (only step 1: build the pristine root, if not there yet)
# 1. A pristine minimal Debian 12 root (mmdebstrap --variant=minbase bookworm from deb.debian.org,
#    with bookworm-updates and bookworm-security as a fresh install has) is built once and kept as
#    a tarball, $TSR_FRESH_TARBALL (default /var/tmp/tessera-bookworm-minbase.tar), reused by
#    later runs. mmdebstrap is this benchmark's own tool: installed with apt-get when missing.
# 2. Per run: the tarball unpacked into a new directory under /var/tmp, /proc /sys /dev mounted in
#    it, resolv.conf copied (name lookups), the host's CA bundle beside (with CURL_CA_BUNDLE set
#    here, the chroot's names it: curl through a TLS-inspecting proxy, as in this sandbox), REPO's HEAD cloned into /root/tessera (no data/, no
#    build/: nothing fetched or built beforehand), then inside the chroot, as root: make itself
#    (a minimal root lacks it: apt-get update && apt-get install make, timed as its own part), then
#    exactly the README's command: cd /root/tessera && make demo.
# 3. Every output line is time-stamped here; the parts are read from the lines make and ./INSTALL
#    print (apt-get install, the npm fetch, the compiles, tessera tokenizer train and prep, the
#    training) and printed with the total and the CPU seconds of make demo (bash's times, in the
#    chroot: on a shared host the wall times stretch, these do not much); the whole log stays in $TSR_FRESH_LOG (default /var/tmp/tessera-demo-fresh.log).
# 4. The copy is unmounted and removed (the pristine tarball stays).
# Timings depend on the mirror, the registry and the load: run it on an idle machine to record one.
# The clock of a sandbox may be off: apt is told not to check the Release files' dates (in the
# pristine root's apt.conf.d/99mmdebstrap).
set -euo pipefail
only_pristine=0
[[ ${1:-} != --pristine ]] || { only_pristine=1; shift; }
REPO=$(cd "${1:-$(dirname "$0")/..}" && pwd)
TARBALL=${TSR_FRESH_TARBALL:-/var/tmp/tessera-bookworm-minbase.tar}
[[ $TARBALL == *.tar ]] || { echo "demo_fresh.sh: TSR_FRESH_TARBALL=$TARBALL: expected a name ending in .tar" >&2; exit 2; }
LOG=${TSR_FRESH_LOG:-/var/tmp/tessera-demo-fresh.log}
MIRROR=http://deb.debian.org
die() { echo "demo_fresh.sh: $*" >&2; exit 2; }
[[ $(id -u) == 0 ]] || die "needs root (chroot, mounts, apt inside the root)"
git -C "$REPO" rev-parse HEAD >/dev/null 2>&1 || die "$REPO is not a git checkout"

pristine() {
    [[ -s $TARBALL ]] && { echo "pristine root: $TARBALL (reused)"; return 0; }
    command -v mmdebstrap >/dev/null || {
        echo "demo_fresh.sh: installing mmdebstrap (this benchmark's tool) with apt-get"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
    }
    echo "pristine root: mmdebstrap --variant=minbase bookworm -> $TARBALL"
    mmdebstrap --variant=minbase --aptopt='Acquire::Check-Valid-Until "false"' \
        --aptopt='Acquire::Check-Date "false"' bookworm "${TARBALL%.tar}.part.tar" \
        "deb $MIRROR/debian bookworm main" "deb $MIRROR/debian bookworm-updates main" \
        "deb $MIRROR/debian-security bookworm-security main"
    mv "${TARBALL%.tar}.part.tar" "$TARBALL"
}

ROOTDIR=
# shellcheck disable=SC2317 # (the EXIT trap calls it)
cleanup() {
    [[ -n $ROOTDIR && -d $ROOTDIR ]] || return 0
    local m
    for m in dev sys proc; do ! mountpoint -q "$ROOTDIR/root/$m" || umount -R "$ROOTDIR/root/$m" || umount -lR "$ROOTDIR/root/$m"; done
    if findmnt -rn -o TARGET | grep -q "^$ROOTDIR/"; then
        echo "demo_fresh.sh: $ROOTDIR still has mounts: not removed" >&2; return 1
    fi
    rm -rf --one-file-system "$ROOTDIR"
}

setup_copy() {
    ROOTDIR=$(mktemp -d /var/tmp/tessera-demo-fresh.XXXXXX)
    trap cleanup EXIT
    local r=$ROOTDIR/root
    mkdir "$r" && tar -xf "$TARBALL" -C "$r"
    mount -t proc proc "$r/proc"
    mount --rbind /sys "$r/sys" && mount --make-rslave "$r/sys"
    mount --rbind /dev "$r/dev" && mount --make-rslave "$r/dev"
    cp -L /etc/resolv.conf "$r/etc/resolv.conf"
    # the host's CA bundle, for curl through a site's TLS-inspecting proxy (this project's sandbox):
    # CURL_CA_BUNDLE in the chroot names it when the host's environment sets CURL_CA_BUNDLE
    cp -L /etc/ssl/certs/ca-certificates.crt "$r/etc/host-ca-bundle.crt" 2>/dev/null || true
    git clone -q --no-checkout "$REPO" "$r/root/tessera"
    git -C "$r/root/tessera" checkout -q "$(git -C "$REPO" rev-parse HEAD)"
    echo "fresh root: $r (clone of $REPO at $(git -C "$REPO" rev-parse --short HEAD))"
}

# stamp: each input line prefixed by the seconds since the run started
stamp() {
    local t0=${EPOCHREALTIME/./} line us
    while IFS= read -r line; do
        us=$((${EPOCHREALTIME/./} - t0))
        printf '%5d.%03d %s\n' $((us / 1000000)) $((us / 1000 % 1000)) "$line"
    done
}

# the run, inside the chroot; a clean environment as a fresh login has
# shellcheck disable=SC2016 # (the script runs in the chroot's bash)
run_in_root() {
    chroot "$ROOTDIR/root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
        ${CURL_CA_BUNDLE:+CURL_CA_BUNDLE=/etc/host-ca-bundle.crt} \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c '
        echo "@@ make itself: apt-get update && apt-get install make"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq --no-install-recommends make >/dev/null || exit 1
        echo "@@ make demo"
        times >/tmp/cpu0  # (a builtin in a pipe or $(...) runs in a subshell, whose children are none)
        cd /root/tessera && make demo
        rc=$?; times >/tmp/cpu1
        echo "@@ cpu (user sys of the commands run, before make demo and after): $(tail -1 /tmp/cpu0) $(tail -1 /tmp/cpu1)"
        echo "@@ end rc=$rc"; exit $rc' 2>&1
}

# parts: the seconds between the first line matching START and the first later one matching END
# (awk over the stamped log)
parts() {
    awk '
    function at(re, from,   i) { for (i = from; i <= n; i++) if (txt[i] ~ re) return i; return 0 }
    function part(name, a, b) { if (a && b) { printf "  %-34s %7.1f s\n", name, t[b] - t[a]; return t[b] - t[a] } printf "  %-34s %9s\n", name, "-"; return 0 }
    { n++; t[n] = $1; sub(/^ *[0-9.]+ /, ""); txt[n] = $0 }
    END {
        m0 = at("^@@ make itself", 1); d0 = at("^@@ make demo", 1)
        a0 = at("^INSTALL: apt-get install", d0); a1 = a0 ? at("^tessera dependencies", a0) : 0
        f0 = at("^INSTALL: (curl|npm)", d0);      f1 = f0 ? at("^tessera dependencies", f0) : 0
        b0 = at("^  build: ", d0);                b1 = at("tessera (tokenizer train|prep) ", b0 ? b0 : d0)
        r0 = at("^demo: (no|a) Slurm controller", d0); r1 = at("^demo done", r0 ? r0 : d0)
        e = at("^@@ end", 1)
        s = part("make itself (apt-get install make)", m0, d0)
        s += part("apt-get install (the demo profile)", a0, a1)
        s += part("npm files (curl + sha512)", f0, f1)
        s += part("build (make: the two programs)", b0, b1)
        s += part("tokenizer train + prep of Brown", b1, r0)
        st = at("^steps: [0-9]+ ", r0); split(st ? txt[st] : "steps: ?", w, " ")
        s += part("train (" w[2] " steps, 2 ranks) + sample", r0, r1)
        printf "  %-34s %7.1f s\n", "other (checks, make, messages)", t[e] - t[m0] - s
        printf "  %-34s %7.1f s  (%d min %02d s)  %s\n", "total", t[e] - t[m0], (t[e] - t[m0]) / 60, (t[e] - t[m0]) % 60, txt[e]
        c = at("^@@ cpu ", 1); if (c) { split(txt[c], f, ": "); split(f[2], v, " ")
            printf "  %-34s %7.1f s  (user %.1f + sys %.1f; make itself: %.1f)\n", "CPU of make demo (user + sys)",
                secs(v[3]) + secs(v[4]) - secs(v[1]) - secs(v[2]), secs(v[3]) - secs(v[1]), secs(v[4]) - secs(v[2]), secs(v[1]) + secs(v[2]) }
    }
    # bash times: 1m2.345s
    function secs(x,   m) { m = x; sub(/m.*/, "", m); sub(/^[0-9]+m/, "", x); sub(/s$/, "", x); return m * 60 + x }' "$LOG"
}

pristine
((only_pristine == 0)) || exit 0
setup_copy
echo "run: chroot $ROOTDIR/root: apt-get install make; cd /root/tessera && make demo (log: $LOG)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
set +e
run_in_root | stamp > "$LOG"
rc=${PIPESTATUS[0]}
set -e
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
tail -5 "$LOG" | cut -c1-160
echo "make demo on a fresh Debian 12 (minbase), part by part:"
parts
exit "$rc"
